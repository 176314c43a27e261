"""The unrolled-EM stack: EM at initialisation, streaming, masks, training, the shipped stack."""

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnbayes.inference import deconvolution as em_mod
from attnbayes.inference.deconvolution import em, training, unrolled
from attnbayes.inference.deconvolution.unrolled import (
    init_unrolled_em,
    load_unrolled_em,
    pretrained_unrolled_em,
    save_unrolled_em,
    unrolled_em,
    unrolled_em_intervals,
    unrolled_em_moments,
)


def _data(n=60, p=1, seed=0, sigma=0.7):
    key_z, key_e = jax.random.split(jax.random.PRNGKey(seed))
    z = jnp.where(jax.random.uniform(key_z, (n, p)) < 0.6, -2.0, 1.5)
    x = z + sigma * jax.random.normal(key_e, (n, p))
    return (x[:, 0], z[:, 0]) if p == 1 else (x, z)


def _em_reference(x, sigma, num_layers, update_weights=False):
    """L EM steps from K = N atoms at the data, then the posterior mean and variance."""
    n = x.shape[0]
    atoms, weights = x, jnp.full((n,), 1.0 / n)
    for _ in range(num_layers):
        atoms, weights = em.em_step(x, atoms, weights, sigma, update_weights=update_weights)
    mean, resp = em.posterior(x, atoms, weights, sigma)
    atoms2 = atoms if atoms.ndim == 2 else atoms[:, None]
    mean2 = mean if mean.ndim == 2 else mean[:, None]
    var = resp @ atoms2**2 - mean2**2
    return mean, var.reshape(mean.shape)


def _perturbed(num_layers, dim, seed=3, scale=0.2):
    """Parameters away from EM's (every leaf moved), to test the general stack."""
    params = init_unrolled_em(num_layers, dim)
    leaves, tree = jax.tree_util.tree_flatten(params)
    keys = jax.random.split(jax.random.PRNGKey(seed), len(leaves))
    moved = [
        leaf + scale * jax.random.normal(k, leaf.shape)
        for leaf, k in zip(leaves, keys, strict=True)
    ]
    return jax.tree_util.tree_unflatten(tree, moved)


@pytest.mark.parametrize("num_layers", [0, 1, 3])
@pytest.mark.parametrize("dim", [1, 2])
def test_initialisation_is_em_then_posterior_mean(num_layers, dim):
    x, _ = _data(p=dim)
    moments = unrolled_em_moments(init_unrolled_em(num_layers, dim), x, 0.7)
    mean, var = _em_reference(x, 0.7, num_layers)
    np.testing.assert_allclose(moments.mean, mean, rtol=0, atol=1e-10)
    np.testing.assert_allclose(moments.variance, var, rtol=0, atol=1e-10)
    np.testing.assert_allclose(moments.second_moment, var + mean**2, rtol=0, atol=1e-10)


def test_mass_weight_one_is_kiefer_wolfowitz_em():
    x, _ = _data()
    params = init_unrolled_em(3)
    params = params._replace(
        layers=params.layers._replace(mass_weight=jnp.ones(3)),
        readout=params.readout._replace(mass_weight=jnp.ones(())),
    )
    mean, _ = _em_reference(x, 0.7, 3, update_weights=True)
    np.testing.assert_allclose(unrolled_em(params, x, 0.7), mean, rtol=0, atol=1e-10)


@pytest.mark.parametrize("dim", [1, 2])
def test_streamed_equals_dense(dim):
    x, _ = _data(n=70, p=dim, seed=1)
    params = _perturbed(2, dim)
    dense = unrolled_em_moments(params, x, 0.7)
    streamed = unrolled_em_moments(params, x, 0.7, block_size=16)
    np.testing.assert_allclose(streamed.mean, dense.mean, rtol=0, atol=1e-10)
    np.testing.assert_allclose(streamed.variance, dense.variance, rtol=0, atol=1e-9)


def test_padded_task_equals_the_task():
    x, _ = _data(n=50, seed=2)
    params = _perturbed(2, 1, seed=4)
    padded = jnp.concatenate([x, jnp.linspace(-30.0, 30.0, 14)])
    mask = np.r_[np.ones(50, bool), np.zeros(14, bool)]
    whole = unrolled_em_moments(params, x, 0.7)
    for block_size in (None, 16):
        part = unrolled_em_moments(params, padded, 0.7, mask=mask, block_size=block_size)
        np.testing.assert_allclose(part.mean[:50], whole.mean, rtol=0, atol=1e-10)
        np.testing.assert_allclose(part.variance[:50], whole.variance, rtol=0, atol=1e-9)


