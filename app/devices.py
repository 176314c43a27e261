"""How many devices a run gets, and how processes join one run: the app's choice, made before
JAX starts.

Every core. XLA's CPU backend gives a process one device unless
``XLA_FLAGS=--xla_force_host_platform_device_count=D`` says otherwise, and a batch entry
point (``attnbayes.sharding``) splits its batch over the devices it sees. ``use_every_core``
gives the app (the command, the report, a notebook that calls it first) one host device per
core this process may run on (``os.sched_getaffinity``: ``taskset`` and cgroup CPU sets
count), by adding the flag to ``XLA_FLAGS`` before the backend starts. A user's own
``XLA_FLAGS`` that sets the flag is kept verbatim; the user's other flags are kept too. The
library itself never sets the flag (nor any other global state).

Workers and devices share the cores (``devices_per_worker``): the report's W worker processes
(``attnbayes.app.parallel``) on C cores get max(1, C // W) host devices each, and one worker
(everything in this process) all C; so W workers never hold more devices than cores, unless
W > C. The flags each worker starts with are ``worker_xla_flags(W)``.

Every process. ``launch_settings`` reads the coordinator ``HOST:PORT``, this process's id and
the number of processes from the options ``--coordinator``, ``--process-id`` and
``--num-processes`` or, for each one not given, from ``ATTNBAYES_COORDINATOR``,
``ATTNBAYES_PROCESS_ID`` and ``ATTNBAYES_NUM_PROCESSES`` (all three or none); ``join`` calls
``jax.distributed.initialize`` with them before any computation (waiting at most
``JOIN_TIMEOUT_S`` for the others; past it, or when a process dies mid-run, JAX aborts the
processes: bounded, never a hang). Then ``jax.devices()`` lists every process's devices, the
batch entry points shard over all of them by default, every process makes the same calls, and
only process 0 (``attnbayes.sharding.is_writer``) writes; ``on_writer`` runs a check there (the
output folder's) and makes every process agree on its outcome. Each process counts its own
cores: several processes on one machine should each be given their own cores (``taskset -c``)
or an ``XLA_FLAGS`` device count.

Public API: ``DEVICE_FLAG``, ``COORDINATOR_ENV``, ``PROCESS_ID_ENV``, ``NUM_PROCESSES_ENV``,
``JOIN_TIMEOUT_S``, ``Launch``, ``usable_cores``, ``flag_device_count``,
``with_device_count``, ``devices_per_worker``, ``worker_xla_flags``, ``use_every_core``,
``parse_coordinator``, ``parse_process_id``, ``parse_num_processes``, ``launch_settings``,
``join``, ``on_writer``.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Callable, Mapping
from typing import NamedTuple

__all__ = [
    "COORDINATOR_ENV",
    "DEVICE_FLAG",
    "JOIN_TIMEOUT_S",
    "NUM_PROCESSES_ENV",
    "PROCESS_ID_ENV",
    "Launch",
    "devices_per_worker",
    "flag_device_count",
    "join",
    "launch_settings",
    "on_writer",
    "parse_coordinator",
    "parse_num_processes",
    "parse_process_id",
    "usable_cores",
    "use_every_core",
    "with_device_count",
    "worker_xla_flags",
]

DEVICE_FLAG = "--xla_force_host_platform_device_count"
COORDINATOR_ENV = "ATTNBAYES_COORDINATOR"
PROCESS_ID_ENV = "ATTNBAYES_PROCESS_ID"
NUM_PROCESSES_ENV = "ATTNBAYES_NUM_PROCESSES"
# jax.distributed.initialize waits this long for every process to join (JAX's default: 300 s)
JOIN_TIMEOUT_S = 120

_FLAG_VALUE = re.compile(r"^--?xla_force_host_platform_device_count(?:=(.*))?$")
# XLA_FLAGS as the user gave it, and as ``use_every_core`` set it (None: not set by us)
_USER_FLAGS: str | None = None
_OUR_FLAGS: str | None = None

# ----------------------------------------------------------------------------- every core


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity; ``os.cpu_count()`` where there is
    none), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def flag_device_count(flags: str) -> int | None:
    """The host device count ``flags`` (an ``XLA_FLAGS`` string) sets, or None if it sets none
    (the last setting wins, as in XLA). A value that is not an integer >= 1 raises
    ``ValueError`` naming ``XLA_FLAGS``."""
    count = None
    for word in (flags or "").split():
        match = _FLAG_VALUE.match(word)
        if match is None:
            continue
        value = match.group(1)
        if value is None:
            raise ValueError(f"XLA_FLAGS: {DEVICE_FLAG} needs a value ({DEVICE_FLAG}=N)")
        if not value.isdigit() or int(value) < 1:
            raise ValueError(f"XLA_FLAGS: {DEVICE_FLAG} must be an integer >= 1, got {value!r}")
        count = int(value)
    return count


def with_device_count(flags: str, count: int) -> str:
    """``flags`` with ``DEVICE_FLAG=count`` added, unless ``flags`` sets a count already (then
    ``flags`` verbatim)."""
    if flag_device_count(flags) is not None:
        return flags
    return f"{flags} {DEVICE_FLAG}={int(count)}".strip()


def devices_per_worker(cores: int, workers: int) -> int:
    """Host devices per worker process when ``workers`` share ``cores``: max(1, cores //
    workers); one worker gets every core."""
    if cores < 1 or workers < 1:
        raise ValueError(f"cores, workers: expected integers >= 1, got {cores}, {workers}")
    return max(1, cores // workers)


def _user_flags() -> str:
    """The user's ``XLA_FLAGS`` (what it was before ``use_every_core`` added the count)."""
    flags = os.environ.get("XLA_FLAGS", "")
    if _OUR_FLAGS is not None and flags == _OUR_FLAGS:
        return _USER_FLAGS or ""
    return flags


