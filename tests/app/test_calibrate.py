"""``attnbayes calibrate``, run in-process through ``attnbayes.app.cli.main``
(``attnbayes.app.calibrate``): the table, DataTrees and figure it writes, the ECDF-PIT panels
(each from its own method's values), and the refusal of bad options before any work."""

import json

import numpy as np
import pandas as pd
import pytest

from attnbayes.inference import methods as registry


def test_calibrate_offers_what_the_library_calibrates():
    from attnbayes.inference.calibration import CALIBRATION_METHODS

    for reading in registry.COMMANDS["calibrate"]:
        offered = registry.command_methods("calibrate", reading)
        assert tuple(m.name for m in offered) == CALIBRATION_METHODS[reading]
        choices = registry.command_choices("calibrate", reading)
        assert set(registry.CALIBRATE_DEFAULT[reading]) <= set(choices)
    assert set(CALIBRATION_METHODS) == set(registry.COMMANDS["calibrate"])


def test_calibrate_writes_table_datatrees_and_figure(tmp_path, run_cli, listing):
    import xarray as xr

    out = tmp_path / "out"
    # a method by its alias ("em"): the outputs carry its registry name, attention-em
    argv = ["calibrate", "--method", "oracle", "--method", "em", "--replicates", 20]
    code, stdout, err = run_cli([*argv, "--points", 20, "--out", out, "--name", "cal"])
    assert code == 0, err
    folder = out / "cal"
    assert stdout.strip() == str(folder / "index.html")
    assert listing(out) == [
        "cal",
        *(f"cal/{f}" for f in ("attention-em.nc", "calibration.csv", "ecdf_pit.png")),
        *(f"cal/{f}" for f in ("index.html", "oracle.nc", "run.json")),
    ]
    table = pd.read_csv(folder / "calibration.csv").set_index("method")
    assert table.loc["attention-em", "verdict"] == "over-confident"
    assert table.loc["oracle", "num_replicates"] == 20
    tree = xr.open_datatree(folder / "oracle.nc", engine="h5netcdf")
    assert tree["z"]["pit"].shape == (20, 20)
    manifest = json.loads((folder / "run.json").read_text())
    assert manifest["attnbayes"] == "calibrate" and manifest["verdicts"]["oracle"] in (
        "calibrated",
        "over-confident",
        "under-confident",
        "biased",
    )


CALIBRATE_CASES = {
    "unknown-method": (["--method", "kalman"], "--method: unknown ['kalman']"),
    "method-of-other-reading": (
        ["--reading", "switching", "--method", "nuts"],
        "--method: unknown ['nuts'] for --reading switching",
    ),
    "steps-for-deconvolution": (["--steps", "10"], "--steps: does not apply"),
    "points-for-switching": (["--reading", "switching", "--points", "10"], "--points: does not"),
    "fraction-above-one": (["--data-fraction", "1.5"], "argument --data-fraction: must be in"),
    "one-replicate": (["--replicates", "1"], "argument --replicates: must be >= 2"),
    "negative-sigma-factor": (["--sigma-factor", "-1"], "argument --sigma-factor"),
    "sigma-factor-switching": (
        ["--reading", "switching", "--sigma-factor", "1.3"],
        "--sigma-factor/--data-fraction: apply to --reading deconvolution only",
    ),
    "escaping-name": (["--name", "../x"], "--name: must be a plain folder name"),
    "missing-checkpoint-dir": (["--checkpoint-dir", "nowhere"], "--checkpoint-dir: nowhere"),
    "fraction-for-learned": (
        ["--method", "em", "--method", "learned", "--data-fraction", "0.5"],
        "--data-fraction: does not apply to --method learned",
    ),
}


@pytest.mark.parametrize("case", list(CALIBRATE_CASES))
def test_calibrate_refuses_bad_options_before_any_work(case, tmp_path, run_cli, monkeypatch):
    from attnbayes.inference import calibration

    def refuse(*args, **kwargs):
        raise AssertionError("JAX work started on bad input")

    monkeypatch.setattr(calibration, "calibrate", refuse)
    monkeypatch.chdir(tmp_path)
    extra, message = CALIBRATE_CASES[case]
    out = tmp_path / "out"
    code, stdout, err = run_cli(["calibrate", *extra, "--out", out])
    assert code == 2, err
    assert stdout == ""
    assert message in err, err
    assert not out.exists()


# ----------------------------------------------------------------------------- ECDF-PIT panels


def ranks_tree(u):
    """A sampler's study as ``sbc`` returns it, reduced to what the figure reads: PIT values of
    one test quantity (``prior_sbc``) and their uniformity table."""
    import xarray as xr

    from attnbayes.inference.diagnostics import uniformity_tests

    pit = xr.Dataset({"mean": ("replicate", u)}, coords={"replicate": np.arange(u.size)})
    table = uniformity_tests(pit).set_index("quantity")
    tree = xr.DataTree.from_dict({"prior_sbc": pit, "uniformity": xr.Dataset.from_dataframe(table)})
    tree.attrs.update(kind="ranks", alpha=0.01)
    return tree


