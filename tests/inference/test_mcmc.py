"""NUTS runner and diagnostics: a conjugate model against its closed form, DataTree layout,
LOO, and recovery of the three-atom measure on permutation-invariant quantities."""

import warnings

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

from attnbayes.inference.diagnostics import diagnostics
from attnbayes.inference.mcmc import (
    MIN_CHAINS,
    MIN_DRAWS_PER_CHAIN,
    MIN_TOTAL_DRAWS_LOO,
    check_sampler_sizes,
    run_nuts,
)
from attnbayes.models.deconvolution import three_atoms

GROUPS = ("posterior", "sample_stats", "log_likelihood", "posterior_predictive", "observed_data")


def normal_mean_model(y=None, *, prior_scale=2.0, noise=1.5, num_points=None):
    mu = numpyro.sample("mu", dist.Normal(0.0, prior_scale))
    with numpyro.plate("obs", num_points if y is None else y.shape[0]):
        numpyro.sample("y", dist.Normal(mu, noise), obs=y)


@pytest.fixture(scope="module")
def conjugate_run():
    y = 1.0 + 1.5 * jax.random.normal(jax.random.PRNGKey(3), (40,))
    # no dims given: they are inferred from the model's plates
    dt = run_nuts(jax.random.PRNGKey(4), normal_mean_model, (y,), num_warmup=400, num_samples=1000)
    return y, dt


def test_run_nuts_matches_conjugate_posterior(conjugate_run):
    y, dt = conjugate_run
    prec = 1 / 2.0**2 + y.shape[0] / 1.5**2
    mean, sd = float(jnp.sum(y) / 1.5**2 / prec), float(prec**-0.5)
    draws = np.asarray(dt["posterior"]["mu"]).ravel()
    ess = float(az.ess(dt, var_names=["mu"])["mu"])
    assert abs(draws.mean() - mean) < 4 * sd / np.sqrt(ess)
    assert abs(draws.std() - sd) < 0.1 * sd


def test_run_nuts_datatree_layout(conjugate_run):
    y, dt = conjugate_run
    for group in GROUPS:
        assert group in dt.children, group
    assert dt["posterior"].sizes["chain"] == 2 and dt["posterior"].sizes["draw"] == 1000
    assert dt["log_likelihood"]["y"].dims == ("chain", "draw", "obs")
    np.testing.assert_array_equal(dt["observed_data"]["y"], y)
    pp = np.asarray(dt["posterior_predictive"]["y"])
    assert pp.shape == (2, 1000, 40)
    # posterior predictive draws are fresh data, not copies of the observations
    assert not np.allclose(pp[0, 0], y)
    assert abs(pp.std() - np.sqrt(1.5**2 + dt["posterior"]["mu"].var())) < 0.1
    for stat in ("diverging", "energy", "lp", "step_size", "n_steps", "tree_depth"):
        assert stat in dt["sample_stats"], stat
    assert dt["posterior"].attrs["sampling_time"] > 0
    expected = "parallel" if jax.local_device_count() >= 2 else "sequential"
    assert dt["posterior"].attrs["chain_method"] == expected
    loo = az.loo(dt)
    assert np.isfinite(loo.elpd)


def test_run_nuts_without_posterior_predictive(conjugate_run):
    """Same key and settings without the predictive: identical draws, no predictive group."""
    y, dt = conjugate_run
    lean = run_nuts(
        jax.random.PRNGKey(4),
        normal_mean_model,
        (y,),
        num_warmup=400,
        num_samples=1000,
        posterior_predictive=False,
    )
    assert "posterior_predictive" not in lean.children
    np.testing.assert_array_equal(lean["posterior"]["mu"], dt["posterior"]["mu"])
    np.testing.assert_allclose(lean["log_likelihood"]["y"], dt["log_likelihood"]["y"])


