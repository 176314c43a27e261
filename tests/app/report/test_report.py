"""The report: `attnbayes report --quick` writes every section, figure and table; results.csv
and the DataTrees load back and agree; the page opens with its summary and its tables are tidy;
the folder stays small (thinned DataTrees); a failed run leaves nothing behind."""

import functools
import html
import os
import pickle
import re
import stat
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from attnbayes.app import outputs, report
from attnbayes.app.cli import main
from attnbayes.app.report import SECTIONS, build, write_report
from attnbayes.app.report.calibration import CALIBRATION
from attnbayes.app.report.learned import FAMILIES as LEARNED_FAMILIES
from attnbayes.app.report.learned import LEARNED
from attnbayes.app.report.learned import POINT_METHODS as LEARNED_POINT_METHODS
from attnbayes.app.report.pieces import TREE_DRAWS_PER_CHAIN
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
    deconvolution=("gibbs", "attention-em", "learned", "oracle"),
    switching=("imm",),
    wrong_method="gibbs",
)


def _run_parts_through_pickle(tasks, *, workers, progress, start_order):
    """``parallel.run_parts`` in this process, in ``start_order``, with every task and every
    result pickled and unpickled on the way (what a worker process needs of them)."""
    assert workers == 2 and sorted(start_order) == list(range(len(tasks)))
    results = {}
    for i in start_order:
        task, args = pickle.loads(pickle.dumps(tasks[i]))
        results[i] = pickle.loads(pickle.dumps(task(*args, progress=progress)))
    return [results[i] for i in range(len(tasks))]


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
        # the parts run here, one after another, each sent through pickle both ways as
        # `--workers 2` sends it to and from a worker process (the workers themselves are
        # tests/app/test_parallel.py's): two spawned processes would compile every program again
        patch.setattr(build, "run_parts", _run_parts_through_pickle)
        status = main(["report", "--quick", "--out", str(out), "--seed", "1", "--workers", "2"])
    assert status == 0
    folder = next(p for p in out.iterdir() if not p.name.startswith("."))
    return out, folder


@pytest.mark.report
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


# The quick report at the sizes above, written by the code before the DataTrees were thinned,
# took 6.0 MB (1.6 MB of it netCDF); thinned, the netCDF files hold at most
# TREE_DRAWS_PER_CHAIN draws per chain and no posterior predictive.
QUICK_REPORT_MAX_BYTES = 6_500_000
# at these sizes (chains shorter than TREE_DRAWS_PER_CHAIN) only the dropped groups and the
# compression act: 1.31 MB of netCDF measured, against 1.6 MB unthinned (the full report's
# thinning to 100 draws per chain is tested in test_pieces.py)
QUICK_REPORT_NC_MAX_BYTES = 1_400_000
LEARNING_METHODS = {"mle", "em", "nuts", "gibbs", "gpb1", "gpb2", "imm"}


def _section(page: str, sid: str) -> str:
    """The HTML of section ``sid``: from its ``<h2>`` to the next one."""
    start = page.index(f'<h2 id="{sid}">')
    end = page.find("<h2", start + 1)
    return page[start : end if end >= 0 else len(page)]


def _tables(page: str) -> list[list[list[str]]]:
    """Every ``<table>`` of ``page`` as rows of cell texts (header row first)."""
    return [
        [
            [html.unescape(c) for c in re.findall(r"<t[hd]>(.*?)</t[hd]>", row, re.S)]
            for row in re.findall(r"<tr>(.*?)</tr>", table, re.S)
        ]
        for table in re.findall(r"<table>(.*?)</table>", page, re.S)
    ]


def _number_kind(cell: str) -> str | None:
    """The format of a number as printed: "e" (scientific) or its count of decimals."""
    if re.fullmatch(r"-?\d\.\d+e[+-]\d+", cell):
        return "e"
    match = re.fullmatch(r"-?\d+(?:\.(\d+))?", cell)
    return None if match is None else str(len(match.group(1) or ""))


@pytest.mark.report
def test_page_opens_with_the_summary(quick_report):
    _, folder = quick_report
    page = (folder / "index.html").read_text(encoding="utf-8")
    assert page.index('<h2 id="summary">') < page.index('<h2 id="data">')
    toc = re.search(r"<nav>(.*?)</nav>", page, re.S).group(1)
    assert re.findall(r'href="#([^"]+)"', toc) == ["summary", *(sid for sid, _ in SECTIONS)]


