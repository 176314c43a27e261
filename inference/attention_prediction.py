"""Attention inside a prediction model: a one-step-ahead forecaster that pools its window.

The note "Attention as a regularised argmax": attention weights are

    p = argmax_{p in simplex} <p, s(x)> - Omega(p),

softmax for Omega the negative Shannon entropy, sparsemax for the Gini regulariser (Martins &
Astudillo 2016), 1.5-entmax for Tsallis (Peters, Niculae & Martins 2019), and the summary of the
data is a learned linear combination of basis functions, its eq. (6),

    s(x) = Phi(x) W + b,

with b the "starting importance" of the positions before the data are seen. Here the attention is
trained end to end with the prediction model it feeds. For a series x and a window of W lags
h_t = (x_{t-1}, ..., x_{t-W}) (position j = 1 the most recent), standardised by the training
part's mean and sd, z = (h_t - loc) / spread:

    s_j = sum_m w_m phi_m(z)_j + b_j,        p = weight_map(s / tau),
    v   = sum_j p_j z_j,                     x_hat_t = loc + spread * (a + c v + d z_1).

Basis functions (``BASIS_NAMES``; z edge-padded, z_{W+1} := z_W):

    value       phi_1(z)_j = z_j                    (attend to high or low values)
    slope       phi_2(z)_j = z_j - z_{j+1}          (rising or falling stretches)
    similarity  phi_3(z)_j = -(z_j - z_1)^2 / 2     (values like the latest one: a Gaussian kernel)
    analog      phi_4(z)_j = -(z_{j+1} - z_1)^2 / 2 (values that followed a state like the latest)

The per-position constant is the prior importance b (canonical basis vectors, as Bahdanau's),
initialised so that the weights before training are the exponential decay
p_j ~ exp(-(j - 1) / decay) under each map (b = tau log p for softmax, tau p for sparsemax,
2 tau sqrt(p) for 1.5-entmax): an exponentially weighted moving average to start from; a
constant common to every position would cancel in the weight map. ``num_basis`` m < 4 keeps
the first m basis functions (m = 0: data-independent weights p = weight_map(b / tau), a learned
convex linear filter). The head starts at a = 0, c = 1, d = 0.

Training (``train_pooling_forecaster``): Adam (optax) on the mean squared one-step error in
standardised units, full batch, one compiled ``lax.scan`` over the steps; loc and spread are
fixed to the training part's mean and sd (ddof = 0) and never updated.

Comparison (``compare_pooling_forecasters``): on one split, the last round(test_fraction n)
values of the series as test targets (their windows may reach back into the training part: true
one-step-ahead forecasts) and every earlier target with a full lag vector for training, the three
pooling forecasters against Nadaraya-Watson regression of x_t on its last few lags (Nadaraya
1964, Watson 1964) at the leave-one-out CV bandwidth (``kernel_regression.select_bandwidth``),
moving averages of the last k values, and least-squares AR(p) (p by AIC unless given).

Errors: public functions check concrete inputs before any tracing and raise a ``ValueError`` whose
message starts with the argument's name. ``pooling_forecast`` is traceable (``jax.jit``,
``jax.vmap``, ``jax.grad`` over params and windows; only static checks run on tracers); the
sparse maps are piecewise smooth, their gradient one-sided where a weight reaches 0.
"""

from __future__ import annotations

import functools
import numbers
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pandas as pd

from ..validation import (
    any_traced,
    as_float_array,
    check_finite,
    check_key,
    check_positive_int,
    check_positive_scalar,
    check_real_scalar,
)
from .attention import WEIGHT_MAPS, entmax15, softmax, sparsemax
from .kernel_regression import nadaraya_watson, select_bandwidth

BASIS_NAMES = ("value", "slope", "similarity", "analog")
NUM_BASIS = len(BASIS_NAMES)
MA_ORDERS = (1, 3, 6, 11)
_MAPS = {"softmax": softmax, "sparsemax": sparsemax, "entmax15": entmax15}

__all__ = [
    "BASIS_NAMES",
    "MA_ORDERS",
    "NUM_BASIS",
    "PoolingComparison",
    "PoolingForecaster",
    "compare_pooling_forecasters",
    "init_pooling_forecaster",
    "make_windows",
    "pooling_basis",
    "pooling_forecast",
    "train_pooling_forecaster",
]


