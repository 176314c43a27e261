"""``attnbayes deconvolve``: fit the mixing measure of a user's data with one method and write
the outputs.

``run_deconvolve(table, sigma, ...)`` fits the Gaussian deconvolution model
z_i ~ nu, x_i | z_i ~ N(z_i, s_i^2 I_p) with one method of
``attnbayes.inference.deconvolution.comparison`` (any the registry offers to ``deconvolve``,
by its name or an alias) and writes OUT/NAME/. The noise scale is known: one sigma for every
row (``--sigma``), a standard error per row s_i or per row and coordinate s_ic read from the
file (``--se``, ``attnbayes.app.user_data.read_standard_errors``), or, for binomial counts
(``--binomial HITS,TRIALS``), Brown's (2008) variance-stabilising transform
x_i = arcsin(sqrt((H_i + 1/4) / (T_i + 1/2))) with s_i = 1 / (2 sqrt(T_i))
(``attnbayes.app.binomial``), the results mapped back to proportions by p = sin(z)^2. Outputs:

- ``z_hat.csv``: row, line, then the standard-error column(s) (``--se``), then per data column
  c: c, z_hat_c, lower_50_c, upper_50_c, lower_90_c, upper_90_c (equal-tailed posterior
  intervals of z_i); with ``--binomial``: row, line, HITS, TRIALS, p_raw = H/T, x, se, the
  columns of x, then p_hat, p_lower_50, p_upper_50, p_lower_90, p_upper_90
  (``deconvolve_output_columns``);
- ``measure.csv`` (interval methods with a discrete nu: attention-EM, the NPMLE, and the
  learned grid stack, whose nu is its effective prior on its grid): the fitted mixing measure,
  weight and atom_c per atom;
- ``metrics.csv``: metric, value (log-likelihood, wall time; samplers: LOO, R-hat, ESS,
  divergences);
- for the samplers ``posterior.nc`` (the DataTree with the permutation-invariant quantities,
  netCDF) and ``diagnostics.csv`` (R-hat, bulk and tail ESS per invariant element);
- ``index.html`` (self-contained: data with the fitted measure, z_hat with intervals (and the
  proportions, binomial), sampler diagnostics) and ``run.json`` (what was run on what).

Before computing, attention-EM's memory is estimated and a dense E-step that would not fit is
refused with the alternatives (``check_em_memory``). ``--method learned`` runs the shipped grid
stack (version 2, ``pretrained_grid_stack``) on scalar data only (several columns are refused
naming p); the terminal and the page say which stack ran and the prior it was trained on.
Publishing is ``attnbayes.app.runs``'s.

Over 800 lines: one command, ``attnbayes deconvolve``: its checks (all before any
computation, the memory check included), the run of one method with its warnings, and the
outputs (table, DataTree, figures, page) of every method it can run.
"""

from __future__ import annotations

import html
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import jax
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..inference.deconvolution.comparison import INTERVAL_BLOCK_ELEMENTS
from ..inference.mcmc import check_sampler_sizes
from .binomial import binomial_data, proportion_scale
from .outputs import (
    MANIFEST,
    check_finite_output,
    check_finite_table,
    computing,
    prepare_target,
)
from .pages import (
    diagnostics_by_quantity,
    img_tag,
    png_bytes,
    sampler_verdict,
    settings_table,
    table_html,
)
from .parser import DECONVOLVE_DEFAULT, DECONVOLVE_SAMPLERS, DEFAULT_NUM_ATOMS, join_names
from .runs import (
    check_columns_unique,
    check_count,
    datatree_writer,
    default_name,
    offered_method,
    publish_run,
    sizes_from_options,
)
from .user_data import InputError, Table

# em --block-size: the block suggested when the dense E-step does not fit, and the time of a
# streamed E-step per row-atom pair measured in BENCHMARKS.md (N = 20k-100k, 2-D, 2 cores)
SUGGESTED_BLOCK_SIZE = 1024
STREAMED_SECONDS_PER_PAIR = 2e-8
INVARIANTS = ("z_mean", "nu_cdf", "log_lik_total")


def _cuts(values: np.ndarray, limit: int = 2000) -> np.ndarray:
    """Indices of at most ``limit`` rows spread over ``values`` (for drawing large data)."""
    n = values.shape[0]
    return np.arange(n) if n <= limit else np.unique(np.linspace(0, n - 1, limit).astype(int))


def _mixture_density(grid, atoms, weights, sigma) -> np.ndarray:
    """sum_k w_k N(t; mu_k, sigma^2) on a 1-D grid, in chunks of atoms."""
    out = np.zeros_like(grid)
    for start in range(0, atoms.shape[0], 4096):
        mu, w = atoms[start : start + 4096], weights[start : start + 4096]
        out += (np.exp(-0.5 * ((grid[:, None] - mu[None, :]) / sigma) ** 2) @ w) / (
            sigma * np.sqrt(2 * np.pi)
        )
    return out


