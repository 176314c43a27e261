"""The report's independent parts, run on worker processes (one per core).

Compiling (single-threaded in XLA) and the Python around the fits use one core, so a report run
part after part keeps 1.35 of 2 cores busy on average (measured on the full report).
``run_parts`` runs the parts
on a pool of spawned processes: each has JAX configured as this process is (float64, the
compilation cache), sends its progress messages here, and returns its ``Part``; the parts are
merged in the order they were given, so the page and ``results.csv`` do not depend on the
number of workers. With one worker everything runs in this process, in order.

Workers and devices share the cores without oversubscribing them: with W workers on C usable
cores, each worker starts with ``XLA_FLAGS`` giving it max(1, C // W) host devices
(``attnbayes.app.devices.worker_xla_flags``; the user's other flags kept); one worker (this
process) has all C (``devices.use_every_core``). A user's ``XLA_FLAGS`` that sets the device
count is passed to every worker verbatim. A worker's NUTS chains run in parallel when it has as
many devices as chains (``attnbayes.inference.mcmc``), else one after another on its core.
Under several processes (``jax.distributed``) there is no pool: each process is one worker.

The workers end with this process, however it ends (even ``SIGKILL``, which nothing here can
catch): each holds the read end of a pipe whose only write end is here, and a thread of the
worker exits it (``os._exit``) when the pipe closes, which the system does when this process
dies; on Linux the kernel also kills a worker whose parent dies (``PR_SET_PDEATHSIG``). So no
worker computes on, or writes into the run's temporary folder, after its parent is gone.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import pickle
import queue
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import pandas as pd

from .cache import enable_compilation_cache
from .devices import worker_xla_flags

__all__ = ["WORKERS_ENV", "Part", "default_workers", "merge_parts", "new_part", "run_parts"]

MAX_DEFAULT_WORKERS = 4
WORKERS_ENV = "ATTNBAYES_WORKERS"


class Part(NamedTuple):
    """What one part of the report adds: HTML blocks per section, PNG figures by name, rows of
    ``results.csv``, rows of the diagnostics summary. In the sections named in ``leads`` its
    blocks go before those of the other parts."""

    blocks: dict[str, list[str]]
    figures: dict[str, bytes]
    frames: list[pd.DataFrame]
    diagnostics: list[dict]
    leads: tuple[str, ...] = ()


def new_part(section_ids: Sequence[str], leads: tuple[str, ...] = ()) -> Part:
    return Part({sid: [] for sid in section_ids}, {}, [], [], leads)


def merge_parts(parts: Sequence[Part], section_ids: Sequence[str]) -> Part:
    """One ``Part`` from several, in their order (``leads`` first in their sections)."""
    merged = new_part(section_ids)
    for sid in section_ids:
        merged.blocks[sid].extend(b for p in parts if sid in p.leads for b in p.blocks[sid])
        merged.blocks[sid].extend(b for p in parts if sid not in p.leads for b in p.blocks[sid])
    for part in parts:
        clash = merged.figures.keys() & part.figures.keys()
        if clash:
            raise RuntimeError(f"two parts of the report wrote the figure {sorted(clash)[0]!r}")
        merged.figures.update(part.figures)
        merged.frames.extend(part.frames)
        merged.diagnostics.extend(part.diagnostics)
    return merged


def default_workers() -> int:
    """``$ATTNBAYES_WORKERS`` if set, else the cores this process may use, at most
    ``MAX_DEFAULT_WORKERS`` (each worker holds its own JAX runtime and compiled programs, about
    1-2 GB)."""
    chosen = os.environ.get(WORKERS_ENV, "").strip()
    if chosen:
        if not chosen.isdigit() or int(chosen) < 1:
            raise ValueError(f"{WORKERS_ENV}: expected an integer >= 1, got {chosen!r}")
        return int(chosen)
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_DEFAULT_WORKERS))


# ----------------------------------------------------------------------------- the workers

_MESSAGES = None  # the worker's queue of progress messages to the parent


def _jax_settings() -> dict[str, Any]:
    """This process's JAX settings that a worker must share (read, not changed)."""
    import jax

    names = (
        "jax_enable_x64",
        "jax_compilation_cache_dir",
        "jax_persistent_cache_min_compile_time_secs",
        "jax_persistent_cache_min_entry_size_bytes",
    )
    return {name: getattr(jax.config, name) for name in names}


_PR_SET_PDEATHSIG = 1  # prctl's option, <linux/prctl.h>


