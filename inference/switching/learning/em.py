"""EM for parametrised switching models (Dempster, Laird and Rubin 1977).

Econometric models (a constant state: ``markov_switching_regression``, ``markov_switching_ar``;
Hamilton 1990): the filter and the backward recursion give the smoothed regime probabilities
gamma_t(j) = P(s_t = j | y) and the pairwise xi_t(i, j) = P(s_t = i, s_{t+1} = j | y)
(``pairwise_mode_probabilities``) of the E-step. State-space models (``switching_state_space``;
Shumway and Stoffer 1982 for M = 1; Kim 1994 and Kim and Nelson 1999, ch. 5, for the switching
smoother; Murphy 1998, "Switching Kalman filters", for EM on it): Kim's smoother over the named
filter, or the enumeration of the mode histories for "exact", gives the per-mode moments of the
states, the pairwise mode probabilities and the lag-one cross-covariances
(``attnbayes.inference.switching.smoothers.kim_smoother_moments``). The M-step is the
closed-form transition matrix, then L-BFGS steps on the expected complete-data log-likelihood
Q (trace forms in those moments) over the unconstrained free parameters, each accepted only if
it raises Q: a generalised EM. With time-varying transition probabilities (TVTP,
``exog_tvtp``) the E-step uses P_{t+1} between t and t+1, and the logit coefficients gamma have
no closed form: the transition term sum_t sum_ij xi_t(i, j) log P_{t+1}(gamma)_ij of Q, a
weighted multinomial logistic regression per from-regime, is maximised with the other free
parameters by those L-BFGS steps (statsmodels' EM leaves them where they start). Where Kim's
approximate E-step makes a step lower the
log-likelihood, the step is halved until it raises it (``EM_STEP_HALVINGS``; Lange 1995).

- ``fit_em_unchecked``: the EM loop on checked arguments (``fit_switching(method="em")``,
  ``mle``, is its checked front); ``check_em_free``: the free set EM can fit on a state-space
  model (no mean parameter of a residual with a singular covariance);
- ``em_expectations``: the compiled E-step of a constant-state model (log L, gamma, xi);
- ``pairwise_mode_probabilities``: xi from the filtered and smoothed mode probabilities.
"""

from __future__ import annotations

import functools
import math
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree
from jax.scipy.special import logsumexp

from ....models.markov_switching import (
    SwitchingSpec,
    SwitchingStructure,
    build_params,
    regime_of_mode,
    regime_transition_matrix,
)
from ....models.switching import step_offsets
from ..kalman import log_probabilities
from ..linalg import mm, mv, outer, pd_factors, psd_factors
from ..smoothers import (
    SmootherMoments,
    exact_smoother_moments_unchecked,
    kim_smoother_moments_unchecked,
)
from .likelihood import filter_unchecked, log_emissions, mode_filter
from .parameters import constrain, num_free, register_spec, registered_spec, unconstrain
from .results import SwitchingFitResult

# an EM step that lowers the log-likelihood (an approximate E-step) is halved this many times
# at most before the fit stops (``fit_em_unchecked``)
EM_STEP_HALVINGS = 5

# the mean parameters whose residual each covariance field governs (state-space kind)
_MEANS_OF_COV = {
    "initial_covs": ("initial_means",),
    "dynamics_covs": ("dynamics_matrices", "dynamics_biases", "dynamics_input_weights"),
    "emission_covs": ("emission_matrices", "emission_biases", "emission_input_weights"),
}


