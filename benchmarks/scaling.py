"""Scaling of the batch workloads over devices and processes, in one run.

Each workload runs in fresh processes under each configuration:

    1p x 1d   one process, one host device      (the baseline)
    1p x 2d   one process, two host devices     (a mesh over both cores)
    2p x 1d   two processes on 127.0.0.1 (``jax.distributed``, gloo collectives), one device each
    1p x 4d, 1p x 8d   more host devices than cores: correctness only (oversubscribed timings)

and prints, per workload and configuration, the first call (compiling included), the warm call
(the median of ``--repeats``), the speed-up of the warm call over 1p x 1d, and the largest
relative difference of the results from 1p x 1d (deterministic workloads: the same numbers to
round-off; NUTS calibration: the fraction of ranks that differ). The workloads (``--only``):

    estep     one streamed EM step (``em_step(x, atoms, w, sigma, block_size=B, mesh=...)``),
              N = 10^6 rows in 2-D against K = 2,000 atoms (2 x 10^9 row-atom pairs);
    npmle     the streamed Kiefer-Wolfowitz NPMLE (``npmle(x, sigma, block_size=B, mesh=...)``),
              N = 10^6, G = 300 grid points, 1-D, mix-SQP to its certificate;
    sbc       NUTS calibration (``calibrate(key, "deconvolution", "nuts", ...)``): 1,000
              replicates of the K = 2, N = 50 deconvolution study (``--sbc-replicates``);
    filters   10^5 series filtered by IMM (``filter_batch``), T = 100, the two-mode
              manoeuvring target (4-D state, 2-D observations).

Every process computes with the default mesh (every device of every process), so the same
script measures devices and processes. The machine is shared: compare the ratios of one run.

    python benchmarks/scaling.py [--only estep,npmle,sbc,filters] [--quick] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time

CONFIGS = {  # name: (processes, devices per process, timed)
    "1p x 1d": (1, 1, True),
    "1p x 2d": (1, 2, True),
    "2p x 1d": (2, 1, True),
    "1p x 4d": (1, 4, False),
    "1p x 8d": (1, 8, False),
}
SIZES = {
    "full": {"estep_n": 10**6, "estep_k": 2000, "npmle_n": 10**6, "sbc": 1000, "series": 10**5},
    "quick": {"estep_n": 10**4, "estep_k": 200, "npmle_n": 10**4, "sbc": 16, "series": 10**3},
}
WORKLOADS = ("estep", "npmle", "sbc", "filters")
FILTER_CHUNK = 20_000


# ----------------------------------------------------------------------------- the workloads
# Each returns (a function computing the result as a dict of NumPy arrays, how to compare).


def _estep(sizes):
    import jax
    import numpy as np

    from attnbayes import sharding
    from attnbayes.inference.deconvolution.em import em_step

    rng = np.random.default_rng(0)
    n, k = sizes["estep_n"], sizes["estep_k"]
    x = rng.normal(size=(n, 2)) + 3.0 * rng.integers(0, 3, size=(n, 1))
    atoms = x[rng.choice(n, k, replace=False)]
    w = np.full(k, 1.0 / k)

    def run():
        atoms1, w1 = em_step(x, atoms, w, 1.0, block_size=1024)
        return {"atoms": sharding.gather(atoms1), "weights": sharding.gather(w1)}

    return run, jax


def _npmle(sizes):
    import jax
    import numpy as np

    from attnbayes.inference.deconvolution.kiefer_wolfowitz import npmle

    rng = np.random.default_rng(1)
    n = sizes["npmle_n"]
    z = rng.choice([0.0, 0.0, 0.0, 2.5], size=n) + 0.3 * rng.normal(size=n)
    x = z + rng.normal(size=n)

    def run():
        fit = npmle(x, 1.0, grid_size=300, block_size=4096)
        return {
            "weights": np.asarray(fit.weights),
            "log_likelihood": np.asarray(fit.log_likelihood),
            "kkt_gap": np.asarray(fit.kkt_gap),
            "num_iters": np.asarray(fit.num_iters),
        }

    return run, jax


def _sbc(sizes):
    import jax
    import numpy as np

    from attnbayes.inference import calibration as cal

    def run():
        tree = cal.calibrate(
            jax.random.PRNGKey(7), "deconvolution", "nuts", num_replicates=sizes["sbc"]
        )
        ranks = tree["ranks"].to_dataset()
        return {f"rank:{name}": np.asarray(ranks[name].values) for name in sorted(ranks.data_vars)}

    return run, jax


def _filters(sizes):
    import jax
    import numpy as np

    from attnbayes import sharding
    from attnbayes.inference.switching import filter_batch
    from attnbayes.models.switching import get_scenario, simulate_unchecked

    params = get_scenario("maneuvering-target")
    keys = jax.random.split(jax.random.PRNGKey(3), sizes["series"])
    inputs = np.zeros((100, 0))
    obs = np.asarray(jax.vmap(lambda k: simulate_unchecked(k, params, inputs)[2])(keys))
    # chunks of 20,000 series: the whole FilterResult of 10^5 series (covariances per mode and
    # step) would take about 5 GB
    chunk = min(FILTER_CHUNK, len(obs))

    def run():
        out = [
            sharding.gather(filter_batch(params, obs[i : i + chunk]).log_likelihood)
            for i in range(0, len(obs), chunk)
        ]
        return {"log_likelihood": np.concatenate(out)}

    return run, jax


BUILD = {"estep": _estep, "npmle": _npmle, "sbc": _sbc, "filters": _filters}


# ----------------------------------------------------------------------------- one process


def worker(args) -> None:
    """Run one workload in this process (one rank of a configuration) and print its result."""
    import jax

    jax.config.update("jax_enable_x64", True)
    if args.num_processes > 1:
        jax.distributed.initialize(
            f"127.0.0.1:{args.port}",
            num_processes=args.num_processes,
            process_id=args.rank,
            initialization_timeout=60,
        )
    import numpy as np

    sizes = SIZES["quick" if args.quick else "full"]
    run, _ = BUILD[args.worker](sizes)
    t0 = time.perf_counter()
    result = run()
    first = time.perf_counter() - t0
    warm = []
    for _ in range(args.repeats if args.timed else 0):
        t0 = time.perf_counter()
        result = run()
        warm.append(time.perf_counter() - t0)
    if jax.process_index() == 0:
        out = {
            "first": first,
            # --repeats 0: the first call (compiling included) stands for the warm one
            "warm": float(np.median(warm)) if warm else (first if args.timed else None),
            "devices": len(jax.devices()),
            "result": {k: np.asarray(v).tolist() for k, v in result.items()},
        }
        print("RESULT " + json.dumps(out), flush=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(workload: str, config: str, args) -> dict:
    processes, devices, timed = CONFIGS[config]
    flags = [
        f
        for f in os.environ.get("XLA_FLAGS", "").split()
        if not f.startswith("--xla_force_host_platform_device_count")
    ]
    env = dict(
        os.environ,
        XLA_FLAGS=" ".join([*flags, f"--xla_force_host_platform_device_count={devices}"]),
    )
    port = _free_port()
    cmd = [sys.executable, "-P", __file__, "--worker", workload, "--port", str(port)]
    cmd += ["--num-processes", str(processes), "--repeats", str(args.repeats)]
    cmd += ["--quick"] * args.quick + ["--timed"] * timed
    procs = [
        subprocess.Popen(
            [*cmd, "--rank", str(r)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for r in range(processes)
    ]
    try:
        outs = [p.communicate(timeout=args.timeout) for p in procs]
    finally:
        for p in procs:
            p.kill()
    for p, (_, err) in zip(procs, outs, strict=True):
        if p.returncode != 0:
            raise RuntimeError(f"{workload} {config}: exit {p.returncode}\n{err.decode()[-3000:]}")
    line = next(ln for ln in outs[0][0].decode().splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def _difference(a: dict, b: dict) -> float:
    import numpy as np

    worst = 0.0
    for name in a:
        x, y = np.asarray(a[name], float), np.asarray(b[name], float)
        if name.startswith("rank:"):  # ranks: the fraction of them that differ
            worst = max(worst, float(np.mean(x != y)))
            continue
        scale = np.maximum(np.abs(x), 1e-300)
        worst = max(worst, float(np.max(np.abs(x - y) / scale, initial=0.0)))
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(WORKLOADS))
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument("--worker", choices=WORKLOADS, help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--num-processes", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--timed", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    sizes = SIZES["quick" if args.quick else "full"]
    print(f"sizes: {sizes}; cores: {len(os.sched_getaffinity(0))}")
    print("| workload | configuration | first call (s) | warm (s) | speed-up | max rel. diff |")
    print("|---|---|---:|---:|---:|---:|")
    for workload in args.only.split(","):
        base = None
        for config in args.configs.split(","):
            out = launch(workload, config, args)
            if base is None:
                base = out
            warm = out["warm"]
            speed = base["warm"] / warm if warm and base["warm"] else None
            diff = _difference(base["result"], out["result"])
            cells = [
                workload,
                config,
                f"{out['first']:.2f}",
                "-" if warm is None else f"{warm:.2f}",
                "-" if speed is None else f"{speed:.2f}x",
                f"{diff:.1e}",
            ]
            print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
