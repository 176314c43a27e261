"""Nadaraya-Watson as attention pooling, and its closed-form leave-one-out CV.

f(q) = sum_i v_i K_h(q - k_i) / sum_j K_h(q - k_j) is ``scored_attention`` with the log-kernel
scores of ``kernels`` (dense, or streamed over key/query blocks with a running log-sum-exp);
a query whose window holds no key gets its nearest key's value (package docstring). The
leave-one-out criterion CV(h) = (1/n) sum_i |v_i - f_{-i}(k_i)|^2 drops the diagonal of the
kernel matrix: one n x n pass from precomputed differences, or streamed. Its kernels
(``loo_data``, ``loo_dense``, ``loo_blocked``, their jitted value-and-gradient in log h and
``loo_gaussian_scalar_score``, the lean one of the 1-D search) are what ``bandwidth`` minimises.
"""

from __future__ import annotations

import functools
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ... import validation
from ..attention import scored_attention_unchecked
from .kernels import (
    LOG_KERNEL_SCORES,
    as_dtype,
    check_block_size,
    check_data,
    check_kernel,
    kernel_of_abs,
    relative,
    scaled_sq_dist,
)


class EmptyWindowWarning(RuntimeWarning):
    """Some queries had no key inside a compact kernel's window (nearest-key value used)."""


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


# ----------------------------------------------------------------------------- Nadaraya-Watson


def kernel_scores(queries, keys, *, kernel: str = "gaussian", bandwidth) -> jax.Array:
    """The dense (Q, K) matrix of attention scores s_qk = log K_h(q - k) (-inf off support).

    Args:
        queries: (Q,) or (Q, d); keys: (K,) or (K, d).
        kernel: one of ``KERNELS``.
        bandwidth: scalar or (d,), > 0.
    """
    kernel = check_kernel(kernel)
    k, _ = validation.as_points("keys", keys)
    q, _ = validation.as_points("queries", queries)
    if q.shape[1] != k.shape[1]:
        raise ValueError(f"queries: dimension {q.shape[1]} does not match the keys' {k.shape[1]}")
    dtype = np.dtype(jnp.result_type(q.dtype, k.dtype))
    inv_h = 1 / validation.check_bandwidth("bandwidth", bandwidth, k.shape[1], dtype)
    return _dense_scores(LOG_KERNEL_SCORES[kernel], as_dtype(q, dtype), as_dtype(k, dtype), inv_h)


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
    kernel = check_kernel(kernel)
    block_size = check_block_size(block_size)
    (k, v, q), scalar_values, dtype = check_data(keys, values, queries)
    inv_h = 1 / validation.check_bandwidth("bandwidth", bandwidth, k.shape[1], dtype)
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
    """``scored_attention_unchecked`` (the inputs are checked by the caller) with the log-kernel
    scores: (output, (Q,) empty rows, count).

    A row is empty when no key has positive weight: an empty window of a compact kernel (or,
    for the Gaussian, scores that all overflow to -inf, for absurdly small h).
    """
    att = scored_attention_unchecked(
        score_fn, inv_h, queries, keys, values, None, block_size, False
    )
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
    inv_bandwidth = relative(inv_bandwidth)
    nq, nk = queries.shape[0], keys.shape[0]
    if block_size is None:
        d2 = scaled_sq_dist(queries, keys, inv_bandwidth)
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
            d2 = jnp.where(valid, scaled_sq_dist(qb, kb, inv_bandwidth), jnp.inf)
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
    """``loo_data`` for traced keys or values, in JAX (the same arrays)."""
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


def loo_data(kernel: str, keys: np.ndarray, values: np.ndarray, collapse: bool) -> _LooData:
    if validation.any_traced(keys, values):
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
        p = jnp.where(off_diag, jnp.prod(kernel_of_abs(kernel, a), axis=0), 0)
    # One product gives numerators and row sums: separate row reductions would each recompute
    # the exponentials.
    sums = p @ jnp.concatenate([values, jnp.ones_like(values[:, :1])], axis=1)
    total = sums[:, -1]
    empty = total <= 0
    pred = sums[:, :-1] / jnp.where(empty, 1, total)[:, None]
    if kernel != "gaussian":

        def nearest_other():
            a = diffs * relative(inv_h)[:, None, None]
            d2 = jnp.where(off_diag, jnp.sum(a * a, axis=0), jnp.inf)
            return values[jnp.argmin(d2, axis=1)]

        fallback = jax.lax.cond(jnp.any(empty), nearest_other, lambda: jnp.zeros_like(pred))
        pred = jnp.where(empty[:, None], fallback, pred)
    return jnp.mean(jnp.sum((values - pred) ** 2, axis=-1)), pred, jnp.sum(empty)


def _loo_dense_score(kernel: str, log_h, data: _LooData):
    return _loo_dense(kernel, log_h, data)[0]


@jax.jit
def loo_gaussian_scalar_score(log_h, data: _LooData):
    """CV(h), Gaussian kernel, scalar h, collapsed data: the lean kernel of the 1-D search.

    p_ij = exp(-(|k_i - k_j|^2 - min_j' |k_i - k_j'|^2) / (2 h^2)) <= 1, = 1 at the nearest
    other key (so no row is empty) and 0 on the +inf diagonal; no mask, no predictions.
    """
    diffs, row_min, values = data
    p = jnp.exp(-0.5 * jnp.exp(-2 * log_h[0]) * (diffs[0] - row_min[:, None]))
    sums = p @ jnp.concatenate([values, jnp.ones_like(values[:, :1])], axis=1)
    return jnp.mean(jnp.sum((values - sums[:, :-1] / sums[:, -1:]) ** 2, axis=-1))


# The leave-one-out kernels, jitted, that ``leave_one_out`` and ``bandwidth`` run on checked
# inputs: (CV, predictions, number empty), and CV with its gradient in log h.
loo_dense = jax.jit(_loo_dense, static_argnums=0)
loo_dense_value_and_grad = jax.jit(
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


loo_blocked = jax.jit(_loo_blocked, static_argnums=(0, 4))
loo_blocked_value_and_grad = jax.jit(
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
    kernel = check_kernel(kernel)
    block_size = check_block_size(block_size)
    (k, v), scalar_values, dtype = check_data(keys, values)
    if k.shape[0] < 2:
        raise ValueError(f"keys: leave-one-out needs at least 2 points, got {k.shape[0]}")
    h = validation.check_bandwidth("bandwidth", bandwidth, k.shape[1], dtype)
    if block_size is None:
        collapse = kernel == "gaussian" and np.ndim(bandwidth) == 0
        h = h[:1] if collapse else h
        log_h = jnp.log(h) if validation.is_traced(h) else np.log(h)
        score, pred, num_empty = loo_dense(kernel, log_h, loo_data(kernel, k, v, collapse))
    else:
        log_h = jnp.log(h) if validation.is_traced(h) else np.log(h)
        score, pred, num_empty = loo_blocked(LOG_KERNEL_SCORES[kernel], log_h, k, v, block_size)
    return LeaveOneOut(score, validation.restore_shape(pred, scalar_values), num_empty)


__all__ = [
    "EmptyWindowWarning",
    "LeaveOneOut",
    "kernel_scores",
    "leave_one_out",
    "loo_blocked",
    "loo_blocked_value_and_grad",
    "loo_data",
    "loo_dense",
    "loo_dense_value_and_grad",
    "loo_gaussian_scalar_score",
    "nadaraya_watson",
]
