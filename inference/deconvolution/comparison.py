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
- ``"james-stein"``: the positive-part James-Stein rule toward the grand mean (Efron-Morris),
  with the normal empirical-Bayes posterior N(xbar + (1 - B)(x - xbar), (1 - B) sigma^2) for
  intervals and N(xbar, (tau^2 + sigma^2) I) as predictive, tau^2 = sigma^2 (1 - B) / B.
- ``"oracle"`` (when ``true_measure`` is given): the Bayes rule under the true measure, the
  floor that any estimator of nu is measured against.

Metrics (tidy table: method, metric, value): ``mse_z`` (mean over i of |z_hat_i - z_i|^2),
``coverage_50`` / ``coverage_90`` of intervals for z_i, ``wasserstein1_nu`` (1-D), the
``log_likelihood`` (point estimates: at the estimate; samplers: its posterior mean; James-Stein:
under its normal predictive), ``heldout_lpd`` (with ``x_heldout``: the mean over held-out
points of the log predictive density, log p(x_new | fit) for point estimates and
log mean_s p(x_new | theta_s) for samplers), ``wall_time_s`` (compilation included), for
iterative fits their ``iterations`` and ``converged`` (1/0), and for the samplers (NUTS,
Gibbs) ``elpd_loo``, the largest Pareto k of PSIS-LOO (``pareto_k_max``; above 0.7 the LOO
estimate is unreliable), the worst R-hat and smallest bulk/tail ESS over permutation-invariant
quantities (z_mean, nu_cdf, log_lik_total), and divergences.

Coverage is the share of (point, coordinate) pairs whose true z lies in the equal-tailed
interval (per coordinate in p-D). When nu is discrete and z_i sits exactly on an atom, a
discrete posterior (EM, oracle) covers conservatively (an atom-valued interval either holds
z_i exactly or misses it), so coverage above nominal is expected from the oracle.
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
from .. import methods as registry
from ..diagnostics import diagnostics, psis_loo
from ..mcmc import NUTS_SETTINGS, check_sampler_sizes, run_nuts
from . import em
from .estep import log_likelihood_unchecked, posterior_mean_unchecked, posterior_unchecked
from .gibbs import approximate_gibbs, run_gibbs
from .intervals import INTERVAL_PROBS, discrete_posterior_intervals
from .invariants import add_invariants
from .kiefer_wolfowitz import npmle

if TYPE_CHECKING:  # ArviZ, pandas and xarray are imported where used
    import pandas as pd
    import xarray as xr

METHODS = registry.method_names("deconvolution")
SAMPLERS = tuple(m for m in METHODS if registry.get_method("deconvolution", m).needs_key)
INTERVAL_BLOCK_ELEMENTS = 2**22  # row blocks of the streamed plug-in intervals (32 MB float64)
# ``nuts_kwargs`` holds sampler settings and the model's keyword arguments together; run_nuts
# takes them apart (its keyword-only parameters are the sampler's settings)
_SAMPLER_SETTINGS = frozenset(NUTS_SETTINGS)


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
    """(N,) log sum_k w_k N(x_i; mu_k, sigma^2 I_p) for x (N, p), atoms (K, p)."""
    sq = jnp.sum((x[:, None, :] - atoms[None, :, :]) ** 2, axis=-1)
    p = x.shape[1]
    log_w = jnp.log(weights)  # -inf for an empty atom: dropped by the logsumexp
    log_dens = -0.5 * sq / sigma**2 - 0.5 * p * jnp.log(2.0 * jnp.pi * sigma**2)
    return jax.scipy.special.logsumexp(log_dens + log_w[None, :], axis=1)


@jax.jit
def _mixture_lpd(x, atoms, weights, sigma):
    """(N,) log mean_s p(x_i | nu_s) over draws nu_s = (atoms (S, K, p), weights (S, K))."""
    per_draw = jax.lax.map(
        lambda aw: _point_log_density(x, aw[0], aw[1], sigma), (atoms, weights), batch_size=64
    )
    return jax.scipy.special.logsumexp(per_draw, axis=0) - jnp.log(atoms.shape[0])


def _heldout_lpd(x_heldout, measure: DiscreteMeasure, sigma) -> float | None:
    if x_heldout is None:
        return None
    points = np.asarray(x_heldout, np.float64).reshape(len(x_heldout), -1)
    atoms = np.asarray(measure.atoms, np.float64).reshape(measure.atoms.shape[0], -1)
    weights = np.asarray(measure.weights, np.float64)
    return float(np.mean(_point_log_density(points, atoms, weights, sigma)))


