"""Learning the parameters of switching models: the filter likelihood, maximum likelihood,
EM, and what statsmodels users read off a fit.

The likelihood log p(y_{1:T} | theta), states and modes integrated out, is a filter's
(``likelihood``): "exact" (all M^T mode histories, short series), "gpb2", "imm", "gpb1"
(the collapsed approximations; exact where the collapse is, e.g. the econometric models of
``attnbayes.models.markov_switching`` whose state is a constant), or "kalman" (M = 1). It is
a pure JAX function of theta, so it is differentiated and compiled once per shape.

- ``switching_log_likelihood(spec, theta, ...)``: that function.
- ``fit_switching(key, observations, init, method="mle" | "em", ...)``: maximum likelihood by
  L-BFGS (``attnbayes.inference.optimize.minimize_lbfgs``) on the unconstrained
  parametrisation of the free parameters (``numpyro.distributions.transforms.biject_to`` of
  each parameter's support: stick-breaking for transition rows, log for variances, an ordered
  transform for regime means), from several starts (vmapped, one compilation); standard
  errors from the Hessian (the observed information, mapped to the reported parametrisation
  by the delta method); or EM
  (Dempster, Laird and Rubin 1977; Hamilton 1990) with the smoothed pairwise regime
  probabilities in the E-step, and for a state-space model Kim's (1994) smoother's state
  moments and lag-one cross-covariances too (Shumway and Stoffer 1982; Murphy 1998).
- ``smoothed_regime_probabilities``, ``expected_durations``, ``information_criteria``,
  ``forecast`` (k-step predictive mixtures with intervals).

``fit_switching``, ``forecast_switching`` and ``select_num_regimes`` are Python-level drivers
over compiled kernels, not traceable; ``switching_log_likelihood`` is (jit, vmap, grad).
"""

from __future__ import annotations

import functools
import math
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree
from jax.scipy.special import logsumexp
from numpyro.distributions import constraints
from numpyro.distributions.transforms import biject_to

from ... import validation
from ...models.markov_switching import (
    SwitchingSpec,
    SwitchingStructure,
    build_params,
    regime_of_mode,
    regime_probabilities,
    switching_state_space,
)
from ...models.switching import (
    SwitchingParams,
    masked_gaussian_logpdf,
    psd_factor,
    step_offsets,
)
from ..optimize import hessian_by_differences, minimize_lbfgs
from .filters import _exact_filter, _gpb1_filter, _gpb2_filter, _imm_filter, all_histories
from .kalman import _kalman_filter, _mm, _mv, check_inputs, log_probabilities, symmetrise
from .smoothers import SmootherMoments, _exact_moments, _kim_moments

LIKELIHOODS = ("exact", "gpb2", "imm", "gpb1", "kalman")
METHODS = ("mle", "em")


# ----------------------------------------------------------------------------- likelihood


def filter_unchecked(params: SwitchingParams, observations, inputs, likelihood: str):
    """The named filter on checked arrays (``likelihood`` static)."""
    if likelihood == "imm":
        return _imm_filter(params, observations, inputs)
    if likelihood == "gpb2":
        return _gpb2_filter(params, observations, inputs)
    if likelihood == "gpb1":
        return _gpb1_filter(params, observations, inputs)
    if likelihood == "kalman":
        return _kalman_filter(params, observations, inputs)
    m, t = params.initial_probs.shape[0], observations.shape[0]
    return _exact_filter(params, observations, jnp.asarray(all_histories(m, t)), inputs)


def hamilton_filter(params: SwitchingParams, observations, inputs):
    """Hamilton's (1989) filter of a model whose state is constant (H_j = 0: the econometric
    models), on the modes alone:

        e_t(j) = log N(y_t; d_j + D_j u_t, R_j)   (over the observed coordinates),
        alpha_1(j) = log pi0_j + e_1(j),  alpha_t(j) = logsumexp_i(alpha_{t-1}(i) + log Pi_ij)
        + e_t(j),  log p(y) = logsumexp_j alpha_T(j),  P(s_t = j | y_{1:t}) ~ exp alpha_t(j).

    The same numbers as every collapsed filter on such a model (their collapse is exact), from
    a much smaller program. Checked arrays (``check_inputs``); pure JAX.

    Returns:
        (log p(y_{1:T}), filtered mode probabilities (T, M)).
    """
    _, emi = jax.vmap(step_offsets, in_axes=(None, 0))(params, inputs)  # (T, M, o)
    observed = ~jnp.isnan(observations)
    obs = jnp.where(observed, observations, 0.0)
    per_mode = jax.vmap(masked_gaussian_logpdf, in_axes=(0, None, 0))
    log_em = jax.vmap(per_mode, in_axes=(0, 0, None))(
        obs[:, None] - emi, observed, params.emission_covs
    )
    log_trans = log_probabilities(params.transition_matrix)

    def step(alpha, log_e):
        alpha = logsumexp(alpha[:, None] + log_trans, axis=0) + log_e
        return alpha, alpha

    first = log_probabilities(params.initial_probs) + log_em[0]
    last, rest = jax.lax.scan(step, first, log_em[1:])
    alphas = jnp.concatenate([first[None], rest])
    return logsumexp(last), jnp.exp(alphas - logsumexp(alphas, axis=1, keepdims=True))


def _mode_filter(structure, likelihood, params, observations, inputs):
    """(log p(y), filtered mode probabilities) by the named likelihood; "exact" is Hamilton's
    filter for the constant-state models."""
    if likelihood == "exact" and structure.kind != "state_space":
        return hamilton_filter(params, observations, inputs)
    res = filter_unchecked(params, observations, inputs, likelihood)
    return res.log_likelihood, res.mode_probs


def _check_likelihood(likelihood, structure: SwitchingStructure, num_steps: int) -> str:
    if not isinstance(likelihood, str) or likelihood not in LIKELIHOODS:
        raise ValueError(f"likelihood: expected one of {list(LIKELIHOODS)}, got {likelihood!r}")
    if likelihood == "kalman" and structure.num_modes != 1:
        raise ValueError(
            f"likelihood: 'kalman' needs a one-mode model, this one has {structure.num_modes}"
        )
    if (
        likelihood == "exact"
        and structure.kind == "state_space"
        and structure.num_modes**num_steps > 2**16
    ):
        raise ValueError(
            f"likelihood: 'exact' enumerates M^T = {structure.num_modes}^{num_steps} mode "
            "histories, more than 2^16; use 'gpb2' or 'imm' (exact for the econometric "
            "models, whose collapse is exact)"
        )
    return likelihood


def _log_likelihood(structure, likelihood, theta, observations, inputs):
    params = build_params(structure, theta)
    return _mode_filter(structure, likelihood, params, observations, inputs)[0]


def _check_spec(name: str, spec) -> SwitchingSpec:
    if not isinstance(spec, SwitchingSpec):
        raise ValueError(
            f"{name}: expected a SwitchingSpec (markov_switching_regression, "
            f"markov_switching_ar, switching_state_space), got {type(spec).__name__}"
        )
    return spec


def _is_psd(covs) -> bool:
    """Symmetric positive semi-definite matrices (..., n, n), to 1e-8 of their scale."""
    covs = np.asarray(covs, float)
    scale = max(1.0, float(np.max(np.abs(covs), initial=0.0)))
    if not np.allclose(covs, np.swapaxes(covs, -1, -2), rtol=0, atol=1e-8 * scale):
        return False
    return bool(np.all(np.linalg.eigvalsh(covs) >= -1e-8 * scale))


