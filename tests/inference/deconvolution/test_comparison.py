"""Permutation-invariant summaries and the side-by-side comparison table."""

import arviz as az
import jax
import numpy as np
import pytest

from attnbayes.inference.deconvolution import em
from attnbayes.inference.deconvolution.comparison import METHODS, compare_deconvolution
from attnbayes.inference.deconvolution.invariants import add_invariants, measure_cdf
from attnbayes.models.deconvolution import DiscreteMeasure


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
    dt = add_invariants(_fake_posterior(atoms, weights), x, 1.0, jax.random.PRNGKey(0))
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
    dt = add_invariants(_fake_posterior(atoms, weights), x, 0.7, jax.random.PRNGKey(1))
    assert dt["posterior"]["z_mean"].dims == ("chain", "draw", "point", "coord")
    assert "nu_cdf" not in dt["posterior"]
    with pytest.raises(ValueError, match="^x"):
        add_invariants(_fake_posterior(atoms, weights), x[:, :1], 0.7, jax.random.PRNGKey(1))


@pytest.mark.slow  # statistical; shares the slow three-atom comparison
def test_comparison_table_is_tidy_and_recomputable(three_atom_data, three_atom_comparison):
    _, z, x = three_atom_data
    table, fits = three_atom_comparison
    assert list(table.columns) == ["method", "metric", "value"]
    assert set(table.method) == set(METHODS)
    assert np.isfinite(table.value).all()
    value = table.set_index(["method", "metric"]).value
    z = np.asarray(z)
    for method, fit in fits.items():
        errors = [
            np.linalg.norm(np.atleast_1d(a - b)) ** 2 for a, b in zip(fit.z_hat, z, strict=True)
        ]
        assert value[method, "mse_z"] == pytest.approx(np.mean(errors))
        lo, hi = fit.intervals[0.9]
        assert value[method, "coverage_90"] == pytest.approx(np.mean((lo <= z) & (z <= hi)))
        assert 0 <= value[method, "coverage_50"] <= value[method, "coverage_90"] <= 1
        assert value[method, "wall_time_s"] > 0
    assert value["oracle", "wasserstein1_nu"] == 0.0
    # EM's z_hat is one attention step at its fitted atoms; its log-likelihood is the trace's end
    em_fit = fits["attention-em"]
    np.testing.assert_allclose(
        em_fit.z_hat, em.posterior_mean(x, em_fit.measure.atoms, em_fit.measure.weights, 1.0)
    )
    assert value["attention-em", "log_likelihood"] == pytest.approx(
        em_fit.log_likelihood_trace[-1], rel=1e-12
    )
    # NUTS summaries: invariant diagnostics present and the oracle is the best z_hat
    for metric in (
        "max_rhat_invariant",
        "min_ess_bulk_invariant",
        "elpd_loo",
        "pareto_k_max",
        "divergences",
    ):
        assert ("nuts", metric) in value.index
    assert value["attention-em", "iterations"] == em_fit.log_likelihood_trace.size - 1
    assert value["attention-em", "converged"] == float(em_fit.converged)
    assert value["nuts", "pareto_k_max"] < 0.7
    assert value["oracle", "mse_z"] <= min(value["nuts", "mse_z"], value["attention-em", "mse_z"])
    # every method has a held-out lpd; the samplers have the MCMC summaries
    for method in METHODS:
        assert np.isfinite(value[method, "heldout_lpd"]), method
    for method in ("nuts", "nuts-dp", "gibbs"):
        assert value[method, "max_rhat_invariant"] < 1.05, method
        assert value[method, "pareto_k_max"] < 0.7, method
    # point fits: the table's log-likelihood is that of the fitted measure
    for method in ("npmle", "approx-gibbs", "oracle"):
        fit = fits[method]
        assert value[method, "log_likelihood"] == pytest.approx(
            float(em.log_likelihood(x, fit.measure.atoms, fit.measure.weights, 1.0)), rel=1e-12
        )
    # the NPMLE maximises the likelihood over all measures (up to its grid): above the K-atom
    # local optimum of approximate Gibbs (= EM for the finite mixture) and above the truth
    assert value["npmle", "log_likelihood"] >= value["approx-gibbs", "log_likelihood"] - 1e-6
    assert value["npmle", "log_likelihood"] > value["oracle", "log_likelihood"]
    assert fits["james-stein"].measure is None


