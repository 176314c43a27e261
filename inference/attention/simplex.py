"""Attention weights as a regularised argmax over the probability simplex.

The note "Attention as a regularised argmax", after Martins et al. (2020, "Sparse and
continuous attention mechanisms", NeurIPS) and Blondel, Martins and Niculae (2020, "Learning
with Fenchel-Young losses", JMLR); sparsemax is Martins and Astudillo (2016), entmax Peters,
Niculae and Martins (2019).

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
J = diag(g) - g g^T / sum(g) with g_j = p_j^{2-a} on the support (Peters et al., 2019), and
``entmax_bisect`` also in alpha, dp / da = (J z - p log p + g sum(p log p) / sum(g)) / (a - 1)
with z = s / tau (Correia, Niculae and Martins 2019). The sparse maps are piecewise smooth:
at a change of the support (a weight reaching 0) they have a kink, where the JVP is one-sided.
Scores, alpha and tau are traced arguments of one compiled kernel (``jax.jit``, ``jax.vmap``
and ``jax.grad`` over any of them); under ``jax.jit`` an alpha <= 1 gives NaN weights.

Errors. ``check_score_inputs`` is the one check of every map here and of
``attnbayes.inference.attention.attend``: before any tracing it refuses, with a ``ValueError`` whose
message starts with the argument's name, scores that are empty, complex, not numbers, NaN or
+inf (-inf masks an entry), a temperature that is not a finite real number > 0 (>= 0 for
``regularised_argmax``) or is below the dtype's smallest normal number, and scores whose
division by the temperature would overflow the dtype (|s| / tau > finfo.max: +inf scores would
give softmax NaN (inf - inf) and make sparsemax and entmax treat them as masked). Finite scores
anywhere in the dtype's range are exact: each map subtracts the row maximum, and a difference
that overflows to -inf only rounds a weight that is 0 anyway. Under ``jax.jit`` the arguments
are tracers and only the static checks (dtype, rank, size, axis) run; a NaN in the output there
means NaN or +inf scores, or scores / tau beyond the dtype's range, which the eager call refuses
(every map makes such a row NaN rather than reading +inf as a masked entry): call
``check_score_inputs`` (or the map itself) on the concrete scores first.
"""

from __future__ import annotations

import functools
import numbers
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ...validation import check_real_scalar, is_traced

REGULARISERS = ("shannon", "gini", "tsallis")


# ----------------------------------------------------------------------------- checks
#
# One check for every map here and for the attention of ``attnbayes.inference.attention``, which
# imports it: ``check_score_inputs`` validates the arrays the scores are made of (``check_array``),
# the temperature (``check_temperature``) and bounds the largest score the kernel can form against
# the dtype's largest number (``check_score_bound``). Value checks run on concrete inputs only,
# before any tracing; under ``jax.jit`` the arguments are tracers and only the static checks
# (dtype, rank, size) run.


class ArraySpec(NamedTuple):
    """One array input of ``check_score_inputs``.

    Attributes:
        name: the argument's name (the error messages start with it).
        value: the argument as given.
        min_rank, max_rank: allowed rank (max_rank None: no upper bound).
        neg_inf: True where -inf is meaningful (a masked score, a removed key).
        typed: True if the array takes part in the computation's dtype.
    """

    name: str
    value: object
    min_rank: int = 1
    max_rank: int | None = None
    neg_inf: bool = False
    typed: bool = True


