"""The likelihood log p(y_{1:T} | theta) of a parametrised switching model, states and modes
integrated out by a filter.

``likelihood`` names the filter (``LIKELIHOODS``): "exact" (all M^T mode histories, short
series; Hamilton's (1989) filter for the econometric models of
``attnbayes.models.markov_switching``, whose state is a constant), "gpb2", "imm", "gpb1" (the
collapsed approximations; exact where the collapse is, e.g. those econometric models), or
"kalman" (M = 1). It is a pure JAX function of theta, so it is differentiated and compiled once
per shape.

- ``switching_log_likelihood``: that function, checked (jit, vmap, grad);
  ``switching_log_likelihood_unchecked`` its kernel on checked arrays.
- ``filter_unchecked``: the named filter on checked arrays; ``hamilton_filter``: Hamilton's
  filter on the modes alone; ``mode_filter``: (log p(y), filtered mode probabilities) by the
  named likelihood, Hamilton's for "exact" on a constant-state model.
- ``log_emissions``: log N(y_t; d_j + D_j u_t, R_j) per step and mode (Hamilton's filter and
  the EM's expected complete-data log-likelihood);
- ``check_likelihood``: the name, refused where it does not apply.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp

from ....models.markov_switching import (
    SwitchingSpec,
    SwitchingStructure,
    build_params,
    regime_transition_matrix,
)
from ....models.switching import (
    SwitchingParams,
    masked_gaussian_logpdf,
    per_step_transitions,
    step_offsets,
)
from ..filters import (
    all_histories,
    exact_filter_unchecked,
    gpb1_filter_unchecked,
    gpb2_filter_unchecked,
    imm_filter_unchecked,
)
from ..kalman import kalman_filter_unchecked, log_probabilities
from .parameters import check_data, check_spec, check_theta

LIKELIHOODS = ("exact", "gpb2", "imm", "gpb1", "kalman")


def filter_unchecked(params: SwitchingParams, observations, inputs, likelihood: str):
    """The named filter on checked arrays (``likelihood`` static)."""
    if likelihood == "imm":
        return imm_filter_unchecked(params, observations, inputs)
    if likelihood == "gpb2":
        return gpb2_filter_unchecked(params, observations, inputs)
    if likelihood == "gpb1":
        return gpb1_filter_unchecked(params, observations, inputs)
    if likelihood == "kalman":
        return kalman_filter_unchecked(params, observations, inputs)
    m, t = params.initial_probs.shape[0], observations.shape[0]
    return exact_filter_unchecked(params, observations, jnp.asarray(all_histories(m, t)), inputs)


def log_emissions(params: SwitchingParams, observations, inputs):
    """e_t(j) = log N(y_t; d_j + D_j u_t, R_j) over the observed coordinates, (T, M). For a
    univariate series (o = 1, every econometric model) in closed form,
    -(log 2 pi R_j + (y_t - d_j - D_j u_t)^2 / R_j) / 2 (0 where y_t is missing): the general
    masked Gaussian takes a Cholesky factor per mode and step, most of the filter's cost."""
    _, emi = jax.vmap(step_offsets, in_axes=(None, 0))(params, inputs)  # (T, M, o)
    observed = ~jnp.isnan(observations)
    obs = jnp.where(observed, observations, 0.0)
    if observations.shape[-1] == 1:
        var = params.emission_covs[:, 0, 0]
        resid = obs - emi[..., 0]
        logpdf = -0.5 * (jnp.log(2.0 * jnp.pi * var) + resid**2 / var)
        return jnp.where(observed, logpdf, 0.0)
    per_mode = jax.vmap(masked_gaussian_logpdf, in_axes=(0, None, 0))
    return jax.vmap(per_mode, in_axes=(0, 0, None))(
        obs[:, None] - emi, observed, params.emission_covs
    )


