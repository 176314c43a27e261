"""The kernel joint (``attnbayes.models.kernel_joint``): its conditional mean is Gaussian
Nadaraya-Watson, its NumPyro programs reproduce the conditional moments, and bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from nadaraya_watson_data import H_2D, QUERIES_1D, d2l_data, plane_data, queries_2d, vector_values
from numpyro.infer import Predictive

from attnbayes.inference.attention import neg_sq_distance_scores, softmax
from attnbayes.inference.kernel_regression import nadaraya_watson
from attnbayes.models.kernel_joint import (
    component_posterior,
    conditional_mean,
    conditional_moments,
    kernel_conditional_model,
    kernel_joint_model,
)


@pytest.fixture(scope="module")
def d2l_1d():
    return d2l_data(120, seed=0)


@pytest.fixture(scope="module")
def plane_2d():
    return plane_data(100, seed=1)


def test_conditional_mean_of_the_kernel_joint_is_gaussian_nw(d2l_1d, plane_2d):
    x, y = d2l_1d
    np.testing.assert_allclose(
        np.asarray(conditional_mean(x, y, QUERIES_1D, bandwidth=0.4)),
        np.asarray(nadaraya_watson(x, y, QUERIES_1D, kernel="gaussian", bandwidth=0.4)),
        rtol=0,
        atol=1e-12,
    )
    x2, y2 = plane_2d
    values, q2 = vector_values(y2), queries_2d(x2)
    np.testing.assert_allclose(
        np.asarray(conditional_mean(x2, values, q2, bandwidth=H_2D)),
        np.asarray(nadaraya_watson(x2, values, q2, bandwidth=H_2D)),
        rtol=0,
        atol=1e-12,
    )
    weights = component_posterior(x2, q2, bandwidth=H_2D)
    scores = neg_sq_distance_scores(jnp.asarray(q2), jnp.asarray(x2), jnp.asarray(H_2D))
    np.testing.assert_allclose(np.asarray(weights), np.asarray(softmax(scores)), atol=1e-13)


def test_joint_draws_near_the_query_reproduce_the_conditional_mean():
    """Draw (k, v) from the joint program and keep draws with |k - q| < eps: their mean v
    estimates E[v | k = q] up to O(eps^2) window bias (here < 1e-3) and Monte Carlo error."""
    x, y = d2l_data(30, seed=9)
    h, s, q, eps = 0.4, 0.3, 2.5, 0.02
    predictive = Predictive(kernel_joint_model, num_samples=1)
    draws = jax.jit(
        lambda rng_key: predictive(rng_key, x, y, bandwidth=h, value_scale=s, num_draws=400_000)
    )(jax.random.PRNGKey(3))
    k, v = np.asarray(draws["k"][0]), np.asarray(draws["v"][0])
    assert k.shape == v.shape == (400_000,)
    near = np.abs(k - q) < eps
    assert near.sum() > 1000
    exact = float(conditional_mean(x, y, np.array([q]), bandwidth=h)[0])
    se = v[near].std() / np.sqrt(near.sum())
    assert abs(v[near].mean() - exact) < 4 * se + 1e-3


def test_conditional_program_reproduces_the_conditional_moments(plane_2d):
    x2, y2 = plane_2d
    values = np.stack([y2, np.sin(y2)], axis=1)
    h, s, q = np.array([0.5, 1.7]), 0.2, np.array([2.0, 4.0])
    predictive = Predictive(kernel_conditional_model, num_samples=1)
    draws = jax.jit(
        lambda rng_key: predictive(
            rng_key, x2, values, q, bandwidth=h, value_scale=s, num_draws=60_000
        )
    )(jax.random.PRNGKey(4))
    v = np.asarray(draws["v"][0])
    assert v.shape == (60_000, 2)
    moments = conditional_moments(x2, values, q[None], bandwidth=h, value_scale=s)
    se = v.std(0) / np.sqrt(len(v))
    assert np.all(np.abs(v.mean(0) - np.asarray(moments.mean[0])) < 4 * se)
    np.testing.assert_allclose(np.cov(v.T), np.asarray(moments.covariance[0]), rtol=0.03, atol=3e-3)


def test_joint_program_conditions_on_observed_draws():
    x, y = d2l_data(20, seed=10)
    obs_k = np.array([1.0, 2.0, 3.0])
    predictive = Predictive(kernel_joint_model, num_samples=2)
    draws = jax.jit(
        lambda rng_key: predictive(rng_key, x, y, bandwidth=0.3, value_scale=0.1, k=obs_k)
    )(jax.random.PRNGKey(5))
    assert draws["v"].shape == (2, 3) and draws["component"].shape == (2, 3)


def test_kernel_joint_refuses_a_bandwidth_whose_inverse_square_overflows():
    from attnbayes.models.kernel_joint import conditional_mean

    x, y = np.linspace(0, 1, 5), np.arange(5.0)
    with pytest.raises(ValueError, match="^bandwidth"):
        conditional_mean(x, y, np.array([0.5, 10.0]), bandwidth=1e-160)


def test_kernel_joint_programs_reject_bad_input():
    with pytest.raises(ValueError, match="^value_scale:"):
        kernel_joint_model(
            np.arange(3.0), np.arange(3.0), bandwidth=1.0, value_scale=0.0, num_draws=2
        )
    with pytest.raises(ValueError, match="^num_draws:"):
        kernel_joint_model(np.arange(3.0), np.arange(3.0), bandwidth=1.0, value_scale=1.0)
    with pytest.raises(ValueError, match="^values:"):
        conditional_mean(np.arange(3.0), np.arange(4.0), np.zeros(1), bandwidth=1.0)
    with pytest.raises(ValueError, match="^queries:"):
        conditional_mean(np.arange(3.0), np.arange(3.0), np.zeros((1, 2)), bandwidth=1.0)
    with pytest.raises(ValueError, match="^query:"):
        kernel_conditional_model(
            np.arange(3.0),
            np.arange(3.0),
            np.zeros((2, 2)),
            bandwidth=1.0,
            value_scale=1.0,
            num_draws=3,
        )
