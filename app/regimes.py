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
H``: ``forecast_switching``, means over its simulated paths with their Monte Carlo standard
errors, 50% and 90% intervals and regime probabilities; NUTS: at the posterior mean),
``fit_posterior.nc`` (nuts), ``index.html`` and ``run.json``. A summary like statsmodels'
``summary()`` goes to the terminal. ``--time COL`` (never guessed) labels the rows: the x-axis
of regimes.png and a column of regimes.csv and forecast.csv (``TimeAxis``, ``read_time``).

What a reader must know (the model with s_t on exactly what switches, each regime by its
labelling parameter, a fit that did not converge or sits on a boundary, a near local optimum,
barely separated labels, where statsmodels fits another model) is said on the terminal, in the
page and in run.json; ``attnbayes.app.regimes_page`` writes and says it (the tables, the
warnings, the model text, the figure, the summary and the page).

The rows: those from the first to the last value of ``--y`` are the series (rows before it
are left out, and said so); every value of y, ``--exog`` and ``--tvtp`` in them must be a
number. The rows after the last y carry the future regressors, TVTP covariates and times a
forecast needs (``--horizon H`` with --exog or --tvtp uses the first H of them, which must be
complete); those it does not read are said.

Bad input is refused (``InputError``, exit status 2) before any JAX work, naming the file,
line and column or the option (``read_regimes_data``, ``check_regimes``).

Over 800 lines: one command, ``attnbayes regimes``, in the order a user meets it: reading the
series and its time axis, checking every option against the data before any fit (one line,
file/line/column, exit 2), then the run (fit, table, forecasts). Its page is
``attnbayes.app.regimes_page``.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from ..validation import max_scaled_spread
from .filter_fit import FIT_ITERATIONS, nuts_fit, nuts_warnings
from .outputs import check_finite_output, check_finite_table, computing, prepare_target
from .parser import (
    FIT_METHODS,
    FIT_NUTS_SIZES,
    REGIMES_LEVELS,
    REGIMES_METHOD,
    REGIMES_TRENDS,
)
from .regimes_page import (
    column_names,
    conditioned_text,
    durations_table,
    figure_regimes,
    fit_warnings,
    label_warnings,
    model_name,
    nuts_table,
    optima_warnings,
    page_body,
    parameter_labels,
    point_table,
    regime_names,
    statsmodels_differs,
    summary_text,
    switching_parameters,
    time_labels,
)
from .runs import (
    check_columns_unique,
    check_count,
    datatree_writer,
    default_name,
    publish_run,
    sizes_from_options,
)
from .user_data import InputError, Table, read_table, read_text_column


