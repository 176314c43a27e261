"""``attnbayes regimes``: a Markov-switching model of a user's series, fitted and read as
statsmodels users read ``MarkovRegression`` and ``MarkovAutoregression`` (and an MS-VAR,
which statsmodels does not have).

Models (``attnbayes.models.markov_switching``), s_t a Markov chain on M regimes (``--regimes``)
with P[i, j] = P(s_t = j | s_{t-1} = i):

- without ``--order``: Markov-switching regression (Hamilton 1989; Kim and Nelson 1999, ch. 4),
  ``markov_switching_regression``,

      y_t = mu_{s_t} + x_t' beta_{s_t} + e_t,   e_t ~ N(0, sigma^2_{s_t}),

  x_t the ``--exog`` columns (their coefficients switch, statsmodels' default
  ``switching_exog=True``, but those ``--common-exog`` names), sigma^2 one for all regimes
  unless ``--switching-variance``; ``--trend n`` drops mu (statsmodels' ``trend="n"``);
- with ``--order P``: Hamilton's (1989) MS-AR(p), ``markov_switching_ar``,

      y_t - mu_{s_t} = sum_{k=1..p} phi_k (y_{t-k} - mu_{s_{t-k}}) + e_t,

  phi one for all regimes unless ``--switching-ar``; the first p values are conditioned on;
- with several ``--y`` columns and ``--order P``: the MS-VAR(p) (Krolzig 1997),
  ``markov_switching_var``, y_t = nu_{s_t} + sum_l A_{l, s_t} y_{t-l} + e_t,
  e_t ~ N(0, Sigma_{s_t}), A and Sigma switching with ``--switching-ar`` and
  ``--switching-variance``;
- ``--tvtp COLS``: time-varying transition probabilities (Filardo 1994; Diebold, Lee and
  Weinbach 1994), P_t[i, j] = softmax_j(z_t' gamma_ij) with gamma_{i, M-1} = 0 and
  z_t = (1, the --tvtp columns of row t): the command adds the constant, as statsmodels users
  do with ``add_constant``.

Fitted by maximum likelihood (``fit_switching``: L-BFGS from several starts, standard errors
from the Hessian), EM (no standard errors) or NUTS over the parameters (the regimes integrated
out by Hamilton's filter, ``switching_marginal_model``; the posterior mean is the estimate). The
regimes are labelled by the suite's convention (``regime_ordering``: increasing intercept or
mean; of the first series for an MS-VAR; with ``--trend n`` the first switching coefficient,
else the variance), and the terminal and the page say which. Outputs in OUT/NAME:
``parameters.csv`` (estimate, standard error, z, p-value, the 95% interval, on the boundary, why
a standard error is blank; NUTS: posterior mean, sd, quantiles, R-hat, ESS), ``durations.csv``
(1 / (1 - p_ii); with TVTP averaged over the sample), ``regimes.csv`` (the smoothed regime
probabilities P(s_t = j | y_{1:T}) per row), ``regimes.png`` (the series, the forecast, the
probabilities), ``metrics.csv`` (log-likelihood, AIC, BIC, HQIC, observations, parameters,
convergence, on the boundary), ``local_optima.csv`` (mle, em), ``forecast.csv`` (``--horizon
H``: ``forecast_switching``, means, 50% and 90% intervals and regime probabilities; NUTS: at the
posterior mean), ``fit_posterior.nc`` (nuts), ``index.html`` and ``run.json``. A summary like
statsmodels' ``summary()`` goes to the terminal.

The rows: those from the first to the last value of ``--y`` are the series (rows before it
are left out, and said so); every value of y, ``--exog`` and ``--tvtp`` in them must be a
number. The rows after the last y carry the future regressors and TVTP covariates a forecast
needs (``--horizon H`` with --exog or --tvtp uses the first H of them, which must be complete).

Bad input is refused (``InputError``, exit status 2) before any JAX work, naming the file,
line and column or the option (``read_regimes_data``, ``check_regimes``).
"""

from __future__ import annotations

import html
import math
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..validation import max_scaled_spread
from .filter_fit import FIT_ITERATIONS, nuts_fit, nuts_warnings
from .outputs import MANIFEST, check_finite_output, check_finite_table, computing, prepare_target
from .pages import img_tag, png_bytes, settings_table, table_html
from .parser import (
    FIT_METHODS,
    FIT_NUTS_SIZES,
    REGIMES_LEVELS,
    REGIMES_METHOD,
    REGIMES_TRENDS,
)
from .runs import (
    check_columns_unique,
    check_count,
    datatree_writer,
    default_name,
    publish_run,
    sizes_from_options,
)
from .user_data import InputError, Table, read_table

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


