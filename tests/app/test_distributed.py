"""Across processes (jax.distributed on 127.0.0.1): two processes run the sharded E-step and the
streamed NPMLE over their global two-device mesh and get what one device gets here (1e-12);
``attnbayes calibrate`` on two processes (the commands of docs/distributed.md, which
README points to) writes once, from process 0, the ranks of the one-process run; a folder
process 0 refuses stops both. The launches are ``slow`` (``make test-distributed``, which
``.ci/run`` runs after ``make test``): each process imports JAX, joins and compiles. Without
subprocesses: a report process that does not write computes every part and writes nothing."""

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest
import two_processes
import xarray as xr

from attnbayes import sharding
from attnbayes.app import devices
from attnbayes.app.parallel import new_part
from attnbayes.app.report import SECTIONS, build

SECTION_IDS = tuple(sid for sid, _ in SECTIONS)
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "support" / "two_processes.py"
TIMEOUT_S = 180  # per pair of processes, compiling included; both are killed past it
# docs/distributed.md's example (its coordinator, --process-id and --out aside): Gibbs ranks,
# tiny sizes
CALIBRATE = [
    "calibrate",
    "--method",
    "gibbs",
    "--replicates",
    "8",
    "--points",
    "10",
    "--warmup",
    "20",
    "--draws",
    "20",
    "--chunk-size",
    "8",
]


