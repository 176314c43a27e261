"""Attention weights as a regularised argmax over the probability simplex (seed 2).

Given scores s in R^K, the weights solve

    p* = argmax_{p in simplex}  <p, s> - tau * Omega(p),

and each regulariser gives one familiar map:

    Omega(p) = sum_j p_j log p_j              (negative Shannon entropy)  ->  softmax(s / tau)
    Omega(p) = (|p|^2 - 1) / 2                (Gini, alpha = 2)           ->  sparsemax(s / tau)
    Omega(p) = (sum_j p_j^a - 1) / (a (a-1))  (negative Tsallis, a > 1)   ->  a-entmax(s / tau)

With tau -> 0 the problem is the linear programme max_{p in simplex} <p, s>, solved at a
vertex: the one-hot argmax. The alpha-entmax solution is p_j = [(a - 1) s_j / tau - t]_+^{1/(a-1)}
with the threshold t set so that sum_j p_j = 1; sparsemax (a = 2) is the Euclidean projection
of s / tau onto the simplex, and softmax is the limit a -> 1.

Every map works along ``axis`` of an array of any rank, takes a ``temperature`` tau, and is
differentiable: sparsemax and entmax carry custom JVPs from their closed-form Jacobians
J = diag(g) - g g^T / sum(g) with g_j = p_j^{2-a} on the support (Peters et al., 2019).
"""

from __future__ import annotations

import functools
import numbers

import jax
import jax.numpy as jnp
import numpy as np

REGULARISERS = ("shannon", "gini", "tsallis")


# ----------------------------------------------------------------------------- checks


def _check_temperature(temperature, *, allow_zero: bool = False):
    if isinstance(temperature, jax.core.Tracer):
        return temperature
    if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real):
        raise ValueError(f"temperature: expected a number, got {temperature!r}")
    t = float(temperature)
    if not np.isfinite(t) or t < 0 or (t == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"temperature: must be a finite number {bound}, got {t}")
    return t


def _check_alpha(alpha) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real):
        raise ValueError(f"alpha: expected a number > 1, got {alpha!r}")
    a = float(alpha)
    if not np.isfinite(a) or a <= 1:
        raise ValueError(f"alpha: must be a finite number > 1, got {a}")
    return a


def _check_overflow(scores, temperature):
    """Refuse concrete scores whose division by the temperature overflows to +-inf."""
    if isinstance(scores, jax.core.Tracer) or isinstance(temperature, jax.core.Tracer):
        return
    arr = np.asarray(scores)
    arr = arr.astype(np.result_type(arr.dtype, np.float32))
    with np.errstate(over="ignore", invalid="ignore"):
        scaled = arr / np.asarray(temperature, arr.dtype)
    if np.any(np.isinf(scaled) & np.isfinite(arr)):
        raise ValueError(
            f"temperature: scores / temperature overflows {arr.dtype} (temperature {temperature})"
        )


def _check_scores(scores, axis):
    if not isinstance(scores, jax.core.Tracer):
        arr = np.asarray(scores)
        if arr.ndim == 0:
            raise ValueError("scores: expected at least one axis, got a scalar")
        if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
            raise ValueError(f"scores: expected numbers, got dtype {arr.dtype}")
        if np.isnan(arr).any() or np.isposinf(arr).any():
            raise ValueError("scores: contain NaN or +inf (-inf marks a masked entry)")
    scores = jnp.asarray(scores)
    if scores.dtype not in (jnp.float32, jnp.float64, jnp.float16, jnp.bfloat16):
        scores = scores.astype(jnp.result_type(float))
    if not -scores.ndim <= axis < scores.ndim:
        raise ValueError(f"axis: {axis} is out of range for scores of rank {scores.ndim}")
    return scores