def figure_data_and_measure(points, names, sigma, measure, title) -> bytes:
    """1-D: histogram of x, the fitted density of x (one sigma only) and the mass of nu; p-D:
    the first two coordinates of x with the mass of nu on a grid.

    ``sigma`` is a number or the per-row standard errors (an array): with these no single
    density of x exists, so none is drawn, and the legend states the standard errors' range.
    ``measure`` None (a method with a normal prior, no discrete nu): the data alone.
    """
    if measure is None:
        atoms, weights = np.zeros((0, points.shape[1])), np.zeros(0)
    else:
        atoms = np.asarray(measure.atoms, np.float64).reshape(len(measure.weights), -1)
        weights = np.asarray(measure.weights, np.float64)
    bounds = np.concatenate([points, atoms])
    per_unit = np.ndim(sigma) > 0
    scale = float(np.median(sigma)) if per_unit else float(sigma)
    legend_title = None
    if per_unit:
        legend_title = f"standard errors {np.min(sigma):.3g} to {np.max(sigma):.3g}"
    if points.shape[1] == 1:
        x = points[:, 0]
        fig, ax = plt.subplots(figsize=(9, 4), layout="constrained")
        lo, hi = bounds[:, 0].min() - 2 * scale, bounds[:, 0].max() + 2 * scale
        ax.hist(x, bins=min(80, max(10, x.size // 5)), density=True, color="0.85", label="x")
        if not per_unit and measure is not None:
            grid = np.linspace(lo, hi, 400)
            ax.plot(
                grid,
                _mixture_density(grid, atoms[:, 0], weights, scale),
                color="tab:blue",
                label="fitted density of x",
            )
        ax.set_xlabel(names[0])
        ax.set_ylabel("density of x")
        extra = ([], [])
        if measure is not None:
            mass_ax = ax.twinx()
            edges = np.linspace(lo, hi, 101)
            mass, _ = np.histogram(atoms[:, 0], edges, weights=weights)
            keep = mass > 1e-4
            centers = 0.5 * (edges[1:] + edges[:-1])
            mass_ax.vlines(centers[keep], 0, mass[keep], color="tab:red", lw=3, label="nu (mass)")
            mass_ax.set_ylabel("mass of the fitted nu (per bin)")
            mass_ax.set_ylim(0, max(1e-9, mass.max()) * 1.15)
            extra = mass_ax.get_legend_handles_labels()
        handles = ax.get_legend_handles_labels()
        ax.legend(
            handles[0] + extra[0], handles[1] + extra[1], loc="upper left", title=legend_title
        )
    else:
        fig, ax = plt.subplots(figsize=(6.5, 6), layout="constrained")
        shown = _cuts(points, 5000)
        ax.scatter(points[shown, 0], points[shown, 1], s=6, color="0.6", label="x")
        xs, ys = bounds[:, 0], bounds[:, 1]
        mass, ex, ey = np.histogram2d(
            atoms[:, 0],
            atoms[:, 1],
            bins=50,
            range=[[xs.min(), xs.max()], [ys.min(), ys.max()]],
            weights=weights,
        )
        ix, iy = np.nonzero(mass > 1e-3)
        cx, cy = 0.5 * (ex[1:] + ex[:-1]), 0.5 * (ey[1:] + ey[:-1])
        ax.scatter(
            cx[ix],
            cy[iy],
            s=2000 * mass[ix, iy],
            color="tab:red",
            alpha=0.6,
            label="nu (area = mass)",
        )
        ax.set_xlabel(names[0])
        ax.set_ylabel(names[1])
        ax.set_aspect("equal", adjustable="datalim")
        ax.legend(loc="upper left", title=legend_title)
    ax.set_title(title)
    return png_bytes(fig)


def figure_z_hat(points, names, z_hat, intervals, labels=("x", "z")) -> bytes:
    """z_hat_i against x_i per coordinate (at most 4), with 50% and 90% intervals; ``labels``
    name the two axes (binomial counts: the observed and the estimated proportions)."""
    z = np.asarray(z_hat).reshape(points.shape)
    coords = min(points.shape[1], 4)
    fig, axes = plt.subplots(
        1, coords, figsize=(4.6 * coords + 1, 4.2), layout="constrained", squeeze=False
    )
    shown = _cuts(points)
    for j, ax in enumerate(axes[0]):
        x = points[shown, j]
        for prob, color, width in ((0.9, "tab:orange", 1.0), (0.5, "tab:red", 2.2)):
            lo, hi = (np.asarray(a).reshape(points.shape)[shown, j] for a in intervals[prob])
            ax.vlines(
                x, lo, hi, color=color, lw=width, alpha=0.5, label=f"{round(prob * 100)}% interval"
            )
        ax.scatter(x, z[shown, j], s=8, color="k", zorder=3, label=f"{labels[1]}_hat")
        edge = [min(x.min(), z[:, j].min()), max(x.max(), z[:, j].max())]
        ax.plot(edge, edge, ls="--", color="0.5", lw=1, label=f"{labels[1]} = {labels[0]}")
        ax.set_xlabel(f"{labels[0]} ({names[j]})")
        ax.set_ylabel(f"{labels[1]} ({names[j]})")
        if j == 0:
            ax.legend(loc="upper left", fontsize=8)
    return png_bytes(fig)


class DeconvolveData(NamedTuple):
    """A checked ``deconvolve`` problem (``check_deconvolve``).

    Attributes:
        data: the observations x, (N, p) (binomial: Brown's x, one column "x").
        sigma: a float (one sigma) or the standard errors as (N, 1) (one per row) or (N, p)
            (one per row and coordinate) float64.
        se: the standard errors' ``Table`` (``--se`` or binomial), else None.
        counts: the binomial counts' ``Table`` (hits, trials), else None.
    """

    data: Table
    sigma: float | np.ndarray
    se: Table | None = None
    counts: Table | None = None


def _deconvolve_csv(problem: DeconvolveData, fit) -> str:
    table = problem.data
    points = table.values
    p = points.shape[1]
    z = np.asarray(fit.z_hat).reshape(points.shape)
    cols = {"row": np.arange(1, points.shape[0] + 1), "line": table.lines}
    if problem.counts is not None:
        hits, trials = problem.counts.values.T
        counts = (hits.astype(np.int64), trials.astype(np.int64))  # whole numbers, checked
        cols |= dict(zip(problem.counts.columns, counts, strict=True))
        cols["p_raw"] = hits / trials
    elif problem.se is not None:
        for j, name in enumerate(problem.se.columns):
            cols[name] = problem.se.values[:, j]
    for j, name in enumerate(table.columns):
        cols[name] = points[:, j]
        if problem.counts is not None:
            cols["se"] = problem.se.values[:, 0]
        cols[f"z_hat_{name}"] = z[:, j]
        for prob in (0.5, 0.9):
            lo, hi = (np.asarray(a).reshape(-1, p)[:, j] for a in fit.intervals[prob])
            cols[f"lower_{round(prob * 100)}_{name}"] = lo
            cols[f"upper_{round(prob * 100)}_{name}"] = hi
    if problem.counts is not None:
        cols["p_hat"] = proportion_scale(z[:, 0])
        for prob in (0.5, 0.9):
            for side, bound in zip(("lower", "upper"), fit.intervals[prob], strict=True):
                cols[f"p_{side}_{round(prob * 100)}"] = proportion_scale(np.reshape(bound, -1))
    return pd.DataFrame(cols).to_csv(index=False)


def deconvolve_output_columns(columns, se=(), counts=None) -> list[str]:
    """The columns of z_hat.csv for data columns ``columns``, standard-error columns ``se``
    (``--se``) or, binomial, the counts' columns ``counts`` (hits, trials; ``columns`` is then
    ("x",))."""
    out = ["row", "line"]
    if counts is not None:
        out += [*counts, "p_raw"]
    out += list(se)
    for name in columns:
        out += [name, *(["se"] if counts is not None else []), f"z_hat_{name}"]
        out += [f"{side}_{q}_{name}" for q in (50, 90) for side in ("lower", "upper")]
    if counts is not None:
        out += ["p_hat"] + [f"p_{side}_{q}" for q in (50, 90) for side in ("lower", "upper")]
    return out


def _sigma_option(problem: DeconvolveData) -> str:
    """The option the user gave the noise scale by, for the messages."""
    if problem.counts is not None:
        return "--binomial"
    return "--sigma" if problem.se is None else "--se"


def check_deconvolve(table: Table, sigma, method: str, *, binomial: bool = False) -> DeconvolveData:
    """Argument checks of ``run_deconvolve`` that need no JAX; returns the checked problem.

    ``sigma`` is a number (``--sigma``) or the standard errors' ``Table``
    (``attnbayes.app.user_data.read_standard_errors``: one column, or one per data column, on
    the same lines); with ``binomial`` the table holds the counts (hits, trials;
    ``attnbayes.app.user_data.read_counts``) and ``sigma`` is None. Values whose squared
    distances overflow are named by file, line and column, and the library's value checks
    (``check_problem``) by the file or the option that gave sigma."""
    entry = offered_method("deconvolve", "deconvolution", method)
    if binomial:
        if sigma is not None:
            raise InputError("--binomial: takes no --sigma or --se (s_i comes from the trials)")
        if table.values.shape[1] != 2:
            raise InputError(f"{table.path}: --binomial: expected two columns, hits and trials")
        data, se = binomial_data(table)
        problem = DeconvolveData(data, se.values, se, table)
    elif isinstance(sigma, Table):
        _check_se_table(table, sigma)
        problem = DeconvolveData(table, np.asarray(sigma.values, np.float64), sigma)
    else:
        if sigma is None:
            raise InputError("deconvolve: give --sigma (one noise sd) or --se (a column of them)")
        if isinstance(sigma, bool) or not isinstance(sigma, int | float | np.floating):
            raise InputError(f"--sigma: expected a number > 0, got {sigma!r}")
        sigma = float(sigma)
        if not math.isfinite(sigma) or sigma <= 0:
            raise InputError(f"--sigma: must be a finite number > 0, got {sigma}")
        problem = DeconvolveData(table, sigma)
    data = problem.data
    if not np.all(np.isfinite(data.values)):
        raise InputError(f"{data.path}: contains missing or non-finite values")
    se_names = () if problem.se is None or binomial else problem.se.columns
    counts = table.columns if binomial else None
    check_columns_unique(deconvolve_output_columns(data.columns, se_names, counts))
    if entry.name == "learned":
        _check_learned(data, method)
    _check_spread(problem)
    from ..inference.deconvolution.em import check_problem

    option = _sigma_option(problem)
    try:  # the library's other value checks, on what the user gave
        check_problem(_library_x(data.values), library_sigma(problem.sigma))
    except ValueError as err:
        message = str(err)
        if message.startswith("sigma: "):
            raise InputError(f"{option}: {message.removeprefix('sigma: ')}") from None
        raise InputError(f"{data.path}: {message.removeprefix('x: ')}") from None
    if entry.name == "learned":
        from ..inference.deconvolution.learned.grid_stack import check_grid_resolution

        scales = np.broadcast_to(
            np.asarray(problem.sigma, np.float64).reshape(-1), data.values.shape[:1]
        )
        try:  # the grid's spacing against the smallest standard error (outliers stretch it)
            check_grid_resolution(data.values[:, 0], scales, entry.defaults["grid_size"])
        except ValueError as err:
            raise InputError(f"{data.path}: --method {method}: {err}") from None
    return problem


def _check_learned(data: Table, method: str) -> None:
    """The grid stack's own refusals, before JAX: scalar data (one column) with a spread."""
    p = data.values.shape[1]
    if p != 1:
        raise InputError(
            f"--method {method}: the grid stack is for scalar data (p = 1), got p = {p} "
            f"columns ({', '.join(data.columns)}); pick one with --columns, or use --method em "
            "or npmle for points in R^p"
        )
    if data.values.shape[0] < 2:
        raise InputError(
            f"{data.path}: {data.values.shape[0]} row; --method {method} needs at least two"
        )
    if np.ptp(data.values) == 0:
        raise InputError(
            f"{data.path}: every value of {data.columns[0]} is equal; --method {method} "
            "needs a spread (its grid spans min to max)"
        )


def _stack_text(metadata: dict, params) -> str:
    """Which stack ``--method learned`` runs, and the prior it was trained on, in a sentence
    (from the shipped file's metadata; ``scripts/train_pretrained_grid_stack.py`` writes it)."""
    from ..inference.deconvolution.learned.grid_stack import PRETRAINED_FILE
    from ..inference.deconvolution.learned.training import FAMILIES

    text = (
        f"the grid stack, version 2 ({PRETRAINED_FILE}, pretrained_grid_stack: "
        f"{params.num_layers} layers"
    )
    if "grid_size" in metadata:
        text += f", a grid of {metadata['grid_size']:g} keys"
    text += f"), trained on simulated tasks: mixing measures of the families {', '.join(FAMILIES)}"
    if "min_points" in metadata and "max_points" in metadata:
        text += f", N = {metadata['min_points']:g} to {metadata['max_points']:g} points"
    if "max_ratio" in metadata:
        text += f", standard errors up to {metadata['max_ratio']:g} times apart"
    if "homoscedastic_prob" in metadata:
        text += f" (all equal in {metadata['homoscedastic_prob']:.0%} of tasks)"
    if "num_steps" in metadata:
        text += f"; {metadata['num_steps']:g} training steps"
    return text + "; its model card is learned/pretrained/MODEL_CARD_V2.md"


def _check_se_table(table: Table, se: Table) -> None:
    """The standard errors' Table against the data's: the same rows, one column or p, > 0."""
    n, p = table.values.shape
    if se.values.ndim != 2 or se.values.shape[0] != n or se.values.shape[1] not in (1, p):
        raise InputError(
            f"--se: expected {n} rows of one column or {p}, got shape {se.values.shape}"
        )
    if not np.array_equal(se.lines, table.lines):
        raise InputError(f"--se: the standard errors come from other lines than {table.path}'s")
    bad = np.argwhere(~(np.asarray(se.values, np.float64) > 0))
    if bad.size:
        i, j = (int(v) for v in bad[0])
        raise InputError(
            f"{se.where(i, j)}: --se: a standard error must be > 0, got {se.values[i, j]:g}"
        )


def _library_x(points: np.ndarray) -> np.ndarray:
    """x as the library takes it: (N,) for one column, else (N, p)."""
    return points[:, 0] if points.shape[1] == 1 else points


def library_sigma(sigma) -> float | np.ndarray:
    """sigma as the library takes it (the sigma convention): a float, (N,) for one standard
    error per row (a (N, 1) column), or (N, p) per row and coordinate."""
    if np.ndim(sigma) == 0:
        return float(sigma)
    sigma = np.asarray(sigma, np.float64)
    return sigma[:, 0] if sigma.shape[1] == 1 else sigma


def _check_spread(problem: DeconvolveData) -> None:
    """Refuse values whose squared distances overflow, naming the file, line and column.

    The rule is the library's (``attnbayes.inference.deconvolution.em.check_problem``, through
    ``attnbayes.validation.check_scaled_spread``): every column's spread (max - min) / sigma at
    most ``max_scaled_spread(float64, N, p)`` = sqrt(finfo.max / (4 N p)), sigma the smallest
    standard error when they differ by row; the cell named is the column's value farthest
    from its median."""
    from ..validation import max_scaled_spread

    table = problem.data
    points = table.values
    n, p = points.shape
    scale = float(np.min(problem.sigma))
    limit = max_scaled_spread(np.float64, n, p)
    with np.errstate(over="ignore", invalid="ignore"):
        spread = (points.max(axis=0) - points.min(axis=0)) / scale
        bad = np.flatnonzero(~(spread <= limit))
        if not bad.size:
            return
        j = int(bad[0])
        column = points[:, j]
        i = int(np.argmax(np.abs(column - np.median(column))))
    option = _sigma_option(problem)
    given = f"--sigma {scale:g}" if option == "--sigma" else f"the smallest {option} {scale:g}"
    raise InputError(
        f"{table.where(i, j)}: {column[i]:.3g} is too far from the other values for "
        f"{given}: the column's spread (max - min) / sigma = {spread[j]:.2g} "
        f"exceeds {limit:.2g} (float64, N = {n}, p = {p}), where the squared distances "
        f"overflow; rescale the column or {option}"
    )


def available_memory_bytes() -> int:
    """Memory a run may use: ``ATTNBAYES_MEMORY_LIMIT`` (bytes) if set, else the kernel's
    MemAvailable (Linux), else the physical memory."""
    env = os.environ.get("ATTNBAYES_MEMORY_LIMIT", "").strip()
    if env:
        try:
            value = float(env)
        except ValueError:
            value = -1.0
        if not (math.isfinite(value) and value > 0):
            raise InputError(f"ATTNBAYES_MEMORY_LIMIT: expected a number of bytes > 0, got {env!r}")
        return int(value)
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _gigabytes(num_bytes: float) -> str:
    return f"{num_bytes / 1e9:.1f} GB" if num_bytes >= 1e8 else f"{num_bytes / 1e6:.0f} MB"


def _interval_memory_bytes(n: int, k: int, block_size: int | None) -> int:
    """Peak bytes of the plug-in intervals (``attnbayes.inference.deconvolution.comparison``): the
    responsibilities, their columns in atom order and their cumulative sums, N x K float64 each when
    dense, on row blocks of ``INTERVAL_BLOCK_ELEMENTS`` entries when streamed."""
    entries = n * k if block_size is None else min(n * k, INTERVAL_BLOCK_ELEMENTS)
    return 3 * 8 * entries


def check_em_memory(shape, block_size: int | None, memory_limit: int | None = None) -> None:
    """Refuse an em fit whose E-step would not fit in memory, before computing (InputError).

    The estimate is the larger of ``attnbayes.inference.deconvolution.em.estep_memory_bytes`` with K
    = N atoms (the fit starts one atom at every row) and the plug-in intervals' N x K arrays; the
    message names the alternatives: npmle, whose memory is linear in N,
    and ``--block-size``, with its memory and an estimate of its time per EM step
    (``STREAMED_SECONDS_PER_PAIR``).
    """
    from ..inference.deconvolution import em

    n, p = shape
    limit = available_memory_bytes() if memory_limit is None else int(memory_limit)
    need = max(
        em.estep_memory_bytes(n, n, p, np.float64, block_size=block_size),
        _interval_memory_bytes(n, n, block_size),
    )
    if need <= limit:
        return
    if block_size is not None:
        raise InputError(
            f"--block-size: the streamed E-step with blocks of {block_size} on N = {n} rows "
            f"needs about {_gigabytes(need)} of memory and {_gigabytes(limit)} is available; "
            "pass a smaller --block-size"
        )
    block = SUGGESTED_BLOCK_SIZE
    streamed = max(
        em.estep_memory_bytes(n, n, p, np.float64, block_size=block),
        _interval_memory_bytes(n, n, block),
    )
    step_s = STREAMED_SECONDS_PER_PAIR * n * n
    raise InputError(
        f"--method em: the dense E-step on N = {n} rows (K = N atoms) needs about "
        f"{_gigabytes(need)} of memory and {_gigabytes(limit)} is available; use --method "
        f"npmle (memory linear in N) or --block-size {block} (about {_gigabytes(streamed)}; "
        f"about {step_s:.0f} s per EM step on 2 cores, up to 500 steps)"
    )


def _measure_csv(columns, measure) -> str:
    """The fitted nu, one row per atom (sorted by the first coordinate): weight, atom_c."""
    atoms = np.asarray(measure.atoms, np.float64).reshape(len(measure.weights), -1)
    weights = np.asarray(measure.weights, np.float64)
    order = np.argsort(atoms[:, 0], kind="stable")
    frame = pd.DataFrame({"weight": weights[order]})
    for j, col in enumerate(columns):
        frame[f"atom_{col}"] = atoms[order, j]
    return frame.to_csv(index=False)


def _deconvolve_diagnostics(datatree, sizes: dict) -> tuple[dict, str]:
    """diagnostics.csv, posterior.nc and the HTML section of a sampler's run."""
    from ..inference.diagnostics import diagnostics

    post = datatree["posterior"]
    diag = diagnostics(datatree, var_names=[v for v in INVARIANTS if v in post])
    files = {
        "diagnostics.csv": diag.table.rename_axis("element").reset_index().to_csv(index=False),
        "posterior.nc": datatree_writer(datatree),
    }
    cdf = "the CDF of nu on a grid, " if "nu_cdf" in post else ""
    hamiltonian = "sample_stats" in datatree.children and "diverging" in datatree["sample_stats"]
    div = f"{diag.num_divergences}" if hamiltonian else "none (not a Hamiltonian sampler)"
    section = f"""
<h2>Sampler diagnostics</h2>
<p class="note">The atoms are exchangeable, so R-hat (rank-normalised split) and bulk/tail ESS
are computed on quantities every labelling agrees on: z_mean = E[z_i | x_i, nu] per point,
{cdf}and the total log-likelihood. {diag.num_chains} chains x {diag.num_draws} draws after
{sizes["num_warmup"]} warmup; divergent transitions: {div}. Elements that never vary are left
out ({diag.num_constant}). Every element is in <code>diagnostics.csv</code>.</p>
{sampler_verdict(diag, diag.num_chains * diag.num_draws, hamiltonian)}
{table_html(diagnostics_by_quantity(diag.table))}"""
    return files, section


def fit_warnings(library: str, table: pd.DataFrame, fit) -> list[str]:
    """What the user must be told about a point fit: an iteration cap reached before the
    stopping rule (attention-EM, the NPMLE: ``converged`` 0 in the comparison's table), or a
    normal prior whose variance sits on its boundary 0 ("sure", "normal-eb"), which pools every
    unit to one location with plug-in intervals that ignore the hyperparameters' uncertainty.
    The samplers' diagnostics have their own verdict (``pages.sampler_verdict``)."""
    out = []
    values = dict(zip(table["metric"], table["value"], strict=False))
    if "converged" in values and not values["converged"] >= 1:
        iterations = values.get("iterations")
        cap = "" if iterations is None or iterations != iterations else f" ({iterations:g})"
        out.append(
            f"{library} stopped at its iteration cap{cap} before its convergence rule was met: "
            "the fit may not be the maximum (run it longer)"
        )
    prior_variance = (fit.hyperparameters or {}).get("prior_variance")
    if prior_variance is not None and np.any(np.asarray(prior_variance) <= 0):
        out.append(
            f"{library}: the fitted prior variance sits on its boundary 0: every unit is pooled "
            "to the common location and its interval has width 0, which ignores the "
            "uncertainty in the prior variance (the normal hierarchical model by NUTS keeps it)"
        )
    return out


def _hyperparameter_rows(hyperparameters: dict, columns, num_rows: int) -> dict:
    """{name: value} of a normal-prior rule's fitted hyperparameters
    (``MethodFit.hyperparameters``): a number, one row per data column for a value per
    coordinate, "name (column)", and the range "min to max" of a value per observation (the
    shrinkage factors b_i)."""
    rows = {}
    for key, value in hyperparameters.items():
        value = np.asarray(value, np.float64)
        if value.ndim == 0:
            rows[key] = float(value)
        elif value.shape[0] == num_rows and (value.ndim == 2 or len(columns) == 1):
            per = value.reshape(num_rows, -1)
            for j, column in enumerate(columns[: per.shape[1]]):
                label = key if len(columns) == 1 else f"{key} ({column})"
                rows[f"{label}, per row"] = f"{per[:, j].min():.4g} to {per[:, j].max():.4g}"
        else:
            for column, item in zip(columns, value.reshape(-1), strict=True):
                rows[f"{key} ({column})"] = float(item)
    return rows


def _se_text(problem: DeconvolveData) -> str:
    """How the page states the noise scale: sigma, or the standard errors' source and range."""
    if problem.se is None:
        return f"{problem.sigma:g}"
    values = problem.sigma
    spread = f"{values.min():.3g} to {values.max():.3g} (median {np.median(values):.3g})"
    if problem.counts is not None:
        return f"per row, 1 / (2 sqrt({problem.counts.columns[1]})): {spread}"
    names = ", ".join(problem.se.columns)
    each = "per row" if len(problem.se.columns) == 1 else "per row and coordinate"
    return f"{each}, from {names}: {spread}"


def run_deconvolve(
    table: Table,
    sigma=None,
    *,
    binomial: bool = False,
    method: str = DECONVOLVE_DEFAULT,
    out_dir="reports",
    name: str | None = None,
    seed: int = 0,
    num_atoms: int | None = None,
    num_warmup: int | None = None,
    num_samples: int | None = None,
    num_chains: int | None = None,
    block_size: int | None = None,
    memory_limit: int | None = None,
    progress: Callable[[str], None] | None = None,
    argv: list[str] | None = None,
) -> Path:
    """Fit nu with one method on ``table`` (N rows, p columns) and write OUT/NAME/.

    Args:
        table: the observations (``attnbayes.app.user_data.read_table``); one column is scalar
            data (N,), p columns are points in R^p. With ``binomial``: the counts, two columns
            hits H_i and trials T_i (``attnbayes.app.user_data.read_counts``).
        sigma: the known noise scale: a number (every row and coordinate), or the standard
            errors' ``Table`` (``attnbayes.app.user_data.read_standard_errors``): one column
            s_i (x_i ~ N(z_i, s_i^2 I_p)) or one per data column s_ic; None with ``binomial``.
        binomial: fit Brown's transform of the counts, x_i = arcsin(sqrt((H_i + 1/4) /
            (T_i + 1/2))) with s_i = 1 / (2 sqrt(T_i)) (``brown_transform``); z_hat.csv
            carries the results on that scale and on the proportion scale p = sin(z)^2.
        method: a method the registry offers to ``deconvolve``, by name or alias (e.g.
            "attention-em" (or "em"), "npmle", "nuts" or "gibbs").
        out_dir, name: the output folder OUT/NAME; NAME defaults to ``<stem>-deconvolve-<method>``.
        seed: seed of the samplers' ``jax.random`` key.
        num_atoms: K of the samplers' finite mixture; default ``DEFAULT_NUM_ATOMS`` (5).
        num_warmup, num_samples, num_chains: sampler sizes; defaults the registry's
            (``attnbayes.app.parser.DECONVOLVE_SAMPLERS``: nuts 2 x (500 + 500), gibbs
            4 x (1000 + 2000)). Sizes too small for the reported diagnostics
            (``attnbayes.inference.mcmc.check_sampler_sizes``) are refused before sampling.
        block_size: attention-EM only: stream the E-step over blocks of this many rows and
            atoms.
        memory_limit: bytes the em fit may use (default: ``available_memory_bytes()``); a
            dense E-step estimated above it is refused before computing.
        progress: called with short messages.
        argv: the command line, recorded in run.json.

    Returns:
        The path of OUT/NAME/index.html.

    Raises:
        InputError (or ValueError): bad arguments or data, before any JAX work.
        RunFailed: the run failed after it started (``NonFiniteResult`` when a quantity about
            to be written is not finite); nothing is written.
    """
    from ..inference.deconvolution.comparison import compare_deconvolution

    problem = check_deconvolve(table, sigma, method, binomial=binomial)
    entry = offered_method("deconvolve", "deconvolution", method)
    library = entry.name
    sampler = entry.returns == "draws"
    if not sampler and any(v is not None for v in (num_atoms, num_warmup, num_samples, num_chains)):
        which = join_names(DECONVOLVE_SAMPLERS)
        raise InputError(f"--num-atoms, --draws, --warmup and --chains apply to {which}")
    k = check_count("--num-atoms", num_atoms, 1)
    k = DEFAULT_NUM_ATOMS if k is None else k
    sizes = sizes_from_options(
        DECONVOLVE_SAMPLERS.get(library, {}), num_warmup, num_samples, num_chains
    )
    seed = check_count("--seed", seed, 0)
    if sampler:
        check_sampler_sizes(
            sizes["num_samples"], sizes["num_chains"], loo=True, names=("--draws", "--chains")
        )
    block_size = check_count("--block-size", block_size, 1)
    if block_size is not None and library != "attention-em":
        raise InputError("--block-size applies to --method em only")
    points = problem.data.values
    if library == "attention-em":
        check_em_memory(points.shape, block_size, memory_limit)
    if library == "gibbs":
        distinct = np.unique(points, axis=0).shape[0]
        if k > distinct:
            raise InputError(
                f"--num-atoms: K = {k} is more than the {distinct} distinct observations; the "
                f"Gibbs sampler starts its atoms at distinct data points (pass --num-atoms "
                f"{distinct} or fewer)"
            )
    target = prepare_target(out_dir, name or default_name(table.path, "deconvolve", method))
    say = progress or (lambda message: None)
    started = time.perf_counter()
    method_kwargs = {library: sizes} if sampler else None
    stack_text = None
    if library == "learned":  # the shipped stack, loaded once: what runs is what is named
        stack, stack_meta = entry.load_pretrained(metadata=True)
        stack_text = _stack_text(stack_meta, stack)
        say(f"learned: {stack_text}")
        method_kwargs = {"learned": {"params": stack}}

    columns = problem.data.columns
    with computing():
        comparison = compare_deconvolution(
            jax.random.PRNGKey(seed) if sampler else None,
            _library_x(points),
            library_sigma(problem.sigma),
            methods=(library,),
            num_atoms=k,
            em_kwargs=None if block_size is None else {"block_size": block_size},
            method_kwargs=method_kwargs,
            progress=say,
        )
        fit = comparison.fits[library]
        check_finite_output("z_hat", np.reshape(fit.z_hat, (len(points), -1)))
        for prob, bounds in fit.intervals.items():
            for side, bound in zip(("lower", "upper"), bounds, strict=True):
                check_finite_output(
                    f"{side}_{round(prob * 100)} interval", np.reshape(bound, (len(points), -1))
                )
        if fit.measure is not None:
            atoms = np.reshape(fit.measure.atoms, (len(fit.measure.weights), -1))
            check_finite_output("measure atoms", atoms, axis_name="atom")
            check_finite_output("measure weights", fit.measure.weights, axis_name="atom")
        check_finite_table("metrics", comparison.table)
    warnings = fit_warnings(library, comparison.table, fit)
    for warning in warnings:
        say(f"warning: {warning}")
    say(f"{library}: writing the outputs")
    metrics = comparison.table[["metric", "value"]]
    files: dict = {
        "z_hat.csv": _deconvolve_csv(problem, fit),
        "metrics.csv": metrics.to_csv(index=False),
    }
    settings: dict = {"method": method, "library_method": library}
    summary = {
        "input": table.path,
        "observations N": points.shape[0],
        "coordinates p": points.shape[1],
        "columns": ", ".join(columns),
    }
    if problem.counts is not None:
        settings |= {"sigma": None, "binomial": list(problem.counts.columns)}
        summary["columns"] = ", ".join(problem.counts.columns) + " (hits, trials)"
        summary["x"] = "arcsin(sqrt((H + 1/4) / (T + 1/2)))"
    elif problem.se is not None:
        settings |= {"sigma": None, "se": list(problem.se.columns)}
    else:
        settings["sigma"] = problem.sigma
    if problem.se is not None:
        settings |= {
            "se_min": float(np.min(problem.sigma)),
            "se_max": float(np.max(problem.sigma)),
        }
    summary["sigma" if problem.se is None else "standard errors s_i"] = _se_text(problem)
    summary["method"] = method if method == library else f"{method} ({library})"
    if stack_text is not None:
        summary["stack"] = stack_text
        settings["stack"] = stack_text
    if block_size is not None:
        settings["block_size"] = block_size
        summary["E-step block size"] = block_size
    if sampler:
        settings |= {"seed": seed, "num_atoms": k, **sizes}
        summary |= {
            "atoms K": k,
            "seed": seed,
            "chains": sizes["num_chains"],
            "warmup per chain": sizes["num_warmup"],
            "draws per chain": sizes["num_samples"],
        }
        diag_files, diag_html = _deconvolve_diagnostics(fit.datatree, sizes)
        files |= diag_files
    else:
        if fit.measure is not None:
            files["measure.csv"] = _measure_csv(columns, fit.measure)
        diag_html = ""
    if argv is not None:
        settings["argv"] = list(argv)
    title = f"{method}: data and the fitted mixing measure"
    if library == "learned":
        title = f"{method}: data and the stack's effective prior on its grid"
    fig_data = figure_data_and_measure(points, columns, problem.sigma, fit.measure, title)
    fig_z = figure_z_hat(points, columns, fit.z_hat, fit.intervals)
    fig_p = ""
    if problem.counts is not None:
        hits, trials = problem.counts.values.T
        p_intervals = {
            prob: tuple(proportion_scale(np.reshape(b, -1)) for b in bounds)
            for prob, bounds in fit.intervals.items()
        }
        png = figure_z_hat(
            (hits / trials)[:, None],
            [f"{problem.counts.columns[0]} / {problem.counts.columns[1]}"],
            proportion_scale(np.reshape(fit.z_hat, -1)),
            p_intervals,
            labels=("observed p", "p"),
        )
        fig_p = f"""
<h2>Proportions</h2>
<p class="note">p_hat_i = sin<sup>2</sup>(z_hat_i) against the observed H_i / T_i, with the
intervals mapped end to end (p = sin<sup>2</sup> z is increasing on [0, pi/2], where z is
clipped); p_hat_i maps the estimate of z_i back, it is not the posterior mean of p_i. The
columns p_hat, p_lower_*, p_upper_* of <code>z_hat.csv</code>.</p>
{img_tag(png, "proportions with intervals")}"""
    elapsed = time.perf_counter() - started
    summary["total wall time (s)"] = round(elapsed, 1)
    if warnings:
        settings["fit_warnings"] = warnings
    warnings_html = "".join(
        f"\n<p><strong>Warning:</strong> {html.escape(w)}</p>" for w in warnings
    )

    if points.shape[1] == 1:
        if problem.se is None:
            note_data = (
                "Histogram of x with the fitted density of x, sum_k w_k N(t; mu_k, "
                "sigma^2), and the mass of the fitted nu per bin."
            )
        else:
            note_data = (
                "Histogram of x and the mass of the fitted nu per bin. The standard errors "
                f"differ by row ({_se_text(problem)}), so no single density of x is drawn."
            )
    else:
        note_data = "The data x with the mass of the fitted nu on a 50 x 50 grid."
        if points.shape[1] > 2:
            note_data += f" Only coordinates 1 and 2 of {points.shape[1]} are drawn."
        if problem.se is not None:
            note_data += f" Standard errors {_se_text(problem)}."
    if sampler:
        note_data += " For a sampler, nu is the posterior mean measure (all draws pooled)."
    if library == "learned":
        note_data += (
            " For the learned stack, nu is its effective prior discretised on its grid (the "
            "posterior moments use the prior's normal part exactly); the intervals are normal, "
            "z_hat -+ q sd."
        )
    prior_html = ""
    if fit.measure is None:  # a parametric prior (normal): the data alone, the prior's numbers
        noise = f"standard errors {_se_text(problem)}" if problem.se is not None else "one sigma"
        note_data = (
            f"The data x ({noise}). This method's prior is normal, not a discrete nu: its "
            "fitted hyperparameters are in the table below."
        )
        rows = _hyperparameter_rows(fit.hyperparameters or {}, columns, points.shape[0])
        prior_html = settings_table(rows) if rows else ""
    note_z = " 2000 of the points are drawn." if points.shape[0] > 2000 else ""
    listing = ", ".join(f"<code>{f}</code>" for f in sorted([*files, "index.html", MANIFEST]))
    if problem.counts is not None:
        model = """Binomial counts H_i ~ Bin(T_i, p_i), through Brown's (2008)
variance-stabilising transform x_i = arcsin(sqrt((H_i + 1/4) / (T_i + 1/2))), about
N(z_i, s_i<sup>2</sup>) with z_i = arcsin(sqrt(p_i)) and s_i = 1 / (2 sqrt(T_i)); then
Gaussian deconvolution: z_i ~ nu, x_i | z_i ~ N(z_i, s_i<sup>2</sup>)"""
    elif problem.se is not None:
        model = """Gaussian deconvolution: z_i ~ nu, x_i | z_i ~ N(z_i, s_i<sup>2</sup>
I<sub>p</sub>) with a known standard error s_i per row (or s_ic per row and coordinate)"""
    else:
        model = """Gaussian deconvolution: z_i ~ nu, x_i | z_i ~ N(z_i, sigma<sup>2</sup>
I<sub>p</sub>) with known sigma"""
    body = f"""
<h1>attnbayes deconvolve: {html.escape(Path(table.path).name)}</h1>
<p>{model}; the task is to estimate nu and each z_i. {html.escape(entry.description)}</p>
{settings_table(summary)}
<h2>Fit</h2>
{table_html(metrics.set_index("metric"))}{warnings_html}
{diag_html}
<h2>Data and the fitted mixing measure</h2>
<p class="note">{note_data}</p>
{img_tag(fig_data, "data and fitted measure")}{prior_html}
<h2>z_hat with intervals</h2>
<p class="note">Each point: z_hat_i against x_i, with its 50% and 90% equal-tailed intervals;
the dashed line is z = x (no shrinkage).{note_z} All of them are in <code>z_hat.csv</code>.</p>
{img_tag(fig_z, "z_hat with intervals")}{fig_p}
<p class="note">Files: {listing}.</p>
"""
    return publish_run(target, files, "deconvolve", table, body, settings, elapsed, say)


__all__ = [
    "INVARIANTS",
    "STREAMED_SECONDS_PER_PAIR",
    "SUGGESTED_BLOCK_SIZE",
    "DeconvolveData",
    "available_memory_bytes",
    "check_deconvolve",
    "check_em_memory",
    "deconvolve_output_columns",
    "figure_data_and_measure",
    "figure_z_hat",
    "fit_warnings",
    "library_sigma",
    "run_deconvolve",
]
