"""``attnbayes filter`` on users' files, run in-process through ``attnbayes.app.cli.main``
(``attnbayes.app.filter`` and ``attnbayes.app.filter_fit``): the documented outputs, their
agreement with the library, learning the parameters first (--fit), and the refusal of malformed
input (exit status 2, a message naming line and column, no output)."""

import json
import os

import jax
import numpy as np
import pandas as pd
import pytest
import xarray as xr

from attnbayes.app.filter import SCENARIO_LABELS, filter_output_columns
from attnbayes.app.user_data import read_params, read_table
from attnbayes.inference.switching.filters import imm_filter
from attnbayes.inference.switching.particle import rbpf
from attnbayes.inference.switching.smoothers import kim_smoother
from attnbayes.models.switching import get_scenario

MISSING_STEPS = (4, 5, 17)  # the steps of track_csv (conftest) with no observation


def test_filter_imm_matches_the_library_and_its_params_json_round_trips(
    track_csv, tmp_path, run_cli
):
    path, y = track_csv
    argv = ["filter", path, "--scenario", "maneuvering-target", "--out", tmp_path]
    code, out, err = run_cli(argv)
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
    states, modes = SCENARIO_LABELS["maneuvering-target"]
    table = pd.read_csv(folder / "states.csv")
    assert list(table.columns) == filter_output_columns("imm", ["px", "py"], states, modes)
    np.testing.assert_array_equal(table["t"], np.arange(1, 41))
    assert table[["px", "py"]].isna().all(axis=1).to_numpy().nonzero()[0].tolist() == list(
        MISSING_STEPS
    )
    assert np.flatnonzero(np.isnan(y).all(axis=1)).tolist() == list(MISSING_STEPS)
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
    code, _, err = run_cli([*argv, "--name", "from-json"])
    assert code == 0, err
    again = pd.read_csv(tmp_path / "from-json" / "states.csv")
    pd.testing.assert_frame_equal(again, table)
    manifest = json.loads((tmp_path / "from-json" / "run.json").read_text())
    assert manifest["scenario"] is None and manifest["params_file"].endswith("params.json")


@pytest.mark.slow
def test_filter_rbpf_matches_the_library(track_csv, tmp_path, run_cli):
    path, y = track_csv
    argv = ["filter", path, "--scenario", "maneuvering-target", "--method", "rbpf"]
    code, _, err = run_cli([*argv, "--particles", 64, "--seed", 4, "--out", tmp_path])
    assert code == 0, err
    params = get_scenario("maneuvering-target")
    res = rbpf(jax.random.PRNGKey(4), params, y, 64)
    table = pd.read_csv(tmp_path / "track-filter-rbpf" / "states.csv")
    means = table[[f"filtered_mean_{s}" for s in ("px", "vx", "py", "vy")]].to_numpy()
    np.testing.assert_allclose(means, res.mean, rtol=1e-10, atol=1e-10)
    assert "smoothed_mean_px" in table.columns


