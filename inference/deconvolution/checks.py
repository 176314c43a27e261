"""The value checks of a deconvolution problem (x, atoms, weights, sigma), shared by ``em``,
``kiefer_wolfowitz``, ``gibbs`` and the learned stack (``learned.unrolled``).

x is (N,) or (N, p), finite and non-empty; sigma the known noise scale (``check_sigma``): a
finite number > 0 whose 1 / sigma^2 is finite in x's dtype, one such per observation (N,), or
one per observation and coordinate (N, p) (heteroscedastic: x_i ~ N(z_i, diag(s_i^2)));
atoms (K,) / (K, p) in the convention of x, finite; weights on the simplex; and
the spread (max - min) / sigma of x and the atoms at most
``attnbayes.validation.max_scaled_spread`` (beyond it the squared distances overflow). Value
checks run on concrete inputs only, before any tracing; on tracers only the static checks
(shapes, ranks, dtypes) run. ``em.check_problem`` is the public face of ``checked_problem``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ... import sharding, validation


def check_data(x, sigma):
    """Validate the data and sigma: ``(points (N, p), scalar, dtype, sigma)``.

    ``points`` as ``validation.as_points`` gives them (NumPy, or the tracer), sigma as
    ``check_sigma`` gives it. Value checks run on concrete values only.
    """
    points, scalar = validation.as_points("x", x)
    dtype, sigma = check_sigma(points, sigma, scalar=scalar)
    return points, scalar, dtype, sigma


def check_sigma(points, sigma, *, scalar: bool = False):
    """sigma for checked (N, p) ``points``: ``(dtype, sigma)``.

    The user's sigma is a number (one noise scale for all), an (N,) array (s_i, one per
    observation) or, for x given as (N, p) (``scalar`` False), an (N, p) array (s_ic, one per
    observation and coordinate). Returned as a float, or as "row scales" broadcasting against
    the (N, p) points: an (N, 1) or (N, p) array (NumPy when concrete, the tracer reshaped when
    traced). Every value is finite and > 0 with 1 / sigma^2 finite in x's dtype (on concrete
    values; under ``jax.jit`` only the shape is checked).
    """
    dtype = jax.dtypes.canonicalize_dtype(points.dtype)
    try:
        ndim = np.ndim(sigma) if isinstance(sigma, list | tuple) else getattr(sigma, "ndim", 0)
    except ValueError:  # a ragged list: as_float_array names it below
        ndim = 1
    if ndim == 0:
        if validation.is_traced(sigma):
            return dtype, sigma
        sigma = validation.check_positive_scalar("sigma", sigma)
        validation.check_sigma_range("sigma", sigma, dtype)
        return dtype, sigma
    arr = validation.as_scale_array("sigma", sigma)
    n, p = points.shape
    shapes = [(n,)] if scalar else [(n,), (n, p)]
    if tuple(arr.shape) not in shapes:
        wanted = " or ".join(str(s) for s in shapes)
        data = f"x of shape ({n},)" if scalar else f"x of shape ({n}, {p})"
        raise ValueError(
            f"sigma: expected a number or an array of shape {wanted} (one per observation"
            f"{'' if scalar else ', or per observation and coordinate'}) for {data}, got "
            f"shape {tuple(arr.shape)}"
        )
    rows = arr[:, None] if arr.ndim == 1 else arr
    if validation.is_traced(rows):
        return dtype, rows
    validation.check_finite("sigma", rows)
    if np.any(rows <= 0):
        index = tuple(int(i) for i in np.argwhere(arr <= 0)[0])
        where = index[0] if len(index) == 1 else index
        raise ValueError(f"sigma: must be > 0, got {float(arr[index])} at entry {where}")
    validation.check_sigma_range("sigma", arr, dtype)
    return dtype, np.asarray(rows, np.float64)


def noise_precisions(sigma, shape):
    """1 / sigma^2 broadcast to ``shape`` (N, p): the (N, p) precisions of the observations."""
    return jnp.broadcast_to(1.0 / jnp.square(sigma), shape)


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


def check_streaming(block_size, mesh):
    """Validate (block_size, mesh) of a streamed entry point (``em``, ``kiefer_wolfowitz``):
    ``(block_size, mesh for the kernels)``.

    ``block_size`` None (dense) or an int >= 1. Streamed, ``mesh`` None means every device
    (``sharding.batch_mesh()``); the dense path is never sharded, so it takes None or a
    one-device mesh and refuses more, naming ``mesh``. A one-device mesh reaches the kernels as
    None (the same plain program, compiled once).
    """
    if block_size is not None:
        block_size = validation.check_positive_int("block_size", block_size)
    if block_size is None and mesh is None:
        return None, None
    mesh = sharding.check_mesh(mesh)
    size = sharding.mesh_size(mesh)
    if block_size is None and size > 1:
        raise ValueError(
            f"mesh: the dense path (block_size=None) runs on one device, got a mesh of {size} "
            "devices; set block_size to stream the rows and shard them over it"
        )
    return block_size, (mesh if size > 1 else None)


__all__ = ["check_data", "check_sigma", "check_streaming", "checked_problem", "noise_precisions"]
