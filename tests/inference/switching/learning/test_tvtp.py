"""Time-varying transition probabilities (TVTP; Filardo 1994, Diebold, Lee and Weinbach 1994) in
the econometric models: P_t[i, j] = softmax_j(z_t' gamma_ij), gamma_{i, M-1} = 0 (statsmodels'
``exog_tvtp``).

Checked against statsmodels' published TVTP cases (``TestHamiltonAR1SwitchTVTP``: E-views'
MS-AR(1) of Hamilton's GNP with recession dummies; ``TestFilardo``: Filardo's (1994) MS-AR(4)
of industrial production with the leading indicator; their log-likelihoods at the published
parameters, filtered and smoothed probabilities and expected durations), against statsmodels'
own ``loglike`` and ``regime_transition_matrix`` at a random parameter vector (the parameter
map below), and against a NumPy enumeration of every regime path of a short series.
"""

import functools
import itertools
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from scipy import optimize, stats
from statsmodels.tsa.regime_switching.markov_autoregression import MarkovAutoregression
from statsmodels.tsa.regime_switching.markov_regression import MarkovRegression
from statsmodels_cases import AUTOREGRESSION_CASES, RECESSIONS, RGNP

from attnbayes.inference.switching.learning import (
    expected_durations,
    fit_switching,
    forecast_switching,
    switching_log_likelihood,
)
from attnbayes.inference.switching.learning.em import em_expectations
from attnbayes.inference.switching.learning.likelihood import hamilton_filter
from attnbayes.inference.switching.learning.marginal import switching_marginal_model
from attnbayes.inference.switching.learning.parameters import register_spec
from attnbayes.models.markov_switching import (
    build_params,
    default_priors,
    markov_switching_ar,
    markov_switching_regression,
    regime_probabilities,
    regime_transition_matrix,
    tvtp_transition_matrices,
)

# ----------------------------------------------------------------------------- statsmodels' map


def _sm_gamma(params, m: int, k: int) -> np.ndarray:
    """statsmodels' TVTP block (its first (M - 1) M k entries, named p[i->j].tvtp{c} in the order
    j, c, i: ``MarkovSwitching.param_names``) as our gamma (M, M - 1, k)."""
    gamma = np.zeros((m, m - 1, k))
    for i, j, c in itertools.product(range(m), range(m - 1), range(k)):
        gamma[i, j, c] = params[(j * k + c) * m + i]
    return gamma


def _relabelled(gamma: np.ndarray, order) -> np.ndarray:
    """The coefficients after relabelling the regimes, new a = old order[a]: the logits
    eta_ab = z' gamma_ab (eta_{a, M-1} = 0) become eta_{order[a], order[b]} minus the new
    reference's, which leaves every P_t[order[a], order[b]] unchanged."""
    m = gamma.shape[0]
    full = np.concatenate([gamma, np.zeros((m, 1, gamma.shape[2]))], axis=1)  # (M, M, k)
    moved = full[np.ix_(order, order)]
    return (moved - moved[:, -1:])[:, :-1]


def _sm_ar_theta(params, m: int, order: int, k: int, switching_ar: bool):
    """statsmodels' MarkovAutoregression vector (TVTP block, const[j], sigma2, then ar.L
    coefficients: per regime when switching) as our theta, relabelled by increasing mean
    (our convention; the published cases list the high-growth regime first). Returns
    (theta, order) with our regime a = statsmodels' regime order[a]."""
    n = (m - 1) * m * k
    means = np.asarray(params[n : n + m])
    perm = np.argsort(means)
    phi = np.asarray(params[n + m + 1 :])
    phi = phi.reshape(order, m).T[perm] if switching_ar else phi
    theta = {
        "transition_coefficients": _relabelled(_sm_gamma(params, m, k), perm),
        "means": means[perm],
        "ar_coefficients": phi,
        "variances": np.asarray(params[n + m]),
    }
    return theta, perm


def _sm_regression_theta(params, m: int, k: int):
    """statsmodels' MarkovRegression vector with TVTP, a switching constant and a common
    variance (TVTP block, const[j], sigma2) as our theta, relabelled by increasing intercept."""
    n = (m - 1) * m * k
    means = np.asarray(params[n : n + m])
    perm = np.argsort(means)
    theta = {
        "transition_coefficients": _relabelled(_sm_gamma(params, m, k), perm),
        "intercepts": means[perm],
        "coefficients": np.zeros((m, 0)),
        "variances": np.asarray(params[n + m]),
    }
    return theta, perm


