"""``attnbayes deconvolve`` and ``attnbayes filter`` on users' files, run in-process through
``attnbayes.app.cli.main``: the documented outputs, their agreement with the library, and the
refusal of malformed input (exit status 2, a message naming line and column, no output)."""

import json
import subprocess
import sys

import jax
import numpy as np
import pandas as pd
import pytest
import xarray as xr

from attnbayes.app import cli, outputs, user_runs
from attnbayes.app.cli import main
from attnbayes.app.user_data import PARAMS_FIELDS, read_params, read_table
from attnbayes.inference.deconvolution.comparison import compare_deconvolution
from attnbayes.inference.switching.filters import imm_filter
from attnbayes.inference.switching.particle import rbpf
from attnbayes.inference.switching.smoothers import kim_smoother
from attnbayes.models.switching import SCENARIOS, get_scenario

SIGMA = 1.0
MISSING_STEPS = (4, 5, 17)


@pytest.fixture(scope="module")
def dec_csv(tmp_path_factory):
    """N = 60 draws of 0.5 delta(-2) + 0.3 delta(0) + 0.2 delta(3) plus N(0, 1) noise, one
    column with a header (NumPy draws: no JAX compilation for the data)."""
    rng = np.random.default_rng(5)
    x = rng.choice([-2.0, 0.0, 3.0], size=60, p=[0.5, 0.3, 0.2]) + SIGMA * rng.normal(size=60)
    path = tmp_path_factory.mktemp("data") / "scores.csv"
    pd.DataFrame({"score": x}).to_csv(path, index=False)
    return path, x


@pytest.fixture(scope="module")
def track_csv(tmp_path_factory):
    """T = 40 steps of the maneuvering target (straight, a turn from step 15 to 26, straight),
    its 2 positions measured with sd 10, three steps missing."""
    rng = np.random.default_rng(8)
    dynamics = np.asarray(get_scenario("maneuvering-target").dynamics_matrices)
    state, y = np.array([0.0, 10.0, 0.0, 0.0]), []
    for mode in np.repeat([0, 1, 0], [15, 12, 13]):
        state = dynamics[mode] @ state + rng.normal(0.0, [0.05, 0.1, 0.05, 0.1])
        y.append(state[[0, 2]] + rng.normal(0.0, 10.0, 2))
    y = np.array(y)
    y[list(MISSING_STEPS)] = np.nan
    path = tmp_path_factory.mktemp("data") / "track.csv"
    pd.DataFrame(y, columns=["px", "py"]).to_csv(path, index=False)
    return path, y