def check_em_free(spec: SwitchingSpec, free: tuple) -> None:
    """EM on a state-space model cannot fit the mean parameters of a residual whose covariance
    is singular: the complete-data density is degenerate off the covariance's range (the
    residual is zero there under the model), so the expected complete-data log-likelihood
    only sees, and the M-step only moves, their components within the range, and Fisher's
    identity (grad log p(y) = grad Q) fails in the other directions. Refused with a
    ``ValueError`` naming ``free``; the scale of a singular covariance is fine (fitted on
    its range)."""
    if spec.structure.kind != "state_space":
        return
    for cov_name, means in _MEANS_OF_COV.items():
        freed = [n for n in means if n in free]
        if not freed:
            continue
        covs = np.asarray(spec.theta[cov_name], float)
        eig = np.linalg.eigvalsh(0.5 * (covs + np.swapaxes(covs, -1, -2)))
        cutoff = covs.shape[-1] * np.finfo(float).eps * np.max(eig, axis=-1)
        bad = np.flatnonzero(eig[:, 0] <= cutoff).tolist()
        if bad:
            raise ValueError(
                f"free: EM cannot fit {freed} while {cov_name}{bad} is singular: the "
                "complete-data density is degenerate off the range of that covariance, so EM "
                "would move them only within it and stop short of the maximum; keep them "
                "fixed or use method='mle'"
            )


# ----------------------------------------------------------------------------- E-step


def _pair_transitions(transition_matrix):
    """The matrices between consecutive steps (t, t+1), t = 1..T-1: P_{t+1} (T-1, M, M) of a
    time-varying (T, M, M) matrix (entry 0 unused), or the constant (M, M) one."""
    p = jnp.asarray(transition_matrix)
    return p[1:] if p.ndim == 3 else p


def pairwise_mode_probabilities(filtered_probs, transition_matrix, smoothed_probs):
    """xi_t(i, j) = P(s_t = i, s_{t+1} = j | y_{1:T}), t = 1..T-1 (Kim 1994):
    filt_t(i) P_ij smooth_{t+1}(j) / pred_{t+1}(j), pred_{t+1}(j) = sum_i filt_t(i) P_ij,
    from the filtered (T, M) and smoothed (T, M) mode probabilities. ``transition_matrix``
    (M, M), or (T, M, M) time-varying (TVTP): then P_{t+1} links t and t+1."""
    filt = filtered_probs[:-1]
    trans = _pair_transitions(transition_matrix)
    trans = trans[None] if trans.ndim == 2 else trans  # (1 or T-1, M, M)
    pred = jnp.sum(filt[:, :, None] * trans, axis=1)
    ratio = jnp.where(pred > 0, smoothed_probs[1:] / jnp.where(pred > 0, pred, 1.0), 0.0)
    return filt[:, :, None] * trans * ratio[:, None, :]


def _smoothed_mode_probs(filtered, transition_matrix):
    """P(s_t = j | y_{1:T}) by the backward recursion on the filter's mode probabilities
    (exact for a Markov chain observed through mode-wise likelihoods); a time-varying
    (T, M, M) matrix links t and t+1 by its entry t + 1."""
    trans = jnp.asarray(transition_matrix)
    per_step = trans[1:] if trans.ndim == 3 else None

    def step(next_smooth, inp):
        filt, p = inp
        p = trans if p is None else p
        log_p = jnp.log(p)
        log_pred = logsumexp(jnp.log(filt)[:, None] + log_p, axis=0)
        ratio = jnp.exp(jnp.log(next_smooth) - log_pred)
        ratio = jnp.where(next_smooth > 0, ratio, 0.0)
        out = filt * (p @ ratio)
        out = out / jnp.sum(out)
        return out, out

    last = filtered[-1]
    _, rest = jax.lax.scan(step, last, (filtered[:-1], per_step), reverse=True)
    return jnp.concatenate([rest, last[None]])


@functools.partial(jax.jit, static_argnums=(0, 1))
def em_expectations(spec_key, likelihood, theta, obs, u):
    """The E-step of a constant-state model at ``theta`` (compiled; ``spec_key`` of
    ``register_spec`` and ``likelihood`` static): (log p(y), smoothed mode probabilities
    gamma (T, M), pairwise xi (T-1, M, M))."""
    spec = registered_spec(spec_key)
    params = build_params(spec.structure, theta, u)
    regimes = regime_transition_matrix(spec.structure, theta, u)
    log_lik, filtered = mode_filter(spec.structure, likelihood, params, obs, u, regimes)
    smooth = _smoothed_mode_probs(filtered, params.transition_matrix)
    xi = pairwise_mode_probabilities(filtered, params.transition_matrix, smooth)
    return log_lik, smooth, xi


