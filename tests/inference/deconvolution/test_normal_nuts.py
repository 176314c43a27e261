"""The normal hierarchical model by NUTS ("normal-nuts") in ``compare_deconvolution``: the same
draws as ``run_nuts`` on ``normal_hierarchical_model`` (eight schools), the closed-form
complete-pooling posterior when tau is pinned near 0, the exact W1 against a normal mixture, and
its settings refused by name before any sampling.

Every NUTS run here has the same shapes (N = 8) and settings, so they share one compiled
program: the priors are arguments of it, not constants."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from eight_schools import SCHOOLS_SIGMA, SCHOOLS_Y
from scipy import integrate, stats

from attnbayes.inference.deconvolution import comparison as comparison_module
from attnbayes.inference.deconvolution.comparison import (
    NORMAL_NUTS_KEY_FOLD,
    compare_deconvolution,
    wasserstein1,
    wasserstein1_normal_mixture,
)
from attnbayes.inference.mcmc import run_nuts
from attnbayes.models import hierarchical
from attnbayes.models.deconvolution import DiscreteMeasure

Y8, S8 = SCHOOLS_Y, SCHOOLS_SIGMA  # ArviZ's centered_eight y and sigma
EIGHT_SCHOOLS_PRIORS = {"mu_loc": 0.0, "mu_scale": 5.0, "tau_scale": 5.0}
SIZES = {"num_warmup": 300, "num_samples": 300}  # 2 chains (the registry's)


def _direct_posterior(key, x, sigma):
    """NUTS run directly on the model, with the method's settings and the eight-schools priors:
    the posterior group of ``run_nuts``'s DataTree."""
    return run_nuts(
        key,
        hierarchical.normal_hierarchical_model,
        (jnp.asarray(x),),
        {"sigma": sigma, **{k: np.asarray(v) for k, v in EIGHT_SCHOOLS_PRIORS.items()}},
        dims=hierarchical.DIMS,
        target_accept_prob=0.9,
        posterior_predictive=False,
        num_chains=2,
        **SIZES,
    )["posterior"]


def test_eight_schools_are_run_nuts_on_the_model_summarised():
    """Identity: the method's draws are ``run_nuts`` on ``normal_hierarchical_model`` with the
    same key (``fold_in(key, NORMAL_NUTS_KEY_FOLD)``), priors and settings; z_hat is the mean
    over draws of E[theta_i | x, mu, tau] = mu + tau^2 / (tau^2 + s_i^2) (x_i - mu), the
    intervals are quantiles of theta, the log-likelihood the marginal N(x_i; mu, tau^2 + s_i^2).
    Loosely against the published posterior (NumPyro's and PyMC's eight-schools examples, the
    same priors): E[mu | y] about 4.4, E[theta_A | y] about 6.2."""
    key = jax.random.PRNGKey(3)
    result = compare_deconvolution(
        key,
        Y8,
        S8,
        methods="normal-nuts",
        z_true=Y8,  # only to get the coverage rows computed
        method_kwargs={"normal-nuts": {**EIGHT_SCHOOLS_PRIORS, **SIZES}},
    )
    fit = result.fits["normal-nuts"]
    direct = _direct_posterior(jax.random.fold_in(key, NORMAL_NUTS_KEY_FOLD), Y8, S8)
    theta = direct["theta"].transpose("chain", "draw", "unit").values
    np.testing.assert_array_equal(
        fit.datatree["posterior"]["z_draw"].transpose("chain", "draw", "unit").values, theta
    )
    mu, tau = direct["mu"].values[..., None], direct["tau"].values[..., None]
    shrunk = mu + tau**2 / (tau**2 + S8**2) * (Y8 - mu)
    np.testing.assert_allclose(fit.z_hat, shrunk.mean((0, 1)), rtol=1e-12)
    flat = theta.reshape(-1, 8)
    np.testing.assert_allclose(fit.intervals[0.9][0], np.quantile(flat, 0.05, 0), rtol=1e-12)
    np.testing.assert_allclose(fit.intervals[0.5][1], np.quantile(flat, 0.75, 0), rtol=1e-12)
    marginal = stats.norm.logpdf(Y8, mu, np.sqrt(tau**2 + S8**2)).sum(-1)
    value = result.table.set_index(["method", "metric"]).value
    assert value["normal-nuts", "log_likelihood"] == pytest.approx(marginal.mean(), rel=1e-12)
    lo, hi = fit.intervals[0.9]
    assert value["normal-nuts", "coverage_90"] == np.mean((lo <= Y8) & (Y8 <= hi))
    assert value["normal-nuts", "mse_z"] == pytest.approx(np.mean((fit.z_hat - Y8) ** 2))
    np.testing.assert_array_equal(fit.normal_prior[0], direct["mu"].values.ravel())
    for metric in ("elpd_loo", "pareto_k_max", "max_rhat_invariant", "min_ess_bulk_invariant"):
        assert np.isfinite(value["normal-nuts", metric]), metric
    assert value["normal-nuts", "max_rhat_invariant"] < 1.05
    assert value["normal-nuts", "divergences"] <= 6  # of 600 draws, non-centred
    # x (N, 1) is the same scalar problem, in x's shape convention
    column = compare_deconvolution(
        key,
        Y8[:, None],
        S8[:, None],
        methods="normal-nuts",
        method_kwargs={"normal-nuts": {**EIGHT_SCHOOLS_PRIORS, **SIZES}},
    ).fits["normal-nuts"]
    np.testing.assert_array_equal(column.z_hat, fit.z_hat[:, None])
    np.testing.assert_array_equal(column.intervals[0.9][1], fit.intervals[0.9][1][:, None])
    # the published posterior, loosely (Monte Carlo error of 600 draws about 0.2)
    assert 3.0 < mu.mean() < 5.8
    assert 4.8 < fit.z_hat[0] < 7.6
    # partial pooling: every school shrunk toward mu
    assert np.all(np.abs(fit.z_hat - mu.mean()) < np.abs(Y8 - mu.mean()))


