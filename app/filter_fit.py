"""``attnbayes filter --fit``: learn the parameters of the switching state-space model first.

``check_fit`` checks the options before any work (the free parameters against the model's
``switching_state_space`` spec, --starts, the sampler sizes and priors of nuts); ``run_fit``
learns the free parameters by maximum likelihood or EM (``fit_switching``) or by NUTS over the
parameters with the states and modes integrated out (``switching_marginal_model``), and returns
the fitted parameters with ``fit.csv``'s table, the metrics and files of the fit;
``fit_section`` is its part of the run's page. The likelihood is the --method's filter
(``attnbayes.app.parser.fit_likelihood``).

What a fit must say (terminal and page): how the regimes are labelled (``regime_ordering``, the
suite's one convention: NUTS samples under it, so its posterior mean never averages two
labellings, and the point fits are relabelled to it); a NUTS run whose R-hat exceeds
``RHAT_OK`` or whose bulk ESS is under ``ESS_PER_CHAIN_OK`` per chain; a point fit that did not
move from the start or did not converge; estimates on the boundary of their support (no
standard error; the others are those of the model with them fixed there).
"""

from __future__ import annotations

import html
import time

import numpy as np
import pandas as pd

from ..inference.mcmc import check_sampler_sizes
from .outputs import check_finite_output
from .pages import RHAT_OK, table_html
from .parser import DEFAULT_STARTS, FIT_METHODS
from .runs import check_count, datatree_writer
from .user_data import InputError

# the iteration limit of --fit mle (per start) and --fit em
FIT_ITERATIONS = 500
# a NUTS fit warns when the bulk ESS of a free parameter is below this many draws per chain
ESS_PER_CHAIN_OK = 100

_FIT_TEXT = {
    "mle": "maximum likelihood (L-BFGS on unconstrained coordinates from several starts; "
    "standard errors from the Hessian by the delta method)",
    "em": "EM (Kim's smoother in the E-step; the expected complete-data log-likelihood "
    "maximised in the M-step)",
    "nuts": "NUTS over the parameters with the states and modes integrated out by the filter; "
    "the posterior mean is used",
}


def fit_section(fit, fit_table, settings) -> str:
    """The HTML section of --fit: what was learned and how, how the regimes are labelled, the
    fit's warnings (``settings["fit_warnings"]``, from ``run_fit``), what a blank means, and
    the table of fit.csv."""
    if fit is None:
        return ""
    if fit == "nuts":
        spread = "posterior sd, 5% and 95% quantiles, R-hat and bulk ESS"
        blank = ""
    elif fit == "em":
        spread = "stderr (blank: EM gives no standard errors; --fit mle does)"
        blank = ""
    else:
        spread = "standard errors from the Hessian of the log-likelihood"
        blank = (
            " A blank standard error: the estimate is on the boundary of its support (named "
            "below; it has no Gaussian limit, and the other standard errors are those of the "
            "model with it fixed there), or the Hessian on the other coordinates is not "
            "negative definite (the parameters are not identified at the estimate)."
        )
    warnings = "".join(
        f"\n<p><strong>Warning:</strong> {html.escape(w)}</p>"
        for w in settings.get("fit_warnings", [])
    )
    labels = html.escape(settings.get("fit_regime_labels", ""))
    names = settings.get("mode_names")
    modes = ""
    if names:
        named = ", ".join(f"mode {j} = {name}" for j, name in enumerate(names))
        modes = html.escape(
            f" The index j in the names (p[i->j], dynamics_cov_scale[j], ...) is the mode: {named}."
        )
    return f"""
<h2>Learned parameters</h2>
<p class="note">{html.escape(_FIT_TEXT[fit])}, on the {html.escape(settings["fit_likelihood"])}
filter's log-likelihood; learned: {html.escape(", ".join(settings["free"]))}; the others stay
at the start. The noise covariances are Q_j = c_j Q0_j and R_j = r_j R0_j with the scales c_j
(dynamics_cov_scale) and r_j (emission_cov_scale) learned, Q0 and R0 the start. Regime labels:
{labels}{modes} Columns: start, estimate, {spread}.{blank} These parameters are in
<code>params.json</code> (loadable by --params) and the table in <code>fit.csv</code>.</p>{warnings}
{table_html(fit_table.set_index("parameter"))}"""


