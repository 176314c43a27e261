"""Attention pooling: o_i = sum_j A_ij v_j with A_i. a map of the scores onto the simplex.

Dense, or streamed over blocks of keys with a running log-sum-exp (memory-efficient
attention). See the package docstring for the checks; ``scored_attention_unchecked`` is the
traceable kernel beneath ``scored_attention`` (and ``attend`` with softmax), for callers that
checked their inputs themselves (``attnbayes.inference.deconvolution``,
``attnbayes.inference.kernel_regression``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ... import validation
from .scores import check_mask, check_scored, dot_product_scores_unchecked, scaled_dot_product
from .simplex import (
    ArraySpec,
    check_score_inputs,
    entmax15_last,
    sparsemax_last,
)

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
        zero weights, zero output and log_normalizer -inf. Inputs whose scores could overflow
        are refused (module docstring); under ``jax.jit`` they would give NaN.
    """
    queries, keys, values, key_bias, scale, _, _, shape = check_scored(
        queries, keys, values=values, bias=key_bias, scale=scale, names=("queries", "key_bias")
    )
    mask = check_mask(mask, shape)
    scores = dot_product_scores_unchecked(
        jnp.asarray(queries), jnp.asarray(keys), scale, key_bias, mask
    )
    log_normalizer = jax.nn.logsumexp(scores, axis=-1)
    weights = _safe_softmax(scores, log_normalizer)
    output = jnp.einsum("...qk,...kv->...qv", weights, jnp.asarray(values))
    return Attention(output, weights, log_normalizer)


def _safe_softmax(scores, log_normalizer):
    """Row softmax normalised by its own sum (rows sum to 1 to round-off); 0 for empty rows."""
    has_key = (log_normalizer != -jnp.inf)[..., None]  # NaN scores propagate as NaN
    shifted = jnp.where(has_key, scores - jnp.max(scores, axis=-1, keepdims=True), -jnp.inf)
    unnormalised = jnp.exp(shifted)
    total = jnp.sum(unnormalised, axis=-1, keepdims=True)
    return jnp.where(has_key, unnormalised / jnp.where(has_key, total, 1.0), 0.0)


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