def _point_fit(x, sigma, measure, scalar, x_heldout, start, block_size=None, **extra) -> MethodFit:
    """A fit that ends in one discrete measure: its EB posterior, log-likelihood, held-out lpd."""
    z_hat, intervals = _discrete_posterior(x, sigma, measure, scalar, block_size)
    ll = float(log_likelihood_unchecked(*_kernel_inputs(x, measure, sigma), block_size=block_size))
    return MethodFit(
        z_hat=z_hat,
        intervals=intervals,
        measure=measure,
        seconds=time.perf_counter() - start,
        log_likelihood=ll,
        heldout_lpd=_heldout_lpd(x_heldout, measure, sigma),
        **extra,
    )


def _em_fit(x, sigma, em_kwargs, scalar, x_heldout) -> MethodFit:
    start = time.perf_counter()
    fit = em.fit_em(x, sigma, **em_kwargs)
    measure = DiscreteMeasure(np.asarray(fit.atoms), np.asarray(fit.weights))
    return _point_fit(
        x,
        sigma,
        measure,
        scalar,
        x_heldout,
        start,
        block_size=em_kwargs.get("block_size"),
        # the trace has the fixed length max_iters + 1 (NaN after num_iters): keep the run's part
        log_likelihood_trace=np.asarray(fit.log_likelihood_trace)[: int(fit.num_iters) + 1],
        converged=bool(fit.converged),
    )


def _npmle_fit(x, sigma, kwargs, scalar, x_heldout) -> MethodFit:
    start = time.perf_counter()
    fit = npmle(x, sigma, **kwargs)
    keep = np.asarray(fit.weights) > 0
    atoms = np.asarray(fit.atoms)[keep]
    weights = np.asarray(fit.weights)[keep]
    measure = DiscreteMeasure(atoms, weights / weights.sum())
    return _point_fit(x, sigma, measure, scalar, x_heldout, start, converged=bool(fit.converged))


def _approx_gibbs_fit(x, sigma, num_atoms, kwargs, scalar, x_heldout) -> MethodFit:
    start = time.perf_counter()
    settings = dict(kwargs)
    atoms0 = em.initial_atoms(x, num_atoms)
    trace = approximate_gibbs(x, sigma, atoms0, np.full(num_atoms, 1.0 / num_atoms), **settings)
    lls = np.asarray(trace.log_likelihood)
    if trace.diverged:
        raise RuntimeError(
            f"approx-gibbs: diverged at iteration {trace.first_nonfinite} with step_size "
            f"{settings['step_size']} (see relaxation_stability)"
        )
    measure = DiscreteMeasure(np.asarray(trace.atoms[-1]), np.asarray(trace.weights[-1]))
    converged = bool(abs(lls[-1] - lls[-2]) <= 1e-8 * len(x))
    return _point_fit(
        x,
        sigma,
        measure,
        scalar,
        x_heldout,
        start,
        log_likelihood_trace=lls,
        converged=converged,
    )


def _james_stein_fit(x, sigma, scalar, x_heldout) -> MethodFit:
    """Positive-part James-Stein toward the grand mean and its normal EB posterior."""
    start = time.perf_counter()
    pts = np.asarray(x, np.float64).reshape(len(x), -1)
    n, p = pts.shape
    centre = pts.mean(axis=0)
    spread = float(np.sum((pts - centre) ** 2))
    dof = n * p - p  # the grand mean costs p degrees of freedom
    shrink = min(1.0, (dof - 2) * sigma**2 / spread) if spread > 0 else 1.0  # dof > 2: checked
    post_mean = centre + (1.0 - shrink) * (pts - centre)
    post_sd = np.sqrt((1.0 - shrink) * sigma**2)
    tau2 = sigma**2 * (1.0 - shrink) / shrink if shrink > 0 else np.inf
    pred_var = tau2 + sigma**2
    z = {prob: float(_normal_quantile((1 + prob) / 2)) for prob in INTERVAL_PROBS}
    intervals = {
        prob: (
            validation.restore_shape(post_mean - z[prob] * post_sd, scalar),
            validation.restore_shape(post_mean + z[prob] * post_sd, scalar),
        )
        for prob in INTERVAL_PROBS
    }

    def gaussian_ll(points):
        sq = np.sum((points - centre) ** 2)
        return -0.5 * sq / pred_var - 0.5 * points.size * np.log(2 * np.pi * pred_var)

    heldout = None
    if x_heldout is not None:
        held = np.asarray(x_heldout, np.float64).reshape(len(x_heldout), -1)
        heldout = float(gaussian_ll(held) / held.shape[0])
    return MethodFit(
        z_hat=np.asarray(validation.restore_shape(post_mean, scalar)),
        intervals={k: (np.asarray(lo), np.asarray(hi)) for k, (lo, hi) in intervals.items()},
        measure=None,
        seconds=time.perf_counter() - start,
        log_likelihood=float(gaussian_ll(pts)),
        heldout_lpd=heldout,
    )