def test_the_documented_commands_are_the_ones_tested():
    """docs/distributed.md's two-process commands are ``CALIBRATE`` with the launch options,
    process 1 started first in the background, process 0 second."""
    import shlex

    text = (ROOT / "docs" / "distributed.md").read_text()
    block = text.split("```sh\n", 1)[1].split("```", 1)[0]
    commands = [shlex.split(c.rstrip("& \n")) for c in block.replace("\\\n", " ").split("\n")]
    commands = [c for c in commands if c and c[0] == "attnbayes"]
    assert len(commands) == 2, block
    for command, process in zip(commands, ("1", "0"), strict=True):
        launch = ["--coordinator", "127.0.0.1:8476", "--num-processes", "2"]
        expected = ["attnbayes", *CALIBRATE, "--out", "runs", *launch, "--process-id", process]
        assert command == expected


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict[str, str]:
    """The test's environment, one host device per process (a user's XLA_FLAGS count: kept),
    no launch variables of the caller's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNBAYES_")}
    env["ATTNBAYES_CACHE_DIR"] = os.environ["ATTNBAYES_CACHE_DIR"]
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if devices.DEVICE_FLAG not in f]
    env["XLA_FLAGS"] = " ".join([*flags, f"{devices.DEVICE_FLAG}=1"])
    return env


def _run_pair(command, cwd) -> list[tuple[int, str, str]]:
    """``command(process_id)`` for process ids 0 and 1, side by side; (status, stdout,
    stderr) of each. Both are killed if either is still running after ``TIMEOUT_S``."""
    logs = [(open(cwd / f"p{i}.out", "w+"), open(cwd / f"p{i}.err", "w+")) for i in (0, 1)]
    procs = [
        subprocess.Popen(command(i), stdout=out, stderr=err, env=_env(), cwd=cwd)
        for i, (out, err) in enumerate(logs)
    ]
    deadline = time.monotonic() + TIMEOUT_S
    try:
        for proc in procs:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    found = []
    for proc, (out, err) in zip(procs, logs, strict=True):
        out.seek(0)
        err.seek(0)
        found.append((proc.returncode, out.read(), err.read()))
        out.close()
        err.close()
    return found


def _attnbayes() -> list[str]:
    script = shutil.which("attnbayes", path=str(Path(sys.executable).parent))
    return [script] if script else [sys.executable, "-P", "-m", "attnbayes.app.cli"]


def _calibrate_on_two(out: Path):
    """The command line of process i of ``attnbayes calibrate`` on two processes into ``out``."""
    coordinator = f"127.0.0.1:{_free_port()}"
    launch = ["--coordinator", coordinator, "--num-processes", "2"]
    return lambda i: [*_attnbayes(), *CALIBRATE, "--out", str(out), *launch, "--process-id", str(i)]


@pytest.mark.slow
def test_two_processes_give_the_sharded_estep_and_npmle_of_one_device(tmp_path):
    port = _free_port()
    out = tmp_path / "two.npz"
    runs = _run_pair(
        lambda i: [sys.executable, "-P", str(SCRIPT), f"127.0.0.1:{port}", str(i), "2", str(out)],
        tmp_path,
    )
    for status, _, err in runs:
        assert status == 0, err
    found = dict(np.load(out))
    assert int(found.pop("num_devices")) == 2  # the global mesh: one device per process
    expected = two_processes.results(sharding.batch_mesh(jax.devices()[:1]))
    assert found.keys() == expected.keys()
    assert "npmle_weights" in found  # the streamed NPMLE, sharded over both processes
    for name, value in expected.items():
        np.testing.assert_allclose(found[name], value, rtol=1e-12, atol=1e-12, err_msg=name)


@pytest.mark.slow
def test_calibrate_on_two_processes_writes_once_the_ranks_of_one(tmp_path, run_cli):
    status, _, err = run_cli([*CALIBRATE, "--out", tmp_path / "one"])
    assert status == 0, err
    runs = _run_pair(_calibrate_on_two(tmp_path / "two"), tmp_path)
    (status0, out0, err0), (status1, out1, err1) = runs
    assert (status0, status1) == (0, 0), err0 + err1
    written = tmp_path / "two" / "calibrate-deconvolution"
    assert out0.strip() == str(written / "index.html")  # stdout: the path only
    assert out1 == "" and "calibrate gibbs" not in err1  # process 1 says nothing
    assert "calibrate gibbs: 8/8 replicates" in err0
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == [written.name]
    one = xr.open_datatree(tmp_path / "one" / "calibrate-deconvolution" / "gibbs.nc")
    two = xr.open_datatree(written / "gibbs.nc")
    for group in ("ranks", "prior_sbc"):
        for name in one[group].data_vars:
            np.testing.assert_array_equal(two[group][name].values, one[group][name].values)


@pytest.mark.slow
def test_a_folder_process_0_refuses_stops_both_processes(tmp_path):
    foreign = tmp_path / "two" / "calibrate-deconvolution"
    foreign.mkdir(parents=True)
    (foreign / "notes.txt").write_text("not attnbayes's")
    runs = _run_pair(_calibrate_on_two(tmp_path / "two"), tmp_path)
    (status0, out0, err0), (status1, out1, err1) = runs
    assert (status0, status1) == (2, 2), err0 + err1
    assert out0 == out1 == ""
    assert err0.strip().splitlines()[-1].startswith("attnbayes: error: ")
    assert err1.strip().splitlines()[-1] == (
        "attnbayes: process 1: error: process 0 refused the run (its message says why); "
        "nothing written"
    )
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"]
    assert "calibrate gibbs" not in err0 + err1  # refused before any computation


def test_a_report_process_that_does_not_write_computes_every_part_and_writes_nothing(
    tmp_path, monkeypatch
):
    """Every process runs every part (the same calls); one that is not process 0 writes
    nothing. The parts are stubs; the processes are simulated (``process_count`` 2)."""
    ran = []

    def stub(name):
        def part(slot, *args, progress):
            ran.append(name)
            return [(slot, new_part(SECTION_IDS))]

        part.__name__ = name
        return part

    def scenarios(jobs, *args, progress):
        ran.extend(scenario.name for _, scenario, _ in jobs)
        return [(slot, new_part(SECTION_IDS)) for slot, _, _ in jobs]

    scenarios.__name__ = "_scenario_parts"
    monkeypatch.setattr(build, "_scenario_parts", scenarios)
    for name in ("_atoms_part", "_attention_part"):
        monkeypatch.setattr(build, name, stub(name))
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    monkeypatch.setattr(build, "is_writer", lambda: False)
    monkeypatch.setattr(build, "on_writer", lambda check, fallback: fallback)
    with pytest.raises(ValueError, match="^workers: must be 1 under 2 processes"):
        build.write_report(tmp_path / "out", workers=2)
    path = build.write_report(
        tmp_path / "out", quick=True, switching=None, learned=None, calibration=None
    )
    assert path == tmp_path / "out" / "attnbayes" / "index.html"
    quick = [s.name for s in build.SCENARIOS if s.quick]
    assert sorted(ran) == sorted([*quick, "_atoms_part", "_attention_part"])
    assert not (tmp_path / "out").exists()