def _check_block_size(block_size):
    if block_size is not None and (
        isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1
    ):
        raise ValueError(f"block_size: expected an integer >= 1 or None, got {block_size!r}")
    return block_size


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
        0 and log_normalizer -inf. ``score_fn`` is opaque, so its scores are not bounded: a
        NaN or +inf score propagates as NaN (``attend`` checks its dot-product scores).
    """
    if not callable(score_fn):
        raise ValueError(
            f"score_fn: expected a function score_fn(queries, keys, params), got {score_fn!r}"
        )
    if not isinstance(return_weights, bool | np.bool_):
        raise ValueError(f"return_weights: expected True or False, got {return_weights!r}")
    block_size = _check_block_size(block_size)
    specs = [
        ArraySpec("queries", queries, 2, 2),
        ArraySpec("keys", keys, 2, 2),
        ArraySpec("values", values, 2, 2),
    ]
    if bias is not None:
        specs.append(ArraySpec("bias", bias, 1, 1, neg_inf=True, typed=False))

    def relations(arrays, dtype):
        q, k, v = arrays[:3]
        if q.shape[1] != k.shape[1]:
            raise ValueError(f"keys: dimension {k.shape[1]} does not match queries' {q.shape[1]}")
        if v.shape[0] != k.shape[0]:
            raise ValueError(f"values: {v.shape[0]} rows do not match the {k.shape[0]} keys")
        if bias is not None and arrays[3].shape != (k.shape[0],):
            raise ValueError(f"bias: expected shape ({k.shape[0]},), got {arrays[3].shape}")

    arrays, _, dtype, _ = check_score_inputs(specs, relations=relations, stages=lambda *_: [])
    queries, keys, values = (jnp.asarray(a, dtype) for a in arrays[:3])
    bias = arrays[3] if bias is not None else None
    return scored_attention_unchecked(
        score_fn, params, queries, keys, values, bias, block_size, bool(return_weights)
    )


def scored_attention_unchecked(
    score_fn, params, queries, keys, values, bias, block_size, return_weights
):
    """The traceable kernel beneath ``scored_attention``: no checks, for arrays already checked.

    ``queries`` (Q, d), ``keys`` (K, d), ``values`` (K, dv) of one floating dtype, ``bias``
    (K,) or None, ``block_size`` None (dense) or an int (streamed: per block of queries, a
    scan over blocks of keys with a running log-sum-exp; memory O(block_size^2), weights None),
    ``return_weights`` a bool; the result is ``scored_attention``'s. For callers that validated
    their inputs at their own public boundary (``attnbayes.inference.kernel_regression``, the
    streamed E-step of ``attnbayes.inference.deconvolution``); traceable and differentiable in
    every array argument and in ``params``.
    """
    if bias is None:
        bias = jnp.zeros((keys.shape[0],), queries.dtype)
    else:
        bias = jnp.asarray(bias, queries.dtype)
    if block_size is None:
        return Attention(
            *_dense_softmax_attention(score_fn, params, queries, keys, values, bias, return_weights)
        )
    out, lse = _streamed_softmax_attention(
        score_fn, params, queries, keys, values, bias, block_size
    )
    return Attention(out, None, lse)


def _check_query_temperature(temperature, num_queries):
    """A per-query temperature (Q,): its shape always; finite and > 0 on concrete values
    (``check_scored`` then checks the smallest against the dtype, as a scalar tau). Returns
    ``(array, smallest tau as a float, or 1.0 when traced)``."""
    expected = f"a number or shape ({num_queries},) (one per query)"
    if validation.is_traced(temperature):
        if num_queries is not None and temperature.shape != (num_queries,):
            raise ValueError(
                f"temperature: expected {expected}, got a traced array of shape {temperature.shape}"
            )
        return temperature, 1.0
    tau = validation.as_scale_array("temperature", temperature)
    if num_queries is not None and tau.shape != (num_queries,):
        raise ValueError(f"temperature: expected {expected}, got shape {tau.shape}")
    validation.check_finite("temperature", tau)
    if tau.size and not np.all(tau > 0):
        i = int(np.argmax(~(tau > 0)))
        raise ValueError(f"temperature: must be > 0, got {float(tau[i])} at entry {i}")
    return tau, (float(np.min(tau)) if tau.size else 1.0)


def _check_log_prior(log_prior, num_keys: int, dtype):
    """Log prior weights of the keys (K,): no NaN and no +inf (-inf removes a key), and
    representable in ``dtype``."""
    if validation.is_traced(log_prior):
        if log_prior.shape != (num_keys,):
            raise ValueError(
                f"log_prior: expected shape ({num_keys},) (one per key), got a traced array of "
                f"shape {log_prior.shape}"
            )
        return log_prior
    arr = validation.as_float_array("log_prior", log_prior)
    if arr.shape != (num_keys,):
        raise ValueError(f"log_prior: expected shape ({num_keys},) (one per key), got {arr.shape}")
    if np.any(np.isnan(arr)) or np.any(arr == np.inf):
        raise ValueError("log_prior: contains NaN or +inf (only -inf, which removes a key)")
    finite = arr[np.isfinite(arr)]
    if finite.size and np.max(np.abs(finite)) > float(jnp.finfo(dtype).max) / 4:
        raise ValueError(
            f"log_prior: values up to {np.max(np.abs(finite)):.3g} overflow the scores in "
            f"{np.dtype(dtype).name}"
        )
    return arr


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
    log_prior=None,
) -> jax.Array:
    """Attention pooling o_i = sum_j A_ij v_j with dot-product scores s_ij = scale <q_i, k_j> + b_j.

    A_i. = weights(s_i. / tau_i + log_prior): softmax, sparsemax or 1.5-entmax of the scores
    divided by the temperature, plus an optional log prior weight per key that the temperature
    does not scale:

        A_i. = weights((scale <q_i, k_.> + b_.) / tau_i + log pi_.).

    The temperature is one number or one per query (Q,). With queries x_i, keys = values =
    atoms mu_k, scale 1, b_k = -|mu_k|^2 / 2, tau_i = s_i^2 and log pi_k = log w_k this is the
    E-step of heteroscedastic deconvolution EM (x_i ~ N(z_i, s_i^2 I), z_i ~ sum_k w_k delta(mu_k)),
    o_i = E[z_i | x_i]: softmax attention with a per-query temperature (the note "Attention as
    deconvolution"; ``attnbayes.inference.deconvolution.estep``).

    Args:
        queries: (Q, d); keys: (K, d); values: (K, dv) or (K,).
        weights: "softmax", "sparsemax" or "entmax15".
        bias: (K,) key bias b, divided by the temperature; -inf removes a key.
        block_size: stream over key/query blocks (softmax only): memory O(block_size^2).
        scale: default 1 / sqrt(d).
        temperature: tau > 0, a finite real number or an array (Q,) of them (a tracer under
            ``jax.jit``).
        log_prior: (K,) log pi, added after the temperature; -inf removes a key. None: 0.

    Returns:
        (Q, dv), or (Q,) for values given as (K,). A query whose keys are all removed gets 0.

    Raises:
        ValueError: naming the argument, before any tracing (module docstring): bad arrays,
            scale, temperature, log prior or names, and inputs whose scores s / tau could
            overflow the dtype (checked at the smallest tau): the first intermediate that can
            exceed finfo.max names the queries or keys (the larger), the scale, the bias or
            the temperature. Such scores have no representable answer (softmax gave NaN,
            sparsemax the wrong key), so they are refused rather than computed. Under
            ``jax.jit`` the value checks do not run, and a NaN output means NaN / inf inputs
            or overflowing scores.
    """
    if not isinstance(weights, str) or weights not in WEIGHT_MAPS:
        raise ValueError(f"weights: unknown {weights!r}; known: {list(WEIGHT_MAPS)}")
    block_size = _check_block_size(block_size)
    if block_size is not None and weights != "softmax":
        raise ValueError(f"block_size: streaming needs weights='softmax', got {weights!r}")
    per_query = np.ndim(temperature) > 0
    bound_tau = temperature
    if per_query:
        num_queries = np.shape(queries)[0] if np.ndim(queries) == 2 else None
        temperature, bound_tau = _check_query_temperature(temperature, num_queries)
    queries, keys, values, bias, scale, checked_tau, dtype, _ = check_scored(
        queries,
        keys,
        values=values,
        bias=bias,
        scale=scale,
        temperature=bound_tau,
        batched=False,
    )
    if not per_query:
        temperature = checked_tau
    if log_prior is not None:
        log_prior = jnp.asarray(_check_log_prior(log_prior, keys.shape[0], dtype), dtype)
    vector_values = values.ndim == 2
    queries, keys = jnp.asarray(queries, dtype), jnp.asarray(keys, dtype)
    values2 = jnp.asarray(values, dtype)
    values2 = values2 if vector_values else values2[:, None]
    if scale is None:
        scale = 1.0 / math.sqrt(queries.shape[1])
    bias = jnp.zeros((keys.shape[0],), dtype) if bias is None else jnp.asarray(bias, dtype)
    if per_query:
        # (scale <q_i, k_j> + b_j) / tau_i = <[q_i scale / tau_i, 1 / tau_i], [k_j, b_j]>
        inv_tau = 1.0 / jnp.asarray(temperature, dtype)
        queries = jnp.concatenate([queries * (scale * inv_tau)[:, None], inv_tau[:, None]], 1)
        keys = jnp.concatenate([keys, bias[:, None]], axis=1)
        params = jnp.asarray(1.0, dtype)
        bias = jnp.zeros((keys.shape[0],), dtype)
    else:
        params = jnp.asarray(scale / temperature, dtype)
        bias = bias / temperature
    if log_prior is not None:
        bias = bias + log_prior
    if weights == "softmax":
        out = scored_attention_unchecked(
            scaled_dot_product, params, queries, keys, values2, bias, block_size, False
        ).output
    else:
        out = _dense_sparse_attention(queries, keys, values2, bias, params, weights)
    return out if vector_values else out[:, 0]


@functools.partial(jax.jit, static_argnames=("weights",))
def _dense_sparse_attention(queries, keys, values, bias, scale, weights):
    scores = scaled_dot_product(queries, keys, scale) + bias[None, :]
    a = sparsemax_last(scores) if weights == "sparsemax" else entmax15_last(scores)
    return a @ values
