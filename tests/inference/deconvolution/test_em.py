"""EM for Gaussian deconvolution against independent NumPy/SciPy computations.

The references below never call the library's kernels: densities are written out as
log N(x; mu, s^2 I) = -|x - mu|^2 / (2 s^2) - p/2 log(2 pi s^2) in NumPy float64, normalised by
scipy's logsumexp.
"""

import logging
import signal

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from bad_values import all_finite, spread_limit_problem
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from raising import check_refused
from scipy.special import logsumexp
from scipy.stats import multivariate_normal

from attnbayes import sharding, validation
from attnbayes.inference.attention import softmax_attention
from attnbayes.inference.deconvolution import em, estep
from attnbayes.inference.deconvolution.estep import em_step_unchecked
from attnbayes.models.deconvolution import simulate

# One device: the plain (unsharded) program; the session's default mesh has two.
ONE_DEVICE = sharding.batch_mesh(jax.devices()[:1])

# ----------------------------------------------------------------------------- references


def _as_2d(a):
    a = np.asarray(a, dtype=np.float64)
    return a[:, None] if a.ndim == 1 else a


def ref_log_joint(x, atoms, weights, sigma):
    """(N, K) log w_k + log N(x_i; mu_k, sigma^2 I), from the squared distance."""
    x, mu = _as_2d(x), _as_2d(atoms)
    p = x.shape[1]
    sq = np.sum((x[:, None, :] - mu[None, :, :]) ** 2, axis=-1)
    log_dens = -0.5 * sq / sigma**2 - 0.5 * p * np.log(2.0 * np.pi * sigma**2)
    with np.errstate(divide="ignore"):
        return np.log(np.asarray(weights, np.float64))[None, :] + log_dens


def ref_responsibilities(x, atoms, weights, sigma):
    lj = ref_log_joint(x, atoms, weights, sigma)
    return np.exp(lj - logsumexp(lj, axis=1, keepdims=True))


def ref_em_step(x, atoms, weights, sigma, update_weights):
    """One EM step in the caller's shape convention."""
    a = ref_responsibilities(x, atoms, weights, sigma)
    x2 = _as_2d(x)
    new = (a.T @ x2) / a.sum(axis=0)[:, None]
    new = new[:, 0] if np.ndim(atoms) == 1 else new
    new_w = a.mean(axis=0) if update_weights else np.asarray(weights, np.float64)
    return new, new_w


def ref_log_likelihood(x, atoms, weights, sigma):
    return float(np.sum(logsumexp(ref_log_joint(x, atoms, weights, sigma), axis=1)))


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def scalar_problem():
    """(N,) data with (K,) atoms and non-uniform weights."""
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.normal(-2, 1, 12), rng.normal(3, 1, 8)])
    atoms = np.array([-3.0, -0.5, 0.7, 4.0])
    weights = np.array([0.1, 0.4, 0.2, 0.3])
    return x, atoms, weights, 0.8


@pytest.fixture(scope="module")
def vector_problem():
    """(N, 2) data with (K, 2) atoms and non-uniform weights."""
    rng = np.random.default_rng(2)
    x = rng.normal(0, 2, (15, 2))
    atoms = np.array([[-2.0, 0.5], [0.0, 0.0], [1.5, -1.0]])
    weights = np.array([0.25, 0.35, 0.4])
    return x, atoms, weights, 1.3


@pytest.fixture(scope="module", params=["scalar", "vector"])
def problem(request, scalar_problem, vector_problem):
    return scalar_problem if request.param == "scalar" else vector_problem


# ----------------------------------------------------------------------------- EM step


@pytest.mark.parametrize("update_weights", [False, True])
def test_em_step_matches_numpy(problem, update_weights):
    x, atoms, weights, sigma = problem
    new_atoms, new_weights = em.em_step(x, atoms, weights, sigma, update_weights=update_weights)
    ref_atoms, ref_weights = ref_em_step(x, atoms, weights, sigma, update_weights)
    assert new_atoms.shape == np.shape(atoms)  # (K,) stays (K,), (K, p) stays (K, p)
    assert new_weights.shape == np.shape(weights)
    np.testing.assert_allclose(np.asarray(new_atoms), ref_atoms, rtol=0, atol=1e-10)
    np.testing.assert_allclose(np.asarray(new_weights), ref_weights, rtol=0, atol=1e-10)
    if update_weights:
        assert not np.allclose(ref_weights, weights)  # the update did change something


def test_responsibilities_match_scipy_densities(vector_problem):
    x, atoms, weights, sigma = vector_problem
    dens = np.stack(
        [
            w * multivariate_normal(m, sigma**2 * np.eye(2)).pdf(x)
            for m, w in zip(atoms, weights, strict=True)
        ],
        axis=1,
    )
    expected = dens / dens.sum(axis=1, keepdims=True)
    got = np.asarray(em.responsibilities(x, atoms, weights, sigma))
    assert got.shape == (x.shape[0], atoms.shape[0])
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-10)


def test_em_step_scalar_and_column_data_agree(scalar_problem):
    x, atoms, weights, sigma = scalar_problem
    a1, w1 = em.em_step(x, atoms, weights, sigma, update_weights=True)
    a2, w2 = em.em_step(x[:, None], atoms[:, None], weights, sigma, update_weights=True)
    assert a1.shape == (atoms.shape[0],)
    assert a2.shape == (atoms.shape[0], 1)
    np.testing.assert_allclose(np.asarray(a1), np.asarray(a2)[:, 0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.asarray(w1), np.asarray(w2), rtol=0, atol=1e-12)


# ----------------------------------------------------------------------------- E-step = attention


def test_e_step_is_biased_softmax_attention(vector_problem):
    x, atoms, _, sigma = vector_problem
    k = atoms.shape[0]
    uniform = np.full(k, 1.0 / k)
    a_em = np.asarray(em.responsibilities(x, atoms, uniform, sigma))

    bias = -np.sum(atoms**2, axis=1) / (2 * sigma**2)
    att = softmax_attention(
        jnp.asarray(x), jnp.asarray(atoms), jnp.asarray(atoms), scale=1 / sigma**2, key_bias=bias
    )
    by_hand = jax.nn.softmax(jnp.asarray(x @ atoms.T / sigma**2 + bias[None, :]), axis=-1)

    np.testing.assert_allclose(a_em, np.asarray(att.weights), rtol=0, atol=1e-12)
    np.testing.assert_allclose(a_em, np.asarray(by_hand), rtol=0, atol=1e-12)
    np.testing.assert_allclose(
        a_em, ref_responsibilities(x, atoms, uniform, sigma), rtol=0, atol=1e-12
    )


def test_e_step_on_sphere_needs_no_bias():
    rng = np.random.default_rng(3)
    radius, sigma = 2.5, 0.9

    def on_sphere(n):
        v = rng.normal(size=(n, 3))
        return radius * v / np.linalg.norm(v, axis=1, keepdims=True)

    x, atoms = on_sphere(11), on_sphere(6)
    a_em = np.asarray(em.responsibilities(x, atoms, np.full(6, 1 / 6), sigma))
    plain = np.asarray(jax.nn.softmax(jnp.asarray(x @ atoms.T / sigma**2), axis=-1))
    np.testing.assert_allclose(a_em, plain, rtol=0, atol=1e-12)
    # Off the sphere the bias matters: scaling one atom changes A.
    atoms_off = atoms.copy()
    atoms_off[0] *= 1.5
    a_off = np.asarray(em.responsibilities(x, atoms_off, np.full(6, 1 / 6), sigma))
    plain_off = np.asarray(jax.nn.softmax(jnp.asarray(x @ atoms_off.T / sigma**2), axis=-1))
    assert np.max(np.abs(a_off - plain_off)) > 1e-3


# ----------------------------------------------------------------------------- posterior mean


def test_posterior_mean_is_one_attention_step(problem):
    x, atoms, weights, sigma = problem
    got = np.asarray(em.posterior_mean(x, atoms, weights, sigma))
    assert got.shape == np.shape(x)

    x2, mu2 = _as_2d(x), _as_2d(atoms)
    bias = np.log(weights) - np.sum(mu2**2, axis=1) / (2 * sigma**2)
    att = softmax_attention(
        jnp.asarray(x2), jnp.asarray(mu2), jnp.asarray(mu2), scale=1 / sigma**2, key_bias=bias
    )
    via_attention = np.asarray(att.output)
    a = ref_responsibilities(x, atoms, weights, sigma)
    by_hand = a @ mu2
    if np.ndim(x) == 1:
        via_attention, by_hand = via_attention[:, 0], by_hand[:, 0]
    np.testing.assert_allclose(got, via_attention, rtol=0, atol=1e-12)
    np.testing.assert_allclose(got, by_hand, rtol=0, atol=1e-10)


# ----------------------------------------------------------------------------- log-likelihood


def test_log_likelihood_matches_scipy(problem):
    x, atoms, weights, sigma = problem
    x2, mu2 = _as_2d(x), _as_2d(atoms)
    p = x2.shape[1]
    dens = sum(
        w * multivariate_normal(m, sigma**2 * np.eye(p)).pdf(x2).reshape(-1)
        for m, w in zip(mu2, weights, strict=True)
    )
    expected = float(np.sum(np.log(dens)))
    got = float(em.log_likelihood(x, atoms, weights, sigma))
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=0)
    np.testing.assert_allclose(
        got, ref_log_likelihood(x, atoms, weights, sigma), rtol=1e-12, atol=0
    )


