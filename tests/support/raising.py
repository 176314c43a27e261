"""Helpers for the bad-input tests: where an error was raised, and how."""

import pytest


def jax_frames(excinfo) -> list[str]:
    """The traceback entries of ``excinfo`` inside JAX's own code (``jax/_src``): an error
    refused at the boundary has none (run with the ``full_tracebacks`` fixture, which stops JAX
    from hiding its frames)."""
    return [str(entry.path) for entry in excinfo.traceback if "jax/_src" in str(entry.path)]


def check_refused(call, error, pattern, *, one_line: bool = True) -> None:
    """``call()`` raises exactly ``error`` (not a subclass) matching ``pattern``, raised by the
    argument checks and not by JAX while tracing (no frame of ``jax/_src``: run under the
    ``full_tracebacks`` fixture, which stops JAX from hiding its frames); with ``one_line``,
    its message is one line."""
    with pytest.raises(error, match=pattern) as excinfo:
        call()
    assert type(excinfo.value) is error
    if one_line:
        assert "\n" not in str(excinfo.value)
    assert not jax_frames(excinfo)
