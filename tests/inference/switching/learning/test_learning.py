"""Learning switching models: likelihoods, MLE and EM against statsmodels' Markov-switching
models (a trusted peer, run here), and the structure of the constructors."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import statsmodels.api as sm
from scipy import optimize, stats

from attnbayes.inference.switching import imm_filter
from attnbayes.inference.switching.kalman import check_inputs
from attnbayes.inference.switching.learning import (
    expected_durations,
    fit_switching,
    forecast_switching,
    hamilton_filter,
    information_criteria,
    smoothed_regime_probabilities,
    switching_log_likelihood,
)
from attnbayes.models.markov_switching import (
    build_params,
    ergodic_probabilities,
    markov_switching_ar,
    markov_switching_regression,
    regime_tuples,
    tuple_transition_matrix,
)


@pytest.fixture(scope="module")
def gdp():
    """US real GDP growth, 100 diff log, quarterly 1959Q2-2009Q3 (statsmodels' macrodata)."""
    data = sm.datasets.macrodata.load_pandas().data
    return 100.0 * np.diff(np.log(data["realgdp"].to_numpy()))


@pytest.fixture(scope="module")
def regression_data():
    rng = np.random.default_rng(12345)
    t = 200
    regimes = np.zeros(t, int)
    trans = np.array([[0.95, 0.05], [0.10, 0.90]])
    for k in range(1, t):
        regimes[k] = rng.choice(2, p=trans[regimes[k - 1]])
    x = rng.normal(size=t)
    mu, beta, sd = np.array([0.0, 2.0]), np.array([1.0, -0.5]), np.array([0.5, 1.5])
    y = mu[regimes] + beta[regimes] * x + sd[regimes] * rng.normal(size=t)
    return y, x


def _row_from(p00, p10):
    return np.array([[p00, 1.0 - p00], [p10, 1.0 - p10]])


def _ar_theta(params, order, switching_variance=False):
    """statsmodels' MarkovAutoregression params -> our theta (k_regimes = 2)."""
    nv = 2 if switching_variance else 1
    return {
        "transition_matrix": _row_from(params[0], params[1]),
        "means": np.asarray(params[2:4]),
        "variances": np.asarray(params[4 : 4 + nv]) if nv == 2 else np.asarray(params[4]),
        "ar_coefficients": np.asarray(params[4 + nv : 4 + nv + order]),
    }


# ----------------------------------------------------------------------------- structure


def test_tuple_chain_is_the_regime_chain_seen_through_p_lags():
    """The tuple transition matrix is stochastic, moves (i0..ip) only to (j0, i0..i_{p-1}),
    and the tuple law it starts from is stationary for it."""
    trans = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4]])
    big = np.asarray(tuple_transition_matrix(trans, 2))
    tup = regime_tuples(3, 2)
    np.testing.assert_allclose(big.sum(axis=1), 1.0, rtol=1e-14)
    for a, b in zip(*np.nonzero(big), strict=True):
        assert tuple(tup[b, 1:]) == tuple(tup[a, :-1])
        assert big[a, b] == trans[tup[a, 0], tup[b, 0]]
    pi = np.asarray(ergodic_probabilities(trans))
    np.testing.assert_allclose(pi @ trans, pi, atol=1e-15)
    spec = markov_switching_ar(np.sin(np.arange(30.0)), 2, num_regimes=3)
    params = build_params(spec.structure, spec.theta | {"transition_matrix": trans})
    init = np.asarray(params.initial_probs)
    np.testing.assert_allclose(init @ big, init, atol=1e-15)
    # the marginal of the current regime is pi
    np.testing.assert_allclose(init.reshape(3, 9).sum(axis=1), pi, atol=1e-15)


# ----------------------------------------------------------------------------- likelihood


