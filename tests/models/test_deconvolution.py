"""Simulator, named measures and the NumPyro deconvolution program (Dirichlet and DP priors)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import pytest
from numpyro import handlers
from numpyro.infer import Predictive
from numpyro.infer.util import log_density
from raising import check_refused
from scipy import integrate, special, stats
from scipy.special import logsumexp

from attnbayes.models.deconvolution import (
    HETEROSCEDASTIC_SCENARIOS,
    DiscreteMeasure,
    SortedNormal,
    check_measure,
    deconvolution_model,
    get_measure,
    heteroscedastic_scenario,
    log_uniform_noise,
    model_dims,
    noise_scales,
    ring,
    simulate,
    sparse_means,
    stick_breaking,
    stick_breaking_log_weights,
    three_atoms,
    xie_kou_brown,
)

N_BIG = 20_000

# ----------------------------------------------------------------------------- simulate


@pytest.fixture(scope="module")
def big_three():
    z, x = simulate(jax.random.key(11), "three-atoms", 0.7, N_BIG)
    return np.asarray(z), np.asarray(x)


@pytest.fixture(scope="module")
def big_ring():
    z, x = simulate(jax.random.key(12), "ring", 0.4, N_BIG)
    return np.asarray(z), np.asarray(x)


def test_simulate_shapes():
    z, x = simulate(jax.random.key(0), "three-atoms", 1.0, 50)
    assert z.shape == x.shape == (50,)
    z, x = simulate(jax.random.key(0), "ring", 1.0, 50)
    assert z.shape == x.shape == (50, 2)


def test_simulate_z_are_atoms_with_right_frequencies(big_three):
    z, _ = big_three
    measure = three_atoms()
    atoms, weights = np.asarray(measure.atoms), np.asarray(measure.weights)
    assert np.all(np.isin(z, atoms))
    for atom, w in zip(atoms, weights, strict=True):
        freq = np.mean(z == atom)
        se = math.sqrt(w * (1 - w) / N_BIG)
        assert abs(freq - w) < 4 * se, (atom, freq, w)


def test_simulate_ring_z_are_atoms_with_right_frequencies(big_ring):
    z, _ = big_ring
    atoms = np.asarray(ring().atoms)
    match = np.all(z[:, None, :] == atoms[None, :, :], axis=-1)  # (N, K) exact equality
    assert np.all(match.sum(axis=1) == 1)
    w = 1 / 8
    se = math.sqrt(w * (1 - w) / N_BIG)
    assert np.all(np.abs(match.mean(axis=0) - w) < 4 * se)


@pytest.mark.parametrize(("which", "sigma"), [("three", 0.7), ("ring", 0.4)])
def test_simulate_noise_scale(which, sigma, big_three, big_ring):
    z, x = big_three if which == "three" else big_ring
    noise = (x - z).ravel()
    m = noise.size
    # Sample sd of m iid normals: sd(s) ~ sigma / sqrt(2 m); allow 5 standard errors.
    assert abs(np.std(noise) / sigma - 1) < 5 / math.sqrt(2 * m)
    # The mean noise is 0 to within 5 standard errors sigma / sqrt(m).
    assert abs(np.mean(noise)) < 5 * sigma / math.sqrt(m)
    if which == "ring":  # coordinates are independent
        assert abs(np.corrcoef((x - z).T)[0, 1]) < 5 / math.sqrt(N_BIG)


def test_simulate_is_deterministic_in_key():
    a = simulate(jax.random.key(5), "three-atoms", 1.0, 50)
    b = simulate(jax.random.key(5), "three-atoms", 1.0, 50)
    c = simulate(jax.random.key(6), "three-atoms", 1.0, 50)
    np.testing.assert_array_equal(np.asarray(a[0]), np.asarray(b[0]))
    np.testing.assert_array_equal(np.asarray(a[1]), np.asarray(b[1]))
    assert not np.array_equal(np.asarray(a[1]), np.asarray(c[1]))


def test_simulate_accepts_a_measure():
    measure = DiscreteMeasure(jnp.array([[1.0, 2.0], [-1.0, 0.0]]), jnp.array([0.0, 1.0]))
    z, x = simulate(jax.random.key(1), measure, 0.5, 50)
    assert z.shape == x.shape == (50, 2)
    assert np.all(np.asarray(z) == np.array([-1.0, 0.0]))


# ----------------------------------------------------------------------------- named measures


def test_three_atoms_exact():
    m = three_atoms()
    np.testing.assert_array_equal(np.asarray(m.atoms), [-2.0, 0.0, 3.0])
    np.testing.assert_array_equal(np.asarray(m.weights), [0.5, 0.3, 0.2])
    g = get_measure("three-atoms")
    np.testing.assert_array_equal(np.asarray(g.atoms), np.asarray(m.atoms))


def test_sparse_means():
    m = sparse_means(num_nonzero=50, num_points=1000, mean=4)
    np.testing.assert_array_equal(np.asarray(m.atoms), [0.0, 4.0])
    np.testing.assert_allclose(np.asarray(m.weights), [0.95, 0.05], rtol=0, atol=1e-15)
    g = get_measure("sparse-means", num_nonzero=10, num_points=40, mean=2.5)
    np.testing.assert_array_equal(np.asarray(g.atoms), [0.0, 2.5])
    np.testing.assert_allclose(np.asarray(g.weights), [0.75, 0.25], rtol=0, atol=1e-15)


@pytest.mark.parametrize(("k", "radius"), [(8, 3.0), (5, 1.7)])
def test_ring_atoms_on_circle(k, radius):
    m = ring(num_atoms=k, radius=radius)
    atoms = np.asarray(m.atoms)
    assert atoms.shape == (k, 2)
    np.testing.assert_allclose(np.linalg.norm(atoms, axis=1), radius, rtol=1e-14)
    np.testing.assert_allclose(np.asarray(m.weights), 1 / k, rtol=1e-14)
    # Distinct, equally spaced angles.
    angles = np.sort(np.mod(np.arctan2(atoms[:, 1], atoms[:, 0]), 2 * np.pi))
    np.testing.assert_allclose(np.diff(angles), 2 * np.pi / k, rtol=1e-12)


# ----------------------------------------------------------------------------- the NumPyro program


@pytest.fixture(scope="module")
def scalar_data():
    return np.array([-2.1, -1.5, 0.2, 0.4, 2.8, 3.3, -0.1])


@pytest.fixture(scope="module")
def vector_data():
    return np.array([[-1.0, 0.5], [0.3, 0.2], [2.0, -1.2], [1.1, 1.0], [-0.4, -0.8]])


K = 3  # one K for every sampled trace: the Dirichlet sampler then compiles once


def _trace(model_kwargs, x=None, seed=0):
    return handlers.trace(handlers.seed(deconvolution_model, seed)).get_trace(x, **model_kwargs)


def _log_density(x, kwargs, params):
    """The model's log joint at ``params``, jitted as NUTS would (data and kwargs concrete)."""

    def f(params):
        return log_density(deconvolution_model, (x,), kwargs, params)[0]

    return float(jax.jit(f)({k: jnp.asarray(v) for k, v in params.items()}))


