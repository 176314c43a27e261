"""Bad input to the deconvolution functions (issue 12): refused before any JAX tracing.

The project's standard: a ``ValueError`` (or ``TypeError``) raised before tracing whose message
starts with the argument's name; never a cryptic traceback, a silent NaN or a wrong answer.
``tests/test_validation.py`` holds the older EM catalogue; this one covers what it does not:
every public function of ``attnbayes.inference.deconvolution.em``,
``attnbayes.inference.deconvolution.kiefer_wolfowitz`` and ``attnbayes.models.deconvolution``
against huge values, NaN/inf, empty, complex and wrong-rank arrays and bad scalars. Every array is
tiny, so each case runs in milliseconds.

Also here, the regression tests of issue 12:

- finding 2: data (and atoms or grid points) whose spread in units of sigma makes the squared
  distances overflow are refused, naming the argument and the limit; just inside the limit
  every entry point returns finite numbers; under ``jax.jit`` (no checks) the overflow shows
  as NaN / -inf, and ``attnbayes.inference.deconvolution.em.check_problem`` refuses the concrete
  inputs;
- finding 5: one outlier 1e6 sigma away leaves the float32 fit of the bulk within 1e-3 sigma of
  the float64 fit (dense, streamed and sharded);
- finding 9: ``attnbayes.inference.deconvolution.em.estep_memory_bytes`` against XLA's compiled
  memory analysis.
"""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import pytest
from raising import jax_frames

from attnbayes import validation
from attnbayes.inference.deconvolution import em
from attnbayes.inference.deconvolution.kiefer_wolfowitz import (
    NPMLEResult,
    default_grid,
    npmle,
    npmle_gradient,
    npmle_posterior,
)
from attnbayes.models.deconvolution import (
    DiscreteMeasure,
    check_measure,
    deconvolution_model,
    get_measure,
    simulate,
)

X1 = np.array([-1.0, 0.5, 2.0, 3.0])  # (N,) with N = 4
A1 = np.array([-1.0, 2.0])
W1 = np.array([0.5, 0.5])
X2 = np.array([[0.0, 1.0], [1.0, 0.0], [2.0, 2.0]])  # (N, p) = (3, 2)
A2 = np.array([[0.0, 0.0], [1.0, 1.0]])
GRID1 = np.linspace(-1.0, 3.0, 5)
FIT1 = NPMLEResult(GRID1, np.full(5, 0.2), 0.0, 0, True, 0.0)

# Spreads far beyond the limit sqrt(finfo.max / (4 N p)) (3.4e153 in float64, 4.6e18 in
# float32 for N = 4, p = 1), but every value finite.
HUGE64 = 1e160
HUGE32 = np.float32(1e20)
X1_HUGE = np.array([-1.0, 0.5, 2.0, HUGE64])
X1_HUGE32 = np.array([-1.0, 0.5, 2.0, HUGE32], np.float32)
X2_HUGE = np.array([[0.0, 1.0], [1.0, -HUGE64], [2.0, 2.0]])
X1_COMPLEX = X1 + 0j
X_3D = np.zeros((3, 2, 2))


def _seeded_model(*args, **kwargs):
    """Run ``deconvolution_model`` under a seed handler (so a call that passes validation
    samples instead of failing for want of a PRNG key)."""
    return numpyro.handlers.seed(deconvolution_model, 0)(*args, **kwargs)


def _x64_off(fn, *args, **kwargs):
    """Call ``fn`` with jax_enable_x64 off (float64 input is then computed in float32)."""
    with jax.enable_x64(False):
        return fn(*args, **kwargs)


def _em_entry_points(x, atoms, weights, sigma, **kwargs):
    """Every public EM function that takes (x, atoms, weights, sigma), dense and streamed."""
    return {
        "em_step": lambda: em.em_step(x, atoms, weights, sigma, **kwargs),
        "em_step-streamed": lambda: em.em_step(x, atoms, weights, sigma, block_size=2),
        "posterior_mean": lambda: em.posterior_mean(x, atoms, weights, sigma),
        "posterior_mean-streamed": lambda: em.posterior_mean(
            x, atoms, weights, sigma, block_size=2
        ),
        "log_likelihood": lambda: em.log_likelihood(x, atoms, weights, sigma),
        "log_likelihood-streamed": lambda: em.log_likelihood(
            x, atoms, weights, sigma, block_size=2
        ),
        "responsibilities": lambda: em.responsibilities(x, atoms, weights, sigma),
        "posterior": lambda: em.posterior(x, atoms, weights, sigma),
        "check_problem": lambda: em.check_problem(x, sigma, atoms=atoms, weights=weights),
    }


