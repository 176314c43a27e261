"""``attnbayes regress`` on users' files, run in-process through ``attnbayes.app.cli.main``
(``attnbayes.app.regress``): the bandwidth and the fit against the library's ``select_bandwidth``
and ``nadaraya_watson`` (to 1e-10) and against statsmodels' ``KernelReg`` (local constant, the
same h: fitted values to 1e-8; its ``cv_ls`` bandwidth), the band against a brute-force NumPy
computation of its formula, and the refusal of bad input (exit status 2, one line naming the
file, line and column or the option, nothing written, no JAX work)."""

import json
import statistics

import numpy as np
import pandas as pd
import pytest
from nadaraya_watson_data import sm_kernel_reg
from statsmodels.datasets import nile

from attnbayes.app import regress
from attnbayes.app.parser import REGRESS_CV_GRID, REGRESS_KERNELS
from attnbayes.inference import kernel_regression
from attnbayes.inference.kernel_regression import (
    KERNELS,
    leave_one_out,
    nadaraya_watson,
    select_bandwidth,
)

KERNEL_FUNCTIONS = {
    "gaussian": lambda u: np.exp(-0.5 * u * u),
    "epanechnikov": lambda u: np.where(np.abs(u) < 1, 1 - u * u, 0.0),
}


@pytest.fixture(scope="module")
def nile_csv(tmp_path_factory):
    """The Nile's annual flow at Aswan, 1871-1970 (statsmodels' datasets, 100 rows), with the
    drop after the first dam (1898) that a smoother must follow."""
    data = nile.load_pandas().data[["year", "volume"]]
    path = tmp_path_factory.mktemp("data") / "nile.csv"
    data.to_csv(path, index=False)
    return path, data["year"].to_numpy(np.float64), data["volume"].to_numpy(np.float64)


def brute_force_band(x, y, fit, queries, kernel: str, h: float):
    """The band's formula with explicit weight matrices (``attnbayes.app.regress``'s docstring):
    (se at the queries, 1 / sum_i w_i^2, residual sd, tr L). An empty window: the nearest x_i."""

    def weights(points):
        k = KERNEL_FUNCTIONS[kernel]((points[:, None] - x[None, :]) / h)
        for row in np.flatnonzero(k.sum(axis=1) == 0):
            k[row, np.argmin(np.abs(points[row] - x))] = 1.0
        return k / k.sum(axis=1, keepdims=True)

    smoother = weights(x)
    divisor = 1 - 2 * np.diag(smoother) + np.sum(smoother**2, axis=1)
    assert np.all(divisor >= regress.DIVISOR_FLOOR)
    r2 = (y - fit) ** 2 / divisor
    w = weights(queries)
    square = np.sum(w**2, axis=1)
    residual_sd = np.sqrt(np.sum((y - fit) ** 2) / divisor.sum())
    return np.sqrt((w @ r2) * square), 1 / square, residual_sd, np.trace(smoother)


def test_regress_kernels_are_the_library_kernels():
    assert REGRESS_KERNELS == KERNELS