def _check_theta(name: str, spec: SwitchingSpec, theta) -> dict:
    """theta: a dict with the spec's names and shapes (finite when concrete)."""
    if theta is None:
        theta = spec.theta
    if not isinstance(theta, dict):
        raise ValueError(f"{name}: expected a dict of parameters, got {type(theta).__name__}")
    missing = set(spec.theta) - set(theta)
    extra = set(theta) - set(spec.theta)
    if missing or extra:
        raise ValueError(
            f"{name}: expected the parameters {sorted(spec.theta)}; missing {sorted(missing)}, "
            f"unknown {sorted(extra)}"
        )
    out = {}
    for key, value in theta.items():
        arr = validation.as_float_array(f"{name}[{key!r}]", value)
        if tuple(arr.shape) != tuple(np.shape(spec.theta[key])):
            raise ValueError(
                f"{name}[{key!r}]: expected shape {np.shape(spec.theta[key])}, got {arr.shape}"
            )
        if not validation.is_traced(arr):
            validation.check_finite(f"{name}[{key!r}]", arr)
            if spec.support[key] is constraints.positive_definite:
                # the model takes singular PSD covariances (e.g. a rank-deficient Q0); only a
                # free one must be positive definite (``_check_free_values``)
                inside = _is_psd(arr)
            else:
                # eagerly, also while a caller traces the other fields (under jit an operation
                # on a constant would otherwise be staged out and its truth value unknown)
                with jax.ensure_compile_time_eval():
                    inside = bool(spec.support[key](jnp.asarray(arr)).all())
            if not inside:
                raise ValueError(f"{name}[{key!r}]: outside its support {spec.support[key]}")
        out[key] = arr
    return out


def _data(spec: SwitchingSpec, observations, inputs):
    """The observations and inputs of a fit, checked against the spec's params."""
    obs = spec.observations if observations is None else observations
    u = spec.inputs if (inputs is None and observations is None) else inputs
    _, obs, u = check_inputs(spec.params, obs, inputs=u)
    return obs, u


def switching_log_likelihood(
    spec: SwitchingSpec, theta=None, observations=None, *, inputs=None, likelihood: str = "imm"
) -> jax.Array:
    """log p(y_{1:T} | theta) of a parametrised switching model, by the named filter.

    Args:
        spec: ``SwitchingSpec`` (``markov_switching_regression``, ``markov_switching_ar``,
            ``switching_state_space``).
        theta: dict of parameters (default ``spec.theta``).
        observations, inputs: the data (default the spec's own).
        likelihood: "exact", "gpb2", "imm" (default), "gpb1" or "kalman".

    jit-, vmap- and grad-able in theta, observations and inputs (``spec`` and ``likelihood``
    are static).
    """
    spec = _check_spec("spec", spec)
    theta = _check_theta("theta", spec, theta)
    obs, u = _data(spec, observations, inputs)
    likelihood = _check_likelihood(likelihood, spec.structure, obs.shape[0])
    return _log_likelihood_jit(spec.structure, likelihood, theta, obs, u)


_log_likelihood_jit = jax.jit(_log_likelihood, static_argnums=(0, 1))


# ----------------------------------------------------------------------------- transforms


def _transforms(spec: SwitchingSpec, free: tuple) -> dict:
    return {name: biject_to(spec.support[name]) for name in free}


def _unconstrain(spec, free, theta):
    tf = _transforms(spec, free)
    return {n: tf[n].inv(jnp.asarray(theta[n])) for n in free}


def _constrain(spec, free, theta_fixed, z):
    tf = _transforms(spec, free)
    return theta_fixed | {n: tf[n](z[n]) for n in free}


def _num_free(spec: SwitchingSpec, free: tuple) -> int:
    """The number of free scalars: the size of the unconstrained vector (a simplex row of
    length M counts M - 1)."""
    z = _unconstrain(spec, free, spec.theta)
    return int(sum(np.size(v) for v in z.values()))


def _check_free(spec: SwitchingSpec, free) -> tuple:
    if free is None:
        return tuple(spec.free)
    if isinstance(free, str) or not all(isinstance(n, str) for n in free):
        raise ValueError(f"free: expected a sequence of parameter names, got {free!r}")
    free = tuple(free)
    unknown = [n for n in free if n not in spec.theta]
    if unknown:
        raise ValueError(f"free: unknown parameter(s) {unknown}; known: {list(spec.theta)}")
    if not free:
        raise ValueError("free: nothing to fit (empty)")
    return free


def _check_free_values(spec: SwitchingSpec, free: tuple) -> None:
    """Each free parameter's start value must map to finite unconstrained coordinates (the
    interior of its support): a singular covariance has no Cholesky factor, a zero variance
    no logarithm, unordered regime means no ordered coordinates. (A zero transition
    probability passes: the stick-breaking inverse clips it.)"""
    z = _unconstrain(spec, free, {n: np.asarray(spec.theta[n], float) for n in free})
    for name in free:
        if np.all(np.isfinite(np.asarray(z[name]))):
            continue
        value = np.asarray(spec.theta[name], float)
        if spec.support[name] is constraints.positive_definite:
            eig = np.linalg.eigvalsh(value.reshape(-1, *value.shape[-2:]))
            bad = np.flatnonzero(eig[:, 0] <= 0.0).tolist()
            hint = ""
            if name in ("dynamics_covs", "emission_covs"):
                scale = name.replace("covs", "cov_scale")
                hint = (
                    f"; keep it fixed and free {scale!r} instead (the scale is fitted on the "
                    "range of a singular covariance)"
                )
            raise ValueError(
                f"free: {name!r} is singular in init (matrices {bad}), and its "
                f"positive-definite parametrisation (Cholesky) cannot start there{hint}"
            )
        raise ValueError(
            f"free: {name!r} starts outside or on the boundary of its support "
            f"{spec.support[name]} (e.g. a zero variance, or unordered regime means), where "
            "its unconstrained coordinates are not finite; keep it fixed or start it inside"
        )


# the mean parameters whose residual each covariance field governs (state-space kind)
_MEANS_OF_COV = {
    "initial_covs": ("initial_means",),
    "dynamics_covs": ("dynamics_matrices", "dynamics_biases", "dynamics_input_weights"),
    "emission_covs": ("emission_matrices", "emission_biases", "emission_input_weights"),
}


def _check_em_free(spec: SwitchingSpec, free: tuple) -> None:
    """EM on a state-space model cannot fit the mean parameters of a residual whose covariance
    is singular: the complete-data density is degenerate off the covariance's range (the
    residual is zero there under the model), so the expected complete-data log-likelihood
    only sees, and the M-step only moves, their components within the range, and Fisher's
    identity (grad log p(y) = grad Q) fails in the other directions. Refused with a
    ``ValueError`` naming ``free``; the scale of a singular covariance is fine (fitted on
    its range)."""
    if spec.structure.kind != "state_space":
        return
    for cov_name, means in _MEANS_OF_COV.items():
        freed = [n for n in means if n in free]
        if not freed:
            continue
        covs = np.asarray(spec.theta[cov_name], float)
        eig = np.linalg.eigvalsh(0.5 * (covs + np.swapaxes(covs, -1, -2)))
        cutoff = covs.shape[-1] * np.finfo(float).eps * np.max(eig, axis=-1)
        bad = np.flatnonzero(eig[:, 0] <= cutoff).tolist()
        if bad:
            raise ValueError(
                f"free: EM cannot fit {freed} while {cov_name}{bad} is singular: the "
                "complete-data density is degenerate off the range of that covariance, so EM "
                "would move them only within it and stop short of the maximum; keep them "
                "fixed or use method='mle'"
            )


# ----------------------------------------------------------------------------- results


class SwitchingFitResult(NamedTuple):
    """A fitted switching model.

    Attributes:
        params: ``SwitchingParams`` at the estimate.
        theta: dict, the estimate of every parameter (the fixed ones as given).
        log_likelihood: (num_iterations + 1,) the trace of log p(y | theta) of the best start
            (EM: one entry per iteration; L-BFGS: per accepted step), last = the maximum.
        stderr: dict name -> standard errors (NaN for fixed parameters, or where the Hessian
            is not negative definite).
        start_log_likelihoods: (num_starts,) the final log-likelihood from each start.
        num_parameters: the free scalars (a transition row counts M - 1), statsmodels' k.
        num_observations: T (observed steps).
        converged: whether the best start met the tolerance.
        method, likelihood: as requested.
        seconds: wall time of the fit (compilation included).
    """

    params: SwitchingParams
    theta: dict
    log_likelihood: np.ndarray
    stderr: dict
    start_log_likelihoods: np.ndarray
    num_parameters: int
    num_observations: int
    converged: bool
    method: str
    likelihood: str
    seconds: float

    @property
    def aic(self) -> float:
        """-2 log L + 2 k."""
        return information_criteria(self)["aic"]

    @property
    def bic(self) -> float:
        """-2 log L + k log T."""
        return information_criteria(self)["bic"]


