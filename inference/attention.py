"""Attention: scores, weights on the simplex, pooling, and its exponential-family reading.

For queries q_i, keys k_j, values v_j and key bias b_j,

    s_ij = score(q_i, k_j) + b_j,     A_i. = weights(s_i.),     o_i = sum_j A_ij v_j.

Scores: dot product beta <q, k> (beta = 1/sqrt(d) by default; 1/sigma^2 in deconvolution EM),
additive (Bahdanau) v^T tanh(W q + U k), and negative squared distance -|q - k|^2 / (2 h^2)
(Nadaraya-Watson with a Gaussian kernel). Weights: softmax, sparsemax, entmax (see
``inference.simplex``, re-exported here). With softmax, log Z_i = logsumexp_j s_ij is the
log-partition function of p(k_j | q_i) = exp(<k_j, q_i> - log Z_i) on the set of keys; its
gradient in q is the attention output with V = K and its Hessian the covariance of the keys
under A_i. (``log_partition``).

``attend(..., block_size=B)`` streams over blocks of B keys (and of B queries) with a running
log-sum-exp, as memory-efficient attention does: memory O(B^2), never Q x K.

Shapes: queries (Q, d), keys (K, d), values (K, dv); the dense paths broadcast leading batch
axes.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from inference.simplex import (
    entmax15,
    entmax_bisect,
    regularised_argmax,
    regularised_objective,
    softmax,
    sparsemax,
)
from models import _checks

WEIGHT_MAPS = ("softmax", "sparsemax", "entmax15")


class Attention(NamedTuple):
    """The result of one attention pass.

    Attributes:
        output: (..., Q, dv) attention output sum_j A_ij v_j.
        weights: (..., Q, K) attention weights A, rows on the simplex; None when streamed
            (the Q x K matrix is never formed).
        log_normalizer: (..., Q) log sum_j exp(s_ij) (softmax), -inf for a row with no
            unmasked key.
    """

    output: jax.Array
    weights: jax.Array | None
    log_normalizer: jax.Array


def dot_product_scores(
    queries: jax.Array, keys: jax.Array, scale=None, *, bias=None, mask=None
) -> jax.Array:
    """Scores s_ij = scale * <q_i, k_j> + b_j; ``scale`` defaults to 1 / sqrt(d).

    Args:
        queries: (..., Q, d).
        keys: (..., K, d).
        scale: scalar multiplier (beta = 1 / sigma^2 in deconvolution EM).
        bias: (..., K) key bias b_j; mask: boolean broadcastable to (..., Q, K), False -> -inf.

    Returns:
        (..., Q, K) scores.
    """
    queries, keys = jnp.asarray(queries), jnp.asarray(keys)
    if queries.shape[-1] != keys.shape[-1]:
        raise ValueError(
            f"keys: last dimension {keys.shape[-1]} does not match queries' {queries.shape[-1]}"
        )
    if scale is None:
        scale = 1.0 / jnp.sqrt(jnp.asarray(queries.shape[-1], dtype=queries.dtype))
    return _apply_bias_mask(scale * jnp.einsum("...qd,...kd->...qk", queries, keys), bias, mask)


def softmax_attention(
    queries: jax.Array,
    keys: jax.Array,
    values: jax.Array,
    *,
    scale=None,
    key_bias: jax.Array | None = None,
    mask: jax.Array | None = None,
) -> Attention:
    """Dense softmax attention with an optional additive key bias and boolean mask.

    Args:
        queries: (..., Q, d).
        keys: (..., K, d).
        values: (..., K, dv).
        scale: score multiplier; default 1 / sqrt(d).
        key_bias: (..., K) added to every row of scores (b_j above).
        mask: boolean, broadcastable to (..., Q, K); False removes a key from a row.

    Returns:
        ``Attention(output, weights, log_normalizer)``. A row whose keys are all masked gets
        zero weights, zero output and log_normalizer -inf.
    """
    if keys.shape[-2] != values.shape[-2]:
        raise ValueError(f"values: {values.shape[-2]} rows do not match the {keys.shape[-2]} keys")
    scores = dot_product_scores(queries, keys, scale, bias=key_bias, mask=mask)
    log_normalizer = jax.nn.logsumexp(scores, axis=-1)
    weights = _safe_softmax(scores, log_normalizer)
    output = jnp.einsum("...qk,...kv->...qv", weights, values)
    return Attention(output, weights, log_normalizer)


def _safe_softmax(scores, log_normalizer):
    """Row softmax normalised by its own sum (rows sum to 1 to round-off); 0 for empty rows."""
    has_key = (log_normalizer != -jnp.inf)[..., None]  # NaN scores propagate as NaN
    shifted = jnp.where(has_key, scores - jnp.max(scores, axis=-1, keepdims=True), -jnp.inf)
    unnormalised = jnp.exp(shifted)
    total = jnp.sum(unnormalised, axis=-1, keepdims=True)
    return jnp.where(has_key, unnormalised / jnp.where(has_key, total, 1.0), 0.0)


# ----------------------------------------------------------------------------- more scores


def _apply_bias_mask(scores, bias, mask):
    if bias is not None:
        scores = scores + jnp.asarray(bias)[..., None, :]
    if mask is not None:
        scores = jnp.where(mask, scores, -jnp.inf)
    return scores


def additive_scores(queries, keys, W, U, v, *, bias=None, mask=None) -> jax.Array:
    """Bahdanau scores s_ij = v^T tanh(W q_i + U k_j).

    Args:
        queries: (Q, dq); keys: (K, dk); W: (h, dq); U: (h, dk); v: (h,).
        bias: (K,) key bias; mask: boolean broadcastable to (Q, K).

    Returns:
        (Q, K) scores (memory Q x K x h).
    """
    queries, keys = jnp.asarray(queries), jnp.asarray(keys)
    W, U, v = jnp.asarray(W), jnp.asarray(U), jnp.asarray(v)
    if W.ndim != 2 or W.shape[1] != queries.shape[-1]:
        raise ValueError(f"W: expected shape (h, {queries.shape[-1]}), got {W.shape}")
    if U.ndim != 2 or U.shape != (W.shape[0], keys.shape[-1]):
        raise ValueError(f"U: expected shape ({W.shape[0]}, {keys.shape[-1]}), got {U.shape}")
    if v.shape != (W.shape[0],):
        raise ValueError(f"v: expected shape ({W.shape[0]},), got {v.shape}")
    hidden = jnp.tanh((queries @ W.T)[..., :, None, :] + (keys @ U.T)[..., None, :, :])
    return _apply_bias_mask(hidden @ v, bias, mask)


def neg_sq_distance_scores(queries, keys, bandwidth, *, bias=None, mask=None) -> jax.Array:
    """s_ij = -sum_c (q_ic - k_jc)^2 / (2 h_c^2): Gaussian-kernel (Nadaraya-Watson) scores.

    ``bandwidth`` is a scalar or per-coordinate (d,). Softmax of these scores is the
    Nadaraya-Watson weight vector with a Gaussian product kernel.
    """
    queries, keys = jnp.asarray(queries), jnp.asarray(keys)
    if queries.shape[-1] != keys.shape[-1]:
        raise ValueError(
            f"keys: last dimension {keys.shape[-1]} does not match queries' {queries.shape[-1]}"
        )
    dtype = jnp.result_type(queries.dtype, keys.dtype, float)
    h = jnp.asarray(_checks.check_bandwidth("bandwidth", bandwidth, queries.shape[-1], dtype))
    return _apply_bias_mask(_gaussian_log_kernel(queries, keys, h), bias, mask)


def _gaussian_log_kernel(queries, keys, bandwidth):
    """-|(q - k) / h|^2 / 2, differences taken first (no |q|^2 + |k|^2 - 2 q.k cancellation)."""
    u = (queries[..., :, None, :] - keys[..., None, :, :]) / bandwidth
    return -0.5 * jnp.sum(u * u, axis=-1)


def _dot_product(queries, keys, scale):
    return scale * (queries @ keys.T)


# ----------------------------------------------------------------------------- exponential family


def log_partition(query, keys) -> jax.Array:
    """log G(q) = log sum_i exp(<k_i, q>): the log-partition function of attention.

    With p(k_i | q) = exp(<k_i, q> - log G(q)), grad_q log G = sum_i A_i k_i (attention with
    values = keys) and hess_q log G = sum_i A_i (k_i - m)(k_i - m)^T, the covariance of the keys
    under the attention weights A = softmax(K q). ``query`` (d,), ``keys`` (K, d).
    """
    return jax.nn.logsumexp(jnp.asarray(keys) @ jnp.asarray(query))


def key_moments(query, keys) -> tuple[jax.Array, jax.Array]:
    """Closed forms of grad and Hessian of ``log_partition``: (sum_i A_i k_i, Cov_A(k))."""
    keys = jnp.asarray(keys)
    a = jax.nn.softmax(keys @ jnp.asarray(query))
    mean = a @ keys
    centred = keys - mean
    return mean, (a[:, None] * centred).T @ centred


# ----------------------------------------------------------------------------- pooling


@functools.partial(jax.jit, static_argnames=("score_fn", "block_size"))
def _streamed_softmax_attention(score_fn, params, queries, keys, values, bias, block_size):
    """Flash-style attention: scan over key blocks with a running max and sum, per query block.

    Keys are padded to a multiple of ``block_size`` with bias -inf (never attended to);
    queries are padded with zeros and the padded rows dropped.
    """
    nq, nk = queries.shape[0], keys.shape[0]
    b = block_size
    pad_q, pad_k = (-nq) % b, (-nk) % b
    q = jnp.pad(queries, ((0, pad_q), (0, 0))).reshape(-1, b, queries.shape[1])
    k = jnp.pad(keys, ((0, pad_k), (0, 0))).reshape(-1, b, keys.shape[1])
    v = jnp.pad(values, ((0, pad_k), (0, 0))).reshape(-1, b, values.shape[1])
    bb = jnp.pad(bias, (0, pad_k), constant_values=-jnp.inf).reshape(-1, b)

    def one_query_block(qb):
        def body(carry, block):
            m, l, acc = carry
            kb, vb, biasb = block
            s = score_fn(qb, kb, params) + biasb[None, :]
            # the result does not depend on the shift, so no gradient flows through it
            m_new = jax.lax.stop_gradient(jnp.maximum(m, jnp.max(s, axis=-1)))
            shift = jnp.where(jnp.isfinite(m_new), m_new, 0.0)
            correction = jnp.exp(m - shift)
            p = jnp.exp(s - shift[:, None])
            return (m_new, l * correction + p.sum(-1), acc * correction[:, None] + p @ vb), None

        init = (
            jnp.full((b,), -jnp.inf, queries.dtype),
            jnp.zeros((b,), queries.dtype),
            jnp.zeros((b, values.shape[1]), values.dtype),
        )
        # rematerialise each block in the backward pass: gradient memory stays O(block^2)
        (m, l, acc), _ = jax.lax.scan(jax.checkpoint(body), init, (k, v, bb))
        has_key = l != 0  # exactly 0 only when every key is masked; NaN scores propagate
        out = acc / jnp.where(has_key, l, 1.0)[:, None]
        lse = jnp.where(has_key, m + jnp.log(jnp.where(has_key, l, 1.0)), -jnp.inf)
        return out, lse

    out, lse = jax.lax.map(one_query_block, q)
    return out.reshape(-1, values.shape[1])[:nq], lse.reshape(-1)[:nq]


@functools.partial(jax.jit, static_argnames=("score_fn", "return_weights"))
def _dense_softmax_attention(score_fn, params, queries, keys, values, bias, return_weights):
    scores = score_fn(queries, keys, params) + bias[None, :]
    lse = jax.nn.logsumexp(scores, axis=-1)
    weights = _safe_softmax(scores, lse)
    return weights @ values, (weights if return_weights else None), lse


def scored_attention(
    score_fn: Callable,
    params,
    queries,
    keys,
    values,
    *,
    bias=None,
    block_size: int | None = None,
    return_weights: bool = True,
) -> Attention:
    """Softmax attention for any score function, dense or streamed over key blocks.

    Args:
        score_fn: ``score_fn(queries (B, d), keys (C, d), params) -> (B, C)``; a module-level
            function (it is a static argument of the jitted kernels, so a fresh closure per
            call would recompile).
        params: pytree of arrays passed to ``score_fn``.
        queries: (Q, d); keys: (K, d); values: (K, dv).
        bias: (K,) key bias; -inf removes a key.
        block_size: None for the dense path; else stream over blocks of this many keys and
            queries (memory O(block_size^2)); K and Q need not be multiples of it.
        return_weights: keep the dense Q x K weights in the result (False lets XLA free them,
            halving the dense path's peak memory when only the output is needed).

    Returns:
        ``Attention(output (Q, dv), weights (Q, K) or None (streamed, or not requested),
        log_normalizer (Q,))``.
        A query with no key left (all biases -inf, or all log-kernel values -inf) gets output
        0 and log_normalizer -inf.
    """
    queries, keys, values = _check_qkv(queries, keys, values)
    bias = _check_bias(bias, keys.shape[0], queries.dtype)
    if block_size is None:
        return Attention(
            *_dense_softmax_attention(
                score_fn, params, queries, keys, values, bias, bool(return_weights)
            )
        )
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size: expected an integer >= 1 or None, got {block_size!r}")
    out, lse = _streamed_softmax_attention(
        score_fn, params, queries, keys, values, bias, block_size
    )
    return Attention(out, None, lse)


def _check_qkv(queries, keys, values):
    arrays = []
    for name, arr, rank in (("queries", queries, 2), ("keys", keys, 2), ("values", values, 2)):
        if not isinstance(arr, jax.core.Tracer):
            a = np.asarray(arr)
            if not np.issubdtype(a.dtype, np.number):
                raise ValueError(f"{name}: expected numbers, got dtype {a.dtype}")
            if a.size and not np.all(np.isfinite(a)):
                raise ValueError(f"{name}: contains non-finite values")
        arr = jnp.asarray(arr)
        if arr.ndim != rank:
            raise ValueError(f"{name}: expected rank {rank}, got shape {arr.shape}")
        if arr.shape[0] == 0:
            raise ValueError(f"{name}: is empty")
        arrays.append(arr)
    q, k, v = arrays
    if q.shape[1] != k.shape[1]:
        raise ValueError(f"keys: dimension {k.shape[1]} does not match queries' {q.shape[1]}")
    if v.shape[0] != k.shape[0]:
        raise ValueError(f"values: {v.shape[0]} rows do not match the {k.shape[0]} keys")
    dtype = jnp.result_type(q.dtype, k.dtype, v.dtype, float)
    return q.astype(dtype), k.astype(dtype), v.astype(dtype)


def _check_bias(bias, num_keys, dtype):
    if bias is None:
        return jnp.zeros((num_keys,), dtype)
    if not isinstance(bias, jax.core.Tracer):
        b = np.asarray(bias, dtype=float)
        if b.shape != (num_keys,):
            raise ValueError(f"bias: expected shape ({num_keys},), got {b.shape}")
        if np.isnan(b).any() or np.isposinf(b).any():
            raise ValueError("bias: contains NaN or +inf (use -inf to remove a key)")
    return jnp.asarray(bias, dtype)


def attend(
    queries,
    keys,
    values,
    *,
    weights: str = "softmax",
    bias=None,
    block_size: int | None = None,
    scale=None,
    temperature=1.0,
) -> jax.Array:
    """Attention pooling o_i = sum_j A_ij v_j with dot-product scores s_ij = scale <q_i, k_j> + b_j.

    Args:
        queries: (Q, d); keys: (K, d); values: (K, dv) or (K,).
        weights: "softmax", "sparsemax" or "entmax15" (A_i. = weights(s_i. / temperature)).
        bias: (K,) key bias; -inf removes a key.
        block_size: stream over key/query blocks (softmax only): memory O(block_size^2).
        scale: default 1 / sqrt(d).
        temperature: tau > 0.

    Returns:
        (Q, dv), or (Q,) for values given as (K,).
    """
    if weights not in WEIGHT_MAPS:
        raise ValueError(f"weights: unknown {weights!r}; known: {list(WEIGHT_MAPS)}")
    vector_values = np.ndim(values) == 2
    values2 = values if vector_values else jnp.asarray(values)[:, None]
    queries, keys, values2 = _check_qkv(queries, keys, values2)
    bias = _check_bias(bias, keys.shape[0], queries.dtype)
    if isinstance(temperature, bool) or not (float(temperature) > 0 and math.isfinite(temperature)):
        raise ValueError(f"temperature: must be a finite number > 0, got {temperature!r}")
    if scale is None:
        scale = 1.0 / math.sqrt(queries.shape[1])
    elif isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not math.isfinite(scale):
        raise ValueError(f"scale: must be a finite number, got {scale!r}")
    params = jnp.asarray(scale / temperature, queries.dtype)
    bias = bias / temperature
    if weights == "softmax":
        out = scored_attention(
            _dot_product,
            params,
            queries,
            keys,
            values2,
            bias=bias,
            block_size=block_size,
            return_weights=False,
        ).output
    else:
        if block_size is not None:
            raise ValueError(f"block_size: streaming needs weights='softmax', got {weights!r}")
        out = _dense_sparse_attention(queries, keys, values2, bias, params, weights)
    return out if vector_values else out[:, 0]


@functools.partial(jax.jit, static_argnames=("weights",))
def _dense_sparse_attention(queries, keys, values, bias, scale, weights):
    scores = _dot_product(queries, keys, scale) + bias[None, :]
    a = sparsemax(scores) if weights == "sparsemax" else entmax15(scores)
    return a @ values


__all__ = [
    "WEIGHT_MAPS",
    "Attention",
    "additive_scores",
    "attend",
    "dot_product_scores",
    "entmax15",
    "entmax_bisect",
    "key_moments",
    "log_partition",
    "neg_sq_distance_scores",
    "regularised_argmax",
    "regularised_objective",
    "scored_attention",
    "softmax",
    "softmax_attention",
    "sparsemax",
]
