"""Rao-Blackwellised particle filter of the switching linear-Gaussian state-space model.

Particles carry a mode history s_{1:t}^i and, given it, the exact Kalman filter
N(x_t; m_t^i, P_t^i) (Doucet, de Freitas, Murphy and Russell 2000; Doucet, Gordon and
Krishnamurthy 2001). The discrete proposal is the locally optimal one,

    q(s_t = j | s_{1:t-1}^i, y_{1:t}) = Pi[s_{t-1}^i, j] l_t^i(j) / alpha_t^i,
    l_t^i(j) = p(y_t | y_{1:t-1}, s_{1:t-1}^i, s_t = j),
    alpha_t^i = sum_j Pi[s_{t-1}^i, j] l_t^i(j)

(M Kalman predict + update steps per particle; at t = 1, pi0 and N(m0_j, P0_j) with no
prediction), the weights are w_t^i proportional to w_{t-1}^i alpha_t^i (log domain), and the
particles are resampled systematically before step t when ESS = 1 / sum_i (w^i)^2 <
ess_threshold N. log p(y) is estimated by sum_t log sum_i w_{t-1}^i alpha_t^i (normalised
w_{t-1}), whose exponential is unbiased for p(y). With a time-varying (T, M, M) transition
matrix, Pi in step t is its entry t (the law of s_t given s_{t-1}).
"""

from __future__ import annotations

import functools
import numbers

import jax
import jax.numpy as jnp

from ... import validation
from ...models.switching import (
    SwitchingParams,
    per_step_transitions,
    step_offsets,
    step_transition,
)
from .kalman import (
    FilterResult,
    check_inputs,
    kalman_predict,
    kalman_update,
    moment_match,
    no_inputs,
)


def systematic_resample(key, log_weights):
    """Indices (N,) of systematic resampling: one u ~ U(0, 1), positions (u + i) / N against
    the cumulative normalised weights."""
    n = log_weights.shape[0]
    w = jnp.exp(log_weights - jax.scipy.special.logsumexp(log_weights))
    positions = (jax.random.uniform(key, (), w.dtype) + jnp.arange(n, dtype=w.dtype)) / n
    idx = jnp.searchsorted(jnp.cumsum(w), positions, side="right")
    return jnp.clip(idx, 0, n - 1)


def _summarise(log_w, log_q, means, covs):
    """Filtered summaries at t from the particle system before the mode is sampled.

    log_w (N,) normalised log weights w_t^i, log_q (N, M) log q(s_t = j | particle i), means
    (N, M, d), covs (N, M, d, d) the Kalman-updated Gaussians under s_t = j. The mixture
    sum_i w_t^i sum_j q_ij delta_j N(m_ij, P_ij) is the conditional expectation (given the
    particles) of the sampled one, so it is used for every summary.
    """
    log_joint = log_w[:, None] + log_q  # (N, M)
    log_mode = jax.scipy.special.logsumexp(log_joint, axis=0)  # (M,)
    mode_probs = jnp.exp(log_mode - jax.scipy.special.logsumexp(log_mode))
    # per mode: weights w_i q_ij / P(s_t = j) over particles
    empty = log_mode == -jnp.inf
    w_mode = jnp.exp(log_joint - jnp.where(empty, 0.0, log_mode))  # (N, M), 0 where empty
    mode_means, mode_covs = jax.vmap(moment_match, in_axes=(1, 1, 1))(w_mode, means, covs)
    # overall: the per-mode Gaussians collapsed (law of total variance); then a mode with no
    # mass gets the overall moments
    mean, cov = moment_match(mode_probs, mode_means, mode_covs)
    mode_means = jnp.where(empty[:, None], mean, mode_means)
    mode_covs = jnp.where(empty[:, None, None], cov, mode_covs)
    return mode_probs, mode_means, mode_covs, mean, cov


