"""The Markov-switching VAR (``markov_switching_var``, Krolzig's MSIAH-VAR(p)): its likelihood
and smoothed regimes against an enumeration of every regime history (NumPy/SciPy, written
apart from the JAX code), its o = 1 case against statsmodels' ``MarkovRegression`` on the lag,
recovery of simulated parameters by maximum likelihood and EM, its forecast against the
closed-form one-step mean, and NUTS over theta started at the MLE (slow)."""

import functools
import itertools

import jax
import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp
from statsmodels.tsa.regime_switching.markov_regression import MarkovRegression
from statsmodels_cases import FEDFUNDS

from attnbayes.inference.switching.learning import (
    fit_switching,
    forecast_switching,
    smoothed_regime_probabilities,
    switching_log_likelihood,
)
from attnbayes.models.markov_switching import (
    ergodic_probabilities,
    markov_switching_var,
    regime_ordering,
    tvtp_transition_matrices,
)

TRUTH = {
    "transition_matrix": np.array([[0.95, 0.05], [0.1, 0.9]]),
    "intercepts": np.array([[-1.0, 0.5], [1.0, -0.5]]),
    "ar_coefficients": np.array([[[0.5, 0.1], [0.0, 0.3]], [[0.2, -0.1], [0.1, 0.6]]]),
    "covariances": np.array([[[0.5, 0.1], [0.1, 0.3]], [[1.0, -0.3], [-0.3, 0.8]]]),
}


def _simulate(theta, num_steps, seed):
    """An MS-VAR(1) path from the stationary regime law (NumPy)."""
    rng = np.random.default_rng(seed)
    p = theta["transition_matrix"]
    o = theta["intercepts"].shape[1]
    s = rng.choice(len(p), p=np.asarray(ergodic_probabilities(p)))
    y = np.zeros((num_steps, o))
    for t in range(1, num_steps):
        s = rng.choice(len(p), p=p[s])
        mean = theta["intercepts"][s] + theta["ar_coefficients"][s] @ y[t - 1]
        y[t] = rng.multivariate_normal(mean, theta["covariances"][s])
    return y


def _enumerate(theta, y, transitions=None):
    """log p(y_{2:T} | y_1, theta) and P(s_t = j | y) over every regime history of y_{2:T}
    (the first row conditioned on): log p(s) = log pi(s_1) + sum_t log P_t[s_{t-1}, s_t], pi
    the ergodic law of the first step's matrix; log p(y | s) the sum of the Gaussian
    one-step densities. ``transitions``: (T - 1, M, M) per-step matrices (TVTP) or None."""
    obs, lags = y[1:], y[:-1]
    n, m = obs.shape[0], theta["intercepts"].shape[0]
    per_step = (
        np.broadcast_to(theta["transition_matrix"], (n, m, m))
        if transitions is None
        else transitions
    )
    pi = np.linalg.matrix_power(per_step[0].T, 2000)[:, 0]  # the ergodic law of P_1
    dens = np.array(
        [
            [
                stats.multivariate_normal(
                    theta["intercepts"][j] + theta["ar_coefficients"][j] @ lags[t],
                    theta["covariances"][j],
                ).logpdf(obs[t])
                for j in range(m)
            ]
            for t in range(n)
        ]
    )
    histories = np.array(list(itertools.product(range(m), repeat=n)))
    log_joint = np.log(pi[histories[:, 0]]) + dens[0, histories[:, 0]]
    for t in range(1, n):
        log_joint += np.log(per_step[t][histories[:, t - 1], histories[:, t]])
        log_joint += dens[t, histories[:, t]]
    total = logsumexp(log_joint)
    weights = np.exp(log_joint - total)
    smoothed = np.stack([np.bincount(histories[:, t], weights, m) for t in range(n)])
    return total, smoothed


def test_the_likelihood_and_smoothed_regimes_are_those_of_every_history_enumerated():
    y = _simulate(TRUTH, 8, seed=0)
    spec = markov_switching_var(y, 1)
    assert spec.observations.shape == (7, 2) and spec.inputs.shape == (7, 2)
    np.testing.assert_array_equal(spec.inputs, y[:-1])
    total, smoothed = _enumerate(TRUTH, y)
    assert float(switching_log_likelihood(spec, TRUTH, likelihood="exact")) == pytest.approx(
        total, abs=1e-10
    )
    np.testing.assert_allclose(
        smoothed_regime_probabilities(spec, TRUTH, likelihood="exact"), smoothed, atol=1e-10
    )


