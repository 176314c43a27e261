"""Permutation-invariant summaries of mixture draws (``invariants``): the CDF of nu, the
posterior mean and draws of z_i per draw, against brute force."""

import arviz as az
import jax
import numpy as np
import pytest

from attnbayes.inference.deconvolution import em
from attnbayes.inference.deconvolution.invariants import add_invariants, measure_cdf


def _fake_posterior(atoms, weights):
    """A DataTree whose every draw is the same measure (chains x draws = 2 x 2000)."""
    reps = (2, 2000)
    return az.from_dict(
        {
            "posterior": {
                "atoms": np.broadcast_to(atoms, (*reps, *atoms.shape)).copy(),
                "weights": np.broadcast_to(weights, (*reps, *weights.shape)).copy(),
            }
        },
        dims={"atoms": ["atom"], "weights": ["atom"]},
    )


def test_measure_cdf_brute_force():
    rng = np.random.default_rng(1)
    atoms, w = rng.normal(size=(4, 6)), rng.dirichlet(np.ones(6), size=4)
    t = np.linspace(-3, 3, 17)
    expected = np.array([[w[s][atoms[s] <= ti].sum() for ti in t] for s in range(4)])
    np.testing.assert_allclose(measure_cdf(atoms, w, t), expected, atol=1e-14)


def test_add_invariants_per_draw_quantities():
    x = np.array([-2.5, -0.3, 0.2, 2.9, 3.4])
    atoms, weights = np.array([-2.0, 0.0, 3.0]), np.array([0.5, 0.3, 0.2])
    dt = add_invariants(jax.random.PRNGKey(0), _fake_posterior(atoms, weights), x, 1.0)
    post = dt["posterior"]
    zm = np.asarray(em.posterior_mean(x, atoms, weights, 1.0))
    np.testing.assert_allclose(post["z_mean"].values, np.broadcast_to(zm, (2, 2000, 5)))
    np.testing.assert_allclose(
        post["nu_cdf"].values[0, 0], measure_cdf(atoms, weights, post["cdf_point"].values)
    )
    # z_draw ~ sum_k A_ik delta(mu_k): frequencies within 4 binomial standard errors
    resp = np.asarray(em.responsibilities(x, atoms, weights, 1.0))
    draws = post["z_draw"].values.reshape(-1, 5)
    for i in range(5):
        freq = np.array([(draws[:, i] == a).mean() for a in atoms])
        se = np.sqrt(resp[i] * (1 - resp[i]) / draws.shape[0]) + 1e-12
        assert np.all(np.abs(freq - resp[i]) <= 4 * se + 1e-3), i
    assert "log_lik_total" not in post  # no log_likelihood group in this fake


def test_add_invariants_vector_data_shapes():
    x = np.random.default_rng(2).normal(size=(7, 2))
    atoms, weights = np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([0.4, 0.6])
    dt = add_invariants(jax.random.PRNGKey(1), _fake_posterior(atoms, weights), x, 0.7)
    assert dt["posterior"]["z_mean"].dims == ("chain", "draw", "point", "coord")
    assert "nu_cdf" not in dt["posterior"]
    with pytest.raises(ValueError, match="^x"):
        add_invariants(jax.random.PRNGKey(1), _fake_posterior(atoms, weights), x[:, :1], 0.7)


def test_add_invariants_takes_the_key_first():
    """The key comes first (as everywhere in attnbayes): the old order is refused by name."""
    atoms, weights = np.array([-1.0, 1.0]), np.array([0.5, 0.5])
    with pytest.raises(ValueError, match="^key: "):
        add_invariants(_fake_posterior(atoms, weights), np.zeros(3), 1.0, jax.random.PRNGKey(0))


def test_add_invariants_per_unit_sigma():
    """Per-unit noise: each point's own posterior (Bayes by hand), the grid reaching +- 3 of the
    largest s_i; a sigma of the wrong length refused by name."""
    from scipy.special import softmax
    from scipy.stats import norm

    x = np.array([-2.5, -0.3, 0.2, 2.9, 3.4])
    s = np.array([0.5, 1.0, 3.0, 0.8, 2.0])
    atoms, weights = np.array([-2.0, 0.0, 3.0]), np.array([0.5, 0.3, 0.2])
    dt = add_invariants(jax.random.PRNGKey(0), _fake_posterior(atoms, weights), x, s)
    a = softmax(np.log(weights) + norm.logpdf(x[:, None], atoms, s[:, None]), axis=1)
    np.testing.assert_allclose(dt["posterior"]["z_mean"].values[1, 7], a @ atoms, atol=1e-13)
    grid = dt["posterior"]["cdf_point"].values
    np.testing.assert_allclose([grid[0], grid[-1]], [-2.5 - 9.0, 3.4 + 9.0])
    with pytest.raises(ValueError, match=r"^sigma: expected a number or an array of shape"):
        add_invariants(jax.random.PRNGKey(0), _fake_posterior(atoms, weights), x, s[:4])