@functools.partial(jax.jit, static_argnames=("kind", "axis", "alpha", "num_iters"))
def _simplex_map(scores, temperature, kind, axis, alpha=None, num_iters=None):
    """The map ``kind`` applied to scores / temperature along ``axis`` (one compiled kernel)."""
    x = jnp.moveaxis(scores / temperature, axis, -1)
    if kind == "softmax":
        has_entry = jnp.any(x != -jnp.inf, axis=-1, keepdims=True)
        p = jnp.where(has_entry, jax.nn.softmax(jnp.where(has_entry, x, 0.0), axis=-1), 0.0)
    elif kind == "sparsemax":
        p = _sparsemax_last(x)
    elif kind == "entmax15":
        p = _entmax15_last(x)
    else:
        p = _entmax_bisect_last(x, alpha, num_iters)
    return jnp.moveaxis(p, -1, axis)


def _support_jvp(p, dx, exponent):
    """J dx with J = diag(g) - g g^T / sum(g), g = p^exponent on the support (last axis)."""
    g = jnp.where(p > 0, p ** jnp.asarray(exponent, p.dtype), 0.0)
    gdx = g * dx
    return gdx - g * jnp.sum(gdx, axis=-1, keepdims=True) / jnp.sum(g, axis=-1, keepdims=True)


def _fill_masked(z, finite):
    """Replace masked (-inf) entries by max - 2: below any threshold, so never in the support.

    The sparsemax / entmax-1.5 thresholds are >= max(z) - 1, so this leaves the result exact
    while keeping the sorted cumulative sums finite. A fully masked row becomes all zeros.
    """
    top = jnp.max(jnp.where(finite, z, -jnp.inf), axis=-1, keepdims=True)
    top = jnp.where(jnp.isfinite(top), top, 0.0)
    return jnp.where(finite, z, top - 2.0)


def _checked_map(scores, axis, temperature, kind, alpha=None, num_iters=None):
    """Validate (scores, axis, temperature), then run the compiled map ``kind``."""
    scores = _check_scores(scores, axis)
    temperature = _check_temperature(temperature)
    _check_overflow(scores, temperature)
    return _simplex_map(scores, temperature, kind, axis, alpha, num_iters)


# ----------------------------------------------------------------------------- softmax


def softmax(scores, axis: int = -1, temperature=1.0) -> jax.Array:
    """softmax(s / tau)_j = exp(s_j / tau) / sum_l exp(s_l / tau): Shannon-regularised argmax.

    Entries at -inf (masked) get weight exactly 0.
    """
    return _checked_map(scores, axis, temperature, "softmax")


# ----------------------------------------------------------------------------- sparsemax


@jax.custom_jvp
def _sparsemax_last(x):
    """Euclidean projection of each row of x onto the simplex (Held et al.; Martins & Astudillo)."""
    k = x.shape[-1]
    finite = jnp.isfinite(x)
    z = _fill_masked(x, finite)
    z = z - jnp.max(z, axis=-1, keepdims=True)  # shift-invariant; keeps float32 sums exact
    z_sorted = -jnp.sort(-z, axis=-1)
    cumsum = jnp.cumsum(z_sorted, axis=-1)
    ks = jnp.arange(1, k + 1, dtype=x.dtype)
    in_support = 1 + ks * z_sorted > cumsum
    support = jnp.sum(in_support, axis=-1, keepdims=True)
    tau = (jnp.take_along_axis(cumsum, support - 1, axis=-1) - 1) / support.astype(x.dtype)
    return jnp.where(finite, jnp.maximum(z - tau, 0.0), 0.0)


@_sparsemax_last.defjvp
def _sparsemax_jvp(primals, tangents):
    (x,), (dx,) = primals, tangents
    p = _sparsemax_last(x)
    return p, _support_jvp(p, jnp.where(jnp.isfinite(x), dx, 0.0), 0.0)


def sparsemax(scores, axis: int = -1, temperature=1.0) -> jax.Array:
    """sparsemax(s / tau) = argmin_{p in simplex} |p - s / tau|^2: Gini-regularised argmax.

    Exact zeros outside the support; entries at -inf (masked) get weight 0.
    """
    return _checked_map(scores, axis, temperature, "sparsemax")


# ----------------------------------------------------------------------------- entmax 1.5


