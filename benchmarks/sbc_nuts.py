"""NUTS simulation-based calibration (issue 17): 1,000 replicates with ``calibrate`` against
simuk's per-replicate loop on the same model, in one process; and (issue 39, ``--meshes``) the
same study on meshes of 1 and 2 devices in one process, their time ratio and whether their
ranks agree.

The model: ``deconvolution_model(x, sigma=1, num_atoms=2, prior="dirichlet", concentration=1,
atom_loc=0, atom_scale=3)`` with N = 50 points, float64; NUTS with NumPyro's defaults (target
acceptance 0.8, tree depth 10, diagonal mass), 2 chains x (300 warmup + 300 draws) per replicate.
Target: 1,000 replicates in under 600 s on 2 cores.

- ours: ``calibrate(key, "deconvolution", "nuts", num_replicates=R, chunk_size=C)``; the
  replicates run in chunks of C split over the mesh (default: all ``--devices`` host devices)
  with shard_map, one after another on each device (``lax.map``; one compilation).
  "compile + first chunk" is the time to the first progress message (tracing, XLA
  compilation, the first chunk and the choice of thinning); "steady" is the time per replicate
  over the remaining chunks; "total" the whole call (ranks, uniformity tests and the DataTree
  included). "XLA compile" is ``jax.monitoring``'s backend_compile_duration summed over the
  call.
- simuk: ``simuk.SBC(NUTS(partial(deconvolution_model, ...)), num_simulations=S,
  sample_kwargs={num_warmup, num_samples, num_chains, chain_method}, data_dir={"x": x})``, its
  own loop: one ``numpyro.infer.MCMC`` per replicate (``--simuk-chain-method``, default
  "parallel": chains on 2 host devices by ``pmap``; NumPyro falls back to "sequential" with a
  warning when there are fewer devices than chains, and the table says which ran). Timed per
  replicate (MCMC construction, run, ``from_numpyro``) by wrapping the instance's methods; its
  set-up (model trace, prior predictive) and rank computation are timed apart. Projected to
  1,000: set-up + first replicate + 999 x the mean of the others + ranks x 1000 / S.
  simuk ranks the raw ``weights`` and ``atoms`` on chain 0's draws only (its NumPyro path),
  without thinning; its ranks are not compared here, only its time.
- ``--sweep``: ours on ``--sweep-replicates`` (200) replicates with chunk sizes
  ``--sweep-chunks`` (10 24 50 100; padded to a multiple of the devices), one after the other,
  each projected to 1,000 replicates (compile + first chunk + steady x the rest).
- ``--meshes 1 2``: ours on ``--replicates`` replicates once per mesh, over the first 1 and the
  first 2 of the ``--devices`` host devices (``attnbayes.sharding.batch_mesh``), one after the
  other in this process (each compiles its own program); the table gives each run's time, the
  speed-up over the first mesh and whether the ranks are identical (keys per replicate: they
  must be). The simuk comparison is skipped.

    python benchmarks/sbc_nuts.py [--devices 2] [--replicates 1000] [--chunk-size 24] \
        [--simuk-replicates 5] [--simuk-chain-method parallel] [--sweep] \
        [--sweep-replicates 200] [--sweep-chunks 10 24 50 100] [--meshes 1 2] [--seed 0]

``--replicates 0`` or ``--simuk-replicates 0`` skips that part.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import re
import sys
import time
import warnings

NUM_ATOMS = 2
NUM_POINTS = 50
SIGMA = 1.0
CONCENTRATION = 1.0
ATOM_LOC = 0.0
ATOM_SCALE = 3.0
TARGET_REPLICATES = 1000
TARGET_SECONDS = 600.0
SWEEP_CHUNKS = (10, 24, 50, 100)

_compile_seconds: list[float] = []


def _listener(event, duration, **_):
    if event == "/jax/core/compile/backend_compile_duration":
        _compile_seconds.append(duration)


def _compiled() -> float:
    return float(sum(_compile_seconds))


def _setup_jax(devices: int):
    """Force ``devices`` host devices (before JAX is imported), float64, compile listener."""
    if "jax" in sys.modules:
        raise RuntimeError("JAX was imported before the device count was set")
    flags = re.sub(
        r"--xla_force_host_platform_device_count=\S+", "", os.environ.get("XLA_FLAGS", "")
    )
    os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={devices}".strip()
    import jax
    import jax.monitoring

    jax.config.update("jax_enable_x64", True)
    jax.monitoring.register_event_duration_secs_listener(_listener)
    return jax


def _study():
    from attnbayes.inference import calibration as cal

    return cal.DeconvolutionStudy(
        num_atoms=NUM_ATOMS,
        num_points=NUM_POINTS,
        sigma=SIGMA,
        prior="dirichlet",
        concentration=CONCENTRATION,
        atom_loc=ATOM_LOC,
        atom_scale=ATOM_SCALE,
    )


# ----------------------------------------------------------------------------- ours


def run_ours(
    jax, num_replicates: int, chunk_size: int, sizes: dict, seed: int, verbose=True, mesh=None
):
    """``calibrate`` with timings on ``mesh`` (None: every device); returns a dict of numbers
    and the DataTree."""
    import numpy as np

    from attnbayes.inference import calibration as cal

    stamps: list[float] = []
    t0 = time.perf_counter()

    def progress(message: str) -> None:
        now = time.perf_counter()
        stamps.append(now)
        if verbose:
            print(f"    [{now - t0:7.1f} s] {message}", flush=True)

    c0 = _compiled()
    t0 = time.perf_counter()
    tree = cal.calibrate(
        jax.random.PRNGKey(seed),
        "deconvolution",
        "nuts",
        num_replicates=num_replicates,
        study=_study(),
        overrides=dict(sizes),
        chunk_size=chunk_size,
        mesh=mesh,
        progress=progress,
    )
    total = time.perf_counter() - t0
    chunk = int(tree.attrs["chunk_size"])  # padded to a multiple of the devices when run
    first_count = min(chunk, num_replicates)
    first = stamps[0] - t0
    rest = num_replicates - first_count
    steady = (stamps[-1] - stamps[0]) / rest if rest > 0 else math.nan
    if num_replicates >= TARGET_REPLICATES:
        projected = total * TARGET_REPLICATES / num_replicates
    else:
        projected = first + steady * (TARGET_REPLICATES - first_count)
    table = tree["uniformity"].to_dataset().to_dataframe()
    return {
        "replicates": num_replicates,
        "chunk_size": chunk,
        "devices": int(tree.attrs["devices"]),
        "first": first,
        "steady": steady,
        "total": total,
        "compile": _compiled() - c0,
        "projected": projected,
        "min_p": float(np.nanmin(table["p_min"].to_numpy())),
        "table": table,
        "tree": tree,
    }


def report_ours(res: dict) -> None:
    attrs = res["tree"].attrs
    print(
        f"  ours: {res['replicates']} replicates, chunk {res['chunk_size']} on "
        f"{res['devices']} device(s)"
    )
    print(
        f"    compile + first chunk {res['first']:.1f} s (XLA compile {res['compile']:.1f} s), "
        f"steady {res['steady']:.3f} s per replicate, total {res['total']:.1f} s"
    )
    print(
        f"    thin {attrs['thin']} ({attrs['num_ranked_draws']} ranked draws of "
        f"{attrs['num_chains']} x {attrs['num_draws']}), failed {attrs['num_failed']}, "
        f"replicates with divergences {attrs['num_divergent_replicates']} "
        f"({attrs['num_divergent']} divergent transitions)"
    )
    print(f"    verdict: {attrs['verdict']} ({attrs['verdict_reason']})")
    print(f"    smallest Holm-adjusted p-value: {res['min_p']:.4g}")
    cols = ["n", "chi2_p", "ks_p", "chi2_p_adjusted", "ks_p_adjusted", "p_min"]
    cols += ["mean_pit", "tail_fraction"]
    table = res["table"][[c for c in cols if c in res["table"]]]
    print()
    print("| quantity | " + " | ".join(table.columns) + " |")
    print("|---" * (len(table.columns) + 1) + "|")
    for name, row in table.iterrows():
        cells = [f"{int(v)}" if c == "n" else f"{v:.4g}" for c, v in row.items()]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print()


# ----------------------------------------------------------------------------- simuk


def run_simuk(jax, num_simulations: int, sizes: dict, chain_method: str, seed: int) -> dict:
    """simuk's own loop on the same model; per-replicate wall times."""
    import numpy as np
    import simuk
    from numpyro.infer import NUTS

    from attnbayes.inference import calibration as cal
    from attnbayes.models.deconvolution import deconvolution_model

    model = functools.partial(
        deconvolution_model,
        sigma=SIGMA,
        num_atoms=NUM_ATOMS,
        num_points=NUM_POINTS,
        prior="dirichlet",
        concentration=CONCENTRATION,
        atom_loc=ATOM_LOC,
        atom_scale=ATOM_SCALE,
    )
    # any data set of the right shape: simuk traces the model on it to find the observed "x"
    _, data = cal.deconvolution_simulator(_study())(jax.random.PRNGKey(seed + 1))
    x_example = np.asarray(data["x"])

    c0 = _compiled()
    t0 = time.perf_counter()
    sbc = simuk.SBC(
        NUTS(model),
        num_simulations=num_simulations,
        sample_kwargs={**sizes, "chain_method": chain_method, "progress_bar": False},
        seed=seed,
        data_dir={"x": x_example},
    )
    setup = time.perf_counter() - t0

    parts: dict[str, list] = {"fit": [], "prior": [], "ranks": []}

    def timed(name, fn):
        def wrapper(*args, **kwargs):
            s, c = time.perf_counter(), _compiled()
            out = fn(*args, **kwargs)
            parts[name].append((time.perf_counter() - s, _compiled() - c))
            return out

        return wrapper

    sbc._get_posterior_samples_numpyro = timed("fit", sbc._get_posterior_samples_numpyro)
    sbc._get_prior_predictive_samples_numpyro = timed(
        "prior", sbc._get_prior_predictive_samples_numpyro
    )
    sbc.compute_rank_statistics = timed("ranks", sbc.compute_rank_statistics)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sbc.run_simulations()
    total = time.perf_counter() - t0
    fell_back = any("not enough devices" in str(w.message) for w in caught)
    ran = "sequential" if (chain_method == "parallel" and fell_back) else chain_method
    fits = [t for t, _ in parts["fit"]]
    if len(fits) != num_simulations:
        raise RuntimeError(f"simuk finished {len(fits)} of {num_simulations} replicates")
    mean_rest = float(np.mean(fits[1:])) if len(fits) > 1 else fits[0]
    prior = sum(t for t, _ in parts["prior"])
    ranks = sum(t for t, _ in parts["ranks"])
    projected = (
        setup
        + prior
        + fits[0]
        + mean_rest * (TARGET_REPLICATES - 1)
        + ranks * TARGET_REPLICATES / num_simulations
    )
    return {
        "replicates": num_simulations,
        "total": total,
        "setup": setup,
        "prior": prior,
        "ranks": ranks,
        "fits": fits,
        "fit_compile": [c for _, c in parts["fit"]],
        "first": fits[0],
        "mean_rest": mean_rest,
        "per_replicate": float(np.mean(fits)),
        "compile": _compiled() - c0,
        "projected": projected,
        "chain_method": ran,
        "devices": jax.local_device_count(),
    }