def check_array(name, value, *, min_rank=1, max_rank=None, neg_inf=False):
    """An array of real numbers: returns it as a NumPy array (a JAX array or tracer unchanged).

    Refused, with a ``ValueError`` starting with ``name``: None, ragged lists, strings and
    objects, complex numbers, a rank outside [min_rank, max_rank], no entries, NaN, +inf and
    (unless ``neg_inf``) -inf. Dtype, rank and size are checked on tracers too; values only on
    concrete arrays.
    """
    if is_traced(value):
        arr = value
    else:
        if value is None:
            raise ValueError(f"{name}: expected an array of numbers, got None")
        try:
            arr = np.asarray(value)
        except (ValueError, TypeError) as err:  # ragged nested lists and the like
            raise ValueError(f"{name}: could not be read as an array ({err})") from None
    dtype = arr.dtype
    if jnp.issubdtype(dtype, jnp.complexfloating):
        raise ValueError(f"{name}: expected real numbers, got complex dtype {dtype}")
    if not (jnp.issubdtype(dtype, jnp.number) or jnp.issubdtype(dtype, jnp.bool_)):
        raise ValueError(f"{name}: expected numbers, got dtype {dtype}")
    if arr.ndim < min_rank or (max_rank is not None and arr.ndim > max_rank):
        want = f"rank {min_rank}" if max_rank == min_rank else f"rank >= {min_rank}"
        if max_rank is not None and max_rank != min_rank:
            want = f"rank {min_rank} to {max_rank}"
        raise ValueError(f"{name}: expected {want}, got shape {tuple(arr.shape)}")
    if arr.size == 0:
        raise ValueError(f"{name}: is empty (shape {tuple(arr.shape)})")
    if is_traced(arr) or not jnp.issubdtype(dtype, jnp.inexact):
        return arr
    bad = int(np.count_nonzero(np.isnan(arr) | np.isposinf(arr)))
    if bad:
        raise ValueError(f"{name}: contains {bad} NaN or +inf value(s)")
    if not neg_inf and np.isneginf(arr).any():
        raise ValueError(f"{name}: contains -inf")
    return value if isinstance(value, jax.Array) else arr


def check_temperature(temperature, *, allow_zero: bool = False, dtype=None):
    """tau: a finite real number > 0 (>= 0 with ``allow_zero``), returned as a float.

    With ``dtype``, a positive tau below its smallest normal number is refused too: XLA flushes
    subnormal numbers to zero on CPU, so scores / tau would be +-inf or NaN. A tracer is
    returned unchanged (it must be > 0 at run time).
    """
    if is_traced(temperature):
        return temperature
    bound = ">= 0" if allow_zero else "> 0"
    t = check_real_scalar("temperature", temperature, f"a finite number {bound}")
    if not np.isfinite(t) or t < 0 or (t == 0 and not allow_zero):
        raise ValueError(f"temperature: must be a finite number {bound}, got {t}")
    if dtype is not None and 0 < t < float(jnp.finfo(dtype).tiny):
        raise ValueError(
            f"temperature: {t} is below the smallest normal {np.dtype(dtype).name} number "
            f"{float(jnp.finfo(dtype).tiny):.3g} (XLA flushes it to 0)"
        )
    return t


def _check_alpha(alpha):
    """alpha > 1 as a float; a tracer only has its shape and dtype checked (a 0-d real)."""
    if is_traced(alpha):
        if alpha.ndim != 0 or not jnp.issubdtype(alpha.dtype, jnp.floating):
            raise ValueError(f"alpha: expected a number > 1, got a traced array {alpha.aval}")
        return alpha
    a = check_real_scalar("alpha", alpha, "a number > 1")
    if not np.isfinite(a) or a <= 1:
        raise ValueError(f"alpha: must be a finite number > 1, got {a}")
    return a


def _check_regulariser(regulariser, alpha):
    """The regulariser's name and its alpha (only with "tsallis", where it is required)."""
    if not isinstance(regulariser, str) or regulariser not in REGULARISERS:
        raise ValueError(f"regulariser: unknown {regulariser!r}; known: {list(REGULARISERS)}")
    if regulariser == "tsallis":
        return _check_alpha(alpha)
    if alpha is not None:
        raise ValueError(f"alpha: only used with regulariser='tsallis', got alpha={alpha!r}")
    return None


def _check_axis(axis, ndim: int, name: str = "scores") -> int:
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral):
        raise ValueError(f"axis: expected an integer, got {axis!r}")
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis: {axis} is out of range for {name} of rank {ndim}")
    return int(axis)


def _check_num_iters(num_iters, dtype) -> int:
    if num_iters is None:
        return 60 if dtype == jnp.float64 else 30
    if isinstance(num_iters, bool) or not isinstance(num_iters, numbers.Integral) or num_iters < 1:
        raise ValueError(f"num_iters: expected an integer >= 1, got {num_iters!r}")
    return int(num_iters)


def float_dtype(*dtypes):
    """The floating dtype a computation on arrays of these dtypes runs in (ints -> float)."""
    canonical = [jax.dtypes.canonicalize_dtype(d) for d in dtypes]
    return np.dtype(jnp.result_type(*canonical, float))


def max_abs(arr) -> float:
    """max |entry| over the finite entries of a concrete array, in float64 (0 if none)."""
    a = np.abs(np.asarray(arr, dtype=np.float64))
    a = a[np.isfinite(a)]
    return float(a.max()) if a.size else 0.0