class TimeAxis(NamedTuple):
    """The ``--time`` column on the series' rows (``read_regimes_data``).

    Attributes:
        name: the column's name in the file.
        kind: "number" (strictly increasing numbers, e.g. years), "date" (strictly increasing
            ISO 8601 dates, YYYY-MM-DD or YYYY-MM, or quarters YYYYQn) or "label" (distinct
            text, kept as written).
        values: (T,) the times of the series' rows: floats ("number") or the cells as written.
        future: (F,) the times of the leading rows after the last y that have one.
    """

    name: str
    kind: str
    values: tuple
    future: tuple


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
        time: the ``--time`` column (``TimeAxis``), or None (the rows are numbered).
        trailing: the lines after the last y (future regressors, covariates or times, or
            nothing the run reads).
    """

    y: Table
    exog: Table | None
    tvtp: Table | None
    future_exog: np.ndarray | None
    future_tvtp: np.ndarray | None
    future_lines: np.ndarray
    skipped: tuple[int, ...]
    time: TimeAxis | None = None
    trailing: tuple[int, ...] = ()


def _rows(table: Table, keep: slice) -> Table:
    return table._replace(values=table.values[keep], lines=table.lines[keep])


def read_regimes_data(
    path, y, exog=None, tvtp=None, *, time=None, delimiter: str = ","
) -> RegimesData:
    """Read --y (one column, or several for an MS-VAR), --exog, --tvtp and --time (header
    names or 1-based numbers) from one CSV (``read_table``'s format and messages, naming the
    option).

    The series is the rows from the first to the last row with every --y value (the rows
    before it are left out and listed in ``skipped``, those after it in ``trailing``).
    Refused (``InputError``): a missing or unknown column, a cell that is not a number, a
    column named twice or as both y and a covariate or time, no row with every y, a missing
    y or --exog / --tvtp / --time cell inside the series, a --time column that does not
    increase strictly (numbers, dates) or repeats a label (``read_time``)."""
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
    axis = None
    if time is not None:
        axis = read_time(path, time, ys, list(others.items()), first, last, delimiter=delimiter)
    return RegimesData(
        y=_rows(ys, keep),
        exog=series.get("--exog"),
        tvtp=series.get("--tvtp"),
        future_exog=future.get("--exog"),
        future_tvtp=future.get("--tvtp"),
        future_lines=ys.lines[after][:count],
        skipped=tuple(int(v) for v in ys.lines[:first]),
        time=axis,
        trailing=tuple(int(v) for v in ys.lines[after]),
    )


# quarters as statsmodels' macrodata and FRED write them: 1959Q1
_QUARTER = re.compile(r"\d{4}[Qq][1-4]")


def _time_keys(cells) -> tuple[str, list]:
    """(kind, sortable keys) of time cells: numbers, ISO 8601 dates or quarters, else labels
    (the cells themselves)."""
    try:
        keys = [float(c) for c in cells]
        if all(math.isfinite(v) for v in keys):
            return "number", keys
    except ValueError:
        pass
    if all(_QUARTER.fullmatch(c) for c in cells):
        return "date", [int(c[:4]) * 4 + int(c[-1]) for c in cells]
    try:
        return "date", list(pd.to_datetime(list(cells), format="ISO8601"))
    except (ValueError, TypeError, OverflowError):
        return "label", list(cells)


def read_time(path, column, ys: Table, others, first: int, last: int, *, delimiter=","):
    """The --time column (``TimeAxis``; ``others`` the (option, ``Table``) pairs of --exog and
    --tvtp) on the series' rows first..last of ``ys`` and the
    leading rows after them that have a time (never guessed: only the column named). Refused
    (``InputError``, naming the line and column): the column is --y, --exog or --tvtp, a
    missing time inside the series, times (numbers or dates) that do not increase strictly
    down the rows, a label that repeats."""
    col = read_text_column(path, column, delimiter=delimiter, option="--time")
    for option, table in (("--y", ys), *others):
        if col.position in table.positions:
            raise InputError(
                f"{col.path}: --time: column {col.label} is also {option}; the --time column "
                "must be another column of the file"
            )
    cells = col.cells[first : last + 1]
    lines = col.lines[first : last + 1]
    if "" in cells:
        i = cells.index("")
        raise InputError(
            f"{col.path} line {int(lines[i])}, column {col.label}: missing value; every --time "
            f"cell in the rows of --y (lines {int(lines[0])}-{int(lines[-1])}) needs a time"
        )
    after = col.cells[last + 1 :]
    count = after.index("") if "" in after else len(after)
    cells = cells + after[:count]
    lines = np.concatenate([lines, col.lines[last + 1 : last + 1 + count]])
    kind, keys = _time_keys(cells)
    where = f"{col.path} line {{}}, column {col.label}: --time: "
    if kind == "label":
        seen = {}
        for i, cell in enumerate(cells):
            if cell in seen:
                raise InputError(
                    where.format(int(lines[i]))
                    + f"{cell!r} repeats line {seen[cell]}: the labels of a --time column must "
                    "be distinct (numbers and ISO 8601 dates must increase)"
                )
            seen[cell] = int(lines[i])
    else:
        for i in range(1, len(cells)):
            if not keys[i] > keys[i - 1]:
                raise InputError(
                    where.format(int(lines[i]))
                    + f"{cells[i]!r} does not come after {cells[i - 1]!r} (line "
                    f"{int(lines[i - 1])}): the times must increase strictly down the rows"
                )
    values = tuple(keys) if kind == "number" else tuple(cells)
    t = last + 1 - first
    return TimeAxis(col.name, kind, values[:t], values[t:])


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
        # the constructors name their arguments (statsmodels' endog, exog, exog_tvtp): say
        # the options the user gave them with
        name, sep, rest = str(err).partition(": ")
        said = f"{_OPTION_OF[name]}: {rest}" if sep and name in _OPTION_OF else str(err)
        raise InputError(f"{y.path}: the model refuses the data: {said}") from None
    k = _free_scalars(spec)
    rows = spec.observations.shape[0]
    if rows <= k:
        used = "" if order is None else f" ({conditioned_text(order, o)})"
        raise InputError(
            f"{y.path}: too few rows: {rows} observation(s){used} for {k} free parameters "
            f"({model_name(order, m, o)}); give more rows or a smaller model"
        )
    future = _future_inputs(data, spec, horizon, order)
    check_columns_unique(regimes_columns(y.columns, m, data.time is not None))
    return spec, future


# the constructors' argument names -> this command's options
_OPTION_OF = {"endog": "--y", "exog": "--exog", "exog_tvtp": "--tvtp"}


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


def regimes_columns(y_names, num_regimes: int, time: bool = False) -> list[str]:
    """The columns of regimes.csv (``time``: with the --time column's values)."""
    head = ["t", "line", *(["time"] if time else [])]
    return [*head, *y_names, *(f"smoothed_prob_regime{j}" for j in range(num_regimes))]


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
            warnings = fit_warnings(result) + optima_warnings(result, spec, labels)
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
        warnings += label_warnings(spec, labels, table)
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
    t_rows = y.values.shape[0]
    times = time_labels(data, horizon or 0)
    regimes = pd.DataFrame(
        {"t": np.arange(1, t_rows + 1), "line": y.lines}
        | ({} if data.time is None else {"time": times[:t_rows]})
        | {name: y.values[:, c] for c, name in enumerate(y.columns)}
        | {f"smoothed_prob_regime{j}": full[:, j] for j in range(m)}
    )
    files["regimes.csv"] = regimes.to_csv(index=False)
    forecast_frame = None
    if forecast is not None:
        paths = forecast.draws.shape[0]
        mc_se = forecast.draws.std(axis=0, ddof=1) / math.sqrt(paths)
        check_finite_output("the forecast's Monte Carlo standard errors", mc_se)
        forecast_frame = pd.DataFrame({"h": np.arange(1, horizon + 1)})
        if future is not None:
            forecast_frame["line"] = data.future_lines[:horizon]
        if data.time is not None:
            forecast_frame["time"] = times[t_rows:]
        for c, column in enumerate(y.columns):
            tail = "" if o == 1 else f"_{column}"
            forecast_frame[f"mean{tail}"] = forecast.mean[:, c]
            forecast_frame[f"mean_mc_se{tail}"] = mc_se[:, c]
            for k, level in enumerate(forecast.levels):
                p = f"{round(level * 100):d}"
                forecast_frame[f"lower_{p}{tail}"] = forecast.lower[k, :, c]
                forecast_frame[f"upper_{p}{tail}"] = forecast.upper[k, :, c]
        for j in range(m):
            forecast_frame[f"prob_regime{j}"] = forecast.regime_probs[:, j]
        files["forecast.csv"] = forecast_frame.to_csv(index=False)
    names = regime_names(spec, labels, theta)
    figure = figure_regimes(data, order, probs, forecast, names)
    files["regimes.png"] = figure

    observations = str(num_obs) + (f" ({conditioned_text(order, o)})" if order else "")
    info = [
        ("data", f"{y.path}, --y {','.join(y.columns)}"),
        ("rows", f"lines {int(y.lines[0])}-{int(y.lines[-1])} ({t_rows} rows)"),
        ("observations", observations),
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
    if m > 1:
        info.append(("regimes", "; ".join(names)))
    if data.time is not None:
        axis = data.time
        info.append(
            ("time", f"column {axis.name} ({axis.kind}s), {times[0]} to {times[t_rows - 1]}")
        )
    unused = _unused_after(data, horizon)
    left_out = []
    if data.skipped:
        left_out.append(f"{len(data.skipped)} before the first y ({_span(data.skipped)})")
    if unused:
        why = "no --horizon" if horizon is None else f"beyond what --horizon {horizon} reads"
        left_out.append(f"{len(unused)} after the last y ({_span(unused)}; {why})")
    if left_out:
        info.append(("rows left out", "; ".join(left_out)))
    switching, common = switching_parameters(spec, labels)
    if switching:
        info.append(("switching", ", ".join(switching)))
    if common:
        info.append(("not switching", ", ".join(common) + (" (one regime)" if m == 1 else "")))
    if data.exog is not None:
        info.append(("regressors", ", ".join(data.exog.columns)))
    if trend == "n":
        info.append(("trend", "n (no intercept)"))
    if data.tvtp is not None:
        info.append(("TVTP covariates", "const, " + ", ".join(data.tvtp.columns)))
    differs = statsmodels_differs(spec)
    if differs is not None:
        info.append(("statsmodels", differs))
    if forecast is not None:
        info.append(
            (
                "forecast",
                f"h = 1..{horizon}: the mean of {paths} simulated paths (Monte Carlo standard "
                f"error up to {np.max(mc_se):.3g}, mean_mc_se in forecast.csv), their 50% and "
                "90% intervals",
            )
        )
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
        "time": None if data.time is None else data.time.name,
        "order": order,
        "regimes": m,
        "switching_variance": switching_variance,
        "switching_ar": switching_ar,
        "switching": switching,
        "not_switching": common,
        "method": method,
        "horizon": horizon,
        "seed": seed,
        "regime_labels": ordering,
        "regime_names": names,
        "warnings": warnings,
        "rows_left_out": list(data.skipped),
        "rows_after_unused": list(unused),
    }
    if forecast is not None:
        settings["forecast_paths"] = paths
    if method == "mle":
        settings["starts"] = int(result.start_log_likelihoods.shape[0])
    if method == "nuts":
        settings |= {f"nuts_{k}": v for k, v in sizes.items()}
    if argv is not None:
        settings["argv"] = list(argv)
    body = page_body(
        title,
        data,
        spec,
        method,
        ordering,
        info,
        (table, durations, optima, frame, forecast_frame, settings.get("forecast_paths")),
        warnings,
        figure,
        files,
    )
    return publish_run(target, files, "regimes", y, body, settings, elapsed, say)


def _span(lines) -> str:
    """'line 7' or 'lines 7-9' (the first and the last)."""
    lines = [int(v) for v in lines]
    return f"line {lines[0]}" if len(lines) == 1 else f"lines {lines[0]}-{lines[-1]}"


def _unused_after(data: RegimesData, horizon) -> tuple[int, ...]:
    """The lines after the last y that the run does not read: all without --horizon, else
    those beyond the H rows of the future regressors, covariates or times."""
    if not horizon:
        return data.trailing
    reads = data.exog is not None or data.tvtp is not None
    used = min(horizon, len(data.future_lines)) if reads else 0
    if data.time is not None:
        used = max(used, min(horizon, len(data.time.future)))
    return data.trailing[used:]


__all__ = [
    "RegimesData",
    "TimeAxis",
    "check_regimes",
    "read_regimes_data",
    "read_time",
    "regimes_columns",
    "run_regimes",
]
