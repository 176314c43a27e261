"""``attnbayes calibrate``: calibration studies of the registry's methods, written to OUT/NAME.

For each method, ``attnbayes.inference.calibration.calibrate`` runs a study over the fixed prior
(SBC ranks for samplers, coverage for interval methods); this module writes, atomically
(``attnbayes.app.outputs``):

- ``calibration.csv``: one row per method (``calibration_table``): verdict and its reason,
  replicates, failed and divergent replicates, the smallest adjusted p-value or the coverage;
- ``<method>.nc``: the method's DataTree (ranks and PIT values, or coverage per replicate);
- ``ecdf_pit.png``: the ECDF-PIT difference plot of every method (``figure_ecdf_pit``): ranks'
  PIT values for samplers, the randomised PIT of the truth for interval methods;
- ``index.html`` and ``run.json``.

Under several processes (``attnbayes calibrate --coordinator ...``; ``attnbayes.app.devices``)
every process makes the same calls: each study's replicates are split over every process's
devices (the library's default mesh), process 0 checks the output folder (every process told
its verdict) and alone writes; the others stop once the studies are computed.

``figure_ecdf_pit`` is shared with the report's calibration section (which splits the table with
``attnbayes.app.report.calibration.calibration_tables``).
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ..constants import CALIBRATION_CHUNK_SIZE, CALIBRATION_REPLICATES
from ..inference import methods as registry
from .devices import on_writer
from .outputs import (
    MANIFEST,
    assembling,
    check_finite_table,
    computing,
    manifest_json,
    prepare_target,
    versions,
)
from .pages import img_tag, page, save_datatree, table_html
from .user_data import InputError

if TYPE_CHECKING:
    import pandas as pd


def _independent_pit(tree) -> tuple[np.ndarray, str]:
    """PIT values independent across replicates, one per replicate, and what they are of.

    Ranks: the test quantity with the smallest adjusted p-value (the one the verdict reads).
    Coverage: the first element of each replicate (z_1, or the state's first coordinate at
    t = 1 and ...): elements of one replicate share the fitted prior and are dependent.
    """
    if "prior_sbc" in tree.children:
        table = tree["uniformity"].to_dataset().to_dataframe()
        worst = str(table["p_min"].idxmin()) if table["p_min"].notna().any() else table.index[0]
        name, _, index = worst.partition("[")
        values = np.asarray(tree["prior_sbc"][name].values, dtype=float)
        values = values.reshape(values.shape[0], -1)
        column = 0
        if index:
            shape = values.shape[1:]
            column = int(np.ravel_multi_index(tuple(int(i) for i in index[:-1].split(",")), shape))
        return values[:, column], worst
    for target, node in tree.children.items():
        if "pit" in node.data_vars:
            values = np.asarray(node["pit"].values, dtype=float)
            return values.reshape(values.shape[0], -1)[:, 0], f"{target} (first element)"
    raise ValueError("tree: no PIT values")


class EcdfPitPanel(NamedTuple):
    """What one method's ECDF-PIT panel draws, from that method's PIT values only.

    ``x`` are the evaluation points 0, 1/n, ..., 1 of n finite PIT values u_1..n; ``delta`` is
    ECDF(x) - x, and ``lower``/``upper`` (minus x) its simultaneous ``1 - alpha`` band for n
    independent uniform values (Säilynoja, Bürkner and Vehtari 2022, Stat. Comput. 32: the
    simulation method, arviz_stats' ``ecdf_utils.ecdf_pit``, fixed seed). ``p_value`` is
    arviz_stats' "pot_c" test: pointwise tests of the sorted u_(i) ~ Beta(i, n + 1 - i) with a
    Cauchy combination (Tesso et al. 2026, "LOO-PIT predictive model checking",
    arXiv:2603.02928). ``suspicious_x``/``_y``: the sorted u_(i), at (u_(i), i / n - u_(i)),
    whose Shapley contribution to the test is positive, when p < alpha (arviz_plots' rule).
    """

    method: str
    target: str
    n: int
    alpha: float
    x: np.ndarray
    delta: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    p_value: float
    suspicious_x: np.ndarray
    suspicious_y: np.ndarray

    @property
    def p_text(self) -> str:
        """The p-value as the panel prints it."""
        if not np.isfinite(self.p_value):
            return f"n = {self.n}: no test"
        p = f"{self.p_value:.2f}" if self.p_value >= 0.01 else f"{self.p_value:.2g}"
        return f"p = {p} (pot_c, α = {self.alpha:g})"


def ecdf_pit_panel(
    values, *, method: str = "", target: str = "", alpha: float = 0.01
) -> EcdfPitPanel:
    """The ECDF-PIT panel of one method's PIT values (``EcdfPitPanel``); NaN (failed
    replicates) are left out. Values outside [0, 1] raise ``ValueError``: they are not PIT
    values (arviz_plots would silently rescale them as ranks)."""
    from arviz_stats.base import array_stats
    from arviz_stats.ecdf_utils import ecdf_pit

    u = np.asarray(values, dtype=np.float64).ravel()
    u = u[np.isfinite(u)]
    if np.any((u < 0) | (u > 1)):
        raise ValueError(f"{method or 'values'}: PIT values outside [0, 1]")
    n, empty = u.size, np.zeros(0)
    if n < 2:
        return EcdfPitPanel(method, target, n, alpha, *[empty] * 4, np.nan, empty, empty)
    x, ecdf, lower, upper = ecdf_pit(u, 1 - alpha, 1000)
    p_value, shapley, _ = array_stats.uniformity_test(u, method="pot_c")
    p_value = float(p_value)
    flagged = (np.asarray(shapley) > 0) & (p_value < alpha)
    sorted_u = np.sort(u)
    y = np.arange(1, n + 1) / n - sorted_u
    return EcdfPitPanel(
        method,
        target,
        n,
        alpha,
        x,
        ecdf - x,
        lower - x,
        upper - x,
        p_value,
        sorted_u[flagged],
        y[flagged],
    )


def ecdf_pit_panels(trees: Mapping[str, object]) -> dict[str, EcdfPitPanel]:
    """One ``EcdfPitPanel`` per method, each from its own study's PIT values
    (``_independent_pit``: one per replicate) at the study's ``alpha``."""
    panels = {}
    for name, tree in trees.items():
        u, target = _independent_pit(tree)
        alpha = float(tree.attrs.get("alpha", 0.01))
        panels[name] = ecdf_pit_panel(u, method=name, target=target, alpha=alpha)
    return panels


def draw_ecdf_pit(panels: Mapping[str, EcdfPitPanel]):
    """A matplotlib figure with one axes per panel, in order (constrained layout, at most three
    per row, each with its own y-range): ECDF(x) - x, its simultaneous band (shaded), the
    suspicious points (orange) and the p-value; the title names the method and the PIT's
    target."""
    from matplotlib.figure import Figure

    ncols = min(3, max(len(panels), 1))
    nrows = max(1, -(-len(panels) // ncols))
    fig = Figure(figsize=(4.2 * ncols, 3.0 * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    flat = axes.ravel()
    for ax, panel in zip(flat, panels.values(), strict=False):
        ax.axhline(0.0, color="0.6", linestyle="--", linewidth=0.8)
        if panel.n >= 2:
            ax.fill_between(panel.x, panel.lower, panel.upper, color="0.85", linewidth=0)
            ax.plot(panel.x, panel.delta, color="C0", linewidth=1.2)
            ax.scatter(panel.suspicious_x, panel.suspicious_y, color="C1", s=12, zorder=3)
            reach = np.abs(np.concatenate([panel.delta, panel.lower, panel.upper])).max()
            ax.set_ylim(-1.2 * reach, 1.35 * reach)
        else:
            ax.set_yticks([])
        ax.set_xlim(0, 1)
        ax.text(0.02, 0.97, panel.p_text, transform=ax.transAxes, va="top", fontsize=8)
        ax.set_title(f"{panel.method}\nPIT of {panel.target}, n = {panel.n}", fontsize=9)
        ax.set_xlabel("PIT", fontsize=8)
        ax.set_ylabel("ECDF - PIT", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in flat[len(panels) :]:
        ax.set_axis_off()
    return fig


def figure_ecdf_pit(trees: Mapping[str, object]) -> bytes:
    """ECDF-PIT difference plots as PNG bytes, one panel per method (``ecdf_pit_panels``,
    ``draw_ecdf_pit``).

    Each panel uses its own method's values only: all its replicates (failed ones left out) and
    its own band and test. (arviz_plots' ``plot_ecdf_pit`` on one Dataset of all methods
    rescales every variable as ranks when any holds a value above 1, so an interval method's
    PIT of 1 + 1 ulp distorted every panel.)
    """
    import io

    buffer = io.BytesIO()
    draw_ecdf_pit(ecdf_pit_panels(trees)).savefig(buffer, format="png", dpi=90)
    return buffer.getvalue()


def key_numbers(trees) -> pd.DataFrame:
    """The numbers of each study that apply to its kind, as tidy rows (method, metric, value):
    a NaN among them is a failure, not a blank. Ranks: the smallest adjusted p-value;
    coverage: the coverage and its standard error per target and level."""
    import pandas as pd

    from ..inference.diagnostics import coverage_summary

    rows = []
    for method, tree in trees.items():
        a = tree.attrs
        rows += [(method, m, float(a.get(m, 0))) for m in ("num_replicates", "num_failed")]
        if a["kind"] == "ranks":
            rows.append((method, "num_divergent_replicates", float(a["num_divergent_replicates"])))
            p = tree["uniformity"]["p_min"].values
            rows.append((method, "min_p_adjusted", float(np.min(p)) if p.size else np.nan))
        else:
            for _, r in coverage_summary(tree).iterrows():
                tag = f"{r['target']}_{round(100 * r['level'])}"
                rows += [(method, f"coverage_{tag}", r["coverage"]), (method, f"se_{tag}", r["se"])]
    return pd.DataFrame(rows, columns=["method", "metric", "value"])


def calibration_blocks(table, trees) -> str:
    """The HTML of a calibration table and its ECDF-PIT figure."""
    shown = table.drop(columns=["reason"]).set_index("method")
    reasons = "".join(
        f"<li><b>{html.escape(r['method'])}</b>: {html.escape(r['verdict'])}: "
        f"{html.escape(r['reason'])}</li>"
        for _, r in table.iterrows()
    )
    return table_html(shown) + f"<ul class='note'>{reasons}</ul>"


def run_calibration(
    reading: str,
    methods: Sequence[str],
    *,
    study=None,
    num_replicates: int = CALIBRATION_REPLICATES,
    overrides: Mapping | None = None,
    seed: int = 0,
    chunk_size: int = CALIBRATION_CHUNK_SIZE,
    out_dir="reports",
    name: str | None = None,
    checkpoint_dir=None,
    progress: Callable[[str], None] | None = None,
    argv: list[str] | None = None,
) -> Path:
    """Calibrate ``methods`` of ``reading`` (names or aliases of the registry's methods that
    ``attnbayes calibrate`` offers) and write OUT/NAME (module docstring), each method under its
    registry name; returns the path of index.html. Bad arguments raise ``InputError`` before any
    computation. Under several processes only process 0 writes (module docstring)."""
    import jax

    from ..inference import calibration as cal
    from ..sharding import is_writer

    say = progress or (lambda message: None)
    readings = registry.COMMANDS["calibrate"]
    if reading not in readings:
        raise InputError(f"--reading: unknown {reading!r}; choose from {list(readings)}")
    offered = registry.command_choices("calibrate", reading)
    methods = list(methods)
    unknown = [m for m in methods if m not in offered]
    if not methods or unknown:
        raise InputError(f"--method: unknown {unknown} for {reading}; choose from {list(offered)}")
    methods = [registry.get_method(reading, m).name for m in methods]
    if len(set(methods)) != len(methods):
        raise InputError(f"--method: listed twice: {methods}")
    if "learned" in methods and "data_fraction" in (overrides or {}):
        raise InputError(
            "--data-fraction: does not apply to --method learned: the grid stack gives "
            "posteriors for the points it sees only"
        )
    if checkpoint_dir is not None:
        checkpoint_dir = Path(checkpoint_dir)
        if not checkpoint_dir.is_dir():
            raise InputError(f"--checkpoint-dir: {checkpoint_dir} is not a folder")
    name = name or f"calibrate-{reading}"
    target = on_writer(lambda: prepare_target(out_dir, name), Path(out_dir) / name)
    started = time.perf_counter()
    trees = {}
    key = jax.random.PRNGKey(seed)
    with computing():
        for i, method in enumerate(methods):
            say(f"calibrate {method}: {num_replicates} replicates")
            chosen = dict(overrides or {})
            if registry.get_method(reading, method).returns != "draws":  # sizes: samplers only
                chosen = {k: v for k, v in chosen.items() if k in ("sigma_factor", "data_fraction")}
            checkpoint = None if checkpoint_dir is None else checkpoint_dir / f"{method}.npz"
            trees[method] = cal.calibrate(
                jax.random.fold_in(key, i),
                reading,
                method,
                study=study,
                num_replicates=num_replicates,
                overrides=chosen,
                chunk_size=chunk_size,
                checkpoint=checkpoint,
                progress=lambda message, m=method: say(f"calibrate {m}: {message}"),
            )
        table = cal.calibration_table(trees)
    if not is_writer():  # the same studies were computed on every process; process 0 writes
        return target / "index.html"
    check_finite_table("calibration.csv", key_numbers(trees))
    png = figure_ecdf_pit(trees)
    elapsed = time.perf_counter() - started
    files = {"calibration.csv": table.to_csv(index=False)}
    body = (
        f"<h1>attnbayes calibrate: {html.escape(reading)}</h1>"
        f"<p>{num_replicates} replicates per method over the study's fixed prior; seed {seed}; "
        f"{elapsed:.0f} s.</p>"
        + calibration_blocks(table, trees)
        + "<h2>ECDF-PIT</h2>"
        + img_tag(png, "ECDF-PIT of every method")
    )
    files["index.html"] = page(f"attnbayes calibrate: {reading}", body)
    with assembling(target) as tmp:
        for file_name, text in files.items():
            (tmp / file_name).write_text(text, encoding="utf-8")
        (tmp / "ecdf_pit.png").write_bytes(png)
        for method, tree in trees.items():
            save_datatree(tree, tmp / f"{method}.nc")
        (tmp / MANIFEST).write_text(
            manifest_json(
                "calibrate",
                reading=reading,
                methods=methods,
                num_replicates=num_replicates,
                seed=seed,
                study=None if study is None else study._asdict(),
                overrides=dict(overrides or {}),
                verdicts={m: t.attrs["verdict"] for m, t in trees.items()},
                wall_time_s=round(elapsed, 3),
                versions=versions(),
                argv=argv,
                files=sorted([*files, "ecdf_pit.png", *(f"{m}.nc" for m in trees), MANIFEST]),
            ),
            encoding="utf-8",
        )
    say(f"written to {target}")
    return target / "index.html"
