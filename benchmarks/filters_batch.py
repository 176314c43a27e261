"""Batched switching filters over devices (issue 39): ``filter_batch`` on 10^5 series, on meshes
of 1 and 2 host devices in one process.

The model: a regime-switching local linear trend, the workhorse of demand and sensor
monitoring (e.g. the daily sales of 10^5 products, or 10^5 meters, each a series of T = 100
days): state x_t = (level, slope), x_t = F x_{t-1} + w_t, F = [[1, 1], [0, 1]], observed
y_t = level + v_t, v_t ~ N(0, 0.5^2); two modes, "calm" (Q = diag(0.01, 0.0001)) and
"volatile" (Q = diag(1, 0.01)), Pi = [[0.97, 0.03], [0.10, 0.90]], s_1 ~ (0.8, 0.2), x_1 ~
N((0, 0), diag(1, 0.01)). M = 2, d = 2, o = 1, float64. The series are drawn from the model
(``simulate_unchecked``, vmapped; 1% of the rows missing, NaN) before any timing.

The script gives itself two host devices (``XLA_FLAGS``, before JAX starts) and filters all
series with ``filter_batch(params, y, method=..., mesh=mesh)`` on a mesh of 1 device and on a
mesh of 2, in chunks of ``--chunk`` series (10^5 series at once would hold about 1.6 GB of
results: (chunk, T, M, d, d) covariances and all). Per mesh: the first chunk (compiling
included), then ``--repeats`` timed passes over every series of two kinds, each chunk's result
left on the devices (``block_until_ready``) or gathered to NumPy (every field). The table
gives the median pass, series per second, the process's CPU seconds per wall second (above 1:
XLA's own threads at work, also on one device) and the ratio of the two meshes, measured in
this one run, with the largest difference between the meshes' log-likelihoods (the same
program per series: round-off only). The machine is shared: read the ratio, not the seconds.

    python benchmarks/filters_batch.py [--series 100000] [--steps 100] [--chunk 20000] \
        [--method imm] [--repeats 3] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time

DEVICES = 2


def _setup_jax():
    """Two host devices (set before JAX is imported; a user's other XLA flags kept), float64."""
    if "jax" in sys.modules:
        raise RuntimeError("JAX was imported before the device count was set")
    flags = re.sub(
        r"--xla_force_host_platform_device_count=\S+", "", os.environ.get("XLA_FLAGS", "")
    )
    os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={DEVICES}".strip()
    import jax

    jax.config.update("jax_enable_x64", True)
    return jax


def local_trend_params():
    """The two-mode local linear trend of the module docstring."""
    import numpy as np

    from attnbayes.models.switching import SwitchingParams, check_params

    trend = np.array([[1.0, 1.0], [0.0, 1.0]])
    return check_params(
        "params",
        SwitchingParams(
            initial_probs=np.array([0.8, 0.2]),
            transition_matrix=np.array([[0.97, 0.03], [0.10, 0.90]]),
            initial_means=np.zeros((2, 2)),
            initial_covs=np.tile(np.diag([1.0, 0.01]), (2, 1, 1)),
            dynamics_matrices=np.stack([trend, trend]),
            dynamics_biases=np.zeros((2, 2)),
            dynamics_covs=np.stack([np.diag([0.01, 0.0001]), np.diag([1.0, 0.01])]),
            emission_matrices=np.tile(np.array([[1.0, 0.0]]), (2, 1, 1)),
            emission_covs=np.tile(0.25 * np.eye(1), (2, 1, 1)),
        ),
    )


def draw_series(jax, params, num_series: int, num_steps: int, seed: int):
    """(B, T, 1) observations drawn from the model, 1% of the rows missing."""
    import numpy as np

    from attnbayes.models.switching import simulate_unchecked

    arrays = jax.tree.map(jax.numpy.asarray, params)
    inputs = jax.numpy.zeros((num_steps, 0))
    draw = jax.jit(jax.vmap(lambda k: simulate_unchecked(k, arrays, inputs)[2]))
    keys = jax.random.split(jax.random.PRNGKey(seed), num_series)
    y = np.concatenate(
        [np.asarray(draw(keys[i : i + 10_000])) for i in range(0, num_series, 10_000)]
    )
    missing = np.random.default_rng(seed).random(y.shape[:2]) < 0.01
    y[missing] = np.nan
    return y


def run_mesh(jax, params, y, mesh, method: str, chunk: int, repeats: int) -> dict:
    """First chunk (compile), then ``repeats`` passes over every series of each kind: "device"
    (each chunk's result left on the devices, ``block_until_ready``) and "NumPy" (every field
    of each chunk's result gathered to NumPy arrays). Medians, CPU seconds per wall second,
    and the log-likelihoods."""
    import numpy as np

    from attnbayes import sharding
    from attnbayes.inference.switching.filters import filter_batch

    def one_pass(to_numpy: bool):
        lls = []
        for start in range(0, len(y), chunk):
            result = filter_batch(params, y[start : start + chunk], method=method, mesh=mesh)
            if to_numpy:
                result = sharding.gather(result)
            else:
                jax.block_until_ready(result)
            lls.append(np.asarray(result.log_likelihood))
        return np.concatenate(lls)

    def timed(to_numpy):
        cpu0, t0 = _cpu_seconds(), time.perf_counter()
        ll = one_pass(to_numpy)
        wall = time.perf_counter() - t0
        return wall, (_cpu_seconds() - cpu0) / wall, ll

    t0 = time.perf_counter()
    jax.block_until_ready(filter_batch(params, y[:chunk], method=method, mesh=mesh))
    first = time.perf_counter() - t0
    runs = {"device": [], "numpy": []}
    ll = None
    for _ in range(repeats):
        for kind in runs:
            wall, load, ll = timed(kind == "numpy")
            runs[kind].append((wall, load))
    out = {"devices": sharding.mesh_size(mesh), "first": first, "log_likelihood": ll}
    for kind, values in runs.items():
        wall = statistics.median(w for w, _ in values)
        out[kind] = {
            "passes": [w for w, _ in values],
            "wall": wall,
            "rate": len(y) / wall,
            "cpu": statistics.median(c for _, c in values),
        }
    return out


def _cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=100_000)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--chunk", type=int, default=20_000)
    parser.add_argument("--method", default="imm", choices=("imm", "gpb1", "gpb2"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.chunk % DEVICES:
        parser.error(f"--chunk: a multiple of {DEVICES} (the series split evenly)")

    jax = _setup_jax()
    import numpy as np

    from attnbayes import sharding

    params = local_trend_params()
    t0 = time.perf_counter()
    y = draw_series(jax, params, args.series, args.steps, args.seed)
    drawn = time.perf_counter() - t0
    print(
        f"jax {jax.__version__}, {jax.device_count()} host devices, {os.cpu_count()} cpu(s), "
        f"float64; {args.series} series x T = {args.steps}, M = 2, d = 2, o = 1 (local linear "
        f"trend, calm/volatile), method {args.method!r}, chunks of {args.chunk}; "
        f"series drawn in {drawn:.1f} s"
    )
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    rows = []
    for count in (1, DEVICES):
        mesh = sharding.batch_mesh(jax.devices()[:count])
        res = run_mesh(jax, params, y, mesh, args.method, args.chunk, args.repeats)
        rows.append(res)
        passes = "; ".join(
            f"{kind} " + ", ".join(f"{t:.1f}" for t in res[kind]["passes"])
            for kind in ("device", "numpy")
        )
        print(f"  {count} device(s): first chunk {res['first']:.1f} s; passes s: {passes}")
    base = rows[0]
    diff = float(np.max(np.abs(rows[1]["log_likelihood"] - base["log_likelihood"])))
    print()
    print(
        "| mesh | first chunk s (compile) | results | median pass s | series per s | "
        "cpu s per wall s | speed-up over 1 device |"
    )
    print("|---|---|---|---|---|---|---|")
    for kind, label in (("device", "left on the devices"), ("numpy", "gathered to NumPy")):
        for r in rows:
            k = r[kind]
            print(
                f"| {r['devices']} device(s) | {r['first']:.1f} | {label} | {k['wall']:.2f} | "
                f"{k['rate']:,.0f} | {k['cpu']:.2f} | {base[kind]['wall'] / k['wall']:.2f} |"
            )
    print()
    print(f"largest |difference| of the log-likelihoods, 2 vs 1 device: {diff:.2e}")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
