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
from .switching import SwitchingParams, as_float_field, check_input_series, check_params

KINDS = ("regression", "ar", "state_space")


@dataclasses.dataclass(frozen=True)
class SwitchingStructure:
    """The static shape of a parametrised switching model (hashable: a static argument of
    the compiled likelihoods).

    Attributes:
        kind: "regression", "ar" or "state_space".
        num_regimes: M, the number of regimes (of the Markov chain the user sees).
        order: p, the autoregressive order ("ar"; 0 otherwise).
        num_inputs: k, the input columns (regressors for "regression", lags for "ar").
        switching_coefficients: the regression / AR coefficients differ by regime.
        switching_variance: the noise variance differs by regime.
        num_tvtp: k_tvtp, the covariates of time-varying transition probabilities (0: a
            constant transition matrix); they are the last k_tvtp columns of the inputs.
    """

    kind: str
    num_regimes: int
    order: int = 0
    num_inputs: int = 0
    switching_coefficients: bool = True
    switching_variance: bool = True
    num_tvtp: int = 0

    @property
    def num_modes(self) -> int:
        """The filter's modes: M for a regression and a state-space model, M^(p+1) for MS-AR."""
        return self.num_regimes ** (self.order + 1) if self.kind == "ar" else self.num_regimes

    @property
    def input_width(self) -> int:
        """The columns of the inputs: the regressors or lags (``num_inputs``), then the TVTP
        covariates: z_t for a regression, z_{t-p}, ..., z_t for MS-AR(p) (module docstring)."""
        lags = self.order if self.kind == "ar" else 0
        return self.num_inputs + (lags + 1) * self.num_tvtp


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


