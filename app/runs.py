"""What ``attnbayes deconvolve`` and ``attnbayes filter`` share: the checks of their options
(the method, counts, sampler sizes, output column names), the output folder's default name, its
``run.json`` manifest, and publishing the files atomically.

Everything is computed first, then written into a temporary folder next to the target and
renamed into place (``attnbayes.app.outputs``): a failed run leaves nothing behind. An existing
OUT/NAME is replaced only when an earlier attnbayes run wrote it (its ``run.json`` says so),
so a typo in ``--name`` cannot wipe an unrelated folder.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from ..inference import methods as registry
from .outputs import MANIFEST, assembling, manifest_json, versions, write_atomic
from .pages import page, save_datatree
from .user_data import InputError, Table

SIZE_OPTIONS = {"num_warmup": "--warmup", "num_samples": "--draws", "num_chains": "--chains"}


def offered_method(command: str, reading: str, method) -> registry.Method:
    """The registry's method that ``attnbayes <command> --method <method>`` names (a name or an
    alias), or an InputError listing what the command offers."""
    choices = registry.command_choices(command, reading)
    if method not in choices:
        raise InputError(f"--method: unknown {method!r}; choose from {list(choices)}")
    return registry.get_method(reading, method)


def check_count(name: str, value, minimum: int) -> int | None:
    """An integer option ``>= minimum`` (None stays None), else an InputError naming it."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise InputError(f"{name}: expected an integer >= {minimum}, got {value!r}")
    return int(value)


def sizes_from_options(defaults: Mapping, num_warmup, num_samples, num_chains) -> dict:
    """``defaults`` (num_warmup, num_samples, num_chains) updated with the sizes given, each
    checked as its option (--warmup >= 0, --draws >= 1, --chains >= 1)."""
    sizes = dict(defaults)
    for key, value, minimum in (
        ("num_warmup", num_warmup, 0),
        ("num_samples", num_samples, 1),
        ("num_chains", num_chains, 1),
    ):
        checked = check_count(SIZE_OPTIONS[key], value, minimum)
        if checked is not None:
            sizes[key] = checked
    return sizes


def check_columns_unique(columns: list[str]) -> None:
    """Refuse a data column named like an output column of the same file (InputError)."""
    seen = set()
    for name in columns:
        if name in seen:
            raise InputError(
                f"column name {name!r} clashes with an output column of the same name; rename "
                "that column in the file's header"
            )
        seen.add(name)


def default_name(path: str, command: str, method: str) -> str:
    """``<file stem>-<command>-<method>`` with characters outside [A-Za-z0-9._-] replaced."""
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", Path(path).stem).lstrip(".") or "data"
    return f"{stem}-{command}-{method}"


def datatree_writer(datatree) -> Callable[[Path], None]:
    """A writer of the DataTree as gzip-compressed netCDF (``attnbayes.app.pages.save_datatree``:
    without the z_i draws, which ``attnbayes.inference.deconvolution.add_invariants``
    rebuilds)."""
    return lambda path: save_datatree(datatree, path)


def run_manifest(command: str, table: Table, settings: dict, seconds: float, files) -> str:
    """``run.json`` of a run on ``table``: the input file and its SHA-256, the settings, wall
    time, versions and the files written."""
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


def publish_run(
    target: Path,
    files: dict,
    command: str,
    table: Table,
    body: str,
    settings: dict,
    elapsed: float,
    say,
) -> Path:
    """The run's page (``index.html`` around ``body``) and ``run.json`` added to ``files``, all
    published into ``target``; returns the page's path."""
    files["index.html"] = page(f"attnbayes {command}: {Path(table.path).name}", body)
    files[MANIFEST] = run_manifest(command, table, settings, elapsed, files)
    publish(target, files)
    say(f"written to {target}")
    return target / "index.html"


def publish(target: Path, files: dict) -> None:
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


__all__ = [
    "SIZE_OPTIONS",
    "check_columns_unique",
    "check_count",
    "datatree_writer",
    "default_name",
    "offered_method",
    "publish",
    "publish_run",
    "run_manifest",
    "sizes_from_options",
]
