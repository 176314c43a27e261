"""Softmax attention against NumPy/SciPy computations written out by hand; bad input to the
scores, pooling and the exponential-family view (issue 12, finding 4)."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from bad_values import (
    BAD_BANDWIDTHS,
    BAD_BLOCK_SIZES,
    BAD_NAMES,
    BAD_SCALES,
    BAD_TEMPERATURES,
    HUGE,
    bad_arrays,
)
from raising import check_refused
from scipy.special import logsumexp
from scipy.special import softmax as np_softmax

from attnbayes.inference.attention import (
    additive_scores,
    attend,
    dot_product_scores,
    entmax15,
    key_moments,
    log_partition,
    neg_sq_distance_scores,
    regularised_argmax,
    scored_attention,
    softmax,
    softmax_attention,
    sparsemax,
)
from attnbayes.inference.attention.scores import scaled_dot_product


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

    np.testing.assert_allclose(
        attend(q[None], keys, keys, scale=1.0)[0], jax.grad(log_partition)(q, keys), atol=1e-12
    )


@pytest.mark.parametrize(("nq", "nk", "block"), [(37, 101, 16), (5, 3, 8), (64, 64, 64)])
def test_streamed_attend_equals_dense(nq, nk, block):

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

    rng = np.random.default_rng(13)
    q, k, v = rng.normal(size=(10, 3)), rng.normal(size=(23, 3)), rng.normal(size=(23, 2))
    dense = scored_attention(scaled_dot_product, 0.5, q, k, v)
    streamed = scored_attention(scaled_dot_product, 0.5, q, k, v, block_size=7)
    assert streamed.weights is None
    np.testing.assert_allclose(streamed.log_normalizer, dense.log_normalizer, atol=1e-12)
    np.testing.assert_allclose(
        dense.log_normalizer, np.logaddexp.reduce(0.5 * q @ k.T, axis=1), atol=1e-12
    )
    everything_masked = np.full(23, -np.inf)
    out = scored_attention(scaled_dot_product, 0.5, q, k, v, bias=everything_masked, block_size=7)
    assert np.all(out.output == 0) and np.all(np.isneginf(out.log_normalizer))


def test_attend_sparse_weights_and_errors():

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

    x = (1000.0 + np.linspace(0, 0.01, 5)).astype(np.float32)[:, None]
    got = np.asarray(neg_sq_distance_scores(jnp.asarray(x), jnp.asarray(x), 0.001))
    exact = -0.5 * ((x.astype(np.float64) - x.T.astype(np.float64)) / 0.001) ** 2
    np.testing.assert_allclose(got, exact, rtol=2e-3, atol=1e-2)


def test_gradient_through_streamed_attention_equals_dense():

    rng = np.random.default_rng(15)
    q, k, v = rng.normal(size=(19, 3)), rng.normal(size=(45, 3)), rng.normal(size=(45, 2))
    bias = rng.normal(size=45)
    bias[:8] = -np.inf  # a whole block masked

    def loss(q, bias, block):
        out = scored_attention(scaled_dot_product, 0.7, q, k, v, bias=bias, block_size=block)
        return jnp.sum(jnp.sin(out.output)) + jnp.sum(out.log_normalizer)

    dense = jax.grad(loss, argnums=(0, 1))(q, bias, None)
    streamed = jax.grad(loss, argnums=(0, 1))(q, bias, 8)
    for a, b in zip(dense, streamed, strict=True):
        assert np.all(np.isfinite(b))
        np.testing.assert_allclose(b, a, atol=1e-12)


def test_attend_refuses_a_non_finite_scale():

    q = np.ones((2, 2))
    with pytest.raises(ValueError, match="^scale"):
        attend(q, q, q, scale=float("nan"))


# ----------------------------------------------------------------------------- bad input (issue 12)
#
# Every public function of scores, pooling and exponential_family against NaN / inf, empty,
# wrong-rank, complex and non-numeric arrays, bad scalars and names, and scores that overflow:
# refused with a ValueError naming the argument before any JAX tracing. Every array is tiny and
# every case raises before JAX runs, so each takes milliseconds.

Q = np.array([[0.5, -1.0], [1.0, 0.0]])  # queries (Q, d) = (2, 2)
K = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])  # keys (K, d) = (3, 2)
V = np.array([[1.0], [2.0], [3.0]])  # values (K, dv) = (3, 1)
B = np.array([0.0, -1.0, -np.inf])  # key bias (-inf removes a key)
W = np.array([[1.0, 0.5], [-0.5, 1.0]])  # additive: W (h, dq), U (h, dk), v (h,)
U = np.array([[0.5, 0.5], [1.0, -1.0]])
VA = np.array([1.0, -1.0])
Q1 = np.array([0.5, -1.0])  # one query (d,)


def _attend_calls(q=Q, k=K, v=V, **kw):
    """attend on one problem, with every weight map and streamed."""
    return {
        "attend": lambda: attend(q, k, v, **kw),
        "attend-sparsemax": lambda: attend(q, k, v, weights="sparsemax", **kw),
        "attend-entmax15": lambda: attend(q, k, v, weights="entmax15", **kw),
        "attend-streamed": lambda: attend(q, k, v, block_size=2, **kw),
    }


def _qk_calls(q=Q, k=K, **kw):
    """Every function that takes (queries (Q, d), keys (K, d)) and builds scores from them."""
    v = kw.pop("values", V)
    return {
        **_attend_calls(q, k, v, **kw),
        "dot_product_scores": lambda: dot_product_scores(q, k, **kw),
        "softmax_attention": lambda: softmax_attention(q, k, v, **kw),
        "additive_scores": lambda: additive_scores(q, k, W, U, VA, **kw),
        "neg_sq_distance_scores": lambda: neg_sq_distance_scores(q, k, 1.0, **kw),
        "scored_attention": lambda: scored_attention(scaled_dot_product, 0.5, q, k, v, **kw),
    }


def _cases():
    """(id, callable, anchored pattern)."""
    cases = []

    def add(label, call, pattern):
        cases.append((label, call, pattern))

    # --------------------------------------------------------------- attnbayes.inference.attention
    for label, q in bad_arrays(Q, wrong_rank=Q[0]).items():
        for fn, call in _qk_calls(q=q).items():
            add(f"{fn}-queries-{label}", call, "^queries: ")
    for label, k in bad_arrays(K, wrong_rank=K[0]).items():
        for fn, call in _qk_calls(k=k).items():
            add(f"{fn}-keys-{label}", call, "^keys: ")
    for label, v in bad_arrays(V, wrong_rank=V[None]).items():
        for fn, call in {
            **_attend_calls(v=v),
            "softmax_attention": lambda v=v: softmax_attention(Q, K, v),
            "scored_attention": lambda v=v: scored_attention(scaled_dot_product, 0.5, Q, K, v),
        }.items():
            add(f"{fn}-values-{label}", call, "^values: ")
    bad_bias = bad_arrays(B[:2], wrong_rank=np.float64(0.0), neg_inf_allowed=True)
    bad_bias.pop("ragged", None)
    bad_bias["empty"] = np.zeros(0)
    bad_bias["shape"] = np.zeros(2)  # 2 entries for 3 keys
    for label, b in bad_bias.items():
        if label == "nan" or label == "inf" or label == "complex":
            b = np.append(b, 0.0)  # the right length: only the values are bad
        for fn, call in {
            **_attend_calls(bias=b),
            "dot_product_scores": lambda b=b: dot_product_scores(Q, K, bias=b),
            "additive_scores": lambda b=b: additive_scores(Q, K, W, U, VA, bias=b),
            "neg_sq_distance_scores": lambda b=b: neg_sq_distance_scores(Q, K, 1.0, bias=b),
            "scored_attention": lambda b=b: scored_attention(
                scaled_dot_product, 0.5, Q, K, V, bias=b
            ),
        }.items():
            add(f"{fn}-bias-{label}", call, "^bias: ")
        add(
            f"softmax_attention-key_bias-{label}",
            lambda b=b: softmax_attention(Q, K, V, key_bias=b),
            "^key_bias: ",
        )
    for label, m in {
        "shape": np.ones((3, 3), bool),
        "float": np.full((2, 3), 0.5),
        "str": np.full((2, 3), "yes"),
    }.items():
        for fn, call in {
            "dot_product_scores": lambda m=m: dot_product_scores(Q, K, mask=m),
            "softmax_attention": lambda m=m: softmax_attention(Q, K, V, mask=m),
            "additive_scores": lambda m=m: additive_scores(Q, K, W, U, VA, mask=m),
            "neg_sq_distance_scores": lambda m=m: neg_sq_distance_scores(Q, K, 1.0, mask=m),
        }.items():
            add(f"{fn}-mask-{label}", call, "^mask: ")
    for label, scale in BAD_SCALES.items():
        for fn, call in {
            **_attend_calls(scale=scale),
            "dot_product_scores": lambda s=scale: dot_product_scores(Q, K, s),
            "softmax_attention": lambda s=scale: softmax_attention(Q, K, V, scale=s),
        }.items():
            add(f"{fn}-scale-{label}", call, "^scale: ")
    # attend takes one temperature per query: a vector is bad only at the wrong length (Q = 2)
    wrong_length = {"vector": np.ones(3), "vector-zero": np.array([1.0, 0.0])}
    bad = {**BAD_TEMPERATURES, **wrong_length, "zero": 0.0, "subnormal": 1e-320}
    for label, t in bad.items():
        for fn, call in _attend_calls(temperature=t).items():
            add(f"{fn}-temperature-{label}", call, "^temperature: ")
    for label, name in BAD_NAMES.items():
        add(f"attend-weights-{label}", lambda n=name: attend(Q, K, V, weights=n), "^weights: ")
    for label, bs in BAD_BLOCK_SIZES.items():
        add(
            f"attend-block_size-{label}",
            lambda b=bs: attend(Q, K, V, block_size=b),
            "^block_size: ",
        )
        add(
            f"scored_attention-block_size-{label}",
            lambda b=bs: scored_attention(scaled_dot_product, 0.5, Q, K, V, block_size=b),
            "^block_size: ",
        )
    add(
        "attend-block_size-sparsemax",
        lambda: attend(Q, K, V, weights="sparsemax", block_size=2),
        "^block_size: ",
    )
    add(
        "scored_attention-score_fn",
        lambda: scored_attention("dot", 0.5, Q, K, V),
        "^score_fn: ",
    )
    add(
        "scored_attention-return_weights",
        lambda: scored_attention(scaled_dot_product, 0.5, Q, K, V, return_weights="yes"),
        "^return_weights: ",
    )
    # mismatched shapes
    for fn, call in _qk_calls(k=K[:, :1]).items():
        if fn != "additive_scores":  # its keys may have their own dimension (U's columns)
            add(f"{fn}-keys-dimension", call, "^keys: ")
    for fn, call in {
        **_attend_calls(v=V[:2]),
        "softmax_attention": lambda: softmax_attention(Q, K, V[:2]),
        "scored_attention": lambda: scored_attention(scaled_dot_product, 0.5, Q, K, V[:2]),
    }.items():
        add(f"{fn}-values-rows", call, "^values: ")
    # additive weights
    for arg, good, rank in (("W", W, W[0]), ("U", U, U[0]), ("v", VA, W)):
        for label, bad in bad_arrays(good, wrong_rank=rank).items():
            args = {"W": W, "U": U, "v": VA, arg: bad}
            add(
                f"additive_scores-{arg}-{label}",
                lambda a=args: additive_scores(Q, K, a["W"], a["U"], a["v"]),
                f"^{arg}: ",
            )
    add("additive_scores-U-shape", lambda: additive_scores(Q, K, W, U[:, :1], VA), "^U: ")
    for label, h in BAD_BANDWIDTHS.items():
        add(
            f"neg_sq_distance_scores-bandwidth-{label}",
            lambda h=h: neg_sq_distance_scores(Q, K, h),
            "^bandwidth: ",
        )
    # log_partition and key_moments: query (d,), keys (K, d)
    for fn_name, fn in (("log_partition", log_partition), ("key_moments", key_moments)):
        for label, q in bad_arrays(Q1, wrong_rank=Q).items():
            add(f"{fn_name}-query-{label}", lambda fn=fn, q=q: fn(q, K), "^query: ")
        for label, k in bad_arrays(K, wrong_rank=K[0]).items():
            add(f"{fn_name}-keys-{label}", lambda fn=fn, k=k: fn(Q1, k), "^keys: ")
        add(f"{fn_name}-keys-dimension", lambda fn=fn: fn(Q1, K[:, :1]), "^keys: ")

    # --------------------------------------------------------------- overflowing scores
    q_huge, k_huge = np.array([[HUGE, 0.0]]), np.array([[HUGE, 0.0], [0.0, 1.0]])
    v2 = np.array([[1.0], [2.0]])
    for fn, call in {
        **_attend_calls(q_huge, k_huge, v2),
        "dot_product_scores": lambda: dot_product_scores(q_huge, k_huge),
        "softmax_attention": lambda: softmax_attention(q_huge, k_huge, v2),
    }.items():
        add(f"{fn}-overflow", call, r"^queries: .*float64")
    q32 = np.array([[1e20, 0.0]], np.float32)
    k32 = np.array([[1e20, 0.0], [0.0, 1.0]], np.float32)
    for fn, call in _attend_calls(q32, k32, v2.astype(np.float32)).items():
        add(f"{fn}-overflow-float32", call, r"^queries: .*float32")
    q_big, k_big = np.array([[1e100, 0.0]]), np.array([[1e100, 0.0], [0.0, 1.0]])
    for fn, call in _attend_calls(q_big, k_big, v2, scale=1e200).items():
        add(f"{fn}-overflow-scale", call, "^scale: ")
    for fn, call in _attend_calls(q_big, k_big, v2, temperature=1e-200).items():
        add(f"{fn}-overflow-temperature", call, "^temperature: ")
    q_edge, k_edge = np.array([[1e154]]), np.array([[1e154], [0.0]])
    for fn, call in _attend_calls(q_edge, k_edge, v2, scale=1.0, bias=[1e308, 0.0]).items():
        add(f"{fn}-overflow-bias", call, "^bias: ")
    add(
        "dot_product_scores-overflow-scale",
        lambda: dot_product_scores(q_big, k_big, 1e200),
        "^scale: ",
    )
    add(
        "softmax_attention-overflow-key_bias",
        lambda: softmax_attention(q_edge, k_edge, v2, scale=1.0, key_bias=[1e308, 0.0]),
        "^key_bias: ",
    )
    add(
        "additive_scores-overflow-W",
        lambda: additive_scores(np.ones((1, 2)), K, np.full((2, 2), 1e308), U, VA),
        "^W: ",
    )
    add(
        "additive_scores-overflow-v",
        lambda: additive_scores(np.ones((1, 2)), K, np.full((2, 2), 100.0), U * 0, [1e308, 1e308]),
        "^v: ",
    )
    add(
        "neg_sq_distance_scores-overflow",
        lambda: neg_sq_distance_scores(np.array([[HUGE]]), np.array([[-HUGE], [0.0]]), 1.0),
        "^queries: ",
    )
    add(
        "log_partition-overflow",
        lambda: log_partition(np.array([HUGE, 0.0]), k_huge),
        "^query: ",
    )
    add("key_moments-overflow", lambda: key_moments(np.array([HUGE, 0.0]), k_huge), "^query: ")
    return cases


CASES = _cases()


@pytest.mark.usefixtures("full_tracebacks")
@pytest.mark.parametrize(("call", "pattern"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_refused_before_jax(call, pattern):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NumPy's ComplexWarning and the like: not the point
        check_refused(call, ValueError, pattern)


def test_case_ids_are_unique():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))


# ----------------------------------------------------------------------------- finding 4


@pytest.mark.parametrize("weights", ["softmax", "sparsemax", "entmax15"])
def test_attend_overflowing_scores_are_refused_not_nan_or_the_wrong_key(weights):
    """s = <q, k> = 1e400 for the first key: softmax gave NaN (inf - inf) and sparsemax took
    the infinite score for a masked one and put all the weight on the other key."""
    q, k, v = [[HUGE, 0.0]], [[HUGE, 0.0], [0.0, 1.0]], [[1.0], [2.0]]
    with pytest.raises(ValueError, match=r"^queries: .*1\.8e\+308") as excinfo:
        attend(q, k, v, weights=weights, scale=1.0)
    assert type(excinfo.value) is ValueError


@pytest.mark.parametrize(
    ("weights", "block_size"),
    [("softmax", None), ("softmax", 2), ("sparsemax", None), ("entmax15", None)],
)
def test_attend_scores_just_inside_the_limit_give_the_exact_answer(weights, block_size):
    """|s| = 1e300 (within float64) for both keys: all weight on the first key, exactly."""
    q, k, v = [[1e150]], [[1e150], [-1e150]], [[1.0, -2.0], [3.0, 4.0]]
    out = attend(q, k, v, weights=weights, scale=1.0, block_size=block_size)
    np.testing.assert_array_equal(np.asarray(out), [[1.0, -2.0]])


@pytest.mark.parametrize(
    ("arg", "pattern"),
    [("queries", "^queries: "), ("keys", "^keys: "), ("values", "^values: "), ("bias", "^bias: ")],
)
def test_attend_refuses_complex_inputs(arg, pattern):
    args = {"queries": Q, "keys": K, "values": V, "bias": np.zeros(3)}
    args[arg] = args[arg] + 0.5j
    with pytest.raises(ValueError, match=pattern) as excinfo:
        attend(args["queries"], args["keys"], args["values"], bias=args["bias"])
    assert type(excinfo.value) is ValueError


@pytest.mark.parametrize("temperature", ["0.5", None, np.ones(3), np.ones((2, 1)), 1j])
def test_attend_bad_temperature_names_it(temperature):
    with pytest.raises(ValueError, match="^temperature: ") as excinfo:
        attend(Q, K, V, temperature=temperature)
    assert type(excinfo.value) is ValueError


def test_jit_and_grad_still_work_and_skip_the_value_checks():
    """Under jax.jit the arguments are tracers: only the static checks run."""
    s = jnp.array([0.3, 1.2, -0.5])
    jitted = jax.jit(lambda t: regularised_argmax(s, "tsallis", 1.5, temperature=t))
    np.testing.assert_allclose(jitted(0.7), regularised_argmax(s, "tsallis", 1.5, temperature=0.7))
    got = jax.jit(lambda q, t: attend(q, K, V, temperature=t))(jnp.asarray(Q), 0.5)
    np.testing.assert_allclose(got, attend(Q, K, V, temperature=0.5), atol=1e-14)
    grad = jax.grad(lambda q: jnp.sum(attend(q, K, V, weights="sparsemax")))(jnp.asarray(Q))
    assert np.all(np.isfinite(np.asarray(grad)))
    np.testing.assert_allclose(
        jax.grad(log_partition)(Q1, K), attend(Q1[None], K, K, scale=1.0)[0], atol=1e-14
    )
    # overflow is not checked on tracers: it shows as NaN, as the docstring says
    huge = jax.jit(lambda q: attend(q, [[HUGE, 0.0], [0.0, 1.0]], [[1.0], [2.0]]))
    assert np.isnan(np.asarray(huge(jnp.array([[HUGE, 0.0]])))).all()
    # the static checks still run on tracers
    with pytest.raises(ValueError, match="^queries: "):
        jax.jit(lambda q: attend(q, K, V))(jnp.ones((2, 2, 2)))


@pytest.mark.parametrize("weights", ["softmax", "sparsemax", "entmax15"])
def test_attend_per_query_temperature_equals_one_query_at_a_time(weights):
    """A_i. = weights((scale <q_i, k_.> + b) / tau_i + log_prior): each row equals the scalar-
    temperature call on that query alone (a different code path: no augmented queries); for
    softmax also the NumPy formula written out, dense and streamed."""
    rng = np.random.default_rng(7)
    q, k, v = rng.normal(size=(5, 2)), rng.normal(size=(4, 2)), rng.normal(size=(4, 3))
    b, lp = rng.normal(size=4), np.log(rng.dirichlet(np.ones(4)))
    tau = np.array([0.3, 1.0, 2.5, 0.7, 4.0])
    out = attend(q, k, v, weights=weights, bias=b, scale=0.8, temperature=tau, log_prior=lp)
    rows = [
        attend(
            q[i : i + 1], k, v, weights=weights, bias=b, scale=0.8, temperature=tau[i], log_prior=lp
        )[0]
        for i in range(5)
    ]
    np.testing.assert_allclose(out, np.stack(rows), rtol=0, atol=1e-13)
    if weights == "softmax":
        scores = (0.8 * q @ k.T + b[None, :]) / tau[:, None] + lp[None, :]
        want = np_softmax(scores, axis=1) @ v
        np.testing.assert_allclose(out, want, rtol=0, atol=1e-13)
        streamed = attend(q, k, v, bias=b, scale=0.8, temperature=tau, log_prior=lp, block_size=2)
        np.testing.assert_allclose(streamed, want, rtol=0, atol=1e-13)