def check_fit(params, observations, inputs, fit, free, num_starts, sizes) -> tuple:
    """Argument checks of --fit that need no JAX tracing: (spec, free names).

    The spec is ``switching_state_space(params, observations, inputs=inputs)``; ``free``
    defaults to its identified set. A free parameter that cannot start at the given value
    (``check_free_values``: a singular covariance) or that EM cannot fit
    (``check_em_free``: the mean parameters of a residual with a singular covariance) is
    refused here, naming --free; so is --fit nuts on exchangeable modes that nothing orders
    (``regime_ordering``): its posterior mean would average the labellings."""
    from ..inference.switching.learning.em import check_em_free
    from ..inference.switching.learning.parameters import check_free_values
    from ..models.markov_switching import regime_ordering, switching_state_space

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
    if fit in ("mle", "em"):
        try:
            check_free_values(spec, free)
            if fit == "em":
                check_em_free(spec, free)
        except ValueError as err:
            message = str(err).removeprefix("free: ").replace("method='mle'", "--fit mle")
            message = message.replace(" in init ", " at the start (--params or --scenario) ")
            raise InputError(f"--free: {message}") from None
    ordering = regime_ordering(spec, free)
    if fit == "nuts" and not ordering.identified:
        raise InputError(
            f"--free: with --fit nuts, {ordering.description.rstrip('.')}, so the posterior "
            "would mix them; free emission_cov_scale or dynamics_cov_scale (the labels follow "
            "it), or use --fit mle"
        )
    if fit != "mle" and num_starts is not None:
        raise InputError("--starts applies to --fit mle only")
    check_count("--starts", num_starts, 1)
    if fit == "nuts":
        check_sampler_sizes(
            sizes["num_samples"], sizes["num_chains"], names=("--draws", "--chains")
        )
        from ..models.markov_switching import default_priors

        missing = [f for f in free if f not in default_priors(spec, free)]
        if missing:
            raise InputError(
                f"--free: --fit nuts has no prior for {', '.join(map(repr, missing))} "
                "(covariance fields are learned through their scales dynamics_cov_scale, "
                "emission_cov_scale)"
            )
    return spec, free


def nuts_fit(key, spec, free, likelihood, sizes, init_values=None):
    """NUTS over the free parameters of any ``SwitchingSpec`` (under ``default_priors(spec,
    free)``, whose ordered law labels the regimes): (theta at the posterior mean, per-parameter
    summaries {column: {name: array}} with sd, q5, q95, r_hat, ess_bulk, metrics, the
    DataTree). ``init_values`` ({name: value} of the free parameters) starts every chain there
    (NumPyro's default: uniform in (-2, 2) on the unconstrained scale). Used by ``filter --fit
    nuts`` and ``attnbayes regimes --method nuts``."""
    from ..inference.mcmc import run_nuts
    from ..inference.switching import switching_marginal_model

    tree = run_nuts(
        key,
        switching_marginal_model,
        (spec.observations,),
        {"spec": spec, "likelihood": likelihood, "inputs": spec.inputs, "free": free},
        posterior_predictive=False,
        init_values=init_values,
        **sizes,
    )
    return (*_nuts_summary(tree, spec, free), tree)


def _nuts_summary(tree, spec, free):
    """The summaries of NUTS draws of the free parameters: (theta at the posterior mean,
    {column: {name: array}} with sd, q5, q95, r_hat, ess_bulk, metrics)."""
    import warnings

    import arviz_stats as azs

    from ..inference.diagnostics import diagnostics

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
    return theta, columns, metrics


def nuts_warnings(
    table: pd.DataFrame,
    num_chains: int,
    *,
    option: str = "--fit nuts",
    use: str = "the posterior mean used by the filter",
) -> list[str]:
    """A warning naming the parameters (``table``'s rows: parameter, r_hat, ess_bulk) whose
    R-hat exceeds ``RHAT_OK`` or whose bulk ESS is below ``ESS_PER_CHAIN_OK`` per chain (NaN
    counts as bad), or none; ``option`` names the run, ``use`` what rests on the draws."""
    floor = ESS_PER_CHAIN_OK * num_chains
    bad = table[~((table["r_hat"] <= RHAT_OK) & (table["ess_bulk"] >= floor))]
    if bad.empty:
        return []
    named = ", ".join(
        f"{row.parameter} (R-hat {row.r_hat:.3g}, bulk ESS {row.ess_bulk:.0f})"
        for row in bad.itertuples()
    )
    return [
        f"{option} did not converge: R-hat above {RHAT_OK} or bulk ESS below {floor} "
        f"({ESS_PER_CHAIN_OK} per chain) on {named}; {use} is not reliable: run more draws "
        "(--draws, --warmup) or chains (--chains)"
    ]


