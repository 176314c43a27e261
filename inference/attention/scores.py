"""Attention scores: dot product, additive (Bahdanau) and negative squared distance.

See the package docstring (``attnbayes.inference.attention``) for the overflow checks. The
checks of dot-product attention (``check_scored``, ``check_mask``) live here and serve
``pooling`` and ``exponential_family`` too; ``dot_product_scores_unchecked`` is the traceable
kernel of ``dot_product_scores``, and ``scaled_dot_product`` the dot-product score function
that ``scored_attention`` takes.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from ... import validation
from .simplex import (
    ArraySpec,
    check_score_inputs,
    max_abs,
)

# ----------------------------------------------------------------------------- checks


def _check_scale(scale):
    """None (the default), a tracer, or a finite real number; returned as given."""
    if scale is None or validation.is_traced(scale):
        return scale
    s = validation.check_real_scalar("scale", scale, "a finite number")
    if not math.isfinite(s):
        raise ValueError(f"scale: must be a finite number, got {s}")
    return scale


def _abs_scale(scale, dim: int) -> float:
    """|scale| of a concrete (checked) scale; the default 1 / sqrt(d) for None."""
    if scale is None:
        return 1.0 / math.sqrt(dim)
    return abs(validation.check_real_scalar("scale", scale, ""))


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


def check_mask(mask, shape):
    """A boolean mask broadcastable to the scores' ``shape``; returned as an array (None for
    None). A ``ValueError`` starting with "mask: " otherwise."""
    if mask is None:
        return None
    if not validation.is_traced(mask) and not isinstance(mask, jax.Array):
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


def check_scored(
    queries, keys, *, values=None, bias=None, scale=None, temperature=1.0, batched=True, names=None
):
    """``simplex.check_score_inputs`` for dot-product scores s = scale <q, k> + b (then / tau):
    the arrays, the scale, the temperature and the bound of every intermediate result.

    ``names``: the names of the queries and the bias in the caller's signature (the error
    messages start with them). Returns (queries, keys, values or None, bias or None, scale,
    tau, dtype, scores' shape).
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
        if validation.is_traced(scale):
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
    queries, keys, _, bias, scale, _, _, shape = check_scored(queries, keys, bias=bias, scale=scale)
    mask = check_mask(mask, shape)
    return dot_product_scores_unchecked(jnp.asarray(queries), jnp.asarray(keys), scale, bias, mask)


def dot_product_scores_unchecked(queries, keys, scale, bias, mask):
    """The traceable kernel of ``dot_product_scores``: no checks; ``scale``, ``bias`` and
    ``mask`` may be None (the default 1 / sqrt(d), no bias, no mask)."""
    if scale is None:
        scale = 1.0 / jnp.sqrt(jnp.asarray(queries.shape[-1], dtype=queries.dtype))
    return _apply_bias_mask(scale * jnp.einsum("...qd,...kd->...qk", queries, keys), bias, mask)


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
    mask = check_mask(mask, shape)
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
        if not validation.is_traced(bandwidth):
            u = diff / np.asarray(bandwidth, np.float64)
            sq = float(np.sum(u * u))
            stages += [
                ("queries", float(u.max()), "|q_c - k_c| / h_c"),
                ("queries", sq, "|(q - k) / h|^2 between queries and keys"),
            ]
            if bias is not None:
                stages.append(("bias", 0.5 * sq + max_abs(bias), "|score + bias|"))
    return stages


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
        h = validation.check_bandwidth("bandwidth", bandwidth, arrays[0].shape[-1], dtype)
        return shape, h

    def stages(arrays, tau, extra):
        return _distance_stages(
            arrays[0], arrays[1], extra[1], arrays[2] if bias is not None else None
        )

    arrays, _, dtype, (shape, h) = check_score_inputs(specs, relations=relations, stages=stages)
    mask = check_mask(mask, shape)
    queries, keys = jnp.asarray(arrays[0]), jnp.asarray(arrays[1])
    scores = _gaussian_log_kernel(queries, keys, jnp.asarray(h, dtype))
    return _apply_bias_mask(scores, arrays[2] if bias is not None else None, mask)


def _gaussian_log_kernel(queries, keys, bandwidth):
    """-|(q - k) / h|^2 / 2, differences taken first (no |q|^2 + |k|^2 - 2 q.k cancellation)."""
    u = (queries[..., :, None, :] - keys[..., None, :, :]) / bandwidth
    return -0.5 * jnp.sum(u * u, axis=-1)


def scaled_dot_product(queries, keys, scale):
    """scale q k^T for queries (Q, d) and keys (K, d): the dot-product score function of
    ``scored_attention`` (``score_fn(queries, keys, params)`` with params = scale)."""
    return scale * (queries @ keys.T)