def test_run_nuts_rejects_bad_settings():
    with pytest.raises(ValueError, match="^num_samples"):
        run_nuts(jax.random.PRNGKey(0), normal_mean_model, (), {"num_points": 3}, num_samples=0)
    with pytest.raises(ValueError, match="^chain_method"):
        run_nuts(
            jax.random.PRNGKey(0), normal_mean_model, (), {"num_points": 3}, chain_method="bogus"
        )
    with pytest.raises(ValueError, match="^target_accept_prob"):
        run_nuts(
            jax.random.PRNGKey(0), normal_mean_model, (), {"num_points": 3}, target_accept_prob=1.0
        )
    with pytest.raises(ValueError, match="^target_accept_prob"):
        run_nuts(
            jax.random.PRNGKey(0), normal_mean_model, (), {"num_points": 3}, target_accept_prob="x"
        )
    with pytest.raises(ValueError, match="^key"):
        run_nuts(None, normal_mean_model, (), {"num_points": 3})
    with pytest.raises(ValueError, match="^key"):
        run_nuts(0, normal_mean_model, (), {"num_points": 3})


def model_with_a_setting_name(y, num_samples):
    """A model whose keyword argument shares its name with a sampler setting."""
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    numpyro.sample("y", dist.Normal(mu, 1.0).expand([num_samples]), obs=y)


def test_model_arguments_are_apart_from_the_sampler_settings():
    """A model argument named like a setting reaches the model; the setting the sampler."""
    y = np.linspace(-1.0, 1.0, 7)
    tree = run_nuts(
        jax.random.PRNGKey(1),
        model_with_a_setting_name,
        (y,),
        {"num_samples": 7},
        num_warmup=50,
        num_samples=20,
        num_chains=1,
    )
    assert tree["posterior"]["mu"].shape == (1, 20)
    assert tree["observed_data"]["y"].shape == (7,)