class PoolingForecaster(NamedTuple):
    """Parameters of the attention-pooling forecaster (a pytree).

    Attributes:
        basis_weights: (m,) w, the weights of the first m basis functions, 0 <= m <= 4.
        prior: (W,) b, the learned prior importance of positions 1..W (1 = most recent).
        intercept: () a.  gain: () c, on the pooled value.  skip: () d, on the latest value.
        loc, spread: () standardisation (training mean and sd); not trained.
    """

    basis_weights: jax.Array
    prior: jax.Array
    intercept: jax.Array
    gain: jax.Array
    skip: jax.Array
    loc: jax.Array
    spread: jax.Array


class PoolingComparison(NamedTuple):
    """What ``compare_pooling_forecasters`` returns (dicts keyed by weight map or method).

    Attributes:
        table: DataFrame, one row per method: method, kind, test_rmse, test_mae, train_rmse
            (original units), mean_support (mean number of non-zero weights over the test
            windows; attention rows only, NaN elsewhere).
        predictions: method -> (n_test,) one-step forecasts of the test targets.
        test_targets: (n_test,) the test values; test_index: (n_test,) their positions.
        params: weight map -> ``PoolingForecaster`` after training.
        loss_traces, heldout_traces: weight map -> (num_steps + 1,) standardised MSE on the
            training and the test targets at each step (before the first update ... after
            the last).
        test_weights: weight map -> (n_test, W) the attention weights of each test window.
        mean_weights: weight map -> (W,) their mean over the test windows.
        prior_importance: weight map -> (W,) the learned b.
        initial_prior: weight map -> (W,) b before training (weights: the exponential decay).
        sparsity: weight map -> mean number of non-zero weights over the test windows.
        bandwidth: the NW bandwidth (LOO-CV, standardised units); nw_lags: its number of lags.
        ar_order: p; ar_coefficients: (p + 1,) intercept, then lags 1..p (standardised units).
        fit_seconds: weight map -> wall time of its training call (compilation included).
    """

    table: pd.DataFrame
    predictions: dict
    test_targets: np.ndarray
    test_index: np.ndarray
    params: dict
    loss_traces: dict
    heldout_traces: dict
    test_weights: dict
    mean_weights: dict
    prior_importance: dict
    initial_prior: dict
    sparsity: dict
    bandwidth: float
    nw_lags: int
    ar_order: int
    ar_coefficients: np.ndarray
    fit_seconds: dict


# ----------------------------------------------------------------------------- checks


def _check_weight_map(weight_map) -> str:
    if not isinstance(weight_map, str) or weight_map not in WEIGHT_MAPS:
        raise ValueError(f"weight_map: unknown {weight_map!r}; known: {list(WEIGHT_MAPS)}")
    return weight_map


def _check_series(series) -> np.ndarray:
    """A 1-D finite float array."""
    x = as_float_array("series", series)
    if any_traced(x):
        raise ValueError("series: needs a concrete array (the split and the baselines run eagerly)")
    if x.ndim != 1:
        raise ValueError(f"series: expected a 1-D array, got shape {tuple(x.shape)}")
    check_finite("series", x)
    return np.asarray(x, np.result_type(x.dtype, jnp.zeros(()).dtype))


def _check_fraction(test_fraction, *, allow_zero: bool) -> float:
    f = check_real_scalar("test_fraction", test_fraction, "a fraction in (0, 1)")
    if not (0 <= f < 1) or (f == 0 and not allow_zero):
        bound = "[0, 1)" if allow_zero else "(0, 1)"
        raise ValueError(f"test_fraction: expected a fraction in {bound}, got {f}")
    return f