def _data_entry_points(x, sigma):
    """Every public function that takes data and sigma (and makes its own atoms or grid)."""
    return {
        "fit_em": lambda: em.fit_em(x, sigma, max_iters=2),
        "fit_em-streamed": lambda: em.fit_em(x, sigma, max_iters=2, block_size=2),
        "npmle": lambda: npmle(x, sigma, max_iters=2),
        "npmle-em": lambda: npmle(x, sigma, method="em", max_iters=2),
        "npmle_posterior": lambda: npmle_posterior(x, sigma, FIT1),
        "check_problem-x-only": lambda: em.check_problem(x, sigma),
    }


def _cases():
    """(id, callable, anchored pattern)."""
    cases = []

    def add(label, call, pattern):
        cases.append((label, call, pattern))

    # --- finding 2: spreads whose squares overflow, in x, in atoms / init / grid, by sigma
    for fn, call in _em_entry_points(X1_HUGE, A1, W1, 1.0).items():
        add(f"{fn}-x-huge", call, r"^x: spread .* exceeds .* for float64")
    for fn, call in _em_entry_points(X2_HUGE, A2, W1, 1.0).items():
        add(f"{fn}-x-huge-2d", call, r"^x: spread .* exceeds .* for float64")
    for fn, call in _em_entry_points(X1_HUGE32, A1.astype(np.float32), W1, 1.0).items():
        add(f"{fn}-x-huge-float32", call, r"^x: spread .* exceeds .* for float32")
    for fn, call in _em_entry_points(X1, np.array([-1.0, HUGE64]), W1, 1.0).items():
        add(f"{fn}-atoms-huge", call, "^atoms: spread")
    for fn, call in _data_entry_points(X1_HUGE, 1.0).items():
        add(f"{fn}-x-huge", call, r"^x: spread .* exceeds")
    for fn, call in _data_entry_points(X1_HUGE32, 1.0).items():
        add(f"{fn}-x-huge-float32", call, r"^x: spread .* exceeds .* for float32")
    # sigma small enough that the spread in units of sigma overflows (1 / sigma^2 is finite)
    for fn, call in _data_entry_points(X1, 1e-153).items():
        add(f"{fn}-x-spread-by-sigma", call, r"^x: spread .* exceeds")
    add(
        "fit_em-init-huge",
        lambda: em.fit_em(X1, 1.0, init=np.array([0.0, HUGE64]), max_iters=2),
        "^init: spread",
    )
    add(
        "npmle_gradient-x-huge",
        lambda: npmle_gradient(X1_HUGE, 1.0, GRID1, np.full(5, 0.2)),
        "^x: spread",
    )
    add(
        "npmle_gradient-grid-huge",
        lambda: npmle_gradient(X1, 1.0, np.array([0.0, HUGE64]), W1),
        "^grid: spread",
    )
    add(
        "npmle_posterior-result-atoms-huge",
        lambda: npmle_posterior(
            X1, 1.0, FIT1._replace(atoms=np.array([0.0, 1.0, 2.0, 3.0, HUGE64]))
        ),
        r"^result\.atoms: spread",
    )
    add(
        "default_grid-x-spread-overflows",
        lambda: default_grid(np.array([-1e308, 1e308])),
        "^x: ",
    )
    add(
        "e_step_attention-x-huge",
        lambda: em.e_step_attention(X1_HUGE[:, None], A1[:, None], W1, 1.0),
        "^x: spread",
    )
    # float64 values beyond float32's range, computed in float32 (jax_enable_x64 off)
    beyond = np.array([1e39, 1e39, 1e39])
    add("fit_em-x-beyond-float32", lambda: _x64_off(em.fit_em, beyond, 1.0), "^x: values")
    add("npmle-x-beyond-float32", lambda: _x64_off(npmle, beyond, 1.0), "^x: values")
    add(
        "posterior_mean-atoms-beyond-float32",
        lambda: _x64_off(em.posterior_mean, X1, np.array([0.0, 1e39]), W1, 1.0),
        "^atoms: values",
    )
    add(
        "npmle_gradient-grid-beyond-float32",
        lambda: _x64_off(npmle_gradient, X1, 1.0, np.array([0.0, 1e39]), W1),
        "^grid: values",
    )

    # --- NaN / inf where test_validation.py does not look
    x_nan = np.array([-1.0, np.nan, 2.0, 3.0])
    add("posterior-x-nan", lambda: em.posterior(x_nan, A1, W1, 1.0), "^x: ")
    add("posterior-x-inf", lambda: em.posterior(-np.inf * X1, A1, W1, 1.0), "^x: ")
    add(
        "posterior_mean-atoms-inf",
        lambda: em.posterior_mean(X1, [0.0, np.inf], W1, 1.0),
        "^atoms: ",
    )
    add(
        "log_likelihood-weights-nan",
        lambda: em.log_likelihood(X1, A1, [np.nan, 1.0], 1.0),
        "^weights: ",
    )
    add(
        "fit_em-weights-nan",
        lambda: em.fit_em(X1, 1.0, num_atoms=2, weights=[np.nan, 1.0]),
        "^weights: ",
    )
    add("fit_em-init-inf", lambda: em.fit_em(X1, 1.0, init=[0.0, np.inf]), "^init: ")
    add("initial_atoms-x-nan", lambda: em.initial_atoms(x_nan, 2), "^x: ")
    add(
        "e_step_attention-x-nan",
        lambda: em.e_step_attention(x_nan[:, None], A1[:, None], W1, 1.0),
        "^x: ",
    )
    add("npmle-x-inf", lambda: npmle(np.append(X1, np.inf), 1.0), "^x: ")
    add("npmle-sigma-inf", lambda: npmle(X1, np.inf), "^sigma: ")
    add("npmle_gradient-x-nan", lambda: npmle_gradient(x_nan, 1.0, GRID1, np.full(5, 0.2)), "^x: ")
    add("npmle_gradient-grid-inf", lambda: npmle_gradient(X1, 1.0, [0.0, np.inf], W1), "^grid: ")
    add(
        "npmle_gradient-weights-nan",
        lambda: npmle_gradient(X1, 1.0, A1, [np.nan, 1.0]),
        "^weights: ",
    )
    add("npmle_posterior-x-nan", lambda: npmle_posterior(x_nan, 1.0, FIT1), "^x: ")
    add(
        "npmle_posterior-result-atoms-nan",
        lambda: npmle_posterior(X1, 1.0, FIT1._replace(atoms=np.append(GRID1[:-1], np.nan))),
        r"^result\.atoms: ",
    )
    add(
        "npmle_posterior-result-weights-nan",
        lambda: npmle_posterior(
            X1, 1.0, FIT1._replace(weights=np.append(np.full(4, 0.25), np.nan))
        ),
        r"^result\.weights: ",
    )
    add(
        "npmle_posterior-probs-nan",
        lambda: npmle_posterior(X1, 1.0, FIT1, probs=(np.nan,)),
        "^probs: ",
    )
    add("default_grid-x-nan", lambda: default_grid(x_nan), "^x: ")
    add("default_grid-x-inf-2d", lambda: default_grid(np.array([[0.0, np.inf]])), "^x: ")
    add(
        "check_measure-atoms-inf",
        lambda: check_measure("measure", DiscreteMeasure(np.array([0.0, np.inf]), W1)),
        r"^measure\.atoms: ",
    )
    add(
        "simulate-sigma-nan",
        lambda: simulate(jax.random.key(0), "three-atoms", np.nan, 3),
        "^sigma: ",
    )
    add(
        "model-atom_loc-nan",
        lambda: _seeded_model(X1, sigma=1.0, num_atoms=2, atom_loc=np.nan),
        "^atom_loc: ",
    )
    add(
        "model-atom_scale-inf",
        lambda: _seeded_model(X1, sigma=1.0, num_atoms=2, atom_scale=np.inf),
        "^atom_scale: ",
    )
    add("model-sigma-inf", lambda: _seeded_model(X1, sigma=np.inf, num_atoms=2), "^sigma: ")

    # --- empty arrays
    add("posterior-x-empty", lambda: em.posterior(np.zeros(0), A1, W1, 1.0), "^x: ")
    add("em_step-atoms-empty", lambda: em.em_step(X1, np.zeros(0), np.zeros(0), 1.0), "^atoms: ")
    add(
        "posterior_mean-atoms-empty-2d",
        lambda: em.posterior_mean(X2, np.zeros((0, 2)), np.zeros(0), 1.0),
        "^atoms: ",
    )
    add(
        "log_likelihood-weights-empty",
        lambda: em.log_likelihood(X1, A1, np.zeros(0), 1.0),
        "^weights: ",
    )
    add("fit_em-init-empty", lambda: em.fit_em(X1, 1.0, init=np.zeros(0)), "^init: ")
    add("initial_atoms-init-empty", lambda: em.initial_atoms(X1, init=np.zeros(0)), "^init: ")
    add("initial_atoms-x-empty", lambda: em.initial_atoms(np.zeros(0)), "^x: ")
    add("npmle-x-empty-2d", lambda: npmle(np.zeros((0, 2)), 1.0), "^x: ")
    add(
        "npmle_gradient-grid-empty",
        lambda: npmle_gradient(X1, 1.0, np.zeros(0), np.zeros(0)),
        "^grid: ",
    )
    add("npmle_posterior-x-empty", lambda: npmle_posterior(np.zeros(0), 1.0, FIT1), "^x: ")
    add("default_grid-x-empty", lambda: default_grid(np.zeros(0)), "^x: ")
    add(
        "check_measure-atoms-empty",
        lambda: check_measure("measure", DiscreteMeasure(np.zeros(0), np.zeros(0))),
        r"^measure\.atoms: ",
    )
    add("model-x-empty", lambda: _seeded_model(np.zeros(0), sigma=1.0, num_atoms=2), "^x: ")

    # --- complex values
    add("fit_em-x-complex", lambda: em.fit_em(X1_COMPLEX, 1.0), "^x: ")
    add("em_step-x-complex", lambda: em.em_step(X1_COMPLEX, A1, W1, 1.0), "^x: ")
    add("posterior-atoms-complex", lambda: em.posterior(X1, A1 + 1j, W1, 1.0), "^atoms: ")
    add(
        "responsibilities-weights-complex",
        lambda: em.responsibilities(X1, A1, W1 + 0j, 1.0),
        "^weights: ",
    )
    add("log_likelihood-sigma-complex", lambda: em.log_likelihood(X1, A1, W1, 1.0 + 0j), "^sigma: ")
    add("fit_em-init-complex", lambda: em.fit_em(X1, 1.0, init=A1 + 0j), "^init: ")
    add("npmle-x-complex", lambda: npmle(X1_COMPLEX, 1.0), "^x: ")
    add("npmle-grid-complex", lambda: npmle(X1, 1.0, grid=GRID1 + 0j), "^grid: ")
    add(
        "npmle_gradient-weights-complex", lambda: npmle_gradient(X1, 1.0, A1, W1 + 0j), "^weights: "
    )
    add("npmle_posterior-x-complex", lambda: npmle_posterior(X1_COMPLEX, 1.0, FIT1), "^x: ")
    add("default_grid-x-complex", lambda: default_grid(X1_COMPLEX), "^x: ")
    add(
        "simulate-measure-atoms-complex",
        lambda: simulate(jax.random.key(0), DiscreteMeasure(A1 + 1j, W1), 1.0, 3),
        r"^measure\.atoms: ",
    )
    add("model-x-complex", lambda: _seeded_model(X1_COMPLEX, sigma=1.0, num_atoms=2), "^x: ")
    add("model-sigma-complex", lambda: _seeded_model(X1, sigma=1j, num_atoms=2), "^sigma: ")

    # --- wrong rank
    add("posterior-x-rank3", lambda: em.posterior(X_3D, A2, W1, 1.0), "^x: ")
    add("posterior-x-scalar", lambda: em.posterior(np.float64(1.0), A1, W1, 1.0), "^x: ")
    add("em_step-atoms-rank3", lambda: em.em_step(X2, np.zeros((2, 2, 1)), W1, 1.0), "^atoms: ")
    add("em_step-weights-rank2", lambda: em.em_step(X1, A1, W1[None, :], 1.0), "^weights: ")
    add("fit_em-init-rank2-for-1d", lambda: em.fit_em(X1, 1.0, init=A2), "^init: ")
    add("initial_atoms-x-rank3", lambda: em.initial_atoms(X_3D), "^x: ")
    add(
        "e_step_attention-x-rank1",
        lambda: em.e_step_attention(X1, A1, W1, 1.0),
        "^x: ",
    )
    add("npmle_gradient-x-rank3", lambda: npmle_gradient(X_3D, 1.0, A2, W1), "^x: ")
    add(
        "npmle_gradient-grid-rank3",
        lambda: npmle_gradient(X2, 1.0, np.zeros((2, 2, 1)), W1),
        "^grid: ",
    )
    add(
        "npmle_gradient-weights-rank2",
        lambda: npmle_gradient(X1, 1.0, A1, W1[None, :]),
        "^weights: ",
    )
    add("npmle_posterior-x-rank3", lambda: npmle_posterior(X_3D, 1.0, FIT1), "^x: ")
    add(
        "npmle_posterior-x-2d-for-1d-fit",
        lambda: npmle_posterior(X2, 1.0, FIT1),
        r"^result\.atoms: ",
    )
    add("default_grid-x-rank3", lambda: default_grid(X_3D), "^x: ")
    add(
        "check_measure-atoms-rank3",
        lambda: check_measure("measure", DiscreteMeasure(np.zeros((2, 1, 1)), W1)),
        r"^measure\.atoms: ",
    )
    add("model-x-rank3", lambda: _seeded_model(X_3D, sigma=1.0, num_atoms=2), "^x: ")
    add(
        "model-atom_loc-shape",
        lambda: _seeded_model(X2, sigma=1.0, num_atoms=2, atom_loc=np.zeros(3)),
        "^atom_loc: ",
    )

    # --- bad sigma where test_validation.py does not look
    for label, sigma in (
        ("zero", 0.0),
        ("negative", -1.0),
        ("nan", np.nan),
        ("str", "1.0"),
        ("vector", np.ones(2)),
        ("bool", True),
        ("none", None),
        ("underflow", 1e-300),
    ):
        add(f"posterior-sigma-{label}", lambda s=sigma: em.posterior(X1, A1, W1, s), "^sigma: ")
        add(
            f"npmle_gradient-sigma-{label}",
            lambda s=sigma: npmle_gradient(X1, s, A1, W1),
            "^sigma: ",
        )
        add(
            f"npmle_posterior-sigma-{label}",
            lambda s=sigma: npmle_posterior(X1, s, FIT1),
            "^sigma: ",
        )
        add(
            f"fit_em-streamed-sigma-{label}",
            lambda s=sigma: em.fit_em(X1, s, block_size=2),
            "^sigma: ",
        )
    add("check_problem-sigma-zero", lambda: em.check_problem(X1, 0.0), "^sigma: ")
    add(
        "simulate-sigma-str", lambda: simulate(jax.random.key(0), "three-atoms", "1", 3), "^sigma: "
    )
    add(
        "simulate-sigma-vector",
        lambda: simulate(jax.random.key(0), "three-atoms", W1, 3),
        "^sigma: ",
    )
    add("model-sigma-vector", lambda: _seeded_model(X1, sigma=W1, num_atoms=2), "^sigma: ")
    add(
        "model-sigma-underflow",
        lambda: _seeded_model(X1, sigma=1e-200, num_atoms=2),
        "^sigma: ",
    )
    add(
        "simulate-sigma-overflow",
        lambda: simulate(jax.random.key(0), "three-atoms", 1e308, 50),
        "^sigma: ",
    )
    add(
        "model-x-huge",
        lambda: _seeded_model(X1_HUGE, sigma=1.0, num_atoms=2),
        "^x: ",
    )

    # --- num_atoms, block_size, num_devices, grid, grid_size, max_iters, tol and the like
    for label, k in (("zero", 0), ("float", 2.5), ("bool", True), ("str", "2"), ("none-list", [2])):
        add(f"initial_atoms-num_atoms-{label}", lambda k=k: em.initial_atoms(X1, k), "^num_atoms: ")
    add(
        "fit_em-num_atoms-vs-init", lambda: em.fit_em(X1, 1.0, num_atoms=3, init=A1), "^num_atoms: "
    )
    add(
        "fit_em-weights-vs-num_atoms",
        lambda: em.fit_em(X1, 1.0, num_atoms=3, weights=W1),
        "^weights: ",
    )
    for label, b in (("zero", 0), ("negative", -1), ("float", 2.5), ("bool", True), ("str", "4")):
        add(
            f"fit_em-block_size-{label}",
            lambda b=b: em.fit_em(X1, 1.0, block_size=b),
            "^block_size: ",
        )
        add(
            f"log_likelihood-block_size-{label}",
            lambda b=b: em.log_likelihood(X1, A1, W1, 1.0, block_size=b),
            "^block_size: ",
        )
        add(
            f"posterior_mean-block_size-{label}",
            lambda b=b: em.posterior_mean(X1, A1, W1, 1.0, block_size=b),
            "^block_size: ",
        )
    add(
        "posterior_mean-num_devices-float",
        lambda: em.posterior_mean(X1, A1, W1, 1.0, block_size=2, num_devices=1.5),
        "^num_devices: ",
    )
    for label, m in (("float", 2.5), ("bool", True), ("str", "10"), ("none", None)):
        add(
            f"fit_em-max_iters-{label}", lambda m=m: em.fit_em(X1, 1.0, max_iters=m), "^max_iters: "
        )
    for label, m in (("float", 2.5), ("bool", True), ("negative", -3)):
        add(f"npmle-max_iters-{label}", lambda m=m: npmle(X1, 1.0, max_iters=m), "^max_iters: ")
    for label, t in (
        ("nan", np.nan),
        ("str", "1e-8"),
        ("bool", True),
        ("none", None),
        ("vec", [1e-8]),
    ):
        add(f"fit_em-tol-{label}", lambda t=t: em.fit_em(X1, 1.0, tol=t), "^tol: ")
    for label, t in (("negative", -1.0), ("inf", np.inf), ("str", "1e-6"), ("bool", True)):
        add(f"npmle-tol-{label}", lambda t=t: npmle(X1, 1.0, tol=t), "^tol: ")
    for label, u in (("str", "False"), ("none", None), ("int", 2)):
        add(
            f"em_step-update_weights-{label}",
            lambda u=u: em.em_step(X1, A1, W1, 1.0, update_weights=u),
            "^update_weights: ",
        )
        add(
            f"fit_em-update_weights-{label}",
            lambda u=u: em.fit_em(X1, 1.0, update_weights=u),
            "^update_weights: ",
        )
    for label, g in (("one", 1), ("zero", 0), ("float", 2.5), ("bool", True), ("str", "30")):
        add(f"default_grid-grid_size-{label}", lambda g=g: default_grid(X1, g), "^grid_size: ")
    add("npmle-grid_size-bool", lambda: npmle(X1, 1.0, grid_size=True), "^grid_size: ")
    add("npmle-grid-str", lambda: npmle(X1, 1.0, grid="auto"), "^grid: ")
    add("npmle-grid-rank3", lambda: npmle(X2, 1.0, grid=np.zeros((2, 2, 1))), "^grid: ")
    add("npmle-method-none", lambda: npmle(X1, 1.0, method=None), "^method: ")
    add(
        "npmle-target-str",
        lambda: npmle(X1, 1.0, target_log_likelihood="0"),
        "^target_log_likelihood: ",
    )
    add("npmle_gradient-grid-str", lambda: npmle_gradient(X1, 1.0, "auto", W1), "^grid: ")
    for label, probs in (("zero", (0.0,)), ("one", (1.0,)), ("bool", (True,)), ("str", ("0.5",))):
        add(
            f"npmle_posterior-probs-{label}",
            lambda probs=probs: npmle_posterior(X1, 1.0, FIT1, probs=probs),
            "^probs: ",
        )
    add(
        "npmle_posterior-probs-scalar",
        lambda: npmle_posterior(X1, 1.0, FIT1, probs=0.5),
        "^probs: ",
    )
    add("npmle_posterior-result-none", lambda: npmle_posterior(X1, 1.0, None), "^result: ")

    # --- attnbayes.models.deconvolution: simulate, get_measure, DiscreteMeasure, the model
    for label, n in (("zero", 0), ("negative", -2), ("float", 2.5), ("bool", True)):
        add(
            f"simulate-num_points-{label}",
            lambda n=n: simulate(jax.random.key(0), "three-atoms", 1.0, n),
            "^num_points: ",
        )
    for label, key in (
        ("int", 0),
        ("float", np.zeros(2)),
        ("none", None),
        ("batch", jax.random.split(jax.random.key(0))),
    ):
        add(
            f"simulate-key-{label}",
            lambda key=key: simulate(key, "three-atoms", 1.0, 3),
            "^key: ",
        )
    add(
        "simulate-measure-tuple",
        lambda: simulate(jax.random.key(0), (A1, W1), 1.0, 3),
        "^measure: ",
    )
    add(
        "simulate-measure-weights-len",
        lambda: simulate(jax.random.key(0), DiscreteMeasure(A1, np.ones(3) / 3), 1.0, 3),
        r"^measure\.weights: ",
    )
    add("get_measure-ring-num_atoms", lambda: get_measure("ring", num_atoms=0), "^num_atoms: ")
    add("get_measure-ring-radius", lambda: get_measure("ring", radius=-1.0), "^radius: ")
    add(
        "get_measure-sparse-num_nonzero",
        lambda: get_measure("sparse-means", num_nonzero=5, num_points=2),
        "^num_nonzero: ",
    )
    add(
        "get_measure-sparse-num_points",
        lambda: get_measure("sparse-means", num_points=0),
        "^num_points: ",
    )
    add(
        "get_measure-sparse-mean-nan",
        lambda: get_measure("sparse-means", mean=np.nan),
        "^mean: ",
    )
    add(
        "get_measure-unknown-setting",
        lambda: get_measure("three-atoms", radius=2.0),
        "^radius: ",
    )
    add("check_measure-not-a-measure", lambda: check_measure("measure", None), "^measure: ")
    add(
        "check_measure-weights-rank2",
        lambda: check_measure("measure", DiscreteMeasure(A1, W1[None, :])),
        r"^measure\.weights: ",
    )
    for label, k in (("float", 2.5), ("bool", True), ("negative", -1)):
        add(
            f"model-num_atoms-{label}",
            lambda k=k: _seeded_model(X1, sigma=1.0, num_atoms=k),
            "^num_atoms: ",
        )
    add(
        "model-num_points-mismatch",
        lambda: _seeded_model(X1, sigma=1.0, num_atoms=2, num_points=7),
        "^num_points: ",
    )
    add(
        "model-num_points-zero",
        lambda: _seeded_model(None, sigma=1.0, num_atoms=2, num_points=0),
        "^num_points: ",
    )
    add("model-dim-mismatch", lambda: _seeded_model(X2, sigma=1.0, num_atoms=2, dim=3), "^dim: ")
    add("model-dim-scalar-data", lambda: _seeded_model(X1, sigma=1.0, num_atoms=2, dim=2), "^dim: ")
    add(
        "model-dim-zero",
        lambda: _seeded_model(None, sigma=1.0, num_atoms=2, num_points=3, dim=0),
        "^dim: ",
    )
    add(
        "model-atom_scale-zero",
        lambda: _seeded_model(X1, sigma=1.0, num_atoms=2, atom_scale=0.0),
        "^atom_scale: ",
    )
    add(
        "model-prior-none",
        lambda: _seeded_model(X1, sigma=1.0, num_atoms=2, prior=None),
        "^prior: ",
    )
    return cases