def test_model_sites_scalar(scalar_data):
    tr = _trace({"sigma": 1.0, "num_atoms": K}, scalar_data)
    assert tr["weights"]["type"] == "sample" and tr["weights"]["value"].shape == (K,)
    assert tr["atoms"]["type"] == "sample" and tr["atoms"]["value"].shape == (K,)
    assert tr["x"]["is_observed"]
    np.testing.assert_array_equal(np.asarray(tr["x"]["value"]), scalar_data)
    np.testing.assert_allclose(float(jnp.sum(tr["weights"]["value"])), 1.0, atol=1e-12)


def test_model_sites_vector(vector_data):
    tr = _trace({"sigma": 1.0, "num_atoms": K}, vector_data)
    assert tr["weights"]["value"].shape == (K,)
    assert tr["atoms"]["value"].shape == (K, 2)
    assert tr["x"]["is_observed"]
    assert tr["x"]["value"].shape == (5, 2)


def _reference_log_joint(x, weights, atoms, sigma, concentration, atom_loc, atom_scale):
    """Dirichlet + iid normal atoms + marginal mixture likelihood, all from scipy.

    ``sigma`` a number, or per-unit scales shaped (N, 1, 1) / (N, 1, p) against (N, K, p)."""
    x2 = x[:, None] if x.ndim == 1 else x
    mu2 = atoms[:, None] if atoms.ndim == 1 else atoms
    lp = stats.dirichlet.logpdf(weights, np.full(weights.shape[0], concentration))
    lp += np.sum(stats.norm.logpdf(atoms, atom_loc, atom_scale))
    comp = np.sum(stats.norm.logpdf(x2[:, None, :], mu2[None, :, :], sigma), axis=-1)  # (N, K)
    lp += np.sum(logsumexp(np.log(weights)[None, :] + comp, axis=1))
    return lp


@pytest.mark.parametrize("which", ["scalar", "vector"])
def test_model_log_density(which, scalar_data, vector_data):
    x = scalar_data if which == "scalar" else vector_data
    if which == "scalar":
        weights, atoms = np.array([0.2, 0.5, 0.3]), np.array([-2.0, 0.1, 3.0])
    else:
        weights, atoms = np.array([0.6, 0.4]), np.array([[-0.5, 0.0], [1.5, -0.5]])
    kwargs = {"sigma": 0.8, "num_atoms": weights.shape[0], "concentration": 0.7}
    kwargs |= {"atom_loc": 0.3, "atom_scale": 2.0}
    got = _log_density(jnp.asarray(x), kwargs, {"weights": weights, "atoms": atoms})
    expected = _reference_log_joint(x, weights, atoms, 0.8, 0.7, 0.3, 2.0)
    np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_model_log_density_ordered(scalar_data):
    weights, atoms = np.array([0.2, 0.5, 0.3]), np.array([-2.0, 0.1, 3.0])
    kwargs = {"sigma": 1.0, "num_atoms": 3, "ordered": True}
    params = {"weights": weights, "atoms": atoms}
    got = _log_density(jnp.asarray(scalar_data), kwargs, params)
    tr = handlers.trace(handlers.substitute(deconvolution_model, data=params)).get_trace(
        jnp.asarray(scalar_data), **kwargs
    )
    assert isinstance(tr["atoms"]["fn"], SortedNormal)
    expected = _reference_log_joint(scalar_data, weights, atoms, 1.0, 1.0, 0.0, 5.0)
    np.testing.assert_allclose(got, expected + math.log(6.0), rtol=1e-12)


def test_sorted_normal_log_prob_and_samples():
    d = SortedNormal(0.5, 2.0, 4)
    u = jnp.array([-3.0, -0.2, 1.0, 4.5])
    expected = np.sum(stats.norm.logpdf(np.asarray(u), 0.5, 2.0)) + math.log(math.factorial(4))
    np.testing.assert_allclose(float(d.log_prob(u)), expected, rtol=1e-13)
    draws = np.asarray(d.sample(jax.random.key(3), (500,)))
    assert draws.shape == (500, 4)
    assert np.all(np.diff(draws, axis=-1) > 0)
    # Pooled over positions the draws are the iid N(0.5, 2^2) sample (sorting permutes only).
    pooled = draws.ravel()
    assert abs(pooled.mean() - 0.5) < 5 * 2.0 / math.sqrt(pooled.size)
    # Model-level: sampled atoms are sorted.
    tr = _trace({"sigma": 1.0, "num_atoms": K, "ordered": True}, np.zeros(3), seed=4)
    assert np.all(np.diff(np.asarray(tr["atoms"]["value"])) > 0)


