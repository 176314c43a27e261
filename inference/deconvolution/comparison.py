"""Run deconvolution methods side by side on one data set and tabulate how they differ.

Methods:
- ``"attention-em"``: the estimator of the note "Attention as deconvolution", K = N atoms started at
  the data, weights 1/N, iterated attention E-steps; z_hat is one more attention step (the EB
  posterior mean) and intervals come from the discrete posterior A_i. over the fitted atoms.
- ``"nuts"``: full-posterior NUTS on ``deconvolution_model`` (finite Dirichlet mixture, atoms
  ordered for scalar data); z_hat is the posterior mean of E[z_i | x_i, nu] and intervals are
  equal-tailed posterior intervals of z_i | x (nu integrated out).
- ``"npmle"``: the Kiefer-Wolfowitz NPMLE of nu on a fixed grid
  (``attnbayes.inference.deconvolution.kiefer_wolfowitz``), then the empirical-Bayes posterior under
  it (GMLEB); intervals from that discrete posterior.
- ``"nuts-dp"``: NUTS on the truncated stick-breaking Dirichlet-process mixture (Gamma prior
  on the concentration; K = ``num_atoms_dp`` sticks, atoms not ordered).
- ``"gibbs"``: the conjugate blocked Gibbs sampler on the finite Dirichlet mixture (same prior
  as "nuts"; ``attnbayes.inference.deconvolution.gibbs.run_gibbs``), summarised exactly like NUTS.
- ``"approx-gibbs"``: approximate Gibbs ("Attention as GPB2/IMM message passing", section 4.1),
  every draw replaced by its expectation (responsibilities, then means and weights) for K =
  ``num_atoms`` atoms started at spread data points, with the residual step ``step_size`` (1 = EM
  for the finite mixture).
- ``"james-stein"``: the positive-part James-Stein rule toward the grand mean (Efron-Morris;
  with per-unit sigma the heteroscedastic rule of ``shrinkage.james_stein``: one factor B in
  the whitened coordinates x_i / s_i, toward the precision-weighted mean m), with the normal
  empirical-Bayes posterior N(m + (1 - B)(x_i - m), (1 - B) s_i^2) for intervals and
  N(m, s_i^2 / B) (= N(m, tau_i^2 + s_i^2), tau_i^2 = s_i^2 (1 - B) / B) as predictive.
- ``"sure"``: Xie-Kou-Brown SURE-G shrinkage (``shrinkage.sure_shrinkage``): z_hat_i = xbar +
  (1 - b_i)(x_i - xbar), b_i = s_i^2 / (s_i^2 + A) with A minimising SURE; intervals and
  predictive from the normal prior N(xbar, A) it is the Bayes rule of (plug-in).
- ``"normal-eb"``: the normal hierarchical model theta_i ~ N(mu, tau^2) by marginal maximum
  likelihood (``shrinkage.normal_eb``); the plug-in posterior N(mu + (1 - b_i)(x_i - mu),
  (1 - b_i) s_i^2), b_i = s_i^2 / (s_i^2 + tau^2), for intervals, N(mu, tau^2 + s_i^2) as
  predictive. With p > 1 "sure" and "normal-eb" work coordinate by coordinate.
- ``"normal-nuts"``: the same normal hierarchical model (Rubin 1981; Gelman et al. 2013, BDA3
  section 5.5) with its hyperparameters integrated out by NUTS
  (``attnbayes.models.hierarchical.normal_hierarchical_model``), non-centred by default
  (Papaspiliopoulos, Roberts and Skold 2007)::

      mu ~ N(mu_loc, mu_scale^2),  tau ~ half-Cauchy(tau_scale),
      theta_t_i ~ N(0, 1),  theta_i = mu + tau theta_t_i,  x_i | theta_i ~ N(theta_i, s_i^2).

  Priors by default scaled to the data as NUTS's atoms are (mu_loc = mean x, mu_scale =
  tau_scale = 2 sd(x) + s, s the root mean square of the s_i); ``method_kwargs={"normal-nuts":
  {"mu_loc": 0.0, "mu_scale": 5.0, "tau_scale": 5.0}}`` gives the eight-schools priors of
  NumPyro's and PyMC's documentation, ``"centered": True`` the centred form. Summarised like
  the other samplers through per-draw quantities: z_mean_i^(s) = E[theta_i | x_i, mu_s, tau_s]
  = mu_s + (1 - b_is)(x_i - mu_s), b_is = s_i^2 / (s_i^2 + tau_s^2) (z_hat is their mean, a
  Rao-Blackwellised posterior mean), z_draw = theta^(s) (equal-tailed intervals), nu_cdf^(s)(t)
  = Phi((t - mu_s) / tau_s), and the marginal log-likelihood log N(x_i; mu_s, tau_s^2 + s_i^2)
  (theta_i integrated out, as the mixtures sum out their atoms; the DataTree's
  ``log_likelihood`` group holds it, so PSIS-LOO leaves one unit out of p(x | mu, tau)). The
  held-out predictive is log mean_s N(x_new; mu_s, tau_s^2 + s_new^2) and nu the equal-weight
  mixture of the drawn priors N(mu_s, tau_s^2) (``MethodFit.normal_prior``), against which
  ``wasserstein1_nu`` is computed exactly (``wasserstein1_normal_mixture``). The model is
  one-dimensional: with p > 1 coordinates it runs coordinate by coordinate, as "normal-eb"
  fits, one (mu_c, tau_c) per coordinate (independent priors and likelihoods, so the
  posterior factorises and the runs' draws side by side are joint draws; the log-likelihood
  and held-out density sum over coordinates). Its key is ``jax.random.fold_in(key,
  NORMAL_NUTS_KEY_FOLD)`` (the other samplers' keys are unchanged), coordinate c's (p > 1)
  ``jax.random.fold_in`` of that with c.
- ``"learned"``: the grid stack, version 2 of the learned empirical-Bayes estimator
  (``learned.grid_stack.grid_stack_fit``; parameters ``pretrained_grid_stack()`` unless
  ``method_kwargs={"learned": {"params": ..., "grid_size": ...}}``): z_hat its posterior mean,
  normal intervals z_hat -+ q sd from its posterior variance, and as nu (for
  ``wasserstein1_nu``, ``log_likelihood`` and ``heldout_lpd``) its effective prior
  discretised on its grid, ``GridStackFit.prior_weights`` on ``GridStackFit.grid`` (the normal
  part of that prior put on the grid; the posterior moments use it exactly). Scalar data only:
  x with p > 1 coordinates is refused by name before any method runs. The stack is looked up
  through the method registry (``Method.fit``, ``Method.load_pretrained``): the learned rooms
  sit above this module.
- ``"oracle"`` (when ``true_measure`` is given): the Bayes rule under the true measure, the
  floor that any estimator of nu is measured against.

Metrics (tidy table: method, metric, value): ``mse_z`` (mean over i of |z_hat_i - z_i|^2),
``coverage_50`` / ``coverage_90`` of intervals for z_i, ``wasserstein1_nu`` (1-D; for the
normal models "normal-eb" and "normal-nuts" between the true measure and the fitted normal
prior, or the mixture of the drawn ones), the ``log_likelihood`` (point estimates: at the
estimate; samplers: its posterior mean; James-Stein, SURE, normal EB and normal NUTS: under
their normal predictive), ``heldout_lpd`` (with ``x_heldout``: the mean over held-out points
of the log predictive density, log p(x_new | fit) for point estimates and log mean_s p(x_new |
theta_s) for samplers), ``wall_time_s`` (compilation included), for iterative fits their
``iterations`` and ``converged`` (1/0), and for the samplers (NUTS, Gibbs, normal NUTS)
``elpd_loo``, the largest Pareto k of PSIS-LOO (``pareto_k_max``; above 0.7 the LOO estimate
is unreliable), the worst R-hat and smallest bulk/tail ESS over permutation-invariant
quantities (z_mean, nu_cdf, log_lik_total), and divergences.

Sigma: a number, one scale per unit (N,), or (x (N, p)) one per unit and coordinate (N, p)
(``checks.check_sigma``); held-out points with per-unit sigma need their own ``sigma_heldout``.
The methods that fit a discrete nu (EM, NPMLE, NUTS, Gibbs, approximate Gibbs) and the oracle
use the per-unit likelihood N(x_i; mu_k, diag(s_i^2)).

Coverage is the share of (point, coordinate) pairs whose true z lies in the equal-tailed
interval (per coordinate in p-D). When nu is discrete and z_i sits exactly on an atom, a
discrete posterior (EM, oracle) covers conservatively (an atom-valued interval either holds
z_i exactly or misses it), so coverage above nominal is expected from the oracle.

Over 800 lines: ``compare_deconvolution`` and the private fit of each method it runs (point
estimates, intervals, held-out densities, posterior shapes); the table's columns are defined
here, so adding a method touches this file's fit, the registry and its tests only.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ... import validation
from ...models.deconvolution import DiscreteMeasure, check_measure, deconvolution_model, model_dims
from ...models.hierarchical import DIMS as HIERARCHICAL_DIMS
from ...models.hierarchical import normal_hierarchical_model
from .. import methods as registry
from ..diagnostics import diagnostics, psis_loo
from ..mcmc import NUTS_SETTINGS, check_sampler_sizes, run_nuts
from . import em
from .checks import check_sigma
from .estep import log_likelihood_unchecked, posterior_mean_unchecked, posterior_unchecked
from .gibbs import approximate_gibbs, run_gibbs
from .intervals import INTERVAL_PROBS, discrete_posterior_intervals
from .invariants import add_invariants
from .kiefer_wolfowitz import npmle
from .shrinkage import james_stein_unchecked, normal_eb_unchecked, sure_shrinkage_unchecked

if TYPE_CHECKING:  # ArviZ, pandas and xarray are imported where used
    import pandas as pd
    import xarray as xr

METHODS = registry.method_names("deconvolution")
SAMPLERS = tuple(m for m in METHODS if registry.get_method("deconvolution", m).needs_key)
INTERVAL_BLOCK_ELEMENTS = 2**22  # row blocks of the streamed plug-in intervals (32 MB float64)
# ``nuts_kwargs`` holds sampler settings and the model's keyword arguments together; run_nuts
# takes them apart (its keyword-only parameters are the sampler's settings)
_SAMPLER_SETTINGS = frozenset(NUTS_SETTINGS)
# "normal-nuts": the model's keyword arguments it takes (besides the sampler's settings), and
# the number its key is folded from (``jax.random.fold_in(key, NORMAL_NUTS_KEY_FOLD)``)
_NORMAL_NUTS_MODEL = ("mu_loc", "mu_scale", "tau_scale", "centered")
NORMAL_NUTS_KEY_FOLD = 35


class MethodFit(NamedTuple):
    """What one method estimated, in the data's shape convention.

    Attributes:
        z_hat: (N,) or (N, p) point estimates of z_i.
        intervals: {prob: (lower, upper)} equal-tailed intervals for z_i, each like z_hat.
        measure: the estimated nu as a DiscreteMeasure (NUTS: the posterior mean measure,
            all draws' atoms pooled with weights w / S), or None.
        seconds: wall time of the method, compilation included.
        datatree: the MCMC DataTree (NUTS) with invariants in its posterior, else None.
        log_likelihood_trace: an iterative fit's log-likelihood per iteration, else None.
        converged: whether an iterative fit met its tolerance (EM, NPMLE, approx-Gibbs).
        log_likelihood: log p(x) at the estimate (samplers: the posterior mean of it).
        heldout_lpd: mean log predictive density of the held-out points, when given.
        hyperparameters: the fitted hyperparameters of the normal-prior rules ("james-stein",
            "sure", "normal-eb": their ``shrinkage`` result's location, prior_variance, ...,
            as NumPy arrays), else None.
        normal_prior: for the normal hierarchical model of scalar data, (locations (S,),
            scales (S,)) of the normal priors N(mu_s, tau_s^2) whose equal-weight mixture is
            the estimated nu ("normal-eb": its one fitted prior, S = 1; "normal-nuts": the
            posterior draws), else None.
    """

    z_hat: np.ndarray
    intervals: dict
    measure: DiscreteMeasure | None
    seconds: float
    datatree: xr.DataTree | None = None
    log_likelihood_trace: np.ndarray | None = None
    converged: bool | None = None
    log_likelihood: float | None = None
    heldout_lpd: float | None = None
    hyperparameters: dict | None = None
    normal_prior: tuple[np.ndarray, np.ndarray] | None = None


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


def wasserstein1_normal_mixture(locations, scales, atoms, weights) -> float:
    """W1 between the equal-weight mixture of normals (1/S) sum_s N(m_s, t_s^2) and a discrete
    measure on the line, integral |F(t) - G(t)| dt, in closed form.

    F(t) = mean_s Phi((t - m_s) / t_s) has the antiderivative H(t) = mean_s [(t - m_s)
    Phi(z_s) + t_s phi(z_s)], z_s = (t - m_s) / t_s (t_s = 0: a point mass, H = mean_s (t -
    m_s)_+). Between two neighbouring atoms G is a constant c and F - c, increasing, changes
    sign at most once, at t* = F^{-1}(c) (bisection); each side is then H's difference minus
    c times the length. Below the first atom the integral is H(a_1), above the last
    mean_s [t_s phi(z_s) - (a_K - m_s)(1 - Phi(z_s))].
    """
    from scipy.special import ndtr

    m = np.asarray(locations, np.float64).ravel()
    t = np.asarray(scales, np.float64).ravel()
    a = np.asarray(atoms, np.float64).ravel()
    order = np.argsort(a, kind="stable")
    a, w = a[order], np.asarray(weights, np.float64).ravel()[order]
    tiny = np.finfo(np.float64).tiny

    def zs(u):
        return (u - m) / np.maximum(t, tiny)

    def cdf(u):
        return float(np.mean(ndtr(zs(u))))

    def anti(u):  # H(u)
        z = zs(u)
        return float(np.mean((u - m) * ndtr(z) + t * np.exp(-0.5 * z**2) / np.sqrt(2 * np.pi)))

    with np.errstate(over="ignore", divide="ignore"):  # t_s = 0: z_s = +-inf, phi(z_s) = 0
        return _w1_normal_pieces(a, w, anti, cdf, zs, m, t)


def _w1_normal_pieces(a, w, anti, cdf, zs, m, t) -> float:
    """The sum of ``wasserstein1_normal_mixture``: the two tails, then each gap between atoms
    split at the root of F = G."""
    from scipy.special import ndtr

    total = anti(a[0])
    z = zs(a[-1])
    total += float(np.mean(t * np.exp(-0.5 * z**2) / np.sqrt(2 * np.pi) - (a[-1] - m) * ndtr(-z)))
    level = np.cumsum(w)
    for j in range(len(a) - 1):
        lo, hi, c = a[j], a[j + 1], level[j]
        if hi <= lo:
            continue
        if cdf(lo) >= c:
            root = lo
        elif cdf(hi) <= c:
            root = hi
        else:
            left, right = lo, hi
            for _ in range(200):
                mid = 0.5 * (left + right)
                if mid in (left, right):
                    break
                left, right = (mid, right) if cdf(mid) < c else (left, mid)
            root = 0.5 * (left + right)
        below = c * (root - lo) - (anti(root) - anti(lo))
        above = (anti(hi) - anti(root)) - c * (hi - root)
        total += abs(below) + abs(above)
    return float(total)


def _coverage(intervals, z_true) -> dict:
    return {
        prob: float(np.mean((lo <= z_true) & (z_true <= hi)))
        for prob, (lo, hi) in intervals.items()
    }


def _kernel_inputs(x, measure, sigma):
    """(x (N, p), atoms (K, p), weights (K,), sigma) as arrays of x's dtype, for the kernels.

    The comparison validates x and sigma once (``em.check_problem``) and its measures come from
    fits, so the unchecked kernels of ``estep`` run here, not the public functions of ``em``,
    which would check the same values again.
    """
    points, _ = validation.as_points("x", x)  # (N, p) in a float dtype; no value checks
    dtype = jax.dtypes.canonicalize_dtype(points.dtype)
    xs = jnp.asarray(points, dtype)
    atoms = jnp.asarray(np.asarray(measure.atoms).reshape(len(measure.atoms), -1), dtype)
    return xs, atoms, jnp.asarray(measure.weights, dtype), jnp.asarray(sigma, dtype)


def _discrete_posterior(x, sigma, measure, scalar, block_size=None):
    """z_hat (one attention step) and intervals under nu = measure, in x's convention.

    With ``block_size`` the N x K responsibilities are never held at once: z_hat is streamed
    (as ``em.posterior_mean`` streams it) and the intervals are computed on row blocks of about
    ``INTERVAL_BLOCK_ELEMENTS`` entries.
    """
    xs, mus, ws, s = _kernel_inputs(x, measure, sigma)
    atoms = np.asarray(mus)
    if block_size is None:
        z_hat, resp = posterior_unchecked(xs, mus, ws, s)
        pieces = [discrete_posterior_intervals(resp, atoms)]
    else:
        z_hat = posterior_mean_unchecked(xs, mus, ws, s, block_size)
        rows = max(1, INTERVAL_BLOCK_ELEMENTS // atoms.shape[0])
        pieces = [
            discrete_posterior_intervals(
                posterior_unchecked(xs[i : i + rows], mus, ws, s)[1], atoms
            )
            for i in range(0, len(xs), rows)
        ]
    intervals = {
        prob: tuple(
            validation.restore_shape(
                np.concatenate([piece[prob][side] for piece in pieces]), scalar
            )
            for side in (0, 1)
        )
        for prob in pieces[0]
    }
    return np.asarray(validation.restore_shape(z_hat, scalar)), intervals


@jax.jit
def _point_log_density(x, atoms, weights, sigma):
    """(N,) log sum_k w_k N(x_i; mu_k, diag(s_i^2)) for x (N, p), atoms (K, p) and sigma a
    number or row scales (N, 1) / (N, p)."""
    log_w = jnp.log(weights)  # -inf for an empty atom: dropped by the logsumexp
    p = x.shape[1]
    if jnp.ndim(sigma) == 0:
        sq = jnp.sum((x[:, None, :] - atoms[None, :, :]) ** 2, axis=-1)
        log_dens = -0.5 * sq / sigma**2 - 0.5 * p * jnp.log(2.0 * jnp.pi * sigma**2)
    else:
        s = jnp.broadcast_to(sigma, x.shape)
        sq = jnp.sum(((x[:, None, :] - atoms[None, :, :]) / s[:, None, :]) ** 2, axis=-1)
        log_dens = -0.5 * sq - jnp.sum(jnp.log(2.0 * jnp.pi * s**2), axis=1)[:, None] / 2
    return jax.scipy.special.logsumexp(log_dens + log_w[None, :], axis=1)


@jax.jit
def _mixture_lpd(x, atoms, weights, sigma):
    """(N,) log mean_s p(x_i | nu_s) over draws nu_s = (atoms (S, K, p), weights (S, K))."""
    per_draw = jax.lax.map(
        lambda aw: _point_log_density(x, aw[0], aw[1], sigma), (atoms, weights), batch_size=64
    )
    return jax.scipy.special.logsumexp(per_draw, axis=0) - jnp.log(atoms.shape[0])


def _heldout_lpd(x_heldout, measure: DiscreteMeasure, sigma) -> float | None:
    """Mean log density of the held-out points (or None) under the measure; ``sigma`` a
    number or their row scales (M, 1) / (M, p)."""
    if x_heldout is None:
        return None
    points = np.asarray(x_heldout, np.float64).reshape(len(x_heldout), -1)
    atoms = np.asarray(measure.atoms, np.float64).reshape(measure.atoms.shape[0], -1)
    weights = np.asarray(measure.weights, np.float64)
    return float(np.mean(_point_log_density(points, atoms, weights, sigma)))


def _point_fit(x, rows, measure, scalar, heldout, start, block_size=None, **extra) -> MethodFit:
    """A fit that ends in one discrete measure: its EB posterior, log-likelihood, held-out lpd.

    ``rows``: sigma as the kernels take it (a number, or row scales (N, 1) / (N, p))."""
    z_hat, intervals = _discrete_posterior(x, rows, measure, scalar, block_size)
    ll = float(log_likelihood_unchecked(*_kernel_inputs(x, measure, rows), block_size=block_size))
    return MethodFit(
        z_hat=z_hat,
        intervals=intervals,
        measure=measure,
        seconds=time.perf_counter() - start,
        log_likelihood=ll,
        heldout_lpd=None if heldout is None else _heldout_lpd(heldout.x, measure, heldout.sigma),
        **extra,
    )


class _Heldout(NamedTuple):
    """Held-out points (M, p) (float64) and their sigma as row scales (a number, (M, 1) or
    (M, p))."""

    x: np.ndarray
    sigma: float | np.ndarray


class _Problem(NamedTuple):
    """What every method of the comparison sees (checked arrays and settings).

    ``sigma`` is the user's form (a float, or an (N,) or (N, p) array), which the public fits
    (``fit_em``, ``npmle``, the samplers) take; ``rows`` the kernels' form (the float, or row
    scales (N, 1) / (N, p))."""

    x: np.ndarray
    sigma: float | np.ndarray
    rows: float | np.ndarray
    scalar: bool
    heldout: _Heldout | None
    true_measure: DiscreteMeasure | None
    num_atoms: int
    num_atoms_dp: int


def _em_fit(p: _Problem, em_kwargs) -> MethodFit:
    start = time.perf_counter()
    fit = em.fit_em(p.x, p.sigma, **em_kwargs)
    measure = DiscreteMeasure(np.asarray(fit.atoms), np.asarray(fit.weights))
    return _point_fit(
        p.x,
        p.rows,
        measure,
        p.scalar,
        p.heldout,
        start,
        block_size=em_kwargs.get("block_size"),
        # the trace has the fixed length max_iters + 1 (NaN after num_iters): keep the run's part
        log_likelihood_trace=np.asarray(fit.log_likelihood_trace)[: int(fit.num_iters) + 1],
        converged=bool(fit.converged),
    )


def _npmle_fit(p: _Problem, kwargs) -> MethodFit:
    start = time.perf_counter()
    fit = npmle(p.x, p.sigma, **kwargs)
    keep = np.asarray(fit.weights) > 0
    atoms = np.asarray(fit.atoms)[keep]
    weights = np.asarray(fit.weights)[keep]
    measure = DiscreteMeasure(atoms, weights / weights.sum())
    return _point_fit(
        p.x, p.rows, measure, p.scalar, p.heldout, start, converged=bool(fit.converged)
    )


def _approx_gibbs_fit(p: _Problem, kwargs) -> MethodFit:
    start = time.perf_counter()
    settings = dict(kwargs)
    atoms0 = em.initial_atoms(p.x, p.num_atoms)
    weights0 = np.full(p.num_atoms, 1.0 / p.num_atoms)
    trace = approximate_gibbs(p.x, p.sigma, atoms0, weights0, **settings)
    lls = np.asarray(trace.log_likelihood)
    if trace.diverged:
        raise RuntimeError(
            f"approx-gibbs: diverged at iteration {trace.first_nonfinite} with step_size "
            f"{settings['step_size']} (see relaxation_stability)"
        )
    measure = DiscreteMeasure(np.asarray(trace.atoms[-1]), np.asarray(trace.weights[-1]))
    converged = bool(abs(lls[-1] - lls[-2]) <= 1e-8 * len(p.x))
    return _point_fit(
        p.x,
        p.rows,
        measure,
        p.scalar,
        p.heldout,
        start,
        log_likelihood_trace=lls,
        converged=converged,
    )


def _normal_rule_fit(p: _Problem, method: str, start) -> MethodFit:
    """A rule with a normal prior per coordinate ("james-stein", "sure", "normal-eb"): z_hat,
    normal plug-in intervals z_hat +- q sd, and the normal predictive N(m_c, v_ic) for the
    log-likelihood and held-out lpd (v = s^2 / B for James-Stein, A_c + s^2 otherwise)."""
    pts = np.asarray(p.x, np.float64).reshape(len(p.x), -1)
    rows = np.broadcast_to(np.asarray(p.rows, np.float64), pts.shape)
    xs, ss = jnp.asarray(pts), jnp.asarray(rows)
    if method == "james-stein":
        fit = james_stein_unchecked(xs, ss)
        shrink = float(np.asarray(fit.shrinkage)[0, 0])

        def predictive_var(s):
            return s**2 / shrink

    else:
        fit = sure_shrinkage_unchecked(xs, ss) if method == "sure" else normal_eb_unchecked(xs, ss)
        prior_var = np.asarray(fit.prior_variance, np.float64)

        def predictive_var(s):
            return prior_var + s**2

    post_mean = np.asarray(fit.z_hat, np.float64)
    post_sd = np.asarray(fit.posterior_sd, np.float64)
    centre = np.asarray(fit.location, np.float64)
    z = {prob: _normal_quantile((1 + prob) / 2) for prob in INTERVAL_PROBS}
    intervals = {
        prob: (
            np.asarray(validation.restore_shape(post_mean - z[prob] * post_sd, p.scalar)),
            np.asarray(validation.restore_shape(post_mean + z[prob] * post_sd, p.scalar)),
        )
        for prob in INTERVAL_PROBS
    }

    def gaussian_ll(points, s):
        var = np.broadcast_to(predictive_var(s), points.shape)
        return float(np.sum(-0.5 * (points - centre) ** 2 / var - 0.5 * np.log(2 * np.pi * var)))

    heldout = None
    if p.heldout is not None:
        held_s = np.broadcast_to(np.asarray(p.heldout.sigma, np.float64), p.heldout.x.shape)
        heldout = gaussian_ll(p.heldout.x, held_s) / p.heldout.x.shape[0]
    hyper = {  # per unit: like x; per coordinate: () for scalar data, else (p,)
        name: validation.restore_shape(value, p.scalar)
        if value.ndim == 2
        else (value[0] if p.scalar and value.ndim == 1 else value)
        for name, value in ((k, np.asarray(v)) for k, v in fit._asdict().items())
        if name not in ("z_hat", "posterior_sd")
    }
    normal_prior = None
    if method == "normal-eb" and p.scalar:  # nu = N(mu, tau^2), for wasserstein1_nu
        normal_prior = (centre.reshape(-1), np.sqrt(prior_var).reshape(-1))
    return MethodFit(
        z_hat=np.asarray(validation.restore_shape(post_mean, p.scalar)),
        intervals=intervals,
        measure=None,
        seconds=time.perf_counter() - start,
        log_likelihood=gaussian_ll(pts, rows),
        heldout_lpd=heldout,
        hyperparameters=hyper,
        normal_prior=normal_prior,
    )


def _normal_quantile(q: float) -> float:
    """Standard normal quantile, on the host (no JAX compile for a scalar)."""
    return statistics.NormalDist().inv_cdf(q)


def _prior_settings(x_np, sigma, scalar) -> dict:
    """The atoms' prior shared by NUTS and Gibbs: centred at the data, scale 2 sd(x) + sigma
    (per-unit sigma: its root mean square).

    Arrays (0-d for scalar data), not Python floats: ``run_nuts`` compiles Python numbers into
    its program, so new data would compile again; arrays are arguments of one program.
    """
    scale = sigma if np.ndim(sigma) == 0 else float(np.sqrt(np.mean(np.square(sigma))))
    return dict(
        atom_loc=np.asarray(np.mean(x_np, axis=0) if not scalar else np.mean(x_np)),
        atom_scale=np.asarray(2.0 * np.std(x_np) + scale),
    )


def _sampler_fit(p: _Problem, datatree, key_inv, start) -> MethodFit:
    """Summaries of an MCMC DataTree (NUTS or Gibbs) through permutation-invariant quantities."""
    datatree = add_invariants(key_inv, datatree, np.asarray(p.x), p.sigma)
    post = datatree["posterior"]
    z_hat = np.asarray(post["z_mean"].mean(("chain", "draw")))
    z_draw = post["z_draw"].transpose("chain", "draw", ...).values
    z_draw = z_draw.reshape(-1, *z_draw.shape[2:])  # (draws, N[, p])
    # every interval end in one pass over the draws (xarray's quantile skips NaN lane by lane)
    ends = np.quantile(z_draw, [q for p in INTERVAL_PROBS for q in ((1 - p) / 2, (1 + p) / 2)], 0)
    intervals = {prob: (ends[2 * i], ends[2 * i + 1]) for i, prob in enumerate(INTERVAL_PROBS)}
    num_atoms = post["atoms"].shape[2]
    atoms = np.asarray(post["atoms"]).reshape(-1, num_atoms, *post["atoms"].shape[3:])
    weights = np.asarray(post["weights"]).reshape(-1, num_atoms)
    pooled = DiscreteMeasure(
        atoms.reshape(-1, *atoms.shape[2:]), weights.reshape(-1) / weights.shape[0]
    )
    heldout = None
    if p.heldout is not None:
        draws = atoms.reshape(*atoms.shape[:2], -1)
        heldout = float(np.mean(_mixture_lpd(p.heldout.x, draws, weights, p.heldout.sigma)))
    return MethodFit(
        z_hat=z_hat,
        intervals=intervals,
        measure=pooled,
        seconds=time.perf_counter() - start,
        datatree=datatree,
        log_likelihood=float(post["log_lik_total"].mean()),
        heldout_lpd=heldout,
    )


def _nuts_fit(p: _Problem, key, num_atoms, nuts_kwargs, prior) -> MethodFit:
    x_np = np.asarray(p.x)
    settings = dict(
        prior=prior,
        ordered=p.scalar and prior != "dp",
        **_prior_settings(x_np, p.sigma, p.scalar),
    )
    settings.update(nuts_kwargs)
    key_nuts, key_inv = jax.random.split(key)
    start = time.perf_counter()
    sampler = {k: v for k, v in settings.items() if k in _SAMPLER_SETTINGS}
    model_kwargs = {k: v for k, v in settings.items() if k not in _SAMPLER_SETTINGS}
    datatree = run_nuts(
        key_nuts,
        deconvolution_model,
        (jnp.asarray(x_np),),
        dict(sigma=p.sigma, num_atoms=num_atoms, **model_kwargs),
        dims=model_dims(p.scalar, prior=settings["prior"]),
        **sampler,
    )
    return _sampler_fit(p, datatree, key_inv, start)


def _gibbs_fit(p: _Problem, key, gibbs_kwargs) -> MethodFit:
    x_np = np.asarray(p.x)
    settings = dict(
        ordered=p.scalar,
        **_prior_settings(x_np, p.sigma, p.scalar),
    )
    settings.update(gibbs_kwargs)
    key_gibbs, key_inv = jax.random.split(key)
    start = time.perf_counter()
    datatree = run_gibbs(key_gibbs, x_np, p.sigma, num_atoms=p.num_atoms, **settings)
    return _sampler_fit(p, datatree, key_inv, start)


def _normal_nuts_settings(opts: dict) -> dict:
    """The "normal-nuts" settings checked before any method runs: only the sampler's settings
    and the model's mu_loc, mu_scale, tau_scale and centered, their values in range. The
    data-scaled priors fill in what is not given (``_normal_nuts_fit``)."""
    where = "method_kwargs['normal-nuts']"
    known = set(_SAMPLER_SETTINGS) | set(_NORMAL_NUTS_MODEL)
    unknown = sorted(set(opts) - known)
    if unknown:
        raise ValueError(
            f"{where}: unknown settings {unknown}; it takes run_nuts's settings and the model's "
            f"{list(_NORMAL_NUTS_MODEL)}"
        )
    for name in ("mu_scale", "tau_scale"):
        if name in opts:
            validation.check_positive_scalar(f"{where}['{name}']", opts[name])
    if "mu_loc" in opts:
        value = validation.check_real_scalar(f"{where}['mu_loc']", opts["mu_loc"], "a number")
        validation.check_finite(f"{where}['mu_loc']", value)
    if "centered" in opts:
        validation.check_flag(f"{where}['centered']", opts["centered"])
    return dict(opts)


def _normal_nuts_coordinate(key, x, s, opts):
    """NUTS on the normal hierarchical model for one coordinate: x, s (N,) -> its DataTree and
    the draws mu, tau (chain, draw), theta (chain, draw, N)."""
    scale = 2.0 * float(np.std(x)) + float(np.sqrt(np.mean(s**2)))
    # 0-d arrays, not Python floats: arguments of one compiled program (``_prior_settings``)
    model = {"mu_loc": np.mean(x), "mu_scale": scale, "tau_scale": scale}
    model.update({k: v for k, v in opts.items() if k in _NORMAL_NUTS_MODEL})
    model = {k: (v if k == "centered" else np.asarray(v, np.float64)) for k, v in model.items()}
    sampler = {k: v for k, v in opts.items() if k in _SAMPLER_SETTINGS}
    # sigma: a number when every unit shares it (one program for any value), else (N,)
    sigma = np.asarray(s[0]) if np.all(s == s[0]) else np.array(s)
    datatree = run_nuts(
        key,
        normal_hierarchical_model,
        (jnp.asarray(x),),
        dict(sigma=sigma, **model),
        dims=HIERARCHICAL_DIMS,
        **sampler,
    )
    post = datatree["posterior"]
    return (
        datatree,
        np.asarray(post["mu"], np.float64),
        np.asarray(post["tau"], np.float64),
        np.asarray(post["theta"].transpose("chain", "draw", "unit"), np.float64),
    )


def _normal_nuts_fit(p: _Problem, key, opts) -> MethodFit:
    """NUTS on the normal hierarchical model (module docstring, "normal-nuts"), one run per
    coordinate as "normal-eb" fits one prior per coordinate (p > 1: coordinate c runs with
    ``jax.random.fold_in(key, c)``; the posterior factorises over coordinates, so the runs'
    draws side by side are draws of the joint posterior), summarised through its per-draw
    quantities z_mean, z_draw, nu_cdf (scalar data) and log_lik_total."""
    import xarray as xr
    from scipy.special import logsumexp, ndtr

    pts = np.asarray(p.x, np.float64).reshape(len(p.x), -1)  # (N, p)
    rows = np.broadcast_to(np.asarray(p.rows, np.float64), pts.shape)
    num_coords = pts.shape[1]
    start = time.perf_counter()
    runs = [
        _normal_nuts_coordinate(
            key if num_coords == 1 else jax.random.fold_in(key, c), pts[:, c], rows[:, c], opts
        )
        for c in range(num_coords)
    ]
    mu = np.stack([r[1] for r in runs], -1)  # (chain, draw, p)
    tau = np.stack([r[2] for r in runs], -1)
    theta = np.stack([r[3] for r in runs], -1)  # (chain, draw, N, p)
    var = tau[:, :, None, :] ** 2 + rows**2  # the marginal variance of x_ic
    centre = mu[:, :, None, :]
    z_mean = centre + (tau[:, :, None, :] ** 2 / var) * (pts - centre)
    # log p(x_i | mu, tau) = sum_c log N(x_ic; mu_c, tau_c^2 + s_ic^2), theta integrated out
    pointwise = np.sum(-0.5 * (pts - centre) ** 2 / var - 0.5 * np.log(2 * np.pi * var), -1)

    dims = ["chain", "draw"]
    zdims = [*dims, "unit"] + ([] if p.scalar else ["coord"])
    like_draws = theta.shape[:2] + np.shape(p.x)
    extra = {
        "z_mean": (zdims, z_mean.reshape(like_draws)),
        "z_draw": (zdims, theta.reshape(like_draws)),
        "log_lik_total": (dims, pointwise.sum(-1)),
    }
    base = runs[0][0]
    post = base["posterior"].to_dataset()
    coords = {"chain": post["chain"].values, "draw": post["draw"].values}
    if p.scalar:
        reach = 3.0 * float(np.max(rows))
        grid = np.linspace(pts.min() - reach, pts.max() + reach, 101)
        tiny = np.finfo(np.float64).tiny
        cdf = ndtr((grid - mu[..., :1]) / np.maximum(tau[..., :1], tiny))
        extra["nu_cdf"] = ([*dims, "cdf_point"], cdf)
        coords["cdf_point"] = grid
    datatree = base.copy()
    if num_coords > 1:  # each group's variables gain a "coord" dimension
        for group in base.children:
            if group != "log_likelihood":
                parts = [run[0][group].to_dataset() for run in runs]
                datatree[group] = xr.DataTree(xr.concat(parts, dim="coord"))
        post = datatree["posterior"].to_dataset()
    merged = xr.merge([post, xr.Dataset(extra, coords=coords)], compat="override", join="outer")
    merged.attrs = post.attrs
    datatree["posterior"] = xr.DataTree(merged)
    log_lik = xr.Dataset({"x": ([*dims, "unit"], pointwise)}, coords=coords)
    if "log_likelihood" in base.children:
        log_lik.attrs = base["log_likelihood"].attrs
    datatree["log_likelihood"] = xr.DataTree(log_lik)

    draws = theta.reshape(-1, *np.shape(p.x))
    ends = np.quantile(draws, [q for p_ in INTERVAL_PROBS for q in ((1 - p_) / 2, (1 + p_) / 2)], 0)
    intervals = {prob: (ends[2 * i], ends[2 * i + 1]) for i, prob in enumerate(INTERVAL_PROBS)}
    heldout = None
    if p.heldout is not None:  # log mean_s prod_c N(x_new,c; mu_sc, tau_sc^2 + s_new,c^2)
        held = p.heldout.x  # (M, p)
        held_s = np.broadcast_to(np.asarray(p.heldout.sigma, np.float64), held.shape)
        flat_mu = mu.reshape(-1, 1, num_coords)
        hvar = tau.reshape(-1, 1, num_coords) ** 2 + held_s**2  # (S, M, p)
        dens = np.sum(-0.5 * (held - flat_mu) ** 2 / hvar - 0.5 * np.log(2 * np.pi * hvar), -1)
        heldout = float(np.mean(logsumexp(dens, axis=0) - np.log(dens.shape[0])))
    return MethodFit(
        z_hat=z_mean.reshape(-1, *np.shape(p.x)).mean(0),
        intervals=intervals,
        measure=None,
        seconds=time.perf_counter() - start,
        datatree=datatree,
        log_likelihood=float(pointwise.sum(-1).mean()),
        heldout_lpd=heldout,
        normal_prior=(mu[..., 0].reshape(-1), tau[..., 0].reshape(-1)) if p.scalar else None,
    )


def _run_em(p: _Problem, key, opts) -> MethodFit:
    return _em_fit(p, opts)


def _run_npmle(p: _Problem, key, opts) -> MethodFit:
    return _npmle_fit(p, opts)


def _run_nuts(p: _Problem, key, opts) -> MethodFit:
    prior = opts.pop("prior")
    return _nuts_fit(p, key, p.num_atoms, opts, prior)


def _run_nuts_dp(p: _Problem, key, opts) -> MethodFit:
    prior = opts.pop("prior")
    return _nuts_fit(p, key, p.num_atoms_dp, opts, prior)


def _run_gibbs(p: _Problem, key, opts) -> MethodFit:
    return _gibbs_fit(p, key, opts)


def _run_approx_gibbs(p: _Problem, key, opts) -> MethodFit:
    return _approx_gibbs_fit(p, opts)


def _run_james_stein(p: _Problem, key, opts) -> MethodFit:
    return _normal_rule_fit(p, "james-stein", time.perf_counter())


def _run_sure(p: _Problem, key, opts) -> MethodFit:
    return _normal_rule_fit(p, "sure", time.perf_counter())


def _run_normal_eb(p: _Problem, key, opts) -> MethodFit:
    return _normal_rule_fit(p, "normal-eb", time.perf_counter())


def _run_normal_nuts(p: _Problem, key, opts) -> MethodFit:
    return _normal_nuts_fit(p, key, opts)


def _run_learned(p: _Problem, key, opts) -> MethodFit:
    return _learned_fit(p, opts)


def _learned_fit(p: _Problem, opts) -> MethodFit:
    """The grid stack on (x, sigma): z_hat its posterior mean, normal intervals from its
    posterior variance, nu its effective prior on the grid (atoms of weight 0 dropped)."""
    start = time.perf_counter()
    stack = registry.get_method("deconvolution", "learned").fit
    sigma = p.sigma if np.ndim(p.rows) == 0 else np.reshape(np.asarray(p.rows, np.float64), -1)
    try:
        fit = stack(opts["params"], p.x, sigma, grid_size=opts["grid_size"])
    except ValueError as err:  # the library names its own arguments
        message = str(err)
        if message.startswith("params"):
            raise ValueError(f"method_kwargs['learned']['params']{message[6:]}") from None
        raise
    mean = np.asarray(fit.mean, np.float64)
    sd = np.sqrt(np.asarray(fit.variance, np.float64))
    intervals = {}
    for prob in INTERVAL_PROBS:
        q = _normal_quantile((1 + prob) / 2)
        intervals[prob] = (mean - q * sd, mean + q * sd)
    weights = np.asarray(fit.prior_weights, np.float64)
    keep = weights > 0
    atoms = np.asarray(fit.grid, np.float64)[keep]
    measure = DiscreteMeasure(
        atoms if p.scalar else atoms[:, None], weights[keep] / weights[keep].sum()
    )
    ll = float(log_likelihood_unchecked(*_kernel_inputs(p.x, measure, p.rows)))
    heldout = None if p.heldout is None else _heldout_lpd(p.heldout.x, measure, p.heldout.sigma)
    return MethodFit(
        z_hat=mean,
        intervals=intervals,
        measure=measure,
        seconds=time.perf_counter() - start,
        log_likelihood=ll,
        heldout_lpd=heldout,
        hyperparameters={
            "normal_location": float(fit.normal_location),
            "normal_variance": float(fit.normal_variance),
        },
    )


def _learned_settings(opts: dict, points: np.ndarray) -> dict:
    """The "learned" method's settings checked before any method runs: only ``params`` and
    ``grid_size``, scalar data with a spread, and the shipped stack when no ``params``."""
    unknown = sorted(set(opts) - {"params", "grid_size"})
    if unknown:
        raise ValueError(
            f"method_kwargs['learned']: unknown settings {unknown}; it takes params and grid_size"
        )
    if points.shape[1] != 1:
        raise ValueError(
            f"x: the grid stack ('learned') is for scalar data (p = 1), got p = "
            f"{points.shape[1]} coordinates per point; for p-dimensional data use attention-em "
            "or npmle"
        )
    if points.shape[0] < 2:
        raise ValueError(
            f"x: the grid stack ('learned') needs at least two points, got {points.shape[0]}"
        )
    if np.ptp(np.asarray(points, np.float64)) == 0:
        raise ValueError("x: all points are equal; the grid stack ('learned') needs a spread")
    opts = dict(opts)
    opts["grid_size"] = validation.check_positive_int(
        "method_kwargs['learned']['grid_size']", opts["grid_size"], minimum=2
    )
    if opts.get("params") is None:
        opts["params"] = registry.get_method("deconvolution", "learned").load_pretrained()
    return opts


def _run_oracle(p: _Problem, key, opts) -> MethodFit:
    start = time.perf_counter()
    return _point_fit(p.x, p.rows, p.true_measure, p.scalar, p.heldout, start)


# each registered method's runner: (problem, key or None, settings) -> MethodFit
_RUNNERS = {
    "attention-em": _run_em,
    "npmle": _run_npmle,
    "nuts": _run_nuts,
    "nuts-dp": _run_nuts_dp,
    "gibbs": _run_gibbs,
    "approx-gibbs": _run_approx_gibbs,
    "james-stein": _run_james_stein,
    "sure": _run_sure,
    "normal-eb": _run_normal_eb,
    "normal-nuts": _run_normal_nuts,
    "learned": _run_learned,
    "oracle": _run_oracle,
}
assert tuple(_RUNNERS) == METHODS, "every registered deconvolution method has a runner"


# ----------------------------------------------------------------------------- public API


def compare_deconvolution(
    key: jax.Array | None,
    x,
    sigma,
    *,
    z_true=None,
    true_measure: DiscreteMeasure | None = None,
    x_heldout=None,
    sigma_heldout=None,
    methods=("attention-em", "nuts"),
    num_atoms: int | None = None,
    num_atoms_dp: int = 20,
    em_kwargs: dict | None = None,
    nuts_kwargs: dict | None = None,
    method_kwargs: dict[str, dict] | None = None,
    progress: Callable[[str], None] | None = None,
) -> DeconvolutionComparison:
    """Run ``methods`` on the same data; return a tidy table and each method's fit.

    Args:
        key: ``jax.random`` key, first and positional; required for the samplers ("nuts",
            "nuts-dp", "gibbs", "normal-nuts"), ``None`` allowed when every method is deterministic.
        x: (N,) or (N, p) observations.
        sigma: known noise scale(s): a number, one per observation (N,), or one per
            observation and coordinate (N, p) (x (N, p) only).
        z_true: the latent z (same shape as x) when known (simulations): enables mse_z and
            coverage.
        true_measure: the true nu when known: enables ``wasserstein1_nu`` and the oracle.
        x_heldout: held-out observations (M,) or (M, p) from the same distribution: enables
            ``heldout_lpd``.
        sigma_heldout: the held-out points' noise scale(s), in the forms of ``sigma`` ((M,) or
            (M, p) per point); default ``sigma`` when that is a number (required when sigma is
            per unit).
        methods: any of ``METHODS``; "oracle" needs ``true_measure``.
        num_atoms: K for NUTS, Gibbs and approx-Gibbs; default the true number of atoms if
            known, else 5.
        num_atoms_dp: truncation level of the DP prior ("nuts-dp").
        em_kwargs: passed to ``fit_em`` (default: K = N atoms started at the data, and the
            registry's ``max_iters=500``).
        nuts_kwargs: ``run_nuts``'s sampler settings (num_warmup, num_samples,
            target_accept_prob, ...) and the model's keyword arguments (prior, atom_loc,
            atom_scale, ...), told apart by name; its sampler sizes (num_warmup, num_samples,
            num_chains) also apply to "nuts-dp" and "normal-nuts".
            Defaults: the method registry's (``attnbayes.inference.methods``): NUTS 2 chains
            x (500 warmup + 500 draws); Gibbs sweeps are cheap but mix about 4x worse per draw
            than NUTS here, so "gibbs" runs 4 chains x (1000 warmup + 2000 draws).
        method_kwargs: per-method keyword arguments, e.g. ``{"npmle": {"grid_size": 500},
            "approx-gibbs": {"step_size": 1.5}, "gibbs": {...}, "nuts-dp": {...}, "learned":
            {"params": GridStackParams, "grid_size": 128}, "normal-nuts": {"tau_scale": 5.0,
            "num_samples": 1000, ...}}``; they override ``em_kwargs`` / ``nuts_kwargs``.
        progress: called with a short message before each method (e.g. ``print``).

    Returns:
        ``DeconvolutionComparison(table, fits)``.
    """
    em.check_problem(x, sigma)  # once: the data, sigma's range, scores that cannot overflow
    points, scalar = validation.as_points("x", x)
    _, rows = check_sigma(points, sigma, scalar=scalar)
    if np.ndim(rows) == 0:
        sigma = float(sigma)
    else:  # the user's (N,) or (N, p) form, for the public fits; ``rows`` for the kernels
        sigma = np.asarray(sigma, np.float64)
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
        z_arr = validation.as_float_array("z_true", z_true)
        if tuple(z_arr.shape) != tuple(np.shape(x)):
            raise ValueError(f"z_true: shape {tuple(z_arr.shape)} does not match x {np.shape(x)}")
        validation.check_finite("z_true", z_arr)
        z_true = np.asarray(z_arr)
    heldout = None
    if x_heldout is not None:
        held, held_scalar = validation.as_points("x_heldout", x_heldout)
        if held_scalar != scalar or held.shape[1] != points.shape[1]:
            raise ValueError(
                f"x_heldout: shape {tuple(np.shape(x_heldout))} does not match x of shape "
                f"{tuple(np.shape(x))}"
            )
        if sigma_heldout is None:
            if np.ndim(rows) != 0:
                raise ValueError(
                    "sigma_heldout: required with x_heldout when sigma is given per "
                    f"observation (shape {tuple(np.shape(sigma))}): the held-out points' own "
                    "noise scales"
                )
            held_rows = rows
        else:
            try:
                _, held_rows = check_sigma(held, sigma_heldout, scalar=held_scalar)
            except ValueError as err:  # check_sigma names "sigma"
                raise ValueError(f"sigma_heldout{str(err)[len('sigma') :]}") from None
        heldout = _Heldout(np.asarray(held, np.float64), held_rows)
    elif sigma_heldout is not None:
        raise ValueError("sigma_heldout: given without x_heldout")
    if "james-stein" in methods and points.shape[0] * points.shape[1] - points.shape[1] <= 2:
        raise ValueError(
            f"x: James-Stein needs N p - p > 2 (shrinking toward the grand mean), got "
            f"N = {points.shape[0]}, p = {points.shape[1]}"
        )
    if any(m in SAMPLERS for m in methods):
        if key is None:
            raise ValueError(f"key: a jax.random key is required for the samplers {SAMPLERS}")
        validation.check_key("key", key)
    if num_atoms is None:
        num_atoms = int(true_measure.atoms.shape[0]) if true_measure is not None else 5
    num_atoms = validation.check_positive_int("num_atoms", num_atoms)
    num_atoms_dp = validation.check_positive_int("num_atoms_dp", num_atoms_dp, minimum=2)
    method_kwargs = dict(method_kwargs or {})
    bad = [m for m in method_kwargs if m not in METHODS]
    if bad:
        raise ValueError(f"method_kwargs: unknown methods {bad}; choose from {list(METHODS)}")
    nuts_kwargs = dict(nuts_kwargs or {})
    sizes = {
        k: v for k, v in nuts_kwargs.items() if k in ("num_warmup", "num_samples", "num_chains")
    }
    given = {
        "attention-em": em_kwargs or {},
        "nuts": nuts_kwargs,
        "nuts-dp": sizes,
        "normal-nuts": sizes,
    }
    kwargs = {
        method: registry.settings(
            "deconvolution", method, {**given.get(method, {}), **method_kwargs.get(method, {})}
        )
        for method in METHODS
    }
    if "learned" in methods:
        kwargs["learned"] = _learned_settings(kwargs["learned"], points)
    if "normal-nuts" in methods:
        kwargs["normal-nuts"] = _normal_nuts_settings(kwargs["normal-nuts"])
    for method in methods:
        if method in SAMPLERS:  # every sampler's LOO, R-hat and ESS go into the table
            opts = kwargs[method]
            check_sampler_sizes(opts["num_samples"], opts["num_chains"], loo=True, what=method)
    x_in = np.asarray(x)
    say = progress or (lambda message: None)
    keys = {}
    if key is not None:  # "nuts" keeps the caller's key; the other samplers get their own
        key_dp, key_gibbs = jax.random.split(key)
        keys = {
            "nuts": key,
            "nuts-dp": key_dp,
            "gibbs": key_gibbs,
            "normal-nuts": jax.random.fold_in(key, NORMAL_NUTS_KEY_FOLD),
        }

    problem = _Problem(x_in, sigma, rows, scalar, heldout, true_measure, num_atoms, num_atoms_dp)
    fits: dict[str, MethodFit] = {}
    for method in methods:
        say(f"{method}: fitting")
        fits[method] = _RUNNERS[method](problem, keys.get(method), dict(kwargs[method]))

    rows = []
    for method, fit in fits.items():
        rows.append((method, "wall_time_s", fit.seconds))
        if z_true is not None:
            sq_err = np.reshape((fit.z_hat - z_true) ** 2, (points.shape[0], -1))
            rows.append((method, "mse_z", float(np.mean(np.sum(sq_err, axis=1)))))
            for prob, cov in _coverage(fit.intervals, z_true).items():
                rows.append((method, f"coverage_{round(prob * 100)}", cov))
        if true_measure is not None and scalar and fit.measure is not None:
            w1 = wasserstein1(
                fit.measure.atoms, fit.measure.weights, true_measure.atoms, true_measure.weights
            )
            rows.append((method, "wasserstein1_nu", w1))
        elif true_measure is not None and scalar and fit.normal_prior is not None:
            w1 = wasserstein1_normal_mixture(*fit.normal_prior, *true_measure)
            rows.append((method, "wasserstein1_nu", w1))
        rows.append((method, "log_likelihood", fit.log_likelihood))
        if fit.heldout_lpd is not None:
            rows.append((method, "heldout_lpd", fit.heldout_lpd))
        if fit.log_likelihood_trace is not None:
            rows.append((method, "iterations", float(fit.log_likelihood_trace.size - 1)))
        if fit.converged is not None:
            rows.append((method, "converged", float(fit.converged)))
        if fit.datatree is not None:
            post = fit.datatree["posterior"]
            loo = psis_loo(fit.datatree)  # arviz_stats' numbers, all observations at once
            rows.append((method, "elpd_loo", float(loo.elpd)))
            rows.append((method, "pareto_k_max", float(np.max(loo.pareto_k))))
            invariant = [v for v in ("z_mean", "nu_cdf", "log_lik_total") if v in post]
            diag = diagnostics(fit.datatree, var_names=invariant)
            rows.append((method, "max_rhat_invariant", diag.max_r_hat))
            rows.append((method, "min_ess_bulk_invariant", diag.min_ess_bulk))
            rows.append((method, "min_ess_tail_invariant", diag.min_ess_tail))
            rows.append((method, "divergences", float(diag.num_divergences)))
    import pandas as pd

    table = pd.DataFrame(rows, columns=["method", "metric", "value"])
    return DeconvolutionComparison(table=table, fits=fits)


__all__ = [
    "METHODS",
    "NORMAL_NUTS_KEY_FOLD",
    "SAMPLERS",
    "DeconvolutionComparison",
    "MethodFit",
    "compare_deconvolution",
    "discrete_posterior_intervals",
    "wasserstein1",
    "wasserstein1_normal_mixture",
]