def _regime_transition_counts(structure: SwitchingStructure, xi):
    """sum_t P(r_t = a, r_{t+1} = b | y) on the regimes (summing mode pairs by their current
    regimes)."""
    onehot = jax.nn.one_hot(regime_of_mode(structure), structure.num_regimes, dtype=xi.dtype)
    return jnp.einsum("tij,ia,jb->ab", xi, onehot, onehot)


def _negative_q_constant_state(spec, free, z, theta_fixed, stats, obs, u):
    """-Q(theta) / T, the expected complete-data log-likelihood of the E-step's gamma, xi:

        Q(theta) = sum_j gamma_1(j) log pi0_j + sum_t sum_ij xi_t(i, j) log Pi_ij
                   + sum_t sum_j gamma_t(j) log N(y_t; d_j + D_j u_t, R_j)

    over the filter's modes (the regime tuples of MS-AR, whose Pi and pi0 are functions of
    the regime transition matrix), for a model with a constant state. ``stats`` = (gamma,
    xi). With TVTP, Pi_ij is Pi_{t+1, ij}(gamma) and pi0 the ergodic law of P_0(gamma): the
    transition term is a weighted multinomial logistic regression per from-regime, maximised
    with the other free parameters by the M-step's L-BFGS steps."""
    gamma, xi = stats
    theta = constrain(spec, free, theta_fixed, z)
    p = build_params(spec.structure, theta, u)
    logpdf = log_emissions(p, obs, u)  # (T, modes); 0 where y_t is missing
    q = jnp.sum(gamma * logpdf)
    log_trans = log_probabilities(_pair_transitions(p.transition_matrix))
    q = q + jnp.sum(jnp.where(xi > 0, xi * log_trans, 0.0))
    q = q + jnp.sum(jnp.where(gamma[0] > 0, gamma[0] * log_probabilities(p.initial_probs), 0.0))
    return -q / jnp.maximum(jnp.sum(gamma), 1.0)


_LOG_2PI = math.log(2.0 * math.pi)
# the covariance fields of a state-space spec and the scale fields that multiply them
_SCALED_COVS = {
    "initial_covs": None,
    "dynamics_covs": "dynamics_cov_scale",
    "emission_covs": "emission_cov_scale",
}


def _psd_factors(cov):
    """(S^+, log pdet S, rank S) of symmetric PSD matrices (..., n, n) (``linalg.psd_factors``,
    eigenvalues below n eps times the largest counted as zero). For the fixed covariance bases
    of the M-step: computed once per M-step, never differentiated (``eigh``'s derivative is NaN
    at a repeated eigenvalue)."""
    _, pinv, rank, log_pdet = psd_factors(jax.lax.stop_gradient(cov))
    return pinv, log_pdet, rank


def _scaled(factors, scale):
    """The factors of c S0 from those of S0: (S0^+ / c, rank log c + log pdet S0, rank)."""
    pinv, log_pdet, rank = factors
    scale = jnp.asarray(scale)
    return pinv / scale[..., None, None], rank * jnp.log(scale) + log_pdet, rank


def _expected_gaussian_logpdf(second_moment, count, factors):
    """sum_t w_t E[log N(r_t; 0, S)] on the range of S (a degenerate Gaussian when S is
    singular), given count = sum_t w_t, second_moment = sum_t w_t E[r_t r_t^T] and the
    factors (S^+, log pdet S, rank S):

        -1/2 [count (rank(S) log 2 pi + log pdet S) + tr(S^+ second_moment)].

    With singular S this is the density with respect to Lebesgue measure on the range of S,
    where the model puts the residual; S^+ drops the round-off outside it. Batched."""
    pinv, log_pdet, rank = factors
    trace = jnp.sum(pinv * second_moment, axis=(-2, -1))  # tr(S^+ E), both symmetric
    return -0.5 * (count * (rank * _LOG_2PI + log_pdet) + trace)