CASES = _cases()


def _params():
    params = []
    for label, call, pattern in CASES:
        params.append(pytest.param(call, pattern, id=label))
    return params


@pytest.mark.usefixtures("full_tracebacks")
@pytest.mark.parametrize(("call", "pattern"), _params())
def test_bad_input_is_refused_before_jax(call, pattern):
    with pytest.raises((ValueError, TypeError), match=pattern) as excinfo:
        call()
    # a plain ValueError / TypeError, raised before any tracing (no JAX frames on the way)
    assert type(excinfo.value) in (ValueError, TypeError)
    assert not jax_frames(excinfo)


def test_case_ids_are_unique():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))


# ----------------------------------------------------------------------------- finding 2


def _finite(tree) -> bool:
    """Every numeric leaf finite (method names and flags skipped)."""
    leaves = [np.asarray(leaf) for leaf in jax.tree.leaves(tree)]
    return all(np.all(np.isfinite(a)) for a in leaves if np.issubdtype(a.dtype, np.number))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("dim", [1, 2])
def test_just_inside_the_spread_limit_every_entry_point_is_finite(dtype, dim):
    """At 0.9 times the limit sqrt(finfo.max / (4 N p)) nothing overflows: the safety factor
    covers the sum over p coordinates and the log-likelihood's sum over N points, even with
    every point far from the only atom (log p(x) about -N p D^2 / 2 = -0.1 finfo.max)."""
    n = 4
    d = 0.9 * validation.max_scaled_spread(dtype, n, dim)
    x = np.zeros((n, dim), dtype)
    x[:, 0] = [0.0, 0.5, 1.0, d]
    far_atom = np.full((1, dim), 0.0, dtype)
    far_atom[0, 0] = d
    bulk = x[:3]
    atoms = x[[0, 3]]
    if dim == 1:
        x, far_atom, bulk, atoms = x[:, 0], far_atom[:, 0], bulk[:, 0], atoms[:, 0]
    w = np.array([0.5, 0.5], dtype)
    results = {
        "fit_em": em.fit_em(x, 1.0, max_iters=3),
        "fit_em-streamed": em.fit_em(x, 1.0, max_iters=3, block_size=2),
        "em_step": em.em_step(x, atoms, w, 1.0, update_weights=True),
        "em_step-streamed": em.em_step(x, atoms, w, 1.0, block_size=2),
        "posterior": em.posterior(x, atoms, w, 1.0),
        "posterior_mean-streamed": em.posterior_mean(x, atoms, w, 1.0, block_size=2),
        "log_likelihood-far-atom": em.log_likelihood(bulk, far_atom, np.ones(1), 1.0),
        "log_likelihood-far-atom-streamed": em.log_likelihood(
            bulk, far_atom, np.ones(1), 1.0, block_size=2
        ),
        "npmle-em": npmle(x, 1.0, method="em", max_iters=5),
        "npmle-squarem": npmle(x, 1.0, method="squarem", max_iters=5),
        "npmle_gradient": npmle_gradient(bulk, 1.0, far_atom, np.ones(1)),
        "npmle_posterior": npmle_posterior(x, 1.0, NPMLEResult(atoms, w, 0.0, 0, True, 0.0)),
    }
    for name, result in results.items():
        assert _finite(result), name
    ll = float(results["log_likelihood-far-atom"])
    assert ll < -0.01 * float(np.finfo(dtype).max)  # really that far out


