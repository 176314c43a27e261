"""Section 9 of the report: calibration over the prior (``attnbayes.inference.calibration``).

Samplers get SBC ranks on a small deconvolution model (K = 2 atoms, N = 50 points, Dirichlet
weights); interval methods the coverage of their intervals for z_i on the same prior; the
switching filters and Kim's smoother the coverage of their intervals for x_t on the maneuvering
target; and a deliberately wrong sampler (NUTS assuming 1.3 sigma) shows that the test has
power. Each method has a verdict by ``calibration_verdict``'s rule.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from typing import NamedTuple

import jax
import pandas as pd

from ...constants import CALIBRATION_CHUNK_SIZE
from ...inference import calibration as cal
from ...inference.methods import CALIBRATE_DEFAULT, get_method
from ..calibrate import figure_ecdf_pit, key_numbers
from .pieces import figure_tag, named_warnings, note, number_table

# the deconvolution methods of section 9: ``attnbayes calibrate``'s defaults and the learned
# stack (v2, the grid stack), before the oracle
DECONVOLUTION_METHODS = (
    *(m for m in CALIBRATE_DEFAULT["deconvolution"] if m != "oracle"),
    "learned",
    "oracle",
)


class CalibrationSettings(NamedTuple):
    """Sizes of section 9 (quick run, full run), and its methods."""

    replicates: tuple[int, int] = (40, 100)
    interval_replicates: tuple[int, int] = (40, 200)
    sampler_draws: tuple[int, int] = (150, 300)
    switching_steps: tuple[int, int] = (30, 50)
    deconvolution: tuple[str, ...] = DECONVOLUTION_METHODS
    switching: tuple[str, ...] = CALIBRATE_DEFAULT["switching"]
    wrong_method: str = "nuts"
    wrong_sigma_factor: float = 1.3


CALIBRATION = CalibrationSettings()


class CalibrationRun(NamedTuple):
    trees: dict
    table: pd.DataFrame


def run_calibration_section(
    settings: CalibrationSettings,
    *,
    quick: bool,
    key,
    progress: Callable[[str], None],
    warned: list[str] | None = None,
) -> CalibrationRun:
    """Every study of section 9, in order; the wrong sampler is ``nuts (sigma x 1.3)``. A
    warning is said once on one line naming the study ("calibration, <method>") and kept in
    ``warned``."""
    size = 0 if quick else 1
    draws = settings.sampler_draws[size]
    sampler_sizes = {"num_warmup": draws, "num_samples": draws, "num_chains": 2}
    study = cal.DeconvolutionStudy()
    jobs = []
    for method in settings.deconvolution:
        sampler = get_method("deconvolution", method).returns == "draws"
        overrides = sampler_sizes if sampler else {}
        replicates = settings.replicates[size] if sampler else settings.interval_replicates[size]
        jobs.append((method, "deconvolution", method, study, overrides, replicates))
    wrong = {**sampler_sizes, "sigma_factor": settings.wrong_sigma_factor}
    jobs.append(
        (
            f"{settings.wrong_method} (sigma x {settings.wrong_sigma_factor:g})",
            "deconvolution",
            settings.wrong_method,
            study,
            wrong,
            settings.replicates[size],
        )
    )
    sw_study = cal.SwitchingStudy(num_steps=settings.switching_steps[size])
    for method in settings.switching:
        jobs.append((method, "switching", method, sw_study, {}, settings.interval_replicates[size]))
    trees = {}
    for i, (label, reading, method, st, overrides, replicates) in enumerate(jobs):
        progress(f"calibration: {label}, {replicates} replicates")
        with named_warnings(f"calibration, {label}", progress, warned):
            trees[label] = cal.calibrate(
                jax.random.fold_in(key, i),
                reading,
                method,
                study=st,
                num_replicates=replicates,
                overrides=overrides,
                chunk_size=CALIBRATION_CHUNK_SIZE,
            )
    return CalibrationRun(trees, cal.calibration_table(trees))


def calibration_key_numbers(run: CalibrationRun) -> pd.DataFrame:
    """Section 9's rows of results.csv: the numbers that apply to each method's kind."""
    rows = key_numbers(run.trees)
    rows.insert(0, "scenario", "prior")
    rows.insert(0, "section", "calibration")
    return rows


def calibration_tables(table: pd.DataFrame) -> str:
    """``inference.calibration.calibration_table`` as the page shows it, narrow enough for the
    page: one table of the samplers (SBC ranks), one of the interval methods with a row per
    target and the coverage of each level beside its standard error, then each verdict's
    reason."""
    base = {
        "method": table["method"],
        "verdict": table["verdict"],
        "replicates": table["num_replicates"],
        "failed": table["num_failed"],
    }
    frame = pd.DataFrame(base)
    parts = []
    ranks = table["kind"] == "ranks"
    if ranks.any():
        samplers = frame[ranks].assign(
            **{
                "divergent replicates": table.loc[ranks, "num_divergent_replicates"],
                "smallest adjusted p": table.loc[ranks].get("min_p_adjusted"),
            }
        )
        parts.append("<h4>Samplers: SBC ranks</h4>" + number_table(samplers, index=False))
    tags = [m.groups() for c in table.columns if (m := re.fullmatch(r"coverage_(.+)_(\d+)", c))]
    rows = []
    for i in table.index[~ranks]:
        for target in dict.fromkeys(t for t, _ in tags):
            cells = {
                f"{label} {level}%": table.at[i, f"{prefix}_{target}_{level}"]
                for _, level in (t for t in tags if t[0] == target)
                for label, prefix in (("coverage", "coverage"), ("se", "se"))
            }
            if all(pd.isna(v) for v in cells.values()):
                continue
            rows.append({**frame.loc[i].to_dict(), "target": target, **cells})
    if rows:
        parts.append(
            "<h4>Interval methods: coverage</h4>" + number_table(pd.DataFrame(rows), index=False)
        )
    reasons = "".join(
        f"<li><b>{html.escape(r['method'])}</b>: {html.escape(r['verdict'])}: "
        f"{html.escape(r['reason'])}</li>"
        for _, r in table.iterrows()
    )
    return "".join(parts) + f"<ul class='note'>{reasons}</ul>"


def _learned_text(trees) -> str:
    """The note's sentence on the learned stack, when it was calibrated."""
    if not any(t.attrs["method"] == "learned" for t in trees.values()):
        return ""
    return (
        "The learned stack (the shipped grid stack, v2) is scored on the normal posterior "
        "N(m<sub>i</sub>, v<sub>i</sub>) of its posterior moments, whose quantiles are its "
        "intervals. "
    )


