"""Training the unrolled-EM stack as amortised empirical Bayes.

Tasks are drawn from a prior over mixing measures (``TaskPrior``), in units of sigma
(sigma = 1): nu ~ family, N ~ Uniform{min_points..max_points}, z_i ~ nu, x_i = z_i + eps_i. The
loss of the stack's posterior moments (mean m_i, variance v_i) on a task is

    L = (1/N) sum_i |m_i - z_i|^2 + lambda (1/N) sum_i sum_c (v_ic - (z_ic - sg(m_ic))^2)^2,

whose minimiser over all functions of the data is the Bayes posterior mean E[z_i | x_{1:N}]
under the task prior (and, for the second term, the posterior variance about m_i); sg stops
the gradient. Tasks of different N are padded to ``max_points`` and masked.

Families (``FAMILIES``), every one a discrete measure of at most ``MEASURE_ATOMS`` atoms, so the
oracle Bayes rule E[z_i | x_i, nu] of each task is exact (``oracle_posterior_mean``):

- ``"dp"``: the deconvolution model's truncated stick-breaking DP prior
  (``attnbayes.models.deconvolution.deconvolution_model(prior="dp")``): alpha ~ Gamma(dp_shape,
  dp_rate), v_k ~ Beta(1, alpha), w = stick_breaking(v), mu_k ~ N(0, base_scale^2 I_p), K =
  ``truncation``;
- ``"sparse"``: (1 - e) delta(0) + e delta(mu), e ~ U(0.02, 0.3), |mu| ~ U(1, 2 base_scale) in a
  random direction (Johnstone and Silverman 2004's sparse means);
- ``"normal"``: 64 equally weighted draws of N(m, tau^2 I), m ~ N(0, 1), tau ~ U(0.3, base_scale);
- ``"atoms"``: 2 to 5 atoms from N(0, base_scale^2 I) with Dirichlet(1) weights;

and, for evaluation outside the training prior (``heldout_measure``): ``"three-atoms"``,
``"sparse-means"`` (0.95 delta(0) + 0.05 delta(4)), ``"uniform"`` (U(-5, 5) on a grid of 64),
``"heavy-tailed"`` (Student t_2 of scale 2, 64 quantiles), ``"far-atoms"`` (+-8). Scalar data
(p = 1) for the named held-out families.

The training loop is one compiled chunk of ``callback_every`` Adam steps (``lax.scan``) called
repeatedly, with ``callback(TrainProgress)`` between chunks: the application shows progress
and writes checkpoints (``save_unrolled_em`` writes atomically); the library prints nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from .... import sharding, validation
from ..estep import posterior_unchecked
from .unrolled import (
    UnrolledEMParams,
    check_params,
    forward,
    init_unrolled_em,
)

FAMILIES = ("dp", "sparse", "normal", "atoms")
HELDOUT_FAMILIES = (
    "dp",
    "sparse",
    "normal",
    "atoms",
    "three-atoms",
    "sparse-means",
    "uniform",
    "heavy-tailed",
    "far-atoms",
)
OUTSIDE_PRIOR = ("uniform", "heavy-tailed", "far-atoms")
MEASURE_ATOMS = 64


class TaskPrior(NamedTuple):
    """A prior over mixing measures and sizes, in units of sigma (see the module docstring).

    Attributes:
        family_probs: probabilities of ``FAMILIES`` ("dp", "sparse", "normal", "atoms").
        dp_shape, dp_rate: the Gamma prior of the DP concentration (the model's defaults).
        base_scale: the DP base measure's scale (G_0 = N(0, base_scale^2 I_p)).
        truncation: the DP's number of atoms.
        min_points, max_points: N ~ Uniform{min_points..max_points}.
    """

    family_probs: tuple = (0.5, 0.2, 0.15, 0.15)
    dp_shape: float = 2.0
    dp_rate: float = 2.0
    base_scale: float = 3.0
    truncation: int = 20
    min_points: int = 20
    max_points: int = 200


class Tasks(NamedTuple):
    """A batch of tasks padded to a common N: x, z (B, N, p), mask (B, N), the measures
    (atoms (B, MEASURE_ATOMS, p), weights (B, MEASURE_ATOMS), zero weight for padding) and the
    family index (B,) into ``FAMILIES`` (or ``HELDOUT_FAMILIES`` for ``heldout_tasks``)."""

    x: jax.Array
    z: jax.Array
    mask: jax.Array
    atoms: jax.Array
    weights: jax.Array
    family: jax.Array


class TrainProgress(NamedTuple):
    """What the callback sees after each chunk: step, params, mean training loss of the chunk,
    held-out loss (mean squared error of the posterior mean on the held-out tasks)."""

    step: int
    params: UnrolledEMParams
    train_loss: float
    heldout_loss: float


class TrainResult(NamedTuple):
    """The trained stack, the loss per step (num_steps,), and the held-out loss after each chunk
    (``heldout_steps``, ``heldout_loss``), the first entry being the start."""

    params: UnrolledEMParams
    loss: np.ndarray
    heldout_steps: np.ndarray
    heldout_loss: np.ndarray


# ----------------------------------------------------------------------------- measures


def _pad_measure(atoms, weights):
    k = atoms.shape[0]
    pad = MEASURE_ATOMS - k
    return (
        jnp.pad(atoms, ((0, pad), (0, 0))),
        jnp.pad(weights, (0, pad)),
    )


def _dp_measure(key, prior: TaskPrior, dim):
    k_alpha, k_sticks, k_atoms = jax.random.split(key, 3)
    alpha = jax.random.gamma(k_alpha, prior.dp_shape) / prior.dp_rate
    sticks = jax.random.beta(k_sticks, 1.0, alpha, (prior.truncation - 1,))
    remaining = jnp.concatenate([jnp.ones(1), jnp.cumprod(1.0 - sticks)])
    weights = jnp.concatenate([sticks, jnp.ones(1)]) * remaining
    atoms = prior.base_scale * jax.random.normal(k_atoms, (prior.truncation, dim))
    return _pad_measure(atoms, weights)


def _direction(key, dim):
    v = jax.random.normal(key, (dim,))
    return v / jnp.linalg.norm(v)


def _sparse_measure(key, prior: TaskPrior, dim):
    k_e, k_m, k_d = jax.random.split(key, 3)
    e = jax.random.uniform(k_e, minval=0.02, maxval=0.3)
    mag = jax.random.uniform(k_m, minval=1.0, maxval=2.0 * prior.base_scale)
    atoms = jnp.stack([jnp.zeros(dim), mag * _direction(k_d, dim)])
    return _pad_measure(atoms, jnp.stack([1.0 - e, e]))


def _normal_measure(key, prior: TaskPrior, dim):
    k_m, k_t, k_z = jax.random.split(key, 3)
    loc = jax.random.normal(k_m, (dim,))
    tau = jax.random.uniform(k_t, minval=0.3, maxval=prior.base_scale)
    atoms = loc + tau * jax.random.normal(k_z, (MEASURE_ATOMS, dim))
    return atoms, jnp.full((MEASURE_ATOMS,), 1.0 / MEASURE_ATOMS)


def _atoms_measure(key, prior: TaskPrior, dim):
    k_n, k_a, k_w = jax.random.split(key, 3)
    num = jax.random.randint(k_n, (), 2, 6)
    atoms = prior.base_scale * jax.random.normal(k_a, (5, dim))
    weights = jax.random.dirichlet(k_w, jnp.ones(5)) * (jnp.arange(5) < num)
    return _pad_measure(atoms, weights / jnp.sum(weights))


_SAMPLERS = (_dp_measure, _sparse_measure, _normal_measure, _atoms_measure)


def family_sampler(family: int):
    """The sampler ``(key, prior, dim) -> (atoms, weights)`` of ``FAMILIES[family]`` (a Python
    int): one family's program alone, where ``sample_measure`` compiles all four branches."""
    return _SAMPLERS[family]


def sample_measure(key, family, prior: TaskPrior, dim: int):
    """(atoms (MEASURE_ATOMS, p), weights (MEASURE_ATOMS,)) of one measure of family index
    ``family`` (an int or a traced int into ``FAMILIES``) drawn as in ``prior``."""
    return jax.lax.switch(family, [lambda k, s=s: s(k, prior, dim) for s in _SAMPLERS], key)


def _grid_measure(values):
    atoms = jnp.asarray(values, float)[:, None]
    return _pad_measure(atoms, jnp.full((atoms.shape[0],), 1.0 / atoms.shape[0]))


def named_measure(name: str):
    """The fixed held-out measures outside the four random families (scalar)."""
    q = (np.arange(MEASURE_ATOMS) + 0.5) / MEASURE_ATOMS
    if name == "three-atoms":
        atoms = jnp.array([[-2.0], [0.0], [3.0]])
        return _pad_measure(atoms, jnp.array([0.5, 0.3, 0.2]))
    if name == "sparse-means":
        return _pad_measure(jnp.array([[0.0], [4.0]]), jnp.array([0.95, 0.05]))
    if name == "uniform":
        return _grid_measure(-5.0 + 10.0 * q)
    if name == "heavy-tailed":
        from scipy import stats

        return _grid_measure(2.0 * stats.t.ppf(q, df=2))
    if name == "far-atoms":
        return _pad_measure(jnp.array([[-8.0], [8.0]]), jnp.array([0.5, 0.5]))
    raise ValueError(f"family: unknown family {name!r}; known: {list(HELDOUT_FAMILIES)}")


def _draw_task(key, atoms, weights, num_points, max_points):
    k_z, k_e = jax.random.split(key)
    dim = atoms.shape[1]
    idx = jax.random.categorical(k_z, jnp.log(weights), shape=(max_points,))
    z = atoms[idx]
    x = z + jax.random.normal(k_e, (max_points, dim))
    mask = jnp.arange(max_points) < num_points
    return x, z, mask


def _task_from_key(key, prior: TaskPrior, dim: int) -> Tasks:
    """One task (unbatched leaves) from its own key: the same draws whatever the batch."""
    probs = jnp.asarray(prior.family_probs, float)
    k_f, k_m, k_n, k_d = jax.random.split(key, 4)
    family = jax.random.categorical(k_f, jnp.log(probs))
    atoms, weights = sample_measure(k_m, family, prior, dim)
    n = jax.random.randint(k_n, (), prior.min_points, prior.max_points + 1)
    x, z, mask = _draw_task(k_d, atoms, weights, n, prior.max_points)
    return Tasks(x, z, mask, atoms, weights, family)


def _sample_tasks(key, prior: TaskPrior, num_tasks: int, dim: int) -> Tasks:
    """Traceable batch of tasks from the prior (sizes static): task b from
    ``jax.random.split(key, num_tasks)[b]``."""
    return jax.vmap(lambda k: _task_from_key(k, prior, dim))(jax.random.split(key, num_tasks))


def check_task_prior(prior) -> TaskPrior:
    if not isinstance(prior, TaskPrior):
        raise ValueError(f"prior: expected a TaskPrior, got {type(prior).__name__}")
    probs = np.asarray(prior.family_probs, float)
    if probs.shape != (len(FAMILIES),) or not np.all(probs >= 0) or probs.sum() <= 0:
        raise ValueError(
            f"prior.family_probs: expected {len(FAMILIES)} non-negative numbers for "
            f"{list(FAMILIES)}, got {prior.family_probs!r}"
        )
    for name in ("dp_shape", "dp_rate", "base_scale"):
        validation.check_positive_scalar(f"prior.{name}", getattr(prior, name))
    validation.check_positive_int("prior.truncation", prior.truncation, minimum=2)
    if prior.truncation > MEASURE_ATOMS:
        raise ValueError(f"prior.truncation: at most {MEASURE_ATOMS}, got {prior.truncation}")
    lo = validation.check_positive_int("prior.min_points", prior.min_points)
    hi = validation.check_positive_int("prior.max_points", prior.max_points)
    if lo > hi:
        raise ValueError(f"prior.min_points: {lo} exceeds prior.max_points {hi}")
    return prior._replace(family_probs=tuple(float(p) for p in probs / probs.sum()))


def sample_tasks(key, prior: TaskPrior | None = None, num_tasks: int = 64, dim: int = 1) -> Tasks:
    """``num_tasks`` tasks from ``prior`` (default ``TaskPrior()``), padded to max_points."""
    validation.check_key("key", key)
    prior = check_task_prior(TaskPrior() if prior is None else prior)
    num_tasks = validation.check_positive_int("num_tasks", num_tasks)
    dim = validation.check_positive_int("dim", dim)
    return _sample_tasks_jit(key, prior, num_tasks, dim)


_sample_tasks_jit = jax.jit(_sample_tasks, static_argnums=(1, 2, 3))


def heldout_tasks(key, family: str, num_tasks: int, num_points: int, prior=None) -> Tasks:
    """``num_tasks`` scalar tasks of N = ``num_points`` from one family of
    ``HELDOUT_FAMILIES`` (the four random families drawn as in ``prior``)."""
    validation.check_key("key", key)
    prior = check_task_prior(TaskPrior() if prior is None else prior)
    num_tasks = validation.check_positive_int("num_tasks", num_tasks)
    num_points = validation.check_positive_int("num_points", num_points)
    if family not in HELDOUT_FAMILIES:
        raise ValueError(f"family: unknown family {family!r}; known: {list(HELDOUT_FAMILIES)}")
    keys = jax.random.split(key, num_tasks)
    index = HELDOUT_FAMILIES.index(family)
    if family in FAMILIES:
        sampler = _SAMPLERS[FAMILIES.index(family)]
        atoms, weights = jax.vmap(lambda k: sampler(jax.random.fold_in(k, 1), prior, 1))(keys)
    else:
        a, w = named_measure(family)
        atoms = jnp.broadcast_to(a, (num_tasks, *a.shape))
        weights = jnp.broadcast_to(w, (num_tasks, *w.shape))
    x, z, mask = jax.vmap(lambda k, a, w: _draw_task(k, a, w, num_points, num_points))(
        keys, atoms, weights
    )
    # strong types: families whose weights are built from Python numbers would otherwise give
    # weak-typed arrays, and a program compiled for one family would compile again for another
    return strong_types(Tasks(x, z, mask, atoms, weights, jnp.full((num_tasks,), index)))


def strong_types(tree):
    """The same arrays with strong types (a weak type is a compile-cache key of its own)."""
    return jax.tree.map(lambda v: jax.lax.convert_element_type(v, jnp.result_type(v)), tree)


# ----------------------------------------------------------------------------- losses


def oracle_posterior_mean(tasks: Tasks) -> jax.Array:
    """E[z_i | x_i, nu] under each task's true measure (B, N, p): the oracle Bayes rule."""
    return jax.vmap(lambda x, a, w: posterior_unchecked(x, a, w, jnp.ones((), x.dtype))[0])(
        tasks.x, tasks.atoms, tasks.weights
    )


def task_mse(estimate, tasks: Tasks):
    """(B,) mean over a task's real points of |estimate_i - z_i|^2 (``estimate`` (B, N, p))."""
    err = jnp.sum((estimate - tasks.z) ** 2, axis=-1) * tasks.mask
    return jnp.sum(err, axis=-1) / jnp.sum(tasks.mask, axis=-1)


def _stack_moments(params, tasks: Tasks):
    return jax.vmap(lambda x, m: forward(params, x, m))(tasks.x, tasks.mask)


def _task_losses(params, tasks: Tasks, second_moment_weight):
    """(B,) the loss of each task (module docstring); training minimises their mean."""
    mean, var = _stack_moments(params, tasks)
    target = (tasks.z - jax.lax.stop_gradient(mean)) ** 2
    var_err = jnp.sum((var - target) ** 2, axis=-1) * tasks.mask
    var_loss = jnp.sum(var_err, axis=-1) / jnp.sum(tasks.mask, axis=-1)
    return task_mse(mean, tasks) + second_moment_weight * var_loss


@jax.jit
def task_regret_unchecked(params, tasks: Tasks):
    """The kernel of ``task_regret``, for parameters already checked (``check_params``)."""
    mean, _ = _stack_moments(params, tasks)
    return task_mse(mean, tasks), task_mse(oracle_posterior_mean(tasks), tasks)


def task_regret(params: UnrolledEMParams, tasks: Tasks) -> tuple[jax.Array, jax.Array]:
    """Per task: (MSE of the stack's posterior mean, MSE of the oracle Bayes rule), both (B,),
    in units of sigma^2. The regret is their difference."""
    params = check_params("params", params, dim=tasks.x.shape[-1], dtype=tasks.x.dtype)
    return task_regret_unchecked(params, tasks)


# ----------------------------------------------------------------------------- data parallel


def task_mean(per_task, params, batch, mesh, *, with_grad: bool = False):
    """The mean over a batch of tasks of ``per_task(params, tasks) -> (b,)``, one value per
    task of a slice, the batch's leading axis (``batch``: a pytree, e.g. the tasks' keys
    (B, ...) or the tasks) split over ``mesh``; with ``with_grad``, ``(mean, its gradient in
    params)``. Traceable (``mesh`` static).

    Data parallel: ``params`` are replicated; each device evaluates (and differentiates)
    (1/B) sum_b per_task_b over its B / D tasks, and these are ``psum``-reduced
    (``sharding.batch_sum``): one copy of the gradient (P numbers, the parameters: a few
    hundred) moves per step, against B / D tasks' forward and backward passes on each device.
    B not divisible by the mesh size: the batch is padded with copies of its last task, masked
    out (weight 0). On a mesh of one device, the program of ``jnp.mean(per_task(params,
    batch))`` and its gradient, bit for bit; on several, the same numbers summed in another
    order (round-off).
    """
    size = jax.tree.leaves(batch)[0].shape[0]
    padded = sharding.padded_size(size, mesh)
    if padded != size:  # indexing (not jnp.pad) also pads typed key arrays
        index = jnp.minimum(jnp.arange(padded), size - 1)
        batch = jax.tree.map(lambda a: a[index], batch)
    mask = jnp.arange(padded) < size

    def local(params, batch, mask):
        def total(params):
            return jnp.sum(jnp.where(mask, per_task(params, batch), 0.0)) / size

        out = jax.value_and_grad(total)(params) if with_grad else total(params)
        return sharding.batch_sum(out, mesh)

    return sharding.shard_batch(local, mesh, (False, True, True), False)(params, batch, mask)


def replicated(mesh):
    """The sharding of a value held whole on every device of ``mesh`` (``P()``)."""
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())


