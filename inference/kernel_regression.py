"""Nadaraya-Watson kernel regression as attention, and its bandwidth selection.

For keys k_i (n, d), values v_i (n, m), a kernel K and bandwidths h (scalar or per coordinate),

    f(q) = sum_i v_i K_h(q - k_i) / sum_j K_h(q - k_j),      K_h(u) = prod_c K(u_c / h_c),

a multivariate *product* kernel (the statsmodels convention). This is softmax attention with
scores s(q, k) = log K_h(q - k) = sum_c log K((q_c - k_c) / h_c), -inf outside a compact
kernel's support; normalising constants of K cancel in the ratio. ``nadaraya_watson`` runs
``attnbayes.inference.attention.scored_attention`` with a module-level log-kernel score function, so
``block_size`` streams over key/query blocks with a running log-sum-exp (memory O(block^2)).
For the Gaussian kernel the scores are exactly ``neg_sq_distance_scores``:
-sum_c (q_c - k_c)^2 / (2 h_c^2).

Kernels K(u), up to constants (which cancel), with statsmodels' supports:

    gaussian      exp(-u^2 / 2)                 (statsmodels "gaussian": times 1/sqrt(2 pi))
    boxcar        1{|u| <= 1}                    (statsmodels sandbox Uniform: 1/2 on [-1, 1])
    epanechnikov  (1 - u^2)   for |u| < 1        (sandbox Epanechnikov: 3/4 (1 - u^2))
    triangular    (1 - |u|)   for |u| < 1        (sandbox Triangular)
    tricube       (1 - |u|^3)^3 for |u| < 1      (sandbox Tricube: 70/81 (1 - |u|^3)^3)

The seed's (d2l's) "Epanechikov" kernel max(0, 1 - |q - k|) is the triangular kernel here.
``statsmodels.nonparametric.kernels.tricube`` (``KernelReg(ckertype="tricube")``) sets u = 0
outside |u| <= 1, so it returns the kernel's maximum there instead of 0; it agrees with ours
only when every |u| <= 1.

Empty windows. A query with no key inside a compact kernel's window (log-normaliser -inf)
gets the value of its nearest key, in the Euclidean distance scaled by h,
|(q - k) / h|, ties to the lowest index; a warning (``EmptyWindowWarning``) says how many.
The same rule gives f_{-i}(k_i) in leave-one-out cross-validation (the nearest *other* key),
so the CV criterion is that of the estimator actually returned and is never NaN.

Errors. Bad input is refused before any tracing with a ``ValueError`` whose message starts with
the argument's name: keys, values and queries that are empty, of the wrong rank, complex, not
numbers, NaN or +-inf, or so far apart that their squared distances overflow the dtype
(sum_c (max - min)^2 > finfo.max: the leave-one-out pass and the nearest-key fallback form
them); a bandwidth that is not a finite number > 0 (bools refused) or whose 1/h^2 overflows;
unknown kernel or method names; a bad block_size, bounds, num_grid or optimiser setting. Under
``jax.jit`` only the static checks run, and a NaN output means input that the eager call
refuses (call the function once on the concrete inputs to see which).

Tracing and differentiability. ``nadaraya_watson``, ``kernel_scores`` and ``leave_one_out``
(dense and streamed) are traceable under ``jax.jit`` and ``jax.vmap`` in the keys, values,
queries and the bandwidth (``kernel`` and ``block_size`` are static), and ``jax.grad`` gives
their derivatives in the bandwidth, queries, keys and values: everywhere for the Gaussian
kernel; for the compact kernels away from the window edges |u_c| = 1, where the weights have
kinks (the boxcar's are piecewise constant in h: zero gradient). The nearest-key value of an
empty window is an argmin (piecewise constant). Not differentiable or traceable:
``select_bandwidth`` (an argmin over a grid, then a SciPy optimiser; eager only).
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from scipy import optimize

from .. import validation
from .attention import softmax_pool

KERNELS = ("gaussian", "boxcar", "epanechnikov", "triangular", "tricube")
COMPACT_KERNELS = ("boxcar", "epanechnikov", "triangular", "tricube")
SELECTION_METHODS = ("loo-cv", "gradient")


class EmptyWindowWarning(RuntimeWarning):
    """Some queries had no key inside a compact kernel's window (nearest-key value used)."""


class WideBandwidthWarning(UserWarning):
    """The selected bandwidth exceeds the keys' range: the fit is close to a constant."""


class LeaveOneOut(NamedTuple):
    """Leave-one-out cross-validation of Nadaraya-Watson at one bandwidth.

    Attributes:
        score: () CV(h) = (1/n) sum_i |v_i - f_{-i}(k_i)|^2 (squared norm for vector values).
        predictions: (n,) or (n, m) f_{-i}(k_i), in the values' convention.
        num_empty: () number of points whose leave-one-out window was empty (they use the
            value of the nearest other key).
    """

    score: jax.Array
    predictions: jax.Array
    num_empty: jax.Array