def test_time_varying_transitions_are_those_of_every_history_enumerated():
    """With TVTP the covariate row t + p gives P into step t (as a regression's exog_tvtp),
    and the first regime has the ergodic law of the first observed step's matrix."""
    y = _simulate(TRUTH, 8, seed=1)
    z = np.column_stack([np.ones(8), np.linspace(-1.0, 1.0, 8)])
    spec = markov_switching_var(y, 1, exog_tvtp=z)
    gamma = np.array([[[2.5, 1.0]], [[-1.5, 2.0]]])
    theta = {k: v for k, v in TRUTH.items() if k != "transition_matrix"}
    theta["transition_coefficients"] = gamma
    per_step = np.asarray(tvtp_transition_matrices(gamma, z[1:]))
    total, smoothed = _enumerate(TRUTH, y, per_step)
    assert float(switching_log_likelihood(spec, theta, likelihood="exact")) == pytest.approx(
        total, abs=1e-10
    )
    np.testing.assert_allclose(
        smoothed_regime_probabilities(spec, theta, likelihood="exact"), smoothed, atol=1e-10
    )


def _statsmodels_params(theta):
    """statsmodels' parameter vector of ``MarkovRegression(y[1:], 2, exog=y[:-1],
    switching_variance=True)`` from an MS-VAR(1) theta of one series."""
    p = theta["transition_matrix"]
    return np.r_[
        p[0, 0],
        p[1, 0],
        theta["intercepts"][:, 0],
        theta["ar_coefficients"][:, 0, 0],
        theta["covariances"][:, 0, 0],
    ]


def test_one_series_is_statsmodels_markov_regression_on_its_lag():
    """For o = 1 the MS-VAR(1) is ``MarkovRegression(y[1:], exog=y[:-1],
    switching_variance=True)``: the same log-likelihood at statsmodels' fitted parameters
    (relabelled by increasing intercept). On the Fed funds rate the default fit goes higher
    than statsmodels' default fit (which stops at -277.10; its random searches end anywhere
    from -258.3 to a variance collapsing to 0, by NumPy's global seed): statsmodels'
    log-likelihood at our estimate is ours, and statsmodels' optimiser started there gains
    nothing (a maximum in its own, unordered, parametrisation). The optimum's
    volatile regime has the lower intercept: a fit over ordered intercepts would stop where
    the two intercepts merge (-226.416), the labelling boundary between the basins."""
    y = FEDFUNDS
    spec = markov_switching_var(y[:, None], 1)
    model = MarkovRegression(y[1:], 2, exog=y[:-1], switching_variance=True)
    res = model.fit(disp=False)
    value = dict(zip(model.param_names, res.params, strict=True))
    order = np.argsort([value["const[0]"], value["const[1]"]])
    p = np.array([[value["p[0->0]"], 0.0], [value["p[1->0]"], 0.0]])
    p[:, 1] = 1.0 - p[:, 0]
    theta = {
        "transition_matrix": p[order][:, order],
        "intercepts": np.array([[value[f"const[{j}]"]] for j in order]),
        "ar_coefficients": np.array([[[value[f"x1[{j}]"]]] for j in order]),
        "covariances": np.array([[[value[f"sigma2[{j}]"]]] for j in order]),
    }
    assert float(switching_log_likelihood(spec, theta, likelihood="exact")) == pytest.approx(
        res.llf, abs=1e-8
    )
    fit = fit_switching(jax.random.key(0), spec)
    best = fit.log_likelihood[-1]
    assert best >= res.llf + 50.0, (best, res.llf)
    ours = _statsmodels_params(fit.theta)
    assert model.loglike(ours) == pytest.approx(best, abs=1e-8)
    again = model.fit(start_params=ours, disp=False, maxiter=500)
    assert again.llf <= best + 1e-6
    assert fit.converged and not fit.on_boundary["intercepts"].any()
    assert fit.theta["intercepts"][0, 0] < fit.theta["intercepts"][1, 0]
    assert fit.theta["covariances"][0, 0, 0] > fit.theta["covariances"][1, 0, 0]


