"""Filters of the switching state-space model against brute force."""

import jax
import numpy as np
import pytest
from scipy.stats import multivariate_normal

from inference.filters import kalman_filter
from models.switching import SwitchingParams, maneuvering_target, simulate


def one_mode(params: SwitchingParams, mode: int) -> SwitchingParams:
    """The M = 1 model that always stays in ``mode``."""
    fields = {f: np.asarray(v)[mode : mode + 1] for f, v in params._asdict().items()}
    fields["initial_probs"] = np.ones(1)
    fields["transition_matrix"] = np.ones((1, 1))
    return SwitchingParams(**fields)


def random_model(rng, d=3, o=2):
    a = rng.normal(size=(d, d))
    f = 0.9 * a / np.max(np.abs(np.linalg.eigvals(a)))
    g = rng.normal(size=(d, 1))
    h = rng.normal(size=(o, d))
    rr = rng.normal(size=(o, o))
    p0 = rng.normal(size=(d, d))
    return SwitchingParams(
        initial_probs=np.ones(1),
        transition_matrix=np.ones((1, 1)),
        initial_means=rng.normal(size=(1, d)),
        initial_covs=(p0 @ p0.T + 0.1 * np.eye(d))[None],
        dynamics_matrices=f[None],
        dynamics_biases=rng.normal(size=(1, d)),
        dynamics_covs=(g @ g.T)[None],  # rank 1: singular PSD process noise
        emission_matrices=h[None],
        emission_covs=(rr @ rr.T + 0.5 * np.eye(o))[None],
    )


def dense_filter(params: SwitchingParams, y):
    """Brute force: the joint Gaussian of (x_1..x_T, y_1..y_T), conditioned densely.

    Returns the filtered means (T, d) and covariances (T, d, d), and log p(y) over the observed
    rows (NaN rows dropped)."""
    m0, p0 = params.initial_means[0], params.initial_covs[0]
    f, b, q = params.dynamics_matrices[0], params.dynamics_biases[0], params.dynamics_covs[0]
    h, r = params.emission_matrices[0], params.emission_covs[0]
    t_max, d = y.shape[0], m0.shape[0]
    means = [m0]
    for _ in range(1, t_max):
        means.append(f @ means[-1] + b)
    # cross covariances Cov(x_t, x_s) = F^(t-s) Cov(x_s, x_s) for t >= s
    var = [p0]
    for _ in range(1, t_max):
        var.append(f @ var[-1] @ f.T + q)
    sx = np.zeros((t_max * d, t_max * d))
    for s in range(t_max):
        block = var[s]
        for t in range(s, t_max):
            sx[t * d : (t + 1) * d, s * d : (s + 1) * d] = block
            sx[s * d : (s + 1) * d, t * d : (t + 1) * d] = block.T
            block = f @ block
    big_h = np.kron(np.eye(t_max), h)
    sy = big_h @ sx @ big_h.T + np.kron(np.eye(t_max), r)
    sxy = sx @ big_h.T
    mx, my = np.concatenate(means), big_h @ np.concatenate(means)
    o = h.shape[0]
    observed = ~np.isnan(y).any(axis=1)
    filt_means, filt_covs = [], []
    for t in range(t_max):
        rows = np.concatenate(
            [np.arange(s * o, (s + 1) * o) for s in range(t + 1) if observed[s]] or [[]]
        ).astype(int)
        xs = slice(t * d, (t + 1) * d)
        if rows.size == 0:
            filt_means.append(mx[xs])
            filt_covs.append(sx[xs, xs])
            continue
        gain = sxy[xs][:, rows] @ np.linalg.inv(sy[np.ix_(rows, rows)])
        filt_means.append(mx[xs] + gain @ (y.ravel()[rows] - my[rows]))
        filt_covs.append(sx[xs, xs] - gain @ sxy[xs][:, rows].T)
    rows = np.flatnonzero(np.repeat(observed, o))
    log_lik = multivariate_normal(my[rows], sy[np.ix_(rows, rows)]).logpdf(y.ravel()[rows])
    return np.array(filt_means), np.array(filt_covs), log_lik


@pytest.mark.parametrize("missing", [False, True])
def test_kalman_filter_equals_dense_conditioning(missing):
    rng = np.random.default_rng(0)
    params = random_model(rng)
    y = rng.normal(size=(7, 2)) * 3.0
    if missing:
        y[2] = np.nan
        y[5, 1] = np.nan
    res = kalman_filter(params, y)
    means, covs, log_lik = dense_filter(params, y)
    np.testing.assert_allclose(res.mean, means, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(res.cov, covs, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(float(res.log_likelihood), log_lik, rtol=1e-11)
    np.testing.assert_allclose(res.mode_probs, 1.0)
    assert res.means.shape == (7, 1, 3) and res.covs.shape == (7, 1, 3, 3)


def test_kalman_filter_on_the_turning_mode_of_the_scenario():
    """The maneuvering target held in its coordinated-turn mode (singular rank-2 Q)."""
    params = one_mode(maneuvering_target(), 1)
    _, _, y = simulate(jax.random.key(4), params, 12)
    y = np.asarray(y)
    res = kalman_filter(params, y)
    means, covs, log_lik = dense_filter(params, y)
    np.testing.assert_allclose(res.mean, means, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(res.cov, covs, rtol=1e-8, atol=1e-6)
    np.testing.assert_allclose(float(res.log_likelihood), log_lik, rtol=1e-10)
    # Joseph form keeps every covariance symmetric positive semi-definite
    assert np.all(np.linalg.eigvalsh(np.asarray(res.cov)) > -1e-9)
    # batched over series with vmap
    batch = np.stack([y, y + 1.0])
    out = jax.vmap(lambda obs: kalman_filter_jit(params, obs))(batch)
    np.testing.assert_allclose(out.log_likelihood[0], res.log_likelihood, rtol=1e-12)


def kalman_filter_jit(params, obs):
    from inference.kalman import _kalman_filter

    return _kalman_filter(SwitchingParams(*(jax.numpy.asarray(a) for a in params)), obs)


def test_kalman_filter_bad_input():
    params = one_mode(maneuvering_target(), 0)
    with pytest.raises(ValueError, match="^params: expected 1 mode"):
        kalman_filter(maneuvering_target(), np.zeros((3, 2)))
    with pytest.raises(ValueError, match="^observations: expected shape"):
        kalman_filter(params, np.zeros((3, 3)))
    with pytest.raises(ValueError, match="^observations: contain"):
        kalman_filter(params, np.array([[0.0, np.inf]]))
