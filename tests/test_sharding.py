"""attnbayes.sharding: meshes, padding, the sharded map and its sums, bad meshes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnbayes import sharding


def _meshes():
    return [sharding.batch_mesh(jax.devices()[:d]) for d in (1, len(jax.devices()))]


@pytest.mark.parametrize("mesh", _meshes(), ids=lambda m: f"{sharding.mesh_size(m)}dev")
def test_shard_batch_equals_the_plain_program(mesh):
    x = np.random.default_rng(0).normal(size=(7, 3))
    size = sharding.padded_size(7, mesh, multiple=2)
    assert size % (2 * sharding.mesh_size(mesh)) == 0 and size >= 7
    valid = jnp.arange(size) < 7

    def fn(x, valid, c):
        rows = jnp.exp(x) * c
        return rows, sharding.batch_sum(jnp.sum(jnp.where(valid[:, None], rows, 0.0), 0), mesh)

    run = jax.jit(sharding.shard_batch(fn, mesh, (True, True, False), (True, False)))
    rows, total = run(sharding.pad_batch(x, size), valid, 2.0)
    rows, total = sharding.gather((rows, total))
    np.testing.assert_allclose(rows[:7], 2.0 * np.exp(x), rtol=1e-15)
    np.testing.assert_allclose(total, 2.0 * np.exp(x).sum(0), rtol=1e-13)
    # padded rows copy the last one
    np.testing.assert_array_equal(rows[7:], np.broadcast_to(rows[6], rows[7:].shape))


def test_default_mesh_is_every_device_and_a_writer():
    mesh = sharding.check_mesh(None)
    assert sharding.mesh_size(mesh) == len(jax.devices())
    assert mesh.axis_names == (sharding.BATCH,)
    assert sharding.is_writer()


def test_bad_meshes_are_named():
    with pytest.raises(TypeError, match="^mesh: expected a jax.sharding.Mesh"):
        sharding.check_mesh(2)
    two_axes = jax.sharding.Mesh(np.asarray(jax.devices()[:1]).reshape(1, 1), ("a", "b"))
    with pytest.raises(ValueError, match=r"^devices_mesh: expected a mesh with one axis"):
        sharding.check_mesh(two_axes, name="devices_mesh")
    with pytest.raises(ValueError, match="^devices: expected at least one device"):
        sharding.batch_mesh([])
    with pytest.raises(ValueError, match="^devices: a device appears more than once"):
        sharding.batch_mesh([jax.devices()[0]] * 2)
    with pytest.raises(ValueError, match="^pad_batch: leading axis 3 exceeds size 2"):
        sharding.pad_batch(jnp.zeros(3), 2)
