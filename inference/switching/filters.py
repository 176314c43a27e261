"""Filters of the switching linear-Gaussian state-space model (GPB1, GPB2, IMM, exact).

Model (``attnbayes.models.switching``): s_1 ~ Cat(pi0), s_t | s_{t-1} = i ~ Cat(Pi[i, :]),
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
- ``rbpf``: particles over modes with a Kalman filter in each
  (``attnbayes.inference.switching.particle``).

The smoothers (``kalman_smoother``, ``exact_smoother``, Kim's ``kim_smoother``,
``fixed_modes_smoother``) live in ``attnbayes.inference.switching.smoothers``.

Time-varying transition probabilities (TVTP; Filardo 1994, Diebold, Lee and Weinbach 1994):
every filter (and smoother) takes ``params.transition_matrix`` (M, M) or (T, M, M), entry t
the law of s_t given s_{t-1} (entry 0 unused: s_1 follows pi0); the step into t then uses
Pi_t where the equations below write Pi. The scans carry Pi_t with (y_t, u_t)
(``attnbayes.models.switching.per_step_transitions``; a constant matrix stays out of the scan,
so its program is unchanged). A (T, M, M) matrix whose T is not the observations' is refused.

All take ``(params, observations (T, o))`` and return ``FilterResult``; time runs in ``lax.scan``;
mode probabilities live in the log domain, so an observation hundreds of sigmas out leaves them
right (a linear-domain filter sees two likelihoods that both underflow). A NaN observation row
is a predict-only step.

Tracing. Every filter and smoother is a pure JAX function of its parameters and observations:
``jax.jit``, ``jax.vmap`` (over a batch of series, of parameters, or both) and ``jax.grad``
apply to the public functions themselves, whose results are pytrees of arrays. Each public
function validates its inputs once, at the boundary, and hands checked arrays to an unchecked
kernel (``imm_filter_unchecked``, ``gpb2_filter_unchecked``, ...). On concrete values every
check runs and a bad input raises ``ValueError`` naming the argument (``check_params``: shapes,
finite values, probability rows, PSD covariances; no +-inf observation). On tracers (the
function is being jitted, vmapped or differentiated) only the static checks run: types, ranks,
shapes, M, d and o consistent, real dtypes. Values are unknown while tracing, so invalid
parameter values are then not refused: they come back as NaN or as wrong numbers. Call
``attnbayes.models.switching.check_params("params", params)`` on concrete parameters before
transforming over them, and ``check_filter_result`` on the concrete result.

Results are never checked (nothing can raise under ``jit``): an overflow (explosive dynamics,
inputs extreme for the dtype) comes back as NaN or inf. ``check_filter_result`` raises
``FloatingPointError`` on such a result, naming the first bad step, the fields and what to
check.

Differentiability. The results (log-likelihood, mode probabilities, moments) of
``kalman_filter``, ``gpb1_filter``, ``gpb2_filter``, ``imm_filter``, ``exact_filter``,
``one_step_log_predictive`` and of the smoothers ``kalman_smoother``, ``kim_smoother``,
``exact_smoother`` and ``fixed_modes_smoother`` are differentiable in every field of
``SwitchingParams`` and in the observations (a NaN row has gradient 0), wherever the
innovation covariances H P H^T + R are positive definite and the mode probabilities in
``initial_probs`` and ``transition_matrix`` are > 0. A zero probability is a structural zero
(``log_probabilities``): its own gradient entry is 0, not the one-sided derivative, and the
others stay finite to every order (Hessians too); parametrise probabilities by logits to
optimise them. The gradient is that of the formulas, in all directions:
keeping transition rows on the simplex and covariances symmetric is the caller's affair.
Not differentiable:

- ``rbpf``: the modes are drawn (categorical) and the particles resampled (discrete
  indices). ``jax.grad`` runs but holds the draws fixed: that is not the gradient of the
  expected log-likelihood estimate (the score-function terms of the discrete draws are
  missing), and it jumps where a draw changes. ``jit`` and ``vmap`` (over keys, parameters
  or series) apply.
- ``all_histories``: a static enumeration of the M^T mode sequences (NumPy integers; M and T
  are shapes, not values).
- the Gibbs sampler (``attnbayes.inference.switching.gibbs``): ``switching_gibbs_init`` and
  ``switching_gibbs_step`` draw discrete modes (both mode samplers), states and parameters
  at random: they ``jit`` and ``vmap``, but a gradient of a draw means nothing.
  ``run_switching_gibbs`` returns a DataTree and ``compare_switching`` a table: NumPy on
  the results, so neither traces; call them on concrete values.
- discrete arguments: ``fixed_modes_smoother``'s ``modes``, the ``method`` of
  ``one_step_log_predictive``, ``max_histories``, ``num_particles`` (static).
- ``check_filter_result`` and ``check_params``'s value checks run NumPy on concrete values
  only (``check_filter_result`` refuses tracers with a ``TypeError``).

Batches of series: ``filter_batch(params, observations (B, T, o), method="imm", inputs=None,
mesh=None)`` runs one filter (``"imm"``, ``"gpb1"`` or ``"gpb2"``) on B series of one model
(the same ``params``; ``inputs`` (B, T, k) one row of inputs per series and step) and returns
the ``FilterResult`` with a leading series axis (mode_probs (B, T, M), ..., log_likelihood
(B,)), equal to the single-series filter on each series. The series axis is split over the
devices of ``mesh`` (``attnbayes.sharding``: a one-axis ``jax.sharding.Mesh``, default every
device JAX sees, every process's under ``jax.distributed``): B is padded to a multiple of the
mesh size with copies of the last series (dropped from the result), each device vmaps the
filter over its B / D series, and nothing moves between devices while they run (the series
are independent: no collective in the filtering; the inputs, B T (o + k) numbers, go out once,
and the results, B T M d^2 for the covariances, come back). Cutting the padding off is the one
exception: when B is not a multiple of D the cut results cannot be split evenly, and XLA
gathers them whole onto every device (D copies of B T M d^2 numbers); give B a multiple of D
to keep them split. Each series is computed by the same
program whatever the mesh, so results agree to round-off (1e-12 in float64) on any number of
devices. Under several processes every process calls it with the same arrays, and the result
is split over the processes: ``attnbayes.sharding.gather`` brings it to each (and
``check_filter_result`` gathers it itself). For B series of different models, ``jax.vmap`` a
filter over stacked ``SwitchingParams`` (one device).

``attention_as_imm_step`` is the reading of the note "Attention as GPB2/IMM message passing": one
IMM mixing-and-collapse step, with the attention kernel in the place of the transition matrix, is
the attention sublayer.

Over 800 lines: the approximate filters (GPB1, GPB2, IMM) built from one set of private
recursion pieces (prediction, update, collapse, the scan), the exact filter, batched filtering
over a mesh, the attention-as-IMM step (the note's reading of an IMM step), and
``check_filter_result``, the eager check every front recommends after a traced run. The
smoothers live apart (``smoothers``).
"""