def _masked(covs, observed):
    """R_j over the observed coordinates of each y_t, padded to (T, M, o, o) with the
    identity's entries at the missing ones (``mask_emission``)."""
    both = observed[:, :, None] & observed[:, None, :]  # (T, o, o)
    eye = jnp.eye(observed.shape[1], dtype=covs.dtype)
    return jnp.where(both[:, None], covs[None], eye)


def _masked_factors(factorise, covs, observed):
    """The factors of R_j over the observed coordinates of each y_t, (T, M, ...): those of the
    identity-padded matrix (``_masked``), whose padding adds nothing to the log pdet nor to
    the trace (the residual's second moment is zero there), with the padded rows taken off
    the rank."""
    pinv, log_pdet, rank = factorise(_masked(covs, observed))
    num_missing = jnp.sum(~observed, axis=1)[:, None].astype(rank.dtype)
    return pinv, log_pdet, rank - num_missing


def _state_space_factors(free, theta_fixed, obs, partial):
    """The factors (``_psd_factors``) of the covariance bases P0_j, Q0_j, R0_j that are not
    free (constants of the M-step; R0_j per step over its observed coordinates when
    ``partial``), keyed by field."""
    out = {}
    for name in _SCALED_COVS:
        if name in free:
            continue
        if name == "emission_covs" and partial:
            out[name] = _masked_factors(_psd_factors, theta_fixed[name], ~jnp.isnan(obs))
        else:
            out[name] = _psd_factors(theta_fixed[name])
    return out