@pytest.mark.slow
def test_filter_gibbs_writes_the_posterior_summaries(track_csv, tmp_path, run_cli):
    path, _ = track_csv
    argv = ["filter", path, "--scenario", "maneuvering-target", "--method", "gibbs"]
    code, _, err = run_cli(
        [*argv, "--draws", 200, "--warmup", 100, "--chains", 2, "--out", tmp_path]
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


# ----------------------------------------------------------------------------- bad input and --fit


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
    # which columns are data is never guessed: a row index is not an observation
    "r-rownames-and-one-column": (
        '"rownames","px"\n"1",0.5\n"2",1\n"3",2\n',
        None,
        [],
        'line 1: column "rownames" looks like a row index (its header is "rownames"), not data; '
        "that leaves 1 column(s) of numbers (px) where 2 are needed: the scenario",
    ),
    "index-among-too-many": (
        ",px,py\n0,0.5,1\n1,1,2\n2,2,3\n",
        None,
        [],
        "the file has 3 columns (column 1 (no name), px, py) where 2 are needed: the scenario "
        '"maneuvering-target" observes 2 values per step; column 1 (no name) looks like a row '
        "index (its header is empty); choose 2 of them with --columns, e.g. --columns px,py",
    ),
    "observation-overflows": (
        "px,py\n1,2\n3,-1e200\n",
        None,
        [],
        'line 3, column "py": -1e+200 is too large for the filter: |value| must stay below '
        "3.4e+153 = sqrt(finfo.max / (4 T p)) (float64, T = 2 steps, p = 2 observation column(s))",
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
    track_csv, scalar_csv, tmp_path, run_cli
):
    folder, y, u = scalar_csv
    argv = ["filter", folder / "series.csv", "--params", folder / "params.json"]
    code, _, err = run_cli([*argv, "--inputs", "u", "--out", tmp_path])
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
    code, _, err = run_cli(argv)
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
    scalar_csv, tmp_path, run_cli
):
    from attnbayes.inference.switching import fit_switching
    from attnbayes.models.markov_switching import switching_state_space

    folder, y, u = scalar_csv
    argv = ["filter", folder / "series.csv", "--params", folder / "params.json", "--inputs", "u"]
    argv += ["--fit", "mle", "--starts", 3, "--seed", 5, "--out", tmp_path]
    code, _, err = run_cli(argv)
    assert code == 0, err
    out = tmp_path / "series-filter-imm"
    assert {"fit.csv", "params.json", "states.csv"} <= {p.name for p in out.iterdir()}
    params, _ = read_params(folder / "params.json")
    spec = switching_state_space(params, y[:, None], inputs=u[:, None])
    _, key = jax.random.split(jax.random.PRNGKey(5))
    expected = fit_switching(key, spec, y[:, None], inputs=u[:, None], num_starts=3)
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
def test_filter_fit_em_and_nuts_write_their_tables(scalar_csv, tmp_path, run_cli, fit):
    folder = scalar_csv[0]
    argv = ["filter", folder / "series.csv", "--params", folder / "params.json", "--inputs", "u"]
    sizes = ["--draws", 150, "--warmup", 150] if fit == "nuts" else []
    code, _, err = run_cli([*argv, "--fit", fit, *sizes, "--out", tmp_path])
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
def test_filter_refuses_bad_fit_and_input_options(case, tmp_path, run_cli, no_jax_work):
    extra, doc, message = FIT_CASES[case]
    path = tmp_path / "series.csv"
    path.write_text("u,y\n0.1,1\n0.2,2\n0.3,\n")
    (tmp_path / "params.json").write_text(json.dumps(doc if doc is not None else _scalar_doc(1)))
    out = tmp_path / "out"
    argv = ["filter", path, "--params", tmp_path / "params.json", "--out", out, *extra]
    code, stdout, err = run_cli(argv)
    assert code == 2, err
    assert stdout == "" and err.startswith("attnbayes: error: ")
    assert message in err, err
    assert not out.exists()


SERIES_CASES = {
    # an input whose squares overflow is named, not the observations and parameters
    "input-overflows": (
        "u,y\n0.1,1\n1e308,2\n0.3,\n",
        ["--inputs", "u"],
        _scalar_doc(1),
        'series.csv line 3, column "u": 1e+308 is too large for the filter: |value| must stay '
        "below 3.9e+153 = sqrt(finfo.max / (4 T p)) (float64, T = 3 steps, p = 1 input column(s))",
    ),
    "input-overflows-through-its-weight": (
        "u,y\n0.1,1\n1e150,2\n0.3,\n",
        ["--inputs", "u"],
        _scalar_doc(1) | {"emission_input_weights": [[[1e10]], [[0.5]]]},
        'series.csv line 3, column "u": 1e+150 is too large for the filter: |value| x max(1, '
        "its largest input weight) must stay below 3.9e+153",
    ),
    "r-rownames-with-inputs": (
        '"rownames","u","y"\n"1",0.1,1\n"2",0.2,2\n"3",0.3,\n',
        ["--inputs", "u"],
        _scalar_doc(1),
        (
            "series.csv line 1: --inputs left 2 columns (rownames, y) where 1 is needed: ",
            'params.json has o = 1 (emission_matrices is (M, o, d)); column "rownames" looks like '
            'a row index (its header is "rownames"); choose 1 of them with --columns, e.g. '
            "--columns y",
        ),
    ),
    # a fit needs observations: refused before any work, naming the file
    "fit-without-observations": (
        "y\nNA\n\nNA\nNA\n",
        ["--fit", "mle"],
        _scalar_doc(),
        "series.csv: no observed value: every observation cell of its 3 rows is empty or NA; "
        "--fit mle needs at least 2 observed step(s) (its BIC and HQIC use log T and log log T)",
    ),
    "fit-em-one-observation": (
        "y\nNA\n1\nNA\n",
        ["--fit", "em"],
        _scalar_doc(),
        "series.csv: only 1 of its 3 rows has an observed value; --fit em needs at least 2",
    ),
    "fit-nuts-without-observations": (
        "y\nNA\nNA\n",
        ["--fit", "nuts"],
        _scalar_doc(),
        "series.csv: no observed value: every observation cell of its 2 rows is empty or NA; "
        "--fit nuts needs at least 1 observed step(s)",
    ),
}