# ----------------------------------------------------------------------------- data

HAMILTON = AUTOREGRESSION_CASES.TestHamiltonAR1SwitchTVTP
HAMILTON_PARAMS = np.r_[
    6.564923, 7.846371, -8.064123, -15.37636, 1.027190, -0.719760,
    np.exp(-0.217003) ** 2, 0.161489, 0.022536,
]  # fmt: skip
HAMILTON_LLF, HAMILTON_LLF_FIT = -163.914049, -161.786477
HAMILTON_Z = np.c_[np.ones(len(RGNP)), RECESSIONS]

FILARDO_PARAMS = np.r_[
    4.35941747, -1.6493936, 1.7702123, 0.9945672, 0.517298, -0.865888,
    np.exp(-0.362469) ** 2, 0.189474, 0.079344, 0.110944, 0.122251,
]  # fmt: skip
FILARDO_LLF = -586.5718


@functools.cache
def _filardo():
    path = Path(AUTOREGRESSION_CASES.__file__).parent / "results" / "mar_filardo.csv"
    frame = pd.read_csv(path)
    endog = frame["dlip"].iloc[1:].to_numpy()
    lead = frame["dmdlleading"].iloc[:-1].to_numpy()
    return frame, endog, np.c_[np.ones(lead.size), lead]


@pytest.fixture(scope="module")
def hamilton_spec():
    return markov_switching_ar(RGNP, 1, switching_ar=True, exog_tvtp=HAMILTON_Z)


def _small_regression(num_regimes=3, constant_only=False):
    """A short series (T = 6) with two covariates z_t = (1, x_t) (or (1, 0): a constant P)."""
    rng = np.random.default_rng(4)
    y = np.array([0.3, 2.1, 1.7, -0.4, 0.2, 2.5])
    x = np.zeros(6) if constant_only else rng.normal(size=6)
    spec = markov_switching_regression(
        y, num_regimes=num_regimes, switching_variance=False, exog_tvtp=np.c_[np.ones(6), x]
    )
    theta = spec.theta | {
        "transition_coefficients": rng.normal(size=(num_regimes, num_regimes - 1, 2)),
        "intercepts": np.array([-0.5, 1.0, 2.2])[:num_regimes],
        "variances": np.asarray(0.6),
    }
    return spec, theta


# ----------------------------------------------------------------------------- the model


def test_statsmodels_parameter_map_on_random_vectors():
    """At random parameter vectors, the map (``_sm_gamma``, ``_relabelled``) gives statsmodels'
    ``regime_transition_matrix`` (3 regimes, column-from) to 1e-12, and the log-likelihood its
    ``loglike`` to 1e-10: an MS-AR(1) with switching AR on Hamilton's GNP and a three-regime
    regression."""
    rng = np.random.default_rng(7)
    # three regimes: the transition matrices
    spec, _ = _small_regression()
    sm = MarkovRegression(spec.observations[:, 0], 3, exog_tvtp=spec.inputs)
    params = np.r_[rng.normal(size=12), [-0.4, 2.0, 0.9], 0.7]
    want = np.transpose(sm.regime_transition_matrix(params), (2, 1, 0))  # (T, from, to)
    got = tvtp_transition_matrices(_sm_gamma(params, 3, 2), spec.inputs)
    np.testing.assert_allclose(got, want, atol=1e-12)
    theta, perm = _sm_regression_theta(params, 3, 2)
    mine = regime_transition_matrix(spec.structure, theta, spec.inputs)
    np.testing.assert_allclose(mine, want[:, perm][:, :, perm], atol=1e-12)
    ll = switching_log_likelihood(spec, theta, likelihood="exact")
    assert abs(float(ll) - sm.loglike(params)) < 1e-10
    # MS-AR(1) with switching AR coefficients on GNP
    sm = MarkovAutoregression(RGNP, 2, 1, exog_tvtp=HAMILTON_Z)
    params = np.r_[rng.normal(size=4), [1.3, -0.2], 0.8, [0.1, 0.3]]
    theta, _ = _sm_ar_theta(params, 2, 1, 2, switching_ar=True)
    spec = markov_switching_ar(RGNP, 1, switching_ar=True, exog_tvtp=HAMILTON_Z)
    ll = switching_log_likelihood(spec, theta, likelihood="exact")
    assert abs(float(ll) - sm.loglike(params)) < 1e-10