def build_params(structure: SwitchingStructure, theta: dict, inputs=None) -> SwitchingParams:
    """The ``SwitchingParams`` of a parametrised model at theta (pure JAX: jit-, vmap- and
    grad-able in theta and the inputs).

    "regression": d_j = intercepts[j], D_j = coefficients[j] (or the common ones), R_j =
    variances[j] (or the common one), pi0 the ergodic distribution of P.
    "ar": modes are the regime tuples (``tuple_transition_matrix``, ``tuple_initial_probs``),
    d = means[s_t] - sum_k phi_k means[s_{t-k}], D = phi', R = variance of s_t (or common).
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
    variances = _per_regime(theta["variances"], m, structure.switching_variance)
    if kind == "regression":
        coefs = _per_regime(theta["coefficients"], m, structure.switching_coefficients)
        modes = m
        fields = {
            "initial_probs": ergodic_probabilities(first_rows[0] if structure.num_tvtp else trans),
            "transition_matrix": trans,
            "emission_biases": jnp.asarray(theta["intercepts"])[:, None],
            "emission_input_weights": _padded_weights(coefs.reshape(m, 1, k), width),
        }
    else:  # "ar"
        tup = regime_tuples(m, p)
        modes = tup.shape[0]
        means = jnp.asarray(theta["means"])
        phi = _per_regime(theta["ar_coefficients"], m, structure.switching_coefficients)
        phi_mode = phi[tup[:, 0]]  # (modes, p): the current regime's coefficients
        lagged = means[tup[:, 1:]]  # (modes, p)
        fields = {
            "initial_probs": tuple_initial_probs(first_rows, p),
            "transition_matrix": tuple_transition_matrix(trans, p),
            "emission_biases": (means[tup[:, 0]] - jnp.sum(phi_mode * lagged, axis=-1))[:, None],
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
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    resid = y - x @ coef
    return coef, float(resid @ resid / max(len(y) - x.shape[1], 1))


def markov_switching_regression(
    endog,
    exog=None,
    *,
    num_regimes: int = 2,
    switching_coefficients: bool = True,
    switching_variance: bool = True,
    exog_tvtp=None,
) -> SwitchingSpec:
    """Markov-switching regression y_t = mu_{s_t} + x_t' beta_{s_t} + e_t,
    e_t ~ N(0, sigma^2_{s_t}) (Hamilton 1989; Kim and Nelson 1999, ch. 4), statsmodels'
    ``MarkovRegression(endog, k_regimes, exog=exog, switching_variance=...)``.

    theta: "transition_matrix" (M, M) (row-from), "intercepts" (M,) (ordered: the regimes are
    labelled by increasing intercept), "coefficients" (M, k) or (k,), "variances" (M,) or ().
    With ``exog_tvtp`` (time-varying transition probabilities, statsmodels' ``exog_tvtp``;
    module docstring) "transition_coefficients" (M, M - 1, k_tvtp) replaces
    "transition_matrix": P_t[i, j] = softmax_j(z_t' gamma_ij), gamma_{i, M-1} = 0.
    The start values are statsmodels' in spirit: OLS coefficients, intercepts spread over
    the OLS residual scale, the OLS residual variance, persistent regimes (0.9 on the
    diagonal; with TVTP through the coefficients of a constant column of ``exog_tvtp``, the
    others 0, ``_tvtp_start``).

    Args:
        endog: (T,) the series.
        exog: (T, k) regressors (without a constant; the intercept switches), or None.
        num_regimes: M >= 1 (1: no switching, the baseline).
        switching_coefficients: beta differs by regime (else one beta).
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
    if exog is None:
        x = np.zeros((t, 0))
    else:
        x = validation.as_float_array("exog", exog)
        if x.ndim == 1:
            x = x[:, None]
        if x.ndim != 2 or x.shape[0] != t:
            raise ValueError(
                f"exog: expected shape ({t}, k) (one row per endog value), got {x.shape}"
            )
        validation.check_finite("exog", x)
    k = x.shape[1]
    for name, flag in (
        ("switching_coefficients", switching_coefficients),
        ("switching_variance", switching_variance),
    ):
        if not isinstance(flag, bool):
            raise ValueError(f"{name}: expected True or False, got {flag!r}")
    z = None if exog_tvtp is None else _check_exog_tvtp(exog_tvtp, t)
    coef, var = _ols(y, np.column_stack([np.ones(t), x]))
    spread = np.sqrt(var) * np.linspace(-1.0, 1.0, m)
    structure = SwitchingStructure(
        "regression",
        m,
        0,
        k,
        switching_coefficients,
        switching_variance,
        0 if z is None else z.shape[1],
    )
    trans_theta, trans_support, trans_names = _transition_part(z, m)
    theta = trans_theta | {
        "intercepts": coef[0] + spread,
        "coefficients": np.tile(coef[1:], (m, 1)) if switching_coefficients else coef[1:].copy(),
        "variances": np.full(m, var) if switching_variance else np.asarray(var),
    }
    support = trans_support | {
        "intercepts": constraints.ordered_vector,
        "coefficients": constraints.real,
        "variances": constraints.positive,
    }
    names = trans_names | {
        "intercepts": [f"const[{j}]" for j in range(m)],
        "coefficients": (
            [f"x{c + 1}[{j}]" for j in range(m) for c in range(k)]
            if switching_coefficients
            else [f"x{c + 1}" for c in range(k)]
        ),
        "variances": [f"sigma2[{j}]" for j in range(m)] if switching_variance else ["sigma2"],
    }
    inputs = x if z is None else np.column_stack([x, z])
    return SwitchingSpec(structure, theta, support, _identified(theta), y[:, None], inputs, names)


def markov_switching_ar(
    endog,
    order: int,
    *,
    num_regimes: int = 2,
    switching_ar: bool = False,
    switching_variance: bool = False,
    exog_tvtp=None,
) -> SwitchingSpec:
    """Hamilton's (1989) Markov-switching AR(p) with switching mean:
    y_t - mu_{s_t} = sum_{k=1..p} phi_k (y_{t-k} - mu_{s_{t-k}}) + e_t, e_t ~ N(0, sigma^2),
    statsmodels' ``MarkovAutoregression(endog, k_regimes, order, switching_ar=False,
    switching_variance=False)``.

    The filter's modes are the regime tuples (s_t, ..., s_{t-p}) (module docstring); the
    first p observations are conditioned on. theta: "transition_matrix" (M, M), "means" (M,)
    (ordered), "ar_coefficients" (p,) or (M, p), "variances" () or (M,) (of s_t). With
    ``exog_tvtp`` (statsmodels' ``exog_tvtp``, one row per endog row: its first p rows give
    the law of the first regime tuple, as in statsmodels; module docstring)
    "transition_coefficients" (M, M - 1, k_tvtp) replaces "transition_matrix". Start
    values: the AR(p) OLS fit, means spread over its residual scale, persistent regimes (with
    TVTP as ``markov_switching_regression``'s).

    Args:
        endog: (T,) the series, T > p + 2.
        order: p >= 1.
        num_regimes: M >= 1 (1: the plain AR(p), the baseline).
        switching_ar: phi differs by regime.
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
    for name, flag in (("switching_ar", switching_ar), ("switching_variance", switching_variance)):
        if not isinstance(flag, bool):
            raise ValueError(f"{name}: expected True or False, got {flag!r}")
    t = y.shape[0]
    if t <= p + 2:
        raise ValueError(f"endog: an AR({p}) model needs more than {p + 2} values, got {t}")
    z = None if exog_tvtp is None else _check_exog_tvtp(exog_tvtp, t)
    lags = np.column_stack([y[p - k : t - k] for k in range(1, p + 1)])
    obs = y[p:]
    coef, var = _ols(obs, np.column_stack([np.ones(t - p), lags]))
    phi = coef[1:]
    mean = coef[0] / max(1.0 - float(np.sum(phi)), 1e-3)
    spread = np.sqrt(var) * np.linspace(-1.0, 1.0, m)
    structure = SwitchingStructure(
        "ar", m, p, p, switching_ar, switching_variance, 0 if z is None else z.shape[1]
    )
    trans_theta, trans_support, trans_names = _transition_part(z, m)
    theta = trans_theta | {
        "means": mean + spread,
        "ar_coefficients": np.tile(phi, (m, 1)) if switching_ar else phi.copy(),
        "variances": np.full(m, var) if switching_variance else np.asarray(var),
    }
    support = trans_support | {
        "means": constraints.ordered_vector,
        "ar_coefficients": constraints.real,
        "variances": constraints.positive,
    }
    names = trans_names | {
        "means": [f"const[{j}]" for j in range(m)],
        "ar_coefficients": (
            [f"ar.L{c + 1}[{j}]" for j in range(m) for c in range(p)]
            if switching_ar
            else [f"ar.L{c + 1}" for c in range(p)]
        ),
        "variances": [f"sigma2[{j}]" for j in range(m)] if switching_variance else ["sigma2"],
    }
    inputs = lags
    if z is not None:  # z_{t-p}, ..., z_t in time order (row t of the inputs is row t + p of endog)
        inputs = np.column_stack([lags, *(z[c : t - p + c] for c in range(p + 1))])
    return SwitchingSpec(structure, theta, support, _identified(theta), obs[:, None], inputs, names)


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


def regime_ordering(spec: SwitchingSpec, free=None) -> RegimeOrdering:
    """The suite's one convention for labelling the regimes of a fit (``free`` defaults to
    ``spec.free``):

    - a Markov-switching regression or MS-AR model: by increasing intercept or mean (the
      support of "intercepts" / "means" is ``ordered_vector``); fixed ones out of order label
      the regimes as given;
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
    if kind in ("regression", "ar"):
        name = "intercepts" if kind == "regression" else "means"
        if name in free or np.all(np.diff(np.asarray(spec.theta[name], dtype=float)) > 0):
            return RegimeOrdering(
                name, f"the regimes are labelled by increasing {name[:-1]} (regime 0 the lowest)."
            )
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