class RegimesData(NamedTuple):
    """The columns of ``attnbayes regimes``, cut to the series' rows.

    Attributes:
        y: ``Table`` of --y (T, 1): the rows from its first to its last value.
        exog: ``Table`` of --exog (T, k) on the same rows, or None.
        tvtp: ``Table`` of --tvtp (T, k_tvtp) on the same rows, or None.
        future_exog, future_tvtp: (F, k), (F, k_tvtp) the complete rows after the last y
            (their count F is that of the leading complete rows), or None.
        future_lines: (F,) their lines in the file.
        skipped: the lines before the first y (left out).
    """

    y: Table
    exog: Table | None
    tvtp: Table | None
    future_exog: np.ndarray | None
    future_tvtp: np.ndarray | None
    future_lines: np.ndarray
    skipped: tuple[int, ...]


def _rows(table: Table, keep: slice) -> Table:
    return table._replace(values=table.values[keep], lines=table.lines[keep])


def read_regimes_data(path, y, exog=None, tvtp=None, *, delimiter: str = ",") -> RegimesData:
    """Read --y (one column, or several for an MS-VAR), --exog and --tvtp (header names or
    1-based numbers) from one CSV (``read_table``'s format and messages, naming the option).

    The series is the rows from the first to the last row with every --y value (the rows
    before it are left out and listed in ``skipped``). Refused (``InputError``): a missing or
    unknown column, a cell that is not a number, a column named twice or as both y and a
    covariate, no row with every y, a missing y or --exog / --tvtp cell inside the series."""
    ys = read_table(
        path,
        delimiter=delimiter,
        columns=list(y),
        prefix="column",
        option="--y",
        allow_missing=True,
    )
    others = {}
    for option, columns in (("--exog", exog), ("--tvtp", tvtp)):
        if columns is None:
            continue
        table = read_table(
            path,
            delimiter=delimiter,
            columns=list(columns),
            prefix="column",
            option=option,
            allow_missing=True,
        )
        shared = [j for j in table.positions if j in ys.positions]
        if shared:
            label = ys.columns[ys.positions.index(shared[0])]
            label = f'"{label}"' if ys.header else str(shared[0])
            raise InputError(
                f"{ys.path}: {option}: column {label} is also --y; the {option} columns must "
                "be other columns of the file"
            )
        others[option] = table
    complete = np.flatnonzero(~np.isnan(ys.values).any(axis=1))
    if complete.size == 0:
        what = "column" if ys.values.shape[1] == 1 else "columns"
        raise InputError(
            f"{ys.path}: --y {what} {', '.join(ys.columns)}: no row has a value"
            + ("" if ys.values.shape[1] == 1 else " in every one of them")
        )
    first, last = int(complete[0]), int(complete[-1])
    gaps = np.argwhere(np.isnan(ys.values[first : last + 1]))
    if gaps.size:
        i, j = (int(v) for v in gaps[0])
        raise InputError(
            f"{ys.where(first + i, j)}: missing value in the middle of --y; the regime models "
            "need every value from the first to the last row of the series (rows before the "
            "first and after the last are left out)"
        )
    keep = slice(first, last + 1)
    series = {}
    for option, table in others.items():
        cut = _rows(table, keep)
        bad = np.argwhere(np.isnan(cut.values))
        if bad.size:
            i, j = (int(v) for v in bad[0])
            raise InputError(
                f"{cut.where(i, j)}: missing value; every {option} cell in the rows of --y "
                f"(lines {int(cut.lines[0])}-{int(cut.lines[-1])}) needs a number"
            )
        series[option] = cut
    after = slice(last + 1, None)
    ready = np.ones(ys.values.shape[0] - last - 1, bool)
    for table in others.values():
        ready &= ~np.isnan(table.values[after]).any(axis=1)
    count = int(np.argmin(ready)) if not ready.all() else ready.size
    future = {option: table.values[after][:count] for option, table in others.items()}
    return RegimesData(
        y=_rows(ys, keep),
        exog=series.get("--exog"),
        tvtp=series.get("--tvtp"),
        future_exog=future.get("--exog"),
        future_tvtp=future.get("--tvtp"),
        future_lines=ys.lines[after][:count],
        skipped=tuple(int(v) for v in ys.lines[:first]),
    )


def _check_columns(table: Table, option: str, constant: bool = True) -> None:
    """Refuse a constant column when the model has a constant (it duplicates it), and columns
    collinear with each other (and the constant), naming ``option`` and the columns."""
    values = table.values
    if constant:
        for j, name in enumerate(table.columns):
            column = values[:, j]
            if np.all(column == column[0]):
                raise InputError(
                    f'{table.path}: {option}: column "{name}" is constant ({column[0]:g} on '
                    "every row of the series): it duplicates the constant the model already has"
                )
    design = np.column_stack([np.ones(values.shape[0]), values]) if constant else values
    if np.linalg.matrix_rank(design) < design.shape[1]:
        also = " (with each other and the constant)" if constant else ""
        raise InputError(
            f"{table.path}: {option}: the columns {', '.join(table.columns)} are collinear{also}: "
            "their coefficients are not identified; leave one out"
        )


