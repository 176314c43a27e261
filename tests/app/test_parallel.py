"""The report's parts on worker processes (`attnbayes.app.report.parallel`): results in the
order given whatever the start order, every progress message delivered, the first failure
raised here with the workers stopped, and the page merged the same for any number of workers."""

import multiprocessing
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
from parallel_tasks import (
    compiled_cache_class,
    die,
    fail,
    fail_unpicklable,
    jax_settings,
    orphaning_parent_script,
    process_running,
    sleep_long,
    square,
)
from two_processes import worker_devices

from attnbayes.app import devices, parallel
from attnbayes.app.parallel import Part, merge_parts, new_part, run_parts

SECTIONS = ("a", "b")


def test_results_keep_the_task_order_every_message_arrives_and_jax_is_set_alike(monkeypatch):
    """... and each of the two workers starts with the user's XLA_FLAGS plus its share of the
    cores as host devices (``devices.worker_xla_flags``: max(1, C // 2))."""
    import jax

    user = "--xla_llvm_disable_expensive_passes=true"
    monkeypatch.setenv("XLA_FLAGS", user)
    tasks = [(square, (v, 0.3 if v == 1 else 0.0)) for v in range(1, 6)]
    messages = []
    out = run_parts(
        [*tasks, (jax_settings, ()), (worker_devices, ())],
        workers=2,
        progress=messages.append,
        start_order=[6, 5, 4, 3, 2, 1, 0],
    )
    share = max(1, devices.usable_cores() // 2)
    assert out.pop() == (f"{user} {devices.DEVICE_FLAG}={share}", share)
    x64, itemsize, cache_dir = out.pop()
    assert x64 == bool(jax.config.jax_enable_x64) and itemsize == (8 if x64 else 4)
    assert cache_dir == jax.config.jax_compilation_cache_dir
    assert [r for r, _ in out] == [1, 4, 9, 16, 25]
    assert os.getpid() not in {pid for _, pid in out}  # on the workers
    assert sorted(messages) == sorted(
        [f"start {v}" for v in range(1, 6)] + [f"end {v}" for v in range(1, 6)]
    )
    assert multiprocessing.active_children() == []


def test_a_worker_writes_the_parent_cache_whole():
    """A worker compiles into the parent's cache folder through ``attnbayes.app.cache``'s class,
    which writes each entry whole (JAX's own writes in place: a worker reading an entry another
    is writing would read it truncated)."""
    import jax

    tasks = [(compiled_cache_class, ()), (square, (1, 0.0))]
    (name, path), _ = run_parts(tasks, workers=2, progress=lambda message: None)
    assert name == "AtomicFileCache"
    assert path == jax.config.jax_compilation_cache_dir


def test_one_worker_runs_here_in_order():
    messages = []
    out = run_parts([(square, (2, 0.0)), (square, (3, 0.0))], workers=1, progress=messages.append)
    assert [r for r, _ in out] == [4, 9] and {pid for _, pid in out} == {os.getpid()}
    assert messages == ["start 2", "end 2", "start 3", "end 3"]


def test_the_first_failure_is_raised_here_and_stops_the_other_workers():
    started = time.perf_counter()
    with pytest.raises(ValueError, match="simulation failed"):
        run_parts(
            [(sleep_long, ()), (fail, ("simulation failed",))], workers=2, progress=lambda m: None
        )
    assert time.perf_counter() - started < 30  # the sleeping worker was terminated
    assert multiprocessing.active_children() == []


def test_a_worker_that_dies_stops_the_run_instead_of_hanging_it():
    started = time.perf_counter()
    with pytest.raises(RuntimeError, match="a worker process of the report died"):
        run_parts([(sleep_long, ()), (die, ())], workers=2, progress=lambda m: None)
    assert time.perf_counter() - started < 30
    assert multiprocessing.active_children() == []


def test_an_unpicklable_failure_comes_back_by_name():
    with pytest.raises(RuntimeError, match="Unpicklable: with a handle"):
        run_parts([(fail_unpicklable, ()), (square, (1, 0.0))], workers=2, progress=print)


def test_a_failing_progress_callback_stops_the_workers():
    def interrupted(message):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_parts([(sleep_long, ()), (square, (1, 0.0))], workers=2, progress=interrupted)
    assert multiprocessing.active_children() == []


def test_the_workers_end_when_their_parent_is_killed(tmp_path):
    """``SIGKILL`` on the process running ``run_parts`` (nothing there can catch it): its
    workers, in the middle of a long task, end within seconds instead of computing on (and
    writing into the run's folder) after it."""
    errors = tmp_path / "stderr"  # also the orphaned resource tracker's note on the semaphores
    with open(errors, "w") as stderr:
        parent = subprocess.Popen(
            [sys.executable, "-P", "-c", orphaning_parent_script()],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    workers = []
    try:
        while len(workers) < 2:
            line = parent.stdout.readline()  # the tasks end in 60 s: not blocked for ever
            assert line, f"the parent ended first ({parent.wait()}): {errors.read_text()}"
            workers.append(int(line.split()[-1]))
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 5.0
        while any(map(process_running, workers)) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert [pid for pid in workers if process_running(pid)] == []
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()
        for pid in workers:
            if process_running(pid):
                os.kill(pid, signal.SIGKILL)


def test_start_order_must_be_a_permutation():
    with pytest.raises(ValueError, match="start_order"):
        run_parts([(square, (1, 0.0))] * 2, workers=2, progress=print, start_order=[0, 0])


def _part(tag: str, leads=()) -> Part:
    p = new_part(SECTIONS, leads=leads)
    for sid in SECTIONS:
        p.blocks[sid].append(f"{sid}:{tag}")
    p.figures[f"fig-{tag}"] = tag.encode()
    p.frames.append(pd.DataFrame({"tag": [tag]}))
    p.diagnostics.append({"tag": tag})
    return p


def test_merge_keeps_the_order_and_puts_leads_first():
    merged = merge_parts([_part("x"), _part("y", leads=("b",)), _part("z")], SECTIONS)
    assert merged.blocks == {"a": ["a:x", "a:y", "a:z"], "b": ["b:y", "b:x", "b:z"]}
    assert list(merged.figures) == ["fig-x", "fig-y", "fig-z"]
    assert [f.tag[0] for f in merged.frames] == ["x", "y", "z"]
    assert [d["tag"] for d in merged.diagnostics] == ["x", "y", "z"]


def test_merge_refuses_a_figure_written_twice():
    with pytest.raises(RuntimeError, match="fig-x"):
        merge_parts([_part("x"), _part("x")], SECTIONS)


def test_default_workers_is_the_usable_cores_up_to_the_cap_or_the_environment(monkeypatch):
    monkeypatch.delenv(parallel.WORKERS_ENV, raising=False)
    assert parallel.default_workers() == min(
        len(os.sched_getaffinity(0)), parallel.MAX_DEFAULT_WORKERS
    )
    monkeypatch.setenv(parallel.WORKERS_ENV, "3")
    assert parallel.default_workers() == 3
    for bad in ("0", "two", "-1", "1.5"):
        monkeypatch.setenv(parallel.WORKERS_ENV, bad)
        with pytest.raises(ValueError, match=f"^{parallel.WORKERS_ENV}: expected an integer"):
            parallel.default_workers()
