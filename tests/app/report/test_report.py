"""The report: `attnbayes report --quick` writes every section, figure and table; results.csv
and the DataTrees load back and agree; a failed run leaves nothing behind."""

import functools
import os
import re
import stat
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from attnbayes.app import outputs, report
from attnbayes.app.cli import main
from attnbayes.app.report import SECTIONS, write_report
from attnbayes.app.report.calibration import CALIBRATION
from attnbayes.app.report.learned import FAMILIES as LEARNED_FAMILIES
from attnbayes.app.report.learned import LEARNED
from attnbayes.app.report.learned import POINT_METHODS as LEARNED_POINT_METHODS
from attnbayes.inference.deconvolution.comparison import METHODS
from attnbayes.inference.diagnostics import diagnostics

# Smaller than `--quick` where no check below depends on the size: fewer points and NUTS
# draws, a shorter maneuvering target with fewer Gibbs draws, and K in {1, 3} for PSIS-LOO.
# Compilation dominates the run, so this saves runtime only (about 10 s of 150).
SMALL_SCENARIO = report.SCENARIOS[0]._replace(num_points=(100, 1000), nuts_draws=(100, 1000))
SMALL_SWITCHING = report.SWITCHING._replace(num_steps=(40, 200), gibbs_draws=(100, 1000))
SMALL_ATOM_COUNTS = ((1, 3), report.ATOM_COUNTS[1])
SMALL_LEARNED = LEARNED._replace(
    num_tasks=(3, 12), sizes=((60, 300), LEARNED.sizes[1]), nuts_draws=(60, 150)
)
# section 9 with the cheaper sampler (Gibbs) for the ranks and the wrong sampler: NUTS's own
# calibration is tests/inference/diagnostics/test_sbc.py's
SMALL_CALIBRATION = CALIBRATION._replace(
    replicates=(30, 100),
    interval_replicates=(40, 200),  # studies of unequal lengths share the ECDF-PIT figure
    sampler_draws=(100, 300),
    switching_steps=(15, 50),
    deconvolution=("gibbs", "attention-em", "oracle"),
    switching=("imm",),
    wrong_method="gibbs",
)


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory):
    """`attnbayes report --quick` run once, in-process, into a fresh folder, with the sizes
    above (the CLI's `write_report` is given them; everything else is the command's)."""
    out = tmp_path_factory.mktemp("reports")
    small = functools.partial(
        write_report,
        scenarios=(SMALL_SCENARIO,),
        switching=SMALL_SWITCHING,
        atom_counts=SMALL_ATOM_COUNTS,
        learned=SMALL_LEARNED,
        calibration=SMALL_CALIBRATION,
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(report, "write_report", small)
        # the parts on two worker processes, as `make run` runs them
        status = main(["report", "--quick", "--out", str(out), "--seed", "1", "--workers", "2"])
    assert status == 0
    folder = next(p for p in out.iterdir() if not p.name.startswith("."))
    return out, folder


def test_quick_report_has_every_section_figure_and_table(quick_report):
    out, folder = quick_report
    assert [p.name for p in out.iterdir()] == [folder.name]  # no temporary folder left
    page = (folder / "index.html").read_text(encoding="utf-8")
    positions = [page.index(f'<h2 id="{sid}">') for sid, _ in SECTIONS]
    assert positions == sorted(positions)  # every section, in order
    for anchor in (
        'id="data-three-atoms"',
        'id="data-maneuvering-target"',
        'id="methods-three-atoms"',
        'id="methods-maneuvering-target"',
        'id="diagnostics-three-atoms"',
        'id="diagnostics-maneuvering-target"',
        'id="atoms"',
        'id="dp-three-atoms"',
        'id="modes"',
        'id="learning-methods"',
        'id="learning-shift"',
        'id="learned-regret"',
        'id="learned-nuts"',
        'id="learned-coverage"',
        'id="learned-batting"',
        'id="learned-link"',
        'id="learned-pooling"',
        'id="calibration-table"',
        'id="calibration-ecdf"',
    ):
        assert anchor in page, anchor
    pngs = sorted(folder.glob("*.png"))
    inlined = re.findall(r'<img alt="[^"]+" src="data:image/png;base64,', page)
    assert len(inlined) == len(pngs) >= 15
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in pngs)
    for name in (
        "three-atoms-nuts-ranks",
        "three-atoms-nuts-ppc",
        "maneuvering-target-gibbs-ppc",
        "atoms-loo",
        "modes-lfo",
        "simplex-paths",
        "attention-matrices",
        "three-atoms-em-attention",
        "nadaraya-watson",
        "learned-regret",
        "learned-length",
        "learned-batting",
        "learned-pooling",
        "calibration_ecdf_pit",
    ):
        assert (folder / f"{name}.png").exists(), name
    assert page.count("<table>") >= 10
    for text in ("mse_z", "state_rmse", "elpd_diff", "p_worse", "share_exact_zeros", "loo_cv"):
        assert f"<th>{text}</th>" in page, text
    mode = stat.S_IMODE(folder.stat().st_mode)
    umask = os.umask(0)
    os.umask(umask)
    assert mode == 0o777 & ~umask


