"""``attnbayes deconvolve --method learned``: the shipped grid stack (version 2) on a user's
file with --se or --sigma, its outputs against the library's ``grid_stack_fit``, the stack
named on the terminal and the page, and its refusals (several columns, no spread): exit 2,
one line, nothing written."""

import json
import statistics

import numpy as np
import pandas as pd
import pytest

from attnbayes.app import deconvolve
from attnbayes.inference.deconvolution.learned import grid_stack


@pytest.fixture(scope="module")
def schools_csv(tmp_path_factory):
    """N = 60 draws of three atoms, each with its own s_i log-uniform on [0.5, 3] (columns
    score and se)."""
    rng = np.random.default_rng(11)
    s = np.exp(rng.uniform(np.log(0.5), np.log(3.0), size=60))
    x = rng.choice([-2.0, 0.0, 3.0], size=60, p=[0.5, 0.3, 0.2]) + s * rng.normal(size=60)
    path = tmp_path_factory.mktemp("data") / "schools.csv"
    pd.DataFrame({"score": x, "se": s}).to_csv(path, index=False)
    return path, x, s


def _check_against_the_library(folder, x, sigma, se_columns=()):
    fit = grid_stack.grid_stack_fit(grid_stack.pretrained_grid_stack(), x, sigma)
    mean, sd = np.asarray(fit.mean), np.sqrt(np.asarray(fit.variance))
    table = pd.read_csv(folder / "z_hat.csv")
    assert list(table.columns) == deconvolve.deconvolve_output_columns(["score"], se_columns)
    np.testing.assert_array_equal(table["score"], x)
    np.testing.assert_allclose(table["z_hat_score"], mean, rtol=1e-12, atol=1e-12)
    for prob in (0.5, 0.9):
        q = statistics.NormalDist().inv_cdf((1 + prob) / 2)
        p = round(100 * prob)
        np.testing.assert_allclose(table[f"lower_{p}_score"], mean - q * sd, atol=1e-12)
        np.testing.assert_allclose(table[f"upper_{p}_score"], mean + q * sd, atol=1e-12)
    measure = pd.read_csv(folder / "measure.csv")  # the effective prior on the grid
    weights = np.asarray(fit.prior_weights)
    np.testing.assert_allclose(measure["weight"], weights[weights > 0] / weights.sum(), rtol=1e-12)
    np.testing.assert_allclose(measure["atom_score"], np.asarray(fit.grid)[weights > 0])


def test_deconvolve_learned_with_se_and_sigma_equals_the_library(schools_csv, tmp_path, run_cli):
    path, x, s = schools_csv
    argv = ["deconvolve", path, "--se", "se", "--method", "learned", "--out", tmp_path]
    code, out, err = run_cli(argv)
    assert code == 0, err
    folder = tmp_path / "schools-deconvolve-learned"
    assert out.strip() == str(folder / "index.html")
    files = ("index.html", "measure.csv", "metrics.csv", "run.json", "z_hat.csv")
    assert sorted(p.name for p in folder.iterdir()) == list(files)
    _check_against_the_library(folder, x, s, ["se"])
    # which stack ran: on the terminal, in the page and in run.json
    assert "learned: the grid stack, version 2 (grid_stack_v2.npz" in err
    manifest = json.loads((folder / "run.json").read_text())
    assert manifest["library_method"] == "learned" and manifest["se"] == ["se"]
    assert manifest["stack"].startswith("the grid stack, version 2")
    assert "trained on simulated tasks" in manifest["stack"]
    page = (folder / "index.html").read_text()
    assert "the grid stack, version 2 (grid_stack_v2.npz" in page
    assert "effective prior discretised on its grid" in page
    metrics = pd.read_csv(folder / "metrics.csv").set_index("metric")["value"]
    assert np.isfinite(metrics).all() and "log_likelihood" in metrics

    argv = [*argv[:2], "--columns", "score", "--sigma", 1.5, *argv[4:], "--name", "one-sigma"]
    code, _, err = run_cli(argv)
    assert code == 0, err
    _check_against_the_library(tmp_path / "one-sigma", x, 1.5)


@pytest.mark.parametrize(
    ("content", "extra", "message"),
    [
        (
            "a,b\n1,2\n3,4\n5,7\n",
            ["--columns", "a,b", "--sigma", 1],
            "--method learned: the grid stack is for scalar data (p = 1), got p = 2 columns (a, b)",
        ),
        (
            "a,b,s\n1,2,1\n3,4,1\n5,7,2\n",
            ["--columns", "a,b", "--se", "s"],
            "got p = 2 columns (a, b)",
        ),
        ("x\n2\n2\n2\n", ["--sigma", 1], "every value of x is equal; --method learned needs"),
        ("x\n2\n", ["--sigma", 1], "1 row; --method learned needs at least two"),
        ("x\n1\n2\n1e4\n0.5\n", ["--sigma", 1], "grid_size: the grid's spacing"),
    ],
)
def test_deconvolve_learned_refuses_what_the_stack_cannot_fit(
    content, extra, message, tmp_path, run_cli, no_jax_work, listing
):
    path = tmp_path / "data.csv"
    path.write_text(content)
    out = tmp_path / "out"
    code, stdout, err = run_cli(["deconvolve", path, "--method", "learned", "--out", out, *extra])
    assert code == 2
    assert stdout == ""
    assert err.startswith("attnbayes: error: ") and err.count("\n") == 1, err
    assert message in err, err
    assert listing(out) is None