def _normal_quantile(q: float) -> float:
    """Standard normal quantile, on the host (no JAX compile for a scalar)."""
    return statistics.NormalDist().inv_cdf(q)


def _oracle_fit(x, sigma, measure, scalar, x_heldout) -> MethodFit:
    return _point_fit(x, sigma, measure, scalar, x_heldout, time.perf_counter())


def _prior_settings(x_np, sigma, scalar) -> dict:
    """The atoms' prior shared by NUTS and Gibbs: centred at the data, scale 2 sd(x) + sigma.

    Arrays (0-d for scalar data), not Python floats: ``run_nuts`` compiles Python numbers into
    its program, so new data would compile again; arrays are arguments of one program.
    """
    return dict(
        atom_loc=np.asarray(np.mean(x_np, axis=0) if not scalar else np.mean(x_np)),
        atom_scale=np.asarray(2.0 * np.std(x_np) + sigma),
    )


def _sampler_fit(x_np, sigma, datatree, key_inv, start, scalar, x_heldout) -> MethodFit:
    """Summaries of an MCMC DataTree (NUTS or Gibbs) through permutation-invariant quantities."""
    datatree = add_invariants(key_inv, datatree, x_np, sigma)
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
    if x_heldout is not None:
        held = np.asarray(x_heldout, np.float64).reshape(len(x_heldout), -1)
        lpd = _mixture_lpd(held, atoms.reshape(*atoms.shape[:2], -1), weights, sigma)
        heldout = float(np.mean(lpd))
    return MethodFit(
        z_hat=z_hat,
        intervals=intervals,
        measure=pooled,
        seconds=time.perf_counter() - start,
        datatree=datatree,
        log_likelihood=float(post["log_lik_total"].mean()),
        heldout_lpd=heldout,
    )


def _nuts_fit(x, sigma, key, num_atoms, nuts_kwargs, scalar, x_heldout, prior) -> MethodFit:
    x_np = np.asarray(x)
    settings = dict(
        prior=prior,
        ordered=scalar and prior != "dp",
        **_prior_settings(x_np, sigma, scalar),
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
        dict(sigma=sigma, num_atoms=num_atoms, **model_kwargs),
        dims=model_dims(scalar, prior=settings["prior"]),
        **sampler,
    )
    return _sampler_fit(x_np, sigma, datatree, key_inv, start, scalar, x_heldout)


def _gibbs_fit(x, sigma, key, num_atoms, gibbs_kwargs, scalar, x_heldout) -> MethodFit:
    x_np = np.asarray(x)
    settings = dict(
        ordered=scalar,
        **_prior_settings(x_np, sigma, scalar),
    )
    settings.update(gibbs_kwargs)
    key_gibbs, key_inv = jax.random.split(key)
    start = time.perf_counter()
    datatree = run_gibbs(key_gibbs, x_np, sigma, num_atoms=num_atoms, **settings)
    return _sampler_fit(x_np, sigma, datatree, key_inv, start, scalar, x_heldout)


class _Problem(NamedTuple):
    """What every method of the comparison sees (checked arrays and settings)."""

    x: np.ndarray
    sigma: float
    scalar: bool
    x_heldout: np.ndarray | None
    true_measure: DiscreteMeasure | None
    num_atoms: int
    num_atoms_dp: int


def _run_em(p: _Problem, key, opts) -> MethodFit:
    return _em_fit(p.x, p.sigma, opts, p.scalar, p.x_heldout)


def _run_npmle(p: _Problem, key, opts) -> MethodFit:
    return _npmle_fit(p.x, p.sigma, opts, p.scalar, p.x_heldout)


def _run_nuts(p: _Problem, key, opts) -> MethodFit:
    prior = opts.pop("prior")
    return _nuts_fit(p.x, p.sigma, key, p.num_atoms, opts, p.scalar, p.x_heldout, prior)


def _run_nuts_dp(p: _Problem, key, opts) -> MethodFit:
    prior = opts.pop("prior")
    return _nuts_fit(p.x, p.sigma, key, p.num_atoms_dp, opts, p.scalar, p.x_heldout, prior)


def _run_gibbs(p: _Problem, key, opts) -> MethodFit:
    return _gibbs_fit(p.x, p.sigma, key, p.num_atoms, opts, p.scalar, p.x_heldout)


