"""``psis_loo``: vectorised PSIS-LOO equal to ``arviz_stats.loo(..., pointwise=True)``."""

import warnings

import arviz_stats as azs
import numpy as np
import pandas as pd
import pytest
import xarray as xr

from attnbayes.inference.diagnostics.loo import _relative_ess, psis_loo

TOL = {"rtol": 1e-10, "atol": 1e-12}


def ar1(rng, shape, rho=0.6):
    """Autocorrelated standard-normal draws along axis 1 (so r_eff < 1)."""
    z = rng.normal(size=shape)
    for t in range(1, shape[1]):
        z[:, t] = rho * z[:, t - 1] + np.sqrt(1 - rho**2) * z[:, t]
    return z


def normal_tree(num_chains=4, num_draws=500, num_obs=200, seed=0, outlier=None, obs_shape=None):
    """Normal model y_i ~ N(mu, sigma): approximate posterior draws (AR(1) chains) and the
    closed-form pointwise log-likelihood; ``outlier`` moves y_0 that many sds away."""
    rng = np.random.default_rng(seed)
    y = rng.normal(1.0, 2.0, num_obs)
    if outlier is not None:
        y[0] = y.mean() + outlier * y.std()
    shape = (num_chains, num_draws)
    scale = y.std() / np.sqrt(num_obs)
    mu = y.mean() + scale * ar1(rng, shape)
    sigma = y.std() * np.exp(ar1(rng, shape) / np.sqrt(2 * num_obs))
    z = (y - mu[..., None]) / sigma[..., None]
    log_lik = -0.5 * np.log(2 * np.pi) - np.log(sigma)[..., None] - 0.5 * z**2
    obs_shape = obs_shape or (num_obs,)
    obs_dims = ["obs", "coord"][: len(obs_shape)]
    coords = {"obs": np.arange(obs_shape[0]) * 10}
    if len(obs_shape) == 2:
        coords["coord"] = ["x", "y"][: obs_shape[1]]
    return xr.DataTree.from_dict(
        {
            "posterior": xr.Dataset(
                {"mu": (("chain", "draw"), mu), "sigma": (("chain", "draw"), sigma)}
            ),
            "log_likelihood": xr.Dataset(
                {"y": (("chain", "draw", *obs_dims), log_lik.reshape(*shape, *obs_shape))},
                coords=coords,
            ),
        }
    )