def worker_xla_flags(workers: int, cores: int | None = None) -> str:
    """The ``XLA_FLAGS`` each of ``workers`` worker processes starts with: the user's flags,
    with ``devices_per_worker(cores, workers)`` host devices unless they set a count (default
    ``cores``: ``usable_cores()``)."""
    cores = usable_cores() if cores is None else cores
    return with_device_count(_user_flags(), devices_per_worker(cores, workers))


def _backend_started() -> bool:
    if "jax" not in sys.modules:
        return False
    from jax._src import xla_bridge

    return bool(xla_bridge.backends_are_initialized())


def use_every_core(count: int | None = None) -> int:
    """Give this process ``count`` host devices (default: ``usable_cores()``) by adding
    ``DEVICE_FLAG`` to ``os.environ["XLA_FLAGS"]``, unless the user's ``XLA_FLAGS`` sets a count
    (kept verbatim). Call it before JAX starts its backend (the first array or device query);
    afterwards the flag no longer acts, so nothing is changed. Returns the device count this
    process has or will have."""
    global _USER_FLAGS, _OUR_FLAGS
    if _backend_started():
        import jax

        return jax.local_device_count()
    user = _user_flags()
    chosen = flag_device_count(user)
    if chosen is not None:
        return chosen
    count = usable_cores() if count is None else int(count)
    if count < 1:
        raise ValueError(f"count: expected an integer >= 1, got {count}")
    _USER_FLAGS, _OUR_FLAGS = user, with_device_count(user, count)
    os.environ["XLA_FLAGS"] = _OUR_FLAGS
    return count


# ----------------------------------------------------------------------------- every process


class Launch(NamedTuple):
    """Where this process stands in a run of several: the coordinator's ``HOST:PORT`` (process
    0 serves it), this process's id in [0, num_processes) and the number of processes."""

    coordinator: str
    process_id: int
    num_processes: int


def parse_coordinator(text: str) -> str:
    """``HOST:PORT`` (``[IPv6]:PORT`` too) with a port in 1..65535; ``ValueError`` if not."""
    text = str(text).strip()
    host, colon, port = text.rpartition(":")
    if not colon or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT with a port in 1..65535, got {text!r}")
    if host.startswith("[") != host.endswith("]") or host in ("[]",):
        raise ValueError(f"expected HOST:PORT ([ADDRESS]:PORT for IPv6), got {text!r}")
    return f"{host}:{int(port)}"


def _integer(text, minimum: int) -> int:
    value = str(text).strip()
    if not re.fullmatch(r"[+]?\d+", value):
        raise ValueError(f"expected an integer >= {minimum}, got {text!r}")
    if int(value) < minimum:
        raise ValueError(f"must be >= {minimum}, got {int(value)}")
    return int(value)


def parse_process_id(text) -> int:
    """An integer >= 0; ``ValueError`` if not."""
    return _integer(text, 0)


def parse_num_processes(text) -> int:
    """An integer >= 1; ``ValueError`` if not."""
    return _integer(text, 1)


_SETTINGS = (
    ("--coordinator", COORDINATOR_ENV, parse_coordinator),
    ("--process-id", PROCESS_ID_ENV, parse_process_id),
    ("--num-processes", NUM_PROCESSES_ENV, parse_num_processes),
)


