"""The persistent compilation cache of the command, the report and the notebooks."""

import os
import stat
import subprocess
import sys
import time
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnbayes.app import cache
from attnbayes.app.cache import CACHE_ENV, cache_folder, enable_compilation_cache


def test_the_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "mine"))
    assert cache_folder() == tmp_path / "mine"
    for off in ["off", "OFF", "0", "", " none "]:
        monkeypatch.setenv(CACHE_ENV, off)
        assert cache_folder() is None, off
    monkeypatch.delenv(CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_folder() == tmp_path / "xdg" / "attnbayes" / "jax"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_folder() == tmp_path / "home" / ".cache" / "attnbayes" / "jax"


@pytest.fixture
def restore_jax_cache_config():
    """Put the session's cache (tests/conftest.py) back after a test that moved it."""
    names = [
        "jax_compilation_cache_dir",
        "jax_persistent_cache_min_compile_time_secs",
        "jax_persistent_cache_min_entry_size_bytes",
    ]
    before = {n: getattr(jax.config, n) for n in names}
    yield
    if before["jax_compilation_cache_dir"]:
        enable_compilation_cache(before["jax_compilation_cache_dir"])
    for name, value in before.items():
        jax.config.update(name, value)


def test_an_unusable_folder_warns_and_leaves_jax_alone(tmp_path, restore_jax_cache_config):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    before = jax.config.jax_compilation_cache_dir
    with pytest.warns(RuntimeWarning, match=f"{CACHE_ENV}: cannot use .*a-file/jax"):
        assert enable_compilation_cache(blocker / "jax") is None
    assert jax.config.jax_compilation_cache_dir == before
    assert blocker.read_text() == "not a folder"


def test_off_means_off(monkeypatch, restore_jax_cache_config):
    monkeypatch.setenv(CACHE_ENV, "off")
    before = jax.config.jax_compilation_cache_dir
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert enable_compilation_cache() is None
    assert jax.config.jax_compilation_cache_dir == before


def test_a_new_folder_is_private_and_every_compile_is_kept(tmp_path, restore_jax_cache_config):
    folder = enable_compilation_cache(tmp_path / "a" / "b")
    assert folder == tmp_path / "a" / "b"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert jax.config.jax_compilation_cache_dir == str(folder)
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 0.0


COMPILE_ONCE = """
import sys
import jax, jax.numpy as jnp
from jax import monitoring
hits = []
monitoring.register_event_listener(
    lambda event, **kw: hits.append(event) if event.endswith("cache_hits") else None
)
from attnbayes.app.cache import enable_compilation_cache
assert enable_compilation_cache() is not None
f = jax.jit(lambda x: jnp.sum(jnp.cumsum(jnp.sin(x)) ** 2))
f(jnp.arange(7.0)).block_until_ready()
print(len(hits))
"""


def test_a_second_process_reads_what_the_first_compiled(tmp_path):
    env = {**os.environ, CACHE_ENV: str(tmp_path / "cache")}
    runs = [
        subprocess.run(
            [sys.executable, "-P", "-c", COMPILE_ONCE],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        for _ in range(2)
    ]
    for run in runs:
        assert run.returncode == 0, run.stderr
    assert int(runs[0].stdout.split()[-1]) == 0
    assert any((tmp_path / "cache").iterdir())
    assert int(runs[1].stdout.split()[-1]) >= 1


def test_the_command_reports_an_unusable_cache_in_one_line_and_goes_on(
    tmp_path, capsys, restore_jax_cache_config
):
    from attnbayes.app import cli

    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    cli_env = {CACHE_ENV: str(blocker / "jax")}
    old = {k: os.environ.get(k) for k in cli_env}
    os.environ.update(cli_env)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the warning is printed, never raised
            cli._configure_jax()
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"attnbayes: warning: {CACHE_ENV}: cannot use ")
    assert Path(cache.__file__).name == "cache.py"


def test_jax_builds_its_cache_as_ours(tmp_path, restore_jax_cache_config):
    """The hook this module uses (``compilation_cache.get_file_cache``) is where JAX builds its
    file cache: a compile after ``enable_compilation_cache`` writes through our class, into the
    folder, and leaves no temporary behind."""
    from jax._src import compilation_cache

    folder = enable_compilation_cache(tmp_path / "c")
    jax.jit(lambda x: jnp.sum(jnp.tanh(x) ** 5) + 0.25)(jnp.arange(6.0)).block_until_ready()
    assert isinstance(compilation_cache._cache, cache.atomic_file_cache_class())
    assert Path(compilation_cache._cache.path) == folder
    assert any(p.name.endswith(cache.ENTRY_SUFFIX) for p in folder.iterdir())
    assert not list(folder.glob(".*.tmp-*"))


def _half_written_seen(cache_object, key, monkeypatch) -> bool:
    """Write an entry through ``cache_object`` with ``Path.write_bytes`` paused halfway, and say
    whether a reader at that moment finds the entry (then it reads it truncated)."""
    payload = bytes(range(256)) * 64
    seen = []
    real = Path.write_bytes

    def paused(self, data):
        with open(self, "wb") as f:
            f.write(data[: len(data) // 2])
            f.flush()
            seen.append(cache_object.get(key))  # another process looking it up now
            f.write(data[len(data) // 2 :])
        return len(data)

    monkeypatch.setattr(Path, "write_bytes", paused)
    try:
        cache_object.put(key, payload)
    finally:
        monkeypatch.setattr(Path, "write_bytes", real)
    assert cache_object.get(key) == payload  # written whole in the end
    return seen[0] is not None


def test_no_reader_sees_an_entry_half_written(tmp_path, monkeypatch):
    """The cause of "Error reading persistent compilation cache entry ... truncated stream":
    JAX's own cache writes in place, so a reader finds the entry while it is half-written (the
    second assertion: how the check can fail). Ours renames a whole temporary into place."""
    from jax._src.lru_cache import LRUCache

    ours = cache.atomic_file_cache_class()(str(tmp_path / "ours"))
    assert not _half_written_seen(ours, "k", monkeypatch)
    assert not list((tmp_path / "ours").glob(".*.tmp-*"))
    assert _half_written_seen(LRUCache(str(tmp_path / "jax"), max_size=-1), "k", monkeypatch)


def test_stale_temporaries_are_removed(tmp_path, restore_jax_cache_config):
    folder = tmp_path / "c"
    folder.mkdir(mode=0o700)
    stale, fresh = folder / ".k1.tmp-1-2", folder / ".k2.tmp-3-4"
    stale.write_bytes(b"x")
    fresh.write_bytes(b"y")
    old = time.time() - 2 * cache.STALE_AFTER_S
    os.utime(stale, (old, old))
    enable_compilation_cache(folder)
    assert not stale.exists() and fresh.exists()


def _programs():
    """Three small programs, new function objects each call (so JAX looks them up again)."""
    return (
        jax.jit(lambda x: jnp.sum(jnp.cumsum(jnp.cos(x)) ** 3) - 0.5),
        jax.jit(lambda x: jnp.max(jnp.exp(jnp.sin(x) * 1.5))),
        jax.jit(lambda x: jnp.prod(1.0 + jnp.tanh(x) / 4.0)),
    )


def test_a_corrupt_entry_is_removed_with_one_line_and_written_again(
    tmp_path, capsys, restore_jax_cache_config
):
    """Entries truncated or altered on disk: JAX warned (two lines) for each on every later run
    ("Error reading persistent compilation cache entry") and kept the file. Now they are removed
    (one line for all), compiled again, written anew and read back by the next lookup; an entry
    in JAX's own format (no header) is replaced without a word."""
    from jax import monitoring
    from jax._src import compilation_cache

    x = np.linspace(-1.0, 2.0, 5)
    expected = [
        np.sum(np.cumsum(np.cos(x)) ** 3) - 0.5,
        np.max(np.exp(np.sin(x) * 1.5)),
        np.prod(1.0 + np.tanh(x) / 4.0),
    ]
    folder = enable_compilation_cache(tmp_path / "c")
    for f in _programs():
        f(x).block_until_ready()
    entries = sorted(folder.glob(f"*{cache.ENTRY_SUFFIX}"))
    assert len(entries) == 3
    truncated, altered, foreign = entries
    truncated.write_bytes(truncated.read_bytes()[: truncated.stat().st_size // 2])
    flipped = bytearray(altered.read_bytes())
    flipped[len(flipped) // 2] ^= 0xFF
    altered.write_bytes(bytes(flipped))
    foreign.write_bytes(b"not written by attnbayes")
    # JAX's own entries of the same programs (or an older attnbayes's), sharing the folder
    theirs = [e.with_name(e.name.removesuffix(cache.ENTRY_SUFFIX) + "-cache") for e in entries]
    for other in theirs:
        other.write_bytes(b"JAX's own format")
    capsys.readouterr()

    hits = []

    def listener(event, **kwargs):
        if event == "/jax/compilation_cache/cache_hits":
            hits.append(event)

    monitoring.register_event_listener(listener)
    try:
        for run in range(2):  # the first meets the bad entries, the second the new ones
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                got = [float(f(x)) for f in _programs()]
            assert [str(w.message) for w in caught if "cache" in str(w.message)] == []
            assert got == pytest.approx(expected, rel=1e-12)
            err = capsys.readouterr().err
            if run == 0:
                assert hits == []
                assert err.startswith("attnbayes: warning: removed a corrupt entry from the ")
                assert err.count("\n") == 1 and str(folder) in err
                assert compilation_cache._cache.corrupt == 2  # the foreign one not counted
                for entry in entries:  # rewritten, whole
                    assert cache._unwrap(entry.read_bytes()) is not None
            else:
                assert len(hits) == 3 and err == ""
            assert all(other.read_bytes() == b"JAX's own format" for other in theirs)
    finally:
        monitoring.unregister_event_listener(listener)
