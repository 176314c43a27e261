"""What ``attnbayes regimes`` (``attnbayes.app.regimes``) writes and says about a fit: the
tables of parameters.csv, durations.csv and metrics (``point_table``, ``nuts_table``,
``durations_table``, ``metrics_display``), the warnings (``fit_warnings``,
``optima_warnings``, ``label_warnings``), the model in words and HTML (``model_name``,
``model_equation``, ``switching_parameters``, ``statsmodels_differs``, ``parameter_note``,
``parameter_labels``, ``column_names``, ``regime_names``, ``conditioned_text``), the figure
regimes.png (``figure_regimes``, ``time_labels``), the statsmodels-like terminal summary
(``summary_text``) and the body of index.html (``page_body``).

What a reader must know is said on the terminal, in the page and in run.json: the model with
s_t on exactly what switches (``model_equation``, ``switching_parameters``), each regime by
its labelling parameter (``regime_names``), a fit that did not converge or sits on a boundary
(``fit_warnings``), another local optimum within ``OPTIMA_NATS`` of the best
(``optima_warnings``), labels resting on a parameter that differs by less than
``LABEL_SEPARATION`` standard errors (``label_warnings``), and where statsmodels fits another
model (``statsmodels_differs``).

Parameters are named as statsmodels names them (const[j], x1[j], ar.L1, sigma2, p[i->j]),
the regressors, TVTP covariates and an MS-VAR's series by their columns; the standard errors'
95% intervals use ``Z_95``. The functions take the ``RegimesData`` of
``attnbayes.app.regimes`` but never import it (the command imports this module).
"""

from __future__ import annotations

import html
import math
import re
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import FuncFormatter, MaxNLocator

from .filter_fit import FIT_ITERATIONS
from .outputs import MANIFEST
from .pages import img_tag, png_bytes, settings_table, table_html

# the z of the 95% interval beside a standard error
Z_95 = 1.959963984540054

_METHOD_TEXT = {
    "mle": "maximum likelihood (L-BFGS on unconstrained coordinates from several starts; "
    "standard errors from the Hessian of the log-likelihood by the delta method)",
    "em": "EM (Hamilton's smoothed regime probabilities in the E-step; closed-form and "
    "L-BFGS M-steps); EM gives no standard errors",
    "nuts": "NUTS over the parameters with the regimes integrated out by Hamilton's filter, "
    "under weakly informative priors (default_priors); the estimate is the posterior mean; "
    "an MS-VAR's chains start at the maximum-likelihood estimate (from NumPyro's default "
    "start they can settle in a poorer mode)",
}


def model_name(order: int | None, num_regimes: int, num_series: int = 1) -> str:
    """'Markov-switching regression', '... AR(p)' or '... VAR(p) of o series', M regimes."""
    if order is None:
        what = "regression"
    elif num_series == 1:
        what = f"AR({order})"
    else:
        what = f"VAR({order}) of {num_series} series"
    return f"Markov-switching {what}, {num_regimes} regime{'s' if num_regimes > 1 else ''}"


def conditioned_text(order: int, num_series: int = 1) -> str:
    """'the first value is conditioned on', 'the first 4 values are conditioned on' (rows for
    an MS-VAR)."""
    what = "value" if num_series == 1 else "row"
    if order == 1:
        return f"the first {what} is conditioned on"
    return f"the first {order} {what}s are conditioned on"


def column_names(text: str, spec, exog_names=(), y_names=()) -> str:
    """``text`` (a parameter name or a sentence of the library) with the regressors x1, x2, ...
    (regression) or the series y1, y2, ... (MS-VAR) called by their columns."""
    if spec.structure.kind == "var":
        pattern, names = r"(?<!\w)y(\d+)(?!\w)", y_names
    else:
        pattern, names = r"(?<!\w)x(\d+)(?!\w)", exog_names
    if not names:
        return text
    return re.sub(pattern, lambda match: names[int(match[1]) - 1], text)


def parameter_labels(spec, exog_names, tvtp_names, y_names=()) -> dict[str, list[str]]:
    """statsmodels' parameter names (``spec.names``: const[j], x1[j], ar.L1, sigma2, p[i->j],
    p[i->j].tvtp0; an MS-VAR's const.y1[j], y1.L1.y2[j], sigma[y1,y2][j]) with the regressors,
    TVTP covariates and (MS-VAR) series named by their columns (``const`` for the constant the
    command adds to --tvtp)."""
    tvtp = ["const", *tvtp_names]
    out = {}
    for name, labels in spec.names.items():
        renamed = []
        for label in labels:
            head, dot, tail = label.partition(".tvtp")
            if dot:
                label = f"{head}.{tvtp[int(tail)]}"
            renamed.append(column_names(label, spec, exog_names, y_names))
        out[name] = renamed
    return out