def test_compare_argument_checks():
    x = np.linspace(-1, 1, 9)
    ring_measure = DiscreteMeasure(np.ones((2, 2)), np.array([0.5, 0.5]))
    with pytest.raises(ValueError, match="^true_measure"):
        compare_deconvolution(
            None, np.ones((9, 3)), 1.0, true_measure=ring_measure, methods="oracle"
        )
    with pytest.raises(ValueError, match="^key"):
        compare_deconvolution(3, x, 1.0, methods="nuts")
    # a single method may be given as a string
    result = compare_deconvolution(None, x, 1.0, methods="attention-em")
    assert set(result.table.method) == {"attention-em"}


def test_james_stein_closed_form():
    """Positive-part James-Stein toward the grand mean: B = (N - 3) sigma^2 / S, z_hat =
    xbar + (1 - B)(x - xbar), and the normal EB intervals and predictive it implies."""
    from scipy.stats import norm

    rng = np.random.default_rng(4)
    sigma, n = 1.3, 200
    x = rng.normal(0.5, np.sqrt(2.0**2 + sigma**2), size=n)
    held = rng.normal(0.5, np.sqrt(2.0**2 + sigma**2), size=50)
    result = compare_deconvolution(None, x, sigma, methods="james-stein", x_heldout=held)
    fit = result.fits["james-stein"]
    xbar, spread = x.mean(), np.sum((x - x.mean()) ** 2)
    b = (n - 3) * sigma**2 / spread
    np.testing.assert_allclose(fit.z_hat, xbar + (1 - b) * (x - xbar), rtol=1e-12)
    lo, hi = fit.intervals[0.9]
    half = norm.ppf(0.95) * np.sqrt((1 - b) * sigma**2)
    np.testing.assert_allclose(hi - lo, 2 * half, rtol=1e-10)
    pred_sd = np.sqrt(sigma**2 * (1 - b) / b + sigma**2)
    value = result.table.set_index(["method", "metric"]).value
    assert value["james-stein", "heldout_lpd"] == pytest.approx(
        norm.logpdf(held, xbar, pred_sd).mean(), rel=1e-12
    )
    assert value["james-stein", "log_likelihood"] == pytest.approx(
        norm.logpdf(x, xbar, pred_sd).sum(), rel=1e-12
    )
    # all-equal data: B = 1, every z_hat is the grand mean, zero-width intervals
    flat = compare_deconvolution(None, np.full(9, 2.0), sigma, methods="james-stein").fits[
        "james-stein"
    ]
    np.testing.assert_allclose(flat.z_hat, 2.0)
    np.testing.assert_allclose(flat.intervals[0.5][0], flat.intervals[0.5][1])


def test_heldout_lpd_brute_force():
    """Point fits: mean_i log sum_k w_k N(x_i; mu_k, sigma^2 I); samplers: log of the mean over
    draws of that density (the posterior predictive), against SciPy."""
    from scipy.stats import multivariate_normal

    from attnbayes.inference.deconvolution.comparison import _heldout_lpd, _mixture_lpd

    rng = np.random.default_rng(5)
    held = rng.normal(size=(40, 2))
    atoms = rng.normal(size=(7, 3, 2))
    weights = rng.dirichlet(np.ones(3), size=7)
    weights[2, 1] = 0.0
    weights[2] /= weights[2].sum()
    sigma = 0.8
    dens = np.array(
        [
            [
                sum(
                    w * multivariate_normal(m, sigma**2 * np.eye(2)).pdf(x)
                    for m, w in zip(atoms[s], weights[s], strict=True)
                )
                for x in held
            ]
            for s in range(7)
        ]
    )
    np.testing.assert_allclose(
        _mixture_lpd(held, atoms, weights, sigma), np.log(dens.mean(0)), rtol=1e-12
    )
    measure = DiscreteMeasure(atoms[2], weights[2])
    assert _heldout_lpd(held, measure, sigma) == pytest.approx(np.log(dens[2]).mean(), rel=1e-12)


def test_method_kwargs_checked():
    x = np.linspace(-1, 1, 9)
    with pytest.raises(ValueError, match="^method_kwargs"):
        compare_deconvolution(None, x, 1.0, methods="npmle", method_kwargs={"bogus": {}})
    with pytest.raises(ValueError, match="^x_heldout"):
        compare_deconvolution(None, x, 1.0, methods="npmle", x_heldout=np.ones((4, 2)))
    with pytest.raises(ValueError, match="^key"):
        compare_deconvolution(None, x, 1.0, methods="gibbs")
    with pytest.raises(ValueError, match="^x: James-Stein needs"):
        compare_deconvolution(None, x[:3], 1.0, methods="james-stein")
    with pytest.raises(ValueError, match="^num_atoms_dp"):
        compare_deconvolution(None, x, 1.0, methods="james-stein", num_atoms_dp=1)
