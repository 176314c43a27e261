"""``attnbayes regress``: Nadaraya-Watson kernel regression of a user's y on x, the bandwidth by
leave-one-out cross-validation, with a pointwise band.

For observations (x_i, y_i), i = 1..N, with y_i = m(x_i) + e_i, the estimate is attention
pooling over the data (``attnbayes.inference.kernel_regression``),

    m_hat(x) = sum_i w_i(x) y_i,   w_i(x) = K((x - x_i) / h) / sum_j K((x - x_j) / h),

the softmax of the scores log K((x - x_i) / h) (Nadaraya 1964, Watson 1964). The bandwidth h
minimises the leave-one-out CV(h) = (1/N) sum_i (y_i - m_hat_(-i)(x_i))^2 (``select_bandwidth``:
a grid of ``REGRESS_CV_GRID`` bandwidths, then Brent's method), unless it is given.

The pointwise band. Given the x_i, m_hat(x) is linear in the y_i, with variance
sum_i w_i(x)^2 sigma^2(x_i), which is sigma^2(x) sum_i w_i(x)^2 when the noise variance is
smooth near x (Härdle 1990, Applied Nonparametric Regression, sec. 4.2). The noise variance is
estimated from the residuals e_i = y_i - m_hat(x_i): with L the smoother matrix at the data,
L_ij = w_j(x_i), E e_i^2 = sigma^2 c_i under constant noise (and no bias), where
c_i = (1 - L_ii)^2 + sum_(j != i) L_ij^2 = 1 - 2 L_ii + sum_j L_ij^2; summed over i these are
N - 2 nu + nu~ (nu = tr L, nu~ = tr L'L), the denominator of Wasserman's estimator
sigma_hat^2 = sum_i e_i^2 / (N - 2 nu + nu~) (Wasserman 2006, All of Nonparametric Statistics,
ch. 5, variance estimation). Locally,

    sigma_hat^2(x) = sum_i w_i(x) r_i^2,   r_i^2 = e_i^2 / c_i,

the squared residuals, each divided by its expectation, smoothed with the fit's own weights; a
point alone in its window (c_i < ``DIVISOR_FLOOR``: its residual is about 0 whatever the noise)
uses the global sigma_hat^2 instead. Then

    se(x) = sqrt(sigma_hat^2(x) sum_i w_i(x)^2),   band: m_hat(x) +- z se(x),

z the (1 + level) / 2 quantile of the standard normal: a normal-approximation interval around
the smoothed curve sum_i w_i(x) m(x_i), pointwise (each x on its own, not the whole curve at
once). It ignores the bias m(x) - E m_hat(x), largest where m bends sharply and at the ends of
the data (Wasserman 2006, ch. 5, confidence bands), so it is not an interval for m(x) itself.
The weights are ``kernel_scores``'s, in blocks of at most ``WEIGHT_BLOCK_ENTRIES``; a grid point
whose window holds no x_i (a compact kernel) takes the nearest x_i's value, as
``nadaraya_watson`` does, and its band is that of one observation.

``run_regress(table, ...)`` writes OUT/NAME/ with ``fitted.csv`` (at the data), ``curve.csv``
(on the grid), ``cv.csv`` (the CV curve), ``metrics.csv``, ``index.html`` and ``run.json``.
Bad input is refused (``InputError``, exit status 2) before any JAX work: the file's cells by
``read_xy``, the values and options by ``check_regress``; only a --bandwidth so small that every
observation is alone in its window shows when the weights are computed (refused then, nothing
written). Publishing is ``attnbayes.app.runs``'s.
"""

from __future__ import annotations

import html
import math
import statistics
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..validation import max_scaled_spread
from .outputs import MANIFEST, check_finite_output, computing, prepare_target
from .pages import img_tag, png_bytes, settings_table, table_html
from .parser import (
    REGRESS_BLOCK,
    REGRESS_CV_GRID,
    REGRESS_DENSE_ROWS,
    REGRESS_GRID,
    REGRESS_KERNEL,
    REGRESS_KERNELS,
    REGRESS_LEVEL,
    REGRESS_MIN_ROWS,
)
from .runs import check_columns_unique, check_count, default_name, publish_run
from .user_data import InputError, Table, read_table