# ----------------------------------------------------------------------------- fit_em


@settings(max_examples=25, deadline=None)
@given(
    data=st.data(),
    n=st.sampled_from([5, 17]),
    p=st.sampled_from([1, 2]),
    scalar=st.booleans(),
    fewer_atoms=st.booleans(),
    update_weights=st.booleans(),
    sigma=st.floats(0.2, 3.0),
)
def test_fit_em_log_likelihood_never_decreases(
    data, n, p, scalar, fewer_atoms, update_weights, sigma
):
    shape = (n,) if (p == 1 and scalar) else (n, p)
    x = data.draw(
        hnp.arrays(np.float64, shape, elements=st.floats(-5, 5, allow_nan=False, width=64)),
        label="x",
    )
    num_atoms = 3 if fewer_atoms else n
    res = em.fit_em(
        x, sigma, num_atoms=num_atoms, update_weights=update_weights, max_iters=30, tol=0.0
    )
    full = np.asarray(res.log_likelihood_trace)
    # a fixed shape (max_iters + 1,), NaN after the last step taken
    assert full.shape == (31,)
    assert np.all(np.isnan(full[int(res.num_iters) + 1 :]))
    trace = full[: int(res.num_iters) + 1]
    assert res.converged or res.num_iters == 30
    assert np.all(np.isfinite(trace))
    assert np.all(np.isfinite(np.asarray(res.atoms)))
    assert res.atoms.shape == ((num_atoms,) if len(shape) == 1 else (num_atoms, p))
    slack = 1e-9 * (1.0 + np.abs(trace[:-1]))
    assert np.all(np.diff(trace) >= -slack), np.diff(trace)
    # The trace starts at the log-likelihood of the starting measure.
    start = em.initial_atoms(x, num_atoms)
    np.testing.assert_allclose(
        trace[0],
        ref_log_likelihood(x, start, np.full(num_atoms, 1.0 / num_atoms), sigma),
        rtol=1e-10,
        atol=1e-10,
    )


@pytest.fixture(scope="module")
def three_atom_fit():
    _, x = simulate(jax.random.key(0), "three-atoms", 1.0, 300)
    return np.asarray(x), em.fit_em(x, 1.0, max_iters=2000)


def test_fit_em_converges_on_three_atoms(three_atom_fit):
    x, res = three_atom_fit
    n = x.shape[0]
    full = np.asarray(res.log_likelihood_trace)
    assert res.converged
    assert 0 < res.num_iters < 2000
    assert full.shape == (2001,) and np.all(np.isnan(full[int(res.num_iters) + 1 :]))
    trace = full[: int(res.num_iters) + 1]
    assert res.atoms.shape == (n,)
    np.testing.assert_allclose(np.asarray(res.weights), np.full(n, 1.0 / n), rtol=0, atol=0)
    # Converged: the last step changed the log-likelihood by at most tol * N.
    assert abs(trace[-1] - trace[-2]) <= 1e-8 * n
    assert np.all(np.diff(trace) >= -1e-9 * (1 + np.abs(trace[:-1])))
    uniform = np.full(n, 1.0 / n)
    np.testing.assert_allclose(
        trace[-1], float(em.log_likelihood(x, res.atoms, res.weights, 1.0)), rtol=1e-12
    )
    np.testing.assert_allclose(
        trace[-1], ref_log_likelihood(x, np.asarray(res.atoms), uniform, 1.0), rtol=1e-10
    )
    np.testing.assert_allclose(trace[0], float(em.log_likelihood(x, x, uniform, 1.0)), rtol=1e-12)
    np.testing.assert_allclose(trace[0], ref_log_likelihood(x, x, uniform, 1.0), rtol=1e-10)
    assert trace[-1] > trace[0]


def test_fit_em_converged_atoms_shrink_toward_truth(three_atom_fit):
    x, res = three_atom_fit
    n = x.shape[0]
    uniform = np.full(n, 1.0 / n)
    # One more (reference) EM step from the fitted atoms gains no more than tol * N.
    nxt, _ = ref_em_step(x, np.asarray(res.atoms), uniform, 1.0, False)
    gain = ref_log_likelihood(x, nxt, uniform, 1.0) - res.log_likelihood_trace[res.num_iters]
    assert -1e-9 * n <= gain <= 1e-8 * n
    # The fitted atoms cluster near the true support {-2, 0, 3} more than the data do.
    truth = np.array([-2.0, 0.0, 3.0])
    dist_fit = np.min(np.abs(np.asarray(res.atoms)[:, None] - truth), axis=1)
    dist_data = np.min(np.abs(x[:, None] - truth), axis=1)
    assert np.mean(dist_fit) < np.mean(dist_data)


def test_em_step_far_atom_stays_finite():
    x = np.array([-1.0, -0.2, 0.3, 1.1, 2.0])
    atoms = np.array([-1.0, 0.5, 1e3])
    weights = np.full(3, 1.0 / 3)
    new_atoms, new_weights = em.em_step(x, atoms, weights, 0.5, update_weights=True)
    new_atoms, new_weights = np.asarray(new_atoms), np.asarray(new_weights)
    assert np.all(np.isfinite(new_atoms))
    assert np.all(np.isfinite(new_weights))
    assert new_atoms[2] == 1e3  # no mass: the atom keeps its position
    assert new_weights[2] == 0.0
    np.testing.assert_allclose(new_weights.sum(), 1.0, rtol=0, atol=1e-12)
    ref_atoms, ref_weights = ref_em_step(x, atoms[:2], np.full(2, 0.5), 0.5, True)
    # The far atom takes no responsibility, so the near ones move as in a 2-atom problem
    # whose weights are renormalised (w_k / (1 - w_far) = 1/2 each).
    np.testing.assert_allclose(new_atoms[:2], ref_atoms, rtol=0, atol=1e-10)
    np.testing.assert_allclose(new_weights[:2], ref_weights, rtol=0, atol=1e-10)
    # A second step from a zero weight (log w = -inf) must stay finite as well.
    again_atoms, again_weights = em.em_step(x, new_atoms, new_weights, 0.5, update_weights=True)
    assert np.all(np.isfinite(np.asarray(again_atoms)))
    assert np.all(np.isfinite(np.asarray(again_weights)))
    assert np.asarray(again_atoms)[2] == 1e3


@pytest.mark.parametrize("shift", [0.0, 1e3])
def test_fit_em_is_translation_equivariant_in_float64(shift):
    """Fitting x + c gives the atoms of x shifted by c (scores from differences)."""
    _, x = simulate(jax.random.key(5), "three-atoms", 1.0, 200)
    x = np.asarray(x)
    base = em.fit_em(x, 1.0, max_iters=50, tol=0.0)
    moved = em.fit_em(x + shift, 1.0, max_iters=50, tol=0.0)
    np.testing.assert_allclose(np.asarray(moved.atoms) - shift, base.atoms, atol=1e-9)
    np.testing.assert_allclose(
        moved.log_likelihood_trace, base.log_likelihood_trace, rtol=1e-11, atol=0
    )