@functools.cache
def _recovery():
    y = _simulate(TRUTH, 500, seed=2)
    spec = markov_switching_var(y, 1)
    return spec, fit_switching(jax.random.key(0), spec)


def test_maximum_likelihood_recovers_simulated_parameters_within_their_standard_errors():
    """T = 500 from TRUTH: every estimate within 4 standard errors of the truth (29 free
    scalars; the z-scores look standard normal: their mean square near 1), regime 0 the
    regime of the lower first intercept."""
    spec, fit = _recovery()
    assert fit.converged and not any(np.any(b) for b in fit.on_boundary.values())
    assert regime_ordering(spec).parameter == "intercepts"
    z = []
    for name in ("intercepts", "ar_coefficients", "covariances"):
        se = np.asarray(fit.stderr[name])
        assert np.all(np.isfinite(se)), name
        z.append(((fit.theta[name] - TRUTH[name]) / se).ravel())
    p = fit.theta["transition_matrix"]
    z.append((p[:, 0] - TRUTH["transition_matrix"][:, 0]) / fit.stderr["transition_matrix"][:, 0])
    z = np.concatenate(z)
    assert np.max(np.abs(z)) < 4.0, z
    assert 0.3 < np.mean(z**2) < 2.0, z


def test_em_reaches_the_maximum_likelihood_optimum():
    spec, fit = _recovery()
    em = fit_switching(jax.random.key(0), spec, method="em", num_starts=1)
    assert em.log_likelihood[-1] == pytest.approx(fit.log_likelihood[-1], abs=1e-3)
    assert np.all(np.diff(em.log_likelihood) > -1e-8)  # EM never goes down


def test_the_forecast_is_the_closed_form_one_step_mixture():
    """One step ahead: E[y_{T+1} | y] = sum_j P(s_{T+1} = j | y) (nu_j + A_j y_T) and the
    regime probabilities are the filtered ones times P, exactly; the Monte Carlo mean agrees
    within 4 of its standard errors."""
    spec, fit = _recovery()
    theta = fit.theta
    fc = forecast_switching(jax.random.key(5), spec, theta, 2, num_draws=20000)
    filtered = smoothed_regime_probabilities(spec, theta, likelihood="exact")[-1]
    ahead = filtered @ theta["transition_matrix"]
    np.testing.assert_allclose(fc.regime_probs[0], ahead, atol=1e-10)
    np.testing.assert_allclose(fc.regime_probs[1], ahead @ theta["transition_matrix"], atol=1e-10)
    last = spec.observations[-1]
    means = theta["intercepts"] + np.einsum("jik,k->ji", theta["ar_coefficients"], last)
    mean = ahead @ means
    se = fc.draws[:, 0].std(axis=0) / np.sqrt(fc.draws.shape[0])
    assert np.all(np.abs(fc.mean[0] - mean) < 4 * se), (fc.mean[0], mean, se)
    assert np.all(fc.lower[-1] < fc.mean) and np.all(fc.mean < fc.upper[-1])