# entries of one block of kernel weights (queries x data) for the band: 16 MB in float64
WEIGHT_BLOCK_ENTRIES = 2**21
# c_i below this: the residual of point i carries no information on the noise (alone in its
# window), and the global sigma_hat^2 stands in for its r_i^2
DIVISOR_FLOOR = 1e-12
# points of the data drawn in the figure
DRAWN_POINTS = 5000


class _AloneInWindows(ValueError):
    """Every observation is alone in its kernel window: no residual says anything of the noise."""


class RegressionFit(NamedTuple):
    """What ``fit_regression`` computes.

    Attributes:
        bandwidth: the h used (given, or the LOO-CV choice).
        loo_cv_bandwidth, loo_cv_score: the LOO-CV choice of h and CV there.
        cv_grid, cv_scores: (G_cv,) the search grid of bandwidths and CV(h) on it.
        cv_score: CV at ``bandwidth``.
        loo_fit: (N,) m_hat_(-i)(x_i).
        loo_empty: observations with no other x_j in their window (their loo_fit is the y of
            the nearest other x_j).
        fit, se: (N,) at the data; grid_fit, grid_se: (G,) on ``grid``.
        grid: (G,) from min to max x.
        effective_points: (G,) 1 / sum_i w_i(x)^2 on the grid.
        grid_empty: grid points whose window holds no x_i.
        residual_sd: sqrt(sum_i e_i^2 / (N - 2 nu + nu~)).
        effective_df: nu = tr L.
        z: the normal quantile of the band.
    """

    bandwidth: float
    loo_cv_bandwidth: float
    loo_cv_score: float
    cv_grid: np.ndarray
    cv_scores: np.ndarray
    cv_score: float
    loo_fit: np.ndarray
    loo_empty: int
    fit: np.ndarray
    se: np.ndarray
    grid: np.ndarray
    grid_fit: np.ndarray
    grid_se: np.ndarray
    effective_points: np.ndarray
    grid_empty: int
    residual_sd: float
    effective_df: float
    z: float


def read_xy(path, x, y, *, delimiter: str = ",") -> Table:
    """The columns ``x`` and ``y`` (header names or 1-based numbers) of a CSV as one
    two-column ``Table`` (``read_table``'s format and messages, naming --x or --y)."""
    xs = read_table(path, delimiter=delimiter, columns=[x], prefix="column", option="--x")
    ys = read_table(path, delimiter=delimiter, columns=[y], prefix="column", option="--y")
    if xs.positions == ys.positions:
        label = f'"{xs.columns[0]}"' if xs.header else str(xs.positions[0])
        raise InputError(
            f"{xs.path}: --x and --y both name column {label}; the regression needs two "
            "different columns"
        )
    return xs._replace(
        columns=xs.columns + ys.columns,
        values=np.column_stack([xs.values[:, 0], ys.values[:, 0]]),
        positions=xs.positions + ys.positions,
    )


def level_label(level: float) -> str:
    """The band's level in percent as the output columns spell it: 0.9 -> '90'."""
    return f"{round(level * 100, 6):g}"


def fitted_columns(columns, level: float) -> list[str]:
    """The columns of fitted.csv for data columns ``columns`` = (x, y)."""
    p = level_label(level)
    return ["row", "line", *columns, "fit", "se", f"lower_{p}", f"upper_{p}", "residual", "loo_fit"]


def curve_columns(x_name: str, level: float) -> list[str]:
    """The columns of curve.csv for the x column ``x_name``."""
    p = level_label(level)
    return [x_name, "fit", "se", f"lower_{p}", f"upper_{p}", "effective_points"]