def _split(x: np.ndarray, test_fraction: float, window: int, first_target: int, *, allow_zero):
    """(n_train, n_test): the last round(f n) values are the test targets.

    Needs window <= first_target <= n_train - 2 (at least two training targets).
    """
    n = x.shape[0]
    n_test = round(test_fraction * n)
    if n_test == 0 and not allow_zero:
        raise ValueError(
            f"test_fraction: {test_fraction} of {n} values leaves no test target (round(f n) = 0)"
        )
    n_train = n - n_test
    if window > n_train - 2:
        raise ValueError(
            f"window: {window} must be smaller than the training length {n_train} by at least "
            f"2 (series of {n} values, {n_test} held out)"
        )
    if first_target > n_train - 2:
        raise ValueError(
            f"series: {n} values with {n_test} held out leave {n_train} for training, too few "
            f"for the {first_target} lags of the baselines (need at least {first_target + 2})"
        )
    if np.ptp(x[:n_train]) == 0:
        raise ValueError("series: the training part is constant (its sd is 0)")
    return n_train, n_test


def _check_window(window) -> int:
    return check_positive_int("window", window)


def _check_num_basis(num_basis) -> int:
    if isinstance(num_basis, bool) or not isinstance(num_basis, numbers.Integral):
        raise ValueError(f"num_basis: expected an integer in [0, {NUM_BASIS}], got {num_basis!r}")
    if not 0 <= num_basis <= NUM_BASIS:
        raise ValueError(f"num_basis: expected an integer in [0, {NUM_BASIS}], got {num_basis}")
    return int(num_basis)


def _check_temperature(temperature):
    return check_positive_scalar("temperature", temperature)


def _check_params(params) -> PoolingForecaster:
    """Field shapes (also on tracers), finite values and spread > 0 (concrete only)."""
    if not isinstance(params, PoolingForecaster):
        raise ValueError(
            f"params: expected a PoolingForecaster, got {type(params).__name__} "
            "(build one with init_pooling_forecaster)"
        )
    leaves = {}
    for name, value in params._asdict().items():
        arr = as_float_array(f"params.{name}", value)
        check_finite(f"params.{name}", arr)
        leaves[name] = arr
    w, b = leaves["basis_weights"], leaves["prior"]
    if w.ndim != 1 or w.shape[0] > NUM_BASIS:
        raise ValueError(
            f"params.basis_weights: expected shape (m,) with m <= {NUM_BASIS}, got {w.shape}"
        )
    if b.ndim != 1 or b.shape[0] == 0:
        raise ValueError(f"params.prior: expected shape (W,) with W >= 1, got {b.shape}")
    for name in ("intercept", "gain", "skip", "loc", "spread"):
        if leaves[name].ndim != 0:
            raise ValueError(f"params.{name}: expected a scalar, got shape {leaves[name].shape}")
    spread = leaves["spread"]
    if not any_traced(spread) and not float(spread) > 0:
        raise ValueError(f"params.spread: must be > 0, got {float(spread)}")
    return PoolingForecaster(**leaves)


# ----------------------------------------------------------------------------- the model


def make_windows(series, window: int):
    """Lag windows and targets: windows[i] = (x_{t-1}, ..., x_{t-W}), targets[i] = x_t, t >= W.

    Returns NumPy arrays ((n - W, W), (n - W,)).
    """
    x = _check_series(series)
    window = _check_window(window)
    if window >= x.shape[0]:
        raise ValueError(f"window: {window} must be smaller than the series length {x.shape[0]}")
    return _lag_matrix(x, window, window), x[window:]


def _lag_matrix(x: np.ndarray, lags: int, first_target: int) -> np.ndarray:
    """(n - first_target, lags): row i holds x_{t-1}, ..., x_{t-lags} for t = first_target + i."""
    t = np.arange(first_target, x.shape[0])
    return x[t[:, None] - 1 - np.arange(lags)[None, :]]


def pooling_basis(z, num_basis: int = NUM_BASIS):
    """phi(z): (..., W, m) basis functions of standardised windows z (..., W) (``BASIS_NAMES``).

    Traceable; no checks (``pooling_forecast`` checks its inputs).
    """
    z = jnp.asarray(z)
    nxt = jnp.concatenate([z[..., 1:], z[..., -1:]], axis=-1)  # z_{j+1}, edge-padded
    latest = z[..., :1]
    phis = (z, z - nxt, -0.5 * (z - latest) ** 2, -0.5 * (nxt - latest) ** 2)
    if num_basis == 0:
        return jnp.zeros((*z.shape, 0), z.dtype)
    return jnp.stack(phis[:num_basis], axis=-1)