class BandwidthResult(NamedTuple):
    """A selected bandwidth and how it was found.

    Attributes:
        bandwidth: () or (d,) with ``per_coordinate``; the selected h.
        score: () the criterion at h: CV(h) for "loo-cv", held-out mean squared error for
            "gradient".
        bandwidth_trace: (T,) or (T, d): the coarse grid ("loo-cv") or the bandwidth before
            each Adam step and after the last ("gradient", T = num_steps + 1).
        loss_trace: (T,) the criterion at each entry of ``bandwidth_trace``.
    """

    bandwidth: jax.Array
    score: jax.Array
    bandwidth_trace: jax.Array
    loss_trace: jax.Array


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
_COMPACT_SCORES = frozenset(LOG_KERNEL_SCORES[name] for name in COMPACT_KERNELS)


def _kernel_of_abs(kernel: str, a):
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


def _relative(inv_bandwidth):
    """1/h divided by its largest entry: the same argmin of |(q - k) / h|, no overflow."""
    return inv_bandwidth / jnp.max(inv_bandwidth)


def _scaled_sq_dist(queries, keys, inv_bandwidth):
    u = _scaled_diff(queries, keys, inv_bandwidth)
    return jnp.sum(u * u, -1)


# ----------------------------------------------------------------------------- argument checks
#
# Concrete inputs are checked and converted with NumPy, so that no eager JAX operation (each
# of which compiles on first use) runs outside the module-level jitted kernels below.


def _check_kernel(kernel) -> str:
    if not isinstance(kernel, str) or kernel not in KERNELS:
        raise ValueError(f"kernel: unknown kernel {kernel!r}; known: {list(KERNELS)}")
    return kernel


def _check_bandwidth(bandwidth, dim: int, dtype, name: str = "bandwidth"):
    """A scalar or (d,) bandwidth, finite and > 0 (no bools), returned as (d,)."""
    return validation.check_bandwidth(name, bandwidth, dim, dtype)


def _check_block_size(block_size):
    if block_size is not None:
        validation.check_positive_int("block_size", block_size)
    return block_size


def _check_data(keys, values, queries=None):
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
    return [_as_dtype(a, dtype) for a in arrays], scalar_values, dtype


def _check_spread(keys, queries, dtype) -> None:
    """Refuse keys (and queries) so far apart that their squared distances overflow ``dtype``.

    The leave-one-out pass forms sum_c (k_ic - k_jc)^2 and the nearest-key fallback
    sum_c ((q_c - k_c) r_c)^2 with r_c = min(h) / h_c <= 1, so both stay finite when
    sum_c (max_c - min_c)^2 over the keys and queries is below finfo(dtype).max (about 1.3e154
    per coordinate in float64, 1.8e19 in float32). Skipped when traced.
    """
    if _any_traced(keys, queries):
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


def _as_dtype(a, dtype):
    return a.astype(dtype) if validation.is_traced(a) else np.asarray(a, dtype)


def _any_traced(*values) -> bool:
    return any(validation.is_traced(x) for x in values)


# ----------------------------------------------------------------------------- Nadaraya-Watson


def kernel_scores(queries, keys, *, kernel: str = "gaussian", bandwidth) -> jax.Array:
    """The dense (Q, K) matrix of attention scores s_qk = log K_h(q - k) (-inf off support).

    Args:
        queries: (Q,) or (Q, d); keys: (K,) or (K, d).
        kernel: one of ``KERNELS``.
        bandwidth: scalar or (d,), > 0.
    """
    kernel = _check_kernel(kernel)
    k, _ = validation.as_points("keys", keys)
    q, _ = validation.as_points("queries", queries)
    if q.shape[1] != k.shape[1]:
        raise ValueError(f"queries: dimension {q.shape[1]} does not match the keys' {k.shape[1]}")
    dtype = np.dtype(jnp.result_type(q.dtype, k.dtype))
    inv_h = 1 / _check_bandwidth(bandwidth, k.shape[1], dtype)
    return _dense_scores(LOG_KERNEL_SCORES[kernel], _as_dtype(q, dtype), _as_dtype(k, dtype), inv_h)


@functools.partial(jax.jit, static_argnames=("score_fn",))
def _dense_scores(score_fn, queries, keys, inv_bandwidth):
    return score_fn(queries, keys, inv_bandwidth)