def test_complete_pooling_closed_form_when_tau_is_pinned_near_zero():
    """tau ~ half-Cauchy(1e-6) pins tau at about 0: theta_i = mu for every unit, whose posterior
    is N(m, V), 1/V = 1/mu_scale^2 + sum_i 1/s_i^2, m = V (mu_loc / mu_scale^2 + sum_i x_i /
    s_i^2). Against it: z_hat, the intervals, the log-likelihood E[sum_i log N(x_i; mu, s_i^2)]
    = sum_i log N(x_i; m, s_i^2) - V sum_i 1 / (2 s_i^2), the held-out lpd log N(x_new; m, V +
    s_new^2) and W1 to a point mass."""
    rng = np.random.default_rng(0)
    s = S8 / 10  # same shapes as the eight schools: the same compiled program
    x = 1.5 + s * rng.normal(size=8)
    s_new = S8[::-1] / 10
    x_new = 1.5 + s_new * rng.normal(size=8)
    mu_loc, mu_scale = 0.0, 5.0
    var = 1 / (1 / mu_scale**2 + np.sum(1 / s**2))
    m = var * (mu_loc / mu_scale**2 + np.sum(x / s**2))
    sd = np.sqrt(var)
    result = compare_deconvolution(
        jax.random.PRNGKey(1),
        x,
        s,
        true_measure=DiscreteMeasure(np.array([m]), np.array([1.0])),
        x_heldout=x_new,
        sigma_heldout=s_new,
        methods=("normal-nuts", "normal-eb"),
        method_kwargs={
            "normal-nuts": {"mu_loc": mu_loc, "mu_scale": mu_scale, "tau_scale": 1e-6, **SIZES}
        },
    )
    fit = result.fits["normal-nuts"]
    value = result.table.set_index(["method", "metric"]).value
    assert np.max(fit.normal_prior[1]) < 1e-2 * sd  # tau pinned
    np.testing.assert_allclose(fit.z_hat, m, atol=0.25 * sd)  # MC error about 0.06 sd
    for prob, (lo, hi) in fit.intervals.items():
        q = stats.norm.ppf((1 + prob) / 2)
        np.testing.assert_allclose(lo, m - q * sd, atol=0.35 * sd)
        np.testing.assert_allclose(hi, m + q * sd, atol=0.35 * sd)
    expected_ll = stats.norm.logpdf(x, m, s).sum() - var * np.sum(1 / (2 * s**2))
    assert value["normal-nuts", "log_likelihood"] == pytest.approx(expected_ll, abs=0.5)
    expected_lpd = stats.norm.logpdf(x_new, m, np.sqrt(var + s_new**2)).mean()
    assert value["normal-nuts", "heldout_lpd"] == pytest.approx(expected_lpd, abs=0.05)
    # W1 to delta(m): E|mu - m| = sd sqrt(2 / pi), and (tau ~ 0) the draws' own W1
    mus = fit.normal_prior[0]
    w1 = value["normal-nuts", "wasserstein1_nu"]
    assert w1 == pytest.approx(wasserstein1(mus, np.full(mus.size, 1 / mus.size), [m], [1.0]))
    assert w1 == pytest.approx(sd * np.sqrt(2 / np.pi), rel=0.2)
    # normal EB's W1: its one fitted prior N(mu_hat, tau_hat^2)
    eb = result.fits["normal-eb"].hyperparameters
    expected = wasserstein1_normal_mixture(
        [eb["location"]], [np.sqrt(eb["prior_variance"])], [m], [1.0]
    )
    assert value["normal-eb", "wasserstein1_nu"] == pytest.approx(expected, rel=1e-12)


