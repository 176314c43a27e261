"""Filters of the switching linear-Gaussian state-space model (seed 3).

Model (``models.switching``): s_1 ~ Cat(pi0), s_t | s_{t-1} = i ~ Cat(Pi[i, :]),
x_1 | s_1 = j ~ N(m0_j, P0_j), x_t | x_{t-1}, s_t = j ~ N(F_j x_{t-1} + b_j, Q_j),
y_t | x_t, s_t = j ~ N(H_j x_t, R_j). The exact filter p(x_t, s_t | y_{1:t}) is a mixture of
M^t Gaussians; the approximate filters keep M of them by moment matching (the M-projection onto
Gaussians): collapse({w_k, m_k, P_k}) = (sum w m, sum w (P + (m - mean)(m - mean)^T)).

- ``gpb1_filter``: collapse to one Gaussian, then predict and update under each new mode.
- ``gpb2_filter``: M^2 Kalman updates (previous mode i, new mode j), then for each j the
  collapse over i with weights pi_i Pi_ij p(y_t | i, j).
- ``imm_filter``: mix first with mu_{i|j} = Pi_ij pi_i / c_j, c_j = sum_i Pi_ij pi_i, then M
  Kalman updates (Blom and Bar-Shalom 1988).
- ``exact_filter``: all M^T histories, for small T.
- ``rbpf``: particles over modes with a Kalman filter in each (``inference.rbpf``).

The smoothers (``inference.smoothers``: ``kalman_smoother``, ``exact_smoother``, Kim's
``kim_smoother``, ``fixed_modes_smoother``) are re-exported here.

All take ``(params, observations (T, o))`` and return ``FilterResult``; time runs in ``lax.scan``;
mode probabilities live in the log domain, so an observation hundreds of sigmas out leaves them
right (a linear-domain filter sees two likelihoods that both underflow). A NaN observation row
is a predict-only step. Every filter is ``jit``- and ``vmap``-able over a batch of series.

``attention_as_imm_step`` is seed 3's reading: one IMM mixing-and-collapse step, with the
attention kernel in the place of the transition matrix, is the attention sublayer.
"""

from __future__ import annotations

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp

from inference.kalman import (
    FilterResult,
    check_inputs,
    kalman_filter,
    kalman_predict,
    kalman_update,
    moment_match,
    normalise_log_weights,
)
from inference.rbpf import rbpf
from inference.smoothers import (
    SmootherResult,
    exact_smoother,
    fixed_modes_smoother,
    kalman_smoother,
    kim_smoother,
)
from models import _checks

# ----------------------------------------------------------------------------- building blocks


def collapse(log_weights, means, covs):
    """Moment-match a Gaussian mixture: (sum w m, sum w (P + (m - mean)(m - mean)^T)).

    Args:
        log_weights: (K,) unnormalised log weights.
        means: (K, d); covs: (K, d, d).

    Returns:
        mean (d,), cov (d, d) of the M-projection onto one Gaussian.
    """
    return moment_match(normalise_log_weights(log_weights, axis=0), means, covs)


def imm_mixing(log_mode_probs, log_transition):
    """IMM mixing: log c_j = logsumexp_i(log pi_i + log Pi_ij), log mu_{i|j} = .. - log c_j.

    Args:
        log_mode_probs: (M,) log pi_i = log P(s_{t-1} = i | y_{1:t-1}).
        log_transition: (M, M) log Pi_ij.

    Returns:
        log_predicted (M,) = log c_j, and log_mixing (M_i, M_j) = log mu_{i|j} (each column a
        log probability vector; uniform for a mode j that cannot be reached).
    """
    log_joint = log_mode_probs[:, None] + log_transition
    log_predicted = logsumexp(log_joint, axis=0)
    finite = jnp.isfinite(log_predicted)
    log_mixing = jnp.where(
        finite[None, :],
        log_joint - jnp.where(finite, log_predicted, 0.0)[None, :],
        -jnp.log(log_joint.shape[0]),
    )
    return log_predicted, log_mixing