def test_log_likelihoods_equal_statsmodels(gdp, regression_data):
    """At statsmodels' parameters (its fit and another point), our log-likelihood of its
    MarkovRegression and MarkovAutoregression equals its loglike to 1e-8: by Hamilton's filter
    ("exact") and by the IMM and GPB2 filters on the state-space form (their collapse is
    exact here)."""
    warnings.simplefilter("ignore")
    y, x = regression_data
    reg = sm.tsa.MarkovRegression(y, k_regimes=2, exog=x, switching_variance=True)
    spec = markov_switching_regression(y, x)
    for prm in (np.array([0.97, 0.07, 0.01, 1.8, 0.96, -0.34, 0.26, 2.6]), reg.start_params):
        theta = {
            "transition_matrix": _row_from(prm[0], prm[1]),
            "intercepts": np.sort(prm[2:4]),
            "coefficients": prm[4:6, None][np.argsort(prm[2:4])],
            "variances": prm[6:8][np.argsort(prm[2:4])],
        }
        if prm[2] > prm[3]:  # relabel: our intercepts are ordered
            theta["transition_matrix"] = theta["transition_matrix"][::-1, ::-1]
        want = reg.loglike(prm)
        for lik in ("exact", "imm"):
            got = float(switching_log_likelihood(spec, theta, likelihood=lik))
            assert abs(got - want) < 1e-8, (lik, got, want)
    for order, switching_variance in ((1, False), (2, False), (1, True)):
        mod = sm.tsa.MarkovAutoregression(
            gdp, k_regimes=2, order=order, switching_ar=False, switching_variance=switching_variance
        )
        spec = markov_switching_ar(gdp, order, switching_variance=switching_variance)
        nv = 2 if switching_variance else 1
        points = [
            np.r_[0.6, 0.05, -0.7, 0.95, [0.5] * nv, [0.25, 0.2][:order]],
            np.r_[0.85, 0.2, 0.1, 1.2, [0.6, 0.4][:nv], [-0.1, 0.3][:order]],
        ]
        for prm in points:
            theta = _ar_theta(prm, order, switching_variance)
            want = mod.loglike(prm)
            lik_names = ("exact", "gpb2") if order == 1 else ("exact",)
            for lik in lik_names:
                got = float(switching_log_likelihood(spec, theta, likelihood=lik))
                assert abs(got - want) < 1e-8, (order, switching_variance, lik, got, want)
    # the filters run on the constructor's params and inputs directly
    res = imm_filter(spec.params, spec.observations, inputs=spec.inputs)
    assert res.mode_probs.shape == (len(gdp) - 1, 4)


def test_gradient_of_the_log_likelihood_matches_finite_differences(gdp):
    """d log L / d theta of MS-AR(2) through the IMM filter (tuple modes with structural
    zeros in the transition matrix) against central differences, in every parameter."""
    spec = markov_switching_ar(gdp[:80], 2)
    theta = _ar_theta(np.r_[0.6, 0.1, -0.5, 0.9, 0.5, 0.25, 0.15], 2)
    obs, u = jnp.asarray(spec.observations), jnp.asarray(spec.inputs)

    def loglik(th):
        return switching_log_likelihood(spec, th, obs, inputs=u, likelihood="imm")

    grad = jax.jit(jax.grad(loglik))(theta)
    value = jax.jit(loglik)
    eps = 1e-6
    for name, g in grad.items():
        assert np.all(np.isfinite(g)), name
        flat = np.asarray(theta[name], float).ravel()
        for i in range(flat.size):
            up, down = flat.copy(), flat.copy()
            up[i] += eps
            down[i] -= eps
            shape = np.shape(theta[name])
            fd = (
                float(value(theta | {name: up.reshape(shape)}))
                - float(value(theta | {name: down.reshape(shape)}))
            ) / (2 * eps)
            np.testing.assert_allclose(np.ravel(g)[i], fd, rtol=1e-5, atol=1e-6, err_msg=name)


# ----------------------------------------------------------------------------- fitting


@pytest.fixture(scope="module")
def msar1_fits(gdp):
    """statsmodels' MS-AR(1) fit (random search, seeded) and ours by MLE and EM."""
    warnings.simplefilter("ignore")
    mod = sm.tsa.MarkovAutoregression(gdp, k_regimes=2, order=1, switching_ar=False)
    ref = mod.fit(search_reps=20, rng=1234)
    spec = markov_switching_ar(gdp, 1)
    mle = fit_switching(jax.random.key(0), spec, likelihood="exact", num_starts=4)
    em = fit_switching(jax.random.key(0), spec, method="em", likelihood="exact", tolerance=1e-12)
    return ref, mle, em