def nadaraya_watson(
    keys,
    values,
    queries,
    *,
    kernel: str = "gaussian",
    bandwidth,
    block_size: int | None = None,
) -> jax.Array:
    """Nadaraya-Watson f(q) = sum_i v_i K_h(q - k_i) / sum_j K_h(q - k_j), as attention.

    Attention weights softmax_i(log K_h(q - k_i)) with the product kernel
    K_h(u) = prod_c K(u_c / h_c); for ``kernel="gaussian"`` the scores are exactly
    ``attnbayes.inference.attention.neg_sq_distance_scores`` (-|q - k|^2 / (2 h^2) per coordinate).

    Args:
        keys: (n,) or (n, d).
        values: (n,) or (n, m).
        queries: (Q,) or (Q, d), same d as the keys.
        kernel: "gaussian", "boxcar", "epanechnikov", "triangular" or "tricube" (see the
            module docstring for their definitions and supports).
        bandwidth: h > 0, a scalar or (d,) per coordinate.
        block_size: None for the dense path; else stream over blocks of this many keys and
            queries (memory O(block_size^2), never Q x n).

    Returns:
        (Q,) for values given as (n,), else (Q, m). A query whose window holds no key
        (compact kernels) gets the value of its nearest key in |(q - k) / h| (ties to the
        lowest index), with an ``EmptyWindowWarning`` giving their number; never NaN. (The
        same fallback covers Gaussian rows whose scores all overflow, for absurdly small h.)
    """
    kernel = _check_kernel(kernel)
    block_size = _check_block_size(block_size)
    (k, v, q), scalar_values, dtype = _check_data(keys, values, queries)
    inv_h = 1 / _check_bandwidth(bandwidth, k.shape[1], dtype)
    score_fn = LOG_KERNEL_SCORES[kernel]
    out, empty, num_empty = _nadaraya_watson(score_fn, inv_h, q, k, v, block_size, scalar_values)
    if validation.is_traced(num_empty):
        return _fill_empty_windows(out, empty, q, k, v, inv_h, block_size)
    if int(num_empty):
        warnings.warn(
            f"queries: {int(num_empty)} of {q.shape[0]} queries have no key inside the {kernel} "
            "kernel's window; they get the value of their nearest key (distance scaled by h)",
            EmptyWindowWarning,
            stacklevel=2,
        )
        out = _fill_empty_windows(out, empty, q, k, v, inv_h, block_size)
    return out


@functools.partial(jax.jit, static_argnums=(0, 5, 6))
def _nadaraya_watson(score_fn, inv_h, queries, keys, values, block_size, scalar_values):
    """``scored_attention``'s kernel (``softmax_pool``: the inputs are checked by the caller)
    with the log-kernel scores: (output, (Q,) empty rows, count).

    A row is empty when no key has positive weight: an empty window of a compact kernel (or,
    for the Gaussian, scores that all overflow to -inf, for absurdly small h).
    """
    att = softmax_pool(score_fn, inv_h, queries, keys, values, None, block_size, False)
    empty = ~jnp.isfinite(att.log_normalizer)
    out = att.output[:, 0] if scalar_values else att.output
    return out, empty, jnp.sum(empty)


@functools.partial(jax.jit, static_argnums=(6,))
def _fill_empty_windows(out, empty, queries, keys, values, inv_h, block_size):
    """Replace the empty rows of ``out`` ((Q,) or (Q, m)) by the nearest key's value."""
    fallback = jax.lax.cond(
        jnp.any(empty),
        lambda: values[_nearest_key(queries, keys, inv_h, block_size)],
        lambda: jnp.zeros_like(values, shape=(queries.shape[0], values.shape[1])),
    )
    if out.ndim == 1:
        return jnp.where(empty, fallback[:, 0], out)
    return jnp.where(empty[:, None], fallback, out)


def _nearest_key(queries, keys, inv_bandwidth, block_size=None, exclude_self=False):
    """argmin_j |(q_i - k_j) / h| (j != i with ``exclude_self``, queries = keys): (Q,) int.

    Dense, or blocked over keys and queries with a running minimum (memory O(block^2)).
    Ties go to the lowest index.
    """
    inv_bandwidth = _relative(inv_bandwidth)
    nq, nk = queries.shape[0], keys.shape[0]
    if block_size is None:
        d2 = _scaled_sq_dist(queries, keys, inv_bandwidth)
        if exclude_self:
            d2 = jnp.where(jnp.eye(nq, nk, dtype=bool), jnp.inf, d2)
        return jnp.argmin(d2, axis=1)
    b = block_size
    q = jnp.pad(queries, ((0, (-nq) % b), (0, 0))).reshape(-1, b, queries.shape[1])
    k = jnp.pad(keys, ((0, (-nk) % b), (0, 0))).reshape(-1, b, keys.shape[1])
    query_index = jnp.arange(q.shape[0] * b).reshape(-1, b)
    key_index = jnp.arange(k.shape[0] * b).reshape(-1, b)

    def one_query_block(block):
        qb, qidx = block

        def body(carry, key_block):
            best, arg = carry
            kb, kidx = key_block
            valid = kidx[None, :] < nk
            if exclude_self:
                valid = valid & (kidx[None, :] != qidx[:, None])
            d2 = jnp.where(valid, _scaled_sq_dist(qb, kb, inv_bandwidth), jnp.inf)
            j = jnp.argmin(d2, axis=1)
            dj = jnp.take_along_axis(d2, j[:, None], axis=1)[:, 0]
            better = dj < best  # strict: ties keep the lower index
            return (jnp.where(better, dj, best), jnp.where(better, kidx[j], arg)), None

        init = (jnp.full((b,), jnp.inf, queries.dtype), jnp.zeros((b,), key_index.dtype))
        (_, arg), _ = jax.lax.scan(body, init, (k, key_index))
        return arg

    return jax.lax.map(one_query_block, (q, query_index)).reshape(-1)[:nq]


# ----------------------------------------------------------------------------- leave-one-out