@pytest.mark.parametrize(
    ("model_args", "model_kwargs", "pattern"),
    [
        (np.ones(3), None, "^model_args: expected a tuple"),
        ((np.ones(3),), [("num_samples", 3)], "^model_kwargs: expected a dict"),
        ((np.ones(3),), {1: 3}, "^model_kwargs: expected a dict"),
    ],
)
def test_model_arguments_are_checked(model_args, model_kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        run_nuts(jax.random.PRNGKey(0), model_with_a_setting_name, model_args, model_kwargs)


def test_diagnostics_against_arviz_and_constants():
    rng = np.random.default_rng(0)
    mixed = rng.normal(size=(4, 500, 3))
    stuck = rng.normal(size=(4, 500)) + np.arange(4)[:, None] * 3.0  # chains disagree
    const = np.zeros((4, 500, 2))
    const[..., 1] = rng.normal(size=(4, 500))
    dt = az.from_dict(
        {
            "posterior": {"a": mixed, "b": stuck, "c": const},
            "sample_stats": {"diverging": rng.uniform(size=(4, 500)) < 0.01},
        }
    )
    d = diagnostics(dt)
    assert d.num_constant == 1  # c[0]
    assert len(d.table) == 3 + 1 + 1
    np.testing.assert_allclose(
        d.table.loc[["a[0]", "a[1]", "a[2]"], "r_hat"], np.asarray(az.rhat(dt, var_names="a")["a"])
    )
    assert d.table.loc["b", "r_hat"] > 1.5
    assert d.max_r_hat == d.table.loc["b", "r_hat"]
    assert d.table.loc["a[0]", "r_hat"] < 1.01
    assert d.num_divergences == int(np.asarray(dt["sample_stats"]["diverging"]).sum())
    assert (d.num_chains, d.num_draws) == (4, 500)
    with pytest.raises(ValueError, match="^var_names"):
        diagnostics(dt, var_names=["nope"])
    with pytest.raises(ValueError, match="^datatree"):
        diagnostics({"posterior": None})


@pytest.mark.slow  # statistical; shares the slow three-atom comparison
def test_nuts_recovers_three_atom_measure(three_atom_comparison):
    """Posterior of the CDF of nu at points between the atoms covers the truth.

    At t = -1 and t = 1.5 the true CDF is 0.5 and 0.8. The posterior mean must lie within
    3 posterior standard deviations of it (posterior consistency at N = 300: the truth is
    a typical value of the posterior), plus 4 Monte Carlo standard errors of the mean.
    """
    dt = three_atom_comparison.fits["nuts"].datatree
    post = dt["posterior"]
    points = post["cdf_point"].values
    truth = three_atoms()
    for t in (-1.0, 1.5):
        j = int(np.argmin(np.abs(points - t)))
        draws = post["nu_cdf"].isel(cdf_point=j)
        true_f = float(np.sum(np.where(truth.atoms <= points[j], truth.weights, 0.0)))
        ess = float(az.ess(draws.to_dataset(name="f"))["f"])
        sd = float(draws.std())
        assert abs(float(draws.mean()) - true_f) < 3 * sd + 4 * sd / np.sqrt(ess), t
    # the ordered atoms themselves: each true atom within 4 posterior sds
    atoms = post["atoms"]
    np.testing.assert_array_less(
        np.abs(atoms.mean(("chain", "draw")).values - np.asarray(truth.atoms)),
        4 * atoms.std(("chain", "draw")).values,
    )


@pytest.mark.slow  # statistical; shares the slow three-atom comparison
def test_nuts_converges_on_invariant_quantities(three_atom_comparison):
    dt = three_atom_comparison.fits["nuts"].datatree
    d = diagnostics(dt, var_names=["z_mean", "nu_cdf", "log_lik_total"])
    assert d.num_divergences == 0
    assert d.max_r_hat < 1.01
    assert d.min_ess_bulk > 400 and d.min_ess_tail > 400
    assert np.isfinite(az.loo(dt).elpd)


def _tree(chains, draws, rng, loo=False):
    groups = {"posterior": {"a": rng.normal(size=(chains, draws))}}
    if loo:
        groups["log_likelihood"] = {"x": rng.normal(size=(chains, draws, 20))}
        groups["observed_data"] = {"x": np.zeros(20)}
    return az.from_dict(groups)


def test_the_size_bounds_are_where_arviz_stops_working():
    """At the smallest accepted sizes R-hat, ESS and PSIS-LOO are finite; one below, ArviZ
    returns NaN or raises (so the bounds are neither too strict nor too loose)."""
    rng = np.random.default_rng(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ok = diagnostics(_tree(MIN_CHAINS, MIN_DRAWS_PER_CHAIN, rng))
        assert np.isfinite(ok.max_r_hat) and np.isfinite(ok.min_ess_bulk)
        assert np.isfinite(ok.min_ess_tail)
        check_sampler_sizes(MIN_DRAWS_PER_CHAIN, MIN_CHAINS)
        assert np.isnan(float(az.rhat(_tree(MIN_CHAINS - 1, 200, rng))["a"]))
        with pytest.raises(ValueError, match="chains"):
            check_sampler_sizes(200, MIN_CHAINS - 1)
        assert np.isnan(float(az.ess(_tree(MIN_CHAINS, MIN_DRAWS_PER_CHAIN - 1, rng))["a"]))
        with pytest.raises(ValueError, match="draws per chain"):
            check_sampler_sizes(MIN_DRAWS_PER_CHAIN - 1, MIN_CHAINS)
        for chains in (2, 5):
            draws = -(-MIN_TOTAL_DRAWS_LOO // chains)
            assert np.isfinite(float(az.loo(_tree(chains, draws, rng, loo=True)).elpd))
            check_sampler_sizes(draws, chains, loo=True)
        with pytest.raises(ValueError, match="n_draws_tail"):
            az.loo(_tree(1, MIN_TOTAL_DRAWS_LOO - 1, rng, loo=True))
        with pytest.raises(ValueError, match="PSIS-LOO"):
            check_sampler_sizes(12, 2, loo=True)
