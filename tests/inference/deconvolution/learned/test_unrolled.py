"""The unrolled-EM stack: EM at initialisation, streaming, masks, jit/vmap/grad, save and load,
bad input, and the shipped stack."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnbayes.inference.deconvolution import em
from attnbayes.inference.deconvolution.learned import training, unrolled
from attnbayes.inference.deconvolution.learned.unrolled import (
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
def test_streamed_equals_dense(dim, perturbed):
    x, _ = _data(n=70, p=dim, seed=1)
    params = perturbed(2, dim)
    dense = unrolled_em_moments(params, x, 0.7)
    streamed = unrolled_em_moments(params, x, 0.7, block_size=16)
    np.testing.assert_allclose(streamed.mean, dense.mean, rtol=0, atol=1e-10)
    np.testing.assert_allclose(streamed.variance, dense.variance, rtol=0, atol=1e-9)


def test_padded_task_equals_the_task(perturbed):
    x, _ = _data(n=50, seed=2)
    params = perturbed(2, 1, seed=4)
    padded = jnp.concatenate([x, jnp.linspace(-30.0, 30.0, 14)])
    mask = np.r_[np.ones(50, bool), np.zeros(14, bool)]
    whole = unrolled_em_moments(params, x, 0.7)
    for block_size in (None, 16):
        part = unrolled_em_moments(params, padded, 0.7, mask=mask, block_size=block_size)
        np.testing.assert_allclose(part.mean[:50], whole.mean, rtol=0, atol=1e-10)
        np.testing.assert_allclose(part.variance[:50], whole.variance, rtol=0, atol=1e-9)


def test_jit_vmap_grad_over_parameters_data_and_sigma(perturbed):
    x, z = _data(n=40, seed=5)
    params = perturbed(2, 1, seed=6)
    mask = jnp.ones(40, bool)

    def loss(params, x, sigma):
        return jnp.mean(
            (unrolled.unrolled_em_moments_unchecked(params, x[:, None], sigma, mask)[0][:, 0] - z)
            ** 2
        )

    value, grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))(params, x, 0.7)
    assert np.isfinite(float(value))
    assert all(np.all(np.isfinite(g)) for g in jax.tree_util.tree_leaves(grads))
    # the gradient in sigma against a central difference
    h = 1e-6
    fd = (loss(params, x, 0.7 + h) - loss(params, x, 0.7 - h)) / (2 * h)
    np.testing.assert_allclose(grads[2], fd, rtol=1e-6)
    # vmap over data sets equals a loop
    xs = jnp.stack([x, x + 0.3, -x])
    batched = jax.vmap(
        lambda xi: unrolled.unrolled_em_moments_unchecked(params, xi[:, None], 0.7, mask)[0]
    )(xs)
    for xi, bi in zip(xs, batched, strict=True):
        np.testing.assert_allclose(bi[:, 0], unrolled_em(params, xi, 0.7), rtol=0, atol=1e-12)


def test_intervals_are_normal_quantiles():
    x, _ = _data()
    moments = unrolled_em_moments(init_unrolled_em(2), x, 0.7)
    lo, hi = unrolled_em_intervals(moments, 0.9)
    np.testing.assert_allclose((hi - lo) / 2, 1.6448536269514722 * np.sqrt(moments.variance))


def test_save_load_round_trip(tmp_path, perturbed):
    params = perturbed(3, 2, seed=8)
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


def _damaged(saved, kind):
    """The bytes of a damaged copy of ``saved`` (a saved stack), or its arrays to write."""
    if kind == "empty":
        return b""
    if kind == "truncated":
        data = saved.read_bytes()
        return data[: len(data) // 2]
    with np.load(saved) as data:
        arrays = dict(data)
    if kind == "version-string":
        arrays["format_version"] = np.asarray("1")
    elif kind == "version-float":
        arrays["format_version"] = np.asarray(1.5)
    elif kind == "strings-for-floats":
        arrays["layers.step"] = np.asarray(["1"])
    elif kind == "metadata-array":
        arrays["meta.steps"] = np.arange(3)
    return arrays


DAMAGED = {
    "empty": "not a saved stack.*could not be read as an .npz archive .EOFError",
    "truncated": "not a saved stack.*could not be read as an .npz archive .BadZipFile",
    "version-string": "format version '1' in .* is not an integer",
    "version-float": "format version 1.5 in .* is not an integer",
    "strings-for-floats": "array 'layers.step' in .* holds <U1, expected floats",
    "metadata-array": "metadata 'meta.steps' in .* has shape",
}


@pytest.mark.parametrize("kind", list(DAMAGED))
def test_load_names_the_path_of_a_damaged_file(tmp_path, kind):
    """Each a one-line ValueError naming the file, not BadZipFile, EOFError or int()'s error."""
    save_unrolled_em(tmp_path / "stack.npz", init_unrolled_em(1), {"steps": 3})
    damaged = _damaged(tmp_path / "stack.npz", kind)
    path = tmp_path / f"{kind}.npz"
    if isinstance(damaged, bytes):
        path.write_bytes(damaged)
    else:
        np.savez(path, **damaged)
    with pytest.raises(ValueError, match=f"^path: {DAMAGED[kind]}") as info:
        load_unrolled_em(path)
    message = str(info.value)
    assert repr(str(path)) in message and "\n" not in message


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


def test_per_unit_sigma_is_refused_by_name():
    """The v1 stack standardises by one sigma: a sigma per point would silently change the
    model it was trained on, so it is refused before any tracing."""
    params = init_unrolled_em(1)
    with pytest.raises(ValueError, match=r"^sigma: the unrolled-EM stack was built for one"):
        unrolled_em(params, np.zeros(5), np.ones(5))
