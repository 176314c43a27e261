"""The parametrised switching models' regime labels: one convention for the suite
(``regime_ordering``), the ordered priors that express it (``OrderedIID``) and the relabelling
of exchangeable modes (``relabel_regimes``); the constructors' time-varying transition
probabilities (``exog_tvtp``: the inputs' layout, statsmodels' names, start values and prior,
bad input). NumPy and a few eager JAX operations: nothing is compiled beyond them."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest
from numpyro.distributions import constraints
from scipy import stats
from statsmodels.tsa.regime_switching.markov_autoregression import MarkovAutoregression
from statsmodels_cases import RECESSIONS, RGNP

from attnbayes.models.markov_switching import (
    default_priors,
    markov_switching_ar,
    markov_switching_regression,
    markov_switching_var,
    regime_ordering,
    regime_transition_matrix,
    relabel_regimes,
    switching_state_space,
)
from attnbayes.models.regime_laws import OrderedIID
from attnbayes.models.switching import SwitchingParams


def _two_level_params(dynamics_cov=(0.5, 0.5), transition=((0.9, 0.1), (0.1, 0.9))):
    """A two-mode local level model, the modes the same unless ``dynamics_cov`` or
    ``transition`` tell them apart."""
    return SwitchingParams(
        initial_probs=np.array([0.5, 0.5]),
        transition_matrix=np.array(transition),
        initial_means=np.zeros((2, 1)),
        initial_covs=np.full((2, 1, 1), 4.0),
        dynamics_matrices=np.ones((2, 1, 1)),
        dynamics_biases=np.zeros((2, 1)),
        dynamics_covs=np.array(dynamics_cov).reshape(2, 1, 1),
        emission_matrices=np.ones((2, 1, 1)),
        emission_biases=np.zeros((2, 1)),
        emission_covs=np.ones((2, 1, 1)),
        dynamics_input_weights=np.zeros((2, 1, 0)),
        emission_input_weights=np.zeros((2, 1, 0)),
    )


Y = np.random.default_rng(0).normal(size=(12, 1))


def test_exchangeable_modes_are_labelled_by_an_ordered_noise_scale():
    """Modes whose fixed fields are the same are exchangeable: the default free set
    (transition matrix and noise scales) is labelled by increasing emission_cov_scale, whose
    NUTS prior is the iid InverseGamma(3, 2) restricted to that ordering (M! times the iid
    density on the ordered set), so every draw is ordered."""
    spec = switching_state_space(_two_level_params(), Y)
    ordering = regime_ordering(spec)
    assert ordering.parameter == "emission_cov_scale" and ordering.identified
    assert "exchangeable" in ordering.description
    # the next scale labels them when emission_cov_scale is fixed
    assert regime_ordering(spec, ("dynamics_cov_scale",)).parameter == "dynamics_cov_scale"
    prior = default_priors(spec)["emission_cov_scale"]
    assert prior.support is constraints.positive_ordered_vector
    draws = np.asarray(prior.sample(jax.random.key(0), (500,)))
    assert np.all(np.diff(draws, axis=-1) > 0)
    x = jnp.array([0.4, 1.3])
    want = np.sum(stats.invgamma(3.0, scale=2.0).logpdf(np.asarray(x))) + np.log(2.0)
    np.testing.assert_allclose(float(prior.log_prob(x)), want, rtol=1e-6)
    # the other scale keeps its iid law
    other = default_priors(spec)["dynamics_cov_scale"]
    assert other.support is not constraints.positive_ordered_vector
    # the ordered law of a real base is on ordered vectors
    assert OrderedIID(dist.Normal(0.0, 1.0), 3).support is constraints.ordered_vector


@pytest.mark.parametrize(
    "params",
    [
        _two_level_params(dynamics_cov=(0.5, 2.0)),
        _two_level_params(transition=((0.9, 0.1), (0.2, 0.8))),
    ],
    ids=["fixed-covariances-differ", "fixed-transition-not-symmetric"],
)
def test_modes_with_different_fixed_fields_are_labelled_by_them(params):
    spec = switching_state_space(params, Y)
    free = ("dynamics_cov_scale", "emission_cov_scale")
    ordering = regime_ordering(spec, free)
    assert ordering.parameter is None and ordering.identified
    assert "fixed parameters, which differ" in ordering.description
    prior = default_priors(spec, free)["emission_cov_scale"]
    assert prior.support is not constraints.positive_ordered_vector


def test_unordered_exchangeable_modes_and_the_econometric_convention():
    spec = switching_state_space(_two_level_params(), Y)
    ordering = regime_ordering(spec, ("transition_matrix", "emission_biases"))
    assert ordering.parameter is None and not ordering.identified
    regression = markov_switching_regression(Y[:, 0])
    assert regime_ordering(regression).parameter == "intercepts"
    assert regression.support["intercepts"] is constraints.ordered_vector
    # fixed intercepts out of order label the regimes as given, and the output says so
    fixed = regression._replace(theta=regression.theta | {"intercepts": np.array([1.0, -1.0])})
    ordering = regime_ordering(fixed, ("transition_matrix", "variances"))
    assert ordering.parameter is None and "as given" in ordering.description
    with pytest.raises(ValueError, match="^spec: expected a SwitchingSpec"):
        regime_ordering({"theta": {}})


def test_relabel_regimes_permutes_modes_and_transition_rows_and_columns():
    spec = switching_state_space(_two_level_params(), Y)
    theta = dict(spec.theta) | {
        "transition_matrix": np.array([[0.7, 0.3], [0.2, 0.8]]),
        "emission_cov_scale": np.array([2.0, 0.5]),
    }
    again = relabel_regimes(spec, theta, [1, 0])
    np.testing.assert_array_equal(again["transition_matrix"], [[0.8, 0.2], [0.3, 0.7]])
    np.testing.assert_array_equal(again["emission_cov_scale"], [0.5, 2.0])
    with pytest.raises(ValueError, match="^order: expected a permutation"):
        relabel_regimes(spec, theta, [0, 0])


# ----------------------------------------------------------------------------- TVTP

HAMILTON_Z = np.c_[np.ones(len(RGNP)), RECESSIONS]


def test_constructors_lay_out_the_covariates_and_name_the_coefficients_as_statsmodels():
    """The covariates ride in the inputs' last columns (MS-AR: after the y lags, z_{t-p..t} in
    time order, row t of the inputs being row t + p of endog); the coefficients are named as
    statsmodels names them; the start puts the constant's coefficients at the persistent
    matrix (stay 0.9) and the others at 0; the default prior is a Normal on the logits."""
    spec = markov_switching_ar(RGNP, 2, exog_tvtp=HAMILTON_Z)
    s = spec.structure
    assert (s.num_tvtp, s.num_inputs, s.input_width) == (2, 2, 2 + 3 * 2)
    assert "transition_matrix" not in spec.theta and "transition_coefficients" in spec.free
    np.testing.assert_array_equal(spec.inputs[:, :2], np.c_[RGNP[1:-1], RGNP[:-2]])
    for lag in range(3):  # z_{t-2}, z_{t-1}, z_t
        np.testing.assert_array_equal(
            spec.inputs[:, 2 + 2 * lag : 4 + 2 * lag], HAMILTON_Z[lag : len(RGNP) - 2 + lag]
        )
    sm = MarkovAutoregression(RGNP, 2, 2, exog_tvtp=HAMILTON_Z)
    assert set(spec.names["transition_coefficients"]) == {n for n in sm.param_names if ".tvtp" in n}
    p = np.asarray(regime_transition_matrix(s, spec.theta, spec.inputs))
    np.testing.assert_allclose(p, np.broadcast_to([[0.9, 0.1], [0.1, 0.9]], p.shape), atol=1e-12)
    reg = markov_switching_regression(RGNP, num_regimes=3, exog_tvtp=RECESSIONS)  # no constant
    assert reg.inputs.shape == (len(RGNP), 1) and reg.structure.input_width == 1
    np.testing.assert_array_equal(reg.theta["transition_coefficients"], np.zeros((3, 2, 1)))
    prior = default_priors(spec)["transition_coefficients"]
    assert prior.event_shape == (2, 1, 2)
    np.testing.assert_allclose(prior.mean, spec.theta["transition_coefficients"])
    sd = np.sqrt(prior.variance)
    np.testing.assert_allclose(sd[..., 0], 2.5)  # the constant column: 2.5 / 1
    np.testing.assert_allclose(sd[..., 1], 2.5 / np.std(RECESSIONS[2:]))


def test_bad_exog_tvtp_is_refused_by_name():
    """A TVTP covariate matrix of the wrong length, rank or width, or with NaN, inf or text,
    gets a ValueError naming ``exog_tvtp`` (both constructors)."""
    t = len(RGNP)
    for make in (
        lambda z: markov_switching_ar(RGNP, 1, exog_tvtp=z),
        lambda z: markov_switching_regression(RGNP, exog_tvtp=z),
    ):
        with pytest.raises(ValueError, match=r"^exog_tvtp: expected shape \(135, k_tvtp\)"):
            make(HAMILTON_Z[1:])  # one row short
        with pytest.raises(ValueError, match="^exog_tvtp: expected shape"):
            make(HAMILTON_Z[None])  # 3-D
        with pytest.raises(ValueError, match="^exog_tvtp: expected shape"):
            make(np.zeros((t, 0)))  # no covariate
        with pytest.raises(ValueError, match="^exog_tvtp: expected shape"):
            make(1.0)
        for bad in (np.nan, np.inf):
            z = HAMILTON_Z.copy()
            z[5, 1] = bad
            with pytest.raises(ValueError, match="^exog_tvtp: contains 1 non-finite"):
                make(z)
        with pytest.raises(ValueError, match="^exog_tvtp: "):
            make([["a"] * 2] * t)


@pytest.mark.parametrize(
    "build",
    [
        lambda: markov_switching_regression(RGNP[1:], RGNP[:-1], trend="n"),
        lambda: markov_switching_regression(
            RGNP[1:], RGNP[:-1], trend="n", switching_coefficients=False
        ),
        lambda: markov_switching_regression(
            RGNP[2:], np.c_[RGNP[1:-1], RGNP[:-2]], switching_coefficients=[False, True]
        ),
        lambda: markov_switching_ar(RGNP, 2, trend="n", switching_ar=[False, True]),
        lambda: markov_switching_var(np.c_[RGNP[1:], RGNP[:-1] ** 2], 1),
    ],
)
def test_each_default_prior_lives_on_its_parameters_support_and_the_start(build):
    """The priors NUTS samples under (``default_priors``) have the support of each parameter
    (the ordered law where it labels the regimes) and a finite density at the start."""
    spec = build()
    priors = default_priors(spec)
    assert set(priors) == set(spec.free)
    for name, law in priors.items():
        support = law.support
        while isinstance(support, type(constraints.independent(constraints.real, 1))):
            support = support.base_constraint  # the law's event axes wrap the entries'
        assert support == spec.support[name], name
        assert law.event_shape == np.shape(spec.theta[name]), name
        assert np.isfinite(float(law.log_prob(jnp.asarray(spec.theta[name])))), name