def _check_magnitude(table: Table, option: str) -> None:
    """Refuse a value whose square overflows the filter's sums (``max_scaled_spread``)."""
    t, p = table.values.shape
    limit = max_scaled_spread(np.float64, t, p)
    bad = np.argwhere(np.abs(table.values) > limit)
    if bad.size:
        i, j = (int(v) for v in bad[0])
        raise InputError(
            f"{table.where(i, j)}: {table.values[i, j]:.3g} is too large: {option} values must "
            f"stay below {limit:.2g} in size (float64, T = {t}) for the squared residuals to be "
            "finite; rescale the column"
        )


def _free_scalars(spec) -> int:
    """statsmodels' k: the free scalars (a transition row of M entries counts M - 1, an o x o
    covariance o (o + 1) / 2)."""
    from numpyro.distributions import constraints

    count = 0
    for name in spec.free:
        shape = np.shape(spec.theta[name])
        size = int(np.prod(shape, dtype=int))
        if spec.support[name] is constraints.simplex:
            size -= size // shape[-1]
        elif spec.support[name] is constraints.positive_definite:
            size = size // (shape[-1] * shape[-1]) * shape[-1] * (shape[-1] + 1) // 2
        count += size
    return count


def model_name(order: int | None, num_regimes: int, num_series: int = 1) -> str:
    """'Markov-switching regression', '... AR(p)' or '... VAR(p) of o series', M regimes."""
    if order is None:
        what = "regression"
    elif num_series == 1:
        what = f"AR({order})"
    else:
        what = f"VAR({order}) of {num_series} series"
    return f"Markov-switching {what}, {num_regimes} regime{'s' if num_regimes > 1 else ''}"


def _check_options(data: RegimesData, order, m, trend, common_exog, switching_ar, variance):
    """The options that contradict each other or the columns; the switching flags of the
    regressors (True, or one per --exog column)."""
    o = data.y.values.shape[1]
    if trend not in REGIMES_TRENDS:
        raise InputError(f"--trend: unknown {trend!r}; choose from {list(REGIMES_TRENDS)}")
    if o > 1 and order is None:
        raise InputError(
            f"--y: {o} columns ({', '.join(data.y.columns)}) make an MS-VAR, which needs "
            "--order P (a Markov-switching regression models one series)"
        )
    if o > 1 and trend == "n":
        raise InputError("--trend n: the MS-VAR (several --y columns) always has intercepts")
    if order is None and switching_ar:
        raise InputError("--switching-ar applies with --order only (the AR coefficients)")
    if order is not None and data.exog is not None:
        raise InputError(
            "--exog applies without --order only: the MS-AR model (--order) has no regressors; "
            "drop --order for a Markov-switching regression on the --exog columns"
        )
    flags = True
    if common_exog is not None:
        if data.exog is None:
            raise InputError("--common-exog names --exog columns: give --exog too")
        names = list(data.exog.columns)
        positions = [str(j) for j in data.exog.positions]
        chosen = set()
        for item in common_exog:
            if item in names:
                chosen.add(names.index(item))
            elif item in positions:
                chosen.add(positions.index(item))
            else:
                raise InputError(
                    f"--common-exog: {item!r} is not an --exog column; the --exog columns are "
                    f"{', '.join(names)}"
                )
        flags = [j not in chosen for j in range(len(names))]
    if m == 1:
        for flag, given in (
            ("--switching-variance", variance),
            ("--switching-ar", switching_ar),
            ("--tvtp", data.tvtp is not None),
            ("--common-exog", common_exog is not None),
        ):
            if given:
                raise InputError(f"{flag} needs --regimes >= 2 (one regime has nothing to switch)")
    if trend == "n":
        if order is None and data.exog is None:
            raise InputError(
                "--trend n needs --exog: without an intercept or regressors, y has no mean"
            )
        switching = any(flags) if isinstance(flags, list) else True
        if order is not None:
            switching = switching_ar
        if m > 1 and not (switching or variance):
            what = "--switching-ar" if order is not None else "--exog columns not in --common-exog"
            raise InputError(
                f"--trend n with --regimes {m}: nothing would differ between the regimes; "
                f"switch something ({what}, or --switching-variance) or use --regimes 1"
            )
    return flags


