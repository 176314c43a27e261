"""The parameter-learning comparison (MLE, EM, NUTS over theta, Gibbs) and the posterior shift
of the collapsed filters' likelihoods: the table, the held-out score against a direct
computation, the shift at the noise floor where the collapse is exact, and bad input."""

import re

import jax
import numpy as np
import pytest

from attnbayes.inference.switching.learning import (
    GIBBS_FREE,
    compare_switching_learning,
    numpyro_priors,
    posterior_shift,
    sample_theta_posterior,
    study_priors,
    switching_log_likelihood,
)
from attnbayes.models.markov_switching import markov_switching_regression
from attnbayes.models.switching import SwitchingParams, SwitchingPriors, simulate

COMMON_METRICS = {"wall_time_s", "train_log_likelihood", "heldout_lpd_per_step"}
POINT_METRICS = COMMON_METRICS | {"converged", "iterations"}
SAMPLER_METRICS = COMMON_METRICS | {
    "heldout_lpd_plugin_per_step",
    "max_rhat_theta",
    "min_ess_bulk_theta",
    "min_ess_tail_theta",
    "ess_bulk_per_s",
}


def _error_metrics(free):
    return {f"{kind}_{name}" for name in free for kind in ("rmse", "rel_error")}


def _static_model() -> SwitchingParams:
    """M = 2, d = 1, o = 2, F_j = 0: x_t = b_j + noise forgets its past, so GPB1, GPB2 and IMM
    are the exact filter. y_t = [x_t, x_t] + noise, so the scales c_j of Q and r_j of R are
    both identified (the covariance of y_t is c_j q_j 1 1' + r_j R0_j)."""
    return SwitchingParams(
        initial_probs=np.array([2.0 / 3.0, 1.0 / 3.0]),
        transition_matrix=np.array([[0.9, 0.1], [0.2, 0.8]]),
        initial_means=np.array([[-1.0], [1.0]]),
        initial_covs=np.array([[[0.5]], [[0.3]]]),
        dynamics_matrices=np.zeros((2, 1, 1)),
        dynamics_biases=np.array([[-1.0], [1.0]]),
        dynamics_covs=np.array([[[0.5]], [[0.3]]]),
        emission_matrices=np.ones((2, 2, 1)),
        emission_covs=np.stack([0.4 * np.eye(2), 0.2 * np.eye(2)]),
    )


@pytest.fixture(scope="module")
def regression_case():
    """A two-regime Markov-switching regression simulated from known theta: 80 training and
    20 held-out steps, the spec of the training part (its OLS start values) and the truth."""
    rng = np.random.default_rng(20261126)
    truth = {
        "transition_matrix": np.array([[0.9, 0.1], [0.2, 0.8]]),
        "intercepts": np.array([0.0, 2.0]),
        "coefficients": np.array([[1.0], [-0.5]]),
        "variances": np.array([0.25, 1.0]),
    }
    t = 100
    regimes = np.zeros(t, int)
    for k in range(1, t):
        regimes[k] = rng.choice(2, p=truth["transition_matrix"][regimes[k - 1]])
    x = rng.normal(size=t)
    y = (
        truth["intercepts"][regimes]
        + truth["coefficients"][regimes, 0] * x
        + np.sqrt(truth["variances"][regimes]) * rng.normal(size=t)
    )
    spec = markov_switching_regression(y[:80], x[:80])
    return spec, truth, y, x


@pytest.fixture(scope="module")
def regression_comparison(regression_case):
    spec, truth, y, x = regression_case
    return compare_switching_learning(
        jax.random.key(0),
        spec,
        None,
        y[80:, None],
        heldout_inputs=x[80:, None],
        truth=truth,
        methods=("em", "nuts"),
        nuts_kwargs={"num_warmup": 100, "num_samples": 60},
    )


def test_table_has_every_metric_of_every_method(regression_comparison, regression_case):
    spec = regression_case[0]
    out = regression_comparison
    table = out.table
    assert list(table.columns) == ["method", "metric", "value"]
    assert list(dict.fromkeys(table["method"])) == ["em", "nuts"]
    assert out.free == tuple(spec.free)
    assert out.likelihood == "exact"
    errors = _error_metrics(spec.free)
    assert set(table[table["method"] == "em"]["metric"]) == POINT_METRICS | errors
    want = SAMPLER_METRICS | errors | {"divergences"}
    assert set(table[table["method"] == "nuts"]["metric"]) == want
    assert not table.duplicated(["method", "metric"]).any()
    assert np.all(np.isfinite(table["value"]))
    # the point estimates are the fit's theta and the posterior mean of the draws
    np.testing.assert_array_equal(
        out.thetas["em"]["intercepts"], out.results["em"].theta["intercepts"]
    )
    draws = np.asarray(out.results["nuts"]["posterior"]["variances"])
    np.testing.assert_allclose(out.thetas["nuts"]["variances"], draws.mean(axis=(0, 1)))
    # the parameter errors are those of the returned estimates against the truth
    rmse = table.set_index(["method", "metric"])["value"]
    fit = out.results["em"]
    assert rmse[("em", "converged")] == float(fit.converged)
    assert rmse[("em", "iterations")] == len(fit.log_likelihood) - 1
    for method in ("em", "nuts"):
        err = out.thetas[method]["transition_matrix"] - out.truth["transition_matrix"]
        got = rmse[(method, "rmse_transition_matrix")]
        assert got == pytest.approx(np.sqrt(np.mean(err**2)), rel=1e-12)