def _p_value(z: float) -> float:
    """Two-sided normal p-value of a z statistic."""
    return math.erfc(abs(z) / math.sqrt(2.0)) if math.isfinite(z) else math.nan


def point_table(spec, labels: dict, result) -> pd.DataFrame:
    """One row per free scalar of a maximum-likelihood or EM fit: parameter, estimate, stderr,
    z, p_value, lower_95, upper_95, on_boundary and a note saying why a standard error is
    blank."""
    rows = []
    for name in spec.free:
        estimate = np.ravel(np.asarray(result.theta[name], float))
        stderr = np.ravel(np.asarray(result.stderr[name], float))
        edge = np.ravel(np.asarray(result.on_boundary[name], bool))
        for i, label in enumerate(labels[name]):
            se = stderr[i]
            note = ""
            if edge[i]:
                note = (
                    "on the boundary of its support: no standard error (the others are those "
                    "of the model with it fixed there)"
                )
            elif result.method == "em":
                note = "EM computes no standard errors (--method mle does)"
            elif not math.isfinite(se):
                note = (
                    "no standard error: the Hessian on the interior coordinates is not "
                    "negative definite (not identified at the estimate)"
                )
            z = estimate[i] / se if math.isfinite(se) and se > 0 else math.nan
            rows.append(
                {
                    "parameter": label,
                    "estimate": estimate[i],
                    "stderr": se,
                    "z": z,
                    "p_value": _p_value(z),
                    "lower_95": estimate[i] - Z_95 * se,
                    "upper_95": estimate[i] + Z_95 * se,
                    "on_boundary": bool(edge[i]),
                    "note": note,
                }
            )
    return pd.DataFrame(rows)


def nuts_table(spec, labels: dict, theta: dict, columns: dict) -> pd.DataFrame:
    """One row per free scalar of a NUTS fit: parameter, estimate (posterior mean), sd, q5,
    q95, r_hat, ess_bulk."""
    rows = []
    for name in spec.free:
        estimate = np.ravel(np.asarray(theta[name], float))
        extra = {c: np.ravel(np.asarray(v[name], float)) for c, v in columns.items()}
        for i, label in enumerate(labels[name]):
            rows.append(
                {"parameter": label, "estimate": estimate[i]} | {c: v[i] for c, v in extra.items()}
            )
    return pd.DataFrame(rows)


def durations_table(spec, theta: dict) -> pd.DataFrame:
    """The expected duration of each regime, 1 / (1 - p_jj) steps (``expected_durations``);
    with TVTP the average over the sample's rows of 1 / (1 - P_t[j, j])."""
    from ..inference.switching.learning import expected_durations
    from ..models.markov_switching import regime_transition_matrix

    trans = np.asarray(regime_transition_matrix(spec.structure, theta, spec.inputs))
    durations = np.asarray(expected_durations(trans), float)
    kind = "1 / (1 - p_jj)"
    if durations.ndim == 2:
        durations = durations.mean(axis=0)
        kind = "average over the sample of 1 / (1 - P_t[j, j]) (TVTP)"
    return pd.DataFrame(
        {
            "regime": np.arange(durations.shape[0]),
            "expected_duration": durations,
            "kind": kind,
        }
    )


def fit_warnings(result) -> list[str]:
    """What a reader of a maximum-likelihood or EM fit must know: it did not converge, its
    best optimum was reached by one start only, estimates on the boundary."""
    out = []
    method = result.method
    iterations = len(result.log_likelihood) - 1
    if not result.converged:
        if method == "em":
            why = (
                f"it reached its limit of {FIT_ITERATIONS} iterations"
                if iterations >= FIT_ITERATIONS
                else "no halving of its last step raised the log-likelihood"
            )
        else:
            why = "the best start stopped before its gradient fell below the tolerance"
        out.append(
            f"--method {method} did not converge ({iterations} iterations): {why}; the "
            "estimates may be short of the maximum"
        )
    optima = result.local_optima
    if method == "mle" and optima is not None and optima.num_starts.sum() > 1:
        if optima.num_starts[0] == 1:
            out.append(
                f"the best optimum (log-likelihood {optima.log_likelihoods[0]:.4f}) was reached "
                f"by one of {int(optima.num_starts.sum())} starts only: there may be better "
                "ones; run more --starts"
            )
    edge = [
        f"{name}" for name, mask in result.on_boundary.items() if np.any(np.asarray(mask, bool))
    ]
    if edge:
        out.append(
            f"estimates on the boundary of the parameter space ({', '.join(edge)}; the rows "
            "marked on_boundary in parameters.csv): they have no standard error, and the "
            "others are those of the model with them fixed there"
        )
    return out


