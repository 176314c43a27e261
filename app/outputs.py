"""Output folders of the ``attnbayes`` commands: one guard, a write probe, atomic publishing.

Every command (``report``, ``deconvolve``, ``filter``, ``calibrate``, ``regress``, ``regimes``)
writes OUT/NAME/ the same way:

1. Before any computation, ``prepare_target(out_dir, name)``

   - refuses a NAME that is not a plain folder name and an OUT that is a file;
   - refuses an existing OUT/NAME that attnbayes did not write (``is_ours``: it holds our
     ``run.json``, or it is a report folder of an earlier version, with ``index.html`` titled
     "attnbayes..." and ``results.csv`` with ``metric,value`` columns), so a typo in
     ``--name`` cannot delete a user's files;
   - creates and removes a temporary file in OUT (or the folder that would hold it), so an
     unwritable OUT is found before the fit, not after;
   - removes hidden temporary folders that runs killed by SIGKILL left in OUT: older than a
     day and their process gone (the process id is in the folder's name), never a live run's.

2. The outputs are assembled in a hidden folder ``.NAME.tmp-PID-XXXX`` beside the target and
   renamed into place (``assembling``), replacing an older folder of ours; a failed or
   interrupted run (KeyboardInterrupt included) removes it and any parent folders it made.

Refusals raise ``InputError`` (exit status 2 in the CLI): they happen before any work. What
fails while computing raises ``RunFailed`` (exit status 1), and ``NonFiniteResult`` when a
quantity about to be written is NaN or infinite (``check_finite_output``/``check_finite_table``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import numpy as np

from .user_data import InputError

MANIFEST = "run.json"
# folders left by killed runs: .NAME.tmp-PID-XXXX (assembling) and .NAME.old-PID (publish_folder)
_TEMPORARY = re.compile(r"^\..+\.(?:tmp|old)-(?P<pid>\d+)(?:-.*)?$")
STALE_AFTER_S = 24 * 3600.0


def check_name(name) -> str:
    """A plain folder name: no separator, not empty, not hidden, not ``.`` or ``..``."""
    seps = [s for s in ("/", os.sep, os.altsep) if s]
    if (
        not isinstance(name, str)
        or not name
        or name.startswith(".")
        or any(s in name for s in seps)
        or "\0" in name
    ):
        raise InputError(f"--name: must be a plain folder name, got {name!r}")
    return name


def is_ours(folder: Path) -> bool:
    """Whether ``folder`` was written by an attnbayes command (any version)."""
    if folder.is_symlink() or not folder.is_dir():
        return False
    manifest = folder / MANIFEST
    if manifest.is_file():
        try:
            doc = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        return isinstance(doc, dict) and doc.get("attnbayes") in (
            "report",
            "deconvolve",
            "filter",
            "calibrate",
            "regress",
            "regimes",
        )
    # a report written before reports carried run.json
    page, results = folder / "index.html", folder / "results.csv"
    if not (page.is_file() and results.is_file()):
        return False
    try:
        with page.open(encoding="utf-8", errors="replace") as fh:
            head = fh.read(4096)
        with results.open(encoding="utf-8", errors="replace") as fh:
            header = fh.readline().strip()
    except OSError:
        return False
    return "<title>attnbayes" in head and header.endswith("metric,value")


def check_target(out_dir, name) -> Path:
    """OUT/NAME, refused (``InputError``) unless it is absent or written by attnbayes."""
    name = check_name(name)
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"--out: {out_dir} exists and is not a folder")
    target = out_dir / name
    if (target.exists() or target.is_symlink()) and not is_ours(target):
        raise InputError(
            f"--out/--name: {target} exists and was not written by attnbayes (no {MANIFEST}); "
            "choose another --name or --out, or remove it"
        )
    return target


def probe_writable(out_dir) -> None:
    """Create and remove a temporary entry in ``out_dir`` (or its nearest existing parent)."""
    out_dir = Path(out_dir)
    existing = out_dir
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        raise InputError(f"--out: {existing} exists and is not a folder")
    try:
        probe = Path(tempfile.mkdtemp(prefix=f".attnbayes-probe-{os.getpid()}-", dir=existing))
        probe.rmdir()
    except OSError as err:
        reason = err.strerror or str(err)
        raise InputError(f"--out: cannot write in {existing}: {reason}") from None


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    except OSError:
        return True
    return True


def remove_stale_temporaries(out_dir, *, older_than_s: float = STALE_AFTER_S) -> list[Path]:
    """Remove hidden temporary folders of killed runs in ``out_dir``; return what was removed.

    A folder is stale when its name is ours (``.NAME.tmp-PID-...`` or ``.NAME.old-PID``), it was
    last modified more than ``older_than_s`` ago and process PID no longer exists.
    """
    out_dir = Path(out_dir)
    if not out_dir.is_dir():
        return []
    removed = []
    now = time.time()
    for entry in out_dir.iterdir():
        match = _TEMPORARY.match(entry.name)
        if match is None or entry.is_symlink() or not entry.is_dir():
            continue
        try:
            age = now - entry.stat().st_mtime
        except OSError:
            continue
        if age > older_than_s and not _process_alive(int(match["pid"])):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def prepare_target(out_dir, name) -> Path:
    """The checks of step 1 above, in order; returns OUT/NAME. Run before any computation."""
    target = check_target(out_dir, name)
    probe_writable(target.parent)
    remove_stale_temporaries(target.parent)
    return target


def write_atomic(path: str | os.PathLike, data: str | bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder, then rename."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-{os.getpid()}-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes the file private (0600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def publish_folder(tmp: Path, target: Path) -> None:
    """Move the finished folder ``tmp`` to ``target``, replacing an older one.

    If the final rename fails, the older folder is put back before the error propagates.
    """
    umask = os.umask(0)
    os.umask(umask)
    tmp.chmod(0o777 & ~umask)  # mkdtemp makes the folder private (0700)
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        target.rename(old)
    try:
        tmp.rename(target)
    except BaseException:
        if old is not None:
            old.rename(target)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def assembling(target: Path) -> Iterator[Path]:
    """Yield a new hidden folder beside ``target``; publish it there when the block ends.

    On any exception in the block or in publishing (KeyboardInterrupt and SystemExit
    included) the folder, and the parents of ``target`` that this call created (if still
    empty), are removed before the exception propagates.
    """
    target = Path(target)
    out_dir = target.parent
    created = [p for p in reversed((out_dir, *out_dir.parents)) if not p.exists()]
    tmp = None
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-{os.getpid()}-", dir=out_dir))
        yield tmp
        publish_folder(tmp, target)
    except BaseException:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        for folder in reversed(created):
            try:
                folder.rmdir()
            except OSError:
                break
        raise


def versions() -> dict[str, str]:
    """Versions of attnbayes and the libraries a run's numbers depend on."""
    found = {}
    for package in ("attnbayes", "jax", "numpyro", "arviz"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "unknown"
    return found


class RunFailed(RuntimeError):
    """A run failed after its inputs were accepted (exit status 1 in the CLI, not 2)."""


class NonFiniteResult(RunFailed):
    """A quantity a command is about to publish is NaN or infinite (nothing is written)."""


@contextlib.contextmanager
def computing() -> Iterator[None]:
    """Mark the computing phase: a ``ValueError`` or ``ArithmeticError`` raised inside (the
    library refusing a value met mid-run, an overflow) becomes ``RunFailed`` with the same
    message, so that only refusals before any computation count as bad input."""
    try:
        yield
    except InputError:
        raise
    except (ValueError, ArithmeticError) as err:
        raise RunFailed(str(err)) from err


def check_finite_output(name: str, values, *, axis_name: str = "row") -> None:
    """Raise ``NonFiniteResult`` naming ``name`` and the first bad ``axis_name`` (1-based)."""
    arr = np.asarray(values, dtype=np.float64)
    bad = ~np.isfinite(arr)
    if bad.any():
        where = ""
        if arr.ndim:
            first = np.argwhere(bad.reshape(arr.shape[0], -1).any(axis=1))[0, 0]
            where = f", the first at {axis_name} {first + 1}"
        raise NonFiniteResult(f"{name}: {int(bad.sum())} non-finite value(s){where}")


def check_finite_table(name: str, frame, *, label_columns=("method", "metric")) -> None:
    """Raise ``NonFiniteResult`` naming the first row of a tidy table whose value is not finite."""
    values = np.asarray(frame["value"], dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        row = frame.iloc[bad[0]]
        label = ", ".join(f"{c} {row[c]}" for c in label_columns if c in frame.columns)
        raise NonFiniteResult(
            f"{name}: {bad.size} non-finite value(s), the first at {label} ({values[bad[0]]})"
        )


def manifest_json(command: str, **fields) -> str:
    """``run.json``: the marker ``{"attnbayes": command}`` that makes a folder ours, and
    whatever the command records about the run."""
    return json.dumps({"attnbayes": command, **fields}, indent=2, default=str) + "\n"


__all__ = [
    "MANIFEST",
    "STALE_AFTER_S",
    "NonFiniteResult",
    "RunFailed",
    "assembling",
    "check_finite_output",
    "check_finite_table",
    "check_name",
    "check_target",
    "computing",
    "is_ours",
    "manifest_json",
    "prepare_target",
    "probe_writable",
    "publish_folder",
    "remove_stale_temporaries",
    "versions",
    "write_atomic",
]
