"""The value checks of a deconvolution problem (x, atoms, weights, sigma), shared by ``em``,
``kiefer_wolfowitz``, ``gibbs`` and the learned stack (``learned.unrolled``).

x is (N,) or (N, p), finite and non-empty; sigma a finite number > 0 whose 1 / sigma^2 is finite
in x's dtype; atoms (K,) / (K, p) in the convention of x, finite; weights on the simplex; and
the spread (max - min) / sigma of x and the atoms at most
``attnbayes.validation.max_scaled_spread`` (beyond it the squared distances overflow). Value
checks run on concrete inputs only, before any tracing; on tracers only the static checks
(shapes, ranks, dtypes) run. ``em.check_problem`` is the public face of ``checked_problem``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ... import validation


def check_data(x, sigma):
    """Validate the data and sigma: ``(points (N, p), scalar, dtype, sigma)``.

    ``points`` as ``validation.as_points`` gives them (NumPy, or the tracer), sigma a float (or
    the tracer). Value checks run on concrete values only.
    """
    points, scalar = validation.as_points("x", x)
    dtype, sigma = check_sigma(points, sigma)
    return points, scalar, dtype, sigma


def check_sigma(points, sigma):
    """sigma for checked (N, p) ``points``: ``(dtype, sigma)``, 1 / sigma^2 finite in x's dtype."""
    dtype = jax.dtypes.canonicalize_dtype(points.dtype)
    sigma = validation.check_positive_scalar("sigma", sigma)
    validation.check_sigma_range("sigma", sigma, dtype)
    return dtype, sigma


def _check_atoms(atoms, points, scalar, name="atoms"):
    """Atoms (K,) / (K, p) in the convention of the data: returned as (K, p)."""
    atoms_arr = validation.as_float_array(name, atoms)
    if atoms_arr.ndim != (1 if scalar else 2):
        shape = tuple(points.shape[:1]) if scalar else tuple(points.shape)
        raise ValueError(
            f"{name}: expected shape {'(K,)' if scalar else '(K, p)'} to match x of "
            f"shape {shape}, got {tuple(atoms_arr.shape)}"
        )
    if atoms_arr.shape[0] == 0:
        raise ValueError(f"{name}: is empty (K = 0)")
    atoms_arr = atoms_arr[:, None] if scalar else atoms_arr
    if atoms_arr.shape[1] != points.shape[1]:
        raise ValueError(
            f"{name}: have {atoms_arr.shape[1]} coordinates but x has {points.shape[1]}"
        )
    validation.check_finite(name, atoms_arr)
    return atoms_arr


def checked_problem(x, atoms, weights, sigma, *, names=("atoms", "weights")):
    """Validate (x, atoms, weights, sigma); return them as (N, p), (K, p), (K,), float + flag
    (whether x was given as (N,)), the arrays in x's floating dtype.

    ``names`` are the names the caller's user knows the atoms and weights by (``init`` in
    ``fit_em``, ``result.atoms`` in ``npmle_posterior``). ``atoms=None`` checks the data and
    sigma alone (and returns ``None`` for atoms and weights). On tracers only the static checks
    (shapes, ranks, dtypes) run.
    """
    atoms_name, weights_name = names
    points, scalar, dtype, sigma = check_data(x, sigma)
    atoms_arr = None
    if atoms is not None:
        atoms_arr = _check_atoms(atoms, points, scalar, atoms_name)
        weights = validation.check_weights(weights_name, weights, size=atoms_arr.shape[0])
    others = () if atoms_arr is None else ((atoms_name, atoms_arr),)
    validation.check_scaled_spread("x", points, sigma, dtype, others=others)
    if atoms_arr is None:
        return jnp.asarray(points, dtype), None, None, jnp.asarray(sigma, dtype), scalar
    return (
        jnp.asarray(points, dtype),
        jnp.asarray(atoms_arr, dtype),
        jnp.asarray(weights, dtype),
        jnp.asarray(sigma, dtype),
        scalar,
    )


__all__ = ["check_data", "check_sigma", "checked_problem"]