def test_jit_vmap_grad_over_parameters_data_and_sigma():
    x, z = _data(n=40, seed=5)
    params = _perturbed(2, 1, seed=6)
    mask = jnp.ones(40, bool)

    def loss(params, x, sigma):
        return jnp.mean((unrolled._moments(params, x[:, None], sigma, mask)[0][:, 0] - z) ** 2)

    value, grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))(params, x, 0.7)
    assert np.isfinite(float(value))
    assert all(np.all(np.isfinite(g)) for g in jax.tree_util.tree_leaves(grads))
    # the gradient in sigma against a central difference
    h = 1e-6
    fd = (loss(params, x, 0.7 + h) - loss(params, x, 0.7 - h)) / (2 * h)
    np.testing.assert_allclose(grads[2], fd, rtol=1e-6)
    # vmap over data sets equals a loop
    xs = jnp.stack([x, x + 0.3, -x])
    batched = jax.vmap(lambda xi: unrolled._moments(params, xi[:, None], 0.7, mask)[0])(xs)
    for xi, bi in zip(xs, batched, strict=True):
        np.testing.assert_allclose(bi[:, 0], unrolled_em(params, xi, 0.7), rtol=0, atol=1e-12)


def test_intervals_are_normal_quantiles():
    x, _ = _data()
    moments = unrolled_em_moments(init_unrolled_em(2), x, 0.7)
    lo, hi = unrolled_em_intervals(moments, 0.9)
    np.testing.assert_allclose((hi - lo) / 2, 1.6448536269514722 * np.sqrt(moments.variance))


def test_save_load_round_trip(tmp_path):
    params = _perturbed(3, 2, seed=8)
    path = tmp_path / "stack.npz"
    save_unrolled_em(path, params, {"note": "test", "step": 12})
    loaded, meta = load_unrolled_em(path)
    for a, b in zip(
        jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(loaded), strict=True
    ):
        np.testing.assert_array_equal(a, b)
    assert meta == {"note": "test", "step": 12}
    assert [p.name for p in tmp_path.iterdir()] == ["stack.npz"]  # no temporary left behind


def test_save_refuses_non_finite_and_leaves_no_file(tmp_path):
    params = init_unrolled_em(1)
    bad = params._replace(readout=params.readout._replace(inverse_temperature=jnp.nan))
    with pytest.raises(ValueError, match=r"params.*NaN"):
        save_unrolled_em(tmp_path / "s.npz", bad)
    assert list(tmp_path.iterdir()) == []


def test_load_refuses_other_versions_and_files(tmp_path):
    path = tmp_path / "stack.npz"
    save_unrolled_em(path, init_unrolled_em(1))
    with np.load(path) as data:
        arrays = dict(data)
    arrays["format_version"] = np.asarray(99)
    np.savez(tmp_path / "v99.npz", **arrays)
    with pytest.raises(ValueError, match="path: format version 99"):
        load_unrolled_em(tmp_path / "v99.npz")
    with pytest.raises(ValueError, match="path: no such file"):
        load_unrolled_em(tmp_path / "missing.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="path: not a saved stack"):
        load_unrolled_em(tmp_path / "junk.npz")
    del arrays["layers.step"]
    arrays["format_version"] = np.asarray(unrolled.FORMAT_VERSION)
    np.savez(tmp_path / "partial.npz", **arrays)
    with pytest.raises(ValueError, match="path: missing array"):
        load_unrolled_em(tmp_path / "partial.npz")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(params="stack"), "params: expected UnrolledEMParams"),
        (dict(params=init_unrolled_em(1, 2)), "params: a stack for 2-dimensional data"),
        (dict(x=np.array([0.0, np.nan, 1.0])), "x"),
        (dict(sigma=0.0), "sigma"),
        (dict(mask=np.ones(3)), "mask: expected a boolean array"),
        (dict(mask=np.zeros(4, bool)), "mask: marks no point"),
        (dict(block_size=0), "block_size"),
    ],
)
def test_bad_input_is_refused(kwargs, match):
    args = dict(params=init_unrolled_em(1), x=np.array([0.0, 1.0, 2.0, 3.0]), sigma=1.0)
    args.update(kwargs)
    params, x, sigma = args.pop("params"), args.pop("x"), args.pop("sigma")
    with pytest.raises(ValueError, match=match):
        unrolled_em(params, x, sigma, **args)


def test_bad_parameter_shapes_are_named():
    params = init_unrolled_em(2)
    bad = params._replace(layers=params.layers._replace(step=jnp.ones(3)))
    with pytest.raises(ValueError, match=r"params.layers.step: expected shape \(2,\)"):
        unrolled_em(bad, np.arange(5.0), 1.0)


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


# ----------------------------------------------------------------------------- shipped stack


def test_shipped_stack_reproduces_its_recorded_regret():
    params, meta = pretrained_unrolled_em(metadata=True)
    assert params.dim == 1 and meta["heldout_points"] > 0
    for family in training.HELDOUT_FAMILIES:
        tasks = training.heldout_tasks(
            jax.random.PRNGKey(meta["heldout_seed"]),
            family,
            meta["heldout_tasks"],
            meta["heldout_points"],
        )
        mse, oracle = training.task_regret(params, tasks)
        assert abs(float(jnp.mean(mse - oracle)) - meta[f"regret.{family}"]) < 1e-6, family