def test_hamilton_ar1_tvtp_matches_the_published_values(hamilton_spec):
    """E-views' MS-AR(1) with TVTP on Hamilton's GNP (statsmodels' TestHamiltonAR1SwitchTVTP):
    the log-likelihood at the published parameters equals statsmodels' ``loglike`` there to
    1e-10 and E-views' published value (six decimals, from rounded parameters) to 1e-5, the
    tolerance of statsmodels' own test; the filtered and smoothed
    probabilities of its regime 0 (our regime 1: the high-growth regime) to 1e-5 and the
    expected durations 1 / (1 - P_t[i, i]) (T, M) to rtol 1e-5, as statsmodels tests them."""
    theta, perm = _sm_ar_theta(HAMILTON_PARAMS, 2, 1, 2, switching_ar=True)
    spec = hamilton_spec
    ll = float(switching_log_likelihood(spec, theta, likelihood="exact"))
    sm = MarkovAutoregression(RGNP, 2, 1, exog_tvtp=HAMILTON_Z)
    assert abs(ll - sm.loglike(HAMILTON_PARAMS)) < 1e-10
    assert abs(ll - HAMILTON_LLF) < 1e-5
    th = {n: jnp.asarray(v, float) for n, v in theta.items()}
    obs, u = jnp.asarray(spec.observations), jnp.asarray(spec.inputs)
    _, smooth, _ = em_expectations(register_spec(spec), "exact", th, obs, u)
    _, filt = jax.jit(hamilton_filter)(build_params(spec.structure, th, u), obs, u)
    ours = int(np.flatnonzero(perm == 0)[0])
    np.testing.assert_allclose(
        regime_probabilities(spec.structure, filt)[:, ours],
        AUTOREGRESSION_CASES.hamilton_ar1_switch_tvtp_filtered,
        atol=1e-5,
    )
    np.testing.assert_allclose(
        regime_probabilities(spec.structure, smooth)[:, ours],
        AUTOREGRESSION_CASES.hamilton_ar1_switch_tvtp_smoothed,
        atol=1e-5,
    )
    durations = expected_durations(regime_transition_matrix(spec.structure, th, u))
    np.testing.assert_allclose(
        durations[:, np.argsort(perm)],
        AUTOREGRESSION_CASES.expected_durations,
        rtol=1e-5,
        atol=1e-7,
    )


# ----------------------------------------------------------------------------- brute force


def _enumerate(y, z, gamma, means, phi, variance, order):
    """Every regime path s_0..s_{T-1} of a switching-mean AR(p) (p = 0: a switching intercept)
    in NumPy: p(s) = pi(s_0) prod_r P_r[s_{r-1}, s_r], pi the ergodic law of P_0, P_r the
    softmax of z_r' gamma (statsmodels' TVTP and its initialisation), and y_r | s ~
    N(mu_{s_r} + sum_k phi_k (y_{r-k} - mu_{s_{r-k}}), sigma^2) for r >= p. Returns
    (log p(y_{p:T} | y_{0:p}), filtered and smoothed P(s_r = j | ...) for r >= p, and the
    smoothed pairs P(s_r = i, s_{r+1} = j | y) for r >= p)."""
    m, t = gamma.shape[0], y.size
    eta = np.concatenate([np.einsum("tk,ijk->tij", z, gamma), np.zeros((t, m, 1))], -1)
    trans = np.exp(eta) / np.exp(eta).sum(-1, keepdims=True)
    w, v = np.linalg.eig(trans[0].T)
    pi = np.real(v[:, np.argmin(np.abs(w - 1))])
    pi = pi / pi.sum()
    paths = np.array(list(itertools.product(range(m), repeat=t)))
    log_w = np.log(pi[paths[:, 0]])
    log_y = np.zeros((paths.shape[0], t))
    for r in range(1, t):
        log_w = log_w + np.log(trans[r, paths[:, r - 1], paths[:, r]])
    for r in range(order, t):
        mean = means[paths[:, r]] + sum(
            phi[k - 1] * (y[r - k] - means[paths[:, r - k]]) for k in range(1, order + 1)
        )
        log_y[:, r] = stats.norm.logpdf(y[r], mean, np.sqrt(variance))
    total = log_w + log_y.sum(axis=1)
    ll = np.logaddexp.reduce(total)
    filt, smooth = [], []
    for r in range(order, t):
        upto = log_w + log_y[:, : r + 1].sum(axis=1)
        wts = np.exp(upto - np.logaddexp.reduce(upto))
        filt.append([wts[paths[:, r] == j].sum() for j in range(m)])
        wts = np.exp(total - ll)
        smooth.append([wts[paths[:, r] == j].sum() for j in range(m)])
    wts = np.exp(total - ll)
    pairs = [
        [
            [wts[(paths[:, r] == i) & (paths[:, r + 1] == j)].sum() for j in range(m)]
            for i in range(m)
        ]
        for r in range(order, t - 1)
    ]
    return ll, np.array(filt), np.array(smooth), np.array(pairs)