def test_mle_reaches_the_statsmodels_optimum(msar1_fits):
    """Our MLE of Hamilton's MS-AR(1) on GDP growth reaches statsmodels' fitted log-likelihood
    (to 1e-6, at least as high) and its estimates (1e-3 relative); our standard errors agree
    with its Hessian-based ones (5%: both are numerical second derivatives, its by complex
    steps, ours exact by automatic differentiation); AIC/BIC by its definitions."""
    ref, mle, _ = msar1_fits
    assert mle.converged
    assert mle.log_likelihood[-1] >= ref.llf - 1e-6
    assert abs(mle.log_likelihood[-1] - ref.llf) < 1e-4
    ours = np.r_[
        mle.theta["transition_matrix"][0, 0],
        mle.theta["transition_matrix"][1, 0],
        mle.theta["means"],
        mle.theta["variances"],
        mle.theta["ar_coefficients"],
    ]
    np.testing.assert_allclose(ours, ref.params, rtol=1e-3)
    se = np.r_[
        mle.stderr["transition_matrix"][0, 0],
        mle.stderr["transition_matrix"][1, 0],
        mle.stderr["means"],
        mle.stderr["variances"],
        mle.stderr["ar_coefficients"],
    ]
    np.testing.assert_allclose(se, ref.bse, rtol=0.05)
    assert mle.num_parameters == len(ref.params) == 6
    crit = information_criteria(mle)
    assert abs(crit["aic"] - ref.aic) < 1e-3 and abs(crit["bic"] - ref.bic) < 1e-3
    np.testing.assert_allclose(
        expected_durations(mle.theta["transition_matrix"]),
        ref.expected_durations,
        rtol=2e-3,
    )
    assert mle.start_log_likelihoods.shape == (4,)


def test_em_is_monotone_and_reaches_the_mle(msar1_fits):
    """EM with an exact E-step never lowers the likelihood, and ends at the MLE's."""
    _, mle, em = msar1_fits
    trace = em.log_likelihood
    assert len(trace) > 5
    assert np.all(np.diff(trace) >= -1e-9 * np.abs(trace[1:])), np.diff(trace).min()
    assert abs(trace[-1] - mle.log_likelihood[-1]) < 1e-4
    np.testing.assert_allclose(em.theta["means"], mle.theta["means"], rtol=1e-2)


def test_smoothed_regime_probabilities_equal_statsmodels(msar1_fits, gdp):
    ref, mle, _ = msar1_fits
    spec = markov_switching_ar(gdp, 1)
    probs = smoothed_regime_probabilities(spec, mle.theta, likelihood="exact")
    want = np.asarray(ref.model.smooth(ref.params).smoothed_marginal_probabilities)
    assert probs.shape == want.shape == (len(gdp) - 1, 2)
    np.testing.assert_allclose(probs, want, atol=2e-3)


def test_bad_input_to_the_learning_functions(gdp):
    spec = markov_switching_ar(gdp[:40], 1)
    with pytest.raises(ValueError, match="^likelihood: "):
        switching_log_likelihood(spec, likelihood="bogus")
    with pytest.raises(ValueError, match="^likelihood: 'kalman'"):
        switching_log_likelihood(spec, likelihood="kalman")
    with pytest.raises(ValueError, match=r"^theta\['variances'\]: outside its support"):
        switching_log_likelihood(spec, spec.theta | {"variances": np.asarray(-1.0)})
    with pytest.raises(ValueError, match=r"^theta: expected the parameters"):
        switching_log_likelihood(spec, {"means": np.zeros(2)})
    with pytest.raises(ValueError, match="^method: "):
        fit_switching(jax.random.key(0), spec, method="newton")
    with pytest.raises(ValueError, match="^free: unknown"):
        fit_switching(jax.random.key(0), spec, free=["nope"])
    with pytest.raises(ValueError, match="^init: expected a SwitchingSpec"):
        fit_switching(jax.random.key(0), {"a": 1})
    missing = np.full_like(spec.observations, np.nan)
    missing[3] = 0.5  # one observed step: HQIC's log log T is undefined
    with pytest.raises(ValueError, match=r"^observations: 1 observed step\(s\) .* at least 2"):
        fit_switching(jax.random.key(0), spec, missing, inputs=spec.inputs)
    with pytest.raises(ValueError, match="^order: "):
        markov_switching_ar(gdp, 0)
    with pytest.raises(ValueError, match="^num_regimes: "):
        markov_switching_ar(gdp, 1, num_regimes=0)
    with pytest.raises(ValueError, match="^endog: "):
        markov_switching_ar(np.r_[gdp[:10], np.nan], 1)
    with pytest.raises(ValueError, match="^exog: expected shape"):
        markov_switching_regression(gdp, np.ones((5, 1)))