def report_simuk(res: dict) -> None:
    print(
        f"  simuk {_version('simuk')}: {res['replicates']} replicates, chain_method "
        f"{res['chain_method']!r} ({res['devices']} host device(s))"
    )
    fits = ", ".join(
        f"{t:.1f} (XLA compile {c:.1f})"
        for t, c in zip(res["fits"], res["fit_compile"], strict=True)
    )
    print(f"    per replicate s: {fits}")
    print(
        f"    set-up {res['setup']:.1f} s, prior predictive {res['prior']:.1f} s, "
        f"ranks {res['ranks']:.1f} s, total {res['total']:.1f} s"
    )
    print()


def _version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


# ----------------------------------------------------------------------------- main


def print_table(ours: dict | None, theirs: dict | None) -> None:
    print(
        "| method | replicates | total s | s per replicate | projected s for "
        f"{TARGET_REPLICATES} | ratio simuk/ours |"
    )
    print("|---|---|---|---|---|---|")
    if ours is not None:
        print(
            f"| ours: calibrate, chunk {ours['chunk_size']}, {ours['devices']} devices | "
            f"{ours['replicates']} | {ours['total']:.1f} | "
            f"{ours['total'] / ours['replicates']:.3f} | {ours['projected']:.0f} | 1 |"
        )
    if theirs is not None:
        ratio = theirs["projected"] / ours["projected"] if ours is not None else math.nan
        print(
            f"| simuk SBC loop, chains {theirs['chain_method']} | {theirs['replicates']} | "
            f"{theirs['total']:.1f} | {theirs['per_replicate']:.3f} | {theirs['projected']:.0f} "
            f"| {ratio:.1f} |"
        )
    print()
    if ours is not None and theirs is not None:
        print(
            f"steady per replicate: simuk (replicates 2..) {theirs['mean_rest']:.3f} s against "
            f"ours {ours['steady']:.3f} s: {theirs['mean_rest'] / ours['steady']:.1f}x"
        )
    if ours is not None:
        done = ours["projected"] < TARGET_SECONDS
        what = "took" if ours["replicates"] == TARGET_REPLICATES else "projected to take"
        print(
            f"ours: {TARGET_REPLICATES} replicates {what} {ours['projected']:.0f} s: "
            f"{'<' if done else '>='} {TARGET_SECONDS:.0f} s, target {'met' if done else 'MISSED'}"
        )
    print()


