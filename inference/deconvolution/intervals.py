"""Equal-tailed posterior intervals of z_i when its posterior is discrete (atoms of a fitted nu)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

INTERVAL_PROBS = (0.5, 0.9)


def discrete_posterior_intervals(resp, atoms, probs=INTERVAL_PROBS) -> dict:
    """Equal-tailed intervals of z_i ~ sum_k A_ik delta(mu_k), coordinate by coordinate.

    Args:
        resp: (N, K) responsibilities A.
        atoms: (K, p).
        probs: central probabilities.

    Returns:
        {prob: (lower (N, p), upper (N, p))}: NumPy float64 arrays, or, when ``resp`` or
        ``atoms`` is traced (under ``jax.jit``), JAX arrays by the same rule in their dtype.
        The end points are atoms: piecewise constant in ``resp`` (zero gradient).
    """
    if any(isinstance(a, jax.core.Tracer) for a in (resp, atoms)):
        return _traced_intervals(jnp.asarray(resp), jnp.asarray(atoms), probs)
    resp = np.asarray(resp, dtype=np.float64)
    atoms = np.asarray(atoms, dtype=np.float64)
    out = {}
    for prob in probs:
        lo_q, hi_q = (1 - prob) / 2, (1 + prob) / 2
        lower = np.empty((resp.shape[0], atoms.shape[1]))
        upper = np.empty((resp.shape[0], atoms.shape[1]))
        for j in range(atoms.shape[1]):
            order = np.argsort(atoms[:, j], kind="stable")
            cdf = np.cumsum(resp[:, order], axis=1)
            cdf /= cdf[:, -1:]
            sorted_atoms = atoms[order, j]
            lower[:, j] = sorted_atoms[np.minimum((cdf < lo_q).sum(1), len(order) - 1)]
            upper[:, j] = sorted_atoms[np.minimum((cdf < hi_q).sum(1), len(order) - 1)]
        out[prob] = (lower, upper)
    return out


def _traced_intervals(resp, atoms, probs) -> dict:
    """``discrete_posterior_intervals`` in JAX (the same rule, for traced arguments)."""
    k = atoms.shape[0]
    out = {}
    for prob in probs:
        lo_q, hi_q = (1 - prob) / 2, (1 + prob) / 2
        lower, upper = [], []
        for j in range(atoms.shape[1]):
            order = jnp.argsort(atoms[:, j], stable=True)
            cdf = jnp.cumsum(resp[:, order], axis=1)
            cdf = cdf / cdf[:, -1:]
            sorted_atoms = atoms[order, j]
            lower.append(sorted_atoms[jnp.minimum(jnp.sum(cdf < lo_q, axis=1), k - 1)])
            upper.append(sorted_atoms[jnp.minimum(jnp.sum(cdf < hi_q, axis=1), k - 1)])
        out[prob] = (jnp.stack(lower, axis=1), jnp.stack(upper, axis=1))
    return out


__all__ = ["INTERVAL_PROBS", "discrete_posterior_intervals"]