from __future__ import annotations

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp

from ... import sharding, validation
from ...models.switching import (
    SwitchingParams,
    as_float_field,
    check_params,
    check_transition_steps,
    per_step_transitions,
    step_offsets,
    step_transition,
)
from .kalman import (
    FilterResult,
    check_inputs,
    kalman_filter,
    kalman_predict,
    kalman_update,
    log_probabilities,
    moment_match,
    no_inputs,
    normalise_log_weights,
)
from .smoothers import SmootherResult

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


def _predict_each(params, means, covs, offsets):
    """Component j predicted under mode j with offset b_j + B_j u_t: (M, d), (M, d, d)."""
    return jax.vmap(kalman_predict)(
        means, covs, params.dynamics_matrices, offsets, params.dynamics_covs
    )


def _update_each(params, means, covs, y, offsets):
    """Component j updated with y under mode j: means, covs and log N(y; H_j m_j + e_j, S_j),
    e_j = d_j + D_j u_t (``offsets`` (M, o))."""
    return jax.vmap(kalman_update, in_axes=(0, 0, 0, 0, 0))(
        means, covs, y - offsets, params.emission_matrices, params.emission_covs
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


def _first_step(params, y, u):
    """Step 1: update N(m0_j, P0_j) with y_1 under each mode j (no prediction before it)."""
    _, emi = step_offsets(params, u)
    means, covs, ll = _update_each(params, params.initial_means, params.initial_covs, y, emi)
    log_joint = log_probabilities(params.initial_probs) + ll
    increment = logsumexp(log_joint)
    return (means, covs, log_joint - increment), increment


def _scanned(observations, inputs, params):
    """What the filters scan over steps 2..T: (y_t, u_t, P_t), P_t None for a constant
    transition matrix (``per_step_transitions``)."""
    return observations[1:], inputs[1:], per_step_transitions(params, 1)


def _run(step, params, observations, inputs):
    """Scan ``step(params, (means, covs, log_probs), (y_t, u_t, P_t)) -> (carry, increment)``
    over steps 2..T."""
    carry, first = _first_step(params, observations[0], inputs[0])

    def body(carry, yu):
        carry, increment = step(params, carry, yu)
        return carry, (carry, increment)

    _, (rest, increments) = jax.lax.scan(body, carry, _scanned(observations, inputs, params))
    means, covs, log_probs = (
        jnp.concatenate([a[None], b]) for a, b in zip(carry, rest, strict=True)
    )
    return _result(log_probs, means, covs, first + jnp.sum(increments))


# ----------------------------------------------------------------------------- the filters


def _imm_step(params, carry, yu):
    means, covs, log_probs = carry
    y, u, trans = yu
    dyn, emi = step_offsets(params, u)
    log_trans = log_probabilities(step_transition(params, trans))
    log_predicted, log_mixing = imm_mixing(log_probs, log_trans)
    means, covs = _predict_each(params, *_mix(log_mixing, means, covs), dyn)
    means, covs, ll = _update_each(params, means, covs, y, emi)
    log_joint = log_predicted + ll
    increment = logsumexp(log_joint)
    return (means, covs, log_joint - increment), increment


def _gpb1_step(params, carry, yu):
    means, covs, log_probs = carry
    y, u, trans = yu
    dyn, emi = step_offsets(params, u)
    m = log_probs.shape[0]
    mean, cov = collapse(log_probs, means, covs)
    log_predicted = logsumexp(
        log_probs[:, None] + log_probabilities(step_transition(params, trans)), axis=0
    )
    means, covs = _predict_each(
        params,
        jnp.broadcast_to(mean, (m, *mean.shape)),
        jnp.broadcast_to(cov, (m, *cov.shape)),
        dyn,
    )
    means, covs, ll = _update_each(params, means, covs, y, emi)
    log_joint = log_predicted + ll
    increment = logsumexp(log_joint)
    return (means, covs, log_joint - increment), increment


def _gpb2_step(params, carry, yu):
    means, covs, log_probs = carry
    y, u, trans = yu
    dyn, emi = step_offsets(params, u)

    def under_mode(f, b, q, h, r, e):
        """All previous components i predicted and updated under one new mode."""
        pm, pc = jax.vmap(kalman_predict, in_axes=(0, 0, None, None, None))(means, covs, f, b, q)
        return jax.vmap(kalman_update, in_axes=(0, 0, None, None, None))(pm, pc, y - e, h, r)

    # (M_j, M_i, ...) after the vmap over the new mode j
    new_means, new_covs, ll = jax.vmap(under_mode)(
        params.dynamics_matrices,
        dyn,
        params.dynamics_covs,
        params.emission_matrices,
        params.emission_covs,
        emi,
    )
    log_trans = log_probabilities(step_transition(params, trans))
    log_w = log_probs[None, :] + log_trans.T + ll  # [j, i]
    increment = logsumexp(log_w)
    means, covs = jax.vmap(collapse)(log_w, new_means, new_covs)
    return (means, covs, logsumexp(log_w, axis=1) - increment), increment


@jax.jit
def imm_filter_unchecked(params, observations, inputs=None) -> FilterResult:
    """``imm_filter`` on checked arrays (``check_inputs``); ``inputs`` (T, k) or None for a
    model without inputs. Traceable (``jit``, ``vmap``, ``grad``)."""
    return _run(_imm_step, params, observations, no_inputs(params, observations, inputs))


@jax.jit
def gpb1_filter_unchecked(params, observations, inputs=None) -> FilterResult:
    """``gpb1_filter`` on checked arrays (``check_inputs``); ``inputs`` (T, k) or None for a
    model without inputs. Traceable (``jit``, ``vmap``, ``grad``)."""
    return _run(_gpb1_step, params, observations, no_inputs(params, observations, inputs))


@jax.jit
def gpb2_filter_unchecked(params, observations, inputs=None) -> FilterResult:
    """``gpb2_filter`` on checked arrays (``check_inputs``); ``inputs`` (T, k) or None for a
    model without inputs. Traceable (``jit``, ``vmap``, ``grad``)."""
    return _run(_gpb2_step, params, observations, no_inputs(params, observations, inputs))


_FILTER_ARGS = """

    A NaN or inf in the result means the recursion overflowed: explosive dynamics (a dynamics
    matrix with spectral radius > 1 along a direction the observations do not pin down, or over
    a long run of missing rows) or inputs extreme for the dtype. The filter does not check (under
    ``jit``/``vmap`` no check could raise); call ``check_filter_result(result, params=params)``
    (``attnbayes.inference.switching.filters``) on the concrete result: it raises
    ``FloatingPointError`` naming the first non-finite step and field.

    ``jit``-, ``vmap``- and ``grad``-able over ``params``, ``observations`` and ``inputs``
    (module docstring). Under a transformation only the static checks (shapes, dtypes) run: invalid
    parameter values (rows not summing to one, covariances not PSD) then give NaN or wrong
    numbers instead of a ``ValueError``, so call
    ``attnbayes.models.switching.check_params("params", params)`` on concrete values first.

    Args:
        params: ``SwitchingParams`` (validated: shapes, stochastic rows, PSD covariances;
            the value checks only when concrete); ``transition_matrix`` (M, M), or (T, M, M)
            with one matrix per step (entry t the law of s_t given s_{t-1}, 0-based; entry 0
            unused).
        observations: (T, o); a NaN coordinate is missing (the update conditions on the
            observed coordinates; a wholly missing row is a predict-only step).
        inputs: (T, k) known inputs u_{1:T}, required when ``params`` has input weights.

    Returns:
        ``FilterResult``: mode_probs (T, M), means (T, M, d), covs (T, M, d, d), mean (T, d),
        cov (T, d, d), log_likelihood (the filter's approximation of log p(y_{1:T})).
"""


def imm_filter(params, observations, *, inputs=None) -> FilterResult:
    """Interacting multiple model filter: mix, then M Kalman predict-update steps.

    mu_{i|j} = Pi_ij pi_i / c_j, (m0_j, P0_j) = collapse_i(mu_{i|j}, m_i, P_i), then predict
    with (F_j, b_j, Q_j) and update with (H_j, R_j); pi_j' ~ c_j N(y_t; H_j m_j^-, S_j).
    """
    return imm_filter_unchecked(*check_inputs(params, observations, inputs=inputs))


def gpb1_filter(params, observations, *, inputs=None) -> FilterResult:
    """Generalised pseudo-Bayesian filter of order 1: collapse all modes to one Gaussian, then
    predict and update under each new mode j; pi_j' ~ c_j N(y_t; H_j m_j^-, S_j)."""
    return gpb1_filter_unchecked(*check_inputs(params, observations, inputs=inputs))


def gpb2_filter(params, observations, *, inputs=None) -> FilterResult:
    """Generalised pseudo-Bayesian filter of order 2: M^2 Kalman updates (i -> j), weights
    w_ij ~ pi_i Pi_ij N(y_t; H_j m_ij^-, S_ij), then for each j collapse over i."""
    return gpb2_filter_unchecked(*check_inputs(params, observations, inputs=inputs))


for _f in (imm_filter, gpb1_filter, gpb2_filter):
    _f.__doc__ = _f.__doc__.rstrip() + _FILTER_ARGS


def _increments(step, params, observations, inputs):
    """log p(y_t | y_{1:t-1}) for t = 1..T, as ``_run`` sums them."""
    carry, first = _first_step(params, observations[0], inputs[0])
    scanned = _scanned(observations, inputs, params)
    _, rest = jax.lax.scan(lambda c, yu: step(params, c, yu), carry, scanned)
    return jnp.concatenate([first[None], rest])


_STEPS = {"imm": _imm_step, "gpb1": _gpb1_step, "gpb2": _gpb2_step}


@functools.partial(jax.jit, static_argnames=("method",))
def one_step_log_predictive_unchecked(params, observations, method, inputs=None):
    """``one_step_log_predictive`` on checked arrays (``check_inputs``); ``inputs`` (T, k) or
    None for a model without inputs."""
    return _increments(
        _STEPS[method], params, observations, no_inputs(params, observations, inputs)
    )


def one_step_log_predictive(params, observations, *, method: str = "imm", inputs=None) -> jax.Array:
    """One-step-ahead log predictive densities log p(y_t | y_{1:t-1}, theta), t = 1..T.

    p(y_t | y_{1:t-1}) = sum_j c_j N(y_t; H_j m_j^-, S_j) with the filter's predicted mode
    probabilities c_j and moments (m_j^-, P_j^-) (for t = 1: pi0_j and N(m0_j, P0_j)). They sum
    to the filter's ``log_likelihood``; with M = 1 they are the exact Kalman terms, otherwise
    the named filter's approximation. A NaN row contributes 0. This is the pointwise
    log-likelihood of a time series that leave-future-out cross-validation scores.

    A NaN or inf entry means the filter overflowed at that step or before (explosive dynamics
    or inputs extreme for the dtype; nothing raises, and under ``jit``/``vmap`` nothing could):
    run the named filter and ``check_filter_result(result, params=params)`` to see the field
    and the likely cause.

    Traceable: ``jit``, ``vmap`` and ``grad`` over ``params``, ``observations`` and ``inputs``
    (``method`` is static). Under a transformation only the static checks (shapes, dtypes)
    run, so invalid parameter values give NaN or wrong numbers instead of a ``ValueError``: call
    ``attnbayes.models.switching.check_params("params", params)`` on concrete values first.

    Args:
        params: ``SwitchingParams``.
        observations: (T, o); a NaN coordinate is missing.
        method: "imm" (default), "gpb1" or "gpb2".
        inputs: (T, k) u_{1:T}, required when ``params`` has input weights.

    Returns:
        (T,) log predictive densities.
    """
    if not isinstance(method, str) or method not in _STEPS:
        raise ValueError(f"method: expected one of {list(_STEPS)}, got {method!r}")
    params, obs, inputs = check_inputs(params, observations, inputs=inputs)
    return one_step_log_predictive_unchecked(params, obs, method, inputs)


# ----------------------------------------------------------------------------- batches


@functools.partial(jax.jit, static_argnames=("method", "mesh"))
def filter_batch_unchecked(params, observations, inputs, *, method, mesh) -> FilterResult:
    """``filter_batch`` on checked arrays: ``observations`` (B, T, o), ``inputs`` (B, T, k)
    (k = 0 for a model without inputs), ``method`` one of "imm", "gpb1", "gpb2" and ``mesh`` a
    one-axis mesh (both static). The series axis is padded to a multiple of the mesh size,
    split over its devices (``sharding.shard_batch``) and cut back to B."""
    step = _STEPS[method]
    num_series = observations.shape[0]
    size = sharding.padded_size(num_series, mesh)
    padded = sharding.pad_batch((observations, inputs), size)

    def local(params, observations, inputs):
        return jax.vmap(lambda y, u: _run(step, params, y, u))(observations, inputs)

    result = sharding.shard_batch(local, mesh, (False, True, True), True)(params, *padded)
    return jax.tree.map(lambda v: v[:num_series], result)


def _check_batch(params, observations, inputs):
    """``check_inputs`` for B series: (params, observations (B, T, o), inputs (B, T, k)),
    tracer-aware like it; the arrays cast to the observations' dtype."""
    params = check_params("params", params)
    obs = as_float_field("observations", observations)
    o = params.emission_matrices.shape[1]
    if obs.ndim != 3 or obs.shape[2] != o or min(obs.shape[:2]) < 1:
        raise ValueError(
            f"observations: expected shape (B, T, {o}) (B >= 1 series of T >= 1 steps), got "
            f"{tuple(obs.shape)}; one series (T, {o}) goes to imm_filter, gpb1_filter or "
            "gpb2_filter"
        )
    num_series, num_steps = obs.shape[:2]
    check_transition_steps("params", params, num_steps)
    traced = validation.is_traced(obs)
    if not traced and np.any(np.isinf(obs)):
        raise ValueError(
            "observations: contain +-inf (use NaN for a missing coordinate or a missing row)"
        )
    k = params.emission_input_weights.shape[-1]
    if inputs is None:
        if k:
            raise ValueError(
                f"inputs: params take k = {k} input column(s) (dynamics_input_weights, "
                f"emission_input_weights), so inputs of shape ({num_series}, {num_steps}, {k}) "
                "are required"
            )
        u = np.zeros((num_series, num_steps, 0), params.emission_matrices.dtype)
    else:
        u = as_float_field("inputs", inputs)
        if tuple(u.shape) != (num_series, num_steps, k):
            raise ValueError(
                f"inputs: expected shape ({num_series}, {num_steps}, {k}) (B series, T steps, "
                f"k = {k} input columns of the params' input weights), got {tuple(u.shape)}"
            )
        if not validation.is_traced(u):
            validation.check_finite("inputs", u)
    dtype = jax.dtypes.canonicalize_dtype(obs.dtype)

    def cast(a):
        return a.astype(dtype) if validation.is_traced(a) else np.asarray(a, dtype)

    return SwitchingParams(*(cast(a) for a in params)), cast(obs), cast(u)


def filter_batch(
    params, observations, *, method: str = "imm", inputs=None, mesh=None
) -> FilterResult:
    """One filter on B series of one model, the series split over the devices of ``mesh``.

    Series b's result is ``imm_filter(params, observations[b], inputs=inputs[b])`` (or
    ``gpb1_filter`` / ``gpb2_filter`` for ``method``), to round-off; every result field gains
    a leading series axis. Each device runs the vmapped filter on its B / D series; the series
    are independent, so the filtering needs no collective and the only traffic is the inputs
    out and the results back (module docstring, "Batches of series"), except that with B not
    a multiple of D the results, cut back to B, are gathered whole onto every device. The same
    numbers on any mesh (1e-12 in float64).

    Checks as the single-series filters do, before any tracing (a ``ValueError`` naming
    ``params``, ``observations``, ``inputs``, ``method``; a ``TypeError`` or ``ValueError``
    naming ``mesh``); on tracers only the static ones. Results are not checked: call
    ``check_filter_result(result, params=params)``, which reads the leading axis as series
    and names the first series that overflowed.

    Args:
        params: ``SwitchingParams`` shared by every series; ``transition_matrix`` (M, M) or
            (T, M, M).
        observations: (B, T, o), B series of T steps; a NaN coordinate is missing.
        method: "imm" (default), "gpb1" or "gpb2".
        inputs: (B, T, k) u_{1:T} of every series, required when ``params`` has input
            weights.
        mesh: a one-axis ``jax.sharding.Mesh`` (``attnbayes.sharding.batch_mesh``) or None
            for every device. Static: a new mesh compiles a new program.

    Returns:
        ``FilterResult``: mode_probs (B, T, M), means (B, T, M, d), covs (B, T, M, d, d), mean
        (B, T, d), cov (B, T, d, d), log_likelihood (B,). Under several processes its arrays
        may be split over the processes (always when B is a multiple of the mesh size):
        ``attnbayes.sharding.gather`` before NumPy use (it returns whole arrays as they are).
    """
    if not isinstance(method, str) or method not in _STEPS:
        raise ValueError(f"method: expected one of {list(_STEPS)}, got {method!r}")
    mesh = sharding.check_mesh(mesh)
    params, obs, u = _check_batch(params, observations, inputs)
    return filter_batch_unchecked(params, obs, u, method=method, mesh=mesh)


# ----------------------------------------------------------------------------- exact


@jax.jit
def exact_filter_unchecked(params, observations, histories, inputs=None) -> FilterResult:
    """``exact_filter`` on checked arrays (``check_inputs``) and the (M^T, T) mode
    ``histories`` (``all_histories``, as a JAX array); ``inputs`` (T, k) or None."""
    inputs = no_inputs(params, observations, inputs)
    m = params.initial_probs.shape[0]
    first = histories[:, 0]
    dyn_off, emi_off = jax.vmap(step_offsets, in_axes=(None, 0))(params, inputs)  # (T, M, .)

    def update(means, covs, y, emi, modes):
        return jax.vmap(kalman_update, in_axes=(0, 0, 0, 0, 0))(
            means,
            covs,
            y - emi[modes],
            params.emission_matrices[modes],
            params.emission_covs[modes],
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
        params.initial_means[first], params.initial_covs[first], observations[0], emi_off[0], first
    )
    log_w = log_probabilities(params.initial_probs)[first] + ll

    def step(carry, inp):
        means, covs, log_w = carry
        y, dyn, emi, prev, modes, trans = inp
        means, covs = jax.vmap(kalman_predict)(
            means,
            covs,
            params.dynamics_matrices[modes],
            dyn[modes],
            params.dynamics_covs[modes],
        )
        means, covs, ll = update(means, covs, y, emi, modes)
        log_trans = log_probabilities(step_transition(params, trans))
        log_w = log_w + log_trans[prev, modes] + ll
        return (means, covs, log_w), moments(log_w, means, covs, modes)

    scanned = (
        observations[1:],
        dyn_off[1:],
        emi_off[1:],
        histories[:, :-1].T,
        histories[:, 1:].T,
        per_step_transitions(params, 1),
    )
    (_, _, log_w_final), rest = jax.lax.scan(step, (means, covs, log_w), scanned)
    start = moments(log_w, means, covs, first)
    log_probs, mode_means, mode_covs = (
        jnp.concatenate([a[None], b]) for a, b in zip(start, rest, strict=True)
    )
    # the duplicated prefixes carry equal weight, so log p(y_{1:T}) needs no correction at T
    return _result(log_probs, mode_means, mode_covs, logsumexp(log_w_final))


def all_histories(num_modes: int, num_steps: int) -> np.ndarray:
    """(M^T, T) every mode sequence, in lexicographic order."""
    return np.array(list(itertools.product(range(num_modes), repeat=num_steps)), dtype=np.int32)


def exact_filter(params, observations, *, max_histories: int = 2**16, inputs=None) -> FilterResult:
    """The exact filter p(x_t, s_t | y_{1:t}): a Kalman filter along each of the M^T mode
    histories, weighted by p(s_{1:t}, y_{1:t}) and collapsed per mode at each t.

    The filtered law of x_t given s_t = j is a mixture of M^(t-1) Gaussians; ``means`` and
    ``covs`` are its exact first two moments. Refuses (ValueError) when M^T > ``max_histories``.

    A NaN or inf in the result means the recursion overflowed: explosive dynamics (a dynamics
    matrix with spectral radius > 1 along a direction the observations do not pin down, or over
    a long run of missing rows) or inputs extreme for the dtype. The filter does not check (under
    ``jit``/``vmap`` no check could raise); call ``check_filter_result(result, params=params)``
    (``attnbayes.inference.switching.filters``) on the concrete result: it raises
    ``FloatingPointError`` naming the first non-finite step and field.

    Traceable: ``jit``, ``vmap`` and ``grad`` over ``params``, ``observations`` and ``inputs``
    (M and T are shapes, so the histories are static). ``inputs`` (T, k) u_{1:T} are
    required when ``params`` has input weights; a NaN coordinate of y is missing. Under a
    transformation only the static checks (shapes, dtypes) run, so invalid parameter values
    give NaN or wrong numbers instead of a ``ValueError``: call
    ``attnbayes.models.switching.check_params("params", params)`` on concrete values first.
    """
    params, obs, inputs = check_inputs(params, observations, inputs=inputs)
    m, t = params.initial_probs.shape[0], obs.shape[0]
    max_histories = validation.check_positive_int("max_histories", max_histories)
    if m**t > max_histories:
        raise ValueError(
            f"observations: the exact filter needs M^T = {m}^{t} histories, more than "
            f"max_histories = {max_histories}; use gpb2_filter or imm_filter for long series"
        )
    return exact_filter_unchecked(params, obs, jnp.asarray(all_histories(m, t)), inputs)


# ----------------------------------------------------------------------------- result checks

# trailing axes of each per-step field after its (..., T) leading axes
_STEP_FIELDS = {"mode_probs": 1, "means": 2, "covs": 3, "mean": 1, "cov": 2}
_RADIUS_TOL = 1e-6  # a rotation's |eigenvalues| = 1 + round-off is not explosive


def _unobserved_growth(dynamics, emission, lam) -> bool:
    """Popov-Belevitch-Hautus: eigenvalue ``lam`` of F is invisible to H when
    rank [lam I - F; H] < d (some eigenvector v of lam has H v = 0)."""
    d = dynamics.shape[0]
    stacked = np.concatenate([lam * np.eye(d) - dynamics, emission.astype(complex)])
    sv = np.linalg.svd(stacked, compute_uv=False)
    scale = max(1.0, float(np.max(np.abs(dynamics))), float(np.max(np.abs(emission), initial=0)))
    return bool(sv[-1] <= 1e-9 * scale * max(1.0, abs(lam)))


def _cause(params, dtype) -> str:
    """What to check after an overflow: the explosive modes of ``params`` (when given)."""
    fields = "params.dynamics_matrices, params.dynamics_covs, params.emission_covs"
    check = f"check {fields} and the scale of the observations and inputs"
    if params is None:
        return (
            "the dynamics may be explosive (a dynamics matrix with spectral radius > 1) or an "
            f"input extreme for {dtype}; {check} (pass params= to see the spectral radii)"
        )
    dyn = np.asarray(params.dynamics_matrices, np.float64)
    emi = np.asarray(params.emission_matrices, np.float64)
    groups: dict[str, list[int]] = {}  # explanation -> the modes it applies to
    for j in range(dyn.shape[0]):
        lam = np.linalg.eigvals(dyn[j])
        radius = float(np.max(np.abs(lam)))
        if radius <= 1.0 + _RADIUS_TOL:
            continue
        growing = lam[np.abs(lam) > 1.0 + _RADIUS_TOL]
        hidden = [abs(v) for v in growing if _unobserved_growth(dyn[j], emi[j], v)]
        if hidden:
            where = (
                "along a direction the emission matrix does not observe, whose variance grows "
                f"like {max(hidden):.4g}^(2t)"
            )
        else:
            where = (
                "the emission matrix observes it, but a run of missing rows lets the variance "
                f"grow like {radius:.4g}^(2t)"
            )
        groups.setdefault(f"{radius:.4g} > 1 ({where})", []).append(j)
    parts = []
    for text, modes in groups.items():
        which = "dynamics_matrices" + "".join(
            f"[{j}]" if k == 0 else f", [{j}]" for k, j in enumerate(modes)
        )
        noun = "radius of" if len(modes) == 1 else "radii of"
        verb = "is" if len(modes) == 1 else "are"
        parts.append(f"the spectral {noun} {which} {verb} {text}")
    if not parts:
        return (
            "no dynamics matrix has spectral radius > 1, so an input extreme for "
            f"{dtype} is the likelier cause: check the scale of the observations, the inputs, "
            "params.initial_means, params.initial_covs, params.dynamics_covs and "
            "params.emission_covs"
        )
    return f"the dynamics may be explosive: {'; '.join(parts)}; {check}"


def _series_label(index: int, batch: tuple, affected: int) -> str:
    if not batch:
        return ""
    where = tuple(int(i) for i in np.unravel_index(index, batch))
    label = where[0] if len(where) == 1 else where
    return f" of series {label} ({affected} of {int(np.prod(batch))} series affected)"


def _readable(value):
    """An array split over processes (``filter_batch`` under ``jax.distributed``) gathered to
    this one; anything else as it is."""
    if isinstance(value, jax.Array) and not value.is_fully_addressable:
        return sharding.gather(value)
    return value


def check_filter_result(result, *, name: str | None = None, params=None):
    """Raise ``FloatingPointError`` if a filter's or smoother's result holds NaN or inf.

    The filters, smoothers and the RBPF run compiled and do not check what they return (under
    ``jit`` or ``vmap`` no check could raise: the values are not known while tracing). A
    non-finite value means the recursion overflowed: explosive dynamics (a dynamics matrix
    with spectral radius > 1 along a direction the observations do not pin down, or over a
    long run of missing rows; an explosive direction that is observed at every step stays
    finite) or inputs extreme for the dtype. Call this on a concrete result before using it.

    The message is one line: the first step (1-based) at which any per-step field
    (mode_probs, means, covs, mean, cov) is non-finite, those fields, how many steps are
    affected, and what to check; with ``params``, the spectral radius of each explosive
    dynamics matrix and whether its growing direction is observed. If only log_likelihood is
    non-finite, it says so. A smoother's backward pass carries a non-finite value to every
    earlier step, so for a ``SmootherResult`` the first bad step is usually 1: run this on the
    filter of the same series to see where the overflow began. Leading batch axes (a vmapped
    result, or ``filter_batch``'s) are allowed: the earliest bad step over the batch is
    reported, with its series; arrays split over processes are gathered first (every process
    must call it then).

    Args:
        result: a ``FilterResult`` (every filter and ``rbpf``) or ``SmootherResult``
            (``kalman_smoother``, ``exact_smoother``, ``kim_smoother``,
            ``fixed_modes_smoother``), with concrete arrays.
        name: the message prefix; default "filter" or "smoother" after the result's type.
        params: optional ``SwitchingParams`` the result was computed with, to name the
            explosive modes in the message.

    Returns:
        ``result``, unchanged, when every value is finite.

    Raises:
        FloatingPointError: some value is NaN or inf, e.g. ``filter: non-finite values (NaN or
            inf) from step 155 of 400 (246 steps affected), first in means, covs, mean, cov;
            the dynamics may be explosive: the spectral radius of dynamics_matrices[0] is
            10 > 1 (...); check params.dynamics_matrices, ...``.
        TypeError: ``result`` is not a FilterResult / SmootherResult or holds traced arrays
            (call it outside ``jit``), or ``name`` is not a string.
        ValueError: the fields' shapes do not fit together, or ``params`` is invalid.
    """
    if not isinstance(result, FilterResult | SmootherResult):
        raise TypeError(
            f"result: expected a FilterResult or SmootherResult, got {type(result).__name__}"
        )
    smoother = isinstance(result, SmootherResult)
    if name is None:
        name = "smoother" if smoother else "filter"
    if not isinstance(name, str):
        raise TypeError(f"name: expected a string, got {type(name).__name__}")
    if any(validation.is_traced(a) for a in result):
        raise TypeError(
            "result: holds traced arrays; check_filter_result needs concrete values, so call "
            "it outside jit/vmap on what they return"
        )
    if params is not None:
        params = check_params("params", params)
    arrays = {
        f: np.asarray(validation.as_float_array(f"result.{f}", _readable(v)))
        for f, v in zip(result._fields, result, strict=True)
    }
    log_lik = arrays["log_likelihood"]
    batch = log_lik.shape
    nb = len(batch)
    probs = arrays["mode_probs"]
    if probs.ndim != nb + 2 or probs.shape[:nb] != batch:
        raise ValueError(
            f"result.mode_probs: expected shape {batch} + (T, M) (the batch axes of "
            f"log_likelihood), got {probs.shape}"
        )
    num_steps = probs.shape[nb]
    lead = (*batch, num_steps)
    size = int(np.prod(batch))
    bad = np.zeros((size, num_steps), bool)
    bad_fields = {}
    for field, trailing in _STEP_FIELDS.items():
        arr = arrays[field]
        if arr.ndim != nb + 1 + trailing or arr.shape[: nb + 1] != lead:
            raise ValueError(
                f"result.{field}: expected {trailing} axes after the leading shape {lead}, "
                f"got shape {arr.shape}"
            )
        flat = arr.reshape(size, num_steps, -1) if arr.size else np.zeros((size, num_steps, 0))
        bad_fields[field] = ~np.all(np.isfinite(flat), axis=-1)
        bad |= bad_fields[field]
    if params is not None:
        m, d = params.initial_means.shape
        if (probs.shape[-1], arrays["mean"].shape[-1]) != (m, d):
            raise ValueError(
                f"params: M = {m} modes and d = {d} do not match the result's "
                f"M = {probs.shape[-1]}, d = {arrays['mean'].shape[-1]}"
            )
    dtype = np.result_type(*(a.dtype for a in arrays.values())).name
    backward = (
        "; a smoother carries a non-finite value back to every earlier step: run "
        "check_filter_result on the filter of the same series to find where it began"
        if smoother
        else ""
    )
    steps = np.flatnonzero(bad.any(axis=0))
    if steps.size:
        t = int(steps[0])
        series = int(np.flatnonzero(bad[:, t])[0])
        fields = [f for f, b in bad_fields.items() if b[series, t]]
        where = _series_label(series, batch, int(bad.any(axis=1).sum()))
        raise FloatingPointError(
            f"{name}: non-finite values (NaN or inf) from step {t + 1} of {num_steps} "
            f"({steps.size} step(s) affected){where}, first in {', '.join(fields)}; "
            f"{_cause(params, dtype)}{backward}"
        )
    ll_bad = ~np.isfinite(log_lik.reshape(size))
    if ll_bad.any():
        series = int(np.flatnonzero(ll_bad)[0])
        value = log_lik.reshape(size)[series]
        where = _series_label(series, batch, int(ll_bad.sum()))
        raise FloatingPointError(
            f"{name}: log_likelihood is {value}{where} although every step is finite (a "
            "log-density overflowed: an observation so far from its prediction that the "
            "squared standardised residual leaves the dtype's range); "
            f"{_cause(params, dtype)}"
        )
    return result


# ----------------------------------------------------------------------------- attention


@jax.jit
def attention_as_imm_step_unchecked(hidden, w_query, w_key, w_value):
    """``attention_as_imm_step`` on checked arrays of one dtype."""
    m, d = hidden.shape
    d_v = w_value.shape[1]
    # the note's eq. (2): A_ij = exp<H_i Wq, H_j Wk> / sum_i' exp<H_i' Wq, H_j Wk>, no 1/sqrt(d)
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
    """The attention sublayer as one IMM mixing-and-collapse step ("Attention as GPB2/IMM
    message passing", section 4).

    The problem: M modes, one per token, with uniform mode probabilities 1/M and the state of
    mode i known exactly, x | s = i = H_i (zero covariance); the kernel Pi_ij = softmax over i
    of <H_i Wq, H_j Wk> (the note's eqs. (2) and (12): normalised over the previous mode i, so each
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
    hidden = validation.as_float_array("hidden", hidden)
    if hidden.ndim != 2 or hidden.shape[0] < 1:
        raise ValueError(f"hidden: expected shape (M, d), got {tuple(hidden.shape)}")
    d = hidden.shape[1]
    mats = {}
    for name, value in (("w_query", w_query), ("w_key", w_key), ("w_value", w_value)):
        arr = validation.as_float_array(name, value)
        if arr.ndim != 2 or arr.shape[0] != d:
            raise ValueError(f"{name}: expected shape ({d}, k), got {tuple(arr.shape)}")
        mats[name] = arr
    if mats["w_query"].shape[1] != mats["w_key"].shape[1]:
        raise ValueError(
            f"w_key: {mats['w_key'].shape[1]} columns do not match the "
            f"{mats['w_query'].shape[1]} of w_query"
        )
    for name, arr in (("hidden", hidden), *mats.items()):
        if not validation.is_traced(arr):
            validation.check_finite(name, arr)
    dtype = jnp.result_type(hidden, *mats.values())
    return attention_as_imm_step_unchecked(
        jnp.asarray(hidden, dtype), *(jnp.asarray(a, dtype) for a in mats.values())
    )


__all__ = [
    "FilterResult",
    "SmootherResult",
    "all_histories",
    "attention_as_imm_step",
    "attention_as_imm_step_unchecked",
    "check_filter_result",
    "collapse",
    "exact_filter",
    "exact_filter_unchecked",
    "filter_batch",
    "filter_batch_unchecked",
    "gpb1_filter",
    "gpb1_filter_unchecked",
    "gpb2_filter",
    "gpb2_filter_unchecked",
    "imm_filter",
    "imm_filter_unchecked",
    "imm_mixing",
    "kalman_filter",
    "kalman_predict",
    "kalman_update",
    "one_step_log_predictive",
]
