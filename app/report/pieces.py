"""The HTML pieces every section of the report uses: a note paragraph, a figure kept for its
PNG file and inlined in the page, a table with one number format per quantity, the warnings a
part raised (named by scenario and method), a section's numbers as tidy rows of
``results.csv``, and the samplers' DataTrees as the report saves them (thinned by default)."""

from __future__ import annotations

import contextlib
import html
import math
import os
import warnings
from collections.abc import Callable, Iterator

import numpy as np
import pandas as pd
import xarray as xr

from ..pages import img_tag, save_datatree, table_html

# A thinned DataTree keeps at most this many draws per chain (evenly spaced).
TREE_DRAWS_PER_CHAIN = 100
# ...and leaves out these groups: draws of replicated data, as large as the data per draw, that
# the page only plots (``--keep-trees`` keeps them)
THINNED_DROPS = ("posterior_predictive",)
# ...and stores pointwise float64 arrays (a ``point`` dimension: a draw's z_mean or
# log-likelihood for every data point) of more than this many numbers in float32, 7 significant
# digits; every other array keeps its dtype (the diagnostics of the files are the page's)
THINNED_FLOAT32_SIZE = 10_000


def note(text: str) -> str:
    """A ``<p class="note">`` around ``text`` (HTML: the caller escapes what needs it)."""
    return f'<p class="note">{text}</p>'


def figure_tag(figures: dict, name: str, png: bytes, alt: str) -> str:
    """Keep ``png`` as the report's ``<name>.png`` in ``figures`` and return its ``<img>``."""
    figures[f"{name}.png"] = png
    return img_tag(png, alt)


# ----------------------------------------------------------------------------- tables


def number_format(values) -> Callable[[float], str]:
    """One format for a run of numbers (a table's column, or a row of one quantity).

    Whole numbers print as integers. Otherwise fixed-point with the decimals that give the
    largest magnitude four significant digits and the smallest non-zero one two (at most six),
    or scientific notation (four significant digits) when the largest magnitude is at least
    1e6 or below 1e-3, or the magnitudes span more than four orders.
    """
    finite = [float(v) for v in values if _is_number(v) and math.isfinite(float(v))]
    if not finite:
        return lambda v: f"{v:.4g}"
    if all(v.is_integer() and abs(v) < 1e15 for v in finite):
        return lambda v: f"{v:.0f}"
    largest = max(abs(v) for v in finite)
    smallest = min(abs(v) for v in finite if v != 0)
    if largest >= 1e6 or largest < 1e-3 or largest > 1e4 * smallest:
        return lambda v: f"{v:.3e}"
    decimals = max(3 - math.floor(math.log10(largest)), 1 - math.floor(math.log10(smallest)))
    decimals = min(6, max(0, decimals))
    return lambda v: f"{v:.{decimals}f}"


def _is_number(value) -> bool:
    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(
        value, bool | np.bool_
    )


def formatted(frame: pd.DataFrame, *, by_row: bool = False) -> pd.DataFrame:
    """``frame`` with its numbers as text, one ``number_format`` per column (``by_row``: per
    row, for tables whose rows are the quantities); NaN becomes an empty cell, text stays."""

    def run(values: pd.Series) -> pd.Series:
        fmt = number_format(values.to_numpy())
        return values.map(
            lambda v: (
                ""
                if v is None or (not isinstance(v, str) and pd.isna(v))
                else (fmt(float(v)) if _is_number(v) else str(v))
            )
        )

    out = frame.astype(object)
    if by_row:
        return out.apply(run, axis=1)
    return out.apply(run, axis=0)


def number_table(frame: pd.DataFrame, *, by_row: bool = False, index: bool = True) -> str:
    """``table_html`` of ``formatted(frame, by_row=by_row)``: one number format per column (per
    row with ``by_row``), columns empty in every row left out."""
    empty = frame.isna() | frame.map(lambda v: isinstance(v, str) and not v.strip())
    shown = frame.loc[:, [c for c in frame.columns if not empty[c].all()]]
    return table_html(formatted(shown, by_row=by_row), index=index)


def tidy_rows(section: str, scenario: str, frame: pd.DataFrame, metrics=None) -> pd.DataFrame:
    """A wide frame (index = method / model; ``metrics``: the columns kept, default all) as
    tidy rows of results.csv: section, scenario, method, metric, value (NaN values dropped)."""
    cols = [c for c in frame.columns if metrics is None or c in metrics]
    numeric = frame[cols].apply(pd.to_numeric, errors="coerce")
    long = (
        numeric.rename_axis("method")
        .reset_index()
        .melt(id_vars="method", var_name="metric", value_name="value")
    )
    long = long.dropna(subset=["value"])
    long.insert(0, "scenario", scenario)
    long.insert(0, "section", section)
    return long


def iteration_cap_note(table: pd.DataFrame, caps: dict[str, int] | None = None) -> str:
    """A note naming each method of a comparison table (method / metric / value) that reports
    ``converged`` 0: it stopped without meeting its tolerance, so its numbers are those of its
    last iterate. ``caps``: a method's iteration limit, to say that it stopped there (its
    ``iterations`` within one of the limit: a trace of ``cap`` values has ``cap - 1`` steps).
    Empty when every iterative fit converged."""
    value = table.set_index(["method", "metric"])["value"]
    capped = [m for m in dict.fromkeys(table["method"]) if value.get((m, "converged"), 1.0) == 0.0]
    said = []
    for m in capped:
        ran = value.get((m, "iterations"))
        cap = (caps or {}).get(m)
        if cap is not None and ran is not None and ran >= cap - 1:
            stop = f"stopped at its iteration cap ({ran:.0f} iterations)"
        elif ran is not None:
            stop = f"stopped after {ran:.0f} iterations"
        else:
            stop = "stopped"
        said.append(
            f"{html.escape(m)} {stop} without meeting its tolerance (converged 0): its numbers "
            "are those of its last iterate, not of a converged fit."
        )
    return note("<strong>Not converged:</strong> " + " ".join(said)) if said else ""