def test_two_coordinates_are_two_models_side_by_side():
    """With p = 2 each coordinate is its own eight-schools model (as normal-eb fits one prior per
    coordinate): coordinate c's draws are ``run_nuts`` with ``fold_in(method key, c)``; the
    log-likelihood and the held-out density multiply over coordinates, by brute force over the
    draws (log mean_s prod_c N(x_new,c; mu_sc, tau_sc^2 + s_c^2))."""
    key = jax.random.PRNGKey(5)
    x = np.stack([Y8, Y8[::-1] / 2], 1)
    s = np.stack([S8, S8[::-1] / 2], 1)
    held, held_s = x[:5] + 1.0, s[3:]
    result = compare_deconvolution(
        key,
        x,
        s,
        z_true=x,
        x_heldout=held,
        sigma_heldout=held_s,
        methods="normal-nuts",
        method_kwargs={"normal-nuts": {**EIGHT_SCHOOLS_PRIORS, **SIZES}},
    )
    fit = result.fits["normal-nuts"]
    value = result.table.set_index(["method", "metric"]).value
    assert fit.z_hat.shape == fit.intervals[0.9][0].shape == (8, 2)
    assert fit.normal_prior is None and ("normal-nuts", "wasserstein1_nu") not in value.index
    ll, dens = 0.0, 0.0
    method_key = jax.random.fold_in(key, NORMAL_NUTS_KEY_FOLD)
    for c in range(2):
        post = _direct_posterior(jax.random.fold_in(method_key, c), x[:, c], s[:, c])
        theta = post["theta"].transpose("chain", "draw", "unit").values
        np.testing.assert_array_equal(fit.datatree["posterior"]["z_draw"].values[..., c], theta)
        mu, tau = post["mu"].values.reshape(-1, 1), post["tau"].values.reshape(-1, 1)
        shrunk = mu + tau**2 / (tau**2 + s[:, c] ** 2) * (x[:, c] - mu)
        np.testing.assert_allclose(fit.z_hat[:, c], shrunk.mean(0), rtol=1e-12)
        ll = ll + stats.norm.logpdf(x[:, c], mu, np.sqrt(tau**2 + s[:, c] ** 2)).sum(1)
        dens = dens + stats.norm.logpdf(held[:, c], mu, np.sqrt(tau**2 + held_s[:, c] ** 2))
    assert value["normal-nuts", "log_likelihood"] == pytest.approx(ll.mean(), rel=1e-12)
    lpd = np.log(np.mean(np.exp(dens), 0)).mean()
    assert value["normal-nuts", "heldout_lpd"] == pytest.approx(lpd, rel=1e-10)
    lo, hi = fit.intervals[0.9]
    assert value["normal-nuts", "coverage_90"] == np.mean((lo <= x) & (x <= hi))
    assert np.isfinite(value["normal-nuts", "elpd_loo"])
    assert fit.datatree["log_likelihood"]["x"].dims == ("chain", "draw", "unit")


@pytest.mark.parametrize("seed", [0, 1])
def test_wasserstein1_normal_mixture_against_quadrature(seed):
    """integral |F_mix(t) - G(t)| dt by adaptive quadrature between the atoms and the tails; a
    zero scale is a point mass (the discrete W1)."""
    rng = np.random.default_rng(seed)
    locs, scales = rng.normal(size=5), rng.uniform(0.1, 1.5, size=5)
    atoms, weights = rng.normal(size=4) * 2, rng.dirichlet(np.ones(4))

    def gap(t):
        mix = np.mean(stats.norm.cdf(t, locs, scales))
        return abs(mix - np.sum(weights[atoms <= t]))

    cuts = np.sort(np.concatenate([atoms, [-30.0, 30.0]]))
    expected = sum(
        integrate.quad(gap, a, b, epsabs=1e-13, epsrel=1e-12, limit=200)[0]
        for a, b in itertools.pairwise(cuts)
    )
    got = wasserstein1_normal_mixture(locs, scales, atoms, weights)
    assert got == pytest.approx(expected, rel=1e-9, abs=1e-12)
    point = np.zeros_like(scales)
    assert wasserstein1_normal_mixture(locs, point, atoms, weights) == pytest.approx(
        wasserstein1(locs, np.full(5, 0.2), atoms, weights), rel=1e-12, abs=1e-14
    )


def test_normal_nuts_settings_are_refused_by_name_before_sampling(monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("sampling")

    monkeypatch.setattr(comparison_module, "run_nuts", never)
    key = jax.random.PRNGKey(0)
    for kwargs, pattern in (
        ({"method_kwargs": {"normal-nuts": {"num_atoms": 3}}}, r"^method_kwargs\['normal-nuts'\]"),
        (
            {"method_kwargs": {"normal-nuts": {"tau_scale": -1.0}}},
            r"^method_kwargs\['normal-nuts'\]\['tau_scale'\]",
        ),
        (
            {"method_kwargs": {"normal-nuts": {"mu_loc": np.nan}}},
            r"^method_kwargs\['normal-nuts'\]\['mu_loc'\]",
        ),
        (
            {"method_kwargs": {"normal-nuts": {"centered": "yes"}}},
            r"^method_kwargs\['normal-nuts'\]\['centered'\]",
        ),
        ({"nuts_kwargs": {"num_samples": 2}}, "^num_samples/num_chains: normal-nuts"),
        ({"key": None}, "^key"),
    ):
        call = {"key": key, "x": Y8, "sigma": S8, **kwargs}
        with pytest.raises(ValueError, match=pattern):
            compare_deconvolution(
                call.pop("key"), call.pop("x"), call.pop("sigma"), methods="normal-nuts", **call
            )
