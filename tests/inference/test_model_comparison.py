"""Model comparison: one-step predictive densities against the Kalman filter on prefixes, LFO
against its closed form when the parameters are known, PSIS-LOO tables across K."""

import jax
import numpy as np
import pytest
import xarray as xr

from attnbayes.inference import model_comparison as mc
from attnbayes.inference.switching.filters import (
    gpb1_filter,
    gpb2_filter,
    imm_filter,
    kalman_filter,
    one_step_log_predictive,
)
from attnbayes.models.deconvolution import simulate
from attnbayes.models.kinematics import coordinated_turn
from attnbayes.models.switching import SwitchingPriors, maneuvering_target
from attnbayes.models.switching import simulate as simulate_switching


@pytest.fixture(scope="module")
def series():
    params = maneuvering_target()
    _, _, y = simulate_switching(jax.random.PRNGKey(5), params, 20)
    y = np.asarray(y).copy()
    y[6] = np.nan
    return params, y


@pytest.mark.parametrize(
    ("method", "filt"), [("imm", imm_filter), ("gpb1", gpb1_filter), ("gpb2", gpb2_filter)]
)
def test_one_step_terms_sum_to_the_filter_log_likelihood(series, method, filt):
    params, y = series
    terms = np.asarray(one_step_log_predictive(params, y, method=method))
    assert terms.shape == (len(y),)
    assert terms[6] == pytest.approx(0.0, abs=1e-12)  # a missing row adds nothing
    assert terms.sum() == pytest.approx(float(filt(params, y).log_likelihood), abs=1e-9)


def test_one_mode_terms_are_kalman_prefix_differences(series):
    _, y = series
    params = maneuvering_target(turn_rates_deg=())
    terms = np.asarray(one_step_log_predictive(params, y))
    prefix = [0.0] + [float(kalman_filter(params, y[:t]).log_likelihood) for t in range(1, 6)]
    np.testing.assert_allclose(terms[:5], np.diff(prefix), rtol=0, atol=1e-9)
    with pytest.raises(ValueError, match="^method"):
        one_step_log_predictive(params, y, method="exact")


def test_draw_params_scales_each_draw(series):
    params, _ = series
    rng = np.random.default_rng(0)
    post = xr.Dataset(
        {
            "dynamics_cov_scale": (("chain", "draw", "mode"), rng.uniform(0.5, 2, (2, 3, 2))),
            "emission_cov_scale": (("chain", "draw", "mode"), rng.uniform(0.5, 2, (2, 3, 2))),
        }
    )
    draws = mc.draw_params(params, post)
    assert draws.dynamics_covs.shape == (2, 3, 2, 4, 4)
    c, d, j = 1, 2, 1
    np.testing.assert_allclose(
        draws.dynamics_covs[c, d, j],
        post["dynamics_cov_scale"].values[c, d, j] * params.dynamics_covs[j],
    )
    np.testing.assert_allclose(
        draws.emission_covs[c, d, j],
        post["emission_cov_scale"].values[c, d, j] * params.emission_covs[j],
    )
    np.testing.assert_array_equal(draws.transition_matrix[c, d], params.transition_matrix)


def test_lfo_with_known_parameters_is_the_filter_predictive(series):
    """With no priors theta is fixed, so every draw gives the same one-step density: LFO-CV
    must return exactly the filter's log p(y_t | y_{1:t-1}) for t > L, whatever it refits."""
    params, y = series
    # identical draws give constant importance ratios, which ArviZ answers with refits
    with pytest.warns(UserWarning, match="refits"):
        result, tree, fits = mc.switching_lfo(
            jax.random.PRNGKey(0),
            params,
            y,
            min_observations=15,
            gibbs_kwargs={"num_warmup": 5, "num_samples": 20, "num_chains": 2},
        )
    expected = np.asarray(one_step_log_predictive(params, y))[15:]
    np.testing.assert_allclose(np.asarray(result.elpd_i), expected, rtol=0, atol=1e-9)
    assert result.elpd == pytest.approx(expected.sum(), abs=1e-8)
    assert result.n_data_points == 5 and fits >= 1
    ll = tree["log_likelihood"]["observations"]
    assert ll.dims == ("chain", "draw", "time") and ll.shape == (2, 20, 20)
    np.testing.assert_allclose(ll.values[1, 7], np.asarray(one_step_log_predictive(params, y)))


