"""The side-by-side comparison of deconvolution methods: the tidy table, its argument checks,
James-Stein, the held-out predictive density, and the 1-D Wasserstein distance."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from raising import jax_frames
from scipy.stats import wasserstein_distance

from attnbayes.inference.deconvolution import comparison as comparison_module
from attnbayes.inference.deconvolution import em
from attnbayes.inference.deconvolution.comparison import (
    METHODS,
    compare_deconvolution,
    wasserstein1,
)
from attnbayes.models.deconvolution import DiscreteMeasure


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


COMPARE_X1 = np.array([-1.0, 0.5, 2.0, 3.0])
COMPARE_BAD_CALLS = {  # the older bad-input catalogue's cases of the comparison
    "compare-methods": (
        lambda: compare_deconvolution(None, COMPARE_X1, 1.0, methods=("bogus",)),
        "^methods: ",
    ),
    "compare-nuts-key": (
        lambda: compare_deconvolution(None, COMPARE_X1, 1.0, methods=("nuts",)),
        "^key: ",
    ),
    "compare-oracle": (
        lambda: compare_deconvolution(None, COMPARE_X1, 1.0, methods=("oracle",)),
        "^true_measure: ",
    ),
    "compare-sigma-shape": (
        lambda: compare_deconvolution(None, COMPARE_X1, np.ones(3), methods="sure"),
        "^sigma: ",
    ),
    "compare-sigma-heldout-missing": (
        lambda: compare_deconvolution(
            None, COMPARE_X1, np.ones(4), methods="sure", x_heldout=COMPARE_X1
        ),
        "^sigma_heldout: required",
    ),
    "compare-sigma-heldout-shape": (
        lambda: compare_deconvolution(
            None,
            COMPARE_X1,
            np.ones(4),
            methods="sure",
            x_heldout=COMPARE_X1[:2],
            sigma_heldout=np.ones(4),
        ),
        "^sigma_heldout: ",
    ),
    "compare-sigma-heldout-alone": (
        lambda: compare_deconvolution(None, COMPARE_X1, 1.0, methods="sure", sigma_heldout=1.0),
        "^sigma_heldout: given without x_heldout",
    ),
    "compare-x-nan": (
        lambda: compare_deconvolution(None, np.array([-1.0, np.nan, 2.0, 3.0]), 1.0),
        "^x: ",
    ),
}


@pytest.mark.usefixtures("full_tracebacks")
@pytest.mark.parametrize("label", list(COMPARE_BAD_CALLS))
def test_bad_input_is_refused_before_jax(label):
    """A ValueError naming the argument, raised before JAX runs."""
    call, pattern = COMPARE_BAD_CALLS[label]
    with pytest.raises(ValueError, match=pattern) as excinfo:
        call()
    assert type(excinfo.value) is ValueError
    assert not jax_frames(excinfo)


# ----------------------------------------------------------------------------- wasserstein1


@pytest.mark.parametrize("seed", range(6))
def test_wasserstein1_matches_scipy(seed):
    rng = np.random.default_rng(seed)
    ka, kb = rng.integers(1, 8, size=2)
    a = rng.normal(0, 2, ka)
    b = rng.normal(0.5, 1, kb)
    if seed % 2:  # shared atoms (ties across the two measures)
        b[: min(ka, kb)] = a[: min(ka, kb)]
    wa = rng.dirichlet(np.ones(ka))
    wb = rng.dirichlet(np.ones(kb))
    expected = wasserstein_distance(a, b, wa, wb)
    np.testing.assert_allclose(wasserstein1(a, wa, b, wb), expected, rtol=1e-12, atol=1e-14)
    # Symmetric, zero on itself, accepts (K, 1) atoms and JAX arrays.
    np.testing.assert_allclose(wasserstein1(b, wb, a, wa), expected, rtol=1e-12, atol=1e-14)
    assert wasserstein1(a, wa, a, wa) == 0.0
    np.testing.assert_allclose(
        wasserstein1(jnp.asarray(a[:, None]), jnp.asarray(wa), b[:, None], wb),
        expected,
        rtol=1e-12,
        atol=1e-14,
    )


def test_wasserstein1_point_masses():
    assert wasserstein1([1.0], [1.0], [3.5], [1.0]) == pytest.approx(2.5, rel=1e-15)
    # Moving mass 0.3 from 0 to 2: W1 = 0.6.
    got = wasserstein1([0.0, 2.0], [1.0, 0.0], [0.0, 2.0], [0.7, 0.3])
    assert got == pytest.approx(0.6, rel=1e-14)


def _raiser(exc):
    def stub(*args, **kwargs):
        raise exc

    return stub


def test_compare_deconvolution_checks_sizes_before_sampling(monkeypatch):
    monkeypatch.setattr(
        comparison_module,
        "run_nuts",
        _raiser(AssertionError("sampling")),
    )
    monkeypatch.setattr(
        comparison_module,
        "run_gibbs",
        _raiser(AssertionError("sampling")),
    )
    x = np.linspace(-2.0, 2.0, 30)
    key = jax.random.PRNGKey(0)
    for method, kwargs, pattern in (
        ("nuts", {"nuts_kwargs": {"num_samples": 2}}, "^num_samples/num_chains: nuts: "),
        ("nuts", {"nuts_kwargs": {"num_chains": 1}}, "at least 2 chains"),
        ("gibbs", {"method_kwargs": {"gibbs": {"num_samples": 6}}}, "PSIS-LOO"),
        ("nuts-dp", {"nuts_kwargs": {"num_samples": 10}}, "^num_samples/num_chains: nuts-dp"),
    ):
        with pytest.raises(ValueError, match=pattern):
            compare_deconvolution(key, x, 1.0, methods=(method,), **kwargs)


# ----------------------------------------------------------------------------- per-unit sigma


def _heteroscedastic_data(n=40, m=20):
    """Three atoms, s_i log-uniform on [0.5, 3]: (z, x, s) and held-out (x, s)."""
    rng = np.random.default_rng(8)
    atoms, weights = np.array([-2.0, 0.0, 3.0]), np.array([0.5, 0.3, 0.2])
    s = np.exp(rng.uniform(np.log(0.5), np.log(3.0), n + m))
    z = rng.choice(atoms, size=n + m, p=weights)
    x = z + s * rng.normal(size=n + m)
    return DiscreteMeasure(atoms, weights), z[:n], x[:n], s[:n], x[n:], s[n:]


def test_per_unit_sigma_normal_rules_and_oracle_brute_force():
    """With s_i per unit: the normal rules are ``shrinkage``'s, with normal plug-in intervals
    and the predictive N(m, A + s^2) (James-Stein N(m, s^2 / B)); the oracle's z_hat and held-out
    lpd are the brute-force Bayes rule and mixture density with each point's own s."""
    from scipy.stats import norm

    from attnbayes.inference.deconvolution import shrinkage

    measure, z, x, s, held, held_s = _heteroscedastic_data()
    result = compare_deconvolution(
        None,
        x,
        s,
        z_true=z,
        true_measure=measure,
        x_heldout=held,
        sigma_heldout=held_s,
        methods=("james-stein", "sure", "normal-eb", "oracle"),
    )
    value = result.table.set_index(["method", "metric"]).value
    for method, rule in (
        ("sure", shrinkage.sure_shrinkage),
        ("normal-eb", shrinkage.normal_eb),
        ("james-stein", shrinkage.james_stein),
    ):
        fit, direct = result.fits[method], rule(x, s)
        np.testing.assert_allclose(fit.z_hat, direct.z_hat, rtol=1e-12)
        lo, hi = fit.intervals[0.9]
        np.testing.assert_allclose(hi - lo, 2 * norm.ppf(0.95) * direct.posterior_sd, rtol=1e-10)
        m = float(direct.location)
        if method == "james-stein":
            b = float(direct.shrinkage[0])
            sd, held_sd = s / np.sqrt(b), held_s / np.sqrt(b)
        else:
            a = float(direct.prior_variance)
            sd, held_sd = np.sqrt(a + s**2), np.sqrt(a + held_s**2)
            assert float(fit.hyperparameters["prior_variance"]) == a
        assert value[method, "log_likelihood"] == pytest.approx(
            norm.logpdf(x, m, sd).sum(), rel=1e-12
        )
        assert value[method, "heldout_lpd"] == pytest.approx(
            norm.logpdf(held, m, held_sd).mean(), rel=1e-12
        )
        assert value[method, "mse_z"] == pytest.approx(np.mean((direct.z_hat - z) ** 2))
    atoms, weights = np.asarray(measure.atoms), np.asarray(measure.weights)
    post = weights * norm.pdf(x[:, None], atoms, s[:, None])
    np.testing.assert_allclose(result.fits["oracle"].z_hat, post @ atoms / post.sum(1), rtol=1e-10)
    dens = (weights * norm.pdf(held[:, None], atoms, held_s[:, None])).sum(1)
    assert value["oracle", "heldout_lpd"] == pytest.approx(np.log(dens).mean(), rel=1e-12)
    assert value["oracle", "log_likelihood"] == pytest.approx(np.log(post.sum(1)).sum(), rel=1e-12)
    # a constant vector of scales is the homoscedastic problem
    one = compare_deconvolution(
        None, x, 1.3, x_heldout=held, methods=("james-stein", "sure", "normal-eb")
    ).table
    vec = compare_deconvolution(
        None,
        x,
        np.full(len(x), 1.3),
        x_heldout=held,
        sigma_heldout=np.full(len(held), 1.3),
        methods=("james-stein", "sure", "normal-eb"),
    ).table
    keep = one.metric != "wall_time_s"
    np.testing.assert_allclose(vec.value[keep], one.value[keep], rtol=1e-10)


def test_point_log_density_per_unit_sigma_brute_force():
    from scipy.stats import multivariate_normal

    from attnbayes.inference.deconvolution.comparison import _point_log_density

    rng = np.random.default_rng(9)
    held = rng.normal(size=(12, 2))
    atoms = rng.normal(size=(4, 2))
    weights = rng.dirichlet(np.ones(4))
    for rows in (rng.uniform(0.5, 2.0, (12, 1)), rng.uniform(0.5, 2.0, (12, 2))):
        cov = np.broadcast_to(rows, held.shape) ** 2
        dens = [
            sum(
                w * multivariate_normal(mu, np.diag(c)).pdf(xi)
                for mu, w in zip(atoms, weights, strict=True)
            )
            for xi, c in zip(held, cov, strict=True)
        ]
        np.testing.assert_allclose(
            _point_log_density(held, atoms, weights, rows), np.log(dens), rtol=1e-12
        )