def test_results_csv_and_datatrees_load_back(quick_report):
    _, folder = quick_report
    results = pd.read_csv(folder / "results.csv")
    assert list(results.columns) == ["section", "scenario", "method", "metric", "value"]
    assert {sid for sid, _ in SECTIONS} == set(results.section)
    assert np.isfinite(results.value).all()
    assert value_of(results, "data", "three-atoms", "num_points") == SMALL_SCENARIO.num_points[0]
    methods = results.query("section == 'methods' and scenario == 'three-atoms'").method
    assert set(methods) == set(METHODS)

    def value(**where):
        query = " and ".join(f"{k} == {v!r}" for k, v in where.items())
        return results.query(query).value.item()

    nuts = xr.open_datatree(folder / "three-atoms-nuts.nc", engine="h5netcdf")
    for group in ("posterior", "sample_stats", "log_likelihood", "posterior_predictive"):
        assert group in nuts.children
    assert float(nuts["posterior"]["log_lik_total"].mean()) == pytest.approx(
        value(section="methods", scenario="three-atoms", method="nuts", metric="log_likelihood"),
        rel=1e-12,
    )
    gibbs = xr.open_datatree(folder / "maneuvering-target-gibbs.nc", engine="h5netcdf")
    states = gibbs["posterior"]["states"]
    assert states.dims == ("chain", "draw", "time", "state_dim")
    # the sampler diagnostics in results.csv are those of the DataTree on disk
    assert diagnostics(gibbs, var_names=["states"]).max_r_hat == pytest.approx(
        value(
            section="methods",
            scenario="maneuvering-target",
            method="gibbs",
            metric="max_rhat_states",
        ),
        rel=1e-12,
    )
    two = xr.open_datatree(folder / "maneuvering-target-gibbs-2-modes.nc", engine="h5netcdf")
    ll = two["log_likelihood"]["observations"]
    assert ll.dims == ("chain", "draw", "time") and np.isfinite(ll).all()
    elpd = value(
        section="model-comparison",
        scenario="maneuvering-target",
        method="2 modes",
        metric="elpd_lfo",
    )
    assert elpd == pytest.approx(
        value(
            section="model-comparison",
            scenario="maneuvering-target",
            method="2 modes",
            metric="elpd",
        ),
        rel=1e-12,
    )
    # held-out steps: the one-step densities of the full-data fit bound nothing, but the LFO
    # elpd per step must be a plausible log density for 2-D observations with sigma = 10
    per_step = value(
        section="model-comparison",
        scenario="maneuvering-target",
        method="2 modes",
        metric="elpd_per_step",
    )
    assert -12 < per_step < -6


def value_of(results, section, scenario, metric):
    rows = results.query("section == @section and scenario == @scenario and metric == @metric")
    return rows.value.item()


def test_learning_section_scores_every_method_and_the_posterior_shift(quick_report):
    _, folder = quick_report
    results = pd.read_csv(folder / "results.csv").query("section == 'learning'")
    learned = results[results.scenario == "1-d-switching-ar"]
    for method in ("mle", "em", "nuts", "gibbs"):
        rows = learned[learned.method == method].set_index("metric").value
        assert np.isfinite(rows["heldout_lpd_per_step"]), method
        assert np.isfinite(rows["rmse_transition_matrix"]), method
    shift = results[results.scenario.str.startswith("shift-")]
    assert set(shift.method) == {"exact", "exact-repeat", "gpb2", "imm"}
    assert (shift.query("metric == 'max_abs_shift'").value >= 0).all()


