"""statsmodels' options beyond its published cases: no intercept (``trend="n"``) and regressors or
AR lags of which only some switch (``switching_exog`` / ``switching_ar`` lists), against
statsmodels' ``MarkovRegression`` and ``MarkovAutoregression``: the same log-likelihood at
statsmodels' fitted parameters (relabelled by the suite's convention) and a default fit that
reaches statsmodels' optimum or higher. (The published no-intercept case,
``TestMumpspcNoconstL1Variance``, is in ``test_published_cases.py``.)"""

import re

import jax
import numpy as np
import pytest
from statsmodels.tsa.regime_switching.markov_autoregression import MarkovAutoregression
from statsmodels.tsa.regime_switching.markov_regression import MarkovRegression
from statsmodels_cases import FEDFUNDS, INFLATION, OGAP, RGNP

from attnbayes.inference.switching.learning import fit_switching, switching_log_likelihood
from attnbayes.models.markov_switching import (
    labelling_order,
    markov_switching_ar,
    markov_switching_regression,
    markov_switching_var,
    regime_ordering,
    relabel_regimes,
    unlabelled,
)

EXOG = np.c_[OGAP[4:], INFLATION[4:]]


def _theta_from_statsmodels(spec, result):
    """The spec's theta at statsmodels' fitted parameters, its regimes relabelled by the
    suite's convention (``regime_ordering``: the labelling parameter increasing)."""
    value = dict(zip(result.model.param_names, result.params, strict=True))
    m = spec.structure.num_regimes
    p = np.zeros((m, m))
    for i in range(m):
        p[i, : m - 1] = [value[f"p[{i}->{j}]"] for j in range(m - 1)]
    p[:, -1] = 1.0 - p[:, :-1].sum(axis=1)
    label = regime_ordering(spec).parameter
    first = spec.names[label][0].rsplit("[", 1)[0]
    order = np.argsort([value[f"{first}[{j}]"] for j in range(m)])

    def entry(name):
        match = re.fullmatch(r"(.*)\[(\d+)\]", name)
        if match is None:  # a common parameter: statsmodels names it by the last regime
            return value.get(name, value.get(f"{name}[{m - 1}]"))
        return value[f"{match[1]}[{order[int(match[2])]}]"]

    theta = {"transition_matrix": p[order][:, order]}
    for name, labels in spec.names.items():
        if name != "transition_matrix":
            shape = np.shape(spec.theta[name])
            theta[name] = np.array([entry(n) for n in labels]).reshape(shape)
    return theta