def check_score_bound(stages, dtype) -> None:
    """Refuse a computation whose intermediate results can exceed ``dtype``'s largest number.

    ``stages``: (argument name, largest possible |value|, what it is), in the order the kernel
    forms them, the last being the scores it exponentiates or projects. An overflow there is not
    a rounding matter: a score of +inf makes softmax inf - inf = NaN and makes sparsemax and
    entmax take it for a masked (-inf) entry, so the wrong key gets the weight.
    """
    limit = float(jnp.finfo(dtype).max)
    name = np.dtype(dtype).name
    for arg, bound, what in stages:
        if not bound <= limit:  # also catches NaN (0 * inf)
            raise ValueError(
                f"{arg}: {what} can reach {bound:.3g}, more than {name}'s largest number "
                f"{limit:.3g}, so the scores would overflow; rescale the inputs"
            )


def _scores_stages(arrays, temperature):
    """The weight maps' stages: the scores, then the scores divided by the temperature."""
    top = max_abs(arrays[0])
    stages = [("scores", top, "|scores|")]
    if temperature is not None and temperature > 0:
        stages.append(("temperature", top / temperature, "|scores| / temperature"))
    return stages


class CheckedInputs(NamedTuple):
    """What ``check_score_inputs`` returns.

    Attributes:
        arrays: the inputs as NumPy arrays (JAX arrays and tracers unchanged), in order.
        temperature: tau as a float, or the tracer.
        dtype: the floating dtype of the computation (from the ``typed`` inputs).
        extra: what ``relations`` returned (None without it).
    """

    arrays: list
    temperature: object
    dtype: np.dtype
    extra: object


def check_score_inputs(
    inputs, temperature=1.0, *, allow_zero: bool = False, relations=None, stages=None
) -> CheckedInputs:
    """The check shared by every weight map here and by ``attnbayes.inference.attention``.

    Args:
        inputs: ``ArraySpec``s of the scores, or of the arrays the scores are computed from
            (queries, keys, values, bias, ...); each goes through ``check_array``.
        temperature: tau, through ``check_temperature`` (against the computation's dtype).
        allow_zero: accept tau = 0 (the unregularised argmax).
        relations: ``relations(arrays, dtype) -> extra``: the checks between the inputs
            (matching shapes) and of arguments that need the dtype (a bandwidth); it runs on
            tracers too, so it may only look at shapes and dtypes of traced arrays.
        stages: ``stages(arrays, tau, extra) -> [(name, bound, what), ...]`` for
            ``check_score_bound``, given the checked arrays, tau as a float (None when traced)
            and what ``relations`` returned; run only when no input array is traced. The
            default bounds the first input, the scores, and the scores / tau.

    Returns:
        ``CheckedInputs(arrays, temperature, dtype, extra)``.
    """
    arrays = [
        check_array(s.name, s.value, min_rank=s.min_rank, max_rank=s.max_rank, neg_inf=s.neg_inf)
        for s in inputs
    ]
    dtype = float_dtype(*(a.dtype for a, s in zip(arrays, inputs, strict=True) if s.typed))
    extra = None if relations is None else relations(arrays, dtype)
    temperature = check_temperature(temperature, allow_zero=allow_zero, dtype=dtype)
    if not any(is_traced(a) for a in arrays):
        tau = None if is_traced(temperature) else temperature
        bounds = _scores_stages(arrays, tau) if stages is None else stages(arrays, tau, extra)
        check_score_bound(bounds, dtype)
    return CheckedInputs(arrays, temperature, dtype, extra)


def _check_scores(scores, axis, temperature, *, allow_zero=False):
    """``check_score_inputs`` for the scores themselves: (jnp scores, axis, tau)."""
    (arr,), temperature, dtype, _ = check_score_inputs(
        [ArraySpec("scores", scores, neg_inf=True)], temperature, allow_zero=allow_zero
    )
    axis = _check_axis(axis, arr.ndim)
    return jnp.asarray(arr, dtype), axis, temperature