def check_regimes(
    data: RegimesData,
    *,
    order: int | None = None,
    num_regimes: int = 2,
    trend: str = "c",
    common_exog=None,
    switching_variance: bool = False,
    switching_ar: bool = False,
    method: str = REGIMES_METHOD,
    horizon: int | None = None,
    num_starts: int | None = None,
    sizes: dict | None = None,
):
    """The option and data checks of ``run_regimes`` that need no JAX tracing; returns the
    ``SwitchingSpec`` (``markov_switching_regression``, ``markov_switching_ar`` or, for
    several --y columns, ``markov_switching_var``) and the future inputs of a forecast (or
    None)."""
    from ..inference.mcmc import check_sampler_sizes
    from ..models import markov_switching as ms

    m = check_count("--regimes", num_regimes, 1)
    order = check_count("--order", order, 1)
    horizon = check_count("--horizon", horizon, 1)
    if method not in FIT_METHODS:
        raise InputError(f"--method: unknown {method!r}; choose from {list(FIT_METHODS)}")
    if method != "mle" and num_starts is not None:
        raise InputError("--starts applies to --method mle only")
    check_count("--starts", num_starts, 1)
    if method != "nuts" and sizes:
        raise InputError("--draws, --warmup and --chains apply to --method nuts only")
    if method == "nuts":
        given = dict(sizes or {})
        full = sizes_from_options(
            FIT_NUTS_SIZES,
            given.get("num_warmup"),
            given.get("num_samples"),
            given.get("num_chains"),
        )
        try:
            check_sampler_sizes(
                full["num_samples"], full["num_chains"], names=("--draws", "--chains")
            )
        except ValueError as err:
            raise InputError(str(err)) from None
    flags = _check_options(data, order, m, trend, common_exog, switching_ar, switching_variance)
    y = data.y
    t, o = y.values.shape
    need = 3 if order is None else o * order + 3
    if t < need:
        what = "a regression" if order is None else f"an AR({order}) model"
        if o > 1:
            what = f"a VAR({order}) of {o} series"
        raise InputError(
            f"{y.path}: --y has {t} row(s) (lines {int(y.lines[0])}-{int(y.lines[-1])}); "
            f"{what} needs at least {need}"
            + ("" if order is None else "; lower --order or give more rows")
        )
    for j, name in enumerate(y.columns):
        column = y.values[:, j]
        if np.all(column == column[0]):
            raise InputError(
                f'{y.path}: --y column "{name}" is constant ({column[0]:g} on every row): '
                "there is nothing to model"
            )
    for table, option in ((y, "--y"), (data.exog, "--exog"), (data.tvtp, "--tvtp")):
        if table is not None:
            _check_magnitude(table, option)
            if option != "--y":
                _check_columns(table, option, constant=option == "--tvtp" or trend == "c")
    z = None
    if data.tvtp is not None:
        z = np.column_stack([np.ones(t), data.tvtp.values])
    try:
        if o > 1:
            spec = ms.markov_switching_var(
                y.values,
                order,
                num_regimes=m,
                switching_ar=switching_ar,
                switching_covariance=switching_variance,
                exog_tvtp=z,
            )
        elif order is None:
            spec = ms.markov_switching_regression(
                y.values[:, 0],
                None if data.exog is None else data.exog.values,
                num_regimes=m,
                trend=trend,
                switching_coefficients=flags,
                switching_variance=switching_variance,
                exog_tvtp=z,
            )
        else:
            spec = ms.markov_switching_ar(
                y.values[:, 0],
                order,
                num_regimes=m,
                trend=trend,
                switching_ar=switching_ar,
                switching_variance=switching_variance,
                exog_tvtp=z,
            )
    except ValueError as err:
        raise InputError(f"{y.path}: the model refuses the data: {err}") from None
    k = _free_scalars(spec)
    rows = spec.observations.shape[0]
    if rows <= k:
        used = "" if order is None else f" (the first {order} are conditioned on)"
        raise InputError(
            f"{y.path}: too few rows: {rows} observation(s){used} for {k} free parameters "
            f"({model_name(order, m, o)}); give more rows or a smaller model"
        )
    future = _future_inputs(data, spec, horizon, order)
    check_columns_unique(regimes_columns(y.columns, m))
    return spec, future


def _future_inputs(data: RegimesData, spec, horizon, order):
    """The inputs over the horizon ``forecast_switching`` needs: a regression's [x, 1, z] rows
    (the file's rows after the last y), an MS-AR's or MS-VAR's [1, z] rows; None without
    covariates."""
    if horizon is None:
        return None
    needs = [o for o, t in (("--exog", data.exog), ("--tvtp", data.tvtp)) if t is not None]
    if not needs:
        return None
    available = data.future_lines.shape[0]
    if available < horizon:
        last = int(data.y.lines[-1])
        raise InputError(
            f"--horizon {horizon}: the forecast needs the future values of the "
            f"{' and '.join(needs)} column(s): give them in {horizon} complete row(s) after "
            f"the last --y value (line {last}), with the --y cell empty; {data.y.path} has "
            f"{available}"
        )
    parts = []
    if order is None and data.exog is not None:
        parts.append(data.future_exog[:horizon])
    if data.tvtp is not None:
        parts += [np.ones((horizon, 1)), data.future_tvtp[:horizon]]
    return np.column_stack(parts)