def _negative_q_state_space(spec, free, z, theta_fixed, mo, obs, u, partial, constants):
    """-Q(theta) / T for a switching state-space model, from the E-step's ``SmootherMoments``
    (gamma_t(j) = P(s_t = j | y), xi_t(i, j) = P(s_{t-1} = i, s_t = j | y), and the moments
    given s_t = j):

        Q = sum_j gamma_1(j) log pi0_j + sum_{t>=2} sum_ij xi_t(i, j) log Pi_ij
          + sum_j gamma_1(j) E[log N(x_1; m0_j, P0_j) | s_1 = j]
          + sum_{t>=2} sum_j gamma_t(j) E[log N(x_t; F_j x_{t-1} + b_j + B_j u_t, Q_j) | s_t = j]
          + sum_t sum_j gamma_t(j) E[log N(y_t; H_j x_t + d_j + D_j u_t, R_j) | s_t = j]

    (the last over the observed coordinates of y_t). Each expectation is the trace form
    E[log N(r; 0, S)] = -1/2 [rank(S) log 2 pi + log pdet S + tr(S^+ E[r r^T])]
    (``_expected_gaussian_logpdf``) with the second moments of the residuals:

        dynamics: E[r r^T | s_t = j] = P_t - F_j C_t^T - C_t F_j^T + F_j P'_t F_j^T + e e^T,
            e = m_t - F_j m'_t - b_j - B_j u_t, with (m_t, P_t) = E, Cov[x_t | s_t = j],
            (m'_t, P'_t) = E, Cov[x_{t-1} | s_t = j], C_t = Cov[x_t, x_{t-1} | s_t = j];
        emission: E[r r^T | s_t = j] = H_j P_t H_j^T + e e^T, e = y_t - H_j m_t - d_j - D_j u_t;
        initial: E[r r^T | s_1 = j] = P_1 + (m_1 - m0_j)(m_1 - m0_j)^T.

    Only first and second moments enter, so collapsing the pairs onto s_t is exact here.

    Singular covariances: Q_j = c_j Q0_j with Q0_j fixed enters through the pseudo-inverse
    and pseudo-determinant of Q0_j (``factors``, computed once per M-step): the density on
    the range of Q0_j, where the model puts the residual, with respect to Lebesgue measure
    there, in which the free scale enters as rank(Q0_j) log c_j + tr(Q0_j^+ E[r r^T]) / c_j
    (its gradient is the log-likelihood's, Fisher's identity; tested). The mean parameters
    of that residual (F_j, b_j, B_j) are not fitted then: off the range the complete-data
    density is degenerate (``check_em_free`` refuses them). Likewise R_j = r_j R0_j and
    P0_j. A freed base (``dynamics_covs`` etc.) is positive definite by its parametrisation
    (Cholesky).
    ``partial`` (static): some row of y is partly missing, so the emission term is summed
    step by step over the observed coordinates; otherwise per mode over the wholly observed
    rows. ``constants`` = (``_state_space_factors``, ``_state_space_sums``), the parts that
    do not depend on theta, computed once per M-step."""
    factors, sums = constants
    theta = constrain(spec, free, theta_fixed, z)
    p = build_params(spec.structure, theta)
    gamma, xi = mo.mode_probs, mo.pair_probs
    dyn_off, emi_off = jax.vmap(step_offsets, in_axes=(None, 0))(p, u)  # (T, M, d), (T, M, o)
    observed = ~jnp.isnan(obs)

    def cov_factors(name):
        scale = _SCALED_COVS[name]
        if name in free:  # positive definite by its parametrisation
            if name == "emission_covs" and partial:
                return _masked_factors(pd_factors, p.emission_covs, observed)
            return pd_factors(getattr(p, name))
        if scale is None:
            return factors[name]
        c = theta[scale]
        return _scaled(factors[name], c[None] if name == "emission_covs" and partial else c)

    q = jnp.sum(jnp.where(gamma[0] > 0, gamma[0] * log_probabilities(p.initial_probs), 0.0))
    q = q + jnp.sum(jnp.where(xi > 0, xi * log_probabilities(p.transition_matrix), 0.0))
    # the first state
    e0 = mo.means[0] - p.initial_means
    second0 = gamma[0][:, None, None] * (mo.covs[0] + outer(e0, e0))
    q = q + jnp.sum(_expected_gaussian_logpdf(second0, gamma[0], cov_factors("initial_covs")))
    # the dynamics, t = 2..T: the covariance part from the E-step's sums, the mean part per step
    f, f_t = p.dynamics_matrices, jnp.swapaxes(p.dynamics_matrices, -1, -2)
    g = gamma[1:, :, None, None]
    resid = mo.means[1:] - mv(f, mo.prev_means) - dyn_off[1:]  # (T-1, M, d)
    f_cross = mm(f, jnp.swapaxes(sums["cross"], -1, -2))
    second = (
        sums["cov_now"]
        - f_cross
        - jnp.swapaxes(f_cross, -1, -2)
        + mm(mm(f, sums["cov_prev"]), f_t)
        + jnp.sum(g * outer(resid, resid), axis=0)
    )
    q = q + jnp.sum(_expected_gaussian_logpdf(second, sums["n_dyn"], cov_factors("dynamics_covs")))
    # the emissions
    h, h_t = p.emission_matrices, jnp.swapaxes(p.emission_matrices, -1, -2)
    y = jnp.where(observed, obs, 0.0)
    resid = y[:, None] - mv(h, mo.means) - emi_off  # (T, M, o)
    emi_factors = cov_factors("emission_covs")
    if not partial:
        w = sums["w_emi"][:, :, None, None]  # gamma on the (wholly) observed rows
        second = mm(mm(h, sums["cov_emi"]), h_t) + jnp.sum(w * outer(resid, resid), axis=0)
        q = q + jnp.sum(_expected_gaussian_logpdf(second, sums["n_emi"], emi_factors))
    else:
        both = observed[:, :, None] & observed[:, None, :]  # (T, o, o)
        hph = mm(mm(h, mo.covs), h_t)
        second = jnp.where(both[:, None], hph + outer(resid, resid), 0.0)
        terms = _expected_gaussian_logpdf(gamma[..., None, None] * second, gamma, emi_factors)
        q = q + jnp.sum(terms)
    return -q / jnp.maximum(jnp.sum(gamma), 1.0)