def information_criteria(result: SwitchingFitResult) -> dict:
    """AIC = -2 log L + 2 k, BIC = -2 log L + k log T, HQIC = -2 log L + 2 k log log T, with k the
    free scalars and T the observed steps (statsmodels' definitions)."""
    ll = float(result.log_likelihood[-1])
    k, n = result.num_parameters, result.num_observations
    return {
        "aic": -2.0 * ll + 2.0 * k,
        "bic": -2.0 * ll + k * math.log(n),
        "hqic": -2.0 * ll + 2.0 * k * math.log(math.log(n)),
    }


def expected_durations(transition_matrix) -> np.ndarray:
    """The expected stay in each regime, 1 / (1 - P[i, i]) steps (inf for an absorbing one)."""
    p = np.asarray(transition_matrix, dtype=float)
    with np.errstate(divide="ignore"):
        return 1.0 / (1.0 - np.diagonal(p, axis1=-2, axis2=-1))


# ----------------------------------------------------------------------------- MLE


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3))
def _mle_kernel(spec_key, free, likelihood, max_iterations, z0, theta_fixed, obs, u, tol):
    """L-BFGS from each start z0 (batched): minimise -log L / T (``minimize_lbfgs``: one
    filter gradient per loop step, so the program compiles one copy of it)."""
    spec = _SPECS[spec_key]
    num_steps = jnp.sum(jnp.any(~jnp.isnan(obs), axis=-1)).astype(obs.dtype)
    _, unravel = ravel_pytree(jax.tree.map(lambda a: a[0], z0))

    def objective(flat):
        theta = _constrain(spec, free, theta_fixed, unravel(flat))
        return -_log_likelihood(spec.structure, likelihood, theta, obs, u) / num_steps

    def run(z):
        res = minimize_lbfgs(
            objective, ravel_pytree(z)[0], max_iterations=max_iterations, tolerance=tol
        )
        return (
            res.x,
            -res.value * num_steps,
            res.converged,
            -res.trace * num_steps,
            res.num_iterations,
        )

    return jax.vmap(run)(z0)


# specs are not hashable (they hold arrays): the compiled kernels take a key into this table,
# made from the structure, the support's constraint types and the fixed shapes
_SPECS: dict = {}


def _spec_key(spec: SwitchingSpec):
    key = (
        spec.structure,
        tuple((n, type(c).__name__, repr(c)) for n, c in spec.support.items()),
        tuple((n, np.shape(v)) for n, v in spec.theta.items()),
    )
    _SPECS.setdefault(key, spec)
    return key


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _hessian_kernel(spec_key, free, likelihood, z, theta_fixed, obs, u):
    """Hessian of log L in the unconstrained coordinates, and the Jacobian of the reported
    (constrained, flattened) free parameters with respect to them."""
    spec = _SPECS[spec_key]
    flat, unravel = ravel_pytree(z)

    def loglik(f):
        theta = _constrain(spec, free, theta_fixed, unravel(f))
        return _log_likelihood(spec.structure, likelihood, theta, obs, u)

    def reported(f):
        theta = _constrain(spec, free, theta_fixed, unravel(f))
        return ravel_pytree({n: theta[n] for n in free})[0]

    return hessian_by_differences(jax.grad(loglik), flat), jax.jacfwd(reported)(flat)


def _standard_errors(spec, free, likelihood, z, theta_fixed, obs, u, theta) -> dict:
    """Delta method: Cov(theta) = J (-H_z)^-1 J^T at the maximum (equal to the inverse observed
    information in the reported parametrisation, restricted to its free directions); NaN
    where -H_z is not positive definite (a parameter not identified)."""
    hess, jac = _hessian_kernel(_spec_key(spec), free, likelihood, z, theta_fixed, obs, u)
    hess, jac = np.asarray(hess), np.asarray(jac)
    info = -0.5 * (hess + hess.T)
    out = {n: np.full(np.shape(theta[n]), np.nan) for n in theta}
    if not np.all(np.isfinite(info)):
        return out
    eig = np.linalg.eigvalsh(info)
    if eig[0] <= 1e-10 * max(eig[-1], 1e-300):
        return out
    cov = jac @ np.linalg.solve(info, jac.T)
    se = np.sqrt(np.clip(np.diagonal(cov), 0.0, None))
    _, unravel = ravel_pytree({n: jnp.asarray(theta[n]) for n in free})
    return out | {n: np.asarray(v) for n, v in unravel(jnp.asarray(se)).items()}


def _starts(key, spec, free, num_starts: int, scale: float):
    """num_starts unconstrained starts: the spec's theta, then perturbations of it by
    N(0, scale^2) in the unconstrained coordinates."""
    z = _unconstrain(spec, free, spec.theta)
    flat, unravel = ravel_pytree(z)
    noise = scale * jax.random.normal(key, (num_starts, flat.shape[0]), flat.dtype)
    noise = noise.at[0].set(0.0)
    return jax.vmap(unravel)(flat[None] + noise)


def fit_switching(
    key,
    observations,
    init,
    *,
    method: str = "mle",
    likelihood: str = "imm",
    inputs=None,
    free=None,
    num_starts: int = 8,
    start_scale: float = 0.5,
    max_iterations: int = 500,
    tolerance: float = 1e-8,
) -> SwitchingFitResult:
    """Fit a switching model by maximum likelihood ("mle") or EM ("em").

    "mle": L-BFGS (``minimize_lbfgs``: backtracking line search, one filter gradient per loop
    step, so it compiles about four times faster than optax's zoom search) on -log L(theta) / T
    over the unconstrained coordinates z of the free parameters
    (theta = biject_to(support)(z)), from ``num_starts`` starts: ``init``'s theta and
    perturbations z + N(0, start_scale^2) drawn with ``key``, all run in one vmapped,
    compiled program; the best end point is returned,
    with standard errors from the Hessian of log L (central differences of its gradient,
    ``hessian_by_differences``; delta method to the reported parametrisation). Converged:
    max |gradient of log L / T| < ``tolerance``.

    "em": generalised EM (``_em_switching``): for the econometric models Hamilton's (1990)
    smoothed regime probabilities in the E-step; for a state-space model
    (``switching_state_space``) Kim's (1994) smoother over the ``likelihood`` filter (or the
    enumeration of all mode histories for "exact"), with the per-mode moments, pairwise mode
    probabilities and lag-one cross-covariances of the states (``kim_smoother_moments``);
    the M-step is the closed-form transition matrix, then L-BFGS steps on the expected
    complete-data log-likelihood. One start (``init``'s theta; ``key``, ``num_starts`` and
    ``start_scale`` are not used); no standard errors (NaN). The log-likelihood trace is
    non-decreasing where the E-step is exact (constant-state models, M = 1, "exact", F_j = 0).

    Not traceable: a Python-level driver (validation, starts, the EM loop, NumPy results) over
    compiled kernels. To ``jit``, ``vmap`` or ``grad``, use ``switching_log_likelihood`` (or
    the filters and smoothers) directly.

    Args:
        key: a ``jax.random`` key (the starts).
        observations: (T, o); ``None`` for the spec's own data (then ``inputs`` too).
        init: ``SwitchingSpec`` (its theta is the first start) or ``SwitchingParams`` (a
            generic model, ``switching_state_space``).
        method: "mle" or "em".
        likelihood: "exact", "gpb2", "imm" (default), "gpb1", "kalman".
        inputs: (T, k) u_{1:T} when the model has inputs.
        free: names of the parameters to fit (default ``init.free``: the spec's identified
            set; for a generic model ``STATE_SPACE_FREE``, the transition matrix and the noise
            scales); the others stay at their values in ``init``.
        num_starts: >= 1.
        start_scale: > 0, the spread of the random starts (unconstrained units).
        max_iterations: per start.
        tolerance: > 0.

    Returns:
        ``SwitchingFitResult``.

    Raises:
        ValueError: naming the argument: a bad key, spec, method, likelihood ("exact" on a
            state-space model with M^T > 2^16 histories; "kalman" with M > 1), an unknown or
            empty ``free``, or a free parameter whose value in ``init`` lies on the boundary
            of its support (e.g. a singular ``dynamics_covs``: free ``dynamics_cov_scale``
            instead, which EM fits on the range of a singular Q0); for "em" on a state-space
            model, a free mean parameter (F_j, b_j, B_j; H_j, d_j, D_j; m0_j) of a mode whose
            covariance (Q0_j; R0_j; P0_j) is singular (``_check_em_free``).
    """
    began = time.perf_counter()
    validation.check_key("key", key)
    if isinstance(init, SwitchingParams):
        if observations is None:
            raise ValueError("observations: required when init is a SwitchingParams")
        init = switching_state_space(init, observations, inputs=inputs)
    spec = _check_spec("init", init)
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(f"method: expected one of {list(METHODS)}, got {method!r}")
    free = _check_free(spec, free)
    _check_free_values(spec, free)
    obs, u = _data(spec, observations, inputs)
    likelihood = _check_likelihood(likelihood, spec.structure, obs.shape[0])
    num_starts = validation.check_positive_int("num_starts", num_starts)
    max_iterations = validation.check_positive_int("max_iterations", max_iterations)
    start_scale = validation.check_positive_scalar("start_scale", start_scale)
    tolerance = validation.check_positive_scalar("tolerance", tolerance)
    if method == "em":
        _check_em_free(spec, free)
        return _em_switching(
            spec,
            obs,
            inputs=u,
            free=free,
            max_iterations=max_iterations,
            tolerance=tolerance,
            began=began,
            likelihood=likelihood,
        )
    dtype = obs.dtype
    theta0 = {n: jnp.asarray(v, dtype) for n, v in spec.theta.items()}
    fixed = {n: v for n, v in theta0.items() if n not in free}
    spec_key = _spec_key(spec)
    z0 = _starts(key, spec._replace(theta=theta0), free, num_starts, start_scale)
    flat, values, converged, traces, counts = _mle_kernel(
        spec_key, free, likelihood, max_iterations, z0, fixed, obs, u, tolerance
    )
    values = np.asarray(values)
    best = int(np.nanargmax(np.where(np.isfinite(values), values, -np.inf)))
    _, unravel = ravel_pytree(jax.tree.map(lambda a: a[0], z0))
    z_best = unravel(flat[best])
    theta = {n: np.asarray(v) for n, v in _constrain(spec, free, fixed, z_best).items()}
    stderr = _standard_errors(spec, free, likelihood, z_best, fixed, obs, u, theta)
    trace = np.asarray(traces[best])[: int(counts[best]) + 1]
    return SwitchingFitResult(
        params=build_params(spec.structure, theta),
        theta=theta,
        log_likelihood=trace,
        stderr=stderr,
        start_log_likelihoods=values,
        num_parameters=_num_free(spec, free),
        num_observations=int(np.sum(np.any(~np.isnan(np.asarray(obs)), axis=-1))),
        converged=bool(converged[best]),
        method="mle",
        likelihood=likelihood,
        seconds=time.perf_counter() - began,
    )