def key_to_host(key):
    """(the key's data as NumPy, its implementation or None for a raw uint32 key): a key a
    jitted program over a mesh takes as a host value (``key_from_host`` inside it)."""
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        return np.asarray(jax.random.key_data(key)), jax.random.key_impl(key)
    return np.asarray(key), None


def key_from_host(data, impl):
    """The key ``key_to_host`` took apart (traceable)."""
    return data if impl is None else jax.random.wrap_key_data(data, impl=impl)


def host_copy(tree):
    """Every leaf as a local ``jax.Array`` holding the whole value (``sharding.gather``: a
    leaf replicated over several processes is read where NumPy alone could not)."""
    return jax.tree.map(jnp.asarray, sharding.gather(tree))


# ----------------------------------------------------------------------------- training


# The tasks' points lie within _TASK_REACH (base_scale + 1) of 0, in units of sigma: 8 standard
# deviations of the atoms' N(0, base_scale^2) and of the unit noise (beyond it with probability
# about 1e-15 a draw).
_TASK_REACH = 8.0


def _check_loss_range(prior: TaskPrior, second_moment_weight: float, dim: int, dtype) -> None:
    """Refuse a prior and a second-moment weight whose training loss overflows ``dtype``.

    With points and targets within R = _TASK_REACH (base_scale + 1) of 0, the stack's means and
    variances are within (2 R) and (2 R)^2 of theirs, so a point's loss term is at most
    (2 R)^2 + lambda (2 R)^4 per coordinate, and a task's sums over N <= max_points points at
    most max(1, lambda) max_points p (2 R)^4; the gradient is of the same order, and training
    squares it (gradient clipping's norm, Adam's second moment). Requiring

        max(1, lambda) max_points p (2 R)^4 <= sqrt(finfo(dtype).max)

    (1.3e154 in float64, 1.8e19 in float32) keeps the squares finite: at the default prior
    (base_scale = 3, max_points = 200, p = 1) lambda up to 4e144 in float64, 5e9 in float32; at
    lambda <= 1, base_scale up to 5.7e36 and 1.1e3. (Observed: training in float64 is finite at
    base_scale = 1e36 and overflows at 1e40, and at lambda >= 1e160 the clipped gradient is 0.)

    Raises:
        ValueError: naming ``prior.base_scale`` when the tasks alone exceed the limit (at any
            lambda), else ``second_moment_weight``, with the largest value allowed.
    """
    dtype = np.dtype(dtype)
    limit = float(np.sqrt(np.finfo(dtype).max))
    terms = prior.max_points * dim
    # in logarithms: (2 R)^4 overflows a Python float long before the settings are refused
    log_spread = np.log(2.0 * _TASK_REACH) + np.log1p(float(prior.base_scale))
    log_tasks = np.log(terms) + 4.0 * log_spread
    rule = (
        f"training squares the loss's gradient, up to max(1, second_moment_weight) * "
        f"max_points * p * (16 (base_scale + 1))^4, which must stay below "
        f"sqrt(finfo.max) = {limit:.2g} in {dtype.name}"
    )
    if log_tasks > np.log(limit):
        largest = (limit / terms) ** 0.25 / (2.0 * _TASK_REACH) - 1.0
        raise ValueError(
            f"prior.base_scale: {prior.base_scale:g} is too large to train on: {rule}; with "
            f"max_points = {prior.max_points} and p = {dim}, base_scale <= {largest:.2g}"
        )
    if np.log(second_moment_weight) + log_tasks > np.log(limit):
        largest = limit / np.exp(log_tasks)
        raise ValueError(
            f"second_moment_weight: {second_moment_weight:g} is too large: {rule}; with "
            f"prior.base_scale = {prior.base_scale:g}, max_points = {prior.max_points} and "
            f"p = {dim}, second_moment_weight <= {largest:.2g}"
        )