def coverage_tree(u):
    """An interval method's study as ``interval_coverage`` returns it: the PIT of z_1..2."""
    import xarray as xr

    pit = xr.Dataset({"pit": (("replicate", "z_dim_0"), np.stack([u, 1 - u], axis=1))})
    tree = xr.DataTree.from_dict({"z": pit})
    tree.attrs.update(kind="coverage", alpha=0.01)
    return tree


def studies(seed=0):
    """Uniform PIT values (a calibrated sampler, 100 replicates) beside plug-in methods whose
    PIT values are all tied at 0 or 1 (40 replicates), or many ties, or failed throughout."""
    rng = np.random.default_rng(seed)
    ties = np.where(rng.random(60) < 0.5, rng.choice([0.0, 1.0], 60), rng.random(60))
    return {
        "gibbs": ranks_tree(rng.random(100)),
        "attention-em": coverage_tree(rng.choice([0.0, 1.0], 40)),
        "npmle": coverage_tree(ties),
        "failed": coverage_tree(np.full(30, np.nan)),
    }


def test_a_panel_depends_on_its_own_pit_values_only():
    """Issue 33: the tied 0/1 PIT values of attention-EM moved the Gibbs panel from -0.05 to
    -0.255 at PIT 0.25 and made every p-value 0.00."""
    from arviz_stats.base import array_stats

    from attnbayes.app.calibrate import ecdf_pit_panels

    trees = studies()
    panels = ecdf_pit_panels(trees)
    gibbs = panels["gibbs"]
    u = trees["gibbs"]["prior_sbc"]["mean"].values
    assert gibbs.n == 100 and gibbs.target == "mean"
    assert gibbs.p_value == array_stats.uniformity_test(u, method="pot_c")[0] > 0.05
    assert np.all((gibbs.lower <= gibbs.delta) & (gibbs.delta <= gibbs.upper))
    assert gibbs.suspicious_x.size == 0
    for tied in ("attention-em", "npmle"):
        assert panels[tied].p_value < 0.01 and panels[tied].suspicious_x.size > 0
        assert panels[tied].target == "z (first element)"
    assert panels["failed"].n == 0 and panels["failed"].p_text == "n = 0: no test"
    # the same panel with the other methods removed, or in another order
    for others in ({}, {"npmle": trees["npmle"]}, {"failed": trees["failed"]}):
        alone = ecdf_pit_panels({**others, "gibbs": trees["gibbs"]})["gibbs"]
        for field in ("x", "delta", "lower", "upper", "p_value", "suspicious_x"):
            np.testing.assert_allclose(getattr(alone, field), getattr(gibbs, field), atol=1e-12)


def test_the_figure_draws_each_panel_under_its_own_title():
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from attnbayes.app.calibrate import draw_ecdf_pit, ecdf_pit_panels

    panels = ecdf_pit_panels(studies())
    fig = draw_ecdf_pit(panels)
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    axes = [ax for ax in fig.axes if ax.axison]
    assert len(axes) == len(panels)
    for ax, panel in zip(axes, panels.values(), strict=True):
        assert panel.method in ax.get_title() and panel.target in ax.get_title()
        assert [t.get_text() for t in ax.texts] == [panel.p_text]
        drawn = [line.get_ydata() for line in ax.get_lines() if len(line.get_ydata()) > 2]
        assert len(drawn) == (panel.n >= 2)
        if drawn:
            np.testing.assert_array_equal(drawn[0], panel.delta)
    assert panels["gibbs"].p_text.startswith(f"p = {panels['gibbs'].p_value:.2f}")
    # a tidy layout: no panel's title or labels overlap another panel
    boxes = [ax.get_tightbbox(renderer) for ax in axes]
    for i, a in enumerate(boxes):
        assert not any(a.overlaps(b) for b in boxes[i + 1 :])


def test_a_pit_value_above_one_is_refused_not_rescaled():
    """arviz_plots reads a variable with a value above 1 as ranks and rescaled every panel; an
    interval method's PIT of 1 + 1 ulp (float32) did that."""
    from attnbayes.app.calibrate import figure_ecdf_pit

    u = np.random.default_rng(1).random(20)
    u[3] = np.nextafter(np.float32(1), np.float32(2))
    with pytest.raises(ValueError, match="attention-em: PIT values outside"):
        figure_ecdf_pit({"gibbs": ranks_tree(np.random.default_rng(2).random(20)),
                         "attention-em": coverage_tree(u)})  # fmt: skip