def _forward(predict, initial_probs, log_em, scanned):
    """Hamilton's forward recursion in log space, normalised at each step (Hamilton 1989; Kim
    and Nelson 1999, sec. 4.2): with a_t = log P(s_t | y_{1:t}),

        q_t = predict(a_{t-1}, P_t)   (log predicted probabilities; q_1 = log pi0),
        c_t = logsumexp_j (q_t(j) + e_t(j)),   a_t = q_t + e_t - c_t,   log p(y) = sum_t c_t.

    In log space no probability underflows: an observation thousands of sigmas out, which an
    impossible or unlikely regime fits far better, leaves the others right (in probability
    space a filtered probability below 1e-308 of the largest is lost, and with the structural
    zeros of the MS-AR regime tuples a later step can then give a finite, wrong value). A step
    with no possible mode gives -inf. Returns (log p(y), filtered mode probabilities (T, M))."""

    def update(log_pred, log_e):
        joint = log_pred + log_e
        top = jnp.max(joint)
        top = jax.lax.stop_gradient(jnp.where(jnp.isfinite(top), top, 0.0))
        log_c = jnp.log(jnp.sum(jnp.exp(joint - top))) + top
        return joint - jnp.where(jnp.isfinite(log_c), log_c, 0.0), log_c

    first, log_first = update(log_probabilities(initial_probs), log_em[0])

    def body(alpha, inp):
        log_e, trans = inp
        alpha, log_c = update(predict(alpha, trans), log_e)
        return alpha, (alpha, log_c)

    _, (rest, log_c) = jax.lax.scan(body, first, (log_em[1:], scanned))
    alphas = jnp.concatenate([first[None], rest])
    return log_first + jnp.sum(log_c), jnp.exp(alphas)


def hamilton_filter(params: SwitchingParams, observations, inputs):
    """Hamilton's (1989) filter of a model whose state is constant (H_j = 0: the econometric
    models), on the modes alone:

        e_t(j) = log N(y_t; d_j + D_j u_t, R_j)   (over the observed coordinates),
        P(s_t = j | y_{1:t}) ~ sum_i P(s_{t-1} = i | y_{1:t-1}) Pi_t[i, j] exp e_t(j),

    in log space, normalised at each step (``_forward``); log p(y) is the sum of the log
    normalisers. A time-varying (T, M, M) transition matrix (TVTP) uses its entry t for
    the step into t (entry 0 unused; ``per_step_transitions``); a constant one stays out of
    the scan. The same numbers as every collapsed filter on such a model (their collapse is
    exact), from a much smaller program. Checked arrays (``check_inputs``); pure JAX.

    Returns:
        (log p(y_{1:T}), filtered mode probabilities (T, M)).
    """
    log_em = log_emissions(params, observations, inputs)
    constant = log_probabilities(params.transition_matrix)

    def predict(alpha, trans):
        log_p = constant if trans is None else log_probabilities(trans)
        return logsumexp(alpha[:, None] + log_p, axis=0)

    return _forward(predict, params.initial_probs, log_em, per_step_transitions(params, 1))


def _tuple_hamilton_filter(structure, params, obs, u, regime_transition=None):
    """``hamilton_filter`` on the regime tuples (s_t, ..., s_{t-p}) of an MS-AR(p) model
    (``build_params``), by the tuples' structure: the tuple (a_0, ..., a_p) moves only to
    (j, a_0, ..., a_{p-1}), with probability P[a_0, j], so the prediction is

        q_t(j, a_0, ..., a_{p-1}) = log P_t[a_0, j] + logsumexp_{a_p} a_{t-1}(a_0, ..., a_p),

    M^(p+2) terms per step instead of the dense M^(2p+2) (16 times fewer for M = 2, p = 4),
    the same numbers up to rounding. ``regime_transition``: the regime matrix P (M, M) or P_t
    (T, M, M) (``regime_transition_matrix``), so that the (T, M^(p+1), M^(p+1)) tuple matrices
    of TVTP need not be built (under jit they are then dropped: their gather and its gradient
    cost more than the filter); None reads P (or P_t) off the tuple matrix at the moves
    (i, 0, ..., 0) -> (j, i, 0, ..., 0)."""
    m, p = structure.num_regimes, structure.order
    if regime_transition is None:
        rows = np.arange(m)[:, None] * m**p  # the tuples (i, 0, ..., 0)
        cols = np.arange(m)[None, :] * m**p + np.arange(m)[:, None] * m ** (p - 1)
        regime_transition = params.transition_matrix[..., rows, cols]  # [.., i, j]
    regime_transition = jnp.asarray(regime_transition)
    per_step = regime_transition[1:] if regime_transition.ndim == 3 else None
    log_em = log_emissions(params, obs, u)

    constant = log_probabilities(regime_transition)

    def predict(alpha, trans):
        log_p = constant if trans is None else log_probabilities(trans)  # [a_0, j]
        beta = logsumexp(alpha.reshape(m**p, m), axis=1).reshape(m, m ** (p - 1))
        return (log_p.T[:, :, None] + beta[None]).reshape(-1)

    return _forward(predict, params.initial_probs, log_em, per_step)