@functools.partial(jax.jit, static_argnames=("kind", "axis", "num_iters"))
def _simplex_map(scores, temperature, kind, axis, alpha=None, num_iters=None):
    """The map ``kind`` applied to scores / temperature along ``axis`` (one compiled kernel).

    ``alpha`` (bisection only) is an array argument: traced, batched and differentiated like
    the scores.
    """
    x = jnp.moveaxis(scores / temperature, axis, -1)
    if kind == "softmax":
        has_entry = jnp.any(x != -jnp.inf, axis=-1, keepdims=True)
        p = jnp.where(has_entry, jax.nn.softmax(jnp.where(has_entry, x, 0.0), axis=-1), 0.0)
    elif kind == "sparsemax":
        p = sparsemax_last(x)
    elif kind == "entmax15":
        p = entmax15_last(x)
    else:
        p = _entmax_bisect_last(x, jnp.asarray(alpha, x.dtype), num_iters)
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


def _nan_rows(x, p):
    """NaN in every row of ``x`` holding a NaN or +inf (refused eagerly; only under jit).

    The sorting maps would otherwise read such an entry as masked and give the row's weight
    to the other entries: a plausible but wrong answer.
    """
    bad = jnp.any(jnp.isnan(x) | (x == jnp.inf), axis=-1, keepdims=True)
    return jnp.where(bad, jnp.nan, p)


def _checked_map(scores, axis, temperature, kind, alpha=None, num_iters=None):
    """Validate (scores, axis, temperature), then run the compiled map ``kind``."""
    scores, axis, temperature = _check_scores(scores, axis, temperature)
    if kind == "bisect":
        num_iters = _check_num_iters(num_iters, scores.dtype)
    return _simplex_map(scores, temperature, kind, axis, alpha, num_iters)


# ----------------------------------------------------------------------------- softmax


def softmax(scores, axis: int = -1, temperature=1.0) -> jax.Array:
    """softmax(s / tau)_j = exp(s_j / tau) / sum_l exp(s_l / tau): Shannon-regularised argmax.

    Entries at -inf (masked) get weight exactly 0; a fully masked row gets all zeros. Bad input
    is refused as described under ``Errors`` in the module docstring.
    """
    return _checked_map(scores, axis, temperature, "softmax")


# ----------------------------------------------------------------------------- sparsemax


@jax.custom_jvp
def sparsemax_last(x):
    """Euclidean projection of each row of x onto the simplex (Held et al.; Martins & Astudillo).

    Along the last axis, at temperature 1 (divide the scores by tau first), without checks:
    the traceable kernel of ``sparsemax``, also used by ``pooling``'s sparse attention.
    """
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
    return _nan_rows(x, jnp.where(finite, jnp.maximum(z - tau, 0.0), 0.0))


@sparsemax_last.defjvp
def _sparsemax_jvp(primals, tangents):
    (x,), (dx,) = primals, tangents
    p = sparsemax_last(x)
    return p, _support_jvp(p, jnp.where(jnp.isfinite(x), dx, 0.0), 0.0)


def sparsemax(scores, axis: int = -1, temperature=1.0) -> jax.Array:
    """sparsemax(s / tau) = argmin_{p in simplex} |p - s / tau|^2: Gini-regularised argmax.

    Exact zeros outside the support; entries at -inf (masked) get weight 0, a fully masked row
    all zeros. Bad input: see ``Errors`` in the module docstring.
    """
    return _checked_map(scores, axis, temperature, "sparsemax")


# ----------------------------------------------------------------------------- entmax 1.5


@jax.custom_jvp
def entmax15_last(x):
    """Exact 1.5-entmax by sorting (Peters, Niculae & Martins, 2019, Algorithm 2).

    Along the last axis, at temperature 1, without checks: the traceable kernel of
    ``entmax15``, also used by ``pooling``'s sparse attention.
    """
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
    return _nan_rows(x, jnp.where(finite, jnp.maximum(z - tau_star, 0.0) ** 2, 0.0))


@entmax15_last.defjvp
def _entmax15_jvp(primals, tangents):
    (x,), (dx,) = primals, tangents
    p = entmax15_last(x)
    return p, _support_jvp(p, jnp.where(jnp.isfinite(x), dx, 0.0), 0.5)


def entmax15(scores, axis: int = -1, temperature=1.0) -> jax.Array:
    """1.5-entmax(s / tau): Tsallis-regularised argmax with alpha = 1.5, exact by sorting.

    p_j = [s_j / (2 tau) - t]_+^2 with sum_j p_j = 1; sparse like sparsemax, smoother. Masked
    (-inf) entries get weight 0, a fully masked row all zeros. Bad input: see ``Errors`` in the
    module docstring.
    """
    return _checked_map(scores, axis, temperature, "entmax15")


