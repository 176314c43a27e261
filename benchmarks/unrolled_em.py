"""The learned (unrolled-EM) attention stack: training time, regret, length generalisation,
coverage, real data, and inference time per data set against the NPMLE and NUTS.

1. Training time: ``train_unrolled_em`` for ``--train-steps`` steps from EM's parameters (6
   layers, batches of 16 tasks of N <= 200, float64), first chunk (compilation) and per step.
2. Regret against the oracle Bayes rule on every family of ``HELDOUT_FAMILIES`` (``--tasks``
   tasks of N = ``--points``), for the shipped stack, tied EM (same depth and converged), the
   NPMLE, James-Stein and NUTS under the training DP prior (``--nuts-tasks`` tasks per family,
   2 chains x (300 warmup + 300 draws)); coverage of the 50% / 90% intervals.
3. Length generalisation: trained at N <= 200, tested at N = 50 .. 10,000 (streamed from 2,000).
4. The Efron-Morris batting averages.
5. Seconds per data set (warm) of the stack, the NPMLE and NUTS at N = 100.

    python benchmarks/unrolled_em.py [--tasks 64] [--points 100] [--nuts-tasks 4]
        [--train-steps 300] [--sizes 50 200 1000 10000]
"""

from __future__ import annotations

import argparse
import time

import jax

jax.config.update("jax_enable_x64", True)

import pandas as pd  # noqa: E402

from attnbayes.inference.deconvolution.learned import (  # noqa: E402
    comparison as learned_comparison,
)
from attnbayes.inference.deconvolution.learned import (  # noqa: E402
    pretrained_unrolled_em,
    training,
)

pd.set_option("display.width", 200)
pd.set_option("display.max_columns", 30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--points", type=int, default=100)
    parser.add_argument("--nuts-tasks", type=int, default=4)
    parser.add_argument("--train-steps", type=int, default=300)
    parser.add_argument("--sizes", type=int, nargs="+", default=[50, 200, 1000, 10_000])
    args = parser.parse_args()
    nuts = dict(num_warmup=300, num_samples=300, num_chains=2)

    print("== 1. training time")
    stamps = []
    start = time.perf_counter()
    training.train_unrolled_em(
        jax.random.PRNGKey(0),
        num_layers=6,
        num_steps=args.train_steps,
        batch_size=16,
        learning_rate=1e-2,
        callback=lambda p: stamps.append((p.step, time.perf_counter() - start)),
    )
    first = stamps[0][1]
    rest = (stamps[-1][1] - first) / max(stamps[-1][0] - stamps[0][0], 1)
    print(f"first chunk of 100 steps (compiling included): {first:.1f} s")
    print(f"then {1e3 * rest:.1f} ms per step; {args.train_steps} steps in {stamps[-1][1]:.1f} s")

    params = pretrained_unrolled_em()
    print("\n== 2. regret against the oracle Bayes rule, N =", args.points)
    start = time.perf_counter()
    result = learned_comparison.compare_learned_attention(
        jax.random.PRNGKey(1),
        params,
        num_tasks=args.tasks,
        num_points=args.points,
        nuts_tasks=args.nuts_tasks,
        nuts_kwargs=nuts,
    )
    print(result.regret.round(4).to_string())
    print("\ncoverage")
    print(result.coverage.round(3).to_string())
    print(f"({time.perf_counter() - start:.0f} s)")

    print("\n== 3. length generalisation (family dp)")
    for family in ("dp", "normal"):
        table = learned_comparison.length_generalisation(
            jax.random.PRNGKey(2), params, family=family, sizes=tuple(args.sizes), num_tasks=4
        )
        print(table.round(4).to_string())

    print("\n== 4. Efron-Morris batting averages (arcsine scale, sigma = 1)")
    batting = learned_comparison.batting_averages_comparison(
        jax.random.PRNGKey(3), params, nuts_kwargs=nuts
    )
    print(batting[["method", "sse_transformed", "sse_average"]].round(4).to_string())

    print("\n== 5. seconds per data set, warm (shapes compiled in 2), N =", args.points)
    warm = learned_comparison.compare_learned_attention(
        jax.random.PRNGKey(4),
        params,
        families=("dp",),
        num_tasks=args.tasks,
        num_points=args.points,
        methods=("learned", "npmle", "nuts-dp"),
        nuts_tasks=2,
        nuts_kwargs=nuts,
    )
    print(warm.regret[["method", "seconds_per_task"]].to_string())


if __name__ == "__main__":
    main()