def _filter_and_smooth(spec, theta):
    th = {n: jnp.asarray(v, float) for n, v in theta.items()}
    obs, u = jnp.asarray(spec.observations), jnp.asarray(spec.inputs)
    ll, smooth, pairs = em_expectations(register_spec(spec), "exact", th, obs, u)
    _, filt = jax.jit(hamilton_filter)(build_params(spec.structure, th, u), obs, u)
    return (
        float(ll),
        np.asarray(regime_probabilities(spec.structure, filt)),
        np.asarray(regime_probabilities(spec.structure, smooth)),
        np.asarray(pairs),
    )


def test_exact_filter_and_smoother_equal_the_enumeration_of_regime_paths():
    """On short series, Hamilton's filter and the backward smoother with per-step matrices give
    the log-likelihood (1e-10), filtered and smoothed probabilities and the smoothed pairs of
    EM's E-step (``pairwise_mode_probabilities``; 1e-10) of the NumPy enumeration of every
    regime path, with statsmodels' initialisation: a three-regime regression (T = 6) and an
    MS-AR(1) (7 values), whose first tuple's law uses the first row of z."""
    spec, theta = _small_regression()
    y, z = spec.observations[:, 0], spec.inputs
    want = _enumerate(y, z, theta["transition_coefficients"], theta["intercepts"], [], 0.6, 0)
    got = _filter_and_smooth(spec, theta)
    assert abs(got[0] - want[0]) < 1e-10
    for ours, theirs in zip(got[1:], want[1:], strict=True):
        np.testing.assert_allclose(ours, theirs, atol=1e-10)

    rng = np.random.default_rng(2)
    y = np.array([0.5, 1.9, -0.3, 0.8, 2.4, 1.1, -0.6])
    z = np.c_[np.ones(7), rng.normal(size=7)]
    spec = markov_switching_ar(y, 1, exog_tvtp=z)
    theta = spec.theta | {
        "transition_coefficients": rng.normal(size=(2, 1, 2)),
        "means": np.array([-0.2, 1.5]),
        "ar_coefficients": np.array([0.4]),
        "variances": np.asarray(0.5),
    }
    want = _enumerate(y, z, theta["transition_coefficients"], theta["means"], [0.4], 0.5, 1)
    got = _filter_and_smooth(spec, theta)
    assert abs(got[0] - want[0]) < 1e-10
    np.testing.assert_allclose(got[1], want[1], atol=1e-10)
    np.testing.assert_allclose(got[2], want[2], atol=1e-10)


def test_a_constant_covariate_gives_the_constant_matrix_model():
    """z_t = (1, 0): P_t = softmax(gamma[:, :, 0]) at every step, and the log-likelihood is that
    of the model with that constant transition matrix (to 1e-12)."""
    spec, theta = _small_regression(constant_only=True)
    plain = markov_switching_regression(
        spec.observations[:, 0], num_regimes=3, switching_variance=False
    )
    p = np.asarray(tvtp_transition_matrices(theta["transition_coefficients"], [1.0, 0.0]))
    rest = {n: v for n, v in theta.items() if n != "transition_coefficients"}
    want = switching_log_likelihood(plain, rest | {"transition_matrix": p}, likelihood="exact")
    got = switching_log_likelihood(spec, theta, likelihood="exact")
    assert abs(float(got) - float(want)) < 1e-12


