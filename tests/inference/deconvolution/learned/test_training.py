"""Training the unrolled-EM stack: tasks from the prior, the oracle, a tiny training run and its
settings, strongly typed held-out tasks."""

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnbayes import sharding
from attnbayes.inference.deconvolution import em
from attnbayes.inference.deconvolution.learned import grid_training, training
from attnbayes.inference.deconvolution.learned.unrolled import init_unrolled_em

# ----------------------------------------------------------------------------- training

TINY_PRIOR = training.TaskPrior(min_points=10, max_points=24, truncation=8)


def test_task_prior_draws_tasks_of_the_stated_sizes():
    tasks = training.sample_tasks(jax.random.PRNGKey(0), TINY_PRIOR, 200)
    n = np.asarray(tasks.mask.sum(1))
    assert n.min() >= 10 and n.max() <= 24
    np.testing.assert_allclose(np.asarray(tasks.weights.sum(1)), 1.0, atol=1e-12)
    counts = np.bincount(np.asarray(tasks.family), minlength=4) / 200
    np.testing.assert_allclose(counts, TINY_PRIOR.family_probs, atol=0.1)
    # z takes atom values, x - z is standard normal noise
    noise = np.asarray((tasks.x - tasks.z)[tasks.mask])
    assert abs(noise.mean()) < 0.05 and abs(noise.std() - 1) < 0.05


def test_oracle_is_the_discrete_posterior_mean():
    tasks = training.heldout_tasks(jax.random.PRNGKey(1), "three-atoms", 2, 30)
    oracle = training.oracle_posterior_mean(tasks)
    expected = em.posterior_mean(tasks.x[0, :, 0], [-2.0, 0.0, 3.0], [0.5, 0.3, 0.2], 1.0)
    np.testing.assert_allclose(oracle[0, :, 0], expected, rtol=0, atol=1e-12)


@pytest.mark.usefixtures("empty_compilation_cache")  # it counts compilations
def test_training_on_a_tiny_budget_lowers_heldout_loss(caplog):
    """From a stack whose temperatures are off (beta = 0.3: over-smoothed), 80 steps of Adam
    lower the held-out error; the start's weak-typed leaves (``jnp.full``) do not compile the
    40-step chunk a second time (JAX logs each compilation, or cache load, at debug level)."""
    progress = []
    start = init_unrolled_em(2)
    start = start._replace(
        layers=start.layers._replace(inverse_temperature=jnp.full(2, 0.3)),
        readout=start.readout._replace(inverse_temperature=jnp.asarray(0.3)),
    )
    with caplog.at_level(logging.DEBUG, logger="jax._src.dispatch"):
        result = training.train_unrolled_em(
            jax.random.PRNGKey(2),
            start,
            prior=TINY_PRIOR,
            num_steps=80,
            batch_size=8,
            learning_rate=2e-2,
            num_heldout=64,
            callback=progress.append,
            callback_every=40,
        )
    chunk_compiles = [r for r in caplog.records if "compilation of jit(chunk)" in r.getMessage()]
    assert len(chunk_compiles) == 1
    assert [p.step for p in progress] == [40, 80]
    assert result.loss.shape == (80,)
    assert result.heldout_loss[-1] < 0.9 * result.heldout_loss[0]
    assert np.all(np.isfinite(result.loss))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(prior=training.TaskPrior(family_probs=(1.0, 0.0))), "prior.family_probs"),
        (dict(prior=training.TaskPrior(min_points=30, max_points=20)), "prior.min_points"),
        (dict(num_steps=0), "num_steps"),
        (dict(learning_rate=-1.0), "learning_rate"),
        (dict(callback="print"), "callback"),
        (dict(params=init_unrolled_em(1)._replace(readout=None)), "params.readout"),
    ],
)
def test_training_settings_are_checked(kwargs, match):
    with pytest.raises(ValueError, match=match):
        training.train_unrolled_em(jax.random.PRNGKey(0), **kwargs)


# One step on one task: on the code before these checks, each case compiled and trained, and
# failed with "lower learning_rate".
ONE_STEP = dict(num_steps=1, batch_size=1, num_heldout=1, callback_every=1, num_layers=1)