def test_uniform_weights_prior_is_deterministic(scalar_data):
    kwargs = {"sigma": 1.0, "num_atoms": 4, "prior": "uniform-weights"}
    tr = _trace(kwargs, scalar_data)
    assert tr["weights"]["type"] == "deterministic"
    np.testing.assert_array_equal(np.asarray(tr["weights"]["value"]), np.full(4, 0.25))
    # The log density then has no Dirichlet term.
    atoms = np.array([-2.0, 0.0, 1.0, 3.0])
    got = _log_density(jnp.asarray(scalar_data), kwargs, {"atoms": atoms})
    w = np.full(4, 0.25)
    expected = _reference_log_joint(scalar_data, w, atoms, 1.0, 1.0, 0.0, 5.0)
    expected -= stats.dirichlet.logpdf(w, np.ones(4))
    np.testing.assert_allclose(got, expected, rtol=1e-12)


@pytest.mark.parametrize("dim", [None, 3])
def test_prior_predictive(dim):
    tr = _trace({"sigma": 0.5, "num_atoms": K, "num_points": 6, "dim": dim}, None, seed=7)
    shape = (6,) if dim is None else (6, 3)
    assert not tr["x"]["is_observed"]
    assert tr["x"]["value"].shape == shape
    assert tr["atoms"]["value"].shape == ((K,) if dim is None else (K, 3))
    assert np.all(np.isfinite(np.asarray(tr["x"]["value"])))


# ----------------------------------------------------------------------------- per-unit noise

S_SCALAR = np.array([0.5, 0.8, 1.3, 2.0, 0.6, 1.1, 2.7])  # one per point of scalar_data
S_ROWS = np.array([0.5, 1.7, 0.9, 2.2, 0.7])  # one per point of vector_data
S_CELLS = np.array([[0.5, 1.2], [0.9, 0.7], [2.0, 1.5], [1.1, 0.4], [0.6, 2.2]])


@pytest.mark.parametrize("which", ["scalar", "rows", "cells", "dp"])
def test_model_log_density_per_unit_sigma(which, scalar_data, vector_data):
    """x_i ~ sum_k w_k N(mu_k, diag(s_i^2)) with s_i per observation ((N,): scalar and vector
    data) or per observation and coordinate ((N, p)), and the DP prior: the log joint of
    ``numpyro.infer.util.log_density`` equals scipy's to 1e-12."""
    kwargs = {"concentration": 0.7, "atom_loc": 0.3, "atom_scale": 2.0}
    if which in ("scalar", "dp"):
        x, sigma = scalar_data, S_SCALAR
        weights, atoms = np.array([0.2, 0.5, 0.3]), np.array([-2.0, 0.1, 3.0])
        ref_sigma = sigma[:, None, None]
    else:
        x, sigma = vector_data, (S_ROWS if which == "rows" else S_CELLS)
        weights, atoms = np.array([0.6, 0.4]), np.array([[-0.5, 0.0], [1.5, -0.5]])
        ref_sigma = sigma.reshape(5, 1, -1)
    kwargs |= {"sigma": sigma, "num_atoms": weights.shape[0]}
    params = {"weights": weights, "atoms": atoms}
    expected = _reference_log_joint(x, weights, atoms, ref_sigma, 0.7, 0.3, 2.0)
    if which == "dp":
        sticks = np.array([0.2 / 1.0, 0.5 / 0.8])  # the stick-breaking of (0.2, 0.5, 0.3)
        kwargs |= {"prior": "dp", "dp_shape": 1.5, "dp_rate": 3.0}
        params = {"dp_concentration": 0.8, "sticks": sticks, "atoms": atoms}
        expected -= stats.dirichlet.logpdf(weights, np.full(3, 0.7))
        expected += stats.gamma.logpdf(0.8, 1.5, scale=1 / 3.0)
        expected += np.sum(stats.beta.logpdf(sticks, 1.0, 0.8))
    got = _log_density(jnp.asarray(x), kwargs, params)
    np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_constant_per_unit_sigma_is_the_scalar_model(vector_data):
    """sigma = s and sigma = s 1_N give the same log joint (to 1e-12)."""
    weights, atoms = np.array([0.6, 0.4]), np.array([[-0.5, 0.0], [1.5, -0.5]])
    params = {"weights": weights, "atoms": atoms}
    x = jnp.asarray(vector_data)
    one = _log_density(x, {"sigma": 0.8, "num_atoms": 2}, params)
    each = _log_density(x, {"sigma": np.full(5, 0.8), "num_atoms": 2}, params)
    np.testing.assert_allclose(each, one, rtol=1e-12)


def test_prior_predictive_per_unit_sigma():
    """A per-unit sigma fixes N (and an (N, p) one also p); with the atoms pinned near 0
    (atom_scale 1e-3) x_i ~ N(~0, s_i^2): 1500 points per scale have sd s_i."""
    scales = np.array([0.3, 1.0, 2.5])
    kwargs = {"sigma": np.repeat(scales, 1500), "num_atoms": K, "atom_scale": 1e-3}
    x = jax.jit(lambda key: _trace(kwargs, seed=key)["x"]["value"])(jax.random.key(5))
    x = np.asarray(x).reshape(3, 1500)
    # the sd of 1500 normal draws has relative standard error 1 / sqrt(3000): 5 of them
    np.testing.assert_array_less(np.abs(x.std(axis=1) / scales - 1), 5 / math.sqrt(3000))
    shapes = jax.eval_shape(
        lambda key: {
            name: site["value"]
            for name, site in _trace({"sigma": np.ones((4, 2)), "num_atoms": K}, seed=key).items()
            if name in ("x", "atoms")
        },
        jax.random.key(1),
    )
    assert shapes["x"].shape == (4, 2) and shapes["atoms"].shape == (K, 2)


