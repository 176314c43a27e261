"""The report's pieces without running it: thinned DataTrees, warnings named by scenario and
method, one number format per column, the iteration-cap note, the calibration tables."""

import warnings

import jax
import numpy as np
import pandas as pd
import pytest
import xarray as xr

from attnbayes.app.report import Scenario, runners
from attnbayes.app.report.calibration import calibration_tables
from attnbayes.app.report.pieces import (
    THINNED_FLOAT32_SIZE,
    TREE_DRAWS_PER_CHAIN,
    formatted,
    iteration_cap_note,
    named_warnings,
    save_report_tree,
    thin_datatree,
    warnings_note,
)
from attnbayes.inference.deconvolution.comparison import DeconvolutionComparison


def _sampler_tree(draws: int = 250) -> xr.DataTree:
    rng = np.random.default_rng(0)

    def group(**shapes):
        return xr.Dataset(
            {
                name: (("chain", "draw", *dims), rng.normal(size=(2, draws, *[5] * len(dims))))
                for name, dims in shapes.items()
            },
            coords={"chain": [0, 1], "draw": np.arange(draws)},
        )

    return xr.DataTree.from_dict(
        {
            "posterior": group(atoms=("atom",), z_draw=("point",), log_lik_total=()),
            "sample_stats": group(lp=()),
            "log_likelihood": group(x=("point",)),
            "posterior_predictive": group(x=("point",)),
            "observed_data": xr.Dataset({"x": (("point",), np.arange(5.0))}),
        }
    )


def test_thinned_datatree_keeps_evenly_spaced_draws_and_says_so(tmp_path):
    full = _sampler_tree(250)
    path = tmp_path / "t.nc"
    save_report_tree(full, path, keep=False)
    thinned = xr.open_datatree(path, engine="h5netcdf")
    step = 3  # ceil(250 / 100)
    assert thinned.attrs["attnbayes_thinned"] == 1
    assert thinned.attrs["thinning_step"] == step
    assert thinned.attrs["draws_per_chain_kept"] == 84 <= TREE_DRAWS_PER_CHAIN
    assert thinned.attrs["draws_per_chain_full"] == 250
    assert thinned.attrs["left_out"].startswith("posterior_predictive, the posterior's z_draw")
    assert "one draw in 3 of each chain (84 of 250)" in thinned.attrs["thinning"]
    assert "z_draw" in thinned.attrs["thinning"]
    assert set(thinned.children) == {"posterior", "sample_stats", "log_likelihood", "observed_data"}
    assert "z_draw" not in thinned["posterior"]
    for group, name in (("posterior", "atoms"), ("sample_stats", "lp"), ("log_likelihood", "x")):
        np.testing.assert_array_equal(
            thinned[group][name].values, full[group][name].values[:, ::step]
        )
    np.testing.assert_array_equal(thinned["posterior"]["draw"].values, np.arange(0, 250, step))
    np.testing.assert_array_equal(thinned["observed_data"]["x"].values, np.arange(5.0))
    kept = tmp_path / "full.nc"
    save_report_tree(full, kept, keep=True)
    whole = xr.open_datatree(kept, engine="h5netcdf")
    assert "attnbayes_thinned" not in whole.attrs
    assert whole["posterior_predictive"].sizes["draw"] == 250
    assert path.stat().st_size < kept.stat().st_size / 2


def test_large_pointwise_arrays_are_stored_in_float32_and_said_so(tmp_path):
    """A pointwise array of more than THINNED_FLOAT32_SIZE numbers (a per-draw z_mean of every
    point) is written in float32, equal to the float64 value rounded once; the per-draw scalars
    and a large array without a point dimension stay float64 (to the bit); the attrs and the
    sentence name the narrowed arrays."""
    rng = np.random.default_rng(1)
    points = THINNED_FLOAT32_SIZE // 100 + 1  # 2 chains x 50 draws x points > the threshold
    posterior = xr.Dataset(
        {
            "z_mean": (("chain", "draw", "point"), rng.normal(size=(2, 50, points))),
            "log_lik_total": (("chain", "draw"), rng.normal(size=(2, 50))),
            "states": (("chain", "draw", "time"), rng.normal(size=(2, 50, points))),
        },
        coords={"chain": [0, 1], "draw": np.arange(50)},
    )
    full = xr.DataTree.from_dict({"posterior": posterior})
    path = tmp_path / "t.nc"
    save_report_tree(full, path, keep=False)
    thinned = xr.open_datatree(path, engine="h5netcdf")
    z_mean = thinned["posterior"]["z_mean"].values
    assert z_mean.dtype == np.float32
    np.testing.assert_array_equal(z_mean, posterior["z_mean"].values.astype(np.float32))
    total = thinned["posterior"]["log_lik_total"].values
    assert total.dtype == np.float64
    np.testing.assert_array_equal(total, posterior["log_lik_total"].values)
    states = thinned["posterior"]["states"].values
    assert states.dtype == np.float64
    np.testing.assert_array_equal(states, posterior["states"].values)
    assert thinned.attrs["float32"] == "posterior/z_mean"
    assert "posterior/z_mean stored in float32" in thinned.attrs["thinning"]
    assert thin_datatree(_sampler_tree(60)).attrs["float32"] == "none"