# ----------------------------------------------------------------------------- EM


def pairwise_mode_probabilities(filtered_probs, transition_matrix, smoothed_probs):
    """xi_t(i, j) = P(s_t = i, s_{t+1} = j | y_{1:T}), t = 1..T-1 (Kim 1994):
    filt_t(i) P_ij smooth_{t+1}(j) / pred_{t+1}(j), pred_{t+1}(j) = sum_i filt_t(i) P_ij,
    from the filtered (T, M) and smoothed (T, M) mode probabilities."""
    filt = filtered_probs[:-1]
    pred = filt @ transition_matrix
    ratio = jnp.where(pred > 0, smoothed_probs[1:] / jnp.where(pred > 0, pred, 1.0), 0.0)
    return filt[:, :, None] * transition_matrix[None] * ratio[:, None, :]


def _smoothed_mode_probs(filtered, transition_matrix):
    """P(s_t = j | y_{1:T}) by the backward recursion on the filter's mode probabilities
    (exact for a Markov chain observed through mode-wise likelihoods)."""
    log_p = jnp.log(transition_matrix)

    def step(next_smooth, filt):
        log_pred = logsumexp(jnp.log(filt)[:, None] + log_p, axis=0)
        ratio = jnp.exp(jnp.log(next_smooth) - log_pred)
        ratio = jnp.where(next_smooth > 0, ratio, 0.0)
        out = filt * (jnp.exp(log_p) @ ratio)
        out = out / jnp.sum(out)
        return out, out

    last = filtered[-1]
    _, rest = jax.lax.scan(step, last, filtered[:-1], reverse=True)
    return jnp.concatenate([rest, last[None]])


@functools.partial(jax.jit, static_argnums=(0, 1))
def _em_expectations(spec_key, likelihood, theta, obs, u):
    spec = _SPECS[spec_key]
    params = build_params(spec.structure, theta)
    log_lik, filtered = _mode_filter(spec.structure, likelihood, params, obs, u)
    smooth = _smoothed_mode_probs(filtered, params.transition_matrix)
    xi = pairwise_mode_probabilities(filtered, params.transition_matrix, smooth)
    return log_lik, smooth, xi


def _regime_transition_counts(structure: SwitchingStructure, xi):
    """sum_t P(r_t = a, r_{t+1} = b | y) on the regimes (summing mode pairs by their current
    regimes)."""
    onehot = jax.nn.one_hot(regime_of_mode(structure), structure.num_regimes, dtype=xi.dtype)
    return jnp.einsum("tij,ia,jb->ab", xi, onehot, onehot)


def _negative_q_constant_state(spec, free, z, theta_fixed, stats, obs, u):
    """-Q(theta) / T, the expected complete-data log-likelihood of the E-step's gamma, xi:

        Q(theta) = sum_j gamma_1(j) log pi0_j + sum_t sum_ij xi_t(i, j) log Pi_ij
                   + sum_t sum_j gamma_t(j) log N(y_t; d_j + D_j u_t, R_j)

    over the filter's modes (the regime tuples of MS-AR, whose Pi and pi0 are functions of
    the regime transition matrix), for a model with a constant state. ``stats`` = (gamma,
    xi)."""
    gamma, xi = stats
    theta = _constrain(spec, free, theta_fixed, z)
    p = build_params(spec.structure, theta)
    mean = p.emission_biases[None, :, 0] + jnp.einsum(
        "jk,tk->tj", p.emission_input_weights[:, 0], u
    )
    var = p.emission_covs[None, :, 0, 0]
    logpdf = -0.5 * ((obs - mean) ** 2 / var + jnp.log(2 * jnp.pi * var))
    logpdf = jnp.where(jnp.isnan(obs), 0.0, logpdf)
    q = jnp.sum(gamma * logpdf)
    q = q + jnp.sum(jnp.where(xi > 0, xi * log_probabilities(p.transition_matrix), 0.0))
    q = q + jnp.sum(jnp.where(gamma[0] > 0, gamma[0] * log_probabilities(p.initial_probs), 0.0))
    return -q / jnp.maximum(jnp.sum(gamma), 1.0)


_LOG_2PI = math.log(2.0 * math.pi)
# the covariance fields of a state-space spec and the scale fields that multiply them
_SCALED_COVS = {
    "initial_covs": None,
    "dynamics_covs": "dynamics_cov_scale",
    "emission_covs": "emission_cov_scale",
}


def _psd_factors(cov):
    """(S^+, log pdet S, rank S) of symmetric PSD matrices (..., n, n), by ``eigh``, with
    ``psd_solve``'s rule: eigenvalues below n * eps * the largest count as zero. For the
    fixed covariance bases of the M-step: computed once per M-step, never differentiated
    (``eigh``'s derivative is NaN at a repeated eigenvalue)."""
    cov = jax.lax.stop_gradient(symmetrise(cov))
    eig, vec = jnp.linalg.eigh(cov)
    cutoff = cov.shape[-1] * jnp.finfo(cov.dtype).eps * jnp.max(eig, axis=-1, keepdims=True)
    keep = eig > cutoff
    safe = jnp.where(keep, eig, 1.0)
    pinv = (vec * jnp.where(keep, 1.0 / safe, 0.0)[..., None, :]) @ jnp.swapaxes(vec, -1, -2)
    log_pdet = jnp.sum(jnp.where(keep, jnp.log(safe), 0.0), axis=-1)
    return pinv, log_pdet, jnp.sum(keep, axis=-1).astype(cov.dtype)


