"""Gaussian building blocks of the switching-model filters: the Kalman filter and its steps.

Every filter of ``attnbayes.inference.switching.filters`` returns a ``FilterResult`` with the
per-mode Gaussians, their mixture moments and the log-likelihood log p(y_{1:T}). Time runs in
``lax.scan``; a NaN coordinate of an observation is missing (the update conditions on the
observed coordinates; a wholly missing row is a predict-only step). Inputs u_t enter as the
per-step offsets b_j + B_j u_t of the prediction and d_j + D_j u_t of the emission
(``attnbayes.models.switching.step_offsets``). The covariance update is in Joseph form,
P+ = (I - K H) P (I - K H)^T + K R K^T, symmetrised, so it stays symmetric PSD in finite
precision. The first state is drawn from the initial distribution: step 1 updates N(m0, P0)
with y_1, with no prediction before it (``attnbayes.models.switching``).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ... import validation
from ...models.switching import (
    SwitchingParams,
    as_float_field,
    check_input_series,
    check_params,
    check_transition_steps,
    step_offsets,
)
from .linalg import chol, mm, mv, solve_lower, solve_lower_t, symmetrise, transpose


class FilterResult(NamedTuple):
    """Filtered posteriors p(x_t, s_t | y_{1:t}).

    Attributes:
        mode_probs: (T, M) P(s_t = j | y_{1:t}).
        means: (T, M, d) E[x_t | s_t = j, y_{1:t}].
        covs: (T, M, d, d) Cov[x_t | s_t = j, y_{1:t}].
        mean: (T, d) E[x_t | y_{1:t}] (the moment-matched mixture).
        cov: (T, d, d) Cov[x_t | y_{1:t}].
        log_likelihood: () log p(y_{1:T}).
    """

    mode_probs: jax.Array
    means: jax.Array
    covs: jax.Array
    mean: jax.Array
    cov: jax.Array
    log_likelihood: jax.Array


def log_probabilities(probs):
    """log p with log 0 = -inf and a zero gradient at a zero entry, to every order (the
    double-``where`` form): a zero probability is a structural zero (e.g. the impossible
    moves between the regime tuples of an MS-AR model), and the derivatives of a filter's
    log-likelihood in the other entries stay finite, Hessians included."""
    positive = probs > 0
    return jnp.where(positive, jnp.log(jnp.where(positive, probs, 1.0)), -jnp.inf)


def log_normalise(log_w, axis=-1, fallback=None):
    """log_w - logsumexp(log_w) along ``axis`` (log of the normalised weights).

    Where every entry along ``axis`` is -inf (zero mass), ``fallback`` log weights (broadcast
    to ``log_w``) are used instead, or uniform weights when ``fallback`` is None.
    """
    if fallback is not None:
        empty = jnp.all(log_w == -jnp.inf, axis=axis, keepdims=True)
        log_w = jnp.where(empty, jnp.broadcast_to(fallback, log_w.shape), log_w)
    top = jnp.max(log_w, axis=axis, keepdims=True)
    finite = jnp.isfinite(top)
    shifted = jnp.where(finite, log_w - jnp.where(finite, top, 0.0), 0.0)
    return shifted - jnp.log(jnp.sum(jnp.exp(shifted), axis=axis, keepdims=True))


def normalise_log_weights(log_w, axis=-1, fallback=None):
    """exp(log_w) normalised along ``axis`` (see ``log_normalise`` for zero-mass slices)."""
    return jnp.exp(log_normalise(log_w, axis, fallback))


def moment_match(weights, means, covs):
    """Collapse a Gaussian mixture: weights (..., K), means (..., K, d), covs (..., K, d, d) ->
    mean = sum w m (..., d), cov = sum w (P + (m - mean)(m - mean)^T) (..., d, d)."""
    mean = jnp.einsum("...k,...kd->...d", weights, means)
    dev = means - mean[..., None, :]
    cov = jnp.einsum("...k,...kde->...de", weights, covs) + jnp.einsum(
        "...k,...kd,...ke->...de", weights, dev, dev
    )
    return mean, symmetrise(cov)


def kalman_predict(mean, cov, dynamics, bias, dynamics_cov):
    """x_{t+1} | y_{1:t} ~ N(F m + b, F P F^T + Q)."""
    return dynamics @ mean + bias, symmetrise(dynamics @ cov @ dynamics.T + dynamics_cov)


def mask_emission(y, emission, emission_cov):
    """The emission restricted to the observed (non-NaN) coordinates of y, at fixed shapes.

    Returns (y0, H0, R0, observed): y with 0 for a missing coordinate, H with its rows zeroed
    there, and R with those rows and columns replaced by the identity's, so that conditioning
    on (y0, H0, R0) is conditioning on the observed coordinates, plus an independent N(0; 0, 1)
    factor per missing one (whose log density -log(2 pi) / 2 the caller adds back).
    """
    observed = ~jnp.isnan(y)
    both = observed[:, None] & observed[None, :]
    eye = jnp.eye(y.shape[0], dtype=emission_cov.dtype)
    return (
        jnp.where(observed, y, 0.0),
        jnp.where(observed[:, None], emission, 0.0),
        jnp.where(both, emission_cov, eye),
        observed,
    )


def kalman_update(mean, cov, y, emission, emission_cov):
    """Condition N(m, P) on y ~ N(H x, R): (m+, P+ (Joseph form), log N(y; H m, H P H^T + R)).

    S = H P H^T + R = L L^T (Cholesky), K = P H^T S^-1 (two triangular solves),
    m+ = m + K (y - H m), P+ = (I - K H) P (I - K H)^T + K R K^T (symmetrised), and
    log N = -|L^-1 (y - H m)|^2 / 2 - sum log diag(L) - o log(2 pi) / 2.
    A NaN coordinate of y is missing: the update conditions on the observed coordinates only
    (``mask_emission``: the same shapes, so it runs under ``jit``), and a wholly missing y
    leaves (m, P) unchanged and contributes 0 to the log-likelihood. R may be singular where S
    stays positive definite (an exactly observed coordinate with a random prediction).
    For small matrices the products, the factorisation and the solves are written out in fused
    elementwise operations (``linalg``: faster on the CPU inside a scan than library calls);
    every filter, smoother, the RBPF and the Gibbs sampler use this one update. Differentiable
    in all its arguments where S is positive definite.
    """
    y, emission, emission_cov, observed = mask_emission(y, emission, emission_cov)
    h_cov = mm(emission, cov)
    factor_s = chol(symmetrise(mm(h_cov, transpose(emission)) + emission_cov))
    resid = y - mv(emission, mean)
    gain = transpose(solve_lower_t(factor_s, solve_lower(factor_s, h_cov)))  # P H' S^-1
    new_mean = mean + mv(gain, resid)
    factor = jnp.eye(mean.shape[0], dtype=mean.dtype) - mm(gain, emission)
    new_cov = symmetrise(
        mm(mm(factor, cov), transpose(factor)) + mm(mm(gain, emission_cov), transpose(gain))
    )
    white = solve_lower(factor_s, resid)
    log_lik = (
        -0.5 * jnp.sum(white**2)
        - jnp.sum(jnp.log(jnp.diagonal(factor_s)))
        - 0.5 * jnp.sum(observed) * jnp.log(2.0 * jnp.pi)
    )
    missing = ~jnp.any(observed)
    return (
        jnp.where(missing, mean, new_mean),
        jnp.where(missing, cov, new_cov),
        jnp.where(missing, 0.0, log_lik),
    )


def no_inputs(params: SwitchingParams, observations, inputs=None):
    """``inputs``, or the (T, 0) array of a model without inputs when it is None (for the
    unchecked kernels, whose ``inputs`` argument is optional)."""
    if inputs is not None:
        return inputs
    k = params.emission_input_weights.shape[-1]
    return jnp.zeros((observations.shape[0], k), observations.dtype)


@jax.jit
def kalman_filter_unchecked(params: SwitchingParams, observations, inputs=None) -> FilterResult:
    """``kalman_filter`` on checked arrays (``check_inputs``), M = 1; ``inputs`` (T, k) or None
    for a model without inputs. Traceable (``jit``, ``vmap``, ``grad``)."""
    inputs = no_inputs(params, observations, inputs)
    f, q = params.dynamics_matrices[0], params.dynamics_covs[0]
    h, r = params.emission_matrices[0], params.emission_covs[0]
    dyn_off, emi_off = jax.vmap(step_offsets, in_axes=(None, 0))(params, inputs)
    # the bias of the step out of t is that of t + 1 (its input u_{t+1}); the last is unused
    next_dyn = jnp.concatenate([dyn_off[1:, 0], dyn_off[-1:, 0]])

    def step(carry, inp):
        mean, cov, total = carry
        y, emi, b = inp
        mean, cov, ll = kalman_update(mean, cov, y - emi, h, r)
        pred = kalman_predict(mean, cov, f, b, q)
        return (*pred, total + ll), (mean, cov)

    init = (params.initial_means[0], params.initial_covs[0], jnp.zeros((), observations.dtype))
    (_, _, total), (means, covs) = jax.lax.scan(step, init, (observations, emi_off[:, 0], next_dyn))
    t = observations.shape[0]
    return FilterResult(
        mode_probs=jnp.ones((t, 1), observations.dtype),
        means=means[:, None],
        covs=covs[:, None],
        mean=means,
        cov=covs,
        log_likelihood=total,
    )


def check_inputs(params, observations, *, num_modes=None, inputs=None):
    """Validate (params, observations (T, o), inputs (T, k)) at a public entry point; cast
    params and inputs to the data dtype. Returns (params, observations, inputs) for the
    unchecked kernels; ``inputs=None`` becomes a (T, 0) array when the params take none.

    Tracer-aware (``check_params``): the static checks (types, ranks, shapes, M, d and o
    consistent, real dtypes, ``num_modes``, the inputs' shape (T, k), the T of a time-varying
    (T, M, M) transition matrix equal to the observations') always run; the value
    checks (finite parameters and inputs, probability vectors, stochastic rows, PSD
    covariances, no +-inf observation) run on concrete values only, and are skipped for what
    is a JAX tracer (the public function is being jitted, vmapped or differentiated). NumPy is
    never called on a tracer: concrete arrays come back as NumPy arrays (jit moves them to the
    device; nine ``jnp.asarray`` calls cost as much as the whole filter on one short series),
    traced ones as JAX arrays.
    """
    params = check_params("params", params)
    m = params.initial_probs.shape[0]
    if num_modes is not None and m != num_modes:
        raise ValueError(f"params: expected {num_modes} mode(s), got M = {m}")
    obs = as_float_field("observations", observations)
    o = params.emission_matrices.shape[1]
    if obs.ndim != 2 or obs.shape[1] != o or obs.shape[0] < 1:
        raise ValueError(f"observations: expected shape (T, {o}), got {tuple(obs.shape)}")
    check_transition_steps("params", params, obs.shape[0])
    traced = validation.is_traced(obs)
    if not traced and np.any(np.isinf(obs)):
        raise ValueError(
            "observations: contain +-inf (use NaN for a missing coordinate or a missing row)"
        )
    u = check_input_series("inputs", inputs, params, obs.shape[0])
    dtype = jax.dtypes.canonicalize_dtype(obs.dtype)

    def cast(a):
        return a.astype(dtype) if validation.is_traced(a) else np.asarray(a, dtype)

    return SwitchingParams(*(cast(a) for a in params)), cast(obs), cast(u)


def kalman_filter(params: SwitchingParams, observations, *, inputs=None) -> FilterResult:
    """The Kalman filter of a one-mode model (M = 1): ``FilterResult`` with mode_probs = 1.

    A NaN or inf in the result means the recursion overflowed: explosive dynamics (a dynamics
    matrix with spectral radius > 1 along a direction the observations do not pin down, or over
    a long run of missing rows) or inputs extreme for the dtype. The filter does not check (under
    ``jit``/``vmap`` no check could raise); call ``check_filter_result(result, params=params)``
    (``attnbayes.inference.switching.filters``) on the concrete result: it raises
    ``FloatingPointError`` naming the first non-finite step and field.

    Traceable: ``jit``, ``vmap`` and ``grad`` over ``params``, ``observations`` and
    ``inputs``. Under a transformation only the static checks (shapes, dtypes) run, so invalid
    parameter values give NaN or wrong numbers instead of a ``ValueError``: call
    ``attnbayes.models.switching.check_params("params", params)`` on concrete values first.

    Args:
        params: ``SwitchingParams`` with M = 1.
        observations: (T, o); a NaN coordinate is missing (the update uses the observed ones).
        inputs: (T, k) u_{1:T}, required when ``params`` has input weights.
    """
    return kalman_filter_unchecked(*check_inputs(params, observations, num_modes=1, inputs=inputs))


__all__ = [
    "FilterResult",
    "check_inputs",
    "kalman_filter",
    "kalman_filter_unchecked",
    "kalman_predict",
    "kalman_update",
    "log_normalise",
    "log_probabilities",
    "mask_emission",
    "moment_match",
    "no_inputs",
    "normalise_log_weights",
]