@jax.custom_jvp
def _entmax15_last(x):
    """Exact 1.5-entmax by sorting (Peters, Niculae & Martins, 2019, Algorithm 2)."""
    k = x.shape[-1]
    finite = jnp.isfinite(x)
    z = _fill_masked(x / 2.0, finite)
    z = z - jnp.max(z, axis=-1, keepdims=True)
    z_sorted = -jnp.sort(-z, axis=-1)
    ks = jnp.arange(1, k + 1, dtype=x.dtype)
    mean = jnp.cumsum(z_sorted, axis=-1) / ks
    mean_sq = jnp.cumsum(z_sorted**2, axis=-1) / ks
    delta = (1 - ks * (mean_sq - mean**2)) / ks
    tau = mean - jnp.sqrt(jnp.maximum(delta, 0.0))
    support = jnp.sum(tau <= z_sorted, axis=-1, keepdims=True)
    tau_star = jnp.take_along_axis(tau, support - 1, axis=-1)
    return jnp.where(finite, jnp.maximum(z - tau_star, 0.0) ** 2, 0.0)


@_entmax15_last.defjvp
def _entmax15_jvp(primals, tangents):
    (x,), (dx,) = primals, tangents
    p = _entmax15_last(x)
    return p, _support_jvp(p, jnp.where(jnp.isfinite(x), dx, 0.0), 0.5)


def entmax15(scores, axis: int = -1, temperature=1.0) -> jax.Array:
    """1.5-entmax(s / tau): Tsallis-regularised argmax with alpha = 1.5, exact by sorting.

    p_j = [s_j / (2 tau) - t]_+^2 with sum_j p_j = 1; sparse like sparsemax, smoother.
    """
    return _checked_map(scores, axis, temperature, "entmax15")


# ----------------------------------------------------------------------------- entmax (bisection)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1, 2))
def _entmax_bisect_last(x, alpha, num_iters):
    """alpha-entmax by bisection on the threshold t (Blondel et al., 2020)."""
    am1 = alpha - 1.0
    finite = jnp.isfinite(x)
    z = jnp.where(finite, am1 * x, -jnp.inf)
    top = jnp.max(z, axis=-1, keepdims=True)
    z = z - jnp.where(jnp.isfinite(top), top, 0.0)
    k = jnp.sum(finite, axis=-1, keepdims=True).astype(x.dtype)

    def mass(t):
        return jnp.where(finite, jnp.maximum(z - t, 0.0) ** (1.0 / am1), 0.0)

    # sum_j p_j(t) is decreasing in t; it is >= 1 at t = -1 and <= 1 at t = -(1/k)^(a-1)
    lo = jnp.full_like(k, -1.0)
    hi = -((1.0 / k) ** am1)

    def step(_, bounds):
        lo, hi = bounds
        mid = 0.5 * (lo + hi)
        too_much = jnp.sum(mass(mid), axis=-1, keepdims=True) >= 1.0
        return jnp.where(too_much, mid, lo), jnp.where(too_much, hi, mid)

    lo, hi = jax.lax.fori_loop(0, num_iters, step, (lo, hi))
    p = mass(0.5 * (lo + hi))
    total = jnp.sum(p, axis=-1, keepdims=True)
    return jnp.where(total > 0, p / jnp.where(total > 0, total, 1.0), 0.0)  # masked row: 0


@_entmax_bisect_last.defjvp
def _entmax_bisect_jvp(alpha, num_iters, primals, tangents):
    (x,), (dx,) = primals, tangents
    p = _entmax_bisect_last(x, alpha, num_iters)
    return p, _support_jvp(p, jnp.where(jnp.isfinite(x), dx, 0.0), 2.0 - alpha)


