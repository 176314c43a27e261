"""Device check for the learned stacks' data-parallel training step (run by
tests/run_devices.py): ``training.task_mean``, the mean over a batch of tasks (each drawn from
its own key) and its gradient, gives the same numbers to 1e-12 on meshes of 1, 2 and 4
devices, those of the tasks computed one by one (6 tasks: padded to 8 on 4 devices; typed and
raw keys). The trainers themselves compile for tens of seconds per mesh: their agreement on 1
and 2 devices is tests/inference/deconvolution/learned/test_training.py's slow test."""

import jax
import jax.numpy as jnp
import numpy as np

from attnbayes.inference.deconvolution.learned import training


def _per_task(params, key):
    """A task's loss: a squared error of an affine map of its own normal draws."""
    z = jax.random.normal(key, (5,))
    return jnp.mean((params["a"] * z + params["b"] - jnp.tanh(z)) ** 2)


def per_slice(params, keys):
    return jax.vmap(lambda k: _per_task(params, k))(keys)


def check(meshes):
    params = {"a": jnp.asarray(0.7), "b": jnp.asarray([0.1, -0.2, 0.3, 0.0, 0.5])}
    for keys in (
        jax.random.split(jax.random.key(3), 6),
        jax.random.split(jax.random.PRNGKey(4), 6),
    ):
        one = jax.value_and_grad(_per_task)
        expected = [one(params, k) for k in keys]
        value = np.mean([float(v) for v, _ in expected])
        grad = {n: np.mean([np.asarray(g[n]) for _, g in expected], 0) for n in params}
        for mesh in meshes:
            run = jax.jit(
                lambda p, k, mesh=mesh: training.task_mean(per_slice, p, k, mesh, with_grad=True)
            )
            v, g = run(params, keys)
            np.testing.assert_allclose(float(v), value, rtol=1e-12)
            for n in params:
                np.testing.assert_allclose(np.asarray(g[n]), grad[n], rtol=1e-12)
