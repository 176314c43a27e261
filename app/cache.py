"""JAX's persistent compilation cache for the command, the report and the notebooks.

A compiled XLA program is written to disk the first time and read back by later processes,
so a second ``attnbayes report`` skips most of its compiling. The folder is private to the
user (mode 0700): ``$ATTNBAYES_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/attnbayes/jax``, else
``~/.cache/attnbayes/jax``. ``ATTNBAYES_CACHE_DIR=off`` turns the cache off. A cache folder
that cannot be created or written never fails a run: the run goes on uncached, with a
one-line warning. The library itself (``attnbayes.models``, ``attnbayes.inference``) never
touches the cache; this is the application's choice.

Several processes may share the folder (the report's workers, two commands run at once, the
test workers). JAX's file cache (``jax._src.lru_cache.LRUCache``) writes an entry in place
(``Path.write_bytes``) and, with no size limit (its default), takes no lock, so a process that
looks the entry up while another is still writing it reads a truncated file and warns "Error
reading persistent compilation cache entry ... truncated stream" (then compiles again). With a
size limit JAX locks the folder, but then scans the folder and reads every entry's access
time on every write: quadratic in the number of entries, under the lock. So this module gives
JAX a cache that writes each entry to a temporary file in the folder and renames it into
place (``os.replace``, atomic on POSIX): a reader sees no entry or a whole one, without locks.
It is JAX's own class with ``get`` and ``put`` replaced, handed to JAX where it builds its file
cache (``compilation_cache.get_file_cache``; a test fails if that hook moves).

An entry can still be corrupt on disk (a full disk, a crash of the machine, a copied folder).
JAX reads it, fails to decompress or deserialise it, warns "Error reading persistent compilation
cache entry ..." (every time, two lines each) and compiles again; its ``put`` then keeps the
corrupt file, since one exists. So each entry here begins with a header, ``ENTRY_MAGIC`` and a
digest of the rest (BLAKE2b, 16 bytes), checked on every read: an entry that fails the check is
removed and reported as missing, and JAX compiles the program again and writes it anew. A
corrupt entry (the header, but a digest that does not match: truncated or altered) makes the
process print one line, the first time. The entries' names end in ``ENTRY_SUFFIX``, not JAX's
"-cache", so JAX itself or an older attnbayes sharing the folder leaves them alone and they
leave its entries alone.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

__all__ = ["CACHE_ENV", "atomic_file_cache_class", "cache_folder", "enable_compilation_cache"]

CACHE_ENV = "ATTNBAYES_CACHE_DIR"
OFF = {"off", "0", "no", "false", "none"}
# temporaries of writers that died mid-write are removed after this long
STALE_AFTER_S = 3600.0
# the first bytes of every entry (the format's version in the last two), then the digest
ENTRY_MAGIC = b"attnbayes-xla-01"
# an entry's file name ends so (JAX's own end in "-cache"): an older attnbayes or plain JAX
# sharing the folder never reads these entries, nor they its (each would take the other's
# for corrupt and rewrite it, over and over)
ENTRY_SUFFIX = "-attnbayes1"
_DIGEST_BYTES = 16


def _digest(value: bytes) -> bytes:
    return hashlib.blake2b(value, digest_size=_DIGEST_BYTES).digest()


def _unwrap(entry: bytes) -> bytes | None:
    """The value stored in ``entry``, or None if its digest does not match it (corrupt)."""
    start = len(ENTRY_MAGIC) + _DIGEST_BYTES
    value = entry[start:]
    return value if entry[len(ENTRY_MAGIC) : start] == _digest(value) else None


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


@functools.cache
def atomic_file_cache_class():
    """``AtomicFileCache``: JAX's ``LRUCache`` whose ``put`` writes a temporary file and renames
    it into place, and whose ``get`` removes a corrupt entry and reports it missing (built on
    first use, so importing this module imports no JAX)."""
    from jax._src.lru_cache import LRUCache

    class AtomicFileCache(LRUCache):
        """JAX's file cache, each entry written whole: a temporary file in the same folder,
        then ``os.replace`` onto the entry's name, so no reader sees it half-written. No size
        limit, hence no lock and no eviction scan (JAX's default, ``max_size=-1``). Each entry
        carries a header checked on reading: a corrupt one is removed and reads as missing."""

        def __init__(self, path):
            super().__init__(path, max_size=-1)
            self.corrupt = 0  # corrupt entries met by this object
            self._counting = threading.Lock()

        def get(self, key: str) -> bytes | None:
            if not key:
                raise ValueError("key cannot be empty")
            entry = self.path / f"{key}{ENTRY_SUFFIX}"
            try:
                with open(entry, "rb") as f:
                    stored = f.read()
                    read = os.fstat(f.fileno())
            except FileNotFoundError:
                return None
            if not stored.startswith(ENTRY_MAGIC):  # not an entry of ours: replaced silently
                self._remove(entry, read)
                return None
            value = _unwrap(stored)
            if value is None:
                self._remove(entry, read)
                self._tell_corrupt()
            return value

        def put(self, key: str, value: bytes) -> None:
            # JAX puts a program only after its lookup missed or failed: an entry on disk that
            # it could not use is replaced
            if not key:
                raise ValueError("key cannot be empty")
            entry = self.path / f"{key}{ENTRY_SUFFIX}"
            temporary = self.path / f".{key}.tmp-{os.getpid()}-{threading.get_ident()}"
            try:
                temporary.write_bytes(ENTRY_MAGIC + _digest(value) + value)
                os.replace(temporary, entry)
            finally:
                temporary.unlink(missing_ok=True)

        @staticmethod
        def _remove(entry: Path, read: os.stat_result) -> None:
            """Remove ``entry`` if it is still the file that was read (another process may
            have replaced it with a good one since)."""
            try:
                now = os.stat(entry)
                if (now.st_dev, now.st_ino) == (read.st_dev, read.st_ino):
                    os.unlink(entry)
            except FileNotFoundError:
                pass

        def _tell_corrupt(self) -> None:
            """One line on the first corrupt entry."""
            with self._counting:
                self.corrupt += 1
                first = self.corrupt == 1
            if first:
                print(
                    f"attnbayes: warning: removed a corrupt entry from the compilation cache "
                    f"{self.path}; its program is compiled again (further ones silently)",
                    file=sys.stderr,
                )

    return AtomicFileCache


def _remove_stale_temporaries(folder: Path) -> None:
    """Temporaries of writers that died mid-write (older than ``STALE_AFTER_S``)."""
    now = time.time()
    for path in folder.glob(".*.tmp-*"):
        try:
            if now - path.stat().st_mtime > STALE_AFTER_S:
                path.unlink()
        except OSError:
            pass


def _install(folder: Path) -> None:
    """Make JAX build its persistent cache as an ``AtomicFileCache`` in ``folder``."""
    import jax
    from jax._src import compilation_cache

    cls = atomic_file_cache_class()

    def get_file_cache(path: str):
        return cls(path), path

    compilation_cache.get_file_cache = get_file_cache
    current = compilation_cache._cache
    if current is not None and not (isinstance(current, cls) and Path(current.path) == folder):
        compilation_cache.reset_cache()  # an earlier cache: the next compile builds ours here
    jax.config.update("jax_compilation_cache_dir", str(folder))


def enable_compilation_cache(folder: str | os.PathLike | None = None) -> Path | None:
    """Point JAX's persistent compilation cache at ``folder`` (default: ``cache_folder()``).

    Every compiled program is cached, however short its compile (JAX's default keeps only
    those over one second, which would skip most of ours), each entry written whole
    (``atomic_file_cache_class()``) so that processes sharing the folder never read one
    half-written. Returns the folder in use, or ``None`` when the cache is off or unusable (then
    with a ``RuntimeWarning``).
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

    _remove_stale_temporaries(target)
    _install(target)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return target
