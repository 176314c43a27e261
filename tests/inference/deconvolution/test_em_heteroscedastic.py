"""Heteroscedastic deconvolution EM (x_i ~ N(z_i, diag(s_i^2))) against NumPy/SciPy by hand.

The references write the per-unit densities out with ``scipy.stats.norm.logpdf`` in float64 and
never call the library's kernels: the E-step, the precision-weighted M-step, the log-likelihood,
the posterior means and intervals, dense, streamed and sharded over two devices; the identity
with per-query-temperature attention; a scalar sigma reproducing the homoscedastic numbers.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from raising import check_refused
from scipy.special import logsumexp
from scipy.stats import norm

from attnbayes import sharding
from attnbayes.inference.attention import attend
from attnbayes.inference.deconvolution import discrete_posterior_intervals, em

N, P, K = 23, 2, 4


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(35)
    x = rng.normal(size=(N, P)) * 2.0
    s = np.exp(rng.uniform(np.log(0.5), np.log(3.0), size=N))
    s_coord = np.exp(rng.uniform(-0.7, 1.0, size=(N, P)))
    atoms = rng.normal(size=(K, P)) * 1.5
    weights = rng.dirichlet(np.ones(K))
    return x, s, s_coord, atoms, weights


def _scales(sigma):
    sigma = np.asarray(sigma, np.float64)
    return np.broadcast_to(sigma[:, None] if sigma.ndim == 1 else sigma, (N, P))


def ref_log_joint(x, atoms, weights, sigma):
    """(N, K) log w_k + sum_c log N(x_ic; mu_kc, s_ic^2)."""
    s = _scales(sigma)
    dens = norm.logpdf(x[:, None, :], atoms[None, :, :], s[:, None, :]).sum(-1)
    return np.log(weights)[None, :] + dens


def ref_step(x, atoms, weights, sigma):
    """The exact EM step: A by Bayes, atoms by precision-weighted means, weights mean of A."""
    lj = ref_log_joint(x, atoms, weights, sigma)
    a = np.exp(lj - logsumexp(lj, axis=1, keepdims=True))
    prec = 1.0 / _scales(sigma) ** 2
    new_atoms = np.einsum("ik,ic->kc", a, x * prec) / np.einsum("ik,ic->kc", a, prec)
    return a, new_atoms, a.mean(axis=0), float(np.sum(logsumexp(lj, axis=1)))


STREAMS = [
    {},
    {"block_size": 8, "mesh": sharding.batch_mesh(jax.devices()[:1])},
    {"block_size": 8, "mesh": sharding.batch_mesh(jax.devices()[:2])},
]


@pytest.mark.parametrize("per_coordinate", [False, True], ids=["per-unit", "per-coordinate"])
@pytest.mark.parametrize("stream", STREAMS, ids=["dense", "streamed", "sharded"])
def test_em_step_and_log_likelihood_match_bayes_by_hand(problem, per_coordinate, stream):
    x, s, s_coord, atoms, weights = problem
    sigma = s_coord if per_coordinate else s
    a, ref_atoms, ref_weights, ref_ll = ref_step(x, atoms, weights, sigma)
    new_atoms, new_weights = em.em_step(x, atoms, weights, sigma, update_weights=True, **stream)
    np.testing.assert_allclose(new_atoms, ref_atoms, rtol=0, atol=1e-12)
    np.testing.assert_allclose(new_weights, ref_weights, rtol=0, atol=1e-12)
    ll = em.log_likelihood(x, atoms, weights, sigma, **stream)
    np.testing.assert_allclose(float(ll), ref_ll, rtol=1e-13)
    z_hat = em.posterior_mean(x, atoms, weights, sigma, **stream)
    np.testing.assert_allclose(z_hat, a @ atoms, rtol=0, atol=1e-12)


def test_posterior_and_intervals_per_unit(problem):
    """Responsibilities and the equal-tailed intervals of each unit's own discrete posterior."""
    x, s, _, atoms, weights = problem
    x1, atoms1 = x[:, 0], atoms[:, 0]
    lj = np.log(weights)[None, :] + norm.logpdf(x1[:, None], atoms1[None, :], s[:, None])
    a = np.exp(lj - logsumexp(lj, axis=1, keepdims=True))
    z_hat, resp = em.posterior(x1, atoms1, weights, s)
    np.testing.assert_allclose(resp, a, rtol=0, atol=1e-13)
    np.testing.assert_allclose(z_hat, a @ atoms1, rtol=0, atol=1e-12)
    intervals = discrete_posterior_intervals(resp, atoms1[:, None], probs=(0.5,))
    order = np.argsort(atoms1)
    cdf = np.cumsum(a[:, order], axis=1)
    lo = atoms1[order][np.argmax(cdf >= 0.25 - 1e-12, axis=1)]
    hi = atoms1[order][np.argmax(cdf >= 0.75 - 1e-12, axis=1)]
    np.testing.assert_allclose(intervals[0.5][0][:, 0], lo)
    np.testing.assert_allclose(intervals[0.5][1][:, 0], hi)
    # the noisier a unit, the more the same x is shrunk: z_hat depends on s_i, not x_i alone
    z_same_x = em.posterior_mean(np.full(2, 2.0), atoms1, weights, np.array([0.5, 3.0]))
    assert abs(z_same_x[0] - 2.0) < abs(z_same_x[1] - 2.0)


