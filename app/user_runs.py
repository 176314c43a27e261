"""Run one method on a user's data and write its outputs: ``attnbayes deconvolve`` / ``filter``.

``run_deconvolve(table, sigma, ...)`` fits the Gaussian deconvolution model
z_i ~ nu, x_i | z_i ~ N(z_i, sigma^2 I_p) with one method of
``attnbayes.inference.deconvolution.comparison`` and writes OUT/NAME/ with

- ``z_hat.csv``: row, line, then per data column c: c, z_hat_c, lower_50_c, upper_50_c,
  lower_90_c, upper_90_c (equal-tailed posterior intervals of z_i);
- ``measure.csv`` (em, npmle): the fitted mixing measure, weight and atom_c per atom;
- ``metrics.csv``: metric, value (log-likelihood, wall time; samplers: LOO, R-hat, ESS,
  divergences);
- for nuts and gibbs ``posterior.nc`` (the DataTree with the permutation-invariant quantities,
  netCDF) and ``diagnostics.csv`` (R-hat, bulk and tail ESS per invariant element);
- ``index.html`` (self-contained: data with the fitted measure, z_hat with intervals,
  sampler diagnostics) and ``run.json`` (what was run on what).

``run_filter(table, params, ...)`` runs a filter (imm, gpb2, gpb1, rbpf; each followed by
Kim's smoother) or the Gibbs sampler of the switching state-space model and writes
``states.csv`` (one row per step: t, line, the observations, filtered and smoothed means, sds
and mode probabilities), ``metrics.csv``, ``params.json`` (the parameters used, in the format
``--params`` reads), ``index.html``, ``run.json`` and for gibbs ``posterior.nc`` and
``diagnostics.csv``.

Everything is computed first, then written into a temporary folder next to the target and
renamed into place (``attnbayes.app.outputs``): a failed run leaves nothing behind. An existing
OUT/NAME is replaced only when an earlier attnbayes run wrote it (its ``run.json`` says so),
so a typo in ``--name`` cannot wipe an unrelated folder.
"""

from __future__ import annotations

import datetime
import html
import json
import math
import os
import re
import time
from collections.abc import Callable
from pathlib import Path

import jax
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import xarray as xr

from ..inference import methods as registry
from ..inference.deconvolution.comparison import INTERVAL_BLOCK_ELEMENTS
from ..inference.mcmc import check_sampler_sizes
from .outputs import (
    MANIFEST,
    assembling,
    check_finite_output,
    check_finite_table,
    computing,
    manifest_json,
    prepare_target,
    versions,
    write_atomic,
)
from .pages import img_tag, page, png_bytes, save_datatree, table_html
from .user_data import InputError, Table, params_document

# the CLI's --method names -> the method registry's (attnbayes.inference.methods)
DECONVOLVE_METHODS = {"em": "attention-em", "npmle": "npmle", "nuts": "nuts", "gibbs": "gibbs"}
_SIZES = ("num_warmup", "num_samples", "num_chains")


def _registry_sizes(reading: str, name: str) -> dict:
    defaults = registry.get_method(reading, name).defaults
    return {k: defaults[k] for k in _SIZES}


DECONVOLVE_SAMPLERS = tuple(
    cli
    for cli, name in DECONVOLVE_METHODS.items()
    if registry.get_method("deconvolution", name).returns == "draws"
)
DECONVOLVE_SAMPLER_DEFAULTS = {
    cli: _registry_sizes("deconvolution", DECONVOLVE_METHODS[cli]) for cli in DECONVOLVE_SAMPLERS
}
DEFAULT_NUM_ATOMS = 5
# em --block-size: the block suggested when the dense E-step does not fit, and the time of a
# streamed E-step per row-atom pair measured in BENCHMARKS.md (N = 20k-100k, 2-D, 2 cores)
SUGGESTED_BLOCK_SIZE = 1024
STREAMED_SECONDS_PER_PAIR = 2e-8
FILTER_METHODS = ("imm", "gpb2", "gpb1", "rbpf", "gibbs")
FILTER_GIBBS_DEFAULTS = _registry_sizes("switching", "gibbs")
FIT_METHODS = ("mle", "em", "nuts")
FIT_NUTS_DEFAULTS = {"num_warmup": 500, "num_samples": 500, "num_chains": 2}
DEFAULT_STARTS = 8
_FIT_TEXT = {
    "mle": "maximum likelihood (L-BFGS on unconstrained coordinates from several starts; "
    "standard errors from the Hessian by the delta method)",
    "em": "EM (Kim's smoother in the E-step; the expected complete-data log-likelihood "
    "maximised in the M-step)",
    "nuts": "NUTS over the parameters with the states and modes integrated out by the filter; "
    "the posterior mean is used",
}
DEFAULT_PARTICLES = registry.get_method("switching", "rbpf").defaults["num_particles"]
SCENARIO_LABELS = {
    "maneuvering-target": (("px", "vx", "py", "vy"), ("constant-velocity", "coordinated-turn")),
    "maneuvering-target-cwna": (
        ("px", "vx", "py", "vy"),
        ("constant-velocity", "coordinated-turn"),
    ),
}
RHAT_OK = 1.01
TARGET_COLORS = {"filtered": "tab:blue", "smoothed": "tab:red"}
INVARIANTS = ("z_mean", "nu_cdf", "log_lik_total")

