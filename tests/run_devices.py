"""Run the device-equality checks (``tests/**/devices_*.py``) on meshes of 1, 2 and 4 devices.

Each file defines ``check(meshes)``; ``meshes`` are one-axis meshes (``attnbayes.sharding``)
over the first 1, 2 and 4 host devices. Run with 4 host devices (``tests/test_devices.py`` does):

    XLA_FLAGS=--xla_force_host_platform_device_count=4 python -P tests/run_devices.py [FILES...]

With no files, every ``devices_*.py`` under ``tests/``. Prints one line per file and exits 1
if any check failed.
"""

import importlib.util
import sys
import time
import traceback
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

from attnbayes import sharding  # noqa: E402

HERE = Path(__file__).resolve().parent
COUNTS = (1, 2, 4)


def main(paths: list[str]) -> int:
    if len(jax.devices()) < max(COUNTS):
        print(f"needs {max(COUNTS)} devices, found {len(jax.devices())}", file=sys.stderr)
        return 2
    files = [Path(p).resolve() for p in paths] or sorted(HERE.rglob("devices_*.py"))
    meshes = [sharding.batch_mesh(jax.devices()[:d]) for d in COUNTS]
    failed = 0
    for path in files:
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        start = time.perf_counter()
        try:
            spec.loader.exec_module(module)
            module.check(meshes)
            print(f"ok     {path.relative_to(HERE)} ({time.perf_counter() - start:.1f} s)")
        except Exception:
            failed += 1
            print(f"FAILED {path.relative_to(HERE)}")
            traceback.print_exc()
        sys.stdout.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