def test_under_jit_the_checks_cannot_run_and_overflow_gives_nan():
    """Tracers carry no values, so the spread check is skipped inside ``jax.jit``; the
    overflow then shows as NaN (never as a plausible finite number), and ``check_problem``
    on the concrete inputs says why."""
    calls = {
        "posterior_mean": lambda x: em.posterior_mean(x, A1, W1, 1.0),
        "posterior_mean-streamed": lambda x: em.posterior_mean(x, A1, W1, 1.0, block_size=2),
        "log_likelihood": lambda x: em.log_likelihood(x, A1, W1, 1.0),
        "log_likelihood-streamed": lambda x: em.log_likelihood(x, A1, W1, 1.0, block_size=2),
        "responsibilities": lambda x: em.responsibilities(x, A1, W1, 1.0),
        "em_step": lambda x: em.em_step(x, A1, W1, 1.0, update_weights=True),
        "em_step-streamed": lambda x: em.em_step(x, A1, W1, 1.0, block_size=2),
        "e_step_attention": lambda x: em.e_step_attention(x[:, None], A1[:, None], W1, 1.0),
    }
    for name, call in calls.items():
        assert _finite(jax.jit(call)(X1)), name
        out = jax.jit(call)(X1_HUGE)
        assert np.any(np.isnan(np.asarray(jax.tree.leaves(out)[0]))), name
    with pytest.raises(ValueError, match=r"^x: spread .* exceeds"):
        em.check_problem(X1_HUGE, 1.0, atoms=A1, weights=W1)
    em.check_problem(X1, 1.0, atoms=A1, weights=W1)  # fine inputs pass


