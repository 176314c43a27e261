"""Brute-force reference for the switching linear-Gaussian state-space model (NumPy/SciPy only).

Every mode history s_{1:T} (M^T of them) makes the model linear-Gaussian: with
e = (x_1 - m0_{s_1}, w_2, ..., w_T) independent, e ~ N(0, blockdiag(P0_{s_1}, Q_{s_2}, ...,
Q_{s_T})), the states are x = mu + L e with L[t, u] = F_{s_t} ... F_{s_{u+1}} (identity on the
diagonal), mu_t = F_{s_t} mu_{t-1} + b_{s_t} + B_{s_t} u_t, and y = blockdiag(H_{s_t}) x +
(d_{s_t} + D_{s_t} u_t)_t + v, v ~ N(0, blockdiag(R_{s_t})). Each history's dense joint Gaussian
of (x_{1:T}, y_{1:T}) is conditioned densely on the observed entries (a NaN entry of y is
missing and dropped), and the histories are mixed with weights
p(s_{1:t}, y_{1:t}); a time-varying (T, M, M) transition matrix gives p(s_{1:t}) its entry t
for the move into step t (0-based). Written independently of the JAX code it checks; fast
enough for M = 2, T <= 8.

Usage from a test module (``tests/`` is on ``sys.path`` under pytest)::

    from switching_bruteforce import enumerate_posterior, random_switching_params
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import numpy as np
from scipy.special import logsumexp

from attnbayes.models.switching import SwitchingParams

LOG_2PI = np.log(2.0 * np.pi)


class BruteForcePosterior(NamedTuple):
    """Exact posterior quantities by enumeration of the M^T mode histories.

    Attributes:
        histories: (M^T, T) int, every s_{1:T} (row-major order of itertools.product).
        log_joint: (M^T,) log p(s_{1:T}, y_{1:T}).
        log_likelihood: () log p(y_{1:T}) = logsumexp(log_joint).
        filtered_mode_probs: (T, M) P(s_t = j | y_{1:t}).
        filtered_means: (T, M, d) E[x_t | s_t = j, y_{1:t}] (NaN where P(s_t = j | .) = 0).
        filtered_covs: (T, M, d, d) Cov[x_t | s_t = j, y_{1:t}].
        filtered_mean: (T, d) E[x_t | y_{1:t}].
        filtered_cov: (T, d, d) Cov[x_t | y_{1:t}].
        smoothed_mode_probs: (T, M) P(s_t = j | y_{1:T}).
        smoothed_means: (T, M, d) E[x_t | s_t = j, y_{1:T}].
        smoothed_covs: (T, M, d, d) Cov[x_t | s_t = j, y_{1:T}].
        smoothed_mean: (T, d) E[x_t | y_{1:T}].
        smoothed_cov: (T, d, d) Cov[x_t | y_{1:T}].
    """

    histories: np.ndarray
    log_joint: np.ndarray
    log_likelihood: float
    filtered_mode_probs: np.ndarray
    filtered_means: np.ndarray
    filtered_covs: np.ndarray
    filtered_mean: np.ndarray
    filtered_cov: np.ndarray
    smoothed_mode_probs: np.ndarray
    smoothed_means: np.ndarray
    smoothed_covs: np.ndarray
    smoothed_mean: np.ndarray
    smoothed_cov: np.ndarray


def as_numpy(params: SwitchingParams) -> SwitchingParams:
    """The fields as float64 NumPy arrays (the optional ones filled: zero offsets, k = 0 or
    the other input weight's k)."""
    fields = {
        f: None if a is None else np.asarray(a, dtype=float) for f, a in params._asdict().items()
    }
    m, o, d = fields["emission_matrices"].shape
    k = next(
        (
            fields[f].shape[-1]
            for f in ("dynamics_input_weights", "emission_input_weights")
            if fields[f] is not None
        ),
        0,
    )
    for f, shape in (
        ("emission_biases", (m, o)),
        ("dynamics_input_weights", (m, d, k)),
        ("emission_input_weights", (m, o, k)),
    ):
        if fields[f] is None:
            fields[f] = np.zeros(shape)
    return SwitchingParams(**fields)


def _inputs(p: SwitchingParams, inputs, t_max: int) -> np.ndarray:
    k = p.emission_input_weights.shape[-1]
    return (
        np.zeros((t_max, k))
        if inputs is None
        else np.asarray(inputs, dtype=float).reshape(t_max, k)
    )


# ----------------------------------------------------------------------------- one history


class _HistoryGaussian(NamedTuple):
    """Dense joint Gaussian of (x_{1:T}, y_{1:T}) given one history (x flattened to T d)."""

    mx: np.ndarray  # (T d,)
    sx: np.ndarray  # (T d, T d)
    my: np.ndarray  # (T o,)
    sy: np.ndarray  # (T o, T o)
    sxy: np.ndarray  # (T d, T o)


def _history_gaussian(p: SwitchingParams, hist, u) -> _HistoryGaussian:
    t_max, d = len(hist), p.initial_means.shape[1]
    o = p.emission_matrices.shape[1]
    # mean recursion
    means = [p.initial_means[hist[0]]]
    for t in range(1, t_max):
        j = hist[t]
        bias = p.dynamics_biases[j] + p.dynamics_input_weights[j] @ u[t]
        means.append(p.dynamics_matrices[j] @ means[-1] + bias)
    mx = np.concatenate(means)
    offsets = np.concatenate(
        [p.emission_biases[j] + p.emission_input_weights[j] @ u[t] for t, j in enumerate(hist)]
    )
    # x - mu = L e, e ~ N(0, D)
    big_l = np.zeros((t_max * d, t_max * d))
    for u in range(t_max):
        block = np.eye(d)
        for t in range(u, t_max):
            if t > u:
                block = p.dynamics_matrices[hist[t]] @ block
            big_l[t * d : (t + 1) * d, u * d : (u + 1) * d] = block
    big_d = np.zeros((t_max * d, t_max * d))
    big_d[:d, :d] = p.initial_covs[hist[0]]
    for t in range(1, t_max):
        big_d[t * d : (t + 1) * d, t * d : (t + 1) * d] = p.dynamics_covs[hist[t]]
    sx = big_l @ big_d @ big_l.T
    sx = 0.5 * (sx + sx.T)
    big_h = np.zeros((t_max * o, t_max * d))
    big_r = np.zeros((t_max * o, t_max * o))
    for t, j in enumerate(hist):
        big_h[t * o : (t + 1) * o, t * d : (t + 1) * d] = p.emission_matrices[j]
        big_r[t * o : (t + 1) * o, t * o : (t + 1) * o] = p.emission_covs[j]
    sxy = sx @ big_h.T
    sy = big_h @ sx @ big_h.T + big_r
    return _HistoryGaussian(mx, sx, big_h @ mx + offsets, 0.5 * (sy + sy.T), sxy)


def _log_mode_prob(p: SwitchingParams, hist) -> float:
    """log p(s_{1:t}) = log pi0[s_1] + sum log Pi_t[s_{t-1}, s_t] (-inf for impossible ones);
    Pi_t is the transition matrix, or its entry t (0-based) when it is (T, M, M)."""
    trans = p.transition_matrix
    with np.errstate(divide="ignore"):
        out = np.log(p.initial_probs[hist[0]])
        for t in range(1, len(hist)):
            step = trans if trans.ndim == 2 else trans[t]
            out = out + np.log(step[hist[t - 1], hist[t]])
    return float(out)


def _gauss_logpdf(x, mean, cov) -> float:
    """log N(x; mean, cov) by Cholesky (cov must be positive definite); 0 for empty x."""
    if x.size == 0:
        return 0.0
    chol = np.linalg.cholesky(cov)
    white = np.linalg.solve(chol, x - mean)
    return float(-0.5 * white @ white - np.sum(np.log(np.diag(chol))) - 0.5 * x.size * LOG_2PI)


def _observed_rows(y: np.ndarray, t: int) -> np.ndarray:
    """Indices into the flattened y_{1:T} of the observed (non-NaN) entries of the first t
    steps."""
    return np.flatnonzero(~np.isnan(y[:t]).ravel())


def _condition(g: _HistoryGaussian, y: np.ndarray, rows: np.ndarray, xs: slice):
    """(mean, cov, log p(y[rows])) of x[xs] given the observed entries y[rows]."""
    mean, cov = g.mx[xs], g.sx[xs, xs]
    if rows.size == 0:
        return mean, cov, 0.0
    sy = g.sy[np.ix_(rows, rows)]
    resid = y.ravel()[rows] - g.my[rows]
    cross = g.sxy[xs][:, rows]
    gain = np.linalg.solve(sy, cross.T).T
    cond_cov = cov - gain @ cross.T
    return mean + gain @ resid, 0.5 * (cond_cov + cond_cov.T), _gauss_logpdf(resid, 0.0, sy)


def _moments(log_w, modes, means, covs, num_modes):
    """Per-mode and overall moment-matched Gaussians of a weighted set of Gaussians."""
    w = np.exp(log_w - logsumexp(log_w))
    mean = w @ means
    dev = means - mean
    cov = np.einsum("h,hij->ij", w, covs) + np.einsum("h,hi,hj->ij", w, dev, dev)
    d = means.shape[1]
    probs = np.zeros(num_modes)
    m_j = np.full((num_modes, d), np.nan)
    c_j = np.full((num_modes, d, d), np.nan)
    for j in range(num_modes):
        sel = modes == j
        probs[j] = w[sel].sum()
        if probs[j] == 0:
            continue
        wj = w[sel] / probs[j]
        m_j[j] = wj @ means[sel]
        dj = means[sel] - m_j[j]
        c_j[j] = np.einsum("h,hij->ij", wj, covs[sel]) + np.einsum("h,hi,hj->ij", wj, dj, dj)
    return probs, m_j, c_j, mean, cov


# ----------------------------------------------------------------------------- public


def _check_y(p: SwitchingParams, y) -> np.ndarray:
    y = np.asarray(y, dtype=float)
    o = p.emission_matrices.shape[1]
    if y.ndim != 2 or y.shape[1] != o:
        raise ValueError(f"y: expected shape (T, {o}), got {y.shape}")
    return y


def enumerate_posterior(params: SwitchingParams, y, inputs=None) -> BruteForcePosterior:
    """Exact filtering and smoothing posteriors by enumerating every mode history.

    Filtered quantities at step t use the M^t histories s_{1:t} and y_{1:t} only; smoothed
    ones the M^T full histories and all of y. Q may be singular PSD; R must be PD.

    Args:
        params: ``SwitchingParams`` (NumPy or JAX arrays).
        y: (T, o); a NaN entry is a missing observation.
        inputs: (T, k) u_{1:T} when the params have input weights.
    """
    p = as_numpy(params)
    y = _check_y(p, y)
    t_max, m = y.shape[0], p.initial_probs.shape[0]
    u = _inputs(p, inputs, t_max)
    d = p.initial_means.shape[1]
    filt = [np.zeros((t_max, m)), np.zeros((t_max, m, d)), np.zeros((t_max, m, d, d))]
    filt += [np.zeros((t_max, d)), np.zeros((t_max, d, d))]
    smooth = [np.zeros_like(a) for a in filt]
    # filtering: histories of length t, conditioned on y_{1:t}
    for t in range(1, t_max + 1):
        hists = np.array(list(itertools.product(range(m), repeat=t)))
        rows = _observed_rows(y, t)
        xs = slice((t - 1) * d, t * d)
        log_w, means, covs = [], [], []
        for h in hists:
            g = _history_gaussian(p, h, u)
            mean, cov, ll = _condition(g, y[:t], rows, xs)
            log_w.append(_log_mode_prob(p, h) + ll)
            means.append(mean)
            covs.append(cov)
        out = _moments(np.array(log_w), hists[:, -1], np.array(means), np.array(covs), m)
        for arr, val in zip(filt, out, strict=True):
            arr[t - 1] = val
    # smoothing: full histories, conditioned on all of y
    hists = np.array(list(itertools.product(range(m), repeat=t_max)))
    rows = _observed_rows(y, t_max)
    log_joint = np.zeros(len(hists))
    means = np.zeros((len(hists), t_max, d))
    covs = np.zeros((len(hists), t_max, d, d))
    for k, h in enumerate(hists):
        g = _history_gaussian(p, h, u)
        mean, cov, ll = _condition(g, y, rows, slice(None))
        log_joint[k] = _log_mode_prob(p, h) + ll
        for t in range(t_max):
            means[k, t] = mean[t * d : (t + 1) * d]
            covs[k, t] = cov[t * d : (t + 1) * d, t * d : (t + 1) * d]
    for t in range(t_max):
        out = _moments(log_joint, hists[:, t], means[:, t], covs[:, t], m)
        for arr, val in zip(smooth, out, strict=True):
            arr[t] = val
    return BruteForcePosterior(hists, log_joint, float(logsumexp(log_joint)), *filt, *smooth)


def log_posterior_density(params: SwitchingParams, y, x, inputs=None) -> float:
    """log p(x_{1:T} | y_{1:T}) = log sum_s p(s | y) N(x; E[x | s, y], Cov[x | s, y]).

    Needs every conditional Cov[x_{1:T} | s, y] positive definite: take PD Q_j and P0_j.

    Args:
        params: ``SwitchingParams``.
        y: (T, o), NaN rows missing.
        x: (T, d) the states at which to evaluate the density.
    """
    p = as_numpy(params)
    y = _check_y(p, y)
    x = np.asarray(x, dtype=float).ravel()
    t_max, m = y.shape[0], p.initial_probs.shape[0]
    u = _inputs(p, inputs, t_max)
    rows = _observed_rows(y, t_max)
    terms = []
    for h in itertools.product(range(m), repeat=t_max):
        g = _history_gaussian(p, h, u)
        mean, cov, ll = _condition(g, y, rows, slice(None))
        terms.append((_log_mode_prob(p, h) + ll, _gauss_logpdf(x, mean, cov)))
    log_joint, log_dens = np.array(terms).T
    return float(logsumexp(log_joint - logsumexp(log_joint) + log_dens))


def log_joint_density(params: SwitchingParams, x, y, inputs=None) -> float:
    """log p(x_{1:T}, y_{1:T}) = log sum_s p(s) N((x, y_obs); dense joint mean and covariance).

    Needs PD Q_j and P0_j (the density of x must exist). NaN entries of y are dropped.
    """
    p = as_numpy(params)
    y = _check_y(p, y)
    x = np.asarray(x, dtype=float).ravel()
    t_max, m = y.shape[0], p.initial_probs.shape[0]
    u = _inputs(p, inputs, t_max)
    rows = _observed_rows(y, t_max)
    z = np.concatenate([x, y.ravel()[rows]])
    terms = []
    for h in itertools.product(range(m), repeat=t_max):
        g = _history_gaussian(p, h, u)
        mean = np.concatenate([g.mx, g.my[rows]])
        cross = g.sxy[:, rows]
        cov = np.block([[g.sx, cross], [cross.T, g.sy[np.ix_(rows, rows)]]])
        terms.append(_log_mode_prob(p, h) + _gauss_logpdf(z, mean, cov))
    return float(logsumexp(terms))


def random_switching_params(
    rng: np.random.Generator,
    M: int = 2,
    d: int = 2,
    o: int = 1,
    singular_q: bool = False,
    num_inputs: int | None = None,
) -> SwitchingParams:
    """A valid random model: stable F_j (spectral radius 0.9), PD P0_j and R_j, Q_j PD or of
    rank max(1, d - 1) (``singular_q``), Dirichlet(2) rows of Pi and pi0 (no tiny
    probabilities). With ``num_inputs`` = k (0 allowed), also random emission offsets d_j and
    input weights B_j, D_j with k columns (drawn after the other fields)."""
    a = rng.normal(size=(M, d, d))
    radius = np.max(np.abs(np.linalg.eigvals(a)), axis=-1)
    f = 0.9 * a / radius[:, None, None]
    p0 = rng.normal(size=(M, d, d))
    if singular_q:
        g = rng.normal(size=(M, d, max(1, d - 1)))
        q = 0.5 * g @ np.swapaxes(g, -1, -2)
    else:
        g = rng.normal(size=(M, d, d))
        q = 0.5 * g @ np.swapaxes(g, -1, -2) + 0.2 * np.eye(d)
    rr = rng.normal(size=(M, o, o))
    params = SwitchingParams(
        initial_probs=rng.dirichlet(np.full(M, 2.0)),
        transition_matrix=rng.dirichlet(np.full(M, 2.0), size=M),
        initial_means=rng.normal(size=(M, d)),
        initial_covs=p0 @ np.swapaxes(p0, -1, -2) + 0.3 * np.eye(d),
        dynamics_matrices=f,
        dynamics_biases=0.5 * rng.normal(size=(M, d)),
        dynamics_covs=0.5 * (q + np.swapaxes(q, -1, -2)),
        emission_matrices=rng.normal(size=(M, o, d)),
        emission_covs=rr @ np.swapaxes(rr, -1, -2) + 0.5 * np.eye(o),
    )
    if num_inputs is None:
        return params
    return params._replace(
        emission_biases=rng.normal(size=(M, o)),
        dynamics_input_weights=0.5 * rng.normal(size=(M, d, num_inputs)),
        emission_input_weights=rng.normal(size=(M, o, num_inputs)),
    )


__all__ = [
    "BruteForcePosterior",
    "enumerate_posterior",
    "log_joint_density",
    "log_posterior_density",
    "random_switching_params",
]