def _mix(log_mixing, means, covs):
    """For each new mode j, collapse the previous components with weights mu_{.|j}."""
    return jax.vmap(collapse, in_axes=(1, None, None))(log_mixing, means, covs)


def _predict_each(params, means, covs):
    """Component j predicted under mode j: (M, d), (M, d, d)."""
    return jax.vmap(kalman_predict)(
        means, covs, params.dynamics_matrices, params.dynamics_biases, params.dynamics_covs
    )


def _update_each(params, means, covs, y):
    """Component j updated with y under mode j: means, covs and log N(y; H_j m_j, S_j)."""
    return jax.vmap(kalman_update, in_axes=(0, 0, None, 0, 0))(
        means, covs, y, params.emission_matrices, params.emission_covs
    )


def _result(log_probs, means, covs, log_likelihood):
    """Assemble a FilterResult from per-step (log mode probs, per-mode moments)."""
    mean, cov = jax.vmap(collapse)(log_probs, means, covs)
    return FilterResult(
        mode_probs=normalise_log_weights(log_probs, axis=-1),
        means=means,
        covs=covs,
        mean=mean,
        cov=cov,
        log_likelihood=log_likelihood,
    )


def _first_step(params, y):
    """Step 1: update N(m0_j, P0_j) with y_1 under each mode j (no prediction before it)."""
    means, covs, ll = _update_each(params, params.initial_means, params.initial_covs, y)
    log_joint = jnp.log(params.initial_probs) + ll
    increment = logsumexp(log_joint)
    return (means, covs, log_joint - increment), increment


def _run(step, params, observations):
    """Scan ``step((means, covs, log_probs), y) -> (carry, increment)`` over steps 2..T."""
    carry, first = _first_step(params, observations[0])

    def body(carry, y):
        carry, increment = step(params, carry, y)
        return carry, (carry, increment)

    _, (rest, increments) = jax.lax.scan(body, carry, observations[1:])
    means, covs, log_probs = (
        jnp.concatenate([a[None], b]) for a, b in zip(carry, rest, strict=True)
    )
    return _result(log_probs, means, covs, first + jnp.sum(increments))


# ----------------------------------------------------------------------------- the filters


def _imm_step(params, carry, y):
    means, covs, log_probs = carry
    log_predicted, log_mixing = imm_mixing(log_probs, jnp.log(params.transition_matrix))
    means, covs = _predict_each(params, *_mix(log_mixing, means, covs))
    means, covs, ll = _update_each(params, means, covs, y)
    log_joint = log_predicted + ll
    increment = logsumexp(log_joint)
    return (means, covs, log_joint - increment), increment


def _gpb1_step(params, carry, y):
    means, covs, log_probs = carry
    m = log_probs.shape[0]
    mean, cov = collapse(log_probs, means, covs)
    log_predicted = logsumexp(log_probs[:, None] + jnp.log(params.transition_matrix), axis=0)
    means, covs = _predict_each(
        params, jnp.broadcast_to(mean, (m, *mean.shape)), jnp.broadcast_to(cov, (m, *cov.shape))
    )
    means, covs, ll = _update_each(params, means, covs, y)
    log_joint = log_predicted + ll
    increment = logsumexp(log_joint)
    return (means, covs, log_joint - increment), increment


def _gpb2_step(params, carry, y):
    means, covs, log_probs = carry

    def under_mode(f, b, q, h, r):
        """All previous components i predicted and updated under one new mode."""
        pm, pc = jax.vmap(kalman_predict, in_axes=(0, 0, None, None, None))(means, covs, f, b, q)
        return jax.vmap(kalman_update, in_axes=(0, 0, None, None, None))(pm, pc, y, h, r)

    # (M_j, M_i, ...) after the vmap over the new mode j
    new_means, new_covs, ll = jax.vmap(under_mode)(
        params.dynamics_matrices,
        params.dynamics_biases,
        params.dynamics_covs,
        params.emission_matrices,
        params.emission_covs,
    )
    log_w = log_probs[None, :] + jnp.log(params.transition_matrix).T + ll  # [j, i]
    increment = logsumexp(log_w)
    means, covs = jax.vmap(collapse)(log_w, new_means, new_covs)
    return (means, covs, logsumexp(log_w, axis=1) - increment), increment


