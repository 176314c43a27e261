"""The static structure of a parametrised switching model and its parameters: the
``SwitchingStructure`` (hashable), the ``SwitchingSpec`` (theta, supports, names, data), and
``build_params``, theta to the ``SwitchingParams`` of the switching state-space model (pure JAX),
with the regime-tuple chain of MS-AR(p) (``tuple_transition_matrix``, ``tuple_initial_probs``),
time-varying transition probabilities (``tvtp_transition_matrices``) and the ergodic law. The
conventions (statsmodels' next to ours) are in the package docstring,
``attnbayes.models.markov_switching``.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..switching import SwitchingParams

KINDS = ("regression", "ar", "var", "state_space")
TRENDS = ("c", "n")


@dataclasses.dataclass(frozen=True)
class SwitchingStructure:
    """The static shape of a parametrised switching model (hashable: a static argument of
    the compiled likelihoods).

    Attributes:
        kind: "regression", "ar", "var" or "state_space".
        num_regimes: M, the number of regimes (of the Markov chain the user sees).
        order: p, the autoregressive order ("ar", "var"; 0 otherwise).
        num_inputs: k, the input columns (regressors for "regression", lags for "ar", o p lags
            for "var").
        switching_coefficients: the regression / AR coefficients differ by regime: True, False,
            or one flag per input column (statsmodels' ``switching_exog`` / ``switching_ar``
            lists; ``coefficient_mask``).
        switching_variance: the noise variance (covariance for "var") differs by regime.
        num_tvtp: k_tvtp, the covariates of time-varying transition probabilities (0: a
            constant transition matrix); they are the last k_tvtp columns of the inputs.
        trend: "c", a switching intercept (regression, VAR) or mean (MS-AR); "n", none
            (statsmodels' ``trend="n"``).
        num_series: o, the observed series ("var"; 1 otherwise).
    """

    kind: str
    num_regimes: int
    order: int = 0
    num_inputs: int = 0
    switching_coefficients: bool | tuple = True
    switching_variance: bool = True
    num_tvtp: int = 0
    trend: str = "c"
    num_series: int = 1

    @property
    def num_modes(self) -> int:
        """The filter's modes: M^(p+1) for MS-AR (the regime tuples), M otherwise."""
        return self.num_regimes ** (self.order + 1) if self.kind == "ar" else self.num_regimes

    @property
    def input_width(self) -> int:
        """The columns of the inputs: the regressors or lags (``num_inputs``), then the TVTP
        covariates: z_t for a regression and an MS-VAR, z_{t-p}, ..., z_t for MS-AR(p)
        (module docstring)."""
        lags = self.order if self.kind == "ar" else 0
        return self.num_inputs + (lags + 1) * self.num_tvtp

    @property
    def coefficient_mask(self) -> tuple:
        """One flag per coefficient column (regressor or lag): whether it switches."""
        flags = self.switching_coefficients
        width = self.num_inputs // self.num_series if self.kind == "var" else self.num_inputs
        return (flags,) * width if isinstance(flags, bool) else tuple(flags)


class SwitchingSpec(NamedTuple):
    """A switching model parametrised by named parameters theta, with its data.

    Attributes:
        structure: ``SwitchingStructure`` (static).
        theta: dict name -> array, every parameter's value (the start of a fit, or the truth).
        support: dict name -> NumPyro constraint of that parameter (simplex rows for
            "transition_matrix", ``positive`` for variances and scales, ``ordered_vector`` for
            regime means/intercepts, which fixes the labels, ``real`` otherwise, e.g. the
            TVTP logits "transition_coefficients").
        free: the names estimated by default (the identified set); the others stay fixed.
        observations: (T, o) the series the filters see (MS-AR: y_{p+1:T}).
        inputs: (T, k) the inputs u_t (regressors, or lags for MS-AR; with TVTP then the
            covariates, ``SwitchingStructure.input_width`` columns).
        names: dict name -> list of labels of its entries in C order, e.g.
            ["p[0->0]", "p[0->1]", ...] or ["p[0->0].tvtp0", ...] (statsmodels' naming where
            one exists).
    """

    structure: SwitchingStructure
    theta: dict
    support: dict
    free: tuple
    observations: np.ndarray
    inputs: np.ndarray
    names: dict

    @property
    def params(self) -> SwitchingParams:
        """The ``SwitchingParams`` at ``theta`` (on the spec's inputs)."""
        return build_params(self.structure, self.theta, self.inputs)


# ----------------------------------------------------------------------------- building


def ergodic_probabilities(transition_matrix):
    """The stationary distribution pi of a row-from transition matrix: pi P = pi, sum pi = 1.

    Solves (I - P^T) pi = 0 with its last equation replaced by 1' pi = 1 (unique for an
    irreducible chain); differentiable in P. Batched over leading axes.
    """
    p = jnp.asarray(transition_matrix)
    m = p.shape[-1]
    a = jnp.eye(m, dtype=p.dtype) - jnp.swapaxes(p, -1, -2)
    a = a.at[..., -1, :].set(1.0)
    b = jnp.zeros(p.shape[:-1], p.dtype).at[..., -1].set(1.0)
    return jnp.linalg.solve(a, b[..., None])[..., 0]


def regime_tuples(num_regimes: int, order: int) -> np.ndarray:
    """(M^(p+1), p+1) the tuples (s_t, s_{t-1}, ..., s_{t-p}) in C order."""
    return np.array(list(itertools.product(range(num_regimes), repeat=order + 1)), np.int32)


def _tuple_maps(num_regimes: int, order: int):
    """For each (from tuple a, to tuple b): whether b = (j0, a_0, ..., a_{p-1}); and the
    regime indices i0 = a_0, j0 = b_0 that carry P[i0, j0]."""
    tup = regime_tuples(num_regimes, order)
    allowed = np.all(tup[None, :, 1:] == tup[:, None, :-1], axis=-1)  # [a, b]
    return allowed, tup[:, 0]


def tuple_transition_matrix(transition_matrix, order: int):
    """The (M^(p+1), M^(p+1)) row-from transition matrix of the regime tuples; batched over
    leading axes (a (T, M, M) TVTP matrix gives (T, M^(p+1), M^(p+1)))."""
    p = jnp.asarray(transition_matrix)
    m = p.shape[-1]
    allowed, current = _tuple_maps(m, order)
    return jnp.where(allowed, p[..., current[:, None], current[None, :]], 0.0)


def tuple_initial_probs(transition_matrix, order: int):
    """The stationary law of p + 1 consecutive regimes, on the tuples (s_t, ..., s_{t-p}):
    pi[s_{t-p}] prod_{k=1..p} P[s_{t-k}, s_{t-k+1}].

    ``transition_matrix`` (M, M), or (p + 1, M, M) for TVTP: the matrices P_{t-p}, ..., P_t of
    the first tuple's rows (time order); then pi is the ergodic law of P_{t-p} and the move
    into s_{t-k+1} uses P_{t-k+1} (statsmodels' steady-state initialisation with
    ``exog_tvtp``, module docstring)."""
    p = jnp.asarray(transition_matrix)
    per_row = p.ndim == 3
    pi = ergodic_probabilities(p[0] if per_row else p)
    tup = regime_tuples(p.shape[-1], order)
    out = pi[tup[:, -1]]
    for k in range(order, 0, -1):
        step = p[order - k + 1] if per_row else p
        out = out * step[tup[:, k], tup[:, k - 1]]
    return out


def tvtp_transition_matrices(coefficients, covariates):
    """Time-varying transition probabilities (Filardo 1994; Diebold, Lee and Weinbach 1994):

        P[..., i, j] = exp(z' gamma_ij) / sum_l exp(z' gamma_il),   gamma_{i, M-1} = 0,

    a multinomial logit per from-regime i with the last regime the reference (statsmodels'
    ``exog_tvtp``). ``coefficients`` gamma (M, M - 1, k), ``covariates`` z (..., k); returns
    (..., M, M) row-from matrices. Pure JAX."""
    gamma = jnp.asarray(coefficients)
    z = jnp.asarray(covariates)
    eta = jnp.einsum("...k,ijk->...ij", z, gamma)  # (..., M, M - 1)
    eta = jnp.concatenate([eta, jnp.zeros((*eta.shape[:-1], 1), eta.dtype)], axis=-1)
    return jax.nn.softmax(eta, axis=-1)


def _tvtp_covariates(structure: SwitchingStructure, inputs):
    """(z_t (T, k_tvtp), the first row's covariates z_{t-p..t} (p + 1, k_tvtp)) from the
    inputs' last columns; ``ValueError`` naming ``inputs`` when they are missing."""
    if inputs is None:
        raise ValueError(
            "inputs: required with time-varying transition probabilities (their covariates "
            f"are the last {structure.num_tvtp} columns of the inputs)"
        )
    u = jnp.asarray(inputs)
    if u.ndim != 2 or u.shape[1] != structure.input_width:
        raise ValueError(
            f"inputs: expected shape (T, {structure.input_width}) (regressors or lags, then the "
            f"TVTP covariates), got {tuple(u.shape)}"
        )
    k = structure.num_tvtp
    lags = structure.order if structure.kind == "ar" else 0
    first = u[0, structure.num_inputs :].reshape(lags + 1, k)
    return u[:, -k:], first


def regime_transition_matrix(structure: SwitchingStructure, theta: dict, inputs=None):
    """The regime transition matrix of a Markov-switching regression or MS-AR model at theta:
    theta["transition_matrix"] (M, M), or with TVTP (``structure.num_tvtp`` > 0) the (T, M, M)
    matrices P_t = ``tvtp_transition_matrices``(gamma, z_t) on the inputs' covariates z_t
    (entry t the law of s_t given s_{t-1}). statsmodels' ``regime_transition_matrix`` is its
    transpose (column-from, time last). ``expected_durations`` of it is statsmodels'
    (T, M) ``expected_durations`` with TVTP. Pure JAX."""
    if structure.kind == "state_space":
        return jnp.asarray(theta["transition_matrix"])
    if structure.num_tvtp == 0:
        return jnp.asarray(theta["transition_matrix"])
    z, _ = _tvtp_covariates(structure, inputs)
    return tvtp_transition_matrices(theta["transition_coefficients"], z)


def regime_of_mode(structure: SwitchingStructure) -> np.ndarray:
    """(num_modes,) the current regime s_t of each filter mode (the first tuple entry for
    MS-AR; the identity otherwise)."""
    if structure.kind == "ar":
        return regime_tuples(structure.num_regimes, structure.order)[:, 0]
    return np.arange(structure.num_regimes, dtype=np.int32)


def regime_probabilities(structure: SwitchingStructure, mode_probs):
    """Sum mode probabilities (..., num_modes) over the modes of each regime: (..., M)."""
    onehot = jax.nn.one_hot(regime_of_mode(structure), structure.num_regimes)
    return jnp.asarray(mode_probs) @ onehot.astype(jnp.asarray(mode_probs).dtype)


def _dummy_state(m: int, dtype) -> dict:
    """The fields of a one-dimensional state that is exactly 0 at every step."""
    zeros = jnp.zeros((m, 1, 1), dtype)
    return {
        "initial_means": jnp.zeros((m, 1), dtype),
        "initial_covs": zeros,
        "dynamics_matrices": zeros,
        "dynamics_biases": jnp.zeros((m, 1), dtype),
        "dynamics_covs": zeros,
    }


def _per_regime(value, m: int, switching: bool):
    value = jnp.asarray(value)
    return value if switching else jnp.broadcast_to(value, (m, *value.shape))


def coefficient_matrix(structure: SwitchingStructure, theta: dict, name: str):
    """The (M, k) coefficients of each regime from theta (``name`` "coefficients" or
    "ar_coefficients"): theta[name] is (M, k) when every column switches, (k,) when none does,
    and otherwise (M, k_s), the switching columns in order, with the others in
    theta["common_" + name] (k - k_s,)."""
    m = structure.num_regimes
    mask = np.asarray(structure.coefficient_mask, bool)
    value = jnp.asarray(theta[name])
    if mask.all():
        return value
    if not mask.any():
        return jnp.broadcast_to(value, (m, *value.shape))
    common = jnp.asarray(theta["common_" + name])
    out = jnp.zeros((m, mask.size), jnp.result_type(value, common))
    return out.at[:, np.flatnonzero(mask)].set(value).at[:, np.flatnonzero(~mask)].set(common)


def build_params(structure: SwitchingStructure, theta: dict, inputs=None) -> SwitchingParams:
    """The ``SwitchingParams`` of a parametrised model at theta (pure JAX: jit-, vmap- and
    grad-able in theta and the inputs).

    "regression": d_j = intercepts[j] (0 with trend "n"), D_j = the regime's coefficients
    (``coefficient_matrix``), R_j = variances[j] (or the common one), pi0 the ergodic
    distribution of P.
    "ar": modes are the regime tuples (``tuple_transition_matrix``, ``tuple_initial_probs``),
    d = means[s_t] - sum_k phi_k(s_t) means[s_{t-k}] (0 with trend "n"), D = phi(s_t)', R =
    variance of s_t (or common).
    "var": d_j = intercepts[j] (o,), D_j = ar_coefficients[j] (o, o p), R_j = covariances[j].
    "state_space": the given fields with Q_j = dynamics_cov_scale[j] dynamics_covs[j] and
    R_j = emission_cov_scale[j] emission_covs[j].

    With TVTP (``structure.num_tvtp`` > 0) ``inputs`` (T, ``structure.input_width``) are
    required: the transition matrix is (T, M, M) (MS-AR: (T, M^(p+1), M^(p+1)), the tuple
    chain of each step), P_t = ``tvtp_transition_matrices``(gamma, z_t), and pi0 is the ergodic
    law of P_0 (MS-AR: the first tuple's law from the first row's z_{t-p..t},
    ``tuple_initial_probs``), as statsmodels initialises it; the emissions give the covariate
    columns zero weight.
    """
    kind = structure.kind
    if kind == "state_space":
        fields = {f: theta[f] for f in SwitchingParams._fields}
        fields["dynamics_covs"] = (
            theta["dynamics_cov_scale"][:, None, None] * theta["dynamics_covs"]
        )
        fields["emission_covs"] = (
            theta["emission_cov_scale"][:, None, None] * theta["emission_covs"]
        )
        return SwitchingParams(**fields)
    m, p, k = structure.num_regimes, structure.order, structure.num_inputs
    if structure.num_tvtp:
        gamma = jnp.asarray(theta["transition_coefficients"])
        z, first = _tvtp_covariates(structure, inputs)
        trans = tvtp_transition_matrices(gamma, z)
        first_rows = tvtp_transition_matrices(gamma, first)  # (p + 1, M, M): P_{t-p..t}
    else:
        trans = jnp.asarray(theta["transition_matrix"])
        first_rows = trans
    dtype = trans.dtype
    width = structure.input_width
    trend = structure.trend == "c"
    ergodic = ergodic_probabilities(first_rows[0] if structure.num_tvtp else trans)
    if kind == "var":
        o = structure.num_series
        covs = _per_regime(theta["covariances"], m, structure.switching_variance)
        weights = _per_regime(theta["ar_coefficients"], m, structure.switching_coefficients)
        fields = {
            "initial_probs": ergodic,
            "transition_matrix": trans,
            "emission_biases": jnp.asarray(theta["intercepts"]),
            "emission_input_weights": _padded_weights(weights.reshape(m, o, k), width),
            "emission_covs": covs,
        } | _dummy_state(m, dtype)
        fields["emission_matrices"] = jnp.zeros((m, o, 1), dtype)
        fields["dynamics_input_weights"] = jnp.zeros((m, 1, width), dtype)
        return SwitchingParams(**fields)
    variances = _per_regime(theta["variances"], m, structure.switching_variance)
    if kind == "regression":
        coefs = coefficient_matrix(structure, theta, "coefficients")
        modes = m
        fields = {
            "initial_probs": ergodic,
            "transition_matrix": trans,
            "emission_biases": (
                jnp.asarray(theta["intercepts"])[:, None] if trend else jnp.zeros((m, 1), dtype)
            ),
            "emission_input_weights": _padded_weights(coefs.reshape(m, 1, k), width),
        }
    else:  # "ar"
        tup = regime_tuples(m, p)
        modes = tup.shape[0]
        phi = coefficient_matrix(structure, theta, "ar_coefficients")
        phi_mode = phi[tup[:, 0]]  # (modes, p): the current regime's coefficients
        if trend:
            means = jnp.asarray(theta["means"])
            biases = means[tup[:, 0]] - jnp.sum(phi_mode * means[tup[:, 1:]], axis=-1)
        else:
            biases = jnp.zeros(modes, dtype)
        fields = {
            "initial_probs": tuple_initial_probs(first_rows, p),
            "transition_matrix": tuple_transition_matrix(trans, p),
            "emission_biases": biases[:, None],
            "emission_input_weights": _padded_weights(phi_mode.reshape(modes, 1, p), width),
        }
    var_of_mode = variances if kind == "regression" else variances[regime_tuples(m, p)[:, 0]]
    fields["emission_covs"] = var_of_mode.reshape(modes, 1, 1)
    fields |= _dummy_state(modes, dtype)
    fields["emission_matrices"] = jnp.zeros((modes, 1, 1), dtype)
    fields["dynamics_input_weights"] = jnp.zeros((modes, 1, width), dtype)
    return SwitchingParams(**fields)


def _padded_weights(weights, width: int):
    """Input weights (modes, 1, k) padded with zero columns to the inputs' width (the TVTP
    covariates do not enter the emissions)."""
    extra = width - weights.shape[-1]
    if extra == 0:
        return weights
    return jnp.concatenate([weights, jnp.zeros((*weights.shape[:-1], extra), weights.dtype)], -1)


__all__ = [
    "KINDS",
    "TRENDS",
    "SwitchingSpec",
    "SwitchingStructure",
    "build_params",
    "coefficient_matrix",
    "ergodic_probabilities",
    "regime_of_mode",
    "regime_probabilities",
    "regime_transition_matrix",
    "regime_tuples",
    "tuple_initial_probs",
    "tuple_transition_matrix",
    "tvtp_transition_matrices",
]