def _point_warnings(spec, free, result, labels: dict) -> list[str]:
    """Warnings of a maximum-likelihood or EM fit: it did not move from the start, did not
    converge, or left estimates on the boundary of their support (``result.on_boundary``)."""
    fit, out = result.method, []
    iterations = len(result.log_likelihood) - 1
    moved = any(
        not np.array_equal(np.asarray(result.theta[n], float), np.asarray(spec.theta[n], float))
        for n in free
    )
    if not moved:
        why = (
            f"its first step lowered the {result.likelihood} log-likelihood (Kim's smoother "
            "is an approximate E-step), and so did every halving of it"
            if fit == "em" and not result.converged
            else "the start is where it stopped"
        )
        out.append(
            f"--fit {fit} did not move from the start ({iterations} iterations): {why}; the "
            "filter runs with the start parameters" + ("; try --fit mle" if fit == "em" else "")
        )
    elif not result.converged:
        if fit != "em":
            why = "the best start stopped before its gradient fell below the tolerance"
        elif len(result.log_likelihood) < FIT_ITERATIONS:
            why = (
                "no halving of its last step raised the log-likelihood (Kim's smoother is an "
                "approximate E-step); --fit mle maximises it directly"
            )
        else:
            why = f"it reached its limit of {FIT_ITERATIONS} iterations"
        out.append(
            f"--fit {fit} did not converge ({iterations} iterations): {why}; the estimates "
            "may be short of the maximum"
        )
    edge = [
        f"{label} = {np.ravel(result.theta[n])[i]:.3g}"
        for n in free
        for i, label in enumerate(labels[n])
        if np.ravel(result.on_boundary[n])[i]
    ]
    if edge:
        note = (
            "EM gives no standard errors"
            if fit == "em"
            else "no standard error; the others are those of the model with it fixed there"
        )
        out.append(f"on the boundary of the parameter space: {', '.join(edge)} ({note})")
    return out


def _labels(spec, name) -> list[str]:
    return spec.names.get(name) or [
        f"{name}{list(i)}" for i in np.ndindex(np.shape(spec.theta[name]))
    ]


def _fit_table(spec, free, theta, columns: dict) -> pd.DataFrame:
    """One row per free scalar: parameter, initial, estimate, then ``columns`` ({column:
    {name: array of the parameter's shape}})."""
    rows = []
    for name in free:
        labels = _labels(spec, name)
        start = np.ravel(np.asarray(spec.theta[name], dtype=float))
        estimate = np.ravel(np.asarray(theta[name], dtype=float))
        extra = {c: np.ravel(np.asarray(v[name], dtype=float)) for c, v in columns.items()}
        for i, label in enumerate(labels):
            row = {"parameter": label, "initial": start[i], "estimate": estimate[i]}
            rows.append(row | {c: v[i] for c, v in extra.items()})
    return pd.DataFrame(rows)


def run_fit(key, spec, free, fit, likelihood, num_starts, sizes, say):
    """Learn the parameters: (fitted SwitchingParams, fit table, metrics, files, settings).

    ``say`` gets the progress, the regime labelling and the warnings (``warning: ...``);
    settings["fit_regime_labels"] and settings["fit_warnings"] hold them for the page
    (``fit_section``) and run.json."""
    from ..inference.switching import fit_switching
    from ..models.markov_switching import build_params, regime_ordering

    say(f"--fit {fit}: learning {', '.join(free)} ({likelihood} likelihood)")
    labels = regime_ordering(spec, free).description
    say(f"--fit {fit}: regime labels: {labels}")
    started = time.perf_counter()
    files, settings = {}, {"fit": fit, "fit_likelihood": likelihood, "free": list(free)}
    if fit == "nuts":
        theta, columns, metrics, tree = nuts_fit(key, spec, free, likelihood, sizes)
        check_finite_output(
            "the posterior mean of the parameters",
            np.concatenate([np.ravel(theta[f]) for f in free]),
            axis_name="parameter",
        )
        table = _fit_table(spec, free, theta, columns)
        warnings = nuts_warnings(table, sizes["num_chains"])
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
            max_iterations=FIT_ITERATIONS,
        )
        theta = result.theta
        check_finite_output(
            "the fitted parameters",
            np.concatenate([np.ravel(theta[f]) for f in free]),
            axis_name="parameter",
        )
        table = _fit_table(spec, free, theta, {"stderr": result.stderr})
        warnings = _point_warnings(spec, free, result, {n: _labels(spec, n) for n in free})
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
    for warning in warnings:
        say(f"warning: {warning}")
    settings |= {"fit_regime_labels": labels, "fit_warnings": warnings}
    metrics.append(("fit_wall_time_s", time.perf_counter() - started))
    params = build_params(spec.structure, theta)
    return params, table, metrics, files, settings


__all__ = [
    "ESS_PER_CHAIN_OK",
    "FIT_ITERATIONS",
    "check_fit",
    "fit_section",
    "nuts_fit",
    "nuts_warnings",
    "run_fit",
]
