"""Nadaraya-Watson as attention and its leave-one-out CV, against references; its bad input.

References: statsmodels ``KernelReg`` (local constant, same bandwidth), brute-force NumPy loops
(``nadaraya_watson_data``) and ``attnbayes.inference.attention``'s ``neg_sq_distance_scores``.
The bad-input catalogue (issue 12): every public function of
``attnbayes.inference.kernel_regression.estimator`` against NaN / inf, empty, wrong-rank,
complex and non-numeric arrays, bad scalars and names, refused with a ``ValueError`` naming the
argument before JAX runs.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from bad_values import BAD_BANDWIDTHS, BAD_BLOCK_SIZES, BAD_NAMES, HUGE, bad_arrays
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from nadaraya_watson_data import (
    H_2D,
    QUERIES_1D,
    brute_force_loo,
    brute_force_nw,
    d2l_data,
    plane_data,
    queries_2d,
    sm_kernel_reg,
    vector_values,
)
from raising import check_refused
from statsmodels.nonparametric import kernels as sm_kernels

from attnbayes.inference.attention import neg_sq_distance_scores, softmax
from attnbayes.inference.kernel_regression import (
    COMPACT_KERNELS,
    KERNELS,
    EmptyWindowWarning,
    kernel_scores,
    leave_one_out,
    nadaraya_watson,
    select_bandwidth,
)


@pytest.fixture(scope="module")
def d2l_1d():
    return d2l_data(120, seed=0)


@pytest.fixture(scope="module")
def plane_2d():
    return plane_data(100, seed=1)


# ----------------------------------------------------------------------------- against statsmodels


@pytest.mark.parametrize("h", [0.05, 0.3, 1.5])
def test_gaussian_matches_statsmodels_kernelreg_1d(d2l_1d, h):
    x, y = d2l_1d
    q = np.linspace(-0.5, 5.5, 41)
    ref = sm_kernel_reg(y, x, var_type="c", reg_type="lc", bw=[h]).fit(q)[0]
    got = np.asarray(nadaraya_watson(x, y, q, bandwidth=h))
    assert got.shape == (41,)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-8)


def test_gaussian_matches_statsmodels_kernelreg_2d_per_coordinate(plane_2d):
    x, y = plane_2d
    q = queries_2d(x)
    for h in (np.array([0.4, 1.3]), H_2D):
        ref = sm_kernel_reg(y, x, var_type="cc", reg_type="lc", bw=h).fit(q)[0]
        got = np.asarray(nadaraya_watson(x, y, q, bandwidth=h))
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-8)


def test_tricube_matches_statsmodels_where_its_definition_agrees(d2l_1d, plane_2d):
    """statsmodels' tricube is (70/81)(1 - |u|^3)^3 for |u| <= 1 but returns 70/81 outside
    (it sets u = 0 there), so it is not compact; with h above the keys' range every |u| <= 1
    and the two definitions, hence the estimates, agree."""
    assert sm_kernels.tricube(0.1, np.array([0.5]), 0.0)[0] == pytest.approx(70 / 81)
    x, y = d2l_1d
    q = QUERIES_1D
    ref = sm_kernel_reg(y, x, var_type="c", reg_type="lc", bw=[6.0], ckertype="tricube").fit(q)[0]
    got = nadaraya_watson(x, y, q, kernel="tricube", bandwidth=6.0)
    np.testing.assert_allclose(np.asarray(got), ref, atol=1e-8)
    x2, y2 = plane_2d
    h = np.array([6.0, 11.0])
    q2 = queries_2d(x2)
    ref2 = sm_kernel_reg(y2, x2, var_type="cc", reg_type="lc", bw=h, ckertype="tricube").fit(q2)[0]
    got2 = nadaraya_watson(x2, y2, q2, kernel="tricube", bandwidth=h)
    np.testing.assert_allclose(np.asarray(got2), ref2, atol=1e-8)


@pytest.mark.parametrize("kernel", KERNELS)
def test_matches_brute_force_numpy(kernel, plane_2d, d2l_1d):
    """The dense path against an independent NumPy loop; 1-D with scalar values, 2-D with
    per-coordinate h and vector values."""
    x, y = d2l_1d
    got = np.asarray(nadaraya_watson(x, y, QUERIES_1D, kernel=kernel, bandwidth=0.4))
    assert got.shape == (23,)
    np.testing.assert_allclose(got, brute_force_nw(x, y, QUERIES_1D, kernel, 0.4), atol=1e-12)
    x2, y2 = plane_2d
    values, q2 = vector_values(y2), queries_2d(x2)
    got2 = np.asarray(nadaraya_watson(x2, values, q2, kernel=kernel, bandwidth=H_2D))
    assert got2.shape == (15, 2)
    np.testing.assert_allclose(got2, brute_force_nw(x2, values, q2, kernel, H_2D), atol=1e-11)


@pytest.mark.parametrize("kernel", ["gaussian", "epanechnikov"])
def test_streamed_path_agrees_with_dense_and_brute_force(kernel, plane_2d):
    """block_size 16 divides neither n = 100 keys nor Q = 15 queries. (The streamed
    empty-window fallback is tested below with the boxcar and tricube kernels.)"""
    x2, y2 = plane_2d
    values, q2 = vector_values(y2), queries_2d(x2)
    dense = np.asarray(nadaraya_watson(x2, values, q2, kernel=kernel, bandwidth=H_2D))
    streamed = nadaraya_watson(x2, values, q2, kernel=kernel, bandwidth=H_2D, block_size=16)
    assert streamed.shape == (15, 2)
    np.testing.assert_allclose(np.asarray(streamed), dense, rtol=0, atol=1e-12)
    np.testing.assert_allclose(
        np.asarray(streamed), brute_force_nw(x2, values, q2, kernel, H_2D), atol=1e-11
    )


def test_gaussian_nw_is_softmax_of_neg_sq_distance_scores(plane_2d):
    x, y = plane_2d
    q = queries_2d(x)
    scores = neg_sq_distance_scores(jnp.asarray(q), jnp.asarray(x), jnp.asarray(H_2D))
    np.testing.assert_allclose(
        np.asarray(kernel_scores(q, x, bandwidth=H_2D)), np.asarray(scores), rtol=1e-12, atol=1e-10
    )
    expected = np.asarray(softmax(scores)) @ y
    np.testing.assert_allclose(
        np.asarray(nadaraya_watson(x, y, q, bandwidth=H_2D)), expected, rtol=0, atol=1e-12
    )


@settings(max_examples=30, deadline=None)
@given(
    keys=hnp.arrays(np.float64, 12, elements=st.floats(-3, 3)),
    values=hnp.arrays(np.float64, 12, elements=st.floats(-10, 10)),
    shift=st.floats(-5, 5),
    kernel=st.sampled_from(["gaussian", "epanechnikov"]),
)
def test_nw_is_a_convex_combination_and_equivariant(keys, values, shift, kernel):
    """min v <= f(q) <= max v and f(q; v + c) = f(q; v) + c (empty windows fall back to a
    key's value, which keeps both); for the Gaussian kernel, moving keys and queries together
    changes nothing (compact kernels can flip a key on the window's edge by rounding)."""
    queries = np.linspace(-3.5, 3.5, 7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EmptyWindowWarning)
        f = np.asarray(nadaraya_watson(keys, values, queries, kernel=kernel, bandwidth=0.7))
        f_shifted = nadaraya_watson(keys, values + shift, queries, kernel=kernel, bandwidth=0.7)
    assert np.all(f >= values.min() - 1e-9) and np.all(f <= values.max() + 1e-9)
    np.testing.assert_allclose(np.asarray(f_shifted), f + shift, atol=1e-9)
    if kernel == "gaussian":
        f_moved = nadaraya_watson(keys + shift, values, queries + shift, bandwidth=0.7)
        np.testing.assert_allclose(np.asarray(f_moved), f, atol=1e-6)


@pytest.mark.parametrize(
    ("kernel", "block_size"),
    [("boxcar", None), ("epanechnikov", None), ("triangular", 2), ("tricube", 2)],
)
def test_empty_window_takes_the_nearest_key_value(kernel, block_size):
    keys = np.array([0.0, 1.0, 2.0, 3.5])
    values = np.array([10.0, 20.0, 30.0, 40.0])
    queries = np.array([0.1, 2.6, 5.0, -1.0, 1.05])
    with pytest.warns(EmptyWindowWarning, match="3 of 5 queries"):
        got = np.asarray(
            nadaraya_watson(
                keys, values, queries, kernel=kernel, bandwidth=0.3, block_size=block_size
            )
        )
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got[1:4], [30.0, 40.0, 10.0])
    np.testing.assert_allclose(got, brute_force_nw(keys, values, queries, kernel, 0.3))


@pytest.mark.parametrize("block_size", [None, 1])
def test_empty_window_nearest_key_uses_the_scaled_distance(block_size):
    """(3, 0) is the Euclidean nearest key to the origin, but with h = (1, 10) the scaled
    distance to (0, 25) is smaller: 2.5 < 3."""
    keys = np.array([[3.0, 0.0], [0.0, 25.0]])
    with pytest.warns(EmptyWindowWarning, match="1 of 1"):
        got = nadaraya_watson(
            keys,
            np.array([1.0, 2.0]),
            np.zeros((1, 2)),
            kernel="boxcar",
            bandwidth=np.array([1.0, 10.0]),
            block_size=block_size,
        )
    np.testing.assert_allclose(np.asarray(got), [2.0])


def test_jit_over_nadaraya_watson_uses_the_fallback_without_warning():
    keys, values = np.array([0.0, 1.0]), np.array([1.0, 2.0])
    f = jax.jit(nadaraya_watson, static_argnames=("kernel", "block_size"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = f(keys, values, np.array([0.5, 3.0]), kernel="epanechnikov", bandwidth=0.2)
    np.testing.assert_allclose(np.asarray(got), [1.0, 2.0])


def test_float32_inputs_stay_float32(d2l_1d):
    x, y = d2l_1d
    q = np.linspace(0, 5, 9)
    for kernel in ("gaussian",):
        got = nadaraya_watson(
            x.astype(np.float32),
            y.astype(np.float32),
            q.astype(np.float32),
            kernel=kernel,
            bandwidth=np.float32(0.3),
        )
        assert got.dtype == jnp.float32
        np.testing.assert_allclose(
            np.asarray(got), brute_force_nw(x, y, q, kernel, 0.3), rtol=1e-4, atol=1e-4
        )
    res = select_bandwidth(x.astype(np.float32), y.astype(np.float32))
    assert res.bandwidth.dtype == jnp.float32 and np.isfinite(float(res.score))


@pytest.mark.parametrize("kernel", KERNELS)
def test_loo_closed_form_matches_explicit_loop(kernel):
    x, y = d2l_data(60, seed=4)
    x[7] = 9.0  # an isolated key: its leave-one-out window is empty for compact kernels
    for h in (0.08, 0.3, 1.2):
        expected, preds = brute_force_loo(x, y, kernel, h)
        dense = leave_one_out(x, y, kernel=kernel, bandwidth=h)
        results = [dense]
        if kernel in ("gaussian", "tricube"):  # the streamed pass is kernel-agnostic
            results.append(leave_one_out(x, y, kernel=kernel, bandwidth=h, block_size=16))
        for res in results:
            assert np.isfinite(float(res.score))
            np.testing.assert_allclose(float(res.score), expected, rtol=1e-12)
            np.testing.assert_allclose(np.asarray(res.predictions), preds, atol=1e-12)
            if kernel in COMPACT_KERNELS:
                assert int(res.num_empty) >= 1


def test_loo_per_coordinate_and_vector_values(plane_2d):
    x, y = plane_2d[0][:60], plane_2d[1][:60]
    values = np.stack([y, np.cos(y)], axis=1)
    for kernel in ("gaussian", "triangular"):
        h = np.array([0.6, 1.5])
        expected, preds = brute_force_loo(x, values, kernel, h)
        for block_size in (None, 32) if kernel == "gaussian" else (None,):
            res = leave_one_out(x, values, kernel=kernel, bandwidth=h, block_size=block_size)
            assert res.predictions.shape == (60, 2)
            np.testing.assert_allclose(float(res.score), expected, rtol=1e-12)
            np.testing.assert_allclose(np.asarray(res.predictions), preds, atol=1e-12)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"kernel": "cosine"}, "kernel"),
        ({"kernel": None}, "kernel"),
        ({"bandwidth": 0.0}, "bandwidth"),
        ({"bandwidth": -1.0}, "bandwidth"),
        ({"bandwidth": np.nan}, "bandwidth"),
        ({"bandwidth": np.array([0.1, 0.2, 0.3])}, "bandwidth"),
        ({"bandwidth": np.ones((2, 2))}, "bandwidth"),
        ({"bandwidth": "wide"}, "bandwidth"),
        ({"bandwidth": 1e-200}, "bandwidth"),  # 1/h^2 overflows float64
        ({"keys": np.array([[0.0, np.inf], [1.0, 2.0], [3.0, 4.0]])}, "keys"),
        ({"values": np.array([1.0, np.nan, 3.0])}, "values"),
        ({"queries": np.array([[0.5, np.nan]])}, "queries"),
        ({"values": np.array([1.0, 2.0])}, "values"),
        ({"queries": np.array([0.5, 1.0])}, "queries"),
        ({"queries": np.ones((2, 3))}, "queries"),
        ({"keys": np.zeros((0, 2)), "values": np.zeros(0)}, "keys"),
        ({"queries": np.zeros((0, 2))}, "queries"),
        ({"keys": np.ones((3, 2, 1))}, "keys"),
        ({"block_size": 0}, "block_size"),
        ({"block_size": 2.5}, "block_size"),
    ],
)
def test_nadaraya_watson_rejects_bad_input(kwargs, name):
    args = {
        "keys": np.array([[0.0, 1.0], [1.0, 2.0], [3.0, 4.0]]),
        "values": np.array([1.0, 2.0, 3.0]),
        "queries": np.array([[0.5, 1.0]]),
        "bandwidth": 0.5,
    }
    args.update(kwargs)
    with pytest.raises(ValueError, match=rf"^{name}:"):
        nadaraya_watson(args.pop("keys"), args.pop("values"), args.pop("queries"), **args)