def test_short_chains_are_kept_whole():
    tree = thin_datatree(_sampler_tree(60))
    assert tree.attrs["thinning_step"] == 1
    assert tree.attrs["draws_per_chain_kept"] == tree.attrs["draws_per_chain_full"] == 60


def test_warnings_are_said_once_each_naming_scenario_and_method():
    said, notes = [], []
    with named_warnings("three-atoms, nuts", said.append, notes):
        for _ in range(3):
            warnings.warn(
                "Estimated shape parameter of Pareto\n distribution", UserWarning, stacklevel=1
            )
        warnings.warn("R-hat above 1.01", RuntimeWarning, stacklevel=1)
    assert said == [
        "warning: three-atoms, nuts: UserWarning: Estimated shape parameter of Pareto distribution",
        "warning: three-atoms, nuts: RuntimeWarning: R-hat above 1.01",
    ]
    assert notes == [line.removeprefix("warning: ") for line in said]
    page = warnings_note(notes)
    assert "three-atoms, nuts: RuntimeWarning: R-hat above 1.01</li>" in page
    assert warnings_note([]) == ""


def test_run_scenario_names_the_method_that_warned(monkeypatch):
    """A warning raised while one method runs (here forced, as ArviZ's Pareto-k warning is
    raised inside compare_deconvolution's PSIS-LOO of that method) is said with the scenario
    and that method, once."""
    calls = []

    def fake(key, x, sigma, *, methods, **kwargs):
        (method,) = methods
        calls.append(method)
        if method == "nuts":
            warnings.warn(
                "Estimated shape parameter of Pareto distribution", UserWarning, stacklevel=1
            )
            warnings.warn(
                "Estimated shape parameter of Pareto distribution", UserWarning, stacklevel=1
            )
        table = pd.DataFrame({"method": [method], "metric": ["mse_z"], "value": [0.5]})
        return DeconvolutionComparison(table, {method: None})

    monkeypatch.setattr(runners, "compare_deconvolution", fake)
    said, warned = [], []
    scenario = Scenario("three-atoms", "three-atoms", {}, 1.0, (20, 20), (10, 10), "test", True)
    comparison, *_ = runners.run_scenario(
        scenario,
        quick=True,
        key=jax.random.PRNGKey(0),
        progress=said.append,
        methods=("attention-em", "nuts", "oracle"),
        warned=warned,
    )
    assert calls == ["attention-em", "nuts", "oracle"]
    assert list(comparison.table.method) == calls and list(comparison.fits) == calls
    line = "three-atoms, nuts: UserWarning: Estimated shape parameter of Pareto distribution"
    assert [m for m in said if m.startswith("warning:")] == [f"warning: {line}"]
    assert warned == [line]


def test_one_number_format_per_column():
    frame = pd.DataFrame(
        {
            "seconds": [0.0001604, 9.082, 13.11],
            "kl": [0.01091, 0.5, 9.91],
            "tasks": [2.0, 1.0, np.nan],
            "tiny": [1.665e-16, 2e-5, 3e-4],
            "label": ["a", "b", "c"],
        }
    )
    shown = formatted(frame)
    # four orders of magnitude apart: scientific, else no value would keep two digits
    assert list(shown["seconds"]) == ["1.604e-04", "9.082e+00", "1.311e+01"]
    assert list(shown["kl"]) == ["0.011", "0.500", "9.910"]
    assert list(shown["tasks"]) == ["2", "1", ""]
    assert list(shown["tiny"]) == ["1.665e-16", "2.000e-05", "3.000e-04"]
    assert list(shown["label"]) == ["a", "b", "c"]
    by_row = formatted(frame[["kl", "tiny"]].T, by_row=True)
    assert list(by_row.loc["kl"]) == ["0.011", "0.500", "9.910"]