def launch_settings(
    coordinator: str | None = None,
    process_id: int | None = None,
    num_processes: int | None = None,
    *,
    environ: Mapping[str, str] | None = None,
) -> Launch | None:
    """The run's ``Launch`` from the options (already parsed) or, for each one not given (None),
    its environment variable; None when none of the three is set anywhere.

    Raises ``ValueError`` naming the option or variable: a bad value, some but not all of the
    three, or a process id >= the number of processes."""
    environ = os.environ if environ is None else environ
    given = {"--coordinator": coordinator, "--process-id": process_id}
    given["--num-processes"] = num_processes
    values, source = {}, {}
    for option, env, parse in _SETTINGS:
        if given[option] is not None:
            values[option], source[option] = parse(given[option]), option
            continue
        text = environ.get(env, "").strip()
        if text:
            try:
                values[option] = parse(text)
            except ValueError as err:
                raise ValueError(f"{env}: {err}") from None
            source[option] = env
    if not values:
        return None
    missing = [f"{o} ({e})" for o, e, _ in _SETTINGS if o not in values]
    if missing:
        raise ValueError(
            f"{', '.join(missing)}: missing; a run of several processes needs --coordinator, "
            "--process-id and --num-processes (or their ATTNBAYES_ variables), all three"
        )
    launch = Launch(values["--coordinator"], values["--process-id"], values["--num-processes"])
    if launch.process_id >= launch.num_processes:
        raise ValueError(
            f"{source['--process-id']}: must be < {source['--num-processes']} "
            f"({launch.num_processes}), got {launch.process_id}"
        )
    return launch


@contextlib.contextmanager
def _stdout_to_stderr():
    """File descriptor 1 pointed at 2 (what C++ code prints included) inside the block."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def join(launch: Launch, *, timeout_s: int = JOIN_TIMEOUT_S) -> None:
    """``jax.distributed.initialize`` with ``launch``, before JAX starts its backend, then one
    collective over every device. Waits at most ``timeout_s`` seconds for every process: past
    it (or when a process dies later, after JAX's heartbeat timeout, 100 s) JAX ends this
    process itself (abort, exit status 134, its own message on stderr; nothing Python can
    catch). A failure JAX raises becomes a ``RuntimeError`` naming the coordinator; joining
    again with the same settings does nothing."""
    import jax
    from jax._src import distributed

    state = distributed.global_state
    if state.client is not None:
        if (state.process_id, state.num_processes) == (launch.process_id, launch.num_processes):
            return
        raise RuntimeError(
            f"--process-id/--num-processes: this process already joined as "
            f"{state.process_id} of {state.num_processes}"
        )
    host = launch.coordinator.rsplit(":", 1)[0].strip("[]")
    # a loopback coordinator listens on loopback only (JAX binds every interface by default)
    bind = {"coordinator_bind_address": launch.coordinator} if _is_loopback(host) else {}
    try:
        jax.distributed.initialize(
            coordinator_address=launch.coordinator,
            num_processes=launch.num_processes,
            process_id=launch.process_id,
            initialization_timeout=int(timeout_s),
            **bind,
        )
        # one collective now: the processes connect (gloo says so on stdout, where only the
        # written path belongs: sent to stderr) and every process knows the others are there
        from jax.experimental import multihost_utils

        with _stdout_to_stderr():
            multihost_utils.sync_global_devices("attnbayes: every process joined")
    except Exception as err:  # JAX raises its own runtime errors, or ValueError/RuntimeError
        first = " ".join(str(err).split())[:300]
        raise RuntimeError(
            f"--coordinator {launch.coordinator}: process {launch.process_id} of "
            f"{launch.num_processes} could not join the run within {timeout_s} s: {first}"
        ) from err


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def joined() -> bool:
    """True once this process has joined a run of several processes (``join``)."""
    import sys

    if "jax" not in sys.modules:
        return False
    from jax._src import distributed

    return distributed.global_state.client is not None


def on_writer[T](check: Callable[[], T], fallback: T) -> T:
    """``check()`` on the process that writes (process 0), and the same verdict on every
    process: with several processes, the others wait for it (one broadcast of a flag) and
    raise ``ValueError`` if it failed there, so that no process computes for a run that will
    not be written. The others get ``fallback``. With one process: ``check()``."""
    import jax

    if jax.process_count() == 1:
        return check()
    import numpy as np
    from jax.experimental import multihost_utils

    from ..sharding import is_writer

    result, failure = fallback, None
    if is_writer():
        try:
            result = check()
        except Exception as err:
            failure = err
    failed = int(multihost_utils.broadcast_one_to_all(np.int32(failure is not None)))
    if failure is not None:
        raise failure
    if failed:
        raise ValueError("process 0 refused the run (its message says why); nothing written")
    return result
