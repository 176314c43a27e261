"""Gibbs sampling for the switching linear-Gaussian state-space model.

Carter and Kohn (1994) for the states, Kim and Nelson (1999, ch. 9) for the modes; the exact
sampler the note "Attention as GPB2/IMM message passing" (section 4) approximates.

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
import time
from typing import TYPE_CHECKING, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln, logsumexp

from ... import validation
from ...models.switching import (
    SwitchingParams,
    SwitchingPriors,
    check_priors,
    step_offsets,
    switching_dims,
)
from .. import sampling
from .kalman import (
    _chol,
    _mm,
    _mv,
    _solve_lower,
    _solve_lower_t,
    _t,
    check_inputs,
    kalman_update,
    symmetrise,
)

if TYPE_CHECKING:  # xarray is imported where used: importing the algorithms stays lean
    import xarray as xr

MODE_SAMPLERS = ("collapsed", "conditional")
INITS = ("prior",)


class SwitchingGibbsState(NamedTuple):
    """State of one chain of the switching Gibbs sampler.

    Attributes:
        modes: (T,) int32 s_t in 0..M-1.
        states: (T, d) x_t.
        transition_matrix: (M, M) Pi.
        dynamics_cov_scale: (M,) c_j (Q_j = c_j params.dynamics_covs[j]); ones when fixed.
        emission_cov_scale: (M,) r_j (R_j = r_j params.emission_covs[j]); ones when fixed.
        lp: () log p(x, s, y, theta).
    """

    modes: jax.Array
    states: jax.Array
    transition_matrix: jax.Array
    dynamics_cov_scale: jax.Array
    emission_cov_scale: jax.Array
    lp: jax.Array


class SwitchingGibbsInfo(NamedTuple):
    """What one sweep of ``switching_gibbs_step`` did.

    Attributes:
        num_mode_changes: () int32, the steps t whose mode s_t the sweep changed (a measure of
            how far the mode sequence moves per sweep).
    """

    num_mode_changes: jax.Array


class _Priors(NamedTuple):
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


class _Model(NamedTuple):
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


# Small dense linear algebra is written out in fused jnp operations (``kalman._mm``, ``_chol``,
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


def _eig_psd(cov):
    """Eigen-decomposition (eig, vec) of symmetric PSD matrices (..., d, d), eigenvalues below
    10 d eps max(eig) set to zero (round-off of a singular matrix)."""
    d = cov.shape[-1]
    eig, vec = jnp.linalg.eigh(symmetrise(cov))
    tol = 10.0 * d * jnp.finfo(cov.dtype).eps * jnp.max(eig, axis=-1, keepdims=True)
    return jnp.where(eig > tol, eig, 0.0), vec


def _psd_factor(cov, scale=None):
    """Lower-triangular C (d, d) with C C' = cov for a symmetric PSD cov, singular allowed.

    Cholesky, column by column, with each pivot at or below 10 d eps ``scale`` taken as zero
    and its column zeroed (default scale max(diag(cov)); pass the scale of the matrix cov was
    computed from when cov itself may be all round-off, e.g. a conditional covariance that is
    zero). Exact zeros of a structurally singular matrix (rank-deficient Q, P0 = 0, the
    information matrices of partly observed states) stay zero, so the factor reproduces cov
    to round-off and draws C z lie on its support. No pivoting: a numerically rank-deficient
    but otherwise ill-conditioned matrix can lose accuracy in the deficient direction (a
    pivoted variant costs several times more inside the scans). Unlike ``eigh`` (a LAPACK
    call per matrix) it is a few fused vector operations for small d.
    """
    d = cov.shape[-1]
    a = symmetrise(cov)
    if scale is None:
        scale = functools.reduce(jnp.maximum, [a[i, i] for i in range(d)])
    tol = 10.0 * d * jnp.finfo(cov.dtype).eps * scale
    below = jnp.arange(d)
    cols = []
    for j in range(d):
        v = a[:, j]
        for k in range(j):
            v = v - cols[k] * cols[k][j]
        ok = v[j] > tol
        col = v * jax.lax.rsqrt(jnp.where(ok, v[j], 1.0))
        cols.append(jnp.where(ok & (below >= j), col, 0.0))
    return jnp.stack(cols, axis=1)


def _psd_solve(cov, b):
    """cov^- b for PSD cov (d, d) and b (d, k), with cov^- = [(L11 L11')^-1, 0; 0, 0] in the
    pivots that ``_psd_factor`` keeps (L11 their block), a generalised inverse
    (cov cov^- cov = cov). Conditioning a Gaussian on a singular block needs no more: the
    residual and the cross-covariance lie in its range."""
    chol = _psd_factor(cov)
    ok = jnp.diagonal(chol) > 0
    chol = chol + jnp.diag(jnp.where(ok, 0.0, 1.0))  # unit pivots for the dropped ones ...
    keep = ok.astype(cov.dtype)[:, None]  # ... whose unknowns are set to zero
    return keep * _solve_lower_t(chol, keep * _solve_lower(chol, b))


def _pseudo(cov):
    """(factor, pseudo-inverse, rank, log pseudo-determinant) of PSD matrices (..., d, d)."""
    eig, vec = _eig_psd(cov)
    pos = eig > 0
    inv_eig = jnp.where(pos, 1.0 / jnp.where(pos, eig, 1.0), 0.0)
    pinv = symmetrise((vec * inv_eig[..., None, :]) @ jnp.swapaxes(vec, -1, -2))
    rank = jnp.sum(pos, axis=-1).astype(cov.dtype)
    logpdet = jnp.sum(jnp.where(pos, jnp.log(jnp.where(pos, eig, 1.0)), 0.0), axis=-1)
    return vec * jnp.sqrt(eig)[..., None, :], pinv, rank, logpdet


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


def _prepare(params: SwitchingParams, observations, dynamics_offsets, emission_offsets) -> _Model:
    """The factorisations every sweep shares (pure; traceable), from the required fields of
    ``params``, the observations (T, o) and the per-step offsets b_tj (T, M, d) and e_tj
    (T, M, o) of ``_check_data``."""
    params = jax.tree.map(jnp.asarray, params)
    observations = jnp.asarray(observations)
    q_factor, q_pinv, q_rank, q_logpdet = _pseudo(params.dynamics_covs)
    _, p0_pinv, p0_rank, p0_logpdet = _pseudo(params.initial_covs)
    observed = ~jnp.isnan(observations)
    r_inv, r_logdet = _observed_precisions(params.emission_covs, observed)
    return _Model(
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
    omega_m = _mv(omega, mean)
    g = nu - omega_m
    pg = _mv(cov, g)
    u_t = _t(omega_factor)
    eye = jnp.eye(mean.shape[0], dtype=mean.dtype)
    chol = _chol(symmetrise(eye + _mm(_mm(u_t, cov), omega_factor)))
    white = _solve_lower(chol, _mv(u_t, pg))
    return (
        -jnp.sum(jnp.log(jnp.diag(chol)))
        + 0.5 * (jnp.sum(g * pg) - jnp.sum(white**2))
        - 0.5 * jnp.sum(mean * omega_m)
        + jnp.sum(nu * mean)
    )


def _scaled(model: _Model, theta):
    """Effective (Q (M, d, d), its factor L, R (M, o, o)) at the scales c, r."""
    c, r = theta.dynamics_cov_scale, theta.emission_cov_scale
    p = model.params
    return (
        c[:, None, None] * p.dynamics_covs,
        jnp.sqrt(c)[:, None, None] * model.q_factor,
        r[:, None, None] * p.emission_covs,
    )


# ----------------------------------------------------------------------------- states | modes


def _mode_arrays(model: _Model, q, r, index=None):
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
    pred_mean = _mv(f, mean) + b
    pred_cov = symmetrise(_mm(_mm(f, cov), _t(f)) + q)
    first = t == 0
    return jnp.where(first, m0, pred_mean), jnp.where(first, p0, pred_cov)


def _kalman_filter(modes, model: _Model, q, r):
    """Filtered means (T, d) and covariances (T, d, d) of x_t | y_{1:t}, s_{1:t}: predict with
    b_t = b_{t s_t}, then update by y_t - e_{t s_t} ~ N(H x_t, R) on the observed coordinates
    (``kalman_update`` masks the NaN ones)."""
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


def _backward_sample(key, modes, means, covs, model: _Model, q):
    """x_{1:T} | s, y from the filtered moments (m_t, P_t): x_T ~ N(m_T, P_T), then
    x_t | x_{t+1}, y_{1:t} is the Joseph-form Kalman update of N(m_t, P_t) by the
    "observation" x_{t+1} - b_{t+1} ~ N(F x_t, Q) (F, b, Q of s_{t+1}), with gain K = P F' S^- for a
    generalised inverse of S = F P F' + Q (``_psd_solve``): S is PD unless P_t and Q are both
    singular (P0 = 0 with singular Q), and a generalised inverse gives the same conditional.
    Draws use ``_psd_factor``, so they lie on the support of singular conditionals."""
    p = model.params
    eps = jax.random.normal(key, means.shape, means.dtype)
    last = means[-1] + _mv(_psd_factor(covs[-1]), eps[-1])
    eye = jnp.eye(means.shape[1], dtype=means.dtype)
    nxt = modes[1:]
    per_step = (
        _take(p.dynamics_matrices, nxt),
        _take_each(model.dynamics_offsets[1:], nxt),
        _take(q, nxt),
    )

    def step(x_next, inp):
        mean, cov, e, (f, b, q_k) = inp
        cov_ft = _mm(cov, _t(f))  # P F'
        gain = _t(_psd_solve(symmetrise(_mm(f, cov_ft) + q_k), _t(cov_ft)))
        mean = mean + _mv(gain, x_next - b - _mv(f, mean))
        factor = eye - _mm(gain, f)
        scale = jnp.max(jnp.diagonal(cov))  # round-off of the conditional is relative to P_t
        cov = symmetrise(_mm(_mm(factor, cov), _t(factor)) + _mm(_mm(gain, q_k), _t(gain)))
        x = mean + _mv(_psd_factor(cov, scale), e)
        return x, x

    inputs = (means[:-1], covs[:-1], eps[:-1], per_step)
    _, xs = jax.lax.scan(step, last, inputs, reverse=True)
    return jnp.concatenate([xs, last[None]])


def _sample_states(key, modes, model: _Model, theta):
    """x | s, theta, y by Kalman FFBS."""
    q, _, r = _scaled(model, theta)
    means, covs = _kalman_filter(modes, model, q, r)
    return _backward_sample(key, modes, means, covs, model, q)


# ----------------------------------------------------------------------------- modes, collapsed


def _backward_messages(modes, model: _Model, theta):
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
        l_omega = _mm(_t(l_fac), omega)
        a_chol = _chol(symmetrise(eye + _mm(l_omega, l_fac)))
        w = _solve_lower(a_chol, l_omega)  # chol(A)^-1 L' Omega~
        omega_mu = symmetrise(omega - _mm(_t(w), w))
        nu_mu = nu - _mv(_t(w), _solve_lower(a_chol, _mv(_t(l_fac), nu)))
        out = (
            symmetrise(_mm(_mm(_t(f), omega_mu), f)),
            _mv(_t(f), nu_mu - _mv(omega_mu, b)),
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


def _collapsed_pass(key, modes, model: _Model, theta, sample=True):
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
        u = _psd_factor(omega)  # shared by the M candidates
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


def _log_terms(states, model: _Model, theta):
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


def _log_prior(theta, priors: _Priors):
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


def _log_joint(modes, states, model: _Model, theta, priors: _Priors):
    """log p(x, s, y, theta)."""
    log_x, log_y, _, _ = _log_terms(states, model, theta)
    log_pi = jnp.log(theta.transition_matrix)
    log_s = _pick(jnp.log(model.params.initial_probs), modes[0]) + jnp.sum(
        _pick(_take(log_pi, modes[:-1]), modes[1:])
    )
    return log_s + jnp.sum(_pick(log_x + log_y, modes)) + _log_prior(theta, priors)


# ----------------------------------------------------------------------------- modes, conditional


def _conditional_modes(key, states, model: _Model, theta):
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


def _parameter_laws(modes, states, model: _Model, theta, priors: _Priors):
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


def _sample_parameters(key, modes, states, model: _Model, theta, priors: _Priors, update=True):
    """theta | x, s, y: Dirichlet rows of Pi and inverse-gamma scales c_j, r_j (laws of
    ``_parameter_laws``); fixed parameters (and all of them unless ``update``, traced) are
    returned unchanged."""
    m = model.params.initial_probs.shape[0]
    concentration, dynamics, emission = _parameter_laws(modes, states, model, theta, priors)
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


_MODE_INDEX = {"collapsed": 0, "conditional": 1}
_KEEP_MODES = 2  # the initial sweep: modes kept, x | s, y drawn, theta kept


def _initial_state(modes, p: SwitchingParams) -> SwitchingGibbsState:
    """modes (T,), states 0 (to be drawn by a sweep that keeps the modes), theta at
    ``params`` (scales 1), lp 0."""
    m = p.initial_probs.shape[0]
    dtype = p.initial_means.dtype
    return SwitchingGibbsState(
        modes=modes.astype(jnp.int32),
        states=jnp.zeros((modes.shape[0], p.initial_means.shape[1]), dtype),
        transition_matrix=p.transition_matrix,
        dynamics_cov_scale=jnp.ones(m, dtype),
        emission_cov_scale=jnp.ones(m, dtype),
        lp=jnp.zeros((), dtype),
    )


def _mode_step(key, state: SwitchingGibbsState, model: _Model, mode_index):
    """New modes and the Kalman filter (means (T, d), covs (T, d, d)) under them.

    ``mode_index`` (traced, so both samplers and the initial sweep share one compiled sweep):
    0 collapsed (its forward pass is the filter), 1 conditional (HMM FFBS of s | x, then the
    filter), 2 keep the modes (then the filter).
    """
    q, _, r = _scaled(model, state)

    def collapsed(_):
        modes, means, covs, _ = _collapsed_pass(key, state.modes, model, state)
        return modes, means, covs

    def filtered(_):
        modes = jax.lax.cond(
            mode_index == 1,
            lambda: _conditional_modes(key, state.states, model, state),
            lambda: state.modes.astype(jnp.int32),
        )
        return modes, *_kalman_filter(modes, model, q, r)

    return jax.lax.cond(mode_index == 0, collapsed, filtered, None)


def _sweep(
    key, state: SwitchingGibbsState, model: _Model, priors: _Priors, mode_index, update_theta
):
    """One sweep: s | theta, y (collapsed) or s | x, theta, y (or s kept); x | s, theta, y by
    FFBS; theta | x, s (with priors, when ``update_theta``); lp of the new state."""
    key_s, key_x, key_theta = jax.random.split(key, 3)
    modes, means, covs = _mode_step(key_s, state, model, mode_index)
    q, _, _ = _scaled(model, state)
    states = _backward_sample(key_x, modes, means, covs, model, q)
    theta = _sample_parameters(key_theta, modes, states, model, state, priors, update_theta)
    lp = _log_joint(modes, states, model, theta, priors)
    return theta._replace(modes=modes, states=states, lp=lp)


@jax.jit
def _step_jit(key, state, data, priors, mode_index, update_theta):
    """One sweep on ``data`` = (params, observations, dynamics_offsets, emission_offsets) of
    ``_check_data``."""
    return _sweep(key, state, _prepare(*data), priors, mode_index, update_theta)


@functools.partial(jax.jit, static_argnames=("num_steps",))
def _prior_modes(key, initial_probs, transition_matrix, num_steps):
    """(num_steps,) a draw of s_{1:T} from the Markov prior."""
    key0, key_rest = jax.random.split(key)
    s0 = jax.random.categorical(key0, jnp.log(initial_probs)).astype(jnp.int32)

    def step(s, k):
        s = jax.random.categorical(k, jnp.log(transition_matrix[s])).astype(jnp.int32)
        return s, s

    _, rest = jax.lax.scan(step, s0, jax.random.split(key_rest, num_steps - 1))
    return jnp.concatenate([s0[None], rest])


# ----------------------------------------------------------------------------- checks


def _check_mode_sampler(mode_sampler) -> str:
    if not isinstance(mode_sampler, str) or mode_sampler not in MODE_SAMPLERS:
        raise ValueError(f"mode_sampler: unknown {mode_sampler!r}; known: {list(MODE_SAMPLERS)}")
    return mode_sampler


def _check_emission_definite(emission_covs) -> None:
    """The Gibbs sampler needs PD R_j: its r_j update and backward messages use R_j^-1."""
    eig = np.linalg.eigvalsh(np.asarray(emission_covs, dtype=np.float64))
    singular = np.any(eig <= 1e-12 * np.maximum(eig[..., -1:], 1e-300), axis=-1)
    if np.any(singular):
        raise ValueError(
            "params.emission_covs: the Gibbs sampler needs positive definite emission "
            "covariances R_j (its r_j update and backward messages use R_j^-1); R_j is "
            f"singular for mode(s) {np.flatnonzero(singular).tolist()} (the filters and "
            "smoothers accept positive semi-definite R_j)"
        )


@jax.jit
def _offsets_over_time(params: SwitchingParams, inputs):
    """(b_tj (T, M, d), e_tj (T, M, o)) = ``models.switching.step_offsets`` at every u_t."""
    return jax.vmap(step_offsets, in_axes=(None, 0))(params, inputs)


def _check_data(params, observations, inputs=None):
    """The public boundary: ``kalman.check_inputs`` (value checks when concrete), PD R_j (when
    concrete), and the per-step offsets. Returns (params with the optional fields None,
    observations (T, o), dynamics_offsets (T, M, d), emission_offsets (T, M, o)), the arguments
    of ``_prepare``: the compiled sweeps see the offsets, not the inputs and their weights, so
    one compiled sampler serves models with and without inputs (any k) of the same shapes."""
    params, obs, inputs = check_inputs(params, observations, inputs=inputs)
    if _is_concrete(params.emission_covs):
        _check_emission_definite(params.emission_covs)
    dynamics_offsets, emission_offsets = _offsets_over_time(params, inputs)
    required = params._replace(
        emission_biases=None, dynamics_input_weights=None, emission_input_weights=None
    )
    return required, obs, dynamics_offsets, emission_offsets


def _check_definite(params: SwitchingParams) -> None:
    """The conditional mode sampler needs densities of x: PD Q_j and P0_j."""
    for field in ("dynamics_covs", "initial_covs"):
        covs = np.asarray(getattr(params, field), dtype=np.float64)
        eig = np.linalg.eigvalsh(covs)
        if np.any(eig <= 1e-12 * np.maximum(eig[..., -1:], 1e-300)):
            raise ValueError(
                f"params.{field}: mode_sampler='conditional' needs positive definite "
                "covariances (given the states, a singular Q_j fixes the modes, so s | x "
                "cannot mix); use mode_sampler='collapsed'"
            )


def _check_priors(priors, m: int, dtype) -> _Priors:
    """``SwitchingPriors`` (or None), checked by ``attnbayes.models.switching.check_priors``, as
    ``_Priors`` of arrays in ``dtype`` (shape and rate broadcast to (M,))."""
    checked = check_priors("priors", priors, m)

    def pair(value):
        if value is None:
            return jnp.ones((2, m), dtype)
        return jnp.stack([jnp.broadcast_to(jnp.asarray(v, dtype), (m,)) for v in value])

    alpha = checked.transition_concentration
    return _Priors(
        jnp.ones((m, m), dtype) if alpha is None else jnp.asarray(alpha, dtype),
        pair(checked.dynamics_cov_scale),
        pair(checked.emission_cov_scale),
        jnp.asarray([f is not None for f in checked]),
    )


def _check_modes(name: str, modes, shape: tuple[int, ...], m: int):
    if validation.is_traced(modes):  # static checks only: the labels are unknown
        if not jnp.issubdtype(modes.dtype, jnp.integer):
            raise ValueError(f"{name}: expected integer mode labels, got dtype {modes.dtype}")
        if tuple(modes.shape) != shape:
            raise ValueError(f"{name}: expected shape {shape}, got {tuple(modes.shape)}")
        return modes.astype(jnp.int32)
    arr = np.asarray(modes)
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)
    ):
        raise ValueError(f"{name}: expected integer mode labels, got dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.floating) and not np.all(
        np.isfinite(arr) & (arr == np.round(arr))
    ):
        raise ValueError(f"{name}: expected integer mode labels")
    if arr.shape != shape:
        raise ValueError(f"{name}: expected shape {shape}, got {arr.shape}")
    if np.any(arr < 0) or np.any(arr >= m):
        raise ValueError(f"{name}: labels must be in 0..{m - 1}")
    return arr.astype(np.int32)


def _is_concrete(*trees) -> bool:
    return not any(validation.is_traced(leaf) for tree in trees for leaf in jax.tree.leaves(tree))


# ----------------------------------------------------------------------------- public kernel


def switching_gibbs_init(
    key: jax.Array,
    params: SwitchingParams,
    observations,
    *,
    modes=None,
    priors: SwitchingPriors | None = None,
    inputs=None,
) -> SwitchingGibbsState:
    """Initial state of one chain: x ~ p(x | s, y) at ``modes`` (default: s drawn from the
    Markov prior (pi0, Pi)), Pi = ``params.transition_matrix``, scales c = r = 1.

    Args:
        key: a ``jax.random`` key.
        params: ``SwitchingParams`` (PD ``emission_covs``).
        observations: (T, o); a NaN coordinate is missing (a NaN row: the whole step).
        modes: optional (T,) integer labels in 0..M-1.
        priors: optional ``attnbayes.models.switching.SwitchingPriors`` (for ``lp``).
        inputs: (T, k) u_{1:T}, required when ``params`` has input weights.

    ``jit``- and ``vmap``-able over the key, ``params``, ``observations``, ``inputs`` and
    ``modes`` (only the static checks run on what is traced: call ``check_params`` on concrete
    values first); not differentiable (the state is a random draw).
    """
    validation.check_key("key", key)
    data = _check_data(params, observations, inputs)
    params, obs = data[:2]
    m = params.initial_probs.shape[0]
    prior = _check_priors(priors, m, obs.dtype)
    key_s, key_x = jax.random.split(key)
    if modes is None:
        s = _prior_modes(key_s, params.initial_probs, params.transition_matrix, obs.shape[0])
    else:
        s = jnp.asarray(_check_modes("modes", modes, (obs.shape[0],), m))
    state = _initial_state(s, jax.tree.map(jnp.asarray, params))
    # the sweep that keeps the modes and theta: the same compiled function as the steps
    return _step_jit(key_x, state, data, prior, _KEEP_MODES, False)


def switching_gibbs_step(
    key: jax.Array,
    state: SwitchingGibbsState,
    params: SwitchingParams,
    observations,
    *,
    priors: SwitchingPriors | None = None,
    mode_sampler: str = "collapsed",
    inputs=None,
) -> tuple[SwitchingGibbsState, SwitchingGibbsInfo]:
    """One Gibbs sweep (module docstring): modes, then states x | s, theta, y, then (with
    ``priors``) theta | x, s, y; returns (state, info), as BlackJAX kernels do. Pure and
    jit-able; ``mode_sampler`` is static.

    ``params``, ``observations`` and ``inputs`` are validated on every call (as in
    ``run_switching_gibbs``); under ``jax.jit`` or ``jax.vmap`` only the static checks (shapes,
    dtypes) run on what is traced, so call ``attnbayes.models.switching.check_params`` on
    concrete parameters first. Not differentiable: the modes, states and parameters are
    random draws (the mode samplers draw discrete modes).

    Args:
        key: a ``jax.random`` key.
        state: ``SwitchingGibbsState`` (from ``switching_gibbs_init`` or a previous step).
        params, observations: as for ``run_switching_gibbs``.
        priors: optional ``attnbayes.models.switching.SwitchingPriors``; without it theta stays
            fixed.
        mode_sampler: "collapsed" (default) or "conditional" (needs PD Q_j).
        inputs: (T, k) u_{1:T}, required when ``params`` has input weights.
    """
    mode_sampler = _check_mode_sampler(mode_sampler)
    if not isinstance(state, SwitchingGibbsState):
        raise ValueError(f"state: expected a SwitchingGibbsState, got {type(state).__name__}")
    validation.check_key("key", key)
    data = _check_data(params, observations, inputs)  # value checks when concrete
    params, observations = data[:2]
    if mode_sampler == "conditional" and _is_concrete(params.dynamics_covs, params.initial_covs):
        _check_definite(params)
    m = np.shape(params.initial_probs)[0]
    t_max, d = np.shape(observations)[0], np.shape(params.initial_means)[1]
    if np.shape(state.modes) != (t_max,) or np.shape(state.states) != (t_max, d):
        raise ValueError(
            f"state: expected modes ({t_max},) and states ({t_max}, {d}), got "
            f"{np.shape(state.modes)} and {np.shape(state.states)}"
        )
    prior = _check_priors(priors, m, jnp.asarray(observations).dtype)
    new = _step_jit(key, state, data, prior, _MODE_INDEX[mode_sampler], True)
    changes = jnp.sum(new.modes != jnp.asarray(state.modes)).astype(jnp.int32)
    return new, SwitchingGibbsInfo(changes)


# ----------------------------------------------------------------------------- public run


@functools.partial(jax.jit, static_argnames=("num_samples",))
def _run_chains(key, init_modes, from_prior, data, priors, num_warmup, num_samples, mode_index):
    """All chains (vmapped) in one fori_loop: sweep 0 keeps the initial modes and draws
    x | s, y; sweeps 1..num_warmup + num_samples are Gibbs sweeps, the state after sweep i
    recorded into slot i - 1 - num_warmup once that is >= 0. The chains start at
    ``init_modes`` (C, T), or at draws from the Markov prior when ``from_prior``. Everything
    but the sizes is traced (the mode sampler too), so one compiled sampler serves every run
    of the same shapes (``data`` of ``_check_data``: the offsets, not the inputs). Returns the
    recorded ``SwitchingGibbsState`` with leading axes (chain, draw)."""
    model = _prepare(*data)
    num_chains, num_steps = init_modes.shape
    key_loop, key_prior = jax.random.split(key)
    prior_modes = jax.vmap(_prior_modes, (0, None, None, None))(
        jax.random.split(key_prior, num_chains),
        model.params.initial_probs,
        model.params.transition_matrix,
        num_steps,
    )
    init_modes = jnp.where(from_prior, prior_modes, init_modes)
    state = jax.vmap(_initial_state, (0, None))(init_modes, model.params)
    buffers = jax.tree.map(lambda a: jnp.zeros((num_samples, *a.shape), a.dtype), state)
    sweep = jax.vmap(_sweep, (0, 0, None, None, None, None))

    def body(i, carry):
        state, buffers = carry
        keys = jax.random.split(jax.random.fold_in(key_loop, i), num_chains)
        index = jnp.where(i == 0, _KEEP_MODES, mode_index)
        state = sweep(keys, state, model, priors, index, i > 0)
        slot = i - 1 - num_warmup
        keep = slot >= 0
        slot = jnp.maximum(slot, 0)
        buffers = jax.tree.map(
            lambda b, s: b.at[slot].set(jnp.where(keep, s, b[slot])), buffers, state
        )
        return state, buffers

    total = 1 + num_warmup + num_samples
    _, buffers = jax.lax.fori_loop(0, total, body, (state, buffers))
    return jax.tree.map(lambda b: jnp.moveaxis(b, 0, 1), buffers)


def run_switching_gibbs(
    key: jax.Array,
    params: SwitchingParams,
    observations,
    *,
    priors: SwitchingPriors | None = None,
    num_warmup: int = 500,
    num_samples: int = 1000,
    num_chains: int = 4,
    mode_sampler: str = "collapsed",
    init_modes=None,
    inputs=None,
) -> xr.DataTree:
    """Gibbs sampling of p(s, x, theta | y) for the switching state-space model, as a DataTree.

    Each sweep draws the modes (collapsed single-site by default, see the module docstring
    for why), then x | s, theta, y by Kalman FFBS, then theta | x, s, y when ``priors`` are
    given. The chains are independent and start from different modes; they run vmapped in one
    ``fori_loop``, compiled once per (shapes, num_chains, num_samples) and reused: the mode
    sampler, the priors and ``num_warmup`` are traced.

    Args:
        key: a ``jax.random`` key.
        params: ``SwitchingParams`` (Q_j may be singular PSD for the collapsed sampler; R_j
            must be positive definite).
        observations: (T, o); a NaN coordinate is missing (the terms of y_t use its observed
            coordinates; a NaN row is a missing observation).
        priors: optional ``attnbayes.models.switching.SwitchingPriors``: Dirichlet rows of Pi and
            inverse-gamma scales c_j, r_j of Q_j = c_j params.dynamics_covs[j] and
            R_j = r_j params.emission_covs[j]; a field that is None stays fixed.
        num_warmup: sweeps discarded per chain; draw k is the state after num_warmup + k + 1
            sweeps (after the initial draw of the states at the initial modes).
        num_samples: draws kept per chain.
        num_chains: independent chains.
        mode_sampler: "collapsed" (default) or "conditional" (HMM FFBS of s | x; needs PD
            ``params.dynamics_covs`` and ``params.initial_covs``).
        init_modes: None or "prior" (each chain's modes drawn from the Markov prior), or
            integer labels of shape (T,) for every chain or (num_chains, T). The states start
            at a draw of x | s, y, theta at ``params``.
        inputs: (T, k) u_{1:T}, required when ``params`` has input weights (offsets
            b_j + B_j u_t of the step into x_t and d_j + D_j u_t of y_t).

    Returns:
        A DataTree with posterior ``states`` (chain, draw, time, state_dim) and ``modes``
        (chain, draw, time) int32, and for the parameters with a prior ``transition_matrix``
        (chain, draw, mode_from, mode_to), ``dynamics_cov_scale`` and ``emission_cov_scale``
        (chain, draw, mode); sample_stats ``lp`` = log p(x, s, y, theta) (on the constrained
        space; degenerate Gaussian densities on their support for singular Q_j, P0_j);
        observed_data ``observations`` (time, obs_dim). ``posterior.attrs``: sampling_time
        (wall seconds, compilation included on a shape's first call), sampler, mode_sampler,
        chain_method, num_warmup.

    Raises:
        ValueError: bad arguments, before any tracing.
        FloatingPointError: the draws of the states are not finite (explosive dynamics or
            extreme inputs), naming the first step; nothing is returned.
    """
    validation.check_key("key", key)
    data = _check_data(params, observations, inputs)
    params, obs = data[:2]
    m = params.initial_probs.shape[0]
    t_max = obs.shape[0]
    num_warmup = validation.check_positive_int("num_warmup", num_warmup, minimum=0)
    num_samples = validation.check_positive_int("num_samples", num_samples)
    num_chains = validation.check_positive_int("num_chains", num_chains)
    mode_sampler = _check_mode_sampler(mode_sampler)
    if mode_sampler == "conditional":
        _check_definite(params)
    prior = _check_priors(priors, m, obs.dtype)
    start = time.perf_counter()
    from_prior = init_modes is None or (isinstance(init_modes, str) and init_modes == "prior")
    if from_prior:
        modes0 = np.zeros((num_chains, t_max), np.int32)
    elif isinstance(init_modes, str):
        raise ValueError(f"init_modes: unknown {init_modes!r}; known: {list(INITS)} or labels")
    else:
        arr = np.asarray(init_modes)
        shape = (t_max,) if arr.ndim == 1 else (num_chains, t_max)
        arr = _check_modes("init_modes", arr, shape, m)
        modes0 = np.broadcast_to(arr, (num_chains, t_max))
    draws = _run_chains(
        key,
        modes0,
        np.asarray(from_prior),
        data,
        prior,
        jnp.asarray(num_warmup, jnp.int32),
        num_samples,
        jnp.asarray(_MODE_INDEX[mode_sampler], jnp.int32),
    )
    jax.block_until_ready(draws)
    elapsed = time.perf_counter() - start

    posterior = {"states": np.asarray(draws.states), "modes": np.asarray(draws.modes)}
    bad_steps = ~np.isfinite(posterior["states"]).all(axis=(0, 1, 3))
    if bad_steps.any():
        raise FloatingPointError(
            f"run_switching_gibbs: non-finite state draws (NaN or inf) from step "
            f"{int(np.argmax(bad_steps)) + 1} of {t_max} ({int(bad_steps.sum())} step(s) "
            "affected); the dynamics may be explosive or the inputs extreme for the dtype: "
            "check params.dynamics_matrices, params.dynamics_covs, params.emission_covs and "
            "the scale of the observations (attnbayes.inference.switching.filters."
            "check_filter_result on a filter of the same series names the step where it "
            "overflows)"
        )
    names = ("transition_matrix", "dynamics_cov_scale", "emission_cov_scale")
    for name, sampled in zip(names, np.asarray(prior.sampled), strict=True):
        if sampled:
            posterior[name] = np.asarray(getattr(draws, name))
    import arviz as az

    return az.from_dict(
        {
            "posterior": posterior,
            "sample_stats": {"lp": np.asarray(draws.lp)},
            "observed_data": {"observations": np.asarray(obs)},
        },
        dims=switching_dims(priors) | {"modes": ["time"], "observations": ["time", "obs_dim"]},
        attrs={
            "posterior": {
                "sampling_time": elapsed,
                "sampler": "switching-gibbs",
                "mode_sampler": mode_sampler,
                "chain_method": "vectorized",
                "num_warmup": num_warmup,
            }
        },
    )


__all__ = [
    "MODE_SAMPLERS",
    "SwitchingGibbsState",
    "run_switching_gibbs",
    "switching_gibbs_init",
    "switching_gibbs_step",
]