def test_spread_message_names_the_limit():
    limit = validation.max_scaled_spread(np.float64, 4, 1)
    with pytest.raises(ValueError) as excinfo:
        em.fit_em(X1_HUGE, 1.0)
    message = str(excinfo.value)
    assert message.startswith("x: spread (max - min) / sigma = 1e+160 exceeds ")
    assert f"{limit:.2g} for float64" in message and "rescale the data or sigma" in message


# ----------------------------------------------------------------------------- finding 5

_PATHS = {
    "dense": {},
    "streamed": {"block_size": 64, "num_devices": 1},
    "sharded": {"block_size": 64, "num_devices": 2},
}


@pytest.mark.parametrize("path", sorted(_PATHS))
@pytest.mark.parametrize("far", ["one-outlier", "far-cluster"])
def test_float32_bulk_atoms_match_float64_beside_far_points(path, far):
    """200 three-atom points (sigma = 1) plus one point 1e6 sigma away (or a second cluster
    of 40 there): after the same 50 EM steps the float32 atoms started at the bulk points lie
    within 1e-3 sigma of the float64 ones (centring at the mean moved them by up to 2 sigma).
    Both fits see the same float32 numbers; 1e6^2 = 1e12 is far inside float32's range."""
    assert jax.local_device_count() >= 2
    _, bulk = simulate(jax.random.key(0), "three-atoms", 1.0, 200)
    bulk = np.asarray(bulk, np.float32)
    extra = np.float32([1e6]) if far == "one-outlier" else np.float32(1e6) + bulk[:40]
    x32 = np.concatenate([bulk, extra])
    fit32 = em.fit_em(x32, 1.0, max_iters=50, tol=0.0, **_PATHS[path])
    with jax.enable_x64(True):
        fit64 = em.fit_em(x32.astype(np.float64), 1.0, max_iters=50, tol=0.0, **_PATHS[path])
    assert fit32.atoms.dtype == jnp.float32 and fit64.atoms.dtype == jnp.float64
    assert fit32.num_iters == fit64.num_iters == 50
    drift = np.max(np.abs(np.asarray(fit32.atoms[:200], np.float64) - fit64.atoms[:200]))
    assert drift < 1e-3, drift
    if far == "one-outlier":
        assert float(fit32.atoms[200]) == 1e6  # alone: its atom stays on it
        np.testing.assert_allclose(
            fit32.log_likelihood_trace, fit64.log_likelihood_trace, rtol=1e-5
        )