@functools.partial(jax.jit, static_argnames=("num_particles",))
def rbpf_unchecked(
    key, params: SwitchingParams, observations, num_particles: int, ess_threshold, inputs=None
) -> FilterResult:
    """``rbpf`` on checked arrays (``check_inputs``), ``ess_threshold`` in the data dtype;
    ``num_particles`` static. ``jit``- and ``vmap``-able (not differentiable: ``rbpf``)."""
    inputs = no_inputs(params, observations, inputs)
    n = num_particles
    d = params.initial_means.shape[1]
    dtype = observations.dtype
    log_pi0 = jnp.log(params.initial_probs)
    log_uniform = -jnp.log(jnp.asarray(n, dtype))
    # over particles (outer) and modes (inner)
    predict = jax.vmap(
        jax.vmap(kalman_predict, in_axes=(None, None, 0, 0, 0)), in_axes=(0, 0, None, None, None)
    )
    update = jax.vmap(
        jax.vmap(kalman_update, in_axes=(0, 0, 0, 0, 0)), in_axes=(0, 0, None, None, None)
    )
    rows = jnp.arange(n)

    def step(carry, inp):
        log_w, modes, mean, cov, total = carry
        key, y, u, first, trans = inp
        log_trans = jnp.log(step_transition(params, trans))  # Pi_t (entry 0 unused: pi0)
        dyn, emi = step_offsets(params, u)
        key_resample, key_modes = jax.random.split(key)
        # systematic resampling when ESS = 1 / sum w^2 < threshold N
        resample = 1.0 / jnp.sum(jnp.exp(2.0 * log_w)) < ess_threshold * n
        idx = jnp.where(resample, systematic_resample(key_resample, log_w), rows)
        log_w = jnp.where(resample, jnp.full_like(log_w, log_uniform), log_w)
        modes, mean, cov = modes[idx], mean[idx], cov[idx]
        # under each s_t = j: N(F_j m + b_j + B_j u_t, F_j P F_j^T + Q_j), or N(m0_j, P0_j)
        # at t = 1
        pred_means, pred_covs = predict(
            mean, cov, params.dynamics_matrices, dyn, params.dynamics_covs
        )
        pred_means = jnp.where(first, params.initial_means[None], pred_means)
        pred_covs = jnp.where(first, params.initial_covs[None], pred_covs)
        log_prior = jnp.where(first, log_pi0[None], log_trans[modes])  # (N, M)
        up_means, up_covs, log_lik = update(
            pred_means, pred_covs, y - emi, params.emission_matrices, params.emission_covs
        )
        # locally optimal proposal q_ij = Pi[s^i, j] l_ij / alpha_i, w_i <- w_i alpha_i
        log_joint = log_prior + log_lik
        log_alpha = jax.scipy.special.logsumexp(log_joint, axis=1)
        log_q = log_joint - log_alpha[:, None]
        new_modes = jax.random.categorical(key_modes, log_q, axis=1).astype(jnp.int32)
        log_incr = log_w + log_alpha
        step_ll = jax.scipy.special.logsumexp(log_incr)
        log_w = log_incr - step_ll
        summary = _summarise(log_w, log_q, up_means, up_covs)
        carry = (log_w, new_modes, up_means[rows, new_modes], up_covs[rows, new_modes])
        return (*carry, total + step_ll), summary

    t_max = observations.shape[0]
    init = (
        jnp.full((n,), log_uniform, dtype),
        jnp.zeros((n,), jnp.int32),
        jnp.zeros((n, d), dtype),
        jnp.zeros((n, d, d), dtype),
        jnp.zeros((), dtype),
    )
    scanned = (
        jax.random.split(key, t_max),
        observations,
        inputs,
        jnp.arange(t_max) == 0,
        per_step_transitions(params, 0),
    )
    (*_, total), summary = jax.lax.scan(step, init, scanned)
    return FilterResult(*summary, log_likelihood=total)