def regimes_columns(y_names, num_regimes: int) -> list[str]:
    """The columns of regimes.csv."""
    return ["t", "line", *y_names, *(f"smoothed_prob_regime{j}" for j in range(num_regimes))]


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


def figure_regimes(data: RegimesData, order, probs, forecast=None) -> bytes:
    """The series (with the forecast's mean and intervals) over the smoothed regime
    probabilities P(s_t = j | y_{1:T})."""
    y = data.y.values
    t = np.arange(1, y.shape[0] + 1)
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(10, 5.6), sharex=True, layout="constrained", height_ratios=(3, 2)
    )
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for c, name in enumerate(data.y.columns):
        color = "0.2" if y.shape[1] == 1 else colors[c % len(colors)]
        top.plot(t, y[:, c], color=color, lw=1.1, label=name)
        if forecast is None:
            continue
        h = t[-1] + np.arange(1, forecast.mean.shape[0] + 1)
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
            label="forecast mean" if c == 0 else None,
        )
    top.set_ylabel(data.y.columns[0] if y.shape[1] == 1 else "y")
    top.legend(fontsize=8, loc="best")
    skip = order or 0
    for j in range(probs.shape[1]):
        bottom.plot(
            t[skip:], probs[:, j], color=colors[j % len(colors)], lw=1.2, label=f"regime {j}"
        )
    if forecast is not None:
        h = t[-1] + np.arange(1, forecast.mean.shape[0] + 1)
        for j in range(probs.shape[1]):
            bottom.plot(h, forecast.regime_probs[:, j], ":", color=colors[j % len(colors)], lw=1.2)
    bottom.set_ylim(-0.02, 1.02)
    bottom.set_xlabel("t (row of the series)")
    bottom.set_ylabel("P(s_t = j | y_1:T)")
    bottom.legend(fontsize=8, ncol=min(probs.shape[1], 4), loc="best")
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