def _forecast_std(params: PoolingForecaster, z, weight_map: str, temperature):
    """Standardised forecasts a + c v + d z_1 and weights, for standardised windows (..., W)."""
    m = params.basis_weights.shape[0]
    scores = params.prior + (pooling_basis(z, m) @ params.basis_weights if m else 0.0)
    scores = jnp.broadcast_to(scores, z.shape)  # m = 0: the same weights for every window
    p = _MAPS[weight_map](scores, axis=-1, temperature=temperature)
    pooled = jnp.sum(p * z, axis=-1)
    return params.intercept + params.gain * pooled + params.skip * z[..., 0], p


def _forecast(params: PoolingForecaster, windows, weight_map: str, temperature):
    z = (windows - params.loc) / params.spread
    y, p = _forecast_std(params, z, weight_map, temperature)
    return params.loc + params.spread * y, p


_forecast_jit = jax.jit(_forecast, static_argnames="weight_map")


def pooling_forecast(params: PoolingForecaster, windows, *, weight_map="softmax", temperature=1.0):
    """One-step forecasts x_hat = loc + spread (a + c sum_j p_j z_j + d z_1), z = standardised
    windows, p = weight_map((sum_m w_m phi_m(z) + b) / tau) (see the module docstring).

    Args:
        params: a ``PoolingForecaster`` with prior of shape (W,).
        windows: (W,) or (N, W), raw units, position 0 the most recent value.
        weight_map: "softmax", "sparsemax" or "entmax15".
        temperature: tau > 0.

    Returns:
        (predictions () or (N,), weights (W,) or (N, W)). jit/vmap/grad-able in params and
        windows.
    """
    weight_map = _check_weight_map(weight_map)
    temperature = _check_temperature(temperature)
    params = _check_params(params)
    h = as_float_array("windows", windows)
    if h.ndim not in (1, 2):
        raise ValueError(f"windows: expected shape (W,) or (N, W), got {tuple(h.shape)}")
    if h.shape[-1] != params.prior.shape[0]:
        raise ValueError(
            f"windows: {h.shape[-1]} lags do not match the {params.prior.shape[0]} positions "
            "of params.prior"
        )
    if h.ndim == 2 and h.shape[0] == 0:
        raise ValueError("windows: is empty (N = 0)")
    check_finite("windows", h)
    return _forecast_jit(params, h, weight_map, temperature)


def init_pooling_forecaster(
    window: int,
    num_basis: int = NUM_BASIS,
    *,
    weight_map: str = "softmax",
    temperature=1.0,
    key=None,
    decay=3.0,
    init_scale=0.1,
    loc=0.0,
    spread=1.0,
) -> PoolingForecaster:
    """The starting point: the prior b whose weights weight_map(b / tau) are the exponential
    decay p0_j = exp(-(j - 1) / decay) / Z, i.e. b = tau log p0 (softmax), tau p0 (sparsemax:
    p0 is its own projection), tau 2 sqrt(p0) (1.5-entmax: [s / 2 - 0]_+^2 = p0), so every map
    starts from the same full-support weights; w ~ N(0, init_scale^2) (zeros without a key);
    a = 0, c = 1, d = 0; loc and spread the standardisation of the windows.
    """
    window = _check_window(window)
    num_basis = _check_num_basis(num_basis)
    weight_map = _check_weight_map(weight_map)
    temperature = _check_temperature(temperature)
    decay = check_positive_scalar("decay", decay)
    init_scale = check_real_scalar("init_scale", init_scale, "a number >= 0")
    if not (np.isfinite(init_scale) and init_scale >= 0):
        raise ValueError(f"init_scale: must be a finite number >= 0, got {init_scale}")
    loc = check_real_scalar("loc", loc, "a finite number")
    if not np.isfinite(loc):
        raise ValueError(f"loc: must be finite, got {loc}")
    spread = check_positive_scalar("spread", spread)
    dtype = jnp.zeros(()).dtype
    if key is None:
        w = jnp.zeros(num_basis, dtype)
    else:
        w = init_scale * jax.random.normal(check_key("key", key), (num_basis,), dtype)
    scalar = functools.partial(jnp.asarray, dtype=dtype)
    return PoolingForecaster(
        basis_weights=w,
        prior=jnp.asarray(_initial_prior(window, decay, weight_map, temperature), dtype),
        intercept=scalar(0.0),
        gain=scalar(1.0),
        skip=scalar(0.0),
        loc=scalar(loc),
        spread=scalar(spread),
    )