CASES = {
    # name: (our spec, statsmodels' model)
    "regression, one of two regressors switching": (
        lambda: markov_switching_regression(
            FEDFUNDS[4:], EXOG, switching_coefficients=[True, False], switching_variance=False
        ),
        lambda: MarkovRegression(FEDFUNDS[4:], 2, exog=EXOG, switching_exog=[True, False]),
    ),
    "regression without intercept, the second regressor switching": (
        lambda: markov_switching_regression(
            FEDFUNDS[4:],
            np.c_[FEDFUNDS[3:-1], OGAP[4:]],
            trend="n",
            switching_coefficients=[False, True],
            switching_variance=True,
        ),
        lambda: MarkovRegression(
            FEDFUNDS[4:],
            2,
            trend="n",
            exog=np.c_[FEDFUNDS[3:-1], OGAP[4:]],
            switching_exog=[False, True],
            switching_variance=True,
        ),
    ),
    "MS-AR(1) without mean, switching AR": (
        lambda: markov_switching_ar(RGNP, 1, trend="n", switching_ar=True),
        lambda: MarkovAutoregression(RGNP, 2, 1, trend="n", switching_ar=True),
    ),
    "MS-AR(2), the first lag switching": (
        lambda: markov_switching_ar(RGNP, 2, switching_ar=[True, False]),
        lambda: MarkovAutoregression(RGNP, 2, 2, switching_ar=[True, False]),
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_the_likelihood_is_statsmodels_at_its_fitted_parameters(name):
    make_spec, make_model = CASES[name]
    spec = make_spec()
    result = make_model().fit(disp=False)
    theta = _theta_from_statsmodels(spec, result)
    ours = float(switching_log_likelihood(spec, theta, likelihood="exact"))
    assert ours == pytest.approx(result.llf, abs=1e-7)


@pytest.mark.parametrize(
    "name",
    [
        "regression without intercept, the second regressor switching",
        pytest.param("regression, one of two regressors switching", marks=pytest.mark.slow),
        pytest.param("MS-AR(1) without mean, switching AR", marks=pytest.mark.slow),
        pytest.param("MS-AR(2), the first lag switching", marks=pytest.mark.slow),
    ],
)
def test_the_default_fit_reaches_statsmodels_optimum(name):
    make_spec, make_model = CASES[name]
    spec = make_spec()
    state = np.random.get_state()  # noqa: NPY002 (statsmodels draws from the global state)
    np.random.seed(0)  # noqa: NPY002
    try:
        sm = make_model().fit(disp=False, search_reps=20)
    finally:
        np.random.set_state(state)  # noqa: NPY002
    fit = fit_switching(jax.random.key(0), spec)
    assert fit.log_likelihood[-1] >= sm.llf - 1e-4, (fit.log_likelihood[-1], sm.llf)


def test_the_labels_follow_the_first_switching_parameter():
    """trend "c": the intercept; trend "n": the first switching coefficient (its start spread
    so that it is ordered); nothing switching but the variance: the variance."""
    x = np.c_[FEDFUNDS[3:-1], OGAP[4:]]
    y = FEDFUNDS[4:]
    with_const = markov_switching_regression(y, x, switching_coefficients=[False, True])
    assert regime_ordering(with_const).parameter == "intercepts"
    slope = markov_switching_regression(y, x, trend="n", switching_coefficients=[False, True])
    label = regime_ordering(slope)
    assert label.parameter == "coefficients" and "x2" in label.description
    assert np.diff(slope.theta["coefficients"][:, 0])[0] > 0
    assert slope.theta["common_coefficients"].shape == (1,)
    variance = markov_switching_regression(y, x, trend="n", switching_coefficients=False)
    assert regime_ordering(variance).parameter == "variances"
    assert np.diff(variance.theta["variances"])[0] > 0
    ar = markov_switching_ar(RGNP, 2, trend="n", switching_ar=[False, True])
    assert regime_ordering(ar).parameter == "ar_coefficients"
    assert "ar.L2" in regime_ordering(ar).description
    assert "means" not in ar.theta and ar.theta["common_ar_coefficients"].shape == (1,)


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda: markov_switching_regression(FEDFUNDS, trend="x"), "trend: expected 'c'"),
        (lambda: markov_switching_regression(FEDFUNDS, trend="n"), "exog: required with trend"),
        (
            lambda: markov_switching_regression(
                FEDFUNDS[1:], FEDFUNDS[:-1], switching_coefficients=[True, False]
            ),
            "switching_coefficients: expected True, False or one True/False per exog column "
            "\\(1\\)",
        ),
        (
            lambda: markov_switching_regression(
                FEDFUNDS[1:], FEDFUNDS[:-1], switching_coefficients=["yes"]
            ),
            "switching_coefficients",
        ),
        (
            lambda: markov_switching_regression(
                FEDFUNDS[1:],
                FEDFUNDS[:-1],
                trend="n",
                switching_coefficients=False,
                switching_variance=False,
            ),
            "trend: with trend='n' and neither",
        ),
        (
            lambda: markov_switching_ar(RGNP, 2, switching_ar=[True]),
            "switching_ar: expected True, False or one True/False per lag \\(2\\)",
        ),
        (
            lambda: markov_switching_ar(RGNP, 1, trend="n", switching_ar=False),
            "trend: with trend='n' and neither",
        ),
        (lambda: markov_switching_ar(RGNP, 1, switching_variance="no"), "switching_variance"),
    ],
)
def test_bad_options_name_the_argument(build, match):
    with pytest.raises(ValueError, match=match):
        build()


