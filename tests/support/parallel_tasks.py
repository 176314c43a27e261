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