# a runner-up optimum this close to the best (in log-likelihood units, nats) is said (B4)
OPTIMA_NATS = 2.0
# the labelling parameter's neighbouring regimes closer than this many standard errors of
# their difference are said (the labels rest on a parameter that barely differs)
LABEL_SEPARATION = 2.0

_REGIME = re.compile(r"(.*?)\[(\d+)\]")
_TRANSITION = ("transition_matrix", "transition_coefficients")
# an MS-VAR's parameters by their matrices (the entries' names are in parameters.csv)
_VAR_NAMES = {"intercepts": "const", "ar_coefficients": "A", "covariances": "Sigma"}


def switching_parameters(spec, labels: dict) -> tuple[list[str], list[str]]:
    """(the parameters that differ by regime, those that do not), by statsmodels' names
    without the regime index (const, the regressors' columns, ar.Lk, sigma2; an MS-VAR's
    const, A and Sigma), from the spec's flags as ``parameter_labels`` names them."""
    switching, common = [], []
    many = spec.structure.num_regimes > 1
    for name in spec.free:
        if name in _TRANSITION:
            continue
        for label in labels[name]:
            match = _REGIME.fullmatch(label)
            base = match[1] if match else label
            if spec.structure.kind == "var":
                base = _VAR_NAMES.get(name, base)
            where = switching if match and many else common
            if base not in where:
                where.append(base)
    return switching, common


def _sub(text: str, regime: bool, index: str = "") -> str:
    """``text`` with the subscript index (and s_t when it switches) in HTML."""
    parts = [p for p in (index, "s<sub>t</sub>" if regime else "") if p]
    return f"{text}<sub>{','.join(parts)}</sub>" if parts else text


def model_equation(spec, y_names=()) -> str:
    """The model in HTML, from the spec's flags: what carries s_t is what switches."""
    st = spec.structure
    many = st.num_regimes > 1
    variance = many and st.switching_variance
    noise = f"e<sub>t</sub> ~ N(0, {_sub('&sigma;<sup>2</sup>', variance)})"
    mask = st.coefficient_mask if st.num_inputs else ()
    every, none = all(mask), not any(mask)
    if st.kind == "var":
        noise = f"e<sub>t</sub> ~ N(0, {_sub('&Sigma;', variance)})"
        a = _sub("A", many and every, "l")
        return (
            f"y<sub>t</sub> = {_sub('&nu;', many)} + &sum;<sub>l=1..p</sub> {a} "
            f"y<sub>t&minus;l</sub> + e<sub>t</sub>, {noise} (Krolzig 1997, p = {st.order}; "
            f"y<sub>t</sub> = ({html.escape(', '.join(y_names))}))"
        )
    if st.kind == "regression":
        terms = [_sub("&mu;", many)] if st.trend == "c" else []
        if mask:
            beta = "x<sub>t</sub>' " + _sub("&beta;", many and not none)
            if many and not (every or none):
                beta = (
                    f"x<sup>(s)</sup><sub>t</sub>' {_sub('&beta;', True)} + "
                    "x<sup>(c)</sup><sub>t</sub>' &beta;"
                )
            terms.append(beta)
        return f"y<sub>t</sub> = {' + '.join(terms)} + e<sub>t</sub>, {noise}"
    phi = _sub("&phi;", many and every, "k")
    if many and not (every or none):
        lags = ", ".join(str(k + 1) for k, flag in enumerate(mask) if flag)
        phi = f"{_sub('&phi;', True, 'k')} (k = {lags}; &phi;<sub>k</sub> for the others)"
    if st.trend == "n":
        return (
            f"y<sub>t</sub> = &sum;<sub>k=1..p</sub> {phi} y<sub>t&minus;k</sub> + e<sub>t</sub>, "
            f"{noise} (p = {st.order})"
        )
    mean_lag = "&mu;<sub>s<sub>t&minus;k</sub></sub>" if many else "&mu;"
    return (
        f"y<sub>t</sub> &minus; {_sub('&mu;', many)} = &sum;<sub>k=1..p</sub> {phi} "
        f"(y<sub>t&minus;k</sub> &minus; {mean_lag}) + e<sub>t</sub>, {noise} (Hamilton 1989, "
        f"p = {st.order})"
    )