def _pd_factors(cov):
    """(S^-1, log det S, n) of positive-definite matrices (..., n, n) by Cholesky
    (differentiable): a freed covariance field, positive definite by its parametrisation."""
    chol = jnp.linalg.cholesky(symmetrise(cov))
    eye = jnp.broadcast_to(jnp.eye(cov.shape[-1], dtype=cov.dtype), cov.shape)
    inv = jax.scipy.linalg.cho_solve((chol, True), eye)
    log_det = 2.0 * jnp.sum(jnp.log(jnp.diagonal(chol, axis1=-2, axis2=-1)), axis=-1)
    return inv, log_det, jnp.full(cov.shape[:-2], cov.shape[-1], cov.dtype)


def _scaled(factors, scale):
    """The factors of c S0 from those of S0: (S0^+ / c, rank log c + log pdet S0, rank)."""
    pinv, log_pdet, rank = factors
    scale = jnp.asarray(scale)
    return pinv / scale[..., None, None], rank * jnp.log(scale) + log_pdet, rank


def _expected_gaussian_logpdf(second_moment, count, factors):
    """sum_t w_t E[log N(r_t; 0, S)] on the range of S (a degenerate Gaussian when S is
    singular), given count = sum_t w_t, second_moment = sum_t w_t E[r_t r_t^T] and the
    factors (S^+, log pdet S, rank S):

        -1/2 [count (rank(S) log 2 pi + log pdet S) + tr(S^+ second_moment)].

    With singular S this is the density with respect to Lebesgue measure on the range of S,
    where the model puts the residual; S^+ drops the round-off outside it. Batched."""
    pinv, log_pdet, rank = factors
    trace = jnp.sum(pinv * second_moment, axis=(-2, -1))  # tr(S^+ E), both symmetric
    return -0.5 * (count * (rank * _LOG_2PI + log_pdet) + trace)


def _masked(covs, observed):
    """R_j over the observed coordinates of each y_t, padded to (T, M, o, o) with the
    identity's entries at the missing ones (``mask_emission``)."""
    both = observed[:, :, None] & observed[:, None, :]  # (T, o, o)
    eye = jnp.eye(observed.shape[1], dtype=covs.dtype)
    return jnp.where(both[:, None], covs[None], eye)


def _masked_factors(factorise, covs, observed):
    """The factors of R_j over the observed coordinates of each y_t, (T, M, ...): those of the
    identity-padded matrix (``_masked``), whose padding adds nothing to the log pdet nor to
    the trace (the residual's second moment is zero there), with the padded rows taken off
    the rank."""
    pinv, log_pdet, rank = factorise(_masked(covs, observed))
    num_missing = jnp.sum(~observed, axis=1)[:, None].astype(rank.dtype)
    return pinv, log_pdet, rank - num_missing


def _state_space_factors(free, theta_fixed, obs, partial):
    """The factors (``_psd_factors``) of the covariance bases P0_j, Q0_j, R0_j that are not
    free (constants of the M-step; R0_j per step over its observed coordinates when
    ``partial``), keyed by field."""
    out = {}
    for name in _SCALED_COVS:
        if name in free:
            continue
        if name == "emission_covs" and partial:
            out[name] = _masked_factors(_psd_factors, theta_fixed[name], ~jnp.isnan(obs))
        else:
            out[name] = _psd_factors(theta_fixed[name])
    return out


def _negative_q_state_space(spec, free, z, theta_fixed, mo, obs, u, partial, constants):
    """-Q(theta) / T for a switching state-space model, from the E-step's ``SmootherMoments``
    (gamma_t(j) = P(s_t = j | y), xi_t(i, j) = P(s_{t-1} = i, s_t = j | y), and the moments
    given s_t = j):

        Q = sum_j gamma_1(j) log pi0_j + sum_{t>=2} sum_ij xi_t(i, j) log Pi_ij
          + sum_j gamma_1(j) E[log N(x_1; m0_j, P0_j) | s_1 = j]
          + sum_{t>=2} sum_j gamma_t(j) E[log N(x_t; F_j x_{t-1} + b_j + B_j u_t, Q_j) | s_t = j]
          + sum_t sum_j gamma_t(j) E[log N(y_t; H_j x_t + d_j + D_j u_t, R_j) | s_t = j]

    (the last over the observed coordinates of y_t). Each expectation is the trace form
    E[log N(r; 0, S)] = -1/2 [rank(S) log 2 pi + log pdet S + tr(S^+ E[r r^T])]
    (``_expected_gaussian_logpdf``) with the second moments of the residuals:

        dynamics: E[r r^T | s_t = j] = P_t - F_j C_t^T - C_t F_j^T + F_j P'_t F_j^T + e e^T,
            e = m_t - F_j m'_t - b_j - B_j u_t, with (m_t, P_t) = E, Cov[x_t | s_t = j],
            (m'_t, P'_t) = E, Cov[x_{t-1} | s_t = j], C_t = Cov[x_t, x_{t-1} | s_t = j];
        emission: E[r r^T | s_t = j] = H_j P_t H_j^T + e e^T, e = y_t - H_j m_t - d_j - D_j u_t;
        initial: E[r r^T | s_1 = j] = P_1 + (m_1 - m0_j)(m_1 - m0_j)^T.

    Only first and second moments enter, so collapsing the pairs onto s_t is exact here.

    Singular covariances: Q_j = c_j Q0_j with Q0_j fixed enters through the pseudo-inverse
    and pseudo-determinant of Q0_j (``factors``, computed once per M-step): the density on
    the range of Q0_j, where the model puts the residual, with respect to Lebesgue measure
    there, in which the free scale enters as rank(Q0_j) log c_j + tr(Q0_j^+ E[r r^T]) / c_j
    (its gradient is the log-likelihood's, Fisher's identity; tested). The mean parameters
    of that residual (F_j, b_j, B_j) are not fitted then: off the range the complete-data
    density is degenerate (``_check_em_free`` refuses them). Likewise R_j = r_j R0_j and
    P0_j. A freed base (``dynamics_covs`` etc.) is positive definite by its parametrisation
    (Cholesky).
    ``partial`` (static): some row of y is partly missing, so the emission term is summed
    step by step over the observed coordinates; otherwise per mode over the wholly observed
    rows. ``constants`` = (``_state_space_factors``, ``_state_space_sums``), the parts that
    do not depend on theta, computed once per M-step."""
    factors, sums = constants
    theta = _constrain(spec, free, theta_fixed, z)
    p = build_params(spec.structure, theta)
    gamma, xi = mo.mode_probs, mo.pair_probs
    dyn_off, emi_off = jax.vmap(step_offsets, in_axes=(None, 0))(p, u)  # (T, M, d), (T, M, o)
    observed = ~jnp.isnan(obs)

    def cov_factors(name):
        scale = _SCALED_COVS[name]
        if name in free:  # positive definite by its parametrisation
            if name == "emission_covs" and partial:
                return _masked_factors(_pd_factors, p.emission_covs, observed)
            return _pd_factors(getattr(p, name))
        if scale is None:
            return factors[name]
        c = theta[scale]
        return _scaled(factors[name], c[None] if name == "emission_covs" and partial else c)

    q = jnp.sum(jnp.where(gamma[0] > 0, gamma[0] * log_probabilities(p.initial_probs), 0.0))
    q = q + jnp.sum(jnp.where(xi > 0, xi * log_probabilities(p.transition_matrix), 0.0))
    # the first state
    e0 = mo.means[0] - p.initial_means
    second0 = gamma[0][:, None, None] * (mo.covs[0] + _outer(e0, e0))
    q = q + jnp.sum(_expected_gaussian_logpdf(second0, gamma[0], cov_factors("initial_covs")))
    # the dynamics, t = 2..T: the covariance part from the E-step's sums, the mean part per step
    f, f_t = p.dynamics_matrices, jnp.swapaxes(p.dynamics_matrices, -1, -2)
    g = gamma[1:, :, None, None]
    resid = mo.means[1:] - _mv(f, mo.prev_means) - dyn_off[1:]  # (T-1, M, d)
    f_cross = _mm(f, jnp.swapaxes(sums["cross"], -1, -2))
    second = (
        sums["cov_now"]
        - f_cross
        - jnp.swapaxes(f_cross, -1, -2)
        + _mm(_mm(f, sums["cov_prev"]), f_t)
        + jnp.sum(g * _outer(resid, resid), axis=0)
    )
    q = q + jnp.sum(_expected_gaussian_logpdf(second, sums["n_dyn"], cov_factors("dynamics_covs")))
    # the emissions
    h, h_t = p.emission_matrices, jnp.swapaxes(p.emission_matrices, -1, -2)
    y = jnp.where(observed, obs, 0.0)
    resid = y[:, None] - _mv(h, mo.means) - emi_off  # (T, M, o)
    emi_factors = cov_factors("emission_covs")
    if not partial:
        w = sums["w_emi"][:, :, None, None]  # gamma on the (wholly) observed rows
        second = _mm(_mm(h, sums["cov_emi"]), h_t) + jnp.sum(w * _outer(resid, resid), axis=0)
        q = q + jnp.sum(_expected_gaussian_logpdf(second, sums["n_emi"], emi_factors))
    else:
        both = observed[:, :, None] & observed[:, None, :]  # (T, o, o)
        hph = _mm(_mm(h, mo.covs), h_t)
        second = jnp.where(both[:, None], hph + _outer(resid, resid), 0.0)
        terms = _expected_gaussian_logpdf(gamma[..., None, None] * second, gamma, emi_factors)
        q = q + jnp.sum(terms)
    return -q / jnp.maximum(jnp.sum(gamma), 1.0)


