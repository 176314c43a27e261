"""Attention inside a prediction model: the pooling forecaster on yearly sunspots.

Checks: exact reductions (uniform scores give the moving average of the window, a one-hot
prior the last value), jax.grad against central differences, traceability (jit, vmap),
end-to-end training lowering the loss (the public trainer and the comparison agree), sparse
weights on the simplex, the Nadaraya-Watson and moving-average baselines against direct calls,
and bad input refused with the argument's name.

One comparison per module (window 12, 200 Adam steps) is shared; the forecasts below reuse its
shapes so its compiled programs are reused. Measured there (test part = the last 62 of the 309
years): held-out standardised MSE goes from about 1.3-1.8 at the start (the exponentially
weighted moving average) to about 0.45-0.6; see benchmarks/attention_prediction.py for the
full table.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import statsmodels.api as sm
from jax.flatten_util import ravel_pytree

from attnbayes.inference.attention_prediction import (
    NUM_BASIS,
    PoolingForecaster,
    compare_pooling_forecasters,
    init_pooling_forecaster,
    make_windows,
    pooling_forecast,
    train_pooling_forecaster,
)
from attnbayes.inference.kernel_regression import nadaraya_watson, select_bandwidth

MAPS = ("softmax", "sparsemax", "entmax15")
WINDOW = 12  # >= every baseline's lags, so the comparison's targets are the trainer's
STEPS = 200


@pytest.fixture(scope="module")
def sunspots():
    return sm.datasets.sunspots.load_pandas().data["SUNACTIVITY"].to_numpy(np.float64)


@pytest.fixture(scope="module")
def comparison(sunspots):
    return compare_pooling_forecasters(sunspots, window=WINDOW, seed=0, num_steps=STEPS)


def _params(window, *, prior, loc=50.0, spread=40.0):
    base = init_pooling_forecaster(window, loc=loc, spread=spread)
    return base._replace(prior=jnp.asarray(prior, jnp.float64))


@pytest.mark.parametrize("weight_map", MAPS)
def test_uniform_scores_give_the_moving_average(sunspots, weight_map):
    windows, _ = make_windows(sunspots, WINDOW)
    params = _params(WINDOW, prior=np.zeros(WINDOW))
    pred, weights = pooling_forecast(params, windows, weight_map=weight_map)
    np.testing.assert_allclose(weights, 1 / WINDOW, rtol=1e-14)
    np.testing.assert_allclose(pred, windows.mean(axis=1), rtol=1e-13, atol=1e-12)


@pytest.mark.parametrize("weight_map", MAPS)
def test_one_hot_prior_gives_the_last_value(sunspots, weight_map):
    windows, _ = make_windows(sunspots, WINDOW)
    params = _params(WINDOW, prior=50.0 * np.eye(WINDOW)[0])
    pred, weights = pooling_forecast(params, windows, weight_map=weight_map)
    np.testing.assert_allclose(pred, windows[:, 0], rtol=1e-13, atol=1e-12)
    if weight_map != "softmax":  # exactly one-hot; softmax off by exp(-50)
        assert np.all(np.asarray(weights)[:, 1:] == 0)


def test_no_basis_functions_gives_data_independent_weights(sunspots):
    windows, _ = make_windows(sunspots[:50], 6)
    params = init_pooling_forecaster(6, 0, weight_map="sparsemax", loc=40.0, spread=30.0)
    pred, weights = pooling_forecast(params, windows, weight_map="sparsemax")
    assert pred.shape == (44,) and weights.shape == (44, 6)
    p0 = np.exp(-np.arange(6) / 3.0) / np.exp(-np.arange(6) / 3.0).sum()
    np.testing.assert_allclose(weights, np.broadcast_to(p0, (44, 6)), rtol=1e-12)
    np.testing.assert_allclose(pred, windows @ p0, rtol=1e-12)


@pytest.mark.parametrize(
    "weight_map", ["softmax", "sparsemax", pytest.param("entmax15", marks=pytest.mark.slow)]
)
def test_gradient_matches_finite_differences(sunspots, weight_map):
    windows, targets = make_windows(sunspots[:50], 6)
    params = init_pooling_forecaster(
        6, weight_map=weight_map, key=jax.random.PRNGKey(3), init_scale=0.5, loc=40.0, spread=30.0
    )
    flat, unravel = ravel_pytree(params)

    def loss(theta):
        pred, _ = pooling_forecast(unravel(theta), windows, weight_map=weight_map)
        return jnp.mean((pred - targets) ** 2)

    grad = jax.jit(jax.grad(loss))(flat)
    theta = np.asarray(flat)
    steps = np.diag(1e-6 * np.maximum(1.0, np.abs(theta)))
    values = jax.jit(jax.vmap(loss))(np.concatenate([theta + steps, theta - steps]))
    fd = (values[: len(theta)] - values[len(theta) :]) / (2 * np.diag(steps))
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-6 * np.abs(fd).max())


def test_forecast_is_jittable_and_vmappable(sunspots):
    windows, _ = make_windows(sunspots[:50], 6)
    params = init_pooling_forecaster(6, key=jax.random.PRNGKey(1), loc=40.0, spread=30.0)
    batched, weights = pooling_forecast(params, windows)
    one = jax.jit(jax.vmap(lambda h: pooling_forecast(params, h)[0]))(windows)
    np.testing.assert_allclose(one, batched, rtol=1e-12)
    single, w0 = pooling_forecast(params, windows[0])
    assert single.shape == () and w0.shape == (6,)
    np.testing.assert_allclose(single, batched[0], rtol=1e-12)
    np.testing.assert_allclose(np.sum(weights, axis=1), 1.0, rtol=1e-12)


def test_training_lowers_the_loss_and_matches_the_public_trainer(sunspots, comparison):
    for weight_map in MAPS:
        train, held = comparison.loss_traces[weight_map], comparison.heldout_traces[weight_map]
        assert train.shape == held.shape == (STEPS + 1,)
        assert train[-1] < 0.5 * train[0], (weight_map, train[0], train[-1])
        assert held[-1] < held[0], (weight_map, held[0], held[-1])
    params, trace = train_pooling_forecaster(
        jax.random.PRNGKey(0), sunspots, window=WINDOW, weight_map="softmax", num_steps=STEPS
    )
    np.testing.assert_allclose(trace, comparison.loss_traces["softmax"], rtol=1e-12)
    for got, want in zip(params, comparison.params["softmax"], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    n_train = len(sunspots) - round(0.2 * len(sunspots))
    np.testing.assert_allclose(params.loc, sunspots[:n_train].mean(), rtol=1e-14)
    np.testing.assert_allclose(params.spread, sunspots[:n_train].std(), rtol=1e-14)


def test_sparse_maps_give_sparse_weights_on_the_simplex(comparison):
    assert comparison.sparsity["softmax"] == WINDOW
    for weight_map in ("sparsemax", "entmax15"):
        w = comparison.test_weights[weight_map]
        assert w.shape == (len(comparison.test_targets), WINDOW)
        assert np.all(w >= 0)
        np.testing.assert_allclose(w.sum(axis=1), 1.0, rtol=1e-12)
        assert np.any(w == 0)
        assert 1 <= comparison.sparsity[weight_map] < WINDOW
        np.testing.assert_allclose(comparison.mean_weights[weight_map], w.mean(axis=0))
        row = comparison.table.set_index("method").loc[f"{weight_map} pooling"]
        assert row.mean_support == comparison.sparsity[weight_map]


def test_baselines_against_direct_calls(sunspots, comparison):
    x, r = sunspots, comparison
    n_train = r.test_index[0]
    assert n_train == len(x) - round(0.2 * len(x)) and r.test_index[-1] == len(x) - 1
    np.testing.assert_array_equal(r.test_targets, x[n_train:])
    loc, spread = x[:n_train].mean(), x[:n_train].std()
    windows, targets = make_windows(x, WINDOW)  # targets t = 12..308, as in the comparison
    z, zt = (windows - loc) / spread, (targets - loc) / spread
    k = n_train - WINDOW
    keys = z[:, : r.nw_lags]
    h = select_bandwidth(keys[:k], zt[:k], method="loo-cv").bandwidth
    assert float(h) == r.bandwidth
    nw = loc + spread * np.asarray(nadaraya_watson(keys[:k], zt[:k], keys, bandwidth=h))
    methods = list(r.table.method)
    name = next(m for m in methods if m.startswith("nadaraya-watson"))
    np.testing.assert_allclose(r.predictions[name], nw[k:], rtol=1e-12)
    np.testing.assert_array_equal(
        r.predictions["moving average k=1 (last value)"], x[n_train - 1 : -1]
    )
    np.testing.assert_allclose(
        r.predictions["moving average k=11"], windows[k:, :11].mean(axis=1), rtol=1e-14
    )
    design = np.column_stack([np.ones(k), z[:k, : r.ar_order]])
    coef = np.linalg.lstsq(design, zt[:k], rcond=None)[0]
    np.testing.assert_allclose(r.ar_coefficients, coef, rtol=1e-10)
    ar = next(m for m in methods if m.startswith("AR("))
    row = r.table.set_index("method").loc[ar]
    rmse = np.sqrt(np.mean((r.predictions[ar] - r.test_targets) ** 2))
    np.testing.assert_allclose(row.test_rmse, rmse, rtol=1e-12)
    assert list(r.table.columns) == [
        "method",
        "kind",
        "test_rmse",
        "test_mae",
        "train_rmse",
        "mean_support",
    ]
    assert len(r.table) == 3 + 1 + 4 + 1
    assert np.all(np.isfinite(r.table[["test_rmse", "test_mae", "train_rmse"]].to_numpy()))
    for weight_map in MAPS:
        np.testing.assert_array_equal(r.prior_importance[weight_map], r.params[weight_map].prior)
        assert r.initial_prior[weight_map].shape == (WINDOW,)


def test_initial_prior_gives_the_exponential_decay_under_each_map():
    from attnbayes.inference.attention import entmax15, softmax, sparsemax

    p0 = np.exp(-np.arange(8) / 3.0)
    p0 /= p0.sum()
    for name, fn in (("softmax", softmax), ("sparsemax", sparsemax), ("entmax15", entmax15)):
        b = init_pooling_forecaster(8, weight_map=name, temperature=0.5).prior
        np.testing.assert_allclose(fn(b, temperature=0.5), p0, rtol=1e-10, atol=1e-15)


SERIES = np.sin(np.arange(80.0))
GOOD = init_pooling_forecaster(6)
RAW_KEY = np.array([0, 0], np.uint32)  # a raw jax.random key, made without running JAX
cmp = functools.partial(compare_pooling_forecasters, SERIES)
trn = functools.partial(train_pooling_forecaster, RAW_KEY, SERIES)
fc = functools.partial(pooling_forecast, GOOD)
ONES = np.ones((3, 6))


@pytest.mark.parametrize(
    ("name", "call"),
    [
        ("series", lambda: compare_pooling_forecasters(np.ones((40, 2)), window=6)),
        ("series", lambda: compare_pooling_forecasters(np.r_[SERIES, np.nan], window=6)),
        ("series", lambda: compare_pooling_forecasters(SERIES[:14], window=6)),
        ("series", lambda: compare_pooling_forecasters(np.ones(80), window=6)),
        ("series", lambda: compare_pooling_forecasters("abc", window=6)),
        ("window", lambda: cmp(window=0)),
        ("window", lambda: cmp(window=2.5)),
        ("window", lambda: cmp(window=64)),
        ("test_fraction", lambda: cmp(window=6, test_fraction=0)),
        ("test_fraction", lambda: cmp(window=6, test_fraction=1)),
        ("test_fraction", lambda: cmp(window=6, test_fraction="a")),
        ("test_fraction", lambda: cmp(window=6, test_fraction=0.001)),
        ("num_steps", lambda: cmp(window=6, num_steps=0)),
        ("num_steps", lambda: cmp(window=6, num_steps=1.5)),
        ("seed", lambda: cmp(window=6, seed=-1)),
        ("nw_lags", lambda: cmp(window=6, nw_lags=0)),
        ("ma_orders", lambda: cmp(window=6, ma_orders=())),
        ("weight_map", lambda: trn(window=6, weight_map="relu")),
        ("key", lambda: train_pooling_forecaster(0, SERIES, window=6)),
        ("learning_rate", lambda: trn(window=6, learning_rate=-1.0)),
        ("window", lambda: trn(window=None)),
        ("test_fraction", lambda: trn(window=6, test_fraction=-0.1)),
        ("weight_map", lambda: fc(ONES, weight_map="argmax")),
        ("windows", lambda: fc(np.ones((3, 5)))),
        ("windows", lambda: fc(np.full((3, 6), np.inf))),
        ("windows", lambda: fc(np.ones((2, 3, 6)))),
        ("temperature", lambda: fc(ONES, temperature=0.0)),
        ("params", lambda: pooling_forecast(tuple(GOOD), ONES)),
        ("params.spread", lambda: pooling_forecast(GOOD._replace(spread=0.0), ONES)),
        ("params.prior", lambda: pooling_forecast(GOOD._replace(prior=np.ones((2, 6))), ONES)),
        ("params.basis_weights", lambda: pooling_forecast(GOOD._replace(basis_weights=ONES), ONES)),
        ("window", lambda: init_pooling_forecaster(0)),
        ("num_basis", lambda: init_pooling_forecaster(6, NUM_BASIS + 1)),
        ("decay", lambda: init_pooling_forecaster(6, decay=0.0)),
        ("weight_map", lambda: init_pooling_forecaster(6, weight_map="max")),
        ("window", lambda: make_windows(SERIES, 80)),
    ],
)
def test_bad_input_names_the_argument(name, call):
    with pytest.raises(ValueError, match=f"^{name}:"):
        call()


def test_params_must_be_a_pooling_forecaster():
    assert isinstance(GOOD, PoolingForecaster)
    assert GOOD.prior.shape == (6,) and GOOD.basis_weights.shape == (NUM_BASIS,)


@pytest.mark.slow
def test_sunspot_comparison_at_the_benchmark_settings(sunspots):
    """Window 20, 1000 steps: every pooling forecaster beats the last value and MA(11)."""
    r = compare_pooling_forecasters(sunspots, window=20, seed=0, num_steps=1000)
    rmse = r.table.set_index("method").test_rmse
    for weight_map in MAPS:
        assert rmse[f"{weight_map} pooling"] < rmse["moving average k=1 (last value)"]
        assert rmse[f"{weight_map} pooling"] < rmse["moving average k=11"]