@jax.jit
def _imm_filter(params, observations):
    return _run(_imm_step, params, observations)


@jax.jit
def _gpb1_filter(params, observations):
    return _run(_gpb1_step, params, observations)


@jax.jit
def _gpb2_filter(params, observations):
    return _run(_gpb2_step, params, observations)


_FILTER_ARGS = """
    Args:
        params: ``SwitchingParams`` (validated: shapes, stochastic rows, PSD covariances).
        observations: (T, o); a row with NaN is a missing observation (predict only).

    Returns:
        ``FilterResult``: mode_probs (T, M), means (T, M, d), covs (T, M, d, d), mean (T, d),
        cov (T, d, d), log_likelihood (the filter's approximation of log p(y_{1:T})).
"""


def imm_filter(params, observations) -> FilterResult:
    """Interacting multiple model filter: mix, then M Kalman predict-update steps.

    mu_{i|j} = Pi_ij pi_i / c_j, (m0_j, P0_j) = collapse_i(mu_{i|j}, m_i, P_i), then predict
    with (F_j, b_j, Q_j) and update with (H_j, R_j); pi_j' ~ c_j N(y_t; H_j m_j^-, S_j).
    """
    return _imm_filter(*check_inputs(params, observations))


def gpb1_filter(params, observations) -> FilterResult:
    """Generalised pseudo-Bayesian filter of order 1: collapse all modes to one Gaussian, then
    predict and update under each new mode j; pi_j' ~ c_j N(y_t; H_j m_j^-, S_j)."""
    return _gpb1_filter(*check_inputs(params, observations))


def gpb2_filter(params, observations) -> FilterResult:
    """Generalised pseudo-Bayesian filter of order 2: M^2 Kalman updates (i -> j), weights
    w_ij ~ pi_i Pi_ij N(y_t; H_j m_ij^-, S_ij), then for each j collapse over i."""
    return _gpb2_filter(*check_inputs(params, observations))


for _f in (imm_filter, gpb1_filter, gpb2_filter):
    _f.__doc__ += _FILTER_ARGS


def _increments(step, params, observations):
    """log p(y_t | y_{1:t-1}) for t = 1..T, as ``_run`` sums them."""
    carry, first = _first_step(params, observations[0])
    _, rest = jax.lax.scan(lambda c, y: step(params, c, y), carry, observations[1:])
    return jnp.concatenate([first[None], rest])


_STEPS = {"imm": _imm_step, "gpb1": _gpb1_step, "gpb2": _gpb2_step}


@functools.partial(jax.jit, static_argnames=("method",))
def _one_step_log_predictive(params, observations, method):
    return _increments(_STEPS[method], params, observations)


def one_step_log_predictive(params, observations, *, method: str = "imm") -> jax.Array:
    """One-step-ahead log predictive densities log p(y_t | y_{1:t-1}, theta), t = 1..T.

    p(y_t | y_{1:t-1}) = sum_j c_j N(y_t; H_j m_j^-, S_j) with the filter's predicted mode
    probabilities c_j and moments (m_j^-, P_j^-) (for t = 1: pi0_j and N(m0_j, P0_j)). They sum
    to the filter's ``log_likelihood``; with M = 1 they are the exact Kalman terms, otherwise
    the named filter's approximation. A NaN row contributes 0. This is the pointwise
    log-likelihood of a time series that leave-future-out cross-validation scores.

    Args:
        params: ``SwitchingParams``.
        observations: (T, o); NaN rows are missing.
        method: "imm" (default), "gpb1" or "gpb2".

    Returns:
        (T,) log predictive densities.
    """
    if method not in _STEPS:
        raise ValueError(f"method: expected one of {list(_STEPS)}, got {method!r}")
    return _one_step_log_predictive(*check_inputs(params, observations), method)


