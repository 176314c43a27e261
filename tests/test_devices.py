"""Results do not depend on where the work runs: every ``tests/**/devices_*.py`` check on
meshes of 1, 2 and 4 host devices, in one subprocess (XLA fixes the device count at start)."""

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def test_batch_entry_points_agree_on_1_2_and_4_devices():
    files = sorted(HERE.rglob("devices_*.py"))
    assert files, "no devices_*.py checks found"
    flags = os.environ.get("XLA_FLAGS", "").split()
    flags = [f for f in flags if not f.startswith("--xla_force_host_platform_device_count")]
    env = dict(os.environ, XLA_FLAGS=" ".join([*flags, "--xla_force_host_platform_device_count=4"]))
    done = subprocess.run(
        [sys.executable, "-P", str(HERE / "run_devices.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    assert done.stdout.count("ok ") == len(files), done.stdout