def test_float32_far_from_the_origin():
    """In float32, data centred at 1000 give the same responsibilities, posterior means and
    log-likelihood as data centred at 0, to float32 accuracy (the scores come from the
    differences x_i - mu_k)."""
    _, x = simulate(jax.random.key(6), "three-atoms", 1.0, 400)
    x32 = np.asarray(x, np.float32)
    atoms = np.array([-2.1, 0.2, 2.9], np.float32)
    w = np.array([0.5, 0.3, 0.2], np.float32)
    c = np.float32(1000.0)
    z0, a0 = em.posterior(jnp.asarray(x32), atoms, w, 1.0)
    z1, a1 = em.posterior(jnp.asarray(x32 + c), atoms + c, w, 1.0)
    assert a1.dtype == jnp.float32 and z1.dtype == jnp.float32
    np.testing.assert_allclose(a1, a0, atol=2e-3)
    np.testing.assert_allclose(np.asarray(a1).sum(1), 1.0, atol=1e-6)
    np.testing.assert_allclose(np.asarray(z1) - c, z0, atol=2e-3)
    ll0 = float(em.log_likelihood(jnp.asarray(x32), atoms, w, 1.0))
    ll1 = float(em.log_likelihood(jnp.asarray(x32 + c), atoms + c, w, 1.0))
    exact = ref_log_likelihood(x32.astype(np.float64), atoms.astype(np.float64), w, 1.0)
    assert abs(ll0 - exact) < 1e-5 * abs(exact)
    assert abs(ll1 - exact) < 1e-4 * abs(exact)
    fit = em.fit_em(jnp.asarray(x32 + c), 1.0, max_iters=100)
    assert fit.atoms.dtype == jnp.float32
    trace = np.asarray(fit.log_likelihood_trace)[: int(fit.num_iters) + 1]
    assert np.all(np.diff(trace) >= -1e-6 * abs(exact))
    zh = np.asarray(em.posterior_mean(jnp.asarray(x32 + c), fit.atoms, fit.weights, 1.0)) - c
    assert np.all(np.isfinite(zh)) and np.abs(zh).max() < 10


# ----------------------------------------------------------------------------- fit_em in chunks
# A concrete fit runs its loop in chunks of one compiled program (``em._em_iterations``),
# returning to Python between them, where a Ctrl-C is honoured. The data: a shape no other test
# compiles (N = 23, p = 2, max_iters = 9), so that the compilations counted are this file's own.


def _chunk_data(seed):
    return np.random.default_rng(seed).normal(0.0, 2.0, (23, 2))


def _fit_in_chunks(monkeypatch, x, passes, block_size=None):
    """fit_em with chunks of ``passes`` loop passes; returns (result, passes of each chunk)."""
    entries = 23 * 23 * 3 * (1 if block_size is None else 2)  # a pass's, N = K = 23, p = 2
    monkeypatch.setattr(em, "_CHUNK_ENTRIES", passes * entries)
    run, calls = em._em_iterations, []

    def counted(*args):
        calls.append(args[4])
        return run(*args)

    monkeypatch.setattr(em, "_em_iterations", counted)
    result = em.fit_em(x, 1.3, max_iters=9, tol=0.0, update_weights=True, block_size=block_size)
    monkeypatch.undo()
    return result, calls


def test_chunk_length_follows_the_work_of_a_pass():
    """One chunk for a small fit; at N = K = 20,000 (the issue's 30 s fit) one pass a chunk;
    in between as many passes as stay within the budget."""
    assert em._chunk_passes(300, 300, 1, None, 200) == 201
    assert em._chunk_passes(20_000, 20_000, 1, None, 200) == 1
    assert em._chunk_passes(20_000, 20_000, 1, 1024, 200) == 1
    passes = em._chunk_passes(2_000, 2_000, 1, None, 200)
    assert 1 < passes < 201 and passes * 2_000 * 2_000 * 2 <= em._CHUNK_ENTRIES
    assert em._chunk_passes(2_000, 2_000, 1, 256, 200) == passes // 2


@pytest.mark.usefixtures("empty_compilation_cache")  # it counts compilations
def test_fit_in_chunks_equals_one_loop_and_compiles_one_program(monkeypatch, caplog):
    """Chunks of 1 and 4 passes give the one-chunk fit bit for bit (dense and streamed), and
    compile nothing beyond the one program a fit of this shape compiles (JAX logs each XLA
    compilation, or persistent-cache hit, at debug level)."""
    x = _chunk_data(0)
    with caplog.at_level(logging.DEBUG, logger="jax._src.dispatch"):
        whole, calls = _fit_in_chunks(monkeypatch, x, 10)
        first = [r.getMessage() for r in caplog.records]
        caplog.clear()
        assert calls == [10] and int(whole.num_iters) == 9
        for passes, expected in ((1, [1] * 10), (4, [4, 4, 4])):
            chunked, calls = _fit_in_chunks(monkeypatch, x, passes)
            assert calls == expected
            for a, b in zip(chunked, whole, strict=True):
                np.testing.assert_array_equal(a, b)
        compiled = [r.getMessage() for r in caplog.records if "compilation" in r.getMessage()]
    assert sum("XLA compilation of jit(_em_iterations)" in m for m in first) == 1
    assert compiled == []
    streamed, _ = _fit_in_chunks(monkeypatch, x, 10, block_size=8)
    chunked, calls = _fit_in_chunks(monkeypatch, x, 3, block_size=8)
    assert calls == [3, 3, 3, 3]
    for a, b in zip(chunked, streamed, strict=True):
        np.testing.assert_array_equal(a, b)


