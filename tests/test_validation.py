"""``attnbayes.validation``'s own checks, and the check the bad-input tests rely on.

The bad-input catalogues live beside the modules they test (``tests/inference/...``,
``tests/models/...``); each asserts, with ``raising.jax_frames``, that an error was raised
before JAX ran. ``test_jax_frame_check_detects_jax_errors`` shows that check can fail.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from raising import jax_frames


@pytest.mark.usefixtures("full_tracebacks")
def test_jax_frame_check_detects_jax_errors():
    """The check above can fail: an error raised inside JAX (jitted or not) shows jax/_src."""
    with pytest.raises(ValueError) as excinfo:
        jnp.einsum("ij,jk->ik", jnp.ones((2, 3)), jnp.ones((4, 2)))
    assert jax_frames(excinfo)
    with pytest.raises(TypeError) as excinfo:
        jax.jit(lambda a: a.reshape(7))(jnp.ones(3))
    assert jax_frames(excinfo)


def test_check_real_scalar_and_any_traced():
    """Concrete numbers come back as floats (bools, strings, vectors refused); a 0-d tracer
    comes back unchanged (only its shape and dtype checked); a traced vector is refused."""
    from attnbayes import validation

    assert validation.check_real_scalar("tol", 3, "a number") == 3.0
    assert validation.check_real_scalar("tol", np.float32(0.5), "a number") == 0.5
    assert validation.check_real_scalar("tol", jnp.asarray(2.0), "a number") == 2.0
    for bad in (True, "1e-8", None, [1e-8], np.zeros(2), 1j):
        with pytest.raises(ValueError, match="^tol: expected a number"):
            validation.check_real_scalar("tol", bad, "a number")

    def traced(t):
        assert validation.any_traced(1.0, (np.zeros(2), {"t": t}))
        return validation.check_real_scalar("tol", t, "a number") * 2

    assert float(jax.jit(traced)(1.5)) == 3.0
    assert not validation.any_traced(1.0, (np.zeros(2), {"t": jnp.ones(2)}))
    with pytest.raises(ValueError, match="^tol: expected a number, got a traced array"):
        jax.jit(lambda t: validation.check_real_scalar("tol", t, "a number"))(jnp.ones(2))


def test_check_flag_takes_bools_only():
    """``True``/``False`` and NumPy's bools pass as Python bools; 0, 1, strings, None and
    arrays are refused with the argument's name (em's ``update_weights``, the switching
    constructors' ``switching_variance`` and the like go through it)."""
    from attnbayes import validation

    assert validation.check_flag("update_weights", True) is True
    assert validation.check_flag("update_weights", np.bool_(False)) is False
    for bad in (0, 1, "True", None, np.ones(1, bool)):
        with pytest.raises(ValueError, match="^update_weights: expected True or False"):
            validation.check_flag("update_weights", bad)