def test_forecasts_match_the_predictive_mixture(msar1_fits, gdp):
    """One step ahead, the MS-AR(1) predictive is the mixture over regime pairs of
    N(mu_j - phi mu_i + phi y_T, sigma^2) with the filtered pair probabilities moved one step:
    the simulated mean and 90% interval match it within Monte Carlo error, and the regime
    probabilities are the filtered ones times Pi^h exactly."""
    _, mle, _ = msar1_fits
    spec = markov_switching_ar(gdp, 1)
    fc = forecast_switching(
        jax.random.key(3), spec, mle.theta, horizon=4, likelihood="exact", num_draws=20000
    )
    params, obs, u = check_inputs(
        build_params(spec.structure, mle.theta), spec.observations, inputs=spec.inputs
    )
    _, filt = hamilton_filter(params, obs, u)
    weights = np.asarray(filt[-1] @ params.transition_matrix)  # over tuples (s_{T+1}, s_T)
    means = np.asarray(
        params.emission_biases[:, 0] + params.emission_input_weights[:, 0, 0] * gdp[-1]
    )
    sd = np.sqrt(np.asarray(params.emission_covs[:, 0, 0]))
    want_mean = weights @ means
    draws = fc.draws[:, 0, 0]
    assert abs(fc.mean[0, 0] - want_mean) < 4 * draws.std() / np.sqrt(draws.size)

    def cdf(q):
        return float(weights @ stats.norm.cdf(q, means, sd))

    lo = optimize.brentq(lambda q: cdf(q) - 0.05, -20, 20)
    hi = optimize.brentq(lambda q: cdf(q) - 0.95, -20, 20)
    np.testing.assert_allclose([fc.lower[1, 0, 0], fc.upper[1, 0, 0]], [lo, hi], atol=0.05)
    trans = mle.theta["transition_matrix"]
    regime_t = np.asarray(filt[-1]).reshape(2, 2).sum(axis=1)
    for h in range(4):
        regime_t = regime_t @ trans
        np.testing.assert_allclose(fc.regime_probs[h], regime_t, rtol=1e-10)
    assert fc.lower.shape == fc.upper.shape == (2, 4, 1)
    assert np.all(fc.lower <= fc.upper)


@pytest.mark.slow
def test_number_of_regimes_by_bic_and_held_out_density(gdp):
    """Candidates M = 1, 2, 3 of MS-AR(1) on GDP growth: the M = 1 fit is statsmodels'
    conditional AR(1) (AutoReg) maximum, the log-likelihood grows with M, and each criterion
    picks its own optimum."""
    from attnbayes.inference.switching.learning import select_num_regimes

    sel = select_num_regimes(
        jax.random.key(0),
        lambda y, m: markov_switching_ar(y, 1, num_regimes=m),
        gdp,
        candidates=(1, 2, 3),
        holdout=40,
    )
    assert abs(sel.log_likelihood[0] - sm.tsa.AutoReg(gdp, 1).fit().llf) < 1e-6
    assert np.all(np.diff(sel.log_likelihood) > 0)
    np.testing.assert_array_equal(sel.num_parameters, [3, 6, 11])
    assert sel.best_bic == sel.num_regimes[np.argmin(sel.bic)]
    assert sel.best_heldout == sel.num_regimes[np.argmax(sel.heldout_log_predictive)]
    assert np.all(np.isfinite(sel.heldout_log_predictive))


# ----------------------------------------------------------------------------- labels, boundary


