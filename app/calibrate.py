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

``figure_ecdf_pit`` and ``calibration_blocks`` are shared with the report's calibration section.
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..constants import CALIBRATION_CHUNK_SIZE, CALIBRATION_REPLICATES
from ..inference import methods as registry
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


def figure_ecdf_pit(trees: Mapping[str, object]) -> bytes:
    """ECDF-PIT difference plots (arviz_plots ``plot_ecdf_pit``), one panel per method.

    Each panel has one PIT value per replicate (``_independent_pit``), for the first replicates
    of its study, as many as the shortest study has (the table's tests use them all).
    arviz_plots' default test, "pot_c" (a simultaneous test of the pointwise ECDF, Tesso and
    Vehtari 2025), marks the points where the ECDF leaves its simultaneous region and prints
    the p-value; its older
    "envelope" bands (Säilynoja et al. 2022) fail in arviz_plots 1.3 and are deprecated there.
    """
    import io

    import arviz_plots as azp
    import matplotlib.pyplot as plt
    import xarray as xr

    data, labels = {}, {}
    for name, tree in trees.items():
        u, label = _independent_pit(tree)
        key = name.replace("-", "_")
        data[key] = xr.DataArray(u, dims=["replicate"])
        labels[key] = f"{name}: {label}"
    # one dataset has one replicate axis, and arviz_plots' test takes no NaN padding: every
    # panel shows the first replicates of its study, as many as the shortest study has
    size = min(v.size for v in data.values())
    panels = {k: ("replicate", v.values[:size]) for k, v in data.items()}
    tree = xr.DataTree.from_dict({"prior_sbc": xr.Dataset(panels)})
    pc = azp.plot_ecdf_pit(tree, group="prior_sbc", sample_dims=["replicate"], backend="matplotlib")
    fig = pc.viz["figure"].item()  # the matplotlib figure of the plot collection
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    plt.close(fig)
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
    computation."""
    import jax

    from ..inference import calibration as cal

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
    if checkpoint_dir is not None:
        checkpoint_dir = Path(checkpoint_dir)
        if not checkpoint_dir.is_dir():
            raise InputError(f"--checkpoint-dir: {checkpoint_dir} is not a folder")
    name = name or f"calibrate-{reading}"
    target = prepare_target(out_dir, name)
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