class OrderedIID(dist.Distribution):
    """The order statistics of M independent draws of a univariate ``base`` law: the law of
    sort(z), z_j iid ~ base, with density

        M! prod_j f(x_j)   on x_1 < ... < x_M,

    the exchangeable prior prod_j f(x_j) restricted to one ordering of the labels (Jasra,
    Holmes and Stephens 2005, sec. 6, on label switching): its posterior is the
    label-identified one (regime 0 has the smallest value). Support: ``ordered_vector`` for a
    base on the reals, ``positive_ordered_vector`` for a base on the positive reals (e.g. the
    noise scales of ``regime_ordering``)."""

    arg_constraints = {}
    pytree_data_fields = ("base",)
    pytree_aux_fields = ("size",)

    def __init__(self, base, size: int, *, validate_args=None):
        if not isinstance(base, dist.Distribution) or base.event_shape != ():
            raise ValueError(f"base: expected a univariate NumPyro distribution, got {base!r}")
        if base.support not in (constraints.real, constraints.positive):
            raise ValueError(f"base: expected support real or positive, got {base.support}")
        self.base = base
        self.size = validation.check_positive_int("size", size)
        super().__init__(
            batch_shape=base.batch_shape, event_shape=(self.size,), validate_args=validate_args
        )

    @property
    def support(self):
        if self.base.support is constraints.positive:
            return constraints.positive_ordered_vector
        return constraints.ordered_vector

    @property
    def reparametrized_params(self):
        return self.base.reparametrized_params

    def sample(self, key, sample_shape=()):
        z = self.base.sample(key, (self.size, *sample_shape))  # (M, *sample, *batch)
        return jnp.sort(jnp.moveaxis(z, 0, -1), axis=-1)

    def log_prob(self, value):
        each = self.base.log_prob(jnp.moveaxis(jnp.asarray(value), -1, 0))
        return jnp.sum(each, axis=0) + jax.scipy.special.gammaln(self.size + 1.0)


