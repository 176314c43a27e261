"""Learning the parameters of switching models: the filter likelihood, maximum likelihood,
EM, and what statsmodels users read off a fit.

The likelihood log p(y_{1:T} | theta), states and modes integrated out, is a filter's
(``likelihood``): "exact" (all M^T mode histories, short series), "gpb2", "imm", "gpb1"
(the collapsed approximations; exact where the collapse is, e.g. the econometric models of
``attnbayes.models.markov_switching`` whose state is a constant), or "kalman" (M = 1). It is
a pure JAX function of theta, so it is differentiated and compiled once per shape.

- ``switching_log_likelihood(spec, theta, ...)``: that function.
- ``fit_switching(key, observations, init, method="mle" | "em", ...)``: maximum likelihood by
  L-BFGS (optax) on the unconstrained parametrisation of the free parameters
  (``numpyro.distributions.transforms.biject_to`` of each parameter's support: stick-breaking
  for transition rows, log for variances, an ordered transform for regime means), from
  several starts (vmapped, one compilation); standard errors from the Hessian (the observed
  information, mapped to the reported parametrisation by the delta method); or EM
  (Dempster, Laird and Rubin 1977; Hamilton 1990) with the smoothed pairwise regime
  probabilities in the E-step.
- ``smoothed_regime_probabilities``, ``expected_durations``, ``information_criteria``,
  ``forecast`` (k-step predictive mixtures with intervals).
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
from .filters import _exact_filter, _gpb1_filter, _gpb2_filter, _imm_filter, all_histories
from .kalman import _kalman_filter, check_inputs, log_probabilities

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
            if not bool(spec.support[key](jnp.asarray(arr)).all()):
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
    """L-BFGS from each start z0 (batched): minimise -log L / T."""
    spec = _SPECS[spec_key]
    num_steps = jnp.sum(jnp.any(~jnp.isnan(obs), axis=-1)).astype(obs.dtype)
    _, unravel = ravel_pytree(jax.tree.map(lambda a: a[0], z0))

    def objective(flat):
        theta = _constrain(spec, free, theta_fixed, unravel(flat))
        return -_log_likelihood(spec.structure, likelihood, theta, obs, u) / num_steps

    solver = optax.lbfgs()
    value_and_grad = optax.value_and_grad_from_state(objective)

    def run(z):
        flat = ravel_pytree(z)[0]
        state = solver.init(flat)
        trace = jnp.full((max_iterations + 1,), jnp.nan, flat.dtype)

        def cond(carry):
            _, state, _, done = carry
            count = optax.tree_utils.tree_get(state, "count")
            return (count < max_iterations) & ~done

        def body(carry):
            flat, state, trace, _ = carry
            value, grad = value_and_grad(flat, state=state)
            count = optax.tree_utils.tree_get(state, "count")
            trace = trace.at[count].set(-value * num_steps)
            updates, state = solver.update(
                grad, state, flat, value=value, grad=grad, value_fn=objective
            )
            new = optax.apply_updates(flat, updates)
            done = (jnp.max(jnp.abs(grad)) < tol) | ~jnp.all(jnp.isfinite(new))
            flat = jnp.where(jnp.all(jnp.isfinite(new)), new, flat)
            return flat, state, trace, done

        flat, state, trace, _ = jax.lax.while_loop(
            cond, body, (flat, state, trace, jnp.asarray(False))
        )
        value, grad = jax.value_and_grad(objective)(flat)
        count = optax.tree_utils.tree_get(state, "count")
        trace = trace.at[count].set(-value * num_steps)
        return flat, -value * num_steps, jnp.max(jnp.abs(grad)) < tol, trace, count

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

    return jax.hessian(loglik)(flat), jax.jacfwd(reported)(flat)


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

    "mle": L-BFGS (``optax.lbfgs``, zoom line search) on -log L(theta) / T over the
    unconstrained coordinates z of the free parameters (theta = biject_to(support)(z)), from
    ``num_starts`` starts: ``init``'s theta and perturbations z + N(0, start_scale^2) drawn
    with ``key``, all run in one vmapped, compiled program; the best end point is returned,
    with standard errors from the Hessian of log L (delta method to the reported
    parametrisation). Converged: max |gradient of log L / T| < ``tolerance``.

    "em": see ``_em_switching`` (EM for the econometric models).

    Args:
        key: a ``jax.random`` key (the starts).
        observations: (T, o); ``None`` for the spec's own data (then ``inputs`` too).
        init: ``SwitchingSpec`` (its theta is the first start) or ``SwitchingParams`` (a
            generic model, ``switching_state_space``).
        method: "mle" or "em".
        likelihood: "exact", "gpb2", "imm" (default), "gpb1", "kalman".
        inputs: (T, k) u_{1:T} when the model has inputs.
        free: names of the parameters to fit (default: the spec's identified set, e.g. for a
            generic model the transition matrix, biases/offsets and noise scales); the
            others stay at their values in ``init``.
        num_starts: >= 1.
        start_scale: > 0, the spread of the random starts (unconstrained units).
        max_iterations: per start.
        tolerance: > 0.

    Returns:
        ``SwitchingFitResult``.
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
    obs, u = _data(spec, observations, inputs)
    likelihood = _check_likelihood(likelihood, spec.structure, obs.shape[0])
    num_starts = validation.check_positive_int("num_starts", num_starts)
    max_iterations = validation.check_positive_int("max_iterations", max_iterations)
    start_scale = validation.check_positive_scalar("start_scale", start_scale)
    tolerance = validation.check_positive_scalar("tolerance", tolerance)
    if method == "em":
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


def _negative_q(spec, free, z, theta_fixed, gamma, xi, obs, u):
    """-Q(theta) / T, the expected complete-data log-likelihood of the E-step's gamma, xi:

        Q(theta) = sum_j gamma_1(j) log pi0_j + sum_t sum_ij xi_t(i, j) log Pi_ij
                   + sum_t sum_j gamma_t(j) log N(y_t; d_j + D_j u_t, R_j)

    over the filter's modes (the regime tuples of MS-AR, whose Pi and pi0 are functions of
    the regime transition matrix), for a model with a constant state."""
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


@functools.partial(jax.jit, static_argnums=(0, 1))
def _negative_q_jit(spec_key, free, z, theta_fixed, gamma, xi, obs, u):
    return _negative_q(_SPECS[spec_key], free, z, theta_fixed, gamma, xi, obs, u)


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _m_step(spec_key, free, num_steps_inner, z, theta_fixed, gamma, xi, obs, u):
    """The M-step of a generalised EM: ``num_steps_inner`` L-BFGS steps on -Q(theta) / T
    (``_negative_q``) from the current value, each accepted only if it lowers -Q."""
    spec = _SPECS[spec_key]
    flat, unravel = ravel_pytree(z)

    def objective(f):
        return _negative_q(spec, free, unravel(f), theta_fixed, gamma, xi, obs, u)

    solver = optax.lbfgs()
    value_and_grad = optax.value_and_grad_from_state(objective)

    def body(_, carry):
        f, state = carry
        value, grad = value_and_grad(f, state=state)
        updates, state = solver.update(grad, state, f, value=value, grad=grad, value_fn=objective)
        new = optax.apply_updates(f, updates)
        accept = jnp.all(jnp.isfinite(new)) & (objective(new) <= value)
        return jnp.where(accept, new, f), state

    flat, _ = jax.lax.fori_loop(0, num_steps_inner, body, (flat, solver.init(flat)))
    return unravel(flat)


def _q_values(spec_key, free, thetas, gamma, xi, obs, u):
    """Q at each theta of ``thetas`` (``_m_step``'s objective, up to the factor -1/T)."""
    spec = _SPECS[spec_key]
    out = []
    for theta in thetas:
        fixed = {n: v for n, v in theta.items() if n not in free}
        z = _unconstrain(spec, free, theta)
        out.append(float(_negative_q_jit(spec_key, free, z, fixed, gamma, xi, obs, u)))
    return -out[0], -out[1]


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
    """EM for the econometric models (a constant state: ``markov_switching_regression``,
    ``markov_switching_ar``), Hamilton (1990).

    E-step: the filter and the backward recursion give gamma_t(j) = P(s_t = j | y) and
    xi_t(i, j) = P(s_t = i, s_{t+1} = j | y) (``pairwise_mode_probabilities``). M-step: the
    regime transition matrix first in closed form, P_ab = sum_t xi_t(a, b) / sum_b' (...) on
    the regimes (summed over the tuple modes of MS-AR; Hamilton's update, which ignores that
    pi0 = the ergodic distribution depends on P), then every free parameter by L-BFGS steps on
    the expected complete-data log-likelihood Q (``_m_step``: its initial, transition and
    emission terms) from there, accepting only increases of Q. If the closed-form step
    lowered Q it is dropped. A generalised EM: Q never decreases, and with the constant
    state the filter is exact, so the log-likelihood trace is non-decreasing (tested). Stops
    when the increase is below ``tolerance`` times T.
    """
    structure = spec.structure
    if structure.kind == "state_space":
        raise ValueError(
            "init: EM is implemented for the econometric models (markov_switching_regression, "
            "markov_switching_ar), whose state is constant; use method='mle' for a "
            "state-space model"
        )
    dtype = observations.dtype
    theta = {n: jnp.asarray(v, dtype) for n, v in spec.theta.items()}
    spec_key = _spec_key(spec._replace(theta=theta))
    num_obs = int(np.sum(np.any(~np.isnan(np.asarray(observations)), axis=-1)))
    trace = []
    converged = False
    for _ in range(max_iterations):
        ll, smooth, xi = _em_expectations(spec_key, likelihood, theta, observations, inputs)
        trace.append(float(ll))
        if len(trace) > 1 and trace[-1] - trace[-2] < tolerance * num_obs:
            converged = True
            break
        if "transition_matrix" in free:
            counts = _regime_transition_counts(structure, xi)
            closed = theta | {"transition_matrix": counts / jnp.sum(counts, axis=1, keepdims=True)}
            q_old, q_new = _q_values(
                spec_key, free, (theta, closed), smooth, xi, observations, inputs
            )
            if q_new >= q_old:
                theta = closed
        fixed = {n: v for n, v in theta.items() if n not in free}
        z = _unconstrain(spec, free, theta)
        z = _m_step(spec_key, free, 10, z, fixed, smooth, xi, observations, inputs)
        theta = _constrain(spec, free, fixed, z)
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
    """
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