def statsmodels_differs(spec) -> str | None:
    """Where the model is not statsmodels' ``MarkovAutoregression`` of the same options: a
    switching variance with p >= 2 (``attnbayes.models.markov_switching``), else None."""
    st = spec.structure
    if st.kind == "ar" and st.order >= 2 and st.switching_variance and st.num_regimes > 1:
        return (
            f"statsmodels' MarkovAutoregression fits another model with these options: with "
            f"order {st.order} >= 2 it lets a switching variance follow s_(t-{st.order - 1}) "
            "(it broadcasts sigma2 over the regime tuple) where here sigma2 follows s_t, so its "
            "log-likelihood and estimates differ (they agree for order 1 or one variance)"
        )
    return None


def _per_regime(labels: dict, name: str, m: int) -> list[str]:
    """The label of the first entry of ``name`` in each regime (regime j's row)."""
    stride = len(labels[name]) // m
    return [labels[name][j * stride] for j in range(m)]


def regime_names(spec, labels: dict, theta: dict) -> list[str]:
    """'regime j (NAME VALUE)' for each regime, NAME the labelling parameter
    (``regime_ordering``) at the estimate, e.g. 'regime 0 (const 850.6)'."""
    from ..models.markov_switching import regime_ordering

    m = spec.structure.num_regimes
    name = regime_ordering(spec).parameter
    if m == 1 or name is None:
        return [f"regime {j}" for j in range(m)]
    values = np.asarray(theta[name], float).reshape(m, -1)[:, 0]
    bases = [_REGIME.fullmatch(label)[1] for label in _per_regime(labels, name, m)]
    return [f"regime {j} ({bases[j]} {values[j]:.4g})" for j in range(m)]


def _spread(table: pd.DataFrame) -> pd.Series:
    """The standard error (mle) or posterior sd (nuts) of each parameter, by name."""
    column = "stderr" if "stderr" in table else "sd"
    return table.set_index("parameter")[column].astype(float)


def label_warnings(spec, labels: dict, table: pd.DataFrame) -> list[str]:
    """A warning when the labelling parameter (``regime_ordering``) of two neighbouring
    regimes differs by less than ``LABEL_SEPARATION`` standard errors of the difference
    (sqrt(se_i^2 + se_j^2), their covariance ignored), naming the parameter the two regimes
    differ in most (by the same measure)."""
    from ..models.markov_switching import regime_ordering

    m = spec.structure.num_regimes
    name = regime_ordering(spec).parameter
    if m == 1 or name is None:
        return []
    estimate = table.set_index("parameter")["estimate"].astype(float)
    spread = _spread(table)
    first = _per_regime(labels, name, m)
    out = []
    for j in range(m - 1):
        a, b = first[j], first[j + 1]
        scale = math.hypot(spread[a], spread[b])
        gap = estimate[b] - estimate[a]
        if not (math.isfinite(scale) and gap < LABEL_SEPARATION * scale):
            continue
        base = _REGIME.fullmatch(a)[1]
        text = (
            f"the regime labels rest on {base}, which barely differs between regimes {j} and "
            f"{j + 1}: {estimate[a]:.4g} and {estimate[b]:.4g}, {gap:.3g} apart, within "
            f"{LABEL_SEPARATION:g} standard errors of the difference ({scale:.3g}; the two "
            "estimates' covariance ignored)"
        )
        best, most = 0.0, None
        for other in estimate.index:
            match = _REGIME.fullmatch(other)
            if not match or match[2] != str(j) or other in first or other.startswith("p["):
                continue
            twin = f"{match[1]}[{j + 1}]"
            if twin not in estimate.index:
                continue
            size = math.hypot(spread[other], spread[twin])
            z = abs(estimate[twin] - estimate[other]) / size if size > 0 else math.nan
            if math.isfinite(z) and z > best:
                best, most = z, (match[1], estimate[other], estimate[twin])
        if most is not None and best > LABEL_SEPARATION:
            text += (
                f"; they differ more in {most[0]} ({most[1]:.4g} and {most[2]:.4g}, "
                f"{best:.3g} standard errors apart)"
            )
        out.append(text + f": read regime {j} as 'lower {base}' with caution")
    return out