def test_simulate_per_unit_sigma_scales_the_same_noise():
    """x_i = z_i + s_i eps_i with the eps_i of the scalar run (same key): a constant per-unit
    sigma gives the scalar run's x exactly; (N,) and (N, p) scales multiply the same eps.
    (N = 50 as in test_simulate_shapes, whose eager operations these reuse.)"""
    key = jax.random.key(0)
    z, x = simulate(key, "three-atoms", 1.0, 50)
    z_c, x_c = simulate(key, "three-atoms", np.full(50, 1.0), 50)
    np.testing.assert_array_equal(z_c, z)
    np.testing.assert_array_equal(x_c, x)
    s = np.linspace(0.5, 3.0, 50)
    z_s, x_s = simulate(key, "three-atoms", s, 50)
    np.testing.assert_array_equal(z_s, z)
    np.testing.assert_allclose(x_s - z_s, s * (x - z), rtol=1e-12)
    z2, x2 = simulate(key, "ring", 1.0, 50)
    cells = np.linspace(0.25, 3.0, 100).reshape(50, 2)
    for scales, factor in ((s, s[:, None]), (cells, cells)):
        z_s, x_s = simulate(key, "ring", scales, 50)
        np.testing.assert_array_equal(z_s, z2)
        np.testing.assert_allclose(x_s - z_s, factor * (x2 - z2), rtol=1e-12)


def test_noise_scales_are_log_uniform():
    s = np.asarray(noise_scales(jax.random.key(1), 4000, 0.5, 3.0))
    assert s.shape == (4000,) and s.min() >= 0.5 and s.max() <= 3.0
    u = (np.log(s) - np.log(0.5)) / (np.log(3.0) - np.log(0.5))
    assert stats.kstest(u, "uniform").pvalue > 1e-3


@pytest.mark.parametrize("setting", ["a", "b", "c"])
def test_xie_kou_brown_settings(setting):
    """A_i = s_i^2 ~ U(0.1, 1); theta ~ N(0, 1) (a), U(0, 1) (b), = A_i (c); the noise
    (x_i - theta_i) / s_i is standard normal (KS tests, 4000 points)."""
    sample = xie_kou_brown(jax.random.key(2), 4000, setting)
    theta, x, s = (np.asarray(a) for a in sample)
    variance = s**2
    assert stats.kstest((variance - 0.1) / 0.9, "uniform").pvalue > 1e-3
    assert stats.kstest((x - theta) / s, "norm").pvalue > 1e-3
    if setting == "c":
        np.testing.assert_allclose(theta, variance, rtol=1e-12)
    else:
        law = stats.norm() if setting == "a" else stats.uniform()
        assert stats.kstest(theta, law.cdf).pvalue > 1e-3
        assert abs(np.corrcoef(theta, variance)[0, 1]) < 5 / math.sqrt(4000)  # independent


def test_heteroscedastic_scenarios():
    key = jax.random.key(3)
    assert set(HETEROSCEDASTIC_SCENARIOS) == {"log-uniform-noise", "xie-kou-brown"}
    sample = heteroscedastic_scenario(key, "log-uniform-noise", 50)
    direct = log_uniform_noise(key, 50)
    for a, b in zip(sample, direct, strict=True):
        np.testing.assert_array_equal(a, b)
    assert set(np.asarray(sample.z)) <= {-2.0, 0.0, 3.0}
    assert np.all((sample.sigma >= 0.5) & (sample.sigma <= 3.0))
    np.testing.assert_array_equal(
        heteroscedastic_scenario(key, "xie-kou-brown", 50).x, xie_kou_brown(key, 50, "c").x
    )


# ----------------------------------------------------------------------------- measures refused


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ([1.2, -0.2], "negative"),
        ([0.5, 0.6], "sum to 1"),
        ([np.nan, 1.0], "non-finite"),
        ([0.5, np.inf], "non-finite"),
        ([1.0], "expected 2 entries"),
    ],
)
def test_bad_measure_weights_refused(weights, message):
    measure = DiscreteMeasure(np.array([-1.0, 2.0]), np.array(weights))
    with pytest.raises(ValueError, match=rf"^measure\.weights: .*{message}"):
        check_measure("measure", measure)
    with pytest.raises(ValueError, match=rf"^measure\.weights: .*{message}"):
        simulate(jax.random.key(0), measure, 1.0, 5)


def test_bad_measure_atoms_refused():
    measure = DiscreteMeasure(np.array([np.nan, 2.0]), np.array([0.5, 0.5]))
    with pytest.raises(ValueError, match=r"^measure\.atoms: "):
        simulate(jax.random.key(0), measure, 1.0, 5)
    with pytest.raises(ValueError, match=r"^measure: "):
        check_measure("measure", (np.zeros(2), np.array([0.5, 0.5])))


# ----------------------------------------------------------------------------- prior="dp"

DP = {"prior": "dp"}


def _numpy_stick_breaking(sticks):
    """w_k = v_k prod_{l<k} (1 - v_l), w_K = prod_{l<K} (1 - v_l), by explicit loops."""
    sticks = np.atleast_2d(sticks)
    out = np.empty((sticks.shape[0], sticks.shape[1] + 1))
    for row, v in enumerate(sticks):
        rest = 1.0
        for k, vk in enumerate(v):
            out[row, k] = vk * rest
            rest *= 1.0 - vk
        out[row, -1] = rest
    return out


def test_stick_breaking_matches_numpy():
    rng = np.random.default_rng(0)
    sticks = rng.beta(1.0, 1.5, size=(50, 6))
    sticks[0] = [1e-12, 0.5, 1 - 1e-12, 0.3, 0.2, 0.9]  # extremes
    got = np.asarray(stick_breaking(jnp.asarray(sticks)))
    expected = _numpy_stick_breaking(sticks)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(got.sum(-1), 1.0, rtol=0, atol=1e-14)
    np.testing.assert_allclose(
        np.asarray(stick_breaking_log_weights(jnp.asarray(sticks[1:]))),
        np.log(expected[1:]),
        rtol=1e-12,
    )
    # Late weights far below the float64 range stay finite in log space.
    tiny = np.asarray(stick_breaking_log_weights(jnp.full(400, 0.9)))
    assert np.all(np.isfinite(tiny)) and tiny[-1] < -900