def _outer(a, b):
    """a b^T over the last axis, batched."""
    return a[..., :, None] * b[..., None, :]


def _state_space_sums(mo: SmootherMoments, obs):
    """The sums over time of the E-step's second moments that do not depend on theta (once per
    M-step): with g_t(j) = gamma_t(j), t >= 2, sum_t g P_t, sum_t g P'_t, sum_t g C_t and
    sum_t g; for the emissions (rows wholly observed or missing) w_t(j) = gamma_t(j) 1[y_t
    observed], sum_t w P_t and sum_t w."""
    g = mo.mode_probs[1:]
    w = mo.mode_probs * jnp.any(~jnp.isnan(obs), axis=1)[:, None]

    def weighted(weights, covs):
        return jnp.sum(weights[:, :, None, None] * covs, axis=0)

    return {
        "n_dyn": jnp.sum(g, axis=0),
        "cov_now": weighted(g, mo.covs[1:]),
        "cov_prev": weighted(g, mo.prev_covs),
        "cross": weighted(g, mo.cross_covs),
        "w_emi": w,
        "n_emi": jnp.sum(w, axis=0),
        "cov_emi": weighted(w, mo.covs),
    }


def _negative_q(spec, free, z, theta_fixed, stats, obs, u, partial, constants):
    """-Q(theta) / T of the model's kind (``_negative_q_constant_state``,
    ``_negative_q_state_space``)."""
    if spec.structure.kind == "state_space":
        return _negative_q_state_space(
            spec, free, z, theta_fixed, stats, obs, u, partial, constants
        )
    return _negative_q_constant_state(spec, free, z, theta_fixed, stats, obs, u)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _covariance_factors(free, partial, theta, obs):
    """``_state_space_factors`` of a fit, compiled on its own: the covariance bases that are
    not free stay fixed through EM, so their factors are computed once per fit."""
    return _state_space_factors(free, theta, obs, partial)


def _closed_form_transition(structure, theta, xi):
    """The regime transition counts sum_t xi_t(a, b) normalised by row (a regime never left
    keeps its row)."""
    counts = _regime_transition_counts(structure, xi)
    total = jnp.sum(counts, axis=1, keepdims=True)
    return jnp.where(
        total > 0, counts / jnp.where(total > 0, total, 1.0), theta["transition_matrix"]
    )


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3))
def _m_step(spec_key, free, num_steps_inner, partial, theta, stats, obs, u, factors):
    """The M-step of a generalised EM, from theta to the next theta (one compiled program).

    1. If the transition matrix is free, its closed-form update, the regime transition counts
       sum_t xi_t(a, b) normalised by row (``_closed_form_transition``). For a state-space
       model it maximises the only term of Q that depends on P, so it is taken; for the
       econometric models (pi0 = the ergodic distribution of P, of the tuple chain for
       MS-AR) it is kept only if it does not lower Q.
    2. Up to ``num_steps_inner`` L-BFGS steps (``optax.lbfgs``; a backtracking line search
       for a state-space model, the zoom search otherwise) on -Q(theta) / T
       (``_negative_q``) over the unconstrained coordinates of the free parameters, each
       accepted only if it does not raise -Q (the line search's value at the new point); the
       first rejected step ends the M-step (the solver's state then no longer matches the
       point).

    ``factors``: a state-space model's ``_covariance_factors`` (None otherwise).
    """
    spec = _SPECS[spec_key]
    state_space = spec.structure.kind == "state_space"
    if "transition_matrix" in free:
        xi = stats.pair_probs if state_space else stats[1]
        closed = theta | {"transition_matrix": _closed_form_transition(spec.structure, theta, xi)}
    fixed = {n: v for n, v in theta.items() if n not in free}
    constants = (factors, _state_space_sums(stats, obs)) if state_space else None

    def objective(f):
        return _negative_q(spec, free, unravel(f), fixed, stats, obs, u, partial, constants)

    start = closed if state_space and "transition_matrix" in free else theta
    flat, unravel = ravel_pytree(_unconstrain(spec, free, start))
    if "transition_matrix" in free and not state_space:
        flat_closed = ravel_pytree(_unconstrain(spec, free, closed))[0]
        better = jnp.all(jnp.isfinite(flat_closed)) & (objective(flat_closed) <= objective(flat))
        flat = jnp.where(better, flat_closed, flat)

    if state_space:
        # a backtracking (Armijo) line search: its program is about half the zoom search's,
        # which halves the compile time of this kernel (the steps and the fixed point agree)
        linesearch = optax.scale_by_backtracking_linesearch(
            max_backtracking_steps=20, store_grad=True
        )
        solver = optax.lbfgs(linesearch=linesearch)
    else:
        solver = optax.lbfgs()
    value_and_grad = optax.value_and_grad_from_state(objective)

    def cond(carry):
        i, _, _, done = carry
        return (i < num_steps_inner) & ~done

    def body(carry):
        i, f, state, _ = carry
        value, grad = value_and_grad(f, state=state)
        updates, state = solver.update(grad, state, f, value=value, grad=grad, value_fn=objective)
        new = optax.apply_updates(f, updates)
        new_value = optax.tree_utils.tree_get(state, "value")  # the line search's, at new
        accept = jnp.all(jnp.isfinite(new)) & jnp.isfinite(new_value) & (new_value <= value)
        return i + 1, jnp.where(accept, new, f), state, ~accept

    init = (jnp.asarray(0), flat, solver.init(flat), jnp.asarray(False))
    _, flat, _, _ = jax.lax.while_loop(cond, body, init)
    return _constrain(spec, free, fixed, unravel(flat))


def _state_space_moments(spec_key, likelihood, theta, obs, u) -> SmootherMoments:
    """The E-step of a state-space model: Kim's smoother over the named filter
    (``kim_smoother_moments``), or the enumeration of the mode histories for "exact"
    (``exact_smoother_moments``). The compiled kernels are those of the public functions
    (``_imm_filter``, ``_kim_moments``, ``_exact_moments``, ...), so a fit shares them."""
    params = build_params(_SPECS[spec_key].structure, theta)
    if likelihood == "exact":
        return _exact_moments(params, obs, u)
    return _kim_moments(params, filter_unchecked(params, obs, u, likelihood), u)


def _partly_missing(observations) -> bool:
    """Whether some row of y has both observed and missing (NaN) coordinates."""
    missing = np.isnan(np.asarray(observations))
    return bool(np.any(missing.any(axis=1) & ~missing.all(axis=1)))


