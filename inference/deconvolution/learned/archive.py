"""Versioned .npz archives of learned stacks: an atomic write and a checked read.

Both stacks (``unrolled``, format version 1; ``grid_stack``, format version 2) store their
parameters as named float arrays plus ``format_version`` and scalar metadata ``meta.<name>``.
``write_archive`` writes a temporary file in the target folder and renames it (a reader never
sees half a file); ``read_archive`` turns every way a file can fail to be a whole archive into
one ``ValueError`` naming the path; ``archive_version`` reads and checks the version number.
"""

from __future__ import annotations

import os
import tempfile
import zipfile
import zlib

import numpy as np

# what reading a file that is not a whole archive raises: an empty file (EOFError), a cut or
# foreign one (BadZipFile, ValueError), a damaged compressed member (zlib.error), or OSError
_UNREADABLE = (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error)

# what each format version holds, and the function that reads it
VERSIONS = {
    1: "an unrolled-EM stack (version 1: load_unrolled_em)",
    2: "a grid stack (version 2: load_grid_stack)",
}


def write_archive(path, arrays: dict, metadata: dict | None) -> None:
    """Write ``arrays`` and ``metadata`` (``meta.<name>``, strings or numbers) to ``path``
    (.npz), atomically: a temporary file in the same folder, then a rename."""
    path = os.fspath(path)
    if not path.endswith(".npz"):
        raise ValueError(f"path: expected a .npz file name, got {path!r}")
    arrays = dict(arrays)
    for name, value in (metadata or {}).items():
        if not isinstance(value, str | int | float):
            raise ValueError(f"metadata: {name!r} must be a string or a number, got {value!r}")
        arrays[f"meta.{name}"] = np.asarray(value)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(suffix=".npz", dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            np.savez(handle, **arrays)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 -> an ordinary file's permissions
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def read_archive(path) -> dict:
    """The arrays of the .npz archive at ``path``, by name; ValueError naming it otherwise."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"path: no such file {path!r}")
    try:
        with open(path, "rb") as handle:
            data = np.load(handle, allow_pickle=False)
            if not isinstance(data, np.lib.npyio.NpzFile):
                raise ValueError("a single array, not an .npz archive")
            with data:
                return {name: data[name] for name in data.files}
    except _UNREADABLE as err:
        raise ValueError(
            f"path: not a saved stack: {path!r} could not be read as an .npz archive "
            f"({type(err).__name__}: {str(err) or 'no detail'})"
        ) from None


def archive_version(arrays: dict, path: str, expected: int) -> None:
    """Check the archive's ``format_version`` is ``expected``; a ValueError naming the path
    and, for the other known version, what the file is and which function reads it."""
    version = arrays.get("format_version")
    if version is None:
        raise ValueError(f"path: no format version in {path!r}: not a saved stack")
    if version.ndim != 0 or not np.issubdtype(version.dtype, np.integer):
        raise ValueError(
            f"path: format version {version.tolist()!r} in {path!r} is not an integer "
            f"(this function reads version {expected})"
        )
    if int(version) != expected:
        known = VERSIONS.get(int(version))
        what = f": {known}" if known else ""
        raise ValueError(
            f"path: format version {int(version)} in {path!r}{what}; this function reads "
            f"version {expected}"
        )


def archive_metadata(arrays: dict, path: str) -> dict:
    """The ``meta.<name>`` entries as Python scalars; ValueError for a non-scalar one."""
    metadata = {}
    for name, value in arrays.items():
        if name.startswith("meta."):
            if value.ndim != 0:
                raise ValueError(
                    f"path: metadata {name!r} in {path!r} has shape {value.shape}, "
                    "expected a string or a number"
                )
            metadata[name[5:]] = value.item()
    return metadata


__all__ = ["VERSIONS", "archive_metadata", "archive_version", "read_archive", "write_archive"]
