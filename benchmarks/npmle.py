"""NPMLE solvers: time to a 1e-6 relative log-likelihood gap, mix-SQP and SQUAREM against EM.

For each N (three-atom measure, sigma = 1, 1-D, the default grid of 300 points, float64) the
reference optimum log p* is a mix-SQP run to tol = 1e-10 (its KKT gap certifies it within
N * kkt_gap of the true optimum, far inside the target). Each solver then runs from its
usual start until log p(x) >= log p* - 1e-6 |log p*| (``target_log_likelihood``), timed
after compilation; compilation is timed separately (first call minus a second identical
call, both with max_iters = 0). Every timed run includes forming the N x G likelihood matrix
(the same for all solvers). EM and SQUAREM are capped at a time budget (iterations = budget
/ measured time per iteration); a solver that does not reach the target within it is
reported as such. All solvers run in one process, one after another, so the ratios are
meaningful on a shared machine even when the absolute times are not.

    python benchmarks/npmle.py [--sizes 1000 10000 100000] [--budget 180] [--gap 1e-6]
"""

from __future__ import annotations

import argparse
import time

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

from attnbayes.inference.deconvolution.kiefer_wolfowitz import npmle  # noqa: E402
from attnbayes.models.deconvolution import simulate  # noqa: E402

SIGMA = 1.0
METHODS = ("mixsqp", "squarem", "em")


def timed(fn):
    start = time.perf_counter()
    out = fn()
    jax.block_until_ready(out.weights)
    return out, time.perf_counter() - start


def compile_seconds(x, method):
    """First call minus a second identical call (both evaluate the start only)."""
    _, first = timed(lambda: npmle(x, SIGMA, method=method, max_iters=0))
    _, second = timed(lambda: npmle(x, SIGMA, method=method, max_iters=0))
    return first - second, second


def run_solver(x, method, target, budget, setup_s):
    """(result, seconds, reached) for one solver on one data set, after compilation."""
    if method == "mixsqp":
        cap = 1_000
    else:  # time per iteration from probes of 10, 20, 40, ... iterations (until one takes 2 s)
        probe_iters = 10
        while True:
            probe, probe_s = timed(
                lambda k=probe_iters: npmle(x, SIGMA, method=method, tol=1e-14, max_iters=k)
            )
            if probe_s - setup_s >= 2.0 or probe.num_iters < probe_iters:
                break
            probe_iters *= 2
        per_iter = max(probe_s - setup_s, 1e-9) / max(probe.num_iters, 1)
        cap = max(probe_iters, int(budget / per_iter))
    result, seconds = timed(
        lambda: npmle(
            x, SIGMA, method=method, tol=1e-14, max_iters=cap, target_log_likelihood=target
        )
    )
    return result, seconds, result.log_likelihood >= target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--budget", type=float, default=180.0, help="seconds for EM, SQUAREM")
    parser.add_argument("--gap", type=float, default=1e-6, help="relative log-likelihood gap")
    args = parser.parse_args()
    rows = []
    for n in args.sizes:
        _, x = simulate(jax.random.PRNGKey(n), "three-atoms", SIGMA, n)
        x = np.asarray(x)
        compiled = {method: compile_seconds(x, method) for method in METHODS}
        ref = npmle(x, SIGMA, tol=1e-10)
        best = ref.log_likelihood
        target = best - args.gap * abs(best)
        print(
            f"N = {n}: log p* = {best:.6f} (mix-SQP, {ref.num_iters} iterations, "
            f"KKT gap {ref.kkt_gap:.1e}); target {target:.6f}",
            flush=True,
        )
        times = {}
        for method in METHODS:
            compile_s, setup_s = compiled[method]
            res, seconds, reached = run_solver(x, method, target, args.budget, setup_s)
            rel = (best - res.log_likelihood) / abs(best)
            times[method] = (seconds, reached)
            print(
                f"  {method:8s} compile {compile_s:6.2f} s, {res.num_iters:7d} iterations, "
                f"{seconds:8.2f} s, relative gap {rel:.2e}, reached {reached}",
                flush=True,
            )
            rows.append((n, method, compile_s, res.num_iters, seconds, reached, rel))
        em_s, em_reached = times["em"]
        for i, row in enumerate(rows):
            if row[0] == n:
                seconds, reached = times[row[1]]
                if not reached:
                    ratio = "n/a"
                elif em_reached:
                    ratio = f"{em_s / seconds:.0f}x"
                else:
                    ratio = f"> {em_s / seconds:.0f}x"
                rows[i] = (*row, ratio)
    print()
    print(f"| N | solver | compile s | iterations | time to a {args.gap:g} gap | EM time / this |")
    print("|---|---|---|---|---|---|")
    for n, method, compile_s, iters, seconds, reached, rel, ratio in rows:
        took = (
            f"{seconds:.2f} s"
            if reached
            else f"not reached in {seconds:.0f} s (gap {rel:.1e} after {iters} iterations)"
        )
        print(f"| {n:,} | {method} | {compile_s:.2f} | {iters:,} | {took} | {ratio} |")


if __name__ == "__main__":
    main()
