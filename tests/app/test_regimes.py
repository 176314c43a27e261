"""``attnbayes regimes`` on users' files, run in-process through ``attnbayes.app.cli.main``
(``attnbayes.app.regimes``): one maximum-likelihood run of a two-regime Markov-switching
regression is held against statsmodels' ``MarkovRegression`` (its log-likelihood at our
estimates and its own optimum, estimates and standard errors, smoothed and forecast regime
probabilities), its durations against 1 / (1 - p_jj) of its own table; the refusal of bad input
(exit status 2, one line naming the file, line and column or the option, nothing written, no
JAX work). The MS-AR, TVTP, MS-VAR and NUTS runs are ``slow``."""

import contextlib
import html
import io
import json
import math
import warnings
from types import SimpleNamespace
from typing import NamedTuple

import numpy as np
import pandas as pd
import pytest

from attnbayes.app.regimes import RegimesData
from attnbayes.app.regimes_page import column_names, parameter_labels, summary_text
from attnbayes.app.user_data import Table
from attnbayes.models.markov_switching import markov_switching_regression

T = 80
FUTURE = 4


def _series(seed: int = 1):
    """A two-regime regression y_t = mu_s + beta_s x_t + e_t (mu = -1, 2; beta = 0.5), its
    regimes persistent (stay 0.9), T rows, then FUTURE rows with x but no y."""
    rng = np.random.default_rng(seed)
    s = np.zeros(T, int)
    for t in range(1, T):
        s[t] = s[t - 1] if rng.random() < 0.9 else 1 - s[t - 1]
    x = rng.normal(size=T + FUTURE)
    y = np.where(s == 0, -1.0, 2.0) + 0.5 * x[:T] + rng.normal(0, 0.5, T)
    return y, x, rng.normal(size=T + FUTURE)


@pytest.fixture(scope="module")
def ms_csv(tmp_path_factory):
    """The series with a leading row whose y is empty (left out) and the future rows."""
    y, x, z = _series()
    frame = pd.DataFrame(
        {
            "date": np.arange(T + FUTURE + 1),
            "y": np.r_[np.nan, y, [np.nan] * FUTURE],
            "x": np.r_[0.3, x],
            "z": np.r_[0.1, z],
        }
    )
    path = tmp_path_factory.mktemp("data") / "ms.csv"
    frame.to_csv(path, index=False)
    return path, y, x


@pytest.fixture(scope="module")
def fitted(ms_csv, tmp_path_factory):
    """One run: ``regimes ms.csv --y y --exog x --regimes 2 --horizon 3 --time date`` (mle)."""
    from attnbayes.app.cli import main

    path, _, _ = ms_csv
    out = tmp_path_factory.mktemp("out")
    argv = ["regimes", path, "--y", "y", "--exog", "x", "--regimes", "2", "--horizon", "3"]
    argv += ["--time", "date"]
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main([str(a) for a in [*argv, "--out", out]])
    folder = out / "ms-regimes-mle"
    return code, stdout.getvalue(), stderr.getvalue(), folder


def _statsmodels(y, x):
    import statsmodels.api as sm

    return sm.tsa.MarkovRegression(y, 2, exog=x[:T, None])


def _our_params(folder) -> tuple[pd.Series, np.ndarray]:
    """(our estimates by name, the same in statsmodels' order: p[0->0], p[1->0], const[0],
    const[1], x1[0], x1[1], sigma2)."""
    table = pd.read_csv(folder / "parameters.csv").set_index("parameter")
    est = table["estimate"]
    names = ["p[0->0]", "p[1->0]", "const[0]", "const[1]", "x[0]", "x[1]", "sigma2"]
    return table, est[names].to_numpy()