def optima_warnings(result, spec, labels: dict) -> list[str]:
    """A warning when another local optimum of a multi-start fit lies within
    ``OPTIMA_NATS`` log-likelihood units of the best: its log-likelihood and starts, and, when
    the fit keeps each optimum's estimate (``LocalOptima.thetas``), the labelled parameters
    that differ most from the best's (in standard errors of the best, else relatively)."""
    optima = result.local_optima
    if optima is None or len(optima.log_likelihoods) < 2:
        return []
    values = np.asarray(optima.log_likelihoods, float)
    near = [i for i in range(1, values.size) if values[0] - values[i] <= OPTIMA_NATS]
    if not near:
        return []
    total = int(np.sum(optima.num_starts))
    others = "; ".join(
        f"{values[i]:.4f} ({int(optima.num_starts[i])} of {total} starts, "
        f"{values[0] - values[i]:.4f} lower)"
        for i in near
    )
    text = (
        f"{len(near)} other local optim{'um lies' if len(near) == 1 else 'a lie'} within "
        f"{OPTIMA_NATS:g} log-likelihood units of the best ({values[0]:.4f}, "
        f"{int(optima.num_starts[0])} of {total} starts): {others}"
    )
    thetas = getattr(optima, "thetas", None)
    if thetas is not None and len(thetas) > near[0]:
        runner = thetas[near[0]]
        rows = []
        for name in spec.free:
            ours = np.ravel(np.asarray(result.theta[name], float))
            theirs = np.ravel(np.asarray(runner[name], float))
            se = np.ravel(np.asarray(result.stderr[name], float))
            for i, label in enumerate(labels[name]):
                gap = abs(theirs[i] - ours[i])
                if math.isfinite(se[i]) and se[i] > 0:
                    size, unit = gap / se[i], "standard errors"
                else:
                    size, unit = gap / max(abs(ours[i]), abs(theirs[i]), 1e-300), "relative"
                rows.append((size, unit, label, ours[i], theirs[i]))
        rows.sort(key=lambda r: -r[0])
        named = ", ".join(
            f"{label} ({ours:.4g} against {theirs:.4g}"
            + (f", {size:.3g} standard errors)" if unit == "standard errors" else ")")
            for size, unit, label, ours, theirs in rows[:3]
        )
        text += f"; the first differs most in {named}"
    return [
        text + ": the data barely prefer the estimate reported over a different one; compare "
        "them (local_optima.csv) before reading much into either"
    ]


def parameter_note(spec) -> str:
    """What the parameter names of parameters.csv mean, for the model of ``spec`` (plain
    text)."""
    st = spec.structure
    m = st.num_regimes
    parts = []
    if st.kind == "var":
        parts.append(
            "const.A[j]: the intercept nu of series A in regime j; A.Lk.B[j]: the coefficient "
            "of B_(t-k) in the equation of A (row A of A_k); sigma[A,B][j]: the noise "
            "covariance Sigma_AB, both off-diagonal entries listed (sigma[A,B] = sigma[B,A]); "
            "statsmodels has no MS-VAR: the names follow its VAR's (L1.B in equation A)"
        )
    else:
        parts.append(
            "statsmodels' names: const[j] the intercept (MS-AR: the mean) of regime j, sigma2 "
            "the noise variance (sigma2[j] when it switches), ar.Lk the AR coefficients, the "
            "regressors by their columns ([j] when they switch)"
        )
    if st.num_tvtp:
        parts.append(
            "p[i->j].const and p[i->j].COL: gamma_ij, the weights of the constant and of "
            "column COL in P_t[i, j] = softmax_j(z_t' gamma_ij) (statsmodels: p[i->j].tvtp0, "
            f"p[i->j].tvtp1, ...); gamma_(i,{m - 1}) = 0, the reference, is not listed"
        )
    elif m > 1:
        listed = "p[i->0]" if m == 2 else f"p[i->0] to p[i->{m - 2}]"
        parts.append(
            f"p[i->j] = P(s_t = j | s_(t-1) = i); statsmodels lists only {listed}: "
            f"p[i->{m - 1}] = 1 - the others of row i, listed here too"
        )
    return "; ".join(parts) + "."


