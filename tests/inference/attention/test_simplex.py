"""Softmax, sparsemax and entmax as regularised argmax over the simplex: known vectors, the
variational problem against an independent solver, the LP limit, and custom JVPs; bad input
(issue 12)."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from bad_values import BAD_ALPHAS, BAD_NAMES, BAD_TEMPERATURES, bad_arrays
from jax.test_util import check_grads
from raising import check_refused
from scipy.optimize import minimize

from attnbayes.inference.attention.simplex import (
    entmax15,
    entmax_bisect,
    regularised_argmax,
    regularised_objective,
    regulariser_value,
    softmax,
    sparsemax,
)

X = jnp.array([-2.0, 0.0, 0.5])


def test_known_vectors():
    np.testing.assert_allclose(softmax(X), [0.0486, 0.3592, 0.5922], atol=5e-5)
    np.testing.assert_allclose(sparsemax(X), [0.0, 0.25, 0.75], atol=1e-15)
    np.testing.assert_allclose(entmax15(X), [0.0, 0.326, 0.674], atol=5e-4)
    # exact 1.5-entmax here: p = (x/2 - t)^2 on {0, 0.5}, t solves (-t)^2 + (1/4 - t)^2 = 1
    t = (0.25 - np.sqrt(2 - 0.25**2)) / 2
    np.testing.assert_allclose(entmax15(X), [0.0, t**2, (0.25 - t) ** 2], atol=1e-14)


def test_entmax_bisect_special_cases():
    rng = np.random.default_rng(0)
    s = rng.normal(size=(6, 9)) * 2
    np.testing.assert_allclose(entmax_bisect(s, 2.0), sparsemax(s), atol=1e-12)
    np.testing.assert_allclose(entmax_bisect(s, 1.5), entmax15(s), atol=1e-12)
    gaps = [float(jnp.abs(entmax_bisect(s, a) - softmax(s)).max()) for a in (1.1, 1.01, 1.001)]
    assert gaps[0] > gaps[1] > gaps[2] and gaps[2] < 2e-3


def test_sparsemax_equals_optax_projection():
    s = np.random.default_rng(1).normal(size=(20, 11)) * 3
    expected = jax.vmap(optax.projections.projection_simplex)(s)
    np.testing.assert_allclose(sparsemax(s), expected, atol=1e-13)


@pytest.mark.parametrize(
    "fn", [softmax, sparsemax, entmax15, lambda s, **k: entmax_bisect(s, 1.3, **k)]
)
def test_axis_temperature_and_mask(fn):
    s = np.random.default_rng(2).normal(size=(4, 5, 6))
    p = fn(s, axis=1)
    np.testing.assert_allclose(p.sum(1), 1.0, atol=1e-12)
    np.testing.assert_allclose(p, jnp.moveaxis(fn(jnp.moveaxis(s, 1, -1)), -1, 1), atol=1e-12)
    np.testing.assert_allclose(fn(s, temperature=0.5), fn(2 * s), atol=1e-12)
    masked = s.copy()
    masked[..., 0] = -np.inf
    pm = fn(masked)
    assert np.all(pm[..., 0] == 0) and np.all(np.isfinite(pm))
    np.testing.assert_allclose(pm[..., 1:], fn(s[..., 1:]), atol=1e-12)


def _objective(q, s, regulariser, alpha, tau):
    """<q, s> - tau Omega(q), written independently of the library in NumPy."""
    q = np.clip(q, 0, None)
    if regulariser == "shannon":
        omega = np.sum(np.where(q > 0, q * np.log(np.where(q > 0, q, 1)), 0))
    elif regulariser == "gini":
        omega = 0.5 * (np.sum(q**2) - 1)
    else:
        omega = (np.sum(q**alpha) - 1) / (alpha * (alpha - 1))
    return float(q @ s - tau * omega)


@pytest.mark.parametrize(
    ("regulariser", "alpha"),
    [("shannon", None), ("gini", None), ("tsallis", 1.5), ("tsallis", 1.25), ("tsallis", 3.0)],
)
def test_regularised_argmax_is_optimal(regulariser, alpha):
    """No point of the simplex beats the closed form; SLSQP from scipy agrees with it."""
    rng = np.random.default_rng(3)
    for _ in range(8):
        k, tau = int(rng.integers(2, 8)), float(rng.uniform(0.2, 2.0))
        s = rng.normal(size=k) * 2
        p = np.asarray(regularised_argmax(s, regulariser, alpha, temperature=tau))
        best = _objective(p, s, regulariser, alpha, tau)
        assert float(regularised_objective(p, s, regulariser, alpha, tau)) == pytest.approx(best)
        res = minimize(
            lambda q, s=s, tau=tau: -_objective(q, s, regulariser, alpha, tau),
            np.full(k, 1 / k),
            method="SLSQP",
            bounds=[(0, 1)] * k,
            constraints=[{"type": "eq", "fun": lambda q: q.sum() - 1}],
            options={"ftol": 1e-14, "maxiter": 500},
        )
        assert -res.fun <= best + 1e-7
        np.testing.assert_allclose(np.clip(res.x, 0, None), p, atol=2e-3)
        # and no random feasible point does better
        for q in rng.dirichlet(np.full(k, 0.5), size=500):
            assert _objective(q, s, regulariser, alpha, tau) <= best + 1e-12


def test_zero_temperature_is_the_lp_vertex():
    s = jnp.array([0.3, 1.2, -0.5, 1.1])
    vertex = np.array([0.0, 1.0, 0.0, 0.0])
    for reg, alpha in (("shannon", None), ("gini", None), ("tsallis", 1.5)):
        np.testing.assert_array_equal(regularised_argmax(s, reg, alpha, temperature=0), vertex)
        near = regularised_argmax(s, reg, alpha, temperature=1e-3)
        np.testing.assert_allclose(near, vertex, atol=1e-20 if reg != "shannon" else 1e-40)
    # the sparse maps reach the vertex at a finite temperature, softmax only in the limit
    assert sparsemax(s, temperature=0.1)[1] == 1.0
    assert 0 < softmax(s, temperature=0.1)[3] < 1


@pytest.mark.parametrize("fn", [sparsemax, entmax15, lambda s: entmax_bisect(s, 1.7)])
def test_custom_jvp_matches_finite_differences(fn):
    s = jnp.asarray(np.random.default_rng(4).normal(size=(5, 7)) * 1.5)
    check_grads(fn, (s,), order=1, modes=["fwd", "rev"], atol=1e-6, rtol=1e-6)
    # a directional derivative of the support-restricted map by central differences
    d = jnp.asarray(np.random.default_rng(5).normal(size=s.shape))
    eps = 1e-6
    fd = (fn(s + eps * d) - fn(s - eps * d)) / (2 * eps)
    _, jvp = jax.jvp(fn, (s,), (d,))
    np.testing.assert_allclose(jvp, fd, atol=1e-7)
    # outputs stay on the simplex, so tangents sum to zero
    np.testing.assert_allclose(jvp.sum(-1), 0.0, atol=1e-12)


def test_float32():
    s = jnp.asarray(np.random.default_rng(6).normal(size=(3, 8)), jnp.float32)
    for fn in (softmax, sparsemax, entmax15, lambda x: entmax_bisect(x, 1.5)):
        p = fn(s)
        assert p.dtype == jnp.float32
        np.testing.assert_allclose(p.sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(entmax_bisect(s, 1.5), entmax15(s), atol=1e-5)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: entmax_bisect(X, 1.0), "alpha"),
        (lambda: entmax_bisect(X, 0.5), "alpha"),
        (lambda: regularised_argmax(X, "tsallis", alpha=1.0), "alpha"),
        (lambda: regularised_argmax(X, "tsallis"), "alpha"),
        (lambda: regularised_argmax(X, "renyi"), "regulariser"),
        (lambda: regularised_argmax(X, "shannon", alpha=2.0), "alpha"),
        (lambda: softmax(X, temperature=0.0), "temperature"),
        (lambda: sparsemax(X, temperature=-1.0), "temperature"),
        (lambda: entmax15(jnp.array([1.0, jnp.nan])), "scores"),
        (lambda: sparsemax(jnp.array(1.0)), "scores"),
        (lambda: softmax(X, axis=3), "axis"),
        (lambda: entmax_bisect(X, 1.5, num_iters=0), "num_iters"),
    ],
)
def test_bad_input(call, name):
    with pytest.raises(ValueError, match=f"^{name}"):
        call()


def test_fully_masked_rows_give_zeros_and_large_scores_stay_on_the_simplex():
    row = jnp.array([[-jnp.inf, -jnp.inf, -jnp.inf], [0.0, -jnp.inf, 1.0]])
    for fn in (softmax, sparsemax, entmax15, lambda x: entmax_bisect(x, 1.7)):
        p = np.asarray(fn(row))
        assert np.all(p[0] == 0) and np.all(np.isfinite(p))
        np.testing.assert_allclose(p[1].sum(), 1.0, atol=1e-12)
    # float32 with a huge common offset: shift invariance keeps the sums exact
    big = jnp.asarray([2e6, 2e6 - 0.25, 2e6 - 0.5], jnp.float32)
    small = jnp.asarray([0.0, -0.25, -0.5], jnp.float32)
    for fn in (sparsemax, entmax15, lambda x: entmax_bisect(x, 1.5)):
        np.testing.assert_allclose(fn(big), fn(small), atol=1e-6)
    np.testing.assert_allclose(sparsemax(small), [7 / 12, 4 / 12, 1 / 12], atol=1e-6)


def test_overflowing_temperature_is_refused():
    s = jnp.asarray([3e38, 0.0], jnp.float32)
    for fn in (softmax, sparsemax, entmax15, lambda x, **k: entmax_bisect(x, 1.5, **k)):
        with pytest.raises(ValueError, match="^temperature"):
            fn(s, temperature=0.5)


def test_regularised_argmax_jits_over_the_temperature():
    s = jnp.array([0.3, 1.2, -0.5])
    jitted = jax.jit(lambda t: regularised_argmax(s, "gini", temperature=t))
    np.testing.assert_allclose(jitted(0.7), regularised_argmax(s, "gini", temperature=0.7))


# ----------------------------------------------------------------------------- bad input (issue 12)
#
# Every weight map of this module against NaN / inf, empty, wrong-rank, complex and non-numeric
# scores, bad temperatures, alphas, axes, names and scores whose division by the temperature
# overflows: refused with a ValueError naming the argument before any JAX tracing (finding 4:
# ``regularised_argmax`` refuses empty and complex scores by name; a fully masked row gets zero
# weights at temperature 0 as at temperature > 0).

S = np.array([-2.0, 0.0, 0.5])  # scores (K,) = (3,)
P3 = np.array([0.2, 0.3, 0.5])  # a point of the simplex


def _simplex_maps():
    """Every weight map of attnbayes.inference.attention.simplex, as f(scores, temperature=...,
    axis=...)."""
    return {
        "softmax": softmax,
        "sparsemax": sparsemax,
        "entmax15": entmax15,
        "entmax_bisect": lambda s, **kw: entmax_bisect(s, 1.3, **kw),
        "regularised_argmax-shannon": lambda s, **kw: regularised_argmax(s, "shannon", **kw),
        "regularised_argmax-gini": lambda s, **kw: regularised_argmax(s, "gini", **kw),
        "regularised_argmax-tsallis": lambda s, **kw: regularised_argmax(s, "tsallis", 1.5, **kw),
        "regularised_argmax-t0": lambda s, **kw: regularised_argmax(
            s, "gini", **{"temperature": 0.0, **kw}
        ),
    }


def _cases():
    """(id, callable, anchored pattern)."""
    cases = []

    def add(label, call, pattern):
        cases.append((label, call, pattern))

    # -------------------------------------------------------- attnbayes.inference.attention.simplex
    for fn_name, fn in _simplex_maps().items():
        for label, s in bad_arrays(S, wrong_rank=np.float64(1.0), neg_inf_allowed=True).items():
            if label == "ragged":
                continue
            add(f"{fn_name}-scores-{label}", lambda fn=fn, s=s: fn(s), "^scores: ")
        for label, t in BAD_TEMPERATURES.items():
            add(
                f"{fn_name}-temperature-{label}",
                lambda fn=fn, t=t: fn(S, temperature=t),
                "^temperature: ",
            )
        add(f"{fn_name}-axis-range", lambda fn=fn: fn(S, axis=3), "^axis: ")
        add(f"{fn_name}-axis-float", lambda fn=fn: fn(S, axis=0.5), "^axis: ")
        add(f"{fn_name}-axis-none", lambda fn=fn: fn(S, axis=None), "^axis: ")
        if fn_name != "regularised_argmax-t0":
            # float32 scores whose division by the temperature overflows float32
            big = np.array([3e38, 0.0], np.float32)
            add(
                f"{fn_name}-temperature-overflow",
                lambda fn=fn, big=big: fn(big, temperature=0.5),
                "^temperature: .*float32",
            )
            # a temperature below the smallest normal number is flushed to zero by XLA
            add(
                f"{fn_name}-temperature-subnormal",
                lambda fn=fn: fn(np.zeros(3), temperature=1e-320),
                "^temperature: ",
            )
    for fn_name in ("softmax", "sparsemax", "entmax15", "entmax_bisect"):
        fn = _simplex_maps()[fn_name]
        add(f"{fn_name}-temperature-zero", lambda fn=fn: fn(S, temperature=0.0), "^temperature: ")
    for label, a in BAD_ALPHAS.items():
        add(f"entmax_bisect-alpha-{label}", lambda a=a: entmax_bisect(S, a), "^alpha: ")
        add(
            f"regularised_argmax-alpha-{label}",
            lambda a=a: regularised_argmax(S, "tsallis", a),
            "^alpha: ",
        )
        add(
            f"regularised_objective-alpha-{label}",
            lambda a=a: regularised_objective(P3, S, "tsallis", a),
            "^alpha: ",
        )
        add(
            f"regulariser_value-alpha-{label}",
            lambda a=a: regulariser_value(P3, "tsallis", a),
            "^alpha: ",
        )
    add("regularised_argmax-alpha-missing", lambda: regularised_argmax(S, "tsallis"), "^alpha: ")
    add(
        "regularised_argmax-alpha-unused",
        lambda: regularised_argmax(S, "shannon", alpha=2.0),
        "^alpha: ",
    )
    for label, n in {"zero": 0, "negative": -2, "float": 2.5, "bool": True, "str": "5"}.items():
        add(
            f"entmax_bisect-num_iters-{label}",
            lambda n=n: entmax_bisect(S, 1.5, num_iters=n),
            "^num_iters: ",
        )
    for label, name in BAD_NAMES.items():
        add(
            f"regularised_argmax-regulariser-{label}",
            lambda name=name: regularised_argmax(S, name),
            "^regulariser: ",
        )
        add(
            f"regularised_argmax-regulariser-{label}-t0",
            lambda name=name: regularised_argmax(S, name, temperature=0.0),
            "^regulariser: ",
        )
        add(
            f"regularised_objective-regulariser-{label}",
            lambda name=name: regularised_objective(P3, S, name),
            "^regulariser: ",
        )
        add(
            f"regularised_objective-regulariser-{label}-t0",
            lambda name=name: regularised_objective(P3, S, name, temperature=0.0),
            "^regulariser: ",
        )
        add(
            f"regulariser_value-regulariser-{label}",
            lambda name=name: regulariser_value(P3, name),
            "^regulariser: ",
        )
    for label, p in bad_arrays(P3, wrong_rank=np.float64(0.5)).items():
        if label == "ragged":
            continue
        add(f"regularised_objective-p-{label}", lambda p=p: regularised_objective(p, S), "^p: ")
        add(f"regulariser_value-p-{label}", lambda p=p: regulariser_value(p), "^p: ")
    add("regularised_objective-p-shape", lambda: regularised_objective(P3[:2], S), "^p: ")
    for label, s in bad_arrays(S, wrong_rank=np.float64(1.0), neg_inf_allowed=True).items():
        if label == "ragged":
            continue
        add(
            f"regularised_objective-scores-{label}",
            lambda s=s: regularised_objective(P3, s),
            "^scores: ",
        )
    for label, t in BAD_TEMPERATURES.items():
        add(
            f"regularised_objective-temperature-{label}",
            lambda t=t: regularised_objective(P3, S, temperature=t),
            "^temperature: ",
        )
    add("regulariser_value-axis", lambda: regulariser_value(P3, axis=2), "^axis: ")
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


@pytest.mark.parametrize(
    ("regulariser", "alpha"),
    [("shannon", None), ("gini", None), ("tsallis", 1.5), ("tsallis", 1.3)],
)
def test_fully_masked_row_gets_zero_weights_at_every_temperature(regulariser, alpha):
    """All zeros, as the maps document for temperature > 0 (at 0 the vertex was e_0)."""
    s = np.array([[-np.inf, -np.inf, -np.inf], [0.0, -np.inf, 1.0], [2.0, 2.0, -np.inf]])
    expected = np.array([[0.0, 0.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    vertex = np.asarray(regularised_argmax(s, regulariser, alpha, temperature=0.0))
    np.testing.assert_array_equal(vertex, expected)
    warm = np.asarray(regularised_argmax(s, regulariser, alpha, temperature=0.7))
    np.testing.assert_array_equal(warm[0], vertex[0])
    # along another axis too
    vertex_t = np.asarray(regularised_argmax(s.T, regulariser, alpha, temperature=0.0, axis=0))
    np.testing.assert_array_equal(vertex_t, expected.T)


@pytest.mark.parametrize(
    ("scores", "pattern"),
    [
        (np.zeros(0), "^scores: "),
        (np.zeros((2, 0)), "^scores: "),
        (np.array([1.0 + 1j, 0.0]), "^scores: "),
    ],
)
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_regularised_argmax_refuses_empty_and_complex_scores(scores, pattern, temperature):
    with pytest.raises(ValueError, match=pattern) as excinfo:
        regularised_argmax(scores, "gini", temperature=temperature)
    assert type(excinfo.value) is ValueError