def test_a_var2_forecast_is_the_closed_form_two_step_mixture():
    """MS-VAR(2) of two series at fixed parameters: the lag bookkeeping of the paths (y_T
    then y_{T-1}, each o wide, and the first step's draw entering the second step's first
    lag) against the closed forms
    E[y_{T+1}] = sum_i a_i (nu_i + A1_i y_T + A2_i y_{T-1}) and
    E[y_{T+2}] = sum_ij a_i P_ij (nu_j + A1_j E[y_{T+1} | s_{T+1} = i] + A2_j y_T),
    a the regime probabilities at T + 1 (filtered times P). Within 4 Monte Carlo standard
    errors; applying A2 to y_T at the first step, or A1 to y_{T-1}, moves the means by many."""
    y = _simulate(TRUTH, 120, seed=4)
    spec = markov_switching_var(y, 2)
    a2 = np.array([[[0.1, 0.0], [0.05, -0.1]], [[-0.2, 0.1], [0.0, 0.15]]])
    theta = dict(TRUTH)
    theta["ar_coefficients"] = np.concatenate([TRUTH["ar_coefficients"], a2], axis=2)
    fc = forecast_switching(jax.random.key(7), spec, theta, 2, num_draws=40000)
    p = theta["transition_matrix"]
    ahead = smoothed_regime_probabilities(spec, theta, likelihood="exact")[-1] @ p
    y_t, y_prev = spec.observations[-1], spec.observations[-2]
    a1s, a2s = theta["ar_coefficients"][:, :, :2], theta["ar_coefficients"][:, :, 2:]
    first = theta["intercepts"] + a1s @ y_t + a2s @ y_prev  # (M, o): E[y_{T+1} | s_{T+1} = i]
    second = np.einsum("i,ij,jo->o", ahead, p, theta["intercepts"] + a2s @ y_t) + np.einsum(
        "i,ij,jok,ik->o", ahead, p, a1s, first
    )
    se = fc.draws.std(axis=0) / np.sqrt(fc.draws.shape[0])
    assert np.all(np.abs(fc.mean[0] - ahead @ first) < 4 * se[0]), (fc.mean[0], ahead @ first)
    assert np.all(np.abs(fc.mean[1] - second) < 4 * se[1]), (fc.mean[1], second)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"endog": np.zeros((10, 2, 2))}, "endog: expected a \\(T, o\\) array"),
        ({"endog": np.r_[np.ones((5, 2)), [[np.nan, 1.0]], np.ones((4, 2))]}, "endog"),
        ({"endog": np.random.default_rng(0).normal(size=(8, 2)), "order": 2}, "at least 9 rows"),
        ({"endog": np.random.default_rng(0).normal(size=(5, 2))}, "at least 6 rows"),
        ({"endog": np.zeros((10, 0))}, "endog: expected a \\(T, o\\) array"),
        ({"order": 0}, "order"),
        ({"num_regimes": 0}, "num_regimes"),
        ({"switching_ar": "yes"}, "switching_ar: expected True or False"),
        ({"switching_covariance": 1}, "switching_covariance: expected True or False"),
        ({"exog_tvtp": np.ones((9, 1))}, "exog_tvtp: expected shape \\(40, k_tvtp\\)"),
        ({"endog": np.column_stack([np.arange(40.0), 2 * np.arange(40.0)])}, "collinear"),
    ],
)
def test_bad_input_names_the_argument(kwargs, match):
    rng = np.random.default_rng(0)
    args = {"endog": rng.normal(size=(40, 2)), "order": 1} | kwargs
    with pytest.raises(ValueError, match=match):
        markov_switching_var(**args)


@pytest.mark.slow
def test_nuts_from_the_maximum_likelihood_estimate_agrees_with_it():
    """NUTS over theta (``switching_marginal_model`` under ``default_priors``: the ordered law
    of the first intercepts, inverse-Wishart covariances), both chains started at the MLE:
    R-hat below 1.01 and each posterior mean within 2 posterior standard deviations of the
    MLE (T = 500, weakly informative priors)."""
    import arviz_stats as azs

    from attnbayes.inference.mcmc import run_nuts
    from attnbayes.inference.switching.learning import switching_marginal_model

    spec, fit = _recovery()
    tree = run_nuts(
        jax.random.key(3),
        switching_marginal_model,
        (spec.observations,),
        {"spec": spec, "likelihood": "exact", "inputs": spec.inputs},
        init_values=fit.theta,
        num_warmup=1000,
        num_samples=1000,
    )
    rhat = azs.rhat(tree["posterior"].to_dataset())
    assert all(float(rhat[v].max()) < 1.01 for v in rhat.data_vars), rhat
    post = tree["posterior"]
    for name in ("intercepts", "ar_coefficients", "covariances", "transition_matrix"):
        draws = np.asarray(post[name]).reshape(-1, *np.shape(fit.theta[name]))
        gap = np.abs(draws.mean(axis=0) - fit.theta[name]) / draws.std(axis=0)
        assert np.all(gap < 2.0), (name, gap)