def test_leave_one_out_rejects_bad_input():
    with pytest.raises(ValueError, match="^keys:"):
        leave_one_out(np.array([1.0]), np.array([1.0]), bandwidth=1.0)
    with pytest.raises(ValueError, match="^bandwidth:"):
        leave_one_out(np.arange(3.0), np.arange(3.0), bandwidth=np.array([1.0, 2.0]))


def test_dense_loo_gradient_is_finite_at_small_bandwidths():
    """The diagonal is masked before exponentiation: exp of it overflowed and 0 * inf gave a
    NaN gradient, which the per-coordinate L-BFGS-B search would have been fed."""
    from attnbayes.inference.kernel_regression.estimator import loo_data, loo_dense_value_and_grad

    rng = np.random.default_rng(21)
    x = rng.uniform(0, 10, (40, 2))
    y = np.sin(x[:, 0]) + 0.1 * rng.normal(size=40)
    for dtype, h in ((np.float32, 0.1), (np.float64, 0.01)):
        data = loo_data("gaussian", x.astype(dtype), y.astype(dtype)[:, None], False)
        value, grad = loo_dense_value_and_grad("gaussian", jnp.log(jnp.full(2, h, dtype)), data)
        assert np.isfinite(float(value)) and np.all(np.isfinite(np.asarray(grad)))