def test_log_likelihood_is_jittable_vmappable_and_differentiable_in_the_coefficients():
    """``switching_log_likelihood`` with TVTP under jit (the same value), vmap over three
    coefficient sets (each its own value) and grad (central differences, 1e-6)."""
    spec, theta = _small_regression()

    def ll(gamma):
        return switching_log_likelihood(
            spec, theta | {"transition_coefficients": gamma}, likelihood="exact"
        )

    gamma = jnp.asarray(theta["transition_coefficients"])
    value = float(ll(gamma))
    assert abs(float(jax.jit(ll)(gamma)) - value) < 1e-12
    batch = jnp.stack([gamma, 0.5 * gamma, -gamma])
    np.testing.assert_allclose(
        jax.vmap(ll)(batch), [value, float(ll(0.5 * gamma)), float(ll(-gamma))], atol=1e-12
    )
    grad = np.asarray(jax.grad(ll)(gamma))
    eps = 1e-6
    numeric = np.zeros(grad.shape)
    for idx in np.ndindex(grad.shape):
        step = np.zeros(grad.shape)
        step[idx] = eps
        numeric[idx] = (float(ll(gamma + step)) - float(ll(gamma - step))) / (2 * eps)
    np.testing.assert_allclose(grad, numeric, atol=1e-6)


def test_the_marginal_program_adds_the_tvtp_likelihood_to_its_priors():
    """``switching_marginal_model`` with TVTP (the program NUTS samples): its log density at
    theta is the sum of the default priors' log densities (a Normal on the coefficients) and
    the filter's log-likelihood."""
    from numpyro.infer.util import log_density

    spec, theta = _small_regression()
    values = {n: jnp.asarray(theta[n]) for n in spec.free}
    got, _ = log_density(
        switching_marginal_model,
        (jnp.asarray(spec.observations),),
        {"spec": spec, "likelihood": "exact"},
        values,
    )
    priors = default_priors(spec)
    want = sum(float(priors[n].log_prob(values[n])) for n in spec.free)
    want += float(switching_log_likelihood(spec, theta, likelihood="exact"))
    assert set(spec.free) == {"transition_coefficients", "intercepts", "variances"}
    assert abs(float(got) - want) < 1e-9


# ----------------------------------------------------------------------------- EM, forecasts


def _simulated_tvtp(num_steps=60):
    """A two-regime regression with TVTP on a persistent covariate, simulated in NumPy."""
    rng = np.random.default_rng(11)
    x = np.cumsum(rng.normal(scale=0.4, size=num_steps + 3))
    z = np.c_[np.ones(num_steps + 3), x]
    gamma = np.array([[[2.0, 1.5]], [[-2.0, 1.5]]])
    eta = np.concatenate([np.einsum("tk,ijk->tij", z, gamma), np.zeros((num_steps + 3, 2, 1))], -1)
    trans = np.exp(eta) / np.exp(eta).sum(-1, keepdims=True)
    s = [0]
    for t in range(1, num_steps):
        s.append(rng.choice(2, p=trans[t, s[-1]]))
    y = np.array([-1.0, 1.0])[s] + 0.5 * rng.normal(size=num_steps)
    return y, z


def test_em_with_tvtp_raises_the_log_likelihood_monotonically():
    """EM with TVTP (the coefficients by L-BFGS steps on Q, a weighted multinomial logistic
    regression per from-regime): the log-likelihood trace never falls and the coefficients
    move away from their start."""
    y, z = _simulated_tvtp()
    spec = markov_switching_regression(y, switching_variance=False, exog_tvtp=z[:60])
    fit = fit_switching(jax.random.key(0), spec, method="em", max_iterations=15)
    trace = fit.log_likelihood
    assert trace.size > 3
    assert np.all(np.diff(trace) >= -1e-9 * np.abs(trace[:-1]))
    assert trace[-1] > trace[0] + 1.0
    moved = fit.theta["transition_coefficients"] - spec.theta["transition_coefficients"]
    assert np.max(np.abs(moved)) > 0.1
    assert fit.params.transition_matrix.shape == (60, 2, 2)