@pytest.mark.report
def test_page_tables_are_tidy(quick_report):
    """No Python tuples as labels, no column empty in every row, no index column without a
    name, no placeholder text, one number format per column (per row where the rows are the
    metrics), and the calibration tables narrow enough for the page."""
    _, folder = quick_report
    page = (folder / "index.html").read_text(encoding="utf-8")
    body = page[page.index('<h2 id="data">') :]
    assert "('" not in html.unescape(page)
    assert not re.search(r"\s-\.", html.unescape(re.sub(r"<[^>]+>", "", page)))
    for table in _tables(page):
        head, rows = table[0], table[1:]
        for j, name in enumerate(head):
            assert any(row[j] != "" for row in rows), (head, name)
    for table in _tables(body):
        head, rows = table[0], table[1:]
        assert all(name != "" for name in head), head
        by_row = head[-1] == "meaning"  # metrics as rows: one format per metric
        runs = rows if by_row else [[row[j] for row in rows] for j in range(1, len(head))]
        for cells in runs:
            kinds = {k for c in cells if (k := _number_kind(c)) is not None}
            assert len(kinds) <= 1, (head, cells)
    for table in _tables(_section(page, "calibration")):
        assert len(table[0]) <= 9, table[0]


@pytest.mark.report
def test_learning_headings_name_the_methods_of_their_tables(quick_report):
    _, folder = quick_report
    section = _section((folder / "index.html").read_text(encoding="utf-8"), "learning")
    found = re.findall(r"<h3[^>]*>(.*?)</h3>.*?<table>(.*?)</table>", section, re.S)
    assert len(found) == 2
    for heading, table in found:
        named = {w.lower() for w in re.findall(r"\w+", heading)} & LEARNING_METHODS
        head = re.findall(r"<th>(.*?)</th>", re.search(r"<tr>(.*?)</tr>", table).group(1))
        assert named == {h.lower() for h in head} & LEARNING_METHODS, heading


@pytest.mark.report
def test_page_notes_a_method_at_its_iteration_cap(quick_report):
    _, folder = quick_report
    page = (folder / "index.html").read_text(encoding="utf-8")
    results = pd.read_csv(folder / "results.csv")
    capped = results.query("section == 'methods' and metric == 'converged' and value == 0")
    assert len(capped)  # attention-EM on three-atoms runs into its cap at these sizes
    for scenario, method in zip(capped.scenario, capped.method, strict=True):
        block = page[page.index(f'id="methods-{scenario}"') :]
        block = block[: block.index("<h3")] if "<h3" in block else block
        cap = re.search(r"<strong>Not converged:</strong>(.*?)</p>", block, re.S)
        assert cap is not None and f"{method} stopped at its iteration cap" in cap.group(1)


@pytest.mark.report
def test_quick_report_folder_is_small_and_its_datatrees_say_they_are_thinned(quick_report):
    _, folder = quick_report
    sizes = {p.name: p.stat().st_size for p in folder.iterdir()}
    assert sum(sizes.values()) <= QUICK_REPORT_MAX_BYTES, sizes
    nc = sum(v for k, v in sizes.items() if k.endswith(".nc"))
    assert nc <= QUICK_REPORT_NC_MAX_BYTES, sizes
    trees = sorted(folder.glob("*.nc"))
    assert len(trees) == 4
    for path in trees:
        tree = xr.open_datatree(path, engine="h5netcdf")
        assert tree.attrs["attnbayes_thinned"] == 1, path.name
        assert 0 < tree.attrs["draws_per_chain_kept"] <= TREE_DRAWS_PER_CHAIN
        assert "--keep-trees" in tree.attrs["thinning"]
        assert "posterior_predictive" not in tree.children
        assert tree["posterior"].sizes["draw"] == tree.attrs["draws_per_chain_kept"]
    page = (folder / "index.html").read_text(encoding="utf-8")
    assert f"at most {TREE_DRAWS_PER_CHAIN} evenly spaced draws per chain" in page