def mode_filter(structure, likelihood, params, observations, inputs, regime_transition=None):
    """(log p(y), filtered mode probabilities) by the named likelihood; "exact" is Hamilton's
    filter for the constant-state models, for MS-AR on the tuples' structure
    (``_tuple_hamilton_filter``, which takes the regime matrices ``regime_transition`` when
    given, ``regime_transition_matrix``)."""
    if likelihood == "exact" and structure.kind == "ar" and structure.order > 0:
        return _tuple_hamilton_filter(structure, params, observations, inputs, regime_transition)
    if likelihood == "exact" and structure.kind != "state_space":
        return hamilton_filter(params, observations, inputs)
    res = filter_unchecked(params, observations, inputs, likelihood)
    return res.log_likelihood, res.mode_probs


def check_likelihood(likelihood, structure: SwitchingStructure, num_steps: int) -> str:
    """``likelihood`` if it names a filter that applies to ``structure`` over ``num_steps``
    ("kalman" needs M = 1; "exact" on a state-space model at most 2^16 histories), else a
    ``ValueError`` naming ``likelihood``."""
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


def switching_log_likelihood_unchecked(structure, likelihood, theta, observations, inputs):
    """``switching_log_likelihood`` on checked arrays: log p(y | theta) of the model of
    ``structure`` (static, as ``likelihood``) at the parameters ``theta`` (a dict); the inputs
    carry the TVTP covariates, if any (``build_params``)."""
    params = build_params(structure, theta, inputs)
    tvtp_ar = structure.kind == "ar" and structure.num_tvtp
    regimes = regime_transition_matrix(structure, theta, inputs) if tvtp_ar else None
    return mode_filter(structure, likelihood, params, observations, inputs, regimes)[0]


def switching_log_likelihood(
    spec: SwitchingSpec, theta=None, observations=None, *, inputs=None, likelihood: str = "imm"
) -> jax.Array:
    """log p(y_{1:T} | theta) of a parametrised switching model, by the named filter.

    Args:
        spec: ``SwitchingSpec`` (``markov_switching_regression``, ``markov_switching_ar``,
            ``switching_state_space``).
        theta: dict of parameters (default ``spec.theta``).
        observations, inputs: the data (default the spec's own); with TVTP the inputs end
            with the covariates (``SwitchingStructure.input_width`` columns) and are required
            with other observations.
        likelihood: "exact", "gpb2", "imm" (default), "gpb1" or "kalman".

    jit-, vmap- and grad-able in theta, observations and inputs (``spec`` and ``likelihood``
    are static).
    """
    spec = check_spec("spec", spec)
    theta = check_theta("theta", spec, theta)
    obs, u = check_data(spec, observations, inputs)
    likelihood = check_likelihood(likelihood, spec.structure, obs.shape[0])
    return _log_likelihood_jit(spec.structure, likelihood, theta, obs, u)


_log_likelihood_jit = jax.jit(switching_log_likelihood_unchecked, static_argnums=(0, 1))


__all__ = [
    "LIKELIHOODS",
    "check_likelihood",
    "filter_unchecked",
    "hamilton_filter",
    "log_emissions",
    "mode_filter",
    "switching_log_likelihood",
    "switching_log_likelihood_unchecked",
]