def test_ctrl_c_stops_the_fit_after_the_running_chunk(monkeypatch):
    """A SIGINT that arrives while a chunk runs is honoured when it returns: no chunk after."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # xdist workers ignore it
    monkeypatch.setattr(em, "_CHUNK_ENTRIES", 2 * 23 * 23 * 3)  # 2 passes a chunk
    run, steps = em._em_iterations, []

    def interrupted_during_second_chunk(*args):
        state = run(*args)
        steps.append(int(state.step))  # waits for the chunk, as fit_em does
        if len(steps) == 2:
            signal.raise_signal(signal.SIGINT)
        return state

    monkeypatch.setattr(em, "_em_iterations", interrupted_during_second_chunk)
    try:
        with pytest.raises(KeyboardInterrupt):
            em.fit_em(_chunk_data(1), 1.3, max_iters=9, tol=0.0, update_weights=True)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert steps == [2, 4]


@pytest.mark.parametrize("update_weights", [False, True])
def test_streamed_em_equals_dense(update_weights):
    """Two passes over blocks (row log-sum-exp, then column sums) give the dense EM to
    round-off, for N and K that do not divide the block size, scalar and 2-D data."""
    for name, sigma in (("three-atoms", 1.0), ("ring", 0.5)):
        _, x = simulate(jax.random.key(7), name, sigma, 61)
        x = np.asarray(x)
        dense = em.fit_em(x, sigma, update_weights=update_weights, max_iters=25, tol=0.0)
        streamed = em.fit_em(
            x, sigma, update_weights=update_weights, max_iters=25, tol=0.0, block_size=16
        )
        np.testing.assert_allclose(streamed.atoms, dense.atoms, atol=1e-12)
        np.testing.assert_allclose(streamed.weights, dense.weights, atol=1e-14)
        np.testing.assert_allclose(
            streamed.log_likelihood_trace, dense.log_likelihood_trace, rtol=1e-13
        )
        atoms, w = dense.atoms[:20], np.full(20, 1 / 20)
        np.testing.assert_allclose(
            em.posterior_mean(x, atoms, w, sigma, block_size=8),
            em.posterior_mean(x, atoms, w, sigma),
            atol=1e-12,
        )
        assert float(em.log_likelihood(x, atoms, w, sigma, block_size=8)) == pytest.approx(
            float(em.log_likelihood(x, atoms, w, sigma)), rel=1e-13
        )
        step_dense = em.em_step(x, atoms, w, sigma, update_weights=update_weights)
        step_streamed = em.em_step(x, atoms, w, sigma, update_weights=update_weights, block_size=8)
        for a, b in zip(step_streamed, step_dense, strict=True):
            np.testing.assert_allclose(a, b, atol=1e-12)


def test_block_size_is_checked():
    x = np.linspace(-1, 1, 5)
    with pytest.raises(ValueError, match="^block_size"):
        em.fit_em(x, 1.0, block_size=0)
    with pytest.raises(ValueError, match="^block_size"):
        em.posterior_mean(x, x, np.full(5, 0.2), 1.0, block_size=2.5)
    with pytest.raises(ValueError, match="^block_size"):
        em.em_step(x, x, np.full(5, 0.2), 1.0, block_size=-3)


def test_mesh_is_checked():
    """A mesh that is not a one-axis ``Mesh`` is refused naming ``mesh``, before tracing; the
    dense path (``block_size=None``) refuses a mesh of more than one device, naming both."""
    x = np.linspace(-1, 1, 5)
    w = np.full(5, 0.2)
    two = sharding.batch_mesh(jax.devices()[:2])
    two_axes = jax.sharding.Mesh(np.asarray(jax.devices()[:2]).reshape(1, 2), ("a", "b"))
    with pytest.raises(TypeError, match="^mesh: expected a jax.sharding.Mesh"):
        em.em_step(x, x, w, 1.0, block_size=2, mesh=2)
    with pytest.raises(TypeError, match="^mesh: "):
        em.posterior_mean(x, x, w, 1.0, block_size=2, mesh=jax.devices())
    with pytest.raises(ValueError, match="^mesh: expected a mesh with one axis"):
        em.log_likelihood(x, x, w, 1.0, block_size=2, mesh=two_axes)
    for call in (
        lambda: em.fit_em(x, 1.0, mesh=two),
        lambda: em.em_step(x, x, w, 1.0, mesh=two),
        lambda: em.log_likelihood(x, x, w, 1.0, mesh=two),
        lambda: em.posterior_mean(x, x, w, 1.0, mesh=two),
    ):
        with pytest.raises(ValueError, match="^mesh: the dense path .*block_size"):
            call()
    # a one-device mesh is the dense path's own
    np.testing.assert_array_equal(
        em.em_step(x, x, w, 1.0, mesh=ONE_DEVICE)[0], em.em_step(x, x, w, 1.0)[0]
    )


def test_centred_sums_are_allowed_only_for_narrow_float64_data():
    """The streamed step takes its column sums about a centre only for concrete float64 data
    and atoms spanning at most 512 sigma (no compilation: a host-side decision)."""
    x = np.array([[0.0, 0.0], [1.0, -2.0], [3.0, 1.0]])
    assert estep.centred_sums_allowed(x, None, 0.5)
    assert estep.centred_sums_allowed(x, x + 250.0, 1.0)  # span 253 <= 512
    assert not estep.centred_sums_allowed(x, x + 600.0, 1.0)  # the atoms widen the span
    assert not estep.centred_sums_allowed(x, None, np.array([0.5, 1.0, 0.005]))  # min sigma
    assert not estep.centred_sums_allowed(x.astype(np.float32), None, 0.5)
    traced = jax.jit(lambda v: jnp.asarray(estep.centred_sums_allowed(v, None, 0.5)))(x)
    assert not bool(traced)
    # narrow for sigma but of a magnitude whose weighted sums (x - c) / l_i would overflow
    huge = np.array([[0.0], [1.0], [37.5]]) * 1e18
    assert not estep.centred_sums_allowed(huge, huge[:2], 1e18)


def test_streamed_step_of_huge_magnitude_data_equals_dense():
    """Data 1e18 wide with sigma 1e18 (in range for every check): the streamed step keeps
    the pair-by-pair sums, whose terms stay finite, and equals the dense step (review of
    issue 39: the centred sums overflowed to inf here)."""
    x = np.array([[0.0], [1.0], [37.5]]) * 1e18
    atoms, w = x[:2], np.array([0.5, 0.5])
    dense = em.em_step(x, atoms, w, 1e18, update_weights=True)
    step = em.em_step(x, atoms, w, 1e18, update_weights=True, block_size=16, mesh=ONE_DEVICE)
    assert np.all(np.isfinite(step[0]))
    np.testing.assert_allclose(step[0], dense[0], rtol=1e-12)
    np.testing.assert_allclose(step[1], dense[1], rtol=1e-12)


def test_sharded_stream_equals_one_device():
    """Rows sharded over the two host devices of the test session (N = 61 is odd, so the last
    shard is padded and masked) give the one-device stream and the dense step to round-off."""
    assert jax.local_device_count() >= 2
    _, x = simulate(jax.random.key(3), "ring", 0.5, 61)
    x = np.asarray(x)
    w = np.full(61, 1 / 61)
    dense = em.em_step(x, x, w, 0.5, update_weights=True)
    for mesh in (ONE_DEVICE, None):
        step = em.em_step(x, x, w, 0.5, update_weights=True, block_size=16, mesh=mesh)
        np.testing.assert_allclose(step[0], dense[0], atol=1e-12)
        np.testing.assert_allclose(step[1], dense[1], atol=1e-14)
    one = em.fit_em(x, 0.5, max_iters=10, tol=0.0, block_size=16, mesh=ONE_DEVICE)
    two = em.fit_em(x, 0.5, max_iters=10, tol=0.0, block_size=16)
    np.testing.assert_allclose(two.atoms, one.atoms, atol=1e-12)
    np.testing.assert_allclose(two.log_likelihood_trace, one.log_likelihood_trace, rtol=1e-13)
    np.testing.assert_allclose(
        em.posterior_mean(x, x, w, 0.5, block_size=16),
        em.posterior_mean(x, x, w, 0.5),
        atol=1e-12,
    )


_FOUR_DEVICE_SCRIPT = """
import jax
jax.config.update("jax_enable_x64", True)
import numpy as np
from attnbayes import sharding
from attnbayes.inference.deconvolution import em
from attnbayes.inference.deconvolution.estep import em_step_unchecked
from attnbayes.models.deconvolution import simulate