def _state_space_sums(mo: SmootherMoments, obs):
    """The sums over time of the E-step's second moments that do not depend on theta (once per
    M-step): with g_t(j) = gamma_t(j), t >= 2, sum_t g P_t, sum_t g P'_t, sum_t g C_t and
    sum_t g; for the emissions (rows wholly observed or missing) w_t(j) = gamma_t(j) 1[y_t
    observed], sum_t w P_t and sum_t w."""
    g = mo.mode_probs[1:]
    w = mo.mode_probs * jnp.any(~jnp.isnan(obs), axis=1)[:, None]

    def weighted(weights, covs):
        return jnp.sum(weights[:, :, None, None] * covs, axis=0)

    return {
        "n_dyn": jnp.sum(g, axis=0),
        "cov_now": weighted(g, mo.covs[1:]),
        "cov_prev": weighted(g, mo.prev_covs),
        "cross": weighted(g, mo.cross_covs),
        "w_emi": w,
        "n_emi": jnp.sum(w, axis=0),
        "cov_emi": weighted(w, mo.covs),
    }


def _negative_q(spec, free, z, theta_fixed, stats, obs, u, partial, constants):
    """-Q(theta) / T of the model's kind (``_negative_q_constant_state``,
    ``_negative_q_state_space``)."""
    if spec.structure.kind == "state_space":
        return _negative_q_state_space(
            spec, free, z, theta_fixed, stats, obs, u, partial, constants
        )
    return _negative_q_constant_state(spec, free, z, theta_fixed, stats, obs, u)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _covariance_factors(free, partial, theta, obs):
    """``_state_space_factors`` of a fit, compiled on its own: the covariance bases that are
    not free stay fixed through EM, so their factors are computed once per fit."""
    return _state_space_factors(free, theta, obs, partial)


def _closed_form_transition(structure, theta, xi):
    """The regime transition counts sum_t xi_t(a, b) normalised by row (a regime never left
    keeps its row)."""
    counts = _regime_transition_counts(structure, xi)
    total = jnp.sum(counts, axis=1, keepdims=True)
    return jnp.where(
        total > 0, counts / jnp.where(total > 0, total, 1.0), theta["transition_matrix"]
    )


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3))
def _m_step(spec_key, free, num_steps_inner, partial, theta, stats, obs, u, factors):
    """The M-step of a generalised EM, from theta to the next theta (one compiled program).

    1. If the transition matrix is free, its closed-form update, the regime transition counts
       sum_t xi_t(a, b) normalised by row (``_closed_form_transition``). For a state-space
       model it maximises the only term of Q that depends on P, so it is taken; for the
       econometric models (pi0 = the ergodic distribution of P, of the tuple chain for
       MS-AR) it is kept only if it does not lower Q.
    2. Up to ``num_steps_inner`` L-BFGS steps (``optax.lbfgs``; a backtracking line search
       for a state-space model, the zoom search otherwise) on -Q(theta) / T
       (``_negative_q``) over the unconstrained coordinates of the free parameters, each
       accepted only if it does not raise -Q (the line search's value at the new point); the
       first rejected step ends the M-step (the solver's state then no longer matches the
       point).

    ``factors``: a state-space model's ``_covariance_factors`` (None otherwise).
    """
    spec = registered_spec(spec_key)
    state_space = spec.structure.kind == "state_space"
    if "transition_matrix" in free:
        xi = stats.pair_probs if state_space else stats[1]
        closed = theta | {"transition_matrix": _closed_form_transition(spec.structure, theta, xi)}
    fixed = {n: v for n, v in theta.items() if n not in free}
    constants = (factors, _state_space_sums(stats, obs)) if state_space else None

    def objective(f):
        return _negative_q(spec, free, unravel(f), fixed, stats, obs, u, partial, constants)

    start = closed if state_space and "transition_matrix" in free else theta
    flat, unravel = ravel_pytree(unconstrain(spec, free, start))
    if "transition_matrix" in free and not state_space:
        flat_closed = ravel_pytree(unconstrain(spec, free, closed))[0]
        better = jnp.all(jnp.isfinite(flat_closed)) & (objective(flat_closed) <= objective(flat))
        flat = jnp.where(better, flat_closed, flat)

    if state_space:
        # a backtracking (Armijo) line search: its program is about half the zoom search's,
        # which halves the compile time of this kernel (the steps and the fixed point agree)
        linesearch = optax.scale_by_backtracking_linesearch(
            max_backtracking_steps=20, store_grad=True
        )
        solver = optax.lbfgs(linesearch=linesearch)
    else:
        solver = optax.lbfgs()
    value_and_grad = optax.value_and_grad_from_state(objective)

    def cond(carry):
        i, _, _, done = carry
        return (i < num_steps_inner) & ~done

    def body(carry):
        i, f, state, _ = carry
        value, grad = value_and_grad(f, state=state)
        updates, state = solver.update(grad, state, f, value=value, grad=grad, value_fn=objective)
        new = optax.apply_updates(f, updates)
        new_value = optax.tree_utils.tree_get(state, "value")  # the line search's, at new
        accept = jnp.all(jnp.isfinite(new)) & jnp.isfinite(new_value) & (new_value <= value)
        return i + 1, jnp.where(accept, new, f), state, ~accept

    init = (jnp.asarray(0), flat, solver.init(flat), jnp.asarray(False))
    _, flat, _, _ = jax.lax.while_loop(cond, body, init)
    return constrain(spec, free, fixed, unravel(flat))


