"""Equal-tailed intervals of a discrete posterior (``intervals``) against a brute-force loop,
eager and under ``jax.jit``."""

import jax
import numpy as np

from attnbayes.inference.deconvolution.intervals import discrete_posterior_intervals


def _brute_quantile(values, probs, q):
    """Smallest value v with P(Z <= v) >= q for Z ~ sum_k probs_k delta(values_k)."""
    total = sum(probs)
    best = None
    for v in sorted(set(values)):
        cdf = sum(p for u, p in zip(values, probs, strict=True) if u <= v) / total
        if cdf >= q:
            best = v
            break
    return max(values) if best is None else best


def test_discrete_posterior_intervals_brute_force():
    rng = np.random.default_rng(7)
    n, k, p = 6, 5, 2
    atoms = rng.normal(size=(k, p))
    resp = rng.dirichlet(np.full(k, 0.7), size=n)
    resp[0] = [0, 0, 1, 0, 0]  # a point mass: the interval collapses to that atom
    resp[1, 3] = 0.0
    resp[1] /= resp[1].sum()
    probs = (0.5, 0.8, 0.9)
    out = discrete_posterior_intervals(resp, atoms, probs)
    assert set(out) == set(probs)
    for prob in probs:
        lower, upper = out[prob]
        assert lower.shape == upper.shape == (n, p)
        for i in range(n):
            for j in range(p):
                vals, ps = list(atoms[:, j]), list(resp[i])
                assert lower[i, j] == _brute_quantile(vals, ps, (1 - prob) / 2), (prob, i, j)
                assert upper[i, j] == _brute_quantile(vals, ps, (1 + prob) / 2), (prob, i, j)
        assert np.all(lower <= upper)
        np.testing.assert_array_equal(lower[0], atoms[2])
        np.testing.assert_array_equal(upper[0], atoms[2])


def test_discrete_posterior_intervals_traced():
    """Under jax.jit the intervals are computed in JAX by the same rule as in NumPy."""
    rng = np.random.default_rng(3)
    resp = rng.dirichlet(np.ones(6), size=5)
    atoms = rng.normal(size=(6, 2))
    eager = discrete_posterior_intervals(resp, atoms, (0.5, 0.9))
    traced = jax.jit(lambda r, a: discrete_posterior_intervals(r, a, (0.5, 0.9)))(resp, atoms)
    for prob in (0.5, 0.9):
        for side in (0, 1):
            np.testing.assert_array_equal(traced[prob][side], eager[prob][side])