@pytest.mark.parametrize(
    "build",
    [
        lambda: markov_switching_regression(
            FEDFUNDS[4:], EXOG, switching_coefficients=[True, False], exog_tvtp=EXOG[:, :1]
        ),
        lambda: markov_switching_ar(
            RGNP, 2, trend="n", switching_ar=[False, True], switching_variance=True
        ),
        lambda: markov_switching_ar(RGNP, 1, exog_tvtp=np.c_[np.ones(RGNP.size), RGNP]),
        lambda: markov_switching_var(
            np.c_[FEDFUNDS[4:], INFLATION[4:]], 1, exog_tvtp=np.c_[np.ones(FEDFUNDS.size - 4)]
        ),
    ],
)
def test_relabelling_the_regimes_leaves_the_likelihood_unchanged(build):
    """``relabel_regimes`` is an exact symmetry (per-regime parameters, P's rows and columns,
    TVTP logits re-expressed against the last regime); the fits optimise over the unordered
    spec (``unlabelled``) and ``labelling_order`` puts the optimum back in the convention."""
    spec = build()
    rng = np.random.default_rng(0)
    theta = {n: np.asarray(v, float) for n, v in spec.theta.items()}
    if "transition_coefficients" in theta:
        theta["transition_coefficients"] = rng.normal(size=theta["transition_coefficients"].shape)
    else:
        theta["transition_matrix"] = np.array([[0.8, 0.2], [0.35, 0.65]])
    swapped = relabel_regimes(spec, theta, [1, 0])
    free = unlabelled(spec)
    ll = float(switching_log_likelihood(spec, theta, likelihood="exact"))
    assert float(switching_log_likelihood(free, swapped, likelihood="exact")) == pytest.approx(
        ll, abs=1e-9
    )
    np.testing.assert_array_equal(labelling_order(spec, swapped), [1, 0])
    back = relabel_regimes(spec, swapped, labelling_order(spec, swapped))
    for name in theta:
        np.testing.assert_allclose(back[name], theta[name], atol=1e-12, err_msg=name)


def test_only_the_transition_probabilities_at_zero_are_on_the_boundary():
    """The Nile's annual flow, three regimes of its mean: the fit puts p[1->2] and p[2->1] at
    0 (the boundary of the simplex). Only those two entries are flagged and lose their
    standard error; the rest of each row is inside the support, e.g. p[1->1] = 1 - p[1->0]
    with the standard error of p[1->0] (the model with the boundary entry fixed at 0)."""
    import statsmodels.api as sm

    nile = sm.datasets.nile.load_pandas().data["volume"].to_numpy(float)
    spec = markov_switching_regression(nile, num_regimes=3, switching_variance=False)
    fit = fit_switching(jax.random.key(0), spec, em_warmup=0)  # no EM program to compile
    p, se = fit.theta["transition_matrix"], fit.stderr["transition_matrix"]
    edge = fit.on_boundary["transition_matrix"]
    assert edge.sum() == 2 and edge[1, 2] and edge[2, 1], edge
    assert p[1, 2] < 1e-8 and p[2, 1] < 1e-8
    assert np.all(np.isnan(se[edge])) and np.all(np.isfinite(se[~edge]))
    assert se[1, 1] == pytest.approx(se[1, 0], rel=1e-6)
    assert se[2, 2] == pytest.approx(se[2, 0], rel=1e-6)