_DECONVOLVE_TEXT = {
    "em": "attention-EM: K = N atoms started at the data with weights 1/N, moved by EM steps "
    "whose E-step is softmax attention (at most 500); z_hat is one more attention step, the "
    "empirical-Bayes posterior mean under the fitted nu. The intervals come from the discrete "
    "posterior over the fitted atoms: a plug-in that ignores the uncertainty in nu, so they "
    "are too narrow where it matters.",
    "npmle": "NPMLE: the Kiefer-Wolfowitz maximum-likelihood nu on a fixed grid of 300 points "
    "(mix-SQP), then its empirical-Bayes posterior (GMLEB): z_hat is the posterior mean and "
    "the intervals come from the discrete posterior over the grid (plug-in, like EM's).",
    "nuts": "NUTS on a finite Dirichlet mixture of K atoms (weights ~ Dirichlet(1), atoms ~ "
    "N(mean x, (2 sd x + sigma)^2), sorted in 1-D): z_hat is the posterior mean of "
    "E[z_i | x_i, nu], the intervals are posterior quantiles of z_i with nu integrated out.",
    "gibbs": "blocked conjugate Gibbs on the same finite Dirichlet mixture as NUTS (labels, "
    "weights, atoms in turn): z_hat is the posterior mean of E[z_i | x_i, nu], the intervals "
    "are posterior quantiles of z_i with nu integrated out.",
}
_FILTER_TEXT = {
    "imm": "IMM filter (mix, then one Kalman step per mode; Blom and Bar-Shalom 1988)",
    "gpb2": "GPB2 filter (M^2 Kalman steps, collapsed per new mode)",
    "gpb1": "GPB1 filter (collapse to one Gaussian, then one Kalman step per mode)",
    "rbpf": "Rao-Blackwellised particle filter (particles over the modes, a Kalman filter each)",
    "gibbs": "Gibbs sampler of the smoothing posterior (modes by Gerlach-Carter-Kohn with the "
    "states integrated out, states by Kalman forward filtering, backward sampling)",
}


# ----------------------------------------------------------------------------- output folder


def default_name(path: str, command: str, method: str) -> str:
    """``<file stem>-<command>-<method>`` with characters outside [A-Za-z0-9._-] replaced."""
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", Path(path).stem).lstrip(".") or "data"
    return f"{stem}-{command}-{method}"


def check_output(out_dir, name: str) -> Path:
    """The target folder OUT/NAME, checked before any work
    (``attnbayes.app.outputs.prepare_target``: a plain name, an OUT that is a writable folder, no
    existing OUT/NAME that attnbayes did not write)."""
    return prepare_target(out_dir, name)


def _publish(target: Path, files: dict) -> None:
    """Write ``files`` into a temporary folder next to ``target`` and rename it into place.

    ``files`` maps file names to str or bytes contents, or to a callable that writes the
    file at the path it is given (large files: no copy in memory). On failure nothing is
    left behind (``attnbayes.app.outputs.assembling``).
    """
    with assembling(target) as tmp:
        for name, data in files.items():
            if callable(data):
                data(tmp / name)
            else:
                write_atomic(tmp / name, data)


def _datatree_writer(datatree: xr.DataTree) -> Callable[[Path], None]:
    """A writer of the DataTree as gzip-compressed netCDF (h5netcdf), without the z_i draws.

    ``z_draw`` (one draw of z_i per posterior draw, for intervals) is as large as the
    posterior predictive and ``attnbayes.inference.deconvolution.invariants.add_invariants``
    rebuilds it.
    """
    return lambda path: save_datatree(datatree, path)


def _manifest(command: str, table: Table, settings: dict, seconds: float, files) -> str:
    return manifest_json(
        command,
        input=table.path,
        input_sha256=table.sha256,
        rows=int(table.values.shape[0]),
        columns=list(table.columns),
        header=table.header,
        **settings,
        wall_time_s=round(seconds, 3),
        finished_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        versions=versions(),
        files=sorted([*files, MANIFEST]),
    )


