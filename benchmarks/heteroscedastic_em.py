"""The cost of per-unit noise in the EM step: one sigma against one per point and per coordinate.

One EM step with K = N atoms at the data (the note's estimator), float64, on data with s_i
log-uniform on [0.5, 3]: ``em_step(x, atoms, weights, sigma, update_weights=True)`` with sigma
a number (the homoscedastic kernels), an (N,) array (a temperature per query, precision-weighted
M-step) and, in 2-D, an (N, 2) array (per coordinate). Dense at N = 4,000, streamed
(``block_size=1024``, on a one-device mesh) at N = 20,000. Warm times (the median of three
calls after one compiling call), in one process, reported as ns per row-atom pair and as
ratios to the homoscedastic step measured in the same run.

    python benchmarks/heteroscedastic_em.py [--dense-n 4000] [--streamed-n 20000]
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

from attnbayes import sharding  # noqa: E402
from attnbayes.inference.deconvolution import em  # noqa: E402


def _time(call, repeats: int = 3) -> float:
    jax.block_until_ready(call())
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(call())
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dense-n", type=int, default=4000)
    parser.add_argument("--streamed-n", type=int, default=20000)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    one_device = sharding.batch_mesh(jax.devices()[:1])
    print("| path | p | N = K | sigma | ns per pair | ratio to one sigma |")
    print("|---|---|---|---|---|---|")
    for path, n, stream in (
        ("dense", args.dense_n, {}),
        ("streamed", args.streamed_n, {"block_size": 1024, "mesh": one_device}),
    ):
        for p in (1, 2):
            x = rng.normal(size=(n, p)) * 2.0
            s = np.exp(rng.uniform(np.log(0.5), np.log(3.0), size=n))
            forms = {"one": 1.0, "(N,)": s}
            if p == 2:
                forms["(N, p)"] = np.exp(rng.uniform(np.log(0.5), np.log(3.0), size=(n, p)))
            w = np.full(n, 1.0 / n)
            base = None
            for label, sigma in forms.items():
                seconds = _time(
                    lambda x=x, w=w, sigma=sigma, stream=stream: em.em_step(
                        x, x, w, sigma, update_weights=True, **stream
                    )
                )
                base = seconds if base is None else base
                print(
                    f"| {path} | {p} | {n} | {label} | {seconds / n / n * 1e9:.2f} | "
                    f"{seconds / base:.2f} |"
                )


if __name__ == "__main__":
    main()