# ----------------------------------------------------------------------------- exact


@jax.jit
def _exact_filter(params, observations, histories):
    log_trans = jnp.log(params.transition_matrix)
    m = params.initial_probs.shape[0]
    first = histories[:, 0]

    def update(means, covs, y, modes):
        return jax.vmap(kalman_update, in_axes=(0, 0, None, 0, 0))(
            means, covs, y, params.emission_matrices[modes], params.emission_covs[modes]
        )

    def moments(log_w, means, covs, modes):
        log_probs = jax.vmap(lambda j: logsumexp(jnp.where(modes == j, log_w, -jnp.inf)))(
            jnp.arange(m)
        )
        per_mode = jax.vmap(
            lambda j: collapse(jnp.where(modes == j, log_w, -jnp.inf), means, covs)
        )(jnp.arange(m))
        return log_probs - logsumexp(log_w), *per_mode

    means, covs, ll = update(
        params.initial_means[first], params.initial_covs[first], observations[0], first
    )
    log_w = jnp.log(params.initial_probs)[first] + ll

    def step(carry, inputs):
        means, covs, log_w = carry
        y, prev, modes = inputs
        means, covs = jax.vmap(kalman_predict)(
            means,
            covs,
            params.dynamics_matrices[modes],
            params.dynamics_biases[modes],
            params.dynamics_covs[modes],
        )
        means, covs, ll = update(means, covs, y, modes)
        log_w = log_w + log_trans[prev, modes] + ll
        return (means, covs, log_w), moments(log_w, means, covs, modes)

    inputs = (observations[1:], histories[:, :-1].T, histories[:, 1:].T)
    (_, _, log_w_final), rest = jax.lax.scan(step, (means, covs, log_w), inputs)
    start = moments(log_w, means, covs, first)
    log_probs, mode_means, mode_covs = (
        jnp.concatenate([a[None], b]) for a, b in zip(start, rest, strict=True)
    )
    # the duplicated prefixes carry equal weight, so log p(y_{1:T}) needs no correction at T
    return _result(log_probs, mode_means, mode_covs, logsumexp(log_w_final))


def all_histories(num_modes: int, num_steps: int) -> np.ndarray:
    """(M^T, T) every mode sequence, in lexicographic order."""
    return np.array(list(itertools.product(range(num_modes), repeat=num_steps)), dtype=np.int32)


def exact_filter(params, observations, *, max_histories: int = 2**16) -> FilterResult:
    """The exact filter p(x_t, s_t | y_{1:t}): a Kalman filter along each of the M^T mode
    histories, weighted by p(s_{1:t}, y_{1:t}) and collapsed per mode at each t.

    The filtered law of x_t given s_t = j is a mixture of M^(t-1) Gaussians; ``means`` and
    ``covs`` are its exact first two moments. Refuses (ValueError) when M^T > ``max_histories``.
    """
    params, obs = check_inputs(params, observations)
    m, t = params.initial_probs.shape[0], obs.shape[0]
    max_histories = _checks.check_positive_int("max_histories", max_histories)
    if m**t > max_histories:
        raise ValueError(
            f"observations: the exact filter needs M^T = {m}^{t} histories, more than "
            f"max_histories = {max_histories}; use gpb2_filter or imm_filter for long series"
        )
    return _exact_filter(params, obs, jnp.asarray(all_histories(m, t)))


# ----------------------------------------------------------------------------- attention