def test_regimes_writes_the_table_statsmodels_finds(fitted, ms_csv):
    """The log-likelihood is statsmodels' at our estimates (to 1e-6) and no lower than its own
    optimum (searched from 20 random starts); the estimates match its optimum (1e-3) and the
    standard errors its numerical-Hessian ones (5%); z and p from them."""
    code, stdout, _, folder = fitted
    assert code == 0 and stdout.strip() == str(folder / "index.html")
    _, y, x = ms_csv
    table, ours = _our_params(folder)
    metrics = pd.read_csv(folder / "metrics.csv").set_index("metric")["value"]
    model = _statsmodels(y, x)
    assert model.loglike(ours) == pytest.approx(metrics["log_likelihood"], abs=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = model.fit(search_reps=20)
    assert res.llf <= metrics["log_likelihood"] + 1e-4
    # statsmodels labels its regimes as it finds them: put its low-intercept regime first
    p = np.asarray(res.params)
    if p[2] > p[3]:
        p = np.array([1 - p[1], 1 - p[0], p[3], p[2], p[5], p[4], p[6]])
        bse = np.asarray(res.bse)[[1, 0, 3, 2, 5, 4, 6]]
    else:
        bse = np.asarray(res.bse)
    np.testing.assert_allclose(ours, p, rtol=1e-3, atol=1e-4)
    names = ["p[0->0]", "p[1->0]", "const[0]", "const[1]", "x[0]", "x[1]", "sigma2"]
    np.testing.assert_allclose(table.loc[names, "stderr"], bse, rtol=0.05)
    z = table["estimate"] / table["stderr"]
    np.testing.assert_allclose(table["z"], z)
    expected_p = [math.erfc(abs(v) / math.sqrt(2)) for v in z]
    np.testing.assert_allclose(table["p_value"], expected_p, rtol=1e-12, atol=1e-300)
    assert metrics["num_observations"] == T and metrics["num_parameters"] == 7
    k, n = 7, T
    assert metrics["aic"] == pytest.approx(-2 * metrics["log_likelihood"] + 2 * k)
    assert metrics["bic"] == pytest.approx(-2 * metrics["log_likelihood"] + k * math.log(n))
    assert metrics["converged"] == 1.0 and metrics["on_boundary"] == 0.0


def test_regimes_probabilities_durations_and_forecast_are_statsmodels(fitted, ms_csv):
    """regimes.csv holds statsmodels' smoothed probabilities at our estimates (1e-6), on the
    file's lines; durations.csv is 1 / (1 - p_jj); the forecast's regime probabilities are the
    last filtered ones times P (exact), its mean at h = 1 the mixture of the regime means at
    the first future x (Monte Carlo, 4000 paths), on the file's first rows after the y."""
    _, _, _, folder = fitted
    _, y, x = ms_csv
    table, ours = _our_params(folder)
    model = _statsmodels(y, x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        smoothed = model.smooth(ours)
    regimes = pd.read_csv(folder / "regimes.csv")
    assert list(regimes.columns) == [
        "t",
        "line",
        "time",
        "y",
        "smoothed_prob_regime0",
        "smoothed_prob_regime1",
    ]
    assert regimes["line"].tolist() == list(range(3, T + 3))  # the first data row is left out
    assert regimes["time"].tolist() == list(range(1, T + 1))  # --time date
    np.testing.assert_allclose(regimes["y"], y)
    probs = regimes[["smoothed_prob_regime0", "smoothed_prob_regime1"]].to_numpy()
    np.testing.assert_allclose(probs, smoothed.smoothed_marginal_probabilities, atol=1e-6)
    est = table["estimate"]
    durations = pd.read_csv(folder / "durations.csv")
    np.testing.assert_allclose(
        durations["expected_duration"], [1 / (1 - est["p[0->0]"]), 1 / (1 - est["p[1->1]"])]
    )
    forecast = pd.read_csv(folder / "forecast.csv")
    assert forecast["line"].tolist() == [T + 3, T + 4, T + 5]
    assert forecast["time"].tolist() == [T + 1, T + 2, T + 3]  # the dates of those rows
    trans = np.array([[est["p[0->0]"], est["p[0->1]"]], [est["p[1->0]"], est["p[1->1]"]]])
    ahead = smoothed.filtered_marginal_probabilities[-1] @ trans
    np.testing.assert_allclose(forecast.loc[0, ["prob_regime0", "prob_regime1"]], ahead, atol=1e-8)
    means = (
        np.array([est["const[0]"], est["const[1]"]]) + np.array([est["x[0]"], est["x[1]"]]) * x[T]
    )
    assert forecast.loc[0, "mean"] == pytest.approx(ahead @ means, abs=0.05)
    # the Monte Carlo standard error of the mean (review N3) covers the exact mixture mean
    assert 0 < forecast.loc[0, "mean_mc_se"] < 0.05
    assert abs(forecast.loc[0, "mean"] - ahead @ means) < 4 * forecast.loc[0, "mean_mc_se"]
    assert (forecast["lower_90"] < forecast["lower_50"]).all()
    assert (forecast["lower_50"] < forecast["mean"]).all()
    assert (forecast["mean"] < forecast["upper_50"]).all()
    assert (forecast["upper_50"] < forecast["upper_90"]).all()


def test_regimes_says_what_it_found_on_the_terminal_and_the_page(fitted):
    """The summary (stderr) and the page state the labels, the table, the durations, the
    local optima and the row left out; run.json records them."""
    _, _, err, folder = fitted
    for text in (
        "Markov-switching regression, 2 regimes",
        "the regimes are labelled by increasing intercept (regime 0 the lowest).",
        "P>|z|",
        "const[0]",
        "x[1]",
        "sigma2",
        "expected durations (1 / (1 - p_jj)):",
        "local optima (",
        "rows left out",
        "converged                    yes",
    ):
        assert text in err, text
    est = pd.read_csv(folder / "parameters.csv").set_index("parameter")["estimate"]
    names = [f"regime 0 (const {est['const[0]']:.4g})", f"regime 1 (const {est['const[1]']:.4g})"]
    # what switches (review B3), the regimes by their labelling parameter (N2), the rows
    # after the last y that no forecast reads (N8: 4 future rows, --horizon 3 reads 3), the
    # forecast's Monte Carlo size (N3), --time (N1)
    for text in (
        "switching                    const, x\n",
        "not switching                sigma2\n",
        f"regimes                      {names[0]}; {names[1]}\n",
        f"rows left out                1 before the first y (line 2); 1 after the last y (line "
        f"{T + 6}; beyond what --horizon 3 reads)",
        "the mean of 4000 simulated paths (Monte Carlo standard error up to",
        f"time                         column date (numbers), 1 to {T}",
    ):
        assert text in err, text
    page = (folder / "index.html").read_text()
    for text in (
        "Smoothed regime probabilities",
        "Local optima",
        "Expected durations",
        "Forecast",
        # B3: the noise variance does not switch here, the intercept and x's coefficient do
        "y<sub>t</sub> = &mu;<sub>s<sub>t</sub></sub> + x<sub>t</sub>' &beta;<sub>s<sub>t</sub>"
        "</sub> + e<sub>t</sub>, e<sub>t</sub> ~ N(0, &sigma;<sup>2</sup>)",
        # N4: the Fit table at full precision, booleans as such
        "<th>converged</th><td>True</td>",
        "<th>on_boundary</th><td>False</td>",
        "over 4000 paths: the standard error of the mean is in column\nmean_mc_se",
        f"At the estimate: {names[0]}; {names[1]}.",
        "p[i-&gt;j] = P(s_t = j | s_(t-1) = i); statsmodels lists only p[i-&gt;0]",
    ):
        assert text in page, text
    metrics = pd.read_csv(folder / "metrics.csv").set_index("metric")["value"]
    assert f"<th>log_likelihood</th><td>{float(metrics['log_likelihood'])!r}</td>" in page
    manifest = json.loads((folder / "run.json").read_text())
    assert manifest["rows_after_unused"] == [T + 6] and manifest["time"] == "date"
    assert manifest["switching"] == ["const", "x"] and manifest["not_switching"] == ["sigma2"]
    assert manifest["regime_names"] == names and manifest["forecast_paths"] == 4000
    assert manifest["attnbayes"] == "regimes" and manifest["rows_left_out"] == [2]
    assert manifest["warnings"] == []
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [
            "durations.csv",
            "forecast.csv",
            "index.html",
            "local_optima.csv",
            "metrics.csv",
            "parameters.csv",
            "regimes.csv",
            "regimes.png",
            "run.json",
        ]
    )
    optima = pd.read_csv(folder / "local_optima.csv")
    assert optima["starts"].sum() == manifest["starts"]


def test_the_labels_name_the_columns():
    """statsmodels' names with the regressors and the TVTP covariates by column; the library's
    sentences too."""
    y, x, z = _series()
    spec = markov_switching_regression(
        y, np.column_stack([x[:T], z[:T]]), exog_tvtp=np.column_stack([np.ones(T), z[:T]])
    )
    labels = parameter_labels(spec, ("income", "rate"), ("spread",))
    assert labels["coefficients"] == ["income[0]", "rate[0]", "income[1]", "rate[1]"]
    assert labels["transition_coefficients"] == [
        "p[0->0].const",
        "p[0->0].spread",
        "p[1->0].const",
        "p[1->0].spread",
    ]
    assert column_names("by increasing coefficient x2", spec, ("a", "b")) == (
        "by increasing coefficient b"
    )
    from attnbayes.models.markov_switching import markov_switching_var

    var = markov_switching_var(np.column_stack([y, x[:T]]), 1)
    labels = parameter_labels(var, (), (), ("gdp", "inf"))
    assert labels["intercepts"] == ["const.gdp[0]", "const.inf[0]", "const.gdp[1]", "const.inf[1]"]
    assert labels["ar_coefficients"][:2] == ["gdp.L1.gdp[0]", "gdp.L1.inf[0]"]
    assert labels["covariances"][1] == "sigma[gdp,inf][0]"


def test_the_summary_explains_blank_standard_errors():
    table = pd.DataFrame(
        {
            "parameter": ["p[0->0]", "sigma2"],
            "estimate": [1.0, 0.5],
            "stderr": [np.nan, 0.1],
            "z": [np.nan, 5.0],
            "p_value": [np.nan, 5.7e-7],
            "lower_95": [np.nan, 0.3],
            "upper_95": [np.nan, 0.7],
            "on_boundary": [True, False],
            "note": ["on the boundary of its support", ""],
        }
    )
    text = summary_text("model", [], table, None, None, ["w"])
    assert "p[0->0]" in text and "(boundary)" in text
    assert "no std err for p[0->0]: on the boundary of its support" in text
    assert "warning: w" in text


def test_regimes_nuts_warns_on_r_hat_on_the_terminal_and_the_page(ms_csv, tmp_path, monkeypatch):
    """--method nuts whose chains disagree on const[0] (R-hat far above 1.01): a warning naming
    it on the terminal, in the page and in run.json (NUTS is stubbed with constructed draws)."""
    import xarray as xr

    import attnbayes.inference.mcmc
    from attnbayes.app.cli import main

    rng = np.random.default_rng(0)
    chains, draws = 2, 200
    stay = rng.uniform(0.85, 0.95, (chains, draws, 2))
    trans = np.stack(
        [
            np.stack([stay[..., 0], 1 - stay[..., 0]], -1),
            np.stack([1 - stay[..., 1], stay[..., 1]], -1),
        ],
        -2,
    )
    const = np.stack(
        [rng.normal(-1.0, 0.05, (chains, draws)), rng.normal(1.8, 0.1, (chains, draws))], -1
    )
    const[1, :, 0] -= 0.5  # chain 1 elsewhere
    posterior = xr.Dataset(
        {
            "transition_matrix": (("chain", "draw", "i", "j"), trans),
            "intercepts": (("chain", "draw", "m"), const),
            "coefficients": (
                ("chain", "draw", "m", "k"),
                rng.normal(0.5, 0.05, (chains, draws, 2, 1)),
            ),
            "variances": (("chain", "draw"), rng.uniform(0.2, 0.25, (chains, draws))),
        }
    )
    stats = xr.Dataset({"diverging": (("chain", "draw"), np.zeros((chains, draws), bool))})
    tree = xr.DataTree.from_dict({"posterior": posterior, "sample_stats": stats})
    monkeypatch.setattr(attnbayes.inference.mcmc, "run_nuts", lambda *a, **k: tree)
    path, _, _ = ms_csv
    out = tmp_path / "out"
    argv = ["regimes", path, "--y", "y", "--exog", "x", "--regimes", "2", "--method", "nuts"]
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main([str(a) for a in [*argv, "--draws", "200", "--out", out]])
    assert code == 0, stderr.getvalue()
    folder = out / "ms-regimes-nuts"
    warning = "--method nuts did not converge: R-hat above 1.01"
    assert warning in stderr.getvalue() and "const[0] (R-hat" in stderr.getvalue()
    assert warning in (folder / "index.html").read_text()
    assert json.loads((folder / "run.json").read_text())["warnings"][0].startswith(warning)
    table = pd.read_csv(folder / "parameters.csv").set_index("parameter")
    assert table.loc["const[0]", "r_hat"] > 1.5
    np.testing.assert_allclose(table.loc["const[1]", "estimate"], const[..., 1].mean())


def test_regimes_says_a_fit_did_not_converge_or_sits_on_a_boundary(
    fitted, ms_csv, tmp_path, monkeypatch
):
    """A maximum-likelihood fit (stubbed: the real estimate, reported unconverged, with p[0->0]
    on the boundary and its best optimum reached by one start of 8) is said so on the terminal,
    in the page, in run.json and in parameters.csv (on_boundary, the note, no stderr)."""
    import attnbayes.inference.switching
    from attnbayes.app.cli import main
    from attnbayes.inference.switching.learning import SwitchingFitResult, local_optima

    theta = _theta_of(fitted[3])
    stderr = {k: np.full(np.shape(v), 0.1) for k, v in theta.items()}
    edge = {k: np.zeros(np.shape(v), bool) for k, v in theta.items()}
    stderr["transition_matrix"][0, 0] = np.nan
    edge["transition_matrix"][0, 0] = True
    starts = np.array([-76.9, -80.0, -80.0, -80.0, -81.0, -81.0, -81.0, -81.0])

    def stub(key, spec, *args, **kwargs):
        return SwitchingFitResult(
            params=None,
            theta=theta,
            log_likelihood=np.array([-90.0, -76.9]),
            stderr=stderr,
            on_boundary=edge,
            start_log_likelihoods=starts,
            num_parameters=7,
            num_observations=T,
            converged=False,
            method="mle",
            likelihood="exact",
            seconds=0.0,
            local_optima=local_optima(starts, np.zeros(8, bool)),
        )

    monkeypatch.setattr(attnbayes.inference.switching, "fit_switching", stub)
    path, _, _ = ms_csv
    out = tmp_path / "out"
    argv = ["regimes", path, "--y", "y", "--exog", "x", "--regimes", "2", "--out", out]
    stdout, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    assert code == 0, err.getvalue()
    run = out / "ms-regimes-mle"
    said = [
        "--method mle did not converge (1 iterations)",
        "was reached by one of 8 starts only",
        "estimates on the boundary of the parameter space (transition_matrix",
    ]
    page = (run / "index.html").read_text()
    warnings_ = json.loads((run / "run.json").read_text())["warnings"]
    for text in said:
        assert text in err.getvalue() and text in page, text
        assert any(text in w for w in warnings_), text
    assert "converged                    NO" in err.getvalue()
    assert "p[0->0]" in err.getvalue() and "(boundary)" in err.getvalue()
    table = pd.read_csv(run / "parameters.csv").set_index("parameter")
    assert table.loc["p[0->0]", "on_boundary"] and np.isnan(table.loc["p[0->0]", "stderr"])
    assert table.loc["p[0->0]", "note"].startswith("on the boundary of its support")
    metrics = pd.read_csv(run / "metrics.csv").set_index("metric")["value"]
    assert metrics["converged"] == 0.0 and metrics["on_boundary"] == 1.0
    optima = pd.read_csv(run / "local_optima.csv")
    assert optima["starts"].tolist() == [1, 3, 4]


# ----------------------------------------------------------------------------- what the page says


def _theta_of(folder) -> dict:
    """The estimate of the ``fitted`` run as theta."""
    est = pd.read_csv(folder / "parameters.csv").set_index("parameter")["estimate"]
    return {
        "transition_matrix": np.array(
            [[est["p[0->0]"], est["p[0->1]"]], [est["p[1->0]"], est["p[1->1]"]]]
        ),
        "intercepts": np.array([est["const[0]"], est["const[1]"]]),
        "coefficients": np.array([[est["x[0]"]], [est["x[1]"]]]),
        "variances": np.asarray(est["sigma2"]),
    }


class _Optima(NamedTuple):
    """``LocalOptima`` with the estimate of each optimum (``thetas``)."""

    log_likelihoods: np.ndarray
    num_starts: np.ndarray
    num_converged: np.ndarray
    tolerance: float
    thetas: tuple


def test_near_optima_and_the_forecasts_monte_carlo_error_are_said(
    fitted, ms_csv, tmp_path, monkeypatch
):
    """A fit (stubbed) whose runner-up optimum lies 0.5 nats below the best with const[1]
    0.8 higher (8 standard errors of 0.1) is said on the terminal, in the page and in run.json,
    naming its log-likelihood and const[1] first (review B4); the forecast's mean_mc_se is the
    sd of the paths / sqrt(paths) (forecast_switching stubbed with known paths, N3)."""
    import attnbayes.inference.switching
    import attnbayes.inference.switching.learning as learning
    from attnbayes.app.cli import main
    from attnbayes.inference.switching.learning import SwitchingFitResult, SwitchingForecast

    theta = _theta_of(fitted[3])
    runner = {k: np.array(v, float) for k, v in theta.items()}
    runner["intercepts"][1] += 0.8
    runner["variances"] = runner["variances"] * 1.01
    stderr = {k: np.full(np.shape(v), 0.1) for k, v in theta.items()}
    optima = _Optima(
        np.array([-76.9, -77.4, -90.0]),
        np.array([5, 2, 1]),
        np.array([5, 2, 1]),
        1e-4,
        (theta, runner, runner),
    )

    def stub(key, spec, *args, **kwargs):
        return SwitchingFitResult(
            params=None,
            theta=theta,
            log_likelihood=np.array([-90.0, -76.9]),
            stderr=stderr,
            on_boundary={k: np.zeros(np.shape(v), bool) for k, v in theta.items()},
            start_log_likelihoods=np.array([-76.9] * 5 + [-77.4] * 2 + [-90.0]),
            num_parameters=7,
            num_observations=T,
            converged=True,
            method="mle",
            likelihood="exact",
            seconds=0.0,
            local_optima=optima,
        )

    draws = np.random.default_rng(2).normal(size=(500, 3, 1)) * np.array([1.0, 2.0, 3.0])[:, None]

    def forecast(key, spec, theta, horizon, **kwargs):
        return SwitchingForecast(
            mean=draws.mean(0),
            levels=np.array([0.5, 0.9]),
            lower=np.stack([np.quantile(draws, q, axis=0) for q in (0.25, 0.05)]),
            upper=np.stack([np.quantile(draws, q, axis=0) for q in (0.75, 0.95)]),
            regime_probs=np.full((horizon, 2), 0.5),
            draws=draws,
        )

    monkeypatch.setattr(attnbayes.inference.switching, "fit_switching", stub)
    monkeypatch.setattr(learning, "forecast_switching", forecast)
    path, _, _ = ms_csv
    out = tmp_path / "out"
    argv = ["regimes", path, "--y", "y", "--exog", "x", "--regimes", "2", "--horizon", "3"]
    stdout, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(err):
        code = main([str(a) for a in [*argv, "--out", out]])
    assert code == 0, err.getvalue()
    run = out / "ms-regimes-mle"
    said = (
        "1 other local optimum lies within 2 log-likelihood units of the best (-76.9000, 5 of "
        "8 starts): -77.4000 (2 of 8 starts, 0.5000 lower); the first differs most in const[1] "
        f"({theta['intercepts'][1]:.4g} against {runner['intercepts'][1]:.4g}, 8 standard "
        "errors), "
    )
    page = (run / "index.html").read_text()
    assert said in err.getvalue() and html.escape(said) in page
    assert any(w.startswith(said) for w in json.loads((run / "run.json").read_text())["warnings"])
    frame = pd.read_csv(run / "forecast.csv")
    np.testing.assert_allclose(frame["mean_mc_se"], draws[..., 0].std(0, ddof=1) / math.sqrt(500))
    assert "over 500 paths" in page and "the mean of 500 simulated paths" in err.getvalue()


def test_no_near_optimum_no_warning_and_without_estimates_the_likelihoods_only():
    """``optima_warnings``: optima 2.5 nats apart are not said; 1.5 apart without the
    optima's estimates (the library's ``LocalOptima``) name the log-likelihoods only."""
    from attnbayes.app.regimes_page import optima_warnings
    from attnbayes.inference.switching.learning import local_optima

    result = SimpleNamespace(local_optima=local_optima(np.array([-10.0, -12.5, -12.5])))
    assert optima_warnings(result, None, {}) == []
    result = SimpleNamespace(local_optima=local_optima(np.array([-10.0, -11.5])))
    (text,) = optima_warnings(result, None, {})
    assert text.startswith(
        "1 other local optimum lies within 2 log-likelihood units of the best (-10.0000, 1 of "
        "2 starts): -11.5000 (1 of 2 starts, 1.5000 lower): the data barely prefer"
    )


def test_the_equation_and_the_switching_rows_follow_the_flags():
    """The model on the page carries s_t exactly on what switches, and the rows say which
    parameters switch (review B3): a no-intercept regression with one variance, an MS-AR(2)
    with switching variance (and with switching AR terms), a default MS-VAR (A and Sigma
    common), and statsmodels' different MS-AR(2) variance (N5)."""
    from attnbayes.app.regimes_page import (
        model_equation,
        statsmodels_differs,
        switching_parameters,
    )
    from attnbayes.models.markov_switching import markov_switching_ar, markov_switching_var

    y, x, z = _series()
    s_t = "<sub>s<sub>t</sub></sub>"
    two = np.column_stack([x[:T], z[:T]])
    spec = markov_switching_regression(y, two, trend="n", switching_variance=False)
    labels = parameter_labels(spec, ("x", "z"), ())
    assert model_equation(spec) == (
        f"y<sub>t</sub> = x<sub>t</sub>' &beta;{s_t} + e<sub>t</sub>, e<sub>t</sub> ~ "
        "N(0, &sigma;<sup>2</sup>)"
    )
    assert switching_parameters(spec, labels) == (["x", "z"], ["sigma2"])
    ar = markov_switching_ar(y, 2, switching_variance=True)
    assert "&phi;<sub>k</sub> (y" in model_equation(ar)
    assert f"e<sub>t</sub> ~ N(0, &sigma;<sup>2</sup>{s_t})" in model_equation(ar)
    assert switching_parameters(ar, parameter_labels(ar, (), ())) == (
        ["const", "sigma2"],
        ["ar.L1", "ar.L2"],
    )
    assert "s_(t-1) (it broadcasts sigma2" in statsmodels_differs(ar)
    assert statsmodels_differs(markov_switching_ar(y, 1, switching_variance=True)) is None
    both = markov_switching_ar(y, 2, switching_ar=True)
    assert "&phi;<sub>k,s<sub>t</sub></sub> (y" in model_equation(both)
    pair = np.column_stack([y, x[:T]])
    var = markov_switching_var(pair, 1, switching_ar=False, switching_covariance=False)
    equation = model_equation(var, ("gdp", "inf"))
    assert f"&nu;{s_t} + " in equation and "A<sub>l</sub> y" in equation
    assert "N(0, &Sigma;)" in equation
    assert switching_parameters(var, parameter_labels(var, (), (), ("gdp", "inf"))) == (
        ["const"],
        ["A", "Sigma"],
    )


def test_the_regimes_are_named_and_a_barely_different_label_is_said():
    """Each regime is named by its labelling parameter at the estimate (review N2); labels
    resting on intercepts 2.88 and 3.10 with standard errors 0.5 and 0.6 (0.22 apart, 2 x
    0.781 allowed) are said, naming sigma2 (17.3 and 3.5, 1.5 and 0.5: 8.73 standard errors);
    with standard errors 0.05 they are not."""
    from attnbayes.app.regimes_page import label_warnings, regime_names

    y, _, _ = _series()
    spec = markov_switching_regression(y, switching_variance=True)
    labels = parameter_labels(spec, (), ())
    theta = dict(spec.theta) | {"intercepts": np.array([2.88, 3.1])}
    assert regime_names(spec, labels, theta) == ["regime 0 (const 2.88)", "regime 1 (const 3.1)"]
    table = pd.DataFrame(
        {
            "parameter": ["p[0->0]", "const[0]", "const[1]", "sigma2[0]", "sigma2[1]"],
            "estimate": [0.9, 2.88, 3.1, 17.3, 3.5],
            "stderr": [0.01, 0.5, 0.6, 1.5, 0.5],
        }
    )
    (text,) = label_warnings(spec, labels, table)
    assert text == (
        "the regime labels rest on const, which barely differs between regimes 0 and 1: 2.88 "
        "and 3.1, 0.22 apart, within 2 standard errors of the difference (0.781; the two "
        "estimates' covariance ignored); they differ more in sigma2 (17.3 and 3.5, 8.73 "
        "standard errors apart): read regime 0 as 'lower const' with caution"
    )
    table["stderr"] = 0.05
    assert label_warnings(spec, labels, table) == []


def _time_data(time):
    """RegimesData of 5 rows of y with ``time``."""
    values = np.array([[1.0], [3.0], [2.0], [5.0], [4.0]])
    table = Table("d.csv", ("y",), values, np.arange(2, 7), True)
    return RegimesData(table, None, None, None, None, np.arange(7, 9), (), time, (7, 8))


def test_the_figure_names_the_regimes_and_labels_the_x_axis_by_time(monkeypatch):
    """regimes.png: the legend names the regimes and the dotted forecast probabilities
    (review N2); with --time the ticks are the times, and the steps ahead without a row in
    the file LAST+h (N1); the y-label does not call the forecast smoothed."""
    import attnbayes.app.regimes_page as page
    from attnbayes.app.regimes import TimeAxis

    figures = []
    monkeypatch.setattr(page, "png_bytes", lambda fig: figures.append(fig) or b"")
    time = TimeAxis("year", "number", (2000.0, 2001.0, 2002.0, 2003.0, 2004.0), (2005.0,))
    forecast = SimpleNamespace(
        mean=np.zeros((2, 1)),
        levels=np.array([0.5]),
        lower=-np.ones((1, 2, 1)),
        upper=np.ones((1, 2, 1)),
        regime_probs=np.full((2, 2), 0.5),
        draws=np.zeros((10, 2, 1)),
    )
    probs = np.full((5, 2), 0.5)
    names = ["regime 0 (const 1)", "regime 1 (const 2)"]
    page.figure_regimes(_time_data(time), None, probs, forecast, names)
    fig = figures[0]
    bottom = fig.axes[1]
    legend = [t.get_text() for t in bottom.get_legend().get_texts()]
    assert legend == [*names, "forecast P(s_T+h = j | y_1:T) (dotted)"]
    fig.canvas.draw()
    ticks = {t.get_text() for t in bottom.get_xticklabels()} - {""}
    assert ticks <= {"2000", "2001", "2002", "2003", "2004", "2005", "2004+2"} and len(ticks) > 3
    assert bottom.get_xlabel() == "year (one step per row)"
    assert "forecast: dotted" in bottom.get_ylabel()
    assert page.time_labels(_time_data(time), 3)[4:] == ["2004", "2005", "2004+2", "2004+3"]
    assert page.time_labels(_time_data(None), 2) == ["1", "2", "3", "4", "5", "6", "7"]


@pytest.mark.parametrize(
    ("cells", "kind", "values", "future"),
    [
        (["1871", "1872", "1873", "1874"], "number", (1871.0, 1872.0, 1873.0), (1874.0,)),
        (
            ["1959-03-31", "1959-06-30", "1959-09-30", ""],
            "date",
            ("1959-03-31", "1959-06-30", "1959-09-30"),
            (),
        ),
        (
            ["1959Q4", "1960Q1", "1960Q2", "1960Q3"],
            "date",
            ("1959Q4", "1960Q1", "1960Q2"),
            ("1960Q3",),
        ),
        (["b", "a", "c", "d"], "label", ("b", "a", "c"), ("d",)),
    ],
)
def test_read_regimes_data_reads_the_time_column(cells, kind, values, future, tmp_path):
    """--time: numbers, ISO 8601 dates, quarters or labels, kept as written (numbers as
    numbers); the times of the rows after the last y are the future's (review N1)."""
    from attnbayes.app.regimes import read_regimes_data

    path = tmp_path / "d.csv"
    path.write_text("when,y\n" + "".join(f"{c},{v}\n" for c, v in zip(cells, "123 ", strict=True)))
    data = read_regimes_data(path, ["y"], time="when")
    assert data.time == ("when", kind, values, future) and data.trailing == (5,)


def test_the_page_helpers_say_the_counts_and_the_names():
    """N4: metrics at full precision, booleans True / False, counts as integers; N6: the
    MS-VAR's and TVTP names explained; N7: 'the first value is conditioned on'."""
    from attnbayes.app.regimes_page import conditioned_text, metrics_display, parameter_note
    from attnbayes.models.markov_switching import markov_switching_var

    frame = pd.DataFrame(
        {
            "metric": ["aic", "converged", "on_boundary", "num_parameters"],
            "value": [1273.5851162322, 1.0, 0.0, 5.0],
        }
    )
    assert metrics_display(frame)["value"].tolist() == ["1273.5851162322", "True", "False", "5"]
    y, x, z = _series()
    var = markov_switching_var(np.column_stack([y, x[:T]]), 1)
    assert "A.Lk.B[j]: the coefficient of B_(t-k) in the equation of A" in parameter_note(var)
    assert "both off-diagonal entries listed" in parameter_note(var)
    tvtp = markov_switching_regression(y, exog_tvtp=np.column_stack([np.ones(T), z[:T]]))
    assert "(statsmodels: p[i->j].tvtp0, p[i->j].tvtp1, ...); gamma_(i,1) = 0" in (
        parameter_note(tvtp)
    )
    three = markov_switching_regression(y, num_regimes=3)
    assert "statsmodels lists only p[i->0] to p[i->1]: p[i->2] = 1 - the others" in (
        parameter_note(three)
    )
    assert conditioned_text(1) == "the first value is conditioned on"
    assert conditioned_text(4, 2) == "the first 4 rows are conditioned on"


# ----------------------------------------------------------------------------- bad input

GOOD = "y,x,x2,z,c\n" + "".join(
    f"{math.sin(i) + (i // 5) % 2:.4f},{math.cos(i):.4f},{round(math.cos(i), 4) * 2:.4f},"
    f"{(i * 7 % 11) / 11:.4f},3\n"
    for i in range(1, 31)
)
REFUSED = {
    "a cell that is not a number": (
        GOOD.replace("\n0.8415,", "\nabc,"),
        ["--y", "y", "--regimes", "2"],
        "data.csv line 2, column \"y\": cannot parse 'abc' as a number",
    ),
    "a missing column": (
        GOOD,
        ["--y", "nope", "--regimes", "2"],
        "data.csv: --y: no column 'nope'; the file's columns are y, x, x2, z, c (names from the "
        "header, or numbers 1..5)",
    ),
    "an unknown --exog column": (
        GOOD,
        ["--y", "y", "--exog", "x,w", "--regimes", "2"],
        "data.csv: --exog: no column 'w'; the file's columns are y, x, x2, z, c (names from the "
        "header, or numbers 1..5)",
    ),
    "an unknown --tvtp column": (
        GOOD,
        ["--y", "y", "--tvtp", "q", "--regimes", "2"],
        "data.csv: --tvtp: no column 'q'; the file's columns are y, x, x2, z, c (names from the "
        "header, or numbers 1..5)",
    ),
    "y as exog": (
        GOOD,
        ["--y", "y", "--exog", "x,1", "--regimes", "2"],
        'data.csv: --exog: column "y" is also --y; the --exog columns must be other columns of '
        "the file",
    ),
    "y as a TVTP covariate": (
        GOOD,
        ["--y", "y", "--tvtp", "y", "--regimes", "2"],
        'data.csv: --tvtp: column "y" is also --y; the --tvtp columns must be other columns of '
        "the file",
    ),
    "no value of y": (
        "y,x\n,1\n,2\n",
        ["--y", "y", "--regimes", "2"],
        "data.csv: --y column y: no row has a value",
    ),
    "a value whose square overflows": (
        GOOD.replace("\n0.8415,", "\n1e200,"),
        ["--y", "y", "--regimes", "2"],
        'data.csv line 2, column "y": 1e+200 is too large: --y values must stay below 1.2e+153 '
        "in size (float64, T = 30) for the squared residuals to be finite; rescale the column",
    ),
    "a gap in y": (
        GOOD.replace("\n0.9093,", "\n,"),
        ["--y", "y", "--regimes", "2"],
        'data.csv line 3, column "y": missing value in the middle of --y; the regime models '
        "need every value from the first to the last row of the series (rows before the first "
        "and after the last are left out)",
    ),
    "a missing regressor": (
        GOOD.replace(",-0.4161,", ",,"),
        ["--y", "y", "--exog", "x", "--regimes", "2"],
        'data.csv line 3, column "x": missing value; every --exog cell in the rows of --y '
        "(lines 2-31) needs a number",
    ),
    "too few rows for --order": (
        "y\n1\n2\n4\n3\n5\n",
        ["--y", "y", "--order", "4", "--regimes", "2"],
        "data.csv: --y has 5 row(s) (lines 2-6); an AR(4) model needs at least 7; lower "
        "--order or give more rows",
    ),
    "too few rows for the parameters": (
        "y,x\n" + "".join(f"{(i * 3) % 7},{i % 4}\n" for i in range(12)),
        ["--y", "y", "--exog", "x", "--regimes", "3", "--switching-variance"],
        "data.csv: too few rows: 12 observation(s) for 15 free parameters (Markov-switching "
        "regression, 3 regimes); give more rows or a smaller model",
    ),
    "collinear series of an MS-VAR": (
        "a,b\n" + "".join(f"{(i * 3) % 7},{2 * ((i * 3) % 7)}\n" for i in range(20)),
        ["--y", "a,b", "--order", "1", "--regimes", "2"],
        "data.csv: the model refuses the data: --y: the series are collinear (the VAR's residual "
        "covariance is singular)",
    ),
    "a constant y": (
        "y\n" + "2\n" * 10,
        ["--y", "y", "--regimes", "2"],
        'data.csv: --y column "y" is constant (2 on every row): there is nothing to model',
    ),
    "a constant regressor": (
        GOOD,
        ["--y", "y", "--exog", "c", "--regimes", "2"],
        'data.csv: --exog: column "c" is constant (3 on every row of the series): it duplicates '
        "the constant the model already has",
    ),
    "collinear regressors": (
        GOOD,
        ["--y", "y", "--exog", "x,x2", "--regimes", "2"],
        "data.csv: --exog: the columns x, x2 are collinear (with each other and the constant): "
        "their coefficients are not identified; leave one out",
    ),
    "a constant TVTP covariate": (
        GOOD,
        ["--y", "y", "--tvtp", "c", "--regimes", "2"],
        'data.csv: --tvtp: column "c" is constant (3 on every row of the series): it duplicates '
        "the constant the model already has",
    ),
    "--exog with --order": (
        GOOD,
        ["--y", "y", "--exog", "x", "--order", "1", "--regimes", "2"],
        "--exog applies without --order only: the MS-AR model (--order) has no regressors; "
        "drop --order for a Markov-switching regression on the --exog columns",
    ),
    "--switching-ar without --order": (
        GOOD,
        ["--y", "y", "--switching-ar", "--regimes", "2"],
        "--switching-ar applies with --order only (the AR coefficients)",
    ),
    "--switching-variance with one regime": (
        GOOD,
        ["--y", "y", "--switching-variance", "--regimes", "1"],
        "--switching-variance needs --regimes >= 2 (one regime has nothing to switch)",
    ),
    "--common-exog without --exog": (
        GOOD,
        ["--y", "y", "--common-exog", "x", "--regimes", "2"],
        "--common-exog names --exog columns: give --exog too",
    ),
    "--trend n with an MS-VAR": (
        GOOD,
        ["--y", "y,x", "--order", "1", "--trend", "n", "--regimes", "2"],
        "--trend n: the MS-VAR (several --y columns) always has intercepts",
    ),
    "a missing TVTP covariate": (
        GOOD.replace(",0.6364,3\n", ",,3\n"),
        ["--y", "y", "--tvtp", "z", "--regimes", "2"],
        'data.csv line 2, column "z": missing value; every --tvtp cell in the rows of --y '
        "(lines 2-31) needs a number",
    ),
    "--tvtp with one regime": (
        GOOD,
        ["--y", "y", "--tvtp", "z", "--regimes", "1"],
        "--tvtp needs --regimes >= 2 (one regime has nothing to switch)",
    ),
    "--horizon without future regressors": (
        GOOD,
        ["--y", "y", "--exog", "x", "--regimes", "2", "--horizon", "2"],
        "--horizon 2: the forecast needs the future values of the --exog column(s): give them "
        "in 2 complete row(s) after the last --y value (line 31), with the --y cell empty; "
        "data.csv has 0",
    ),
    "--common-exog not in --exog": (
        GOOD,
        ["--y", "y", "--exog", "x", "--common-exog", "z", "--regimes", "2"],
        "--common-exog: 'z' is not an --exog column; the --exog columns are x",
    ),
    "--trend n without regressors": (
        GOOD,
        ["--y", "y", "--trend", "n", "--regimes", "2"],
        "--trend n needs --exog: without an intercept or regressors, y has no mean",
    ),
    "--trend n with nothing switching": (
        GOOD,
        ["--y", "y", "--exog", "x", "--common-exog", "x", "--trend", "n", "--regimes", "2"],
        "--trend n with --regimes 2: nothing would differ between the regimes; switch something "
        "(--exog columns not in --common-exog, or --switching-variance) or use --regimes 1",
    ),
    "two --y columns without --order": (
        GOOD,
        ["--y", "y,x", "--regimes", "2"],
        "--y: 2 columns (y, x) make an MS-VAR, which needs --order P (a Markov-switching "
        "regression models one series)",
    ),
    "--starts with em": (
        GOOD,
        ["--y", "y", "--regimes", "2", "--method", "em", "--starts", "3"],
        "--starts applies to --method mle only",
    ),
    "--draws with mle": (
        GOOD,
        ["--y", "y", "--regimes", "2", "--draws", "30"],
        "--draws, --warmup and --chains apply to --method nuts only",
    ),
    "an unknown --time column": (
        GOOD,
        ["--y", "y", "--time", "when", "--regimes", "2"],
        "data.csv: --time: no column 'when'; the file's columns are y, x, x2, z, c (names from "
        "the header, or numbers 1..5)",
    ),
    "--time as --y": (
        GOOD,
        ["--y", "y", "--time", "1", "--regimes", "2"],
        'data.csv: --time: column "y" is also --y; the --time column must be another column '
        "of the file",
    ),
    "--time as --exog": (
        GOOD,
        ["--y", "y", "--exog", "x", "--time", "x", "--regimes", "2"],
        'data.csv: --time: column "x" is also --exog; the --time column must be another '
        "column of the file",
    ),
    "a --time that does not increase": (
        "year,y\n2000,1\n2001,3\n2001,2\n2003,5\n",
        ["--y", "y", "--time", "year", "--regimes", "2"],
        "data.csv line 4, column \"year\": --time: '2001' does not come after '2001' (line 3): "
        "the times must increase strictly down the rows",
    ),
    "dates that go back": (
        "date,y\n2000-01-01,1\n1999-12-01,3\n2000-03-01,2\n",
        ["--y", "y", "--time", "date", "--regimes", "2"],
        "data.csv line 3, column \"date\": --time: '1999-12-01' does not come after "
        "'2000-01-01' (line 2): the times must increase strictly down the rows",
    ),
    "a future time out of order": (
        "year,y\n2000,1\n2001,3\n2002,2\n2001,\n",
        ["--y", "y", "--time", "year", "--regimes", "2"],
        "data.csv line 5, column \"year\": --time: '2001' does not come after '2002' (line 4): "
        "the times must increase strictly down the rows",
    ),
    "a repeated --time label": (
        "when,y\na,1\nb,2\na,3\n",
        ["--y", "y", "--time", "when", "--regimes", "2"],
        "data.csv line 4, column \"when\": --time: 'a' repeats line 2: the labels of a --time "
        "column must be distinct (numbers and ISO 8601 dates must increase)",
    ),
    "a missing time": (
        "year,y\n2000,1\n,2\n2002,3\n",
        ["--y", "y", "--time", "year", "--regimes", "2"],
        'data.csv line 3, column "year": missing value; every --time cell in the rows of --y '
        "(lines 2-4) needs a time",
    ),
    "one chain with nuts": (
        GOOD,
        ["--y", "y", "--regimes", "2", "--method", "nuts", "--chains", "1"],
        "--draws/--chains: 1 chain(s) x 500 draws: R-hat needs at least 2 chains (pass "
        "--chains 2 or more)",
    ),
}


@pytest.mark.parametrize("case", REFUSED)
def test_regimes_refuses_bad_input_before_any_work(
    case, tmp_path, run_cli, monkeypatch, no_jax_work
):
    text, options, message = REFUSED[case]
    (tmp_path / "data.csv").write_text(text)
    monkeypatch.chdir(tmp_path)  # the file as the user names it
    out = tmp_path / "out"
    code, stdout, err = run_cli(["regimes", "data.csv", *options, "--out", out])
    assert code == 2 and not stdout
    assert err.strip().splitlines() == [f"attnbayes: error: {message}"]
    assert not out.exists()


@pytest.mark.parametrize(
    ("option", "value", "reason"),
    [
        ("--regimes", "0", "must be >= 1, got 0"),
        ("--order", "0", "must be >= 1, got 0"),
        ("--horizon", "0", "must be >= 1, got 0"),
        ("--method", "gibbs", "invalid choice: 'gibbs'"),
        ("--trend", "ct", "invalid choice: 'ct'"),
    ],
)
def test_regimes_refuses_bad_options_before_any_work(
    option, value, reason, tmp_path, run_cli, no_jax_work
):
    path = tmp_path / "data.csv"
    path.write_text(GOOD)
    out = tmp_path / "out"
    argv = ["regimes", path, "--y", "y", "--regimes", "2", option, value, "--out", out]
    code, _, err = run_cli(argv)
    assert code == 2
    (line,) = err.strip().splitlines()  # one line (review N9)
    assert line.startswith(f"attnbayes: error: argument {option}: {reason}")
    assert not out.exists()


# ----------------------------------------------------------------------------- slow runs


def _run_slow(tmp_path, frame, argv):
    """Write ``frame`` to data.csv, run ``regimes data.csv ARGV``: (exit status, stderr, the
    output folder's metrics and parameters)."""
    from attnbayes.app.cli import main

    path = tmp_path / "data.csv"
    frame.to_csv(path, index=False)
    out = tmp_path / "out"
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main([str(a) for a in ["regimes", path, *argv, "--out", out, "--name", "run"]])
    folder = out / "run"
    if code:
        return code, stderr.getvalue(), None, None
    metrics = pd.read_csv(folder / "metrics.csv").set_index("metric")["value"]
    table = pd.read_csv(folder / "parameters.csv").set_index("parameter")
    return code, stderr.getvalue(), metrics, table


@pytest.mark.slow
def test_regimes_fits_hamiltons_ar4_on_rgnp(tmp_path):
    """``--order 4 --regimes 2`` on Hamilton's RGNP: statsmodels' published (Stata) optimum,
    log-likelihood -181.26339 (TestHamiltonAR4); its durations and a forecast with intervals."""
    from statsmodels_cases import RGNP

    code, err, metrics, table = _run_slow(
        tmp_path,
        pd.DataFrame({"rgnp": RGNP}),
        ["--y", "rgnp", "--order", "4", "--regimes", "2", "--horizon", "4"],
    )
    assert code == 0, err
    assert metrics["log_likelihood"] == pytest.approx(-181.26339, abs=1e-3)
    assert metrics["num_observations"] == RGNP.shape[0] - 4
    assert list(table.index[:4]) == ["p[0->0]", "p[0->1]", "p[1->0]", "p[1->1]"]
    assert "ar.L4" in table.index
    forecast = pd.read_csv(tmp_path / "out" / "run" / "forecast.csv")
    assert len(forecast) == 4 and (forecast["lower_90"] < forecast["upper_90"]).all()


@pytest.mark.slow
def test_regimes_fits_statsmodels_tvtp_case(tmp_path):
    """``--order 1 --regimes 2 --switching-ar --tvtp rec`` on RGNP with the recession dummy:
    statsmodels' TestHamiltonAR1SwitchTVTP optimum -161.786477 (its llf_fit); the TVTP
    coefficients named by column, the durations averaged over the sample."""
    from statsmodels_cases import RECESSIONS, RGNP

    code, err, metrics, table = _run_slow(
        tmp_path,
        pd.DataFrame({"rgnp": RGNP, "rec": RECESSIONS}),
        ["--y", "rgnp", "--order", "1", "--regimes", "2", "--switching-ar", "--tvtp", "rec"],
    )
    assert code == 0, err
    assert metrics["log_likelihood"] >= -161.786477 - 1e-3
    assert {"p[0->0].const", "p[0->0].rec", "p[1->0].const", "p[1->0].rec"} <= set(table.index)
    durations = pd.read_csv(tmp_path / "out" / "run" / "durations.csv")
    assert durations["kind"].iloc[0].startswith("average over the sample")
    assert "TVTP covariates" in err


def _two_series() -> pd.DataFrame:
    """Columns a (the two-regime series of ``_series(3)``) and b = 0.5 b_{t-1} + 0.3 a_{t-1}
    + noise: a VAR(1) pair for the MS-VAR commands."""
    y, _, _ = _series(3)
    rng = np.random.default_rng(3)
    w = np.zeros(T)
    for t in range(1, T):
        w[t] = 0.5 * w[t - 1] + 0.3 * y[t - 1] + rng.normal()
    return pd.DataFrame({"a": y, "b": w})


@pytest.mark.slow
def test_regimes_one_regime_var_is_statsmodels_var(tmp_path):
    """Two --y columns with --order 1 --regimes 1: the VAR(1), whose maximum likelihood is
    statsmodels' ``VAR(...).fit(1)`` (OLS; its llf at the MLE covariance) to 1e-4."""
    import statsmodels.api as sm

    frame = _two_series()
    argv = ["--y", "a,b", "--order", "1", "--regimes", "1", "--switching-variance"]
    code, err, metrics, table = _run_slow(tmp_path, frame, argv[:-1])
    assert code == 0, err
    assert metrics["log_likelihood"] == pytest.approx(
        sm.tsa.VAR(frame.to_numpy()).fit(1).llf, abs=1e-4
    )
    assert "a.L1.b" in table.index and "const.b[0]" in table.index
    code, err, *_ = _run_slow(tmp_path, frame, argv)
    assert code == 2 and "--switching-variance needs --regimes >= 2" in err


@pytest.mark.slow
def test_regimes_fits_a_two_regime_ms_var(tmp_path):
    """README's MS-VAR command: two --y columns, --order 1 --regimes 2 --horizon 2 (switching
    intercepts; the AR matrices and the covariance switch only when asked): the optimum of
    ``fit_switching`` on the same ``markov_switching_var`` (the library, its own starts) to
    1e-6, the intercepts named per regime, and a forecast of two steps of both series with
    ordered bounds."""
    import jax

    from attnbayes.inference.switching import fit_switching
    from attnbayes.models.markov_switching import markov_switching_var

    frame = _two_series()
    argv = ["--y", "a,b", "--order", "1", "--regimes", "2", "--horizon", "2"]
    code, err, metrics, table = _run_slow(tmp_path, frame, argv)
    assert code == 0, err
    spec = markov_switching_var(frame.to_numpy(), 1, switching_ar=False, switching_covariance=False)
    library = fit_switching(jax.random.key(0), spec)
    assert metrics["log_likelihood"] == pytest.approx(library.log_likelihood[-1], abs=1e-6)
    assert {"const.a[0]", "const.a[1]", "const.b[0]", "const.b[1]", "a.L1.b"} <= set(table.index)
    forecast = pd.read_csv(tmp_path / "out" / "run" / "forecast.csv")
    assert list(forecast.h) == [1, 2]  # one row a step, columns per series
    for name in ("a", "b"):
        lower, upper = forecast[f"lower_90_{name}"], forecast[f"upper_90_{name}"]
        assert (lower < forecast[f"lower_50_{name}"]).all() and (upper > lower).all()


@pytest.mark.slow
def test_regimes_nuts_reports_its_diagnostics(ms_csv, tmp_path):
    """``--method nuts`` (2 x (300 + 300)): the table has R-hat and ESS, the posterior means
    lie within 4 posterior sds of the maximum-likelihood estimates, the draws are written."""
    path, _, _ = ms_csv
    frame = pd.read_csv(path)
    base = ["--y", "y", "--exog", "x", "--regimes", "2"]
    code, err, mle_metrics, mle = _run_slow(tmp_path, frame, base)
    assert code == 0, err
    nuts_argv = [*base, "--method", "nuts", "--draws", "300", "--warmup", "300"]
    code, err, metrics, table = _run_slow(tmp_path, frame, nuts_argv)
    assert code == 0, err
    assert {"sd", "q5", "q95", "r_hat", "ess_bulk"} <= set(table.columns)
    for name in ("const[0]", "const[1]", "x[0]", "x[1]", "p[0->0]"):
        gap = abs(table.loc[name, "estimate"] - mle.loc[name, "estimate"])
        assert gap < 4 * table.loc[name, "sd"], name
    assert (tmp_path / "out" / "run" / "fit_posterior.nc").is_file()
    assert "max_rhat" in metrics and "log_likelihood_at_posterior_mean" in metrics
    assert metrics["log_likelihood_at_posterior_mean"] <= mle_metrics["log_likelihood"] + 1e-6


def test_regimes_never_replaces_a_folder_it_did_not_write(tmp_path, run_cli, no_jax_work):
    path = tmp_path / "data.csv"
    path.write_text(GOOD)
    mine = tmp_path / "out" / "mine"
    mine.mkdir(parents=True)
    (mine / "thesis.tex").write_text("precious")
    argv = ["regimes", path, "--y", "y", "--regimes", "2", "--out", tmp_path / "out"]
    code, stdout, err = run_cli([*argv, "--name", "mine"])
    assert code == 2 and not stdout
    assert err.strip().splitlines() == [
        f"attnbayes: error: --out/--name: {mine} exists and was not written by attnbayes (no "
        "run.json); choose another --name or --out, or remove it"
    ]
    assert [p.name for p in mine.iterdir()] == ["thesis.tex"]


def test_a_regimes_folder_is_ours(tmp_path):
    from attnbayes.app.outputs import is_ours

    (tmp_path / "run.json").write_text(json.dumps({"attnbayes": "regimes"}))
    assert is_ours(tmp_path)