def test_dp_sites_and_weights(scalar_data):
    kwargs = {"sigma": 1.0, "num_atoms": 4, **DP}
    tr = _trace(kwargs, scalar_data, seed=3)
    assert tr["dp_concentration"]["type"] == "sample"
    assert tr["dp_concentration"]["value"].shape == ()
    assert tr["sticks"]["type"] == "sample" and tr["sticks"]["value"].shape == (3,)
    assert tr["weights"]["type"] == "deterministic"
    weights = np.asarray(tr["weights"]["value"])
    np.testing.assert_allclose(weights, _numpy_stick_breaking(tr["sticks"]["value"])[0], 1e-12)
    np.testing.assert_allclose(weights.sum(), 1.0, rtol=0, atol=1e-14)
    assert model_dims(True, prior="dp") == {
        "weights": ["atom"],
        "atoms": ["atom"],
        "x": ["point"],
        "dp_concentration": [],
        "sticks": ["stick"],
    }
    assert model_dims(False) == model_dims(False, prior="uniform-weights")
    assert "sticks" not in model_dims(True)


def _gamma_expectation(fn, shape, rate):
    """E[fn(alpha)] for alpha ~ Gamma(shape, rate), by adaptive quadrature."""
    density = stats.gamma(shape, scale=1.0 / rate).pdf
    return integrate.quad(lambda a: fn(a) * density(a), 0.0, np.inf, epsabs=1e-12)[0]


@pytest.mark.slow  # statistical: 50,000 prior draws per case, a program compiled per case
@pytest.mark.parametrize(("shape", "rate"), [(2.0, 2.0), (1.0, 1.0)])
def test_dp_prior_weight_moments(shape, rate):
    """Monte Carlo moments of the prior weights against integrals over the Gamma prior.

    Given alpha, v_k ~ Beta(1, alpha) iid, so E[v] = 1/(1+alpha), E[1-v] = alpha/(1+alpha)
    and E[v^2] = 2/((1+alpha)(2+alpha)); hence E[w_k | alpha] = (1/(1+alpha)) r^(k-1) with
    r = alpha/(1+alpha) for k < K, E[w_K | alpha] = r^(K-1), and E[w_1^2 | alpha] = E[v^2].
    """
    num_atoms, m = 4, 50_000
    kwargs = {"sigma": 1.0, "num_atoms": num_atoms, "num_points": 1, "dp_shape": shape}
    kwargs |= {"dp_rate": rate, **DP}
    draws = Predictive(deconvolution_model, num_samples=m, return_sites=["weights"])(
        jax.random.key(8), None, **kwargs
    )["weights"]
    draws = np.asarray(draws)
    assert draws.shape == (m, num_atoms)
    np.testing.assert_allclose(draws.sum(-1), 1.0, rtol=0, atol=1e-13)
    # E[w_1] in closed form: E[1/(1+alpha)] = rate^shape U(shape, shape, rate) (Tricomi U).
    closed = rate**shape * special.hyperu(shape, shape, rate)
    np.testing.assert_allclose(
        closed, _gamma_expectation(lambda a: 1 / (1 + a), shape, rate), rtol=1e-8
    )
    expected = [
        _gamma_expectation(lambda a, k=k: (a / (1 + a)) ** k / (1 + a), shape, rate)
        for k in range(num_atoms - 1)
    ]
    expected.append(_gamma_expectation(lambda a: (a / (1 + a)) ** (num_atoms - 1), shape, rate))
    np.testing.assert_allclose(sum(expected), 1.0, rtol=1e-8)
    checks = [(draws[:, k], expected[k]) for k in range(num_atoms)]
    second = _gamma_expectation(lambda a: 2 / ((1 + a) * (2 + a)), shape, rate)
    checks.append((draws[:, 0] ** 2, second))
    # Each sample mean is within 5 Monte Carlo standard errors (sd / sqrt(m)) of its target:
    # a false alarm has probability about 6e-7 per check.
    for values, target in checks:
        se = values.std() / math.sqrt(m)
        assert abs(values.mean() - target) < 5 * se, (values.mean(), target, se)
    assert abs(draws[:, 0].mean() - closed) < 5 * draws[:, 0].std() / math.sqrt(m)


@pytest.mark.parametrize("which", ["scalar", "vector"])
def test_dp_log_density(which, scalar_data, vector_data):
    x = scalar_data if which == "scalar" else vector_data
    if which == "scalar":
        sticks, atoms = np.array([0.3, 0.6, 0.25]), np.array([-2.0, 0.1, 3.0, 1.0])
    else:
        sticks, atoms = np.array([0.7]), np.array([[-0.5, 0.0], [1.5, -0.5]])
    alpha, shape, rate = 0.8, 1.5, 3.0
    kwargs = {"sigma": 0.8, "num_atoms": atoms.shape[0], "dp_shape": shape, "dp_rate": rate}
    kwargs |= {"atom_loc": 0.3, "atom_scale": 2.0, "concentration": 0.7, **DP}
    params = {"dp_concentration": alpha, "sticks": sticks, "atoms": atoms}
    got = _log_density(jnp.asarray(x), kwargs, params)
    weights = _numpy_stick_breaking(sticks)[0]
    expected = _reference_log_joint(x, weights, atoms, 0.8, 1.0, 0.3, 2.0)
    expected -= stats.dirichlet.logpdf(weights, np.ones(weights.shape[0]))  # no Dirichlet
    expected += stats.gamma.logpdf(alpha, shape, scale=1.0 / rate)
    expected += np.sum(stats.beta.logpdf(sticks, 1.0, alpha))
    np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_dp_prior_predictive():
    # Four atoms as in test_dp_sites_and_weights: the eager Beta sampler then compiles once.
    tr = _trace({"sigma": 0.5, "num_atoms": 4, "num_points": 6, "dim": 2, **DP}, None, seed=2)
    assert tr["x"]["value"].shape == (6, 2)
    assert tr["atoms"]["value"].shape == (4, 2)
    assert np.all(np.isfinite(np.asarray(tr["x"]["value"])))


