"""``attnbayes calibrate``, run in-process through ``attnbayes.app.cli.main``
(``attnbayes.app.calibrate``): the table, DataTrees and figure it writes, and the refusal of bad
options before any work."""

import json

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