class _LooData(NamedTuple):
    """Pairwise differences for the dense leave-one-out pass (built once per data set).

    diffs: (d', n, n) squared coordinate differences (gaussian) or absolute ones (compact);
        for the gaussian kernel with a scalar bandwidth ("collapsed") d' = 1, the entry is
        |k_i - k_j|^2 and the diagonal is +inf (masked before use, so the pass stays
        differentiable in h).
    row_min: (n,) min_{j != i} of diffs[0] (used when d' = 1: the exact row maximum score).
    values: (n, m).
    """

    diffs: jax.Array
    row_min: jax.Array
    values: jax.Array


def _loo_data_traced(kernel: str, keys, values, collapse: bool) -> _LooData:
    """``_loo_data`` for traced keys or values, in JAX (the same arrays)."""
    n = keys.shape[0]
    diffs = keys.T[:, :, None] - keys.T[:, None, :]  # (d, n, n)
    diffs = diffs * diffs if kernel == "gaussian" else jnp.abs(diffs)
    if kernel == "gaussian" and collapse:
        diffs = jnp.sum(diffs, axis=0, keepdims=True)
    eye = jnp.eye(n, dtype=bool)
    first = jnp.where(eye, jnp.inf, diffs[0])
    row_min = jnp.min(first, axis=1)
    if kernel == "gaussian" and collapse:
        diffs = first[None]
    return _LooData(diffs, row_min, jnp.asarray(values))


def _loo_data(kernel: str, keys: np.ndarray, values: np.ndarray, collapse: bool) -> _LooData:
    if _any_traced(keys, values):
        return _loo_data_traced(kernel, keys, values, collapse)
    n, d = keys.shape
    if kernel == "gaussian" and collapse:
        diffs = np.zeros((1, n, n), keys.dtype)
        for c in range(d):
            diffs[0] += np.square(keys[:, None, c] - keys[None, :, c])
    else:
        diffs = np.empty((d, n, n), keys.dtype)
        for c in range(d):
            np.subtract(keys[:, None, c], keys[None, :, c], out=diffs[c])
        diffs = np.square(diffs, out=diffs) if kernel == "gaussian" else np.abs(diffs, out=diffs)
    first = diffs[0]
    diagonal = first.diagonal().copy()
    np.fill_diagonal(first, np.inf)
    row_min = first.min(1)
    if not (kernel == "gaussian" and collapse):
        np.fill_diagonal(first, diagonal)  # finite, so that gradients stay finite
    # device_put, not jnp.asarray: the latter stages a slow copy of the (d', n, n) array.
    return _LooData(*jax.device_put((diffs, row_min, values)))


def _loo_dense(kernel: str, log_h, data: _LooData):
    """f_{-i}(k_i) from precomputed differences: (CV, (n, m) predictions, number empty)."""
    diffs, row_min, values = data
    n = values.shape[0]
    inv_h = jnp.exp(-log_h)
    off_diag = ~jnp.eye(n, dtype=bool)
    if kernel == "gaussian":
        inv_h2 = inv_h * inv_h
        if diffs.shape[0] == 1:  # exact row maximum: p = 1 at the nearest other key
            # the +inf diagonal is replaced before the product: inf * 0 would make the
            # gradient in h NaN even where the diagonal is masked out below
            gap = jnp.where(off_diag, diffs[0] - row_min[:, None], 0.0)
            p = jnp.exp(-0.5 * inv_h2[0] * gap)
        else:
            neg_score = 0.5 * jnp.sum(diffs * inv_h2[:, None, None], axis=0)
            shift = jnp.min(jnp.where(off_diag, neg_score, jnp.inf), axis=1)
            # mask before exp: exp of the diagonal can overflow, and 0 * inf is NaN in backprop
            p = jnp.exp(
                jnp.where(off_diag, jax.lax.stop_gradient(shift)[:, None] - neg_score, -jnp.inf)
            )
        p = jnp.where(off_diag, p, 0)
    else:
        a = diffs * inv_h[:, None, None]
        p = jnp.where(off_diag, jnp.prod(_kernel_of_abs(kernel, a), axis=0), 0)
    # One product gives numerators and row sums: separate row reductions would each recompute
    # the exponentials.
    sums = p @ jnp.concatenate([values, jnp.ones_like(values[:, :1])], axis=1)
    total = sums[:, -1]
    empty = total <= 0
    pred = sums[:, :-1] / jnp.where(empty, 1, total)[:, None]
    if kernel != "gaussian":

        def nearest_other():
            a = diffs * _relative(inv_h)[:, None, None]
            d2 = jnp.where(off_diag, jnp.sum(a * a, axis=0), jnp.inf)
            return values[jnp.argmin(d2, axis=1)]

        fallback = jax.lax.cond(jnp.any(empty), nearest_other, lambda: jnp.zeros_like(pred))
        pred = jnp.where(empty[:, None], fallback, pred)
    return jnp.mean(jnp.sum((values - pred) ** 2, axis=-1)), pred, jnp.sum(empty)


def _loo_dense_score(kernel: str, log_h, data: _LooData):
    return _loo_dense(kernel, log_h, data)[0]


