"""Helpers for the traceability tests (issue 14) of deconvolution, attention and kernel
regression: jit against eager, vmap against a loop, grad against central differences.

Finite differences: directional derivatives (f(x + e d) - f(x - e d)) / (2 e) with
e = 1e-6 * max(1, |x|), compared as |grad . d - fd| <= 1e-6 |fd| + 1e-8 (1 + |f(x)|): the
truncation error is O(e^2) and the rounding error about 1e-16 |f| / e = 1e-10 |f|, both well
inside (float64).
"""

import jax
import jax.numpy as jnp
import numpy as np


def leaves_close(a, b, rtol=1e-12, atol=1e-12):
    """Same pytree structure, every leaf a JAX array (from the jit) or array, equal to tolerance."""
    la, ta = jax.tree.flatten(a)
    lb, tb = jax.tree.flatten(b)
    assert ta == tb
    for x, y in zip(la, lb, strict=True):
        x, y = np.asarray(x), np.asarray(y)
        assert x.shape == y.shape and x.dtype == y.dtype
        if x.dtype == bool or np.issubdtype(x.dtype, np.integer):
            np.testing.assert_array_equal(x, y)
        else:
            np.testing.assert_allclose(x, y, rtol=rtol, atol=atol, equal_nan=True)


def vmap_vs_loop(f, batch, atol=1e-12):
    """``jax.vmap(f)`` over ``batch`` equals a Python loop of ``f`` (rtol 1e-10)."""
    batched = jax.vmap(f)(jnp.asarray(batch))
    looped = jax.tree.map(lambda *leaves: jnp.stack(leaves), *[f(b) for b in batch])
    leaves_close(batched, looped, rtol=1e-10, atol=atol)


_COMPILED = {}


def check_grads(f, args, directions):
    """grad f . d against central differences for each {argnum: direction d}.

    ``f`` and its gradient in those arguments are compiled once per (f, argnums) and kept
    (pass module-level functions to share them between tests); the tolerance is the module
    docstring's.
    """
    key = (f, tuple(directions))
    if key not in _COMPILED:
        _COMPILED[key] = (jax.jit(f), jax.jit(jax.grad(f, argnums=tuple(directions))))
    value, grad_fn = _COMPILED[key]
    grads = grad_fn(*args)
    f0 = float(value(*args))
    for (i, direction), grad in zip(directions.items(), grads, strict=True):
        x0 = np.asarray(args[i], np.float64)
        d = np.asarray(direction, np.float64)
        eps = 1e-6 * max(1.0, float(np.max(np.abs(x0))))
        plus, minus = list(args), list(args)
        plus[i], minus[i] = x0 + eps * d, x0 - eps * d
        fd = (float(value(*plus)) - float(value(*minus))) / (2 * eps)
        analytic = float(jnp.sum(grad * d))
        assert abs(analytic - fd) <= 1e-6 * abs(fd) + 1e-8 * (1 + abs(f0)), (i, analytic, fd)


def simplex_direction(k, seed):
    """A random direction in the tangent space of the simplex (entries summing to 0)."""
    d = np.random.default_rng(seed).normal(size=k)
    return d - d.mean()


def has_nan(leaves) -> bool:
    """Some NaN among the floating leaves."""
    out = np.concatenate(
        [np.ravel(leaf) for leaf in leaves if jnp.issubdtype(leaf.dtype, jnp.floating)]
    )
    return bool(np.isnan(out).any())


def issue14_data():
    """The small problems of the traceability tests, drawn in one fixed order (seed 14) so that
    each package's test file sees the same arrays: ``(data, rng)`` with ``rng`` the generator
    after those draws (for the directions the tests draw)."""
    from types import SimpleNamespace

    rng = np.random.default_rng(14)
    d = SimpleNamespace()
    d.X = rng.normal(size=16) * 1.5
    d.X2 = rng.normal(size=(10, 2))
    d.ATOMS2 = rng.normal(size=(4, 2))
    d.QUERIES = rng.normal(size=(4, 3))
    d.KEYS = rng.normal(size=(6, 3))
    d.VALUES = rng.normal(size=(6, 2))
    d.SCORES = rng.normal(size=(3, 6)) * 2.0
    d.KR_KEYS = np.sort(rng.uniform(-2, 2, size=14))
    d.KR_VALUES = np.sin(d.KR_KEYS) + 0.1 * rng.normal(size=14)
    d.C_X = rng.normal(size=d.X.shape)  # fixed linear functionals of vector outputs
    d.C_X2 = rng.normal(size=d.X2.shape)
    d.C_SCORES = rng.normal(size=d.SCORES.shape)
    d.C_OUT = rng.normal(size=(d.QUERIES.shape[0], d.VALUES.shape[1]))
    return d, rng
