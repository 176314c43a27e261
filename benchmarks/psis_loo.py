"""``psis_loo`` (vectorised PSIS-LOO) against ``arviz_stats.loo(..., pointwise=True)``.

A normal linear regression (5 coefficients and sigma) of N observations with Student-t noise:
AR(1) draws around the least-squares fit stand in for the posterior (C chains x S draws,
r_eff < 1 estimated from them), the log-likelihood in closed form. The same numbers
(tests/inference/diagnostics/test_loo.py); best of ``--repeats`` in one process, for C = 2
and C = 4 chains of ``--draws`` draws.

    python -P benchmarks/psis_loo.py [--observations 1000] [--draws 1000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time
import warnings

import arviz_stats as azs
import numpy as np
import xarray as xr

from attnbayes.inference.diagnostics.loo import psis_loo


def best(repeats, fn, *args, **kwargs):
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn(*args, **kwargs)
        times.append(time.perf_counter() - start)
    return min(times), result


def regression_tree(num_obs, num_chains, num_draws, seed=0, num_coefs=5, rho=0.5):
    rng = np.random.default_rng(seed)
    design = rng.normal(size=(num_obs, num_coefs))
    y = design @ rng.normal(size=num_coefs) + rng.standard_t(4, size=num_obs)
    coef_hat, *_ = np.linalg.lstsq(design, y, rcond=None)
    sigma_hat = np.std(y - design @ coef_hat)
    noise = rng.normal(size=(num_chains, num_draws, num_coefs + 1))
    for t in range(1, num_draws):  # AR(1) chains: r_eff below 1
        noise[:, t] = rho * noise[:, t - 1] + np.sqrt(1 - rho**2) * noise[:, t]
    chol = np.linalg.cholesky(np.linalg.inv(design.T @ design)) * sigma_hat
    coef = coef_hat + noise[..., :num_coefs] @ chol.T
    sigma = sigma_hat * np.exp(noise[..., -1] / np.sqrt(2 * num_obs))
    z = (y - coef @ design.T) / sigma[..., None]
    log_lik = -0.5 * np.log(2 * np.pi) - np.log(sigma)[..., None] - 0.5 * z**2
    return xr.DataTree.from_dict(
        {
            "posterior": xr.Dataset(
                {"coef": (("chain", "draw", "k"), coef), "sigma": (("chain", "draw"), sigma)}
            ),
            "log_likelihood": xr.Dataset({"y": (("chain", "draw", "obs"), log_lik)}),
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--observations", type=int, default=1000)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # high-k warnings, the same from both
    for num_chains in (2, 4):
        tree = regression_tree(args.observations, num_chains, args.draws)
        with np.errstate(all="ignore"):
            theirs, want = best(args.repeats, azs.loo, tree, pointwise=True)
        ours, got = best(args.repeats, psis_loo, tree)
        elpd_diff = np.max(np.abs(got.elpd_i.values - want.elpd_i.values))
        k_diff = np.max(np.abs(got.pareto_k.values - want.pareto_k.values))
        print(
            f"N = {args.observations} observations, {num_chains} chains x {args.draws} draws "
            f"(max k {float(want.pareto_k.max()):.2f}, {int((want.pareto_k > want.good_k).sum())}"
            f" above good_k)"
        )
        print(
            f"  arviz_stats.loo: {theirs:.2f} s; psis_loo (vectorised): {ours:.3f} s; "
            f"ratio {theirs / ours:.0f}; max |diff| elpd_i {elpd_diff:.1e}, pareto_k {k_diff:.1e}"
        )


if __name__ == "__main__":
    main()