# ----------------------------------------------------------------------------- warnings


@contextlib.contextmanager
def named_warnings(
    context: str, progress: Callable[[str], None], notes: list[str] | None = None
) -> Iterator[None]:
    """Record the warnings raised inside (ArviZ's among them; the filters in force decide
    which), then say each distinct one once, on one line prefixed with ``context`` (the
    scenario and the method): ``progress("warning: <context>: <Category>: <message>")``, and
    append the same line without ``warning:`` to ``notes`` for the page."""
    with warnings.catch_warnings(record=True) as caught:
        yield
    lines = dict.fromkeys(
        f"{w.category.__name__}: {' '.join(str(w.message).split())}" for w in caught
    )
    for line in lines:
        progress(f"warning: {context}: {line}")
        if notes is not None:
            notes.append(f"{context}: {line}")


def warnings_note(notes: list[str]) -> str:
    """The warnings of ``named_warnings`` as a list on the page (empty when there were none)."""
    if not notes:
        return ""
    items = "".join(f"<li>{html.escape(line)}</li>" for line in dict.fromkeys(notes))
    return note("<strong>Warnings while computing this part:</strong>") + (
        f"<ul class='note'>{items}</ul>"
    )


# ----------------------------------------------------------------------------- DataTrees


def thin_datatree(
    datatree: xr.DataTree, draws_per_chain: int = TREE_DRAWS_PER_CHAIN
) -> xr.DataTree:
    """A copy of a sampler's DataTree for the report's folder: every group with a ``draw``
    dimension keeps at most ``draws_per_chain`` evenly spaced draws (one in k, k =
    ceil(draws / draws_per_chain), with their original draw coordinates), ``THINNED_DROPS``
    and the posterior's ``z_draw`` are left out, pointwise float64 arrays (a ``point``
    dimension) of more than ``THINNED_FLOAT32_SIZE`` numbers are stored in float32 (every other
    array keeps its dtype), and the root's attrs say so (``attnbayes_thinned`` 1,
    ``draws_per_chain_kept``, ``draws_per_chain_full``, ``thinning_step``, ``left_out``,
    ``float32``, ``thinning``: a sentence)."""
    draws = max((node.sizes.get("draw", 0) for node in datatree.subtree), default=0)
    step = max(1, math.ceil(draws / draws_per_chain))
    kept, float32 = {}, []
    for node in datatree.subtree:
        if node.path != "/" and node.name in THINNED_DROPS:
            continue
        data = node.to_dataset(inherit=False)
        if node.name == "posterior" and "z_draw" in data:
            data = data.drop_vars("z_draw")
        if "draw" in data.dims:
            data = data.isel(draw=slice(None, None, step))
        narrowed = {
            name: var.astype(np.float32)
            for name, var in data.data_vars.items()
            if "point" in var.dims and var.dtype == np.float64 and var.size > THINNED_FLOAT32_SIZE
        }
        float32.extend(f"{node.path.strip('/')}/{name}" for name in narrowed)
        kept[node.path] = data.assign(narrowed)
    thinned = xr.DataTree.from_dict(kept)
    left_out = [name for name in THINNED_DROPS if name in datatree.children]
    if "posterior" in datatree.children and "z_draw" in datatree["posterior"].data_vars:
        left_out.append("the posterior's z_draw (a draw of every latent z_i)")
    thinned.attrs = {
        **datatree.attrs,
        "attnbayes_thinned": 1,
        "draws_per_chain_kept": len(range(0, draws, step)),
        "draws_per_chain_full": draws,
        "thinning_step": step,
        "left_out": ", ".join(left_out) or "none",
        "float32": ", ".join(float32) or "none",
        "thinning": (
            f"Thinned for the report's folder: one draw in {step} of each chain "
            f"({len(range(0, draws, step))} of {draws}), without "
            f"{', '.join(left_out) or 'no group'}"
            + (f", and {', '.join(float32)} stored in float32" if float32 else "")
            + "; the page's numbers come from all draws. "
            "`attnbayes report --keep-trees` writes the full DataTrees."
        ),
    }
    return thinned


def save_report_tree(datatree: xr.DataTree, path: str | os.PathLike, *, keep: bool) -> None:
    """Write a sampler's DataTree into the report's folder: in full with ``keep``
    (``attnbayes.app.pages.save_datatree``), else ``thin_datatree`` of it, gzip-compressed
    (netCDF zlib level 9 with the shuffle filter)."""
    if keep:
        save_datatree(datatree, path)
        return
    tree = thin_datatree(datatree)
    encoding = {
        node.path: {
            name: {"zlib": True, "complevel": 9, "shuffle": True} for name in node.data_vars
        }
        for node in tree.subtree
        if node.data_vars
    }
    tree.to_netcdf(path, engine="h5netcdf", encoding=encoding)


__all__ = [
    "THINNED_DROPS",
    "THINNED_FLOAT32_SIZE",
    "TREE_DRAWS_PER_CHAIN",
    "figure_tag",
    "formatted",
    "iteration_cap_note",
    "named_warnings",
    "note",
    "number_format",
    "number_table",
    "save_report_tree",
    "thin_datatree",
    "tidy_rows",
    "warnings_note",
]
