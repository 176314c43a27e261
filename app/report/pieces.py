"""The HTML pieces every section of the report uses: a note paragraph, a figure kept for its
PNG file and inlined in the page, and a section's numbers as tidy rows of ``results.csv``."""

from __future__ import annotations

import pandas as pd

from ..pages import img_tag


def note(text: str) -> str:
    """A ``<p class="note">`` around ``text`` (HTML: the caller escapes what needs it)."""
    return f'<p class="note">{text}</p>'


def figure_tag(figures: dict, name: str, png: bytes, alt: str) -> str:
    """Keep ``png`` as the report's ``<name>.png`` in ``figures`` and return its ``<img>``."""
    figures[f"{name}.png"] = png
    return img_tag(png, alt)


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


__all__ = ["figure_tag", "note", "tidy_rows"]