def test_forecast_with_future_covariates_matches_the_one_step_mixture():
    """A regression with exog and TVTP: the regime probabilities are the filtered ones times
    P_{T+1}, P_{T+2} from the future covariates (exactly), and one step ahead the simulated mean
    and 90% interval match the predictive mixture sum_j w_j N(mu_j + x' beta_j, sigma^2)."""
    y, z = _simulated_tvtp()
    x = np.sin(np.arange(63.0))
    spec = markov_switching_regression(y, x[:60], switching_variance=False, exog_tvtp=z[:60])
    theta = spec.theta | {
        "transition_coefficients": np.array([[[2.0, 1.5]], [[-2.0, 1.5]]]),
        "intercepts": np.array([-1.0, 1.0]),
        "coefficients": np.array([[0.3], [-0.2]]),
        "variances": np.asarray(0.25),
    }
    future = np.c_[x[60:62], z[60:62]]
    fc = forecast_switching(
        jax.random.key(1), spec, theta, horizon=2, future_inputs=future, num_draws=20000
    )
    th = {n: jnp.asarray(v, float) for n, v in theta.items()}
    _, filt = jax.jit(hamilton_filter)(
        build_params(spec.structure, th, spec.inputs), spec.observations, spec.inputs
    )
    ahead = np.asarray(tvtp_transition_matrices(theta["transition_coefficients"], z[60:62]))
    w1 = np.asarray(filt[-1]) @ ahead[0]
    np.testing.assert_allclose(fc.regime_probs, [w1, w1 @ ahead[1]], atol=1e-12)
    means = theta["intercepts"] + theta["coefficients"][:, 0] * x[60]
    draws = fc.draws[:, 0, 0]
    assert abs(fc.mean[0, 0] - w1 @ means) < 4 * draws.std() / np.sqrt(draws.size)

    def cdf(q):
        return float(w1 @ stats.norm.cdf(q, means, 0.5))

    lo = optimize.brentq(lambda q: cdf(q) - 0.05, -20, 20)
    hi = optimize.brentq(lambda q: cdf(q) - 0.95, -20, 20)
    np.testing.assert_allclose([fc.lower[1, 0, 0], fc.upper[1, 0, 0]], [lo, hi], atol=0.05)


# ----------------------------------------------------------------------------- bad input


def test_bad_tvtp_input_is_refused_by_name(hamilton_spec):
    """Every bad input of the TVTP likelihood, model and forecasts gets a ValueError naming
    it, before any compilation (``exog_tvtp`` itself: tests/models/test_markov_switching.py)."""
    spec = hamilton_spec
    obs = spec.observations[:50]
    with pytest.raises(ValueError, match=r"^inputs: required \(shape \(50, 5\)\)"):
        switching_log_likelihood(spec, observations=obs)
    with pytest.raises(ValueError, match=r"^inputs: expected shape \(50, 5\)"):
        switching_log_likelihood(spec, observations=obs, inputs=spec.inputs[:50, :4])
    with pytest.raises(ValueError, match=r"^inputs: expected shape \(50, 5\)"):
        switching_log_likelihood(spec, observations=obs, inputs=spec.inputs[:49])
    u = spec.inputs[:50].copy()
    u[3, -1] = np.nan
    with pytest.raises(ValueError, match="^inputs: contains 1 non-finite"):
        switching_log_likelihood(spec, observations=obs, inputs=u)
    with pytest.raises(ValueError, match=r"^inputs: required with time-varying"):
        build_params(spec.structure, spec.theta)
    with pytest.raises(
        ValueError, match=r"^theta: expected the parameters .*unknown \['transition_matrix'\]"
    ):
        switching_log_likelihood(
            spec,
            {n: v for n, v in spec.theta.items() if n != "transition_coefficients"}
            | {"transition_matrix": np.eye(2)},
        )
    with pytest.raises(ValueError, match=r"^inputs: required \(shape \(7, 5\)\)"):
        switching_marginal_model(None, spec=spec, num_steps=7)
    key = jax.random.key(0)
    with pytest.raises(ValueError, match=r"^future_inputs: required \(shape \(3, 2\)"):
        forecast_switching(key, spec, horizon=3)
    with pytest.raises(ValueError, match=r"^future_inputs: expected shape \(3, 2\)"):
        forecast_switching(key, spec, horizon=3, future_inputs=np.ones((3, 5)))
    for bad in (np.nan, np.inf):
        future = np.ones((3, 2))
        future[1, 1] = bad
        with pytest.raises(ValueError, match="^future_inputs: contains 1 non-finite"):
            forecast_switching(key, spec, horizon=3, future_inputs=future)
    reg = markov_switching_regression(RGNP, RGNP, exog_tvtp=HAMILTON_Z)
    with pytest.raises(ValueError, match=r"^future_inputs: expected shape \(2, 3\)"):
        forecast_switching(key, reg, horizon=2, future_inputs=np.ones((2, 2)))
    # models with nothing to give over the horizon refuse future inputs (no compilation)
    with pytest.raises(ValueError, match="^future_inputs: an MS-AR model's inputs are its own"):
        forecast_switching(
            key, markov_switching_ar(RGNP, 1), horizon=2, future_inputs=np.ones((2, 1))
        )
    with pytest.raises(ValueError, match="^future_inputs: the model has no inputs"):
        forecast_switching(
            key, markov_switching_regression(RGNP), horizon=2, future_inputs=np.ones((2, 1))
        )