def training_optimizer(optimizer, learning_rate, total_steps: int):
    """The optimizer a trainer runs and the name of its step size for error messages: the
    user's optax optimizer as given, else Adam (Kingma and Ba 2015) on a cosine-decayed
    ``learning_rate`` over ``total_steps``, after clipping the gradient's global norm at 1."""
    if optimizer is not None:
        return optimizer, "the optimizer's step size"
    lr = validation.check_positive_scalar("learning_rate", learning_rate)
    schedule = optax.cosine_decay_schedule(lr, total_steps)
    return optax.chain(optax.clip_by_global_norm(1.0), optax.adam(schedule)), "learning_rate"


def train_over_tasks(
    trainer: str,
    key,
    params,
    heldout,
    held_start: float,
    task_loss: Callable,
    heldout_mse: Callable,
    *,
    optimizer,
    step_size: str,
    batch_size: int,
    num_chunks: int,
    callback_every: int,
    callback,
    mesh,
) -> TrainResult:
    """The training loop both trainers share (``train_unrolled_em`` here, ``train_grid_stack``
    in ``grid_training``), for arguments they have checked.

    Each step draws ``batch_size`` tasks from their own keys (``task_loss(params, keys)`` gives
    their losses), averages the loss over them (``task_mean``: the tasks split over ``mesh``,
    the gradient summed over its devices) and applies ``optimizer``. The steps run in compiled
    chunks of ``callback_every`` (``lax.scan``); chunk c's keys come from ``fold_in(key, c)``,
    so the draws are the same on any mesh. After each chunk the held-out loss
    ``heldout_mse(params, heldout)`` is recorded and ``callback`` gets a ``TrainProgress``.
    ``trainer`` names the caller in the ``FloatingPointError`` raised when a loss becomes
    non-finite, which tells the user to lower ``step_size``.
    """
    # host values, placed by the chunk's in_shardings: every process passes the same ones
    params, heldout = sharding.gather((params, heldout))
    train_key, impl = key_to_host(key)

    def step(carry, step_key):
        params, opt_state = carry
        # the tasks' keys of the whole batch, then split over the mesh: the same draws on any
        keys = jax.random.split(step_key, batch_size)
        loss, grads = task_mean(task_loss, params, keys, mesh, with_grad=True)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), loss

    @functools.partial(jax.jit, in_shardings=replicated(mesh), out_shardings=replicated(mesh))
    def chunk(params, opt_state, heldout, train_key, chunk_index):
        chunk_key = jax.random.fold_in(key_from_host(train_key, impl), chunk_index)
        keys = jax.random.split(chunk_key, callback_every)
        (params, opt_state), losses = jax.lax.scan(step, (params, opt_state), keys)
        held_loss = task_mean(heldout_mse, params, heldout, mesh)
        # strong types out as in: the next chunk reuses this program
        return (*strong_types((params, opt_state)), losses, held_loss)

    # on the mesh from the start, as the chunk's outputs are (else the second chunk compiles
    # again for inputs typed with the mesh)
    state = sharding.gather(optimizer.init(params))
    params, opt_state, heldout, train_key = jax.device_put(
        (params, state, heldout, train_key), replicated(mesh)
    )
    losses, held = [], [held_start]
    for c in range(num_chunks):
        params, opt_state, chunk_losses, held_loss = chunk(
            params, opt_state, heldout, train_key, np.int32(c)
        )
        chunk_losses, held_loss = sharding.gather((chunk_losses, held_loss))
        if not np.all(np.isfinite(chunk_losses)) or not np.isfinite(float(held_loss)):
            raise FloatingPointError(
                f"{trainer}: the loss became non-finite in steps "
                f"{c * callback_every}..{(c + 1) * callback_every}; lower {step_size}"
            )
        losses.append(chunk_losses)
        held.append(float(held_loss))
        if callback is not None:
            step_done, mean_loss = (c + 1) * callback_every, float(chunk_losses.mean())
            callback(TrainProgress(step_done, host_copy(params), mean_loss, held[-1]))
    steps = np.arange(num_chunks + 1) * callback_every
    return TrainResult(host_copy(params), np.concatenate(losses), steps, np.asarray(held))


