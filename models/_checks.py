"""Argument checks shared by models and inference, run on concrete values before any tracing.

Each check raises ``ValueError`` (or ``TypeError``) whose message starts with the argument's
name, so a user sees ``x: contains 3 non-finite values`` rather than a traceback from XLA.
Inside a ``jax.jit`` the arguments are tracers; value checks (finiteness, positivity) are then
skipped and only the static shape checks run.
"""

from __future__ import annotations

import numbers

import jax
import numpy as np


def is_traced(value) -> bool:
    """True when ``value`` is a JAX tracer (its numbers are unknown until run time)."""
    return isinstance(value, jax.core.Tracer)


def as_float_array(name: str, value):
    """Return ``value`` unchanged if traced, else as a NumPy float array; reject non-numbers."""
    if is_traced(value):
        return value
    if value is None:
        raise ValueError(f"{name}: expected an array of numbers, got None")
    try:
        arr = np.asarray(value)
    except Exception as err:  # ragged lists and the like
        raise ValueError(f"{name}: could not be read as an array ({err})") from None
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.bool_)
    ):
        raise ValueError(f"{name}: expected numbers, got dtype {arr.dtype}")
    if np.iscomplexobj(arr):
        raise ValueError(f"{name}: expected real numbers, got complex values")
    return arr.astype(np.result_type(arr.dtype, np.float32))


def check_finite(name: str, value) -> None:
    """Raise if a concrete array holds NaN or +-inf."""
    if is_traced(value):
        return
    arr = np.asarray(value)
    bad = int(arr.size - np.count_nonzero(np.isfinite(arr)))
    if bad:
        raise ValueError(f"{name}: contains {bad} non-finite value(s) (NaN or inf)")


def check_positive_scalar(name: str, value) -> float:
    """A finite number > 0 (e.g. a noise scale)."""
    if is_traced(value):
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real | np.ndarray | jax.Array):
        raise ValueError(f"{name}: expected a positive number, got {value!r}")
    arr = np.asarray(value)
    if arr.ndim != 0:
        raise ValueError(f"{name}: expected a scalar, got shape {arr.shape}")
    v = float(arr)
    if not np.isfinite(v) or v <= 0:
        raise ValueError(f"{name}: must be a finite number > 0, got {v}")
    return v


def check_positive_int(name: str, value, *, minimum: int = 1) -> int:
    """An integer >= ``minimum`` (bools refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name}: expected an integer >= {minimum}, got {value!r}")
    if int(value) < minimum:
        raise ValueError(f"{name}: must be >= {minimum}, got {int(value)}")
    return int(value)


def as_points(name: str, value, *, allow_empty: bool = False):
    """Observations as ``(N, p)`` plus a flag saying whether they came in as ``(N,)``.

    Returns ``(points, scalar)`` where ``scalar`` is True for 1-D data passed as ``(N,)``;
    callers use it to return results in the caller's own shape convention.
    """
    arr = as_float_array(name, value)
    if arr.ndim not in (1, 2):
        raise ValueError(
            f"{name}: expected shape (N,) for scalar data or (N, p) for p-dimensional data, "
            f"got rank {arr.ndim} with shape {tuple(arr.shape)}"
        )
    if not allow_empty and arr.shape[0] == 0:
        raise ValueError(f"{name}: is empty (N = 0)")
    if arr.ndim == 2 and arr.shape[1] == 0:
        raise ValueError(f"{name}: has zero columns (p = 0)")
    check_finite(name, arr)
    scalar = arr.ndim == 1
    return (arr[:, None] if scalar else arr), scalar


def restore_shape(values, scalar: bool):
    """Undo ``as_points``: drop the trailing coordinate axis of results for scalar data."""
    return values[..., 0] if scalar else values


def check_weights(name: str, value, size: int | None = None):
    """A probability vector: finite, >= 0, summing to 1 (to 1e-5)."""
    arr = as_float_array(name, value)
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a vector of shape (K,), got shape {tuple(arr.shape)}")
    if size is not None and arr.shape[0] != size:
        raise ValueError(f"{name}: expected {size} entries, got {arr.shape[0]}")
    if is_traced(arr):
        return arr
    check_finite(name, arr)
    if np.any(arr < 0):
        raise ValueError(f"{name}: has negative entries")
    total = float(np.sum(arr, dtype=np.float64))
    if abs(total - 1.0) > 1e-5:
        raise ValueError(f"{name}: must sum to 1, sums to {total:.8g}")
    return arr


def check_key(name: str, key):
    """A ``jax.random`` key: a typed key array, or a raw uint32 key of shape (2,)."""
    if isinstance(key, jax.Array) and jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        if key.ndim != 0:
            raise ValueError(f"{name}: expected a single key, got a key array of shape {key.shape}")
        return key
    if is_traced(key):
        return key
    arr = np.asarray(key) if isinstance(key, jax.Array | np.ndarray) else None
    if arr is None or arr.dtype != np.uint32 or arr.shape != (2,):
        raise ValueError(
            f"{name}: expected a jax.random key (jax.random.key(seed) or PRNGKey(seed)), "
            f"got {type(key).__name__}"
            + (f" of dtype {arr.dtype} and shape {arr.shape}" if arr is not None else "")
        )
    return key


def check_bandwidth(name: str, bandwidth, dim: int, dtype):
    """A kernel bandwidth: scalar or (dim,), finite, > 0, with 1/h^2 finite in ``dtype``.

    Returns it broadcast to (dim,) in ``dtype`` (a NumPy array, or a JAX array when traced).
    """
    h = bandwidth if is_traced(bandwidth) else as_float_array(name, bandwidth)
    if h.ndim > 1 or (h.ndim == 1 and h.shape[0] != dim):
        raise ValueError(
            f"{name}: expected a scalar or shape ({dim},) (one per key coordinate), "
            f"got shape {tuple(h.shape)}"
        )
    if is_traced(h):
        return jax.numpy.broadcast_to(h.astype(dtype), (dim,))
    check_finite(name, h)
    if np.any(h <= 0):
        raise ValueError(f"{name}: must be > 0, got {h}")
    with np.errstate(over="ignore", divide="ignore", under="ignore"):
        if not np.all(np.isfinite(np.reciprocal(np.square(h.astype(dtype))))):
            raise ValueError(
                f"{name}: {h} is too small for {np.dtype(dtype).name} (1/h^2 overflows)"
            )
    return np.broadcast_to(h.astype(dtype), (dim,))