def test_iteration_cap_note_names_the_method_and_its_iterations():
    table = pd.DataFrame(
        {
            "method": ["attention-em", "attention-em", "npmle", "npmle"],
            "metric": ["iterations", "converged", "iterations", "converged"],
            "value": [500.0, 0.0, 40.0, 1.0],
        }
    )
    text = iteration_cap_note(table, {"attention-em": 500})
    assert "attention-em stopped at its iteration cap (500 iterations) without meeting" in text
    assert "npmle" not in text
    assert "attention-em stopped after 500 iterations without" in iteration_cap_note(table)
    assert iteration_cap_note(table.assign(value=[500.0, 1.0, 40.0, 1.0])) == ""


@pytest.mark.parametrize("with_states", [False, True])
def test_calibration_tables_are_narrow_and_have_no_empty_column(with_states):
    rows = [
        {"method": "nuts", "kind": "ranks", "verdict": "calibrated", "num_replicates": 100,
         "num_failed": 0, "num_divergent_replicates": 1, "reason": "p = 0.4",
         "min_p_adjusted": 0.4},
        {"method": "attention-em", "kind": "coverage", "verdict": "over-confident",
         "num_replicates": 200, "num_failed": 0, "num_divergent_replicates": 0,
         "reason": "too narrow", "coverage_z_50": 0.13, "se_z_50": 0.03,
         "coverage_z_90": 0.29, "se_z_90": 0.05},
    ]  # fmt: skip
    if with_states:
        rows.append(
            {"method": "imm", "kind": "coverage", "verdict": "calibrated", "num_replicates": 40,
             "num_failed": 0, "num_divergent_replicates": 0, "reason": "fine",
             "coverage_states_50": 0.5, "se_states_50": 0.02, "coverage_states_90": 0.92,
             "se_states_90": 0.01}
        )  # fmt: skip
    page = calibration_tables(pd.DataFrame(rows))
    tables = page.split("<table>")[1:]
    assert len(tables) == 2
    for table in tables:
        head = table.split("</tr>")[0]
        assert head.count("<th>") <= 9
        assert "<th></th>" not in head
    assert "<td>0.1300</td>" in page and "coverage 90%" in page
    assert ("<td>states</td>" in page) == with_states
    assert "<li><b>attention-em</b>: over-confident: too narrow</li>" in page


def test_a_per_unit_scenario_passes_each_point_its_own_noise(monkeypatch):
    """The heteroscedastic scenario: s_i log-uniform on its range, x - z = s_i eps_i, and the
    held-out points' own s_i reach compare_deconvolution; a scalar scenario's data are today's
    (``simulate`` with the same keys)."""
    from attnbayes.app.report.scenarios import SCENARIOS
    from attnbayes.models.deconvolution import simulate

    seen = {}

    def fake(key, x, sigma, *, methods, **kwargs):
        seen[methods[0]] = (np.asarray(x), sigma, kwargs)
        table = pd.DataFrame({"method": list(methods), "metric": ["mse_z"], "value": [0.5]})
        return DeconvolutionComparison(table, {methods[0]: None})

    monkeypatch.setattr(runners, "compare_deconvolution", fake)
    scenario = next(s for s in SCENARIOS if s.per_unit)._replace(num_points=(400, 400))
    key = jax.random.PRNGKey(3)
    _, x, z, _, sigma = runners.run_scenario(
        scenario, quick=True, key=key, progress=lambda m: None, methods=("attention-em",)
    )
    x_seen, sigma_seen, kwargs = seen["attention-em"]
    np.testing.assert_array_equal(x_seen, x)
    assert sigma_seen is sigma and sigma.shape == (400,)
    low, high = scenario.sigma
    assert low <= sigma.min() and sigma.max() <= high
    # log s_i uniform: its quartiles near those of U(log low, log high)
    quartiles = np.quantile(np.log(sigma), [0.25, 0.75])
    np.testing.assert_allclose(
        quartiles, np.log(low) + np.log(high / low) * np.array([0.25, 0.75]), atol=0.15
    )
    eps = (x - z) / sigma
    assert abs(eps.mean()) < 0.15 and abs(eps.std() - 1) < 0.1
    # the scales and the noise come from different keys: independent (a shared key made
    # corr(eps, s) = 0.96, so that the large-s points all sat on one side of their atom);
    # |corr| of 400 independent pairs exceeds 0.2 with probability about 6e-5
    assert abs(np.corrcoef(eps, sigma)[0, 1]) < 0.2
    assert abs(np.corrcoef(np.abs(eps), sigma)[0, 1]) < 0.2
    held = kwargs["sigma_heldout"]
    assert held.shape == (400,) and not np.array_equal(held, sigma)
    assert kwargs["x_heldout"].shape == (400,)
    homoscedastic = runners.scenario_data(SCENARIOS[0], quick=True, key=key)
    key_data = jax.random.split(key, 3)[0]
    _, x_today = simulate(key_data, "three-atoms", 1.0, SCENARIOS[0].num_points[0])
    np.testing.assert_array_equal(homoscedastic.x, x_today)
    assert homoscedastic.sigma == homoscedastic.sigma_heldout == 1.0