def _local_level(num_modes: int, dynamics_cov: float = 1.0):
    """A local level model x_t = x_{t-1} + N(0, c Q0), y_t = x_t + N(0, r R0) with M identical
    modes."""
    from attnbayes.models.switching import SwitchingParams

    m = num_modes
    return SwitchingParams(
        initial_probs=np.full(m, 1.0 / m),
        transition_matrix=np.eye(m) if m == 1 else 0.6 * np.eye(m) + 0.4 / m,
        initial_means=np.zeros((m, 1)),
        initial_covs=np.full((m, 1, 1), 100.0),
        dynamics_matrices=np.ones((m, 1, 1)),
        dynamics_biases=np.zeros((m, 1)),
        dynamics_covs=np.full((m, 1, 1), dynamics_cov),
        emission_matrices=np.ones((m, 1, 1)),
        emission_biases=np.zeros((m, 1)),
        emission_covs=np.ones((m, 1, 1)),
        dynamics_input_weights=np.zeros((m, 1, 0)),
        emission_input_weights=np.zeros((m, 1, 0)),
    )


def test_relabelling_exchangeable_modes_is_a_symmetry_and_fits_report_one_labelling():
    """With the modes' fixed fields equal, permuting the labels of theta and the transition
    matrix's rows and columns leaves log L unchanged; a fit's result is put in the suite's
    labelling (increasing emission_cov_scale), standard errors and flags following."""
    from attnbayes.inference.switching.learning.mle import _relabel
    from attnbayes.inference.switching.learning.results import SwitchingFitResult
    from attnbayes.models.markov_switching import relabel_regimes, switching_state_space

    y = np.random.default_rng(3).normal(size=(20, 1)).cumsum(axis=0)
    spec = switching_state_space(_local_level(2), y)
    theta = dict(spec.theta) | {
        "transition_matrix": np.array([[0.7, 0.3], [0.1, 0.9]]),
        "dynamics_cov_scale": np.array([0.3, 1.5]),
        "emission_cov_scale": np.array([2.0, 0.4]),
    }
    swapped = relabel_regimes(spec, theta, [1, 0])
    here = float(switching_log_likelihood(spec, theta))
    np.testing.assert_allclose(float(switching_log_likelihood(spec, swapped)), here, rtol=1e-12)
    stderr = {n: np.full(np.shape(v), np.nan) for n, v in theta.items()}
    stderr["emission_cov_scale"] = np.array([0.2, 0.05])
    flags = {n: np.zeros(np.shape(v), bool) for n, v in theta.items()}
    flags["dynamics_cov_scale"] = np.array([True, False])
    result = SwitchingFitResult(
        build_params(spec.structure, theta), theta, np.array([here]), stderr, flags,
        np.array([here]), 5, 20, True, "mle", "imm", 0.0,
    )  # fmt: skip
    out = _relabel(spec, spec.free, result)
    np.testing.assert_array_equal(out.theta["emission_cov_scale"], [0.4, 2.0])
    np.testing.assert_array_equal(out.theta["transition_matrix"], [[0.9, 0.1], [0.3, 0.7]])
    np.testing.assert_array_equal(out.stderr["emission_cov_scale"], [0.05, 0.2])
    np.testing.assert_array_equal(out.on_boundary["dynamics_cov_scale"], [False, True])
    np.testing.assert_array_equal(out.params.emission_covs[:, 0, 0], [0.4, 2.0])


def test_a_small_scale_in_the_datas_units_is_not_a_boundary():
    """A local level in units where both noise variances are about 1e-7 (rates in decimals)
    against a start of 1: the scales end 1e-7 of their start, yet the log-likelihood is
    curved in log c (information about T / 2), so neither is on the boundary and both have
    standard errors (a size-only rule flagged both and blanked every standard error)."""
    from attnbayes.models.markov_switching import switching_state_space

    rng = np.random.default_rng(2)
    y = 1e-4 * (np.cumsum(3.0 * rng.normal(size=40)) + rng.normal(size=40))[:, None]
    spec = switching_state_space(_local_level(1), y)
    free = ("dynamics_cov_scale", "emission_cov_scale")
    fit = fit_switching(jax.random.key(0), spec, free=free, num_starts=2, likelihood="kalman")
    c, r = fit.theta["dynamics_cov_scale"][0], fit.theta["emission_cov_scale"][0]
    assert 1e-9 < c < 1e-6 and 1e-9 < r < 1e-6 and fit.converged
    assert not fit.on_boundary["dynamics_cov_scale"][0]
    assert not fit.on_boundary["emission_cov_scale"][0]
    assert np.all(
        np.isfinite([fit.stderr["dynamics_cov_scale"][0], fit.stderr["emission_cov_scale"][0]])
    )


