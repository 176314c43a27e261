"""NUTS through the suite's ``run_nuts`` (NumPyro/JAX) against PyMC's default sampler.

The "three-atoms" scenario: N = 2000 draws of 0.5 delta(-2) + 0.3 delta(0) + 0.2 delta(3) with
sigma = 1, fitted with K = 3 ordered atoms, float64, 2 chains of 1000 warmup + 1000 draws each.
Both samplers get the same data and the same prior:

    w ~ Dirichlet(1_K),   mu ~ N(atom_loc, atom_scale^2) iid restricted to mu_1 < ... < mu_K,
    x_i ~ sum_k w_k N(mu_k, sigma^2),

with atom_loc = mean(x) and atom_scale = 2 sd(x) + sigma, as
``attnbayes.inference.deconvolution.comparison`` sets them. NumPyro writes the atoms' prior as
``SortedNormal`` (K! prod N on the sorted region), PyMC as a Normal with the ``ordered`` transform
(prod N on the sorted region): the same posterior, since the two densities differ by the constant
K!.

Timings, all in one run so that the ratio is meaningful on a shared machine:

- NumPyro: the whole ``run_nuts(deconvolution_model, ...)`` call. "compile" is the JAX
  tracing, lowering and XLA compilation reported by ``jax.monitoring`` while ``MCMC.run``
  runs; "sampling" is the rest of ``MCMC.run`` (warmup + draws). "whole call" adds what
  ``run_nuts`` does afterwards (pointwise log-likelihood for LOO, DataTree); the posterior
  predictive is switched off (``posterior_predictive=False``), as ``pm.sample`` draws none.
- PyMC: ``pm.sample`` with its defaults (NUTS, jitter+adapt_diag, PyTensor's C backend,
  one process per chain), run in a child process that never imports JAX (PyMC forks its
  chain processes, which is unsafe once JAX has started its threads). "sampling" is PyMC's
  own ``sampling_time``; "compile" is the rest of ``pm.sample`` (graph rewriting, compiling
  and initialisation). PyTensor caches compiled C modules on disk, so this depends on the
  cache: the child starts from an empty one, runs a 5 + 5 iteration ``pm.sample`` (its
  compile time, a first use on a machine, is printed below the table), then the real one,
  whose compile time is that of a user with a warm cache. XLA keeps no cache between
  processes unless asked to, so NumPyro's compile time is the same on every run. "whole
  call" is the ``pm.sample`` call.

ESS is ArviZ's bulk ESS, minimum over the sorted atoms and the weights. The two posteriors
must agree: posterior means within 4 combined Monte Carlo standard errors.

    python benchmarks/nuts_vs_pymc.py [--num-points 2000] [--num-warmup 1000] \
        [--num-samples 1000] [--chains 2] [--seed 0]

Needs ``pymc`` (in the ``bench`` extra: ``pip install -e ".[bench]"``).
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


# ----------------------------------------------------------------------------- PyMC (child)


def pymc_worker(workdir: Path) -> None:
    """Fit the model with ``pm.sample`` defaults; write draws and timings to ``workdir``."""
    import pymc as pm
    import pytensor

    with open(workdir / "settings.json") as fh:
        settings = json.load(fh)
    x = np.load(workdir / "data.npy")
    loc, scale, k = settings["atom_loc"], settings["atom_scale"], NUM_ATOMS
    assert pytensor.config.floatX == "float64"
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

    def sample(draws, tune):
        start = time.perf_counter()
        idata = pm.sample(
            draws=draws,
            tune=tune,
            chains=settings["chains"],
            cores=settings["chains"],
            random_seed=settings["seed"],
            progressbar=False,
            compute_convergence_checks=False,
            model=model,
        )
        return idata, time.perf_counter() - start, float(idata["posterior"].attrs["sampling_time"])

    _, cold_total, cold_sampling = sample(5, 5)  # fills the empty PyTensor cache
    idata, total, sampling = sample(settings["num_samples"], settings["num_warmup"])
    stats = idata["sample_stats"]
    np.savez(
        workdir / "pymc.npz",
        **{name: np.asarray(idata["posterior"][name]) for name in NAMES},
    )
    with open(workdir / "pymc.json", "w") as fh:
        json.dump(
            {
                "total": total,
                "whole": total,
                "sampling": sampling,
                "cold_compile": cold_total - cold_sampling,
                "divergences": int(np.asarray(stats["diverging"]).sum()),
                "mean_tree_size": float(np.asarray(stats["n_steps"]).mean()),
                "pymc": pm.__version__,
                "pytensor": pytensor.__version__,
            },
            fh,
        )


def run_pymc(workdir: Path) -> tuple[dict, dict]:
    env = dict(os.environ)
    flags = [env["PYTENSOR_FLAGS"]] if env.get("PYTENSOR_FLAGS") else []
    flags += ["floatX=float64", f"base_compiledir={workdir / 'pytensor-cache'}"]
    env["PYTENSOR_FLAGS"] = ",".join(flags)
    subprocess.run([sys.executable, __file__, "--pymc-worker", str(workdir)], env=env, check=True)
    with open(workdir / "pymc.json") as fh:
        info = json.load(fh)
    draws = dict(np.load(workdir / "pymc.npz"))
    return info, draws


# ----------------------------------------------------------------------------- NumPyro (parent)


def run_numpyro(x, settings: dict) -> tuple[dict, dict]:
    """``run_nuts`` on the model; compile time from ``jax.monitoring`` inside ``MCMC.run``."""
    import jax
    import jax.monitoring
    import numpyro.infer

    from attnbayes.inference.mcmc import run_nuts
    from attnbayes.models.deconvolution import deconvolution_model, model_dims

    compile_events = ("/jax/core/compile/",)
    events: list[tuple[float, float]] = []  # (end time, duration)

    def listener(event, duration, **_):
        if event.startswith(compile_events):
            events.append((time.perf_counter(), duration))

    jax.monitoring.register_event_duration_secs_listener(listener)
    window: list[float] = []
    original_run = numpyro.infer.MCMC.run

    def timed_run(self, *args, **kwargs):  # records when MCMC.run starts inside run_nuts
        window.append(time.perf_counter())
        return original_run(self, *args, **kwargs)

    numpyro.infer.MCMC.run = timed_run
    try:
        start = time.perf_counter()
        datatree = run_nuts(
            jax.random.key(settings["seed"]),
            deconvolution_model,
            x,
            sigma=SIGMA,
            num_atoms=NUM_ATOMS,
            num_warmup=settings["num_warmup"],
            num_samples=settings["num_samples"],
            num_chains=settings["chains"],
            dims=model_dims(True),
            ordered=True,
            atom_loc=settings["atom_loc"],
            atom_scale=settings["atom_scale"],
            posterior_predictive=False,  # pm.sample draws none either
        )
        wall = time.perf_counter() - start
    finally:
        numpyro.infer.MCMC.run = original_run
        jax.monitoring.unregister_event_duration_listener(listener)
    post = datatree["posterior"]
    mcmc_time = float(post.attrs["sampling_time"])  # MCMC.run + get_samples, compile included
    lo, hi = window[0], window[0] + mcmc_time
    compile_time = sum(d for end, d in events if lo <= end <= hi)
    stats = datatree["sample_stats"]
    info = {
        "total": mcmc_time,
        "sampling": mcmc_time - compile_time,
        "whole": wall,
        "chain_method": post.attrs["chain_method"],
        "divergences": int(np.asarray(stats["diverging"]).sum()),
        "mean_tree_size": float(np.asarray(stats["n_steps"]).mean()),
    }
    return info, {name: np.asarray(post[name]) for name in NAMES}


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
    parser.add_argument("--pymc-worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.pymc_worker is not None:
        pymc_worker(args.pymc_worker)
        return

    # One XLA host device per chain, so that run_nuts runs the chains in parallel as PyMC does.
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
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        np.save(workdir / "data.npy", x)
        with open(workdir / "settings.json", "w") as fh:
            json.dump(settings, fh)
        pymc_info, pymc_draws = run_pymc(workdir)
    numpyro_info, numpyro_draws = run_numpyro(x, settings)

    results = {}
    for name, info, draws in (
        ("NumPyro (run_nuts)", numpyro_info, numpyro_draws),
        ("PyMC (pm.sample)", pymc_info, pymc_draws),
    ):
        min_ess, means, ses = summarise(draws)
        results[name] = (info, min_ess, means, ses)

    print(
        f"three-atoms, N = {args.num_points}, K = {NUM_ATOMS}, sigma = {SIGMA}, float64, "
        f"{args.chains} chains x ({args.num_warmup} warmup + {args.num_samples} draws); "
        f"PyMC {pymc_info['pymc']}, PyTensor {pymc_info['pytensor']}"
    )
    print()
    print(
        "| sampler | compile s | sampling s | compile + sampling s | whole call s | min bulk ESS "
        "| ESS/s sampling | ESS/s compile + sampling | ESS/s whole call | divergences "
        "| mean leapfrog steps |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    rates = {}
    for name, (info, min_ess, _, _) in results.items():
        compile_time = info["total"] - info["sampling"]
        rates[name] = [min_ess / info[key] for key in ("sampling", "total", "whole")]
        print(
            f"| {name} | {compile_time:.1f} | {info['sampling']:.1f} | {info['total']:.1f} "
            f"| {info['whole']:.1f} | {min_ess:.0f} | "
            + " | ".join(f"{rate:.1f}" for rate in rates[name])
            + f" | {info['divergences']} | {info['mean_tree_size']:.1f} |"
        )
    ratios = [a / b for a, b in zip(*rates.values(), strict=True)]
    print("| NumPyro / PyMC | | | | | | " + " | ".join(f"{r:.2f}x" for r in ratios) + " | | |")
    print()
    print(
        f"NumPyro: the whole run_nuts call adds "
        f"{numpyro_info['whole'] - numpyro_info['total']:.1f} s after sampling (pointwise "
        f"log-likelihood, DataTree; pm.sample computes no log-likelihood); "
        f"chains {numpyro_info['chain_method']}. PyMC's compile with an empty PyTensor cache "
        f"(first use on a machine; the table has the warm-cache figure): "
        f"{pymc_info['cold_compile']:.1f} s."
    )
    print()
    print("| quantity | NumPyro mean (MCSE) | PyMC mean (MCSE) | z |")
    print("|---|---|---|---|")
    (_, _, m_np, s_np), (_, _, m_pm, s_pm) = (v for v in results.values())
    worst = 0.0
    for name in NAMES:
        for k in range(NUM_ATOMS):
            z = (m_np[name][k] - m_pm[name][k]) / np.hypot(s_np[name][k], s_pm[name][k])
            worst = max(worst, abs(z))
            print(
                f"| {name}[{k}] | {m_np[name][k]:.4f} ({s_np[name][k]:.4f}) "
                f"| {m_pm[name][k]:.4f} ({s_pm[name][k]:.4f}) | {z:+.2f} |"
            )
    verdict = "agree" if worst < 4 else "DISAGREE"
    print()
    print(f"posteriors {verdict}: max |z| = {worst:.2f} (threshold 4)")
    if worst >= 4:
        sys.exit(1)


if __name__ == "__main__":
    main()