# ----------------------------------------------------------------------------- entmax (bisection)


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def _entmax_bisect_last(x, alpha, num_iters):
    """alpha-entmax by bisection on the threshold t (Blondel et al., 2020).

    ``alpha`` is a 0-d array; alpha <= 1 (possible only under ``jax.jit``, where it is not
    checked) gives NaN weights.
    """
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
    p = jnp.where(total > 0, p / jnp.where(total > 0, total, 1.0), 0.0)  # masked row: 0
    return jnp.where(alpha > 1.0, _nan_rows(x, p), jnp.nan)


@_entmax_bisect_last.defjvp
def _entmax_bisect_jvp(num_iters, primals, tangents):
    """J dx + (dp / dalpha) dalpha on the support (Peters et al. 2019; Correia et al. 2019).

    With g_j = p_j^(2 - alpha) on the support, J = diag(g) - g g^T / sum(g), and
    dp / dalpha = (J x - p log p + g sum(p log p) / sum(g)) / (alpha - 1): the derivative of
    p_j = [(alpha - 1) x_j - t]_+^(1 / (alpha - 1)) with the threshold t moving to keep
    sum_j p_j = 1. J annihilates constants, so x enters shifted by its row maximum.
    """
    (x, alpha), (dx, dalpha) = primals, tangents
    p = _entmax_bisect_last(x, alpha, num_iters)
    finite = jnp.isfinite(x)
    dp_x = _support_jvp(p, jnp.where(finite, dx, 0.0), 2.0 - alpha)
    top = jnp.max(jnp.where(finite, x, -jnp.inf), axis=-1, keepdims=True)
    x_shift = jnp.where(finite, x - jnp.where(jnp.isfinite(top), top, 0.0), 0.0)
    g = jnp.where(p > 0, p ** (2.0 - alpha), 0.0)
    g_sum = jnp.sum(g, axis=-1, keepdims=True)
    g_sum = jnp.where(g_sum > 0, g_sum, 1.0)  # a fully masked row: p = g = 0
    p_log_p = jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1.0)), 0.0)
    j_x = g * (x_shift - jnp.sum(g * x_shift, axis=-1, keepdims=True) / g_sum)
    dp_alpha = (j_x - p_log_p + g * jnp.sum(p_log_p, axis=-1, keepdims=True) / g_sum) / (
        alpha - 1.0
    )
    return p, dp_x + dp_alpha * dalpha


def entmax_bisect(
    scores, alpha=1.5, axis: int = -1, temperature=1.0, num_iters: int | None = None
) -> jax.Array:
    """alpha-entmax(s / tau) for any alpha > 1 by bisection on the threshold.

    p_j = [(alpha - 1) s_j / tau - t]_+^{1/(alpha - 1)}, sum_j p_j = 1. alpha = 2 is sparsemax,
    alpha = 1.5 is ``entmax15``, alpha -> 1 tends to softmax. ``num_iters`` bisection steps
    (default: enough to pin t to the dtype's resolution: 60 in float64, 30 in float32). Masked
    (-inf) entries get weight 0, a fully masked row all zeros. Bad input: see ``Errors`` in
    the module docstring.

    Traceable in ``scores``, ``alpha`` and ``temperature`` (``num_iters`` and ``axis`` are
    static), and differentiable in all three by the closed-form Jacobians (custom JVP), away
    from changes of the support, where the map is continuous but not differentiable. Under
    ``jax.jit`` alpha is not checked: alpha <= 1 gives NaN weights (call
    ``check_score_inputs`` and this function on concrete values first).
    """
    return _checked_map(scores, axis, temperature, "bisect", _check_alpha(alpha), num_iters)


# ----------------------------------------------------------------------------- the variational view


def regulariser_value(p, regulariser: str = "shannon", alpha=None, axis: int = -1) -> jax.Array:
    """Omega(p) of the module docstring (0 log 0 = 0), reduced along ``axis``.

    ``p`` must be finite real numbers; ``alpha`` (> 1) goes with "tsallis" only.
    """
    alpha = _check_regulariser(regulariser, alpha)
    p = check_array("p", p)
    axis = _check_axis(axis, p.ndim, "p")
    p = jnp.asarray(p, float_dtype(p.dtype))
    if regulariser == "shannon":
        return jnp.sum(jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1.0)), 0.0), axis=axis)
    if regulariser == "gini":
        return 0.5 * (jnp.sum(p**2, axis=axis) - 1.0)
    return (jnp.sum(jnp.where(p > 0, p, 0.0) ** alpha, axis=axis) - 1.0) / (alpha * (alpha - 1.0))