def check_regress(table: Table, kernel, bandwidth, grid, level):
    """Argument checks of ``run_regress`` that need no JAX; returns (kernel, bandwidth or None,
    grid, level). A value is refused naming its cell (file, line, column), an option by its
    name."""
    if not isinstance(kernel, str) or kernel not in REGRESS_KERNELS:
        raise InputError(f"--kernel: unknown {kernel!r}; choose from {list(REGRESS_KERNELS)}")
    if bandwidth is not None:
        if isinstance(bandwidth, bool) or not isinstance(bandwidth, int | float | np.floating):
            raise InputError(f"--bandwidth: expected a number > 0, got {bandwidth!r}")
        bandwidth = float(bandwidth)
        if not math.isfinite(bandwidth) or bandwidth <= 0:
            raise InputError(f"--bandwidth: must be a finite number > 0, got {bandwidth}")
        with np.errstate(over="ignore", divide="ignore", under="ignore"):
            if not np.isfinite(np.reciprocal(np.square(np.float64(bandwidth)))):
                raise InputError(f"--bandwidth: {bandwidth:g} is too small (1/h^2 overflows)")
    grid = check_count("--grid", grid, 2)
    grid = REGRESS_GRID if grid is None else grid
    if isinstance(level, bool) or not isinstance(level, int | float | np.floating):
        raise InputError(f"--level: expected a number in (0, 1), got {level!r}")
    level = float(level)
    if not 0 < level < 1:
        raise InputError(f"--level: must be in (0, 1), got {level}")
    values = table.values
    if values.ndim != 2 or values.shape[1] != 2:
        raise InputError(f"{table.path}: expected the two columns x and y, got {values.shape}")
    n = values.shape[0]
    if n < REGRESS_MIN_ROWS:
        raise InputError(
            f"{table.path}: {n} row(s) of data; the regression needs at least "
            f"{REGRESS_MIN_ROWS} (leave-one-out CV on fewer says nothing)"
        )
    bad = np.argwhere(~np.isfinite(values))
    if bad.size:
        i, j = bad[0]
        raise InputError(f"{table.where(i, j)}: {values[i, j]} is not a finite number")
    limit = max_scaled_spread(np.float64, n, 1)
    for j, option in enumerate(("--x", "--y")):
        i = int(np.argmax(np.abs(values[:, j])))
        if abs(values[i, j]) > limit:
            raise InputError(
                f"{table.where(i, j)}: {values[i, j]:.3g} is too large: the {option} column's "
                f"values must be at most {limit:.2g} in size (float64, N = {n}), where the sums "
                "of squares overflow; rescale the column"
            )
    x = values[:, 0]
    if np.all(x == x[0]):
        raise InputError(
            f'{table.path}: --x column "{table.columns[0]}" is constant ({x[0]:g} on every '
            "row); the regression needs x values that vary"
        )
    check_columns_unique(fitted_columns(table.columns, level))
    check_columns_unique(curve_columns(table.columns[0], level))
    return kernel, bandwidth, grid, level


def _weight_blocks(queries, x, kernel: str, bandwidth: float, rows: int) -> Iterator:
    """(start, (B, N) weights w_i(q) of the queries[start:start + B]), from ``kernel_scores``
    on blocks of ``rows`` queries (the last padded, so one shape compiles). A query with no
    x_i in its window puts weight 1 on the nearest x_i (ties to the lowest index), as
    ``nadaraya_watson`` does."""
    from ..inference.kernel_regression import kernel_scores

    for start in range(0, queries.shape[0], rows):
        q = queries[start : start + rows]
        padded = np.pad(q, (0, rows - q.shape[0]), mode="edge")
        scores = np.asarray(kernel_scores(padded, x, kernel=kernel, bandwidth=bandwidth))
        scores = scores[: q.shape[0]]
        top = scores.max(axis=1)
        empty = ~np.isfinite(top)
        w = np.exp(scores - np.where(empty, 0.0, top)[:, None])
        rows_empty = np.flatnonzero(empty)
        w[rows_empty] = 0.0
        w[rows_empty, np.argmin(np.abs(q[rows_empty, None] - x[None, :]), axis=1)] = 1.0
        yield start, w / w.sum(axis=1, keepdims=True), empty