def _em_switching(
    spec: SwitchingSpec,
    observations,
    *,
    inputs,
    free: tuple,
    max_iterations: int,
    tolerance: float,
    began: float,
    likelihood: str,
) -> SwitchingFitResult:
    """EM for a parametrised switching model (Dempster, Laird and Rubin 1977).

    Econometric models (a constant state: ``markov_switching_regression``,
    ``markov_switching_ar``; Hamilton 1990): the filter and the backward recursion give
    gamma_t(j) = P(s_t = j | y) and xi_t(i, j) = P(s_t = i, s_{t+1} = j | y)
    (``pairwise_mode_probabilities``); Q is ``_negative_q_constant_state``'s.

    State-space models (``switching_state_space``; Shumway and Stoffer 1982 for M = 1, Kim
    1994 and Kim and Nelson 1999, ch. 5, for the switching smoother, Murphy 1998, "Switching
    Kalman filters", for EM on it): the E-step is Kim's smoother over the filter named by
    ``likelihood`` ("imm", "gpb2", "gpb1", "kalman"), which gives the per-mode moments of
    x_t given s_t, the pairwise mode probabilities and the lag-one cross-covariances
    Cov[x_t, x_{t-1} | s_t = j, y] (``kim_smoother_moments``), or for "exact" the same
    statistics by enumerating the M^T mode histories (``exact_smoother_moments``); Q is
    ``_negative_q_state_space``'s (trace forms in those moments).

    M-step: the regime transition matrix first in closed form, P_ab = sum_t xi_t(a, b) /
    sum_b' (...) on the regimes (summed over the tuple modes of MS-AR; Hamilton's update, which
    ignores that pi0 = the ergodic distribution depends on P in the econometric models), then
    every free parameter by L-BFGS steps on Q from there in its unconstrained coordinates
    (``_m_step``), accepting only increases of Q. If the closed-form step lowered Q it is
    dropped (it cannot for a state-space model, where it maximises the only term with P).
    A generalised EM: Q never decreases, so where the E-step is exact (the constant
    state; M = 1; "exact"; F_j = 0, where every collapse is exact) the log-likelihood trace is
    non-decreasing (tested). With Kim's approximate E-step (M > 1, F_j != 0) it is EM on an
    approximate posterior and the trace need not be monotone. Stops when the increase is
    below ``tolerance`` times T; a larger decrease stops it too, unconverged (the returned
    theta is the last E-step's, whose log-likelihood ends the trace).
    """
    structure = spec.structure
    state_space = structure.kind == "state_space"
    dtype = observations.dtype
    theta = {n: jnp.asarray(v, dtype) for n, v in spec.theta.items()}
    spec_key = _spec_key(spec._replace(theta=theta))
    partial = state_space and _partly_missing(observations)
    factors = _covariance_factors(free, partial, theta, observations) if state_space else None
    num_obs = int(np.sum(np.any(~np.isnan(np.asarray(observations)), axis=-1)))
    trace = []
    converged = False
    previous = theta
    for _ in range(max_iterations):
        if state_space:
            stats = _state_space_moments(spec_key, likelihood, theta, observations, inputs)
            ll = stats.log_likelihood
        else:
            ll, smooth, xi = _em_expectations(spec_key, likelihood, theta, observations, inputs)
            stats = (smooth, xi)
        trace.append(float(ll))
        if len(trace) > 1 and trace[-1] - trace[-2] < tolerance * num_obs:
            # converged unless it fell by more (only an approximate E-step can lower it); then
            # the step is undone: the result is the last iterate that raised log L
            converged = trace[-1] - trace[-2] > -tolerance * num_obs
            if not converged:
                trace.pop()
                theta = previous
            break
        previous = theta
        theta = _m_step(spec_key, free, 10, partial, theta, stats, observations, inputs, factors)
    theta = {n: np.asarray(v) for n, v in theta.items()}
    return SwitchingFitResult(
        params=build_params(structure, theta),
        theta=theta,
        log_likelihood=np.asarray(trace),
        stderr={n: np.full(np.shape(v), np.nan) for n, v in theta.items()},
        start_log_likelihoods=np.asarray(trace[-1:]),
        num_parameters=_num_free(spec, free),
        num_observations=num_obs,
        converged=converged,
        method="em",
        likelihood=likelihood,
        seconds=time.perf_counter() - began,
    )


# ----------------------------------------------------------------------------- summaries


def smoothed_regime_probabilities(spec: SwitchingSpec, theta=None, *, likelihood="imm"):
    """P(s_t = j | y_{1:T}) of the regimes (T, M): the modes' smoothed probabilities (the
    backward recursion on the filter's mode probabilities, exact for the econometric models)
    summed over the modes of each regime (the tuples of MS-AR)."""
    spec = _check_spec("spec", spec)
    theta = _check_theta("theta", spec, theta)
    obs, u = _data(spec, None, None)
    likelihood = _check_likelihood(likelihood, spec.structure, obs.shape[0])
    _, smooth, _ = _em_expectations(_spec_key(spec), likelihood, theta, obs, u)
    return np.asarray(regime_probabilities(spec.structure, smooth))


# ----------------------------------------------------------------------------- forecasts


class SwitchingForecast(NamedTuple):
    """k-step-ahead predictive distributions of y_{T+1..T+H} given y_{1:T} and theta.

    Attributes:
        mean: (H, o) E[y_{T+h} | y_{1:T}] (Monte Carlo).
        levels: (L,) the central interval levels, e.g. (0.5, 0.9).
        lower, upper: (L, H, o) the interval bounds (the (1 -+ level) / 2 quantiles of the
            draws).
        regime_probs: (H, M) P(s_{T+h} = j | y_{1:T}) (exact: filtered mode probabilities
            propagated by Pi^h, summed over the modes of each regime).
        draws: (num_draws, H, o) the simulated paths.
    """

    mean: np.ndarray
    levels: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    regime_probs: np.ndarray
    draws: np.ndarray


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3))
def _forecast_paths(spec_key, likelihood, horizon, num_draws, key, theta, obs, u, future):
    spec = _SPECS[spec_key]
    structure = spec.structure
    params = build_params(structure, theta)
    if likelihood == "exact" and structure.kind != "state_space":
        _, probs = hamilton_filter(params, obs, u)
        m = params.initial_probs.shape[0]
        d = params.initial_means.shape[1]
        means, covs = jnp.zeros((m, d), obs.dtype), jnp.zeros((m, d, d), obs.dtype)
        last_probs = probs[-1]
    else:
        res = filter_unchecked(params, obs, u, likelihood)
        last_probs, means, covs = res.mode_probs[-1], res.means[-1], res.covs[-1]
    order = structure.order if structure.kind == "ar" else 0
    # the last p values of the series (most recent first): y_T, then u_T's first p - 1 lags
    history = jnp.concatenate([obs[-1, :1], u[-1, : max(order - 1, 0)]])[:order]

    chol_q, chol_r, chol_p = (
        psd_factor(params.dynamics_covs),
        psd_factor(params.emission_covs),
        psd_factor(covs),
    )

    def one_path(key):
        key_s, key_x, key_steps = jax.random.split(key, 3)
        s = jax.random.categorical(key_s, log_probabilities(last_probs))
        x = means[s] + chol_p[s] @ jax.random.normal(key_x, means.shape[1:], obs.dtype)

        def step(carry, inp):
            s, x, lags = carry
            key, u_future = inp
            k_s, k_x, k_y = jax.random.split(key, 3)
            u_t = lags if order else u_future
            dyn, emi = step_offsets(params, u_t)
            s = jax.random.categorical(k_s, log_probabilities(params.transition_matrix[s]))
            x = params.dynamics_matrices[s] @ x + dyn[s]
            x = x + chol_q[s] @ jax.random.normal(k_x, x.shape, obs.dtype)
            eps = jax.random.normal(k_y, (obs.shape[1],), obs.dtype)
            y = params.emission_matrices[s] @ x + emi[s] + chol_r[s] @ eps
            lags = jnp.concatenate([y[:1], lags[:-1]])[:order] if order else lags
            return (s, x, lags), y

        keys = jax.random.split(key_steps, horizon)
        _, ys = jax.lax.scan(step, (s, x, history), (keys, future))
        return ys

    paths = jax.vmap(one_path)(jax.random.split(key, num_draws))
    trans_h = jax.lax.scan(
        lambda p, _: (p @ params.transition_matrix, p @ params.transition_matrix),
        last_probs,
        None,
        length=horizon,
    )[1]
    return paths, regime_probabilities(structure, trans_h)