def _run_approx_gibbs(p: _Problem, key, opts) -> MethodFit:
    return _approx_gibbs_fit(p.x, p.sigma, p.num_atoms, opts, p.scalar, p.x_heldout)


def _run_james_stein(p: _Problem, key, opts) -> MethodFit:
    return _james_stein_fit(p.x, p.sigma, p.scalar, p.x_heldout)


def _run_oracle(p: _Problem, key, opts) -> MethodFit:
    return _oracle_fit(p.x, p.sigma, p.true_measure, p.scalar, p.x_heldout)


# each registered method's runner: (problem, key or None, settings) -> MethodFit
_RUNNERS = {
    "attention-em": _run_em,
    "npmle": _run_npmle,
    "nuts": _run_nuts,
    "nuts-dp": _run_nuts_dp,
    "gibbs": _run_gibbs,
    "approx-gibbs": _run_approx_gibbs,
    "james-stein": _run_james_stein,
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
            "nuts-dp", "gibbs"), ``None`` allowed when every method is deterministic.
        x: (N,) or (N, p) observations.
        sigma: known noise scale.
        z_true: the latent z (same shape as x) when known (simulations): enables mse_z and
            coverage.
        true_measure: the true nu when known: enables ``wasserstein1_nu`` and the oracle.
        x_heldout: held-out observations (M,) or (M, p) from the same distribution: enables
            ``heldout_lpd``.
        methods: any of ``METHODS``; "oracle" needs ``true_measure``.
        num_atoms: K for NUTS, Gibbs and approx-Gibbs; default the true number of atoms if
            known, else 5.
        num_atoms_dp: truncation level of the DP prior ("nuts-dp").
        em_kwargs: passed to ``fit_em`` (default: K = N atoms started at the data, and the
            registry's ``max_iters=500``).
        nuts_kwargs: ``run_nuts``'s sampler settings (num_warmup, num_samples,
            target_accept_prob, ...) and the model's keyword arguments (prior, atom_loc,
            atom_scale, ...), told apart by name; its sampler sizes (num_warmup, num_samples,
            num_chains) also apply to "nuts-dp".
            Defaults: the method registry's (``attnbayes.inference.methods``): NUTS 2 chains
            x (500 warmup + 500 draws); Gibbs sweeps are cheap but mix about 4x worse per draw
            than NUTS here, so "gibbs" runs 4 chains x (1000 warmup + 2000 draws).
        method_kwargs: per-method keyword arguments, e.g. ``{"npmle": {"grid_size": 500},
            "approx-gibbs": {"step_size": 1.5}, "gibbs": {...}, "nuts-dp": {...}}``; they
            override ``em_kwargs`` / ``nuts_kwargs``.
        progress: called with a short message before each method (e.g. ``print``).

    Returns:
        ``DeconvolutionComparison(table, fits)``.
    """
    em.check_problem(x, sigma)  # once: the data, sigma's range, scores that cannot overflow
    points, scalar = validation.as_points("x", x)
    sigma = float(sigma)
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
    if x_heldout is not None:
        held, held_scalar = validation.as_points("x_heldout", x_heldout)
        if held_scalar != scalar or held.shape[1] != points.shape[1]:
            raise ValueError(
                f"x_heldout: shape {tuple(np.shape(x_heldout))} does not match x of shape "
                f"{tuple(np.shape(x))}"
            )
        x_heldout = np.asarray(x_heldout, np.float64)
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
    given = {"attention-em": em_kwargs or {}, "nuts": nuts_kwargs, "nuts-dp": sizes}
    kwargs = {
        method: registry.settings(
            "deconvolution", method, {**given.get(method, {}), **method_kwargs.get(method, {})}
        )
        for method in METHODS
    }
    for method in methods:
        if method in SAMPLERS:  # every sampler's LOO, R-hat and ESS go into the table
            opts = kwargs[method]
            check_sampler_sizes(opts["num_samples"], opts["num_chains"], loo=True, what=method)
    x_in = np.asarray(x)
    say = progress or (lambda message: None)
    keys = {}
    if key is not None:  # "nuts" keeps the caller's key; the other samplers get their own
        key_dp, key_gibbs = jax.random.split(key)
        keys = {"nuts": key, "nuts-dp": key_dp, "gibbs": key_gibbs}

    problem = _Problem(x_in, sigma, scalar, x_heldout, true_measure, num_atoms, num_atoms_dp)
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
    "SAMPLERS",
    "DeconvolutionComparison",
    "MethodFit",
    "compare_deconvolution",
    "discrete_posterior_intervals",
    "wasserstein1",
]