def test_the_true_density_averages_over_the_points_noise():
    """sum_k w_k N(t; mu_k, s^2) for one s; the average over s_i for several, in closed form."""
    from attnbayes.app.report.figures import true_density
    from attnbayes.models.deconvolution import DiscreteMeasure

    measure = DiscreteMeasure(np.array([-1.0, 2.0]), np.array([0.25, 0.75]))
    grid = np.linspace(-12, 14, 4001)

    def normal(t, m, s):
        return np.exp(-0.5 * ((t - m) / s) ** 2) / (s * np.sqrt(2 * np.pi))

    one = 0.25 * normal(grid, -1, 0.7) + 0.75 * normal(grid, 2, 0.7)
    np.testing.assert_allclose(true_density(grid, 0.7, measure), one, rtol=1e-12)
    mixed = np.mean(
        [0.25 * normal(grid, -1, s) + 0.75 * normal(grid, 2, s) for s in (0.5, 1.0, 3.0)], 0
    )
    np.testing.assert_allclose(true_density(grid, np.array([0.5, 1.0, 3.0]), measure), mixed)
    np.testing.assert_allclose(np.trapezoid(mixed, grid), 1.0, atol=1e-4)


def test_the_learned_stack_runs_on_the_scalar_scenarios_and_the_ring_says_why_not(monkeypatch):
    """The learned stack (the grid stack, scalar data only) runs on every scalar scenario, one
    sigma or a per-unit s_i; the 2-D ring leaves it out before compare_deconvolution (which refuses
    p = 2 for every method) and hands the page one sentence naming the dimension."""
    from attnbayes.app.report import build
    from attnbayes.app.report.scenarios import SCENARIOS
    from attnbayes.inference.deconvolution.comparison import METHODS

    assert "learned" in METHODS
    ring = next(s for s in SCENARIOS if s.name == "ring")
    sentence = (
        "learned is left out here: the grid stack is for scalar data; the ring scenario is 2-D."
    )
    for scenario in SCENARIOS:
        run, left_out = runners.scenario_methods(scenario, METHODS)
        if scenario is ring:
            assert run == tuple(m for m in METHODS if m != "learned")
            assert left_out == {"learned": sentence}
        else:
            assert run == METHODS and left_out == {}
    # asked for without it, nothing is left out and nothing said
    assert runners.scenario_methods(ring, ("attention-em", "nuts")) == (
        ("attention-em", "nuts"),
        {},
    )

    calls = []

    def fake(key, x, sigma, *, methods, **kwargs):
        calls.append((methods[0], np.shape(x), np.shape(sigma)))
        table = pd.DataFrame({"method": list(methods), "metric": ["mse_z"], "value": [0.5]})
        return DeconvolutionComparison(table, {methods[0]: None})

    monkeypatch.setattr(runners, "compare_deconvolution", fake)
    asked = ("attention-em", "learned", "oracle")
    per_unit = next(s for s in SCENARIOS if s.per_unit)
    for scenario in (SCENARIOS[0], per_unit, ring):
        calls.clear()
        small = scenario._replace(num_points=(20, 20))
        runners.run_scenario(
            small, quick=True, key=jax.random.PRNGKey(0), progress=lambda m: None, methods=asked
        )
        x_shape = (20,) if scenario is not ring else (20, 2)
        sigma_shape = (20,) if scenario.per_unit else ()
        expected = [m for m in asked if not (scenario is ring and m == "learned")]
        assert calls == [(m, x_shape, sigma_shape) for m in expected], scenario.name

    # the report's part of a scenario hands the sentence to its methods block
    seen = {}

    def blocks(*args, left_out=None, **kwargs):
        seen[args[2].name] = left_out

    monkeypatch.setattr(build, "deconvolution_blocks", blocks)
    jobs = [(0, SCENARIOS[0]._replace(num_points=(20, 20)), jax.random.PRNGKey(0))]
    jobs.append((1, ring._replace(num_points=(20, 20)), jax.random.PRNGKey(1)))
    build._scenario_parts(jobs, True, asked, None, False, progress=lambda m: None)
    assert seen == {"three-atoms": {}, "ring": {"learned": sentence}}
