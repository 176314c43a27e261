"""The normal hierarchical model (eight schools): its sites, NUTS on the non-centred form against
PyMC's published run (ArviZ's ``non_centered_eight``), and its refused inputs."""

import jax
import numpy as np
import pytest
from eight_schools import SCHOOLS_SIGMA, SCHOOLS_Y
from numpyro import handlers
from raising import check_refused

from attnbayes.inference.mcmc import run_nuts
from attnbayes.models.hierarchical import DIMS, normal_hierarchical_model

Y, SIGMA = SCHOOLS_Y, SCHOOLS_SIGMA


def _sites(**kwargs):
    model = handlers.seed(normal_hierarchical_model, jax.random.PRNGKey(0))
    return handlers.trace(model).get_trace(**kwargs)


def test_sites_and_parametrisations():
    """Non-centred: theta = mu + tau theta_t exactly; centred: theta sampled; x observed."""
    trace = _sites(x=Y, sigma=SIGMA)
    assert set(trace) == {"mu", "tau", "unit", "theta_t", "theta", "x"}
    mu, tau = trace["mu"]["value"], trace["tau"]["value"]
    np.testing.assert_allclose(trace["theta"]["value"], mu + tau * trace["theta_t"]["value"])
    assert trace["x"]["is_observed"] and trace["x"]["value"].shape == (8,)
    centred = _sites(x=Y, sigma=SIGMA, centered=True)
    assert "theta_t" not in centred and centred["theta"]["type"] == "sample"
    # prior predictive: x drawn, N from num_points with one sigma
    prior = _sites(sigma=2.0, num_points=5)
    assert prior["x"]["value"].shape == (5,) and not prior["x"]["is_observed"]


def _mcse_mean(draws):
    from arviz_stats.base import array_stats

    return float(np.std(draws) / np.sqrt(array_stats.ess(draws, method="bulk")))


def _reference():
    az = pytest.importorskip("arviz_base")
    return az.load_arviz_data("non_centered_eight").posterior


def test_eight_schools_nuts_non_centred_matches_pymc():
    """2 chains x 400 draws: few divergences, and the posterior means of mu and tau within 4
    combined Monte-Carlo standard errors of PyMC's non-centred run (mu 4.31, tau 3.52)."""
    ref = _reference()
    tree = run_nuts(
        jax.random.PRNGKey(3),
        normal_hierarchical_model,
        (Y,),
        {"sigma": SIGMA},
        num_warmup=400,
        num_samples=400,
        dims=DIMS,
        posterior_predictive=False,
    )
    assert int(tree["sample_stats"]["diverging"].sum()) <= 4
    post = tree["posterior"]
    assert post["theta"].dims == ("chain", "draw", "unit")
    for name in ("mu", "tau"):
        ours, theirs = post[name].values, ref[name].values
        tol = 4 * np.hypot(_mcse_mean(ours), _mcse_mean(theirs))
        assert abs(ours.mean() - theirs.mean()) < tol, (name, ours.mean(), theirs.mean(), tol)


@pytest.mark.slow
def test_eight_schools_long_run_matches_pymc():
    """4 chains x 5000 draws: divergences under 0.2% and mu, tau, theta_1 within 4 combined
    Monte-Carlo standard errors of PyMC's run."""
    ref = _reference()
    tree = run_nuts(
        jax.random.PRNGKey(4),
        normal_hierarchical_model,
        (Y,),
        {"sigma": SIGMA},
        num_warmup=1000,
        num_samples=5000,
        num_chains=4,
        dims=DIMS,
        posterior_predictive=False,
    )
    assert int(tree["sample_stats"]["diverging"].sum()) < 0.002 * 20000
    post = tree["posterior"]
    for ours, theirs in (
        (post["mu"].values, ref["mu"].values),
        (post["tau"].values, ref["tau"].values),
        (post["theta"].values[..., 0], ref["theta"].values[..., 0]),
    ):
        tol = 4 * np.hypot(_mcse_mean(ours), _mcse_mean(theirs))
        assert abs(ours.mean() - theirs.mean()) < tol


BAD_CALLS = {
    "sigma-negative": (lambda: _sites(x=Y, sigma=-SIGMA), "^sigma: "),
    "sigma-2d": (lambda: _sites(x=Y, sigma=np.ones((8, 2))), "^sigma: "),
    "sigma-length": (lambda: _sites(x=Y, sigma=SIGMA[:3]), "^sigma: "),
    "sigma-nan": (lambda: _sites(x=Y, sigma=np.where(Y > 20, np.nan, SIGMA)), "^sigma: "),
    "x-2d": (lambda: _sites(x=np.ones((8, 2)), sigma=1.0), "^x: "),
    "x-inf": (lambda: _sites(x=np.where(Y > 20, np.inf, Y), sigma=SIGMA), "^x: "),
    "no-size": (lambda: _sites(sigma=1.0), "^num_points: "),
    "num-points": (lambda: _sites(x=Y, sigma=SIGMA, num_points=3), "^num_points: "),
    "tau-scale": (lambda: _sites(x=Y, sigma=SIGMA, tau_scale=0.0), "^tau_scale: "),
    "mu-loc": (lambda: _sites(x=Y, sigma=SIGMA, mu_loc=np.inf), "^mu_loc: "),
}


@pytest.mark.usefixtures("full_tracebacks")
@pytest.mark.parametrize("label", list(BAD_CALLS))
def test_bad_input_is_refused(label):
    call, pattern = BAD_CALLS[label]
    check_refused(call, ValueError, pattern)
