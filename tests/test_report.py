"""The report: sections, figures and tables present; results.csv and DataTrees load back;
a failed run leaves nothing behind; the CLI's arguments are checked."""

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from inference import report
from inference.cli import build_parser, main
from inference.compare import METHODS
from inference.report import Scenario, write_report

SMALL = (
    Scenario("three-atoms", "three-atoms", {}, 1.0, (120, 120), (200, 200), "1-D test."),
    Scenario("ring", "ring", {"num_atoms": 4, "radius": 3.0}, 0.5, (80, 80), (150, 150), "2-D."),
)


@pytest.fixture(scope="module")
def small_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("reports")
    messages = []
    # the report's mechanics on four methods; every method is run by the conftest comparison
    # and by the slow end-to-end `attnbayes report --quick` test
    path = write_report(
        out,
        name="small",
        quick=True,
        seed=3,
        scenarios=SMALL,
        methods=("attention-em", "james-stein", "nuts", "oracle"),
        progress=messages.append,
    )
    return out, path, messages


def test_report_has_sections_figures_and_tables(small_report):
    out, path, messages = small_report
    assert path == out / "small" / "index.html"
    page = path.read_text(encoding="utf-8")
    for scenario in SMALL:
        assert f'<h2 id="{scenario.name}">' in page
    for heading in (
        "Methods side by side",
        "Data and mixing measures",
        "Posterior means of z against the truth",
        "EM responsibilities",
        "NUTS diagnostics",
    ):
        assert page.count(heading) == len(SMALL), heading
    assert len(re.findall(r'<img alt="[^"]+" src="data:image/png;base64,', page)) == 4 * len(SMALL)
    assert page.count("<table>") == len(SMALL)
    for metric in ("mse_z", "coverage_90", "max_rhat_invariant", "wall_time_s"):
        assert f"<th>{metric}</th>" in page
    pngs = sorted(p.name for p in (out / "small").glob("*.png"))
    assert len(pngs) == 4 * len(SMALL)
    assert all((out / "small" / p).read_bytes().startswith(b"\x89PNG") for p in pngs)
    assert any("nuts" in m for m in messages) and "report written" in messages[-1]
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temp folders left


def test_results_csv_and_datatrees_load_back(small_report):
    out, _, _ = small_report
    results = pd.read_csv(out / "small" / "results.csv")
    assert list(results.columns) == ["scenario", "method", "metric", "value"]
    assert set(results.scenario) == {s.name for s in SMALL}
    assert set(results.method) == {"attention-em", "james-stein", "nuts", "oracle"}
    assert np.isfinite(results.value).all()
    for scenario in SMALL:
        dt = xr.open_datatree(out / "small" / f"{scenario.name}-nuts.nc", engine="h5netcdf")
        for group in (
            "posterior",
            "sample_stats",
            "log_likelihood",
            "posterior_predictive",
            "observed_data",
        ):
            assert group in dt.children
        assert "z_mean" in dt["posterior"]
        n = scenario.num_points[0]
        assert dt["observed_data"]["x"].shape[0] == n
        total = results.query(
            "scenario == @scenario.name and method == 'nuts' and metric == 'log_likelihood'"
        ).value.item()
        assert float(dt["posterior"]["log_lik_total"].mean()) == pytest.approx(total, rel=1e-12)


def test_failed_report_leaves_nothing(tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("figure failed")

    (tmp_path / "small").mkdir()
    (tmp_path / "small" / "index.html").write_text("old report")
    monkeypatch.setattr(report, "figure_z_hat", boom)
    with pytest.raises(RuntimeError, match="figure failed"):
        write_report(
            tmp_path,
            name="small",
            quick=True,
            scenarios=SMALL[:1],
            methods=report.REQUIRED_METHODS,
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small"]
    assert (tmp_path / "small" / "index.html").read_text() == "old report"


def test_published_folder_is_readable(small_report):
    out, _, _ = small_report
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((out / "small").stat().st_mode) == 0o777 & ~umask


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
        report._atomic_publish(fresh, target)
    assert (target / "index.html").read_text() == "old report"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".small.tmp-x", "small"]


def test_report_rejects_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="^name"):
        write_report(tmp_path, name="../escape", scenarios=SMALL[:1])
    with pytest.raises(ValueError, match="^seed"):
        write_report(tmp_path, seed=-1, scenarios=SMALL[:1])
    with pytest.raises(ValueError, match="^methods: unknown .* missing \\['attention-em'"):
        write_report(tmp_path, scenarios=SMALL[:1], methods=("nuts", "oracle"))
    with pytest.raises(ValueError, match="^methods: unknown \\['bogus'\\]"):
        write_report(tmp_path, scenarios=SMALL[:1], methods=(*report.REQUIRED_METHODS, "bogus"))


def test_cli_arguments(capsys):
    args = build_parser().parse_args(["report", "--quick", "--out", "x", "--seed", "4"])
    assert (args.command, args.quick, args.out, args.seed) == ("report", True, "x", 4)
    with pytest.raises(SystemExit) as exit_info:
        main(["report", "--seed", "-1"])
    assert exit_info.value.code == 2
    assert "--seed: must be in [0, 2**32)" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["report", "--seed", str(2**63)])
    assert exit_info.value.code == 2
    with pytest.raises(SystemExit) as exit_info:
        main([])
    assert exit_info.value.code == 2
    with pytest.raises(SystemExit) as exit_info:
        main(["report", "--help"])
    assert exit_info.value.code == 0
    assert "--quick" in capsys.readouterr().out


@pytest.mark.slow
def test_cli_quick_report_end_to_end(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "inference.cli", "report", "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=900,
        check=True,
    )
    path = tmp_path / "deconvolution" / "index.html"
    assert done.stdout.strip() == str(path)
    page = path.read_text(encoding="utf-8")
    for name in ("three-atoms", "sparse-means", "ring"):
        assert f'<h2 id="{name}">' in page
    results = pd.read_csv(tmp_path / "deconvolution" / "results.csv")
    assert (results.query("metric == 'max_rhat_invariant'").value < 1.05).all()
    for name, methods in results.groupby("scenario").method:
        assert set(methods) == set(METHODS), name