def test_e_step_is_attention_with_a_per_query_temperature(problem):
    """A_ik = softmax_k(log w_k + (<x_i, mu_k> - |mu_k|^2 / 2) / s_i^2): ``attend`` with
    temperature s_i^2 (scaling the key bias) and log_prior log w_k (not scaled)."""
    x, s, _, atoms, weights = problem
    z_hat = em.posterior_mean(x, atoms, weights, s)
    bias = -0.5 * np.sum(atoms**2, axis=1)
    for block_size in (None, 8):
        out = attend(
            x,
            atoms,
            atoms,
            scale=1.0,
            bias=bias,
            temperature=s**2,
            log_prior=np.log(weights),
            block_size=block_size,
        )
        np.testing.assert_allclose(out, z_hat, rtol=0, atol=1e-10)


def test_scalar_sigma_reproduces_the_homoscedastic_fit(problem):
    """A constant (N,) sigma takes the per-unit code and gives the scalar path's numbers."""
    x = problem[0]
    scalar = em.fit_em(x, 1.3, max_iters=15)
    vector = em.fit_em(x, np.full(N, 1.3), max_iters=15)
    coords = em.fit_em(x, np.full((N, P), 1.3), max_iters=15)
    for other in (vector, coords):
        np.testing.assert_allclose(other.atoms, scalar.atoms, rtol=0, atol=1e-12)
        np.testing.assert_allclose(
            other.log_likelihood_trace, scalar.log_likelihood_trace, rtol=1e-13
        )


def test_fit_em_is_monotone_and_streams_equal_dense(problem):
    x, s, s_coord, _, _ = problem
    for sigma in (s, s_coord):
        dense = em.fit_em(x, sigma, max_iters=40, tol=0.0)
        trace = np.asarray(dense.log_likelihood_trace)[: int(dense.num_iters) + 1]
        assert np.all(np.diff(trace) >= -1e-9 * np.abs(trace[1:]))
        streamed = em.fit_em(x, sigma, max_iters=40, tol=0.0, block_size=8)
        np.testing.assert_allclose(streamed.atoms, dense.atoms, rtol=0, atol=1e-10)


def test_float32_keeps_nearby_points_apart_far_from_the_origin():
    """Differences first: in float32, data at 1e4 with per-unit s ~ 0.01 give the posterior
    means float64 gives (a dot-product form would lose every digit)."""
    rng = np.random.default_rng(1)
    x = 1e4 + rng.normal(size=12) * 0.02
    s = np.exp(rng.uniform(np.log(0.005), np.log(0.02), size=12))
    atoms, w = x[:5].copy(), np.full(5, 0.2)
    want = em.posterior_mean(x, atoms, w, s)
    got = em.posterior_mean(x.astype(np.float32), atoms.astype(np.float32), w, s)
    assert got.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(got, np.float64) - 1e4, want - 1e4, atol=2e-3)


