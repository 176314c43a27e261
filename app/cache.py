"""JAX's persistent compilation cache for the command, the report and the notebooks.

A compiled XLA program is written to disk the first time and read back by later processes,
so a second ``attnbayes report`` skips most of its compiling. The folder is private to the
user (mode 0700): ``$ATTNBAYES_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/attnbayes/jax``, else
``~/.cache/attnbayes/jax``. ``ATTNBAYES_CACHE_DIR=off`` turns the cache off. A cache folder
that cannot be created or written never fails a run: the run goes on uncached, with a
one-line warning. The library itself (``attnbayes.models``, ``attnbayes.inference``) never
touches the cache; this is the application's choice.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path

__all__ = ["CACHE_ENV", "cache_folder", "enable_compilation_cache"]

CACHE_ENV = "ATTNBAYES_CACHE_DIR"
OFF = {"off", "0", "no", "false", "none"}


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


def enable_compilation_cache(folder: str | os.PathLike | None = None) -> Path | None:
    """Point JAX's persistent compilation cache at ``folder`` (default: ``cache_folder()``).

    Every compiled program is cached, however short its compile (JAX's default keeps only
    those over one second, which would skip most of ours). Returns the folder in use, or
    ``None`` when the cache is off or unusable (then with a ``RuntimeWarning``).
    """
    target = Path(folder) if folder is not None else cache_folder()
    if target is None:
        return None
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
    return target
