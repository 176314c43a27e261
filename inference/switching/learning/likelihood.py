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
- ``check_likelihood``: the name, refused where it does not apply.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.scipy.special import logsumexp

from ....models.markov_switching import SwitchingSpec, SwitchingStructure, build_params
from ....models.switching import SwitchingParams, masked_gaussian_logpdf, step_offsets
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


def mode_filter(structure, likelihood, params, observations, inputs):
    """(log p(y), filtered mode probabilities) by the named likelihood; "exact" is Hamilton's
    filter for the constant-state models."""
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
    ``structure`` (static, as ``likelihood``) at the parameters ``theta`` (a dict)."""
    params = build_params(structure, theta)
    return mode_filter(structure, likelihood, params, observations, inputs)[0]


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
    "mode_filter",
    "switching_log_likelihood",
    "switching_log_likelihood_unchecked",
]