def test_traceable_in_sigma(problem):
    """jit, vmap and grad over a per-unit sigma; the gradient against central differences."""
    x, s, _, atoms, weights = problem

    def ll(sig):
        return em.log_likelihood(x, atoms, weights, sig)

    g = jax.grad(ll)(jnp.asarray(s))
    eps = 1e-6
    for i in (0, 7):
        up, down = s.copy(), s.copy()
        up[i] += eps
        down[i] -= eps
        np.testing.assert_allclose(
            g[i],
            (ref_step(x, atoms, weights, up)[3] - ref_step(x, atoms, weights, down)[3]) / (2 * eps),
            rtol=1e-6,
        )
    batch = jnp.stack([jnp.asarray(s), 2 * jnp.asarray(s)])
    lls = jax.vmap(ll)(batch)
    np.testing.assert_allclose(lls[1], ref_step(x, atoms, weights, 2 * s)[3], rtol=1e-13)
    fit = jax.jit(lambda sig: em.fit_em(x, sig, max_iters=3).atoms)(jnp.asarray(s))
    np.testing.assert_allclose(fit, em.fit_em(x, s, max_iters=3).atoms, rtol=0, atol=1e-12)


def test_gradient_in_x_and_the_atoms_with_per_unit_sigma_dense_and_streamed(problem):
    """With a standard error per unit, the log-likelihood's gradient in x and in the atoms is
    the same dense and streamed (block_size 8 of N = 23 rows: a padded last block), and
    equals central differences of the exact (NumPy) log-likelihood."""
    x, s, _, atoms, weights = problem

    def ll(x_, atoms_, block_size):
        return em.log_likelihood(x_, atoms_, weights, s, block_size=block_size)

    dense = jax.grad(ll, argnums=(0, 1))(jnp.asarray(x), jnp.asarray(atoms), None)
    streamed = jax.grad(ll, argnums=(0, 1))(jnp.asarray(x), jnp.asarray(atoms), 8)
    for a, b in zip(dense, streamed, strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12)
    eps = 1e-6
    for arg, (i, c) in ((0, (5, 1)), (1, (2, 0))):
        up = [x.copy(), atoms.copy()]
        down = [x.copy(), atoms.copy()]
        up[arg][i, c] += eps
        down[arg][i, c] -= eps
        central = (
            ref_step(up[0], up[1], weights, s)[3] - ref_step(down[0], down[1], weights, s)[3]
        ) / (2 * eps)
        np.testing.assert_allclose(dense[arg][i, c], central, rtol=1e-6)


@pytest.mark.parametrize(
    ("sigma", "match"),
    [
        (np.ones(N - 1), r"sigma: expected a number or an array of shape \(23,\) or \(23, 2\)"),
        (np.ones((N, 3)), r"sigma: expected .* got shape \(23, 3\)"),
        (np.ones((N, P, 1)), r"sigma: expected .* got shape \(23, 2, 1\)"),
        (np.r_[np.ones(N - 1), 0.0], r"sigma: must be > 0, got 0.0 at entry 22"),
        (np.r_[-1.0, np.ones(N - 1)], r"sigma: must be > 0, got -1.0 at entry 0"),
        (np.r_[np.nan, np.ones(N - 1)], r"sigma: contains 1 non-finite value"),
        (np.r_[np.ones(N - 1), 1e-200], r"sigma: entry 22 = 1e-200 is out of range for float64"),
        (["a"] * N, r"sigma: "),
    ],
)
@pytest.mark.usefixtures("full_tracebacks")
def test_bad_per_unit_sigma_is_refused_by_name(problem, sigma, match):
    x, _, _, atoms, weights = problem
    for call in (
        lambda: em.fit_em(x, sigma, max_iters=2),
        lambda: em.posterior_mean(x, atoms, weights, sigma),
        lambda: em.check_problem(x, sigma),
    ):
        check_refused(call, ValueError, match)