# ----------------------------------------------------------------------------- evaluation


def test_comparison_rows_are_the_methods_on_the_same_tasks():
    from attnbayes.inference.deconvolution import learned_comparison as lc

    params = _perturbed(2, 1, seed=9, scale=0.05)
    methods = ("learned", "em-steps", "npmle", "james-stein")
    result = lc.compare_learned_attention(
        jax.random.PRNGKey(4),
        params,
        families=("three-atoms",),
        num_tasks=2,
        num_points=25,
        methods=methods,
    )
    table = result.regret.set_index("method")
    assert list(table.index) == list(methods)
    tasks = training.heldout_tasks(
        jax.random.fold_in(jax.random.PRNGKey(4), training.HELDOUT_FAMILIES.index("three-atoms")),
        "three-atoms",
        2,
        25,
    )
    oracle = training.oracle_posterior_mean(tasks)[..., 0]
    z = tasks.z[..., 0]

    def regret(est):
        return float(np.mean(np.mean((est - z) ** 2, 1) - np.mean((oracle - z) ** 2, 1)))

    learned = np.stack([unrolled_em(params, x[:, 0], 1.0) for x in tasks.x])
    steps = np.stack([unrolled_em(init_unrolled_em(2), x[:, 0], 1.0) for x in tasks.x])
    npmle_mean = np.stack(
        [
            em_mod.npmle_posterior(x[:, 0], 1.0, em_mod.npmle(x[:, 0], 1.0))[0]
            for x in np.asarray(tasks.x)
        ]
    )
    x = np.asarray(tasks.x[..., 0])
    centre = x.mean(1, keepdims=True)
    shrink = np.minimum(1, (25 - 3) / ((x - centre) ** 2).sum(1, keepdims=True))
    js = centre + (1 - shrink) * (x - centre)
    for method, est in [("learned", learned), ("em-steps", steps), ("npmle", npmle_mean)]:
        assert abs(table.loc[method, "regret"] - regret(est)) < 1e-10, method
    assert abs(table.loc["james-stein", "regret"] - regret(js)) < 1e-10
    cov = result.coverage
    assert set(cov["method"]) == {"learned", "npmle"} and set(cov["prob"]) == {0.5, 0.9}
    assert np.all((cov["coverage"] >= 0) & (cov["coverage"] <= 1))


def test_batting_averages_table():
    from attnbayes.inference.deconvolution import learned_comparison as lc

    table = lc.batting_averages_comparison(
        jax.random.PRNGKey(0), init_unrolled_em(2), methods=("learned", "james-stein")
    ).set_index("method")
    y = np.asarray(lc.EFRON_MORRIS_HITS) / 45
    truth = np.asarray(lc.EFRON_MORRIS_REST_OF_SEASON)
    # the raw averages' error, as in Efron and Morris's paper (about 0.075)
    np.testing.assert_allclose(table.loc["mle", "sse_average"], np.sum((y - truth) ** 2))
    x = lc.arcsine_transform(y)
    np.testing.assert_allclose(lc.inverse_arcsine_transform(x), y, rtol=1e-12)
    learned = np.asarray(unrolled_em(init_unrolled_em(2), x, 1.0))
    np.testing.assert_allclose(
        table.loc["learned", "Clemente"], lc.inverse_arcsine_transform(learned[0]), rtol=1e-12
    )
    assert table.loc["james-stein", "sse_average"] < 0.5 * table.loc["mle", "sse_average"]


def test_comparison_arguments_are_checked():
    from attnbayes.inference.deconvolution import learned_comparison as lc

    key = jax.random.PRNGKey(0)
    with pytest.raises(ValueError, match="methods: unknown"):
        lc.compare_learned_attention(key, init_unrolled_em(1), methods=("magic",))
    with pytest.raises(ValueError, match="families: unknown"):
        lc.compare_learned_attention(key, init_unrolled_em(1), families=("gamma",))
    with pytest.raises(ValueError, match="params: a stack for 2-dimensional"):
        lc.compare_learned_attention(key, init_unrolled_em(1, 2))
    with pytest.raises(ValueError, match="methods: 'em' and 'nuts-dp'"):
        lc.length_generalisation(key, init_unrolled_em(1), methods=("em",))


def test_heldout_tasks_are_strongly_typed_in_every_family():
    """No family gives weak-typed arrays (weights built from Python numbers), so a program
    compiled on one family's tasks serves every family of the same size."""
    for family in training.HELDOUT_FAMILIES:
        tasks = training.heldout_tasks(jax.random.key(3), family, 3, 20)
        weak = [name for name, v in tasks._asdict().items() if jax.typeof(v).weak_type]
        assert not weak, (family, weak)
