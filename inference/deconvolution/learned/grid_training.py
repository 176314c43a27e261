"""Training the grid stack (version 2) over priors on mixing measures and on standard errors.

A task: nu from a family of ``training.FAMILIES`` (``training.TaskPrior``), N ~
Uniform{min_points..max_points}, standard errors s_i from ``NoisePrior``, z_i ~ nu,
x_i = z_i + s_i eps_i. ``NoisePrior``: with probability ``homoscedastic_prob`` every s_i = 1;
otherwise log s_i ~ U(-h, h) with h ~ U(0, log(max_ratio) / 2), so the largest standard error
is up to ``max_ratio`` times the smallest (eight schools: 2; Xie-Kou-Brown's settings: 3.2;
meta-analyses: 10 and more). The units are those of the measures (``TaskPrior``'s, where the
geometric mean of the s_i is about 1; the stack standardises by it anyway).

The loss is ``training``'s: (1/N) sum_i (m_i - z_i)^2 + lambda (1/N) sum_i (v_i - (z_i -
sg(m_i))^2)^2, in the tasks' units (where the geometric-mean standard error is about 1),
whose minimiser over all functions of the
data (x, s) is the Bayes posterior mean under the task prior. The oracle Bayes rule of a task is
E[z_i | x_i, s_i, nu] under its true measure (``oracle_posterior_mean``); the regret is the
stack's MSE minus the oracle's.

The training loop is ``training.train_unrolled_em``'s: one compiled chunk of
``callback_every`` Adam steps (``lax.scan``), ``callback(TrainProgress)`` between chunks.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from .... import sharding, validation
from ..estep import posterior_unchecked
from .grid_stack import (
    GRID_SIZE,
    GridStackParams,
    check_grid_params,
    forward,
    init_grid_stack,
    standardise,
)
from .training import (
    FAMILIES,
    HELDOUT_FAMILIES,
    TaskPrior,
    TrainProgress,
    TrainResult,
    check_task_prior,
    family_sampler,
    named_measure,
    sample_measure,
    strong_types,
    train_over_tasks,
    training_optimizer,
)


class NoisePrior(NamedTuple):
    """A prior over the standard errors of a task (module docstring).

    Attributes:
        homoscedastic_prob: the probability that every s_i = 1.
        max_ratio: the largest ratio max s / min s a task can have (>= 1).
    """

    homoscedastic_prob: float = 0.25
    max_ratio: float = 10.0


HOMOSCEDASTIC = NoisePrior(homoscedastic_prob=1.0)


class NoisyTasks(NamedTuple):
    """A batch of tasks with a standard error per point, padded to a common N: x, sigma, z
    (B, N), mask (B, N), the measures (atoms (B, MEASURE_ATOMS), weights (B, MEASURE_ATOMS))
    and the family index (B,) into ``FAMILIES`` (or ``HELDOUT_FAMILIES``)."""

    x: jax.Array
    sigma: jax.Array
    z: jax.Array
    mask: jax.Array
    atoms: jax.Array
    weights: jax.Array
    family: jax.Array


def check_noise_prior(noise) -> NoisePrior:
    if not isinstance(noise, NoisePrior):
        raise ValueError(f"noise: expected a NoisePrior, got {type(noise).__name__}")
    p = validation.check_real_scalar(
        "noise.homoscedastic_prob", noise.homoscedastic_prob, "a probability"
    )
    if not 0.0 <= float(p) <= 1.0:
        raise ValueError(f"noise.homoscedastic_prob: must be in [0, 1], got {p!r}")
    ratio = validation.check_positive_scalar("noise.max_ratio", noise.max_ratio)
    if not 1.0 <= float(ratio) <= 1e6:
        raise ValueError(f"noise.max_ratio: must be in [1, 1e6], got {ratio!r}")
    return NoisePrior(float(p), float(ratio))


def _draw(key, atoms, weights, noise: NoisePrior, num_points, max_points):
    k_h, k_homo, k_s, k_z, k_e = jax.random.split(key, 5)
    half = 0.5 * jnp.log(noise.max_ratio) * jax.random.uniform(k_h)
    half = jnp.where(jax.random.uniform(k_homo) < noise.homoscedastic_prob, 0.0, half)
    sigma = jnp.exp(jax.random.uniform(k_s, (max_points,), minval=-half, maxval=half))
    idx = jax.random.categorical(k_z, jnp.log(weights), shape=(max_points,))
    z = atoms[idx, 0]
    x = z + sigma * jax.random.normal(k_e, (max_points,))
    mask = jnp.arange(max_points) < num_points
    return x, sigma, z, mask


def _task_from_key(key, prior: TaskPrior, noise: NoisePrior) -> NoisyTasks:
    """One task (unbatched leaves) from its own key: the same draws whatever the batch."""
    probs = jnp.asarray(prior.family_probs, float)
    k_f, k_m, k_n, k_d = jax.random.split(key, 4)
    family = jax.random.categorical(k_f, jnp.log(probs))
    atoms, weights = sample_measure(k_m, family, prior, 1)
    n = jax.random.randint(k_n, (), prior.min_points, prior.max_points + 1)
    x, sigma, z, mask = _draw(k_d, atoms, weights, noise, n, prior.max_points)
    return NoisyTasks(x, sigma, z, mask, atoms[:, 0], weights, family)


def _sample(key, prior: TaskPrior, noise: NoisePrior, num_tasks: int) -> NoisyTasks:
    """Traceable batch of tasks (sizes static): task b from ``split(key, num_tasks)[b]``."""
    keys = jax.random.split(key, num_tasks)
    return jax.vmap(lambda k: _task_from_key(k, prior, noise))(keys)


_sample_jit = jax.jit(_sample, static_argnums=(1, 2, 3))


def sample_noisy_tasks(
    key, prior: TaskPrior | None = None, noise: NoisePrior | None = None, num_tasks: int = 64
) -> NoisyTasks:
    """``num_tasks`` scalar tasks from ``prior`` and ``noise`` (defaults ``TaskPrior()``,
    ``NoisePrior()``), padded to ``prior.max_points``."""
    validation.check_key("key", key)
    prior = check_task_prior(TaskPrior() if prior is None else prior)
    noise = check_noise_prior(NoisePrior() if noise is None else noise)
    num_tasks = validation.check_positive_int("num_tasks", num_tasks)
    return _sample_jit(key, prior, noise, num_tasks)


def heldout_noisy_tasks(
    key,
    family: str,
    num_tasks: int,
    num_points: int,
    *,
    noise: NoisePrior | None = None,
    prior: TaskPrior | None = None,
) -> NoisyTasks:
    """``num_tasks`` scalar tasks of N = ``num_points`` from one family of
    ``HELDOUT_FAMILIES`` (the four random families drawn as in ``prior``), standard errors
    from ``noise`` (default ``NoisePrior()``; ``HOMOSCEDASTIC`` for s_i = 1)."""
    validation.check_key("key", key)
    prior = check_task_prior(TaskPrior() if prior is None else prior)
    noise = check_noise_prior(NoisePrior() if noise is None else noise)
    num_tasks = validation.check_positive_int("num_tasks", num_tasks)
    num_points = validation.check_positive_int("num_points", num_points, minimum=2)
    if family not in HELDOUT_FAMILIES:
        raise ValueError(f"family: unknown family {family!r}; known: {list(HELDOUT_FAMILIES)}")
    return _heldout(key, HELDOUT_FAMILIES.index(family), prior, noise, num_tasks, num_points)


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4, 5))
def _heldout(key, index, prior, noise, num_tasks, num_points):
    keys = jax.random.split(key, num_tasks)
    family = HELDOUT_FAMILIES[index]
    if family in FAMILIES:
        f = FAMILIES.index(family)
        sampler = family_sampler(f)  # this family's program only (not a switch over four)
        atoms, weights = jax.vmap(lambda k: sampler(jax.random.fold_in(k, 1), prior, 1))(keys)
    else:
        a, w = named_measure(family)
        atoms = jnp.broadcast_to(a, (num_tasks, *a.shape))
        weights = jnp.broadcast_to(w, (num_tasks, *w.shape))
    x, sigma, z, mask = jax.vmap(lambda k, a, w: _draw(k, a, w, noise, num_points, num_points))(
        keys, atoms, weights
    )
    tasks = NoisyTasks(x, sigma, z, mask, atoms[..., 0], weights, jnp.full((num_tasks,), index))
    return strong_types(tasks)


# ----------------------------------------------------------------------------- losses


@jax.jit
def oracle_noisy_posterior_mean(tasks: NoisyTasks) -> jax.Array:
    """E[z_i | x_i, s_i, nu] under each task's true measure (B, N): the oracle Bayes rule."""

    def one(x, s, a, w):
        return posterior_unchecked(x[:, None], a[:, None], w, s[:, None])[0][:, 0]

    return jax.vmap(one)(tasks.x, tasks.sigma, tasks.atoms, tasks.weights)


