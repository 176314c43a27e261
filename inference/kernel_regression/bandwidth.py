"""Bandwidth selection for Nadaraya-Watson: leave-one-out CV, or gradient descent.

"loo-cv" minimises the leave-one-out criterion of ``estimator`` over log h: a coarse grid
scaled by a robust spread of the keys, then Brent (scalar h), L-BFGS-B with a jitted gradient
or Nelder-Mead (per-coordinate h). "gradient" is the d2l-style learned bandwidth: Adam on log h
minimising the squared error on a held-out split. Eager only (an argmin over a grid, then a
SciPy optimiser); not traceable.
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

from ... import validation
from .estimator import (
    loo_blocked,
    loo_blocked_value_and_grad,
    loo_data,
    loo_dense,
    loo_dense_value_and_grad,
    loo_gaussian_scalar_score,
)
from .kernels import (
    COMPACT_SCORES,
    LOG_KERNEL_SCORES,
    check_block_size,
    check_data,
    check_kernel,
    relative,
    scaled_sq_dist,
)

SELECTION_METHODS = ("loo-cv", "gradient")


class WideBandwidthWarning(UserWarning):
    """The selected bandwidth exceeds the keys' range: the fit is close to a constant."""


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


# ----------------------------------------------------------------------------- bandwidth selection


def _held_out_loss(score_fn, log_h, train_keys, train_values, test_keys, test_values):
    """Mean squared error of NW fitted on the train split, evaluated on the held-out split."""
    inv_h = jnp.broadcast_to(jnp.exp(-log_h), (train_keys.shape[1],))
    s = score_fn(test_keys, train_keys, inv_h)
    m = jnp.max(s, axis=1)
    has = jnp.isfinite(m)
    p = jnp.exp(s - jax.lax.stop_gradient(jnp.where(has, m, 0))[:, None])
    pred = (p @ train_values) / jnp.where(has, p.sum(1), 1)[:, None]
    if score_fn in COMPACT_SCORES:
        nearest = jnp.argmin(scaled_sq_dist(test_keys, train_keys, relative(inv_h)), axis=1)
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
    kernel = check_kernel(kernel)
    if method not in SELECTION_METHODS:
        raise ValueError(f"method: unknown method {method!r}; known: {list(SELECTION_METHODS)}")
    if not isinstance(per_coordinate, bool):
        raise ValueError(f"per_coordinate: expected True or False, got {per_coordinate!r}")
    (k, v), _, dtype = check_data(keys, values)
    if validation.any_traced(k, v):
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
        block_size = check_block_size(block_size)
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
        h0 = validation.check_bandwidth("init", init, d, dtype)
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
        data = loo_data(kernel, k, v, collapse)

    def expand(log_h):  # NumPy, so that no eager JAX op compiles on the way
        return np.broadcast_to(np.asarray(log_h, dtype), (width,))

    def value(log_h):
        if block_size is None and collapse:
            return float(loo_gaussian_scalar_score(expand(log_h), data))
        if block_size is None:
            return float(loo_dense(kernel, expand(log_h), data)[0])
        return float(loo_blocked(score_fn, expand(log_h), k, v, block_size)[0])

    def value_and_grad(log_h):
        if block_size is None:
            val, grad = loo_dense_value_and_grad(kernel, expand(log_h), data)
        else:
            val, grad = loo_blocked_value_and_grad(score_fn, expand(log_h), k, v, block_size)
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


__all__ = ["SELECTION_METHODS", "BandwidthResult", "WideBandwidthWarning", "select_bandwidth"]