@jax.jit
def _loo_gaussian_scalar_score(log_h, data: _LooData):
    """CV(h), Gaussian kernel, scalar h, collapsed data: the lean kernel of the 1-D search.

    p_ij = exp(-(|k_i - k_j|^2 - min_j' |k_i - k_j'|^2) / (2 h^2)) <= 1, = 1 at the nearest
    other key (so no row is empty) and 0 on the +inf diagonal; no mask, no predictions.
    """
    diffs, row_min, values = data
    p = jnp.exp(-0.5 * jnp.exp(-2 * log_h[0]) * (diffs[0] - row_min[:, None]))
    sums = p @ jnp.concatenate([values, jnp.ones_like(values[:, :1])], axis=1)
    return jnp.mean(jnp.sum((values - sums[:, :-1] / sums[:, -1:]) ** 2, axis=-1))


_loo_dense_jit = jax.jit(_loo_dense, static_argnums=0)
_loo_dense_value_and_grad = jax.jit(
    jax.value_and_grad(_loo_dense_score, argnums=1), static_argnums=0
)


def _loo_blocked(score_fn, log_h, keys, values, block_size: int):
    """Leave-one-out streamed over key/query blocks: (CV, (n, m) predictions, number empty).

    The online softmax of ``scored_attention`` with the pair i = j removed (memory
    O(block_size^2)); only if some window is empty, a blocked argmin finds the nearest other
    keys.
    """
    n, b = keys.shape[0], block_size
    inv_h = jnp.broadcast_to(jnp.exp(-log_h), (keys.shape[1],))
    pad = (-n) % b
    k = jnp.pad(keys, ((0, pad), (0, 0))).reshape(-1, b, keys.shape[1])
    v = jnp.pad(values, ((0, pad), (0, 0))).reshape(-1, b, values.shape[1])
    index = jnp.arange(n + pad).reshape(-1, b)

    @jax.checkpoint
    def one_query_block(block):
        qb, qidx = block

        def body(carry, key_block):
            m, l, acc = carry
            kb, vb, kidx = key_block
            valid = (kidx[None, :] < n) & (kidx[None, :] != qidx[:, None])
            s = jnp.where(valid, score_fn(qb, kb, inv_h), -jnp.inf)
            # The running max only shifts exponents (the ratio is invariant): no gradient.
            m_new = jax.lax.stop_gradient(jnp.maximum(m, jnp.max(s, axis=-1)))
            shift = jnp.where(jnp.isfinite(m_new), m_new, 0)
            correction = jnp.exp(m - shift)
            p = jnp.exp(s - shift[:, None])
            return (m_new, l * correction + p.sum(-1), acc * correction[:, None] + p @ vb), None

        init = (
            jnp.full((b,), -jnp.inf, keys.dtype),
            jnp.zeros((b,), keys.dtype),
            jnp.zeros((b, values.shape[1]), values.dtype),
        )
        (_, l, acc), _ = jax.lax.scan(body, init, (k, v, index))
        empty = ~(l > 0)
        return acc / jnp.where(empty, 1, l)[:, None], empty

    pred, empty = jax.lax.map(one_query_block, (k, index))
    pred, empty = pred.reshape(-1, values.shape[1])[:n], empty.reshape(-1)[:n]
    fallback = jax.lax.cond(
        jnp.any(empty),
        lambda: values[_nearest_key(keys, keys, inv_h, block_size, exclude_self=True)],
        lambda: jnp.zeros_like(pred),
    )
    pred = jnp.where(empty[:, None], fallback, pred)
    return jnp.mean(jnp.sum((values - pred) ** 2, axis=-1)), pred, jnp.sum(empty)


def _loo_blocked_score(score_fn, log_h, keys, values, block_size: int):
    return _loo_blocked(score_fn, log_h, keys, values, block_size)[0]


_loo_blocked_jit = jax.jit(_loo_blocked, static_argnums=(0, 4))
_loo_blocked_value_and_grad = jax.jit(
    jax.value_and_grad(_loo_blocked_score, argnums=1), static_argnums=(0, 4)
)