# metrics shown as True / False and as whole numbers in the page
_BOOLEAN_METRICS = ("converged", "on_boundary")
_COUNT_METRICS = ("num_observations", "num_parameters", "iterations", "divergences")


def metrics_display(frame: pd.DataFrame) -> pd.DataFrame:
    """metrics.csv for the page: full precision (``repr``), booleans as True / False, counts
    as integers."""
    values = []
    for metric, value in zip(frame["metric"], frame["value"], strict=True):
        value = float(value)
        if metric in _BOOLEAN_METRICS:
            values.append(str(bool(value)))
        elif metric in _COUNT_METRICS and value.is_integer():
            values.append(str(int(value)))
        else:
            values.append(repr(value))
    return pd.DataFrame({"value": values}, index=pd.Index(frame["metric"], name="metric"))


def time_labels(data, horizon: int = 0) -> list[str]:
    """The time of each row of the series and of the H steps ahead, as text: the --time
    column's (numbers as %.15g), the steps ahead with no time in the file as 'T+h' (the last
    time + h steps); without --time the row numbers 1..T, T+1..T+H."""
    t = data.y.values.shape[0]
    axis = data.time
    if axis is None:
        return [str(i) for i in range(1, t + horizon + 1)]

    def text(v):
        return f"{v:.15g}" if axis.kind == "number" else str(v)

    known = [text(v) for v in (*axis.values, *axis.future[:horizon])]
    last = text(axis.values[-1])
    return known + [f"{last}+{h}" for h in range(len(known) - t + 1, horizon + 1)]


def figure_regimes(data, order, probs, forecast=None, names: list[str] | None = None) -> bytes:
    """The series (with the forecast's mean and intervals) over the smoothed regime
    probabilities P(s_t = j | y_{1:T}) (and the forecast ones, dotted), one step per row on
    the x-axis, labelled by the --time column when there is one; ``names`` label the
    regimes in the legend (``regime_names``)."""
    y = data.y.values
    t = np.arange(1, y.shape[0] + 1)
    horizon = 0 if forecast is None else forecast.mean.shape[0]
    names = names or [f"regime {j}" for j in range(probs.shape[1])]
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(10, 5.6), sharex=True, layout="constrained", height_ratios=(3, 2)
    )
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for c, name in enumerate(data.y.columns):
        color = "0.2" if y.shape[1] == 1 else colors[c % len(colors)]
        top.plot(t, y[:, c], color=color, lw=1.1, label=name)
        if forecast is None:
            continue
        h = t[-1] + np.arange(1, horizon + 1)
        fill = "tab:blue" if y.shape[1] == 1 else color
        for k, level in enumerate(forecast.levels):
            top.fill_between(
                h,
                forecast.lower[k, :, c],
                forecast.upper[k, :, c],
                color=fill,
                alpha=0.15 + 0.15 * (k == 0),
                lw=0,
                label=f"{level:.0%} forecast interval" if c == 0 else None,
            )
        top.plot(
            h,
            forecast.mean[:, c],
            "--",
            color=fill,
            lw=1.4,
            label=f"forecast mean ({forecast.draws.shape[0]} paths)" if c == 0 else None,
        )
    top.set_ylabel(data.y.columns[0] if y.shape[1] == 1 else "y")
    top.legend(fontsize=8, loc="best")
    skip = order or 0
    for j in range(probs.shape[1]):
        bottom.plot(t[skip:], probs[:, j], color=colors[j % len(colors)], lw=1.2, label=names[j])
    if forecast is not None:
        h = t[-1] + np.arange(1, horizon + 1)
        for j in range(probs.shape[1]):
            bottom.plot(
                h,
                forecast.regime_probs[:, j],
                ":",
                color=colors[j % len(colors)],
                lw=1.2,
                label="forecast P(s_T+h = j | y_1:T) (dotted)" if j == 0 else None,
            )
    bottom.set_ylim(-0.02, 1.02)
    if data.time is None:
        bottom.set_xlabel("t (row of the series)")
    else:
        labels = time_labels(data, horizon)

        def tick(value, _):
            i = round(value)
            return labels[i - 1] if abs(value - i) < 1e-9 and 1 <= i <= len(labels) else ""

        bottom.xaxis.set_major_locator(MaxNLocator(nbins=8, integer=True))
        bottom.xaxis.set_major_formatter(FuncFormatter(tick))
        bottom.set_xlabel(f"{data.time.name} (one step per row)")
    title = "smoothed P(s_t = j | y_1:T)"
    bottom.set_ylabel(title if forecast is None else f"{title};\nforecast: dotted")
    bottom.legend(fontsize=8, ncol=min(probs.shape[1] + (forecast is not None), 4), loc="best")
    return png_bytes(fig)