@jax.jit
def _attention_as_imm_step(hidden, w_query, w_key, w_value):
    m, d = hidden.shape
    d_v = w_value.shape[1]
    # seed 3 eq. 2: A_ij = exp<H_i Wq, H_j Wk> / sum_i' exp<H_i' Wq, H_j Wk>, no 1/sqrt(d)
    scores = (hidden @ w_query) @ (hidden @ w_key).T  # [i, j]
    log_kernel = jax.nn.log_softmax(scores, axis=0)
    log_uniform = jnp.full((m,), -jnp.log(m), hidden.dtype)
    _, log_mixing = imm_mixing(log_uniform, log_kernel)
    zeros = jnp.zeros((m, d, d), hidden.dtype)
    mixed_means, mixed_covs = _mix(log_mixing, hidden, zeros)
    # deterministic value dynamics x -> Wv^T x (row form: H_i -> H_i Wv), no process noise
    dynamics = jnp.broadcast_to(w_value.T, (m, d_v, d))
    means, _ = jax.vmap(kalman_predict)(
        mixed_means,
        mixed_covs,
        dynamics,
        jnp.zeros((m, d_v), hidden.dtype),
        jnp.zeros((m, d_v, d_v), hidden.dtype),
    )
    return means


def attention_as_imm_step(hidden, w_query, w_key, w_value) -> jax.Array:
    """Seed 3: the attention sublayer as one IMM mixing-and-collapse step.

    The problem: M modes, one per token, with uniform mode probabilities 1/M and the state of
    mode i known exactly, x | s = i = H_i (zero covariance); the kernel Pi_ij = softmax over i
    of <H_i Wq, H_j Wk> (seed 3 eqs. 2 and 12: normalised over the previous mode i, so each
    column sums to one and the predicted mode probabilities stay 1/M); deterministic value
    dynamics x -> x Wv with no noise and no observation. The IMM mixing weights are then
    mu_{i|j} = Pi_ij / sum_i' Pi_i'j = A_ij, and the collapse followed by the prediction is

        H'_j = sum_i A_ij H_i Wv,

    the attention sublayer (queries from H Wk, keys from H Wq in the usual notation, scale 1).
    Runs ``imm_mixing`` and the collapse that ``imm_filter`` runs.

    Args:
        hidden: (M, d) hidden states H.
        w_query, w_key: (d, d_k); w_value: (d, d_v).

    Returns:
        H' (M, d_v).
    """
    hidden = _checks.as_float_array("hidden", hidden)
    if hidden.ndim != 2 or hidden.shape[0] < 1:
        raise ValueError(f"hidden: expected shape (M, d), got {tuple(hidden.shape)}")
    d = hidden.shape[1]
    mats = {}
    for name, value in (("w_query", w_query), ("w_key", w_key), ("w_value", w_value)):
        arr = _checks.as_float_array(name, value)
        if arr.ndim != 2 or arr.shape[0] != d:
            raise ValueError(f"{name}: expected shape ({d}, k), got {tuple(arr.shape)}")
        mats[name] = arr
    if mats["w_query"].shape[1] != mats["w_key"].shape[1]:
        raise ValueError(
            f"w_key: {mats['w_key'].shape[1]} columns do not match the "
            f"{mats['w_query'].shape[1]} of w_query"
        )
    for name, arr in (("hidden", hidden), *mats.items()):
        if not _checks.is_traced(arr):
            _checks.check_finite(name, arr)
    dtype = jnp.result_type(hidden, *mats.values())
    return _attention_as_imm_step(
        jnp.asarray(hidden, dtype), *(jnp.asarray(a, dtype) for a in mats.values())
    )


__all__ = [
    "FilterResult",
    "SmootherResult",
    "all_histories",
    "attention_as_imm_step",
    "collapse",
    "exact_filter",
    "exact_smoother",
    "fixed_modes_smoother",
    "gpb1_filter",
    "gpb2_filter",
    "imm_filter",
    "imm_mixing",
    "kalman_filter",
    "kalman_predict",
    "kalman_smoother",
    "kalman_update",
    "kim_smoother",
    "one_step_log_predictive",
    "rbpf",
]