def leave_one_out(
    keys, values, *, kernel: str = "gaussian", bandwidth, block_size: int | None = None
) -> LeaveOneOut:
    """Closed-form leave-one-out CV(h) = (1/n) sum_i |v_i - f_{-i}(k_i)|^2.

    f_{-i}(k_i) = sum_{j != i} v_j K_h(k_i - k_j) / sum_{j != i} K_h(k_i - k_j): the kernel
    matrix with its diagonal dropped, one n x n pass (or streamed over blocks of
    ``block_size``). An empty leave-one-out window takes the value of the nearest other key.

    Args:
        keys: (n,) or (n, d), n >= 2; values: (n,) or (n, m).
        kernel: one of ``KERNELS``; bandwidth: scalar or (d,), > 0.
        block_size: None (dense: builds d n x n arrays) or the block length of the streamed
            pass.

    Returns:
        ``LeaveOneOut(score (), predictions (n,) or (n, m), num_empty ())``.
    """
    kernel = _check_kernel(kernel)
    block_size = _check_block_size(block_size)
    (k, v), scalar_values, dtype = _check_data(keys, values)
    if k.shape[0] < 2:
        raise ValueError(f"keys: leave-one-out needs at least 2 points, got {k.shape[0]}")
    h = _check_bandwidth(bandwidth, k.shape[1], dtype)
    if block_size is None:
        collapse = kernel == "gaussian" and np.ndim(bandwidth) == 0
        h = h[:1] if collapse else h
        log_h = jnp.log(h) if validation.is_traced(h) else np.log(h)
        score, pred, num_empty = _loo_dense_jit(kernel, log_h, _loo_data(kernel, k, v, collapse))
    else:
        log_h = jnp.log(h) if validation.is_traced(h) else np.log(h)
        score, pred, num_empty = _loo_blocked_jit(
            LOG_KERNEL_SCORES[kernel], log_h, k, v, block_size
        )
    return LeaveOneOut(score, validation.restore_shape(pred, scalar_values), num_empty)


# ----------------------------------------------------------------------------- bandwidth selection


def _held_out_loss(score_fn, log_h, train_keys, train_values, test_keys, test_values):
    """Mean squared error of NW fitted on the train split, evaluated on the held-out split."""
    inv_h = jnp.broadcast_to(jnp.exp(-log_h), (train_keys.shape[1],))
    s = score_fn(test_keys, train_keys, inv_h)
    m = jnp.max(s, axis=1)
    has = jnp.isfinite(m)
    p = jnp.exp(s - jax.lax.stop_gradient(jnp.where(has, m, 0))[:, None])
    pred = (p @ train_values) / jnp.where(has, p.sum(1), 1)[:, None]
    if score_fn in _COMPACT_SCORES:
        nearest = jnp.argmin(_scaled_sq_dist(test_keys, train_keys, _relative(inv_h)), axis=1)
        pred = jnp.where(has[:, None], pred, train_values[nearest])
    return jnp.mean(jnp.sum((test_values - pred) ** 2, axis=-1))


@functools.partial(jax.jit, static_argnums=(0, 6, 7))
def _adam_fit(score_fn, log_h0, keys, values, split_key, lr, num_test, num_steps):
    """Adam on log h; returns ((T+1, ...) bandwidth path, (T+1,) held-out losses)."""
    perm = jax.random.permutation(split_key, keys.shape[0])
    test, train = perm[:num_test], perm[num_test:]
    data = (keys[train], values[train], keys[test], values[test])
    optimiser = optax.adam(lr)
    loss_and_grad = jax.value_and_grad(_held_out_loss, argnums=1)

    def step(carry, _):
        log_h, state = carry
        loss, grad = loss_and_grad(score_fn, log_h, *data)
        updates, state = optimiser.update(grad, state, log_h)
        return (optax.apply_updates(log_h, updates), state), (log_h, loss)

    (log_h, _), (path, losses) = jax.lax.scan(
        step, (log_h0, optimiser.init(log_h0)), None, length=num_steps
    )
    final = _held_out_loss(score_fn, log_h, *data)
    return jnp.exp(jnp.concatenate([path, log_h[None]])), jnp.concatenate([losses, final[None]])


def _iqr(x: np.ndarray) -> np.ndarray:
    """Interquartile range along axis 0, divided by 1.349 (the sd of a normal sample)."""
    q75, q25 = np.percentile(x, [75, 25], axis=0)
    return (q75 - q25) / 1.349


def _spread(k: np.ndarray) -> np.ndarray:
    """Robust per-coordinate spread of the keys: min(sd, IQR / 1.349); raises if constant.

    The standard deviation alone is inflated without bound by one outlying key (a key at 1e6
    among keys on [0, 5] makes it 7e4, and a grid of t * sd then starts far above the bulk's
    range); the IQR is not. The minimum (Silverman's spread) keeps the sd for light-tailed keys
    (uniform: sd < IQR / 1.349), so their grid is unchanged. Where the IQR is 0 (over half the
    keys tied) the IQR of the coordinate's distinct values is used instead, which is > 0 as
    soon as the coordinate takes two values.
    """
    sd = np.std(k, axis=0, ddof=1)
    if np.any(sd <= 0):
        raise ValueError(
            f"keys: coordinate(s) {np.flatnonzero(sd <= 0).tolist()} are constant; "
            "bandwidth selection needs keys that vary in every coordinate"
        )
    iqr = _iqr(k)
    for c in np.flatnonzero(iqr <= 0):
        iqr[c] = _iqr(np.unique(k[:, c]))
    return np.minimum(sd, iqr)


def _fmt(x) -> str:
    x = np.ravel(np.asarray(x, np.float64))
    return f"{x[0]:.3g}" if x.size == 1 else "[" + ", ".join(f"{v:.3g}" for v in x) + "]"


