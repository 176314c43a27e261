"""The log-kernels of Nadaraya-Watson as attention scores, and the argument checks.

Score functions ``score_fn(queries (B, d), keys (C, d), inv_bandwidth (d,)) -> (B, C)``,
s = log K_h(q - k) = sum_c log K((q_c - k_c) / h_c), -inf outside a compact kernel's support
(``LOG_KERNEL_SCORES``; the kernels are defined in the package docstring), the helpers of the
nearest-key fallback (``relative``, ``scaled_sq_dist``), and the checks that ``estimator`` and
``bandwidth`` run before any tracing. Concrete inputs are checked and converted with NumPy, so
that no eager JAX operation (each of which compiles on first use) runs outside the
module-level jitted kernels.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ... import validation

KERNELS = ("gaussian", "boxcar", "epanechnikov", "triangular", "tricube")
COMPACT_KERNELS = ("boxcar", "epanechnikov", "triangular", "tricube")


# ----------------------------------------------------------------------------- log-kernels


def _scaled_diff(queries, keys, inv_bandwidth):
    """u_qkc = (q_c - k_c) / h_c: (B, C, d)."""
    return (queries[:, None, :] - keys[None, :, :]) * inv_bandwidth


def _outside_support(inside, log_k):
    """Sum the per-coordinate log-kernels; -inf unless every coordinate is inside."""
    return jnp.where(jnp.all(inside, -1), jnp.sum(log_k, -1), -jnp.inf)


def _gaussian_scores(queries, keys, inv_bandwidth):
    u = _scaled_diff(queries, keys, inv_bandwidth)
    return -0.5 * jnp.sum(u * u, -1)


def _boxcar_scores(queries, keys, inv_bandwidth):
    u = _scaled_diff(queries, keys, inv_bandwidth)
    inside = jnp.abs(u) <= 1
    return _outside_support(inside, jnp.zeros_like(u))


def _epanechnikov_scores(queries, keys, inv_bandwidth):
    u = _scaled_diff(queries, keys, inv_bandwidth)
    inside = jnp.abs(u) < 1
    return _outside_support(inside, jnp.log1p(-jnp.where(inside, u * u, 0)))


def _triangular_scores(queries, keys, inv_bandwidth):
    a = jnp.abs(_scaled_diff(queries, keys, inv_bandwidth))
    inside = a < 1
    return _outside_support(inside, jnp.log1p(-jnp.where(inside, a, 0)))


def _tricube_scores(queries, keys, inv_bandwidth):
    a = jnp.abs(_scaled_diff(queries, keys, inv_bandwidth))
    inside = a < 1
    return _outside_support(inside, 3.0 * jnp.log1p(-(jnp.where(inside, a, 0) ** 3)))


# score_fn(queries (B, d), keys (C, d), inv_bandwidth (d,)) -> (B, C) log K_h(q - k).
LOG_KERNEL_SCORES = {
    "gaussian": _gaussian_scores,
    "boxcar": _boxcar_scores,
    "epanechnikov": _epanechnikov_scores,
    "triangular": _triangular_scores,
    "tricube": _tricube_scores,
}
COMPACT_SCORES = frozenset(LOG_KERNEL_SCORES[name] for name in COMPACT_KERNELS)


def kernel_of_abs(kernel: str, a):
    """K(a) for a = |u| >= 0 (compact kernels), written so gradients stay finite."""
    inside = a <= 1 if kernel == "boxcar" else a < 1
    safe = jnp.where(inside, a, 0)
    if kernel == "boxcar":
        value = jnp.ones_like(a)
    elif kernel == "epanechnikov":
        value = 1 - safe * safe
    elif kernel == "triangular":
        value = 1 - safe
    else:  # tricube
        value = (1 - safe**3) ** 3
    return jnp.where(inside, value, 0)


def relative(inv_bandwidth):
    """1/h divided by its largest entry: the same argmin of |(q - k) / h|, no overflow."""
    return inv_bandwidth / jnp.max(inv_bandwidth)


def scaled_sq_dist(queries, keys, inv_bandwidth):
    """(B, C) |(q - k) / h|^2, from the differences."""
    u = _scaled_diff(queries, keys, inv_bandwidth)
    return jnp.sum(u * u, -1)


# ----------------------------------------------------------------------------- argument checks


def check_kernel(kernel) -> str:
    if not isinstance(kernel, str) or kernel not in KERNELS:
        raise ValueError(f"kernel: unknown kernel {kernel!r}; known: {list(KERNELS)}")
    return kernel


def check_block_size(block_size):
    if block_size is not None:
        validation.check_positive_int("block_size", block_size)
    return block_size


def check_data(keys, values, queries=None):
    """keys (n,) | (n, d), values (n,) | (n, m), queries (Q,) | (Q, d) -> 2-D arrays."""
    k, _ = validation.as_points("keys", keys)
    v, scalar_values = validation.as_points("values", values)
    if v.shape[0] != k.shape[0]:
        raise ValueError(f"values: {v.shape[0]} rows do not match the {k.shape[0]} keys")
    arrays = [k, v]
    if queries is not None:
        q, _ = validation.as_points("queries", queries)
        if q.shape[1] != k.shape[1]:
            raise ValueError(
                f"queries: dimension {q.shape[1]} does not match the keys' {k.shape[1]} "
                "(pass (Q,) or (Q, 1) queries for (n,) keys, (Q, d) for (n, d) keys)"
            )
        arrays.append(q)
    dtype = np.dtype(jnp.result_type(*(a.dtype for a in arrays)))
    _check_spread(k, None if queries is None else arrays[2], dtype)
    return [as_dtype(a, dtype) for a in arrays], scalar_values, dtype


def _check_spread(keys, queries, dtype) -> None:
    """Refuse keys (and queries) so far apart that their squared distances overflow ``dtype``.

    The leave-one-out pass forms sum_c (k_ic - k_jc)^2 and the nearest-key fallback
    sum_c ((q_c - k_c) r_c)^2 with r_c = min(h) / h_c <= 1, so both stay finite when
    sum_c (max_c - min_c)^2 over the keys and queries is below finfo(dtype).max (about 1.3e154
    per coordinate in float64, 1.8e19 in float32). Skipped when traced.
    """
    if validation.any_traced(keys, queries):
        return
    lo = np.min(keys, axis=0).astype(np.float64)
    hi = np.max(keys, axis=0).astype(np.float64)
    checks = [("keys", "keys", lo, hi)]
    if queries is not None:
        lo_q = np.minimum(lo, np.min(queries, axis=0))
        hi_q = np.maximum(hi, np.max(queries, axis=0))
        checks.append(("queries", "keys and queries", lo_q, hi_q))
    limit = float(np.finfo(dtype).max)
    for name, what, lo, hi in checks:
        with np.errstate(over="ignore", invalid="ignore"):
            total = float(np.sum(np.square(hi - lo)))
        if not total <= limit:
            raise ValueError(
                f"{name}: the squared distances between the {what} reach sum_c (max - min)^2 = "
                f"{total:.3g}, more than {np.dtype(dtype).name}'s largest number {limit:.3g}; "
                f"rescale the {what}"
            )


def as_dtype(a, dtype):
    return a.astype(dtype) if validation.is_traced(a) else np.asarray(a, dtype)


__all__ = [
    "KERNELS",
    "LOG_KERNEL_SCORES",
    "as_dtype",
    "check_block_size",
    "check_data",
    "check_kernel",
    "kernel_of_abs",
    "relative",
    "scaled_sq_dist",
]
