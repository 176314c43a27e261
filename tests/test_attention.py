"""Softmax attention against NumPy/SciPy computations written out by hand."""

import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import logsumexp
from scipy.special import softmax as np_softmax

from inference.attention import dot_product_scores, softmax, softmax_attention


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