def test_three_regimes_reach_the_optimum_the_em_warmed_start_finds():
    """US GDP growth (statsmodels' macrodata), three regimes with switching variances: the
    ordering starts and their perturbations all stop at -228.301 or lower; L-BFGS from
    ``EM_WARMUP`` EM iterations (the default for M >= 3) reaches -228.090, where statsmodels'
    optimiser started gains nothing."""
    import statsmodels.api as sm

    from attnbayes.inference.switching.learning.mle import EM_WARMUP, default_em_warmup

    data = sm.datasets.macrodata.load_pandas().data
    growth = 100 * np.diff(np.log(data["realgdp"].to_numpy()))
    spec = markov_switching_regression(growth, num_regimes=3, switching_variance=True)
    assert default_em_warmup(spec) == EM_WARMUP
    fit = fit_switching(jax.random.key(0), spec)
    cold = fit_switching(jax.random.key(0), spec, em_warmup=0)
    assert fit.log_likelihood[-1] == pytest.approx(-228.0901171, abs=1e-6)
    assert cold.log_likelihood[-1] < fit.log_likelihood[-1] - 0.2
    model = MarkovRegression(growth, 3, switching_variance=True)
    theta = fit.theta
    params = np.r_[
        theta["transition_matrix"][:, :2].T.ravel(), theta["intercepts"], theta["variances"]
    ]
    assert model.loglike(params) == pytest.approx(fit.log_likelihood[-1], abs=1e-8)
    assert model.fit(start_params=params, disp=False).llf <= fit.log_likelihood[-1] + 1e-6
    with pytest.raises(ValueError, match="em_warmup: must be >= 0"):
        fit_switching(jax.random.key(0), spec, em_warmup=-1)


def test_a_fit_started_in_the_other_labelling_returns_the_conventional_one():
    """The fits optimise over unlabelled regimes: a start in the other labelling (the slope
    that labels the regimes decreasing) is a valid start and ends at the same optimum,
    labelled by the convention (regime 0 the lower slope)."""
    spec = CASES["regression without intercept, the second regressor switching"][0]()
    fit = fit_switching(jax.random.key(0), spec)
    swapped = spec._replace(theta=relabel_regimes(spec, spec.theta, [1, 0]))
    again = fit_switching(jax.random.key(0), swapped)
    assert again.log_likelihood[-1] == pytest.approx(fit.log_likelihood[-1], abs=1e-6)
    assert np.diff(again.theta["coefficients"][:, 0])[0] > 0
    for name in fit.theta:
        np.testing.assert_allclose(again.theta[name], fit.theta[name], atol=1e-4, err_msg=name)


def test_fixed_parameters_that_differ_between_regimes_keep_the_labels_as_given():
    """Regime 0 with intercept +2 and variance 4, regime 1 with -2 and 0.25, the variances
    fixed at those values and the intercepts free: the regimes are told apart by the fixed
    variances, so nothing is reordered (relabelling would swap the free intercepts against
    the fixed variances, another model): the reported log-likelihood is that of the reported
    theta, and regime 0 keeps the high intercept. The starts pair the free intercepts with
    the fixed variances both ways (``ordering_starts``): from the constructor's ordered
    intercepts alone the fit ended at -479.66, 91 nats below the truth's -388.64."""
    rng = np.random.default_rng(3)
    p = np.array([[0.9, 0.1], [0.15, 0.85]])
    s, regimes = 0, []
    for _ in range(200):
        s = rng.choice(2, p=p[s])
        regimes.append(s)
    regimes = np.array(regimes)
    y = np.where(regimes == 0, 2.0 + 2.0 * rng.normal(size=200), -2.0 + 0.5 * rng.normal(size=200))
    spec = markov_switching_regression(y, switching_variance=True)
    spec = spec._replace(theta=spec.theta | {"variances": np.array([4.0, 0.25])})
    free = ("intercepts", "transition_matrix")
    assert regime_ordering(spec, free).parameter is None
    fit = fit_switching(jax.random.key(0), spec, free=free)
    np.testing.assert_array_equal(fit.theta["variances"], [4.0, 0.25])
    at = float(switching_log_likelihood(spec, fit.theta, likelihood="exact"))
    assert at == pytest.approx(fit.log_likelihood[-1], abs=1e-8)
    assert fit.theta["intercepts"][0] > 1.0 and fit.theta["intercepts"][1] < -1.0
    truth = spec.theta | {"intercepts": np.array([2.0, -2.0]), "transition_matrix": p}
    assert fit.log_likelihood[-1] > float(switching_log_likelihood(spec, truth, likelihood="exact"))
