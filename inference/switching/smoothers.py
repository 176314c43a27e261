"""Smoothers of the switching linear-Gaussian state-space model: p(x_t, s_t | y_{1:T}).

- ``kalman_smoother``: Rauch-Tung-Striebel on top of ``kalman_filter`` (M = 1).
- ``exact_smoother``: every one of the M^T mode histories, each a Kalman filter + RTS,
  mixed with weights p(s_{1:T} | y_{1:T}) (small T only).
- ``kim_smoother``: the approximate IMM/GPB smoother of Kim (1994), a backward pass over the
  per-mode filtered Gaussians of any (approximate) filter.
- ``fixed_modes_smoother``: Kalman filter + RTS along a given mode sequence (the true modes:
  the floor for any method that has to infer them).
- ``kim_smoother_moments``, ``exact_smoother_moments``: the statistics of EM's E-step
  (``SmootherMoments``): per-mode moments, pairwise mode probabilities and the lag-one
  cross-covariances Cov[x_t, x_{t-1} | s_t = j, y_{1:T}].

Every smoother takes a constant (M, M) or a time-varying (T, M, M) ``transition_matrix``
(entry t the law of s_t given s_{t-1}; ``attnbayes.models.switching.SwitchingParams``): the
history prior of the exact smoothers is log pi0[s_1] + sum_t log Pi_t[s_{t-1}, s_t], and Kim's
backward step between t and t+1 uses Pi_{t+1}.

The RTS step is written as a sum of PSD terms,
P_t|T = (I - G F) P_t (I - G F)^T + G Q G^T + G P_{t+1|T} G^T, with the gain
G = P_t F^T (F P_t F^T + Q)^+ from a symmetric (pseudo-)solve (``linalg.psd_solve``), so a
singular Q works and the smoothed covariances stay symmetric PSD. Mode probabilities are
handled in the log domain; mixtures are collapsed by moment matching: mean = sum w m,
cov = sum w (P + (m - mean)(m - mean)^T).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

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
    kalman_filter_unchecked,
    kalman_predict,
    kalman_update,
    log_normalise,
    log_probabilities,
    moment_match,
    no_inputs,
    normalise_log_weights,
)
from .linalg import psd_solve, symmetrise


class SmootherResult(NamedTuple):
    """Smoothed posteriors p(x_t, s_t | y_{1:T}).

    Attributes:
        mode_probs: (T, M) P(s_t = j | y_{1:T}).
        means: (T, M, d) E[x_t | s_t = j, y_{1:T}].
        covs: (T, M, d, d) Cov[x_t | s_t = j, y_{1:T}].
        mean: (T, d) E[x_t | y_{1:T}] (the moment-matched mixture).
        cov: (T, d, d) Cov[x_t | y_{1:T}].
        log_likelihood: () log p(y_{1:T}) from the forward pass.
    """

    mode_probs: jax.Array
    means: jax.Array
    covs: jax.Array
    mean: jax.Array
    cov: jax.Array
    log_likelihood: jax.Array


class SmootherMoments(NamedTuple):
    """The smoothed moments the E-step of EM needs (``kim_smoother_moments``,
    ``exact_smoother_moments``). The pairwise fields have T - 1 rows, row t - 2 for step
    t = 2..T (the pair (t-1, t)).

    Attributes:
        mode_probs: (T, M) gamma_t(j) = P(s_t = j | y_{1:T}).
        means: (T, M, d) E[x_t | s_t = j, y_{1:T}].
        covs: (T, M, d, d) Cov[x_t | s_t = j, y_{1:T}].
        pair_probs: (T-1, M, M) [t-2, i, j] = P(s_{t-1} = i, s_t = j | y_{1:T}).
        prev_means: (T-1, M, d) [t-2, j] = E[x_{t-1} | s_t = j, y_{1:T}].
        prev_covs: (T-1, M, d, d) [t-2, j] = Cov[x_{t-1} | s_t = j, y_{1:T}].
        cross_covs: (T-1, M, d, d) [t-2, j] = Cov[x_t, x_{t-1} | s_t = j, y_{1:T}].
        log_likelihood: () log p(y_{1:T}) (the filter's).
    """

    mode_probs: jax.Array
    means: jax.Array
    covs: jax.Array
    pair_probs: jax.Array
    prev_means: jax.Array
    prev_covs: jax.Array
    cross_covs: jax.Array
    log_likelihood: jax.Array

    @property
    def cross_moments(self) -> jax.Array:
        """(T-1, M, d, d) E[x_t x_{t-1}^T | s_t = j, y_{1:T}] = cross_covs + E[x_t] E[x_{t-1}]^T
        (both given s_t = j)."""
        return self.cross_covs + self.means[1:, :, :, None] * self.prev_means[:, :, None, :]


# ----------------------------------------------------------------------------- building blocks


def _rts_gain_step(filt_mean, filt_cov, next_mean, next_cov, dynamics, bias, dynamics_cov):
    """``rts_step`` that also returns its gain G (d, d)."""
    pred_mean, pred_cov = kalman_predict(filt_mean, filt_cov, dynamics, bias, dynamics_cov)
    gain = psd_solve(pred_cov, dynamics @ filt_cov).T
    mean = filt_mean + gain @ (next_mean - pred_mean)
    factor = jnp.eye(filt_mean.shape[0], dtype=filt_mean.dtype) - gain @ dynamics
    cov = factor @ filt_cov @ factor.T + gain @ dynamics_cov @ gain.T + gain @ next_cov @ gain.T
    return mean, symmetrise(cov), gain


def rts_step(filt_mean, filt_cov, next_mean, next_cov, dynamics, bias, dynamics_cov):
    """One Rauch-Tung-Striebel step: p(x_t | y_{1:T}) from the filtered N(m_t, P_t) and the
    smoothed N(m_{t+1|T}, P_{t+1|T}) under x_{t+1} = F x_t + b + N(0, Q).

    G = P_t F^T P_{t+1|t}^+, m_t|T = m_t + G (m_{t+1|T} - F m_t - b),
    P_t|T = (I - G F) P_t (I - G F)^T + G Q G^T + G P_{t+1|T} G^T
    (= P_t + G (P_{t+1|T} - P_{t+1|t}) G^T, written as a sum of PSD terms).
    """
    mean, cov, _ = _rts_gain_step(
        filt_mean, filt_cov, next_mean, next_cov, dynamics, bias, dynamics_cov
    )
    return mean, cov


def _offsets(params: SwitchingParams, inputs):
    """Per-step offsets over time: dynamics (T, M, d), emission (T, M, o)."""
    return jax.vmap(step_offsets, in_axes=(None, 0))(params, inputs)


def _history_smoother(params: SwitchingParams, observations, inputs, modes, cross=False):
    """Kalman filter + RTS smoother of the linear-Gaussian model of one mode history.

    modes: (T,) int s_{1:T}. Returns (log p(y | s), smoothed means (T, d), covs (T, d, d)),
    and with ``cross`` (static) also the lag-one cross-covariances (T-1, d, d)
    Cov[x_{t+1}, x_t | s, y_{1:T}] (``_rts``).
    """
    dyn_off, emi_off = _offsets(params, inputs)
    nxt = jnp.concatenate([modes[1:], modes[-1:]])
    t_idx = jnp.arange(observations.shape[0])
    nxt_t = jnp.minimum(t_idx + 1, observations.shape[0] - 1)
    next_bias = dyn_off[nxt_t, nxt]  # (T, d): the offset of the step out of t

    def forward(carry, inp):
        mean, cov, total = carry
        y, e, b, s, s_next = inp
        mean, cov, ll = kalman_update(
            mean, cov, y - e, params.emission_matrices[s], params.emission_covs[s]
        )
        pred = kalman_predict(
            mean,
            cov,
            params.dynamics_matrices[s_next],
            b,
            params.dynamics_covs[s_next],
        )
        return (*pred, total + ll), (mean, cov)

    s1 = modes[0]
    init = (params.initial_means[s1], params.initial_covs[s1], jnp.zeros((), observations.dtype))
    scanned = (observations, emi_off[t_idx, modes], next_bias, modes, nxt)
    (_, _, log_lik), (f_means, f_covs) = jax.lax.scan(forward, init, scanned)
    out = _rts(params, f_means, f_covs, nxt[:-1], next_bias[:-1], cross=cross)
    return (log_lik, *out)


def _rts(params: SwitchingParams, f_means, f_covs, next_modes, next_biases, cross=False):
    """RTS backward pass; next_modes (T-1,) is the mode s_{t+1} whose dynamics lead out of t,
    next_biases (T-1, d) its offset b + B u_{t+1}. Returns the smoothed means (T, d) and
    covariances (T, d, d); with ``cross`` (static) also the lag-one cross-covariances
    (T-1, d, d), Cov[x_{t+1}, x_t | y_{1:T}] = P_{t+1|T} G_t^T (Shumway and Stoffer 1982;
    the backward step writes x_t = m_t + G_t (x_{t+1} - F m_t - b) + noise independent of
    x_{t+1}, so its covariance with x_{t+1} is G_t P_{t+1|T})."""

    def backward(carry, inp):
        m, p, s, b = inp
        args = (m, p, *carry, params.dynamics_matrices[s], b, params.dynamics_covs[s])
        if not cross:
            out = rts_step(*args)
            return out, out
        mean, cov, gain = _rts_gain_step(*args)
        return (mean, cov), (mean, cov, carry[1] @ gain.T)

    last = (f_means[-1], f_covs[-1])
    _, outs = jax.lax.scan(
        backward, last, (f_means[:-1], f_covs[:-1], next_modes, next_biases), reverse=True
    )
    means = jnp.concatenate([outs[0], last[0][None]])
    covs = jnp.concatenate([outs[1], last[1][None]])
    return (means, covs, outs[2]) if cross else (means, covs)


# ----------------------------------------------------------------------------- Kalman / RTS


@jax.jit
def kalman_smoother_unchecked(params: SwitchingParams, observations, inputs=None) -> SmootherResult:
    """``kalman_smoother`` on checked arrays (``check_inputs``), M = 1; ``inputs`` (T, k) or
    None for a model without inputs. Traceable (``jit``, ``vmap``, ``grad``)."""
    inputs = no_inputs(params, observations, inputs)
    filtered = kalman_filter_unchecked(params, observations, inputs)
    zeros = jnp.zeros(observations.shape[0] - 1, dtype=jnp.int32)
    dyn_off, _ = _offsets(params, inputs)
    means, covs = _rts(params, filtered.mean, filtered.cov, zeros, dyn_off[1:, 0])
    return SmootherResult(
        mode_probs=filtered.mode_probs,
        means=means[:, None],
        covs=covs[:, None],
        mean=means,
        cov=covs,
        log_likelihood=filtered.log_likelihood,
    )


def kalman_smoother(params: SwitchingParams, observations, *, inputs=None) -> SmootherResult:
    """The Rauch-Tung-Striebel smoother of a one-mode model (M = 1), mode_probs = 1.

    m_t|T = m_t + G_t (m_{t+1|T} - m_{t+1|t}), P_t|T = P_t + G_t (P_{t+1|T} - P_{t+1|t}) G_t^T,
    G_t = P_t F^T P_{t+1|t}^{-1} (a pseudo-inverse when P_{t+1|t} is singular).

    A NaN or inf in the result means a recursion overflowed (explosive dynamics, or inputs
    extreme for the dtype), and the backward pass carries it to every earlier step. Nothing is
    checked here (under ``jit``/``vmap`` no check could raise); call
    ``attnbayes.inference.switching.filters.check_filter_result(result, params=params)`` on the
    concrete result (``FloatingPointError``), and on the filter of the same series to see the step
    where it began.

    Traceable: ``jit``, ``vmap`` and ``grad`` over ``params`` and ``observations``. Under a
    transformation only the static checks (shapes, dtypes) run, so invalid parameter values
    give NaN or wrong numbers instead of a ``ValueError``: call
    ``attnbayes.models.switching.check_params("params", params)`` on concrete values first.

    Args:
        params: ``SwitchingParams`` with M = 1 (Q may be singular PSD).
        observations: (T, o); a NaN coordinate is missing (the update uses the observed
            ones).
        inputs: (T, k) u_{1:T}, required when ``params`` has input weights.
    """
    return kalman_smoother_unchecked(
        *check_inputs(params, observations, num_modes=1, inputs=inputs)
    )


# ----------------------------------------------------------------------------- exact


def _histories(num_modes: int, num_steps: int):
    """(M^T, T) int32: every s_{1:T}, row-major (the order of itertools.product)."""
    k = jnp.arange(num_modes**num_steps, dtype=jnp.int32)[:, None]
    powers = jnp.asarray(
        [num_modes ** (num_steps - 1 - t) for t in range(num_steps)], dtype=jnp.int32
    )
    return (k // powers) % num_modes


def _log_history_prior(params: SwitchingParams, histories):
    """log p(s_{1:T}) = log pi0[s_1] + sum_t log Pi_t[s_{t-1}, s_t]; (K, T) -> (K,). Pi_t is
    the transition matrix, or its entry t when it is time-varying (T, M, M)."""
    log_pi0 = log_probabilities(params.initial_probs)
    log_trans = log_probabilities(params.transition_matrix)
    prev, nxt = histories[:, :-1], histories[:, 1:]
    if log_trans.ndim == 2:
        steps = log_trans[prev, nxt]
    else:  # entry t for the move into step t, t = 1..T-1 (0-based)
        steps = log_trans[jnp.arange(1, histories.shape[1]), prev, nxt]
    return log_pi0[histories[:, 0]] + jnp.sum(steps, axis=1)


@jax.jit
def exact_smoother_unchecked(params: SwitchingParams, observations, inputs=None) -> SmootherResult:
    """``exact_smoother`` on checked arrays (``check_inputs``; M^T histories, static)."""
    inputs = no_inputs(params, observations, inputs)
    m = params.initial_probs.shape[0]
    t_max = observations.shape[0]
    hist = _histories(m, t_max)  # (K, T)
    log_lik, means, covs = jax.vmap(_history_smoother, in_axes=(None, None, None, 0))(
        params, observations, inputs, hist
    )  # (K,), (K, T, d), (K, T, d, d)
    log_joint = _log_history_prior(params, hist) + log_lik
    total = jax.scipy.special.logsumexp(log_joint)
    # log p(s_t = j, s_{1:T} | y) per history: (T, M, K)
    onehot = hist.T[:, None, :] == jnp.arange(m)[None, :, None]
    log_w = jnp.where(onehot, log_joint[None, None, :], -jnp.inf)
    w_overall = normalise_log_weights(log_joint)
    mode_probs = jnp.einsum("k,tmk->tm", w_overall, onehot.astype(w_overall.dtype))
    w_mode = normalise_log_weights(log_w, fallback=log_joint)  # (T, M, K)
    means_t = jnp.swapaxes(means, 0, 1)  # (T, K, d)
    covs_t = jnp.swapaxes(covs, 0, 1)
    mode_means, mode_covs = moment_match(w_mode, means_t[:, None], covs_t[:, None])  # (T, M, d)
    mean, cov = moment_match(w_overall[None], means_t, covs_t)
    return SmootherResult(mode_probs, mode_means, mode_covs, mean, cov, total)


def exact_smoother(
    params: SwitchingParams, observations, *, max_histories: int = 2**16, inputs=None
) -> SmootherResult:
    """Exact smoothing by enumeration of the M^T mode histories (small T only).

    Each history s is a linear-Gaussian model: Kalman filter + RTS give p(y | s) and
    N(x_t; m_t|T^s, P_t|T^s); with w_s = p(s) p(y | s) / p(y) (log domain),
    P(s_t = j | y) = sum_{s: s_t = j} w_s and the per-mode and overall posteriors are the
    moment-matched mixtures. A mode with zero posterior probability at t gets the overall
    moments. log p(y) = logsumexp_s log p(s) p(y | s).

    A NaN or inf in the result means a recursion overflowed (explosive dynamics, or inputs
    extreme for the dtype), and the backward pass carries it to every earlier step. Nothing is
    checked here (under ``jit``/``vmap`` no check could raise); call
    ``attnbayes.inference.switching.filters.check_filter_result(result, params=params)`` on the
    concrete result (``FloatingPointError``), and on the filter of the same series to see the step
    where it began.

    Traceable: ``jit``, ``vmap`` and ``grad`` over ``params`` and ``observations``. Under a
    transformation only the static checks (shapes, dtypes) run, so invalid parameter values
    give NaN or wrong numbers instead of a ``ValueError``: call
    ``attnbayes.models.switching.check_params("params", params)`` on concrete values first.

    Args:
        params: ``SwitchingParams`` (Q may be singular PSD).
        observations: (T, o); a NaN coordinate is missing (the update uses the observed
            ones).
        max_histories: refuse (``ValueError``) when M^T exceeds this.
        inputs: (T, k) u_{1:T}, required when ``params`` has input weights.
    """
    params, obs, inputs = _check_enumeration(
        params, observations, inputs, max_histories, "kim_smoother"
    )
    return exact_smoother_unchecked(params, obs, inputs)


def _check_enumeration(params, observations, inputs, max_histories, instead: str):
    """The checked inputs of an enumerating smoother; refuse M^T > ``max_histories``."""
    max_histories = validation.check_positive_int("max_histories", max_histories)
    params, obs, inputs = check_inputs(params, observations, inputs=inputs)
    m, t_max = params.initial_probs.shape[0], obs.shape[0]
    if m**t_max > max_histories:
        raise ValueError(
            f"observations: T = {t_max} steps with M = {m} modes make M^T = {m**t_max} "
            f"histories > max_histories = {max_histories}; use {instead}"
        )
    return params, obs, inputs


@jax.jit
def exact_smoother_moments_unchecked(
    params: SwitchingParams, observations, inputs=None
) -> SmootherMoments:
    """``exact_smoother_moments`` on checked arrays (``check_inputs``; M^T histories)."""
    inputs = no_inputs(params, observations, inputs)
    m = params.initial_probs.shape[0]
    hist = _histories(m, observations.shape[0])  # (K, T)
    log_lik, means, covs, cross = jax.vmap(
        lambda s: _history_smoother(params, observations, inputs, s, cross=True)
    )(hist)  # (K,), (K, T, d), (K, T, d, d), (K, T-1, d, d)
    log_joint = _log_history_prior(params, hist) + log_lik
    onehot = hist.T[:, None, :] == jnp.arange(m)[None, :, None]  # (T, M, K): s_t = j
    w_overall = normalise_log_weights(log_joint)
    weights = onehot.astype(w_overall.dtype)
    mode_probs = jnp.einsum("k,tmk->tm", w_overall, weights)
    pair = jnp.einsum("k,tik,tjk->tij", w_overall, weights[:-1], weights[1:])
    # the posterior over histories given s_t = j (the overall one for a mode of zero mass)
    log_w = jnp.where(onehot, log_joint[None, None, :], -jnp.inf)
    w_mode = normalise_log_weights(log_w, fallback=log_joint)  # (T, M, K)
    means_t = jnp.swapaxes(means, 0, 1)  # (T, K, d)
    covs_t = jnp.swapaxes(covs, 0, 1)
    mode_means, mode_covs = moment_match(w_mode, means_t[:, None], covs_t[:, None])
    w_next = w_mode[1:]  # given s_t = j, for x_{t-1} and the pair
    prev_means, prev_covs = moment_match(w_next, means_t[:-1, None], covs_t[:-1, None])
    dev_now = means_t[1:, None] - mode_means[1:, :, None]  # (T-1, M, K, d)
    dev_prev = means_t[:-1, None] - prev_means[:, :, None]
    cross_covs = jnp.einsum("tmk,ktab->tmab", w_next, cross) + jnp.einsum(
        "tmk,tmka,tmkb->tmab", w_next, dev_now, dev_prev
    )
    return SmootherMoments(
        mode_probs=mode_probs,
        means=mode_means,
        covs=mode_covs,
        pair_probs=pair,
        prev_means=prev_means,
        prev_covs=prev_covs,
        cross_covs=cross_covs,
        log_likelihood=jax.scipy.special.logsumexp(log_joint),
    )


def exact_smoother_moments(
    params: SwitchingParams, observations, *, max_histories: int = 2**16, inputs=None
) -> SmootherMoments:
    """The E-step moments (``SmootherMoments``) exactly, by enumeration of the M^T mode
    histories (small T only).

    Each history s is a linear-Gaussian model whose Kalman filter + RTS smoother give p(y | s),
    N(x_t; m_t|T^s, P_t|T^s) and the lag-one cross-covariance
    C_t^s = Cov[x_t, x_{t-1} | s, y] = P_t|T^s (G_{t-1}^s)^T (G the RTS gain; Shumway and
    Stoffer 1982). With w_s = p(s) p(y | s) / p(y): P(s_{t-1} = i, s_t = j | y) =
    sum_{s: s_{t-1} = i, s_t = j} w_s, and the moments given s_t = j are those of the mixture
    over the histories with s_t = j (weights w_s / P(s_t = j | y)), e.g.
    Cov[x_t, x_{t-1} | s_t = j, y] = sum_s w_s|j (C_t^s + (m_t^s - E[x_t | j])
    (m_{t-1}^s - E[x_{t-1} | j])^T). A mode with zero posterior mass at t gets the overall
    moments. Cost: M^T Kalman smoothers (memory M^T T d^2).

    Traceable (``jit``, ``vmap``, ``grad``) like ``exact_smoother``; nothing is checked on the
    result (see ``check_filter_result`` for a ``SmootherResult``).

    Args:
        params: ``SwitchingParams`` (Q may be singular PSD).
        observations: (T, o); a NaN coordinate is missing.
        max_histories: refuse (``ValueError``) when M^T exceeds this.
        inputs: (T, k) u_{1:T}, required when ``params`` has input weights.
    """
    params, obs, inputs = _check_enumeration(
        params, observations, inputs, max_histories, "kim_smoother_moments"
    )
    return exact_smoother_moments_unchecked(params, obs, inputs)


# ----------------------------------------------------------------------------- known modes


@jax.jit
def fixed_modes_smoother_unchecked(
    params: SwitchingParams, observations, modes, inputs=None
) -> SmootherResult:
    """``fixed_modes_smoother`` on checked arrays (``check_inputs``) and int32 ``modes`` (T,)
    in [0, M)."""
    inputs = no_inputs(params, observations, inputs)
    log_lik, means, covs = _history_smoother(params, observations, inputs, modes)
    m = params.initial_probs.shape[0]
    onehot = (modes[:, None] == jnp.arange(m)).astype(means.dtype)
    t_max, d = means.shape
    return SmootherResult(
        mode_probs=onehot,
        means=jnp.broadcast_to(means[:, None], (t_max, m, d)),
        covs=jnp.broadcast_to(covs[:, None], (t_max, m, d, d)),
        mean=means,
        cov=covs,
        log_likelihood=log_lik,
    )


def fixed_modes_smoother(
    params: SwitchingParams, observations, modes, *, inputs=None
) -> SmootherResult:
    """Kalman filter + RTS smoother along a given mode sequence s_{1:T} (e.g. the true one).

    p(x_t | s_{1:T}, y_{1:T}) is Gaussian; mode_probs is the one-hot of ``modes``, and every
    mode's means/covs are those of that Gaussian (a mode other than s_t has probability zero
    and gets the overall moments). log_likelihood = log p(y_{1:T} | s_{1:T}).

    A NaN or inf in the result means a recursion overflowed (explosive dynamics, or inputs
    extreme for the dtype), and the backward pass carries it to every earlier step. Nothing is
    checked here (under ``jit``/``vmap`` no check could raise); call
    ``attnbayes.inference.switching.filters.check_filter_result(result, params=params)`` on the
    concrete result (``FloatingPointError``), and on the filter of the same series to see the step
    where it began.

    Traceable: ``jit``, ``vmap`` and ``grad`` over ``params`` and ``observations``. Under a
    transformation only the static checks (shapes, dtypes) run, so invalid parameter values
    give NaN or wrong numbers instead of a ``ValueError``: call
    ``attnbayes.models.switching.check_params("params", params)`` on concrete values first.

    Args:
        params: ``SwitchingParams`` (Q may be singular PSD).
        observations: (T, o); a NaN coordinate is missing (the update uses the observed
            ones).
        modes: (T,) integers in [0, M).
        inputs: (T, k) u_{1:T}, required when ``params`` has input weights.
    """
    params, obs, inputs = check_inputs(params, observations, inputs=inputs)
    m, t_max = params.initial_probs.shape[0], obs.shape[0]
    if not validation.is_traced(modes):
        arr = np.asarray(modes)
        if arr.dtype == object or not (
            np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.bool_)
        ):
            raise ValueError(f"modes: expected integers, got dtype {arr.dtype}")
        if arr.shape != (t_max,):
            raise ValueError(f"modes: expected shape ({t_max},) (T), got {arr.shape}")
        if np.any(arr < 0) or np.any(arr >= m):
            raise ValueError(f"modes: values must be in [0, {m}) (M = {m} modes)")
    elif tuple(modes.shape) != (t_max,):
        raise ValueError(f"modes: expected shape ({t_max},) (T), got {tuple(modes.shape)}")
    return fixed_modes_smoother_unchecked(params, obs, jnp.asarray(modes, jnp.int32), inputs)


# ----------------------------------------------------------------------------- Kim (1994)


def _kim_pass(params: SwitchingParams, filtered: FilterResult, inputs, moments: bool):
    """Kim's (1994) backward pass. Returns (log mode probs (T, M), means (T, M, d),
    covs (T, M, d, d)) and, with ``moments`` (static), the pairwise statistics of each
    backward step t -> t+1 (see ``kim_smoother_moments``): pair probabilities (T-1, M, M),
    E and Cov of x_t given s_{t+1} (T-1, M, d), (T-1, M, d, d), and Cov[x_{t+1}, x_t | s_{t+1}]
    (T-1, M, d, d)."""
    log_filt = jnp.log(filtered.mode_probs)
    dyn_off, _ = _offsets(params, inputs)

    # pairwise RTS: filtered mode j at t, smoothed mode k at t+1 under dynamics k
    pair_rts = jax.vmap(  # over j
        jax.vmap(_rts_gain_step, in_axes=(None, None, 0, 0, 0, 0, 0)),  # over k
        in_axes=(0, 0, None, None, None, None, None),
    )

    def backward(carry, inp):
        log_next, next_means, next_covs = carry
        log_p, f_means, f_covs, next_dyn, trans = inp
        log_trans = log_probabilities(step_transition(params, trans))  # Pi_{t+1}
        # log P(s_t = j | s_{t+1} = k, y_{1:t}) = log p_t(j) Pi_jk - log sum_j' p_t(j') Pi_j'k
        log_u = log_normalise(log_p[:, None] + log_trans, axis=0)
        log_joint = log_u + log_next[None, :]  # P(s_t = j, s_{t+1} = k | y_{1:T}), (M, M)
        log_probs = jax.scipy.special.logsumexp(log_joint, axis=1)
        # P(s_{t+1} = k | s_t = j, y_{1:T}); for a mode of zero mass, the prior row Pi_j.
        w = normalise_log_weights(log_joint, axis=1, fallback=log_trans)
        pair_means, pair_covs, gains = pair_rts(
            f_means,
            f_covs,
            next_means,
            next_covs,
            params.dynamics_matrices,
            next_dyn,
            params.dynamics_covs,
        )  # (M, M, d), (M, M, d, d), (M, M, d, d)
        means, covs = moment_match(w, pair_means, pair_covs)
        carry = (log_probs, means, covs)
        if not moments:
            return carry, carry
        # given s_{t+1} = k: mix over s_t = j with U_t(j, k) = P(s_t = j | s_{t+1} = k, y_{1:T})
        u = jnp.exp(log_u)
        prev_means, prev_covs = moment_match(
            u.T, jnp.swapaxes(pair_means, 0, 1), jnp.swapaxes(pair_covs, 0, 1)
        )
        mean_gain = jnp.einsum("jk,jkab->kab", u, gains)
        cross = next_covs @ jnp.swapaxes(mean_gain, -1, -2)  # P_{t+1|T}^k Gbar_k^T
        pair = normalise_log_weights(log_joint.reshape(-1)).reshape(log_joint.shape)
        return carry, (*carry, pair, prev_means, prev_covs, cross)

    last = (log_filt[-1], filtered.means[-1], filtered.covs[-1])
    scanned = (
        log_filt[:-1],
        filtered.means[:-1],
        filtered.covs[:-1],
        dyn_off[1:],
        per_step_transitions(params, 1),
    )
    _, outs = jax.lax.scan(backward, last, scanned, reverse=True)
    log_probs, means, covs = (
        jnp.concatenate([a, b[None]]) for a, b in zip(outs[:3], last, strict=True)
    )
    return (log_probs, means, covs, *outs[3:])


@jax.jit
def kim_smoother_unchecked(
    params: SwitchingParams, filtered: FilterResult, inputs=None
) -> SmootherResult:
    """``kim_smoother`` on checked arrays (``check_inputs``) and a checked ``filtered``."""
    inputs = no_inputs(params, filtered.mean, inputs)
    log_probs, means, covs = _kim_pass(params, filtered, inputs, moments=False)
    probs = normalise_log_weights(log_probs)
    mean, cov = moment_match(probs, means, covs)
    return SmootherResult(probs, means, covs, mean, cov, filtered.log_likelihood)


@jax.jit
def kim_smoother_moments_unchecked(
    params: SwitchingParams, filtered: FilterResult, inputs=None
) -> SmootherMoments:
    """``kim_smoother_moments`` on checked arrays (``check_inputs``) and a checked
    ``filtered``; EM's E-step calls it with the filter's result."""
    inputs = no_inputs(params, filtered.mean, inputs)
    log_probs, means, covs, pair, prev_means, prev_covs, cross = _kim_pass(
        params, filtered, inputs, moments=True
    )
    return SmootherMoments(
        mode_probs=normalise_log_weights(log_probs),
        means=means,
        covs=covs,
        pair_probs=pair,
        prev_means=prev_means,
        prev_covs=prev_covs,
        cross_covs=cross,
        log_likelihood=filtered.log_likelihood,
    )


def _check_filtered(filtered, num_steps: int, num_modes: int, dim: int, dtype) -> FilterResult:
    """Validate a ``FilterResult`` against (T, M, d); return its arrays in ``dtype``."""
    if not isinstance(filtered, FilterResult):
        raise ValueError(f"filtered: expected a FilterResult, got {type(filtered).__name__}")
    expected = {
        "mode_probs": (num_steps, num_modes),
        "means": (num_steps, num_modes, dim),
        "covs": (num_steps, num_modes, dim, dim),
        "mean": (num_steps, dim),
        "cov": (num_steps, dim, dim),
        "log_likelihood": (),
    }
    out = {}
    for field, shape in expected.items():
        arr = validation.as_float_array(f"filtered.{field}", getattr(filtered, field))
        if tuple(arr.shape) != shape:
            raise ValueError(
                f"filtered.{field}: expected shape {shape} (T, M, d from params and "
                f"observations), got {tuple(arr.shape)}"
            )
        if not validation.is_traced(arr):
            arr = np.asarray(arr)
            if field != "log_likelihood" and not np.all(np.isfinite(arr)):
                per_step = np.isfinite(arr.reshape(num_steps, -1)).all(axis=1)
                raise ValueError(
                    f"filtered.{field}: contains {int(arr.size - np.isfinite(arr).sum())} "
                    f"non-finite value(s) (NaN or inf), the first at step "
                    f"{int(np.argmin(per_step)) + 1}; a filter returns them when it overflows "
                    "(explosive dynamics or extreme inputs): check it with "
                    "attnbayes.inference.switching.filters.check_filter_result("
                    "filtered, params=params)"
                )
            if field == "mode_probs" and (
                np.any(arr < 0) or not np.allclose(arr.sum(axis=1), 1.0, atol=1e-6)
            ):
                raise ValueError("filtered.mode_probs: rows must be probability vectors")
        out[field] = jnp.asarray(arr, dtype)
    return FilterResult(**out)


def kim_smoother(
    params: SwitchingParams, observations, filtered: FilterResult, *, inputs=None
) -> SmootherResult:
    """The approximate switching smoother of Kim (1994) (the IMM/GPB2 smoother).

    Backward from the filtered per-mode Gaussians N(m_t^j, P_t^j) and P(s_t = j | y_{1:t}):
      U_t(j, k) = P(s_t = j | s_{t+1} = k, y_{1:t}) = p_t(j) Pi_jk / sum_j' p_t(j') Pi_j'k,
      P(s_t = j, s_{t+1} = k | y_{1:T}) ~ U_t(j, k) P(s_{t+1} = k | y_{1:T}),
      P(s_t = j | y_{1:T}) = sum_k of it, W_t(k | j) = joint / P(s_t = j | y_{1:T});
      N(m_t|T^jk, P_t|T^jk) = RTS of N(m_t^j, P_t^j) through dynamics k towards the smoothed
      N(m_{t+1|T}^k, P_{t+1|T}^k), collapsed over k with weights W_t(k | j) into mode j.
    Mode probabilities are propagated in the log domain; a mode with zero smoothed mass gets
    the prior transition row as its collapse weights. With M = 1 this is the RTS smoother.
    With a time-varying (T, M, M) transition matrix, Pi is its entry t+1 (the law of s_{t+1}
    given s_t) in the step between t and t+1.
    The approximation: p(x_{t+1} | s_t, s_{t+1}, y_{1:T}) ~ p(x_{t+1} | s_{t+1}, y_{1:T}).

    A non-finite ``filtered`` (a filter that overflowed) is refused with a ``ValueError``
    naming the field and its first bad step; run ``check_filter_result`` on the filter's result
    first to get the cause.

    A NaN or inf in the result means a recursion overflowed (explosive dynamics, or inputs
    extreme for the dtype), and the backward pass carries it to every earlier step. Nothing is
    checked here (under ``jit``/``vmap`` no check could raise); call
    ``attnbayes.inference.switching.filters.check_filter_result(result, params=params)`` on the
    concrete result (``FloatingPointError``), and on the filter of the same series to see the step
    where it began.

    Traceable: ``jit``, ``vmap`` and ``grad`` over ``params`` and ``observations``. Under a
    transformation only the static checks (shapes, dtypes) run, so invalid parameter values
    give NaN or wrong numbers instead of a ``ValueError``: call
    ``attnbayes.models.switching.check_params("params", params)`` on concrete values first.

    Args:
        params: ``SwitchingParams``.
        observations: (T, o), the series that was filtered (used for its shape only).
        filtered: ``FilterResult`` of any filter of this model on ``observations``
            (imm_filter, gpb2_filter, exact or particle filter).
        inputs: (T, k) u_{1:T} (the filter's), required when ``params`` has input weights.

    Returns:
        ``SmootherResult`` with log_likelihood = filtered.log_likelihood.
    """
    params, obs, inputs = check_inputs(params, observations, inputs=inputs)
    m, d = params.initial_means.shape
    filtered = _check_filtered(filtered, obs.shape[0], m, d, obs.dtype)
    return kim_smoother_unchecked(params, filtered, inputs)


def kim_smoother_moments(
    params: SwitchingParams, observations, filtered: FilterResult, *, inputs=None
) -> SmootherMoments:
    """The E-step moments of EM for a switching state-space model (``SmootherMoments``) by
    Kim's (1994) smoother over any filter's result (IMM, GPB2, GPB1, exact; Kim and Nelson
    1999, ch. 5; Murphy 1998, "Switching Kalman filters", sec. 4).

    The backward step of ``kim_smoother`` runs, for each pair (s_t = j, s_{t+1} = k), an RTS
    step from the filtered N(m_t^j, P_t^j) through the dynamics of k towards the smoothed
    N(m_{t+1|T}^k, P_{t+1|T}^k), with gain G_t^jk = P_t^j F_k^T (F_k P_t^j F_k^T + Q_k)^+
    (a PSD pseudo-solve: Q_k may be singular). Given (j, k) it writes
    x_t = m_t^j + G_t^jk (x_{t+1} - F_k m_t^j - b_k - B_k u_{t+1}) + e, e independent of
    x_{t+1}, and Kim's approximation p(x_{t+1} | s_t = j, s_{t+1} = k, y_{1:T}) ~
    N(m_{t+1|T}^k, P_{t+1|T}^k) gives, as in the M = 1 case
    (Cov[x_{t+1}, x_t | y] = P_{t+1|T} G_t^T; Shumway and Stoffer 1982),

        Cov[x_{t+1}, x_t | s_t = j, s_{t+1} = k, y] = P_{t+1|T}^k (G_t^jk)^T.

    The mode pairs are collapsed onto s_{t+1} = k with U_t(j, k) = P(s_t = j | s_{t+1} = k,
    y_{1:t}) (= P(s_t = j | s_{t+1} = k, y_{1:T}) under the same approximation):

        P(s_t = j, s_{t+1} = k | y) = U_t(j, k) P(s_{t+1} = k | y),
        E[x_t | s_{t+1} = k, y] = sum_j U_t(j, k) m_t|T^jk,
        Cov[x_t | s_{t+1} = k, y] = sum_j U_t(j, k) (P_t|T^jk + (m_t|T^jk - mean)(...)^T),
        Cov[x_{t+1}, x_t | s_{t+1} = k, y] = P_{t+1|T}^k (sum_j U_t(j, k) G_t^jk)^T

    (x_{t+1}'s mean given (j, k) does not depend on j, so the mixture adds no between-pair
    term). Exact where the collapse is: M = 1 (the RTS smoother with its lag-one
    cross-covariance), or F_j = 0 (an HMM with Gaussian emissions, all cross-covariances
    zero). ``mode_probs``, ``means`` and ``covs`` are ``kim_smoother``'s.

    Traceable (``jit``, ``vmap``, ``grad``) like ``kim_smoother``; a non-finite ``filtered``
    is refused with a ``ValueError`` when concrete.

    Args:
        params: ``SwitchingParams``.
        observations: (T, o), the series that was filtered (used for its shape only).
        filtered: ``FilterResult`` of a filter of this model on ``observations``.
        inputs: (T, k) u_{1:T} (the filter's), required when ``params`` has input weights.
    """
    params, obs, inputs = check_inputs(params, observations, inputs=inputs)
    m, d = params.initial_means.shape
    filtered = _check_filtered(filtered, obs.shape[0], m, d, obs.dtype)
    return kim_smoother_moments_unchecked(params, filtered, inputs)


__all__ = [
    "SmootherMoments",
    "SmootherResult",
    "exact_smoother",
    "exact_smoother_moments",
    "exact_smoother_moments_unchecked",
    "exact_smoother_unchecked",
    "fixed_modes_smoother",
    "fixed_modes_smoother_unchecked",
    "kalman_smoother",
    "kalman_smoother_unchecked",
    "kim_smoother",
    "kim_smoother_moments",
    "kim_smoother_moments_unchecked",
    "kim_smoother_unchecked",
    "rts_step",
]