def sweep(jax, num_replicates: int, chunks: list[int], sizes: dict, seed: int) -> None:
    print(f"## chunk-size sweep: {num_replicates} replicates each")
    print()
    rows = []
    for chunk in chunks:
        res = run_ours(jax, num_replicates, chunk, sizes, seed, verbose=False)
        rows.append(res)
        print(
            f"  chunk {res['chunk_size']}: compile + first chunk {res['first']:.1f} s, steady "
            f"{res['steady']:.3f} s/replicate, total {res['total']:.1f} s, "
            f"verdict {res['tree'].attrs['verdict']}",
            flush=True,
        )
    print()
    print(
        "| chunk | compile + first chunk s | XLA compile s | steady s per replicate | "
        f"total s | projected s for {TARGET_REPLICATES} |"
    )
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['chunk_size']} | {r['first']:.1f} | {r['compile']:.1f} | {r['steady']:.3f} | "
            f"{r['total']:.1f} | {r['projected']:.0f} |"
        )
    best = min(rows, key=lambda r: r["projected"])
    print()
    print(f"fastest projected: chunk {best['chunk_size']}")
    print()


def meshes(jax, counts: list[int], num_replicates: int, chunk: int, sizes: dict, seed: int):
    """Ours on a mesh of each of ``counts`` devices, one after the other: times, speed-up over
    the first, and whether the ranks are the same replicate for replicate."""
    import numpy as np

    from attnbayes import sharding

    print(f"## meshes: {num_replicates} replicates, chunk {chunk}, on meshes of {counts} devices")
    print()
    rows = []
    for count in counts:
        mesh = sharding.batch_mesh(jax.devices()[:count])
        res = run_ours(jax, num_replicates, chunk, sizes, seed, verbose=False, mesh=mesh)
        rows.append(res)
        print(
            f"  {count} device(s): total {res['total']:.1f} s (compile + first chunk "
            f"{res['first']:.1f} s, XLA compile {res['compile']:.1f} s), steady "
            f"{res['steady']:.3f} s/replicate, verdict {res['tree'].attrs['verdict']}",
            flush=True,
        )
    base = rows[0]
    ranks = base["tree"]["ranks"].to_dataset()
    print()
    print(
        "| mesh | replicates | total s | compile + first chunk s | steady s per replicate | "
        "speed-up (total) | speed-up (steady) | ranks as on the first mesh |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        other = r["tree"]["ranks"].to_dataset()
        same = all(
            np.array_equal(other[n].values, ranks[n].values) for n in sorted(ranks.data_vars)
        )
        print(
            f"| {r['devices']} device(s) | {r['replicates']} | {r['total']:.1f} | "
            f"{r['first']:.1f} | {r['steady']:.3f} | {base['total'] / r['total']:.2f} | "
            f"{base['steady'] / r['steady']:.2f} | {'yes' if same else 'NO'} |"
        )
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=2, help="host devices (XLA_FLAGS)")
    parser.add_argument("--replicates", type=int, default=TARGET_REPLICATES)
    parser.add_argument("--chunk-size", type=int, default=24)
    parser.add_argument("--simuk-replicates", type=int, default=5)
    parser.add_argument(
        "--simuk-chain-method", default="parallel", choices=("parallel", "sequential")
    )
    parser.add_argument("--sweep", action="store_true", help="time several chunk sizes")
    parser.add_argument("--sweep-chunks", type=int, nargs="+", default=list(SWEEP_CHUNKS))
    parser.add_argument("--sweep-replicates", type=int, default=200)
    parser.add_argument("--num-warmup", type=int, default=300)
    parser.add_argument("--num-samples", type=int, default=300)
    parser.add_argument("--num-chains", type=int, default=2)
    parser.add_argument(
        "--meshes", type=int, nargs="+", help="device counts: ours on a mesh of each (issue 39)"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.meshes and max(args.meshes) > args.devices:
        parser.error(f"--meshes: at most --devices = {args.devices} devices")

    jax = _setup_jax(args.devices)
    import arviz_base  # noqa: F401  (imported by both sides; not timed)
    import numpyro
    import xarray  # noqa: F401

    sizes = {
        "num_warmup": args.num_warmup,
        "num_samples": args.num_samples,
        "num_chains": args.num_chains,
    }
    print(
        f"jax {jax.__version__}, numpyro {numpyro.__version__}, {jax.local_device_count()} host "
        f"device(s), {os.cpu_count()} cpu(s), float64; K = {NUM_ATOMS}, N = {NUM_POINTS}, "
        f"{args.num_chains} chains x ({args.num_warmup} warmup + {args.num_samples} draws)"
    )
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    print()
    if args.meshes:
        meshes(jax, args.meshes, args.replicates, args.chunk_size, sizes, args.seed)
        print(f"load average at end: {os.getloadavg()[0]:.2f}")
        return
    ours = theirs = None
    if args.replicates > 0:
        ours = run_ours(jax, args.replicates, args.chunk_size, sizes, args.seed)
        report_ours(ours)
    if args.simuk_replicates > 0:
        theirs = run_simuk(jax, args.simuk_replicates, sizes, args.simuk_chain_method, args.seed)
        report_simuk(theirs)
    if ours is not None or theirs is not None:
        print_table(ours, theirs)
    if args.sweep:
        sweep(jax, args.sweep_replicates, args.sweep_chunks, sizes, args.seed)
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