class OrderedNormal(OrderedIID):
    """The order statistics of M independent N(loc, scale^2) draws (``OrderedIID`` of a
    normal): density M! prod_j N(x_j; loc, scale) on x_1 < ... < x_M. The prior of regime
    means that fixes the labels (regime 0 has the smallest mean)."""

    def __init__(self, loc, scale, size: int, *, validate_args=None):
        super().__init__(dist.Normal(loc, scale), size, validate_args=validate_args)

    @property
    def loc(self):
        return self.base.loc

    @property
    def scale(self):
        return self.base.scale


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
      2 sqrt(v0) + their spread (v0 the start variance), which fixes the labels;
    - "variances": InverseGamma(3, 2 v0) (prior mean v0); noise scales of a state-space spec:
      InverseGamma(3, 2) (prior mean 1), iid over the modes, or their ``OrderedIID`` (the
      iid law restricted to increasing values) for the scale that labels exchangeable modes
      (``regime_ordering(spec, free)``; ``free`` defaults to ``spec.free``);
    - "ar_coefficients": N(0, 0.5^2); regression "coefficients": N(start, (10 (|start| + 1))^2);
    - other real fields (biases, offsets): N(start, (10 (|start| + 1))^2).
    """
    m = spec.structure.num_regimes
    ordered = regime_ordering(spec, free).parameter
    out = {}
    variance = float(np.mean(spec.theta.get("variances", 1.0)))
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
        elif name == "variances":
            out[name] = dist.InverseGamma(3.0, 2.0 * jnp.asarray(value)).to_event(value.ndim)
        elif name in _LABEL_SCALES and name == ordered:
            out[name] = OrderedIID(dist.InverseGamma(3.0, 2.0), m)
        elif name in _LABEL_SCALES:
            out[name] = dist.InverseGamma(3.0 * jnp.ones(value.shape), 2.0).to_event(1)
        elif name == "ar_coefficients":
            out[name] = dist.Normal(jnp.zeros(value.shape), 0.5).to_event(value.ndim)
        elif support is constraints.real:
            loc = jnp.asarray(value)
            out[name] = dist.Normal(loc, 10.0 * (jnp.abs(loc) + 1.0)).to_event(value.ndim)
    return out


__all__ = [
    "KINDS",
    "STATE_SPACE_FREE",
    "OrderedIID",
    "OrderedNormal",
    "RegimeOrdering",
    "SwitchingSpec",
    "SwitchingStructure",
    "build_params",
    "default_priors",
    "ergodic_probabilities",
    "markov_switching_ar",
    "markov_switching_regression",
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