def test_heldout_score_equals_a_direct_computation(regression_comparison, regression_case):
    """log p(y_test | y_train, theta) = log L(all) - log L(train) by ``switching_log_likelihood``
    on the whole series, for EM's point estimate and, as log mean_s exp(.), over NUTS's draws."""
    spec, _, y, x = regression_case
    whole = markov_switching_regression(y, x)
    out = regression_comparison
    value = out.table.set_index(["method", "metric"])["value"]

    def heldout(theta):
        full = float(switching_log_likelihood(whole, theta, likelihood="exact"))
        return full - float(switching_log_likelihood(spec, theta, likelihood="exact"))

    em_theta = out.results["em"].theta
    want = heldout(em_theta) / 20
    assert value[("em", "heldout_lpd_per_step")] == pytest.approx(want, rel=1e-10)
    train = float(switching_log_likelihood(spec, em_theta, likelihood="exact"))
    assert value[("em", "train_log_likelihood")] == pytest.approx(train, rel=1e-10)
    # the EM fit's own log-likelihood is the same number
    assert train == pytest.approx(float(out.results["em"].log_likelihood[-1]), rel=1e-10)

    posterior = out.results["nuts"]["posterior"]
    flat = {n: np.asarray(posterior[n]).reshape(-1, *posterior[n].shape[2:]) for n in out.free}
    per_draw = np.array(
        [
            heldout(spec.theta | {n: flat[n][s] for n in out.free})
            for s in range(flat["variances"].shape[0])
        ]
    )
    top = per_draw.max()
    mixture = top + np.log(np.mean(np.exp(per_draw - top)))
    assert value[("nuts", "heldout_lpd_per_step")] == pytest.approx(mixture / 20, rel=1e-10)
    plugin = heldout(spec.theta | out.thetas["nuts"]) / 20
    assert value[("nuts", "heldout_lpd_plugin_per_step")] == pytest.approx(plugin, rel=1e-10)


def test_priors_given_to_nuts_are_the_gibbs_sampler_conjugate_laws():
    """``numpyro_priors`` are Dirichlet rows and InverseGamma(shape, rate) scales: their log
    densities equal the closed forms the Gibbs sampler's conditionals are built on."""
    from scipy import stats

    priors = numpyro_priors(study_priors(2), 2)
    assert set(priors) == set(GIBBS_FREE)
    pi = np.array([[0.7, 0.3], [0.15, 0.85]])
    want = sum(
        stats.dirichlet.logpdf(pi[i], [1.0 + 9.0 * (j == i) for j in range(2)]) for i in (0, 1)
    )
    assert float(priors["transition_matrix"].log_prob(pi)) == pytest.approx(want, rel=1e-12)
    c = np.array([0.4, 2.5])
    want = stats.invgamma.logpdf(c, 3.0, scale=2.0).sum()
    for name in ("dynamics_cov_scale", "emission_cov_scale"):
        assert float(priors[name].log_prob(c)) == pytest.approx(want, rel=1e-12)


