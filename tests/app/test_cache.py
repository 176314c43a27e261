"""The persistent compilation cache of the command, the report and the notebooks."""

import os
import stat
import subprocess
import sys
import time
import warnings
from pathlib import Path

import filelock
import jax
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
    names = [
        "jax_compilation_cache_dir",
        "jax_persistent_cache_min_compile_time_secs",
        "jax_persistent_cache_min_entry_size_bytes",
        "jax_compilation_cache_max_size",
    ]
    before = {n: getattr(jax.config, n) for n in names}
    yield
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


def test_the_command_reports_an_unusable_cache_in_one_line_and_goes_on(tmp_path, capsys):
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
        jax.config.update("jax_compilation_cache_dir", None)
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"attnbayes: warning: {CACHE_ENV}: cannot use ")
    assert Path(cache.__file__).name == "cache.py"


def test_the_size_limit_follows_the_environment(monkeypatch):
    monkeypatch.delenv(cache.MAX_MB_ENV, raising=False)
    assert cache.max_bytes() == cache.MAX_BYTES
    monkeypatch.setenv(cache.MAX_MB_ENV, "512")
    assert cache.max_bytes() == 512 * 1024**2
    for bad in ["-3", "0", "lots", "1.5"]:
        monkeypatch.setenv(cache.MAX_MB_ENV, bad)
        with pytest.warns(RuntimeWarning, match=f"^{cache.MAX_MB_ENV}: expected a positive"):
            assert cache.max_bytes() == cache.MAX_BYTES


def test_the_cache_is_limited_so_that_jax_locks_it(tmp_path, restore_jax_cache_config):
    enable_compilation_cache(tmp_path / "c")
    assert jax.config.jax_compilation_cache_max_size == cache.MAX_BYTES


WAIT_FOR_THE_LOCK = """
import sys, time
import jax, jax.numpy as jnp
from attnbayes.app.cache import enable_compilation_cache
assert enable_compilation_cache() is not None
print("ready", flush=True)
jax.jit(lambda x: jnp.sum(jnp.tanh(x) ** 3))(jnp.arange(5.0)).block_until_ready()
print("done", time.time(), flush=True)
"""


@pytest.mark.parametrize("locked", [True, False])
def test_a_process_waits_while_another_holds_the_folder(tmp_path, locked):
    """The cause of "Error reading persistent compilation cache entry ... truncated stream":
    JAX writes an entry in place, so a process sharing the folder could read it half-written.
    Our cache has a size limit, under which JAX reads and writes only while holding the folder's
    file lock: while another process holds it (as a writer does), a process needing the cache
    waits. Without the limit (``locked=False``: what JAX does by default) it does not wait,
    which is how the check can fail."""
    folder = tmp_path / "cache"
    folder.mkdir()
    env = {**os.environ, CACHE_ENV: str(folder)}
    if not locked:  # JAX's default: no limit, no lock
        env["JAX_COMPILATION_CACHE_MAX_SIZE"] = "-1"
        script = WAIT_FOR_THE_LOCK.replace(
            'print("ready"',
            'jax.config.update("jax_compilation_cache_max_size", -1)\nprint("ready"',
        )
    else:
        script = WAIT_FOR_THE_LOCK
    lock = filelock.FileLock(folder / ".lockfile")
    lock.acquire()
    child = subprocess.Popen(
        [sys.executable, "-P", "-c", script],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "ready"
        try:  # the tiny program compiles in well under a second; locked, it waits
            out, _ = child.communicate(timeout=5.0 if locked else 120.0)
            finished_while_locked = True
        except subprocess.TimeoutExpired:
            finished_while_locked = False
    finally:
        released = time.time()
        lock.release()
    if finished_while_locked:
        assert not locked, "the cache was used while another process held its lock"
        assert out.startswith("done")
        return
    assert locked, "the unlocked cache should not wait"
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    assert float(out.split()[-1]) >= released
    assert any(p.name.endswith("-cache") for p in folder.iterdir())