def rbpf(
    key,
    params: SwitchingParams,
    observations,
    num_particles: int,
    *,
    ess_threshold: float = 0.5,
    inputs=None,
) -> FilterResult:
    """Rao-Blackwellised particle filter: particles over mode histories, a Kalman filter each.

    Step t, for each particle i: M Kalman predict + update steps give l_t^i(j) =
    p(y_t | y_{1:t-1}, s_{1:t-1}^i, s_t = j); s_t^i ~ q_ij = Pi[s_{t-1}^i, j] l_t^i(j) / alpha_t^i
    (locally optimal proposal), w_t^i proportional to w_{t-1}^i alpha_t^i. Systematic
    resampling runs before a step when ESS < ess_threshold N. A NaN row of observations gives
    l = 1: the modes move by Pi, the weights stay, the Kalman filters only predict; a NaN
    coordinate is missing and the others update.

    Summaries are Rao-Blackwellised over the last mode: with weights w_t^i q_ij on the pairs
    (i, j), mode_probs[t, j] = sum_i w_t^i q_ij (the weight mass of mode j; the expectation,
    given the particles, of the mass after s_t is sampled), means/covs[t, j] are the moment
    match of N(m_ij, P_ij) over particles with weights w_t^i q_ij / mode_probs[t, j], and
    mean/cov the match over all pairs. When a mode has no mass at all (possible only through
    zeros in pi0 or Pi, or underflow), its means/covs are the overall mean/cov.

    A NaN or inf in the result means the recursion overflowed: explosive dynamics (a dynamics
    matrix with spectral radius > 1 along a direction the observations do not pin down, or over
    a long run of missing rows) or inputs extreme for the dtype. The filter does not check (under
    ``jit``/``vmap`` no check could raise); call ``check_filter_result(result, params=params)``
    (``attnbayes.inference.switching.filters``) on the concrete result: it raises
    ``FloatingPointError`` naming the first non-finite step and field.

    Traceable: ``jit`` and ``vmap`` over ``key``, ``params``, ``observations`` and
    ``ess_threshold`` (``num_particles`` is static). Under a transformation only the static
    checks (shapes, dtypes) run, so invalid parameter values give NaN or wrong numbers instead
    of a ``ValueError``: call ``attnbayes.models.switching.check_params("params", params)`` on
    concrete values first. Not differentiable: ``jax.grad`` runs, but the modes are drawn and
    the particles resampled (discrete) and those draws are held fixed, so it is not the
    gradient of the expected log-likelihood estimate.

    Args:
        key: a ``jax.random`` key.
        params: ``SwitchingParams`` (Q may be singular PSD).
        observations: (T, o); a NaN coordinate is missing.
        num_particles: N >= 1.
        ess_threshold: in [0, 1]; 0 never resamples, 1 resamples at (nearly) every step.
        inputs: (T, k) u_{1:T}, required when ``params`` has input weights.

    Returns:
        ``FilterResult``; log_likelihood is log of the unbiased estimate of p(y_{1:T}).
    """
    validation.check_key("key", key)
    num_particles = validation.check_positive_int("num_particles", num_particles)
    if validation.is_traced(ess_threshold):
        if ess_threshold.ndim != 0:
            raise ValueError(f"ess_threshold: expected a scalar, got shape {ess_threshold.shape}")
    elif isinstance(ess_threshold, bool) or not isinstance(ess_threshold, numbers.Real):
        raise ValueError(f"ess_threshold: expected a number in [0, 1], got {ess_threshold!r}")
    elif not 0.0 <= float(ess_threshold) <= 1.0:
        raise ValueError(f"ess_threshold: must be in [0, 1], got {ess_threshold}")
    params, obs, inputs = check_inputs(params, observations, inputs=inputs)
    return rbpf_unchecked(
        key, params, obs, num_particles, jnp.asarray(ess_threshold, obs.dtype), inputs
    )


__all__ = ["rbpf", "rbpf_unchecked", "systematic_resample"]