@pytest.mark.report
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
    for group in ("posterior", "sample_stats", "log_likelihood"):
        assert group in nuts.children
    # at the sizes above no chain has more than TREE_DRAWS_PER_CHAIN draws: the thinned trees
    # keep every draw, so the numbers below are those of results.csv exactly
    assert nuts.attrs["draws_per_chain_kept"] == nuts.attrs["draws_per_chain_full"]
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


@pytest.mark.report
def test_the_learned_stack_has_a_column_of_finite_numbers_in_the_scalar_scenario(quick_report):
    """The learned stack runs on the quick report's scalar scenario like the other methods:
    its rows in results.csv are finite, its column of the methods table shows them, the
    methods note describes it; no scenario of the quick report leaves it out (the 2-D ring is
    the full report's: test_pieces.py checks that it is left out there, and why)."""
    _, folder = quick_report
    results = pd.read_csv(folder / "results.csv")
    rows = results.query(
        "section == 'methods' and scenario == 'three-atoms' and method == 'learned'"
    )
    learned = rows.set_index("metric").value
    metrics = ("mse_z", "coverage_50", "coverage_90", "wasserstein1_nu", "log_likelihood")
    for metric in (*metrics, "heldout_lpd", "wall_time_s"):
        assert np.isfinite(learned[metric]), metric
    page = (folder / "index.html").read_text(encoding="utf-8")
    block = page[page.index('id="methods-three-atoms"') :]
    (table,) = [t for t in _tables(block[: block.index("</table>") + 8]) if t[0][-1] == "meaning"]
    column = table[0].index("learned")
    cells = {row[0]: row[column] for row in table[1:]}
    for metric in metrics:
        assert float(cells[metric]) == pytest.approx(learned[metric], rel=5e-3, abs=5e-4)
    assert "Learned: the grid stack" in block[: block.index("<table>")]
    assert "is left out here" not in page


def value_of(results, section, scenario, metric):
    rows = results.query("section == @section and scenario == @scenario and metric == @metric")
    return rows.value.item()


@pytest.mark.report
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


@pytest.mark.report
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
    # NUTS on one task (nuts_tasks (1, 1)): the page says its numbers are examples
    page = (folder / "index.html").read_text(encoding="utf-8")
    assert "examples rather than averages" in _section(page, "learned")


@pytest.mark.report
def test_calibration_section_has_every_study_and_its_verdict(quick_report):
    _, folder = quick_report
    results = pd.read_csv(folder / "results.csv").query("section == 'calibration'")
    values = results.set_index(["method", "metric"]).value
    assert set(results.method) == {
        "gibbs",
        "attention-em",
        "learned",
        "oracle",
        "gibbs (sigma x 1.3)",
        "imm",
    }
    assert (values.xs("num_replicates", level="metric") > 0).all()
    assert values["gibbs", "min_p_adjusted"] > 0.01  # a right sampler passes
    assert abs(values["oracle", "coverage_z_90"] - 0.9) < 4 * values["oracle", "se_z_90"]
    assert values["attention-em", "coverage_z_90"] < 0.7  # plug-in intervals over-confident
    # the learned stack's normal intervals: both levels with their standard errors, at least
    # the binomial one over the replicates' first points (the ECDF-PIT panel's values)
    replicates = values["learned", "num_replicates"]
    assert replicates == SMALL_CALIBRATION.interval_replicates[0]
    for level in (50, 90):
        coverage, se = values["learned", f"coverage_z_{level}"], values["learned", f"se_z_{level}"]
        assert 0 <= coverage <= 1 and 0 < se < 0.5
    page = (folder / "index.html").read_text(encoding="utf-8")
    section = page[page.index('<h2 id="calibration">') :]
    for verdict in ("calibrated", "over-confident"):
        assert verdict in section
    (coverage_table,) = [t for t in _tables(section) if "coverage 90%" in t[0]]
    head = coverage_table[0]
    (learned,) = [
        dict(zip(head, row, strict=True)) for row in coverage_table[1:] if row[0] == "learned"
    ]
    assert learned["target"] == "z"
    for level in (50, 90):
        shown = float(learned[f"coverage {level}%"]), float(learned[f"se {level}%"])
        expected = values["learned", f"coverage_z_{level}"], values["learned", f"se_z_{level}"]
        assert shown == pytest.approx(expected, abs=6e-4)
    assert "normal posterior N(m<sub>i</sub>, v<sub>i</sub>)" in section


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
