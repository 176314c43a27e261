"""Gaussian building blocks of the switching-model filters: the Kalman filter and its steps.

Every filter of ``attnbayes.inference.switching.filters`` returns a ``FilterResult`` with the
per-mode Gaussians, their mixture moments and the log-likelihood log p(y_{1:T}). Time runs in
``lax.scan``; a NaN observation row is a predict-only step. The covariance update is in Joseph form,
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
from ...models.switching import SwitchingParams, check_params


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


def symmetrise(a):
    """(A + A^T) / 2 over the last two axes."""
    return 0.5 * (a + jnp.swapaxes(a, -1, -2))


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


def kalman_update(mean, cov, y, emission, emission_cov):
    """Condition N(m, P) on y ~ N(H x, R): (m+, P+ (Joseph form), log N(y; H m, H P H^T + R)).

    A row y containing NaN leaves (m, P) unchanged and contributes 0 to the log-likelihood.
    """
    missing = jnp.any(jnp.isnan(y))
    y = jnp.where(missing, 0.0, y)
    innov_cov = symmetrise(emission @ cov @ emission.T + emission_cov)
    chol = jnp.linalg.cholesky(innov_cov)
    resid = y - emission @ mean
    # K = P H^T S^{-1}, from S K^T = H P
    gain = jax.scipy.linalg.cho_solve((chol, True), emission @ cov).T
    new_mean = mean + gain @ resid
    factor = jnp.eye(mean.shape[0], dtype=mean.dtype) - gain @ emission
    new_cov = symmetrise(factor @ cov @ factor.T + gain @ emission_cov @ gain.T)
    white = jax.scipy.linalg.solve_triangular(chol, resid, lower=True)
    log_lik = (
        -0.5 * jnp.sum(white**2)
        - jnp.sum(jnp.log(jnp.diag(chol)))
        - 0.5 * y.shape[0] * jnp.log(2.0 * jnp.pi)
    )
    return (
        jnp.where(missing, mean, new_mean),
        jnp.where(missing, cov, new_cov),
        jnp.where(missing, 0.0, log_lik),
    )


@jax.jit
def _kalman_filter(params: SwitchingParams, observations):
    f, b, q = params.dynamics_matrices[0], params.dynamics_biases[0], params.dynamics_covs[0]
    h, r = params.emission_matrices[0], params.emission_covs[0]

    def step(carry, y):
        mean, cov, total = carry
        mean, cov, ll = kalman_update(mean, cov, y, h, r)
        pred = kalman_predict(mean, cov, f, b, q)
        return (*pred, total + ll), (mean, cov)

    init = (params.initial_means[0], params.initial_covs[0], jnp.zeros((), observations.dtype))
    (_, _, total), (means, covs) = jax.lax.scan(step, init, observations)
    t = observations.shape[0]
    return FilterResult(
        mode_probs=jnp.ones((t, 1), observations.dtype),
        means=means[:, None],
        covs=covs[:, None],
        mean=means,
        cov=covs,
        log_likelihood=total,
    )


def check_inputs(params, observations, *, num_modes=None):
    """Validate (params, observations (T, o)) before tracing; cast params to the data dtype."""
    params = check_params("params", params)
    m = params.initial_probs.shape[0]
    if num_modes is not None and m != num_modes:
        raise ValueError(f"params: expected {num_modes} mode(s), got M = {m}")
    obs = validation.as_float_array("observations", observations)
    o = params.emission_matrices.shape[1]
    if obs.ndim != 2 or obs.shape[1] != o or obs.shape[0] < 1:
        raise ValueError(f"observations: expected shape (T, {o}), got {tuple(obs.shape)}")
    if not validation.is_traced(obs) and np.any(np.isinf(np.asarray(obs))):
        raise ValueError("observations: contain +-inf (use a NaN row for a missing observation)")
    dtype = jax.dtypes.canonicalize_dtype(obs.dtype)
    # NumPy arrays: jit moves them to the device; nine jnp.asarray calls cost as much as the
    # whole filter on one short series
    return SwitchingParams(*(np.asarray(a, dtype) for a in params)), (
        obs if validation.is_traced(obs) else np.asarray(obs, dtype)
    )


def kalman_filter(params: SwitchingParams, observations) -> FilterResult:
    """The Kalman filter of a one-mode model (M = 1): ``FilterResult`` with mode_probs = 1.

    A NaN or inf in the result means the recursion overflowed: explosive dynamics (a dynamics
    matrix with spectral radius > 1 along a direction the observations do not pin down, or over
    a long run of missing rows) or inputs extreme for the dtype. The filter does not check (under
    ``jit``/``vmap`` no check could raise); call ``check_filter_result(result, params=params)``
    (``attnbayes.inference.switching.filters``) on the concrete result: it raises
    ``FloatingPointError`` naming the first non-finite step and field.

    Args:
        params: ``SwitchingParams`` with M = 1.
        observations: (T, o); a row holding a NaN is missing as a whole (predict only;
            its other values are not used).
    """
    params, obs = check_inputs(params, observations, num_modes=1)
    return _kalman_filter(params, obs)


__all__ = [
    "FilterResult",
    "check_inputs",
    "kalman_filter",
    "kalman_predict",
    "kalman_update",
    "log_normalise",
    "moment_match",
    "normalise_log_weights",
    "symmetrise",
]