@pytest.mark.usefixtures("full_tracebacks")
def test_per_coordinate_sigma_needs_points(problem):
    x, _, s_coord, _, _ = problem
    check_refused(
        lambda: em.fit_em(x[:, 0], s_coord, max_iters=2),
        ValueError,
        r"sigma: expected a number or an array of shape \(23,\) \(one per observation\) "
        r"for x of shape \(23,\), got shape \(23, 2\)",
    )


@pytest.mark.parametrize(
    ("temperature", "match"),
    [
        (np.ones(N - 1), r"temperature: expected a number or shape \(23,\)"),
        (np.r_[np.ones(N - 1), 0.0], r"temperature: must be > 0, got 0.0 at entry 22"),
        (np.r_[np.ones(N - 1), np.inf], r"temperature: contains 1 non-finite"),
        (np.r_[np.ones(N - 1), 1e-320], r"temperature: 1e-320 is below the smallest normal"),
    ],
)
@pytest.mark.usefixtures("full_tracebacks")
def test_bad_per_query_temperature_is_refused_by_name(problem, temperature, match):
    x, _, _, atoms, _ = problem
    check_refused(lambda: attend(x, atoms, atoms, temperature=temperature), ValueError, match)


@pytest.mark.usefixtures("full_tracebacks")
def test_bad_log_prior_is_refused_by_name(problem):
    x, _, _, atoms, _ = problem
    check_refused(
        lambda: attend(x, atoms, atoms, log_prior=np.zeros(K + 1)),
        ValueError,
        r"log_prior: expected shape \(4,\)",
    )
    check_refused(
        lambda: attend(x, atoms, atoms, log_prior=np.r_[np.zeros(K - 1), np.nan]),
        ValueError,
        r"log_prior: contains NaN or \+inf",
    )


def test_e_step_attention_takes_every_sigma_form(problem):
    """``e_step_attention`` with (N,), (N, p) and a list: the posterior means of Bayes by hand,
    concrete and under jit (review of issue 35: it passed the raw (N,) sigma to the kernel)."""
    x, s, s_coord, atoms, weights = problem
    for sigma in (s, s_coord, list(s)):
        a = ref_step(x, atoms, weights, np.asarray(sigma))[0]
        att = em.e_step_attention(x, atoms, weights, sigma)
        np.testing.assert_allclose(att.output, a @ atoms, rtol=0, atol=1e-12)
        np.testing.assert_allclose(att.weights, a, rtol=0, atol=1e-13)
    jitted = jax.jit(em.e_step_attention)(x, atoms, weights, jnp.asarray(s))
    np.testing.assert_allclose(jitted.output, ref_step(x, atoms, weights, s)[0] @ atoms, atol=1e-12)


def test_precision_weighted_step_does_not_overflow_in_float32():
    """Tiny per-unit scales: each 1 / s_i^2 is finite in float32 but their sum over the rows
    is not; the relative precisions (s_min / s_i)^2 keep the M-step finite, dense and
    streamed, and equal to float64's (review of issue 35)."""
    rng = np.random.default_rng(3)
    x = 1e-19 * rng.normal(size=8)
    s = 0.9e-19 * np.exp(rng.uniform(0, 0.5, size=8))
    w = np.full(3, 1 / 3)
    want = em.em_step(x, x[:3], w, s)[0]
    for stream in ({}, {"block_size": 4}):
        got = em.em_step(x.astype(np.float32), x[:3].astype(np.float32), w, s, **stream)[0]
        assert np.all(np.isfinite(got))
        np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-4)


@pytest.mark.usefixtures("full_tracebacks")
def test_boolean_sigma_and_temperature_are_refused(problem):
    x, _, _, atoms, weights = problem
    check_refused(
        lambda: em.posterior_mean(x, atoms, weights, np.ones(N, bool)),
        ValueError,
        r"^sigma: expected numbers, got booleans",
    )
    check_refused(
        lambda: attend(x, atoms, atoms, temperature=np.ones(N, bool)),
        ValueError,
        r"^temperature: expected numbers, got booleans",
    )