def _cell(value, key: str = "") -> str:
    """One number of the terminal table, 11 characters wide (p-values to 3 decimals, as
    statsmodels prints them)."""
    if value is None or not math.isfinite(value):
        text = "nan" if value is None or math.isnan(value) else str(value)
    elif key == "p_value":
        text = f"{value:.3f}"
    else:
        text = f"{value:.4g}"
    return f"{text:>11}"


def summary_text(
    title: str, info: list[tuple[str, str]], table: pd.DataFrame, durations, optima, warnings
) -> str:
    """The terminal summary, laid out like statsmodels' ``summary()``: the model and fit
    statistics, one line per parameter, the expected durations, the local optima, warnings."""
    width = 78
    lines = ["=" * width, title, "-" * width]
    lines += [f"{key:<28} {value}" for key, value in info]
    lines.append("-" * width)
    name_width = max(12, *(len(p) for p in table["parameter"]))
    if "stderr" in table:
        head = ["estimate", "std err", "z", "P>|z|", "[0.025", "0.975]"]
        keys = ["estimate", "stderr", "z", "p_value", "lower_95", "upper_95"]
    else:
        head = ["mean", "sd", "q5", "q95", "r_hat", "ess_bulk"]
        keys = ["estimate", "sd", "q5", "q95", "r_hat", "ess_bulk"]
    lines.append(" " * name_width + "".join(f"{h:>11}" for h in head))
    for row in table.itertuples(index=False):
        cells = "".join(_cell(getattr(row, k), k) for k in keys)
        mark = " (boundary)" if getattr(row, "on_boundary", False) else ""
        lines.append(f"{row.parameter:<{name_width}}{cells}{mark}")
    if "note" in table:
        for note in dict.fromkeys(n for n in table["note"] if n):
            named = list(table.loc[table["note"] == note, "parameter"])
            which = "any parameter" if len(named) == len(table) else ", ".join(named)
            lines.append(f"no std err for {which}: {note}")
    lines.append("-" * width)
    if durations is not None:
        kind = durations["kind"].iloc[0]
        lines.append(f"expected durations ({kind}):")
        lines.append(
            "  "
            + ", ".join(
                f"regime {r.regime} {r.expected_duration:.4g}" for r in durations.itertuples()
            )
        )
    if optima is not None:
        lines.append(
            f"local optima ({optima.shape[0]} distinct; log-likelihood: starts that ended there, "
            "converged):"
        )
        lines.append(
            "  "
            + "; ".join(
                f"{r.log_likelihood:.4f}: {r.starts}, {r.converged}" for r in optima.itertuples()
            )
        )
    lines += [f"warning: {w}" for w in warnings]
    lines.append("=" * width)
    return "\n".join(lines)


