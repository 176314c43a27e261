"""Run deconvolution methods side by side on one data set and tabulate how they differ.

Methods:
- ``"attention-em"``: seed 1's estimator, K = N atoms started at the data, weights 1/N,
  iterated attention E-steps; z_hat is one more attention step (the EB posterior mean) and
  intervals come from the discrete posterior A_i. over the fitted atoms.
- ``"nuts"``: full-posterior NUTS on ``deconvolution_model`` (finite Dirichlet mixture, atoms
  ordered for scalar data); z_hat is the posterior mean of E[z_i | x_i, nu] and intervals are
  equal-tailed posterior intervals of z_i | x (nu integrated out).
- ``"oracle"`` (when ``true_measure`` is given): the Bayes rule under the true measure, the
  floor that any estimator of nu is measured against.

Metrics (tidy table: method, metric, value): ``mse_z`` (mean over i of |z_hat_i - z_i|^2),
``coverage_50`` / ``coverage_90`` of intervals for z_i, ``wasserstein1_nu`` (1-D), the
``log_likelihood`` (EM/oracle: at the estimate; NUTS: posterior mean), ``elpd_loo`` (NUTS),
``wall_time_s`` (compilation included), for EM its ``iterations`` and ``converged`` (1/0),
and for NUTS the largest Pareto k of PSIS-LOO (``pareto_k_max``; above 0.7 the LOO estimate is
unreliable), the worst R-hat and smallest bulk/tail ESS over permutation-invariant quantities
(z_mean, nu_cdf, log_lik_total), and divergences.

Coverage is the share of (point, coordinate) pairs whose true z lies in the equal-tailed
interval (per coordinate in p-D). When nu is discrete and z_i sits exactly on an atom, a
discrete posterior (EM, oracle) covers conservatively (an atom-valued interval either holds
z_i exactly or misses it), so coverage above nominal is expected from the oracle.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import xarray as xr

from inference import em
from inference.invariants import add_invariants
from inference.mcmc import diagnostics, run_nuts
from models import _checks
from models.deconvolution import DiscreteMeasure, check_measure, deconvolution_model, model_dims

METHODS = ("attention-em", "nuts", "oracle")
INTERVAL_PROBS = (0.5, 0.9)


class MethodFit(NamedTuple):
    """What one method estimated, in the data's shape convention.

    Attributes:
        z_hat: (N,) or (N, p) point estimates of z_i.
        intervals: {prob: (lower, upper)} equal-tailed intervals for z_i, each like z_hat.
        measure: the estimated nu as a DiscreteMeasure (NUTS: the posterior mean measure,
            all draws' atoms pooled with weights w / S), or None.
        seconds: wall time of the method, compilation included.
        datatree: the MCMC DataTree (NUTS) with invariants in its posterior, else None.
        log_likelihood_trace: EM's log-likelihood per iteration, else None.
        converged: whether EM met its tolerance before ``max_iters`` (EM only).
    """

    z_hat: np.ndarray
    intervals: dict
    measure: DiscreteMeasure | None
    seconds: float
    datatree: xr.DataTree | None = None
    log_likelihood_trace: np.ndarray | None = None
    converged: bool | None = None


class DeconvolutionComparison(NamedTuple):
    """``table`` (columns method, metric, value) and the per-method ``fits``."""

    table: pd.DataFrame
    fits: dict[str, MethodFit]


# ----------------------------------------------------------------------------- helpers


def wasserstein1(atoms_a, weights_a, atoms_b, weights_b) -> float:
    """W1 between two discrete measures on the line: integral |F_a(t) - F_b(t)| dt, exact."""
    a = np.asarray(atoms_a, dtype=np.float64).ravel()
    b = np.asarray(atoms_b, dtype=np.float64).ravel()
    support = np.concatenate([a, b])
    signed = np.concatenate(
        [np.asarray(weights_a, np.float64).ravel(), -np.asarray(weights_b, np.float64).ravel()]
    )
    order = np.argsort(support, kind="stable")
    support, diff_cdf = support[order], np.cumsum(signed[order])
    return float(np.sum(np.abs(diff_cdf[:-1]) * np.diff(support)))


def discrete_posterior_intervals(resp, atoms, probs=INTERVAL_PROBS) -> dict:
    """Equal-tailed intervals of z_i ~ sum_k A_ik delta(mu_k), coordinate by coordinate.

    Args:
        resp: (N, K) responsibilities A.
        atoms: (K, p).
        probs: central probabilities.

    Returns:
        {prob: (lower (N, p), upper (N, p))}.
    """
    resp = np.asarray(resp, dtype=np.float64)
    atoms = np.asarray(atoms, dtype=np.float64)
    out = {}
    for prob in probs:
        lo_q, hi_q = (1 - prob) / 2, (1 + prob) / 2
        lower = np.empty((resp.shape[0], atoms.shape[1]))
        upper = np.empty((resp.shape[0], atoms.shape[1]))
        for j in range(atoms.shape[1]):
            order = np.argsort(atoms[:, j], kind="stable")
            cdf = np.cumsum(resp[:, order], axis=1)
            cdf /= cdf[:, -1:]
            sorted_atoms = atoms[order, j]
            lower[:, j] = sorted_atoms[np.minimum((cdf < lo_q).sum(1), len(order) - 1)]
            upper[:, j] = sorted_atoms[np.minimum((cdf < hi_q).sum(1), len(order) - 1)]
        out[prob] = (lower, upper)
    return out


def _coverage(intervals, z_true) -> dict:
    return {
        prob: float(np.mean((lo <= z_true) & (z_true <= hi)))
        for prob, (lo, hi) in intervals.items()
    }


def _discrete_posterior(x, sigma, measure, scalar):
    """z_hat (one attention step) and intervals under nu = measure, in x's convention."""
    z_hat, resp = em.posterior(x, measure.atoms, measure.weights, sigma)
    atoms = np.asarray(measure.atoms).reshape(measure.atoms.shape[0], -1)
    intervals = {
        prob: (_checks.restore_shape(lo, scalar), _checks.restore_shape(hi, scalar))
        for prob, (lo, hi) in discrete_posterior_intervals(resp, atoms).items()
    }
    return np.asarray(z_hat), intervals


def _em_fit(x, sigma, em_kwargs, scalar) -> MethodFit:
    start = time.perf_counter()
    fit = em.fit_em(x, sigma, **em_kwargs)
    measure = DiscreteMeasure(np.asarray(fit.atoms), np.asarray(fit.weights))
    z_hat, intervals = _discrete_posterior(x, sigma, measure, scalar)
    return MethodFit(
        z_hat=z_hat,
        intervals=intervals,
        measure=measure,
        seconds=time.perf_counter() - start,
        log_likelihood_trace=np.asarray(fit.log_likelihood_trace),
        converged=fit.converged,
    )


def _oracle_fit(x, sigma, measure, scalar) -> MethodFit:
    start = time.perf_counter()
    z_hat, intervals = _discrete_posterior(x, sigma, measure, scalar)
    return MethodFit(z_hat, intervals, measure, seconds=time.perf_counter() - start)


def _nuts_fit(x, sigma, key, num_atoms, nuts_kwargs, scalar) -> MethodFit:
    x_np = np.asarray(x)
    settings = dict(
        num_warmup=500,
        num_samples=500,
        num_chains=2,
        prior="dirichlet",
        atom_loc=np.mean(x_np, axis=0) if not scalar else float(np.mean(x_np)),
        atom_scale=float(2.0 * np.std(x_np) + sigma),
        ordered=scalar,
    )
    settings.update(nuts_kwargs)
    key_nuts, key_inv = jax.random.split(key)
    start = time.perf_counter()
    datatree = run_nuts(
        deconvolution_model,
        key_nuts,
        jnp.asarray(x_np),
        sigma=sigma,
        num_atoms=num_atoms,
        dims=model_dims(scalar),
        **settings,
    )
    datatree = add_invariants(datatree, x_np, sigma, key_inv)
    post = datatree["posterior"]
    z_hat = np.asarray(post["z_mean"].mean(("chain", "draw")))
    z_draw = post["z_draw"]
    intervals = {
        prob: (
            np.asarray(z_draw.quantile((1 - prob) / 2, dim=("chain", "draw"))),
            np.asarray(z_draw.quantile((1 + prob) / 2, dim=("chain", "draw"))),
        )
        for prob in INTERVAL_PROBS
    }
    atoms = np.asarray(post["atoms"]).reshape(-1, *post["atoms"].shape[3:])
    weights = np.asarray(post["weights"]).reshape(-1)
    pooled = DiscreteMeasure(atoms, weights / weights.sum())
    return MethodFit(
        z_hat=z_hat,
        intervals=intervals,
        measure=pooled,
        seconds=time.perf_counter() - start,
        datatree=datatree,
    )


# ----------------------------------------------------------------------------- public API


def compare_deconvolution(
    x,
    sigma,
    *,
    z_true=None,
    true_measure: DiscreteMeasure | None = None,
    methods=("attention-em", "nuts"),
    key: jax.Array | None = None,
    num_atoms: int | None = None,
    em_kwargs: dict | None = None,
    nuts_kwargs: dict | None = None,
    progress: Callable[[str], None] | None = None,
) -> DeconvolutionComparison:
    """Run ``methods`` on the same data; return a tidy table and each method's fit.

    Args:
        x: (N,) or (N, p) observations.
        sigma: known noise scale.
        z_true: the latent z (same shape as x) when known (simulations): enables mse_z and
            coverage.
        true_measure: the true nu when known: enables ``wasserstein1_nu`` and the oracle.
        methods: any of ``METHODS``; "oracle" needs ``true_measure``.
        key: ``jax.random`` key, required for "nuts".
        num_atoms: K for NUTS; default the true number of atoms if known, else 5.
        em_kwargs: passed to ``fit_em`` (default: seed 1's K = N, max_iters=500).
        nuts_kwargs: passed to ``run_nuts`` / the model (num_warmup, num_samples, ...).
        progress: called with a short message before each method (e.g. ``print``).

    Returns:
        ``DeconvolutionComparison(table, fits)``.
    """
    points, scalar = _checks.as_points("x", x)
    sigma = _checks.check_positive_scalar("sigma", sigma)
    methods = (methods,) if isinstance(methods, str) else tuple(methods)
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise ValueError(f"methods: unknown {unknown}; choose from {list(METHODS)}")
    if true_measure is not None:
        true_measure = check_measure("true_measure", true_measure)
        if (true_measure.atoms.ndim == 1) != scalar or (
            not scalar and true_measure.atoms.shape[1] != points.shape[1]
        ):
            raise ValueError(
                f"true_measure: atoms of shape {tuple(true_measure.atoms.shape)} do not match "
                f"x of shape {tuple(np.shape(x))}"
            )
    if "oracle" in methods and true_measure is None:
        raise ValueError("true_measure: required for the 'oracle' method")
    if z_true is not None:
        z_arr = _checks.as_float_array("z_true", z_true)
        if tuple(z_arr.shape) != tuple(np.shape(x)):
            raise ValueError(f"z_true: shape {tuple(z_arr.shape)} does not match x {np.shape(x)}")
        _checks.check_finite("z_true", z_arr)
        z_true = np.asarray(z_arr)
    if "nuts" in methods:
        if key is None:
            raise ValueError("key: a jax.random key is required for method 'nuts'")
        _checks.check_key("key", key)
    if num_atoms is None:
        num_atoms = int(true_measure.atoms.shape[0]) if true_measure is not None else 5
    num_atoms = _checks.check_positive_int("num_atoms", num_atoms)
    x_in = np.asarray(x)
    say = progress or (lambda message: None)

    fits: dict[str, MethodFit] = {}
    for method in methods:
        say(f"{method}: fitting")
        if method == "attention-em":
            fits[method] = _em_fit(x_in, sigma, {"max_iters": 500, **(em_kwargs or {})}, scalar)
        elif method == "nuts":
            fits[method] = _nuts_fit(x_in, sigma, key, num_atoms, nuts_kwargs or {}, scalar)
        else:
            fits[method] = _oracle_fit(x_in, sigma, true_measure, scalar)

    rows = []
    for method, fit in fits.items():
        rows.append((method, "wall_time_s", fit.seconds))
        if z_true is not None:
            rows.append(
                (
                    method,
                    "mse_z",
                    float(
                        np.mean(
                            np.sum(
                                np.reshape((fit.z_hat - z_true) ** 2, (points.shape[0], -1)), axis=1
                            )
                        )
                    ),
                )
            )
            for prob, cov in _coverage(fit.intervals, z_true).items():
                rows.append((method, f"coverage_{round(prob * 100)}", cov))
        if true_measure is not None and scalar and fit.measure is not None:
            rows.append(
                (
                    method,
                    "wasserstein1_nu",
                    wasserstein1(
                        fit.measure.atoms,
                        fit.measure.weights,
                        true_measure.atoms,
                        true_measure.weights,
                    ),
                )
            )
        if fit.datatree is None:
            ll = em.log_likelihood(x_in, fit.measure.atoms, fit.measure.weights, sigma)
            rows.append((method, "log_likelihood", float(ll)))
            if fit.log_likelihood_trace is not None:
                rows.append((method, "iterations", float(fit.log_likelihood_trace.size - 1)))
                rows.append((method, "converged", float(fit.converged)))
        else:
            post = fit.datatree["posterior"]
            rows.append((method, "log_likelihood", float(post["log_lik_total"].mean())))
            loo = az.loo(fit.datatree)
            rows.append((method, "elpd_loo", float(loo.elpd)))
            rows.append((method, "pareto_k_max", float(np.max(loo.pareto_k))))
            invariant = [v for v in ("z_mean", "nu_cdf", "log_lik_total") if v in post]
            diag = diagnostics(fit.datatree, var_names=invariant)
            rows.append((method, "max_rhat_invariant", diag.max_r_hat))
            rows.append((method, "min_ess_bulk_invariant", diag.min_ess_bulk))
            rows.append((method, "min_ess_tail_invariant", diag.min_ess_tail))
            rows.append((method, "divergences", float(diag.num_divergences)))
    table = pd.DataFrame(rows, columns=["method", "metric", "value"])
    return DeconvolutionComparison(table=table, fits=fits)


__all__ = [
    "METHODS",
    "DeconvolutionComparison",
    "MethodFit",
    "compare_deconvolution",
    "discrete_posterior_intervals",
    "wasserstein1",
]
