"""``write_report``: the whole report, assembled under a temporary name and published atomically."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import jax
import pandas as pd

from ... import validation
from ...inference.deconvolution.comparison import (
    METHODS,
)
from ...inference.model_comparison import compare_num_atoms
from ..outputs import (
    MANIFEST,
    assembling,
    check_finite_table,
    computing,
    manifest_json,
    prepare_target,
    versions,
)
from . import runners
from .calibration import (
    CALIBRATION,
    CalibrationSettings,
    calibration_blocks_html,
    calibration_key_numbers,
    run_calibration_section,
)
from .figures import attention_demo, kernel_regression_demo
from .html import (
    _atoms_block,
    _attention_block,
    _deconvolution_blocks,
    _diagnostics_summary,
    _fig,
    _kernel_block,
    _learning_blocks,
    _page_html,
    _switching_blocks,
)
from .learned import (
    LEARNED,
    LearnedSettings,
    learned_blocks,
    learned_key_numbers,
    run_learned_attention,
)
from .scenarios import (
    ATOM_COUNTS,
    REQUIRED_METHODS,
    SCENARIOS,
    SECTIONS,
    SWITCHING,
    Scenario,
    SwitchingSettings,
)

# ----------------------------------------------------------------------------- the report


def _check_args(name, methods, seed, scenarios):
    if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
        raise ValueError(f"name: must be a plain folder name, got {name!r}")
    methods = tuple(methods)
    unknown = [m for m in methods if m not in METHODS]
    missing = [m for m in REQUIRED_METHODS if m not in methods]
    if unknown or missing:
        raise ValueError(
            f"methods: unknown {unknown} / missing {missing}; the report needs "
            f"{list(REQUIRED_METHODS)} and takes any of {list(METHODS)}"
        )
    seed = validation.check_positive_int("seed", seed, minimum=0)
    if not scenarios or not all(isinstance(s, Scenario) for s in scenarios):
        raise ValueError("scenarios: expected a non-empty tuple of report.Scenario")
    return methods, seed


def write_report(
    out_dir: str | os.PathLike = "reports",
    *,
    name: str = "attnbayes",
    quick: bool = False,
    seed: int = 0,
    scenarios: tuple[Scenario, ...] = SCENARIOS,
    methods: tuple[str, ...] = METHODS,
    switching: SwitchingSettings | None = SWITCHING,
    atom_counts: tuple[tuple[int, ...], tuple[int, ...]] = ATOM_COUNTS,
    learned: LearnedSettings | None = LEARNED,
    calibration: CalibrationSettings | None = CALIBRATION,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Run the built-in comparisons and write ``out_dir/name/index.html``; return its path.

    Args:
        out_dir: parent folder (created if missing).
        name: the report's folder inside ``out_dir``. An existing ``out_dir/name`` is replaced
            only if attnbayes wrote it (``attnbayes.app.outputs.prepare_target``, checked before any
            computation); the report carries ``run.json`` as its marker.
        quick: small sizes and only the scenarios marked ``quick`` (about two minutes on two
            cores instead of about ten).
        seed: the random seed of every simulation and sampler.
        scenarios: the deconvolution scenarios (``SCENARIOS``).
        methods: ``compare_deconvolution`` methods; must include "attention-em", "nuts" and
            "oracle". The finite-vs-DP comparison needs "nuts-dp" as well.
        switching: sizes of the switching part; None leaves the switching model out.
        atom_counts: the K compared by PSIS-LOO (quick run, full run).
        learned: sizes of section 8 (learned attention); None leaves it out.
        calibration: sizes of section 9 (calibration over the prior); None leaves it out.
        progress: called with a message at every step (the CLI prints them).

    Raises:
        ValueError (``InputError`` for the folder): bad arguments, before any computation.
        RunFailed: a failure while computing (``NonFiniteResult`` when a number about to be
            written is not finite); nothing is written.
    """
    methods, seed = _check_args(name, methods, seed, scenarios)
    target = prepare_target(out_dir, name)
    chosen = tuple(s for s in scenarios if s.quick or not quick) or scenarios[:1]
    say = progress or (lambda message: None)
    started = time.perf_counter()
    size = 0 if quick else 1
    with assembling(target) as tmp, computing():
        key_dec, key_sw, key_k, key_att, key_nw = jax.random.split(jax.random.PRNGKey(seed), 5)
        blocks = {sid: [] for sid, _ in SECTIONS}
        figures: dict[str, bytes] = {}
        frames: list[pd.DataFrame] = []
        diag_rows = []
        first_data = None
        for scenario, key_s in zip(chosen, jax.random.split(key_dec, len(chosen)), strict=True):
            comparison, x, z, measure = runners.run_scenario(
                scenario, quick=quick, key=key_s, progress=say, methods=methods
            )
            check_finite_table(f"{scenario.name}: compare_deconvolution", comparison.table)
            if first_data is None:
                first_data = (scenario, x)
            say(f"{scenario.name}: figures")
            _deconvolution_blocks(
                blocks, figures, scenario, x, z, measure, comparison, diag_rows, frames, tmp
            )
        if switching is not None:
            run = runners.run_switching(switching, quick=quick, key=key_sw, progress=say)
            check_finite_table("maneuvering-target: compare_switching", run.comparison.table)
            say("maneuvering-target: figures")
            _switching_blocks(blocks, figures, run, diag_rows, frames, tmp, key_sw)
            learning = runners.run_switching_learning(
                switching, quick=quick, key=jax.random.fold_in(key_sw, 1), progress=say
            )
            check_finite_table("learning: compare_switching_learning", learning.comparison.table)
            _learning_blocks(blocks, learning, frames)
        scenario, x = first_data
        counts = atom_counts[size]
        say(f"numbers of atoms: Gibbs fits for K in {list(counts)} on {scenario.name}")
        draws = 300 if quick else 1000
        atoms = compare_num_atoms(
            key_k,
            x,
            scenario.sigma,
            counts,
            sampler_kwargs={"num_warmup": draws, "num_samples": draws},
            progress=lambda msg: say(f"numbers of atoms: {msg}"),
        )
        _atoms_block(blocks, figures, scenario, atoms, frames)
        say("attention maps and Nadaraya-Watson")
        att_figs, att_table = attention_demo(key_att)
        _attention_block(blocks, figures, att_figs, att_table, frames)
        nw_figs, nw_table = kernel_regression_demo(key_nw, 300 if quick else 1000)
        _kernel_block(blocks, figures, nw_figs, nw_table, frames)
        if learned is not None:
            run_l = run_learned_attention(
                learned, quick=quick, key=jax.random.fold_in(key_nw, 1), progress=say
            )
            for label, table in learned_key_numbers(run_l):
                check_finite_table(label, table)
            learned_blocks(blocks, figures, run_l, frames, _fig)
        if calibration is not None:
            run_c = run_calibration_section(
                calibration, quick=quick, key=jax.random.fold_in(key_nw, 2), progress=say
            )
            check_finite_table("calibration", calibration_key_numbers(run_c))
            calibration_blocks_html(blocks, figures, run_c, frames, _fig)
        _diagnostics_summary(blocks, diag_rows, frames)
        results = pd.concat(frames, ignore_index=True)[
            ["section", "scenario", "method", "metric", "value"]
        ]
        check_finite_table("results.csv", results, label_columns=("scenario", "method", "metric"))
        results.to_csv(tmp / "results.csv", index=False)
        for file_name, png in figures.items():
            (tmp / file_name).write_bytes(png)
        elapsed = time.perf_counter() - started
        (tmp / "index.html").write_text(
            _page_html(blocks, chosen, switching, quick=quick, seed=seed, elapsed=elapsed),
            encoding="utf-8",
        )
        (tmp / MANIFEST).write_text(
            manifest_json(
                "report",
                quick=quick,
                seed=seed,
                scenarios=[s.name for s in chosen],
                methods=list(methods),
                switching=switching is not None,
                wall_time_s=round(elapsed, 3),
                versions=versions(),
                files=sorted([*(p.name for p in tmp.iterdir()), MANIFEST]),
            ),
            encoding="utf-8",
        )
    say(f"report written to {target / 'index.html'} in {elapsed:.0f} s")
    return target / "index.html"