def _initial_prior(window: int, decay: float, weight_map: str, temperature: float) -> np.ndarray:
    """b with weight_map(b / tau) = p0, p0_j proportional to exp(-(j - 1) / decay)."""
    log_p0 = -np.arange(window) / decay
    log_p0 -= np.log(np.sum(np.exp(log_p0)))
    inverse = {"softmax": log_p0, "sparsemax": np.exp(log_p0), "entmax15": 2 * np.exp(log_p0 / 2)}
    return temperature * inverse[weight_map]


# ----------------------------------------------------------------------------- training


@functools.partial(jax.jit, static_argnames=("weight_map", "num_steps"))
def _fit(
    params, windows, targets, eval_windows, eval_targets, temperature, lr, weight_map, num_steps
):
    """Adam on the standardised MSE; returns (params, (T+1,) train losses, (T+1,) eval losses)."""
    optimiser = optax.adam(lr)

    def loss(p, h, y):
        pred, _ = _forecast(p, h, weight_map, temperature)
        return jnp.mean(((pred - y) / p.spread) ** 2)

    value_and_grad = jax.value_and_grad(loss)

    def step(carry, _):
        p, state = carry
        value, grad = value_and_grad(p, windows, targets)
        grad = grad._replace(loc=jnp.zeros_like(p.loc), spread=jnp.zeros_like(p.spread))
        updates, state = optimiser.update(grad, state, p)
        held = loss(p, eval_windows, eval_targets)
        return (optax.apply_updates(p, updates), state), (value, held)

    (params, _), (train, held) = jax.lax.scan(
        step, (params, optimiser.init(params)), None, length=num_steps
    )
    train = jnp.append(train, loss(params, windows, targets))
    held = jnp.append(held, loss(params, eval_windows, eval_targets))
    return params, train, held


def _check_training(key, weight_map, num_steps, learning_rate, num_basis, temperature, decay):
    return (
        check_key("key", key),
        _check_weight_map(weight_map),
        check_positive_int("num_steps", num_steps),
        check_positive_scalar("learning_rate", learning_rate),
        _check_num_basis(num_basis),
        _check_temperature(temperature),
        check_positive_scalar("decay", decay),
    )


def _train_split(
    x,
    n_train,
    first_target,
    key,
    window,
    weight_map,
    num_steps,
    learning_rate,
    num_basis,
    temperature,
    decay,
    init_scale,
):
    """Fit on targets first_target..n_train-1; evaluate on the rest (or on the training part)."""
    train_part = x[:n_train]
    params = init_pooling_forecaster(
        window,
        num_basis,
        weight_map=weight_map,
        temperature=temperature,
        key=key,
        decay=decay,
        init_scale=init_scale,
        loc=float(np.mean(train_part)),
        spread=float(np.std(train_part)),
    )
    lags = _lag_matrix(x, window, first_target)
    targets = x[first_target:]
    k = n_train - first_target
    held = slice(k, None) if k < targets.shape[0] else slice(0, k)
    out = _fit(
        params,
        lags[:k],
        targets[:k],
        lags[held],
        targets[held],
        temperature,
        learning_rate,
        weight_map,
        num_steps,
    )
    jax.block_until_ready(out)
    return out