def _warn_if_wider_than_range(bandwidth, k: np.ndarray) -> None:
    """A ``WideBandwidthWarning`` (a UserWarning) if h_c > max_c - min_c for some coordinate."""
    span = np.max(k, axis=0).astype(np.float64) - np.min(k, axis=0)
    h = np.broadcast_to(np.asarray(bandwidth, np.float64), span.shape)
    wide = np.flatnonzero(h > span)
    if wide.size:
        warnings.warn(
            f"bandwidth: the selected h = {_fmt(bandwidth)} exceeds the keys' range (max - min) "
            f"{_fmt(span)} in coordinate(s) {wide.tolist()}: the fit is close to a constant "
            "(the mean of the values) there; the data may show no dependence on the keys",
            WideBandwidthWarning,
            stacklevel=3,
        )


def select_bandwidth(
    keys,
    values,
    *,
    kernel: str = "gaussian",
    method: str = "loo-cv",
    per_coordinate: bool = False,
    bounds: tuple[float, float] = (1e-3, 4.0),
    num_grid: int = 12,
    block_size: int | None = None,
    key: jax.Array | None = None,
    holdout: float = 0.25,
    init=None,
    learning_rate: float = 0.05,
    num_steps: int = 200,
) -> BandwidthResult:
    """Choose h for ``nadaraya_watson`` by leave-one-out CV or by gradient descent.

    "loo-cv" minimises CV(h) = (1/n) sum_i |v_i - f_{-i}(k_i)|^2 (``leave_one_out``) over
    log h: a coarse grid h = t * A, t in geomspace(*bounds, num_grid), with A the robust spread
    min(sd, IQR / 1.349) of the keys (Silverman's; per coordinate when ``per_coordinate``, else
    the root mean square over coordinates; one outlying key cannot inflate it), which guards
    against local minima, then a local optimiser started from the best grid point: bounded
    Brent on log h
    between the grid neighbours for a scalar h; L-BFGS-B on log h (d,) with a jitted
    ``jax.value_and_grad`` for per-coordinate h (Nelder-Mead for the boxcar, whose CV is
    piecewise constant in h).

    "gradient" is the d2l-style learned bandwidth: Adam on log h minimising the squared error
    on a random held-out fraction ``holdout`` of the pairs (NW fitted on the rest), starting
    from the normal-reference h0 = 1.06 A n^(-1/(4 + d)) (or ``init``).

    Args:
        keys: (n,) or (n, d), n >= 2, non-constant in each coordinate; values: (n,) or (n, m).
        kernel: one of ``KERNELS`` ("gradient" excludes "boxcar": zero gradient in h).
        method: "loo-cv" or "gradient".
        per_coordinate: one bandwidth per key coordinate (d,) instead of a scalar.
        bounds: (lo, hi) search range of t in units of the keys' spread A ("loo-cv").
        num_grid: number of grid points (>= 3) ("loo-cv").
        block_size: stream the leave-one-out pass over blocks ("loo-cv"); None is dense and
            holds d n x n arrays.
        key: ``jax.random`` key for the train/held-out split ("gradient").
        holdout: held-out fraction in (0, 1) ("gradient").
        init: starting bandwidth, scalar or (d,) ("gradient").
        learning_rate, num_steps: Adam settings ("gradient").

    Returns:
        ``BandwidthResult(bandwidth () or (d,), score (), bandwidth_trace, loss_trace)``.
        A "loo-cv" minimum on the edge of the grid raises a ``RuntimeWarning``; a selected h
        wider than the keys' range (max - min) in some coordinate a ``WideBandwidthWarning``
        (a ``UserWarning``): the fit is then close to the global mean of the values.
    """
    kernel = _check_kernel(kernel)
    if method not in SELECTION_METHODS:
        raise ValueError(f"method: unknown method {method!r}; known: {list(SELECTION_METHODS)}")
    if not isinstance(per_coordinate, bool):
        raise ValueError(f"per_coordinate: expected True or False, got {per_coordinate!r}")
    (k, v), _, dtype = _check_data(keys, values)
    if _any_traced(k, v):
        raise ValueError("keys: select_bandwidth needs concrete arrays (it is not jittable)")
    n, d = k.shape
    if n < 2:
        raise ValueError(f"keys: bandwidth selection needs at least 2 points, got {n}")
    scale = _spread(k.astype(np.float64))
    if not per_coordinate:
        scale = np.full(d, math.sqrt(np.mean(scale**2)))
    if method == "loo-cv":
        lo, hi = _check_bounds(bounds)
        num_grid = validation.check_positive_int("num_grid", num_grid, minimum=3)
        block_size = _check_block_size(block_size)
        res = _select_loo_cv(kernel, k, v, scale, per_coordinate, lo, hi, num_grid, block_size)
        _warn_if_wider_than_range(res.bandwidth, k)
        return res
    if kernel == "boxcar":
        raise ValueError(
            "kernel: method='gradient' needs weights that vary smoothly with h; the boxcar's "
            "are piecewise constant (zero gradient): use method='loo-cv'"
        )
    if key is None:
        raise ValueError("key: method='gradient' needs a jax.random key for the held-out split")
    key = validation.check_key("key", key)
    if isinstance(holdout, bool) or not (isinstance(holdout, float | int) and 0 < holdout < 1):
        raise ValueError(f"holdout: expected a fraction in (0, 1), got {holdout!r}")
    learning_rate = validation.check_positive_scalar("learning_rate", learning_rate)
    num_steps = validation.check_positive_int("num_steps", num_steps)
    if init is None:
        h0 = 1.06 * scale * n ** (-1.0 / (4 + d))
    else:
        h0 = _check_bandwidth(init, d, dtype, "init")
        if not per_coordinate and not np.all(h0 == h0[0]):
            raise ValueError("init: a per-coordinate bandwidth needs per_coordinate=True")
    log_h0 = np.log(np.asarray(h0 if per_coordinate else h0[0], dtype))
    num_test = min(max(1, round(holdout * n)), n - 1)
    trace, losses = _adam_fit(
        LOG_KERNEL_SCORES[kernel],
        log_h0,
        k,
        v,
        key,
        np.asarray(learning_rate, dtype),
        num_test,
        num_steps,
    )
    _warn_if_wider_than_range(trace[-1], k)
    return BandwidthResult(trace[-1], losses[-1], trace, losses)


