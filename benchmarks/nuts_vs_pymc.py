"""NUTS through the suite's ``run_nuts`` (NumPyro/JAX) against plain NumPyro, PyMC's default
sampler and nutpie, each backend named.

The "three-atoms" scenario: N = 2000 draws of 0.5 delta(-2) + 0.3 delta(0) + 0.2 delta(3) with
sigma = 1, fitted with K = 3 ordered atoms, float64, 2 chains of 1000 warmup + 1000 draws each.
Every sampler gets the same data and the same prior:

    w ~ Dirichlet(1_K),   mu ~ N(atom_loc, atom_scale^2) iid restricted to mu_1 < ... < mu_K,
    x_i ~ sum_k w_k N(mu_k, sigma^2),

with atom_loc = mean(x) and atom_scale = 2 sd(x) + sigma, as
``attnbayes.inference.deconvolution.comparison`` sets them. NumPyro writes the atoms' prior as
``SortedNormal`` (K! prod N on the sorted region), PyMC as a Normal with the ``ordered`` transform
(prod N on the sorted region): the same posterior, since the two densities differ by the constant
K!.

Rows (all in one run, so that ratios are meaningful on a shared machine):

- ``run_nuts`` (NumPyro NUTS, JAX/XLA on CPU), first call for these shapes (both NumPyro paths
  first run once on N = 50, so that neither pays the process's one-off costs): "compile" is the JAX
  tracing, lowering and XLA compilation reported by ``jax.monitoring`` during the call;
  "compile + sampling" is ``posterior.attrs["sampling_time"]`` (compiling, then the sampling
  program: init, warmup, draws, pointwise log-likelihood); "whole call" adds the rest of
  ``run_nuts`` (the DataTree). ``posterior_predictive=False``, as the others draw none.
- ``run_nuts`` second call (another key, same data shapes): the compiled program is reused.
- plain NumPyro: ``MCMC(NUTS(model))``, ``.run``, ``get_samples`` (a fresh ``MCMC``, as a
  script makes): "compile" from ``jax.monitoring``, "sampling" the rest of ``.run``.
- PyMC's default sampler and compiler: ``pm.sample(nuts_sampler="pymc")`` (PyMC's own NUTS;
  without the argument PyMC hands off to nutpie when nutpie is installed) with PyTensor's default
  mode, whose linker is Numba in PyTensor 3.3 (the linker named in the table is read from
  ``pytensor.compile.mode.get_default_mode()`` in the child). One process per chain
  (``cores=chains``). "sampling" is PyMC's ``sampling_time``; "compile" the rest of
  ``pm.sample`` (graph rewriting, compiling and initialisation).
- the same with PyTensor's C backend (``PYTENSOR_FLAGS=linker=cvm``), the default when Numba is
  not installed.
- nutpie: ``nutpie.compile_pymc_model(model)`` (its default Numba backend; "compile") and
  ``nutpie.sample(compiled, chains=2, cores=2)`` ("sampling").

PyMC and nutpie run in child processes that never import JAX (PyMC forks its chain processes,
which is unsafe once JAX has started its threads), with ``--pymc-python`` (default: this
interpreter), so that they can live in another virtual environment. PyTensor and Numba cache
compiled code on disk, so each child starts from empty caches (``base_compiledir`` and
``NUMBA_CACHE_DIR`` in a temporary directory), runs a 5 + 5 iteration fit first (its compile
time, a first use on a machine, is printed below the table), then the real one, whose compile
time is that of a user with a warm cache. XLA keeps no cache between processes unless asked to,
so NumPyro's first-call compile time is the same on every run.

ESS is ArviZ's bulk ESS, minimum over the sorted atoms and the weights. The posteriors must
agree: every backend's posterior means within 4 combined Monte Carlo standard errors of the
first run_nuts call's.

    python benchmarks/nuts_vs_pymc.py [--num-points 2000] [--num-warmup 1000] \
        [--num-samples 1000] [--chains 2] [--seed 0] [--pymc-python PATH] \
        [--backends pymc-numba pymc-c nutpie]

Needs ``pymc`` and ``nutpie`` (and ``numba``) for ``--pymc-python``: e.g. a separate venv,
``python -m venv /tmp/pymcvenv && /tmp/pymcvenv/bin/pip install pymc nutpie numba``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SIGMA = 1.0
NUM_ATOMS = 3
NAMES = ("atoms", "weights")
BACKENDS = ("pymc-numba", "pymc-c", "nutpie")


# ----------------------------------------------------------------------------- PyMC (child)


def _pymc_model(x, settings):
    import pymc as pm

    loc, scale, k = settings["atom_loc"], settings["atom_scale"], NUM_ATOMS
    with pm.Model() as model:
        weights = pm.Dirichlet("weights", a=np.ones(k))
        atoms = pm.Normal(
            "atoms",
            mu=loc,
            sigma=scale,
            shape=k,
            transform=pm.distributions.transforms.ordered,
            # The ordered transform needs distinct starting values (its default start, all
            # atoms at mu, has log-spacings of -inf): spread them over +-0.5 prior sd.
            initval=loc + scale * np.linspace(-0.5, 0.5, k),
        )
        pm.NormalMixture("x", w=weights, mu=atoms, sigma=SIGMA, observed=x)
    return model


def pymc_worker(workdir: Path, backend: str) -> None:
    """Fit the model with one PyMC backend; write draws and timings to ``workdir``."""
    import pymc as pm
    import pytensor
    from pytensor.compile.mode import get_default_mode

    with open(workdir / "settings.json") as fh:
        settings = json.load(fh)
    x = np.load(workdir / "data.npy")
    assert pytensor.config.floatX == "float64"
    model = _pymc_model(x, settings)
    chains = settings["chains"]
    linker = get_default_mode().linker
    # the backend by name: Numba, or C (PyTensor CVM: the VM loop and the ops in C)
    linker = {"NumbaLinker": "Numba", "VMLinker": "C/CVM"}.get(
        type(linker).__name__, type(linker).__name__
    )
    if linker == "C/CVM" and not getattr(get_default_mode().linker, "use_cloop", False):
        linker = "Python VM (vm)"

    if backend == "nutpie":
        import nutpie

        def fit(draws, tune):
            start = time.perf_counter()
            compiled = nutpie.compile_pymc_model(model)
            compiled_at = time.perf_counter()
            tree = nutpie.sample(
                compiled,
                draws=draws,
                tune=tune,
                chains=chains,
                cores=chains,
                seed=settings["seed"],
                progress_bar=False,
            )
            end = time.perf_counter()
            return tree, end - start, end - compiled_at

        name = f"nutpie {nutpie.__version__} (compile_pymc_model, Numba backend)"
    else:

        def fit(draws, tune):
            start = time.perf_counter()
            tree = pm.sample(
                draws=draws,
                tune=tune,
                chains=chains,
                cores=chains,
                random_seed=settings["seed"],
                progressbar=False,
                compute_convergence_checks=False,
                nuts_sampler="pymc",
                model=model,
            )
            total = time.perf_counter() - start
            return tree, total, float(tree["posterior"].attrs["sampling_time"])

        name = f"PyMC {pm.__version__} pm.sample(nuts_sampler='pymc'), PyTensor {linker} backend"

    _, cold_total, cold_sampling = fit(5, 5)  # fills the empty PyTensor / Numba caches
    tree, total, sampling = fit(settings["num_samples"], settings["num_warmup"])
    stats = tree["sample_stats"]
    np.savez(
        workdir / f"{backend}.npz",
        **{name_: np.asarray(tree["posterior"][name_]) for name_ in NAMES},
    )
    with open(workdir / f"{backend}.json", "w") as fh:
        json.dump(
            {
                "name": name,
                "total": total,
                "whole": total,
                "sampling": sampling,
                "cold_compile": cold_total - cold_sampling,
                "divergences": int(np.asarray(stats["diverging"]).sum()),
                "mean_tree_size": float(np.asarray(stats["n_steps"]).mean()),
                "pymc": pm.__version__,
                "pytensor": pytensor.__version__,
                "linker": linker,
            },
            fh,
        )


def run_pymc(workdir: Path, backend: str, python: str) -> tuple[dict, dict]:
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    cache = workdir / f"cache-{backend}"
    flags = [env["PYTENSOR_FLAGS"]] if env.get("PYTENSOR_FLAGS") else []
    flags += ["floatX=float64", f"base_compiledir={cache / 'pytensor'}"]
    if backend == "pymc-c":
        flags.append("linker=cvm")
    env["PYTENSOR_FLAGS"] = ",".join(flags)
    env["NUMBA_CACHE_DIR"] = str(cache / "numba")
    subprocess.run(
        [python, __file__, "--pymc-worker", str(workdir), "--backends", backend],
        env=env,
        check=True,
    )
    with open(workdir / f"{backend}.json") as fh:
        info = json.load(fh)
    draws = dict(np.load(workdir / f"{backend}.npz"))
    return info, draws


# ----------------------------------------------------------------------------- NumPyro (parent)


class _CompileClock:
    """Seconds of JAX tracing, lowering and XLA compilation reported by ``jax.monitoring``."""

    EVENTS = (
        "/jax/core/compile/jaxpr_trace_duration",
        "/jax/core/compile/jaxpr_to_mlir_module_duration",
        "/jax/core/compile/backend_compile_duration",
    )

    def __init__(self):
        import jax.monitoring

        self.seconds = 0.0
        jax.monitoring.register_event_duration_secs_listener(self._listen)

    def _listen(self, event, duration, **_):
        if event in self.EVENTS:
            self.seconds += duration

    def reset(self) -> None:
        self.seconds = 0.0


def _stats(tree_stats, steps: str = "n_steps") -> dict:
    return {
        "divergences": int(np.asarray(tree_stats["diverging"]).sum()),
        "mean_tree_size": float(np.asarray(tree_stats[steps]).mean()),
    }


def run_numpyro(x, settings: dict, clock: _CompileClock, seed: int, label: str):
    """``run_nuts`` on the model: whole call, sampling program, compile time."""
    import jax

    from attnbayes.inference.mcmc import run_nuts
    from attnbayes.models.deconvolution import deconvolution_model, model_dims

    clock.reset()
    start = time.perf_counter()
    datatree = run_nuts(
        jax.random.key(seed),
        deconvolution_model,
        (x,),
        {
            "sigma": SIGMA,
            "num_atoms": NUM_ATOMS,
            "ordered": True,
            # 0-d arrays: arguments of the compiled program, not constants in it
            "atom_loc": np.asarray(settings["atom_loc"]),
            "atom_scale": np.asarray(settings["atom_scale"]),
        },
        num_warmup=settings["num_warmup"],
        num_samples=settings["num_samples"],
        num_chains=settings["chains"],
        dims=model_dims(True),
        posterior_predictive=False,  # pm.sample and nutpie draw none either
    )
    wall = time.perf_counter() - start
    post = datatree["posterior"]
    program = float(post.attrs["sampling_time"])  # the sampling program, compile included
    info = {
        "name": f"{label} (NumPyro NUTS, JAX/XLA CPU, chains {post.attrs['chain_method']})",
        "total": program,
        "sampling": program - clock.seconds,
        "whole": wall,
        **_stats(datatree["sample_stats"]),
    }
    return info, {name: np.asarray(post[name]) for name in NAMES}


def run_plain_numpyro(x, settings: dict, clock: _CompileClock, chain_method: str):
    """``MCMC(NUTS(model)).run`` and ``get_samples``: whole call and compile time."""
    import jax
    from numpyro.infer import MCMC, NUTS

    from attnbayes.models.deconvolution import deconvolution_model

    clock.reset()
    start = time.perf_counter()
    mcmc = MCMC(
        NUTS(deconvolution_model),
        num_warmup=settings["num_warmup"],
        num_samples=settings["num_samples"],
        num_chains=settings["chains"],
        chain_method=chain_method,
        progress_bar=False,
    )
    mcmc.run(
        jax.random.key(settings["seed"] + 1),
        x,
        sigma=SIGMA,
        num_atoms=NUM_ATOMS,
        ordered=True,
        atom_loc=settings["atom_loc"],
        atom_scale=settings["atom_scale"],
        extra_fields=("diverging", "num_steps"),
    )
    samples = mcmc.get_samples(group_by_chain=True)
    jax.block_until_ready(samples)
    wall = time.perf_counter() - start
    info = {
        "name": f"plain NumPyro MCMC(NUTS) .run + get_samples (JAX/XLA CPU, chains {chain_method})",
        "total": wall,
        "sampling": wall - clock.seconds,
        "whole": wall,
        **_stats(mcmc.get_extra_fields(group_by_chain=True), steps="num_steps"),
    }
    return info, {name: np.asarray(samples[name]) for name in NAMES}


# ----------------------------------------------------------------------------- summaries


def summarise(draws: dict) -> tuple[float, dict, dict]:
    """Minimum bulk ESS over atoms and weights, and per-element posterior means and MCSEs."""
    import arviz as az

    tree = az.from_dict({"posterior": draws}, dims={name: ["atom"] for name in NAMES})
    ess = az.ess(tree, var_names=list(NAMES), method="bulk")
    mcse = az.mcse(tree, var_names=list(NAMES), method="mean")
    min_ess = min(float(np.min(np.asarray(ess[name]))) for name in NAMES)
    means = {name: draws[name].mean(axis=(0, 1)) for name in NAMES}
    ses = {name: np.asarray(mcse[name]) for name in NAMES}
    return min_ess, means, ses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-points", type=int, default=2000)
    parser.add_argument("--num-warmup", type=int, default=1000)
    parser.add_argument("--num-samples", type=int, default=1000)
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--pymc-python",
        default=sys.executable,
        help="interpreter of the PyMC / nutpie children (default: this one)",
    )
    parser.add_argument("--backends", nargs="*", default=list(BACKENDS), choices=BACKENDS)
    parser.add_argument("--pymc-worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.pymc_worker is not None:
        pymc_worker(args.pymc_worker, args.backends[0])
        return

    # One XLA host device per chain, so that the NumPyro rows run the chains in parallel, as
    # PyMC and nutpie do.
    os.environ.setdefault(
        "XLA_FLAGS", f"--xla_force_host_platform_device_count={max(args.chains, 2)}"
    )
    import jax

    jax.config.update("jax_enable_x64", True)
    from attnbayes.models.deconvolution import simulate

    _, x = simulate(jax.random.PRNGKey(20261122), "three-atoms", SIGMA, args.num_points)
    x = np.asarray(x, dtype=np.float64)
    settings = {
        "num_warmup": args.num_warmup,
        "num_samples": args.num_samples,
        "chains": args.chains,
        "seed": args.seed,
        "atom_loc": float(np.mean(x)),
        "atom_scale": float(2.0 * np.std(x) + SIGMA),
    }
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        np.save(workdir / "data.npy", x)
        with open(workdir / "settings.json", "w") as fh:
            json.dump(settings, fh)
        for backend in args.backends:
            runs.append(run_pymc(workdir, backend, args.pymc_python))
    import arviz_base  # noqa: F401  (imported before the timed calls, as a session would)
    import xarray  # noqa: F401

    clock = _CompileClock()
    chain_method = "parallel" if jax.local_device_count() >= args.chains else "sequential"
    # Warm-up of both NumPyro paths on another shape (N = 50, 10 + 10 iterations), so that the
    # first timed call does not pay the process's one-off JAX costs for the others.
    tiny = {**settings, "num_warmup": 10, "num_samples": 10}
    run_numpyro(x[:50], tiny, clock, args.seed, "warm-up")
    run_plain_numpyro(x[:50], tiny, clock, chain_method)
    numpyro_runs = [
        run_numpyro(x, settings, clock, args.seed, "run_nuts, first call"),
        run_numpyro(
            x, settings, clock, args.seed + 2, "run_nuts, second call, compiled program reused"
        ),
        run_plain_numpyro(x, settings, clock, chain_method),
    ]
    runs = numpyro_runs + runs

    results = []
    for info, draws in runs:
        min_ess, means, ses = summarise(draws)
        results.append((info, min_ess, means, ses))

    versions = ""
    if len(runs) > len(numpyro_runs):
        extra = runs[len(numpyro_runs)][0]
        versions = f"; PyMC {extra['pymc']}, PyTensor {extra['pytensor']}"
    import numpyro

    print(
        f"three-atoms, N = {args.num_points}, K = {NUM_ATOMS}, sigma = {SIGMA}, float64, "
        f"{args.chains} chains x ({args.num_warmup} warmup + {args.num_samples} draws); "
        f"JAX {jax.__version__}, NumPyro {numpyro.__version__}{versions}"
    )
    print()
    print(
        "| sampler (backend) | compile s | sampling s | compile + sampling s | whole call s "
        "| min bulk ESS | ESS/s sampling | ESS/s compile + sampling | ESS/s whole call "
        "| divergences | mean leapfrog steps |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for info, min_ess, _, _ in results:
        compile_time = info["total"] - info["sampling"]
        rates = [min_ess / info[key] for key in ("sampling", "total", "whole")]
        print(
            f"| {info['name']} | {compile_time:.1f} | {info['sampling']:.1f} | {info['total']:.1f} "
            f"| {info['whole']:.1f} | {min_ess:.0f} | "
            + " | ".join(f"{rate:.1f}" for rate in rates)
            + f" | {info['divergences']} | {info['mean_tree_size']:.1f} |"
        )
    print()
    base = results[0][0]
    print(
        "whole call relative to run_nuts's first call: "
        + "; ".join(
            f"{info['name'].split(' (')[0]} {info['whole'] / base['whole']:.2f}x"
            for info, *_ in results[1:]
        )
    )
    colds = [(info["name"], info["cold_compile"]) for info, *_ in results if "cold_compile" in info]
    if colds:
        print(
            "Compile with empty PyTensor / Numba caches (first use on a machine; the table has "
            "the warm-cache figure): "
            + "; ".join(f"{name}: {seconds:.1f} s" for name, seconds in colds)
        )
    print()
    print("| quantity | " + " | ".join(info["name"].split(" (")[0] for info, *_ in results) + " |")
    print("|---|" + "---|" * len(results))
    _, _, m_ref, s_ref = results[0]
    worst = 0.0
    for name in NAMES:
        for k in range(NUM_ATOMS):
            cells = []
            for i, (_, _, means, ses) in enumerate(results):
                cell = f"{means[name][k]:.4f} ({ses[name][k]:.4f})"
                if i:
                    z = (means[name][k] - m_ref[name][k]) / np.hypot(ses[name][k], s_ref[name][k])
                    worst = max(worst, abs(z))
                    cell += f" z={z:+.2f}"
                cells.append(cell)
            print(f"| {name}[{k}] | " + " | ".join(cells) + " |")
    verdict = "agree" if worst < 4 else "DISAGREE"
    print()
    print(
        f"posterior means (MCSE); z against run_nuts's first call. Posteriors {verdict}: "
        f"max |z| = {worst:.2f} (threshold 4)"
    )
    if worst >= 4:
        sys.exit(1)


if __name__ == "__main__":
    main()
