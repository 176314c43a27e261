"""Tasks for tests/app/test_parallel.py, run on spawned workers: module-level functions with
picklable arguments and results, in a module that imports nothing heavy (each worker imports
it)."""

import os
import time


def square(value, pause, *, progress):
    progress(f"start {value}")
    time.sleep(pause)
    progress(f"end {value}")
    return value * value, os.getpid()


def fail(message, *, progress):
    progress("failing")
    raise ValueError(message)


def sleep_long(*, progress):
    time.sleep(60)
    return "never"


class Unpicklable(Exception):
    def __init__(self, handle):
        super().__init__("with a handle")
        self.handle = handle


def fail_unpicklable(*, progress):
    raise Unpicklable(lambda: None)


def jax_settings(*, progress):
    import jax
    import jax.numpy as jnp

    return (
        bool(jax.config.jax_enable_x64),
        jnp.ones(()).dtype.itemsize,
        jax.config.jax_compilation_cache_dir,
    )


def compiled_cache_class(*, progress):
    """The class of the persistent cache JAX writes through, after one compile here."""
    import jax
    import jax.numpy as jnp
    from jax._src import compilation_cache

    jax.jit(lambda x: jnp.cos(x) ** 3 - 0.125)(jnp.arange(4.0)).block_until_ready()
    cache = compilation_cache._cache
    return type(cache).__name__, str(getattr(cache, "path", None))


def die(*, progress):
    progress("dying")
    os._exit(3)


def tell_pid_and_sleep(*, progress):
    """Send this worker's process id, then sleep long (a task its parent outlives, or not)."""
    progress(f"pid {os.getpid()}")
    time.sleep(60)
    return "never"


ORPHANING_PARENT = """
import sys
sys.path.insert(0, {support!r})
from parallel_tasks import tell_pid_and_sleep
from attnbayes.app.parallel import run_parts
run_parts(
    [(tell_pid_and_sleep, ()), (tell_pid_and_sleep, ())],
    workers=2,
    progress=lambda message: print(message, flush=True),
)
"""


def orphaning_parent_script() -> str:
    """A ``python -c`` script that runs two ``tell_pid_and_sleep`` tasks on two workers and
    prints each message (the workers' ids first), for a test to kill it."""
    return ORPHANING_PARENT.format(support=os.path.dirname(os.path.abspath(__file__)))


def process_running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (an orphan's zombie waits for a
    reaper that may never come in a container)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:  # gone meanwhile
        return False
    except OSError:  # no /proc (not Linux)
        return True
