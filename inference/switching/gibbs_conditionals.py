"""The conditional laws of one sweep of the switching Gibbs sampler, and the sweep.

Carter and Kohn (1994) for the states, Kim and Nelson (1999, ch. 9) for the modes; the exact
sampler the note "Attention as GPB2/IMM message passing" (section 4) approximates. The public
sampler (checks, chains, DataTree) is ``attnbayes.inference.switching.gibbs``; this module holds
what one sweep draws, as pure functions of checked arrays (``GibbsModel``, ``GibbsPriors``).

Model (``attnbayes.models.switching``), M modes, t = 1..T, known inputs u_t (k = 0: none):

    s_1 ~ Cat(pi0),                    s_t | s_{t-1} = i ~ Cat(Pi[i, :]),
    x_1 | s_1 = j ~ N(m0_j, P0_j),     x_t | x_{t-1}, s_t = j ~ N(F_j x_{t-1} + b_tj, c_j Q_j),
    y_t | x_t, s_t = j ~ N(H_j x_t + e_tj, r_j R_j),
    b_tj = b_j + B_j u_t,  e_tj = d_j + D_j u_t      (``models.switching.step_offsets``)

(u_1 enters only the first emission) with Q_j PSD (possibly singular) and R_j PD from
``params`` (the sampler refuses a singular R_j: the r_j update and the backward messages use
R_j^-1, while the filters accept PSD R_j); the scales c_j, r_j are 1 and Pi is
``params.transition_matrix`` unless ``priors`` put conjugate priors on them. A NaN coordinate
of y_t is missing on its own: every term below uses the observed coordinates o(t) of y_t, with
R_oo the block of R_j on them and R_o^-1 its inverse embedded with zeros in an o x o matrix (0
for a wholly missing row, a predict-only step). One sweep:

1. modes. ``"collapsed"`` (default; Gerlach, Carter & Kohn 2000, JASA 95, 819-828): each s_t in
   turn from p(s_t | s_{-t}, theta, y), the states integrated out, in O(T M) per sweep. A
   backward pass over the current modes computes the information-form messages
   B_t(x) = p(y_{t+1:T} | x_t = x, s_{t+1:T}) ~ exp(-x' Omega_t x / 2 + nu_t' x); with
   Q = L L^T and A = I + L' Omega~ L (PD, no inverse of Q), and F, b, L, H, e, R of s_{t+1},

       Omega~ = Omega_{t+1} + H' R_o^-1 H,  nu~ = nu_{t+1} + H' R_o^-1 (y_{t+1} - e_{t+1})
                                                                    (absorb y_{t+1}, o = o(t+1))
       Omega_mu = Omega~ - Omega~ L A^-1 L' Omega~,  nu_mu = nu~ - Omega~ L A^-1 L' nu~
       Omega_t = F' Omega_mu F,  nu_t = F' (nu_mu - Omega_mu b_{t+1})
                                                            (x_{t+1} = F x + b_{t+1} + L eps)

   Then a forward pass runs, for each t, the M candidate Kalman updates of the current
   forward filter (prediction with b_tj, update by y_t - e_tj on its observed coordinates) and
   scores s_t = j by

       log Pi[s_{t-1}, j] + log Pi[j, s_{t+1}] + log p(y_t | y_{1:t-1}, s_{1:t-1}, s_t = j)
       + log int N(x; m_j, P_j) B_t(x) dx,

   the last in closed form: with U U' = Omega_t, G = I + U' P_j U (PD) and g = nu_t - Omega_t m_j,
   -log det(G) / 2 + (g' P_j g - |chol(G)^-1 U' P_j g|^2) / 2 - m_j' Omega_t m_j / 2 + nu_t' m_j
   (by Woodbury the form -log det(I + C' Omega C) / 2 + c' (I + C' Omega C)^-1 c / 2 + ... with
   C C' = P_j and c = C' g, but with one factor per step, of Omega_t, and P_j may be singular).
   It draws s_t in the log domain (Gumbel-max) and advances the filter with it.
   ``"conditional"``: the textbook blocked step, s | x, theta, y by HMM forward-filtering
   backward-sampling with "emissions" N(x_t; F_j x_{t-1} + b_tj, c_j Q_j)
   N(y_t,o; (H_j x_t + e_tj)_o, r_j R_j,oo).
   It needs PD Q_j. It is not the default because it cannot mix when Q_j is singular: given
   the states, x_t - F_j x_{t-1} - b_tj lies in range(Q_j) for only one j, so the modes are
   fixed by the states (the maneuvering scenario's white-noise-acceleration Q has rank 2 in
   4-D), and even with full-rank Q the states pin the modes so tightly that it moves slowly.
2. states x | s, theta, y by Kalman forward filtering, backward sampling: x_T ~ N(m_T, P_T),
   x_t | x_{t+1} ~ the Kalman update (Joseph form) of N(m_t, P_t) by x_{t+1} - b_{t+1} ~
   N(F x_t, Q), whose innovation covariance F P_t F' + Q is PD even for singular Q once P_t is
   (and a generalised inverse handles P0 = 0 with singular Q). The collapsed step's forward
   pass already is the filter under the new modes, so it is reused. Covariances are factored
   by a Cholesky that allows (structurally) singular ones, so draws lie on the support.
3. with ``priors``, theta | x, s, y (independent given x and s; n_ij = #{t: s_{t-1} = i, s_t = j}):
   Pi[i, :] ~ Dirichlet(alpha_i + n_i.) (s_1 keeps its fixed pi0);
   c_j ~ InvGamma(a + rank(Q_j) n_j / 2, b + sum_{t >= 2: s_t = j} w_t' Q_j^+ w_t / 2),
   w_t = x_t - F_j x_{t-1} - b_tj, n_j = #{t >= 2: s_t = j}. This is the exact conditional: w_t
   lies in range(Q_j) (almost surely), where its law is the Gaussian with covariance c_j Q_j,
   so the density with respect to Lebesgue measure on range(Q_j) is
   (2 pi c_j)^(-rank/2) pdet(Q_j)^(-1/2) exp(-w' Q_j^+ w / (2 c_j)); likewise, from the
   densities (2 pi r_j)^(-|o|/2) det(R_j,oo)^(-1/2) exp(-v_o' R_j,oo^-1 v_o / (2 r_j)),
   r_j ~ InvGamma(a + N_j / 2, b + sum_{t: s_t = j} v_t' R_o^-1 v_t / 2),
   v_t = y_t - H_j x_t - e_tj, N_j = sum_{t: s_t = j} |o(t)| the observed coordinates in mode j.

``lp`` = log p(x, s, y_obs, theta), y_obs the observed coordinates, each Gaussian of x taken as
that degenerate density on its support when Q_j or P0_j is singular. The compiled sweeps see
the per-step offsets b_tj, e_tj (computed at the public boundary), not the inputs, so one
compiled sampler serves models with and without inputs of the same T, M, d and o.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.special import gammaln, logsumexp

from ...models.switching import SwitchingParams
from .. import sampling
from .kalman import kalman_update
from .linalg import (
    chol,
    mm,
    mv,
    psd_chol,
    psd_chol_solve,
    psd_factors,
    solve_lower,
    symmetrise,
    transpose,
)


class GibbsPriors(NamedTuple):
    """Checked priors as arrays in the data dtype, with flags for which parameters they cover
    (traced, so runs with and without priors share one compiled sampler).

    Attributes:
        transition_concentration: (M, M) (ones when Pi is fixed).
        dynamics_cov_scale, emission_cov_scale: (2, M), rows (shape, rate) of the inverse-gamma
            priors (ones when fixed).
        sampled: (3,) bool, whether (Pi, c, r) have a prior and are drawn.
    """

    transition_concentration: jax.Array
    dynamics_cov_scale: jax.Array
    emission_cov_scale: jax.Array
    sampled: jax.Array


class GibbsModel(NamedTuple):
    """Chain-independent inputs of a sweep (Q, P0, R = the base covariances of ``params``).

    Attributes:
        params: ``SwitchingParams`` arrays, the nine required fields (the optional ones None:
            the offsets below carry b_j, d_j and the inputs; ``params.dynamics_biases`` is
            not used).
        observations: (T, o), NaN where a coordinate is missing.
        observed: (T, o) bool, the observed coordinates.
        num_observed: (T,) |o(t)|, the number of observed coordinates of y_t (float).
        dynamics_offsets: (T, M, d) b_tj = b_j + B_j u_t of the step into x_t (row 0 unused:
            x_1 ~ N(m0_j, P0_j)).
        emission_offsets: (T, M, o) e_tj = d_j + D_j u_t.
        q_factor, q_pinv: (M, d, d) L with L L' = Q_j, and Q_j^+.
        q_rank, q_logpdet: (M,) rank and log pseudo-determinant of Q_j.
        p0_pinv, p0_rank, p0_logpdet: the same for P0_j.
        r_inv: (T, M, o, o) R_o^-1, the inverse of R_j's block on the observed coordinates
            of y_t embedded with zeros (0 on a wholly missing row).
        r_logdet: (T, M) log det of that block (0 on a wholly missing row).
    """

    params: SwitchingParams
    observations: jax.Array
    observed: jax.Array
    num_observed: jax.Array
    dynamics_offsets: jax.Array
    emission_offsets: jax.Array
    q_factor: jax.Array
    q_pinv: jax.Array
    q_rank: jax.Array
    q_logpdet: jax.Array
    p0_pinv: jax.Array
    p0_rank: jax.Array
    p0_logpdet: jax.Array
    r_inv: jax.Array
    r_logdet: jax.Array


# ----------------------------------------------------------------------------- Gaussian helpers


# Small dense linear algebra is written out in fused jnp operations (``linalg.mm``, ``chol``,
# ...): inside the scans over time the matrices are d x d and o x o, and one custom call per
# factorisation or triangular solve would cost more than the arithmetic. The Kalman update is
# ``kalman.kalman_update``, the one update every filter, smoother and the RBPF use.


def _take(arrays, index):
    """arrays[index] for arrays (M, ...) and an integer index of any shape, as a chain of
    where(index == j, arrays[j], .) over the M modes: under vmap (per-chain modes) indexing
    is a gather, which XLA runs on the CPU far slower than these elementwise selects."""
    index = jnp.asarray(index)
    idx = index.reshape(*index.shape, *(1,) * (arrays.ndim - 1))
    out = jnp.broadcast_to(arrays[0], (*index.shape, *arrays.shape[1:]))
    for j in range(1, arrays.shape[0]):
        out = jnp.where(idx == j, arrays[j], out)
    return out


def _take_each(arrays, index):
    """arrays[t, index[t]] for per-step arrays (T, M, ...) and index (T,) (selects over the M
    modes, as in ``_take``)."""
    idx = jnp.asarray(index).reshape(-1, *(1,) * (arrays.ndim - 2))
    out = arrays[:, 0]
    for j in range(1, arrays.shape[1]):
        out = jnp.where(idx == j, arrays[:, j], out)
    return out


def _pick(values, index):
    """values[..., index] along a last axis of size M, for index of shape values.shape[:-1]
    (selects, as in ``_take``)."""
    picked = [jnp.where(index == j, values[..., j], 0.0) for j in range(values.shape[-1])]
    return functools.reduce(jnp.add, picked)


def _pseudo(cov):
    """(factor, pseudo-inverse, rank, log pseudo-determinant) of PSD matrices (..., d, d)
    (``linalg.psd_factors``), eigenvalues below 10 d eps max(eig) taken as the round-off of a
    singular matrix."""
    return psd_factors(cov, 10.0 * cov.shape[-1] * jnp.finfo(cov.dtype).eps)


def _observed_precisions(emission_covs, observed):
    """(R_o^-1 (T, M, o, o), log det R_oo (T, M)) for the PD R_j (M, o, o) and the observed
    coordinates o(t) of each step (``observed`` (T, o) bool).

    As in ``kalman.mask_emission``, the block is completed by the identity's rows and columns
    at the missing coordinates: [R_oo, 0; 0, I] has the inverse [R_oo^-1, 0; 0, I] and the log
    determinant log det R_oo, and zeroing the identity block embeds R_oo^-1 with zeros. An LU
    inverse, without the eigenvalue tolerance of ``_pseudo``: R_oo is PD at any scale (a
    singular R_j is refused at the boundary), and for a 1 x 1 R_j it is exactly 1 / R_j.
    """
    o = emission_covs.shape[-1]
    both = observed[:, None, :, None] & observed[:, None, None, :]  # (T, 1, o, o)
    completed = jnp.where(both, emission_covs, jnp.eye(o, dtype=emission_covs.dtype))
    inverse = symmetrise(jnp.linalg.inv(completed))
    return jnp.where(both, inverse, 0.0), jnp.linalg.slogdet(completed)[1]


def prepare_model(
    params: SwitchingParams, observations, dynamics_offsets, emission_offsets
) -> GibbsModel:
    """The factorisations every sweep shares (pure; traceable), from the required fields of
    ``params``, the observations (T, o) and the per-step offsets b_tj (T, M, d) and e_tj
    (T, M, o) of the public boundary (``attnbayes.inference.switching.gibbs``)."""
    params = jax.tree.map(jnp.asarray, params)
    observations = jnp.asarray(observations)
    q_factor, q_pinv, q_rank, q_logpdet = _pseudo(params.dynamics_covs)
    _, p0_pinv, p0_rank, p0_logpdet = _pseudo(params.initial_covs)
    observed = ~jnp.isnan(observations)
    r_inv, r_logdet = _observed_precisions(params.emission_covs, observed)
    return GibbsModel(
        params=params,
        observations=observations,
        observed=observed,
        num_observed=jnp.sum(observed, axis=-1).astype(observations.dtype),
        dynamics_offsets=jnp.asarray(dynamics_offsets),
        emission_offsets=jnp.asarray(emission_offsets),
        q_factor=q_factor,
        q_pinv=q_pinv,
        q_rank=q_rank,
        q_logpdet=q_logpdet,
        p0_pinv=p0_pinv,
        p0_rank=p0_rank,
        p0_logpdet=p0_logpdet,
        r_inv=r_inv,
        r_logdet=r_logdet,
    )


def _log_message_integral(mean, cov, omega, nu, omega_factor):
    """log int N(x; m, P) exp(-x' Omega x / 2 + nu' x) dx with U U' = Omega (``omega_factor``):

        -log det(G) / 2 + (g' P g - |chol(G)^-1 U' P g|^2) / 2 - m' Omega m / 2 + nu' m,
        G = I + U' P U,  g = nu - Omega m

    (det(I + P Omega) = det(G), and g' (P^-1 + Omega)^-1 g by Woodbury, valid for singular P
    too). Only the PD matrix G is factored, so P (a candidate's filtered covariance) may be
    singular, and Omega's factor is shared by the M candidates of a step.
    """
    omega_m = mv(omega, mean)
    g = nu - omega_m
    pg = mv(cov, g)
    u_t = transpose(omega_factor)
    eye = jnp.eye(mean.shape[0], dtype=mean.dtype)
    g_chol = chol(symmetrise(eye + mm(mm(u_t, cov), omega_factor)))
    white = solve_lower(g_chol, mv(u_t, pg))
    return (
        -jnp.sum(jnp.log(jnp.diag(g_chol)))
        + 0.5 * (jnp.sum(g * pg) - jnp.sum(white**2))
        - 0.5 * jnp.sum(mean * omega_m)
        + jnp.sum(nu * mean)
    )


def _scaled(model: GibbsModel, theta):
    """Effective (Q (M, d, d), its factor L, R (M, o, o)) at the scales c, r."""
    c, r = theta.dynamics_cov_scale, theta.emission_cov_scale
    p = model.params
    return (
        c[:, None, None] * p.dynamics_covs,
        jnp.sqrt(c)[:, None, None] * model.q_factor,
        r[:, None, None] * p.emission_covs,
    )


# ----------------------------------------------------------------------------- states | modes


def _mode_arrays(model: GibbsModel, q, r, index=None):
    """(m0, P0, F, Q, H, R) of the modes, stacked over M, or taken at ``index`` (the offsets
    b_tj, e_tj are per step: ``model.dynamics_offsets``, ``model.emission_offsets``)."""
    p = model.params
    arrays = (
        p.initial_means,
        p.initial_covs,
        p.dynamics_matrices,
        q,
        p.emission_matrices,
        r,
    )
    return arrays if index is None else tuple(_take(a, index) for a in arrays)


def _predicted(t, mean, cov, m0, p0, f, b, q):
    """Prior of x_t in a mode: N(m0, P0) at t = 0, else the prediction N(F m + b, F P F' + Q)
    from (m, P) (``kalman.kalman_predict``), b = b_tj the offset of the step into x_t."""
    pred_mean = mv(f, mean) + b
    pred_cov = symmetrise(mm(mm(f, cov), transpose(f)) + q)
    first = t == 0
    return jnp.where(first, m0, pred_mean), jnp.where(first, p0, pred_cov)


def kalman_filter_along_modes(modes, model: GibbsModel, q, r):
    """The Kalman filter along a given mode sequence (the forward pass of the states' FFBS):
    filtered means (T, d) and covariances (T, d, d) of x_t | y_{1:t}, s_{1:t}, predicting with
    b_t = b_{t s_t}, then updating by y_t - e_{t s_t} ~ N(H x_t, R) on the observed coordinates
    (``kalman_update`` masks the NaN ones), at the scaled Q (M, d, d) and R (M, o, o).
    (``kalman.kalman_filter_unchecked`` is the filter of a one-mode model.)"""
    p = model.params
    d = p.initial_means.shape[1]
    t_max = modes.shape[0]

    def step(carry, inp):
        t, y, b, e, (m0, p0, f, q_k, h, r_k) = inp
        mean, cov = _predicted(t, *carry, m0, p0, f, b, q_k)
        mean, cov, _ = kalman_update(mean, cov, y - e, h, r_k)
        return (mean, cov), (mean, cov)

    init = (jnp.zeros(d, p.initial_means.dtype), jnp.zeros((d, d), p.initial_means.dtype))
    inputs = (
        jnp.arange(t_max),
        model.observations,
        _take_each(model.dynamics_offsets, modes),
        _take_each(model.emission_offsets, modes),
        _mode_arrays(model, q, r, modes),
    )
    _, out = jax.lax.scan(step, init, inputs)
    return out


def _backward_sample(key, modes, means, covs, model: GibbsModel, q):
    """x_{1:T} | s, y from the filtered moments (m_t, P_t): x_T ~ N(m_T, P_T), then
    x_t | x_{t+1}, y_{1:t} is the Joseph-form Kalman update of N(m_t, P_t) by the
    "observation" x_{t+1} - b_{t+1} ~ N(F x_t, Q) (F, b, Q of s_{t+1}), with gain K = P F' S^- for a
    generalised inverse of S = F P F' + Q (``psd_chol_solve``): S is PD unless P_t and Q are both
    singular (P0 = 0 with singular Q), and a generalised inverse gives the same conditional.
    Draws use ``psd_chol``, so they lie on the support of singular conditionals."""
    p = model.params
    eps = jax.random.normal(key, means.shape, means.dtype)
    last = means[-1] + mv(psd_chol(covs[-1]), eps[-1])
    eye = jnp.eye(means.shape[1], dtype=means.dtype)
    nxt = modes[1:]
    per_step = (
        _take(p.dynamics_matrices, nxt),
        _take_each(model.dynamics_offsets[1:], nxt),
        _take(q, nxt),
    )

    def step(x_next, inp):
        mean, cov, e, (f, b, q_k) = inp
        cov_ft = mm(cov, transpose(f))  # P F'
        gain = transpose(psd_chol_solve(symmetrise(mm(f, cov_ft) + q_k), transpose(cov_ft)))
        mean = mean + mv(gain, x_next - b - mv(f, mean))
        factor = eye - mm(gain, f)
        scale = jnp.max(jnp.diagonal(cov))  # round-off of the conditional is relative to P_t
        cov = symmetrise(
            mm(mm(factor, cov), transpose(factor)) + mm(mm(gain, q_k), transpose(gain))
        )
        x = mean + mv(psd_chol(cov, scale), e)
        return x, x

    inputs = (means[:-1], covs[:-1], eps[:-1], per_step)
    _, xs = jax.lax.scan(step, last, inputs, reverse=True)
    return jnp.concatenate([xs, last[None]])


def sample_states(key, modes, model: GibbsModel, theta):
    """x | s, theta, y by Kalman FFBS."""
    q, _, r = _scaled(model, theta)
    means, covs = kalman_filter_along_modes(modes, model, q, r)
    return _backward_sample(key, modes, means, covs, model, q)


# ----------------------------------------------------------------------------- modes, collapsed


def _backward_messages(modes, model: GibbsModel, theta):
    """Information-form messages B_t(x) = p(y_{t+1:T} | x_t = x, s_{t+1:T}) up to constants:
    Omega (T, d, d), nu (T, d); Omega_T = 0, nu_T = 0 (module docstring). The observation
    terms H' R_o^-1 H and H' R_o^-1 (y_{t+1} - e_{t+1}) (R_o^-1 at the scale r of s_{t+1}, zero
    at the missing coordinates) are formed for all steps at once, outside the scan."""
    p = model.params
    d = p.initial_means.shape[1]
    dtype = p.initial_means.dtype
    eye = jnp.eye(d, dtype=dtype)
    nxt = modes[1:]
    _, q_factor, _ = _scaled(model, theta)
    h = _take(p.emission_matrices, nxt)  # (T - 1, o, d) H of s_{t+1}
    scale = _take(theta.emission_cov_scale, nxt)[:, None, None]
    r_inv = _take_each(model.r_inv[1:], nxt) / scale  # R_o^-1 of y_{t+1}, s_{t+1}
    resid = jnp.where(model.observed[1:], model.observations[1:], 0.0) - _take_each(
        model.emission_offsets[1:], nxt
    )  # y_{t+1} - e_{t+1} (its missing coordinates meet zero rows of R_o^-1)
    r_inv_h = jnp.einsum("tij,tjd->tid", r_inv, h)  # R_o^-1 H
    info = jnp.einsum("tia,tib->tab", h, r_inv_h)  # H' R_o^-1 H
    info_y = jnp.einsum("tid,ti->td", r_inv_h, resid)  # H' R_o^-1 (y - e)

    def step(carry, inp):
        omega, nu = carry
        info_k, info_y_k, l_fac, f, b = inp  # of y_{t+1} and s_{t+1}
        omega = omega + info_k
        nu = nu + info_y_k
        l_omega = mm(transpose(l_fac), omega)
        a_chol = chol(symmetrise(eye + mm(l_omega, l_fac)))
        w = solve_lower(a_chol, l_omega)  # chol(A)^-1 L' Omega~
        omega_mu = symmetrise(omega - mm(transpose(w), w))
        nu_mu = nu - mv(transpose(w), solve_lower(a_chol, mv(transpose(l_fac), nu)))
        out = (
            symmetrise(mm(mm(transpose(f), omega_mu), f)),
            mv(transpose(f), nu_mu - mv(omega_mu, b)),
        )
        return out, out

    init = (jnp.zeros((d, d), dtype), jnp.zeros(d, dtype))
    inputs = (
        info,
        info_y,
        _take(q_factor, nxt),
        _take(p.dynamics_matrices, nxt),
        _take_each(model.dynamics_offsets[1:], nxt),
    )
    _, (omegas, nus) = jax.lax.scan(step, init, inputs, reverse=True)
    return jnp.concatenate([omegas, init[0][None]]), jnp.concatenate([nus, init[1][None]])


def collapsed_pass(key, modes, model: GibbsModel, theta, sample=True):
    """One collapsed single-site sweep over s_1..s_T (Gerlach, Carter & Kohn 2000).

    Returns (new modes (T,), filtered means (T, d) and covariances (T, d, d) under the new
    modes, log p(s_t = j | s_{-t}, theta, y) (T, M) with s_{1:t-1} the new and s_{t+1:T} the
    old modes). With ``sample=False`` every s_t is kept, so row t is the conditional given all
    the other current modes (``sample`` may be traced).
    """
    p = model.params
    m = p.initial_probs.shape[0]
    d = p.initial_means.shape[1]
    t_max = modes.shape[0]
    dtype = p.initial_means.dtype
    modes = modes.astype(jnp.int32)
    q, _, r = _scaled(model, theta)
    omegas, nus = _backward_messages(modes, model, theta)
    log_pi = jnp.log(theta.transition_matrix)
    log_pi0 = jnp.log(p.initial_probs)
    # log Pi[j, s_{t+1}] (T, M), 0 at t = T
    log_pi_next = jnp.concatenate([_take(log_pi.T, modes[1:]), jnp.zeros((1, m), dtype)])
    gumbel = jax.random.gumbel(key, (t_max, m), dtype)  # drawn up front: argmax = categorical
    per_mode = _mode_arrays(model, q, r)

    def candidate(t, y, mean, cov, b, e, m0, p0, f, q_k, h, r_k):
        pred_mean, pred_cov = _predicted(t, mean, cov, m0, p0, f, b, q_k)
        return kalman_update(pred_mean, pred_cov, y - e, h, r_k)

    def step(carry, inp):
        mean, cov, prev = carry
        t, y, b, e, omega, nu, current, log_next, g = inp
        u = psd_chol(omega)  # shared by the M candidates
        in_axes = (None, None, None, None, 0, 0, 0, 0, 0, 0, 0, 0)
        means, covs, log_lik = jax.vmap(candidate, in_axes)(t, y, mean, cov, b, e, *per_mode)
        log_msg = jax.vmap(_log_message_integral, (0, 0, None, None, None))(
            means, covs, omega, nu, u
        )
        logits = jnp.where(t == 0, log_pi0, _take(log_pi, prev)) + log_next + log_lik + log_msg
        log_probs = logits - logsumexp(logits)
        new = jnp.where(sample, jnp.argmax(logits + g).astype(jnp.int32), current)
        mean, cov = _take(means, new), _take(covs, new)
        return (mean, cov, new), (new, mean, cov, log_probs)

    init = (jnp.zeros(d, dtype), jnp.zeros((d, d), dtype), jnp.asarray(0, jnp.int32))
    inputs = (
        jnp.arange(t_max),
        model.observations,
        model.dynamics_offsets,
        model.emission_offsets,
        omegas,
        nus,
        modes,
        log_pi_next,
        gumbel,
    )
    _, (new_modes, means, covs, log_probs) = jax.lax.scan(step, init, inputs)
    return new_modes, means, covs, log_probs


# ----------------------------------------------------------------------------- log densities


def _log_terms(states, model: GibbsModel, theta):
    """Per-mode log densities and quadratic forms of the current states.

    Returns (log_x (T, M): log N(x_1; m0_j, P0_j) at t = 1 and log N(x_t; F_j x_{t-1} + b_tj,
    c_j Q_j) after (degenerate densities on the support for singular covariances), log_y (T, M):
    log N(y_t,o; (H_j x_t + e_tj)_o, r_j R_j,oo) over the observed coordinates o of y_t,

        -(v_t' R_o^-1 v_t / r_j + |o| log(2 pi r_j) + log det R_j,oo) / 2,

    (0 on a wholly missing row), dyn_quad (T - 1, M): w_t' Q_j^+ w_t, emis_quad (T, M):
    v_t' R_o^-1 v_t with the base R_j), w_t = x_t - F_j x_{t-1} - b_tj, v_t = y_t - H_j x_t - e_tj.
    """
    p = model.params
    c, r = theta.dynamics_cov_scale, theta.emission_cov_scale
    log_2pi = jnp.log(2.0 * jnp.pi)
    w0 = states[0][None, :] - p.initial_means  # (M, d)
    quad0 = jnp.einsum("mi,mij,mj->m", w0, model.p0_pinv, w0)
    log_x0 = -0.5 * (quad0 + model.p0_rank * log_2pi + model.p0_logpdet)
    pred = jnp.einsum("mij,tj->tmi", p.dynamics_matrices, states[:-1]) + model.dynamics_offsets[1:]
    w = states[1:, None, :] - pred  # (T - 1, M, d)
    dyn_quad = jnp.einsum("tmi,mij,tmj->tm", w, model.q_pinv, w)
    log_dyn = -0.5 * (dyn_quad / c + model.q_rank * (log_2pi + jnp.log(c)) + model.q_logpdet)
    y = jnp.where(model.observed, model.observations, 0.0)
    v = y[:, None, :] - jnp.einsum("moi,ti->tmo", p.emission_matrices, states)
    v = v - model.emission_offsets  # (T, M, o); 0 rows and columns of R_o^-1 where missing
    emis_quad = jnp.einsum("tmi,tmij,tmj->tm", v, model.r_inv, v)
    num_observed = model.num_observed[:, None]
    log_y = -0.5 * (emis_quad / r + num_observed * (log_2pi + jnp.log(r)) + model.r_logdet)
    log_x = jnp.concatenate([log_x0[None], log_dyn])
    return log_x, log_y, dyn_quad, emis_quad


def _log_inv_gamma(x, shape, rate):
    return shape * jnp.log(rate) - gammaln(shape) - (shape + 1.0) * jnp.log(x) - rate / x


def _log_prior(theta, priors: GibbsPriors):
    """log of the priors' densities at theta (0 for fixed parameters)."""
    alpha = priors.transition_concentration
    log_pi = jnp.log(theta.transition_matrix)
    log_dirichlet = jnp.sum(
        gammaln(jnp.sum(alpha, -1))
        - jnp.sum(gammaln(alpha), -1)
        + jnp.sum(jnp.where(alpha == 1.0, 0.0, (alpha - 1.0) * log_pi), -1)
    )
    dyn, emis = priors.dynamics_cov_scale, priors.emission_cov_scale
    terms = jnp.stack(
        [
            log_dirichlet,
            jnp.sum(_log_inv_gamma(theta.dynamics_cov_scale, dyn[0], dyn[1])),
            jnp.sum(_log_inv_gamma(theta.emission_cov_scale, emis[0], emis[1])),
        ]
    )
    return jnp.sum(jnp.where(priors.sampled, terms, 0.0))


def log_joint(modes, states, model: GibbsModel, theta, priors: GibbsPriors):
    """log p(x, s, y, theta)."""
    log_x, log_y, _, _ = _log_terms(states, model, theta)
    log_pi = jnp.log(theta.transition_matrix)
    log_s = _pick(jnp.log(model.params.initial_probs), modes[0]) + jnp.sum(
        _pick(_take(log_pi, modes[:-1]), modes[1:])
    )
    return log_s + jnp.sum(_pick(log_x + log_y, modes)) + _log_prior(theta, priors)


# ----------------------------------------------------------------------------- modes, conditional


def conditional_modes(key, states, model: GibbsModel, theta):
    """s | x, theta, y by HMM forward filtering, backward sampling (needs PD Q_j and P0_j)."""
    log_x, log_y, _, _ = _log_terms(states, model, theta)
    log_e = log_x + log_y  # (T, M)
    log_pi = jnp.log(theta.transition_matrix)

    def forward(alpha, le):
        alpha = le + logsumexp(alpha[:, None] + log_pi, axis=0)
        return alpha, alpha

    alpha0 = jnp.log(model.params.initial_probs) + log_e[0]
    _, alphas = jax.lax.scan(forward, alpha0, log_e[1:])
    alphas = jnp.concatenate([alpha0[None], alphas])
    gumbel = jax.random.gumbel(key, alphas.shape, alphas.dtype)  # argmax = categorical draw
    last = jnp.argmax(alphas[-1] + gumbel[-1]).astype(jnp.int32)

    def backward(nxt, inp):
        alpha, g = inp
        s = jnp.argmax(alpha + _take(log_pi.T, nxt) + g).astype(jnp.int32)
        return s, s

    _, modes = jax.lax.scan(backward, last, (alphas[:-1], gumbel[:-1]), reverse=True)
    return jnp.concatenate([modes, last[None]])


# ----------------------------------------------------------------------------- parameters


def parameter_laws(modes, states, model: GibbsModel, theta, priors: GibbsPriors):
    """The laws of theta | x, s, y (module docstring), whether or not a prior covers them.

    Returns (concentration (M, M): Pi[i, :] ~ Dirichlet(alpha_i + n_i.), dynamics (2, M): the
    (shape, rate) a + rank(Q_j) n_j / 2, b + sum_{t >= 2: s_t = j} w_t' Q_j^+ w_t / 2 of c_j,
    emission (2, M): a + N_j / 2, b + sum_{t: s_t = j} v_t' R_o^-1 v_t / 2 of r_j, N_j the
    observed coordinates of the steps in mode j).
    """
    m = model.params.initial_probs.shape[0]
    one_hot = jax.nn.one_hot(modes, m, dtype=states.dtype)  # (T, M)
    _, _, dyn_quad, emis_quad = _log_terms(states, model, theta)
    counts = one_hot[:-1].T @ one_hot[1:]
    dynamics = jnp.stack(
        [
            priors.dynamics_cov_scale[0] + 0.5 * model.q_rank * jnp.sum(one_hot[1:], axis=0),
            priors.dynamics_cov_scale[1] + 0.5 * jnp.sum(one_hot[1:] * dyn_quad, axis=0),
        ]
    )
    emission = jnp.stack(
        [
            priors.emission_cov_scale[0]
            + 0.5 * jnp.sum(one_hot * model.num_observed[:, None], axis=0),
            priors.emission_cov_scale[1] + 0.5 * jnp.sum(one_hot * emis_quad, axis=0),
        ]
    )
    return priors.transition_concentration + counts, dynamics, emission


def sample_parameters(
    key, modes, states, model: GibbsModel, theta, priors: GibbsPriors, update=True
):
    """theta | x, s, y: Dirichlet rows of Pi and inverse-gamma scales c_j, r_j (laws of
    ``parameter_laws``); fixed parameters (and all of them unless ``update``, traced) are
    returned unchanged."""
    m = model.params.initial_probs.shape[0]
    concentration, dynamics, emission = parameter_laws(modes, states, model, theta, priors)
    shapes = jnp.concatenate([concentration.ravel(), dynamics[0], emission[0]])
    log_g = sampling.log_gamma(key, shapes)  # one rejection loop for all of them
    log_g_pi = log_g[: m * m].reshape(m, m)
    trans = jnp.exp(log_g_pi - logsumexp(log_g_pi, axis=-1, keepdims=True))
    c = jnp.exp(jnp.log(dynamics[1]) - log_g[m * m : m * m + m])
    r = jnp.exp(jnp.log(emission[1]) - log_g[m * m + m :])
    sampled = priors.sampled & update
    return theta._replace(
        transition_matrix=jnp.where(sampled[0], trans, theta.transition_matrix),
        dynamics_cov_scale=jnp.where(sampled[1], c, theta.dynamics_cov_scale),
        emission_cov_scale=jnp.where(sampled[2], r, theta.emission_cov_scale),
    )


# ----------------------------------------------------------------------------- kernel


# the mode step of a sweep, traced (one compiled sweep for both samplers and the initial one)
MODE_INDEX = {"collapsed": 0, "conditional": 1}
KEEP_MODES = 2  # the initial sweep: modes kept, x | s, y drawn, theta kept


def _mode_step(key, state, model: GibbsModel, mode_index):
    """New modes and the Kalman filter (means (T, d), covs (T, d, d)) under them.

    ``mode_index`` (traced, so both samplers and the initial sweep share one compiled sweep):
    0 collapsed (its forward pass is the filter), 1 conditional (HMM FFBS of s | x, then the
    filter), 2 keep the modes (then the filter).
    """
    q, _, r = _scaled(model, state)

    def collapsed(_):
        modes, means, covs, _ = collapsed_pass(key, state.modes, model, state)
        return modes, means, covs

    def filtered(_):
        modes = jax.lax.cond(
            mode_index == 1,
            lambda: conditional_modes(key, state.states, model, state),
            lambda: state.modes.astype(jnp.int32),
        )
        return modes, *kalman_filter_along_modes(modes, model, q, r)

    return jax.lax.cond(mode_index == 0, collapsed, filtered, None)


def sweep(key, state, model: GibbsModel, priors: GibbsPriors, mode_index, update_theta):
    """One sweep: s | theta, y (collapsed) or s | x, theta, y (or s kept); x | s, theta, y by
    FFBS; theta | x, s (with priors, when ``update_theta``); lp of the new state.

    ``state``: a ``SwitchingGibbsState`` (``attnbayes.inference.switching.gibbs``; any
    NamedTuple with its fields), returned as the same type; ``mode_index``: ``MODE_INDEX`` of
    the mode sampler, or ``KEEP_MODES`` (both traced)."""
    key_s, key_x, key_theta = jax.random.split(key, 3)
    modes, means, covs = _mode_step(key_s, state, model, mode_index)
    q, _, _ = _scaled(model, state)
    states = _backward_sample(key_x, modes, means, covs, model, q)
    theta = sample_parameters(key_theta, modes, states, model, state, priors, update_theta)
    lp = log_joint(modes, states, model, theta, priors)
    return theta._replace(modes=modes, states=states, lp=lp)


@functools.partial(jax.jit, static_argnames=("num_steps",))
def prior_modes(key, initial_probs, transition_matrix, num_steps):
    """(num_steps,) a draw of s_{1:T} from the Markov prior."""
    key0, key_rest = jax.random.split(key)
    s0 = jax.random.categorical(key0, jnp.log(initial_probs)).astype(jnp.int32)

    def step(s, k):
        s = jax.random.categorical(k, jnp.log(transition_matrix[s])).astype(jnp.int32)
        return s, s

    _, rest = jax.lax.scan(step, s0, jax.random.split(key_rest, num_steps - 1))
    return jnp.concatenate([s0[None], rest])


__all__ = [
    "KEEP_MODES",
    "MODE_INDEX",
    "GibbsModel",
    "GibbsPriors",
    "collapsed_pass",
    "conditional_modes",
    "kalman_filter_along_modes",
    "log_joint",
    "parameter_laws",
    "prepare_model",
    "prior_modes",
    "sample_parameters",
    "sample_states",
    "sweep",
]