# ----------------------------------------------------------------------------- slow: every case


@pytest.mark.slow
def test_filardo_matches_the_published_values():
    """Filardo's (1994) MS-AR(4) with TVTP on the leading indicator (statsmodels' TestFilardo):
    the log-likelihood equals statsmodels' ``loglike`` at the published parameters to 1e-10 and
    the published value within statsmodels' tolerance (atol 1e-5, rtol 1e-7; published to four
    decimals); filtered and smoothed probabilities (1e-5) and expected durations (rtol 1e-5)
    from results/mar_filardo.csv."""
    frame, endog, z = _filardo()
    theta, perm = _sm_ar_theta(FILARDO_PARAMS, 2, 4, 2, switching_ar=False)
    spec = markov_switching_ar(endog, 4, exog_tvtp=z)
    ll = float(switching_log_likelihood(spec, theta, likelihood="exact"))
    sm = MarkovAutoregression(endog, 2, 4, switching_ar=False, exog_tvtp=z)
    assert abs(ll - sm.loglike(FILARDO_PARAMS)) < 1e-10
    np.testing.assert_allclose(ll, FILARDO_LLF, atol=1e-5, rtol=1e-7)
    _, filt, smooth, _ = _filter_and_smooth(spec, theta)
    ours = int(np.flatnonzero(perm == 0)[0])
    np.testing.assert_allclose(filt[:, ours], frame["filtered_0"].iloc[5:], atol=1e-5)
    np.testing.assert_allclose(smooth[:, ours], frame["smoothed_0"].iloc[5:], atol=1e-5)
    durations = expected_durations(regime_transition_matrix(spec.structure, theta, spec.inputs))
    np.testing.assert_allclose(
        durations[:, np.argsort(perm)],
        frame[["duration0", "duration1"]].iloc[5:],
        rtol=1e-5,
        atol=1e-7,
    )


@pytest.mark.slow
@pytest.mark.parametrize("likelihood", ["imm", "gpb1", "gpb2"])
def test_collapsed_filters_equal_hamilton_with_per_step_matrices(hamilton_spec, likelihood):
    """The collapsed filters (IMM, GPB1, GPB2) with per-step matrices are exact on the
    econometric models: the published TVTP case's log-likelihood to 1e-9."""
    theta, _ = _sm_ar_theta(HAMILTON_PARAMS, 2, 1, 2, switching_ar=True)
    want = float(switching_log_likelihood(hamilton_spec, theta, likelihood="exact"))
    got = float(switching_log_likelihood(hamilton_spec, theta, likelihood=likelihood))
    assert abs(got - want) < 1e-9


def _published_cases():
    _, endog, z = _filardo()
    return {
        "TestHamiltonAR1SwitchTVTP": (
            lambda: markov_switching_ar(RGNP, 1, switching_ar=True, exog_tvtp=HAMILTON_Z),
            HAMILTON_LLF,
            HAMILTON_LLF_FIT,
        ),
        "TestFilardo": (
            lambda: markov_switching_ar(endog, 4, exog_tvtp=z),
            FILARDO_LLF,
            FILARDO_LLF,
        ),
    }


