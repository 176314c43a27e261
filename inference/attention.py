"""Softmax attention with a key bias: the operation that the E-step of deconvolution EM is.

For queries q_i, keys k_j, values v_j, scale beta and key bias b_j,

    s_ij = beta <q_i, k_j> + b_j,     A_ij = exp(s_ij) / sum_l exp(s_il),     o_i = sum_j A_ij v_j,

and log Z_i = logsumexp_j s_ij is the row log-normaliser (the log-partition function of the
exponential-family reading of attention). Shapes follow the usual convention: queries
(Q, d), keys (K, d), values (K, dv); leading batch axes broadcast.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp


class Attention(NamedTuple):
    """The result of one attention pass.

    Attributes:
        output: (..., Q, dv) attention output sum_j A_ij v_j.
        weights: (..., Q, K) attention weights A, rows on the simplex.
        log_normalizer: (..., Q) log sum_j exp(s_ij), -inf for a row with no unmasked key.
    """

    output: jax.Array
    weights: jax.Array
    log_normalizer: jax.Array


def dot_product_scores(queries: jax.Array, keys: jax.Array, scale=None) -> jax.Array:
    """Scores s_ij = scale * <q_i, k_j>; ``scale`` defaults to 1 / sqrt(d).

    Args:
        queries: (..., Q, d).
        keys: (..., K, d).
        scale: scalar multiplier (beta = 1 / sigma^2 in deconvolution EM).

    Returns:
        (..., Q, K) scores.
    """
    if queries.shape[-1] != keys.shape[-1]:
        raise ValueError(
            f"keys: last dimension {keys.shape[-1]} does not match queries' {queries.shape[-1]}"
        )
    if scale is None:
        scale = 1.0 / jnp.sqrt(jnp.asarray(queries.shape[-1], dtype=queries.dtype))
    return scale * jnp.einsum("...qd,...kd->...qk", queries, keys)


def softmax(scores: jax.Array, axis: int = -1, temperature=1.0) -> jax.Array:
    """softmax(s / tau)_j = exp(s_j / tau) / sum_l exp(s_l / tau) along ``axis``."""
    return jax.nn.softmax(scores / temperature, axis=axis)


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
    scores = dot_product_scores(queries, keys, scale)
    if key_bias is not None:
        scores = scores + key_bias[..., None, :]
    if mask is not None:
        scores = jnp.where(mask, scores, -jnp.inf)
    log_normalizer = jax.nn.logsumexp(scores, axis=-1)
    safe_norm = jnp.where(jnp.isfinite(log_normalizer), log_normalizer, 0.0)
    weights = jnp.exp(scores - safe_norm[..., None])
    output = jnp.einsum("...qk,...kv->...qv", weights, values)
    return Attention(output, weights, log_normalizer)


__all__ = ["Attention", "dot_product_scores", "softmax", "softmax_attention"]
