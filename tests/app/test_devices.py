"""``attnbayes.app.devices``: the host device count the app gives itself and its report workers
(every core, a user's XLA_FLAGS count kept verbatim, workers sharing the cores), and the
launch settings of a run of several processes (options over environment variables, all three
or none, each bad value named). Pure functions, and one fresh interpreter for the device count
JAX then sees."""

import json
import os
import subprocess
import sys

import pytest

from attnbayes.app import devices
from attnbayes.app.devices import (
    DEVICE_FLAG,
    Launch,
    devices_per_worker,
    flag_device_count,
    launch_settings,
    parse_coordinator,
    with_device_count,
    worker_xla_flags,
)

OTHER = "--xla_llvm_disable_expensive_passes=true"


def test_the_flag_count_is_read_from_xla_flags():
    assert flag_device_count("") is None
    assert flag_device_count(OTHER) is None
    assert flag_device_count(f"{OTHER} {DEVICE_FLAG}=3") == 3
    assert flag_device_count(f"{DEVICE_FLAG}=3 {DEVICE_FLAG}=5") == 5  # XLA: the last wins
    assert flag_device_count("-xla_force_host_platform_device_count=2") == 2  # one dash: XLA's too
    for bad in (f"{DEVICE_FLAG}=0", f"{DEVICE_FLAG}=two", f"{DEVICE_FLAG}=", DEVICE_FLAG):
        with pytest.raises(ValueError, match=f"^XLA_FLAGS: {DEVICE_FLAG}"):
            flag_device_count(bad)


def test_a_count_is_added_to_the_users_flags_unless_they_set_one():
    assert with_device_count("", 4) == f"{DEVICE_FLAG}=4"
    assert with_device_count(OTHER, 4) == f"{OTHER} {DEVICE_FLAG}=4"
    mine = f"{DEVICE_FLAG}=7 {OTHER}"
    assert with_device_count(mine, 4) == mine  # verbatim


@pytest.mark.parametrize(
    ("cores", "workers", "each"),
    [(1, 1, 1), (2, 1, 2), (2, 2, 1), (2, 4, 1), (8, 3, 2), (8, 4, 2), (64, 4, 16), (3, 2, 1)],
)
def test_workers_share_the_cores_without_oversubscribing_them(cores, workers, each):
    assert devices_per_worker(cores, workers) == each
    # never more devices than cores in all, unless there are more workers than cores
    assert workers * each <= max(cores, workers)
    # and no core left idle that a device per worker more would fill
    assert workers * (each + 1) > cores


def test_devices_per_worker_refuses_counts_below_one():
    for cores, workers in ((0, 1), (2, 0)):
        with pytest.raises(ValueError, match="^cores, workers"):
            devices_per_worker(cores, workers)


