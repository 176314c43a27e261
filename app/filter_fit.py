"""``attnbayes filter --fit``: learn the parameters of the switching state-space model first.

``check_fit`` checks the options before any work (the free parameters against the model's
``switching_state_space`` spec, --starts, the sampler sizes and priors of nuts); ``run_fit``
learns the free parameters by maximum likelihood or EM (``fit_switching``) or by NUTS over the
parameters with the states and modes integrated out (``switching_marginal_model``), and returns
the fitted parameters with ``fit.csv``'s table, the metrics and files of the fit;
``fit_section`` is its part of the run's page. The likelihood is the --method's filter
(``attnbayes.app.parser.fit_likelihood``).
"""

from __future__ import annotations

import html
import time

import numpy as np
import pandas as pd

from ..inference.mcmc import check_sampler_sizes
from .outputs import check_finite_output
from .pages import table_html
from .parser import DEFAULT_STARTS, FIT_METHODS
from .runs import check_count, datatree_writer
from .user_data import InputError

_FIT_TEXT = {
    "mle": "maximum likelihood (L-BFGS on unconstrained coordinates from several starts; "
    "standard errors from the Hessian by the delta method)",
    "em": "EM (Kim's smoother in the E-step; the expected complete-data log-likelihood "
    "maximised in the M-step)",
    "nuts": "NUTS over the parameters with the states and modes integrated out by the filter; "
    "the posterior mean is used",
}


def fit_section(fit, fit_table, settings) -> str:
    """The HTML section of --fit: what was learned and how, and the table of fit.csv."""
    if fit is None:
        return ""
    spread = (
        "standard errors from the Hessian of the log-likelihood (NaN where it is not negative "
        "definite)"
        if fit != "nuts"
        else "posterior sd, 5% and 95% quantiles, R-hat and bulk ESS"
    )
    return f"""
<h2>Learned parameters</h2>
<p class="note">{html.escape(_FIT_TEXT[fit])}, on the {html.escape(settings["fit_likelihood"])}
filter's log-likelihood; learned: {html.escape(", ".join(settings["free"]))}; the others stay
at the start. The noise covariances are Q_j = c_j Q0_j and R_j = r_j R0_j with the scales c_j
(dynamics_cov_scale) and r_j (emission_cov_scale) learned, Q0 and R0 the start. Columns:
start, estimate, {spread}. These parameters are in <code>params.json</code> (loadable by
--params) and the table in <code>fit.csv</code>.</p>
{table_html(fit_table.set_index("parameter"))}"""


def check_fit(params, observations, inputs, fit, free, num_starts, sizes) -> tuple:
    """Argument checks of --fit that need no JAX tracing: (spec, free names).

    The spec is ``switching_state_space(params, observations, inputs=inputs)``; ``free``
    defaults to its identified set."""
    from ..models.markov_switching import switching_state_space

    if fit not in FIT_METHODS:
        raise InputError(f"--fit: unknown {fit!r}; choose from {list(FIT_METHODS)}")
    spec = switching_state_space(params, observations, inputs=inputs)
    if free is None:
        free = spec.free
    free = tuple(str(f).strip() for f in free)
    unknown = [f for f in free if f not in spec.theta]
    if unknown or len(set(free)) != len(free) or not free:
        what = "unknown " + ", ".join(map(repr, unknown)) if unknown else "repeated or empty"
        raise InputError(f"--free: {what}; the parameters are {', '.join(spec.theta)}")
    if fit != "mle" and num_starts is not None:
        raise InputError("--starts applies to --fit mle only")
    check_count("--starts", num_starts, 1)
    if fit == "nuts":
        check_sampler_sizes(
            sizes["num_samples"], sizes["num_chains"], names=("--draws", "--chains")
        )
        from ..models.markov_switching import default_priors

        missing = [f for f in free if f not in default_priors(spec)]
        if missing:
            raise InputError(
                f"--free: --fit nuts has no prior for {', '.join(map(repr, missing))} "
                "(covariance fields are learned through their scales dynamics_cov_scale, "
                "emission_cov_scale)"
            )
    return spec, free


