"""Argument checks shared by models and inference, run on concrete values before any tracing.

Each check raises ``ValueError`` (or ``TypeError``) whose message starts with the argument's
name, so a user sees ``x: contains 3 non-finite values`` rather than a traceback from XLA.
Inside a ``jax.jit`` the arguments are tracers; value checks (finiteness, positivity) are then
skipped and only the static shape checks run.

The convention every public function follows: validate once, at its own boundary, on concrete
values; when it receives tracers (``jax.jit``, ``jax.vmap``, ``jax.grad``), run only the
static checks (shapes, ranks, dtypes: ``any_traced`` says when) and never call NumPy on them or
raise on their values; the kernels beneath take checked arrays and check nothing.
"""

from __future__ import annotations

import numbers

import jax
import numpy as np


def is_traced(value) -> bool:
    """True when ``value`` is a JAX tracer (its numbers are unknown until run time)."""
    return isinstance(value, jax.core.Tracer)


def any_traced(*values) -> bool:
    """True when any leaf of ``values`` (arrays or pytrees of them) is a JAX tracer."""
    return any(is_traced(v) for v in jax.tree.leaves(values))


def check_real_scalar(name: str, value, what: str):
    """A real number: a Python or NumPy scalar, or a 0-d array, of integer or floating dtype.

    Concrete values are returned as a float (bools, strings, None and arrays of other shapes
    are refused, naming ``name`` and saying ``what`` was expected); a tracer only has its shape
    and dtype checked (a 0-d real array) and is returned unchanged, for the caller to use
    without any value check.
    """
    if is_traced(value):
        if value.ndim != 0 or not (
            jax.numpy.issubdtype(value.dtype, jax.numpy.integer)
            or jax.numpy.issubdtype(value.dtype, jax.numpy.floating)
        ):
            raise ValueError(f"{name}: expected {what}, got a traced array {value.aval}")
        return value
    if isinstance(value, bool | np.bool_ | str | bytes) or value is None:
        raise ValueError(f"{name}: expected {what}, got {value!r}")
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError):
        raise ValueError(f"{name}: expected {what}, got {value!r}") from None
    if arr.ndim != 0 or not (
        np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)
    ):
        raise ValueError(f"{name}: expected {what}, got {value!r}")
    return float(arr)


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


def as_scale_array(name: str, value):
    """``as_float_array`` for scales, temperatures and standard errors: booleans refused
    (``True`` would read as a scale of 1)."""
    if not is_traced(value) and getattr(value, "dtype", None) is None:
        try:
            value = np.asarray(value)
        except Exception:  # ragged lists and the like: as_float_array names them
            pass
    if getattr(value, "dtype", None) == np.bool_:
        raise ValueError(f"{name}: expected numbers, got booleans")
    return as_float_array(name, value)


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


def check_flag(name: str, value) -> bool:
    """``True`` or ``False`` (NumPy's bools too); anything else is refused, 0 and 1 included."""
    if not isinstance(value, bool | np.bool_):
        raise ValueError(f"{name}: expected True or False, got {value!r}")
    return bool(value)


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
    if isinstance(bandwidth, bool | np.bool_) or (
        isinstance(bandwidth, np.ndarray | jax.Array) and bandwidth.dtype == bool
    ):
        raise ValueError(f"{name}: expected a positive number, got {bandwidth!r}")
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


def check_sigma_range(name: str, sigma, dtype) -> None:
    """Raise unless 1 / sigma^2 is a finite positive number in ``dtype`` (skipped if traced).

    ``sigma`` is a number or an array of them (one noise scale per observation, or per
    observation and coordinate); the error names the first entry out of range.
    """
    if is_traced(sigma):
        return
    with np.errstate(over="ignore", under="ignore", divide="ignore"):
        s = np.asarray(sigma, dtype=dtype)
        beta = np.asarray(1.0, dtype) / (s * s)
    bad = ~(np.isfinite(beta) & (beta > 0))
    if not np.any(bad):
        return
    if s.ndim == 0:
        raise ValueError(
            f"{name}: {float(sigma)} is out of range for {np.dtype(dtype).name} "
            f"(1 / {name}^2 = {beta} is not a finite positive number)"
        )
    index = tuple(int(i) for i in np.argwhere(bad)[0])
    raise ValueError(
        f"{name}: entry {index if len(index) > 1 else index[0]} = "
        f"{float(np.asarray(sigma)[index])} is out of range for {np.dtype(dtype).name} "
        f"(1 / {name}^2 = {beta[index]} is not a finite positive number)"
    )