def test_regress_matches_select_bandwidth_and_statsmodels_on_the_nile(
    nile_csv, tmp_path, run_cli, listing
):
    path, x, y = nile_csv
    code, out, err = run_cli(
        ["regress", path, "--x", "year", "--y", "volume", "--grid", 50, "--out", tmp_path]
    )
    assert code == 0, err
    folder = tmp_path / "nile-regress-gaussian"
    assert out.strip() == str(folder / "index.html")
    names = ("curve.csv", "cv.csv", "fitted.csv", "index.html", "metrics.csv", "run.json")
    assert listing(tmp_path) == [folder.name, *(f"{folder.name}/{f}" for f in names)]

    # the bandwidth, CV curve and fit are the library's
    selected = select_bandwidth(x, y, num_grid=REGRESS_CV_GRID)
    h = float(selected.bandwidth)
    metrics = pd.read_csv(folder / "metrics.csv").set_index("metric")["value"]
    np.testing.assert_allclose(metrics["bandwidth"], h, rtol=1e-10)
    np.testing.assert_allclose(metrics["loo_cv_bandwidth"], h, rtol=1e-10)
    np.testing.assert_allclose(metrics["cv_at_bandwidth"], float(selected.score), rtol=1e-10)
    cv = pd.read_csv(folder / "cv.csv")
    assert list(cv["kind"]) == ["grid"] * REGRESS_CV_GRID + ["loo-cv"]
    np.testing.assert_allclose(cv["bandwidth"][:-1], selected.bandwidth_trace, rtol=1e-10)
    np.testing.assert_allclose(cv["cv"][:-1], selected.loss_trace, rtol=1e-10)
    fitted = pd.read_csv(folder / "fitted.csv")
    assert list(fitted.columns) == regress.fitted_columns(("year", "volume"), 0.9)
    np.testing.assert_array_equal(fitted["line"], np.arange(2, 102))
    np.testing.assert_array_equal(fitted["volume"], y)
    np.testing.assert_allclose(fitted["fit"], nadaraya_watson(x, y, x, bandwidth=h), rtol=1e-10)
    loo = leave_one_out(x, y, bandwidth=h)
    np.testing.assert_allclose(fitted["loo_fit"], loo.predictions, rtol=1e-10)
    curve = pd.read_csv(folder / "curve.csv")
    grid = np.linspace(1871, 1970, 50)
    np.testing.assert_allclose(curve["year"], grid, rtol=1e-15)
    np.testing.assert_allclose(curve["fit"], nadaraya_watson(x, y, grid, bandwidth=h), rtol=1e-10)

    # statsmodels' local-constant KernelReg at the same h: the same fitted values
    theirs = sm_kernel_reg(y, x, "c", reg_type="lc", bw=[h])
    np.testing.assert_allclose(fitted["fit"], theirs.fit(x)[0], rtol=1e-8)
    np.testing.assert_allclose(curve["fit"], theirs.fit(grid)[0], rtol=1e-8)
    # its cv_ls (Nelder-Mead on the same CV, from 1.06 sd N^(-1/5)) finds the same minimum as
    # our grid of bandwidths 1.33 apart refined by Brent (xatol 3e-3 in log h): they differ by
    # 0.03 % here, well inside Brent's tolerance; our CV is no worse than at theirs (its own
    # stops are absolute, 1e-4 in h and in CV)
    with np.errstate(divide="ignore", invalid="ignore"):  # its search tries h near 0
        h_cv_ls = abs(sm_kernel_reg(y, x, "c", reg_type="lc", bw="cv_ls").bw[0])
    assert h == pytest.approx(h_cv_ls, rel=3e-3)
    assert float(selected.score) <= float(leave_one_out(x, y, bandwidth=h_cv_ls).score) * (1 + 1e-7)

    # the band: its formula by brute force, and fit -+ z se
    se, effective, residual_sd, nu = brute_force_band(
        x, y, fitted["fit"].to_numpy(), np.concatenate([x, grid]), "gaussian", h
    )
    np.testing.assert_allclose(fitted["se"], se[:100], rtol=1e-10)
    np.testing.assert_allclose(curve["se"], se[100:], rtol=1e-10)
    np.testing.assert_allclose(curve["effective_points"], effective[100:], rtol=1e-10)
    np.testing.assert_allclose(metrics["residual_sd"], residual_sd, rtol=1e-10)
    np.testing.assert_allclose(metrics["effective_df"], nu, rtol=1e-10)
    z = statistics.NormalDist().inv_cdf(0.95)
    for frame in (fitted, curve):
        np.testing.assert_allclose(frame["lower_90"], frame["fit"] - z * frame["se"], rtol=1e-12)
        np.testing.assert_allclose(frame["upper_90"], frame["fit"] + z * frame["se"], rtol=1e-12)

    manifest = json.loads((folder / "run.json").read_text())
    assert manifest["attnbayes"] == "regress"
    assert (manifest["rows"], manifest["columns"], manifest["kernel"]) == (
        100,
        ["year", "volume"],
        "gaussian",
    )
    page = (folder / "index.html").read_text()
    assert page.count("data:image/png;base64,") == 2
    assert "ignores the bias" in page and "Warning" not in page

    # a second run replaces the folder it wrote
    argv = ["regress", path, "--x", 1, "--y", 2, "--grid", 50, "--level", 0.5, "--out", tmp_path]
    code, _, err = run_cli(argv)
    assert code == 0, err
    assert "lower_50" in pd.read_csv(folder / "fitted.csv").columns
    assert [p.name for p in tmp_path.iterdir()] == [folder.name]