@pytest.mark.parametrize(
    ("kwargs", "x64", "match"),
    [
        (dict(second_moment_weight=1e308), True, r"second_moment_weight: 1e\+308 is too large"),
        (dict(prior=TINY_PRIOR._replace(base_scale=1e200)), True, r"prior.base_scale: 1e\+200"),
        # the limit is the loss's dtype's: base_scale = 1e36 trains in float64, not in float32
        (dict(prior=TINY_PRIOR._replace(base_scale=1e36)), False, r"prior.base_scale: 1e\+36"),
    ],
    ids=["second_moment_weight", "base_scale", "base_scale-float32"],
)
def test_settings_that_overflow_the_loss_are_named(kwargs, x64, match):
    """Refused before any tracing, naming the setting and the limit sqrt(finfo.max)."""
    with jax.enable_x64(x64), pytest.raises(ValueError, match=f"^{match}") as info:
        training.train_unrolled_em(jax.random.PRNGKey(0), **{**ONE_STEP, **kwargs})
    message = str(info.value)
    assert "sqrt(finfo.max)" in message and "learning_rate" not in message
    assert ("float64" if x64 else "float32") in message


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("setting", ["second_moment_weight", "prior.base_scale"])
def test_loss_range_limits_are_the_stated_ones(setting, dtype):
    """The largest value a message states passes the check; 10% more is refused."""

    def check(value):
        if setting == "second_moment_weight":
            training._check_loss_range(TINY_PRIOR, value, 2, dtype)
        else:
            training._check_loss_range(TINY_PRIOR._replace(base_scale=value), 0.5, 2, dtype)

    with pytest.raises(ValueError, match=f"^{setting}: ") as info:
        check(1e300)
    largest = float(str(info.value).rsplit("<= ", 1)[1])
    check(0.9 * largest)
    with pytest.raises(ValueError, match=f"^{setting}: "):
        check(1.1 * largest)


def test_heldout_tasks_are_strongly_typed_in_every_family():
    """No family gives weak-typed arrays (weights built from Python numbers), so a program
    compiled on one family's tasks serves every family of the same size."""
    for family in training.HELDOUT_FAMILIES:
        tasks = training.heldout_tasks(jax.random.key(3), family, 3, 20)
        weak = [name for name, v in tasks._asdict().items() if jax.typeof(v).weak_type]
        assert not weak, (family, weak)


# ----------------------------------------------------------------------------- devices


@pytest.mark.parametrize("train", [training.train_unrolled_em, grid_training.train_grid_stack])
def test_a_bad_mesh_is_refused_by_name_before_any_tracing(train):
    devices = np.asarray(jax.devices()[:1], dtype=object).reshape(1, 1)
    with pytest.raises(TypeError, match="^mesh: expected a jax.sharding.Mesh"):
        train(jax.random.PRNGKey(0), mesh="cpu", num_steps=1)
    with pytest.raises(ValueError, match="^mesh: expected a mesh with one axis"):
        train(jax.random.PRNGKey(0), mesh=jax.sharding.Mesh(devices, ("a", "b")), num_steps=1)


@pytest.mark.slow
def test_both_trainers_give_the_same_parameters_on_one_and_two_devices():
    """(One to two minutes cold.) Two steps of 3 tasks (padded to 4 on two devices) and 3 held-out
    tasks: the same keys and draws per task, so the same parameters, losses and held-out
    losses on a mesh of one device and on the default mesh of two, where the sums over tasks
    are taken in another order. The unrolled-EM stack agrees to 1e-12. The grid stack's
    NPMLE rung is solved by mix-SQP to a tolerance (``grid_stack.NPMLE_TOL``), and its
    gradient in the mass weight carries that round-off into the next step (measured about
    1e-11 relative after two steps): 1e-9 for it."""
    one = sharding.batch_mesh(jax.devices()[:1])
    sizes = dict(num_steps=2, batch_size=3, num_heldout=3, callback_every=2, num_layers=2)
    runs = [
        (training.train_unrolled_em, dict(learning_rate=2e-2), 1e-12),
        (grid_training.train_grid_stack, dict(grid_size=16), 1e-9),
    ]
    for train, settings, rtol in runs:
        results = [
            train(jax.random.key(5), prior=TINY_PRIOR, mesh=mesh, **sizes, **settings)
            for mesh in (one, None)
        ]
        first, second = ([*jax.tree.leaves(r.params), r.loss, r.heldout_loss] for r in results)
        for a, b in zip(first, second, strict=True):
            np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=rtol, atol=0)