def pointwise_se(x, y, fitted, queries, *, kernel: str, bandwidth: float):
    """The band's pieces (module docstring): (se at the queries, 1 / sum_i w_i(q)^2 at the
    queries, number of queries with an empty window, residual sd, nu = tr L).

    Args:
        x, y: (N,) the data; fitted: (N,) m_hat(x_i).
        queries: (Q,) where to evaluate.
    """
    n = x.shape[0]
    rows = max(1, min(max(n, queries.shape[0]), WEIGHT_BLOCK_ENTRIES // n))
    diag, square = np.empty(n), np.empty(n)
    for start, w, _ in _weight_blocks(x, x, kernel, bandwidth, rows):
        idx = np.arange(start, start + w.shape[0])
        diag[idx] = w[np.arange(w.shape[0]), idx]
        square[idx] = np.sum(w * w, axis=1)
    residual2 = (y - fitted) ** 2
    divisor = 1.0 - 2.0 * diag + square  # (1 - L_ii)^2 + sum_(j != i) L_ij^2
    informative = divisor >= DIVISOR_FLOOR
    if not informative.any():
        raise _AloneInWindows(
            f"h = {bandwidth:.3g} leaves every observation alone in its kernel window (the fit "
            "interpolates the data), so the noise variance and the band cannot be estimated"
        )
    sigma2 = float(np.sum(residual2) / np.sum(divisor))
    r2 = np.where(informative, residual2 / np.where(informative, divisor, 1.0), sigma2)
    se = np.empty(queries.shape[0])
    effective = np.empty(queries.shape[0])
    num_empty = 0
    for start, w, empty in _weight_blocks(queries, x, kernel, bandwidth, rows):
        sum_sq = np.sum(w * w, axis=1)
        se[start : start + w.shape[0]] = np.sqrt((w @ r2) * sum_sq)
        effective[start : start + w.shape[0]] = 1.0 / sum_sq
        num_empty += int(empty.sum())
    return se, effective, num_empty, math.sqrt(sigma2), float(np.sum(diag))


def fit_regression(
    x,
    y,
    *,
    kernel: str = REGRESS_KERNEL,
    bandwidth: float | None = None,
    grid: int = REGRESS_GRID,
    level: float = REGRESS_LEVEL,
) -> RegressionFit:
    """LOO-CV over h, the fit at the data and on a grid, and the pointwise band (module
    docstring), on checked data (``check_regress``). Raises ``ValueError`` from the library
    (``run_regress`` turns it into ``RunFailed``)."""
    from ..inference import kernel_regression as kr

    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    n = x.shape[0]
    block = None if n <= REGRESS_DENSE_ROWS else REGRESS_BLOCK
    with warnings.catch_warnings():
        # said in the app's own words (``regression_notes``), from the numbers
        warnings.simplefilter("ignore", kr.WideBandwidthWarning)
        warnings.simplefilter("ignore", kr.EmptyWindowWarning)
        warnings.filterwarnings("ignore", message="bounds:", category=RuntimeWarning)
        selected = kr.select_bandwidth(
            x, y, kernel=kernel, num_grid=REGRESS_CV_GRID, block_size=block
        )
        h = float(selected.bandwidth) if bandwidth is None else float(bandwidth)
        loo = kr.leave_one_out(x, y, kernel=kernel, bandwidth=h, block_size=block)
        points = np.linspace(x.min(), x.max(), grid)
        queries = np.concatenate([x, points])
        fitted = np.asarray(
            kr.nadaraya_watson(x, y, queries, kernel=kernel, bandwidth=h, block_size=block)
        )
    se, effective, num_empty, residual_sd, nu = pointwise_se(
        x, y, fitted[:n], queries, kernel=kernel, bandwidth=h
    )
    return RegressionFit(
        bandwidth=h,
        loo_cv_bandwidth=float(selected.bandwidth),
        loo_cv_score=float(selected.score),
        cv_grid=np.asarray(selected.bandwidth_trace, np.float64),
        cv_scores=np.asarray(selected.loss_trace, np.float64),
        cv_score=float(loo.score),
        loo_fit=np.asarray(loo.predictions, np.float64),
        loo_empty=int(loo.num_empty),
        fit=fitted[:n],
        se=se[:n],
        grid=points,
        grid_fit=fitted[n:],
        grid_se=se[n:],
        effective_points=effective[n:],
        grid_empty=num_empty,
        residual_sd=residual_sd,
        effective_df=nu,
        z=statistics.NormalDist().inv_cdf((1 + level) / 2),
    )


def regression_notes(fit: RegressionFit, x, kernel: str, given: bool) -> list[str]:
    """Warnings a reader of the run must see: a CV minimum on the edge of the search grid, a
    bandwidth wider than the range of x, empty windows."""
    notes = []
    g = int(np.argmin(fit.cv_scores))
    if g in (0, fit.cv_scores.shape[0] - 1):
        edge = "smallest" if g == 0 else "largest"
        notes.append(
            f"the CV curve is lowest at the {edge} bandwidth searched (h = "
            f"{fit.cv_grid[g]:.3g}): leave-one-out CV found no interior minimum, so its choice "
            f"h = {fit.loo_cv_bandwidth:.3g} is not a clear optimum; look at the CV curve"
            + ("" if given else " and consider --bandwidth")
        )
    span = float(np.max(x) - np.min(x))
    if fit.bandwidth > span:
        notes.append(
            f"the bandwidth h = {fit.bandwidth:.3g} exceeds the range of x ({span:.3g}): the fit "
            "is close to the mean of y; y may not depend on x"
        )
    if fit.grid_empty:
        notes.append(
            f"{fit.grid_empty} of the {fit.grid.shape[0]} grid points have no x_i within "
            f"h = {fit.bandwidth:.3g} ({kernel} kernel): the fit there is the y of the nearest "
            "x_i, and its band that of one observation"
        )
    if fit.loo_empty:
        notes.append(
            f"{fit.loo_empty} observation(s) have no other x_j within h = {fit.bandwidth:.3g}: "
            "their loo_fit is the y of the nearest other x_j"
        )
    return notes


def _drawn(n: int) -> np.ndarray:
    return np.arange(n) if n <= DRAWN_POINTS else np.linspace(0, n - 1, DRAWN_POINTS).astype(int)


def figure_fit(x, y, names, fit: RegressionFit, level: float, title: str) -> bytes:
    """The data, the fit on the grid and its pointwise band."""
    fig, ax = plt.subplots(figsize=(9, 4.8), layout="constrained")
    shown = _drawn(x.shape[0])
    ax.scatter(x[shown], y[shown], s=10, color="0.5", alpha=0.7, label="data", zorder=1)
    half = fit.z * fit.grid_se
    ax.fill_between(
        fit.grid,
        fit.grid_fit - half,
        fit.grid_fit + half,
        color="tab:blue",
        alpha=0.25,
        lw=0,
        label=f"pointwise {level_label(level)}% band",
        zorder=2,
    )
    ax.plot(fit.grid, fit.grid_fit, color="tab:blue", lw=2, label="Nadaraya-Watson fit", zorder=3)
    ax.set_xlabel(names[0])
    ax.set_ylabel(names[1])
    ax.set_title(title)
    ax.legend(loc="best", fontsize=9)
    return png_bytes(fig)


def figure_cv(fit: RegressionFit, given: bool) -> bytes:
    """CV(h) on the search grid (log h), its minimum and the bandwidth used."""
    fig, ax = plt.subplots(figsize=(7.5, 4), layout="constrained")
    ax.plot(fit.cv_grid, fit.cv_scores, marker="o", ms=3, color="0.3", label="CV(h), search grid")
    ax.plot(
        [fit.loo_cv_bandwidth],
        [fit.loo_cv_score],
        "o",
        color="tab:red",
        ms=8,
        label=f"LOO-CV minimum, h = {fit.loo_cv_bandwidth:.3g}",
    )
    if given:
        ax.plot(
            [fit.bandwidth],
            [fit.cv_score],
            "s",
            color="tab:blue",
            ms=8,
            label=f"--bandwidth h = {fit.bandwidth:.3g}",
        )
    ax.set_xscale("log")
    positive = fit.cv_scores[fit.cv_scores > 0]
    if positive.size and positive.max() > 100 * positive.min():
        ax.set_yscale("log")
    ax.set_xlabel("bandwidth h")
    ax.set_ylabel("CV(h) = mean (y_i - m_hat_(-i)(x_i))^2")
    ax.legend(loc="best", fontsize=9)
    return png_bytes(fig)


def _outputs(table: Table, fit: RegressionFit, level: float, given: bool) -> dict[str, str]:
    """fitted.csv, curve.csv, cv.csv and metrics.csv."""
    x_name, y_name = table.columns
    x, y = table.values[:, 0], table.values[:, 1]
    p = level_label(level)
    half, grid_half = fit.z * fit.se, fit.z * fit.grid_se
    fitted = pd.DataFrame(
        {
            "row": np.arange(1, x.shape[0] + 1),
            "line": table.lines,
            x_name: x,
            y_name: y,
            "fit": fit.fit,
            "se": fit.se,
            f"lower_{p}": fit.fit - half,
            f"upper_{p}": fit.fit + half,
            "residual": y - fit.fit,
            "loo_fit": fit.loo_fit,
        }
    )
    curve = pd.DataFrame(
        {
            x_name: fit.grid,
            "fit": fit.grid_fit,
            "se": fit.grid_se,
            f"lower_{p}": fit.grid_fit - grid_half,
            f"upper_{p}": fit.grid_fit + grid_half,
            "effective_points": fit.effective_points,
        }
    )
    cv_rows = [("grid", h, s) for h, s in zip(fit.cv_grid, fit.cv_scores, strict=True)]
    cv_rows.append(("loo-cv", fit.loo_cv_bandwidth, fit.loo_cv_score))
    if given:
        cv_rows.append(("given", fit.bandwidth, fit.cv_score))
    cv = pd.DataFrame(
        {
            "bandwidth": [r[1] for r in cv_rows],
            "cv": [r[2] for r in cv_rows],
            "kind": [r[0] for r in cv_rows],
        }
    )
    return {
        "fitted.csv": fitted.to_csv(index=False),
        "curve.csv": curve.to_csv(index=False),
        "cv.csv": cv.to_csv(index=False),
    }


def run_regress(
    table: Table,
    *,
    kernel: str = REGRESS_KERNEL,
    bandwidth: float | None = None,
    grid: int = REGRESS_GRID,
    level: float = REGRESS_LEVEL,
    out_dir="reports",
    name: str | None = None,
    progress: Callable[[str], None] | None = None,
    argv: list[str] | None = None,
) -> Path:
    """Nadaraya-Watson regression of ``table``'s second column on its first; write OUT/NAME/.

    Args:
        table: the two columns x and y (``read_xy``).
        kernel: one of ``REGRESS_KERNELS``.
        bandwidth: h > 0 in the units of x; None: the LOO-CV choice.
        grid: points from min to max x where the fit and its band are evaluated (>= 2).
        level: the pointwise band's level, in (0, 1).
        out_dir, name: the output folder OUT/NAME; NAME defaults to ``<stem>-regress-<kernel>``.
        progress: called with short messages (and the warnings, ``warning: ...``).
        argv: the command line, recorded in run.json.

    Returns:
        The path of OUT/NAME/index.html.

    Raises:
        InputError (a ValueError): bad arguments or data, before any JAX work.
        RunFailed: the run failed after it started (``NonFiniteResult`` when a quantity about
            to be written is not finite); nothing is written.
    """
    kernel, bandwidth, grid, level = check_regress(table, kernel, bandwidth, grid, level)
    target = prepare_target(out_dir, name or default_name(table.path, "regress", kernel))
    say = progress or (lambda message: None)
    started = time.perf_counter()
    x, y = table.values[:, 0], table.values[:, 1]
    given = bandwidth is not None
    say(f"{kernel} kernel: leave-one-out CV over {REGRESS_CV_GRID} bandwidths (N = {x.shape[0]})")
    with computing():
        try:
            fit = fit_regression(x, y, kernel=kernel, bandwidth=bandwidth, grid=grid, level=level)
        except _AloneInWindows as err:
            if given:  # the user's choice, refused as such (exit status 2, nothing written)
                raise InputError(f"--bandwidth: {err}; pass a larger --bandwidth") from None
            raise
        for label, values in (
            ("fit", fit.fit),
            ("se", fit.se),
            ("loo_fit", fit.loo_fit),
            ("curve fit", fit.grid_fit),
            ("curve se", fit.grid_se),
        ):
            check_finite_output(label, values)
        check_finite_output("cv", fit.cv_scores, axis_name="bandwidth")
        for label, value in (
            ("bandwidth", fit.bandwidth),
            ("cv_at_bandwidth", fit.cv_score),
            ("loo_cv_bandwidth", fit.loo_cv_bandwidth),
            ("residual_sd", fit.residual_sd),
        ):
            check_finite_output(label, value)
    notes = regression_notes(fit, x, kernel, given)
    for note in notes:
        say(f"warning: {note}")
    say("writing the outputs")
    files = _outputs(table, fit, level, given)
    elapsed = time.perf_counter() - started
    metrics = pd.DataFrame(
        {
            "metric": [
                "bandwidth",
                "loo_cv_bandwidth",
                "cv_at_bandwidth",
                "cv_at_loo_cv_bandwidth",
                "residual_sd",
                "effective_df",
                "wall_time_s",
            ],
            "value": [
                fit.bandwidth,
                fit.loo_cv_bandwidth,
                fit.cv_score,
                fit.loo_cv_score,
                fit.residual_sd,
                fit.effective_df,
                round(elapsed, 3),
            ],
        }
    )
    files["metrics.csv"] = metrics.to_csv(index=False)
    x_name, y_name = table.columns
    settings = {
        "x": x_name,
        "y": y_name,
        "kernel": kernel,
        "bandwidth": bandwidth,
        "bandwidth_used": fit.bandwidth,
        "loo_cv_bandwidth": fit.loo_cv_bandwidth,
        "grid": grid,
        "level": level,
        "cv_grid": REGRESS_CV_GRID,
    }
    if argv is not None:
        settings["argv"] = list(argv)
    summary = {
        "input": table.path,
        "observations N": x.shape[0],
        "x": x_name,
        "y": y_name,
        "kernel": kernel,
        "bandwidth h": fit.bandwidth,
        "chosen by": "--bandwidth" if given else f"leave-one-out CV ({REGRESS_CV_GRID}-point grid)",
        "grid points": grid,
        "band level": level,
        "total wall time (s)": round(elapsed, 1),
    }
    p = level_label(level)
    how = "given (--bandwidth)" if given else "chosen by leave-one-out cross-validation"
    title = f"{kernel} kernel, h = {fit.bandwidth:.3g}"
    fig_fit = figure_fit(x, table.values[:, 1], table.columns, fit, level, title)
    fig_cv = figure_cv(fit, given)
    warning_html = "".join(f"<p><strong>Warning:</strong> {html.escape(n)}.</p>" for n in notes)
    listing = ", ".join(f"<code>{f}</code>" for f in sorted([*files, "index.html", MANIFEST]))
    shown = f" {DRAWN_POINTS} of the points are drawn." if x.shape[0] > DRAWN_POINTS else ""
    given_cv = (
        f" The square is the given h = {fit.bandwidth:.4g} (CV {fit.cv_score:.4g})."
        if given
        else ""
    )
    body = f"""
<h1>attnbayes regress: {html.escape(Path(table.path).name)}</h1>
<p>Nadaraya-Watson kernel regression of y = {html.escape(y_name)} on x = {html.escape(x_name)}:
m&#770;(x) = &sum;<sub>i</sub> w<sub>i</sub>(x) y<sub>i</sub> with the attention weights
w<sub>i</sub>(x) = softmax<sub>i</sub> log K((x &minus; x<sub>i</sub>) / h), the {kernel} kernel
K and the bandwidth h = {fit.bandwidth:.4g} {how}.</p>
{settings_table(summary)}
<h2>Fit</h2>
{table_html(metrics.set_index("metric"))}
{warning_html}
<h2>The data, the fit and its pointwise band</h2>
<p class="note">The {p}% band is m&#770;(x) &plusmn; z se(x) with z = {fit.z:.4g} (normal
approximation) and se(x)<sup>2</sup> = &sigma;&#770;<sup>2</sup>(x) &sum;<sub>i</sub>
w<sub>i</sub>(x)<sup>2</sup>, the variance of m&#770;(x) given the x<sub>i</sub> (Härdle 1990,
sec. 4.2). &sigma;&#770;<sup>2</sup>(x) = &sum;<sub>i</sub> w<sub>i</sub>(x)
r<sub>i</sub><sup>2</sup> smooths the squared residuals, each divided by its expectation
under constant noise: r<sub>i</sub><sup>2</sup> = (y<sub>i</sub> &minus;
m&#770;(x<sub>i</sub>))<sup>2</sup> / (1 &minus; 2 L<sub>ii</sub> + &sum;<sub>j</sub>
L<sub>ij</sub><sup>2</sup>) with L<sub>ij</sub> = w<sub>j</sub>(x<sub>i</sub>); over all i
these divisors sum to Wasserman's N &minus; 2&nu; + &nu;&#771; (Wasserman 2006, ch. 5). The
band is pointwise: it covers the smoothed curve &sum;<sub>i</sub> w<sub>i</sub>(x)
m(x<sub>i</sub>) at each x separately, not the whole curve at once, and it ignores the bias,
which is largest where the curve bends sharply and at the ends of the data.{shown} The fit at
every observation is in <code>fitted.csv</code>, on the grid in <code>curve.csv</code>.</p>
{img_tag(fig_fit, "data, fit and pointwise band")}
<h2>Leave-one-out cross-validation</h2>
<p class="note">CV(h) = (1/N) &sum;<sub>i</sub> (y<sub>i</sub> &minus;
m&#770;<sub>&minus;i</sub>(x<sub>i</sub>))<sup>2</sup> on a grid of {REGRESS_CV_GRID} bandwidths
(0.001 to 4 times the spread of x), its minimum refined by Brent's method: h =
{fit.loo_cv_bandwidth:.4g} (CV {fit.loo_cv_score:.4g}).{given_cv} The curve is in
<code>cv.csv</code>.</p>
{img_tag(fig_cv, "leave-one-out CV curve")}
<p class="note">Files: {listing}.</p>
"""
    return publish_run(target, files, "regress", table, body, settings, elapsed, say)


__all__ = [
    "DIVISOR_FLOOR",
    "DRAWN_POINTS",
    "WEIGHT_BLOCK_ENTRIES",
    "RegressionFit",
    "check_regress",
    "curve_columns",
    "figure_cv",
    "figure_fit",
    "fit_regression",
    "fitted_columns",
    "level_label",
    "pointwise_se",
    "read_xy",
    "regression_notes",
    "run_regress",
]
