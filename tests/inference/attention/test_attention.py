"""Softmax attention against NumPy/SciPy computations written out by hand."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import logsumexp
from scipy.special import softmax as np_softmax

from attnbayes.inference.attention import dot_product_scores, softmax, softmax_attention


@pytest.fixture(scope="module")
def qkv():
    rng = np.random.default_rng(0)
    return rng.normal(size=(4, 3)), rng.normal(size=(5, 3)), rng.normal(size=(5, 2))


def test_dot_product_scores_default_scale(qkv):
    q, k, _ = qkv
    got = np.asarray(dot_product_scores(jnp.asarray(q), jnp.asarray(k)))
    assert got.shape == (4, 5)
    np.testing.assert_allclose(got, q @ k.T / np.sqrt(3.0), rtol=1e-13, atol=1e-14)
    scaled = np.asarray(dot_product_scores(jnp.asarray(q), jnp.asarray(k), scale=2.5))
    np.testing.assert_allclose(scaled, 2.5 * q @ k.T, rtol=1e-13, atol=1e-14)


def test_softmax_attention_default(qkv):
    q, k, v = qkv
    att = softmax_attention(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v))
    scores = q @ k.T / np.sqrt(3.0)
    w = np.asarray(att.weights)
    assert w.shape == (4, 5)
    assert att.output.shape == (4, 2)
    assert att.log_normalizer.shape == (4,)
    np.testing.assert_allclose(w.sum(axis=1), 1.0, rtol=0, atol=1e-14)
    np.testing.assert_allclose(w, np_softmax(scores, axis=1), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(np.asarray(att.output), w @ v, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(
        np.asarray(att.log_normalizer), logsumexp(scores, axis=1), rtol=1e-13, atol=1e-14
    )


def test_key_bias_shifts_scores(qkv):
    q, k, v = qkv
    bias = np.array([0.0, -1.0, 2.0, 0.5, -3.0])
    att = softmax_attention(
        jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), scale=0.7, key_bias=jnp.asarray(bias)
    )
    scores = 0.7 * q @ k.T + bias[None, :]
    np.testing.assert_allclose(
        np.asarray(att.weights), np_softmax(scores, axis=1), rtol=1e-12, atol=1e-15
    )
    np.testing.assert_allclose(
        np.asarray(att.log_normalizer), logsumexp(scores, axis=1), rtol=1e-13, atol=1e-14
    )
    # A constant bias changes the normaliser by that constant but not the weights.
    base = softmax_attention(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), scale=0.7)
    shifted = softmax_attention(
        jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), scale=0.7, key_bias=jnp.full(5, 4.0)
    )
    np.testing.assert_allclose(
        np.asarray(shifted.weights), np.asarray(base.weights), rtol=0, atol=1e-14
    )
    np.testing.assert_allclose(
        np.asarray(shifted.log_normalizer), np.asarray(base.log_normalizer) + 4.0, rtol=1e-14
    )


def test_mask_removes_keys(qkv):
    q, k, v = qkv
    mask = np.array(
        [
            [True, False, True, True, False],
            [False, False, False, False, True],
            [True, True, True, True, True],
            [False, True, False, True, False],
        ]
    )
    att = softmax_attention(
        jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), scale=1.0, mask=jnp.asarray(mask)
    )
    w = np.asarray(att.weights)
    scores = q @ k.T
    assert np.all(w[~mask] == 0.0)
    for i in range(4):
        keep = mask[i]
        np.testing.assert_allclose(w[i, keep], np_softmax(scores[i, keep]), rtol=1e-12)
        np.testing.assert_allclose(att.log_normalizer[i], logsumexp(scores[i, keep]), rtol=1e-13)
        np.testing.assert_allclose(att.output[i], np_softmax(scores[i, keep]) @ v[keep], rtol=1e-12)
    np.testing.assert_allclose(w[1], [0, 0, 0, 0, 1], rtol=0, atol=0)


def test_fully_masked_row_is_zero_not_nan(qkv):
    q, k, v = qkv
    mask = np.ones((4, 5), dtype=bool)
    mask[2] = False
    att = softmax_attention(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), mask=jnp.asarray(mask))
    out, w, lz = map(np.asarray, att)
    assert not np.any(np.isnan(w)) and not np.any(np.isnan(out)) and not np.any(np.isnan(lz))
    assert np.all(w[2] == 0.0)
    assert np.all(out[2] == 0.0)
    assert lz[2] == -np.inf
    # The other rows are untouched.
    full = softmax_attention(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v))
    rows = [0, 1, 3]
    np.testing.assert_allclose(w[rows], np.asarray(full.weights)[rows], rtol=0, atol=0)
    np.testing.assert_allclose(lz[rows], np.asarray(full.log_normalizer)[rows], rtol=0, atol=0)


def test_batch_dims_broadcast():
    rng = np.random.default_rng(1)
    q = rng.normal(size=(2, 3, 4, 3))  # (B1, B2, Q, d)
    k = rng.normal(size=(3, 5, 3))  # (B2, K, d): broadcast over B1
    v = rng.normal(size=(3, 5, 2))
    bias = rng.normal(size=(3, 5))
    att = softmax_attention(
        jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), key_bias=jnp.asarray(bias)
    )
    assert att.weights.shape == (2, 3, 4, 5)
    assert att.output.shape == (2, 3, 4, 2)
    assert att.log_normalizer.shape == (2, 3, 4)
    for a in range(2):
        for b in range(3):
            scores = q[a, b] @ k[b].T / np.sqrt(3.0) + bias[b][None, :]
            w = np_softmax(scores, axis=1)
            np.testing.assert_allclose(att.weights[a, b], w, rtol=1e-12, atol=1e-15)
            np.testing.assert_allclose(att.output[a, b], w @ v[b], rtol=1e-12, atol=1e-14)
            np.testing.assert_allclose(
                att.log_normalizer[a, b], logsumexp(scores, axis=1), rtol=1e-13
            )


def test_softmax_temperature():
    s = np.array([[1.0, 2.0, -0.5], [0.0, 0.0, 3.0]])
    np.testing.assert_allclose(
        np.asarray(softmax(jnp.asarray(s), temperature=2.0)),
        np_softmax(s / 2.0, axis=1),
        rtol=1e-13,
    )
    np.testing.assert_allclose(
        np.asarray(softmax(jnp.asarray(s), axis=0)), np_softmax(s, axis=0), rtol=1e-13
    )


def test_mismatched_key_dim_raises(qkv):
    q, _, v = qkv
    k_bad = np.ones((5, 2))
    with pytest.raises(ValueError, match=r"^keys"):
        dot_product_scores(jnp.asarray(q), jnp.asarray(k_bad))
    with pytest.raises(ValueError, match=r"^keys"):
        softmax_attention(jnp.asarray(q), jnp.asarray(k_bad), jnp.asarray(v))


def test_mismatched_value_rows_raise(qkv):
    q, k, _ = qkv
    with pytest.raises(ValueError, match=r"^values"):
        softmax_attention(jnp.asarray(q), jnp.asarray(k), jnp.ones((4, 2)))


# ----------------------------------------------------------------------------- issue 3: scores,
# exponential family, streamed pooling


def test_additive_scores_brute_force():
    from attnbayes.inference.attention import additive_scores

    rng = np.random.default_rng(10)
    q, k = rng.normal(size=(4, 3)), rng.normal(size=(6, 5))
    W, U, v = rng.normal(size=(7, 3)), rng.normal(size=(7, 5)), rng.normal(size=7)
    expected = np.array([[v @ np.tanh(W @ qi + U @ kj) for kj in k] for qi in q])
    np.testing.assert_allclose(additive_scores(q, k, W, U, v), expected, atol=1e-12)
    bias = rng.normal(size=6)
    mask = rng.uniform(size=(4, 6)) < 0.7
    got = additive_scores(q, k, W, U, v, bias=bias, mask=mask)
    np.testing.assert_allclose(got, np.where(mask, expected + bias, -np.inf), atol=1e-12)
    with pytest.raises(ValueError, match="^U"):
        additive_scores(q, k, W, U[:, :4], v)


def test_neg_sq_distance_scores_per_coordinate():
    from attnbayes.inference.attention import neg_sq_distance_scores

    rng = np.random.default_rng(11)
    q, k, h = rng.normal(size=(5, 2)), rng.normal(size=(8, 2)), np.array([0.5, 2.0])
    expected = -0.5 * (((q[:, None, :] - k[None, :, :]) / h) ** 2).sum(-1)
    np.testing.assert_allclose(neg_sq_distance_scores(q, k, h), expected, atol=1e-12)
    np.testing.assert_allclose(
        neg_sq_distance_scores(q, k, 0.7),
        -0.5 * ((q[:, None, :] - k[None, :, :]) ** 2).sum(-1) / 0.49,
        atol=1e-12,
    )
    for bad in (0.0, -1.0, np.array([1.0, 0.0]), np.ones(3)):
        with pytest.raises(ValueError, match="^bandwidth"):
            neg_sq_distance_scores(q, k, bad)


def test_log_partition_gradient_and_hessian_are_key_moments():
    from attnbayes.inference.attention import key_moments, log_partition

    rng = np.random.default_rng(12)
    keys, q = rng.normal(size=(9, 4)), rng.normal(size=4)
    a = np.exp(keys @ q - np.logaddexp.reduce(keys @ q))
    mean = a @ keys
    cov = (a[:, None] * (keys - mean)).T @ (keys - mean)
    np.testing.assert_allclose(jax.grad(log_partition)(q, keys), mean, atol=1e-12)
    np.testing.assert_allclose(jax.hessian(log_partition)(q, keys), cov, atol=1e-12)
    m, c = key_moments(q, keys)
    np.testing.assert_allclose(m, mean, atol=1e-12)
    np.testing.assert_allclose(c, cov, atol=1e-12)
    # the gradient is attention pooling with values = keys
    from attnbayes.inference.attention import attend

    np.testing.assert_allclose(
        attend(q[None], keys, keys, scale=1.0)[0], jax.grad(log_partition)(q, keys), atol=1e-12
    )


@pytest.mark.parametrize(("nq", "nk", "block"), [(37, 101, 16), (5, 3, 8), (64, 64, 64)])
def test_streamed_attend_equals_dense(nq, nk, block):
    from attnbayes.inference.attention import attend

    rng = np.random.default_rng(nq + nk)
    q, k, v = rng.normal(size=(nq, 2)), rng.normal(size=(nk, 2)) * 3, rng.normal(size=(nk, 3))
    bias = rng.normal(size=nk)
    bias[0] = -np.inf
    dense = attend(q, k, v, bias=bias)
    streamed = attend(q, k, v, bias=bias, block_size=block)
    np.testing.assert_allclose(streamed, dense, atol=1e-13)
    # dense path against brute force
    s = q @ k.T / np.sqrt(2) + bias
    w = np.exp(s - s.max(1, keepdims=True))
    np.testing.assert_allclose(dense, (w / w.sum(1, keepdims=True)) @ v, atol=1e-13)
    scalar_values = attend(q, k, v[:, 0], bias=bias, block_size=block)
    np.testing.assert_allclose(scalar_values, dense[:, 0], atol=1e-13)


def test_streamed_attention_log_normalizer_and_empty_rows():
    from attnbayes.inference.attention import scored_attention
    from attnbayes.inference.attention.scores import _dot_product

    rng = np.random.default_rng(13)
    q, k, v = rng.normal(size=(10, 3)), rng.normal(size=(23, 3)), rng.normal(size=(23, 2))
    dense = scored_attention(_dot_product, 0.5, q, k, v)
    streamed = scored_attention(_dot_product, 0.5, q, k, v, block_size=7)
    assert streamed.weights is None
    np.testing.assert_allclose(streamed.log_normalizer, dense.log_normalizer, atol=1e-12)
    np.testing.assert_allclose(
        dense.log_normalizer, np.logaddexp.reduce(0.5 * q @ k.T, axis=1), atol=1e-12
    )
    everything_masked = np.full(23, -np.inf)
    out = scored_attention(_dot_product, 0.5, q, k, v, bias=everything_masked, block_size=7)
    assert np.all(out.output == 0) and np.all(np.isneginf(out.log_normalizer))


def test_attend_sparse_weights_and_errors():
    from attnbayes.inference.attention import attend, entmax15, sparsemax

    rng = np.random.default_rng(14)
    q, k, v = rng.normal(size=(6, 4)), rng.normal(size=(9, 4)), rng.normal(size=(9, 2))
    s = q @ k.T / 2.0
    np.testing.assert_allclose(attend(q, k, v, weights="sparsemax"), sparsemax(s) @ v, atol=1e-12)
    np.testing.assert_allclose(attend(q, k, v, weights="entmax15"), entmax15(s) @ v, atol=1e-12)
    np.testing.assert_allclose(
        attend(q, k, v, temperature=0.5), attend(q, k, v, scale=1.0), atol=1e-12
    )
    with pytest.raises(ValueError, match="^weights"):
        attend(q, k, v, weights="hardmax")
    with pytest.raises(ValueError, match="^block_size"):
        attend(q, k, v, weights="sparsemax", block_size=4)
    with pytest.raises(ValueError, match="^block_size"):
        attend(q, k, v, block_size=0)
    with pytest.raises(ValueError, match="^values"):
        attend(q, k, v[:5])
    with pytest.raises(ValueError, match="^keys"):
        attend(q, k[:, :3], v)
    with pytest.raises(ValueError, match="^queries"):
        attend(np.full((2, 4), np.nan), k, v)
    with pytest.raises(ValueError, match="^bias"):
        attend(q, k, v, bias=np.zeros(3))
    with pytest.raises(ValueError, match="^temperature"):
        attend(q, k, v, temperature=0.0)


def test_gaussian_scores_are_accurate_far_from_the_origin_in_float32():
    from attnbayes.inference.attention import neg_sq_distance_scores

    x = (1000.0 + np.linspace(0, 0.01, 5)).astype(np.float32)[:, None]
    got = np.asarray(neg_sq_distance_scores(jnp.asarray(x), jnp.asarray(x), 0.001))
    exact = -0.5 * ((x.astype(np.float64) - x.T.astype(np.float64)) / 0.001) ** 2
    np.testing.assert_allclose(got, exact, rtol=2e-3, atol=1e-2)


def test_gradient_through_streamed_attention_equals_dense():
    from attnbayes.inference.attention import scored_attention
    from attnbayes.inference.attention.scores import _dot_product

    rng = np.random.default_rng(15)
    q, k, v = rng.normal(size=(19, 3)), rng.normal(size=(45, 3)), rng.normal(size=(45, 2))
    bias = rng.normal(size=45)
    bias[:8] = -np.inf  # a whole block masked

    def loss(q, bias, block):
        out = scored_attention(_dot_product, 0.7, q, k, v, bias=bias, block_size=block)
        return jnp.sum(jnp.sin(out.output)) + jnp.sum(out.log_normalizer)

    dense = jax.grad(loss, argnums=(0, 1))(q, bias, None)
    streamed = jax.grad(loss, argnums=(0, 1))(q, bias, 8)
    for a, b in zip(dense, streamed, strict=True):
        assert np.all(np.isfinite(b))
        np.testing.assert_allclose(b, a, atol=1e-12)


def test_attend_refuses_a_non_finite_scale():
    from attnbayes.inference.attention import attend

    q = np.ones((2, 2))
    with pytest.raises(ValueError, match="^scale"):
        attend(q, q, q, scale=float("nan"))