@pytest.mark.slow  # statistical; shares the slow three-atom comparison
def test_dp_nuts_run(three_atom_data, three_atom_comparison):
    """The session's NUTS-DP run (``compare_deconvolution``, 8 sticks, through ``run_nuts`` with
    ``model_dims(True, prior="dp")``): the DataTree carries the DP sites and a finite
    log-likelihood, and the invariant summaries work on the deterministic weights."""
    _, _, x = three_atom_data
    datatree = three_atom_comparison.fits["nuts-dp"].datatree
    post = datatree["posterior"]
    k = post.sizes["atom"]
    assert k == 8
    assert post["dp_concentration"].dims == ("chain", "draw")
    assert post["sticks"].dims == ("chain", "draw", "stick") and post.sizes["stick"] == k - 1
    assert post["weights"].dims == ("chain", "draw", "atom")
    weights = np.asarray(post["weights"])
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(
        weights.reshape(-1, k),
        _numpy_stick_breaking(np.asarray(post["sticks"]).reshape(-1, k - 1)),
    )
    assert np.all(np.asarray(post["dp_concentration"]) > 0)
    log_lik = np.asarray(datatree["log_likelihood"]["x"])
    assert log_lik.shape == (2, post.sizes["draw"], x.shape[0]) and np.all(np.isfinite(log_lik))
    assert np.all(np.isfinite(np.asarray(post["log_lik_total"])))
    assert post["z_mean"].dims == ("chain", "draw", "point")


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"dp_shape": 0.0}, "^dp_shape: "),
        ({"dp_shape": -1.0}, "^dp_shape: "),
        ({"dp_shape": np.nan}, "^dp_shape: "),
        ({"dp_shape": "2"}, "^dp_shape: "),
        ({"dp_rate": 0.0}, "^dp_rate: "),
        ({"dp_rate": np.inf}, "^dp_rate: "),
        ({"dp_rate": np.array([1.0, 2.0])}, "^dp_rate: "),
        ({"ordered": True}, "^ordered: .*exchangeable"),
        ({"num_atoms": 1}, "^num_atoms: .*at least 2"),
    ],
)
def test_dp_bad_arguments(kwargs, pattern, scalar_data):
    settings = {"sigma": 1.0, "num_atoms": K, **DP} | kwargs
    with pytest.raises(ValueError, match=pattern) as excinfo:
        deconvolution_model(scalar_data, **settings)
    assert type(excinfo.value) is ValueError


def test_model_dims_bad_prior():
    with pytest.raises(ValueError, match="^prior: "):
        model_dims(True, prior="bogus")


# ----------------------------------------------------------------------------- bad input (issue 12)
#
# ``simulate``, ``get_measure``, ``check_measure`` and the model against NaN/inf, empty, complex
# and wrong-rank arrays and bad scalars (with the older catalogue of the first release): a
# ValueError starting with the argument's name, raised before any JAX tracing.

X1 = np.array([-1.0, 0.5, 2.0, 3.0])  # (N,) with N = 4
A1 = np.array([-1.0, 2.0])
W1 = np.array([0.5, 0.5])
X2 = np.array([[0.0, 1.0], [1.0, 0.0], [2.0, 2.0]])  # (N, p) = (3, 2)
X1_HUGE = np.array([-1.0, 0.5, 2.0, 1e160])  # a spread whose squares overflow
X1_COMPLEX = X1 + 0j
X_3D = np.zeros((3, 2, 2))
X_NAN = np.array([-1.0, np.nan, 2.0, 3.0])


def _seeded_model(*args, **kwargs):
    """Run ``deconvolution_model`` under a seed handler (so a call that passes validation
    samples instead of failing for want of a PRNG key)."""
    return numpyro.handlers.seed(deconvolution_model, 0)(*args, **kwargs)


