"""Issue 14: Nadaraya-Watson traceable over its parameters.

``nadaraya_watson``, ``kernel_scores`` and ``leave_one_out``: ``jax.jit(f)`` equals the eager
``f``; ``jax.vmap`` over a batch of bandwidths equals a Python loop; ``jax.grad`` in the
bandwidth equals central finite differences in float64 (``traceable.check_grads``); and a
traced bandwidth skips the value checks while an eager call still refuses a bad one.
"""

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from traceable import check_grads, issue14_data, leaves_close, vmap_vs_loop  # noqa: E402

from attnbayes.inference import kernel_regression as kr  # noqa: E402

D, RNG = issue14_data()
KR_KEYS, KR_VALUES = D.KR_KEYS, D.KR_VALUES
KR_QUERIES = np.linspace(-1.5, 1.5, 5)


# (name, function of array arguments only, the arguments). Each is compiled once here.
JIT_CASES = {
    "nadaraya_watson": (
        lambda k, v, q, h: kr.nadaraya_watson(k, v, q, bandwidth=h),
        (KR_KEYS, KR_VALUES, KR_QUERIES, 0.4),
    ),
    "nadaraya_watson-epanechnikov-streamed": (
        lambda k, v, q, h: kr.nadaraya_watson(
            k, v, q, kernel="epanechnikov", bandwidth=h, block_size=4
        ),
        (KR_KEYS, KR_VALUES, KR_QUERIES, 0.6),
    ),
    "kernel_scores": (
        lambda q, k, h: kr.kernel_scores(q, k, kernel="tricube", bandwidth=h),
        (KR_QUERIES, KR_KEYS, 0.5),
    ),
    "leave_one_out": (
        lambda k, v, h: kr.leave_one_out(k, v, bandwidth=h),
        (KR_KEYS, KR_VALUES, 0.4),
    ),
}
JITTED = {name: jax.jit(fn) for name, (fn, _) in JIT_CASES.items()}


@pytest.mark.parametrize("name", list(JIT_CASES))
def test_jit_equals_eager(name):
    fn, args = JIT_CASES[name]
    with np.errstate(all="ignore"):
        leaves_close(JITTED[name](*args), fn(*args))


def test_vmap_nadaraya_watson_over_bandwidth():
    vmap_vs_loop(
        lambda h: kr.nadaraya_watson(KR_KEYS, KR_VALUES, KR_QUERIES, bandwidth=h),
        np.array([0.2, 0.4, 1.0]),
    )


def test_grad_kernel_regression_in_bandwidth():
    """Nadaraya-Watson (Gaussian kernel) and the leave-one-out CV(h), dense, in h."""
    c = RNG.normal(size=KR_QUERIES.shape)

    def f(h_nw, h_loo):
        nw = kr.nadaraya_watson(KR_KEYS, KR_VALUES, KR_QUERIES, bandwidth=h_nw)
        return jnp.sum(c * nw) + kr.leave_one_out(KR_KEYS, KR_VALUES, bandwidth=h_loo).score

    check_grads(f, (0.4, 0.4), {0: 1.0, 1: 1.0})


def test_bad_bandwidth_raises_eagerly_and_not_under_jit():
    """A negative bandwidth is refused eagerly; traced, it enters as 1 / h^2 and is mirrored."""
    fn = JIT_CASES["nadaraya_watson"][0]
    args = (KR_KEYS, KR_VALUES, KR_QUERIES, -0.5)
    with pytest.raises(ValueError, match="^bandwidth: "):
        fn(*args)
    leaves = jax.tree.leaves(JITTED["nadaraya_watson"](*args))  # tracers: no value check
    np.testing.assert_allclose(leaves[0], JITTED["nadaraya_watson"](*args[:3], 0.5), rtol=1e-14)
