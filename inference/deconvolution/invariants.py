"""Permutation-invariant summaries of a posterior over discrete mixing measures.

The atoms of a mixture are exchangeable: relabelling (mu, w) leaves the likelihood unchanged,
so chains may sit in different labellings and per-atom R-hat is meaningless. What every
labelling agrees on, and what this module computes per posterior draw (mu^(s), w^(s)):

- ``z_mean``: E[z_i | x_i, nu^(s)] = sum_k A_ik^(s) mu_k^(s), the attention output;
- ``z_draw``: one draw z_i^(s) = mu_c^(s) with c ~ Cat(A_i.^(s)), so that the draws over s are
  draws from the posterior of z_i | x (nu integrated out), used for interval coverage;
- ``nu_cdf``: F^(s)(t) = sum_k w_k^(s) 1[mu_k^(s) <= t] on a grid (scalar data);
- ``log_lik_total``: sum_i log p(x_i | nu^(s)).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

from ... import validation
from .checks import check_sigma
from .em import e_step_attention

if TYPE_CHECKING:  # xarray is imported where used: importing the algorithms stays lean
    import xarray as xr

INVARIANT_NAMES = ("z_mean", "nu_cdf", "log_lik_total")


def measure_cdf(atoms: jax.Array, weights: jax.Array, points: jax.Array) -> jax.Array:
    """F(t) = sum_k w_k 1[mu_k <= t] for scalar atoms.

    Args:
        atoms: (..., K).
        weights: (..., K).
        points: (G,).

    Returns:
        (..., G).
    """
    below = atoms[..., None, :] <= points[:, None]
    return jnp.sum(jnp.where(below, weights[..., None, :], 0.0), axis=-1)


@functools.partial(jax.jit, static_argnames=("batch_size",))
def _per_draw(x, atoms, weights, sigma, keys, batch_size):
    """x (N, p); atoms (S, K, p); weights (S, K); keys (S, 2) -> z_mean, z_draw (S, N, p)."""

    def one(args):
        mu, w, key = args
        att = e_step_attention(x, mu, w, sigma)
        labels = jax.random.categorical(key, jnp.log(att.weights), axis=-1)
        return att.output, mu[labels]

    return jax.lax.map(one, (atoms, weights, keys), batch_size=batch_size)


def add_invariants(
    key: jax.Array,
    datatree: xr.DataTree,
    x,
    sigma,
    *,
    cdf_points=None,
    batch_size: int = 32,
) -> xr.DataTree:
    """Return a copy of ``datatree`` whose posterior also holds the invariant quantities.

    Args:
        key: ``jax.random`` key for the z_i draws (first, as everywhere in attnbayes).
        datatree: from ``run_nuts(deconvolution_model, ...)``; posterior has ``atoms`` and
            ``weights``.
        x: the (N,) or (N, p) data the posterior was fitted to.
        sigma: the known noise scale: a number, (N,) one per observation or (N, p) one per
            observation and coordinate.
        cdf_points: (G,) grid for ``nu_cdf`` (scalar data); default 101 points spanning the
            data +- 3 sigma (the largest sigma when it is per unit).
        batch_size: posterior draws processed together (memory ~ batch_size * N * K).

    Adds ``z_mean`` and ``z_draw`` (chain, draw, point[, coord]), ``nu_cdf`` (chain, draw,
    cdf_point) for scalar data, and ``log_lik_total`` (chain, draw).
    """
    key = validation.check_key("key", key)
    points, scalar = validation.as_points("x", x)
    dtype, sigma = check_sigma(points, sigma, scalar=scalar)
    post = datatree["posterior"].to_dataset()
    for name in ("atoms", "weights"):
        if name not in post:
            raise ValueError(f"datatree: posterior has no {name!r} variable")
    atoms = np.asarray(post["atoms"])
    weights = np.asarray(post["weights"])
    n_chain, n_draw, k = weights.shape
    atoms = atoms.reshape(n_chain * n_draw, k, -1)
    if atoms.shape[-1] != points.shape[1]:
        raise ValueError(
            f"x: has {points.shape[1]} coordinates but the atoms have {atoms.shape[-1]}"
        )
    keys = jax.random.split(key, n_chain * n_draw)
    z_mean, z_draw = _per_draw(
        jnp.asarray(points, dtype),
        jnp.asarray(atoms, dtype),
        jnp.asarray(weights.reshape(-1, k), dtype),
        jnp.asarray(sigma, dtype),
        keys,
        batch_size,
    )
    shape = (n_chain, n_draw, points.shape[0]) + (() if scalar else (points.shape[1],))
    sample_dims = ["chain", "draw"]
    zdims = [*sample_dims, "point"] + ([] if scalar else ["coord"])
    new = {
        "z_mean": (zdims, np.asarray(z_mean).reshape(shape)),
        "z_draw": (zdims, np.asarray(z_draw).reshape(shape)),
    }
    coords = {"chain": post["chain"].values, "draw": post["draw"].values}
    if scalar:
        if cdf_points is None:
            reach = 3 * float(np.max(sigma))
            lo, hi = float(points.min()) - reach, float(points.max()) + reach
            cdf_points = np.linspace(lo, hi, 101)
        grid = validation.as_float_array("cdf_points", cdf_points)
        if grid.ndim != 1:
            raise ValueError(f"cdf_points: expected shape (G,), got {tuple(grid.shape)}")
        cdf = measure_cdf(jnp.asarray(post["atoms"].values), jnp.asarray(weights), grid)
        new["nu_cdf"] = ([*sample_dims, "cdf_point"], np.asarray(cdf))
        coords["cdf_point"] = np.asarray(grid)
    if "log_likelihood" in datatree.children:
        ll = datatree["log_likelihood"].to_dataset()
        obs = next(iter(ll.data_vars))
        other = [d for d in ll[obs].dims if d not in sample_dims]
        new["log_lik_total"] = (sample_dims, np.asarray(ll[obs].sum(other)))
    import xarray as xr

    extra = xr.Dataset(new, coords=coords)
    out = datatree.copy()
    merged = xr.merge([post, extra], compat="override", join="outer")
    merged.attrs = post.attrs
    out["posterior"] = xr.DataTree(merged)
    return out


__all__ = ["INVARIANT_NAMES", "add_invariants", "measure_cdf"]