def _bad_input_cases():
    """(id, callable, anchored pattern)."""
    cases = []

    def add(label, call, pattern):
        cases.append((label, call, pattern))

    add(
        "check_measure-atoms-inf",
        lambda: check_measure("measure", DiscreteMeasure(np.array([0.0, np.inf]), W1)),
        r"^measure\.atoms: ",
    )
    add(
        "simulate-sigma-nan",
        lambda: simulate(jax.random.key(0), "three-atoms", np.nan, 3),
        "^sigma: ",
    )
    add(
        "model-atom_loc-nan",
        lambda: _seeded_model(X1, sigma=1.0, num_atoms=2, atom_loc=np.nan),
        "^atom_loc: ",
    )
    add(
        "model-atom_scale-inf",
        lambda: _seeded_model(X1, sigma=1.0, num_atoms=2, atom_scale=np.inf),
        "^atom_scale: ",
    )
    add("model-sigma-inf", lambda: _seeded_model(X1, sigma=np.inf, num_atoms=2), "^sigma: ")
    add(
        "check_measure-atoms-empty",
        lambda: check_measure("measure", DiscreteMeasure(np.zeros(0), np.zeros(0))),
        r"^measure\.atoms: ",
    )
    add("model-x-empty", lambda: _seeded_model(np.zeros(0), sigma=1.0, num_atoms=2), "^x: ")
    add(
        "simulate-measure-atoms-complex",
        lambda: simulate(jax.random.key(0), DiscreteMeasure(A1 + 1j, W1), 1.0, 3),
        r"^measure\.atoms: ",
    )
    add("model-x-complex", lambda: _seeded_model(X1_COMPLEX, sigma=1.0, num_atoms=2), "^x: ")
    add("model-sigma-complex", lambda: _seeded_model(X1, sigma=1j, num_atoms=2), "^sigma: ")
    add(
        "check_measure-atoms-rank3",
        lambda: check_measure("measure", DiscreteMeasure(np.zeros((2, 1, 1)), W1)),
        r"^measure\.atoms: ",
    )
    add("model-x-rank3", lambda: _seeded_model(X_3D, sigma=1.0, num_atoms=2), "^x: ")
    add(
        "model-atom_loc-shape",
        lambda: _seeded_model(X2, sigma=1.0, num_atoms=2, atom_loc=np.zeros(3)),
        "^atom_loc: ",
    )
    add(
        "simulate-sigma-str", lambda: simulate(jax.random.key(0), "three-atoms", "1", 3), "^sigma: "
    )
    add(
        "simulate-sigma-vector",
        lambda: simulate(jax.random.key(0), "three-atoms", W1, 3),
        "^sigma: ",
    )
    add("model-sigma-vector", lambda: _seeded_model(X1, sigma=W1, num_atoms=2), "^sigma: ")
    add(
        "model-sigma-underflow",
        lambda: _seeded_model(X1, sigma=1e-200, num_atoms=2),
        "^sigma: ",
    )
    add(
        "simulate-sigma-overflow",
        lambda: simulate(jax.random.key(0), "three-atoms", 1e308, 50),
        "^sigma: ",
    )
    add(
        "model-x-huge",
        lambda: _seeded_model(X1_HUGE, sigma=1.0, num_atoms=2),
        "^x: ",
    )
    # --- per-unit sigma (issue 35): the model, simulate and the heteroscedastic generators
    for label, sigma in (
        ("length", np.ones(3)),
        ("rank3", np.ones((4, 1, 1))),
        ("matrix-for-scalar-data", np.ones((4, 2))),
        ("entry-zero", np.array([1.0, 0.0, 1.0, 1.0])),
        ("entry-negative", np.array([1.0, -1.0, 1.0, 1.0])),
        ("entry-nan", np.array([1.0, np.nan, 1.0, 1.0])),
        ("entry-inf", np.array([1.0, np.inf, 1.0, 1.0])),
        ("entry-underflow", np.array([1.0, 1e-200, 1.0, 1.0])),
        ("strings", np.array(["1", "2", "3", "4"])),
        ("bool", True),
    ):
        add(
            f"model-per-unit-sigma-{label}",
            lambda s=sigma: _seeded_model(X1, sigma=s, num_atoms=2),
            "^sigma: ",
        )
    add(
        "model-per-unit-sigma-columns",
        lambda: _seeded_model(X2, sigma=np.ones((3, 3)), num_atoms=2),
        "^sigma: ",
    )
    add(
        "model-per-unit-sigma-rows",
        lambda: _seeded_model(X2, sigma=np.ones((2, 2)), num_atoms=2),
        "^sigma: ",
    )
    add(
        "model-prior-predictive-num_points-vs-sigma",
        lambda: _seeded_model(None, sigma=np.ones(3), num_atoms=2, num_points=4),
        "^num_points: ",
    )
    add(
        "model-prior-predictive-sigma-vs-dim",
        lambda: _seeded_model(None, sigma=np.ones((3, 2)), num_atoms=2, dim=3),
        "^sigma: ",
    )
    add(
        "model-prior-predictive-sigma-empty",
        lambda: _seeded_model(None, sigma=np.ones(0), num_atoms=2),
        "^sigma: ",
    )
    for label, sigma in (
        ("length", np.ones(4)),
        ("matrix-for-scalar-atoms", np.ones((3, 2))),
        ("entry-zero", np.array([1.0, 0.0, 1.0])),
        ("entry-nan", np.array([1.0, np.nan, 1.0])),
        ("entry-overflow", np.array([1.0, 1e308, 1.0])),
    ):
        add(
            f"simulate-per-unit-sigma-{label}",
            lambda s=sigma: simulate(jax.random.key(0), "three-atoms", s, 3),
            "^sigma: ",
        )
    add(
        "simulate-per-unit-sigma-columns",
        lambda: simulate(jax.random.key(0), "ring", np.ones((3, 3)), 3),
        "^sigma: ",
    )
    add("noise_scales-num_points", lambda: noise_scales(jax.random.key(0), 0), "^num_points: ")
    add("noise_scales-low", lambda: noise_scales(jax.random.key(0), 3, low=0.0), "^low: ")
    add("noise_scales-high", lambda: noise_scales(jax.random.key(0), 3, 2.0, 1.0), "^high: ")
    add("noise_scales-key", lambda: noise_scales(0, 3), "^key: ")
    add(
        "log_uniform_noise-measure-2d",
        lambda: log_uniform_noise(jax.random.key(0), 3, "ring"),
        "^measure: ",
    )
    add(
        "xie_kou_brown-setting",
        lambda: xie_kou_brown(jax.random.key(0), 3, "d"),
        "^setting: ",
    )
    add(
        "xie_kou_brown-num_points",
        lambda: xie_kou_brown(jax.random.key(0), -1, "a"),
        "^num_points: ",
    )
    add(
        "heteroscedastic_scenario-name",
        lambda: heteroscedastic_scenario(jax.random.key(0), "ring", 3),
        "^name: ",
    )
    # --- attnbayes.models.deconvolution: simulate, get_measure, DiscreteMeasure, the model
    for label, n in (("zero", 0), ("negative", -2), ("float", 2.5), ("bool", True)):
        add(
            f"simulate-num_points-{label}",
            lambda n=n: simulate(jax.random.key(0), "three-atoms", 1.0, n),
            "^num_points: ",
        )
    for label, key in (
        ("int", 0),
        ("float", np.zeros(2)),
        ("none", None),
        ("batch", jax.random.split(jax.random.key(0))),
    ):
        add(
            f"simulate-key-{label}",
            lambda key=key: simulate(key, "three-atoms", 1.0, 3),
            "^key: ",
        )
    add(
        "simulate-measure-tuple",
        lambda: simulate(jax.random.key(0), (A1, W1), 1.0, 3),
        "^measure: ",
    )
    add(
        "simulate-measure-weights-len",
        lambda: simulate(jax.random.key(0), DiscreteMeasure(A1, np.ones(3) / 3), 1.0, 3),
        r"^measure\.weights: ",
    )
    add("get_measure-ring-num_atoms", lambda: get_measure("ring", num_atoms=0), "^num_atoms: ")
    add("get_measure-ring-radius", lambda: get_measure("ring", radius=-1.0), "^radius: ")
    add(
        "get_measure-sparse-num_nonzero",
        lambda: get_measure("sparse-means", num_nonzero=5, num_points=2),
        "^num_nonzero: ",
    )
    add(
        "get_measure-sparse-num_points",
        lambda: get_measure("sparse-means", num_points=0),
        "^num_points: ",
    )
    add(
        "get_measure-sparse-mean-nan",
        lambda: get_measure("sparse-means", mean=np.nan),
        "^mean: ",
    )
    add(
        "get_measure-unknown-setting",
        lambda: get_measure("three-atoms", radius=2.0),
        "^radius: ",
    )
    add("check_measure-not-a-measure", lambda: check_measure("measure", None), "^measure: ")
    add(
        "check_measure-weights-rank2",
        lambda: check_measure("measure", DiscreteMeasure(A1, W1[None, :])),
        r"^measure\.weights: ",
    )
    for label, k in (("float", 2.5), ("bool", True), ("negative", -1)):
        add(
            f"model-num_atoms-{label}",
            lambda k=k: _seeded_model(X1, sigma=1.0, num_atoms=k),
            "^num_atoms: ",
        )
    add(
        "model-num_points-mismatch",
        lambda: _seeded_model(X1, sigma=1.0, num_atoms=2, num_points=7),
        "^num_points: ",
    )
    add(
        "model-num_points-zero",
        lambda: _seeded_model(None, sigma=1.0, num_atoms=2, num_points=0),
        "^num_points: ",
    )
    add("model-dim-mismatch", lambda: _seeded_model(X2, sigma=1.0, num_atoms=2, dim=3), "^dim: ")
    add("model-dim-scalar-data", lambda: _seeded_model(X1, sigma=1.0, num_atoms=2, dim=2), "^dim: ")
    add(
        "model-dim-zero",
        lambda: _seeded_model(None, sigma=1.0, num_atoms=2, num_points=3, dim=0),
        "^dim: ",
    )
    add(
        "model-atom_scale-zero",
        lambda: _seeded_model(X1, sigma=1.0, num_atoms=2, atom_scale=0.0),
        "^atom_scale: ",
    )
    add(
        "model-prior-none",
        lambda: _seeded_model(X1, sigma=1.0, num_atoms=2, prior=None),
        "^prior: ",
    )
    # --- the older catalogue
    for sigma in (np.nan, np.inf, 0.0, -2.0):
        add(
            f"simulate-sigma-{sigma!r}-of-10-points",
            lambda s=sigma: simulate(jax.random.key(0), "three-atoms", s, 10),
            "^sigma: ",
        )
    for label, call, pattern in [
        ("simulate-measure", lambda: simulate(jax.random.key(0), "bogus", 1.0, 5), "^measure: "),
        ("get_measure", lambda: get_measure("bogus"), "^measure: "),
        ("get_measure-not-str", lambda: get_measure(3), "^measure: "),
        (
            "simulate-measure-weights",
            lambda: simulate(jax.random.key(0), DiscreteMeasure(A1, np.array([0.5, 0.6])), 1.0, 5),
            r"^measure\.weights: ",
        ),
        (
            "model-prior",
            lambda: deconvolution_model(X1, sigma=1.0, num_atoms=2, prior="bogus"),
            "^prior: ",
        ),
        ("model-sigma", lambda: deconvolution_model(X1, sigma=0, num_atoms=2), "^sigma: "),
        (
            "model-num_atoms",
            lambda: deconvolution_model(X1, sigma=1.0, num_atoms=0),
            "^num_atoms: ",
        ),
        (
            "model-num_points",
            lambda: deconvolution_model(None, sigma=1.0, num_atoms=2),
            "^num_points: ",
        ),
        ("model-x-nan", lambda: deconvolution_model(X_NAN, sigma=1.0, num_atoms=2), "^x: "),
        (
            "model-x-list-nan",
            lambda: deconvolution_model([0.1, float("nan")], sigma=1.0, num_atoms=2),
            "^x: ",
        ),
        (
            "model-concentration",
            lambda: deconvolution_model(X1, sigma=1.0, num_atoms=2, concentration=-1.0),
            "^concentration: ",
        ),
        (
            "model-ordered-vector",
            lambda: deconvolution_model(X2, sigma=1.0, num_atoms=2, ordered=True),
            "^ordered: ",
        ),
    ]:
        add(label, call, pattern)
    return cases