def regularised_objective(
    p, scores, regulariser: str = "shannon", alpha=None, temperature=1.0, axis: int = -1
) -> jax.Array:
    """<p, s> - tau * Omega(p): the objective that ``regularised_argmax`` maximises.

    A masked score s_j = -inf contributes 0 where p_j = 0 (and -inf where p_j > 0: p is not
    feasible). ``p`` and ``scores`` must broadcast against each other; tau >= 0.
    """
    alpha = _check_regulariser(regulariser, alpha)
    p = check_array("p", p)
    (scores,), temperature, dtype, _ = check_score_inputs(
        [ArraySpec("scores", scores, neg_inf=True)], temperature, allow_zero=True
    )
    try:
        shape = np.broadcast_shapes(p.shape, scores.shape)
    except ValueError:
        raise ValueError(
            f"p: shape {tuple(p.shape)} does not broadcast against the scores' "
            f"{tuple(scores.shape)}"
        ) from None
    axis = _check_axis(axis, len(shape))
    p, scores = jnp.asarray(p, float_dtype(p.dtype, dtype)), jnp.asarray(scores, dtype)
    # -inf * 0 is NaN: a masked score the weights leave alone contributes nothing
    scores = jnp.where((p == 0) & (scores == -jnp.inf), 0.0, scores)
    linear = jnp.sum(p * scores, axis=axis)
    if not is_traced(temperature) and temperature == 0:
        return linear
    return linear - temperature * regulariser_value(p, regulariser, alpha, axis)


@functools.partial(jax.jit, static_argnames=("axis",))
def _vertex(scores, axis):
    """e_j with j = argmax s along ``axis`` (the first of ties); a fully masked row gets zeros."""
    idx = jnp.argmax(scores, axis=axis)
    one_hot = jnp.moveaxis(jax.nn.one_hot(idx, scores.shape[axis], dtype=scores.dtype), -1, axis)
    has_entry = jnp.any(scores != -jnp.inf, axis=axis, keepdims=True)
    return jnp.where(has_entry, one_hot, 0.0)


def regularised_argmax(
    scores, regulariser: str = "shannon", alpha=None, temperature=1.0, axis: int = -1
) -> jax.Array:
    """argmax_{p in simplex} <p, s> - tau * Omega(p), along ``axis``.

    regulariser="shannon" -> softmax(s / tau); "gini" -> sparsemax(s / tau); "tsallis" with
    alpha > 1 -> alpha-entmax(s / tau) (exact by sorting at alpha = 1.5 and 2, bisection
    otherwise). ``temperature=0`` solves the unregularised linear programme: the vertex
    e_j with j = argmax s (the first one if several tie), the limit of every map as tau -> 0.
    A fully masked row (every score -inf) has no feasible vertex and gets all zeros at every
    temperature, 0 included, as every map gives it for tau > 0. A traced temperature (under
    ``jax.jit``) must be > 0 at run time. Bad input: see ``Errors`` in the module docstring.
    """
    alpha = _check_regulariser(regulariser, alpha)
    scores, axis, temperature = _check_scores(scores, axis, temperature, allow_zero=True)
    if not is_traced(temperature) and temperature == 0:
        return _vertex(scores, axis)
    if regulariser == "shannon":
        kind, alpha = "softmax", None
    elif is_traced(alpha):  # its value is unknown: the general map
        kind = "bisect"
    elif regulariser == "gini" or alpha == 2.0:
        kind, alpha = "sparsemax", None
    elif alpha == 1.5:
        kind, alpha = "entmax15", None
    else:
        kind = "bisect"
    num_iters = _check_num_iters(None, scores.dtype) if kind == "bisect" else None
    return _simplex_map(scores, temperature, kind, axis, alpha, num_iters)


__all__ = [
    "REGULARISERS",
    "ArraySpec",
    "CheckedInputs",
    "check_array",
    "check_score_bound",
    "check_score_inputs",
    "check_temperature",
    "entmax15",
    "entmax_bisect",
    "float_dtype",
    "max_abs",
    "regularised_argmax",
    "regularised_objective",
    "regulariser_value",
    "softmax",
    "sparsemax",
]