def test_compare_num_modes_and_its_checks(series):
    params, y = series
    # same shapes as the test above, so the compiled sampler is shared
    candidates = {"left turn": params, "right turn": maneuvering_target(turn_rate_deg=-3.0)}
    priors = {"left turn": SwitchingPriors(emission_cov_scale=(3.0, 2.0))}
    result = mc.compare_num_modes(
        jax.random.PRNGKey(1),
        candidates,
        y,
        min_observations=16,
        priors=priors,
        gibbs_kwargs={"num_warmup": 5, "num_samples": 20, "num_chains": 2},
    )
    assert set(result.table.index) == set(candidates)
    assert list(result.summary.columns[:3]) == ["num_modes", "elpd_lfo", "se"]
    assert result.summary.loc["left turn", "gibbs_fits"] >= 2
    for name in candidates:
        assert result.table.loc[name, "elpd"] == pytest.approx(result.lfo[name].elpd)
        assert result.lfo[name].n_data_points == 4
    with pytest.raises(ValueError, match="^candidates"):
        mc.compare_num_modes(jax.random.PRNGKey(0), {"a": params}, y, min_observations=5)
    with pytest.raises(ValueError, match="^priors: names"):
        mc.compare_num_modes(
            jax.random.PRNGKey(0), candidates, y, min_observations=5, priors={"x": None}
        )
    with pytest.raises(ValueError, match="^min_observations"):
        mc.switching_lfo(jax.random.PRNGKey(0), params, y, min_observations=20)


@pytest.mark.slow  # statistical: model selection on simulated data
def test_compare_num_atoms_prefers_enough_atoms():
    _, x = simulate(jax.random.PRNGKey(3), "three-atoms", 1.0, 150)
    result = mc.compare_num_atoms(
        jax.random.PRNGKey(4),
        x,
        1.0,
        (1, 3),
        sampler_kwargs={"num_warmup": 200, "num_samples": 300},
    )
    assert list(result.table.index) == ["K = 3", "K = 1"]
    assert result.table.loc["K = 1", "elpd_diff"] < -4 * result.table.loc["K = 1", "dse"]
    assert result.summary.loc["K = 3", "max_rhat"] < 1.05
    direct = mc.loo_compare(result.datatrees)
    assert direct.loc["K = 1", "elpd"] == pytest.approx(result.table.loc["K = 1", "elpd"])
    with pytest.raises(ValueError, match="^num_atoms"):
        mc.compare_num_atoms(jax.random.PRNGKey(0), x, 1.0, (2, 2))
    with pytest.raises(ValueError, match="^sampler"):
        mc.compare_num_atoms(jax.random.PRNGKey(0), x, 1.0, (1, 2), sampler="hmc")
    with pytest.raises(ValueError, match="log_likelihood"):
        mc.loo_compare({"a": result.datatrees["K = 1"], "b": xr.DataTree()})


def test_maneuvering_target_with_several_turns():
    default, same = maneuvering_target(), maneuvering_target(turn_rates_deg=(3.0,))
    for a, b in zip(default, same, strict=True):
        np.testing.assert_array_equal(a, b)
    three = maneuvering_target(turn_rates_deg=(3.0, -3.0))
    np.testing.assert_allclose(three.initial_probs @ three.transition_matrix, three.initial_probs)
    np.testing.assert_array_equal(three.dynamics_matrices[2], coordinated_turn(np.deg2rad(-3.0)))
    one = maneuvering_target(turn_rates_deg=())
    assert one.transition_matrix.shape == (1, 1) and one.dynamics_covs.shape == (1, 4, 4)
