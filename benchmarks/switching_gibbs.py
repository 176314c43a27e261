"""Switching-model Gibbs: the collapsed mode sampler against the conditional (blocked) one.

On the maneuvering-target scenario (T = 200 steps simulated with seed 0), runs
``run_switching_gibbs`` with

- ``mode_sampler="collapsed"`` (Gerlach, Carter & Kohn 2000) on the scenario as it is (the
  white-noise-acceleration Q has rank 2 in 4-D), and on the scenario with Q_j + jitter I;
- ``mode_sampler="conditional"`` (HMM FFBS of s | x, which needs PD Q) on Q_j + jitter I,

each twice: "1st s" is the first call's wall time (with compilation in the first row only:
both mode samplers share one compiled program per shape), "warm s" a second run with another
key (sampling only). From the warm run it prints the bulk ESS of the states (min and median over
the 4 T state coordinates), min ESS per warm second, the max R-hat over the state coordinates
and over the mode indicators 1[s_t = 1] (NaN-free: indicators constant in every chain are left
out), and the range of P(s_t = 1 | y) over t. float64, chains vectorised in one process.

    python benchmarks/switching_gibbs.py [--num-steps 200] [--num-warmup 1000]
        [--num-samples 4000] [--num-chains 4] [--jitter 1e-6 1e-3]
"""

from __future__ import annotations

import argparse
import time

import jax

jax.config.update("jax_enable_x64", True)

import arviz as az  # noqa: E402
import numpy as np  # noqa: E402

from attnbayes.inference.diagnostics import diagnostics  # noqa: E402
from attnbayes.inference.switching.gibbs import run_switching_gibbs  # noqa: E402
from attnbayes.models.switching import maneuvering_target, simulate  # noqa: E402


def _run(params, obs, mode_sampler, args, seed):
    start = time.perf_counter()
    dt = run_switching_gibbs(
        jax.random.key(seed),
        params,
        obs,
        num_warmup=args.num_warmup,
        num_samples=args.num_samples,
        num_chains=args.num_chains,
        mode_sampler=mode_sampler,
    )
    return dt, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-steps", type=int, default=200)
    parser.add_argument("--num-warmup", type=int, default=1000)
    parser.add_argument("--num-samples", type=int, default=4000)
    parser.add_argument("--num-chains", type=int, default=4)
    parser.add_argument("--jitter", type=float, nargs="+", default=[1e-6, 1e-3])
    args = parser.parse_args()

    params = maneuvering_target()
    _, _, obs = simulate(jax.random.key(0), params, args.num_steps)
    eye = np.eye(params.dynamics_covs.shape[-1])
    configs = [("collapsed", "Q (rank 2)", params)]
    for jitter in args.jitter:
        jittered = params._replace(dynamics_covs=params.dynamics_covs + jitter * eye)
        configs += [(s, f"Q + {jitter:g} I", jittered) for s in ("collapsed", "conditional")]
    print(
        f"maneuvering target, T = {args.num_steps}, {args.num_chains} chains x "
        f"({args.num_warmup} warmup + {args.num_samples} draws), float64"
    )
    header = (
        f"{'mode sampler':>12} {'model':>14} {'1st s':>6} {'warm s':>6} {'min ESS':>7} "
        f"{'med ESS':>7} {'ESS/s':>6} {'R-hat x':>7} {'R-hat s':>7} {'P(s=1) range':>12}"
    )
    print(header)
    for mode_sampler, label, p in configs:
        _, cold = _run(p, obs, mode_sampler, args, seed=1)
        dt, warm = _run(p, obs, mode_sampler, args, seed=2)
        diag = diagnostics(dt, ["states"])
        ess = diag.table["ess_bulk"]
        indicators = (dt["posterior"]["modes"].values == 1).astype(float)
        varies = indicators.std(axis=1).max(axis=0) > 0  # in some chain
        with np.errstate(invalid="ignore", divide="ignore"):
            rhat_modes = np.asarray(az.rhat(indicators[..., varies]))
        probs = indicators.mean(axis=(0, 1))
        print(
            f"{mode_sampler:>12} {label:>14} {cold:6.1f} {warm:6.1f} {ess.min():7.0f} "
            f"{ess.median():7.0f} {ess.min() / warm:6.1f} {diag.max_r_hat:7.4f} "
            f"{np.nanmax(rhat_modes):7.3f} {probs.min():5.2f}-{probs.max():.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