def entmax_bisect(
    scores, alpha=1.5, axis: int = -1, temperature=1.0, num_iters: int | None = None
) -> jax.Array:
    """alpha-entmax(s / tau) for any alpha > 1 by bisection on the threshold.

    p_j = [(alpha - 1) s_j / tau - t]_+^{1/(alpha - 1)}, sum_j p_j = 1. alpha = 2 is sparsemax,
    alpha = 1.5 is ``entmax15``, alpha -> 1 tends to softmax. ``num_iters`` bisection steps
    (default: enough to pin t to the dtype's resolution: 60 in float64, 30 in float32).
    """
    scores = _check_scores(scores, axis)
    alpha = _check_alpha(alpha)
    if num_iters is None:
        num_iters = 60 if scores.dtype == jnp.float64 else 30
    if isinstance(num_iters, bool) or not isinstance(num_iters, numbers.Integral) or num_iters < 1:
        raise ValueError(f"num_iters: expected an integer >= 1, got {num_iters!r}")
    return _checked_map(scores, axis, temperature, "bisect", alpha, int(num_iters))


# ----------------------------------------------------------------------------- the variational view


def regulariser_value(p, regulariser: str = "shannon", alpha=None, axis: int = -1) -> jax.Array:
    """Omega(p) of the module docstring (0 log 0 = 0), reduced along ``axis``."""
    p = jnp.asarray(p)
    if regulariser == "shannon":
        return jnp.sum(jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1.0)), 0.0), axis=axis)
    if regulariser == "gini":
        return 0.5 * (jnp.sum(p**2, axis=axis) - 1.0)
    if regulariser == "tsallis":
        a = _check_alpha(alpha)
        return (jnp.sum(jnp.where(p > 0, p, 0.0) ** a, axis=axis) - 1.0) / (a * (a - 1.0))
    raise ValueError(f"regulariser: unknown {regulariser!r}; known: {list(REGULARISERS)}")


def regularised_objective(
    p, scores, regulariser: str = "shannon", alpha=None, temperature=1.0, axis: int = -1
) -> jax.Array:
    """<p, s> - tau * Omega(p): the objective that ``regularised_argmax`` maximises."""
    p, scores = jnp.asarray(p), jnp.asarray(scores)
    linear = jnp.sum(p * scores, axis=axis)
    if not isinstance(temperature, jax.core.Tracer) and temperature == 0:
        return linear
    return linear - temperature * regulariser_value(p, regulariser, alpha, axis)


def regularised_argmax(
    scores, regulariser: str = "shannon", alpha=None, temperature=1.0, axis: int = -1
) -> jax.Array:
    """argmax_{p in simplex} <p, s> - tau * Omega(p), along ``axis``.

    regulariser="shannon" -> softmax(s / tau); "gini" -> sparsemax(s / tau); "tsallis" with
    alpha > 1 -> alpha-entmax(s / tau) (exact by sorting at alpha = 1.5 and 2, bisection
    otherwise). ``temperature=0`` solves the unregularised linear programme: the vertex
    e_j with j = argmax s (the first one if several tie), the limit of every map as tau -> 0.
    A traced temperature (under ``jax.jit``) must be > 0 at run time.
    """
    if regulariser not in REGULARISERS:
        raise ValueError(f"regulariser: unknown {regulariser!r}; known: {list(REGULARISERS)}")
    if regulariser == "tsallis":
        alpha = _check_alpha(alpha)
    elif alpha is not None:
        raise ValueError(f"alpha: only used with regulariser='tsallis', got alpha={alpha!r}")
    temperature = _check_temperature(temperature, allow_zero=True)
    if not isinstance(temperature, jax.core.Tracer) and temperature == 0:
        scores = _check_scores(scores, axis)
        idx = jnp.argmax(scores, axis=axis)
        return jnp.moveaxis(jax.nn.one_hot(idx, scores.shape[axis], dtype=scores.dtype), -1, axis)
    if regulariser == "shannon":
        return softmax(scores, axis, temperature)
    if regulariser == "gini" or alpha == 2.0:
        return sparsemax(scores, axis, temperature)
    if alpha == 1.5:
        return entmax15(scores, axis, temperature)
    return entmax_bisect(scores, alpha, axis, temperature)


__all__ = [
    "REGULARISERS",
    "entmax15",
    "entmax_bisect",
    "regularised_argmax",
    "regularised_objective",
    "regulariser_value",
    "softmax",
    "sparsemax",
]