def test_the_workers_flags_keep_the_users(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", OTHER)
    assert worker_xla_flags(2, cores=2) == f"{OTHER} {DEVICE_FLAG}=1"
    assert worker_xla_flags(1, cores=6) == f"{OTHER} {DEVICE_FLAG}=6"
    monkeypatch.setenv("XLA_FLAGS", f"{OTHER} {DEVICE_FLAG}=3")
    assert worker_xla_flags(2, cores=8) == f"{OTHER} {DEVICE_FLAG}=3"


def test_once_jax_has_started_nothing_changes(monkeypatch):
    import jax

    jax.devices()
    before = os.environ.get("XLA_FLAGS")
    assert devices.use_every_core(5) == jax.local_device_count()
    assert os.environ.get("XLA_FLAGS") == before


# In a fresh interpreter limited to two cores (where there are two), with the user's other
# flags: the count JAX sees, the flags kept, and those a worker of two would start with (the
# user's plus its share, not this process's count).
FRESH = """
import json, os, sys
os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[: int(sys.argv[1])]))
from attnbayes.app import devices
count = devices.use_every_core()
import jax
print(json.dumps([count, jax.local_device_count(), devices.usable_cores(),
                  os.environ["XLA_FLAGS"], devices.worker_xla_flags(2)]))
"""


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity (Linux)")
def test_the_app_gets_one_device_per_usable_core_and_keeps_the_users_flags():
    cores = min(2, len(os.sched_getaffinity(0)))
    run = subprocess.run(
        [sys.executable, "-P", "-c", FRESH, str(cores)],
        env=dict(os.environ, XLA_FLAGS=OTHER),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    count, seen, usable, flags, worker = json.loads(run.stdout.splitlines()[-1])
    assert usable == count == seen == cores  # JAX's default would be one device
    assert flags == f"{OTHER} {DEVICE_FLAG}={cores}"
    assert worker == f"{OTHER} {DEVICE_FLAG}={max(1, cores // 2)}"


# ----------------------------------------------------------------------------- launching


def test_no_launch_when_nothing_is_set():
    assert launch_settings(environ={}) is None


def test_options_win_over_the_environment_item_by_item():
    env = {
        devices.COORDINATOR_ENV: "10.0.0.1:9000",
        devices.PROCESS_ID_ENV: "1",
        devices.NUM_PROCESSES_ENV: "4",
    }
    assert launch_settings(environ=env) == Launch("10.0.0.1:9000", 1, 4)
    assert launch_settings("127.0.0.1:1234", 0, None, environ=env) == Launch("127.0.0.1:1234", 0, 4)
    assert launch_settings(None, None, 2, environ={**env, devices.PROCESS_ID_ENV: "0"}) == (
        Launch("10.0.0.1:9000", 0, 2)
    )


def test_all_three_or_none():
    with pytest.raises(ValueError, match=r"^--process-id \(ATTNBAYES_PROCESS_ID\), --num-proc"):
        launch_settings("h:1", environ={})
    with pytest.raises(ValueError, match=r"^--coordinator \(ATTNBAYES_COORDINATOR\): missing"):
        launch_settings(environ={devices.PROCESS_ID_ENV: "0", devices.NUM_PROCESSES_ENV: "2"})


def test_a_process_id_beyond_the_count_is_refused_by_its_name():
    with pytest.raises(ValueError, match=r"^--process-id: must be < --num-processes \(2\), got 2"):
        launch_settings("h:1", 2, 2, environ={})
    env = {devices.PROCESS_ID_ENV: "3", devices.NUM_PROCESSES_ENV: "3"}
    with pytest.raises(ValueError, match="^ATTNBAYES_PROCESS_ID: must be < ATTNBAYES_NUM_PROC"):
        launch_settings("h:1", environ=env)


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        (devices.COORDINATOR_ENV, "localhost", "expected HOST:PORT"),
        (devices.COORDINATOR_ENV, "h:0", "port in 1..65535"),
        (devices.PROCESS_ID_ENV, "-1", "expected an integer >= 0"),
        (devices.PROCESS_ID_ENV, "1.5", "expected an integer >= 0"),
        (devices.NUM_PROCESSES_ENV, "0", "must be >= 1, got 0"),
        (devices.NUM_PROCESSES_ENV, "two", "expected an integer >= 1"),
    ],
)
def test_a_bad_variable_is_refused_by_its_name(variable, value, message):
    with pytest.raises(ValueError, match=f"^{variable}: .*{message}"):
        launch_settings(environ={variable: value})


def test_coordinator_addresses():
    assert parse_coordinator(" 127.0.0.1:1234 ") == "127.0.0.1:1234"
    assert parse_coordinator("node-3.cluster:80") == "node-3.cluster:80"
    assert parse_coordinator("[::1]:8476") == "[::1]:8476"
    for bad in ("127.0.0.1", ":1234", "h:", "h:70000", "h:x", "[::1:80", "[]:80"):
        with pytest.raises(ValueError, match="^expected HOST:PORT"):
            parse_coordinator(bad)


def test_a_loopback_coordinator_binds_loopback_only():
    """JAX's coordinator binds every interface unless told otherwise: a loopback address
    (the two-process test's) keeps it on loopback (review of issue 39)."""
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        assert devices._is_loopback(host), host
    for host in ("10.0.0.5", "example.org", "0.0.0.0"):
        assert not devices._is_loopback(host), host