def test_regress_compact_kernel_with_a_given_bandwidth(tmp_path, run_cli):
    """Epanechnikov with --bandwidth, another delimiter and column order: the fit is the
    library's, the CV curve marks the given h, the grid points in the gap of the data are
    named in a warning on the terminal and the page; a bandwidth below the data's spacing is
    refused."""
    x = np.concatenate([np.linspace(0, 4, 20), np.linspace(6, 10, 20)])
    y = np.sin(x) + 0.2 * np.random.default_rng(3).normal(size=40)
    path = tmp_path / "wave.txt"
    frame = pd.DataFrame({"signal": y, "id": np.arange(40), "t": x})
    path.write_text("# a wave\n" + frame.to_csv(index=False, sep=";"))
    argv = ["regress", path, "--x", "t", "--y", "signal", "--delimiter", ";"]
    argv += ["--kernel", "epanechnikov", "--level", 0.5, "--grid", 21, "--out", tmp_path]
    code, _, err = run_cli([*argv, "--bandwidth", 0.4, "--name", "wave"])
    assert code == 0, err
    folder = tmp_path / "wave"
    warning = "3 of the 21 grid points have no x_i within h = 0.4 (epanechnikov kernel)"
    assert f"warning: {warning}" in err
    assert warning in (folder / "index.html").read_text()

    metrics = pd.read_csv(folder / "metrics.csv").set_index("metric")["value"]
    assert metrics["bandwidth"] == 0.4
    selected = select_bandwidth(x, y, kernel="epanechnikov", num_grid=REGRESS_CV_GRID)
    np.testing.assert_allclose(metrics["loo_cv_bandwidth"], selected.bandwidth, rtol=1e-10)
    cv = pd.read_csv(folder / "cv.csv").set_index("kind")
    given = leave_one_out(x, y, kernel="epanechnikov", bandwidth=0.4).score
    np.testing.assert_allclose(cv.loc["given", "cv"], given, rtol=1e-10)
    fitted = pd.read_csv(folder / "fitted.csv")
    np.testing.assert_array_equal(fitted["line"], np.arange(3, 43))
    assert list(fitted.columns[2:4]) == ["t", "signal"]
    expected = nadaraya_watson(x, y, x, kernel="epanechnikov", bandwidth=0.4)
    np.testing.assert_allclose(fitted["fit"], expected, rtol=1e-10)
    curve = pd.read_csv(folder / "curve.csv")
    se, _, _, _ = brute_force_band(
        x, y, fitted["fit"].to_numpy(), curve["t"].to_numpy(), "epanechnikov", 0.4
    )
    np.testing.assert_allclose(curve["se"], se, rtol=1e-10)
    assert {"lower_50", "upper_50"} <= set(curve.columns)

    # every observation alone in its window: the noise cannot be estimated
    code, _, err = run_cli([*argv, "--bandwidth", 0.1, "--name", "alone"])
    assert code == 2
    assert (
        err.strip()
        .splitlines()[-1]
        .startswith(
            "attnbayes: error: --bandwidth: h = 0.1 leaves every observation alone in its kernel "
            "window"
        )
    )
    assert not (tmp_path / "alone").exists()


@pytest.fixture
def no_regression_work(refuse_methods, monkeypatch):
    """``no_jax_work`` for regress as well: the kernel-regression functions it starts fail."""
    refuse = refuse_methods("JAX work started on bad input")
    for name in ("select_bandwidth", "leave_one_out", "nadaraya_watson", "kernel_scores"):
        monkeypatch.setattr(kernel_regression, name, refuse)