def run(argv, capsys):
    """main(argv) -> (exit status, stdout, stderr); argparse exits count as statuses."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exit_info:
        code = exit_info.code
    out, err = capsys.readouterr()
    return code, out, err


def listing(folder):
    return (
        sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else None
    )


# ----------------------------------------------------------------------------- help


def test_help_lists_commands_options_defaults_and_exit_statuses(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # no wrapping inside the option texts
    done = subprocess.run(
        [sys.executable, "-m", "attnbayes.app.cli", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    for word in ("report", "deconvolve", "filter", "exit status", "0  success", "1  the run"):
        assert word in done.stdout
    code, out, _ = run(["deconvolve", "--help"], capsys)
    assert code == 0
    for word in (
        "--sigma S",
        "--method {em,npmle,nuts,gibbs}",
        "[em]",
        "--num-atoms K",
        "[5]",
        "[nuts 500, gibbs 2000]",
        "[nuts 500, gibbs 1000]",
        "[nuts 2, gibbs 4]",
        "--columns COLS",
        "--delimiter C",
        "[reports]",
        "z_hat.csv",
        "posterior.nc",
        "run.json",
        "header row is optional",
        "2  bad usage or bad input",
    ):
        assert word in out, word
    code, out, _ = run(["filter", "--help"], capsys)
    assert code == 0
    for word in (
        "--scenario NAME",
        "--params FILE.json",
        "{imm,gpb2,gpb1,rbpf,gibbs}",
        "[imm]",
        "[1000]",
        "[300]",
        "[4]",
        "maneuvering-target-cwna",
        *(f"{field:<18} {shape:<10} {what}" for field, (shape, what) in PARAMS_FIELDS.items()),
        "states.csv",
        "smoothed_prob_<mode>",
        "predict only",
        "exit status",
    ):
        assert word in out, word


def test_cli_names_agree_with_the_library():
    import inspect

    from attnbayes.app.report import write_report

    assert inspect.signature(write_report).parameters["name"].default == cli.REPORT_NAME
    assert cli.FILTER_SCENARIOS == tuple(SCENARIOS)
    assert cli.DECONVOLVE_METHODS == tuple(user_runs.DECONVOLVE_METHODS)
    assert cli.FILTER_METHODS == user_runs.FILTER_METHODS
    assert cli.FIT_METHODS == user_runs.FIT_METHODS
    from attnbayes.models.markov_switching import STATE_SPACE_FREE

    assert cli.FIT_FREE_DEFAULT == STATE_SPACE_FREE
    for name, (states, modes) in user_runs.SCENARIO_LABELS.items():
        params = get_scenario(name)
        assert params.initial_means.shape == (len(modes), len(states))


# ----------------------------------------------------------------------------- deconvolve


def test_deconvolve_em_writes_z_hat_equal_to_the_library(dec_csv, tmp_path, capsys):
    path, x = dec_csv
    code, out, err = run(["deconvolve", path, "--sigma", SIGMA, "--out", tmp_path], capsys)
    assert code == 0, err
    folder = tmp_path / "scores-deconvolve-em"
    assert out.strip() == str(folder / "index.html")
    assert listing(tmp_path) == [
        "scores-deconvolve-em",
        *(
            f"scores-deconvolve-em/{f}"
            for f in ("index.html", "measure.csv", "metrics.csv", "run.json", "z_hat.csv")
        ),
    ]
    fit = compare_deconvolution(None, x, SIGMA, methods=("attention-em",)).fits["attention-em"]
    table = pd.read_csv(folder / "z_hat.csv")
    assert list(table.columns) == user_runs.deconvolve_output_columns(["score"])
    np.testing.assert_array_equal(table["row"], np.arange(1, 61))
    np.testing.assert_array_equal(table["line"], np.arange(2, 62))
    np.testing.assert_array_equal(table["score"], x)
    np.testing.assert_allclose(table["z_hat_score"], fit.z_hat, rtol=1e-12, atol=1e-12)
    for prob, (lo, hi) in fit.intervals.items():
        q = round(prob * 100)
        np.testing.assert_allclose(table[f"lower_{q}_score"], lo, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(table[f"upper_{q}_score"], hi, rtol=1e-12, atol=1e-12)
    measure = pd.read_csv(folder / "measure.csv")
    assert list(measure.columns) == ["weight", "atom_score"]
    np.testing.assert_allclose(measure["weight"].sum(), 1.0)
    metrics = pd.read_csv(folder / "metrics.csv").set_index("metric")["value"]
    np.testing.assert_allclose(metrics["log_likelihood"], fit.log_likelihood, rtol=1e-12)
    manifest = json.loads((folder / "run.json").read_text())
    assert manifest["attnbayes"] == "deconvolve"
    assert (manifest["rows"], manifest["columns"], manifest["sigma"]) == (60, ["score"], 1.0)
    assert manifest["method"] == "em" and manifest["library_method"] == "attention-em"
    page = (folder / "index.html").read_text()
    assert page.count("data:image/png;base64,") == 2
    assert "Sampler diagnostics" not in page

    # a second run replaces the folder it wrote, through a temporary folder
    code, _, err = run(["deconvolve", path, "--sigma", 2, "--out", tmp_path], capsys)
    assert code == 0, err
    assert json.loads((folder / "run.json").read_text())["sigma"] == 2.0
    assert [p.name for p in tmp_path.iterdir()] == ["scores-deconvolve-em"]


def test_deconvolve_selected_columns_with_another_delimiter(tmp_path, capsys):
    rng = np.random.default_rng(2)
    angles = 2 * np.pi * rng.integers(0, 8, size=30) / 8
    x = 3 * np.stack([np.cos(angles), np.sin(angles)], axis=1) + 0.5 * rng.normal(size=(30, 2))
    path = tmp_path / "points.txt"
    frame = pd.DataFrame({"id": [f"p{i}" for i in range(30)], "a": x[:, 0], "b": x[:, 1]})
    path.write_text("# exported points\n" + frame.to_csv(index=False, sep="\t"))
    argv = ["deconvolve", path, "--sigma", 0.5, "--delimiter", "tab", "--columns", "b,a"]
    code, _, err = run([*argv, "--out", tmp_path / "out", "--name", "ring"], capsys)
    assert code == 0, err
    table = pd.read_csv(tmp_path / "out" / "ring" / "z_hat.csv")
    assert list(table.columns) == user_runs.deconvolve_output_columns(["b", "a"])
    np.testing.assert_array_equal(table["line"], np.arange(3, 33))
    fit = compare_deconvolution(None, x[:, ::-1], 0.5, methods=("attention-em",)).fits[
        "attention-em"
    ]
    np.testing.assert_allclose(table[["z_hat_b", "z_hat_a"]], fit.z_hat, rtol=1e-12, atol=1e-12)


def test_deconvolve_gibbs_writes_diagnostics_and_the_datatree(dec_csv, tmp_path, capsys):
    path, x = dec_csv
    sizes = {"num_warmup": 100, "num_samples": 100, "num_chains": 2}
    argv = ["deconvolve", path, "--sigma", SIGMA, "--method", "gibbs", "--num-atoms", 3]
    argv += ["--warmup", 100, "--draws", 100, "--chains", 2, "--seed", 3, "--out", tmp_path]
    code, _, err = run(argv, capsys)
    assert code == 0, err
    folder = tmp_path / "scores-deconvolve-gibbs"
    assert sorted(p.name for p in folder.iterdir()) == [
        "diagnostics.csv",
        "index.html",
        "metrics.csv",
        "posterior.nc",
        "run.json",
        "z_hat.csv",
    ]
    fit = compare_deconvolution(
        jax.random.PRNGKey(3),
        x,
        SIGMA,
        methods=("gibbs",),
        num_atoms=3,
        method_kwargs={"gibbs": sizes},
    ).fits["gibbs"]
    table = pd.read_csv(folder / "z_hat.csv")
    np.testing.assert_allclose(table["z_hat_score"], fit.z_hat, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(table["lower_90_score"], fit.intervals[0.9][0], atol=1e-10)
    tree = xr.open_datatree(folder / "posterior.nc", engine="h5netcdf")
    post = tree["posterior"]
    assert (post.sizes["chain"], post.sizes["draw"], post.sizes["atom"]) == (2, 100, 3)
    assert {"z_mean", "nu_cdf", "log_lik_total"} <= set(post.data_vars)
    assert "z_draw" not in post.data_vars
    diag = pd.read_csv(folder / "diagnostics.csv")
    assert list(diag.columns) == ["element", "r_hat", "ess_bulk", "ess_tail"]
    assert diag["element"].str.startswith(("z_mean[", "nu_cdf[", "log_lik_total")).all()
    metrics = pd.read_csv(folder / "metrics.csv").set_index("metric")["value"]
    np.testing.assert_allclose(metrics["max_rhat_invariant"], diag["r_hat"].max())
    manifest = json.loads((folder / "run.json").read_text())
    assert (manifest["num_atoms"], manifest["seed"], manifest["num_chains"]) == (3, 3, 2)
    page = (folder / "index.html").read_text()
    assert "Sampler diagnostics" in page and "max R-hat" in page and "none (Gibbs)" in page


@pytest.mark.slow
def test_deconvolve_nuts_end_to_end(dec_csv, tmp_path, capsys):
    path, _ = dec_csv
    argv = ["deconvolve", path, "--sigma", SIGMA, "--method", "nuts", "--num-atoms", 3]
    code, _, err = run([*argv, "--warmup", 300, "--draws", 300, "--out", tmp_path], capsys)
    assert code == 0, err
    folder = tmp_path / "scores-deconvolve-nuts"
    metrics = pd.read_csv(folder / "metrics.csv").set_index("metric")["value"]
    assert metrics["max_rhat_invariant"] < 1.1
    assert "divergences" in metrics.index
    tree = xr.open_datatree(folder / "posterior.nc", engine="h5netcdf")
    assert {"posterior", "sample_stats", "log_likelihood"} <= set(tree.children)


# ----------------------------------------------------------------------------- filter


def test_filter_imm_matches_the_library_and_its_params_json_round_trips(
    track_csv, tmp_path, capsys
):
    path, y = track_csv
    argv = ["filter", path, "--scenario", "maneuvering-target", "--out", tmp_path]
    code, out, err = run(argv, capsys)
    assert code == 0, err
    folder = tmp_path / "track-filter-imm"
    assert out.strip() == str(folder / "index.html")
    assert sorted(p.name for p in folder.iterdir()) == [
        "index.html",
        "metrics.csv",
        "params.json",
        "run.json",
        "states.csv",
    ]
    params = get_scenario("maneuvering-target")
    filt = imm_filter(params, y)
    smooth = kim_smoother(params, y, filt)
    states, modes = user_runs.SCENARIO_LABELS["maneuvering-target"]
    table = pd.read_csv(folder / "states.csv")
    assert list(table.columns) == user_runs.filter_output_columns(
        "imm", ["px", "py"], states, modes
    )
    np.testing.assert_array_equal(table["t"], np.arange(1, 41))
    assert table[["px", "py"]].isna().all(axis=1).to_numpy().nonzero()[0].tolist() == list(
        MISSING_STEPS
    )
    for label, res in (("filtered", filt), ("smoothed", smooth)):
        means = table[[f"{label}_mean_{s}" for s in states]].to_numpy()
        np.testing.assert_allclose(means, res.mean, rtol=1e-10, atol=1e-10)
        sds = table[[f"{label}_sd_{s}" for s in states]].to_numpy()
        np.testing.assert_allclose(sds**2, np.diagonal(res.cov, axis1=1, axis2=2), rtol=1e-10)
        probs = table[[f"{label}_prob_{m}" for m in modes]].to_numpy()
        np.testing.assert_allclose(probs, res.mode_probs, rtol=1e-10, atol=1e-12)
    metrics = pd.read_csv(folder / "metrics.csv").set_index("metric")["value"]
    np.testing.assert_allclose(metrics["log_likelihood"], filt.log_likelihood, rtol=1e-12)
    page = (folder / "index.html").read_text()
    assert page.count("data:image/png;base64,") == 3  # states, modes, track

    # the params.json written is the --params format: the same run from it
    read, labels = read_params(folder / "params.json")
    for field, value in zip(params._fields, params, strict=True):
        np.testing.assert_array_equal(getattr(read, field), value, err_msg=field)
    assert labels == {"state_names": states, "mode_names": modes}
    argv = ["filter", path, "--params", folder / "params.json", "--out", tmp_path]
    code, _, err = run([*argv, "--name", "from-json"], capsys)
    assert code == 0, err
    again = pd.read_csv(tmp_path / "from-json" / "states.csv")
    pd.testing.assert_frame_equal(again, table)
    manifest = json.loads((tmp_path / "from-json" / "run.json").read_text())
    assert manifest["scenario"] is None and manifest["params_file"].endswith("params.json")


@pytest.mark.slow
def test_filter_rbpf_matches_the_library(track_csv, tmp_path, capsys):
    path, y = track_csv
    argv = ["filter", path, "--scenario", "maneuvering-target", "--method", "rbpf"]
    code, _, err = run([*argv, "--particles", 64, "--seed", 4, "--out", tmp_path], capsys)
    assert code == 0, err
    params = get_scenario("maneuvering-target")
    res = rbpf(jax.random.PRNGKey(4), params, y, 64)
    table = pd.read_csv(tmp_path / "track-filter-rbpf" / "states.csv")
    means = table[[f"filtered_mean_{s}" for s in ("px", "vx", "py", "vy")]].to_numpy()
    np.testing.assert_allclose(means, res.mean, rtol=1e-10, atol=1e-10)
    assert "smoothed_mean_px" in table.columns


@pytest.mark.slow
def test_filter_gibbs_writes_the_posterior_summaries(track_csv, tmp_path, capsys):
    path, _ = track_csv
    argv = ["filter", path, "--scenario", "maneuvering-target", "--method", "gibbs"]
    code, _, err = run(
        [*argv, "--draws", 200, "--warmup", 100, "--chains", 2, "--out", tmp_path], capsys
    )
    assert code == 0, err
    folder = tmp_path / "track-filter-gibbs"
    table = pd.read_csv(folder / "states.csv")
    assert not any(c.startswith("filtered_") for c in table.columns)
    tree = xr.open_datatree(folder / "posterior.nc", engine="h5netcdf")
    draws = np.asarray(tree["posterior"]["states"]).reshape(-1, 40, 4)
    np.testing.assert_allclose(table["smoothed_mean_px"], draws[:, :, 0].mean(axis=0))
    probs = table[["smoothed_prob_constant-velocity", "smoothed_prob_coordinated-turn"]]
    np.testing.assert_allclose(probs.sum(axis=1), 1.0)
    assert "max_rhat_states" in pd.read_csv(folder / "metrics.csv")["metric"].tolist()


# ----------------------------------------------------------------------------- bad input


@pytest.fixture
def no_jax_work(monkeypatch):
    """Fail the test if a method starts: bad input must be refused before any JAX work."""

    def refuse(*args, **kwargs):
        raise AssertionError("JAX work started on bad input")

    import attnbayes.inference.deconvolution.comparison
    import attnbayes.inference.switching.filters
    import attnbayes.inference.switching.gibbs
    import attnbayes.inference.switching.particle

    monkeypatch.setattr(
        attnbayes.inference.deconvolution.comparison, "compare_deconvolution", refuse
    )
    for name in ("imm_filter", "gpb1_filter", "gpb2_filter"):
        monkeypatch.setattr(attnbayes.inference.switching.filters, name, refuse)
    monkeypatch.setattr(attnbayes.inference.switching.particle, "rbpf", refuse)
    monkeypatch.setattr(attnbayes.inference.switching.gibbs, "run_switching_gibbs", refuse)
    import attnbayes.inference.mcmc
    import attnbayes.inference.switching.learning

    monkeypatch.setattr(attnbayes.inference.switching.learning, "fit_switching", refuse)
    monkeypatch.setattr(attnbayes.inference.mcmc, "run_nuts", refuse)


DECONVOLVE_CASES = {
    "bad-number": (
        "x1,x2\n1,2\n3,abc\n",
        [],
        "line 3, column \"x2\": cannot parse 'abc' as a number",
    ),
    "ragged-row": (
        "x1,x2\n1,2\n3\n",
        [],
        'line 3, column "x2": missing: the row has 1 of 2 fields',
    ),
    "extra-field": ("1,2\n3,4,5\n", [], "line 2, column 3: extra field '5'"),
    "empty-file": ("", [], "the file is empty"),
    "blank-file": ("\n\n# nothing\n", [], "the file is empty"),
    "header-only": ("x1,x2\n", [], "line 1: only a header, no data rows"),
    "semicolons": ("a;b\n1.5;2\n", [], "line 1: no ',' in the first row but 2 ';'-separated cells"),
    "decimal-comma": (
        "a;b\n1,5;2\n",
        ["--delimiter", ";"],
        "line 2, column \"a\": cannot parse '1,5' as a number (a decimal comma?",
    ),
    "infinite": ("x\n1\ninf\n", [], "line 3, column \"x\": 'inf' is not a finite number"),
    "missing-value": ("x\n1\n\n2\nNA\n", [], 'line 5, column "x": missing value'),
    "numeric-header": (
        "x,1\n2,3\n",
        [],
        "line 1, column 1: cannot parse 'x' as a number (if line 1",
    ),
    "unknown-column": ("a,b\n1,2\n", ["--columns", "c"], "--columns: no column 'c'"),
    "not-utf8": (b"x\n\xff\n", [], "line 2: not UTF-8 text"),
    "options-for-samplers": ("x\n1\n2\n", ["--num-atoms", "3"], "apply to nuts and gibbs"),
    "atoms-beyond-data": (
        "x\n1\n2\n2\n",
        ["--method", "gibbs", "--num-atoms", "3"],
        "--num-atoms: K = 3 is more than the 2 distinct observations",
    ),
}


@pytest.mark.parametrize("case", list(DECONVOLVE_CASES))
def test_deconvolve_refuses_malformed_files(case, tmp_path, capsys, no_jax_work):
    content, extra, message = DECONVOLVE_CASES[case]
    path = tmp_path / "data.csv"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("a user's file")
    code, stdout, err = run(["deconvolve", path, "--sigma", 1, "--out", out, *extra], capsys)
    assert code == 2
    assert stdout == ""
    assert err.startswith("attnbayes: error: ")
    assert message in err, err
    if "line" in message:
        assert f"{path} line" in err
    assert listing(out) == ["keep.txt"]


def test_deconvolve_refuses_bad_arguments(dec_csv, tmp_path, capsys, no_jax_work):
    path, _ = dec_csv
    out = tmp_path / "out"
    for sigma in ("0", "-1", "nan", "inf", "abc"):
        code, _, err = run(["deconvolve", path, "--sigma", sigma, "--out", out], capsys)
        assert code == 2
        assert "argument --sigma:" in err
    code, _, err = run(["deconvolve", path, "--out", out], capsys)
    assert code == 2 and "--sigma" in err
    code, _, err = run(["deconvolve", tmp_path / "nope.csv", "--sigma", 1, "--out", out], capsys)
    assert code == 2 and f"{tmp_path / 'nope.csv'}: no such file" in err
    code, _, err = run(
        ["deconvolve", path, "--sigma", 1, "--delimiter", "ab", "--out", out], capsys
    )
    assert code == 2 and "argument --delimiter" in err
    code, _, err = run(["deconvolve", path, "--sigma", 1, "--name", "../x", "--out", out], capsys)
    assert code == 2 and "--name: must be a plain folder name" in err
    assert not out.exists()
    # an existing folder that attnbayes did not write is left alone
    (out / "mine").mkdir(parents=True)
    (out / "mine" / "notes.txt").write_text("precious")
    code, _, err = run(["deconvolve", path, "--sigma", 1, "--name", "mine", "--out", out], capsys)
    assert code == 2 and "was not written by attnbayes" in err
    assert listing(out) == ["mine", "mine/notes.txt"]


def test_a_failing_run_writes_nothing(dec_csv, tmp_path, capsys, monkeypatch):
    path, _ = dec_csv
    out = tmp_path / "new" / "out"

    def broken(tmp, target):  # fails after every file was written to the temporary folder
        assert sorted(p.name for p in tmp.iterdir())[-1] == "z_hat.csv"
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(outputs, "publish_folder", broken)
    code, stdout, err = run(["deconvolve", path, "--sigma", 1, "--out", out], capsys)
    assert code == 1 and "cannot write the output: [Errno 28] No space left on device" in err
    assert stdout == ""
    assert not (tmp_path / "new").exists()  # the temporary folder and the folders made go


def _params_doc():
    from attnbayes.app.user_data import params_document

    return params_document(get_scenario("maneuvering-target"))


def _edit(**changes):
    doc = _params_doc()
    for key, value in changes.items():
        if value is None:
            del doc[key]
        else:
            doc[key] = value
    return json.dumps(doc)


FILTER_CASES = {
    "one-column": (
        "px\n1\n2\n",
        None,
        [],
        "line 1, column 2: missing column: the file has 1 column(s) (px) where 2 are needed: "
        'the scenario "maneuvering-target" observes 2 values per step',
    ),
    "three-columns": ("t,px,py\n1,2,3\n", None, [], "choose 2 of them with --columns"),
    "ragged-row": ("px,py\n1,2\n3\n", None, [], 'line 3, column "py": missing'),
    "bad-number": ("px,py\n1,2\n3,4\n5,x\n", None, [], "line 4, column \"py\": cannot parse 'x'"),
    "infinite": ("1,2\n-inf,4\n", None, [], "line 2, column 1: '-inf' is not a finite number"),
    "json-syntax": (
        "1,2\n",
        '{"initial_probs": [1,\n}',
        [],
        "params.json line 2, column 1: not valid JSON",
    ),
    "json-not-object": ("1,2\n", "[1, 2]", [], "expected a JSON object"),
    "json-missing-field": (
        "1,2\n",
        _edit(emission_covs=None),
        [],
        "missing field(s) 'emission_covs'; emission_covs is (M, o, o)",
    ),
    "json-unknown-field": (
        "1,2\n",
        _edit(transition_matrx=[[1]]),
        [],
        "unknown field(s) 'transition_matrx'",
    ),
    "json-wrong-shape": (
        "1,2\n",
        _edit(transition_matrix=[[0.9, 0.1, 0.0], [0.1, 0.8, 0.1]]),
        [],
        'field "transition_matrix": expected shape (2, 2), got (2, 3)',
    ),
    "json-ragged": (
        "1,2\n",
        _edit(transition_matrix=[[0.9, 0.1], [1.0]]),
        [],
        'field "transition_matrix": rows of different lengths',
    ),
    "json-not-a-number": (
        "1,2\n",
        _edit(initial_probs=["a", 0.5]),
        [],
        "field \"initial_probs\": 'a' is not a number",
    ),
    "json-rows-not-stochastic": (
        "1,2\n",
        _edit(transition_matrix=[[0.9, 0.2], [0.1, 0.9]]),
        [],
        'field "transition_matrix": rows must be probability vectors',
    ),
    "json-covariance-not-pd": (
        "1,2\n",
        _edit(emission_covs=[[[1.0, 0.0], [0.0, -1.0]]] * 2),
        [],
        'field "emission_covs": covariance matrices must be positive semi-definite',
    ),
    "json-covariance-asymmetric": (
        "1,2\n",
        _edit(emission_covs=[[[1.0, 0.5], [0.0, 1.0]]] * 2),
        [],
        'field "emission_covs": covariance matrices must be symmetric',
    ),
    "json-labels": ("1,2\n", _edit(mode_names=["a"]), [], 'field "mode_names": 1 names for M = 2'),
    "particles-for-imm": (
        "1,2\n",
        None,
        ["--particles", "5"],
        "--particles applies to --method rbpf",
    ),
}


def _scalar_doc(num_inputs: int = 0) -> dict:
    """A 1-D two-regime model (AR(1) state with a calm and a volatile regime, observed with
    noise), with ``num_inputs`` emission input weights."""
    doc = {
        "initial_probs": [0.5, 0.5],
        "transition_matrix": [[0.95, 0.05], [0.1, 0.9]],
        "initial_means": [[0.0], [0.0]],
        "initial_covs": [[[1.0]], [[1.0]]],
        "dynamics_matrices": [[[0.8]], [[0.8]]],
        "dynamics_biases": [[0.0], [0.0]],
        "dynamics_covs": [[[0.1]], [[2.0]]],
        "emission_matrices": [[[1.0]], [[1.0]]],
        "emission_covs": [[[0.2]], [[0.2]]],
    }
    if num_inputs:
        doc["emission_input_weights"] = [[[0.5] * num_inputs], [[0.5] * num_inputs]]
    return doc


@pytest.fixture(scope="module")
def scalar_csv(tmp_path_factory):
    """T = 60 steps of the 1-D model with one input column u (a sine), y missing at step 8
    (NumPy draws: no JAX compilation for the data)."""
    rng = np.random.default_rng(2)
    doc = _scalar_doc(num_inputs=1)
    u = np.sin(np.arange(60) / 5.0)
    modes = np.repeat([0, 1, 0, 1], 15)
    x, y = 0.0, []
    for t, s in enumerate(modes):
        x = 0.8 * x + rng.normal(0.0, np.sqrt([0.1, 2.0][s]))
        y.append(x + 0.5 * u[t] + rng.normal(0.0, np.sqrt(0.2)))
    y = np.array(y)
    y[7] = np.nan
    folder = tmp_path_factory.mktemp("scalar")
    pd.DataFrame({"u": u, "y": y}).to_csv(folder / "series.csv", index=False)
    (folder / "params.json").write_text(json.dumps(doc))
    return folder, y, u


def test_filter_with_inputs_matches_the_library_and_a_partly_missing_row_is_used(
    track_csv, scalar_csv, tmp_path, capsys
):
    folder, y, u = scalar_csv
    argv = ["filter", folder / "series.csv", "--params", folder / "params.json"]
    code, _, err = run([*argv, "--inputs", "u", "--out", tmp_path], capsys)
    assert code == 0, err
    params, _ = read_params(folder / "params.json")
    assert params.num_inputs == 1
    filt = imm_filter(params, y[:, None], inputs=u[:, None])
    table = pd.read_csv(tmp_path / "series-filter-imm" / "states.csv")
    assert [c for c in table.columns if c in ("u", "y")] == ["y"]
    np.testing.assert_allclose(table["filtered_mean_x1"], filt.mean[:, 0], rtol=1e-10)
    # the input weights round-trip through the params.json the run wrote
    again, _ = read_params(tmp_path / "series-filter-imm" / "params.json")
    np.testing.assert_array_equal(again.emission_input_weights, params.emission_input_weights)
    manifest = json.loads((tmp_path / "series-filter-imm" / "run.json").read_text())
    assert manifest["input_columns"] == ["u"]

    # a partly missing row: the filter updates on its observed coordinate
    _, y2 = track_csv
    partly = y2.copy()
    partly[20, 1] = np.nan
    csv = tmp_path / "partly.csv"
    pd.DataFrame(partly, columns=["px", "py"]).to_csv(csv, index=False)
    argv = ["filter", csv, "--scenario", "maneuvering-target", "--out", tmp_path]
    code, _, err = run(argv, capsys)
    assert code == 0, err
    table = pd.read_csv(tmp_path / "partly-filter-imm" / "states.csv")
    expected = imm_filter(get_scenario("maneuvering-target"), partly)
    np.testing.assert_allclose(table["filtered_mean_px"], expected.mean[:, 0], rtol=1e-10)
    whole = partly.copy()
    whole[20] = np.nan
    whole = imm_filter(get_scenario("maneuvering-target"), whole)
    assert not np.allclose(expected.mean[20], whole.mean[20])  # the observed px was used
    page = (tmp_path / "partly-filter-imm" / "index.html").read_text()
    assert "partly observed steps" in page


def test_filter_fit_mle_matches_fit_switching_and_writes_loadable_params(
    scalar_csv, tmp_path, capsys
):
    from attnbayes.inference.switching.learning import fit_switching
    from attnbayes.models.markov_switching import switching_state_space

    folder, y, u = scalar_csv
    argv = ["filter", folder / "series.csv", "--params", folder / "params.json", "--inputs", "u"]
    argv += ["--fit", "mle", "--starts", 3, "--seed", 5, "--out", tmp_path]
    code, _, err = run(argv, capsys)
    assert code == 0, err
    out = tmp_path / "series-filter-imm"
    assert {"fit.csv", "params.json", "states.csv"} <= {p.name for p in out.iterdir()}
    params, _ = read_params(folder / "params.json")
    spec = switching_state_space(params, y[:, None], inputs=u[:, None])
    _, key = jax.random.split(jax.random.PRNGKey(5))
    expected = fit_switching(key, y[:, None], spec, inputs=u[:, None], num_starts=3)
    fit = pd.read_csv(out / "fit.csv").set_index("parameter")
    assert list(fit.columns) == ["initial", "estimate", "stderr"]
    values = np.concatenate([np.ravel(expected.theta[f]) for f in spec.free])
    np.testing.assert_allclose(fit["estimate"], values, rtol=1e-8)
    stderr = np.concatenate([np.ravel(expected.stderr[f]) for f in spec.free])
    np.testing.assert_allclose(fit["stderr"], stderr, rtol=1e-8)
    assert fit.index[0] == "p[0->0]" and len(fit) == 8
    metrics = pd.read_csv(out / "metrics.csv").set_index("metric")["value"]
    np.testing.assert_allclose(metrics["fit_log_likelihood"], expected.log_likelihood[-1])
    np.testing.assert_allclose(metrics["fit_bic"], expected.bic)
    # params.json holds the fitted parameters, loadable by --params; the filter used them
    fitted, _ = read_params(out / "params.json")
    for field in fitted._fields:
        want = getattr(expected.params, field)
        np.testing.assert_allclose(getattr(fitted, field), want, rtol=1e-12, err_msg=field)
    filt = imm_filter(expected.params, y[:, None], inputs=u[:, None])
    table = pd.read_csv(out / "states.csv")
    np.testing.assert_allclose(table["filtered_mean_x1"], filt.mean[:, 0], rtol=1e-8)
    np.testing.assert_allclose(metrics["log_likelihood"], filt.log_likelihood, rtol=1e-10)
    assert "Learned parameters" in (out / "index.html").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("fit", ["em", "nuts"])
def test_filter_fit_em_and_nuts_write_their_tables(scalar_csv, tmp_path, capsys, fit):
    folder = scalar_csv[0]
    argv = ["filter", folder / "series.csv", "--params", folder / "params.json", "--inputs", "u"]
    sizes = ["--draws", 150, "--warmup", 150] if fit == "nuts" else []
    code, _, err = run([*argv, "--fit", fit, *sizes, "--out", tmp_path], capsys)
    assert code == 0, err
    out = tmp_path / "series-filter-imm"
    fit_table = pd.read_csv(out / "fit.csv").set_index("parameter")
    expected = ["initial", "estimate", "stderr"]
    if fit == "nuts":
        expected = ["initial", "estimate", "sd", "q5", "q95", "r_hat", "ess_bulk"]
        tree = xr.open_datatree(out / "fit_posterior.nc", engine="h5netcdf")
        draws = np.asarray(tree["posterior"]["dynamics_cov_scale"]).reshape(-1, 2)
        np.testing.assert_allclose(
            fit_table.loc[["dynamics_cov_scale[0]", "dynamics_cov_scale[1]"], "estimate"],
            draws.mean(axis=0),
        )
    assert list(fit_table.columns) == expected
    # the volatile regime's process noise scale is learned above the calm one's
    scales = fit_table.loc[["dynamics_cov_scale[0]", "dynamics_cov_scale[1]"], "estimate"]
    fitted, _ = read_params(out / "params.json")
    q = np.asarray(fitted.dynamics_covs)[:, 0, 0]
    np.testing.assert_allclose(q, [0.1 * scales.iloc[0], 2.0 * scales.iloc[1]], rtol=1e-10)


FIT_CASES = {
    "inputs-unknown-column": (["--inputs", "v"], None, "--inputs: no column 'v'"),
    "inputs-without-weights": (
        ["--inputs", "u"],
        _scalar_doc(),
        "--inputs: 1 column(s) (u) but the parameters have no input weights (k = 0)",
    ),
    "weights-without-inputs": (["--columns", "y"], _scalar_doc(1), "name the 1 input column(s)"),
    "inputs-also-observed": (
        ["--inputs", "u", "--columns", "u"],
        _scalar_doc(1),
        "column(s) u are also observation columns",
    ),
    "free-unknown": (
        ["--inputs", "u", "--fit", "mle", "--free", "transition_matrix,nope"],
        _scalar_doc(1),
        "--free: unknown 'nope'; the parameters are",
    ),
    "free-without-fit": (
        ["--inputs", "u", "--free", "transition_matrix"],
        _scalar_doc(1),
        "--free and --starts apply with --fit only",
    ),
    "starts-for-em": (
        ["--inputs", "u", "--fit", "em", "--starts", "2"],
        _scalar_doc(1),
        "--starts applies to --fit mle only",
    ),
    "draws-for-mle": (
        ["--inputs", "u", "--fit", "mle", "--draws", "10"],
        _scalar_doc(1),
        "--draws, --warmup and --chains apply to --method gibbs and --fit nuts",
    ),
    "nuts-without-prior": (
        ["--inputs", "u", "--fit", "nuts", "--free", "dynamics_covs"],
        _scalar_doc(1),
        "--fit nuts has no prior for 'dynamics_covs'",
    ),
    "json-input-weights-shape": (
        ["--inputs", "u"],
        _scalar_doc(1) | {"dynamics_input_weights": [[[1.0]]]},
        'field "dynamics_input_weights": expected shape (2, 1, k), got (1, 1, 1)',
    ),
}


@pytest.mark.parametrize("case", list(FIT_CASES))
def test_filter_refuses_bad_fit_and_input_options(case, tmp_path, capsys, no_jax_work):
    extra, doc, message = FIT_CASES[case]
    path = tmp_path / "series.csv"
    path.write_text("u,y\n0.1,1\n0.2,2\n0.3,\n")
    (tmp_path / "params.json").write_text(json.dumps(doc if doc is not None else _scalar_doc(1)))
    out = tmp_path / "out"
    argv = ["filter", path, "--params", tmp_path / "params.json", "--out", out, *extra]
    code, stdout, err = run(argv, capsys)
    assert code == 2, err
    assert stdout == "" and err.startswith("attnbayes: error: ")
    assert message in err, err
    assert not out.exists()


def test_an_input_column_must_have_no_missing_value(tmp_path, capsys, no_jax_work):
    path = tmp_path / "series.csv"
    path.write_text("u,y\n0.1,1\n,2\n")
    (tmp_path / "params.json").write_text(json.dumps(_scalar_doc(1)))
    argv = ["filter", path, "--params", tmp_path / "params.json", "--inputs", "u"]
    code, _, err = run([*argv, "--out", tmp_path / "out"], capsys)
    assert code == 2
    assert 'line 3, column "u": missing value (empty cell); every input needs a number' in err


@pytest.mark.parametrize("case", list(FILTER_CASES))
def test_filter_refuses_malformed_files(case, tmp_path, capsys, no_jax_work):
    content, params, extra, message = FILTER_CASES[case]
    path = tmp_path / "obs.csv"
    path.write_text(content)
    if params is None:
        model = ["--scenario", "maneuvering-target"]
    else:
        (tmp_path / "params.json").write_text(params)
        model = ["--params", tmp_path / "params.json"]
    out = tmp_path / "out"
    code, stdout, err = run(["filter", path, *model, "--out", out, *extra], capsys)
    assert code == 2
    assert stdout == ""
    assert err.startswith("attnbayes: error: ")
    assert message in err, err
    assert not out.exists()


def test_filter_needs_exactly_one_model(track_csv, tmp_path, capsys, no_jax_work):
    path, _ = track_csv
    code, _, err = run(["filter", path, "--out", tmp_path], capsys)
    assert code == 2 and "one of the arguments --scenario --params is required" in err
    code, _, err = run(["filter", path, "--scenario", "nope", "--out", tmp_path], capsys)
    assert code == 2 and "invalid choice: 'nope'" in err
    argv = ["filter", path, "--scenario", "maneuvering-target", "--params", "p.json"]
    code, _, err = run(argv, capsys)
    assert code == 2 and "not allowed with argument" in err
    code, _, err = run(["filter", path, "--params", tmp_path / "none.json"], capsys)
    assert code == 2 and "none.json: no such file" in err
    assert listing(tmp_path) == []


def test_read_table_reports_the_format_it_read(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text('\ufeff# a comment\n"x 1",y\n\n1.5,-2e-3\n.5,NA\n')
    table = read_table(path, allow_missing=False, columns=["x 1"])
    assert table.header and table.columns == ("x 1",)
    np.testing.assert_array_equal(table.values, [[1.5], [0.5]])
    np.testing.assert_array_equal(table.lines, [4, 5])
    path.write_text("1,2\n3,4\n")
    table = read_table(path, prefix="y")
    assert not table.header and table.columns == ("y1", "y2")


# ----------------------------------------------------------------------------- calibrate


def test_calibrate_names_agree_with_the_library():
    from attnbayes.inference.calibration import CALIBRATION_METHODS

    assert cli.CALIBRATE_METHODS == CALIBRATION_METHODS
    for reading, methods in cli.CALIBRATE_DEFAULT.items():
        assert set(methods) <= set(CALIBRATION_METHODS[reading])


def test_calibrate_writes_table_datatrees_and_figure(tmp_path, capsys):
    import xarray as xr

    out = tmp_path / "out"
    argv = ["calibrate", "--method", "oracle", "--method", "attention-em", "--replicates", 20]
    code, stdout, err = run([*argv, "--points", 20, "--out", out, "--name", "cal"], capsys)
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
def test_calibrate_refuses_bad_options_before_any_work(case, tmp_path, capsys, monkeypatch):
    from attnbayes.inference import calibration

    def refuse(*args, **kwargs):
        raise AssertionError("JAX work started on bad input")

    monkeypatch.setattr(calibration, "calibrate", refuse)
    monkeypatch.chdir(tmp_path)
    extra, message = CALIBRATE_CASES[case]
    out = tmp_path / "out"
    code, stdout, err = run(["calibrate", *extra, "--out", out], capsys)
    assert code == 2, err
    assert stdout == ""
    assert message in err, err
    assert not out.exists()


def test_report_refuses_bad_workers_before_any_work(tmp_path, capsys, monkeypatch, no_jax_work):
    out = tmp_path / "out"
    for bad in ("0", "-2", "two", "1.5"):
        code, _, err = run(["report", "--quick", "--workers", bad, "--out", out], capsys)
        assert code == 2 and "argument --workers:" in err
    monkeypatch.setenv("ATTNBAYES_WORKERS", "many")
    code, _, err = run(["report", "--quick", "--out", out], capsys)
    assert code == 2
    assert err.strip().splitlines()[-1] == (
        "attnbayes: error: ATTNBAYES_WORKERS: expected an integer >= 1, got 'many'"
    )
    assert not out.exists()
