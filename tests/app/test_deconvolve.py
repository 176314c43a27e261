"""``attnbayes deconvolve`` on users' files, run in-process through ``attnbayes.app.cli.main``
(``attnbayes.app.deconvolve``): the documented outputs, their agreement with the library, and the
refusal of malformed input (exit status 2, a message naming line and column, no output)."""

import json

import jax
import numpy as np
import pandas as pd
import pytest
import xarray as xr

from attnbayes.app import deconvolve, outputs
from attnbayes.app.user_data import read_table
from attnbayes.inference.deconvolution.comparison import compare_deconvolution

SIGMA = 1.0  # the noise sd of dec_csv (conftest)


def test_deconvolve_em_writes_z_hat_equal_to_the_library(dec_csv, tmp_path, run_cli, listing):
    path, x = dec_csv
    code, out, err = run_cli(["deconvolve", path, "--sigma", SIGMA, "--out", tmp_path])
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
    assert list(table.columns) == deconvolve.deconvolve_output_columns(["score"])
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
    code, _, err = run_cli(["deconvolve", path, "--sigma", 2, "--out", tmp_path])
    assert code == 0, err
    assert json.loads((folder / "run.json").read_text())["sigma"] == 2.0
    assert [p.name for p in tmp_path.iterdir()] == ["scores-deconvolve-em"]

    # the registry's name runs the method its alias ran, into a folder of that name
    argv = ["deconvolve", path, "--sigma", SIGMA, "--method", "attention-em", "--out", tmp_path]
    code, _, err = run_cli(argv)
    assert code == 0, err
    named = tmp_path / "scores-deconvolve-attention-em"
    manifest = json.loads((named / "run.json").read_text())
    assert manifest["method"] == manifest["library_method"] == "attention-em"
    pd.testing.assert_frame_equal(pd.read_csv(named / "z_hat.csv"), table)


def test_deconvolve_selected_columns_with_another_delimiter(tmp_path, run_cli):
    rng = np.random.default_rng(2)
    angles = 2 * np.pi * rng.integers(0, 8, size=30) / 8
    x = 3 * np.stack([np.cos(angles), np.sin(angles)], axis=1) + 0.5 * rng.normal(size=(30, 2))
    path = tmp_path / "points.txt"
    frame = pd.DataFrame({"id": [f"p{i}" for i in range(30)], "a": x[:, 0], "b": x[:, 1]})
    path.write_text("# exported points\n" + frame.to_csv(index=False, sep="\t"))
    argv = ["deconvolve", path, "--sigma", 0.5, "--delimiter", "tab", "--columns", "b,a"]
    code, _, err = run_cli([*argv, "--out", tmp_path / "out", "--name", "ring"])
    assert code == 0, err
    table = pd.read_csv(tmp_path / "out" / "ring" / "z_hat.csv")
    assert list(table.columns) == deconvolve.deconvolve_output_columns(["b", "a"])
    np.testing.assert_array_equal(table["line"], np.arange(3, 33))
    fit = compare_deconvolution(None, x[:, ::-1], 0.5, methods=("attention-em",)).fits[
        "attention-em"
    ]
    np.testing.assert_allclose(table[["z_hat_b", "z_hat_a"]], fit.z_hat, rtol=1e-12, atol=1e-12)


def test_deconvolve_gibbs_writes_diagnostics_and_the_datatree(dec_csv, tmp_path, run_cli):
    path, x = dec_csv
    sizes = {"num_warmup": 100, "num_samples": 100, "num_chains": 2}
    argv = ["deconvolve", path, "--sigma", SIGMA, "--method", "gibbs", "--num-atoms", 3]
    argv += ["--warmup", 100, "--draws", 100, "--chains", 2, "--seed", 3, "--out", tmp_path]
    code, _, err = run_cli(argv)
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
    assert "Sampler diagnostics" in page and "max R-hat" in page
    assert "divergent transitions: none (not a Hamiltonian sampler)" in page


@pytest.mark.slow
def test_deconvolve_nuts_end_to_end(dec_csv, tmp_path, run_cli):
    path, _ = dec_csv
    argv = ["deconvolve", path, "--sigma", SIGMA, "--method", "nuts", "--num-atoms", 3]
    code, _, err = run_cli([*argv, "--warmup", 300, "--draws", 300, "--out", tmp_path])
    assert code == 0, err
    folder = tmp_path / "scores-deconvolve-nuts"
    metrics = pd.read_csv(folder / "metrics.csv").set_index("metric")["value"]
    assert metrics["max_rhat_invariant"] < 1.1
    assert "divergences" in metrics.index
    tree = xr.open_datatree(folder / "posterior.nc", engine="h5netcdf")
    assert {"posterior", "sample_stats", "log_likelihood"} <= set(tree.children)


