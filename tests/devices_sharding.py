"""Device check for attnbayes.sharding (run by tests/run_devices.py): a padded, masked row
sum and a per-row map give the same numbers on every mesh."""

import jax
import jax.numpy as jnp
import numpy as np

from attnbayes import sharding


def check(meshes):
    x = np.random.default_rng(1).normal(size=(11, 2))
    results = []
    for mesh in meshes:
        size = sharding.padded_size(11, mesh, multiple=3)
        valid = jnp.arange(size) < 11

        def fn(x, valid, mesh=mesh):
            rows = jnp.tanh(x)
            kept = jnp.where(valid[:, None], rows, 0.0)
            return rows, sharding.batch_sum(jnp.sum(kept, 0), mesh)

        run = jax.jit(sharding.shard_batch(fn, mesh, (True, True), (True, False)))
        rows, total = sharding.gather(run(sharding.pad_batch(x, size), valid))
        results.append((rows[:11], total))
    for rows, total in results[1:]:
        np.testing.assert_array_equal(rows, results[0][0])
        np.testing.assert_allclose(total, results[0][1], rtol=1e-12, atol=0)