def run_regimes(
    data: RegimesData,
    *,
    order: int | None = None,
    num_regimes: int = 2,
    trend: str = "c",
    common_exog=None,
    switching_variance: bool = False,
    switching_ar: bool = False,
    method: str = REGIMES_METHOD,
    horizon: int | None = None,
    num_starts: int | None = None,
    num_warmup: int | None = None,
    num_samples: int | None = None,
    num_chains: int | None = None,
    seed: int = 0,
    out_dir="reports",
    name: str | None = None,
    progress: Callable[[str], None] | None = None,
    summary: Callable[[str], None] | None = None,
    argv: list[str] | None = None,
) -> Path:
    """Fit a Markov-switching regression, MS-AR or (several --y columns) MS-VAR model to
    ``data`` and write OUT/NAME/.

    Args:
        data: ``read_regimes_data``'s columns.
        order: p of an MS-AR(p) / MS-VAR(p) model, or None for a Markov-switching regression.
        num_regimes: M >= 1.
        trend: "c" (a switching intercept / mean) or "n" (none; not for an MS-VAR).
        common_exog: --exog columns whose coefficients do not switch (the others do).
        switching_variance, switching_ar: the noise variance (MS-VAR: covariance) / AR
            coefficients differ by regime.
        method: "mle", "em" or "nuts".
        horizon: H, forecast y_{T+1..T+H} (None: no forecast).
        num_starts: optimiser starts of mle (default ``fit_switching``'s).
        num_warmup, num_samples, num_chains: NUTS sizes (default 2 x (500 + 500)).
        seed: seed of the ``jax.random`` key (starts, NUTS, forecast draws).
        out_dir, name: the output folder OUT/NAME; NAME defaults to ``<stem>-regimes-<method>``.
        progress: called with short messages and the warnings (``warning: ...``).
        summary: called once with the statsmodels-like summary (``summary_text``).
        argv: the command line, recorded in run.json.

    Returns:
        The path of OUT/NAME/index.html.
    """
    given = {
        k: v
        for k, v in (
            ("num_warmup", num_warmup),
            ("num_samples", num_samples),
            ("num_chains", num_chains),
        )
        if v is not None
    }
    spec, future = check_regimes(
        data,
        order=order,
        num_regimes=num_regimes,
        trend=trend,
        common_exog=common_exog,
        switching_variance=switching_variance,
        switching_ar=switching_ar,
        method=method,
        horizon=horizon,
        num_starts=num_starts,
        sizes=given,
    )
    sizes = sizes_from_options(FIT_NUTS_SIZES, num_warmup, num_samples, num_chains)
    seed = check_count("--seed", seed, 0)
    y = data.y
    target = prepare_target(out_dir, name or default_name(y.path, "regimes", method))
    say = progress or (lambda message: None)
    started = time.perf_counter()

    import jax

    from ..inference.switching.learning import (
        forecast_switching,
        smoothed_regime_probabilities,
        switching_log_likelihood,
    )
    from ..models.markov_switching import regime_ordering

    m = spec.structure.num_regimes
    exog_names = () if data.exog is None else data.exog.columns
    tvtp_names = () if data.tvtp is None else data.tvtp.columns
    o = y.values.shape[1]
    labels = parameter_labels(spec, exog_names, tvtp_names, y.columns)
    ordering = column_names(regime_ordering(spec).description, spec, exog_names, y.columns)
    title = model_name(order, m, o)
    say(f"{title}: --method {method} on {spec.observations.shape[0]} observations")
    say(f"regime labels: {ordering}")
    key = jax.random.PRNGKey(seed)
    fit_key, forecast_key = jax.random.split(key)
    files, metrics, optima = {}, [], None
    with computing():
        if method == "nuts":
            start = None
            if o > 1:  # from NumPyro's default start the chains can settle in a poorer mode
                from ..inference.switching import fit_switching

                say("--method nuts: the chains start at the maximum-likelihood estimate")
                mle = fit_switching(fit_key, spec, max_iterations=FIT_ITERATIONS)
                start = {n: np.asarray(mle.theta[n]) for n in spec.free}
                fit_key = jax.random.fold_in(fit_key, 1)
            theta, columns, nuts_metrics, tree = nuts_fit(
                fit_key, spec, spec.free, "exact", sizes, init_values=start
            )
            check_finite_output(
                "the posterior mean of the parameters",
                np.concatenate([np.ravel(theta[n]) for n in spec.free]),
                axis_name="parameter",
            )
            table = nuts_table(spec, labels, theta, columns)
            warnings = nuts_warnings(
                table,
                sizes["num_chains"],
                option="--method nuts",
                use="the posterior mean (the estimate, the regime probabilities, the forecast)",
            )
            divergences = dict(nuts_metrics).get("fit_divergences", 0)
            if divergences:
                warnings.append(
                    f"{int(divergences)} divergent transitions: the posterior may be biased; "
                    "run longer warmup (--warmup)"
                )
            log_lik = float(switching_log_likelihood(spec, theta, likelihood="exact"))
            metrics += [("log_likelihood_at_posterior_mean", log_lik)]
            metrics += [(k.removeprefix("fit_"), v) for k, v in nuts_metrics]
            files["fit_posterior.nc"] = datatree_writer(tree)
            num_obs = spec.observations.shape[0]
            stats = [("log-lik. at posterior mean", f"{log_lik:.4f}")]
        else:
            from ..inference.switching import fit_switching
            from ..inference.switching.learning import information_criteria

            result = fit_switching(
                fit_key,
                spec,
                method=method,
                num_starts=num_starts,
                max_iterations=FIT_ITERATIONS,
            )
            theta = result.theta
            check_finite_output(
                "the fitted parameters",
                np.concatenate([np.ravel(theta[n]) for n in spec.free]),
                axis_name="parameter",
            )
            table = point_table(spec, labels, result)
            warnings = fit_warnings(result)
            criteria = information_criteria(result)
            log_lik = float(result.log_likelihood[-1])
            num_obs = result.num_observations
            metrics += [
                ("log_likelihood", log_lik),
                ("aic", criteria["aic"]),
                ("bic", criteria["bic"]),
                ("hqic", criteria["hqic"]),
                ("num_observations", num_obs),
                ("num_parameters", result.num_parameters),
                ("converged", float(result.converged)),
                ("iterations", len(result.log_likelihood) - 1),
                ("on_boundary", float(any(np.any(v) for v in result.on_boundary.values()))),
            ]
            lo = result.local_optima
            optima = pd.DataFrame(
                {
                    "log_likelihood": lo.log_likelihoods,
                    "starts": lo.num_starts,
                    "converged": lo.num_converged,
                }
            )
            files["local_optima.csv"] = optima.to_csv(index=False)
            stats = [
                ("log-likelihood", f"{log_lik:.4f}"),
                (
                    "AIC / BIC / HQIC",
                    " / ".join(f"{criteria[c]:.4f}" for c in ("aic", "bic", "hqic")),
                ),
                ("free parameters", str(result.num_parameters)),
                ("converged", "yes" if result.converged else "NO"),
            ]
        say("smoothed regime probabilities")
        probs = smoothed_regime_probabilities(spec, theta, likelihood="exact")
        check_finite_output("the smoothed regime probabilities", probs)
        durations = durations_table(spec, theta) if m > 1 else None
        forecast = None
        if horizon is not None:
            say(f"forecast of {horizon} step(s)")
            forecast = forecast_switching(
                forecast_key,
                spec,
                theta,
                horizon,
                future_inputs=future,
                likelihood="exact",
                levels=REGIMES_LEVELS,
            )
            for label, values in (
                ("forecast mean", forecast.mean),
                ("forecast intervals", np.concatenate([forecast.lower, forecast.upper], 1)[0]),
                ("forecast regime probabilities", forecast.regime_probs),
            ):
                check_finite_output(label, values)
        metrics.insert(0, ("wall_time_s", time.perf_counter() - started))
        frame = pd.DataFrame(metrics, columns=["metric", "value"])
        check_finite_table("metrics", frame, label_columns=("metric",))
    for warning in warnings:
        say(f"warning: {warning}")

    files["parameters.csv"] = table.to_csv(index=False)
    files["metrics.csv"] = frame.to_csv(index=False)
    if durations is not None:
        files["durations.csv"] = durations.to_csv(index=False)
    skip = order or 0
    full = np.full((y.values.shape[0], m), np.nan)
    full[skip:] = probs
    regimes = pd.DataFrame(
        {"t": np.arange(1, y.values.shape[0] + 1), "line": y.lines}
        | {name: y.values[:, c] for c, name in enumerate(y.columns)}
        | {f"smoothed_prob_regime{j}": full[:, j] for j in range(m)}
    )
    files["regimes.csv"] = regimes.to_csv(index=False)
    forecast_frame = None
    if forecast is not None:
        forecast_frame = pd.DataFrame({"h": np.arange(1, horizon + 1)})
        if future is not None:
            forecast_frame["line"] = data.future_lines[:horizon]
        for c, column in enumerate(y.columns):
            tail = "" if o == 1 else f"_{column}"
            forecast_frame[f"mean{tail}"] = forecast.mean[:, c]
            for k, level in enumerate(forecast.levels):
                p = f"{round(level * 100):d}"
                forecast_frame[f"lower_{p}{tail}"] = forecast.lower[k, :, c]
                forecast_frame[f"upper_{p}{tail}"] = forecast.upper[k, :, c]
        for j in range(m):
            forecast_frame[f"prob_regime{j}"] = forecast.regime_probs[:, j]
        files["forecast.csv"] = forecast_frame.to_csv(index=False)
    figure = figure_regimes(data, order, probs, forecast)
    files["regimes.png"] = figure

    info = [
        ("data", f"{y.path}, --y {','.join(y.columns)}"),
        ("rows", f"lines {int(y.lines[0])}-{int(y.lines[-1])} ({y.values.shape[0]} rows)"),
        ("observations", str(num_obs) + (f" (the first {order} conditioned on)" if order else "")),
        (
            "method",
            method
            + (
                f" ({sizes['num_chains']} chains x {sizes['num_samples']} draws)"
                if method == "nuts"
                else ""
            ),
        ),
        *stats,
        ("regime labels", ordering),
    ]
    if data.skipped:
        info.append(("rows left out", f"{len(data.skipped)} before the first y"))
    if data.exog is not None:
        common = [c for c, f in zip(data.exog.columns, _switching(spec), strict=True) if not f]
        info.append(("regressors", ", ".join(data.exog.columns)))
        if common:
            info.append(("not switching", ", ".join(common)))
    if trend == "n":
        info.append(("trend", "n (no intercept)"))
    if data.tvtp is not None:
        info.append(("TVTP covariates", "const, " + ", ".join(data.tvtp.columns)))
    text = summary_text(title, info, table, durations, optima, warnings)
    if summary is not None:
        summary(text)
    elapsed = time.perf_counter() - started
    settings = {
        "y": list(y.columns) if o > 1 else y.columns[0],
        "exog": list(exog_names) or None,
        "common_exog": None if common_exog is None else list(common_exog),
        "trend": trend,
        "tvtp": list(tvtp_names) or None,
        "order": order,
        "regimes": m,
        "switching_variance": switching_variance,
        "switching_ar": switching_ar,
        "method": method,
        "horizon": horizon,
        "seed": seed,
        "regime_labels": ordering,
        "warnings": warnings,
        "rows_left_out": list(data.skipped),
    }
    if method == "mle":
        settings["starts"] = int(result.start_log_likelihoods.shape[0])
    if method == "nuts":
        settings |= {f"nuts_{k}": v for k, v in sizes.items()}
    if argv is not None:
        settings["argv"] = list(argv)
    body = _page_body(
        title,
        data,
        (order, trend),
        method,
        ordering,
        info,
        (table, durations, optima, frame, forecast_frame),
        warnings,
        figure,
        files,
    )
    return publish_run(target, files, "regimes", y, body, settings, elapsed, say)


