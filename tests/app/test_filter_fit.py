"""``attnbayes filter --fit`` (``attnbayes.app.filter_fit``): what a fit says on the terminal and
in the page: how the regimes are labelled, a NUTS run with bad diagnostics, a point fit that did
not move or sits on a boundary; and --free values refused before any work. The fits are stubbed
with constructed results (a DataTree of draws, a ``SwitchingFitResult``): nothing is sampled or
optimised here."""

import json

import numpy as np
import pytest
import xarray as xr

from attnbayes.app.filter_fit import check_fit, fit_section, run_fit
from attnbayes.app.user_data import InputError
from attnbayes.inference.switching.learning.results import SwitchingFitResult
from attnbayes.models.markov_switching import build_params
from attnbayes.models.switching import SwitchingParams

NUTS_SIZES = {"num_warmup": 10, "num_samples": 1000, "num_chains": 2}
Y = np.random.default_rng(4).normal(size=(30, 1)).cumsum(axis=0)


def _level_doc(dynamics_covs=(0.5, 0.5)) -> dict:
    """Two modes of a local level model, the same in every fixed field unless told apart."""
    return {
        "initial_probs": [0.5, 0.5],
        "transition_matrix": [[0.9, 0.1], [0.1, 0.9]],
        "initial_means": [[0.0], [0.0]],
        "initial_covs": [[[4.0]], [[4.0]]],
        "dynamics_matrices": [[[1.0]], [[1.0]]],
        "dynamics_biases": [[0.0], [0.0]],
        "dynamics_covs": [[[dynamics_covs[0]]], [[dynamics_covs[1]]]],
        "emission_matrices": [[[1.0]], [[1.0]]],
        "emission_covs": [[[1.0]], [[1.0]]],
    }


def _params(doc) -> SwitchingParams:
    arrays = {k: np.asarray(v, float) for k, v in doc.items()}
    arrays |= {
        "emission_biases": np.zeros((2, 1)),
        "dynamics_input_weights": np.zeros((2, 1, 0)),
        "emission_input_weights": np.zeros((2, 1, 0)),
    }
    return SwitchingParams(**arrays)


def _run(monkeypatch, fit, stub, doc=None):
    """run_fit with the library's fit replaced by ``stub``: (the terminal lines, the page
    section)."""
    import attnbayes.inference.mcmc
    import attnbayes.inference.switching

    if fit == "nuts":
        monkeypatch.setattr(attnbayes.inference.mcmc, "run_nuts", stub)
    else:
        monkeypatch.setattr(attnbayes.inference.switching, "fit_switching", stub)
    spec, free = check_fit(_params(doc or _level_doc()), Y, None, fit, None, None, NUTS_SIZES)
    lines = []
    _, table, _, _, settings = run_fit(None, spec, free, fit, "imm", None, NUTS_SIZES, lines.append)
    return spec, lines, fit_section(fit, table, settings)


def test_nuts_fit_states_the_labels_and_warns_on_r_hat_and_ess(monkeypatch):
    """Exchangeable modes are labelled by increasing emission_cov_scale, said on the terminal
    and the page; chains that disagree on emission_cov_scale[0] (R-hat far above 1.01) give a
    warning naming it on both (before: exit 0, no warning, the filter on the mixed mean)."""
    rng = np.random.default_rng(0)
    chains, draws = NUTS_SIZES["num_chains"], NUTS_SIZES["num_samples"]
    p = rng.uniform(0.8, 0.95, (chains, draws, 2))
    trans = np.stack(
        [np.stack([p[..., 0], 1 - p[..., 0]], -1), np.stack([1 - p[..., 1], p[..., 1]], -1)], -2
    )
    scale = 1.0 + 0.1 * rng.normal(size=(chains, draws, 2))
    emission = np.sort(
        np.abs(scale) + np.array([[[0.0, 1.0]], [[3.0, 4.0]]]), axis=-1
    )  # chain 1 apart
    tree = xr.DataTree.from_dict(
        {
            "posterior": xr.Dataset(
                {
                    "transition_matrix": (("chain", "draw", "i", "j"), trans),
                    "dynamics_cov_scale": (("chain", "draw", "m"), np.abs(scale)),
                    "emission_cov_scale": (("chain", "draw", "m"), emission),
                }
            )
        }
    )
    _, lines, page = _run(monkeypatch, "nuts", lambda *args, **kwargs: tree)
    labels = "labelled by increasing emission_cov_scale"
    assert any(labels in line for line in lines) and labels in page
    warnings = [line for line in lines if line.startswith("warning: ")]
    assert len(warnings) == 1 and "--fit nuts did not converge" in warnings[0]
    assert "emission_cov_scale[0] (R-hat" in warnings[0]
    assert "dynamics_cov_scale" not in warnings[0]  # its chains agree
    assert "<strong>Warning:</strong> --fit nuts did not converge" in page