def max_scaled_spread(dtype, num_points: int, dim: int) -> float:
    """The largest spread D = (max - min) / sigma that Gaussian-kernel scores accept in ``dtype``.

    A squared distance |x_i - mu_k|^2 / sigma^2 over p coordinates is at most p D^2 (D the
    largest per-coordinate spread of the data and atoms, in units of sigma), and a
    log-likelihood adds up N such terms (halved), beside terms of the same size. Requiring
    4 N p D^2 <= finfo(dtype).max keeps every such sum at least a factor 2 below overflow:
    D <= sqrt(finfo.max / (4 N p)), about 6.7e153 / sqrt(N p) in float64 and 9.2e18 / sqrt(N p)
    in float32.
    """
    finfo_max = float(np.finfo(dtype).max)
    return float(np.sqrt(finfo_max / (4.0 * max(int(num_points), 1) * max(int(dim), 1))))


def check_scaled_spread(name: str, points, sigma, dtype, *, others=()) -> None:
    """Raise if the squared distances between ``points`` and atoms overflow ``dtype``.

    ``points`` are the data (N, p); ``others`` are ``(name, (M, p) array)`` pairs of atoms or
    grid points that enter the same distances. The spread is (max - min) per coordinate over
    the data and all of ``others``, in units of ``sigma``, and must not exceed
    ``max_scaled_spread(dtype, N, p)``; with one sigma per observation (an array) the spread is
    measured in units of the smallest, a bound on every scaled distance. The error names the
    data when they alone exceed it, else the first of ``others`` that takes the spread over
    it. Values beyond the range of ``dtype`` (float64 data computed in float32 when
    ``jax_enable_x64`` is off) are refused first. Skipped when any value is traced.
    """
    if any(is_traced(a) for a in (points, sigma, *(arr for _, arr in others))):
        return
    pts = np.asarray(points, dtype=np.float64)
    n, p = pts.shape
    finfo_max = float(np.finfo(dtype).max)
    for label, arr in ((name, pts), *others):
        arr = np.asarray(arr, dtype=np.float64)
        if arr.size and np.max(np.abs(arr)) > finfo_max:
            raise ValueError(
                f"{label}: values up to {np.max(np.abs(arr)):.2g} overflow "
                f"{np.dtype(dtype).name} (enable jax_enable_x64 to compute in float64)"
            )
    limit = max_scaled_spread(dtype, n, p)
    scale = float(np.min(np.asarray(sigma, np.float64)))
    lo, hi = pts.min(axis=0), pts.max(axis=0)
    culprit, label = name, ""
    with np.errstate(over="ignore", invalid="ignore"):
        spread = float(np.max(hi - lo)) / scale
        for other, arr in others:
            if not spread <= limit:
                break
            arr = np.asarray(arr, dtype=np.float64).reshape(-1, p)
            if arr.shape[0]:
                lo, hi = np.minimum(lo, arr.min(axis=0)), np.maximum(hi, arr.max(axis=0))
                spread = float(np.max(hi - lo)) / scale
                culprit, label = other, f" of {name} and {other}"
    if not spread <= limit:
        raise ValueError(
            f"{culprit}: spread (max - min) / sigma{label} = {spread:.2g} exceeds {limit:.2g} "
            f"for {np.dtype(dtype).name} (N = {n}, p = {p}): the squared distances overflow; "
            "rescale the data or sigma"
        )
