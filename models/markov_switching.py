"""Parametrised switching models: Markov-switching regression, Hamilton's MS-AR(p), and a
generic ``SwitchingParams`` with a few free fields.

A ``SwitchingSpec`` maps a small dictionary of named parameters theta to the full
``SwitchingParams`` of the switching state-space model (``attnbayes.models.switching``), and
carries the data in the form the filters take (observations (T, o), inputs (T, k)). The
learning routines of ``attnbayes.inference.switching`` (maximum likelihood, EM, NUTS over
theta) work on theta: ``build_params(spec.structure, theta)`` is a pure JAX function, and
``spec.support[name]`` is the NumPyro constraint of each parameter (its bijection to the reals,
``numpyro.distributions.transforms.biject_to``, is the unconstrained parametrisation).

The econometric models have no continuous latent state; they are written with a
one-dimensional dummy state x_t = 0 (F = 0, Q = 0, P0 = 0, H = 0), so the observation is

    y_t | s_t = j ~ N(d_j + D_j u_t, R_j)

and every filter's collapse is exact: GPB1, GPB2 and IMM all compute Hamilton's (1989) filter.

- ``markov_switching_regression``: y_t = mu_{s_t} + x_t' beta_{s_t} + e_t,
  e_t ~ N(0, sigma^2_{s_t}) (statsmodels' ``MarkovRegression`` with switching exog and
  variance): d_j = mu_j, D_j = beta_j', R_j = sigma^2_j, inputs u_t = x_t.
- ``markov_switching_ar``: Hamilton's (1989) MS-AR(p) with switching mean,
  y_t - mu_{s_t} = sum_k phi_k (y_{t-k} - mu_{s_{t-k}}) + e_t, e_t ~ N(0, sigma^2). Its
  modes are the tuples (s_t, s_{t-1}, ..., s_{t-p}) (M^(p+1) of them, C order: s_t most
  significant, as statsmodels orders them internally), the tuple (i_0, ..., i_p) moves to
  (j_0, i_0, ..., i_{p-1}) with probability P[i_0, j_0], the inputs are the lags
  u_t = (y_{t-1}, ..., y_{t-p}), and d_tuple = mu_{s_t} - sum_k phi_k mu_{s_{t-k}}, D = phi'.
  The first p observations are conditioned on (the likelihood is that of y_{p+1:T}).

Conventions next to statsmodels' (0.14-0.15, ``statsmodels.tsa.regime_switching``):

- transition matrix: ours is row-from, P[i, j] = P(s_t = j | s_{t-1} = i); statsmodels'
  ``regime_transition[j, i]`` is column-from, and its parameters ``p[i->j]`` are our P[i, j].
- first regime: the regime chain starts in its stationary (ergodic) distribution pi, pi P = pi
  (statsmodels' default ``initialization='steady-state'``); for MS-AR the first tuple has the
  stationary law of p + 1 consecutive regimes, pi[s_{t-p}] prod_k P[s_{t-k}, s_{t-k+1}].
  statsmodels applies one transition to pi before the first regime (two for
  ``MarkovRegression``, which it runs as an order-1 filter internally); at the stationary pi
  that changes nothing, so the likelihoods agree.
- variances: statsmodels' ``sigma2`` are variances, as here.
- time-varying transition probabilities (TVTP; Filardo 1994, Diebold, Lee and Weinbach 1994),
  statsmodels' ``exog_tvtp``: covariates z_t (k_tvtp columns, one row per endog row) and
  coefficients gamma (theta["transition_coefficients"], (M, M - 1, k_tvtp), in place of
  "transition_matrix"):

      P_t[i, j] = exp(z_t' gamma_ij) / sum_l exp(z_t' gamma_il),   gamma_{i, M-1} = 0

  (the last regime is the reference, as in statsmodels). P_t moves s_{t-1} to s_t, so the
  per-step matrices are (T, M, M), entry t computed from row t (the suite's convention for a
  time-varying transition matrix, ``attnbayes.models.switching.SwitchingParams``). The first
  regime follows statsmodels' steady-state initialisation at the first row: the ergodic law
  of P_0. For MS-AR(p) statsmodels keeps every row of ``exog_tvtp`` (endog's length) although
  it conditions on the first p observations: row r gives the move into the regime of row r, and
  the first tuple (s_p, ..., s_0) (rows of endog) has the law
  pi(s_0) prod_{r=1..p} P_r[s_{r-1}, s_r], pi the ergodic law of P_0 (checked against its
  log-likelihood: changing the first row of ``exog_tvtp`` changes it). So the inputs of an MS-AR
  spec with TVTP carry, after the p lags of y, the covariates of rows t-p..t (z_{t-p}, ...,
  z_{t-1}, z_t; time order): the first row's lags give the first tuple's law, and z_t (the
  last k_tvtp columns, as in every spec) gives P_t. The covariates ride in the spec's inputs,
  as their LAST k_tvtp columns, so every compiled kernel keeps its (observations, inputs)
  signature and a forecast takes future covariates as future inputs; the emissions give them
  zero weight.
- switching variance in MS-AR(p >= 2): here sigma^2 follows s_t. statsmodels 0.15 broadcasts a
  switching variance over the tuple axis of s_{t-p+1} instead (its p = 1 and common-variance
  models agree with ours).
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from numpyro.distributions import constraints

from .. import validation
from ..constants import STATE_SPACE_FREE  # the default free set, shared with the command line
from .regime_laws import (
    InverseWishart,
    OrderedFirstColumn,
    OrderedIID,
    OrderedNormal,
    ordered_first_column,
)
from .switching import SwitchingParams, as_float_field, check_input_series, check_params

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


# ----------------------------------------------------------------------------- constructors


def _check_regimes(num_regimes) -> int:
    """M >= 1 (M = 1 is the model without switching, the baseline of a comparison)."""
    return validation.check_positive_int("num_regimes", num_regimes)


def _series(name: str, value) -> np.ndarray:
    arr = validation.as_float_array(name, value)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1 or arr.shape[0] < 3:
        raise ValueError(f"{name}: expected a series of shape (T,) with T >= 3, got {arr.shape}")
    validation.check_finite(name, arr)
    return arr


def _persistent_transition(m: int) -> np.ndarray:
    """A start value: stay with probability 0.9, leave evenly (1 for M = 1)."""
    if m == 1:
        return np.ones((1, 1))
    return np.full((m, m), 0.1 / (m - 1)) + np.eye(m) * (0.9 - 0.1 / (m - 1))


def _identified(theta: dict) -> tuple:
    """The free parameters by default: every non-empty one, but not a 1 x 1 transition."""
    return tuple(
        n
        for n, v in theta.items()
        if np.size(v) > 0 and not (n == "transition_matrix" and np.size(v) == 1)
    )


def _transition_names(m: int) -> list[str]:
    return [f"p[{i}->{j}]" for i in range(m) for j in range(m)]


def _check_exog_tvtp(value, num_rows: int) -> np.ndarray:
    """The TVTP covariates (T, k_tvtp) (a (T,) series is one column), one row per endog row,
    finite; else a ``ValueError`` naming ``exog_tvtp``."""
    z = validation.as_float_array("exog_tvtp", value)
    if z.ndim == 1:
        z = z[:, None]
    if z.ndim != 2 or z.shape[0] != num_rows or z.shape[1] < 1:
        raise ValueError(
            f"exog_tvtp: expected shape ({num_rows}, k_tvtp) with k_tvtp >= 1 (one row per "
            f"endog value, as statsmodels' exog_tvtp), got {z.shape}"
        )
    validation.check_finite("exog_tvtp", z)
    return np.asarray(z, dtype=float)


def _constant_column(z: np.ndarray) -> int | None:
    """The first column of z that is a nonzero constant (an intercept), or None."""
    for c in range(z.shape[1]):
        if z[0, c] != 0 and np.all(z[:, c] == z[0, c]):
            return c
    return None


def _tvtp_start(z: np.ndarray, m: int) -> np.ndarray:
    """Start coefficients (M, M - 1, k_tvtp): where z has a constant column c, its
    coefficients give the persistent start matrix (stay 0.9) at every step,
    gamma_ijc = log(P[i, j] / P[i, M-1]) / c, and the other coefficients are 0; without a
    constant column every coefficient is 0 (P_t uniform, statsmodels' start)."""
    gamma = np.zeros((m, m - 1, z.shape[1]))
    c = _constant_column(z)
    if c is not None and m > 1:
        persistent = _persistent_transition(m)
        gamma[:, :, c] = np.log(persistent[:, :-1] / persistent[:, -1:]) / z[0, c]
    return gamma


def _tvtp_names(m: int, k: int) -> list[str]:
    """statsmodels' names of the TVTP coefficients, in C order of (M, M - 1, k_tvtp)."""
    return [f"p[{i}->{j}].tvtp{c}" for i in range(m) for j in range(m - 1) for c in range(k)]


def _transition_part(z, m: int) -> tuple[dict, dict, dict]:
    """(theta, support, names) of the transition: a constant matrix (``z`` None) or the TVTP
    coefficients on the covariates ``z``."""
    if z is None:
        return (
            {"transition_matrix": _persistent_transition(m)},
            {"transition_matrix": constraints.simplex},
            {"transition_matrix": _transition_names(m)},
        )
    return (
        {"transition_coefficients": _tvtp_start(z, m)},
        {"transition_coefficients": constraints.real},
        {"transition_coefficients": _tvtp_names(m, z.shape[1])},
    )


def _ols(y, x):
    """OLS of y on x: (coefficients, residual variance, the coefficients' standard errors)."""
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    resid = y - x @ coef
    var = float(resid @ resid / max(len(y) - x.shape[1], 1))
    if x.shape[1] == 0:
        return coef, var, np.zeros(0)
    se = np.sqrt(var * np.diag(np.linalg.pinv(x.T @ x)))
    return coef, var, se


def _check_flag(name: str, value) -> bool:
    if not isinstance(value, bool | np.bool_):
        raise ValueError(f"{name}: expected True or False, got {value!r}")
    return bool(value)


def _check_trend(trend) -> str:
    if not isinstance(trend, str) or trend not in TRENDS:
        raise ValueError(
            f"trend: expected 'c' (a switching intercept) or 'n' (none), got {trend!r}"
        )
    return trend


def _switching_flags(name: str, value, width: int, what: str) -> bool | tuple:
    """True, False, or one flag per column (``width`` of them, each True or False); a
    sequence whose flags agree becomes that one flag."""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    flags = list(value) if isinstance(value, list | tuple | np.ndarray) else None
    if (
        flags is None
        or len(flags) != width
        or not all(isinstance(f, bool | np.bool_) for f in flags)
    ):
        raise ValueError(
            f"{name}: expected True, False or one True/False per {what} ({width}), got {value!r}"
        )
    flags = tuple(bool(f) for f in flags)
    return flags[0] if len(set(flags)) == 1 else flags


def _coefficient_part(name, coef, se, flags, m, labels, ordered):
    """(theta, support, names) of regression / AR coefficients ``coef`` (k,) under the
    switching ``flags``: "name" (M, k), (k,), or (M, k_s) with "common_name" (k - k_s,)
    (``coefficient_matrix``). ``ordered``: the regimes are labelled by the first switching
    column (support ``ordered_first_column``), whose start spreads over +-2 standard errors
    ``se`` of the OLS fit (at least 0.05)."""
    k = coef.shape[0]
    mask = np.array((flags,) * k if isinstance(flags, bool) else flags, bool)
    if mask.all() or not mask.any():
        switching = bool(mask.all()) or k == 0
        value = np.tile(coef, (m, 1)) if switching else coef.copy()
        theta = {name: value}
        names = {
            name: (
                [f"{labels[c]}[{j}]" for j in range(m) for c in range(k)]
                if switching
                else list(labels)
            )
        }
    else:
        on, off = np.flatnonzero(mask), np.flatnonzero(~mask)
        theta = {name: np.tile(coef[on], (m, 1)), "common_" + name: coef[off].copy()}
        names = {
            name: [f"{labels[c]}[{j}]" for j in range(m) for c in on],
            "common_" + name: [labels[c] for c in off],
        }
    support = {n: constraints.real for n in theta}
    if ordered:
        first = int(np.flatnonzero(mask)[0])
        theta[name] = theta[name].copy()
        theta[name][:, 0] += max(2.0 * float(se[first]), 0.05) * np.linspace(-1.0, 1.0, m)
        support[name] = ordered_first_column
    return theta, support, names


def _variance_part(var, m, switching, ordered):
    """(theta, support, names) of the variances: one, or one per regime; ``ordered``: they
    label the regimes (support ``positive_ordered_vector``), starting spread by a factor
    e^(+-0.5)."""
    if not switching:
        return (
            {"variances": np.asarray(var)},
            {"variances": constraints.positive},
            {"variances": ["sigma2"]},
        )
    value = np.full(m, var) * (np.exp(np.linspace(-0.5, 0.5, m)) if ordered else 1.0)
    support = constraints.positive_ordered_vector if ordered else constraints.positive
    return (
        {"variances": value},
        {"variances": support},
        {"variances": [f"sigma2[{j}]" for j in range(m)]},
    )


def _label_by(trend: str, flags, switching_variance: bool, m: int) -> str:
    """What labels the regimes: "trend" (the intercept / mean), "coefficients" (the first
    switching coefficient column, trend "n"), "variances", or "none" (M = 1); a
    ``ValueError`` when nothing differs between regimes."""
    if m == 1:
        return "none"
    if trend == "c":
        return "trend"
    if flags is True or (isinstance(flags, tuple) and any(flags)):
        return "coefficients"
    if switching_variance:
        return "variances"
    raise ValueError(
        "trend: with trend='n' and neither coefficients nor the variance switching, the "
        f"{m} regimes would be the same model; switch something or use num_regimes=1"
    )


def _exog(exog, t: int) -> np.ndarray:
    if exog is None:
        return np.zeros((t, 0))
    x = validation.as_float_array("exog", exog)
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2 or x.shape[0] != t:
        raise ValueError(f"exog: expected shape ({t}, k) (one row per endog value), got {x.shape}")
    validation.check_finite("exog", x)
    return x


def markov_switching_regression(
    endog,
    exog=None,
    *,
    num_regimes: int = 2,
    trend: str = "c",
    switching_coefficients=True,
    switching_variance: bool = True,
    exog_tvtp=None,
) -> SwitchingSpec:
    """Markov-switching regression y_t = mu_{s_t} + x_t' beta_{s_t} + e_t,
    e_t ~ N(0, sigma^2_{s_t}) (Hamilton 1989; Kim and Nelson 1999, ch. 4), statsmodels'
    ``MarkovRegression(endog, k_regimes, trend=, exog=, switching_exog=,
    switching_variance=)``.

    theta: "transition_matrix" (M, M) (row-from); "intercepts" (M,) with trend "c" (ordered:
    the regimes are labelled by increasing intercept); "coefficients" (M, k) when every
    regressor switches, (k,) when none does, else (M, k_s) for the switching columns (in
    order) and "common_coefficients" (k - k_s,) for the others; "variances" (M,) or ().
    Without an intercept (trend "n") the regimes are labelled by the first switching
    coefficient (support ``ordered_first_column``), else by the variance
    (``positive_ordered_vector``); ``regime_ordering`` states which.
    With ``exog_tvtp`` (time-varying transition probabilities, statsmodels' ``exog_tvtp``;
    module docstring) "transition_coefficients" (M, M - 1, k_tvtp) replaces
    "transition_matrix": P_t[i, j] = softmax_j(z_t' gamma_ij), gamma_{i, M-1} = 0.
    The start values are statsmodels' in spirit: OLS coefficients, the labelling parameter
    spread over its OLS scale (intercepts over the residual scale, a slope over +-2 standard
    errors), the OLS residual variance, persistent regimes (0.9 on the diagonal; with TVTP
    through the coefficients of a constant column of ``exog_tvtp``, the others 0).

    Args:
        endog: (T,) the series.
        exog: (T, k) regressors (without a constant), or None.
        num_regimes: M >= 1 (1: no switching, the baseline).
        trend: "c" (a switching intercept) or "n" (no intercept).
        switching_coefficients: beta differs by regime: True, False, or one flag per exog
            column (statsmodels' ``switching_exog``).
        switching_variance: sigma^2 differs by regime (else one sigma^2).
        exog_tvtp: (T, k_tvtp) the covariates z_t of the transition probabilities (include a
            column of ones for a constant), or None (a constant transition matrix).

    Returns:
        ``SwitchingSpec`` with observations (T, 1) and inputs (T, k) = exog, or with TVTP
        (T, k + k_tvtp) = [exog, exog_tvtp].
    """
    y = _series("endog", endog)
    t = y.shape[0]
    m = _check_regimes(num_regimes)
    trend = _check_trend(trend)
    x = _exog(exog, t)
    k = x.shape[1]
    flags = _switching_flags("switching_coefficients", switching_coefficients, k, "exog column")
    switching_variance = _check_flag("switching_variance", switching_variance)
    if trend == "n" and k == 0:
        raise ValueError("exog: required with trend='n' (the model would have no mean at all)")
    label = _label_by(trend, flags, switching_variance, m)
    z = None if exog_tvtp is None else _check_exog_tvtp(exog_tvtp, t)
    design = np.column_stack([np.ones(t), x]) if trend == "c" else x
    coef, var, se = _ols(y, design)
    slopes, slope_se = (coef[1:], se[1:]) if trend == "c" else (coef, se)
    structure = SwitchingStructure(
        "regression",
        m,
        0,
        k,
        flags,
        switching_variance,
        0 if z is None else z.shape[1],
        trend,
    )
    theta, support, names = _transition_part(z, m)
    if trend == "c":
        theta["intercepts"] = coef[0] + np.sqrt(var) * np.linspace(-1.0, 1.0, m)
        support["intercepts"] = constraints.ordered_vector
        names["intercepts"] = [f"const[{j}]" for j in range(m)]
    labels = [f"x{c + 1}" for c in range(k)]
    parts = (
        _coefficient_part(
            "coefficients", slopes, slope_se, flags, m, labels, label == "coefficients"
        ),
        _variance_part(var, m, switching_variance, label == "variances"),
    )
    for th, su, na in parts:
        theta, support, names = theta | th, support | su, names | na
    inputs = x if z is None else np.column_stack([x, z])
    return SwitchingSpec(structure, theta, support, _identified(theta), y[:, None], inputs, names)


def markov_switching_ar(
    endog,
    order: int,
    *,
    num_regimes: int = 2,
    trend: str = "c",
    switching_ar=False,
    switching_variance: bool = False,
    exog_tvtp=None,
) -> SwitchingSpec:
    """Hamilton's (1989) Markov-switching AR(p) with switching mean:
    y_t - mu_{s_t} = sum_{k=1..p} phi_k (y_{t-k} - mu_{s_{t-k}}) + e_t, e_t ~ N(0, sigma^2),
    statsmodels' ``MarkovAutoregression(endog, k_regimes, order, trend=, switching_ar=,
    switching_variance=)``.

    The filter's modes are the regime tuples (s_t, ..., s_{t-p}) (module docstring); the
    first p observations are conditioned on. theta: "transition_matrix" (M, M), "means" (M,)
    (ordered; trend "c" only), "ar_coefficients" (p,), (M, p), or with per-lag switching
    (M, p_s) and "common_ar_coefficients" (p - p_s,), "variances" () or (M,) (of s_t).
    Without a mean (trend "n": y_t = sum_k phi_k(s_t) y_{t-k} + e_t) the regimes are
    labelled by the first switching AR coefficient, else by the variance. With ``exog_tvtp``
    (statsmodels' ``exog_tvtp``, one row per endog row: its first p rows give the law of the
    first regime tuple, as in statsmodels; module docstring) "transition_coefficients"
    (M, M - 1, k_tvtp) replaces "transition_matrix". Start values: the AR(p) OLS fit, the
    labelling parameter spread over its OLS scale, persistent regimes (with TVTP as
    ``markov_switching_regression``'s).

    Args:
        endog: (T,) the series, T > p + 2.
        order: p >= 1.
        num_regimes: M >= 1 (1: the plain AR(p), the baseline).
        trend: "c" (a switching mean) or "n" (none).
        switching_ar: phi differs by regime: True, False, or one flag per lag.
        switching_variance: sigma^2 differs by regime (that of s_t; see the module docstring
            for statsmodels' convention when p >= 2).
        exog_tvtp: (T, k_tvtp) the covariates z_t of the transition probabilities, one row
            per endog row (include a column of ones for a constant), or None.

    Returns:
        ``SwitchingSpec`` with observations (T - p, 1) = y_{p+1:T} and inputs (T - p, p), row
        t = (y_{t-1}, ..., y_{t-p}); with TVTP (T - p, p + (p + 1) k_tvtp), row t =
        (y_{t-1}, ..., y_{t-p}, z_{t-p}, ..., z_{t-1}, z_t).
    """
    y = _series("endog", endog)
    p = validation.check_positive_int("order", order)
    m = _check_regimes(num_regimes)
    trend = _check_trend(trend)
    flags = _switching_flags("switching_ar", switching_ar, p, "lag")
    switching_variance = _check_flag("switching_variance", switching_variance)
    label = _label_by(trend, flags, switching_variance, m)
    t = y.shape[0]
    if t <= p + 2:
        raise ValueError(f"endog: an AR({p}) model needs more than {p + 2} values, got {t}")
    z = None if exog_tvtp is None else _check_exog_tvtp(exog_tvtp, t)
    lags = np.column_stack([y[p - k : t - k] for k in range(1, p + 1)])
    obs = y[p:]
    design = np.column_stack([np.ones(t - p), lags]) if trend == "c" else lags
    coef, var, se = _ols(obs, design)
    phi, phi_se = (coef[1:], se[1:]) if trend == "c" else (coef, se)
    structure = SwitchingStructure(
        "ar", m, p, p, flags, switching_variance, 0 if z is None else z.shape[1], trend
    )
    theta, support, names = _transition_part(z, m)
    if trend == "c":
        mean = coef[0] / max(1.0 - float(np.sum(phi)), 1e-3)
        theta["means"] = mean + np.sqrt(var) * np.linspace(-1.0, 1.0, m)
        support["means"] = constraints.ordered_vector
        names["means"] = [f"const[{j}]" for j in range(m)]
    labels = [f"ar.L{c + 1}" for c in range(p)]
    parts = (
        _coefficient_part(
            "ar_coefficients", phi, phi_se, flags, m, labels, label == "coefficients"
        ),
        _variance_part(var, m, switching_variance, label == "variances"),
    )
    for th, su, na in parts:
        theta, support, names = theta | th, support | su, names | na
    inputs = lags
    if z is not None:  # z_{t-p}, ..., z_t in time order (row t of the inputs is row t + p of endog)
        inputs = np.column_stack([lags, *(z[c : t - p + c] for c in range(p + 1))])
    return SwitchingSpec(structure, theta, support, _identified(theta), obs[:, None], inputs, names)


def markov_switching_var(
    endog,
    order: int,
    *,
    num_regimes: int = 2,
    switching_ar: bool = True,
    switching_covariance: bool = True,
    exog_tvtp=None,
) -> SwitchingSpec:
    """The Markov-switching vector autoregression MS(I)AH-VAR(p) of Krolzig (1997, ch. 1 and
    sec. 9.2): intercepts, autoregressive matrices and covariance all switching,

        y_t = nu_{s_t} + sum_{l=1..p} A_{l, s_t} y_{t-l} + e_t,   e_t ~ N(0, Sigma_{s_t}),

    y_t in R^o, s_t a Markov chain on M regimes (row-from P; with ``exog_tvtp`` the TVTP
    logits of ``markov_switching_regression``). The emission depends on s_t alone (the lags
    are inputs), so Hamilton's filter runs on the M regimes; the first p observations are
    conditioned on. For o = 1 it is ``markov_switching_regression`` on the lags (statsmodels'
    ``MarkovRegression(y[p:], exog=lags)``), not Hamilton's mean-adjusted MS-AR.

    theta: "transition_matrix" (M, M) (or "transition_coefficients" (M, M - 1, k_tvtp));
    "intercepts" (M, o), the regimes labelled by increasing intercept of the first series
    (support ``ordered_first_column``); "ar_coefficients" (M, o, o p) or (o, o p): row i is
    equation i, columns (y_{t-1}, ..., y_{t-p}), each o wide, so A_{l, j} =
    ar_coefficients[j][:, (l - 1) o : l o]; "covariances" (M, o, o) or (o, o). Start values:
    the equation-by-equation OLS fit of the VAR(p), the first intercept spread over its
    residual scale, the OLS residual covariance, persistent regimes.

    Args:
        endog: (T, o) the series (one column per variable), T > p + 2.
        order: p >= 1.
        num_regimes: M >= 1 (1: the VAR(p), the baseline).
        switching_ar: the autoregressive matrices differ by regime.
        switching_covariance: Sigma differs by regime.
        exog_tvtp: (T, k_tvtp) TVTP covariates, one row per endog row (the first p rows are
            dropped with the observations, as statsmodels does for a regression), or None.

    Returns:
        ``SwitchingSpec`` with observations (T - p, o) = y_{p+1:T} and inputs (T - p, o p),
        row t = (y_{t-1}, ..., y_{t-p}); with TVTP (T - p, o p + k_tvtp), z_t last.
    """
    y = validation.as_float_array("endog", endog)
    if y.ndim == 1:
        y = y[:, None]
    if y.ndim != 2:
        raise ValueError(f"endog: expected a (T, o) array, one column per series, got {y.shape}")
    validation.check_finite("endog", y)
    p = validation.check_positive_int("order", order)
    m = _check_regimes(num_regimes)
    switching_ar = _check_flag("switching_ar", switching_ar)
    switching_covariance = _check_flag("switching_covariance", switching_covariance)
    t, o = y.shape
    if t <= o * p + 2:
        raise ValueError(
            f"endog: a VAR({p}) of {o} series needs more than {o * p + 2} rows, got {t}"
        )
    z = None if exog_tvtp is None else _check_exog_tvtp(exog_tvtp, t)
    if z is not None:
        z = z[p:]
    lags = np.column_stack([y[p - k : t - k] for k in range(1, p + 1)])  # (T - p, o p)
    obs = y[p:]
    design = np.column_stack([np.ones(t - p), lags])
    coef, *_ = np.linalg.lstsq(design, obs, rcond=None)  # (1 + o p, o)
    resid = obs - design @ coef
    cov = resid.T @ resid / max(t - p - design.shape[1], 1)
    cov = 0.5 * (cov + cov.T)
    if np.linalg.eigvalsh(cov)[0] <= 0:
        raise ValueError(
            "endog: the series are collinear (the VAR's residual covariance is singular)"
        )
    structure = SwitchingStructure(
        "var",
        m,
        p,
        o * p,
        switching_ar,
        switching_covariance,
        0 if z is None else z.shape[1],
        "c",
        o,
    )
    theta, support, names = _transition_part(z, m)
    intercepts = np.tile(coef[0], (m, 1))
    intercepts[:, 0] += np.sqrt(cov[0, 0]) * np.linspace(-1.0, 1.0, m)
    a = coef[1:].T  # (o, o p)
    series = [f"y{i + 1}" for i in range(o)]
    columns = [f"L{lag}.{v}" for lag in range(1, p + 1) for v in series]
    ar_names = [f"{series[i]}.{c}" for i in range(o) for c in columns]
    cov_names = [f"sigma[{series[i]},{series[c]}]" for i in range(o) for c in range(o)]
    theta |= {
        "intercepts": intercepts,
        "ar_coefficients": np.tile(a, (m, 1, 1)) if switching_ar else a.copy(),
        "covariances": np.tile(cov, (m, 1, 1)) if switching_covariance else cov.copy(),
    }
    support |= {
        "intercepts": ordered_first_column,
        "ar_coefficients": constraints.real,
        "covariances": constraints.positive_definite,
    }
    names |= {
        "intercepts": [f"const.{v}[{j}]" for j in range(m) for v in series],
        "ar_coefficients": (
            [f"{n}[{j}]" for j in range(m) for n in ar_names] if switching_ar else ar_names
        ),
        "covariances": (
            [f"{n}[{j}]" for j in range(m) for n in cov_names]
            if switching_covariance
            else cov_names
        ),
    }
    inputs = lags if z is None else np.column_stack([lags, z])
    return SwitchingSpec(structure, theta, support, _identified(theta), obs, inputs, names)


def switching_state_space(params: SwitchingParams, observations, *, inputs=None) -> SwitchingSpec:
    """A generic ``SwitchingParams`` as a ``SwitchingSpec``: every field is a parameter, plus the
    scales c_j, r_j of Q_j = c_j Q0_j and R_j = r_j R0_j (start 1; Q0, R0 the given
    covariances). Modes whose fixed fields are the same are exchangeable; fits label them by
    increasing noise scale (``regime_ordering``). Free by default: the transition matrix and
    the noise scales (``STATE_SPACE_FREE``, the set the conjugate Gibbs sampler learns). The
    biases b_j, d_j are not free by default because they are not identified in general: a
    constant d_j trades
    against the initial state x_1 and against b_j wherever F_j integrates a coordinate (e.g. a
    position driven by a velocity), which left NUTS over them mixing poorly (R-hat 1.3-1.8 at
    T = 80 on the maneuvering target). Free any field by passing ``free=`` to the fit
    (covariance fields get the positive-definite constraint, probabilities simplex rows).

    Args:
        params: ``SwitchingParams`` (checked).
        observations: (T, o), NaN entries missing.
        inputs: (T, k) when ``params`` has input weights.
    """
    params = check_params("params", params)
    obs = as_float_field("observations", observations)
    o = params.emission_matrices.shape[1]
    if obs.ndim != 2 or obs.shape[1] != o:
        raise ValueError(f"observations: expected shape (T, {o}), got {tuple(obs.shape)}")
    inputs = check_input_series("inputs", inputs, params, obs.shape[0])
    m = params.initial_probs.shape[0]
    theta = {f: np.asarray(getattr(params, f)) for f in SwitchingParams._fields}
    theta["dynamics_cov_scale"] = np.ones(m)
    theta["emission_cov_scale"] = np.ones(m)
    support = {f: constraints.real for f in theta}
    support |= {
        "initial_probs": constraints.simplex,
        "transition_matrix": constraints.simplex,
        "initial_covs": constraints.positive_definite,
        "dynamics_covs": constraints.positive_definite,
        "emission_covs": constraints.positive_definite,
        "dynamics_cov_scale": constraints.positive,
        "emission_cov_scale": constraints.positive,
    }
    names = {f: [f"{f}{list(i)}" for i in np.ndindex(np.shape(v))] for f, v in theta.items()}
    names["transition_matrix"] = _transition_names(m)
    structure = SwitchingStructure("state_space", m, 0, params.num_inputs)
    return SwitchingSpec(
        structure, theta, support, STATE_SPACE_FREE, np.asarray(obs), np.asarray(inputs), names
    )


# ----------------------------------------------------------------------------- regime labels

# the noise scales that label exchangeable modes of a state-space spec, in order of preference
_LABEL_SCALES = ("emission_cov_scale", "dynamics_cov_scale")


class RegimeOrdering(NamedTuple):
    """How the regimes of a spec are labelled (``regime_ordering``).

    Attributes:
        parameter: the name of theta whose entries increase with the label (regime 0 the
            smallest), or None when nothing is ordered.
        description: one sentence for the output of a fit.
        identified: False when the modes are exchangeable and nothing orders them (a
            posterior then mixes the labellings).
    """

    parameter: str | None
    description: str
    identified: bool = True


def _symmetric_under_relabelling(spec: SwitchingSpec, free) -> bool:
    """Whether every fixed field of a state-space spec is the same in every mode (a fixed
    transition matrix: one stay probability and one switch probability), so that permuting
    the mode labels leaves the likelihood unchanged."""
    for name, value in spec.theta.items():
        if name in free:
            continue
        value = np.asarray(value)
        if name == "transition_matrix":
            diagonal = np.diagonal(value)
            off = value[~np.eye(value.shape[0], dtype=bool)]
            if np.ptp(diagonal) > 0 or (off.size and np.ptp(off) > 0):
                return False
        elif value.size and not np.all(value == value[:1]):
            return False
    return True


# the supports of the parameter that labels the regimes of an econometric spec
_LABEL_SUPPORTS = (
    constraints.ordered_vector,
    ordered_first_column,
    constraints.positive_ordered_vector,
)


def _label_description(spec: SwitchingSpec, name: str) -> str:
    """The labelling parameter in words, e.g. "intercept (regime 0 the lowest)", "coefficient
    of x1 (...)", "intercept of y1 (...)", "variance (...)"."""
    if name == "variances":
        return "variance (regime 0 the least volatile)"
    if name in ("intercepts", "means") and spec.structure.kind != "var":
        return f"{name[:-1]} (regime 0 the lowest)"
    label = spec.names[name][0].rsplit("[", 1)[0]  # the first entry of regime 0, e.g. x1
    if name == "intercepts":
        return f"intercept of {label.split('.', 1)[1]} (regime 0 the lowest)"
    return f"coefficient {label} (regime 0 the lowest)"


def regime_ordering(spec: SwitchingSpec, free=None) -> RegimeOrdering:
    """The suite's one convention for labelling the regimes of a fit (``free`` defaults to
    ``spec.free``):

    - a Markov-switching regression, MS-AR or MS-VAR model: by increasing intercept or mean
      (the support of "intercepts" / "means" is ``ordered_vector``; for MS-VAR the intercept
      of the first series, ``ordered_first_column``); without one (trend "n") by the first
      switching coefficient (``ordered_first_column``), else by the variance
      (``positive_ordered_vector``); fixed ones out of order label the regimes as given;
    - a state-space model (``switching_state_space``) whose fixed parameters differ between
      modes: by those parameters (the modes are not exchangeable, nothing is reordered);
    - a state-space model whose fixed parameters are the same in every mode: the modes are
      exchangeable (permuting the labels, of theta and of the transition matrix's rows and
      columns, leaves the likelihood unchanged), so they are labelled by increasing
      emission_cov_scale r_j, else dynamics_cov_scale c_j, whichever is free first. NUTS
      samples it under ``OrderedIID`` of its prior (``default_priors``), the exchangeable
      prior restricted to that ordering; maximum likelihood and EM relabel their optimum
      (``relabel_regimes``). With neither scale free the labels are not identified.

    Returns ``RegimeOrdering`` (the parameter or None, a sentence for the output, and whether
    the labels are identified).
    """
    if not isinstance(spec, SwitchingSpec):
        raise ValueError(f"spec: expected a SwitchingSpec, got {type(spec).__name__}")
    free = tuple(spec.free if free is None else free)
    kind, m = spec.structure.kind, spec.structure.num_regimes
    if m == 1:
        return RegimeOrdering(None, "one regime: there are no labels to identify.")
    if kind in ("regression", "ar", "var"):
        name = next(n for n, c in spec.support.items() if c in _LABEL_SUPPORTS)
        what = _label_description(spec, name)
        value = np.asarray(spec.theta[name], dtype=float)
        value = value[:, 0] if value.ndim == 2 else value
        if name in free or np.all(np.diff(value) > 0):
            return RegimeOrdering(name, f"the regimes are labelled by increasing {what}.")
        return RegimeOrdering(
            None, f"the regimes are labelled by their fixed {name}, as given (not in order)."
        )
    if not _symmetric_under_relabelling(spec, free):
        return RegimeOrdering(
            None, "the modes are labelled by their fixed parameters, which differ between modes."
        )
    for name in _LABEL_SCALES:
        if name in free:
            return RegimeOrdering(
                name,
                "the modes' fixed parameters are the same in every mode, so the modes are "
                f"exchangeable and labelled by increasing {name} (mode 0 the lowest).",
            )
    return RegimeOrdering(
        None,
        "the modes' fixed parameters are the same in every mode and no noise scale is free: "
        "the modes are exchangeable and their labels are not identified.",
        identified=False,
    )


def relabel_regimes(spec: SwitchingSpec, theta: dict, order) -> dict:
    """theta with the modes of a state-space spec relabelled: new mode k is old mode
    ``order[k]`` in every per-mode field (leading axis M), and the transition matrix's rows
    and columns both permuted, P'[k, l] = P[order[k], order[l]]. An exact symmetry of the
    likelihood when the modes are exchangeable (``regime_ordering``). Pure NumPy."""
    if spec.structure.kind != "state_space":
        raise ValueError(
            f"spec: relabels the modes of a state-space spec, got {spec.structure.kind!r}"
        )
    order = np.asarray(order)
    if sorted(order.tolist()) != list(range(spec.structure.num_regimes)):
        raise ValueError(
            f"order: expected a permutation of 0..{spec.structure.num_regimes - 1}, got {order}"
        )
    out = {}
    for name, value in theta.items():
        value = np.asarray(value)
        if name == "transition_matrix":
            out[name] = value[order][:, order]
        else:
            out[name] = value[order]
    return out


# ----------------------------------------------------------------------------- priors


def default_priors(spec: SwitchingSpec, free=None) -> dict:
    """Weakly informative priors on the free parameters of ``spec``, in constrained form
    (NumPyro distributions keyed by parameter name), scaled by the spec's start values (the
    OLS fit of the constructors, hence data-dependent: pass fixed priors for
    simulation-based calibration):

    - "transition_matrix": each row Dirichlet(1 + 2 e_i) (prior stay probability 3 / (M + 2),
      0.75 for M = 2);
    - "transition_coefficients" (TVTP logits): N(start, (2.5 / s_k)^2) for the coefficient
      of covariate k, with s_k its standard deviation over the inputs (|c| for a constant
      column c): a one-standard-deviation move of a covariate moves a logit by about 2.5 a
      priori, and the constant's coefficients centre on the persistent start (stay 0.9);
    - regime means / intercepts: ``OrderedNormal`` around their mean start, scale
      2 sqrt(v0) + their spread (v0 the start variance), which fixes the labels; an MS-VAR's
      (M, o) intercepts: that law on the first series' column (``OrderedFirstColumn``) and
      N(start, (2 sqrt(v0_i))^2) on series i's;
    - "variances": InverseGamma(3, 2 v0) (prior mean v0), or, when they label the regimes
      (trend "n"), ``OrderedIID`` of InverseGamma(3, 2 mean(v0)); "covariances" of an MS-VAR:
      InverseWishart(o + 3, 2 S0) per regime (prior mean S0, the start); noise scales of a
      state-space spec: InverseGamma(3, 2) (prior mean 1), iid over the modes, or their
      ``OrderedIID`` (the iid law restricted to increasing values) for the scale that labels
      exchangeable modes (``regime_ordering(spec, free)``; ``free`` defaults to ``spec.free``);
    - "ar_coefficients" (and "common_ar_coefficients") of MS-AR and MS-VAR: N(0, 0.5^2);
      regression "coefficients" (and "common_coefficients"): N(start, (10 (|start| + 1))^2);
      coefficients that label the regimes (trend "n"): that law's ``OrderedIID`` on the
      first column (centred on the column's mean start), ``OrderedFirstColumn``;
    - other real fields (biases, offsets): N(start, (10 (|start| + 1))^2).
    """
    m = spec.structure.num_regimes
    ordered = regime_ordering(spec, free).parameter
    out = {}
    variance = _start_variance(spec)
    for name, value in spec.theta.items():
        value = np.asarray(value, dtype=float)
        support = spec.support[name]
        if name == "transition_matrix":
            out[name] = dist.Dirichlet(jnp.ones((m, m)) + 2.0 * jnp.eye(m)).to_event(1)
        elif name == "transition_coefficients":
            z = np.asarray(spec.inputs, float)[:, -spec.structure.num_tvtp :]
            spread = np.where(np.ptp(z, axis=0) > 0, np.std(z, axis=0), np.abs(z[0]))
            scale = 2.5 / np.where(spread > 0, spread, 1.0)
            loc = jnp.asarray(value)
            out[name] = dist.Normal(loc, jnp.broadcast_to(scale, value.shape)).to_event(3)
        elif support is constraints.ordered_vector:
            scale = 2.0 * np.sqrt(variance) + float(np.ptp(value))
            out[name] = OrderedNormal(float(np.mean(value)), scale, value.shape[-1])
        elif support is ordered_first_column:
            out[name] = _ordered_first_column_prior(spec, name, value)
        elif name == "variances" and support is constraints.positive_ordered_vector:
            out[name] = OrderedIID(dist.InverseGamma(3.0, 2.0 * float(np.mean(value))), m)
        elif name == "variances":
            out[name] = dist.InverseGamma(3.0, 2.0 * jnp.asarray(value)).to_event(value.ndim)
        elif name == "covariances":
            law = InverseWishart(value.shape[-1] + 3.0, 2.0 * jnp.asarray(value))
            out[name] = law.to_event(value.ndim - 2) if value.ndim > 2 else law
        elif name in _LABEL_SCALES and name == ordered:
            out[name] = OrderedIID(dist.InverseGamma(3.0, 2.0), m)
        elif name in _LABEL_SCALES:
            out[name] = dist.InverseGamma(3.0 * jnp.ones(value.shape), 2.0).to_event(1)
        elif name in ("ar_coefficients", "common_ar_coefficients"):
            out[name] = dist.Normal(jnp.zeros(value.shape), 0.5).to_event(value.ndim)
        elif support is constraints.real:
            loc = jnp.asarray(value)
            out[name] = dist.Normal(loc, 10.0 * (jnp.abs(loc) + 1.0)).to_event(value.ndim)
    return out


def _start_variance(spec: SwitchingSpec) -> float:
    """The mean start variance v0 of an econometric spec (of the first series for MS-VAR)."""
    if "covariances" in spec.theta:
        return float(np.mean(np.asarray(spec.theta["covariances"])[..., 0, 0]))
    return float(np.mean(spec.theta.get("variances", 1.0)))


def _ordered_first_column_prior(spec: SwitchingSpec, name: str, value: np.ndarray):
    """``OrderedFirstColumn`` for an (M, k) parameter that labels the regimes by its first
    column: the MS-VAR intercepts (``OrderedNormal`` on the first series, N(start, (2 sd_i)^2)
    on series i), or switching coefficients of a model without intercept (the ordered law of
    their own prior on the first column, that prior on the others)."""
    m = value.shape[0]
    rest_loc = jnp.asarray(value[:, 1:])
    if name == "intercepts":  # MS-VAR
        covs = np.asarray(spec.theta["covariances"]).reshape(-1, value.shape[1], value.shape[1])
        sd = np.sqrt(np.mean(np.diagonal(covs, axis1=-2, axis2=-1), axis=0))
        first = OrderedNormal(float(np.mean(value[:, 0])), 2.0 * sd[0] + np.ptp(value[:, 0]), m)
        rest_scale = jnp.broadcast_to(2.0 * sd[1:], rest_loc.shape)
    elif name == "ar_coefficients":
        first = OrderedNormal(0.0, 0.5, m)
        rest_loc, rest_scale = jnp.zeros(rest_loc.shape), jnp.full(rest_loc.shape, 0.5)
    else:
        loc = float(np.mean(value[:, 0]))
        first = OrderedNormal(loc, 10.0 * (abs(loc) + 1.0), m)
        rest_scale = 10.0 * (jnp.abs(rest_loc) + 1.0)
    rest = None if value.shape[1] == 1 else dist.Normal(rest_loc, rest_scale).to_event(2)
    return OrderedFirstColumn(first, rest)


__all__ = [
    "KINDS",
    "STATE_SPACE_FREE",
    "TRENDS",
    "RegimeOrdering",
    "SwitchingSpec",
    "SwitchingStructure",
    "build_params",
    "coefficient_matrix",
    "default_priors",
    "ergodic_probabilities",
    "markov_switching_ar",
    "markov_switching_regression",
    "markov_switching_var",
    "regime_of_mode",
    "regime_ordering",
    "regime_probabilities",
    "regime_transition_matrix",
    "regime_tuples",
    "relabel_regimes",
    "switching_state_space",
    "tuple_initial_probs",
    "tuple_transition_matrix",
    "tvtp_transition_matrices",
]