assert jax.local_device_count() == 4, jax.local_device_count()
mesh1 = sharding.batch_mesh(jax.devices()[:1])
mesh4 = sharding.batch_mesh()
_, x = simulate(jax.random.key(5), "ring", 0.5, 103)
x = np.asarray(x)
w = np.full(103, 1 / 103)
dense = em.em_step(x, x, w, 0.5)[0]
one = em.em_step(x, x, w, 0.5, block_size=16, mesh=mesh1)[0]
four = em.em_step(x, x, w, 0.5, block_size=16, mesh=mesh4)[0]
hlo = em_step_unchecked.lower(x, x, w, 0.5, False, 16, mesh4).compile().as_text()
four = np.asarray(four)
print(np.abs(four - np.asarray(one)).max(), np.abs(four - np.asarray(dense)).max())
print("all-reduce" in hlo)
ll4 = float(em.log_likelihood(x, x, w, 0.5, block_size=16, mesh=mesh4))
ll1 = float(em.log_likelihood(x, x, w, 0.5))
print(abs(ll4 - ll1) / abs(ll1))
"""


def test_sharded_over_four_devices_in_a_fresh_process():
    """XLA_FLAGS=--xla_force_host_platform_device_count=4: the compiled step all-reduces the
    row sums across the four devices and equals the one-device stream and the dense step."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4")
    run = subprocess.run(
        [sys.executable, "-c", _FOUR_DEVICE_SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    diff_lines = run.stdout.split("\n")
    d_one, d_dense = map(float, diff_lines[0].split())
    assert d_one < 1e-12 and d_dense < 1e-12
    assert diff_lines[1] == "True"
    assert float(diff_lines[2]) < 1e-13


# ----------------------------------------------------------------------------- kernels


def test_e_step_attention_log_normalizer_contract(vector_problem):
    """``e_step_attention`` (used inside jit by attnbayes.inference.deconvolution.gibbs and
    attnbayes.inference.deconvolution.invariants) keeps its contract: log p(x_i) = log_normalizer_i
    - beta |x_i - c|^2 / 2 - p log(2 pi s^2) / 2
    with c = mean of x, and A, z_hat as ``posterior``."""
    x, atoms, weights, sigma = vector_problem
    att = em.e_step_attention(jnp.asarray(x), jnp.asarray(atoms), jnp.asarray(weights), sigma)
    centred = x - x.mean(axis=0)
    point_ll = (
        np.asarray(att.log_normalizer)
        - 0.5 * np.sum(centred**2, axis=1) / sigma**2
        - 0.5 * x.shape[1] * np.log(2 * np.pi * sigma**2)
    )
    expected = logsumexp(ref_log_joint(x, atoms, weights, sigma), axis=1)
    np.testing.assert_allclose(point_ll, expected, rtol=1e-12)
    z_hat, resp = em.posterior(x, atoms, weights, sigma)
    np.testing.assert_allclose(att.weights, resp, atol=1e-14)
    np.testing.assert_allclose(att.output, z_hat, atol=1e-14)


@pytest.mark.parametrize("block_size", [None, 4])
def test_kernels_support_grad_vmap_and_jit(vector_problem, block_size):
    """grad of log p(x) in the atoms is sum_i A_ik (x_i - mu_k) / sigma^2 (Fisher's identity);
    jacfwd / jacrev through em_step, vmap over atoms and jit over the data all run."""
    x, atoms, weights, sigma = vector_problem
    stream = {"block_size": block_size, "mesh": ONE_DEVICE if block_size else None}
    grad = jax.grad(lambda m: em.log_likelihood(x, m, weights, sigma, **stream))(jnp.asarray(atoms))
    a = ref_responsibilities(x, atoms, weights, sigma)
    expected = np.sum(a[:, :, None] * (x[:, None, :] - atoms[None]), axis=0) / sigma**2
    np.testing.assert_allclose(grad, expected, atol=1e-12)
    for jac in (jax.jacfwd, jax.jacrev):
        j = jac(lambda m: em.em_step(x, m, weights, sigma, **stream)[0])(jnp.asarray(atoms))
        assert j.shape == atoms.shape * 2 and np.all(np.isfinite(j))
    batch = jnp.stack([atoms, atoms + 0.5])
    z = jax.vmap(lambda m: em.posterior_mean(x, m, weights, sigma, **stream))(batch)
    np.testing.assert_allclose(z[1], em.posterior_mean(x, atoms + 0.5, weights, sigma), atol=1e-12)
    ll = jax.jit(lambda data: em.log_likelihood(data, atoms, weights, sigma, **stream))(x)
    assert float(ll) == pytest.approx(ref_log_likelihood(x, atoms, weights, sigma), rel=1e-12)


# ----------------------------------------------------------------------------- column sums


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_block_sums_match_float64_sums(dtype):
    """The streamed pass's block sums (``estep.block_sums``: XLA reductions in float64,
    vector-matrix products in float32) and the dense M-step's (``estep.weighted_differences``,
    whose form also depends on the dtype) equal float64 sums of the same numbers, in float64 and
    float32."""
    rng = np.random.default_rng(13)
    a = rng.random((37, 23)).astype(dtype)
    x = rng.normal(0.0, 2.0, (37, 2)).astype(dtype)
    atoms = rng.normal(0.0, 2.0, (23, 2)).astype(dtype)
    a64, x64, m64 = (np.asarray(v, np.float64) for v in (a, x, atoms))
    expected = np.einsum("ik,ikc->kc", a64, x64[:, None, :] - m64[None, :, :])
    mass, shift = estep.block_sums(jnp.asarray(a), jnp.asarray(x), jnp.asarray(atoms))
    dense = estep.weighted_differences(jnp.asarray(a), jnp.asarray(x), jnp.asarray(atoms))
    assert mass.dtype == shift.dtype == dense.dtype == dtype
    rtol = 1e-13 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(mass, a64.sum(0), rtol=rtol)
    for got in (shift, dense):
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=rtol * np.abs(expected).max())


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_streamed_em_step_equals_dense_in_float64_and_float32(dtype):
    """One streamed EM step equals the dense one to round-off in both dtypes, with blocks that
    do not divide N = 600 or K = 300 and a block above ``_COLUMN_TILE`` (pass 2 then runs on
    smaller tiles than pass 1)."""
    _, x = simulate(jax.random.key(11), "ring", 0.5, 600)
    x = np.asarray(x, dtype)
    atoms = x[::2] + dtype(0.05)
    k = atoms.shape[0]
    w = np.linspace(1.0, 2.0, k)
    w = (w / w.sum()).astype(dtype)
    dense = em.em_step(x, atoms, w, 0.5, update_weights=True)
    assert dense[0].dtype == dense[1].dtype == dtype
    atol = 1e-12 if dtype == np.float64 else 2e-5
    assert 512 > estep._COLUMN_TILE
    for block_size in (7, 64, 512):
        streamed = em.em_step(
            x, atoms, w, 0.5, update_weights=True, block_size=block_size, mesh=ONE_DEVICE
        )
        assert streamed[0].dtype == streamed[1].dtype == dtype
        np.testing.assert_allclose(streamed[0], dense[0], rtol=0, atol=atol)
        np.testing.assert_allclose(streamed[1], dense[1], rtol=atol, atol=atol / k)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_em_step_far_from_the_origin_is_correctly_rounded(dtype):
    """Ring data and atoms centred at 1e4: the step's atoms (dense and streamed) lie within one
    unit in the last place of 1e4 of the float64 step on the same numbers, i.e. the M-step
    adds to mu_k a shift sum_i A_ik (x_i - mu_k) / sum_i A_ik computed to far below that unit.
    Summing A_ik x_i instead (sum_i A_ik x_i / sum_i A_ik) misses by about 9 units here."""
    _, x = simulate(jax.random.key(12), "ring", 0.5, 600)
    x = (np.asarray(x) + 1e4).astype(dtype)
    atoms = x[::2] + dtype(0.05)
    w = np.full(atoms.shape[0], 1.0 / atoms.shape[0], dtype)
    x64, m64 = np.asarray(x, np.float64), np.asarray(atoms, np.float64)
    a = ref_responsibilities(x64, m64, np.asarray(w, np.float64), 0.5)
    shift = np.einsum("ik,ikc->kc", a, x64[:, None, :] - m64[None, :, :])
    expected = m64 + shift / a.sum(0)[:, None]
    ulp = float(np.spacing(dtype(1e4)))
    for block_size in (None, 64):
        mesh = None if block_size is None else ONE_DEVICE
        got = em.em_step(x, atoms, w, 0.5, block_size=block_size, mesh=mesh)[0]
        assert got.dtype == dtype
        assert np.abs(np.asarray(got, np.float64) - expected).max() <= ulp


# ----------------------------------------------------------------------------- bad input (issue 12)
#
# Every public function of ``em`` against huge values, NaN/inf, empty, complex and wrong-rank
# arrays and bad scalars (with the older EM catalogue of the first release): a ValueError whose
# message starts with the argument's name, raised before any JAX tracing. Every array is tiny,
# so each case runs in milliseconds. Also here, the regression tests of issue 12:
#
# - finding 2: data (and atoms) whose spread in units of sigma makes the squared distances
#   overflow are refused, naming the argument and the limit; just inside the limit every entry
#   point returns finite numbers; under ``jax.jit`` (no checks) the overflow shows as NaN / -inf,
#   and ``em.check_problem`` refuses the concrete inputs;
# - finding 5: one outlier 1e6 sigma away leaves the float32 fit of the bulk within 1e-3 sigma of
#   the float64 fit (dense, streamed and sharded);
# - finding 9: ``em.estep_memory_bytes`` against XLA's compiled memory analysis.

X1 = np.array([-1.0, 0.5, 2.0, 3.0])  # (N,) with N = 4
A1 = np.array([-1.0, 2.0])
W1 = np.array([0.5, 0.5])
X2 = np.array([[0.0, 1.0], [1.0, 0.0], [2.0, 2.0]])  # (N, p) = (3, 2)
A2 = np.array([[0.0, 0.0], [1.0, 1.0]])

# Spreads far beyond the limit sqrt(finfo.max / (4 N p)) (3.4e153 in float64, 4.6e18 in
# float32 for N = 4, p = 1), but every value finite.
HUGE64 = 1e160
HUGE32 = np.float32(1e20)
X1_HUGE = np.array([-1.0, 0.5, 2.0, HUGE64])
X1_HUGE32 = np.array([-1.0, 0.5, 2.0, HUGE32], np.float32)
X2_HUGE = np.array([[0.0, 1.0], [1.0, -HUGE64], [2.0, 2.0]])
X1_COMPLEX = X1 + 0j
X_3D = np.zeros((3, 2, 2))
# the older catalogue's bad data
X_NAN = np.array([-1.0, np.nan, 2.0, 3.0])
X_INF = np.array([[0.0, 1.0], [np.inf, 0.0], [2.0, 2.0]])
X_NOCOLS = np.zeros((3, 0))
X_EMPTY = np.zeros((0,))
X_EMPTY_2D = np.zeros((0, 2))


def _x64_off(fn, *args, **kwargs):
    """Call ``fn`` with jax_enable_x64 off (float64 input is then computed in float32)."""
    with jax.enable_x64(False):
        return fn(*args, **kwargs)


def _em_entry_points(x, atoms, weights, sigma, **kwargs):
    """Every public EM function that takes (x, atoms, weights, sigma), dense and streamed."""
    return {
        "em_step": lambda: em.em_step(x, atoms, weights, sigma, **kwargs),
        "em_step-streamed": lambda: em.em_step(x, atoms, weights, sigma, block_size=2),
        "posterior_mean": lambda: em.posterior_mean(x, atoms, weights, sigma),
        "posterior_mean-streamed": lambda: em.posterior_mean(
            x, atoms, weights, sigma, block_size=2
        ),
        "log_likelihood": lambda: em.log_likelihood(x, atoms, weights, sigma),
        "log_likelihood-streamed": lambda: em.log_likelihood(
            x, atoms, weights, sigma, block_size=2
        ),
        "responsibilities": lambda: em.responsibilities(x, atoms, weights, sigma),
        "posterior": lambda: em.posterior(x, atoms, weights, sigma),
        "check_problem": lambda: em.check_problem(x, sigma, atoms=atoms, weights=weights),
    }


def _data_entry_points(x, sigma):
    """Every public EM function that takes data and sigma (and makes its own atoms)."""
    return {
        "fit_em": lambda: em.fit_em(x, sigma, max_iters=2),
        "fit_em-streamed": lambda: em.fit_em(x, sigma, max_iters=2, block_size=2),
        "check_problem-x-only": lambda: em.check_problem(x, sigma),
    }


def _em_calls(x, atoms, weights, sigma):
    """Every public EM entry point on one problem, labelled."""
    return {
        "fit_em": lambda: em.fit_em(x, sigma, num_atoms=None if atoms is None else len(atoms)),
        "em_step": lambda: em.em_step(x, atoms, weights, sigma),
        "posterior_mean": lambda: em.posterior_mean(x, atoms, weights, sigma),
        "log_likelihood": lambda: em.log_likelihood(x, atoms, weights, sigma),
        "responsibilities": lambda: em.responsibilities(x, atoms, weights, sigma),
    }


# bad sigma where the older catalogue does not look
BAD_SIGMAS = {
    "zero": 0.0,
    "negative": -1.0,
    "nan": np.nan,
    "str": "1.0",
    "vector": np.ones(2),
    "bool": True,
    "none": None,
    "underflow": 1e-300,
}


def _cases():
    """(id, callable, anchored pattern)."""
    cases = []

    def add(label, call, pattern):
        cases.append((label, call, pattern))

    # --- finding 2: spreads whose squares overflow, in x, in atoms / init / grid, by sigma
    for fn, call in _em_entry_points(X1_HUGE, A1, W1, 1.0).items():
        add(f"{fn}-x-huge", call, r"^x: spread .* exceeds .* for float64")
    for fn, call in _em_entry_points(X2_HUGE, A2, W1, 1.0).items():
        add(f"{fn}-x-huge-2d", call, r"^x: spread .* exceeds .* for float64")
    for fn, call in _em_entry_points(X1_HUGE32, A1.astype(np.float32), W1, 1.0).items():
        add(f"{fn}-x-huge-float32", call, r"^x: spread .* exceeds .* for float32")
    for fn, call in _em_entry_points(X1, np.array([-1.0, HUGE64]), W1, 1.0).items():
        add(f"{fn}-atoms-huge", call, "^atoms: spread")
    for fn, call in _data_entry_points(X1_HUGE, 1.0).items():
        add(f"{fn}-x-huge", call, r"^x: spread .* exceeds")
    for fn, call in _data_entry_points(X1_HUGE32, 1.0).items():
        add(f"{fn}-x-huge-float32", call, r"^x: spread .* exceeds .* for float32")
    # sigma small enough that the spread in units of sigma overflows (1 / sigma^2 is finite)
    for fn, call in _data_entry_points(X1, 1e-153).items():
        add(f"{fn}-x-spread-by-sigma", call, r"^x: spread .* exceeds")
    add(
        "fit_em-init-huge",
        lambda: em.fit_em(X1, 1.0, init=np.array([0.0, HUGE64]), max_iters=2),
        "^init: spread",
    )
    add(
        "e_step_attention-x-huge",
        lambda: em.e_step_attention(X1_HUGE[:, None], A1[:, None], W1, 1.0),
        "^x: spread",
    )
    # float64 values beyond float32's range, computed in float32 (jax_enable_x64 off)
    beyond = np.array([1e39, 1e39, 1e39])
    add("fit_em-x-beyond-float32", lambda: _x64_off(em.fit_em, beyond, 1.0), "^x: values")
    add(
        "posterior_mean-atoms-beyond-float32",
        lambda: _x64_off(em.posterior_mean, X1, np.array([0.0, 1e39]), W1, 1.0),
        "^atoms: values",
    )
    # --- NaN / inf where test_validation.py does not look
    x_nan = np.array([-1.0, np.nan, 2.0, 3.0])
    add("posterior-x-nan", lambda: em.posterior(x_nan, A1, W1, 1.0), "^x: ")
    add("posterior-x-inf", lambda: em.posterior(-np.inf * X1, A1, W1, 1.0), "^x: ")
    add(
        "posterior_mean-atoms-inf",
        lambda: em.posterior_mean(X1, [0.0, np.inf], W1, 1.0),
        "^atoms: ",
    )
    add(
        "log_likelihood-weights-nan",
        lambda: em.log_likelihood(X1, A1, [np.nan, 1.0], 1.0),
        "^weights: ",
    )
    add(
        "fit_em-weights-nan",
        lambda: em.fit_em(X1, 1.0, num_atoms=2, weights=[np.nan, 1.0]),
        "^weights: ",
    )
    add("fit_em-init-inf", lambda: em.fit_em(X1, 1.0, init=[0.0, np.inf]), "^init: ")
    add("initial_atoms-x-nan", lambda: em.initial_atoms(x_nan, 2), "^x: ")
    add(
        "e_step_attention-x-nan",
        lambda: em.e_step_attention(x_nan[:, None], A1[:, None], W1, 1.0),
        "^x: ",
    )
    # --- empty arrays
    add("posterior-x-empty", lambda: em.posterior(np.zeros(0), A1, W1, 1.0), "^x: ")
    add("em_step-atoms-empty", lambda: em.em_step(X1, np.zeros(0), np.zeros(0), 1.0), "^atoms: ")
    add(
        "posterior_mean-atoms-empty-2d",
        lambda: em.posterior_mean(X2, np.zeros((0, 2)), np.zeros(0), 1.0),
        "^atoms: ",
    )
    add(
        "log_likelihood-weights-empty",
        lambda: em.log_likelihood(X1, A1, np.zeros(0), 1.0),
        "^weights: ",
    )
    add("fit_em-init-empty", lambda: em.fit_em(X1, 1.0, init=np.zeros(0)), "^init: ")
    add("initial_atoms-init-empty", lambda: em.initial_atoms(X1, init=np.zeros(0)), "^init: ")
    add("initial_atoms-x-empty", lambda: em.initial_atoms(np.zeros(0)), "^x: ")
    # --- complex values
    add("fit_em-x-complex", lambda: em.fit_em(X1_COMPLEX, 1.0), "^x: ")
    add("em_step-x-complex", lambda: em.em_step(X1_COMPLEX, A1, W1, 1.0), "^x: ")
    add("posterior-atoms-complex", lambda: em.posterior(X1, A1 + 1j, W1, 1.0), "^atoms: ")
    add(
        "responsibilities-weights-complex",
        lambda: em.responsibilities(X1, A1, W1 + 0j, 1.0),
        "^weights: ",
    )
    add("log_likelihood-sigma-complex", lambda: em.log_likelihood(X1, A1, W1, 1.0 + 0j), "^sigma: ")
    add("fit_em-init-complex", lambda: em.fit_em(X1, 1.0, init=A1 + 0j), "^init: ")
    # --- wrong rank
    add("posterior-x-rank3", lambda: em.posterior(X_3D, A2, W1, 1.0), "^x: ")
    add("posterior-x-scalar", lambda: em.posterior(np.float64(1.0), A1, W1, 1.0), "^x: ")
    add("em_step-atoms-rank3", lambda: em.em_step(X2, np.zeros((2, 2, 1)), W1, 1.0), "^atoms: ")
    add("em_step-weights-rank2", lambda: em.em_step(X1, A1, W1[None, :], 1.0), "^weights: ")
    add("fit_em-init-rank2-for-1d", lambda: em.fit_em(X1, 1.0, init=A2), "^init: ")
    add("initial_atoms-x-rank3", lambda: em.initial_atoms(X_3D), "^x: ")
    add(
        "e_step_attention-x-rank1",
        lambda: em.e_step_attention(X1, A1, W1, 1.0),
        "^x: ",
    )
    # --- bad sigma where the older catalogue does not look
    for label, sigma in BAD_SIGMAS.items():
        add(f"posterior-sigma-{label}", lambda s=sigma: em.posterior(X1, A1, W1, s), "^sigma: ")
        add(
            f"fit_em-streamed-sigma-{label}",
            lambda s=sigma: em.fit_em(X1, s, block_size=2),
            "^sigma: ",
        )
    add("check_problem-sigma-zero", lambda: em.check_problem(X1, 0.0), "^sigma: ")
    # --- num_atoms, block_size, num_devices, grid, grid_size, max_iters, tol and the like
    for label, k in (("zero", 0), ("float", 2.5), ("bool", True), ("str", "2"), ("none-list", [2])):
        add(f"initial_atoms-num_atoms-{label}", lambda k=k: em.initial_atoms(X1, k), "^num_atoms: ")
    add(
        "fit_em-num_atoms-vs-init", lambda: em.fit_em(X1, 1.0, num_atoms=3, init=A1), "^num_atoms: "
    )
    add(
        "fit_em-weights-vs-num_atoms",
        lambda: em.fit_em(X1, 1.0, num_atoms=3, weights=W1),
        "^weights: ",
    )
    for label, b in (("zero", 0), ("negative", -1), ("float", 2.5), ("bool", True), ("str", "4")):
        add(
            f"fit_em-block_size-{label}",
            lambda b=b: em.fit_em(X1, 1.0, block_size=b),
            "^block_size: ",
        )
        add(
            f"log_likelihood-block_size-{label}",
            lambda b=b: em.log_likelihood(X1, A1, W1, 1.0, block_size=b),
            "^block_size: ",
        )
        add(
            f"posterior_mean-block_size-{label}",
            lambda b=b: em.posterior_mean(X1, A1, W1, 1.0, block_size=b),
            "^block_size: ",
        )
    add(
        "posterior_mean-mesh-dense-two-devices",
        lambda: em.posterior_mean(X1, A1, W1, 1.0, mesh=sharding.batch_mesh(jax.devices()[:2])),
        "^mesh: ",
    )
    for label, m in (("float", 2.5), ("bool", True), ("str", "10"), ("none", None)):
        add(
            f"fit_em-max_iters-{label}", lambda m=m: em.fit_em(X1, 1.0, max_iters=m), "^max_iters: "
        )
    for label, t in (
        ("nan", np.nan),
        ("str", "1e-8"),
        ("bool", True),
        ("none", None),
        ("vec", [1e-8]),
    ):
        add(f"fit_em-tol-{label}", lambda t=t: em.fit_em(X1, 1.0, tol=t), "^tol: ")
    for label, u in (("str", "False"), ("none", None), ("int", 2)):
        add(
            f"em_step-update_weights-{label}",
            lambda u=u: em.em_step(X1, A1, W1, 1.0, update_weights=u),
            "^update_weights: ",
        )
        add(
            f"fit_em-update_weights-{label}",
            lambda u=u: em.fit_em(X1, 1.0, update_weights=u),
            "^update_weights: ",
        )
    # --- the older EM catalogue
    bad_x = {
        "nan": (X_NAN, A1, W1),
        "inf": (X_INF, A2, W1),
        "rank3": (X_3D, A2, W1),
        "zero_cols": (X_NOCOLS, A2, W1),
        "empty": (X_EMPTY, A1, W1),
        "empty_2d": (X_EMPTY_2D, A2, W1),
    }
    for label, (x, atoms, weights) in bad_x.items():
        for fn, call in _em_calls(x, atoms, weights, 1.0).items():
            add(f"{fn}-x-{label}", call, "^x: ")
    for sigma in (0.0, -1.0, np.nan, np.inf, "1.0", np.array([1.0, 2.0])):
        for fn, call in _em_calls(X1, A1, W1, sigma).items():
            add(f"{fn}-sigma-{sigma!r}", call, "^sigma: ")
    for k in (0, -1, 5, 2.0, True):  # 5 > N = 4 with init="data"; non-integers refused
        add(f"fit_em-num_atoms-{k!r}", lambda k=k: em.fit_em(X1, 1.0, num_atoms=k), "^num_atoms: ")
    for label, call, pattern in [
        ("initial_atoms-num_atoms-too-many", lambda: em.initial_atoms(X2, 4), "^num_atoms: "),
        ("em_step-weights-sum", lambda: em.em_step(X1, A1, [0.5, 0.6], 1.0), "^weights: "),
        ("em_step-weights-neg", lambda: em.em_step(X1, A1, [1.5, -0.5], 1.0), "^weights: "),
        ("em_step-weights-len", lambda: em.em_step(X1, A1, [0.2, 0.3, 0.5], 1.0), "^weights: "),
        (
            "fit_em-weights-sum",
            lambda: em.fit_em(X1, 1.0, num_atoms=2, weights=[0.3, 0.3]),
            "^weights: ",
        ),
        ("em_step-atoms-cols", lambda: em.em_step(X2, np.zeros((2, 3)), W1, 1.0), "^atoms: "),
        ("log_likelihood-atoms-rank", lambda: em.log_likelihood(X2, A1, W1, 1.0), "^atoms: "),
        ("posterior_mean-atoms-rank", lambda: em.posterior_mean(X1, A2, W1, 1.0), "^atoms: "),
        ("em_step-atoms-nan", lambda: em.em_step(X1, [0.0, np.nan], W1, 1.0), "^atoms: "),
        (
            "fit_em-init-cols",
            lambda: em.fit_em(X2, 1.0, init=np.zeros((2, 3))),
            "^init: ",
        ),
        ("fit_em-init-name", lambda: em.fit_em(X2, 1.0, init="kmeans"), "^init: "),
        ("fit_em-max_iters", lambda: em.fit_em(X1, 1.0, max_iters=-1), "^max_iters: "),
        ("fit_em-tol", lambda: em.fit_em(X1, 1.0, tol=-1e-3), "^tol: "),
    ]:
        add(label, call, pattern)
    return cases


CASES = _cases()


@pytest.mark.usefixtures("full_tracebacks")
@pytest.mark.parametrize(("call", "pattern"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_refused_before_jax(call, pattern):
    check_refused(call, ValueError, pattern)


def test_case_ids_are_unique():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))


# ----------------------------------------------------------------------------- finding 2


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("dim", [1, 2])
def test_just_inside_the_spread_limit_every_entry_point_is_finite(dtype, dim):
    """At 0.9 times the limit sqrt(finfo.max / (4 N p)) nothing overflows in EM (the NPMLE's
    entry points: ``test_kiefer_wolfowitz``): the safety factor
    covers the sum over p coordinates and the log-likelihood's sum over N points, even with
    every point far from the only atom (log p(x) about -N p D^2 / 2 = -0.1 finfo.max)."""
    d = 0.9 * validation.max_scaled_spread(dtype, 4, dim)
    x, far_atom, bulk, atoms, w = spread_limit_problem(dtype, dim, d)
    results = {
        "fit_em": em.fit_em(x, 1.0, max_iters=3),
        "fit_em-streamed": em.fit_em(x, 1.0, max_iters=3, block_size=2),
        "em_step": em.em_step(x, atoms, w, 1.0, update_weights=True),
        "em_step-streamed": em.em_step(x, atoms, w, 1.0, block_size=2),
        "posterior": em.posterior(x, atoms, w, 1.0),
        "posterior_mean-streamed": em.posterior_mean(x, atoms, w, 1.0, block_size=2),
        "log_likelihood-far-atom": em.log_likelihood(bulk, far_atom, np.ones(1), 1.0),
        "log_likelihood-far-atom-streamed": em.log_likelihood(
            bulk, far_atom, np.ones(1), 1.0, block_size=2
        ),
    }
    for name, result in results.items():
        assert all_finite(result), name
    ll = float(results["log_likelihood-far-atom"])
    assert ll < -0.01 * float(np.finfo(dtype).max)  # really that far out


def test_under_jit_the_checks_cannot_run_and_overflow_gives_nan():
    """Tracers carry no values, so the spread check is skipped inside ``jax.jit``; the
    overflow then shows as NaN (never as a plausible finite number), and ``check_problem``
    on the concrete inputs says why."""
    calls = {
        "posterior_mean": lambda x: em.posterior_mean(x, A1, W1, 1.0),
        "posterior_mean-streamed": lambda x: em.posterior_mean(x, A1, W1, 1.0, block_size=2),
        "log_likelihood": lambda x: em.log_likelihood(x, A1, W1, 1.0),
        "log_likelihood-streamed": lambda x: em.log_likelihood(x, A1, W1, 1.0, block_size=2),
        "responsibilities": lambda x: em.responsibilities(x, A1, W1, 1.0),
        "em_step": lambda x: em.em_step(x, A1, W1, 1.0, update_weights=True),
        "em_step-streamed": lambda x: em.em_step(x, A1, W1, 1.0, block_size=2),
        "e_step_attention": lambda x: em.e_step_attention(x[:, None], A1[:, None], W1, 1.0),
    }
    for name, call in calls.items():
        assert all_finite(jax.jit(call)(X1)), name
        out = jax.jit(call)(X1_HUGE)
        assert np.any(np.isnan(np.asarray(jax.tree.leaves(out)[0]))), name
    with pytest.raises(ValueError, match=r"^x: spread .* exceeds"):
        em.check_problem(X1_HUGE, 1.0, atoms=A1, weights=W1)
    em.check_problem(X1, 1.0, atoms=A1, weights=W1)  # fine inputs pass


def test_spread_message_names_the_limit():
    limit = validation.max_scaled_spread(np.float64, 4, 1)
    with pytest.raises(ValueError) as excinfo:
        em.fit_em(X1_HUGE, 1.0)
    message = str(excinfo.value)
    assert message.startswith("x: spread (max - min) / sigma = 1e+160 exceeds ")
    assert f"{limit:.2g} for float64" in message and "rescale the data or sigma" in message


# ----------------------------------------------------------------------------- finding 5

_PATHS = {
    "dense": {},
    "streamed": {"block_size": 64, "mesh": ONE_DEVICE},
    "sharded": {"block_size": 64, "mesh": sharding.batch_mesh(jax.devices()[:2])},
}


@pytest.mark.parametrize("path", sorted(_PATHS))
@pytest.mark.parametrize("far", ["one-outlier", "far-cluster"])
def test_float32_bulk_atoms_match_float64_beside_far_points(path, far):
    """200 three-atom points (sigma = 1) plus one point 1e6 sigma away (or a second cluster
    of 40 there): after the same 50 EM steps the float32 atoms started at the bulk points lie
    within 1e-3 sigma of the float64 ones (centring at the mean moved them by up to 2 sigma).
    Both fits see the same float32 numbers; 1e6^2 = 1e12 is far inside float32's range."""
    assert jax.local_device_count() >= 2
    _, bulk = simulate(jax.random.key(0), "three-atoms", 1.0, 200)
    bulk = np.asarray(bulk, np.float32)
    extra = np.float32([1e6]) if far == "one-outlier" else np.float32(1e6) + bulk[:40]
    x32 = np.concatenate([bulk, extra])
    fit32 = em.fit_em(x32, 1.0, max_iters=50, tol=0.0, **_PATHS[path])
    with jax.enable_x64(True):
        fit64 = em.fit_em(x32.astype(np.float64), 1.0, max_iters=50, tol=0.0, **_PATHS[path])
    assert fit32.atoms.dtype == jnp.float32 and fit64.atoms.dtype == jnp.float64
    assert fit32.num_iters == fit64.num_iters == 50
    drift = np.max(np.abs(np.asarray(fit32.atoms[:200], np.float64) - fit64.atoms[:200]))
    assert drift < 1e-3, drift
    if far == "one-outlier":
        assert float(fit32.atoms[200]) == 1e6  # alone: its atom stays on it
        np.testing.assert_allclose(
            fit32.log_likelihood_trace, fit64.log_likelihood_trace, rtol=1e-5
        )


# ----------------------------------------------------------------------------- finding 9


def _measured_peak(fn, *args):
    """XLA's peak estimate for a jitted function: temporaries + arguments + outputs."""
    stats = fn.lower(*args).compile().memory_analysis()
    return (
        stats.temp_size_in_bytes
        + stats.argument_size_in_bytes
        + stats.output_size_in_bytes
        - stats.alias_size_in_bytes
    )


# The estimate counts two N x K arrays (scores and responsibilities; two b x b blocks when
# streamed) plus the O((N + K)(p + 1)) vectors. XLA keeps both arrays in ``em_step`` and fuses
# one away in ``fit_em``'s loop, so the estimate is an upper bound and at most about twice the
# measurement; FACTOR leaves 5% for the vectors.
FACTOR = 2.1


@pytest.mark.parametrize(
    ("n", "k", "dim", "dtype", "block_size"),
    [
        (300, 300, 1, np.float64, None),
        (400, 200, 2, np.float32, None),
        (300, 300, 1, np.float64, 64),
        (400, 200, 2, np.float32, 64),
    ],
)
def test_estep_memory_bytes_bounds_xla_memory_analysis(n, k, dim, dtype, block_size):
    with jax.enable_x64(True):
        x = jnp.zeros((n, dim), dtype)
        atoms = jnp.zeros((k, dim), dtype)
        w = jnp.full((k,), 1.0 / k, dtype)
        s = jnp.asarray(1.0, dtype)
        stream = (block_size, None)
        state = em._LoopState(
            jnp.asarray(0, jnp.int32),
            atoms,
            w,
            jnp.full((11,), jnp.nan, dtype),
            jnp.asarray(False),
            jnp.asarray(False),
        )
        tol = jnp.asarray(0.0, dtype)
        fit = _measured_peak(em._em_iterations, x, s, tol, state, 11, False, *stream)
        step = _measured_peak(em_step_unchecked, x, atoms, w, s, True, *stream)
    estimate = em.estep_memory_bytes(n, k, dim, dtype, block_size)
    assert isinstance(estimate, int)
    for measured in (fit, step):
        assert measured <= estimate <= FACTOR * measured, (measured, estimate)


def test_estep_memory_bytes_at_the_command_line_sizes():
    dense = em.estep_memory_bytes(40_000, 40_000)
    assert 25e9 < dense < 26e9  # two 12.8 GB float64 matrices
    assert em.estep_memory_bytes(40_000, 40_000, dtype=jnp.float32) == pytest.approx(dense / 2)
    assert em.estep_memory_bytes(40_000, 40_000, block_size=1024) < 30e6


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"num_points": 0}, "num_points"),
        ({"num_atoms": 2.5}, "num_atoms"),
        ({"dim": 0}, "dim"),
        ({"dtype": np.int32}, "dtype"),
        ({"dtype": np.complex64}, "dtype"),
        ({"dtype": "no-such-type"}, "dtype"),
        ({"block_size": 0}, "block_size"),
        ({"block_size": True}, "block_size"),
    ],
)
def test_estep_memory_bytes_bad_input(kwargs, name):
    args = {"num_points": 10, "num_atoms": 10} | kwargs
    with pytest.raises(ValueError, match=f"^{name}: "):
        em.estep_memory_bytes(**args)
