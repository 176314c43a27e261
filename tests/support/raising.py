"""Helpers for the bad-input tests: where an error was raised."""


def jax_frames(excinfo) -> list[str]:
    """The traceback entries of ``excinfo`` inside JAX's own code (``jax/_src``): an error
    refused at the boundary has none (run with the ``full_tracebacks`` fixture, which stops JAX
    from hiding its frames)."""
    return [str(entry.path) for entry in excinfo.traceback if "jax/_src" in str(entry.path)]
