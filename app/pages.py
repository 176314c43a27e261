"""Building blocks for the HTML pages the ``attnbayes`` commands write.

Figures are PNG bytes inlined as base64, so a page is one self-contained file. Outputs are
written under a temporary name and renamed into place (``attnbayes.app.outputs``), so a failed
run never leaves a half-written file or folder behind. Beside the page, table and figure pieces
are the ones the runs on a user's data share: the table of settings, the sampler diagnostics per
quantity and the verdict on them (``sampler_verdict``).
"""

from __future__ import annotations

import base64
import html
import io
import math
import os

import matplotlib.pyplot as plt
import pandas as pd
import xarray as xr

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1150px; margin: 2em auto; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f3f3f3; }
img { max-width: 100%; display: block; margin: 0.5em 0 1.5em; }
.note { color: #555; font-size: 0.92em; }
nav ul { columns: 2; }
"""


def png_bytes(fig) -> bytes:
    """Render a matplotlib figure to PNG bytes (110 dpi) and close it."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def img_tag(png: bytes, alt: str) -> str:
    """An ``<img>`` element with the PNG inlined as a base64 data URI."""
    data = base64.b64encode(png).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def table_html(frame: pd.DataFrame, *, float_format: str = "{:.4g}", index: bool = True) -> str:
    """A plain ``<table>`` of a DataFrame; NaN cells are left empty."""
    head = ([html.escape(str(frame.index.name or ""))] if index else []) + [
        html.escape(str(c)) for c in frame.columns
    ]
    rows = ["<tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"]
    for label, values in frame.iterrows():
        cells = [f"<th>{html.escape(str(label))}</th>"] if index else []
        for v in values.to_numpy():
            if isinstance(v, str):
                cells.append(f"<td>{html.escape(v)}</td>")
            elif v is None or pd.isna(v):
                cells.append("<td></td>")
            else:
                cells.append(f"<td>{float_format.format(v)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return "<table>" + "".join(rows) + "</table>"


def page(title: str, body: str) -> str:
    """A complete HTML document with the shared style."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>\n"
        f"{body}\n</body></html>\n"
    )


def save_datatree(datatree: xr.DataTree, path: str | os.PathLike) -> None:
    """Write a DataTree to netCDF (h5netcdf, gzip level 4), without the z_i draws.

    ``z_draw`` (one draw of z_i per posterior draw, used only for interval coverage) is as
    large as the posterior predictive and
    ``attnbayes.inference.deconvolution.invariants.add_invariants`` rebuilds it.
    """
    tree = datatree.copy()
    if "posterior" in tree.children and "z_draw" in tree["posterior"]:
        tree["posterior"] = xr.DataTree(tree["posterior"].to_dataset().drop_vars("z_draw"))
    encoding = {
        node.path: {name: {"zlib": True, "complevel": 4} for name in node.data_vars}
        for node in tree.subtree
        if node.data_vars
    }
    tree.to_netcdf(path, engine="h5netcdf", encoding=encoding)


# ----------------------------------------------------------------------------- sampler runs

RHAT_OK = 1.01


def _format(value) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def settings_table(rows: dict) -> str:
    """A two-column ``<table>``: setting, value (numbers to 4 significant digits)."""
    frame = pd.DataFrame({"value": [_format(v) for v in rows.values()]}, index=list(rows))
    frame.index.name = "setting"
    return table_html(frame)


def diagnostics_by_quantity(diag_table: pd.DataFrame) -> pd.DataFrame:
    """Per quantity (the element names' prefix, ``z_mean[3]`` -> ``z_mean``): the number of
    elements, the worst R-hat and the smallest bulk/tail ESS."""
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


def sampler_verdict(diag, total_draws: int, divergences: bool) -> str:
    """A paragraph on ``diag`` (``attnbayes.inference.diagnostics.diagnostics``): no warning
    signs, or what is wrong (R-hat above ``RHAT_OK``, ESS below min(400, draws / 2), divergent
    transitions when ``divergences``) and what to run instead."""
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


__all__ = [
    "RHAT_OK",
    "STYLE",
    "diagnostics_by_quantity",
    "img_tag",
    "page",
    "png_bytes",
    "sampler_verdict",
    "save_datatree",
    "settings_table",
    "table_html",
]
