"""Issue 14: the attention functions traceable over their parameters.

The weight maps and ``attend``: ``jax.jit(f)`` equals the eager ``f``; ``jax.vmap`` over a
batch of parameters equals a Python loop; ``jax.grad`` equals central finite differences in
float64 (``traceable.check_grads``); and traced arguments skip the value checks (no error, a
non-finite result) while eager calls still refuse bad values.
"""

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from traceable import check_grads, has_nan, issue14_data, leaves_close, vmap_vs_loop  # noqa: E402

from attnbayes.inference import attention as at  # noqa: E402

D, RNG = issue14_data()
QUERIES, KEYS, VALUES, SCORES = D.QUERIES, D.KEYS, D.VALUES, D.SCORES
C_SCORES, C_OUT = D.C_SCORES, D.C_OUT


# ----------------------------------------------------------------------------- jit == eager
#
# (name, function of array arguments only, the arguments). Each is compiled once here.

JIT_CASES = {
    "softmax": (lambda s, t: at.softmax(s, temperature=t), (SCORES, 0.7)),
    "sparsemax": (lambda s, t: at.sparsemax(s, axis=0, temperature=t), (SCORES, 0.7)),
    "entmax15": (lambda s, t: at.entmax15(s, temperature=t), (SCORES, 0.7)),
    "entmax_bisect": (lambda s, a, t: at.entmax_bisect(s, a, temperature=t), (SCORES, 1.7, 0.7)),
    "regularised_argmax-tsallis": (
        lambda s, a: at.regularised_argmax(s, "tsallis", a),
        (SCORES, 1.7),
    ),
}
for _weights in at.WEIGHT_MAPS:
    JIT_CASES[f"attend-{_weights}"] = (
        lambda q, k, v, t, sc, w=_weights: at.attend(q, k, v, weights=w, temperature=t, scale=sc),
        (QUERIES, KEYS, VALUES, 0.8, 0.6),
    )
JIT_CASES["attend-softmax-streamed"] = (
    lambda q, k, v, t: at.attend(q, k, v, temperature=t, block_size=4),
    (QUERIES, KEYS, VALUES, 0.8),
)
JITTED = {name: jax.jit(fn) for name, (fn, _) in JIT_CASES.items()}


@pytest.mark.parametrize("name", list(JIT_CASES))
def test_jit_equals_eager(name):
    fn, args = JIT_CASES[name]
    with np.errstate(all="ignore"):
        leaves_close(JITTED[name](*args), fn(*args))


# ----------------------------------------------------------------------------- vmap == loop


def test_vmap_entmax_bisect_over_alpha():
    vmap_vs_loop(lambda a: at.entmax_bisect(SCORES, a), np.array([1.2, 1.5, 2.0, 3.0]))


def test_vmap_attend_over_temperature():
    for weights in ("softmax", "entmax15"):
        vmap_vs_loop(
            lambda t, w=weights: at.attend(QUERIES, KEYS, VALUES, weights=w, temperature=t),
            np.array([0.3, 1.0, 2.5]),
        )


# ----------------------------------------------------------------------------- grad == FD


def _entmax_objective(a, t):
    return jnp.sum(C_SCORES * at.entmax_bisect(SCORES, a)) + jnp.sum(
        C_SCORES * at.regularised_argmax(SCORES, "tsallis", a, temperature=t)
    )


@pytest.mark.parametrize("alpha", [1.3, 1.5, 2.0, 2.6])
def test_grad_entmax_bisect_in_alpha(alpha):
    """Away from support changes (the support is the same at alpha +- eps)."""
    eps = 1e-6 * alpha
    for temperature in (1.0, 0.6):
        supports = [
            np.asarray(at.entmax_bisect(SCORES, a, temperature=temperature)) > 0
            for a in (alpha - eps, alpha + eps)
        ]
        np.testing.assert_array_equal(*supports)
    check_grads(_entmax_objective, (alpha, 0.6), {0: 1.0, 1: 1.0})


ATTEND_OBJECTIVES = {
    weights: lambda q, k, v, t, w=weights: jnp.sum(
        C_OUT * at.attend(q, k, v, weights=w, temperature=t)
    )
    for weights in at.WEIGHT_MAPS
}


@pytest.mark.parametrize("weights", at.WEIGHT_MAPS)
def test_grad_attend(weights):
    """attend's output in queries, keys, values and temperature (directional derivatives)."""
    directions = {i: RNG.normal(size=a.shape) for i, a in enumerate((QUERIES, KEYS, VALUES))}
    check_grads(ATTEND_OBJECTIVES[weights], (QUERIES, KEYS, VALUES, 0.8), {**directions, 3: 1.0})


# ----------------------------------------------------------------------------- value checks


BAD_QUERIES = np.where(QUERIES > 1.0, np.nan, QUERIES)
# (compiled case of JIT_CASES, its arguments with one bad value, what the eager error starts
# with); a NaN in the inputs is propagated as NaN under jit, and so is an alpha <= 1.
BAD_VALUE_CASES = {
    "entmax_bisect-alpha": ("entmax_bisect", (SCORES, 0.5, 0.7), "^alpha: "),
    "attend-sparsemax-queries-nan": (
        "attend-sparsemax",
        (BAD_QUERIES, KEYS, VALUES, 0.8, 0.6),
        "^queries: ",
    ),
}


@pytest.mark.parametrize("name", list(BAD_VALUE_CASES))
def test_bad_values_raise_eagerly_and_not_under_jit(name):
    case, args, match = BAD_VALUE_CASES[name]
    fn = JIT_CASES[case][0]
    with pytest.raises(ValueError, match=match):
        fn(*args)
    leaves = jax.tree.leaves(JITTED[case](*args))  # tracers: no value check, no error
    assert has_nan(leaves), name