def noisy_task_mse(estimate, tasks: NoisyTasks):
    """(B,) mean over a task's real points of (estimate_i - z_i)^2 (``estimate`` (B, N))."""
    err = (estimate - tasks.z) ** 2 * tasks.mask
    return jnp.sum(err, axis=-1) / jnp.sum(tasks.mask, axis=-1)


def _moments(params, tasks: NoisyTasks, grid_size):
    """The stack's (mean, variance) per task, in the data's units."""

    def one(x, s, m):
        u, t, r = standardise(x, s, m)
        mean, var = forward(params, u, t, m, grid_size)
        return mean * r, var * r**2

    return jax.vmap(one)(tasks.x, tasks.sigma, tasks.mask)


def _task_losses(params, tasks: NoisyTasks, weight, grid_size):
    """(B,) the loss of each task (module docstring); training minimises their mean."""
    mean, var = _moments(params, tasks, grid_size)
    target = (tasks.z - jax.lax.stop_gradient(mean)) ** 2
    var_err = (var - target) ** 2 * tasks.mask
    var_loss = jnp.sum(var_err, axis=-1) / jnp.sum(tasks.mask, axis=-1)
    return noisy_task_mse(mean, tasks) + weight * var_loss


@functools.partial(jax.jit, static_argnames=("grid_size",))
def grid_task_regret_unchecked(params, tasks: NoisyTasks, grid_size: int = GRID_SIZE):
    """The kernel of ``grid_task_regret``, for parameters already checked."""
    mean, _ = _moments(params, tasks, grid_size)
    return noisy_task_mse(mean, tasks), noisy_task_mse(oracle_noisy_posterior_mean(tasks), tasks)