GOOD = "a,b,c\n" + "".join(f"{i},{i * i % 7},{i % 3}\n" for i in range(1, 9))
CASES = {
    "missing column": (
        GOOD,
        ["--x", "a", "--y", "nope"],
        "data.csv: --y: no column 'nope'; the file's columns are a, b, c (names from the "
        "header, or numbers 1..3)",
    ),
    "non-numeric cell": (
        GOOD.replace("3,2,0", "3,abc,0"),
        ["--x", "a", "--y", "b"],
        "data.csv line 4, column \"b\": cannot parse 'abc' as a number",
    ),
    "missing cell": (
        GOOD.replace("2,4,2", "2,,2"),
        ["--x", "a", "--y", "b"],
        'data.csv line 3, column "b": missing value (empty cell); every observation needs a number',
    ),
    "constant x": (
        "a,b,c\n" + "".join(f"{i},{i * i % 7},3\n" for i in range(1, 9)),
        ["--x", "c", "--y", "b"],
        'data.csv: --x column "c" is constant (3 on every row); the regression needs x values '
        "that vary",
    ),
    "too few rows": (
        "a,b\n1,2\n2,3\n3,5\n",
        ["--x", "a", "--y", "b"],
        "data.csv: 3 row(s) of data; the regression needs at least 5 (leave-one-out CV on fewer "
        "says nothing)",
    ),
    "the same column": (
        GOOD,
        ["--x", "b", "--y", "2"],
        'data.csv: --x and --y both name column "b"; the regression needs two different columns',
    ),
    "a huge value": (
        GOOD.replace("5,4,2", "5,4e200,2"),
        ["--x", "a", "--y", "b"],
        'data.csv line 6, column "b": 4e+200 is too large: the --y column\'s values must be at '
        "most 2.4e+153 in size (float64, N = 8), where the sums of squares overflow; rescale "
        "the column",
    ),
    "a tiny bandwidth": (
        GOOD,
        ["--x", "a", "--y", "b", "--bandwidth", "1e-300"],
        "--bandwidth: 1e-300 is too small (1/h^2 overflows)",
    ),
    "a name with a slash": (
        GOOD,
        ["--x", "a", "--y", "b", "--name", "a/b"],
        "--name: must be a plain folder name, got 'a/b'",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_regress_refuses_bad_input_before_any_work(
    case, tmp_path, run_cli, monkeypatch, no_regression_work
):
    text, options, message = CASES[case]
    (tmp_path / "data.csv").write_text(text)
    monkeypatch.chdir(tmp_path)  # the file as the user names it
    out = tmp_path / "out"
    code, stdout, err = run_cli(["regress", "data.csv", *options, "--out", out])
    assert code == 2 and not stdout
    assert err.strip().splitlines() == [f"attnbayes: error: {message}"]
    assert not out.exists()


@pytest.mark.parametrize(
    ("option", "value", "reason"),
    [
        ("--bandwidth", "0", "must be a finite number > 0, got 0"),
        ("--bandwidth", "-1", "must be a finite number > 0, got -1"),
        ("--bandwidth", "inf", "must be a finite number > 0, got inf"),
        ("--bandwidth", "nan", "must be a finite number > 0, got nan"),
        ("--bandwidth", "wide", "expected a number, got 'wide'"),
        ("--level", "1", "must be in (0, 1), got 1"),
        ("--grid", "1", "must be >= 2, got 1"),
        ("--kernel", "cosine", "invalid choice: 'cosine'"),
    ],
)
def test_regress_refuses_bad_options_before_any_work(
    option, value, reason, tmp_path, run_cli, no_regression_work
):
    path = tmp_path / "data.csv"
    path.write_text(GOOD)
    out = tmp_path / "out"
    code, _, err = run_cli(["regress", path, "--x", "a", "--y", "b", option, value, "--out", out])
    assert code == 2
    (line,) = err.strip().splitlines()  # one line (review N9)
    assert line.startswith(f"attnbayes: error: argument {option}: {reason}")
    assert not out.exists()


def test_regress_never_replaces_a_folder_it_did_not_write(tmp_path, run_cli, no_regression_work):
    path = tmp_path / "data.csv"
    path.write_text(GOOD)
    mine = tmp_path / "out" / "mine"
    mine.mkdir(parents=True)
    (mine / "thesis.tex").write_text("precious")
    argv = ["regress", path, "--x", "a", "--y", "b", "--out", tmp_path / "out", "--name", "mine"]
    code, stdout, err = run_cli(argv)
    assert code == 2 and not stdout
    assert err.strip().splitlines() == [
        f"attnbayes: error: --out/--name: {mine} exists and was not written by attnbayes (no "
        "run.json); choose another --name or --out, or remove it"
    ]
    assert [p.name for p in mine.iterdir()] == ["thesis.tex"]