def test_mle_on_a_boundary_names_it_and_gives_the_interior_standard_errors():
    """A local level fitted to a constant level plus noise: the process noise scale c goes to
    its boundary 0 (about 1e-11). It is flagged, gets no standard error, and the emission
    scale's standard error is that of the model with c fixed there, 1 / sqrt(-d2 log L / dr2)
    by central differences of the log-likelihood (before, every standard error was NaN)."""
    from attnbayes.models.markov_switching import switching_state_space

    y = 3.0 + np.random.default_rng(1).normal(size=(40, 1))
    spec = switching_state_space(_local_level(1), y)
    free = ("dynamics_cov_scale", "emission_cov_scale")
    fit = fit_switching(jax.random.key(0), spec, free=free, num_starts=2, likelihood="kalman")
    c, r = fit.theta["dynamics_cov_scale"][0], fit.theta["emission_cov_scale"][0]
    assert c < 1e-8 and fit.converged
    assert fit.on_boundary["dynamics_cov_scale"].tolist() == [True]
    assert fit.on_boundary["emission_cov_scale"].tolist() == [False]
    assert np.isnan(fit.stderr["dynamics_cov_scale"][0])

    def loglik(scale):
        theta = fit.theta | {"emission_cov_scale": np.array([scale])}
        return float(switching_log_likelihood(spec, theta, likelihood="kalman"))

    h = 1e-3 * r
    curvature = (loglik(r + h) - 2.0 * loglik(r) + loglik(r - h)) / h**2
    np.testing.assert_allclose(fit.stderr["emission_cov_scale"][0], (-curvature) ** -0.5, rtol=1e-4)


def test_hamilton_filter_keeps_regimes_an_outlier_makes_extremely_unlikely():
    """Hamilton's filter runs in log space: an observation 1,000 sigmas out that an impossible
    regime fits far better (an absorbing regime: P[1, 0] = 0), and on MS-AR(1) two such
    observations in a row (whose regime tuples have structural zeros), leave the
    log-likelihood equal to IMM's (exact on these models) instead of -inf or a finite wrong
    value, as a filter in probability space gives (it loses a probability below 1e-308)."""
    rng = np.random.default_rng(0)
    y = rng.standard_normal(60)
    y[30] = 1e3
    spec = markov_switching_regression(y, num_regimes=2)
    absorbing = dict(spec.theta) | {
        "variances": np.array([100.0, 1.0]),
        "intercepts": np.array([-0.1, 0.1]),
        "transition_matrix": np.array([[0.95, 0.05], [0.0, 1.0]]),
    }
    y = rng.standard_normal(60) - 5.0
    y[29], y[30], y[31] = 0.0, -1000.0, -2109.5
    ar = markov_switching_ar(y, 1, num_regimes=2)
    persistent = dict(ar.theta) | {
        "means": np.array([-5.0, 5.0]),
        "ar_coefficients": np.array([0.9]),
        "variances": np.array(1.0),
        "transition_matrix": np.array([[0.9, 0.1], [0.1, 0.9]]),
    }
    for model, theta in ((spec, absorbing), (ar, persistent)):
        exact = float(switching_log_likelihood(model, theta, likelihood="exact"))
        imm = float(switching_log_likelihood(model, theta, likelihood="imm"))
        assert np.isfinite(exact) and exact == pytest.approx(imm, rel=1e-12)
    params = build_params(spec.structure, absorbing, spec.inputs)
    _, filtered = hamilton_filter(params, spec.observations, spec.inputs)
    np.testing.assert_allclose(np.sum(filtered, axis=1), 1.0, rtol=1e-12)