def _nuts_fit(key, spec, free, likelihood, sizes):
    """NUTS over the free parameters: (theta at the posterior mean, the DataTree, per-parameter
    summaries {column: {name: array}}, metrics)."""
    import warnings

    import arviz_stats as azs

    from ..inference.diagnostics import diagnostics
    from ..inference.mcmc import run_nuts
    from ..inference.switching import switching_marginal_model

    tree = run_nuts(
        key,
        switching_marginal_model,
        (spec.observations,),
        {"spec": spec, "likelihood": likelihood, "inputs": spec.inputs, "free": free},
        posterior_predictive=False,
        **sizes,
    )
    post = tree["posterior"]
    theta = dict(spec.theta)
    columns = {"sd": {}, "q5": {}, "q95": {}, "r_hat": {}, "ess_bulk": {}}
    with warnings.catch_warnings(), np.errstate(divide="ignore", invalid="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        r_hat = azs.rhat(tree, var_names=list(free))
        ess = azs.ess(tree, var_names=list(free), method="bulk")
    for name in free:
        draws = np.asarray(post[name]).reshape(-1, *np.shape(spec.theta[name]))
        theta[name] = draws.mean(axis=0)
        columns["sd"][name] = draws.std(axis=0)
        columns["q5"][name] = np.quantile(draws, 0.05, axis=0)
        columns["q95"][name] = np.quantile(draws, 0.95, axis=0)
        columns["r_hat"][name] = np.asarray(r_hat[name])
        columns["ess_bulk"][name] = np.asarray(ess[name])
    diag = diagnostics(tree, var_names=list(free))
    metrics = [
        ("fit_divergences", diag.num_divergences),
        ("fit_max_rhat", diag.max_r_hat),
        ("fit_min_ess_bulk", diag.min_ess_bulk),
        ("fit_min_ess_tail", diag.min_ess_tail),
    ]
    return theta, tree, columns, metrics


def _fit_table(spec, free, theta, columns: dict) -> pd.DataFrame:
    """One row per free scalar: parameter, initial, estimate, then ``columns`` ({column:
    {name: array of the parameter's shape}})."""
    rows = []
    for name in free:
        labels = spec.names.get(name) or [
            f"{name}{list(i)}" for i in np.ndindex(np.shape(spec.theta[name]))
        ]
        start = np.ravel(np.asarray(spec.theta[name], dtype=float))
        estimate = np.ravel(np.asarray(theta[name], dtype=float))
        extra = {c: np.ravel(np.asarray(v[name], dtype=float)) for c, v in columns.items()}
        for i, label in enumerate(labels):
            row = {"parameter": label, "initial": start[i], "estimate": estimate[i]}
            rows.append(row | {c: v[i] for c, v in extra.items()})
    return pd.DataFrame(rows)


def run_fit(key, spec, free, fit, likelihood, num_starts, sizes, say):
    """Learn the parameters: (fitted SwitchingParams, fit table, metrics, files, settings)."""
    from ..inference.switching import fit_switching
    from ..models.markov_switching import build_params

    say(f"--fit {fit}: learning {', '.join(free)} ({likelihood} likelihood)")
    started = time.perf_counter()
    files, settings = {}, {"fit": fit, "fit_likelihood": likelihood, "free": list(free)}
    if fit == "nuts":
        theta, tree, columns, metrics = _nuts_fit(key, spec, free, likelihood, sizes)
        check_finite_output(
            "the posterior mean of the parameters",
            np.concatenate([np.ravel(theta[f]) for f in free]),
            axis_name="parameter",
        )
        table = _fit_table(spec, free, theta, columns)
        files["fit_posterior.nc"] = datatree_writer(tree)
        settings |= {f"fit_{k}": v for k, v in sizes.items()}
    else:
        starts = num_starts or DEFAULT_STARTS
        result = fit_switching(
            key,
            spec,
            spec.observations,
            method=fit,
            likelihood=likelihood,
            inputs=spec.inputs,
            free=free,
            num_starts=starts,
        )
        theta = result.theta
        check_finite_output(
            "the fitted parameters",
            np.concatenate([np.ravel(theta[f]) for f in free]),
            axis_name="parameter",
        )
        table = _fit_table(spec, free, theta, {"stderr": result.stderr})
        metrics = [
            ("fit_log_likelihood", float(result.log_likelihood[-1])),
            ("fit_aic", result.aic),
            ("fit_bic", result.bic),
            ("fit_num_parameters", result.num_parameters),
            ("fit_iterations", len(result.log_likelihood) - 1),
            ("fit_converged", float(result.converged)),
        ]
        if fit == "mle":
            settings["fit_starts"] = starts
    metrics.append(("fit_wall_time_s", time.perf_counter() - started))
    params = build_params(spec.structure, theta)
    return params, table, metrics, files, settings


__all__ = ["check_fit", "fit_section", "run_fit"]