def test_bad_input_is_refused_naming_the_argument(regression_case):
    spec, truth, y, x = regression_case
    params = _static_model()
    _, _, obs = simulate(jax.random.key(0), params, 30)
    obs = np.asarray(obs)
    key = jax.random.key(0)

    def refused(pattern, *args, **kwargs):
        with pytest.raises(ValueError, match="^" + re.escape(pattern)):
            compare_switching_learning(*args, **kwargs)

    refused("key:", "not a key", params, obs[:20], obs[20:])
    with pytest.raises(TypeError, match="^mesh: expected a jax.sharding.Mesh"):
        compare_switching_learning(key, params, obs[:20], obs[20:], mesh="cpu")
    refused("model:", key, {"transition_matrix": 1}, obs[:20], obs[20:])
    refused("observations: expected shape (T, 2)", key, params, obs[:20, :1], obs[20:])
    refused("observations: required", key, params, None, obs[20:])
    refused("observations: contains infinite", key, params, np.full((20, 2), np.inf), obs[20:])
    refused("heldout: expected shape (T, 2)", key, params, obs[:20], obs[20:, :1])
    refused("heldout: every value is missing", key, params, obs[:20], np.full((3, 2), np.nan))
    refused("methods: expected distinct names", key, params, obs[:20], obs[20:], methods=["hmc"])
    refused("methods: expected distinct", key, params, obs[:20], obs[20:], methods=["mle", "mle"])
    refused("truth: the SwitchingParams", key, params, obs[:20], obs[20:], truth={})
    refused("free: unknown parameter", key, params, obs[:20], obs[20:], free=["theta"])
    refused("likelihood: expected one of", key, params, obs[:20], obs[20:], likelihood="ukf")
    refused("likelihood: 'exact' enumerates", key, params, obs, obs, likelihood="exact")
    refused(
        "priors.dynamics_cov_scale: required",
        key,
        params,
        obs[:20],
        obs[20:],
        priors=SwitchingPriors(np.ones((2, 2)), None, (3.0, 2.0)),
    )
    refused(
        "priors.transition_concentration: must be > 0",
        key,
        params,
        obs[:20],
        obs[20:],
        priors=SwitchingPriors(-np.ones((2, 2)), (3.0, 2.0), (3.0, 2.0)),
    )
    refused(
        "start: ['dynamics_biases'] are not free",
        key,
        params,
        obs[:20],
        obs[20:],
        start={"dynamics_biases": np.zeros((2, 1))},
    )
    refused(
        "start['dynamics_cov_scale']: outside its support",
        key,
        params,
        obs[:20],
        obs[20:],
        start={"dynamics_cov_scale": -np.ones(2)},
    )
    refused(
        "nuts_kwargs: unknown keyword(s) ['warmup']",
        key,
        params,
        obs[:20],
        obs[20:],
        nuts_kwargs={"warmup": 10},
    )
    refused(
        "nuts_kwargs['num_samples']/nuts_kwargs['num_chains']: 1 chain(s)",
        key,
        params,
        obs[:20],
        obs[20:],
        nuts_kwargs={"num_chains": 1},
    )
    refused("gibbs_kwargs: expected a dict", key, params, obs[:20], obs[20:], gibbs_kwargs=3)
    refused(
        "mle_kwargs: unknown keyword(s) ['free']",
        key,
        params,
        obs[:20],
        obs[20:],
        mle_kwargs={"free": ["transition_matrix"]},
    )
    # an econometric spec: Gibbs does not apply, the held-out inputs are needed
    held = y[80:, None]
    refused(
        "methods: 'gibbs' cannot learn this theta",
        key,
        spec,
        None,
        held,
        heldout_inputs=x[80:, None],
        methods=["gibbs"],
    )
    refused("heldout_inputs: required", key, spec, None, held)
    refused(
        "heldout_inputs: expected shape (20, 1)", key, spec, None, held, heldout_inputs=x[:3, None]
    )
    refused(
        "truth['variances']: outside its support",
        key,
        spec,
        None,
        held,
        heldout_inputs=x[80:, None],
        truth=truth | {"variances": np.array([-1.0, 1.0])},
    )
    refused(
        "inputs: pass them with observations",
        key,
        spec,
        None,
        held,
        heldout_inputs=x[80:, None],
        inputs=x[:80, None],
    )

    def shift_refused(pattern, *args, **kwargs):
        with pytest.raises(ValueError, match="^" + re.escape(pattern)):
            posterior_shift(*args, **kwargs)

    with pytest.raises(ValueError, match=r"^method: expected one of"):
        sample_theta_posterior(key, params, obs[:8], method="kalman")
    with pytest.raises(ValueError, match=r"^method: 'exact' enumerates"):
        sample_theta_posterior(key, params, obs, method="exact")
    shift_refused("reference: expected one of", key, params, obs, reference="smoother")
    shift_refused("methods: 'exact' is the reference", key, params, obs[:8], methods=["exact"])
    shift_refused("methods: expected distinct names", key, params, obs[:8], methods=["kalman"])
    shift_refused("reference: 'exact' enumerates", key, params, obs)
    shift_refused(
        "methods: 'exact' enumerates", key, params, obs, methods=["exact"], reference="gibbs"
    )
    shift_refused("reference: 'gibbs' cannot sample this theta", key, spec, reference="gibbs")
    shift_refused(
        "gibbs_kwargs['num_samples']/gibbs_kwargs['num_chains']: 1 chain(s)",
        key,
        params,
        obs[:8],
        methods=["gibbs"],
        gibbs_kwargs={"num_chains": 1},
    )


