"""JAX's persistent compilation cache for the command, the report and the notebooks.

A compiled XLA program is written to disk the first time and read back by later processes,
so a second ``attnbayes report`` skips most of its compiling. The folder is private to the
user (mode 0700): ``$ATTNBAYES_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/attnbayes/jax``, else
``~/.cache/attnbayes/jax``. ``ATTNBAYES_CACHE_DIR=off`` turns the cache off. A cache folder
that cannot be created or written never fails a run: the run goes on uncached, with a
one-line warning. The library itself (``attnbayes.models``, ``attnbayes.inference``) never
touches the cache; this is the application's choice.

Several processes may share the folder (the report's workers, two commands run at once, the
test workers). JAX's cache writes an entry in place (``Path.write_bytes``) and, with no size
limit (its default), takes no lock: a second process that looks the entry up while the first is
still writing it reads a truncated file and warns "Error reading persistent compilation cache
entry ... truncated stream" (then compiles again). With a size limit JAX holds a file lock
(``filelock``, on ``.lockfile`` in the folder) around every read and write, so a reader waits
for the writer: the cache is given one, ``MAX_BYTES`` unless ``ATTNBAYES_CACHE_MAX_MB`` says
otherwise, the least recently read entries going first when it is full.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path

__all__ = ["CACHE_ENV", "MAX_BYTES", "MAX_MB_ENV", "cache_folder", "enable_compilation_cache"]

CACHE_ENV = "ATTNBAYES_CACHE_DIR"
MAX_MB_ENV = "ATTNBAYES_CACHE_MAX_MB"
OFF = {"off", "0", "no", "false", "none"}
# room for a full report and the test suite (about 1.3 GB each, measured) several times over
MAX_BYTES = 8 * 1024**3


def cache_folder() -> Path | None:
    """The cache folder this process would use, or ``None`` if the cache is turned off."""
    chosen = os.environ.get(CACHE_ENV)
    if chosen is not None:
        return None if chosen.strip().lower() in OFF or not chosen.strip() else Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "attnbayes" / "jax"


def _usable(folder: Path) -> str | None:
    """None if ``folder`` exists (created 0700 if missing) and takes a file, else why not."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not folder.is_dir():
            return "not a folder"
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".probe-"):
            pass
    except OSError as err:
        return err.strerror or str(err)
    return None


def max_bytes() -> int:
    """The cache's size limit in bytes: ``ATTNBAYES_CACHE_MAX_MB`` megabytes if set, else
    ``MAX_BYTES`` (also, with a ``RuntimeWarning`` naming the variable, when it is set to
    anything but a positive whole number)."""
    text = os.environ.get(MAX_MB_ENV)
    if text is None or not text.strip():
        return MAX_BYTES
    try:
        megabytes = int(text)
    except ValueError:
        megabytes = 0
    if megabytes < 1:
        warnings.warn(
            f"{MAX_MB_ENV}: expected a positive whole number of megabytes, got {text!r}; "
            f"using {MAX_BYTES // 1024**2}",
            RuntimeWarning,
            stacklevel=3,
        )
        return MAX_BYTES
    return megabytes * 1024**2


def enable_compilation_cache(folder: str | os.PathLike | None = None) -> Path | None:
    """Point JAX's persistent compilation cache at ``folder`` (default: ``cache_folder()``).

    Every compiled program is cached, however short its compile (JAX's default keeps only
    those over one second, which would skip most of ours), in a folder of at most
    ``max_bytes()``, read and written under JAX's file lock so that processes sharing it never
    read an entry half-written. Returns the folder in use, or ``None`` when the cache is off or
    unusable (then with a ``RuntimeWarning``).
    """
    target = Path(folder) if folder is not None else cache_folder()
    if target is None:
        return None
    limit = max_bytes()
    problem = _usable(target)
    if problem is not None:
        warnings.warn(
            f"{CACHE_ENV}: cannot use {target} as the compilation cache ({problem}); "
            "running without it",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    import jax

    jax.config.update("jax_compilation_cache_dir", str(target))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    # a limit turns on JAX's lock around reads and writes (see the module docstring)
    jax.config.update("jax_compilation_cache_max_size", limit)
    return target