def train_unrolled_em(
    key,
    params: UnrolledEMParams | None = None,
    *,
    num_layers: int = 4,
    dim: int = 1,
    prior: TaskPrior | None = None,
    num_steps: int = 2000,
    batch_size: int = 32,
    learning_rate: float = 3e-3,
    optimizer: optax.GradientTransformation | None = None,
    second_moment_weight: float = 0.1,
    num_heldout: int = 128,
    callback: Callable[[TrainProgress], None] | None = None,
    callback_every: int = 100,
    mesh=None,
) -> TrainResult:
    """Train the stack on tasks from ``prior`` (module docstring) with optax.

    Data parallel over ``mesh``: each step's ``batch_size`` tasks are split over its devices
    (``task_mean``: the tasks' keys ``jax.random.split(step_key, batch_size)`` are drawn for
    the whole batch, then split, so task b is the same draw on any mesh; a batch not
    divisible by the mesh size is padded with copies of its last task at weight 0). The
    parameters and the optimizer's state are replicated; every device samples its tasks and
    computes the sum of their losses and its gradient, and these are ``psum``-reduced: one
    copy of the gradient (P numbers, the parameters: a few hundred) moves per step against
    B / D tasks of up to ``max_points`` points through the stack on each device. The
    held-out tasks are split the same way. On a mesh of one device (the default where JAX
    sees one), the program before meshes, bit for bit; on D devices the same numbers summed
    in another order: equal to round-off (measured: 1.5e-13 relative after 20 steps of the
    pretrained script's settings on 2 devices).

    Args:
        key: ``jax.random`` key (first): the held-out tasks use ``fold_in(key, 0)``, the
            training batches ``fold_in(key, 1)``.
        params: the start; default ``init_unrolled_em(num_layers, dim)`` (EM itself).
        prior: the ``TaskPrior``; default ``TaskPrior()``.
        num_steps: optimizer steps (rounded up to a multiple of ``callback_every``).
        batch_size: tasks per step.
        learning_rate: Adam's initial step size when no ``optimizer`` is given (cosine decay
            to 0 over ``num_steps``, gradients clipped to global norm 1).
        second_moment_weight: lambda in the loss.
        num_heldout: held-out tasks for ``heldout_loss``.
        callback: called with a ``TrainProgress`` after every chunk.
        callback_every: steps per compiled chunk.
        mesh: a one-axis ``jax.sharding.Mesh`` the batch is split over; default
            ``sharding.batch_mesh()`` (every device). Under ``jax.distributed`` every process
            makes this call and gets the callbacks; let only ``sharding.is_writer()`` write.

    Returns:
        ``TrainResult``. Raises ``ValueError`` on bad settings, before any tracing, among them
        a ``second_moment_weight`` or ``prior.base_scale`` whose loss would overflow: training
        squares the gradient, of order max(1, lambda) max_points p (16 (base_scale + 1))^4,
        and that must stay below sqrt(finfo.max) (``_check_loss_range``); and
        ``FloatingPointError`` if the loss becomes non-finite all the same (the parameters are
        then not returned).
    """
    validation.check_key("key", key)
    prior = check_task_prior(TaskPrior() if prior is None else prior)
    if params is None:
        params = init_unrolled_em(num_layers, dim)
    params = check_params("params", params)
    dim = params.dim
    weight = validation.check_positive_scalar("second_moment_weight", second_moment_weight)
    # the loss's dtype: the tasks' (the default float) with the parameters'
    loss_dtype = jnp.result_type(
        jax.dtypes.canonicalize_dtype(np.float64), *jax.tree_util.tree_leaves(params)
    )
    _check_loss_range(prior, weight, dim, loss_dtype)
    # a weak-typed start (jnp.full(2, 0.3)) would compile the chunk twice: the first chunk
    # returns the same leaves strongly typed
    params = strong_types(params)
    num_steps = validation.check_positive_int("num_steps", num_steps)
    batch_size = validation.check_positive_int("batch_size", batch_size)
    num_heldout = validation.check_positive_int("num_heldout", num_heldout)
    callback_every = validation.check_positive_int("callback_every", callback_every)
    num_chunks = -(-num_steps // callback_every)
    optimizer, step_size = training_optimizer(optimizer, learning_rate, num_chunks * callback_every)
    if callback is not None and not callable(callback):
        raise ValueError(f"callback: expected a callable, got {callback!r}")
    mesh = sharding.check_mesh(mesh)

    heldout = _sample_tasks_jit(jax.random.fold_in(key, 0), prior, num_heldout, dim)
    held_start = float(jnp.mean(task_regret_unchecked(params, heldout)[0]))

    def per_task(params, keys):
        tasks = jax.vmap(lambda k: _task_from_key(k, prior, dim))(keys)
        return _task_losses(params, tasks, weight)

    def heldout_mse(params, tasks):
        return task_mse(_stack_moments(params, tasks)[0], tasks)

    return train_over_tasks(
        "train_unrolled_em",
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