def test_learned_section_carries_regret_coverage_batting_link_and_pooling(quick_report):
    _, folder = quick_report
    results = pd.read_csv(folder / "results.csv").query("section == 'learned'")
    for family in LEARNED_FAMILIES:
        rows = results[results.scenario == f"regret-{family}"]
        assert set(rows.method) == set(LEARNED_POINT_METHODS), family
        assert (rows.query("metric == 'num_tasks'").value == SMALL_LEARNED.num_tasks[0]).all()
    nuts = results[results.scenario == "nuts-dp"]
    assert set(nuts.method) == {"learned", "nuts-dp"}
    coverage = results[(results.scenario == "coverage") & (results.metric == "coverage")]
    assert ((coverage.value >= 0) & (coverage.value <= 1)).all() and len(coverage) >= 20
    lengths = set(results[results.scenario == "length"].method)
    assert {"learned@N=60", "learned@N=300", "npmle@N=300"} <= lengths
    batting = results[results.scenario == "batting"].set_index(["method", "metric"]).value
    assert abs(batting["mle", "sse_average"] - 0.0755) < 5e-4  # Efron and Morris's table
    assert batting["npmle", "sse_average"] < batting["mle", "sse_average"] / 2
    link = results[results.scenario == "link"].set_index(["method", "metric"]).value
    assert link["[0.5, 2]", "kl_best_linear"] < link["[0.1, 100]", "kl_best_linear"] / 10
    sunspots = results[results.scenario == "sunspots"]
    assert sum(m.endswith("pooling") for m in set(sunspots.method)) == 3


def test_calibration_section_has_every_study_and_its_verdict(quick_report):
    _, folder = quick_report
    results = pd.read_csv(folder / "results.csv").query("section == 'calibration'")
    values = results.set_index(["method", "metric"]).value
    assert set(results.method) == {"gibbs", "attention-em", "oracle", "gibbs (sigma x 1.3)", "imm"}
    assert (values.xs("num_replicates", level="metric") > 0).all()
    assert values["gibbs", "min_p_adjusted"] > 0.01  # a right sampler passes
    assert abs(values["oracle", "coverage_z_90"] - 0.9) < 4 * values["oracle", "se_z_90"]
    assert values["attention-em", "coverage_z_90"] < 0.7  # plug-in intervals over-confident
    page = (folder / "index.html").read_text(encoding="utf-8")
    section = page[page.index('<h2 id="calibration">') :]
    for verdict in ("calibrated", "over-confident"):
        assert verdict in section


def test_failed_report_leaves_nothing(tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("simulation failed")

    (tmp_path / "small").mkdir()
    (tmp_path / "small" / "index.html").write_text("old report")
    # an earlier report of ours (its run.json), which the guard lets a new run replace
    (tmp_path / "small" / outputs.MANIFEST).write_text(outputs.manifest_json("report"))
    monkeypatch.setattr(report.runners, "run_scenario", boom)
    with pytest.raises(RuntimeError, match="simulation failed"):
        write_report(tmp_path, name="small", quick=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small"]
    assert (tmp_path / "small" / "index.html").read_text() == "old report"


def test_failed_publish_restores_the_old_report(tmp_path, monkeypatch):
    target = tmp_path / "small"
    target.mkdir()
    (target / "index.html").write_text("old report")
    fresh = tmp_path / ".small.tmp-x"
    fresh.mkdir()
    (fresh / "index.html").write_text("new report")
    real_rename = Path.rename

    def failing_rename(self, dest):
        if self == fresh:
            raise OSError("disk full")
        return real_rename(self, dest)

    monkeypatch.setattr(Path, "rename", failing_rename)
    with pytest.raises(OSError, match="disk full"):
        outputs.publish_folder(fresh, target)
    assert (target / "index.html").read_text() == "old report"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".small.tmp-x", "small"]


def test_report_rejects_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="^name"):
        write_report(tmp_path, name="../escape")
    with pytest.raises(ValueError, match="^seed"):
        write_report(tmp_path, seed=-1)
    with pytest.raises(ValueError, match="^methods: unknown .* missing \\['attention-em'"):
        write_report(tmp_path, methods=("nuts", "oracle"))
    with pytest.raises(ValueError, match="^methods: unknown \\['bogus'\\]"):
        write_report(tmp_path, methods=(*report.REQUIRED_METHODS, "bogus"))
    with pytest.raises(ValueError, match="^scenarios"):
        write_report(tmp_path, scenarios=())
    assert list(tmp_path.iterdir()) == []