def _check_count(name: str, value, minimum: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise InputError(f"{name}: expected an integer >= {minimum}, got {value!r}")
    return int(value)


def _sampler_sizes(defaults: dict, num_warmup, num_samples, num_chains) -> dict:
    sizes = dict(defaults)
    for key, value, minimum in (
        ("num_warmup", num_warmup, 0),
        ("num_samples", num_samples, 1),
        ("num_chains", num_chains, 1),
    ):
        checked = _check_count(
            f"--{key.removeprefix('num_').replace('samples', 'draws')}", value, minimum
        )
        if checked is not None:
            sizes[key] = checked
    return sizes


def _fmt(value) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _settings_table(rows: dict) -> str:
    frame = pd.DataFrame({"value": [_fmt(v) for v in rows.values()]}, index=list(rows))
    frame.index.name = "setting"
    return table_html(frame)


def _diagnostics_frame(diag_table: pd.DataFrame) -> pd.DataFrame:
    """Per quantity (the element names' prefix): worst R-hat, smallest bulk/tail ESS."""
    quantity = diag_table.index.str.replace(r"\[.*$", "", regex=True)
    grouped = diag_table.groupby(quantity, sort=False)
    frame = pd.DataFrame(
        {
            "elements": grouped.size().astype(float),
            "max R-hat": grouped["r_hat"].max(),
            "min ESS bulk": grouped["ess_bulk"].min(),
            "min ESS tail": grouped["ess_tail"].min(),
        }
    )
    frame.index.name = "quantity"
    return frame


def _verdict(diag, total_draws: int, divergences: bool) -> str:
    problems = []
    if not diag.max_r_hat <= RHAT_OK:
        problems.append(f"the worst R-hat is {diag.max_r_hat:.3f} (> {RHAT_OK})")
    ess_floor = min(400, total_draws / 2)
    if not min(diag.min_ess_bulk, diag.min_ess_tail) >= ess_floor:
        problems.append(
            f"the smallest ESS is {min(diag.min_ess_bulk, diag.min_ess_tail):.0f} "
            f"(< {ess_floor:.0f})"
        )
    if divergences and diag.num_divergences:
        problems.append(f"{diag.num_divergences} divergent transitions")
    if not problems:
        return (
            f"<p>No warning signs: R-hat &le; {RHAT_OK} and ESS &ge; {ess_floor:.0f} "
            "everywhere" + (", no divergences" if divergences else "") + ".</p>"
        )
    return (
        "<p><strong>Warning:</strong> "
        + "; ".join(problems)
        + ". Run more draws (--draws, --warmup) or chains (--chains) before trusting the "
        "intervals.</p>"
    )


def _cuts(values: np.ndarray, limit: int = 2000) -> np.ndarray:
    """Indices of at most ``limit`` rows spread over ``values`` (for drawing large data)."""
    n = values.shape[0]
    return np.arange(n) if n <= limit else np.unique(np.linspace(0, n - 1, limit).astype(int))


# ----------------------------------------------------------------------------- deconvolve


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
    """1-D: histogram of x, the fitted density of x and the mass of nu; p-D: the first two
    coordinates of x with the mass of nu on a grid."""
    atoms = np.asarray(measure.atoms, np.float64).reshape(len(measure.weights), -1)
    weights = np.asarray(measure.weights, np.float64)
    if points.shape[1] == 1:
        x = points[:, 0]
        fig, ax = plt.subplots(figsize=(9, 4), layout="constrained")
        lo, hi = min(x.min(), atoms.min()) - 2 * sigma, max(x.max(), atoms.max()) + 2 * sigma
        ax.hist(x, bins=min(80, max(10, x.size // 5)), density=True, color="0.85", label="x")
        grid = np.linspace(lo, hi, 400)
        ax.plot(
            grid,
            _mixture_density(grid, atoms[:, 0], weights, sigma),
            color="tab:blue",
            label="fitted density of x",
        )
        ax.set_xlabel(names[0])
        ax.set_ylabel("density of x")
        mass_ax = ax.twinx()
        edges = np.linspace(lo, hi, 101)
        mass, _ = np.histogram(atoms[:, 0], edges, weights=weights)
        keep = mass > 1e-4
        centers = 0.5 * (edges[1:] + edges[:-1])
        mass_ax.vlines(centers[keep], 0, mass[keep], color="tab:red", lw=3, label="nu (mass)")
        mass_ax.set_ylabel("mass of the fitted nu (per bin)")
        mass_ax.set_ylim(0, max(1e-9, mass.max()) * 1.15)
        handles = ax.get_legend_handles_labels()
        extra = mass_ax.get_legend_handles_labels()
        ax.legend(handles[0] + extra[0], handles[1] + extra[1], loc="upper left")
    else:
        fig, ax = plt.subplots(figsize=(6.5, 6), layout="constrained")
        shown = _cuts(points, 5000)
        ax.scatter(points[shown, 0], points[shown, 1], s=6, color="0.6", label="x")
        xs = np.concatenate([points[:, 0], atoms[:, 0]])
        ys = np.concatenate([points[:, 1], atoms[:, 1]])
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
        ax.legend(loc="upper left")
    ax.set_title(title)
    return png_bytes(fig)


def figure_z_hat(points, names, z_hat, intervals) -> bytes:
    """z_hat_i against x_i per coordinate (at most 4), with 50% and 90% intervals."""
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
        ax.scatter(x, z[shown, j], s=8, color="k", zorder=3, label="z_hat")
        edge = [min(x.min(), z[:, j].min()), max(x.max(), z[:, j].max())]
        ax.plot(edge, edge, ls="--", color="0.5", lw=1, label="z = x")
        ax.set_xlabel(f"x ({names[j]})")
        ax.set_ylabel(f"z ({names[j]})")
        if j == 0:
            ax.legend(loc="upper left", fontsize=8)
    return png_bytes(fig)


def _deconvolve_csv(table: Table, fit) -> str:
    points = table.values
    p = points.shape[1]
    z = np.asarray(fit.z_hat).reshape(points.shape)
    cols = {"row": np.arange(1, points.shape[0] + 1), "line": table.lines}
    for j, name in enumerate(table.columns):
        cols[name] = points[:, j]
        cols[f"z_hat_{name}"] = z[:, j]
        for prob in (0.5, 0.9):
            lo, hi = (np.asarray(a).reshape(-1, p)[:, j] for a in fit.intervals[prob])
            cols[f"lower_{round(prob * 100)}_{name}"] = lo
            cols[f"upper_{round(prob * 100)}_{name}"] = hi
    return pd.DataFrame(cols).to_csv(index=False)


def deconvolve_output_columns(columns) -> list[str]:
    """The columns of z_hat.csv for data columns ``columns``."""
    out = ["row", "line"]
    for name in columns:
        out += [name, f"z_hat_{name}"]
        out += [f"{side}_{q}_{name}" for q in (50, 90) for side in ("lower", "upper")]
    return out


def _check_columns_unique(columns: list[str]) -> None:
    seen = set()
    for name in columns:
        if name in seen:
            raise InputError(
                f"column name {name!r} clashes with an output column of the same name; rename "
                "that column in the file's header"
            )
        seen.add(name)


def check_deconvolve(table: Table, sigma, method: str) -> float:
    """Argument checks of ``run_deconvolve`` that need no JAX; returns sigma as a float."""
    if method not in DECONVOLVE_METHODS:
        raise InputError(f"--method: unknown {method!r}; choose from {list(DECONVOLVE_METHODS)}")
    if isinstance(sigma, bool) or not isinstance(sigma, int | float | np.floating):
        raise InputError(f"--sigma: expected a number > 0, got {sigma!r}")
    sigma = float(sigma)
    if not math.isfinite(sigma) or sigma <= 0:
        raise InputError(f"--sigma: must be a finite number > 0, got {sigma}")
    if not np.all(np.isfinite(table.values)):
        raise InputError(f"{table.path}: contains missing or non-finite values")
    _check_columns_unique(deconvolve_output_columns(table.columns))
    from ..inference.deconvolution.em import check_problem

    check_problem(table.values, sigma)  # e.g. values whose squares overflow: "x: ..."
    return sigma


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


def _deconvolve_diagnostics(datatree, method: str, sizes: dict) -> tuple[dict, str]:
    """diagnostics.csv, posterior.nc and the HTML section of a sampler's run."""
    from ..inference.diagnostics import diagnostics

    post = datatree["posterior"]
    diag = diagnostics(datatree, var_names=[v for v in INVARIANTS if v in post])
    files = {
        "diagnostics.csv": diag.table.rename_axis("element").reset_index().to_csv(index=False),
        "posterior.nc": _datatree_writer(datatree),
    }
    cdf = "the CDF of nu on a grid, " if "nu_cdf" in post else ""
    div = f"{diag.num_divergences}" if method == "nuts" else "none (Gibbs)"
    section = f"""
<h2>Sampler diagnostics</h2>
<p class="note">The atoms are exchangeable, so R-hat (rank-normalised split) and bulk/tail ESS
are computed on quantities every labelling agrees on: z_mean = E[z_i | x_i, nu] per point,
{cdf}and the total log-likelihood. {diag.num_chains} chains x {diag.num_draws} draws after
{sizes["num_warmup"]} warmup; divergent transitions: {div}. Elements that never vary are left
out ({diag.num_constant}). Every element is in <code>diagnostics.csv</code>.</p>
{_verdict(diag, diag.num_chains * diag.num_draws, method == "nuts")}
{table_html(_diagnostics_frame(diag.table))}"""
    return files, section


def run_deconvolve(
    table: Table,
    sigma: float,
    *,
    method: str = "em",
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
            data (N,), p columns are points in R^p.
        sigma: the known noise scale.
        method: "em" (attention-EM), "npmle", "nuts" or "gibbs".
        out_dir, name: the output folder OUT/NAME; NAME defaults to ``<stem>-deconvolve-<method>``.
        seed: seed of the samplers' ``jax.random`` key.
        num_atoms: K of the finite mixture (nuts, gibbs); default 5.
        num_warmup, num_samples, num_chains: sampler sizes; defaults
            ``DECONVOLVE_SAMPLER_DEFAULTS`` (nuts 2 x (500 + 500), gibbs 4 x (1000 + 2000)).
            Sizes too small for the reported diagnostics
            (``attnbayes.inference.mcmc.check_sampler_sizes``) are refused before sampling.
        block_size: em only: stream the E-step over blocks of this many rows and atoms.
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

    sigma = check_deconvolve(table, sigma, method)
    samplers = method in DECONVOLVE_SAMPLERS
    if not samplers and any(
        v is not None for v in (num_atoms, num_warmup, num_samples, num_chains)
    ):
        raise InputError("--num-atoms, --draws, --warmup and --chains apply to nuts and gibbs")
    k = _check_count("--num-atoms", num_atoms, 1)
    k = DEFAULT_NUM_ATOMS if k is None else k
    sizes = _sampler_sizes(
        DECONVOLVE_SAMPLER_DEFAULTS.get(method, {}), num_warmup, num_samples, num_chains
    )
    seed = _check_count("--seed", seed, 0)
    if samplers:
        check_sampler_sizes(
            sizes["num_samples"], sizes["num_chains"], loo=True, names=("--draws", "--chains")
        )
    block_size = _check_count("--block-size", block_size, 1)
    if block_size is not None and method != "em":
        raise InputError("--block-size applies to --method em only")
    if method == "em":
        check_em_memory(table.values.shape, block_size, memory_limit)
    if method == "gibbs":
        distinct = np.unique(table.values, axis=0).shape[0]
        if k > distinct:
            raise InputError(
                f"--num-atoms: K = {k} is more than the {distinct} distinct observations; the "
                f"Gibbs sampler starts its atoms at distinct data points (pass --num-atoms "
                f"{distinct} or fewer)"
            )
    target = check_output(out_dir, name or default_name(table.path, "deconvolve", method))
    say = progress or (lambda message: None)
    started = time.perf_counter()

    library = DECONVOLVE_METHODS[method]
    points = table.values
    x = points[:, 0] if points.shape[1] == 1 else points
    with computing():
        comparison = compare_deconvolution(
            jax.random.PRNGKey(seed) if samplers else None,
            x,
            sigma,
            methods=(library,),
            num_atoms=k,
            em_kwargs=None if block_size is None else {"block_size": block_size},
            method_kwargs={library: sizes} if samplers else None,
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
    say(f"{library}: writing the outputs")
    metrics = comparison.table[["metric", "value"]]
    files: dict = {
        "z_hat.csv": _deconvolve_csv(table, fit),
        "metrics.csv": metrics.to_csv(index=False),
    }
    settings = {"sigma": sigma, "method": method, "library_method": library}
    summary = {
        "input": table.path,
        "observations N": points.shape[0],
        "coordinates p": points.shape[1],
        "columns": ", ".join(table.columns),
        "sigma": sigma,
        "method": f"{method} ({library})",
    }
    if block_size is not None:
        settings["block_size"] = block_size
        summary["E-step block size"] = block_size
    if samplers:
        settings |= {"seed": seed, "num_atoms": k, **sizes}
        summary |= {
            "atoms K": k,
            "seed": seed,
            "chains": sizes["num_chains"],
            "warmup per chain": sizes["num_warmup"],
            "draws per chain": sizes["num_samples"],
        }
        diag_files, diag_html = _deconvolve_diagnostics(fit.datatree, method, sizes)
        files |= diag_files
    else:
        files["measure.csv"] = _measure_csv(table.columns, fit.measure)
        diag_html = ""
    if argv is not None:
        settings["argv"] = list(argv)
    title = f"{method}: data and the fitted mixing measure"
    fig_data = figure_data_and_measure(points, table.columns, sigma, fit.measure, title)
    fig_z = figure_z_hat(points, table.columns, fit.z_hat, fit.intervals)
    elapsed = time.perf_counter() - started
    summary["total wall time (s)"] = round(elapsed, 1)

    if points.shape[1] == 1:
        note_data = (
            "Histogram of x with the fitted density of x, sum_k w_k N(t; mu_k, sigma^2), and "
            "the mass of the fitted nu per bin."
        )
    else:
        note_data = "The data x with the mass of the fitted nu on a 50 x 50 grid."
        if points.shape[1] > 2:
            note_data += f" Only coordinates 1 and 2 of {points.shape[1]} are drawn."
    if samplers:
        note_data += " For a sampler, nu is the posterior mean measure (all draws pooled)."
    note_z = " 2000 of the points are drawn." if points.shape[0] > 2000 else ""
    listing = ", ".join(f"<code>{f}</code>" for f in sorted([*files, "index.html", MANIFEST]))
    body = f"""
<h1>attnbayes deconvolve: {html.escape(Path(table.path).name)}</h1>
<p>Gaussian deconvolution: z_i ~ nu, x_i | z_i ~ N(z_i, sigma<sup>2</sup> I<sub>p</sub>) with
known sigma; the task is to estimate nu and each z_i. {html.escape(_DECONVOLVE_TEXT[method])}</p>
{_settings_table(summary)}
<h2>Fit</h2>
{table_html(metrics.set_index("metric"))}
{diag_html}
<h2>Data and the fitted mixing measure</h2>
<p class="note">{note_data}</p>
{img_tag(fig_data, "data and fitted measure")}
<h2>z_hat with intervals</h2>
<p class="note">Each point: z_hat_i against x_i, with its 50% and 90% equal-tailed intervals;
the dashed line is z = x (no shrinkage).{note_z} All of them are in <code>z_hat.csv</code>.</p>
{img_tag(fig_z, "z_hat with intervals")}
<p class="note">Files: {listing}.</p>
"""
    files["index.html"] = page(f"attnbayes deconvolve: {Path(table.path).name}", body)
    files[MANIFEST] = _manifest("deconvolve", table, settings, elapsed, files)
    _publish(target, files)
    say(f"written to {target}")
    return target / "index.html"


# ----------------------------------------------------------------------------- filter


def scenario_labels(name: str | None, num_states: int, num_modes: int, labels=None):
    """State and mode names: from ``labels`` (JSON), the scenario, else x1..xd and mode0.."""
    labels = labels or {}
    states, modes = SCENARIO_LABELS.get(name, (None, None))
    states = labels.get("state_names", states)
    modes = labels.get("mode_names", modes)
    if states is None or len(states) != num_states:
        states = tuple(f"x{k + 1}" for k in range(num_states))
    if modes is None or len(modes) != num_modes:
        modes = tuple(f"mode{j}" for j in range(num_modes))
    return tuple(states), tuple(modes)


def filter_output_columns(method: str, obs_names, state_names, mode_names) -> list[str]:
    """The columns of states.csv."""
    out = ["t", "line", *obs_names]
    targets = ("smoothed",) if method == "gibbs" else ("filtered", "smoothed")
    for target in targets:
        out += [f"{target}_mean_{s}" for s in state_names]
        out += [f"{target}_sd_{s}" for s in state_names]
        out += [f"{target}_prob_{m}" for m in mode_names]
    return out


def _direct_observations(params) -> dict[int, int]:
    """{observation index i: state index k} where y_i = x_k in every mode."""
    h = np.asarray(params.emission_matrices)
    out = {}
    for i in range(h.shape[1]):
        row = h[0, i]
        if np.all(h[:, i] == row) and np.count_nonzero(row) == 1 and row.max() == 1.0:
            out[i] = int(np.argmax(row))
    return out


def figure_states(obs, obs_names, params, state_names, summaries) -> bytes:
    """One panel per state coordinate (at most 6): means with 95% bands, observations."""
    d = min(len(state_names), 6)
    t = np.arange(1, obs.shape[0] + 1)
    direct = _direct_observations(params)
    cols = 2 if d > 1 else 1
    rows = math.ceil(d / cols)
    fig, axes = plt.subplots(
        rows, cols, figsize=(6.2 * cols, 2.8 * rows), layout="constrained", squeeze=False
    )
    for k, ax in enumerate(axes.ravel()):
        if k >= d:
            ax.set_visible(False)
            continue
        for i, s in direct.items():
            if s == k:
                ax.scatter(t, obs[:, i], s=6, color="0.45", label=f"observed {obs_names[i]}")
        for label, mean, sd in summaries:
            color = TARGET_COLORS[label]
            ax.plot(t, mean[:, k], color=color, lw=1.2, label=f"{label} mean")
            ax.fill_between(
                t,
                mean[:, k] - 1.96 * sd[:, k],
                mean[:, k] + 1.96 * sd[:, k],
                color=color,
                alpha=0.2,
                lw=0,
            )
        missing = np.flatnonzero(np.isnan(obs).any(axis=1))
        if missing.size:
            ax.plot(
                t[missing],
                np.full(missing.size, ax.get_ylim()[0]),
                "|",
                color="k",
                ms=8,
                label="missing observation",
            )
        ax.set_ylabel(state_names[k])
        ax.set_xlabel("t")
        if k == 0:
            ax.legend(fontsize=8, loc="best")
    return png_bytes(fig)


def figure_modes(mode_names, probs) -> bytes:
    """P(s_t = j | ...) over t, one line per mode and target."""
    fig, ax = plt.subplots(figsize=(10, 3.2), layout="constrained")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for label, p in probs:
        style = "--" if label == "filtered" else "-"
        t = np.arange(1, p.shape[0] + 1)
        for j, mode in enumerate(mode_names):
            ax.plot(
                t,
                p[:, j],
                style,
                color=colors[j % len(colors)],
                lw=1.2,
                label=f"{label} P(s_t = {mode})",
            )
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("t")
    ax.set_ylabel("mode probability")
    ax.legend(fontsize=8, ncol=2, loc="best")
    return png_bytes(fig)


def figure_track(obs, obs_names, params, state_names, summaries) -> bytes | None:
    """The plane of two directly observed coordinates: observations and the estimated path."""
    direct = _direct_observations(params)
    if len(direct) < 2:
        return None
    (i0, k0), (i1, k1) = list(direct.items())[:2]
    fig, ax = plt.subplots(figsize=(6.5, 6), layout="constrained")
    ax.scatter(obs[:, i0], obs[:, i1], s=8, color="0.5", label="observations")
    for label, mean, _ in summaries:
        ax.plot(mean[:, k0], mean[:, k1], color=TARGET_COLORS[label], lw=1.3, label=f"{label} mean")
    ax.set_xlabel(f"{state_names[k0]} ({obs_names[i0]})")
    ax.set_ylabel(f"{state_names[k1]} ({obs_names[i1]})")
    ax.set_aspect("equal", adjustable="datalim")
    ax.legend(fontsize=8)
    return png_bytes(fig)


def _gaussian_summary(result):
    """(mean (T, d), sd (T, d), mode_probs (T, M)) of a FilterResult / SmootherResult."""
    mean = np.asarray(result.mean)
    sd = np.sqrt(np.clip(np.diagonal(np.asarray(result.cov), axis1=-2, axis2=-1), 0.0, None))
    return mean, sd, np.asarray(result.mode_probs)


def _posterior_summary(datatree, num_modes: int):
    """(mean, sd, mode frequencies) of the switching Gibbs draws."""
    post = datatree["posterior"]
    draws = np.asarray(post["states"]).reshape(-1, *post["states"].shape[2:])
    modes = np.asarray(post["modes"]).reshape(-1, draws.shape[1])
    probs = np.stack([(modes == j).mean(axis=0) for j in range(num_modes)], axis=-1)
    return draws.mean(axis=0), draws.std(axis=0), probs


def _filter_diagnostics(datatree, sizes: dict) -> tuple[dict, list, str]:
    """posterior.nc, diagnostics.csv, the metrics and the HTML section of a Gibbs run."""
    from ..inference.diagnostics import diagnostics

    diag = diagnostics(datatree, var_names=["states"])
    files = {
        "posterior.nc": _datatree_writer(datatree),
        "diagnostics.csv": diag.table.rename_axis("element").reset_index().to_csv(index=False),
    }
    metrics = [
        ("max_rhat_states", diag.max_r_hat),
        ("min_ess_bulk_states", diag.min_ess_bulk),
        ("min_ess_tail_states", diag.min_ess_tail),
    ]
    section = f"""
<h2>Sampler diagnostics</h2>
<p class="note">R-hat (rank-normalised split) and bulk/tail ESS of every state coordinate
x_t[k] ({diag.num_chains} chains x {diag.num_draws} draws after {sizes["num_warmup"]} warmup
sweeps). The modes are labelled by the parameters, so no relabelling is involved. Every element
is in <code>diagnostics.csv</code>.</p>
{_verdict(diag, diag.num_chains * diag.num_draws, False)}
{table_html(_diagnostics_frame(diag.table))}"""
    return files, metrics, section


def _states_csv(table: Table, state_names, mode_names, summaries: dict) -> str:
    """t, line, the observations, then per target: means, sds, mode probabilities."""
    cols = {"t": np.arange(1, table.values.shape[0] + 1), "line": table.lines}
    for j, col in enumerate(table.columns):
        cols[col] = table.values[:, j]
    for label, (mean, sd, mode_probs) in summaries.items():
        cols |= {f"{label}_mean_{s}": mean[:, k] for k, s in enumerate(state_names)}
        cols |= {f"{label}_sd_{s}": sd[:, k] for k, s in enumerate(state_names)}
        cols |= {f"{label}_prob_{m}": mode_probs[:, j] for j, m in enumerate(mode_names)}
    return pd.DataFrame(cols).to_csv(index=False)


def check_filter(table: Table, params, method: str, state_names, mode_names) -> None:
    """Argument checks of ``run_filter`` that need no JAX work."""
    if method not in FILTER_METHODS:
        raise InputError(f"--method: unknown {method!r}; choose from {list(FILTER_METHODS)}")
    o = np.shape(params.emission_matrices)[1]
    if table.values.shape[1] != o:
        raise InputError(
            f"{table.path}: {table.values.shape[1]} observation column(s) where the model "
            f"observes {o} values per step"
        )
    if np.any(np.isinf(table.values)):
        raise InputError(f"{table.path}: contains infinite values")
    _check_columns_unique(filter_output_columns(method, table.columns, state_names, mode_names))


def _check_filter_inputs(table: Table, inputs: Table | None, params) -> np.ndarray | None:
    """The (T, k) inputs u_t, checked against the observations and the parameters' k."""
    k = int(np.shape(params.dynamics_input_weights)[-1])
    weights = "dynamics_input_weights (M, d, k) and/or emission_input_weights (M, o, k)"
    if inputs is None:
        if k:
            raise InputError(
                f"--inputs: the parameters have input weights for k = {k} input(s) "
                f"({weights}); name the {k} input column(s) of {table.path} with --inputs"
            )
        return None
    shared = sorted(set(inputs.columns) & set(table.columns))
    if shared:
        raise InputError(
            f"--inputs: column(s) {', '.join(shared)} are also observation columns (--columns)"
        )
    if inputs.values.shape[0] != table.values.shape[0]:  # the same file: cannot happen
        raise InputError(
            f"--inputs: {inputs.values.shape[0]} rows of inputs for {table.values.shape[0]} steps"
        )
    n = inputs.values.shape[1]
    if k != n:
        have = "no input weights (k = 0)" if k == 0 else f"input weights for k = {k} input(s)"
        raise InputError(
            f"--inputs: {n} column(s) ({', '.join(inputs.columns)}) but the parameters have "
            f"{have}: give {weights} with k = {n} in --params (zeros are a start for --fit "
            "with --free naming them)"
        )
    return inputs.values


def _fit_section(fit, fit_table, settings) -> str:
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


def _fit_likelihood(method: str) -> str:
    """The filter whose log-likelihood --fit uses: --method's, imm for rbpf and gibbs."""
    return method if method in ("imm", "gpb2", "gpb1") else "imm"


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
    _check_count("--starts", num_starts, 1)
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
    from ..inference.switching.marginal import switching_marginal_model

    tree = run_nuts(
        key,
        switching_marginal_model,
        spec.observations,
        spec=spec,
        likelihood=likelihood,
        inputs=spec.inputs,
        free=free,
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


def _run_fit(key, spec, free, fit, likelihood, num_starts, sizes, say):
    """Learn the parameters: (fitted SwitchingParams, fit table, metrics, files, settings)."""
    from ..inference.switching.learning import fit_switching
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
        files["fit_posterior.nc"] = _datatree_writer(tree)
        settings |= {f"fit_{k}": v for k, v in sizes.items()}
    else:
        starts = num_starts or DEFAULT_STARTS
        result = fit_switching(
            key,
            spec.observations,
            spec,
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


def run_filter(
    table: Table,
    params,
    *,
    method: str = "imm",
    scenario: str | None = None,
    params_path: str | None = None,
    labels: dict | None = None,
    out_dir="reports",
    name: str | None = None,
    seed: int = 0,
    num_particles: int | None = None,
    num_warmup: int | None = None,
    num_samples: int | None = None,
    num_chains: int | None = None,
    fit: str | None = None,
    free=None,
    num_starts: int | None = None,
    inputs: Table | None = None,
    progress: Callable[[str], None] | None = None,
    argv: list[str] | None = None,
) -> Path:
    """Run a switching-model filter (and Kim's smoother) or the Gibbs sampler; write OUT/NAME/.

    Args:
        table: the observations, T rows of o columns, NaN rows missing.
        params: validated ``SwitchingParams`` (``attnbayes.models.switching.check_params``).
        method: "imm", "gpb2", "gpb1", "rbpf" (each then Kim's smoother over its per-mode
            filtered Gaussians) or "gibbs" (the smoothing posterior by sampling).
        scenario, params_path: where ``params`` came from (recorded; the scenario also names
            the states and modes); labels: optional {"state_names", "mode_names"}.
        out_dir, name: the output folder OUT/NAME; NAME defaults to ``<stem>-filter-<method>``.
        seed: seed of the ``jax.random`` key (rbpf, gibbs).
        num_particles: rbpf particles (default 1000).
        num_warmup, num_samples, num_chains: gibbs sizes (default 4 x (300 + 1000)) and
            --fit nuts sizes (default 2 x (500 + 500)).
        fit: None (the parameters are known) or "mle", "em", "nuts": learn the free
            parameters of ``switching_state_space(params, ...)`` first (started at
            ``params``), then filter with the fitted ones (``_run_fit``); the likelihood is
            ``method``'s filter (imm for rbpf and gibbs).
        free: names of the parameters to learn (default ``STATE_SPACE_FREE``).
        num_starts: optimiser starts of --fit mle (default 8).
        inputs: the input columns u_t (T rows of k columns, none missing), when ``params``
            has input weights.
        progress: called with short messages.
        argv: the command line, recorded in run.json.

    Returns:
        The path of OUT/NAME/index.html.
    """
    from ..inference.switching.filters import (
        check_filter_result,
    )
    from ..inference.switching.gibbs import run_switching_gibbs
    from ..inference.switching.particle import rbpf
    from ..inference.switching.smoothers import kim_smoother
    from ..models.switching import check_params

    params = check_params("params", params)
    m, d = params.initial_means.shape
    state_names, mode_names = scenario_labels(scenario, d, m, labels)
    check_filter(table, params, method, state_names, mode_names)
    if method != "rbpf" and num_particles is not None:
        raise InputError("--particles applies to --method rbpf only")
    sampling = method == "gibbs" or fit == "nuts"
    if not sampling and any(v is not None for v in (num_warmup, num_samples, num_chains)):
        raise InputError("--draws, --warmup and --chains apply to --method gibbs and --fit nuts")
    if fit is None and (free is not None or num_starts is not None):
        raise InputError("--free and --starts apply with --fit only")
    particles = _check_count("--particles", num_particles, 1) or DEFAULT_PARTICLES
    sizes = _sampler_sizes(
        FILTER_GIBBS_DEFAULTS if method == "gibbs" else {}, num_warmup, num_samples, num_chains
    )
    fit_sizes = _sampler_sizes(FIT_NUTS_DEFAULTS, num_warmup, num_samples, num_chains)
    seed = _check_count("--seed", seed, 0)
    if method == "gibbs":
        check_sampler_sizes(
            sizes["num_samples"], sizes["num_chains"], names=("--draws", "--chains")
        )
    u = _check_filter_inputs(table, inputs, params)
    spec = None
    if fit is not None:
        try:
            spec, free = check_fit(params, table.values, u, fit, free, num_starts, fit_sizes)
        except ValueError as err:
            if isinstance(err, InputError):
                raise
            raise InputError(f"--fit: {err}") from None
    target = check_output(out_dir, name or default_name(table.path, "filter", method))
    say = progress or (lambda message: None)
    started = time.perf_counter()

    obs = table.values
    key = jax.random.PRNGKey(seed)
    settings = {
        "method": method,
        "scenario": scenario,
        "params_file": params_path,
        "state_names": list(state_names),
        "mode_names": list(mode_names),
        "input_columns": None if inputs is None else list(inputs.columns),
    }
    metrics, files, body_diag, fit_table = [], {}, "", None
    with computing():
        if fit is not None:
            key, fit_key = jax.random.split(key)
            likelihood = _fit_likelihood(method)
            params, fit_table, fit_metrics, fit_files, fit_settings = _run_fit(
                fit_key, spec, free, fit, likelihood, num_starts, fit_sizes, say
            )
            params = check_params("params", params)
            metrics += fit_metrics
            files |= fit_files
            settings |= fit_settings | {"seed": seed}
            files["fit.csv"] = fit_table.to_csv(index=False)
        say(f"{method}: running")
        if method == "gibbs":
            settings |= {"seed": seed, **sizes}
            tree = run_switching_gibbs(key, params, obs, inputs=u, **sizes)
            check_finite_output("posterior states", tree["posterior"]["states"].values)
            filtered, smoothed = None, _posterior_summary(tree, m)
            gibbs_files, gibbs_metrics, body_diag = _filter_diagnostics(tree, sizes)
            files |= gibbs_files
            metrics += gibbs_metrics
        else:
            if method == "rbpf":
                settings |= {"seed": seed, "num_particles": particles}
                result = rbpf(key, params, obs, particles, inputs=u)
            else:
                result = registry.get_method("switching", method).fit(params, obs, inputs=u)
            check_filter_result(result, name=method, params=params)
            say(f"{method}: Kim's smoother")
            smooth = kim_smoother(params, obs, result, inputs=u)
            check_filter_result(smooth, name="Kim's smoother", params=params)
            filtered, smoothed = _gaussian_summary(result), _gaussian_summary(smooth)
            metrics.append(("log_likelihood", float(result.log_likelihood)))
        seconds = time.perf_counter() - started
        metrics.insert(0, ("wall_time_s", seconds))
        check_finite_table(
            "metrics", pd.DataFrame(metrics, columns=["metric", "value"]), label_columns=("metric",)
        )
    say(f"{method}: writing the outputs")

    summaries = {"filtered": filtered, "smoothed": smoothed}
    summaries = {label: value for label, value in summaries.items() if value is not None}
    files["states.csv"] = _states_csv(table, state_names, mode_names, summaries)
    metric_frame = pd.DataFrame(metrics, columns=["metric", "value"])
    files["metrics.csv"] = metric_frame.to_csv(index=False)
    files["params.json"] = (
        json.dumps(
            params_document(params, {"state_names": state_names, "mode_names": mode_names}),
            indent=1,
        )
        + "\n"
    )
    if argv is not None:
        settings["argv"] = list(argv)

    bands = [(label, mean, sd) for label, (mean, sd, _) in summaries.items()]
    fig_states = figure_states(obs, table.columns, params, state_names, bands)
    fig_modes = figure_modes(mode_names, [(label, p) for label, (*_, p) in summaries.items()])
    fig_track = figure_track(obs, table.columns, params, state_names, bands)
    elapsed = time.perf_counter() - started
    missing = int(np.isnan(obs).all(axis=1).sum())
    partly = int(np.isnan(obs).any(axis=1).sum()) - missing
    source = f"scenario {scenario}" if scenario else f"parameters from {params_path}"
    if fit is not None:
        source = f"learned by --fit {fit} from the start {source}"
    summary_rows = {
        "input": table.path,
        "steps T": obs.shape[0],
        "missing steps": missing,
        "partly observed steps": partly,
        "observation columns": ", ".join(table.columns),
        "input columns": "none" if inputs is None else ", ".join(inputs.columns),
        "model": source,
        "modes M": m,
        "state dimension d": d,
        "method": method,
    }
    if method == "rbpf":
        summary_rows |= {"particles": particles, "seed": seed}
    if method == "gibbs":
        summary_rows |= {
            "chains": sizes["num_chains"],
            "warmup per chain": sizes["num_warmup"],
            "draws per chain": sizes["num_samples"],
            "seed": seed,
        }
    if fit is not None:
        summary_rows |= {"fit": fit, "fit likelihood": settings["fit_likelihood"]}
        summary_rows["learned"] = ", ".join(free)
        if fit == "mle":
            summary_rows["starts"] = settings["fit_starts"]
        if fit == "nuts":
            summary_rows |= {
                "fit chains": fit_sizes["num_chains"],
                "fit warmup per chain": fit_sizes["num_warmup"],
                "fit draws per chain": fit_sizes["num_samples"],
            }
        if method not in ("rbpf", "gibbs"):
            summary_rows["seed"] = seed
    summary_rows["total wall time (s)"] = round(elapsed, 1)
    if method == "gibbs":
        explain = (
            "The smoothed columns hold the posterior mean and sd of x_t and the posterior "
            "frequency of each mode, P(s_t = j | y_{1:T}); a sampler has no filtered columns."
        )
    else:
        explain = (
            "Filtered: p(x_t, s_t | y_{1:t}) from the filter, its mixture moment-matched to "
            "one mean and sd per coordinate. Smoothed: p(x_t, s_t | y_{1:T}) from Kim's "
            "backward pass over the filter's per-mode Gaussians (an approximation: it treats "
            "x_{t+1} as independent of s_t given s_{t+1} and y_{1:T})."
        )
    listing = ", ".join(f"<code>{f}</code>" for f in sorted([*files, "index.html", MANIFEST]))
    track = (
        ""
        if fig_track is None
        else f"<h2>Track</h2>\n{img_tag(fig_track, 'observations and estimated path')}"
    )
    body = f"""
<h1>attnbayes filter: {html.escape(Path(table.path).name)}</h1>
<p>Switching linear-Gaussian state-space model: s_t | s_{{t-1}} ~ Pi, x_t = F_s x_{{t-1}} +
b_s + B_s u_t + noise(Q_s), y_t = H_s x_t + d_s + D_s u_t + noise(R_s), with the parameters
{"learned" if fit else "known"} ({html.escape(source)}); method:
{html.escape(_FILTER_TEXT[method])}. A step with no observation is predict-only; a partly
observed step updates on its observed coordinates. {html.escape(explain)}</p>
{_settings_table(summary_rows)}
{table_html(metric_frame.set_index("metric"))}
{_fit_section(fit, fit_table, settings)}
{body_diag}
<h2>States</h2>
<p class="note">Means with 95% bands (mean &plusmn; 1.96 sd); observations drawn on the
coordinates they measure directly.</p>
{img_tag(fig_states, "state estimates")}
<h2>Mode probabilities</h2>
{img_tag(fig_modes, "mode probabilities")}
{track}
<p class="note">Files: {listing}.</p>
"""
    files["index.html"] = page(f"attnbayes filter: {Path(table.path).name}", body)
    files[MANIFEST] = _manifest("filter", table, settings, elapsed, files)
    _publish(target, files)
    say(f"written to {target}")
    return target / "index.html"


__all__ = [
    "DECONVOLVE_METHODS",
    "DECONVOLVE_SAMPLER_DEFAULTS",
    "DEFAULT_NUM_ATOMS",
    "DEFAULT_PARTICLES",
    "FILTER_GIBBS_DEFAULTS",
    "FILTER_METHODS",
    "SCENARIO_LABELS",
    "available_memory_bytes",
    "check_deconvolve",
    "check_em_memory",
    "check_filter",
    "check_output",
    "deconvolve_output_columns",
    "default_name",
    "filter_output_columns",
    "run_deconvolve",
    "run_filter",
    "scenario_labels",
]