def train_pooling_forecaster(
    key,
    series,
    *,
    window: int,
    weight_map: str = "softmax",
    num_steps: int = 1000,
    learning_rate=0.02,
    test_fraction=0.2,
    num_basis: int = NUM_BASIS,
    temperature=1.0,
    decay=3.0,
    init_scale=0.1,
):
    """Train the pooling forecaster end to end: Adam on (1/n) sum_t (x_hat_t - x_t)^2 / sd^2.

    Fits on the targets t = window..n_train-1 of the first n_train = n - round(test_fraction n)
    values (the rest is never used; test_fraction = 0 fits on everything), standardised by
    their mean and sd. One compiled ``lax.scan`` over ``num_steps`` full-batch steps.

    Args:
        key: ``jax.random`` key for the start of the basis weights (N(0, init_scale^2)).
        series: (n,) finite values.
        window: W, the number of lags, 1 <= W < n_train - 1.
        weight_map: "softmax", "sparsemax" or "entmax15".
        num_steps, learning_rate: Adam settings.
        test_fraction: held-out fraction in [0, 1).
        num_basis, temperature, decay, init_scale: see ``init_pooling_forecaster``.

    Returns:
        (params, loss_trace): the trained ``PoolingForecaster`` (raw units in and out) and the
        (num_steps + 1,) standardised training MSE before each step and after the last.
    """
    key, weight_map, num_steps, learning_rate, num_basis, temperature, decay = _check_training(
        key, weight_map, num_steps, learning_rate, num_basis, temperature, decay
    )
    x = _check_series(series)
    f = _check_fraction(test_fraction, allow_zero=True)
    window = _check_window(window)
    n_train, _ = _split(x, f, window, window, allow_zero=True)
    params, train, _ = _train_split(
        x,
        n_train,
        window,
        key,
        window,
        weight_map,
        num_steps,
        learning_rate,
        num_basis,
        temperature,
        decay,
        init_scale,
    )
    return params, train


# ----------------------------------------------------------------------------- baselines


def _metrics(pred, target):
    err = np.asarray(pred, np.float64) - np.asarray(target, np.float64)
    return float(np.sqrt(np.mean(err**2))), float(np.mean(np.abs(err)))


def _ar_fit(lags_std: np.ndarray, targets_std: np.ndarray, order: int | None, max_order: int):
    """Least squares x_t = c + sum_i phi_i x_{t-i}; order by AIC over 1..max_order if None."""

    def fit(p):
        design = np.column_stack([np.ones(len(targets_std)), lags_std[:, :p]])
        coef, *_ = np.linalg.lstsq(design, targets_std, rcond=None)
        rss = float(np.sum((design @ coef - targets_std) ** 2))
        return coef, len(targets_std) * np.log(rss / len(targets_std)) + 2 * (p + 1)

    if order is not None:
        return order, fit(order)[0]
    fits = {p: fit(p) for p in range(1, max_order + 1)}
    best = min(fits, key=lambda p: fits[p][1])
    return best, fits[best][0]