def calibration_blocks_html(blocks, figures, run: CalibrationRun, frames) -> None:
    """Append section 9's HTML to ``blocks["calibration"]`` and its rows to ``frames``."""
    frames.append(calibration_key_numbers(run))
    png = figure_ecdf_pit(run.trees)
    trees = run.trees
    first = next(iter(trees.values()))
    sampler = next((t for t in trees.values() if t.attrs["kind"] == "ranks"), first)
    blocks["calibration"].append(
        '<h3 id="calibration-table">Which methods are calibrated over the prior</h3>'
        + note(
            "Simulation-based calibration (Talts et al. 2018): parameters and data are drawn "
            "from a fixed prior (deconvolution: K = 2 atoms, N = 50 points, w ~ Dirichlet(1, 1), "
            "mu_k ~ N(0, 3^2), sigma = 1; switching: the maneuvering target's parameters), and "
            "every method runs on every replicate in one compiled program. Samplers are ranked "
            "on permutation-invariant test quantities (nu's CDF at five points, its mean and "
            "sd, the log-likelihood), their draws thinned to about their effective size "
            f"(thin {sampler.attrs.get('thin', 1)} for {html.escape(sampler.attrs['method'])}) "
            "and ties broken at random; chi-square and KS tests of uniform PIT values with "
            "Holm's correction. Interval methods get the coverage of their 50% and 90% "
            "intervals for z_i or x_t from the randomised PIT of the truth (exact for a "
            "discrete posterior), with the larger of the binomial and between-replicate "
            "standard errors. "
            + _learned_text(run.trees)
            + "A row '... (sigma x 1.3)' is a deliberately wrong sampler: the "
            "test must flag it. Verdicts follow calibration_verdict's rule (alpha = 0.01)."
        )
        + calibration_tables(run.table)
        + '<h3 id="calibration-ecdf">ECDF-PIT</h3>'
        + note(
            "ECDF minus the uniform CDF of one PIT value per replicate, one panel per method "
            "from its own replicates only: for samplers the test quantity with the smallest "
            "p-value (the panel's p-value is not adjusted for that choice; the table's is), for "
            "interval methods the first z_i or x_t of each replicate. Shaded: the 99% "
            "simultaneous band of n independent uniform values (Säilynoja et al. 2022); p: "
            "arviz_stats' pot_c test of uniformity (Tesso et al. 2026), whose orange points "
            "contribute most to a rejection at alpha = 0.01."
        )
        + figure_tag(figures, "calibration_ecdf_pit", png, "ECDF-PIT of every method")
    )
