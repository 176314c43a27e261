"""``attnbayes filter --template`` (``attnbayes.app.filter.template_params``): named univariate
models whose starting values come from the data, so a one-column series runs with no JSON.
A one-mode template is statsmodels' ``UnobservedComponents`` (local level, local linear trend)
at the same parameters and initial state (log-likelihood to 1e-8); the command on the Nile
writes the documented starting values, and its log-likelihood is a direct call of the
library's IMM filter on the parameters it wrote; bad input is refused before any work. The
--fit runs on the Nile are ``slow``."""

import json
import warnings

import numpy as np
import pandas as pd
import pytest
from statsmodels.datasets import nile

from attnbayes.app.filter import (
    TEMPLATE_STATES,
    TEMPLATE_STAY,
    template_mode_names,
    template_params,
)
from attnbayes.app.parser import FILTER_TEMPLATES
from attnbayes.app.user_data import InputError, Table
from attnbayes.inference.switching import imm_filter, kalman_filter
from attnbayes.models.switching import SwitchingParams, check_params

NILE = nile.load_pandas().data[["year", "volume"]]


def _table(values, path="nile.csv") -> Table:
    values = np.asarray(values, np.float64).reshape(-1, 1)
    lines = np.arange(2, values.shape[0] + 2)
    return Table(path, ("volume",), values, lines, True)