def compare_pooling_forecasters(
    series,
    *,
    window: int,
    test_fraction=0.2,
    seed: int = 0,
    num_steps: int = 1000,
    learning_rate=0.02,
    num_basis: int = NUM_BASIS,
    temperature=1.0,
    decay=3.0,
    init_scale=0.1,
    nw_lags: int = 3,
    ar_order: int | None = None,
    max_ar_order: int = 12,
    ma_orders=MA_ORDERS,
) -> PoolingComparison:
    """Softmax, sparsemax and entmax-1.5 pooling against NW, moving averages and AR(p).

    One split: the last round(test_fraction n) values are the test targets; the training
    targets are t = L..n_train-1 with L = max(window, nw_lags, max MA order, AR orders tried),
    the same for every method. All fits see only x_0..x_{n_train-1}, standardised by its mean
    and sd. NW (Gaussian kernel) of x_t on (x_{t-1}, ..., x_{t-nw_lags}) at the scalar
    leave-one-out CV bandwidth of ``select_bandwidth(method="loo-cv")``; moving averages
    (1/k) sum_{i<=k} x_{t-i}; AR(p) by least squares, p by AIC over 1..max_ar_order (on the
    same targets) unless ``ar_order`` is given. The three pooling forecasters start from the
    same key (``seed``). Train RMSE is in-sample (NW's includes the point itself).

    Returns:
        ``PoolingComparison`` (table, forecasts and the learned weights; see its docstring).
    """
    x = _check_series(series)
    f = _check_fraction(test_fraction, allow_zero=False)
    window = _check_window(window)
    seed = check_positive_int("seed", seed, minimum=0)
    nw_lags = check_positive_int("nw_lags", nw_lags)
    if ar_order is not None:
        ar_order = check_positive_int("ar_order", ar_order)
    max_ar_order = check_positive_int("max_ar_order", max_ar_order)
    if isinstance(ma_orders, int | str) or not len(ma_orders):
        raise ValueError(f"ma_orders: expected a non-empty sequence of integers, got {ma_orders!r}")
    ma_orders = tuple(check_positive_int("ma_orders", k) for k in ma_orders)
    key = jax.random.PRNGKey(seed)
    _, _, num_steps, learning_rate, num_basis, temperature, decay = _check_training(
        key, "softmax", num_steps, learning_rate, num_basis, temperature, decay
    )
    first = max(window, nw_lags, max(ma_orders), ar_order or max_ar_order)
    n_train, _ = _split(x, f, window, first, allow_zero=False)

    loc, spread = float(np.mean(x[:n_train])), float(np.std(x[:n_train]))
    lags = _lag_matrix(x, first, first)
    targets = x[first:]
    k = n_train - first
    test_index = np.arange(n_train, x.shape[0])
    y_train, y_test = targets[:k], targets[k:]
    preds_train, preds_test, rows = {}, {}, []

    def record(method, kind, train_pred, test_pred, support=np.nan):
        preds_train[method], preds_test[method] = np.asarray(train_pred), np.asarray(test_pred)
        test_rmse, test_mae = _metrics(test_pred, y_test)
        rows.append((method, kind, test_rmse, test_mae, _metrics(train_pred, y_train)[0], support))

    out = {name: {} for name in ("params", "train", "held", "weights", "seconds")}
    for weight_map in WEIGHT_MAPS:
        start = time.perf_counter()
        params, train, held = _train_split(
            x,
            n_train,
            first,
            key,
            window,
            weight_map,
            num_steps,
            learning_rate,
            num_basis,
            temperature,
            decay,
            init_scale,
        )
        out["seconds"][weight_map] = time.perf_counter() - start
        pred, weights = _forecast_jit(params, lags[:, :window], weight_map, temperature)
        pred, weights = np.asarray(pred), np.asarray(weights)
        support = float(np.mean(np.sum(weights[k:] > 0, axis=1)))
        record(f"{weight_map} pooling", "attention", pred[:k], pred[k:], support)
        out["params"][weight_map], out["weights"][weight_map] = params, weights[k:]
        out["train"][weight_map], out["held"][weight_map] = np.asarray(train), np.asarray(held)

    z_lags, z_targets = (lags - loc) / spread, (targets - loc) / spread
    keys = z_lags[:, :nw_lags]
    bandwidth = select_bandwidth(keys[:k], z_targets[:k], method="loo-cv").bandwidth
    nw = nadaraya_watson(keys[:k], z_targets[:k], keys, bandwidth=bandwidth)
    nw = loc + spread * np.asarray(nw)
    record(f"nadaraya-watson ({nw_lags} lags, LOO-CV h)", "kernel", nw[:k], nw[k:])

    for order in ma_orders:
        ma = lags[:, :order].mean(axis=1)
        name = "moving average k=1 (last value)" if order == 1 else f"moving average k={order}"
        record(name, "moving average", ma[:k], ma[k:])

    p, coef = _ar_fit(z_lags[:k], z_targets[:k], ar_order, max_ar_order)
    ar = loc + spread * (coef[0] + z_lags[:, :p] @ coef[1:])
    record(
        f"AR({p}) least squares" + (" (AIC)" if ar_order is None else ""), "linear", ar[:k], ar[k:]
    )

    table = pd.DataFrame(
        rows, columns=["method", "kind", "test_rmse", "test_mae", "train_rmse", "mean_support"]
    )
    return PoolingComparison(
        table=table,
        predictions=preds_test,
        test_targets=y_test,
        test_index=test_index,
        params=out["params"],
        loss_traces=out["train"],
        heldout_traces=out["held"],
        test_weights=out["weights"],
        mean_weights={m: w.mean(axis=0) for m, w in out["weights"].items()},
        prior_importance={m: np.asarray(p_.prior) for m, p_ in out["params"].items()},
        initial_prior={m: _initial_prior(window, decay, m, temperature) for m in WEIGHT_MAPS},
        sparsity={m: float(np.mean(np.sum(w > 0, axis=1))) for m, w in out["weights"].items()},
        bandwidth=float(bandwidth),
        nw_lags=nw_lags,
        ar_order=p,
        ar_coefficients=coef,
        fit_seconds=out["seconds"],
    )
