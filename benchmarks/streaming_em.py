"""Streamed attention-EM: time per iteration and peak memory for N = K = 20k, 60k, 100k in 2-D.

One EM step with K = N atoms at the data (seed 1's estimator) on 2-D ring data, float64:

    numpy     a dense step (N x N scores, max-shifted softmax over atoms, weighted means), in
              place on one N x N float64 array; only where it fits (N = 20k: 3.2 GB);
    stream-1  ``em_step(..., block_size=B, mesh=one)`` on a one-device mesh
              (``attnbayes.sharding.batch_mesh(jax.devices()[:1])``): tiles of rows against
              all atoms, one exponential per pair, O(B^2) memory;
    stream-2  the same with the data rows sharded over 2 host devices (the default mesh,
              ``mesh=None``: every device).

Each case runs in a fresh process started by an intermediate process that reads
``getrusage(RUSAGE_CHILDREN).ru_maxrss`` (the case's own peak resident set); a baseline process
that only imports JAX and builds the data is subtracted. Times: the first call (with XLA
compilation) and a second call. The streamed and NumPy atoms are compared at 20k.

    python benchmarks/streaming_em.py [--sizes 20000 60000 100000] [--block-size 1024]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SIGMA = 0.5
NUMPY_MAX_N = 20_000


def numpy_em_step(x, atoms, sigma: float):
    """Dense reference step, in place on one N x K array: A = softmax_k(-|x_i - mu_k|^2 /
    (2 sigma^2)), mu_k = A^T x / A^T 1 (peak: one N x K float64 array and row vectors)."""
    import numpy as np

    scores = x @ atoms.T
    scores *= 2.0
    scores -= np.sum(x**2, axis=1)[:, None]
    scores -= np.sum(atoms**2, axis=1)[None, :]
    scores *= 0.5 / sigma**2
    scores -= scores.max(axis=1, keepdims=True)
    resp = np.exp(scores, out=scores)
    resp /= resp.sum(axis=1, keepdims=True)
    return (resp.T @ x) / resp.sum(axis=0)[:, None]


def child(mode: str, n: int, block_size: int, out_path: str) -> None:
    import jax

    jax.config.update("jax_enable_x64", True)
    import numpy as np

    sys.path.insert(0, ROOT)
    from attnbayes import sharding
    from attnbayes.inference.deconvolution.em import em_step
    from attnbayes.models.deconvolution import simulate

    _, x = simulate(jax.random.PRNGKey(0), "ring", SIGMA, n)
    x = np.asarray(x)
    w = np.full(n, 1.0 / n)
    times = []
    atoms = None
    for _ in range(2 if n <= 20_000 else 1):
        start = time.perf_counter()
        if mode == "numpy":
            atoms = numpy_em_step(x, x, SIGMA)
        elif mode.startswith("stream"):
            devices = int(mode.split("-")[1])
            mesh = sharding.batch_mesh(jax.devices()[:devices])
            atoms = jax.block_until_ready(
                em_step(x, x, w, SIGMA, block_size=block_size, mesh=mesh)[0]
            )
        else:
            break
        times.append(time.perf_counter() - start)
    if atoms is not None:
        np.save(out_path, np.asarray(atoms))
    print(json.dumps({"times": times}))


def measure(mode: str, n: int, block_size: int, out_path: str) -> None:
    cmd = [sys.executable, __file__, "--child", mode, str(n), str(block_size), out_path]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        print(json.dumps({"error": proc.stderr[-2000:], "returncode": proc.returncode}))
        return
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["peak_kb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(json.dumps(result))


def run_case(mode: str, n: int, block_size: int, out_path: str) -> dict:
    cmd = [sys.executable, __file__, "--measure", mode, str(n), str(block_size), out_path]
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2")
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[20_000, 60_000, 100_000])
    parser.add_argument("--block-size", type=int, default=1024)
    parser.add_argument("--child", nargs=4, metavar=("MODE", "N", "B", "OUT"))
    parser.add_argument("--measure", nargs=4, metavar=("MODE", "N", "B", "OUT"))
    args = parser.parse_args()
    if args.child:
        mode, n, b, out = args.child
        return child(mode, int(n), int(b), out)
    if args.measure:
        mode, n, b, out = args.measure
        return measure(mode, int(n), int(b), out)

    import numpy as np

    b = args.block_size
    print(
        f"one EM step, K = N atoms at the data, 2-D ring, sigma = {SIGMA}, float64, "
        f"block_size = {b}, {os.cpu_count()} cores; MB above a baseline process"
    )
    head = ("N", "case", "net MB", "1st call s", "2nd call s", "vs numpy")
    print(" ".join(f"{h:>{w}}" for h, w in zip(head, (8, 9, 8, 11, 11, 9), strict=True)))
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.sizes:
            base = run_case("baseline", n, b, os.path.join(tmp, "base.npy"))
            base_mb = base["peak_kb"] / 1024
            modes = (["numpy"] if n <= NUMPY_MAX_N else []) + ["stream-1", "stream-2"]
            results, paths = {}, {}
            for mode in modes:
                paths[mode] = os.path.join(tmp, f"{mode}-{n}.npy")
                res = run_case(mode, n, b, paths[mode])
                if "error" in res:
                    print(f"{n:8d} {mode:>9} failed ({res['returncode']}): {res['error'][-300:]}")
                    continue
                results[mode] = res
                last = res["times"][-1]
                ratio = ""
                if "numpy" in results and mode != "numpy":
                    ratio = f"{results['numpy']['times'][-1] / last:8.1f}x"
                second = f"{res['times'][1]:11.2f}" if len(res["times"]) > 1 else f"{'':>11}"
                net = res["peak_kb"] / 1024 - base_mb
                print(f"{n:8d} {mode:>9} {net:8.0f} {res['times'][0]:11.2f} {second} {ratio:>9}")
            done = [m for m in modes if m in results]
            for m in done[1:]:
                diff = np.max(np.abs(np.load(paths[m]) - np.load(paths[done[0]])))
                print(f"{'':>8} {m} vs {done[0]}: max abs diff of the atoms {diff:.2e}")
            print(f"{'':>8} a dense N x N float64 matrix: {n * n * 8 / 1e9:.1f} GB")


if __name__ == "__main__":
    main()
