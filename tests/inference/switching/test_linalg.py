"""The shared linear algebra of the switching package (``attnbayes.inference.switching.linalg``):
``psd_solve``'s derivative at constant rank, and the semidefinite Cholesky factor and the
generalised-inverse solve of the Gibbs sampler's draws on singular matrices."""

import jax
import jax.numpy as jnp
import numpy as np

from attnbayes.inference.switching.linalg import psd_chol, psd_chol_solve, psd_solve
from attnbayes.models.switching import maneuvering_target

EPS = 1e-5
RTOL = 1e-6


def test_psd_solve_derivative_is_the_pseudo_inverse_one():
    """``psd_solve``'s custom JVP against central differences: positive definite A, a repeated
    eigenvalue, and a singular A moved at constant rank (B in its range)."""
    rng = np.random.default_rng(0)
    g = rng.normal(size=(3, 2))
    cases = {
        "pd": (np.diag([2.0, 1.0, 0.5]) + 0.1, rng.normal(size=(3, 2)), 3),
        "repeated": (np.eye(3), rng.normal(size=(3, 2)), 3),
        "singular": (g @ g.T, g @ rng.normal(size=(2, 2)), 2),
    }
    jvp = jax.jit(lambda a, b, da, db: jax.jvp(psd_solve, (a, b), (da, db))[1])
    for label, (a, b, rank) in cases.items():
        if rank == 3:
            da, db = rng.normal(size=(3, 3)), rng.normal(size=(3, 2))
            da = da + da.T
        else:  # stay in the range of A: da = G H' + H G', db = G C
            h = rng.normal(size=(3, 2))
            da, db = g @ h.T + h @ g.T, g @ rng.normal(size=(2, 2))
        fd = (psd_solve(a + EPS * da, b + EPS * db) - psd_solve(a - EPS * da, b - EPS * db)) / (
            2 * EPS
        )
        np.testing.assert_allclose(jvp(a, b, da, db), fd, rtol=RTOL, atol=1e-8, err_msg=label)


def test_psd_chol_reproduces_singular_matrices_and_solves_in_their_range():
    """The semidefinite factor reproduces singular PSD matrices to round-off, and
    ``psd_chol_solve`` is a generalised inverse of them (the matrices of
    ``test_gibbs.py``'s Kalman-update test: the same draws)."""
    rng = np.random.default_rng(0)
    a = rng.normal(size=(3, 3))
    cov = a @ a.T + 0.1 * np.eye(3)
    for shape in ((2, 3), 3, 2):  # the update's h, mean and y
        rng.normal(size=shape)
    g = rng.normal(size=(4, 2))
    for mat in (g @ g.T, np.zeros((4, 4)), cov, maneuvering_target().dynamics_covs[1]):
        c = np.asarray(jax.jit(psd_chol)(jnp.asarray(mat)))
        np.testing.assert_allclose(c @ c.T, mat, rtol=0, atol=1e-14 * max(1.0, np.abs(mat).max()))
        b = mat @ rng.normal(size=(len(mat), 2))  # in the range of mat
        gb = np.asarray(jax.jit(psd_chol_solve)(jnp.asarray(mat), jnp.asarray(b)))
        np.testing.assert_allclose(mat @ gb, b, rtol=0, atol=1e-12 * max(1.0, np.abs(mat).max()))