def grid_task_regret(params: GridStackParams, tasks: NoisyTasks, *, grid_size: int = GRID_SIZE):
    """Per task: (MSE of the grid stack's posterior mean, MSE of the oracle Bayes rule), both
    (B,), in the tasks' units. The regret is their difference."""
    params = check_grid_params("params", params, dtype=tasks.x.dtype)
    grid_size = validation.check_positive_int("grid_size", grid_size, minimum=2)
    return grid_task_regret_unchecked(params, tasks, grid_size)


# ----------------------------------------------------------------------------- training


def train_grid_stack(
    key,
    params: GridStackParams | None = None,
    *,
    num_layers: int = 4,
    prior: TaskPrior | None = None,
    noise: NoisePrior | None = None,
    grid_size: int = GRID_SIZE,
    num_steps: int = 1000,
    batch_size: int = 16,
    learning_rate: float = 1e-2,
    optimizer: optax.GradientTransformation | None = None,
    second_moment_weight: float = 0.1,
    num_heldout: int = 64,
    callback: Callable[[TrainProgress], None] | None = None,
    callback_every: int = 50,
    mesh=None,
) -> TrainResult:
    """Train the grid stack on tasks from ``prior`` and ``noise`` (module docstring).

    Data parallel over ``mesh``, as ``training.train_unrolled_em`` (``training.task_mean``):
    the tasks' keys ``jax.random.split(step_key, batch_size)`` are drawn for the whole batch
    and split over the devices (a batch not divisible by the mesh size is padded with copies
    of its last task at weight 0); parameters and optimizer state are replicated; each device
    computes its tasks' summed loss and its gradient, and these are ``psum``-reduced: one copy
    of the gradient (P numbers) moves per step against B / D tasks through the stack (N x
    ``grid_size`` per layer, and the NPMLE rung's mix-SQP) on each device. The held-out tasks
    are split the same way. On a mesh of one device, the parameters and losses of the program
    before meshes, bit for bit (the held-out loss to 5e-7: the held-out tasks, constants of
    that program, are now its arguments, and the NPMLE rung, solved to
    ``grid_stack.NPMLE_TOL``, turns the round-off between the two compilations into that).
    On D devices the sums are taken in another order, and the
    NPMLE rung amplifies that round-off from step to step (measured, relative: 1e-11 after
    2 steps, 1e-5 after 20 of the pretrained script's settings): the same draws per task,
    parameters close but not equal to round-off.

    Args:
        key: ``jax.random`` key (first): the held-out tasks use ``fold_in(key, 0)``, the
            training batches ``fold_in(key, 1)``.
        params: the start; default ``init_grid_stack(num_layers)`` (EM itself).
        prior, noise: the ``TaskPrior`` and ``NoisePrior`` (defaults ``TaskPrior()``,
            ``NoisePrior()``).
        grid_size: M, the grid keys of every task.
        num_steps: optimizer steps (rounded up to a multiple of ``callback_every``).
        batch_size: tasks per step.
        learning_rate: Adam's initial step size when no ``optimizer`` is given (cosine decay
            to 0, gradients clipped to global norm 1).
        second_moment_weight: lambda in the loss.
        num_heldout: held-out tasks for ``heldout_loss``.
        callback: called with a ``TrainProgress`` after every chunk.
        callback_every: steps per compiled chunk.
        mesh: a one-axis ``jax.sharding.Mesh`` the batch is split over; default
            ``sharding.batch_mesh()`` (every device). Under ``jax.distributed`` every process
            makes this call and gets the callbacks; let only ``sharding.is_writer()`` write.

    Returns:
        ``TrainResult`` (``training``'s). ``FloatingPointError`` if the loss becomes
        non-finite (the parameters are then not returned).
    """
    validation.check_key("key", key)
    prior = check_task_prior(TaskPrior() if prior is None else prior)
    noise = check_noise_prior(NoisePrior() if noise is None else noise)
    if params is None:
        params = init_grid_stack(num_layers)
    params = strong_types(check_grid_params("params", params))
    grid_size = validation.check_positive_int("grid_size", grid_size, minimum=2)
    weight = validation.check_positive_scalar("second_moment_weight", second_moment_weight)
    num_steps = validation.check_positive_int("num_steps", num_steps)
    batch_size = validation.check_positive_int("batch_size", batch_size)
    num_heldout = validation.check_positive_int("num_heldout", num_heldout)
    callback_every = validation.check_positive_int("callback_every", callback_every)
    if prior.min_points < 2:
        raise ValueError(f"prior.min_points: the grid stack needs >= 2, got {prior.min_points}")
    num_chunks = -(-num_steps // callback_every)
    optimizer, step_size = training_optimizer(optimizer, learning_rate, num_chunks * callback_every)
    if callback is not None and not callable(callback):
        raise ValueError(f"callback: expected a callable, got {callback!r}")
    mesh = sharding.check_mesh(mesh)

    heldout = _sample_jit(jax.random.fold_in(key, 0), prior, noise, num_heldout)
    held_start = float(jnp.mean(grid_task_regret_unchecked(params, heldout, grid_size)[0]))

    def per_task(params, keys):
        tasks = jax.vmap(lambda k: _task_from_key(k, prior, noise))(keys)
        return _task_losses(params, tasks, weight, grid_size)

    def heldout_mse(params, tasks):
        return noisy_task_mse(_moments(params, tasks, grid_size)[0], tasks)

    return train_over_tasks(
        "train_grid_stack",
        jax.random.fold_in(key, 1),
        params,
        heldout,
        held_start,
        per_task,
        heldout_mse,
        optimizer=optimizer,
        step_size=step_size,
        batch_size=batch_size,
        num_chunks=num_chunks,
        callback_every=callback_every,
        callback=callback,
        mesh=mesh,
    )


__all__ = [
    "HOMOSCEDASTIC",
    "NoisePrior",
    "NoisyTasks",
    "grid_task_regret",
    "grid_task_regret_unchecked",
    "heldout_noisy_tasks",
    "noisy_task_mse",
    "oracle_noisy_posterior_mean",
    "sample_noisy_tasks",
    "train_grid_stack",
]
