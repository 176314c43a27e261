"""The NPMLE at large N, streamed and sharded: mix-SQP with ``block_size``, on 1 and 2 devices.

The three-atom-like measure z ~ 0.75 delta(0) + 0.25 delta(2.5) blurred by N(0, 0.3^2),
x = z + N(0, 1) (sigma = 1), 1-D, the default grid of G = 300 points, float64, mix-SQP to its
default tol = 1e-6. For each N the streamed fit (``npmle(..., block_size=B, mesh=...)``: the
N x G likelihood matrix never formed, its entries recomputed over blocks of B rows, the rows
sharded over the mesh) runs on 1 and on 2 host devices, and, where the N x G matrix fits in
memory (N <= --dense-max), the dense fit (``block_size=None``) as well. Each case runs in its
own subprocess (XLA_FLAGS=--xla_force_host_platform_device_count=D, set here for the child
only), so its peak RSS is its own: a warm-up call with max_iters = 1 compiles (and its time is
reported as "first call"), then the timed call runs to convergence. All cases run one after
another in one invocation, so the ratios (2 devices / 1 device, streamed / dense) are measured
on the same machine state; absolute times on a shared machine are not. A reference line
(``reference``: N x G exponentials over blocks of rows, summed, sharded over 1 and 2 devices,
no solver) shows what parallelism the machine offered during the run.

Per mix-SQP iteration the streamed path computes about N (G + 3 S + 1) exponentials (the KKT
vector over the whole grid; the working set's Gram matrix, line-search ratios and L w over
S = 64 columns; the vertex step's column) and psum-reduces O(G + S^2) numbers per device
(``kiefer_wolfowitz`` module docstring).

    python benchmarks/npmle_streamed.py [--sizes 100000 1000000] [--block-size 1024]
        [--dense-max 100000] [--devices 1 2]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

SIGMA = 1.0
G = 300


def data(n: int):
    import numpy as np

    rng = np.random.default_rng(1)
    z = rng.choice([0.0, 0.0, 0.0, 2.5], size=n) + 0.3 * rng.normal(size=n)
    return z + rng.normal(size=n)


def child(n: int, devices: int, block_size: int | None) -> dict:
    """One case, in this process (started by ``main`` with ``devices`` host devices)."""
    import jax

    jax.config.update("jax_enable_x64", True)
    from attnbayes import sharding
    from attnbayes.inference.deconvolution.kiefer_wolfowitz import npmle

    x = data(n)
    mesh = None if block_size is None else sharding.batch_mesh(jax.devices()[:devices])
    kwargs = {"grid_size": G, "block_size": block_size, "mesh": mesh}
    start = time.perf_counter()
    jax.block_until_ready(npmle(x, SIGMA, max_iters=1, **kwargs).weights)
    first = time.perf_counter() - start
    cpu0 = time.process_time()
    start = time.perf_counter()
    fit = npmle(x, SIGMA, **kwargs)
    jax.block_until_ready(fit.weights)
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB (Linux)
    return {
        "n": n,
        "devices": devices,
        "block_size": block_size,
        "first": first,
        "wall": wall,
        "cpu_per_wall": cpu / wall,
        "iters": int(fit.num_iters),
        "kkt_gap": float(fit.kkt_gap),
        "converged": bool(fit.converged),
        "log_likelihood": float(fit.log_likelihood),
        "weights": [float(v) for v in fit.weights],
        "peak_mib": peak,
    }


def reference(n: int, devices: int, block_size: int) -> dict:
    """What the machine offers now: N x G exponentials over blocks of rows sharded over
    ``devices`` host devices, summed (one pass of the streamed KKT vector's work, no solver);
    its 2-device / 1-device ratio, measured alongside, bounds the NPMLE's."""
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    from attnbayes import sharding

    mesh = sharding.batch_mesh(jax.devices()[:devices])
    x = data(n)[: n // (devices * block_size) * devices * block_size]
    grid = jnp.linspace(x.min(), x.max(), G)

    def fn(x):
        def block(rows):
            return jnp.sum(jnp.exp(-0.5 * (rows[:, None] - grid[None, :]) ** 2), axis=0)

        total = jnp.sum(jax.lax.map(block, x.reshape(-1, block_size)), axis=0)
        return sharding.batch_sum(total, mesh)

    run = jax.jit(sharding.shard_batch(fn, mesh, (True,), False))
    run(x).block_until_ready()
    cpu0, start = time.process_time(), time.perf_counter()
    for _ in range(3):
        run(x).block_until_ready()
    wall = (time.perf_counter() - start) / 3
    return {"wall": wall, "cpu_per_wall": (time.process_time() - cpu0) / (3 * wall)}


def run_case(n: int, devices: int, block_size: int | None, what: str = "npmle") -> dict:
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    spec = json.dumps([what, n, devices, block_size])
    out = subprocess.run(
        [sys.executable, "-P", __file__, "--child", spec],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--block-size", type=int, default=1024)
    parser.add_argument("--dense-max", type=int, default=100_000)
    parser.add_argument("--devices", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        what, *rest = json.loads(args.child)
        print(json.dumps((child if what == "npmle" else reference)(*rest)))
        return
    import numpy as np

    print(
        f"G = {G}, sigma = {SIGMA}, mix-SQP, float64, block_size = {args.block_size}, "
        f"cores: {os.cpu_count()}"
    )
    print()
    print(
        "| N | path | devices | first call (s) | wall (s) | iterations | ms / iteration "
        "| kkt_gap | peak RSS (MiB) | cpu / wall | vs 1 device | max diff of w | diff of log p |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    refs = [run_case(max(args.sizes), d, args.block_size, "reference") for d in args.devices]
    for n in args.sizes:
        cases = [("streamed", d, args.block_size) for d in args.devices]
        if n <= args.dense_max:
            cases.insert(0, ("dense", 1, None))
        results = []
        for path, devices, block in cases:
            r = run_case(n, devices, block)
            results.append(r)
            base = next((b for b in results if b["block_size"] is not None), None)
            ratio = "-" if base is None or block is None else f"{r['wall'] / base['wall']:.2f}"
            diff = np.max(np.abs(np.asarray(r["weights"]) - np.asarray(results[0]["weights"])))
            ll_diff = abs(r["log_likelihood"] - results[0]["log_likelihood"])
            print(
                f"| {n:,} | {path} | {devices} | {r['first']:.1f} | {r['wall']:.1f} | "
                f"{r['iters']} | {1e3 * r['wall'] / max(r['iters'], 1):.0f} | "
                f"{r['kkt_gap']:.1e} | {r['peak_mib']:.0f} | {r['cpu_per_wall']:.2f} | "
                f"{ratio} | {diff:.1e} | {ll_diff:.1e} |",
                flush=True,
            )
    print()
    print(
        f"Reference (the machine now): {max(args.sizes):,} x {G} exponentials over blocks of "
        f"rows, summed, sharded over D host devices: "
        + ", ".join(
            f"D = {d}: {r['wall']:.2f} s (cpu / wall {r['cpu_per_wall']:.2f}, "
            f"vs 1 device {r['wall'] / refs[0]['wall']:.2f})"
            for d, r in zip(args.devices, refs, strict=True)
        )
    )


if __name__ == "__main__":
    main()
