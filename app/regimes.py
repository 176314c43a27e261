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

What a reader must know is said on the terminal, in the page and in run.json: the model with
s_t on exactly what switches (``model_equation``, ``switching_parameters``), each regime by
its labelling parameter (``regime_names``), a fit that did not converge or sits on a boundary,
another local optimum within ``OPTIMA_NATS`` of the best (``optima_warnings``), labels resting
on a parameter that differs by less than ``LABEL_SEPARATION`` standard errors
(``label_warnings``), and where statsmodels fits another model (``statsmodels_differs``).

The rows: those from the first to the last value of ``--y`` are the series (rows before it
are left out, and said so); every value of y, ``--exog`` and ``--tvtp`` in them must be a
number. The rows after the last y carry the future regressors, TVTP covariates and times a
forecast needs (``--horizon H`` with --exog or --tvtp uses the first H of them, which must be
complete); those it does not read are said.

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
from matplotlib.ticker import FuncFormatter, MaxNLocator

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
from .user_data import InputError, Table, read_table, read_text_column

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
        used = "" if order is None else f" ({conditioned_text(order, o)})"
        raise InputError(
            f"{y.path}: too few rows: {rows} observation(s){used} for {k} free parameters "
            f"({model_name(order, m, o)}); give more rows or a smaller model"
        )
    future = _future_inputs(data, spec, horizon, order)
    check_columns_unique(regimes_columns(y.columns, m, data.time is not None))
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


def regimes_columns(y_names, num_regimes: int, time: bool = False) -> list[str]:
    """The columns of regimes.csv (``time``: with the --time column's values)."""
    head = ["t", "line", *(["time"] if time else [])]
    return [*head, *y_names, *(f"smoothed_prob_regime{j}" for j in range(num_regimes))]


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


def time_labels(data: RegimesData, horizon: int = 0) -> list[str]:
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


def figure_regimes(
    data: RegimesData, order, probs, forecast=None, names: list[str] | None = None
) -> bytes:
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
    body = _page_body(
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


def _page_body(title, data, spec, method, ordering, info, tables, warnings, figure, files):
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
    "RegimesData",
    "TimeAxis",
    "check_regimes",
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
    "parameter_labels",
    "parameter_note",
    "point_table",
    "read_regimes_data",
    "read_time",
    "regime_names",
    "regimes_columns",
    "run_regimes",
    "statsmodels_differs",
    "summary_text",
    "switching_parameters",
    "time_labels",
]
