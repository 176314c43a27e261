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

Errors. Every public function checks its concrete inputs before any tracing, with
``inference.simplex.check_score_inputs`` (the check of the weight maps too), and raises a
``ValueError`` whose message starts with the argument's name: arrays that are empty, of the
wrong rank or shape, complex, not numbers, NaN or +-inf (-inf only in a bias or mask, where it
removes a key), a non-finite scale, a bad temperature, and inputs whose scores could overflow
the dtype. Scores are formed inside the compiled kernels, so the overflow check bounds them
from the inputs: for s_ij = scale <q_i, k_j> + b_j (then / tau),

    |<q_i, k_j>| <= sum_c max_i |q_ic| max_j |k_jc|,      |s_ij| <= |scale| * that + max |b|,

and each intermediate (the dot products, scale times them, the bias added, the division by tau)
must stay below finfo(dtype).max; the first that cannot is named (queries or keys, whichever
is larger in magnitude, then scale, bias, temperature). The bound is at most d times the largest
product q_ic k_jc the kernel forms, so it refuses only inputs within a factor d of overflowing.
A score that overflows is not a rounding matter: +inf gives softmax inf - inf = NaN, and makes
sparsemax and entmax treat the key as masked, giving the weight to another key. Finite scores
anywhere in the range are handled exactly (the kernels subtract the row maximum). Under
``jax.jit`` the arguments are tracers and only the static checks (dtype, rank, shapes) run; a
NaN output there means NaN / inf inputs or overflowing scores, which the eager call refuses.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from inference.simplex import (
    ArraySpec,
    check_array,
    check_score_inputs,
    entmax15,
    entmax_bisect,
    is_traced,
    max_abs,
    real_scalar,
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


# ----------------------------------------------------------------------------- checks


def _check_scale(scale):
    """None (the default), a tracer, or a finite real number; returned as given."""
    if scale is None or is_traced(scale):
        return scale
    s = real_scalar("scale", scale, "a finite number")
    if not math.isfinite(s):
        raise ValueError(f"scale: must be a finite number, got {s}")
    return scale


def _abs_scale(scale, dim: int) -> float:
    """|scale| of a concrete (checked) scale; the default 1 / sqrt(d) for None."""
    return 1.0 / math.sqrt(dim) if scale is None else abs(real_scalar("scale", scale, ""))


def _scores_shape(queries, keys, *, same_dim=True, q_name="queries"):
    """(..., Q, K): the shape of the scores of queries (..., Q, dq) and keys (..., K, dk)."""
    if same_dim and queries.shape[-1] != keys.shape[-1]:
        owner = f"{q_name}'" if q_name.endswith("s") else f"the {q_name}'s"
        raise ValueError(
            f"keys: last dimension {keys.shape[-1]} does not match {owner} {queries.shape[-1]}"
        )
    try:
        batch = np.broadcast_shapes(queries.shape[:-2], keys.shape[:-2])
    except ValueError:
        raise ValueError(
            f"keys: batch shape {keys.shape[:-2]} does not broadcast against queries' "
            f"{queries.shape[:-2]}"
        ) from None
    return (*batch, queries.shape[-2], keys.shape[-2])


def _broadcasts(shape, target) -> bool:
    try:
        return np.broadcast_shapes(shape, target) == tuple(target)
    except ValueError:
        return False


def _check_bias_shape(name, bias, shape):
    """A key bias (..., K) added to every row of scores of ``shape`` (..., Q, K)."""
    if bias is not None and (
        bias.shape[-1] != shape[-1] or not _broadcasts((*bias.shape[:-1], 1, shape[-1]), shape)
    ):
        raise ValueError(
            f"{name}: expected shape (..., {shape[-1]}) (one entry per key) broadcasting to "
            f"the scores' {tuple(shape)}, got {tuple(bias.shape)}"
        )


def _check_mask(mask, shape):
    """A boolean mask broadcastable to the scores' ``shape``; returned as an array."""
    if mask is None:
        return None
    if not is_traced(mask) and not isinstance(mask, jax.Array):
        try:
            mask = np.asarray(mask)
        except (ValueError, TypeError) as err:
            raise ValueError(f"mask: could not be read as an array ({err})") from None
    if mask.dtype != bool:
        raise ValueError(f"mask: expected booleans (True keeps a key), got dtype {mask.dtype}")
    if not _broadcasts(mask.shape, shape):
        raise ValueError(
            f"mask: shape {tuple(mask.shape)} does not broadcast to the scores' {tuple(shape)}"
        )
    return mask


def _magnitudes(arr, dim: int):
    """max_i |x_ic| per coordinate c of a concrete (..., N, dim) array, in float64."""
    return np.max(np.abs(np.asarray(arr, np.float64).reshape(-1, dim)), axis=0)


def _larger(name_a, a, name_b, b) -> str:
    """The name of whichever of two magnitudes is larger (the first on a tie)."""
    return name_a if np.max(a) >= np.max(b) else name_b


def _dot_product_stages(queries, keys, scale, bias, temperature, *, names=("queries", "bias")):
    """Bounds of the intermediate results of s = scale <q, k> + b, then s / temperature.

    |<q_i, k_j>| <= sum_c max_i |q_ic| max_j |k_jc| (at most d times the largest product the
    kernel forms); the stages follow the kernel: <q, k>, scale, scale <q, k>, the bias, the
    sum, and (with a temperature) scale / tau and the sum / tau.
    """
    q_name, bias_name = names
    dim = queries.shape[-1]
    qmax, kmax = _magnitudes(queries, dim), _magnitudes(keys, dim)
    a = _abs_scale(scale, dim)
    with np.errstate(over="ignore", invalid="ignore"):
        dot = float(np.sum(qmax * kmax))
    s = a * dot
    stages = [
        (_larger(q_name, qmax, "keys", kmax), dot, f"|<q, k>| over the {q_name} and keys"),
        ("scale", a, "|scale|"),
        ("scale", s, "|scale <q, k>|"),
    ]
    if bias is not None:
        b = max_abs(bias)
        s = s + b
        stages += [(bias_name, b, f"|{bias_name}|"), (bias_name, s, "|scale <q, k> + bias|")]
    if temperature is not None:
        stages += [
            ("temperature", a / temperature, "|scale| / temperature"),
            ("temperature", s / temperature, "|scale <q, k> + bias| / temperature"),
        ]
    return stages


def _check_scored(
    queries, keys, *, values=None, bias=None, scale=None, temperature=1.0, batched=True, names=None
):
    """``check_score_inputs`` for dot-product scores.

    Returns (queries, keys, values or None, bias or None, scale, tau, dtype, scores' shape).
    ``batched``: queries (..., Q, d), keys (..., K, d), values (..., K, dv), bias (..., K)
    broadcasting; else queries (Q, d), keys (K, d), values (K, dv) or (K,), bias (K,).
    """
    q_name, bias_name = names or ("queries", "bias")
    top = None if batched else 2
    specs = [ArraySpec(q_name, queries, 2, top), ArraySpec("keys", keys, 2, top)]
    if values is not None:
        specs.append(ArraySpec("values", values, 2 if batched else 1, top))
    if bias is not None:
        bias_rank = None if batched else 1
        specs.append(ArraySpec(bias_name, bias, 1, bias_rank, neg_inf=True, typed=False))
    scale = _check_scale(scale)

    def relations(arrays, dtype):
        q, k = arrays[0], arrays[1]
        shape = _scores_shape(q, k, q_name=q_name)
        if values is not None:
            v = arrays[2]
            rows = v.shape[-2] if (batched or v.ndim == 2) else v.shape[0]
            if rows != k.shape[-2]:
                raise ValueError(f"values: {rows} rows do not match the {k.shape[-2]} keys")
            if batched and not _broadcasts(v.shape[:-2], shape[:-2]):
                raise ValueError(
                    f"values: batch shape {v.shape[:-2]} does not broadcast against the "
                    f"scores' {shape[:-2]}"
                )
        if bias is not None:
            b = arrays[-1]
            if not batched and b.shape != (k.shape[0],):
                raise ValueError(f"{bias_name}: expected shape ({k.shape[0]},), got {b.shape}")
            _check_bias_shape(bias_name, b, shape)
        return shape

    def stages(arrays, tau, _):
        if is_traced(scale):
            return []
        b = arrays[-1] if bias is not None else None
        return _dot_product_stages(arrays[0], arrays[1], scale, b, tau, names=(q_name, bias_name))

    arrays, temperature, dtype, shape = check_score_inputs(
        specs, temperature, relations=relations, stages=stages
    )
    q, k = arrays[0], arrays[1]
    v = arrays[2] if values is not None else None
    b = arrays[-1] if bias is not None else None
    return q, k, v, b, scale, temperature, dtype, shape


# ----------------------------------------------------------------------------- scores


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
        (..., Q, K) scores. Inputs whose scores could overflow the dtype are refused (see the
        module docstring); under ``jax.jit`` they would give +-inf or NaN scores.
    """
    queries, keys, _, bias, scale, _, _, shape = _check_scored(
        queries, keys, bias=bias, scale=scale
    )
    mask = _check_mask(mask, shape)
    return _dot_product_scores(jnp.asarray(queries), jnp.asarray(keys), scale, bias, mask)


def _dot_product_scores(queries, keys, scale, bias, mask):
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
        zero weights, zero output and log_normalizer -inf. Inputs whose scores could overflow
        are refused (module docstring); under ``jax.jit`` they would give NaN.
    """
    queries, keys, values, key_bias, scale, _, _, shape = _check_scored(
        queries, keys, values=values, bias=key_bias, scale=scale, names=("queries", "key_bias")
    )
    mask = _check_mask(mask, shape)
    scores = _dot_product_scores(jnp.asarray(queries), jnp.asarray(keys), scale, key_bias, mask)
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
        (Q, K) scores (memory Q x K x h). |s_ij| <= sum |v| + max |b|; W q and U k must stay
        finite (inf - inf inside the tanh would be NaN): inputs that could overflow either
        are refused, naming W or the queries (U or the keys), whichever is larger.
    """
    specs = [
        ArraySpec("queries", queries, 2),
        ArraySpec("keys", keys, 2),
        ArraySpec("W", W, 2, 2),
        ArraySpec("U", U, 2, 2),
        ArraySpec("v", v, 1, 1),
    ]
    if bias is not None:
        specs.append(ArraySpec("bias", bias, 1, neg_inf=True, typed=False))

    def relations(arrays, dtype):
        q, k, w, u, vv = arrays[:5]
        if w.shape[1] != q.shape[-1]:
            raise ValueError(f"W: expected shape (h, {q.shape[-1]}), got {tuple(w.shape)}")
        if u.shape != (w.shape[0], k.shape[-1]):
            raise ValueError(
                f"U: expected shape ({w.shape[0]}, {k.shape[-1]}), got {tuple(u.shape)}"
            )
        if vv.shape != (w.shape[0],):
            raise ValueError(f"v: expected shape ({w.shape[0]},), got {tuple(vv.shape)}")
        shape = _scores_shape(q, k, same_dim=False)
        if bias is not None:
            _check_bias_shape("bias", arrays[5], shape)
        return shape

    def stages(arrays, tau, shape):
        q, k, w, u, vv = arrays[:5]
        qmax, kmax = _magnitudes(q, q.shape[-1]), _magnitudes(k, k.shape[-1])
        w, u = np.abs(np.asarray(w, np.float64)), np.abs(np.asarray(u, np.float64))
        with np.errstate(over="ignore", invalid="ignore"):
            wq, uk = float(np.max(w @ qmax)), float(np.max(u @ kmax))
        top = max_abs(vv) * vv.shape[0]
        out = [
            (_larger("W", w, "queries", qmax), wq, "|W q|"),
            (_larger("U", u, "keys", kmax), uk, "|U k|"),
            ("v", top, "|v^T tanh(W q + U k)| <= h max |v|"),
        ]
        if bias is not None:
            out.append(("bias", top + max_abs(arrays[5]), "|v^T tanh(W q + U k) + bias|"))
        return out

    arrays, _, _, shape = check_score_inputs(specs, relations=relations, stages=stages)
    mask = _check_mask(mask, shape)
    queries, keys, W, U, v = (jnp.asarray(a) for a in arrays[:5])
    hidden = jnp.tanh((queries @ W.T)[..., :, None, :] + (keys @ U.T)[..., None, :, :])
    return _apply_bias_mask(hidden @ v, arrays[5] if bias is not None else None, mask)


def _distance_stages(queries, keys, bandwidth, bias):
    """Bounds of |q_c - k_c|, |q_c - k_c| / h_c, |(q - k) / h|^2 and the score with the bias."""
    dim = queries.shape[-1]
    q = np.asarray(queries, np.float64).reshape(-1, dim)
    k = np.asarray(keys, np.float64).reshape(-1, dim)
    with np.errstate(over="ignore", invalid="ignore"):
        diff = np.maximum(q.max(0) - k.min(0), k.max(0) - q.min(0))
        stages = [("queries", float(diff.max()), "|q_c - k_c| between queries and keys")]
        if not is_traced(bandwidth):
            u = diff / np.asarray(bandwidth, np.float64)
            sq = float(np.sum(u * u))
            stages += [
                ("queries", float(u.max()), "|q_c - k_c| / h_c"),
                ("queries", sq, "|(q - k) / h|^2 between queries and keys"),
            ]
            if bias is not None:
                stages.append(("bias", 0.5 * sq + max_abs(bias), "|score + bias|"))
    return stages


def _check_bandwidth(bandwidth, dim, dtype, name="bandwidth"):
    """A scalar or (d,) bandwidth > 0 with 1/h^2 finite in ``dtype`` (no bools), as (d,)."""
    if isinstance(bandwidth, bool | np.bool_) or (
        isinstance(bandwidth, np.ndarray | jax.Array) and bandwidth.dtype == bool
    ):
        raise ValueError(f"{name}: expected a positive number, got {bandwidth!r}")
    return _checks.check_bandwidth(name, bandwidth, dim, dtype)


def neg_sq_distance_scores(queries, keys, bandwidth, *, bias=None, mask=None) -> jax.Array:
    """s_ij = -sum_c (q_ic - k_jc)^2 / (2 h_c^2): Gaussian-kernel (Nadaraya-Watson) scores.

    ``bandwidth`` is a scalar or per-coordinate (d,). Softmax of these scores is the
    Nadaraya-Watson weight vector with a Gaussian product kernel. Queries and keys so far apart
    (in units of h) that |(q - k) / h|^2 overflows are refused, naming the queries.
    """
    specs = [ArraySpec("queries", queries, 2), ArraySpec("keys", keys, 2)]
    if bias is not None:
        specs.append(ArraySpec("bias", bias, 1, neg_inf=True, typed=False))

    def relations(arrays, dtype):
        shape = _scores_shape(arrays[0], arrays[1])
        if bias is not None:
            _check_bias_shape("bias", arrays[2], shape)
        h = _check_bandwidth(bandwidth, arrays[0].shape[-1], dtype)
        return shape, h

    def stages(arrays, tau, extra):
        return _distance_stages(
            arrays[0], arrays[1], extra[1], arrays[2] if bias is not None else None
        )

    arrays, _, dtype, (shape, h) = check_score_inputs(specs, relations=relations, stages=stages)
    mask = _check_mask(mask, shape)
    queries, keys = jnp.asarray(arrays[0]), jnp.asarray(arrays[1])
    scores = _gaussian_log_kernel(queries, keys, jnp.asarray(h, dtype))
    return _apply_bias_mask(scores, arrays[2] if bias is not None else None, mask)


def _gaussian_log_kernel(queries, keys, bandwidth):
    """-|(q - k) / h|^2 / 2, differences taken first (no |q|^2 + |k|^2 - 2 q.k cancellation)."""
    u = (queries[..., :, None, :] - keys[..., None, :, :]) / bandwidth
    return -0.5 * jnp.sum(u * u, axis=-1)


def _dot_product(queries, keys, scale):
    return scale * (queries @ keys.T)


# ----------------------------------------------------------------------------- exponential family


def _check_query_keys(query, keys):
    """query (d,) and keys (K, d), with the overflow bound of <k_i, q>: (query, keys)."""
    query = check_array("query", query, min_rank=1, max_rank=1)
    q, k, *_ = _check_scored(
        query[None, :], keys, scale=1.0, batched=False, names=("query", "bias")
    )
    return jnp.asarray(q)[0], jnp.asarray(k)


def log_partition(query, keys) -> jax.Array:
    """log G(q) = log sum_i exp(<k_i, q>): the log-partition function of attention.

    With p(k_i | q) = exp(<k_i, q> - log G(q)), grad_q log G = sum_i A_i k_i (attention with
    values = keys) and hess_q log G = sum_i A_i (k_i - m)(k_i - m)^T, the covariance of the keys
    under the attention weights A = softmax(K q). ``query`` (d,), ``keys`` (K, d). Inputs whose
    <k_i, q> could overflow are refused; traced (under ``jax.grad`` or ``jax.jit``) they would
    give +inf or NaN.
    """
    query, keys = _check_query_keys(query, keys)
    return jax.nn.logsumexp(keys @ query)


def key_moments(query, keys) -> tuple[jax.Array, jax.Array]:
    """Closed forms of grad and Hessian of ``log_partition``: (sum_i A_i k_i, Cov_A(k))."""
    query, keys = _check_query_keys(query, keys)
    a = jax.nn.softmax(keys @ query)
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
    return _softmax_pool(
        score_fn, params, queries, keys, values, bias, block_size, bool(return_weights)
    )


def _softmax_pool(score_fn, params, queries, keys, values, bias, block_size, return_weights):
    """The dense or streamed kernel on checked (Q, d), (K, d), (K, dv) arrays of one dtype."""
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

    A_i. = weights(s_i. / tau): softmax, sparsemax or 1.5-entmax of the scores divided by the
    temperature tau.

    Args:
        queries: (Q, d); keys: (K, d); values: (K, dv) or (K,).
        weights: "softmax", "sparsemax" or "entmax15" (A_i. = weights(s_i. / temperature)).
        bias: (K,) key bias; -inf removes a key.
        block_size: stream over key/query blocks (softmax only): memory O(block_size^2).
        scale: default 1 / sqrt(d).
        temperature: tau > 0 (a finite real number; a tracer under ``jax.jit``).

    Returns:
        (Q, dv), or (Q,) for values given as (K,). A query whose keys are all removed gets 0.

    Raises:
        ValueError: naming the argument, before any tracing (module docstring): bad arrays,
            scale, temperature or names, and inputs whose scores s / tau could overflow the
            dtype: the first intermediate that can exceed finfo.max names the queries or keys
            (the larger), the scale, the bias or the temperature. Such scores have no
            representable answer (softmax gave NaN, sparsemax the wrong key), so they are
            refused rather than computed. Under ``jax.jit`` the value checks do not run, and a
            NaN output means NaN / inf inputs or overflowing scores.
    """
    if not isinstance(weights, str) or weights not in WEIGHT_MAPS:
        raise ValueError(f"weights: unknown {weights!r}; known: {list(WEIGHT_MAPS)}")
    block_size = _check_block_size(block_size)
    if block_size is not None and weights != "softmax":
        raise ValueError(f"block_size: streaming needs weights='softmax', got {weights!r}")
    queries, keys, values, bias, scale, temperature, dtype, _ = _check_scored(
        queries,
        keys,
        values=values,
        bias=bias,
        scale=scale,
        temperature=temperature,
        batched=False,
    )
    vector_values = values.ndim == 2
    queries, keys = jnp.asarray(queries, dtype), jnp.asarray(keys, dtype)
    values2 = jnp.asarray(values, dtype)
    values2 = values2 if vector_values else values2[:, None]
    if scale is None:
        scale = 1.0 / math.sqrt(queries.shape[1])
    params = jnp.asarray(scale / temperature, dtype)
    bias = jnp.zeros((keys.shape[0],), dtype) if bias is None else jnp.asarray(bias, dtype)
    bias = bias / temperature
    if weights == "softmax":
        out = _softmax_pool(
            _dot_product, params, queries, keys, values2, bias, block_size, False
        ).output
    else:
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