def run(fn, *args, **kwargs):
    """fn's result and its UserWarning messages (RuntimeWarnings of arviz_stats' loop dropped)."""
    with warnings.catch_warnings(record=True) as caught, np.errstate(all="ignore"):
        warnings.simplefilter("always")
        result = fn(*args, **kwargs)
    return result, [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


def assert_same_as_arviz(tree, **kwargs):
    got, got_warnings = run(psis_loo, tree, **kwargs)
    want, want_warnings = run(azs.loo, tree, pointwise=True, **kwargs)
    assert type(got) is type(want)
    assert got_warnings == want_warnings
    for field in ("elpd", "se", "p", "good_k"):
        np.testing.assert_allclose(got[field], want[field], **TOL)
    for field in ("n_samples", "n_data_points", "warning", "scale", "approx_posterior"):
        assert got[field] == want[field], field
    for field in ("elpd_i", "pareto_k", "log_weights"):
        assert got[field].dims == want[field].dims, field
        assert got[field].name == want[field].name, field
        xr.testing.assert_allclose(got[field], want[field], **TOL)
        np.testing.assert_allclose(got[field].values, want[field].values, **TOL)
    return got, want


def test_normal_model_equals_arviz():
    got, _ = assert_same_as_arviz(normal_tree())
    assert not got.warning and got.elpd_i.dims == ("obs",) and got.n_samples == 2000


def test_outlier_high_pareto_k_equals_arviz_and_warns():
    got, _ = assert_same_as_arviz(normal_tree(num_draws=250, outlier=8.0, seed=3))
    assert got.warning and float(got.pareto_k.max()) > 0.7
    assert np.isfinite(got.pareto_k).all()


def test_one_chain_equals_arviz():
    tree = normal_tree(num_chains=1, num_draws=1000, seed=1, outlier=5.0)
    assert _relative_ess(tree, 1000) == 1.0
    assert_same_as_arviz(tree)


def test_two_observation_dims_equal_arviz():
    got, _ = assert_same_as_arviz(normal_tree(num_obs=100, obs_shape=(50, 2), seed=2))
    assert got.elpd_i.dims == ("obs", "coord") and got.elpd_i.shape == (50, 2)
    assert got.log_weights.dims == ("obs", "coord", "chain", "draw")


def test_repeated_draws_ties_equal_arviz():
    """Every draw three times (Metropolis rejections): tied ratios in the tail get the same
    smoothed weights as in arviz_stats' sort."""
    tree = normal_tree(num_chains=2, num_draws=600, seed=8, outlier=4.0)
    repeat = {"draw": np.repeat(np.arange(0, 600, 3), 3)}
    for group in ("posterior", "log_likelihood"):
        ds = tree[group].to_dataset().isel(repeat).assign_coords(draw=np.arange(600))
        tree[group] = xr.DataTree(ds)
    assert_same_as_arviz(tree)


def test_given_reff_equals_arviz_and_is_used():
    tree = normal_tree(num_chains=2, num_draws=600, seed=4, outlier=4.0)
    got, _ = assert_same_as_arviz(tree, reff=0.2)
    default, _ = run(psis_loo, tree)
    assert not np.allclose(got.pareto_k.values, default.pareto_k.values)  # M changed


def test_reff_is_arviz_mean_ess_over_all_posterior_elements():
    rng = np.random.default_rng(5)
    shape = (3, 101)  # odd draws: split chains drop the middle one
    posterior = xr.Dataset(
        {
            "a": (("chain", "draw", "i"), ar1(rng, (*shape, 4))),
            "b": (("chain", "draw"), np.ones(shape)),  # constant: ESS = number of draws
            "c": (("chain", "draw"), rng.integers(0, 3, shape)),  # ints, ties
        }
    )
    tree = xr.DataTree.from_dict({"posterior": posterior})
    with np.errstate(all="ignore"):
        ess = azs.ess(tree, method="mean")
    want = np.hstack([ess[v].values.ravel() for v in ess.data_vars]).mean() / 303
    np.testing.assert_allclose(_relative_ess(tree, 303), want, rtol=1e-12)
    nan_values = posterior["a"].values.copy()
    nan_values[0, 5, 1] = np.nan  # one NaN draw: ESS NaN, so r_eff NaN, as arviz
    nan_tree = xr.DataTree.from_dict(
        {"posterior": posterior.assign(a=(("chain", "draw", "i"), nan_values))}
    )
    assert np.isnan(_relative_ess(nan_tree, 303))


def test_nan_reff_from_posterior_equals_arviz():
    tree = normal_tree(num_chains=2, num_draws=400, seed=6)
    posterior = tree["posterior"].to_dataset()
    mu = posterior["mu"].values.copy()
    mu[1, 7] = np.nan  # r_eff NaN: tail length floor(S / 5), as arviz
    tree["posterior"] = xr.DataTree(posterior.assign(mu=(("chain", "draw"), mu)))
    assert np.isnan(_relative_ess(tree, 800))
    assert_same_as_arviz(tree)


def test_compare_table_equals_arviz():
    t1 = normal_tree(seed=7, num_obs=120, num_draws=300)
    t2 = normal_tree(seed=7, num_obs=120, num_draws=300, outlier=6.0)  # a high k
    got, _ = run(
        azs.compare, {"a": run(psis_loo, t1)[0], "b": run(psis_loo, t2)[0]}, round_to="none"
    )
    want, _ = run(azs.compare, {"a": t1, "b": t2}, round_to="none")
    assert 0.0 < want["weight"].min() and want["diag_elpd"].str.contains("k").any()
    pd.testing.assert_index_equal(got.index, want.index)
    pd.testing.assert_index_equal(got.columns, want.columns)
    for column in got.columns:
        if pd.api.types.is_numeric_dtype(want[column]):
            np.testing.assert_allclose(
                got[column].to_numpy(float), want[column].to_numpy(float), equal_nan=True, **TOL
            )
        else:
            assert got[column].tolist() == want[column].tolist(), column


def test_constant_tail_raises_like_arviz():
    tree = normal_tree(num_obs=20)
    log_lik = tree["log_likelihood"].to_dataset()
    log_lik["y"][..., 3] = -1.0  # the likelihood of observation 3 does not depend on theta
    tree["log_likelihood"] = xr.DataTree(log_lik)
    with pytest.raises(ValueError, match="All tail values are the same"):
        run(azs.loo, tree, pointwise=True)
    with pytest.raises(ValueError, match="All tail values are the same"):
        psis_loo(tree)


def test_bad_inputs_raise_value_errors_naming_the_argument():
    tree = normal_tree(num_obs=10, num_draws=100)
    with pytest.raises(ValueError, match="datatree"):
        psis_loo(tree["log_likelihood"].to_dataset())
    with pytest.raises(ValueError, match="datatree.*log_likelihood"):
        psis_loo(xr.DataTree.from_dict({"posterior": tree["posterior"].to_dataset()}))
    two = tree.copy()
    two["log_likelihood"] = xr.DataTree(
        tree["log_likelihood"].to_dataset().assign(z=tree["log_likelihood"]["y"])
    )
    with pytest.raises(ValueError, match="var_name"):
        psis_loo(two)
    assert np.isfinite(run(psis_loo, two, var_name="z")[0].elpd)
    with pytest.raises(ValueError, match="var_name"):
        psis_loo(tree, var_name="nope")
    for reff in (0.0, -1.0, np.nan, [0.5, 0.5], "a"):
        with pytest.raises(ValueError, match="reff"):
            psis_loo(tree, reff=reff)
    no_posterior = xr.DataTree.from_dict({"log_likelihood": tree["log_likelihood"].to_dataset()})
    with pytest.raises(ValueError, match="datatree.*posterior"):
        psis_loo(no_posterior)
    assert np.isfinite(run(psis_loo, no_posterior, reff=1.0)[0].elpd)
    short = normal_tree(num_chains=1, num_draws=20, num_obs=5)  # tail of 4 draws
    with pytest.raises(ValueError, match="datatree.*tail"):
        psis_loo(short)
