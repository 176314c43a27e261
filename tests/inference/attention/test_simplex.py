"""Softmax, sparsemax and entmax as regularised argmax over the simplex: known vectors, the
variational problem against an independent solver, the LP limit, and custom JVPs."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.test_util import check_grads
from scipy.optimize import minimize

from attnbayes.inference.attention.simplex import (
    entmax15,
    entmax_bisect,
    regularised_argmax,
    regularised_objective,
    softmax,
    sparsemax,
)

X = jnp.array([-2.0, 0.0, 0.5])


def test_known_vectors():
    np.testing.assert_allclose(softmax(X), [0.0486, 0.3592, 0.5922], atol=5e-5)
    np.testing.assert_allclose(sparsemax(X), [0.0, 0.25, 0.75], atol=1e-15)
    np.testing.assert_allclose(entmax15(X), [0.0, 0.326, 0.674], atol=5e-4)
    # exact 1.5-entmax here: p = (x/2 - t)^2 on {0, 0.5}, t solves (-t)^2 + (1/4 - t)^2 = 1
    t = (0.25 - np.sqrt(2 - 0.25**2)) / 2
    np.testing.assert_allclose(entmax15(X), [0.0, t**2, (0.25 - t) ** 2], atol=1e-14)


def test_entmax_bisect_special_cases():
    rng = np.random.default_rng(0)
    s = rng.normal(size=(6, 9)) * 2
    np.testing.assert_allclose(entmax_bisect(s, 2.0), sparsemax(s), atol=1e-12)
    np.testing.assert_allclose(entmax_bisect(s, 1.5), entmax15(s), atol=1e-12)
    gaps = [float(jnp.abs(entmax_bisect(s, a) - softmax(s)).max()) for a in (1.1, 1.01, 1.001)]
    assert gaps[0] > gaps[1] > gaps[2] and gaps[2] < 2e-3


def test_sparsemax_equals_optax_projection():
    s = np.random.default_rng(1).normal(size=(20, 11)) * 3
    expected = jax.vmap(optax.projections.projection_simplex)(s)
    np.testing.assert_allclose(sparsemax(s), expected, atol=1e-13)


@pytest.mark.parametrize(
    "fn", [softmax, sparsemax, entmax15, lambda s, **k: entmax_bisect(s, 1.3, **k)]
)
def test_axis_temperature_and_mask(fn):
    s = np.random.default_rng(2).normal(size=(4, 5, 6))
    p = fn(s, axis=1)
    np.testing.assert_allclose(p.sum(1), 1.0, atol=1e-12)
    np.testing.assert_allclose(p, jnp.moveaxis(fn(jnp.moveaxis(s, 1, -1)), -1, 1), atol=1e-12)
    np.testing.assert_allclose(fn(s, temperature=0.5), fn(2 * s), atol=1e-12)
    masked = s.copy()
    masked[..., 0] = -np.inf
    pm = fn(masked)
    assert np.all(pm[..., 0] == 0) and np.all(np.isfinite(pm))
    np.testing.assert_allclose(pm[..., 1:], fn(s[..., 1:]), atol=1e-12)


def _objective(q, s, regulariser, alpha, tau):
    """<q, s> - tau Omega(q), written independently of the library in NumPy."""
    q = np.clip(q, 0, None)
    if regulariser == "shannon":
        omega = np.sum(np.where(q > 0, q * np.log(np.where(q > 0, q, 1)), 0))
    elif regulariser == "gini":
        omega = 0.5 * (np.sum(q**2) - 1)
    else:
        omega = (np.sum(q**alpha) - 1) / (alpha * (alpha - 1))
    return float(q @ s - tau * omega)


@pytest.mark.parametrize(
    ("regulariser", "alpha"),
    [("shannon", None), ("gini", None), ("tsallis", 1.5), ("tsallis", 1.25), ("tsallis", 3.0)],
)
def test_regularised_argmax_is_optimal(regulariser, alpha):
    """No point of the simplex beats the closed form; SLSQP from scipy agrees with it."""
    rng = np.random.default_rng(3)
    for _ in range(8):
        k, tau = int(rng.integers(2, 8)), float(rng.uniform(0.2, 2.0))
        s = rng.normal(size=k) * 2
        p = np.asarray(regularised_argmax(s, regulariser, alpha, temperature=tau))
        best = _objective(p, s, regulariser, alpha, tau)
        assert float(regularised_objective(p, s, regulariser, alpha, tau)) == pytest.approx(best)
        res = minimize(
            lambda q, s=s, tau=tau: -_objective(q, s, regulariser, alpha, tau),
            np.full(k, 1 / k),
            method="SLSQP",
            bounds=[(0, 1)] * k,
            constraints=[{"type": "eq", "fun": lambda q: q.sum() - 1}],
            options={"ftol": 1e-14, "maxiter": 500},
        )
        assert -res.fun <= best + 1e-7
        np.testing.assert_allclose(np.clip(res.x, 0, None), p, atol=2e-3)
        # and no random feasible point does better
        for q in rng.dirichlet(np.full(k, 0.5), size=500):
            assert _objective(q, s, regulariser, alpha, tau) <= best + 1e-12


def test_zero_temperature_is_the_lp_vertex():
    s = jnp.array([0.3, 1.2, -0.5, 1.1])
    vertex = np.array([0.0, 1.0, 0.0, 0.0])
    for reg, alpha in (("shannon", None), ("gini", None), ("tsallis", 1.5)):
        np.testing.assert_array_equal(regularised_argmax(s, reg, alpha, temperature=0), vertex)
        near = regularised_argmax(s, reg, alpha, temperature=1e-3)
        np.testing.assert_allclose(near, vertex, atol=1e-20 if reg != "shannon" else 1e-40)
    # the sparse maps reach the vertex at a finite temperature, softmax only in the limit
    assert sparsemax(s, temperature=0.1)[1] == 1.0
    assert 0 < softmax(s, temperature=0.1)[3] < 1


@pytest.mark.parametrize("fn", [sparsemax, entmax15, lambda s: entmax_bisect(s, 1.7)])
def test_custom_jvp_matches_finite_differences(fn):
    s = jnp.asarray(np.random.default_rng(4).normal(size=(5, 7)) * 1.5)
    check_grads(fn, (s,), order=1, modes=["fwd", "rev"], atol=1e-6, rtol=1e-6)
    # a directional derivative of the support-restricted map by central differences
    d = jnp.asarray(np.random.default_rng(5).normal(size=s.shape))
    eps = 1e-6
    fd = (fn(s + eps * d) - fn(s - eps * d)) / (2 * eps)
    _, jvp = jax.jvp(fn, (s,), (d,))
    np.testing.assert_allclose(jvp, fd, atol=1e-7)
    # outputs stay on the simplex, so tangents sum to zero
    np.testing.assert_allclose(jvp.sum(-1), 0.0, atol=1e-12)


def test_float32():
    s = jnp.asarray(np.random.default_rng(6).normal(size=(3, 8)), jnp.float32)
    for fn in (softmax, sparsemax, entmax15, lambda x: entmax_bisect(x, 1.5)):
        p = fn(s)
        assert p.dtype == jnp.float32
        np.testing.assert_allclose(p.sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(entmax_bisect(s, 1.5), entmax15(s), atol=1e-5)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: entmax_bisect(X, 1.0), "alpha"),
        (lambda: entmax_bisect(X, 0.5), "alpha"),
        (lambda: regularised_argmax(X, "tsallis", alpha=1.0), "alpha"),
        (lambda: regularised_argmax(X, "tsallis"), "alpha"),
        (lambda: regularised_argmax(X, "renyi"), "regulariser"),
        (lambda: regularised_argmax(X, "shannon", alpha=2.0), "alpha"),
        (lambda: softmax(X, temperature=0.0), "temperature"),
        (lambda: sparsemax(X, temperature=-1.0), "temperature"),
        (lambda: entmax15(jnp.array([1.0, jnp.nan])), "scores"),
        (lambda: sparsemax(jnp.array(1.0)), "scores"),
        (lambda: softmax(X, axis=3), "axis"),
        (lambda: entmax_bisect(X, 1.5, num_iters=0), "num_iters"),
    ],
)
def test_bad_input(call, name):
    with pytest.raises(ValueError, match=f"^{name}"):
        call()


def test_fully_masked_rows_give_zeros_and_large_scores_stay_on_the_simplex():
    row = jnp.array([[-jnp.inf, -jnp.inf, -jnp.inf], [0.0, -jnp.inf, 1.0]])
    for fn in (softmax, sparsemax, entmax15, lambda x: entmax_bisect(x, 1.7)):
        p = np.asarray(fn(row))
        assert np.all(p[0] == 0) and np.all(np.isfinite(p))
        np.testing.assert_allclose(p[1].sum(), 1.0, atol=1e-12)
    # float32 with a huge common offset: shift invariance keeps the sums exact
    big = jnp.asarray([2e6, 2e6 - 0.25, 2e6 - 0.5], jnp.float32)
    small = jnp.asarray([0.0, -0.25, -0.5], jnp.float32)
    for fn in (sparsemax, entmax15, lambda x: entmax_bisect(x, 1.5)):
        np.testing.assert_allclose(fn(big), fn(small), atol=1e-6)
    np.testing.assert_allclose(sparsemax(small), [7 / 12, 4 / 12, 1 / 12], atol=1e-6)


def test_overflowing_temperature_is_refused():
    s = jnp.asarray([3e38, 0.0], jnp.float32)
    for fn in (softmax, sparsemax, entmax15, lambda x, **k: entmax_bisect(x, 1.5, **k)):
        with pytest.raises(ValueError, match="^temperature"):
            fn(s, temperature=0.5)


def test_regularised_argmax_jits_over_the_temperature():
    s = jnp.array([0.3, 1.2, -0.5])
    jitted = jax.jit(lambda t: regularised_argmax(s, "gini", temperature=t))
    np.testing.assert_allclose(jitted(0.7), regularised_argmax(s, "gini", temperature=0.7))
