"""``write_report``: the whole report, assembled under a temporary name and published atomically.

Under several processes (``jax.distributed``; ``attnbayes report --coordinator ...``) every
process runs every part, in the same order with the same keys: the batch work inside a part
(section 9's calibration replicates, the batch entry points' default mesh) is split over every
process's devices, the other parts are repeated on each process (the same numbers). The worker
pool is off (the processes replace the workers). Process 0 (``attnbayes.sharding.is_writer``)
checks the output folder first, with every process told its verdict (``devices.on_writer``), and
alone assembles and writes the report; the others compute into a private temporary folder
that is removed. (Splitting the parts over the processes instead would need every batch entry
point inside a part to run on its own process's devices only: their default is every device.)
"""

from __future__ import annotations

import contextlib
import os
import tempfile
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
from ...sharding import is_writer
from ..devices import on_writer
from ..outputs import (
    MANIFEST,
    assembling,
    check_finite_table,
    computing,
    manifest_json,
    prepare_target,
    versions,
)
from ..parallel import default_workers, merge_parts, new_part, run_parts
from ..parser import REPORT_NAME
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
    atoms_block,
    attention_block,
    deconvolution_blocks,
    diagnostics_summary,
    kernel_block,
    learning_blocks,
    page_html,
    switching_blocks,
)
from .learned import (
    LEARNED,
    LearnedSettings,
    learned_blocks,
    learned_key_numbers,
    run_learned_attention,
)
from .pieces import THINNED_DROPS, TREE_DRAWS_PER_CHAIN, named_warnings, warnings_note
from .scenarios import (
    ATOM_COUNTS,
    REQUIRED_METHODS,
    SCENARIOS,
    SECTIONS,
    SWITCHING,
    Scenario,
    SwitchingSettings,
)
from .summary import summary_section

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
    name: str = REPORT_NAME,
    quick: bool = False,
    seed: int = 0,
    scenarios: tuple[Scenario, ...] = SCENARIOS,
    methods: tuple[str, ...] = METHODS,
    switching: SwitchingSettings | None = SWITCHING,
    atom_counts: tuple[tuple[int, ...], tuple[int, ...]] = ATOM_COUNTS,
    learned: LearnedSettings | None = LEARNED,
    calibration: CalibrationSettings | None = CALIBRATION,
    workers: int | None = None,
    keep_trees: bool = False,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Run the built-in comparisons and write ``out_dir/name/index.html``; return its path.

    Args:
        out_dir: parent folder (created if missing).
        name: the report's folder inside ``out_dir``. An existing ``out_dir/name`` is replaced
            only if attnbayes wrote it (``attnbayes.app.outputs.prepare_target``, checked before any
            computation); the report carries ``run.json`` as its marker.
        quick: small sizes and only the scenarios marked ``quick`` (about 2.5 minutes on two
            cores instead of about 5.5, cold).
        seed: the random seed of every simulation and sampler.
        scenarios: the deconvolution scenarios (``SCENARIOS``).
        methods: ``compare_deconvolution`` methods; must include "attention-em", "nuts" and
            "oracle". The finite-vs-DP comparison needs "nuts-dp" as well.
        switching: sizes of the switching part; None leaves the switching model out.
        atom_counts: the K compared by PSIS-LOO (quick run, full run).
        learned: sizes of section 8 (learned attention); None leaves it out.
        calibration: sizes of section 9 (calibration over the prior); None leaves it out.
        workers: processes that run the report's independent parts side by side (the
            scenarios, the switching model, its learning, the numbers of atoms, the attention
            maps, the learned attention, the calibration); default ``default_workers()``, one
            per core up to four. 1 runs everything in this process. The report is the same
            for any number (each part has its own keys); only the wall times differ. With W
            workers on C cores each has max(1, C // W) host devices
            (``attnbayes.app.parallel``). Under several processes: 1 (the default there).
        keep_trees: write the samplers' DataTrees in full (``*.nc``: every draw, the posterior
            predictive included; the full report's add up to about 180 MB). By default each is
            thinned (``pieces.thin_datatree``: at most ``TREE_DRAWS_PER_CHAIN`` = 100 evenly
            spaced draws per chain, without the posterior predictive draws and the latent z draws,
            pointwise arrays of more than ``THINNED_FLOAT32_SIZE`` numbers in float32,
            zlib-compressed;
            its attrs say so), so the full report's folder is about 23 MB.
        progress: called with a message at every step (the CLI prints them), and with one
            line per distinct warning a part raised (ArviZ's among them), naming its scenario
            and method: ``"warning: three-atoms, nuts: UserWarning: ..."``; the page lists
            them too.

    Raises:
        ValueError (``InputError`` for the folder): bad arguments, before any computation.
        RunFailed: a failure while computing (``NonFiniteResult`` when a number about to be
            written is not finite); nothing is written.
    """
    methods, seed = _check_args(name, methods, seed, scenarios)
    if not isinstance(keep_trees, bool):
        raise ValueError(f"keep_trees: expected True or False, got {keep_trees!r}")
    several = jax.process_count() > 1
    if workers is not None:
        workers = validation.check_positive_int("workers", workers, minimum=1)
        if several and workers > 1:
            raise ValueError(
                f"workers: must be 1 under {jax.process_count()} processes (the processes "
                f"replace the workers), got {workers}"
            )
    elif several:
        workers = 1
    else:
        workers = default_workers()
    target = on_writer(lambda: prepare_target(out_dir, name), Path(out_dir) / name)
    writer = is_writer()
    chosen = tuple(s for s in scenarios if s.quick or not quick) or scenarios[:1]
    say = progress or (lambda message: None)
    started = time.perf_counter()
    size = 0 if quick else 1
    folder = assembling(target) if writer else _private_folder()
    with folder as tmp, computing():
        key_dec, key_sw, key_k, key_att, key_nw = jax.random.split(jax.random.PRNGKey(seed), 5)
        keys_dec = list(jax.random.split(key_dec, len(chosen)))
        tasks = [
            (
                _scenario_parts,
                ([(i, chosen[i], keys_dec[i]) for i in group], quick, methods, tmp, keep_trees),
            )
            for group in _same_shapes(chosen, quick)
        ]
        later = []
        if switching is not None:
            later.append((_switching_part, (switching, quick, key_sw, tmp, keep_trees)))
            later.append((_learning_part, (switching, quick, jax.random.fold_in(key_sw, 1))))
        later.append((_atoms_part, (chosen[0], keys_dec[0], atom_counts[size], quick, key_k)))
        later.append((_attention_part, (key_att, key_nw, quick)))
        if learned is not None:
            later.append((_learned_part, (learned, quick, jax.random.fold_in(key_nw, 1))))
        if calibration is not None:
            later.append((_calibration_part, (calibration, quick, jax.random.fold_in(key_nw, 2))))
        # the later parts come after the scenarios, in the order above
        tasks += [(fn, (len(chosen) + j, *args)) for j, (fn, args) in enumerate(later)]
        done = run_parts(tasks, workers=workers, progress=say, start_order=_longest_first(tasks))
        if not writer:  # computed alike; process 0 writes
            return target / "index.html"
        in_page_order = sorted((pair for parts in done for pair in parts), key=lambda t: t[0])
        part = merge_parts([p for _, p in in_page_order], _SECTION_IDS)
        blocks, figures, frames = part.blocks, part.figures, part.frames
        diagnostics_summary(blocks, part.diagnostics, frames)
        results = pd.concat(frames, ignore_index=True)[
            ["section", "scenario", "method", "metric", "value"]
        ]
        check_finite_table("results.csv", results, label_columns=("scenario", "method", "metric"))
        results.to_csv(tmp / "results.csv", index=False)
        for file_name, png in figures.items():
            (tmp / file_name).write_bytes(png)
        summary = summary_section(results)
        elapsed = time.perf_counter() - started
        (tmp / "index.html").write_text(
            page_html(
                blocks,
                chosen,
                switching,
                quick=quick,
                seed=seed,
                elapsed=elapsed,
                summary=summary,
                trees_note=_trees_note(keep_trees),
            ),
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
                keep_trees=keep_trees,
                wall_time_s=round(elapsed, 3),
                versions=versions(),
                files=sorted([*(p.name for p in tmp.iterdir()), MANIFEST]),
            ),
            encoding="utf-8",
        )
    say(f"report written to {target / 'index.html'} in {elapsed:.0f} s")
    return target / "index.html"


@contextlib.contextmanager
def _private_folder():
    """A temporary folder of this process's own, removed at the end (a process that does not
    write: its parts' files go there)."""
    with tempfile.TemporaryDirectory(prefix="attnbayes-report-") as folder:
        yield Path(folder)


def _trees_note(keep_trees: bool) -> str:
    if keep_trees:
        return " (in full: <code>--keep-trees</code>)"
    return (
        f" (thinned: at most {TREE_DRAWS_PER_CHAIN} evenly spaced draws per chain, without "
        f"{', '.join(g.replace('_', ' ') for g in THINNED_DROPS)} draws and the latent z "
        "draws, pointwise arrays in float32, as each file's attrs say; the numbers on this "
        "page come from all draws, and "
        "<code>attnbayes report --keep-trees</code> writes the full DataTrees)"
    )


# ----------------------------------------------------------------------------- the parts
# Each part runs on its own (``run_parts``: on a worker process, or here with one worker) and
# returns ``[(slot, Part), ...]``; the slots put the parts back in the page's order.

_SECTION_IDS = tuple(sid for sid, _ in SECTIONS)

# Cold wall time of each part of the full report with two workers (seconds; one run on 2 cores,
# `attnbayes report` with an empty compilation cache): the longest start first (a scenario
# group counts each of its scenarios), so that the workers finish together.
_SCENARIO_COST = {1: 125.0, 2: 190.0}  # per scenario, by the dimension of its data
_COST = {
    "_switching_part": 150.0,
    "_learning_part": 130.0,
    "_atoms_part": 45.0,
    "_attention_part": 10.0,
    "_learned_part": 170.0,
    "_calibration_part": 240.0,
}


def _longest_first(tasks) -> list[int]:
    def cost(i):
        fn, args = tasks[i]
        if fn is _scenario_parts:
            dims = (min(runners.data_dim(scenario), 2) for _, scenario, _ in args[0])
            return sum(_SCENARIO_COST[d] for d in dims)
        return _COST[fn.__name__]

    return sorted(range(len(tasks)), key=lambda i: -cost(i))


def _same_shapes(scenarios, quick: bool) -> list[list[int]]:
    """Scenarios grouped by the shape of their data (points, dimension): one group shares its
    compiled programs, so it runs on one worker."""
    size = 0 if quick else 1
    groups: dict[tuple, list[int]] = {}
    for i, s in enumerate(scenarios):  # a per-unit sigma (N,) compiles programs of its own
        groups.setdefault((s.num_points[size], runners.data_dim(s), s.per_unit), []).append(i)
    return list(groups.values())


def _scenario_parts(jobs, quick, methods, tmp, keep_trees, *, progress):
    out = []
    for slot, scenario, key in jobs:
        warned = []
        run, left_out = runners.scenario_methods(scenario, methods)
        comparison, x, z, measure, sigma = runners.run_scenario(
            scenario, quick=quick, key=key, progress=progress, methods=run, warned=warned
        )
        check_finite_table(f"{scenario.name}: compare_deconvolution", comparison.table)
        progress(f"{scenario.name}: figures")
        p = new_part(_SECTION_IDS)
        with named_warnings(f"{scenario.name}, figures and nuts vs nuts-dp", progress, warned):
            deconvolution_blocks(
                p.blocks,
                p.figures,
                scenario,
                x,
                z,
                measure,
                comparison,
                p.diagnostics,
                p.frames,
                tmp,
                sigma=sigma,
                keep_trees=keep_trees,
                left_out=left_out,
            )
        p.blocks["methods"].append(warnings_note(warned))
        out.append((slot, p))
    return out


def _switching_part(slot, settings, quick, key, tmp, keep_trees, *, progress):
    warned = []
    run = runners.run_switching(settings, quick=quick, key=key, progress=progress, warned=warned)
    check_finite_table("maneuvering-target: compare_switching", run.comparison.table)
    progress("maneuvering-target: figures")
    p = new_part(_SECTION_IDS)
    with named_warnings("maneuvering-target, figures", progress, warned):
        switching_blocks(
            p.blocks, p.figures, run, p.diagnostics, p.frames, tmp, key, keep_trees=keep_trees
        )
    p.blocks["methods"].append(warnings_note(warned))
    return [(slot, p)]


def _learning_part(slot, settings, quick, key, *, progress):
    warned = []
    learning = runners.run_switching_learning(
        settings, quick=quick, key=key, progress=progress, warned=warned
    )
    check_finite_table("learning: compare_switching_learning", learning.comparison.table)
    p = new_part(_SECTION_IDS)
    learning_blocks(p.blocks, learning, p.frames)
    p.blocks["learning"].append(warnings_note(warned))
    return [(slot, p)]


def _atoms_part(slot, scenario, scenario_key, counts, quick, key, *, progress):
    """PSIS-LOO across K on the first scenario's data (simulated again from its key)."""
    data = runners.scenario_data(scenario, quick=quick, key=scenario_key)
    progress(f"numbers of atoms: Gibbs fits for K in {list(counts)} on {scenario.name}")
    draws = 300 if quick else 1000
    warned = []
    with named_warnings(f"{scenario.name}, gibbs for K in {list(counts)}", progress, warned):
        atoms = compare_num_atoms(
            key,
            data.x,
            data.sigma,
            counts,
            sampler_kwargs={"num_warmup": draws, "num_samples": draws},
            progress=lambda msg: progress(f"numbers of atoms: {msg}"),
        )
    p = new_part(_SECTION_IDS, leads=("model-comparison",))
    atoms_block(p.blocks, p.figures, scenario, atoms, p.frames)
    p.blocks["model-comparison"].append(warnings_note(warned))
    return [(slot, p)]


def _attention_part(slot, key_att, key_nw, quick, *, progress):
    progress("attention maps and Nadaraya-Watson")
    p = new_part(_SECTION_IDS, leads=("attention",))
    warned = []
    with named_warnings("attention maps", progress, warned):
        att_figs, att_table = attention_demo(key_att)
    attention_block(p.blocks, p.figures, att_figs, att_table, p.frames)
    p.blocks["attention"].append(warnings_note(warned))
    warned = []
    with named_warnings("sine, nadaraya-watson", progress, warned):
        nw_figs, nw_table = kernel_regression_demo(key_nw, 300 if quick else 1000)
    kernel_block(p.blocks, p.figures, nw_figs, nw_table, p.frames)
    p.blocks["kernel-regression"].append(warnings_note(warned))
    return [(slot, p)]


def _learned_part(slot, settings, quick, key, *, progress):
    warned = []
    run = run_learned_attention(settings, quick=quick, key=key, progress=progress, warned=warned)
    for label, table in learned_key_numbers(run):
        check_finite_table(label, table)
    p = new_part(_SECTION_IDS)
    learned_blocks(p.blocks, p.figures, run, p.frames)
    p.blocks["learned"].append(warnings_note(warned))
    return [(slot, p)]


def _calibration_part(slot, settings, quick, key, *, progress):
    warned = []
    run = run_calibration_section(settings, quick=quick, key=key, progress=progress, warned=warned)
    check_finite_table("calibration", calibration_key_numbers(run))
    p = new_part(_SECTION_IDS)
    calibration_blocks_html(p.blocks, p.figures, run, p.frames)
    p.blocks["calibration"].append(warnings_note(warned))
    return [(slot, p)]