def _check_bounds(bounds):
    try:
        lo, hi = (float(b) for b in bounds)
    except (TypeError, ValueError):
        raise ValueError(f"bounds: expected (lo, hi) positive numbers, got {bounds!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo < hi):
        raise ValueError(f"bounds: expected 0 < lo < hi (finite), got {bounds!r}")
    return lo, hi


def _select_loo_cv(kernel, k, v, scale, per_coordinate, lo, hi, num_grid, block_size):
    """Coarse grid on log h, then a local optimiser from the best grid point."""
    d, dtype = k.shape[1], k.dtype
    score_fn = LOG_KERNEL_SCORES[kernel]
    collapse = kernel == "gaussian" and not per_coordinate
    width = 1 if collapse and block_size is None else d
    if block_size is None:
        data = _loo_data(kernel, k, v, collapse)

    def expand(log_h):  # NumPy, so that no eager JAX op compiles on the way
        return np.broadcast_to(np.asarray(log_h, dtype), (width,))

    def value(log_h):
        if block_size is None and collapse:
            return float(_loo_gaussian_scalar_score(expand(log_h), data))
        if block_size is None:
            return float(_loo_dense_jit(kernel, expand(log_h), data)[0])
        return float(_loo_blocked_jit(score_fn, expand(log_h), k, v, block_size)[0])

    def value_and_grad(log_h):
        if block_size is None:
            val, grad = _loo_dense_value_and_grad(kernel, expand(log_h), data)
        else:
            val, grad = _loo_blocked_value_and_grad(score_fn, expand(log_h), k, v, block_size)
        return float(val), np.asarray(grad, np.float64)

    log_scale = np.log(scale) if per_coordinate else np.log(scale[0])
    log_t = np.linspace(math.log(lo), math.log(hi), num_grid)
    grid = [log_scale + lt for lt in log_t]
    grid_scores = np.array([value(x) for x in grid])
    if not np.all(np.isfinite(grid_scores)):
        raise ValueError("values: leave-one-out CV is not finite on the grid (check the data)")
    g = int(np.argmin(grid_scores))
    if g in (0, num_grid - 1):
        warnings.warn(
            f"bounds: the CV minimum is on the edge of the search grid (t = {np.exp(log_t[g]):.3g}"
            f" times the keys' spread); widen bounds={lo, hi} if this is not intended",
            RuntimeWarning,
            stacklevel=3,
        )
    best_x, best_f = grid[g], grid_scores[g]
    if not per_coordinate:
        res = optimize.minimize_scalar(
            value,
            bounds=(grid[max(g - 1, 0)], grid[min(g + 1, num_grid - 1)]),
            method="bounded",
            options={"xatol": 3e-3},
        )
    elif kernel == "boxcar":  # CV is piecewise constant in h: derivative-free
        box = list(zip(grid[0], grid[-1], strict=True))
        res = optimize.minimize(
            value, best_x, method="Nelder-Mead", bounds=box, options={"xatol": 1e-3}
        )
    else:
        box = list(zip(grid[0], grid[-1], strict=True))
        res = optimize.minimize(
            value_and_grad,
            best_x,
            jac=True,
            method="L-BFGS-B",
            bounds=box,
            options={"ftol": 1e-12, "gtol": 1e-8},
        )
    if res.fun < best_f:
        best_x, best_f = res.x, res.fun
    return BandwidthResult(
        jnp.asarray(np.exp(np.asarray(best_x, dtype))),
        jnp.asarray(np.asarray(best_f, dtype)),
        jnp.asarray(np.exp(np.stack(grid)).astype(dtype)),
        jnp.asarray(grid_scores.astype(dtype)),
    )


__all__ = [
    "COMPACT_KERNELS",
    "KERNELS",
    "LOG_KERNEL_SCORES",
    "SELECTION_METHODS",
    "BandwidthResult",
    "EmptyWindowWarning",
    "LeaveOneOut",
    "WideBandwidthWarning",
    "kernel_scores",
    "leave_one_out",
    "nadaraya_watson",
    "select_bandwidth",
]