def forecast_switching(
    key,
    spec: SwitchingSpec,
    theta=None,
    horizon: int = 8,
    *,
    future_inputs=None,
    likelihood: str = "imm",
    num_draws: int = 4000,
    levels=(0.5, 0.9),
) -> SwitchingForecast:
    """k-step-ahead forecasts of y_{T+1..T+H} with central intervals, by simulation from the
    filtered distribution at T.

    Each path draws (s_T, x_T) from the filter's mode probabilities and per-mode Gaussians at
    T (exact for the econometric models; the named filter's approximation otherwise), then
    runs the model forward: s_{t+1} ~ Pi[s_t], x_{t+1} = F x_t + b + B u_{t+1} + noise,
    y_{t+1} = H x_{t+1} + d + D u_{t+1} + noise. For MS-AR the inputs are the lags, taken from
    the series and then from the path itself (so the intervals carry the regime and the
    autoregressive uncertainty); other models with inputs need ``future_inputs`` (H, k).
    The regime probabilities are exact: the filtered ones times Pi^h. (statsmodels has no
    out-of-sample forecast for its Markov-switching models.)

    Args:
        key: a ``jax.random`` key.
        spec: ``SwitchingSpec`` with its data (the forecast origin is its last step).
        theta: the parameters (default ``spec.theta``, e.g. ``fit.theta``).
        horizon: H >= 1.
        future_inputs: (H, k) u_{T+1..T+H} for a regression or state-space model with inputs.
        likelihood: the filter at T ("exact", "gpb2", "imm", "gpb1", "kalman").
        num_draws: simulated paths.
        levels: central interval levels in (0, 1).

    Not traceable: a Python-level driver (validation, quantiles in NumPy) over the compiled
    kernel ``_forecast_paths``; ``jit``/``vmap`` the filters or ``switching_log_likelihood``
    instead.
    """
    validation.check_key("key", key)
    spec = _check_spec("spec", spec)
    theta = _check_theta("theta", spec, theta)
    obs, u = _data(spec, None, None)
    likelihood = _check_likelihood(likelihood, spec.structure, obs.shape[0])
    horizon = validation.check_positive_int("horizon", horizon)
    num_draws = validation.check_positive_int("num_draws", num_draws)
    levels_arr = validation.as_float_array("levels", levels).reshape(-1)
    if levels_arr.size == 0 or np.any((levels_arr <= 0) | (levels_arr >= 1)):
        raise ValueError(f"levels: expected numbers in (0, 1), got {levels}")
    k = spec.inputs.shape[1]
    if spec.structure.kind == "ar" or k == 0:
        if future_inputs is not None and spec.structure.kind == "ar":
            raise ValueError("future_inputs: an MS-AR model's inputs are its own lags")
        future = np.zeros((horizon, k), obs.dtype)
    else:
        if future_inputs is None:
            raise ValueError(
                f"future_inputs: required (shape ({horizon}, {k})), the model has inputs"
            )
        future = validation.as_float_array("future_inputs", future_inputs)
        if future.shape != (horizon, k):
            raise ValueError(f"future_inputs: expected shape ({horizon}, {k}), got {future.shape}")
        validation.check_finite("future_inputs", future)
    paths, regimes = _forecast_paths(
        _spec_key(spec), likelihood, horizon, num_draws, key, theta, obs, u, future
    )
    paths = np.asarray(paths)
    lower = np.stack([np.quantile(paths, (1 - lv) / 2, axis=0) for lv in levels_arr])
    upper = np.stack([np.quantile(paths, (1 + lv) / 2, axis=0) for lv in levels_arr])
    return SwitchingForecast(
        mean=paths.mean(axis=0),
        levels=levels_arr,
        lower=lower,
        upper=upper,
        regime_probs=np.asarray(regimes),
        draws=paths,
    )


# ----------------------------------------------------------------------------- regimes


class RegimeSelection(NamedTuple):
    """Candidate numbers of regimes, each fitted by maximum likelihood.

    Attributes:
        num_regimes: (C,) the candidates M.
        log_likelihood, num_parameters, aic, bic: (C,) of the fit on the whole series.
        heldout_log_predictive: (C,) sum over the last ``holdout`` steps of
            log p(y_t | y_{1:t-1}, theta_hat), theta_hat fitted on the steps before them
            (a leave-future-out score with one fit per candidate, no refits).
        best_bic, best_heldout: the M each criterion picks.
        fits: the ``SwitchingFitResult`` of each candidate (whole series).
    """

    num_regimes: np.ndarray
    log_likelihood: np.ndarray
    num_parameters: np.ndarray
    aic: np.ndarray
    bic: np.ndarray
    heldout_log_predictive: np.ndarray
    best_bic: int
    best_heldout: int
    fits: tuple


def select_num_regimes(
    key,
    make_spec,
    endog,
    *,
    candidates=(1, 2, 3),
    holdout: int = 40,
    likelihood: str = "exact",
    num_starts: int = 8,
) -> RegimeSelection:
    """Choose the number of regimes by BIC and by held-out one-step predictive density.

    ``make_spec(endog, num_regimes)`` builds each candidate (e.g.
    ``lambda y, m: markov_switching_ar(y, 2, num_regimes=m)``). Each is fitted by
    ``fit_switching`` on the whole series (log-likelihood, k, AIC, BIC) and on all but the
    last ``holdout`` steps (marked missing, so both fits share one compiled program); the
    held-out score is log p(y_{T-H+1:T} | y_{1:T-H}, theta_hat) =
    log L_T(theta_hat) - log L_{T-H}(theta_hat), the sum of the one-step-ahead predictive log
    densities of the held-out steps.

    Not traceable: a Python-level driver (one ``fit_switching`` per candidate, NumPy
    results) over compiled kernels; ``jit``/``vmap`` ``switching_log_likelihood`` instead.

    Raises:
        ValueError: naming the argument (``key`` not a ``jax.random`` key, a bad ``endog``,
            ``holdout`` or ``candidates``).
    """
    validation.check_key("key", key)
    endog = validation.as_float_array("endog", endog).reshape(-1)
    holdout = validation.check_positive_int("holdout", holdout)
    if holdout >= endog.shape[0] - 10:
        raise ValueError(f"holdout: {holdout} leaves too few of the {endog.shape[0]} steps to fit")
    candidates = tuple(validation.check_positive_int("candidates", c) for c in candidates)
    keys = jax.random.split(key, 2 * len(candidates))
    rows, fits = [], []
    for c, m in enumerate(candidates):
        full_spec = make_spec(endog, m)
        full = fit_switching(
            keys[2 * c], None, full_spec, likelihood=likelihood, num_starts=num_starts
        )
        # the training fit: the same series with its last steps missing (NaN), so it reuses
        # the compiled fit of the whole series (same shapes)
        masked = np.array(full_spec.observations)
        masked[-holdout:] = np.nan
        train = fit_switching(
            keys[2 * c + 1],
            masked,
            full_spec,
            inputs=full_spec.inputs,
            likelihood=likelihood,
            num_starts=num_starts,
        )
        whole = float(switching_log_likelihood(full_spec, train.theta, likelihood=likelihood))
        crit = information_criteria(full)
        rows.append(
            (
                float(full.log_likelihood[-1]),
                full.num_parameters,
                crit["aic"],
                crit["bic"],
                whole - float(train.log_likelihood[-1]),
            )
        )
        fits.append(full)
    ll, k, aic, bic, heldout = (np.asarray(col) for col in zip(*rows, strict=True))
    return RegimeSelection(
        num_regimes=np.asarray(candidates),
        log_likelihood=ll,
        num_parameters=k,
        aic=aic,
        bic=bic,
        heldout_log_predictive=heldout,
        best_bic=int(candidates[int(np.argmin(bic))]),
        best_heldout=int(candidates[int(np.argmax(heldout))]),
        fits=tuple(fits),
    )


__all__ = [
    "LIKELIHOODS",
    "METHODS",
    "RegimeSelection",
    "SwitchingFitResult",
    "SwitchingForecast",
    "expected_durations",
    "filter_unchecked",
    "fit_switching",
    "forecast_switching",
    "hamilton_filter",
    "information_criteria",
    "pairwise_mode_probabilities",
    "select_num_regimes",
    "smoothed_regime_probabilities",
    "switching_log_likelihood",
]