def _state_space_moments(spec_key, likelihood, theta, obs, u) -> SmootherMoments:
    """The E-step of a state-space model: Kim's smoother over the named filter
    (``kim_smoother_moments``), or the enumeration of the mode histories for "exact"
    (``exact_smoother_moments``). The compiled kernels are those of the public functions
    (``imm_filter_unchecked``, ``kim_smoother_moments_unchecked``,
    ``exact_smoother_moments_unchecked``, ...), so a fit shares them."""
    params = build_params(registered_spec(spec_key).structure, theta, u)
    if likelihood == "exact":
        return exact_smoother_moments_unchecked(params, obs, u)
    return kim_smoother_moments_unchecked(params, filter_unchecked(params, obs, u, likelihood), u)


def _partly_missing(observations) -> bool:
    """Whether some row of y has both observed and missing (NaN) coordinates."""
    missing = np.isnan(np.asarray(observations))
    return bool(np.any(missing.any(axis=1) & ~missing.all(axis=1)))


def fit_em_unchecked(
    spec: SwitchingSpec,
    observations,
    *,
    inputs,
    free: tuple,
    max_iterations: int,
    tolerance: float,
    began: float,
    likelihood: str,
) -> SwitchingFitResult:
    """EM for a parametrised switching model (Dempster, Laird and Rubin 1977), on checked
    arguments: ``fit_switching(method="em")`` validates them (``check_em_free`` included) and
    passes its start time ``began`` for the result's ``seconds``.

    Econometric models (a constant state: ``markov_switching_regression``,
    ``markov_switching_ar``; Hamilton 1990): the filter and the backward recursion give
    gamma_t(j) = P(s_t = j | y) and xi_t(i, j) = P(s_t = i, s_{t+1} = j | y)
    (``pairwise_mode_probabilities``); Q is ``_negative_q_constant_state``'s.

    State-space models (``switching_state_space``; Shumway and Stoffer 1982 for M = 1, Kim
    1994 and Kim and Nelson 1999, ch. 5, for the switching smoother, Murphy 1998, "Switching
    Kalman filters", for EM on it): the E-step is Kim's smoother over the filter named by
    ``likelihood`` ("imm", "gpb2", "gpb1", "kalman"), which gives the per-mode moments of
    x_t given s_t, the pairwise mode probabilities and the lag-one cross-covariances
    Cov[x_t, x_{t-1} | s_t = j, y] (``kim_smoother_moments``), or for "exact" the same
    statistics by enumerating the M^T mode histories (``exact_smoother_moments``); Q is
    ``_negative_q_state_space``'s (trace forms in those moments).

    M-step: the regime transition matrix first in closed form, P_ab = sum_t xi_t(a, b) /
    sum_b' (...) on the regimes (summed over the tuple modes of MS-AR; Hamilton's update, which
    ignores that pi0 = the ergodic distribution depends on P in the econometric models), then
    every free parameter by L-BFGS steps on Q from there in its unconstrained coordinates
    (``_m_step``), accepting only increases of Q. If the closed-form step lowered Q it is
    dropped (it cannot for a state-space model, where it maximises the only term with P).
    A generalised EM: Q never decreases, so where the E-step is exact (the constant
    state; M = 1; "exact"; F_j = 0, where every collapse is exact) the log-likelihood trace is
    non-decreasing (tested). With Kim's approximate E-step (M > 1, F_j != 0) it is EM on an
    approximate posterior and a full step can lower the log-likelihood: then the step is
    halved along the segment from the last iterate (theta_old + 2^-k (theta_M - theta_old),
    k = 1..``EM_STEP_HALVINGS``: every support is convex, so each point is a valid model; the
    step-halving safeguard of Lange 1995, "A gradient algorithm locally equivalent to the EM
    algorithm", JRSS B 57, sec. 3), and the first point that raises it is kept, so the trace
    never falls by more than ``tolerance`` times T. Stops when the change is below that
    (converged), or,
    unconverged, when no halved step raises it (the returned theta is the last iterate, whose
    log-likelihood ends the trace) or at ``max_iterations``.
    """
    structure = spec.structure
    state_space = structure.kind == "state_space"
    dtype = observations.dtype
    theta = {n: jnp.asarray(v, dtype) for n, v in spec.theta.items()}
    spec_key = register_spec(spec._replace(theta=theta))
    partial = state_space and _partly_missing(observations)
    factors = _covariance_factors(free, partial, theta, observations) if state_space else None
    num_obs = int(np.sum(np.any(~np.isnan(np.asarray(observations)), axis=-1)))

    def e_step(theta):
        if state_space:
            stats = _state_space_moments(spec_key, likelihood, theta, observations, inputs)
            return float(stats.log_likelihood), stats
        ll, smooth, xi = em_expectations(spec_key, likelihood, theta, observations, inputs)
        return float(ll), (smooth, xi)

    trace = []
    converged = False
    previous = theta
    for _ in range(max_iterations):
        ll, stats = e_step(theta)
        if trace and ll < trace[-1] - tolerance * num_obs:
            # only an approximate E-step can lower log L: halve the step along the segment
            # from the last iterate (every support is convex), keep the first that raises it
            proposed, raised = theta, False
            for k in range(1, EM_STEP_HALVINGS + 1):
                theta = {n: previous[n] + 0.5**k * (proposed[n] - previous[n]) for n in proposed}
                ll, stats = e_step(theta)
                if ll > trace[-1]:
                    raised = True
                    break
            if not raised:  # no step along it raises log L: undone, not converged
                theta = previous
                break
        trace.append(ll)
        if len(trace) > 1 and trace[-1] - trace[-2] < tolerance * num_obs:
            converged = True
            break
        previous = theta
        theta = _m_step(spec_key, free, 10, partial, theta, stats, observations, inputs, factors)
    theta = {n: np.asarray(v) for n, v in theta.items()}
    # EM computes no Hessian, so it makes no boundary claim (``boundary_mask`` needs the
    # observed information); --fit mle does
    on_boundary = {n: np.zeros(np.shape(v), bool) for n, v in theta.items()}
    return SwitchingFitResult(
        params=build_params(structure, theta, inputs),
        theta=theta,
        log_likelihood=np.asarray(trace),
        stderr={n: np.full(np.shape(v), np.nan) for n, v in theta.items()},
        on_boundary=on_boundary,
        start_log_likelihoods=np.asarray(trace[-1:]),
        num_parameters=num_free(spec, free),
        num_observations=num_obs,
        converged=converged,
        method="em",
        likelihood=likelihood,
        seconds=time.perf_counter() - began,
    )


__all__ = [
    "check_em_free",
    "em_expectations",
    "fit_em_unchecked",
    "pairwise_mode_probabilities",
]
