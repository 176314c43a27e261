"""The parametrised switching models' regime labels: one convention for the suite
(``regime_ordering``), the ordered priors that express it (``OrderedIID``) and the relabelling
of exchangeable modes (``relabel_regimes``). NumPy and a few eager JAX operations: nothing is
compiled beyond them."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest
from numpyro.distributions import constraints
from scipy import stats

from attnbayes.models.markov_switching import (
    OrderedIID,
    default_priors,
    markov_switching_regression,
    regime_ordering,
    relabel_regimes,
    switching_state_space,
)
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