# ----------------------------------------------------------------------------- bad input


DECONVOLVE_CASES = {
    "bad-number": (
        "x1,x2\n1,2\n3,abc\n",
        ["--columns", "x1,x2"],
        "line 3, column \"x2\": cannot parse 'abc' as a number",
    ),
    "ragged-row": (
        "x1,x2\n1,2\n3\n",
        ["--columns", "x1,x2"],
        'line 3, column "x2": missing: the row has 1 of 2 fields',
    ),
    "extra-field": ("1,2\n3,4,5\n", ["--columns", "1,2"], "line 2, column 3: extra field '5'"),
    "empty-file": ("", [], "the file is empty"),
    "blank-file": ("\n\n# nothing\n", [], "the file is empty"),
    "header-only": ("x1,x2\n", [], "line 1: only a header, no data rows"),
    "semicolons": ("a;b\n1.5;2\n", [], "line 1: no ',' in the first row but 2 ';'-separated cells"),
    "decimal-comma": (
        "a;b\n1,5;2\n",
        ["--delimiter", ";", "--columns", "a,b"],
        "line 2, column \"a\": cannot parse '1,5' as a number (a decimal comma?",
    ),
    "infinite": ("x\n1\ninf\n", [], "line 3, column \"x\": 'inf' is not a finite number"),
    "missing-value": ("x\n1\n\n2\nNA\n", [], 'line 5, column "x": missing value'),
    "numeric-header": (
        "x,1\n2,3\n",
        ["--columns", "1,2"],
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
    # which columns are data is never guessed: an R-style file's row names are not a coordinate
    "r-rownames": (
        '"rownames","x"\n"1",1.2\n"2",0.3\n"3",2.5\n',
        [],
        "line 1: 2 columns (rownames, x) and no --columns to say which are data; column "
        '"rownames" looks like a row index (its header is "rownames"); pass --columns x',
    ),
    "r-write-csv": (
        '"","x"\n"1",1.2\n"2",0.3\n"3",2.5\n',
        [],
        "column 1 (no name) looks like a row index (its header is empty); pass --columns x",
    ),
    "index-integers": (
        "id,score\n1,0.5\n2,1.5\n3,-1\n",
        [],
        'column "id" looks like a row index (the integers 1..3 in order); pass --columns score',
    ),
    "two-columns": (
        "a,b\n1.5,2\n3,4\n",
        [],
        "line 1: 2 columns (a, b) and no --columns to say which are data; pass --columns a for "
        "one column of observations, or --columns a,b for points in R^2",
    ),
    "unnamed-column-chosen": (
        ",x\n0,1.2\n1,0.3\n",
        ["--columns", "1,2"],
        "line 1, column 1: empty column name; name the column in the header to use it",
    ),
    # a value whose squared distances overflow: the cell, not the library's "x"
    "overflow": (
        "x\n0\n1\n1e308\n",
        [],
        'line 4, column "x": 1e+308 is too far from the other values for --sigma 1: the '
        "column's spread (max - min) / sigma = 1e+308 exceeds 3.9e+153",
    ),
    "overflow-headerless": (
        "1,0\n2,0\n-1e200,0\n",
        ["--columns", "1,2"],
        "line 3, column 1: -1e+200",
    ),
}


@pytest.mark.parametrize("case", list(DECONVOLVE_CASES))
def test_deconvolve_refuses_malformed_files(case, tmp_path, run_cli, no_jax_work, listing):
    content, extra, message = DECONVOLVE_CASES[case]
    path = tmp_path / "data.csv"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("a user's file")
    code, stdout, err = run_cli(["deconvolve", path, "--sigma", 1, "--out", out, *extra])
    assert code == 2
    assert stdout == ""
    assert err.startswith("attnbayes: error: ")
    assert message in err, err
    if "line" in message:
        assert f"{path} line" in err
    assert listing(out) == ["keep.txt"]


def test_an_r_style_file_is_read_with_columns(tmp_path):
    """R's write.csv names its row-names column "" (Rdatasets' files: "rownames"): --columns x
    reads x alone, and the cells are named as in the file."""
    path = tmp_path / "nile.csv"
    path.write_text('"","x"\n"1",1120\n"2",1160\n"3",963\n')
    table = read_table(path, columns=["x"])
    assert table.columns == ("x",) and table.positions == (2,)
    np.testing.assert_array_equal(table.values[:, 0], [1120.0, 1160.0, 963.0])
    assert table.where(2, 0) == f'{path} line 4, column "x"'
    headerless = tmp_path / "plain.csv"
    headerless.write_text("1,5\n2,6\n")
    assert read_table(headerless, columns=["2"]).where(1, 0) == f"{headerless} line 2, column 2"


def test_deconvolve_refuses_bad_arguments(dec_csv, tmp_path, run_cli, no_jax_work, listing):
    path, _ = dec_csv
    out = tmp_path / "out"
    for sigma in ("0", "-1", "nan", "inf", "abc"):
        code, _, err = run_cli(["deconvolve", path, "--sigma", sigma, "--out", out])
        assert code == 2
        assert "argument --sigma:" in err
    code, _, err = run_cli(["deconvolve", path, "--out", out])
    assert code == 2 and "--sigma" in err
    code, _, err = run_cli(["deconvolve", tmp_path / "nope.csv", "--sigma", 1, "--out", out])
    assert code == 2 and f"{tmp_path / 'nope.csv'}: no such file" in err
    code, _, err = run_cli(["deconvolve", path, "--sigma", 1, "--delimiter", "ab", "--out", out])
    assert code == 2 and "argument --delimiter" in err
    code, _, err = run_cli(["deconvolve", path, "--sigma", 1, "--name", "../x", "--out", out])
    assert code == 2 and "--name: must be a plain folder name" in err
    assert not out.exists()
    # an existing folder that attnbayes did not write is left alone
    (out / "mine").mkdir(parents=True)
    (out / "mine" / "notes.txt").write_text("precious")
    code, _, err = run_cli(["deconvolve", path, "--sigma", 1, "--name", "mine", "--out", out])
    assert code == 2 and "was not written by attnbayes" in err
    assert listing(out) == ["mine", "mine/notes.txt"]


def test_a_failing_run_writes_nothing(dec_csv, tmp_path, run_cli, monkeypatch):
    path, _ = dec_csv
    out = tmp_path / "new" / "out"

    def broken(tmp, target):  # fails after every file was written to the temporary folder
        assert sorted(p.name for p in tmp.iterdir())[-1] == "z_hat.csv"
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(outputs, "publish_folder", broken)
    code, stdout, err = run_cli(["deconvolve", path, "--sigma", 1, "--out", out])
    assert code == 1 and "cannot write the output: [Errno 28] No space left on device" in err
    assert stdout == ""
    assert not (tmp_path / "new").exists()  # the temporary folder and the folders made go


# ----------------------------------------------------------------------------- --se, --binomial

NOISE_CASES = {
    "se-zero": ("x,se\n1,0.5\n2,0\n", ["--se", "se"], 'line 3, column "se": --se: a standard'),
    "se-missing-cell": ("x,se\n1,0.5\n2,NA\n", ["--se", "se"], 'line 3, column "se": missing'),
    "se-not-a-number": (
        "x,se\n1,0.5\n2,abc\n",
        ["--se", "se"],
        "line 3, column \"se\": cannot parse 'abc' as a number",
    ),
    "se-no-such-column": ("x,se\n1,0.5\n", ["--se", "s"], "--se: no column 's'; the file's"),
    "se-is-data": ("x,se\n1,0.5\n", ["--columns", "x", "--se", "x"], "--se: column 'x' is also"),
    "se-count": (
        "a,b,c,s1,s2\n1,2,3,1,1\n",
        ["--columns", "a,b,c", "--se", "s1,s2"],
        "--se: 2 columns for 3 data columns",
    ),
    "se-two-data-columns": (
        "a,b,se\n1,2,1\n",
        ["--se", "se"],
        "line 1: 2 columns (a, b) besides the --se columns and no --columns",
    ),
    # the spread in units of the smallest standard error overflows: the cell of x is named
    "se-overflow": (
        "x,se\n0,1\n1,1\n1e100,1e-60\n",
        ["--se", "se"],
        'line 4, column "x": 1e+100 is too far from the other values for the smallest --se '
        "1e-60: the column's spread (max - min) / sigma = 1e+160 exceeds",
    ),
    "binomial-negative": ("h,t\n1,4\n-1,4\n", ["--binomial", "h,t"], 'line 3, column "h"'),
    "binomial-too-many-hits": ("h,t\n5,4\n", ["--binomial", "h,t"], "fewer trials than hits"),
    "binomial-zero-trials": ("h,t\n0,0\n", ["--binomial", "h,t"], 'line 2, column "t"'),
    "binomial-fraction": ("h,t\n1.5,4\n", ["--binomial", "h,t"], "not a whole number"),
    "binomial-missing": ("h,t\n1,\n", ["--binomial", "h,t"], 'line 2, column "t": missing'),
    "binomial-with-columns": (
        "h,t\n1,4\n",
        ["--binomial", "h,t", "--columns", "h"],
        "--columns: does not apply with --binomial",
    ),
}


@pytest.mark.parametrize("case", list(NOISE_CASES))
def test_deconvolve_refuses_bad_standard_errors_and_counts(
    case, tmp_path, run_cli, no_jax_work, listing
):
    content, argv, message = NOISE_CASES[case]
    path = tmp_path / "data.csv"
    path.write_text(content)
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("a user's file")
    code, stdout, err = run_cli(["deconvolve", path, "--out", out, *argv])
    assert code == 2
    assert stdout == ""
    assert err.startswith("attnbayes: error: ") and err.count("\n") == 1, err
    assert message in err, err
    if "line" in message:
        assert f"{path} line" in err
    assert listing(out) == ["keep.txt"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--sigma", 1, "--se", "se"], "argument --se: not allowed with argument --sigma"),
        (["--se", "se", "--binomial", "h,t"], "argument --binomial: not allowed with argument"),
        ([], "one of the arguments --sigma --se --binomial is required"),
        (["--binomial", "h"], "argument --binomial: expected two columns HITS,TRIALS"),
    ],
)
def test_deconvolve_takes_exactly_one_noise_option(argv, message, dec_csv, tmp_path, run_cli):
    path, _ = dec_csv
    code, stdout, err = run_cli(["deconvolve", path, "--out", tmp_path / "out", *argv])
    assert code == 2 and stdout == ""
    assert message in err, err
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def se_csv(tmp_path_factory):
    """N = 60 draws of the three atoms (as dec_csv), each with its own s_i log-uniform on
    [0.5, 3], in columns score and se."""
    rng = np.random.default_rng(7)
    s = np.exp(rng.uniform(np.log(0.5), np.log(3.0), size=60))
    x = rng.choice([-2.0, 0.0, 3.0], size=60, p=[0.5, 0.3, 0.2]) + s * rng.normal(size=60)
    path = tmp_path_factory.mktemp("data") / "schools.csv"
    pd.DataFrame({"score": x, "se": s}).to_csv(path, index=False)
    return path, x, s