# ----------------------------------------------------------------------------- bad input (issue 12)

XK = np.array([0.0, 1.0, 2.5, 3.0, 4.2])  # keys (n,), values (n,), queries (Q,)
YK = np.array([0.0, 1.0, 1.5, 2.0, 1.0])
XQ = np.array([0.5, 1.5])


def _kr_calls(keys=XK, values=YK, queries=XQ, **kw):
    """Every public function of attnbayes.inference.kernel_regression.estimator on one problem."""
    bandwidth = kw.pop("bandwidth", 0.7)
    return {
        "kernel_scores": lambda: kernel_scores(queries, keys, bandwidth=bandwidth, **kw),
        "nadaraya_watson": lambda: nadaraya_watson(
            keys, values, queries, bandwidth=bandwidth, **kw
        ),
        "nadaraya_watson-streamed": lambda: nadaraya_watson(
            keys, values, queries, bandwidth=bandwidth, block_size=2, **kw
        ),
        "leave_one_out": lambda: leave_one_out(keys, values, bandwidth=bandwidth, **kw),
        "leave_one_out-streamed": lambda: leave_one_out(
            keys, values, bandwidth=bandwidth, block_size=2, **kw
        ),
    }


def _cases():
    """(id, callable, anchored pattern)."""
    cases = []

    def add(label, call, pattern):
        cases.append((label, call, pattern))

    for label, k in bad_arrays(XK, wrong_rank=np.zeros((5, 1, 1))).items():
        for fn, call in _kr_calls(keys=k).items():
            add(f"{fn}-keys-{label}", call, "^keys: ")
    for label, v in bad_arrays(YK, wrong_rank=np.zeros((5, 1, 1))).items():
        for fn, call in _kr_calls(values=v).items():
            if fn != "kernel_scores":
                add(f"{fn}-values-{label}", call, "^values: ")
    for label, q in bad_arrays(XQ, wrong_rank=np.zeros((2, 1, 1))).items():
        for fn in ("kernel_scores", "nadaraya_watson", "nadaraya_watson-streamed"):
            add(f"{fn}-queries-{label}", _kr_calls(queries=q)[fn], "^queries: ")
    for label, h in BAD_BANDWIDTHS.items():
        if label == "shape":
            h = np.ones(2)  # (2,) bandwidths for 1-D keys
        for fn, call in _kr_calls(bandwidth=h).items():
            add(f"{fn}-bandwidth-{label}", call, "^bandwidth: ")
    for label, name in BAD_NAMES.items():
        for fn, call in _kr_calls(kernel=name).items():
            add(f"{fn}-kernel-{label}", call, "^kernel: ")
    for label, bs in BAD_BLOCK_SIZES.items():
        add(
            f"nadaraya_watson-block_size-{label}",
            lambda b=bs: nadaraya_watson(XK, YK, XQ, bandwidth=0.7, block_size=b),
            "^block_size: ",
        )
        add(
            f"leave_one_out-block_size-{label}",
            lambda b=bs: leave_one_out(XK, YK, bandwidth=0.7, block_size=b),
            "^block_size: ",
        )
    add(
        "nadaraya_watson-values-rows",
        lambda: nadaraya_watson(XK, YK[:4], XQ, bandwidth=1.0),
        "^values: ",
    )
    add(
        "nadaraya_watson-queries-dimension",
        lambda: nadaraya_watson(XK, YK, np.ones((2, 2)), bandwidth=1.0),
        "^queries: ",
    )
    add("leave_one_out-keys-one", lambda: leave_one_out([1.0], [1.0], bandwidth=1.0), "^keys: ")
    # keys so far apart that their squared distances overflow float64
    far = np.array([0.0, 1.0, 2.0, HUGE, -HUGE])
    for fn, call in _kr_calls(keys=far).items():
        if fn != "kernel_scores":  # scores of -inf are its right answer (the kernel is 0)
            add(f"{fn}-keys-overflow", call, "^keys: ")
    add(
        "nadaraya_watson-queries-overflow",
        lambda: nadaraya_watson(XK, YK, np.array([HUGE]), bandwidth=1.0),
        "^queries: ",
    )
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