def page_body(title, data, spec, method, ordering, info, tables, warnings, figure, files):
    """The page: the model, the settings, the warnings, the tables, the figure."""
    table, durations, optima, metrics, forecast, paths = tables
    y = data.y
    warning_html = "".join(f"\n<p><strong>Warning:</strong> {html.escape(w)}</p>" for w in warnings)
    blank = ""
    if "stderr" in table and table["stderr"].isna().any():
        blank = (
            " A blank standard error is explained in the note column: an estimate on the "
            "boundary of its support (it has no Gaussian limit; the other standard errors are "
            "those of the model with it fixed there), EM (it computes none), or a Hessian that "
            "is not negative definite."
        )
    tvtp = ""
    if data.tvtp is not None:
        tvtp = (
            " Transition probabilities vary with time (TVTP): P<sub>t</sub>[i, j] = "
            "softmax<sub>j</sub>(z<sub>t</sub>' &gamma;<sub>ij</sub>), "
            "&gamma;<sub>i,M&minus;1</sub> = 0, "
            f"z<sub>t</sub> = (1, {html.escape(', '.join(data.tvtp.columns))}): the command adds "
            "the constant. The expected durations are averages over the sample's rows."
        )
    durations_html = ""
    if durations is not None:
        durations_html = f"""
<h2>Expected durations</h2>
<p class="note">{html.escape(durations["kind"].iloc[0])} steps, at the estimate; inf: an absorbing
regime (p_jj = 1). In <code>durations.csv</code>.</p>
{table_html(durations.set_index("regime"))}"""
    optima_html = ""
    if optima is not None:
        optima_html = f"""
<h2>Local optima</h2>
<p class="note">The distinct end points of the optimiser's starts (log-likelihoods within 1e-4
of each other are one), best first, with how many starts ended there and how many of those
converged. In <code>local_optima.csv</code>.</p>
{table_html(optima, float_format="{:.10g}", index=False)}"""
    forecast_html = ""
    if forecast is not None:
        plug = " at the posterior mean (a plug-in forecast)" if method == "nuts" else ""
        mc_se = float(np.nanmax(forecast.filter(like="mean_mc_se").to_numpy()))
        times = ""
        if data.time is not None:
            times = (
                f" Column time: the --time column ({html.escape(data.time.name)}) of the rows "
                "after the last y; a step with no row there is written LAST+h (h steps after "
                "the last time of the series)."
            )
        forecast_html = f"""
<h2>Forecast</h2>
<p class="note">y<sub>T+h</sub> given y<sub>1:T</sub>{plug}: simulated paths from the filtered
regime probabilities at T (forecast_switching), their mean and central 50% and 90% intervals,
and the exact regime probabilities P(s<sub>T+h</sub> = j | y<sub>1:T</sub>). The mean and the
quantiles are Monte Carlo, over {paths} paths: the standard error of the mean is in column
mean_mc_se (at most {mc_se:.3g} here).{times} Regressors and TVTP covariates over the horizon
are the file's rows after the last y (column line). In <code>forecast.csv</code>.</p>
{table_html(forecast, index=False)}"""
    listing = ", ".join(f"<code>{f}</code>" for f in sorted([*files, "index.html", MANIFEST]))
    shown = table.copy()
    if "on_boundary" in shown:
        shown["on_boundary"] = shown["on_boundary"].map(str)
    regimes = dict(info).get("regimes")
    names = f" At the estimate: {html.escape(regimes)}." if regimes else ""
    axis = "" if data.time is None else f", labelled by {html.escape(data.time.name)}"
    columns = (
        "estimate, standard error, z, two-sided p-value, 95% interval"
        if "stderr" in table
        else "posterior mean, sd, 5% and 95% quantiles, R-hat, bulk ESS"
    )
    return f"""
<h1>attnbayes regimes: {html.escape(Path(y.path).name)}</h1>
<p>{html.escape(title)}: {model_equation(spec, y.columns)}, s<sub>t</sub> a Markov chain with
P[i, j] = P(s<sub>t</sub> = j | s<sub>t&minus;1</sub> = i).{tvtp} Fitted by
{html.escape(_METHOD_TEXT[method])}.</p>
{settings_table(dict(info))}
{warning_html}
<h2>Parameters</h2>
<p class="note">{html.escape(parameter_note(spec))} Columns: {columns}.{blank} In
<code>parameters.csv</code>.</p>
{table_html(shown.set_index("parameter"))}
{durations_html}
<h2>Fit</h2>
{table_html(metrics_display(metrics))}
{optima_html}
<h2>Smoothed regime probabilities</h2>
<p class="note">P(s<sub>t</sub> = j | y<sub>1:T</sub>) at the estimate (Kim's backward recursion
on Hamilton's filter, exact). Regime labels: {html.escape(ordering)}{names} In
<code>regimes.csv</code> and <code>regimes.png</code> (one step per row on its x-axis{axis}).</p>
{img_tag(figure, "series and smoothed regime probabilities")}
{forecast_html}
<p class="note">Files: {listing}.</p>
"""


__all__ = [
    "LABEL_SEPARATION",
    "OPTIMA_NATS",
    "Z_95",
    "column_names",
    "conditioned_text",
    "durations_table",
    "figure_regimes",
    "fit_warnings",
    "label_warnings",
    "metrics_display",
    "model_equation",
    "model_name",
    "nuts_table",
    "optima_warnings",
    "page_body",
    "parameter_labels",
    "parameter_note",
    "point_table",
    "regime_names",
    "statsmodels_differs",
    "summary_text",
    "switching_parameters",
    "time_labels",
]
