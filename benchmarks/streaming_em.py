"""One streamed attention-EM iteration at N = K = 60,000 in 2-D: peak memory and time.

A dense N x N float64 responsibility matrix would take 28.8 GB. ``em_step(..., block_size=B)``
makes two passes over blocks (row log-sum-exp, then column sums) and holds O(B^2). The peak
resident set of this process is read from ``resource.getrusage`` after the step, and printed
beside the peak of the same process before the step (imports and data only).

    python benchmarks/streaming_em.py [--num-points 60000] [--block-size 1024]
"""

from __future__ import annotations

import argparse
import resource
import time

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

from inference.em import em_step  # noqa: E402
from models.deconvolution import simulate  # noqa: E402


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-points", type=int, default=60_000)
    parser.add_argument("--block-size", type=int, default=1024)
    args = parser.parse_args()
    n = args.num_points
    _, x = simulate(jax.random.PRNGKey(0), "ring", 0.5, n)
    x = np.asarray(x)
    w = np.full(n, 1.0 / n)
    before = peak_mb()
    start = time.perf_counter()
    atoms, _ = em_step(x, x, w, 0.5, block_size=args.block_size)
    jax.block_until_ready(atoms)
    first = time.perf_counter() - start
    start = time.perf_counter()
    jax.block_until_ready(em_step(x, x, w, 0.5, block_size=args.block_size)[0])
    second = time.perf_counter() - start
    dense_gb = n * n * 8 / 1e9
    print(f"N = K = {n:,} (2-D ring, float64), block_size = {args.block_size}")
    print(f"  peak RSS before the step {before:8.0f} MB, after {peak_mb():8.0f} MB")
    print(f"  first call (with compile) {first:6.1f} s, second call {second:6.1f} s")
    print(f"  a dense N x N float64 responsibility matrix would take {dense_gb:.1f} GB")
    print(f"  atoms finite: {bool(np.all(np.isfinite(np.asarray(atoms))))}")


if __name__ == "__main__":
    main()