def _switching(spec) -> tuple:
    """One flag per regressor: its coefficient switches."""
    flags = spec.structure.switching_coefficients
    k = spec.structure.num_inputs
    return (flags,) * k if isinstance(flags, bool) else tuple(flags)


def _equation(order, trend: str, data: RegimesData) -> str:
    """The model in HTML."""
    s_t = "<sub>s<sub>t</sub></sub>"
    if data.y.values.shape[1] > 1:
        return (
            f"y<sub>t</sub> = &nu;{s_t} + &sum;<sub>l=1..p</sub> A<sub>l,s<sub>t</sub></sub> "
            f"y<sub>t&minus;l</sub> + e<sub>t</sub>, e<sub>t</sub> ~ N(0, &Sigma;{s_t}) (Krolzig "
            f"1997, p = {order}; y<sub>t</sub> = ({html.escape(', '.join(data.y.columns))}))"
        )
    mean = f"&mu;{s_t}" if trend == "c" else ""
    if order is None:
        regressors = "" if data.exog is None else f"x<sub>t</sub>' &beta;{s_t}"
        right = " + ".join(p for p in (mean, regressors) if p)
        return (
            f"y<sub>t</sub> = {right} + e<sub>t</sub>, "
            f"e<sub>t</sub> ~ N(0, &sigma;<sup>2</sup>{s_t})"
        )
    if trend == "n":
        return (
            "y<sub>t</sub> = &sum;<sub>k=1..p</sub> &phi;<sub>k</sub> y<sub>t&minus;k</sub> + "
            f"e<sub>t</sub> (p = {order})"
        )
    return (
        f"y<sub>t</sub> &minus; {mean} = &sum;<sub>k=1..p</sub> "
        "&phi;<sub>k</sub> (y<sub>t&minus;k</sub> &minus; &mu;<sub>s<sub>t&minus;k</sub></sub>) + "
        f"e<sub>t</sub> (Hamilton 1989, p = {order})"
    )