def test_deconvolve_se_passes_each_row_its_standard_error(se_csv, tmp_path, run_cli):
    path, x, s = se_csv
    code, _, err = run_cli(["deconvolve", path, "--se", "se", "--out", tmp_path])
    assert code == 0, err
    folder = tmp_path / "schools-deconvolve-em"
    fit = compare_deconvolution(None, x, s, methods=("attention-em",)).fits["attention-em"]
    table = pd.read_csv(folder / "z_hat.csv")
    assert list(table.columns) == deconvolve.deconvolve_output_columns(["score"], ["se"])
    np.testing.assert_array_equal(table["se"], s)
    np.testing.assert_allclose(table["z_hat_score"], fit.z_hat, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(table["lower_90_score"], fit.intervals[0.9][0], atol=1e-12)
    manifest = json.loads((folder / "run.json").read_text())
    assert manifest["sigma"] is None and manifest["se"] == ["se"]
    assert (manifest["se_min"], manifest["se_max"]) == (s.min(), s.max())
    page = (folder / "index.html").read_text()
    assert f"per row, from se: {s.min():.3g} to {s.max():.3g}" in page
    assert "no single density of x is drawn" in page
    # a normal-prior rule: no discrete nu, its hyperparameters on the page
    code, _, err = run_cli(
        ["deconvolve", path, "--se", "se", "--method", "sure", "--out", tmp_path]
    )
    assert code == 0, err
    sure = tmp_path / "schools-deconvolve-sure"
    assert not (sure / "measure.csv").exists()
    fit = compare_deconvolution(None, x, s, methods=("sure",)).fits["sure"]
    np.testing.assert_allclose(pd.read_csv(sure / "z_hat.csv")["z_hat_score"], fit.z_hat)
    assert "prior_variance" in (sure / "index.html").read_text()


def test_deconvolve_binomial_fits_brown_scale_and_maps_back(tmp_path, run_cli):
    """Counts of unequal trials: the fit on x = arcsin(sqrt((H + 1/4) / (T + 1/2))) with
    s = 1 / (2 sqrt(T)) (the library's answer on them), mapped back by p = sin(z)^2."""
    rng = np.random.default_rng(9)
    trials = rng.integers(1, 80, size=60)
    hits = rng.binomial(trials, rng.choice([0.2, 0.3], size=60))
    path = tmp_path / "batting.csv"
    pd.DataFrame({"name": [f"b{i}" for i in range(60)], "h": hits, "ab": trials}).to_csv(
        path, index=False
    )
    code, _, err = run_cli(["deconvolve", path, "--binomial", "h,ab", "--out", tmp_path])
    assert code == 0, err
    folder = tmp_path / "batting-deconvolve-em"
    table = pd.read_csv(folder / "z_hat.csv")
    assert list(table.columns) == deconvolve.deconvolve_output_columns(["x"], counts=("h", "ab"))
    np.testing.assert_array_equal(table["h"], hits)
    np.testing.assert_array_equal(table["p_raw"], hits / trials)
    x = np.arcsin(np.sqrt((hits + 0.25) / (trials + 0.5)))
    s = 1 / (2 * np.sqrt(trials))
    np.testing.assert_allclose(table["x"], x, rtol=1e-15)
    np.testing.assert_allclose(table["se"], s, rtol=1e-15)
    fit = compare_deconvolution(None, x, s, methods=("attention-em",)).fits["attention-em"]
    np.testing.assert_allclose(table["z_hat_x"], fit.z_hat, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(table["p_hat"], np.sin(fit.z_hat) ** 2, rtol=1e-12)
    for prob, (lo, hi) in fit.intervals.items():
        q = round(prob * 100)
        np.testing.assert_allclose(table[f"p_lower_{q}"], np.sin(lo) ** 2, rtol=1e-12)
        np.testing.assert_allclose(table[f"p_upper_{q}"], np.sin(hi) ** 2, rtol=1e-12)
    manifest = json.loads((folder / "run.json").read_text())
    assert manifest["binomial"] == ["h", "ab"] and manifest["columns"] == ["h", "ab"]
    assert "Proportions" in (folder / "index.html").read_text()


def test_deconvolve_says_when_a_normal_prior_sits_on_its_boundary(tmp_path, run_cli):
    """Rubin's eight schools (ArviZ's data): the marginal MLE of tau is 0, so normal-eb pools
    every school to one mean with zero-width intervals; the run says so on the terminal and
    the page, and in run.json."""
    from arviz_base import load_arviz_data

    data = load_arviz_data("centered_eight")
    y = np.asarray(data["observed_data"]["obs"]).ravel()
    s = np.asarray(data["constant_data"]["sigma"]).ravel()
    path = tmp_path / "schools.csv"
    pd.DataFrame({"y": y, "se": s}).to_csv(path, index=False)
    code, _, err = run_cli(
        [
            "deconvolve",
            path,
            "--columns",
            "y",
            "--se",
            "se",
            "--method",
            "normal-eb",
            "--out",
            tmp_path,
        ]
    )
    assert code == 0, err
    assert "warning: normal-eb: the fitted prior variance sits on its boundary 0" in err
    folder = tmp_path / "schools-deconvolve-normal-eb"
    assert (
        "<strong>Warning:</strong> normal-eb: the fitted prior variance"
        in (folder / "index.html").read_text()
    )
    assert len(json.loads((folder / "run.json").read_text())["fit_warnings"]) == 1
    z = pd.read_csv(folder / "z_hat.csv")["z_hat_y"]
    np.testing.assert_allclose(z, np.sum(y / s**2) / np.sum(1 / s**2), rtol=1e-10)


def test_fit_warnings_name_an_iteration_cap():
    """A point fit that stopped at its cap (converged 0 in the comparison's table) is named;
    one that converged is not (no JAX)."""
    fit = type("Fit", (), {"hyperparameters": None})()
    table = pd.DataFrame({"metric": ["iterations", "converged"], "value": [500.0, 0.0]})
    (warning,) = deconvolve.fit_warnings("attention-em", table, fit)
    assert warning.startswith("attention-em stopped at its iteration cap (500)")
    table["value"] = [37.0, 1.0]
    assert deconvolve.fit_warnings("attention-em", table, fit) == []