# ----------------------------------------------------------------------------- finding 9


def _measured_peak(fn, *args):
    """XLA's peak estimate for a jitted function: temporaries + arguments + outputs."""
    stats = fn.lower(*args).compile().memory_analysis()
    return (
        stats.temp_size_in_bytes
        + stats.argument_size_in_bytes
        + stats.output_size_in_bytes
        - stats.alias_size_in_bytes
    )


# The estimate counts two N x K arrays (scores and responsibilities; two b x b blocks when
# streamed) plus the O((N + K)(p + 1)) vectors. XLA keeps both arrays in ``em_step`` and fuses
# one away in ``fit_em``'s loop, so the estimate is an upper bound and at most about twice the
# measurement; FACTOR leaves 5% for the vectors.
FACTOR = 2.1


@pytest.mark.parametrize(
    ("n", "k", "dim", "dtype", "block_size"),
    [
        (300, 300, 1, np.float64, None),
        (400, 200, 2, np.float32, None),
        (300, 300, 1, np.float64, 64),
        (400, 200, 2, np.float32, 64),
    ],
)
def test_estep_memory_bytes_bounds_xla_memory_analysis(n, k, dim, dtype, block_size):
    with jax.enable_x64(True):
        x = jnp.zeros((n, dim), dtype)
        atoms = jnp.zeros((k, dim), dtype)
        w = jnp.full((k,), 1.0 / k, dtype)
        s = jnp.asarray(1.0, dtype)
        stream = (block_size, 1)
        fit = _measured_peak(
            em._fit_em_loop, x, atoms, w, s, jnp.asarray(0.0, dtype), False, 10, *stream
        )
        step = _measured_peak(em._em_step, x, atoms, w, s, True, *stream)
    estimate = em.estep_memory_bytes(n, k, dim, dtype, block_size)
    assert isinstance(estimate, int)
    for measured in (fit, step):
        assert measured <= estimate <= FACTOR * measured, (measured, estimate)


def test_estep_memory_bytes_at_the_command_line_sizes():
    dense = em.estep_memory_bytes(40_000, 40_000)
    assert 25e9 < dense < 26e9  # two 12.8 GB float64 matrices
    assert em.estep_memory_bytes(40_000, 40_000, dtype=jnp.float32) == pytest.approx(dense / 2)
    assert em.estep_memory_bytes(40_000, 40_000, block_size=1024) < 30e6


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"num_points": 0}, "num_points"),
        ({"num_atoms": 2.5}, "num_atoms"),
        ({"dim": 0}, "dim"),
        ({"dtype": np.int32}, "dtype"),
        ({"dtype": np.complex64}, "dtype"),
        ({"dtype": "no-such-type"}, "dtype"),
        ({"block_size": 0}, "block_size"),
        ({"block_size": True}, "block_size"),
    ],
)
def test_estep_memory_bytes_bad_input(kwargs, name):
    args = {"num_points": 10, "num_atoms": 10} | kwargs
    with pytest.raises(ValueError, match=f"^{name}: "):
        em.estep_memory_bytes(**args)