def _page_body(title, data, model, method, ordering, info, tables, warnings, figure, files):
    """The page: the model, the settings, the warnings, the tables, the figure."""
    order, trend = model
    table, durations, optima, metrics, forecast = tables
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
{table_html(optima, float_format="{:.6g}", index=False)}"""
    forecast_html = ""
    if forecast is not None:
        plug = " at the posterior mean (a plug-in forecast)" if method == "nuts" else ""
        forecast_html = f"""
<h2>Forecast</h2>
<p class="note">y<sub>T+h</sub> given y<sub>1:T</sub>{plug}: simulated paths from the filtered
regime probabilities at T (forecast_switching), their mean and central 50% and 90% intervals,
and the exact regime probabilities P(s<sub>T+h</sub> = j | y<sub>1:T</sub>). Regressors and TVTP
covariates over the horizon are the file's rows after the last y (column line). In
<code>forecast.csv</code>.</p>
{table_html(forecast, index=False)}"""
    listing = ", ".join(f"<code>{f}</code>" for f in sorted([*files, "index.html", MANIFEST]))
    columns = (
        "estimate, standard error, z, two-sided p-value, 95% interval"
        if "stderr" in table
        else "posterior mean, sd, 5% and 95% quantiles, R-hat, bulk ESS"
    )
    return f"""
<h1>attnbayes regimes: {html.escape(Path(y.path).name)}</h1>
<p>{html.escape(title)}: {_equation(order, trend, data)}, s<sub>t</sub> a Markov chain with
P[i, j] = P(s<sub>t</sub> = j | s<sub>t&minus;1</sub> = i).{tvtp} Fitted by
{html.escape(_METHOD_TEXT[method])}.</p>
{settings_table(dict(info))}
{warning_html}
<h2>Parameters</h2>
<p class="note">statsmodels' names: const[j] the intercept or mean of regime j, sigma2 the
noise variance, p[i-&gt;j] the transition probabilities, ar.Lk the AR coefficients, the
regressors by their columns. Columns: {columns}.{blank} In <code>parameters.csv</code>.</p>
{table_html(table.set_index("parameter"))}
{durations_html}
<h2>Fit</h2>
{table_html(metrics.set_index("metric"))}
{optima_html}
<h2>Smoothed regime probabilities</h2>
<p class="note">P(s<sub>t</sub> = j | y<sub>1:T</sub>) at the estimate (Kim's backward recursion
on Hamilton's filter, exact). Regime labels: {html.escape(ordering)} In <code>regimes.csv</code> and
<code>regimes.png</code>.</p>
{img_tag(figure, "series and smoothed regime probabilities")}
{forecast_html}
<p class="note">Files: {listing}.</p>
"""


__all__ = [
    "Z_95",
    "RegimesData",
    "check_regimes",
    "column_names",
    "durations_table",
    "figure_regimes",
    "fit_warnings",
    "model_name",
    "nuts_table",
    "parameter_labels",
    "point_table",
    "read_regimes_data",
    "regimes_columns",
    "run_regimes",
    "summary_text",
]