BAD_INPUT_CASES = _bad_input_cases()


@pytest.mark.usefixtures("full_tracebacks")
@pytest.mark.parametrize(
    ("call", "pattern"), [c[1:] for c in BAD_INPUT_CASES], ids=[c[0] for c in BAD_INPUT_CASES]
)
def test_bad_input_is_refused_before_jax(call, pattern):
    check_refused(call, ValueError, pattern)


def test_bad_input_case_ids_are_unique():
    ids = [c[0] for c in BAD_INPUT_CASES]
    assert len(ids) == len(set(ids))


def test_heteroscedastic_scenarios_vmap_over_keys():
    """The scenario generators trace in the key (review of issue 35: ``log_uniform_noise``
    converted a traced sigma with NumPy); each batch member equals its own call."""
    import jax

    from attnbayes.models.deconvolution import heteroscedastic_scenario

    keys = jax.random.split(jax.random.PRNGKey(4), 3)
    for name in ("log-uniform-noise", "xie-kou-brown"):
        batch = jax.vmap(lambda k, name=name: heteroscedastic_scenario(k, name, 10))(keys)
        one = heteroscedastic_scenario(keys[1], name, 10)
        for got, want in zip(batch, one, strict=True):
            np.testing.assert_allclose(got[1], want, rtol=0, atol=1e-12)