def _kill_when_parent_dies() -> None:
    """Linux: the kernel sends this process ``SIGKILL`` when its parent dies (at once, whatever
    the process is doing). The signal follows the parent *thread* that started the process:
    ``run_parts``' thread for the pool's workers, which waits for them; a worker the pool starts
    in place of one that died comes from the pool's own thread (and ends with it, when the pool
    ends: the run stops then anyway)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # no prctl in this C library: the lifeline is enough
        pass


def _exit_when_closed(lifeline) -> None:
    """Block until the parent's end of ``lifeline`` is closed (the parent never writes), then
    end this process at once: no cleanup, no flushing of what the task was doing."""
    try:
        lifeline.recv_bytes()
    except (EOFError, OSError):
        pass
    os._exit(1)


def _watch_parent(lifeline, parent_pid: int) -> None:
    """End this worker when its parent ends: the lifeline (every system) and, on Linux, the
    kernel's parent-death signal."""
    _kill_when_parent_dies()
    if os.getppid() != parent_pid:  # the parent died before the signal was asked for
        os._exit(1)
    threading.Thread(
        target=_exit_when_closed, args=(lifeline,), name="attnbayes-lifeline", daemon=True
    ).start()


def _start_worker(
    messages, settings: dict[str, Any], lifeline, parent_pid: int, xla_flags: str
) -> None:
    global _MESSAGES
    # before JAX starts its backend here: this worker's share of the cores as host devices
    os.environ["XLA_FLAGS"] = xla_flags
    # Ctrl-C reaches the whole process group: the parent decides, and stops the workers
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _watch_parent(lifeline, parent_pid)
    _MESSAGES = messages
    # matplotlib's backend is not set here (only the CLI sets one): $MPLBACKEND comes with the
    # environment, else matplotlib's default, Agg without a display; the parts only save PNGs
    import jax

    for name, value in settings.items():
        if value is not None:
            jax.config.update(name, value)
    folder = settings.get("jax_compilation_cache_dir")
    if folder:  # the parent's cache, written whole (``attnbayes.app.cache``)
        enable_compilation_cache(folder)


def _send(message: str) -> None:
    _MESSAGES.put(message)


def _call(task: Callable, args: tuple) -> Any:
    """Run ``task(*args, progress=...)`` on a worker; an exception that cannot be pickled
    comes back as a ``RuntimeError`` with its type and message."""
    try:
        return task(*args, progress=_send)
    except Exception as err:
        try:
            pickle.dumps(err)
        except Exception:
            raise RuntimeError(f"{type(err).__name__}: {err}") from None
        raise


def _worker_ids() -> set[int]:
    return {child.pid for child in multiprocessing.active_children()}


def run_parts(
    tasks: Sequence[tuple[Callable, tuple]],
    *,
    workers: int,
    progress: Callable[[str], None],
    start_order: Sequence[int] | None = None,
    poll_seconds: float = 0.2,
) -> list:
    """``[task(*args, progress=progress) for task, args in tasks]``, on ``workers`` processes.

    Args:
        tasks: ``(function, args)`` pairs; the functions must be importable (module level) and
            their arguments and results picklable.
        workers: 1 runs every task here, in order; more starts that many spawned processes
            (at most one per task); W started share the C cores: each starts with
            ``worker_xla_flags(W)``, max(1, C // W) host devices.
        progress: called here with every message, as the workers send them.
        start_order: the order in which tasks are started (longest first balances the
            workers); the results keep the order of ``tasks``.

    The first task to fail stops the others (the workers are terminated) and its exception is
    raised here; so is an exception raised by ``progress`` (a pending signal). A worker that
    dies raises ``RuntimeError``.
    """
    order = list(range(len(tasks))) if start_order is None else list(start_order)
    if sorted(order) != list(range(len(tasks))):
        raise ValueError("start_order: must be a permutation of the tasks' indices")
    if workers <= 1 or len(tasks) <= 1:
        return [task(*args, progress=progress) for task, args in tasks]
    context = multiprocessing.get_context("spawn")
    messages = context.Queue()
    # the workers' lifeline: they hold the read end, only this process the write end (closed
    # after the workers have ended, or by the system when this process dies)
    lifeline, alive = context.Pipe(duplex=False)
    processes = min(workers, len(tasks))
    pool = context.Pool(
        processes=processes,
        initializer=_start_worker,
        initargs=(messages, _jax_settings(), lifeline, os.getpid(), worker_xla_flags(processes)),
    )
    # A pool replaces a worker that dies (killed, out of memory) and its task is lost: a
    # changed set of worker processes means that, and the run stops instead of waiting forever.
    started = _worker_ids()
    try:
        running = {i: pool.apply_async(_call, tasks[i]) for i in order}
        results: dict[int, Any] = {}
        while len(results) < len(tasks):
            try:
                progress(messages.get(timeout=poll_seconds))
                continue
            except queue.Empty:
                pass
            if _worker_ids() != started:
                raise RuntimeError(
                    "a worker process of the report died (killed, or out of memory?); "
                    "run again with --workers 1 to see the failure in this process"
                )
            for i, result in running.items():
                if i not in results and result.ready():
                    results[i] = result.get()  # raises the task's exception
        pool.close()
        pool.join()  # the workers exit after flushing what they sent
        while True:
            try:
                progress(messages.get_nowait())
            except queue.Empty:
                break
    except BaseException:
        pool.terminate()
        pool.join()
        raise
    finally:
        messages.close()
        alive.close()
        lifeline.close()
    return [results[i] for i in range(len(tasks))]
