"""Bad input is refused with a ValueError naming the argument, before JAX sees it.

Also: the 1-D Wasserstein distance and the discrete posterior intervals of
``attnbayes.inference.deconvolution.comparison`` against SciPy and a brute-force loop.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from raising import jax_frames
from scipy.stats import wasserstein_distance

from attnbayes.inference.deconvolution import em
from attnbayes.inference.deconvolution.comparison import (
    compare_deconvolution,
    discrete_posterior_intervals,
    wasserstein1,
)
from attnbayes.models.deconvolution import (
    DiscreteMeasure,
    deconvolution_model,
    get_measure,
    simulate,
)

X1 = np.array([-1.0, 0.5, 2.0, 3.0])  # (N,) with N = 4
A1 = np.array([-1.0, 2.0])
W1 = np.array([0.5, 0.5])
X2 = np.array([[0.0, 1.0], [1.0, 0.0], [2.0, 2.0]])  # (N, p) = (3, 2)
A2 = np.array([[0.0, 0.0], [1.0, 1.0]])


def _with_x(x):
    return np.array(x, dtype=np.float64)


X_NAN = _with_x([-1.0, np.nan, 2.0, 3.0])
X_INF = _with_x([[0.0, 1.0], [np.inf, 0.0], [2.0, 2.0]])
X_3D = np.zeros((3, 2, 2))
X_NOCOLS = np.zeros((3, 0))
X_EMPTY = np.zeros((0,))
X_EMPTY_2D = np.zeros((0, 2))


def _em_calls(x, atoms, weights, sigma):
    """Every public EM entry point on one problem, labelled."""
    return {
        "fit_em": lambda: em.fit_em(x, sigma, num_atoms=None if atoms is None else len(atoms)),
        "em_step": lambda: em.em_step(x, atoms, weights, sigma),
        "posterior_mean": lambda: em.posterior_mean(x, atoms, weights, sigma),
        "log_likelihood": lambda: em.log_likelihood(x, atoms, weights, sigma),
        "responsibilities": lambda: em.responsibilities(x, atoms, weights, sigma),
    }


def _cases():
    """(id, callable, anchored pattern)."""
    cases = []
    bad_x = {
        "nan": (X_NAN, A1, W1),
        "inf": (X_INF, A2, W1),
        "rank3": (X_3D, A2, W1),
        "zero_cols": (X_NOCOLS, A2, W1),
        "empty": (X_EMPTY, A1, W1),
        "empty_2d": (X_EMPTY_2D, A2, W1),
    }
    for label, (x, atoms, weights) in bad_x.items():
        for fn, call in _em_calls(x, atoms, weights, 1.0).items():
            cases.append((f"{fn}-x-{label}", call, "^x: "))
    for sigma in (0.0, -1.0, np.nan, np.inf, "1.0", np.array([1.0, 2.0])):
        for fn, call in _em_calls(X1, A1, W1, sigma).items():
            cases.append((f"{fn}-sigma-{sigma!r}", call, "^sigma: "))
    for sigma in (np.nan, np.inf, 0.0, -2.0):
        cases.append(
            (
                f"simulate-sigma-{sigma!r}",
                lambda s=sigma: simulate(jax.random.key(0), "three-atoms", s, 10),
                "^sigma: ",
            )
        )
    for k in (0, -1, 5, 2.0, True):  # 5 > N = 4 with init="data"; non-integers refused
        cases.append(
            (f"fit_em-num_atoms-{k!r}", lambda k=k: em.fit_em(X1, 1.0, num_atoms=k), "^num_atoms: ")
        )
    cases += [
        ("initial_atoms-num_atoms-too-many", lambda: em.initial_atoms(X2, 4), "^num_atoms: "),
        ("simulate-measure", lambda: simulate(jax.random.key(0), "bogus", 1.0, 5), "^measure: "),
        ("get_measure", lambda: get_measure("bogus"), "^measure: "),
        ("get_measure-not-str", lambda: get_measure(3), "^measure: "),
        (
            "simulate-measure-weights",
            lambda: simulate(jax.random.key(0), DiscreteMeasure(A1, np.array([0.5, 0.6])), 1.0, 5),
            r"^measure\.weights: ",
        ),
        ("em_step-weights-sum", lambda: em.em_step(X1, A1, [0.5, 0.6], 1.0), "^weights: "),
        ("em_step-weights-neg", lambda: em.em_step(X1, A1, [1.5, -0.5], 1.0), "^weights: "),
        ("em_step-weights-len", lambda: em.em_step(X1, A1, [0.2, 0.3, 0.5], 1.0), "^weights: "),
        (
            "fit_em-weights-sum",
            lambda: em.fit_em(X1, 1.0, num_atoms=2, weights=[0.3, 0.3]),
            "^weights: ",
        ),
        ("em_step-atoms-cols", lambda: em.em_step(X2, np.zeros((2, 3)), W1, 1.0), "^atoms: "),
        ("log_likelihood-atoms-rank", lambda: em.log_likelihood(X2, A1, W1, 1.0), "^atoms: "),
        ("posterior_mean-atoms-rank", lambda: em.posterior_mean(X1, A2, W1, 1.0), "^atoms: "),
        ("em_step-atoms-nan", lambda: em.em_step(X1, [0.0, np.nan], W1, 1.0), "^atoms: "),
        (
            "fit_em-init-cols",
            lambda: em.fit_em(X2, 1.0, init=np.zeros((2, 3))),
            "^init: ",
        ),
        ("fit_em-init-name", lambda: em.fit_em(X2, 1.0, init="kmeans"), "^init: "),
        ("fit_em-max_iters", lambda: em.fit_em(X1, 1.0, max_iters=-1), "^max_iters: "),
        ("fit_em-tol", lambda: em.fit_em(X1, 1.0, tol=-1e-3), "^tol: "),
        (
            "model-prior",
            lambda: deconvolution_model(X1, sigma=1.0, num_atoms=2, prior="bogus"),
            "^prior: ",
        ),
        ("model-sigma", lambda: deconvolution_model(X1, sigma=0, num_atoms=2), "^sigma: "),
        (
            "model-num_atoms",
            lambda: deconvolution_model(X1, sigma=1.0, num_atoms=0),
            "^num_atoms: ",
        ),
        (
            "model-num_points",
            lambda: deconvolution_model(None, sigma=1.0, num_atoms=2),
            "^num_points: ",
        ),
        ("model-x-nan", lambda: deconvolution_model(X_NAN, sigma=1.0, num_atoms=2), "^x: "),
        (
            "model-x-list-nan",
            lambda: deconvolution_model([0.1, float("nan")], sigma=1.0, num_atoms=2),
            "^x: ",
        ),
        (
            "model-concentration",
            lambda: deconvolution_model(X1, sigma=1.0, num_atoms=2, concentration=-1.0),
            "^concentration: ",
        ),
        (
            "model-ordered-vector",
            lambda: deconvolution_model(X2, sigma=1.0, num_atoms=2, ordered=True),
            "^ordered: ",
        ),
        (
            "compare-methods",
            lambda: compare_deconvolution(None, X1, 1.0, methods=("bogus",)),
            "^methods: ",
        ),
        (
            "compare-nuts-key",
            lambda: compare_deconvolution(None, X1, 1.0, methods=("nuts",)),
            "^key: ",
        ),
        (
            "compare-oracle",
            lambda: compare_deconvolution(None, X1, 1.0, methods=("oracle",)),
            "^true_measure: ",
        ),
        ("compare-x-nan", lambda: compare_deconvolution(None, X_NAN, 1.0), "^x: "),
    ]
    return cases


CASES = _cases()


@pytest.mark.usefixtures("full_tracebacks")
@pytest.mark.parametrize(("call", "pattern"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_raises_before_jax(call, pattern):
    with pytest.raises(ValueError, match=pattern) as excinfo:
        call()
    # A plain ValueError, not a subclass coming out of JAX tracing.
    assert type(excinfo.value) is ValueError
    assert not jax_frames(excinfo)


@pytest.mark.usefixtures("full_tracebacks")
def test_jax_frame_check_detects_jax_errors():
    """The check above can fail: an error raised inside JAX (jitted or not) shows jax/_src."""
    with pytest.raises(ValueError) as excinfo:
        jnp.einsum("ij,jk->ik", jnp.ones((2, 3)), jnp.ones((4, 2)))
    assert jax_frames(excinfo)
    with pytest.raises(TypeError) as excinfo:
        jax.jit(lambda a: a.reshape(7))(jnp.ones(3))
    assert jax_frames(excinfo)


def test_ids_are_unique():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))


# ----------------------------------------------------------------------------- compare helpers


@pytest.mark.parametrize("seed", range(6))
def test_wasserstein1_matches_scipy(seed):
    rng = np.random.default_rng(seed)
    ka, kb = rng.integers(1, 8, size=2)
    a = rng.normal(0, 2, ka)
    b = rng.normal(0.5, 1, kb)
    if seed % 2:  # shared atoms (ties across the two measures)
        b[: min(ka, kb)] = a[: min(ka, kb)]
    wa = rng.dirichlet(np.ones(ka))
    wb = rng.dirichlet(np.ones(kb))
    expected = wasserstein_distance(a, b, wa, wb)
    np.testing.assert_allclose(wasserstein1(a, wa, b, wb), expected, rtol=1e-12, atol=1e-14)
    # Symmetric, zero on itself, accepts (K, 1) atoms and JAX arrays.
    np.testing.assert_allclose(wasserstein1(b, wb, a, wa), expected, rtol=1e-12, atol=1e-14)
    assert wasserstein1(a, wa, a, wa) == 0.0
    np.testing.assert_allclose(
        wasserstein1(jnp.asarray(a[:, None]), jnp.asarray(wa), b[:, None], wb),
        expected,
        rtol=1e-12,
        atol=1e-14,
    )


def test_wasserstein1_point_masses():
    assert wasserstein1([1.0], [1.0], [3.5], [1.0]) == pytest.approx(2.5, rel=1e-15)
    # Moving mass 0.3 from 0 to 2: W1 = 0.6.
    got = wasserstein1([0.0, 2.0], [1.0, 0.0], [0.0, 2.0], [0.7, 0.3])
    assert got == pytest.approx(0.6, rel=1e-14)


def _brute_quantile(values, probs, q):
    """Smallest value v with P(Z <= v) >= q for Z ~ sum_k probs_k delta(values_k)."""
    total = sum(probs)
    best = None
    for v in sorted(set(values)):
        cdf = sum(p for u, p in zip(values, probs, strict=True) if u <= v) / total
        if cdf >= q:
            best = v
            break
    return max(values) if best is None else best


def test_discrete_posterior_intervals_brute_force():
    rng = np.random.default_rng(7)
    n, k, p = 6, 5, 2
    atoms = rng.normal(size=(k, p))
    resp = rng.dirichlet(np.full(k, 0.7), size=n)
    resp[0] = [0, 0, 1, 0, 0]  # a point mass: the interval collapses to that atom
    resp[1, 3] = 0.0
    resp[1] /= resp[1].sum()
    probs = (0.5, 0.8, 0.9)
    out = discrete_posterior_intervals(resp, atoms, probs)
    assert set(out) == set(probs)
    for prob in probs:
        lower, upper = out[prob]
        assert lower.shape == upper.shape == (n, p)
        for i in range(n):
            for j in range(p):
                vals, ps = list(atoms[:, j]), list(resp[i])
                assert lower[i, j] == _brute_quantile(vals, ps, (1 - prob) / 2), (prob, i, j)
                assert upper[i, j] == _brute_quantile(vals, ps, (1 + prob) / 2), (prob, i, j)
        assert np.all(lower <= upper)
        np.testing.assert_array_equal(lower[0], atoms[2])
        np.testing.assert_array_equal(upper[0], atoms[2])


def test_check_real_scalar_and_any_traced():
    """Concrete numbers come back as floats (bools, strings, vectors refused); a 0-d tracer
    comes back unchanged (only its shape and dtype checked); a traced vector is refused."""
    from attnbayes import validation

    assert validation.check_real_scalar("tol", 3, "a number") == 3.0
    assert validation.check_real_scalar("tol", np.float32(0.5), "a number") == 0.5
    assert validation.check_real_scalar("tol", jnp.asarray(2.0), "a number") == 2.0
    for bad in (True, "1e-8", None, [1e-8], np.zeros(2), 1j):
        with pytest.raises(ValueError, match="^tol: expected a number"):
            validation.check_real_scalar("tol", bad, "a number")

    def traced(t):
        assert validation.any_traced(1.0, (np.zeros(2), {"t": t}))
        return validation.check_real_scalar("tol", t, "a number") * 2

    assert float(jax.jit(traced)(1.5)) == 3.0
    assert not validation.any_traced(1.0, (np.zeros(2), {"t": jnp.ones(2)}))
    with pytest.raises(ValueError, match="^tol: expected a number, got a traced array"):
        jax.jit(lambda t: validation.check_real_scalar("tol", t, "a number"))(jnp.ones(2))


def test_discrete_posterior_intervals_traced():
    """Under jax.jit the intervals are computed in JAX by the same rule as in NumPy."""
    rng = np.random.default_rng(3)
    resp = rng.dirichlet(np.ones(6), size=5)
    atoms = rng.normal(size=(6, 2))
    eager = discrete_posterior_intervals(resp, atoms, (0.5, 0.9))
    traced = jax.jit(lambda r, a: discrete_posterior_intervals(r, a, (0.5, 0.9)))(resp, atoms)
    for prob in (0.5, 0.9):
        for side in (0, 1):
            np.testing.assert_array_equal(traced[prob][side], eager[prob][side])