@pytest.fixture(scope="module")
def nile_csv(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "nile.csv"
    NILE.to_csv(path, index=False)
    return path, NILE["volume"].to_numpy(np.float64)


def test_the_templates_are_the_parsers():
    assert tuple(TEMPLATE_STATES) == FILTER_TEMPLATES


@pytest.mark.parametrize(
    ("name", "trend"), [("local-level", "llevel"), ("local-linear-trend", "lltrend")]
)
def test_a_one_mode_template_is_statsmodels_unobserved_components(name, trend):
    """M = 1: the Kalman filter's log-likelihood of the template equals statsmodels' at the
    same noise variances and the same known initial state."""
    import statsmodels.api as sm

    y = NILE["volume"].to_numpy(np.float64)
    params, labels = template_params(name, _table(y), num_modes=1)
    assert labels["state_names"] == TEMPLATE_STATES[name]
    ours = float(kalman_filter(params, y[:, None]).log_likelihood)
    model = sm.tsa.UnobservedComponents(y, trend)
    model.initialize_known(np.asarray(params.initial_means[0]), np.asarray(params.initial_covs[0]))
    model.ssm.loglikelihood_burn = 0
    q = np.diag(np.asarray(params.dynamics_covs[0]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = model.loglike(np.r_[float(params.emission_covs[0, 0, 0]), q])
    assert ours == pytest.approx(theirs, abs=1e-8)


def test_the_templates_start_from_the_data():
    """The documented starting values: s2 the variance of the first differences (missing steps
    skipped), r = s2 / 4, q = s2 / 20 (calm) and s2 (volatile), x_1 ~ N(first y, max(var y,
    s2))."""
    y = NILE["volume"].to_numpy(np.float64).copy()
    y[[0, 40]] = np.nan
    params, labels = template_params("local-level", _table(y))
    diffs = np.diff(y)
    s2 = np.var(diffs[~np.isnan(diffs)])
    np.testing.assert_allclose(np.ravel(params.dynamics_covs), [s2 / 20, s2])
    np.testing.assert_allclose(np.ravel(params.emission_covs), [s2 / 4, s2 / 4])
    np.testing.assert_allclose(np.ravel(params.initial_means), [y[1], y[1]])
    np.testing.assert_allclose(np.ravel(params.initial_covs), max(np.nanvar(y), s2))
    np.testing.assert_allclose(np.diag(params.transition_matrix), TEMPLATE_STAY)
    assert labels["mode_names"] == ("calm", "volatile") == template_mode_names(params)
    swapped = params._replace(dynamics_covs=params.dynamics_covs[::-1])
    assert template_mode_names(swapped) == ("volatile", "calm")
    trend, _ = template_params("local-linear-trend", _table(y))
    np.testing.assert_allclose(trend.initial_means[0], [y[1], np.mean(diffs[~np.isnan(diffs)])])
    check_params("params", trend)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ([1.0, np.nan, 2.0], "nile.csv: 2 observed value(s); the template 'local-level' needs"),
        ([3.0, 3.0, 3.0, 3.0], 'nile.csv: column "volume" is constant (3 at every observed step)'),
    ],
)
def test_a_template_refuses_a_series_it_cannot_start_from(values, message):
    with pytest.raises(InputError, match=None) as info:
        template_params("local-level", _table(values))
    assert str(info.value).startswith(message)


def test_filter_template_on_the_nile_needs_no_json(nile_csv, tmp_path, run_cli):
    """``filter nile.csv --columns volume --template local-level``: exit 0; params.json holds
    the template's starting values; the log-likelihood in metrics.csv is the library's IMM
    filter on those parameters; states.csv names the level and the calm / volatile modes."""
    path, y = nile_csv
    out = tmp_path / "out"
    code, stdout, err = run_cli(
        ["filter", path, "--columns", "volume", "--template", "local-level", "--out", out]
    )
    assert code == 0, err
    folder = out / "nile-filter-imm"
    assert stdout.strip() == str(folder / "index.html")
    document = json.loads((folder / "params.json").read_text())
    start, _ = template_params("local-level", _table(y))
    for field in SwitchingParams._fields[:9]:
        np.testing.assert_allclose(document[field], np.asarray(getattr(start, field)))
    assert document["mode_names"] == ["calm", "volatile"]
    assert document["state_names"] == ["level"]
    metrics = pd.read_csv(folder / "metrics.csv").set_index("metric")["value"]
    direct = float(imm_filter(start, y[:, None]).log_likelihood)
    assert metrics["log_likelihood"] == pytest.approx(direct, rel=1e-12)
    states = pd.read_csv(folder / "states.csv")
    for column in ("filtered_mean_level", "smoothed_prob_calm", "smoothed_prob_volatile"):
        assert column in states
    manifest = json.loads((folder / "run.json").read_text())
    assert manifest["template"] == "local-level"
    assert (
        "template local-level (starting values from the data)"
        in (folder / "index.html").read_text()
    )
    # the page says which mode index is which (review N10)
    assert "mode 0 = calm, mode 1 = volatile" in (folder / "index.html").read_text()


def test_the_fit_section_says_which_mode_an_index_is():
    """--fit's table names parameters by mode index (p[0->1], dynamics_cov_scale[0]): the
    section says mode 0 is calm and mode 1 volatile (review N10)."""
    from attnbayes.app.filter_fit import fit_section

    table = pd.DataFrame(
        {"parameter": ["dynamics_cov_scale[0]"], "initial": [1.0], "estimate": [0.2]}
    )
    settings = {
        "fit_likelihood": "imm",
        "free": ["dynamics_cov_scale"],
        "mode_names": ["calm", "volatile"],
    }
    text = fit_section("mle", table, settings)
    assert "(p[i-&gt;j], dynamics_cov_scale[j], ...) is the mode: mode 0 = calm, mode 1 = " in text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--template", "local-level"],
            "the file has 2 columns (year, volume) where 1 is needed: the template "
            '"local-level" observes one value per step; choose 1 of them with --columns',
        ),
        (
            ["--template", "local-level", "--params", "p.json", "--columns", "volume"],
            "argument --params: not allowed with argument --template",
        ),
        (
            ["--template", "local-cubic", "--columns", "volume"],
            "argument --template: invalid choice: 'local-cubic'",
        ),
    ],
)
def test_filter_template_refuses_bad_usage(argv, message, nile_csv, tmp_path, run_cli, no_jax_work):
    path, _ = nile_csv
    out = tmp_path / "out"
    code, stdout, err = run_cli(["filter", path, *argv, "--out", out])
    assert code == 2 and not stdout
    assert message in err.strip().splitlines()[-1]
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.parametrize("fit", ["mle", "em", "nuts"])
def test_filter_template_fits_the_nile(fit, nile_csv, tmp_path, run_cli):
    """--fit mle, em and nuts on the Nile with the local-level template: exit 0, the fitted
    parameters in params.json, the filter's log-likelihood there is a direct IMM call on them;
    mle and em raise the start's log-likelihood; the mode names follow the fitted noise."""
    path, y = nile_csv
    out = tmp_path / "out"
    sizes = ["--draws", "300", "--warmup", "300"] if fit == "nuts" else []
    argv = ["filter", path, "--columns", "volume", "--template", "local-level", "--fit", fit]
    code, _, err = run_cli([*argv, *sizes, "--out", out])
    assert code == 0, err
    folder = out / "nile-filter-imm"
    document = json.loads((folder / "params.json").read_text())
    fields = {k: np.asarray(document[k], float) for k in SwitchingParams._fields[:9]}
    fitted = SwitchingParams(**fields)
    metrics = pd.read_csv(folder / "metrics.csv").set_index("metric")["value"]
    direct = float(imm_filter(fitted, y[:, None]).log_likelihood)
    assert metrics["log_likelihood"] == pytest.approx(direct, rel=1e-10)
    start, _ = template_params("local-level", _table(y))
    if fit != "nuts":
        assert metrics["fit_log_likelihood"] > float(imm_filter(start, y[:, None]).log_likelihood)
    assert tuple(document["mode_names"]) == template_mode_names(fitted)