@pytest.mark.slow
@pytest.mark.parametrize("case", ["TestHamiltonAR1SwitchTVTP", "TestFilardo"])
def test_mle_reaches_the_best_published_optimum(case):
    """``fit_switching(key, spec)`` with default settings reaches max(llf, llf_fit) within 1e-4
    nats or higher on both TVTP cases (E-views' Hamilton fit is -163.914, statsmodels' own
    -161.786)."""
    build, llf, llf_fit = _published_cases()[case]
    fit = fit_switching(jax.random.key(0), build())
    best = float(fit.log_likelihood[-1])
    assert best >= max(llf, llf_fit) - 1e-4, (best, fit.local_optima)
    assert fit.params.transition_matrix.ndim == 3


@pytest.mark.slow
def test_em_on_the_published_tvtp_case_is_monotone(hamilton_spec):
    """EM with TVTP on Hamilton's GNP from the constructor's start (statsmodels' EM leaves the TVTP
    coefficients where they start): a non-decreasing trace that passes E-views' published
    optimum (-163.914) within 200 iterations (it reaches -161.79, statsmodels' fit -161.786)."""
    fit = fit_switching(jax.random.key(0), hamilton_spec, method="em", max_iterations=200)
    trace = fit.log_likelihood
    assert np.all(np.diff(trace) >= -1e-9 * np.abs(trace[:-1]))
    assert trace[-1] > HAMILTON_LLF, trace[-1]


@pytest.mark.slow
def test_ms_ar_forecasts_match_a_monte_carlo_of_the_model(hamilton_spec):
    """MS-AR(1) with TVTP at the published parameters, four steps ahead through a recession
    (z = (1, 1)) and out of it: the forecast's means, 5% and 95% quantiles and regime
    probabilities match an independent NumPy simulation of the model from the filtered
    distribution of (s_T, s_{T-1}) at T (Monte Carlo tolerances)."""
    theta, _ = _sm_ar_theta(HAMILTON_PARAMS, 2, 1, 2, switching_ar=True)
    spec = hamilton_spec
    future = np.array([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0], [1.0, 0.0]])
    fc = forecast_switching(
        jax.random.key(2), spec, theta, horizon=4, future_inputs=future, num_draws=40000
    )
    th = {n: jnp.asarray(v, float) for n, v in theta.items()}
    u = jnp.asarray(spec.inputs)
    _, filt = jax.jit(hamilton_filter)(build_params(spec.structure, th, u), spec.observations, u)
    last = np.asarray(filt[-1]).reshape(2, 2).sum(axis=1)  # P(s_T = j | y), tuples (s_T, s_T-1)
    trans = np.asarray(tvtp_transition_matrices(theta["transition_coefficients"], future))
    mu, phi, sd = theta["means"], theta["ar_coefficients"][:, 0], np.sqrt(theta["variances"])
    rng = np.random.default_rng(5)
    n = 200000
    s = (rng.random(n) < last[1]).astype(int)
    y = np.full(n, RGNP[-1])
    draws, regimes = [], []
    for h in range(4):
        new = (rng.random(n) < trans[h, s, 1]).astype(int)
        y = mu[new] + phi[new] * (y - mu[s]) + sd * rng.normal(size=n)
        s = new
        draws.append(y.copy())
        regimes.append(np.bincount(s, minlength=2) / n)
    draws = np.array(draws).T
    se = draws.std(axis=0) * np.sqrt(1 / n + 1 / fc.draws.shape[0])
    np.testing.assert_array_less(np.abs(fc.mean[:, 0] - draws.mean(axis=0)), 4 * se)
    np.testing.assert_allclose(fc.regime_probs, np.array(regimes), atol=0.005)
    level = int(np.flatnonzero(np.isclose(fc.levels, 0.9))[0])
    np.testing.assert_allclose(fc.lower[level, :, 0], np.quantile(draws, 0.05, axis=0), atol=0.05)
    np.testing.assert_allclose(fc.upper[level, :, 0], np.quantile(draws, 0.95, axis=0), atol=0.05)