def _result(spec, fit, theta, trace, converged, on_boundary=None) -> SwitchingFitResult:
    theta = dict(spec.theta) | theta
    nan = {n: np.full(np.shape(v), np.nan) for n, v in theta.items()}
    flags = {n: np.zeros(np.shape(v), bool) for n, v in theta.items()} | (on_boundary or {})
    return SwitchingFitResult(
        build_params(spec.structure, theta), theta, np.asarray(trace), nan, flags,
        np.asarray(trace[-1:]), 5, 30, converged, fit, "imm", 0.0,
    )  # fmt: skip


def test_em_that_did_not_move_says_so(monkeypatch):
    """EM whose first step was undone returns the start, unconverged, after 0 iterations: a
    warning on the terminal and the page (before: only fit_converged 0 in metrics.csv)."""

    def stub(key, spec, *args, **kwargs):
        return _result(spec, "em", {}, [-50.0], False)

    _, lines, page = _run(monkeypatch, "em", stub)
    warnings = [line for line in lines if line.startswith("warning: ")]
    assert len(warnings) == 1
    assert "--fit em did not move from the start (0 iterations)" in warnings[0]
    assert "<strong>Warning:</strong> --fit em did not move from the start" in page
    assert "EM gives no standard errors" in page


def test_mle_names_a_boundary_estimate_and_what_a_blank_means(monkeypatch):
    def stub(key, spec, *args, **kwargs):
        theta = {"dynamics_cov_scale": np.array([7.5e-12, 0.8])}
        flags = {"dynamics_cov_scale": np.array([True, False])}
        return _result(spec, "mle", theta, [-60.0, -50.0], False, flags)

    _, lines, page = _run(monkeypatch, "mle", stub, _level_doc((0.5, 2.0)))
    warnings = [line for line in lines if line.startswith("warning: ")]
    assert "--fit mle did not converge (1 iterations)" in warnings[0]
    assert "on the boundary of the parameter space: dynamics_cov_scale[0] = 7.5e-12" in warnings[1]
    assert "dynamics_cov_scale[1]" not in warnings[1]
    assert "A blank standard error: the estimate is on the boundary" in page
    assert "labelled by their fixed parameters, which differ" in page


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--fit", "em", "--free", "dynamics_matrices"], "--free: EM cannot fit"),
        (["--fit", "mle", "--free", "dynamics_covs"], "--free: 'dynamics_covs' is singular"),
    ],
    ids=["em-mean-of-singular-q", "mle-singular-covariance"],
)
def test_free_values_that_cannot_be_fitted_are_refused_naming_free(
    track_csv, tmp_path, run_cli, listing, no_jax_work, options, message
):
    """The maneuvering target's Q0 is singular: EM cannot fit F, and the Cholesky
    parametrisation cannot start at a singular Q (before: exit 1, "the filter run failed")."""
    path, _ = track_csv
    argv = ["filter", path, "--scenario", "maneuvering-target", *options, "--out", tmp_path]
    code, _, err = run_cli(argv)
    assert code == 2, err
    assert err.startswith(f"attnbayes: error: {message}") and err.count("\n") == 1
    assert listing(tmp_path) == []


def test_nuts_on_exchangeable_modes_that_nothing_orders_is_refused(tmp_path, run_cli, no_jax_work):
    (tmp_path / "params.json").write_text(json.dumps(_level_doc()))
    np.savetxt(tmp_path / "y.csv", Y, header="y", comments="", delimiter=",")
    argv = ["filter", tmp_path / "y.csv", "--params", tmp_path / "params.json", "--fit", "nuts"]
    code, _, err = run_cli([*argv, "--free", "transition_matrix", "--out", tmp_path / "out"])
    assert code == 2, err
    assert "--free: with --fit nuts, the modes' fixed parameters are the same" in err
    assert not (tmp_path / "out").exists()
    with pytest.raises(InputError, match="^--free: with --fit nuts"):
        check_fit(_params(_level_doc()), Y, None, "nuts", ["transition_matrix"], None, NUTS_SIZES)