@pytest.mark.slow
def test_state_space_comparison_learns_theta_and_the_samplers_agree():
    """On the F = 0 model (every filter exact), MLE, EM, NUTS over theta (IMM likelihood) and
    Gibbs (the default methods) learn Pi, c and r from 150 steps; EM does not pass the MLE's
    log-likelihood; the two samplers target the same posterior, so their posterior means agree
    within 5 Monte Carlo standard errors; the held-out score of each point estimate is the
    direct log L(all) - log L(train)."""
    import arviz_stats

    params = _static_model()
    _, _, y = simulate(jax.random.key(3), params, 180)
    y = np.asarray(y)
    out = compare_switching_learning(
        jax.random.key(4),
        params,
        y[:150],
        y[150:],
        nuts_kwargs={"num_warmup": 500, "num_samples": 1000},
        gibbs_kwargs={"num_warmup": 500, "num_samples": 3000},
    )
    table = out.table
    errors = _error_metrics(GIBBS_FREE)
    assert list(dict.fromkeys(table["method"])) == ["mle", "em", "nuts", "gibbs"]
    for method in ("mle", "em"):
        assert set(table[table["method"] == method]["metric"]) == POINT_METRICS | errors
    assert set(table[table["method"] == "gibbs"]["metric"]) == SAMPLER_METRICS | errors
    value = table.set_index(["method", "metric"])["value"]
    for method in ("nuts", "gibbs"):
        assert value[(method, "max_rhat_theta")] < 1.02, method
    np.testing.assert_array_equal(out.truth["dynamics_cov_scale"], np.ones(2))
    nuts = out.results["nuts"]["posterior"]
    gibbs = out.results["gibbs"]["posterior"]
    for name in GIBBS_FREE:
        a = np.asarray(nuts[name]).reshape(*nuts[name].shape[:2], -1)
        b = np.asarray(gibbs[name]).reshape(*gibbs[name].shape[:2], -1)
        for i in range(a.shape[-1]):
            mcse = np.hypot(float(arviz_stats.mcse(a[..., i])), float(arviz_stats.mcse(b[..., i])))
            diff = abs(a[..., i].mean() - b[..., i].mean())
            assert diff < 5 * mcse, (name, i, diff, mcse)
    # the parameters are learned: every estimate of Pi within 0.1 of the truth
    for method in ("mle", "em", "nuts", "gibbs"):
        assert value[(method, "rmse_transition_matrix")] < 0.1, method
    em_ll, mle_ll = (value[(m, "train_log_likelihood")] for m in ("em", "mle"))
    assert em_ll <= mle_ll + 1e-6
    from attnbayes.models.markov_switching import switching_state_space

    for method in ("mle", "em"):
        theta = dict(switching_state_space(params, y[:150]).theta) | out.thetas[method]
        full = float(switching_log_likelihood(switching_state_space(params, y), theta))
        train = float(switching_log_likelihood(switching_state_space(params, y[:150]), theta))
        want = (full - train) / 30
        assert value[(method, "heldout_lpd_per_step")] == pytest.approx(want, rel=1e-10)
        assert value[(method, "train_log_likelihood")] == pytest.approx(train, rel=1e-10)


@pytest.mark.slow
def test_collapsed_likelihood_posteriors_are_at_the_noise_floor_where_the_collapse_is_exact():
    """F = 0, T = 8 (2^8 histories): NUTS over theta with the GPB2 and IMM likelihoods, and the
    Gibbs sampler, against NUTS with the exact likelihood under the same priors. GPB2 and IMM
    are the exact filter here and Gibbs samples the exact posterior, so every shift of the
    posterior mean is within 4 of its Monte Carlo standard errors, every sd ratio within 4 of
    its own of 1, and every W1 distance no larger than 3 times the largest of the noise floor
    (the exact reference run again with another seed)."""
    params = _static_model()
    _, _, y = simulate(jax.random.key(5), params, 8)
    out = posterior_shift(
        jax.random.key(6),
        params,
        np.asarray(y),
        methods=("gpb2", "imm", "gibbs"),
        reference="exact",
        nuts_kwargs={"num_warmup": 500, "num_samples": 2000},
        gibbs_kwargs={"num_warmup": 1000, "num_samples": 8000},
    )
    table = out.table
    assert set(table["method"]) == {"exact-repeat", "gpb2", "imm", "gibbs"}
    assert len(table) == 4 * 8  # 4 runs x (4 entries of Pi + 2 c + 2 r)
    assert np.all(np.abs(table["shift"]) <= 4 * table["shift_mcse"]), table
    assert np.all(np.abs(table["sd_ratio"] - 1) <= 4 * table["sd_ratio_mcse"]), table
    floor = table[table["method"] == "exact-repeat"]["w1"].max()
    assert np.all(table["w1"] <= 3 * floor), table
    summary = out.summary.set_index("method")
    assert summary["max_rhat"].max() < 1.02