@pytest.mark.parametrize("case", list(SERIES_CASES))
def test_filter_refuses_bad_series(case, tmp_path, run_cli, no_jax_work):
    content, extra, doc, message = SERIES_CASES[case]
    path = tmp_path / "series.csv"
    path.write_text(content)
    (tmp_path / "params.json").write_text(json.dumps(doc))
    out = tmp_path / "out"
    argv = ["filter", path, "--params", tmp_path / "params.json", "--out", out, *extra]
    code, stdout, err = run_cli(argv)
    assert code == 2, err
    assert stdout == "" and err.startswith(f"attnbayes: error: {tmp_path}{os.sep}")
    assert len(err.strip().splitlines()) == 1
    for part in message if isinstance(message, tuple) else (message,):
        assert part in err, err
    assert not out.exists()


def test_an_input_column_must_have_no_missing_value(tmp_path, run_cli, no_jax_work):
    path = tmp_path / "series.csv"
    path.write_text("u,y\n0.1,1\n,2\n")
    (tmp_path / "params.json").write_text(json.dumps(_scalar_doc(1)))
    argv = ["filter", path, "--params", tmp_path / "params.json", "--inputs", "u"]
    code, _, err = run_cli([*argv, "--out", tmp_path / "out"])
    assert code == 2
    assert 'line 3, column "u": missing value (empty cell); every input needs a number' in err


@pytest.mark.parametrize("case", list(FILTER_CASES))
def test_filter_refuses_malformed_files(case, tmp_path, run_cli, no_jax_work):
    content, params, extra, message = FILTER_CASES[case]
    path = tmp_path / "obs.csv"
    path.write_text(content)
    if params is None:
        model = ["--scenario", "maneuvering-target"]
    else:
        (tmp_path / "params.json").write_text(params)
        model = ["--params", tmp_path / "params.json"]
    out = tmp_path / "out"
    code, stdout, err = run_cli(["filter", path, *model, "--out", out, *extra])
    assert code == 2
    assert stdout == ""
    assert err.startswith("attnbayes: error: ")
    assert message in err, err
    assert not out.exists()


def test_filter_needs_exactly_one_model(track_csv, tmp_path, run_cli, no_jax_work, listing):
    path, _ = track_csv
    code, _, err = run_cli(["filter", path, "--out", tmp_path])
    assert code == 2 and "one of the arguments --scenario --params --template is required" in err
    code, _, err = run_cli(["filter", path, "--scenario", "nope", "--out", tmp_path])
    assert code == 2 and "invalid choice: 'nope'" in err
    argv = ["filter", path, "--scenario", "maneuvering-target", "--params", "p.json"]
    code, _, err = run_cli(argv)
    assert code == 2 and "not allowed with argument" in err
    code, _, err = run_cli(["filter", path, "--params", tmp_path / "none.json"])
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
    table = read_table(path, prefix="y", width=2)
    assert not table.header and table.columns == ("y1", "y2")
