"""Switching linear-Gaussian state-space model: parameters, scenarios and a simulator.

The model of Kim (1994) and Bar-Shalom and Li (1993), which the note "Attention as GPB2/IMM
message passing" reads attention against.

Model with M modes, state dimension d, observation dimension o, steps t = 1..T:

    s_1 ~ Cat(pi0),                   s_t | s_{t-1} = i ~ Cat(Pi[i, :])
    x_1 | s_1 = j ~ N(m0_j, P0_j)     (no prediction before the first update)
    x_t | x_{t-1}, s_t = j ~ N(F_j x_{t-1} + b_j + B_j u_t, Q_j)
    y_t | x_t, s_t = j ~ N(H_j x_t + d_j + D_j u_t, R_j)

(Pi_t[i, :] when the transition matrix is time-varying, one per step: TVTP, Filardo 1994;
Diebold, Lee and Weinbach 1994), with optional known inputs u_t (k,) (dynamax's convention:
u_t enters the step into x_t and the emission of y_t; u_1 enters only the first emission).
Process noise covariances Q_j may be singular PSD (the discrete white-noise acceleration model
has rank 2 in 2-D); so may the emission covariances R_j, as long as every innovation
covariance H_j P H_j^T + R_j stays positive definite (an exactly observed coordinate with a
random prediction). A coordinate of y_t that is NaN is missing: the update conditions on the
observed ones.

This module holds the parameters (``SwitchingParams``), the named scenarios
``"maneuvering-target"`` (``maneuvering_target``, from the motion models of
``attnbayes.models.kinematics``), ``simulate``, and the NumPyro program ``switching_model``. The
program marginalises the modes with a hand-written forward algorithm (``switching_log_joint``,
log domain, ``lax.scan``) and adds the result with one ``numpyro.factor``, so NUTS sees only
continuous sites: the states x_{1:T} and, under ``SwitchingPriors``, the transition matrix and
the scales of Q_j and R_j. (NumPyro's own enumeration cannot do this inside ``scan``: a
continuous site or a factor under an enumerated scan is refused.) A density over the states
needs positive definite Q_j, so a singular Q_j needs ``jitter > 0`` (Q_j + jitter I).
The filters live in ``attnbayes.inference.switching.filters``.

Over 800 lines: one model family's parameters (``SwitchingParams`` and its check), its
scenarios, simulator, log joint and NumPyro program, which share the parameter checks and the
time-varying transition helpers; dynamax keeps a model's parameters with its log joint likewise.
"""

from __future__ import annotations

import functools
import inspect
import numbers
from collections.abc import Iterable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax.scipy.linalg import solve_triangular
from jax.scipy.special import logsumexp
from numpyro.distributions import constraints

from .. import validation
from ..constants import SWITCHING_SCENARIOS
from .kinematics import PROCESS_NOISE, constant_velocity, coordinated_turn


class SwitchingParams(NamedTuple):
    """Parameters of a switching linear-Gaussian state-space model (names as in dynamax).

    Attributes:
        initial_probs: (M,) P(s_1 = j).
        transition_matrix: (M, M), [i, j] = P(s_t = j | s_{t-1} = i); rows sum to one. Or
            (T, M, M), time-varying transition probabilities (TVTP): entry t (0-based) is the
            law of s_t given s_{t-1}, [t, i, j] = P(s_t = j | s_{t-1} = i); entry 0 is not
            used by the filters (s_1 follows ``initial_probs``) but must be a valid matrix: it
            keeps the time axis row for row with the observations (T, o), and a T that differs
            from theirs is refused. ``per_step_transitions`` and ``step_transition`` are how
            the scans over steps read it.
        initial_means: (M, d) mean of x_1 given s_1 = j.
        initial_covs: (M, d, d) covariance of x_1 given s_1 = j (PSD).
        dynamics_matrices: (M, d, d) F_j.
        dynamics_biases: (M, d) b_j.
        dynamics_covs: (M, d, d) Q_j (PSD, may be singular).
        emission_matrices: (M, o, d) H_j.
        emission_covs: (M, o, o) R_j (PSD; see the module docstring).
        emission_biases: (M, o) d_j; ``None`` means zeros.
        dynamics_input_weights: (M, d, k) B_j on the inputs u_t; ``None`` means no inputs.
        emission_input_weights: (M, o, k) D_j on the inputs u_t; ``None`` means no inputs.

    ``check_params`` fills the optional fields: zeros of shape (M, o), and input weights with
    k = 0 columns when neither is given (or zeros with the other's k), so the kernels beneath
    always see arrays.
    """

    initial_probs: jax.Array
    transition_matrix: jax.Array
    initial_means: jax.Array
    initial_covs: jax.Array
    dynamics_matrices: jax.Array
    dynamics_biases: jax.Array
    dynamics_covs: jax.Array
    emission_matrices: jax.Array
    emission_covs: jax.Array
    emission_biases: jax.Array | None = None
    dynamics_input_weights: jax.Array | None = None
    emission_input_weights: jax.Array | None = None

    @property
    def num_inputs(self) -> int:
        """k, the number of input columns the weights take (0 without inputs)."""
        for w in (self.dynamics_input_weights, self.emission_input_weights):
            if w is not None:
                return int(w.shape[-1])
        return 0


_OPTIONAL_FIELDS = ("emission_biases", "dynamics_input_weights", "emission_input_weights")


def _psd_defect(covs: np.ndarray) -> str | None:
    """What some matrix of a concrete stack (..., n, n) is not, to 1e-8 of the stack's scale
    (at least 1): "symmetric" or "positive semi-definite"; None when every one is both."""
    scale = max(1.0, float(np.max(np.abs(covs), initial=0.0)))
    if not np.allclose(covs, np.swapaxes(covs, -1, -2), atol=1e-8 * scale, rtol=0):
        return "symmetric"
    if np.any(np.linalg.eigvalsh(covs) < -1e-8 * scale):
        return "positive semi-definite"
    return None


def is_psd(covs) -> bool:
    """Whether every matrix of a concrete stack (..., n, n) is symmetric positive
    semi-definite to 1e-8 of the stack's scale: the test ``check_params`` applies to the
    covariances (NumPy, float64)."""
    return _psd_defect(np.asarray(covs, dtype=np.float64)) is None


def as_float_field(name: str, value):
    """``value`` as a float array, for a check that must also run under tracing: a concrete
    value goes through ``validation.as_float_array`` (a NumPy array; non-numbers, ragged and
    complex input refused with a ``ValueError`` naming ``name``); a tracer is checked by its
    dtype only (complex and non-numeric refused, integers and bools cast to float) and returned
    as a JAX array. NumPy is never called on a tracer."""
    if not validation.is_traced(value):
        return validation.as_float_array(name, value)
    dtype = value.dtype
    if jnp.issubdtype(dtype, jnp.complexfloating):
        raise ValueError(f"{name}: expected real numbers, got complex values")
    if not (jnp.issubdtype(dtype, jnp.number) or jnp.issubdtype(dtype, jnp.bool_)):
        raise ValueError(f"{name}: expected numbers, got dtype {dtype}")
    if not jnp.issubdtype(dtype, jnp.floating):
        value = value.astype(jnp.result_type(dtype, jnp.float32))
    return value


def _check_stochastic_rows(name: str, trans: np.ndarray) -> None:
    """Refuse a concrete (M, M) or (T, M, M) matrix with a row that is not a probability
    vector (an entry < 0, or a sum off 1 by more than 1e-5); a (T, M, M) one is named by its
    first bad step and row."""
    bad = np.any(trans < 0, axis=-1) | ~np.isclose(trans.sum(axis=-1), 1.0, rtol=0, atol=1e-5)
    if not np.any(bad):
        return
    where = ""
    if trans.ndim == 3:
        t, i = (int(v) for v in np.argwhere(bad)[0])
        row = trans[t, i]
        what = "has a negative entry" if np.any(row < 0) else f"sums to {row.sum():.8g}"
        where = f"; step {t} row {i} {what}"
    raise ValueError(
        f"{name}: rows must be probability vectors ([i, j] = P(s_t = j | s_{{t-1}} = i)){where}"
    )


def check_params(name: str, params: SwitchingParams) -> SwitchingParams:
    """Validate shapes, probabilities and covariances; return the fields as float arrays.

    Raises ``ValueError`` naming ``name.field`` for the first problem found.

    Tracer-aware: the static checks (the type, each field's rank and shape, M, d and o
    consistent across the fields, real dtypes) always run; the value checks (finiteness, a
    probability vector ``initial_probs``, stochastic rows of ``transition_matrix`` (of every
    step when it is (T, M, M)), symmetric
    PSD ``initial_covs``, ``dynamics_covs`` and ``emission_covs``) run on every field that is
    concrete and are skipped for a field that is a JAX tracer (the caller is under ``jax.jit``,
    ``jax.vmap`` or ``jax.grad``: its numbers are unknown while tracing). Concrete fields come
    back as NumPy arrays, traced ones as they are (cast to float); NumPy is never called on a
    tracer. Code that traces over the parameters should call this once on concrete values
    first: under tracing, invalid values are not refused and give NaN or wrong numbers.
    """
    if not isinstance(params, SwitchingParams):
        raise ValueError(f"{name}: expected a SwitchingParams, got {type(params).__name__}")
    fields = {
        f: as_float_field(f"{name}.{f}", getattr(params, f))
        for f in SwitchingParams._fields
        if getattr(params, f) is not None or f not in _OPTIONAL_FIELDS
    }
    concrete = {f: not validation.is_traced(a) for f, a in fields.items()}
    for f, arr in fields.items():
        if concrete[f]:
            validation.check_finite(f"{name}.{f}", arr)
    pi0, trans = fields["initial_probs"], fields["transition_matrix"]
    if pi0.ndim != 1 or pi0.shape[0] < 1:
        raise ValueError(f"{name}.initial_probs: expected shape (M,), got {tuple(pi0.shape)}")
    m = pi0.shape[0]
    means = fields["initial_means"]
    if means.ndim != 2 or means.shape[0] != m:
        raise ValueError(f"{name}.initial_means: expected shape ({m}, d), got {tuple(means.shape)}")
    d = means.shape[1]
    emis = fields["emission_matrices"]
    if emis.ndim != 3 or emis.shape[0] != m or emis.shape[2] != d:
        raise ValueError(
            f"{name}.emission_matrices: expected shape ({m}, o, {d}), got {tuple(emis.shape)}"
        )
    o = emis.shape[1]
    dyn_w, emi_w = fields.get("dynamics_input_weights"), fields.get("emission_input_weights")
    for f, w, rows in (("dynamics_input_weights", dyn_w, d), ("emission_input_weights", emi_w, o)):
        if w is not None and (w.ndim != 3 or w.shape[:2] != (m, rows)):
            raise ValueError(f"{name}.{f}: expected shape ({m}, {rows}, k), got {tuple(w.shape)}")
    k = next((w.shape[2] for w in (dyn_w, emi_w) if w is not None), 0)
    zeros = {
        "emission_biases": (m, o),
        "dynamics_input_weights": (m, d, k),
        "emission_input_weights": (m, o, k),
    }
    for f, shape in zeros.items():
        if f not in fields:
            fields[f] = np.zeros(shape, emis.dtype)
            concrete[f] = True
    if trans.ndim == 2 and tuple(trans.shape) != (m, m):
        raise ValueError(
            f"{name}.transition_matrix: expected shape {(m, m)}, got {tuple(trans.shape)}"
        )
    if trans.ndim == 3 and (trans.shape[0] < 1 or tuple(trans.shape[1:]) != (m, m)):
        raise ValueError(
            f"{name}.transition_matrix: expected shape (T, {m}, {m}) (one matrix per step, "
            f"T >= 1), got {tuple(trans.shape)}"
        )
    if trans.ndim not in (2, 3):
        raise ValueError(
            f"{name}.transition_matrix: expected shape ({m}, {m}) or (T, {m}, {m}) (one matrix "
            f"per step), got {tuple(trans.shape)}"
        )
    expected = {
        "initial_covs": (m, d, d),
        "dynamics_matrices": (m, d, d),
        "dynamics_biases": (m, d),
        "dynamics_covs": (m, d, d),
        "emission_covs": (m, o, o),
        "emission_biases": (m, o),
        "dynamics_input_weights": (m, d, k),
        "emission_input_weights": (m, o, k),
    }
    for f, shape in expected.items():
        if tuple(fields[f].shape) != shape:
            raise ValueError(f"{name}.{f}: expected shape {shape}, got {tuple(fields[f].shape)}")
    if concrete["initial_probs"]:
        validation.check_weights(f"{name}.initial_probs", pi0)
    if concrete["transition_matrix"]:
        _check_stochastic_rows(f"{name}.transition_matrix", trans)
    for f in ("initial_covs", "dynamics_covs", "emission_covs"):
        defect = _psd_defect(fields[f]) if concrete[f] else None
        if defect is not None:
            raise ValueError(f"{name}.{f}: covariance matrices must be {defect}")
    return SwitchingParams(**fields)


# ----------------------------------------------------------------------------- scenarios


def maneuvering_target(
    *,
    dt: float = 1.0,
    turn_rate_deg: float = 3.0,
    sigma_a: tuple[float, float] = (0.1, 0.5),
    measurement_sigma: float = 10.0,
    process_noise: str = "discrete",
    turn_rates_deg: tuple[float, ...] | None = None,
) -> SwitchingParams:
    """The named scenario: a target on the plane, state [px, vx, py, vy], 2-D position measured.

    Mode 0 is constant velocity (sigma_a = 0.1), mode 1 a coordinated turn at 3 deg/s
    (sigma_a = 0.5); measurements have sigma = 10; Pi = [[.95, .05], [.10, .90]]. The first
    mode is drawn from Pi's stationary distribution (2/3, 1/3), and x_1 ~ N([0, 10, 0, 0],
    diag(100, 1, 100, 1)) in both modes: the target starts near the origin moving at 10 per
    step along the first axis. ``process_noise="discrete"`` is the discrete white-noise
    acceleration Q (rank 2, the issue's scenario); ``"continuous"`` the full-rank continuous
    one (the scenario "maneuvering-target-cwna", on which NUTS over the states can mix).

    ``turn_rates_deg`` (overrides ``turn_rate_deg``) builds the same target with one
    coordinated-turn mode per rate, for comparing numbers of modes: ``()`` is the one-mode
    constant-velocity model, ``(3.0, -3.0)`` adds a right turn. Constant velocity stays with
    probability 0.95 and leaves to each turn equally; a turn stays with 0.90 and returns to
    constant velocity with 0.10; s_1 follows the stationary distribution.

    Raises ``ValueError`` naming the argument for a dt or measurement_sigma that is not a
    finite number > 0, a sigma_a that is not two finite numbers >= 0, a turn rate that is not
    finite, or an unknown process_noise.
    """
    if not isinstance(process_noise, str) or process_noise not in PROCESS_NOISE:
        raise ValueError(
            f"process_noise: expected one of {list(PROCESS_NOISE)}, got {process_noise!r}"
        )
    dt = validation.check_positive_scalar("dt", dt)
    measurement_sigma = validation.check_positive_scalar("measurement_sigma", measurement_sigma)
    sigma_a = _finite_numbers("sigma_a", sigma_a, length=2, minimum=0.0)
    if turn_rates_deg is None:
        rates = _finite_numbers("turn_rate_deg", (turn_rate_deg,))
    else:
        rates = _finite_numbers("turn_rates_deg", turn_rates_deg)
    m = 1 + len(rates)
    trans = np.zeros((m, m))
    trans[0, 0] = 0.95 if m > 1 else 1.0
    trans[0, 1:] = 0.05 / max(m - 1, 1)
    trans[1:, 0] = 0.10
    trans[np.arange(1, m), np.arange(1, m)] = 0.90
    # stationary distribution: pi_0 (0.05) = (1 - pi_0) (0.10), split evenly over the turns
    stationary = np.array([2.0 / 3.0] + [1.0 / 3.0 / (m - 1)] * (m - 1)) if m > 1 else np.ones(1)
    dyn = np.stack([constant_velocity(dt)] + [coordinated_turn(np.deg2rad(r), dt) for r in rates])
    q = np.stack([PROCESS_NOISE[process_noise](sigma_a[min(j, 1)], dt) for j in range(m)])
    h = np.array([[1.0, 0, 0, 0], [0, 0, 1.0, 0]])
    return SwitchingParams(
        initial_probs=stationary,
        transition_matrix=trans,
        initial_means=np.tile([0.0, 10.0, 0.0, 0.0], (m, 1)),
        initial_covs=np.tile(np.diag([100.0, 1.0, 100.0, 1.0]), (m, 1, 1)),
        dynamics_matrices=dyn,
        dynamics_biases=np.zeros((m, 4)),
        dynamics_covs=q,
        emission_matrices=np.stack([h] * m),
        emission_covs=np.tile(measurement_sigma**2 * np.eye(2), (m, 1, 1)),
        emission_biases=np.zeros((m, 2)),
        dynamics_input_weights=np.zeros((m, 4, 0)),
        emission_input_weights=np.zeros((m, 2, 0)),
    )


_SCENARIO_MAKERS = {
    "maneuvering-target": maneuvering_target,
    "maneuvering-target-cwna": functools.partial(maneuvering_target, process_noise="continuous"),
}
# the named scenarios, keyed by ``attnbayes.constants.SWITCHING_SCENARIOS`` (the list the command
# line offers without importing JAX): a name there without a maker fails here, at import
SCENARIOS = {name: _SCENARIO_MAKERS[name] for name in SWITCHING_SCENARIOS}


def _finite_numbers(name: str, value, *, length: int | None = None, minimum=None) -> tuple:
    """A sequence of finite real numbers (each >= ``minimum`` when given) as a tuple of floats."""
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise ValueError(f"{name}: expected a sequence of numbers, got {value!r}")
    values = tuple(value)
    if length is not None and len(values) != length:
        raise ValueError(f"{name}: expected {length} numbers, got {len(values)}")
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not np.isfinite(v):
            raise ValueError(f"{name}: expected finite numbers, got {v!r}")
        if minimum is not None and v < minimum:
            raise ValueError(f"{name}: must be >= {minimum}, got {v!r}")
        out.append(float(v))
    return tuple(out)


def get_scenario(name: str, **kwargs) -> SwitchingParams:
    """A named scenario's parameters (see ``SCENARIOS``); ``kwargs`` go to its constructor
    (``maneuvering_target``: dt, turn_rate_deg, sigma_a, measurement_sigma, turn_rates_deg).

    Raises ``ValueError`` naming ``name`` for an unknown scenario, ``TypeError`` naming the
    keyword for one the scenario does not take, and the constructor's ``ValueError`` for a bad
    value."""
    if not isinstance(name, str) or name not in SCENARIOS:
        raise ValueError(f"name: unknown scenario {name!r}; known: {list(SCENARIOS)}")
    make = SCENARIOS[name]
    options = inspect.signature(make).parameters
    for key in kwargs:
        if key not in options:
            raise TypeError(f"{key}: not an option of scenario {name!r}; options: {list(options)}")
    return make(**kwargs)


# ----------------------------------------------------------------------------- simulation


def psd_factor(covs):
    """L with L L^T = C for PSD C (singular allowed): eigendecomposition, negative round-off
    eigenvalues clipped to zero."""
    eig, vec = jnp.linalg.eigh(covs)
    return vec * jnp.sqrt(jnp.clip(eig, 0.0))[..., None, :]


def step_offsets(params: SwitchingParams, u):
    """The per-mode offsets of one step with input u (k,): dynamics b_j + B_j u (M, d) and
    emission d_j + D_j u (M, o). With k = 0 they are b_j and d_j."""
    dyn = params.dynamics_biases + jnp.einsum("mdk,k->md", params.dynamics_input_weights, u)
    emi = params.emission_biases + jnp.einsum("mok,k->mo", params.emission_input_weights, u)
    return dyn, emi


def per_step_transitions(params: SwitchingParams, start: int = 1):
    """What a ``lax.scan`` over steps ``start``..T-1 (0-based) carries for the transition matrix.

    ``None`` for a constant (M, M) matrix: it stays in the scan body's closure, so the program
    of a constant matrix is the one it always was; ``params.transition_matrix[start:]``
    (T - start, M, M) for a time-varying one. The two cases are told apart by the rank, at trace
    time. Read the matrix of the current step with ``step_transition``::

        def body(carry, inp):
            y, p = inp
            trans = step_transition(params, p)  # P_t (M, M)
            ...
        jax.lax.scan(body, carry, (observations[1:], per_step_transitions(params, 1)))

    (``None`` is an empty pytree: scanning over it costs nothing.) The filters scan steps
    1..T-1 (``start = 1``: P_t moves s_{t-1} to s_t; entry 0 is not used), the RBPF steps
    0..T-1 (``start = 0``; its first step uses ``initial_probs``), Kim's backward pass the
    pairs (t, t+1) with P_{t+1} (``start = 1``).
    """
    trans = params.transition_matrix
    return None if trans.ndim == 2 else trans[start:]


def step_transition(params: SwitchingParams, scanned) -> jax.Array:
    """P_t (M, M) inside a scan: the slice ``scanned`` of ``per_step_transitions`` (a
    time-varying matrix), or ``params.transition_matrix`` itself when ``scanned`` is None (a
    constant one)."""
    return params.transition_matrix if scanned is None else scanned


def check_transition_steps(name: str, params: SwitchingParams, num_steps: int) -> None:
    """Refuse a time-varying (T, M, M) ``transition_matrix`` of a checked ``params`` whose T is
    not ``num_steps`` (the observations' rows): ``ValueError`` naming
    ``name.transition_matrix``. A constant (M, M) matrix always passes. Static (shapes only):
    runs under tracing too."""
    trans = params.transition_matrix
    if trans.ndim == 3 and trans.shape[0] != num_steps:
        raise ValueError(
            f"{name}.transition_matrix: has {trans.shape[0]} steps (T, M, M) but the series has "
            f"T = {num_steps}; a time-varying transition matrix holds one matrix per step, "
            "entry t the law of s_t given s_{t-1} (entry 0 unused)"
        )


def check_input_series(name: str, inputs, params: SwitchingParams, num_steps: int):
    """Validate the inputs u_{1:T} of a checked ``params`` for T = ``num_steps``.

    ``None`` stands for no inputs and becomes a (T, 0) array when ``params`` takes none (k = 0);
    parameters with input weights need a (T, k) array of finite numbers. Tracer-aware: the
    shape checks always run, finiteness only on concrete values. Returns NumPy (concrete) or
    JAX (traced) arrays.
    """
    k = params.emission_input_weights.shape[-1]
    if inputs is None:
        if k:
            raise ValueError(
                f"{name}: params take k = {k} input column(s) (dynamics_input_weights, "
                f"emission_input_weights), so inputs of shape ({num_steps}, {k}) are required"
            )
        return np.zeros((num_steps, 0), params.emission_matrices.dtype)
    arr = as_float_field(name, inputs)
    if arr.ndim == 1 and k == 1:
        arr = arr[:, None]
    if arr.ndim != 2 or tuple(arr.shape) != (num_steps, k):
        raise ValueError(
            f"{name}: expected shape ({num_steps}, {k}) (T steps, k = {k} input columns of "
            f"the params' input weights), got {tuple(arr.shape)}"
        )
    if not validation.is_traced(arr):
        validation.check_finite(name, arr)
    return arr


@jax.jit
def simulate_unchecked(key, params: SwitchingParams, inputs):
    """``simulate`` on checked arrays: ``params`` with every field an array, ``inputs`` (T, k)
    (T = its rows) in their dtype. Returns (modes (T,), states (T, d), observations (T, o))."""
    num_steps = inputs.shape[0]
    key_s0, key_x0, key_steps = jax.random.split(key, 3)
    d = params.initial_means.shape[1]
    o = params.emission_matrices.shape[1]
    chol_p0 = psd_factor(params.initial_covs)
    chol_q = psd_factor(params.dynamics_covs)
    chol_r = psd_factor(params.emission_covs)

    def emit(key, s, x, offset):
        eps = jax.random.normal(key, (o,), x.dtype)
        return params.emission_matrices[s] @ x + offset[s] + chol_r[s] @ eps

    s1 = jax.random.categorical(key_s0, jnp.log(params.initial_probs))
    x1 = params.initial_means[s1] + chol_p0[s1] @ jax.random.normal(
        key_x0, (d,), params.initial_means.dtype
    )

    def step(carry, inp):
        s, x = carry
        key, u, trans = inp
        key_s, key_x, key_y = jax.random.split(key, 3)
        dyn_offset, emi_offset = step_offsets(params, u)
        s_new = jax.random.categorical(key_s, jnp.log(step_transition(params, trans)[s]))
        eps = jax.random.normal(key_x, (d,), x.dtype)
        x_new = params.dynamics_matrices[s_new] @ x + dyn_offset[s_new]
        x_new = x_new + chol_q[s_new] @ eps
        return (s_new, x_new), (s_new, x_new, emit(key_y, s_new, x_new, emi_offset))

    keys = jax.random.split(key_steps, num_steps)
    y1 = emit(keys[0], s1, x1, step_offsets(params, inputs[0])[1])
    scanned = (keys[1:], inputs[1:], per_step_transitions(params, 1))
    _, (modes, states, obs) = jax.lax.scan(step, (s1, x1), scanned)
    modes = jnp.concatenate([s1[None], modes])
    states = jnp.concatenate([x1[None], states])
    obs = jnp.concatenate([y1[None], obs])
    return modes, states, obs


def simulate(key, params: SwitchingParams | str, num_steps: int, *, inputs=None):
    """Draw (modes (T,), states (T, d), observations (T, o)) from the model.

    ``params`` is a ``SwitchingParams`` or a scenario name. x_1 comes from the initial
    distribution of s_1 with no dynamics step before it; y_t is emitted under s_t, with the
    offsets d_j + D_j u_t; the step into x_t adds b_j + B_j u_t. ``inputs`` (T, k) u_{1:T} are
    required when ``params`` has input weights (k > 0). A time-varying (T, M, M)
    ``transition_matrix`` draws s_t from row s_{t-1} of its entry t and needs T =
    ``num_steps`` (``ValueError`` naming ``params.transition_matrix``).
    """
    validation.check_key("key", key)
    if isinstance(params, str):
        params = get_scenario(params)
    params = check_params("params", params)
    num_steps = validation.check_positive_int("num_steps", num_steps)
    check_transition_steps("params", params, num_steps)
    inputs = check_input_series("inputs", inputs, params, num_steps)
    arrays = SwitchingParams(*(jnp.asarray(a) for a in params))
    return simulate_unchecked(key, arrays, jnp.asarray(inputs, arrays.initial_means.dtype))


# ----------------------------------------------------------------------------- priors


class SwitchingPriors(NamedTuple):
    """Priors of ``switching_model`` on some parameters; a field left ``None`` keeps the value in
    ``params`` fixed.

    Attributes:
        transition_concentration: (M, M) Dirichlet concentration of each row of Pi:
            Pi[i, :] ~ Dirichlet(transition_concentration[i]).
        dynamics_cov_scale: (shape, rate), each a scalar or (M,): c_j ~ InverseGamma(shape,
            rate) and Q_j = c_j params.dynamics_covs[j].
        emission_cov_scale: (shape, rate), each a scalar or (M,): r_j ~ InverseGamma(shape,
            rate) and R_j = r_j params.emission_covs[j].
    """

    transition_concentration: jax.Array | None = None
    dynamics_cov_scale: tuple | None = None
    emission_cov_scale: tuple | None = None


def _positive_array(name: str, value, shapes) -> np.ndarray:
    arr = validation.as_float_array(name, value)
    if validation.is_traced(arr):
        return arr
    if arr.shape not in shapes:
        expected = " or ".join(str(s) for s in shapes)
        raise ValueError(f"{name}: expected shape {expected}, got {arr.shape}")
    validation.check_finite(name, arr)
    if np.any(arr <= 0):
        raise ValueError(f"{name}: must be > 0, got {arr}")
    return arr


def _check_shape_rate(name: str, value, num_modes: int):
    if not isinstance(value, tuple | list) or len(value) != 2:
        raise ValueError(f"{name}: expected a pair (shape, rate) of an InverseGamma, got {value!r}")
    shapes = [(), (num_modes,)]
    return tuple(
        _positive_array(f"{name}[{k}] ({what})", v, shapes)
        for k, (what, v) in enumerate(zip(("shape", "rate"), value, strict=True))
    )


def check_priors(name: str, priors: SwitchingPriors | None, num_modes: int) -> SwitchingPriors:
    """Validate ``SwitchingPriors`` for M = ``num_modes`` (``None`` means no priors).

    Raises ``ValueError`` naming ``name.field`` (positivity, finiteness, shapes).
    """
    if priors is None:
        return SwitchingPriors()
    if not isinstance(priors, SwitchingPriors):
        raise ValueError(f"{name}: expected a SwitchingPriors or None, got {type(priors).__name__}")
    conc = priors.transition_concentration
    if conc is not None:
        conc = _positive_array(f"{name}.transition_concentration", conc, [(num_modes, num_modes)])
    dyn, emi = priors.dynamics_cov_scale, priors.emission_cov_scale
    if dyn is not None:
        dyn = _check_shape_rate(f"{name}.dynamics_cov_scale", dyn, num_modes)
    if emi is not None:
        emi = _check_shape_rate(f"{name}.emission_cov_scale", emi, num_modes)
    return SwitchingPriors(conc, dyn, emi)


# ----------------------------------------------------------------------------- joint density


def _gauss_logpdf(resid, chol, num_coordinates=None):
    """log N(resid; 0, L L^T) for a lower Cholesky factor L; the normalising constant counts
    ``num_coordinates`` (default all of resid's)."""
    if num_coordinates is None:
        num_coordinates = resid.shape[-1]
    white = solve_triangular(chol, resid, lower=True)
    return (
        -0.5 * jnp.sum(white**2)
        - jnp.sum(jnp.log(jnp.diagonal(chol)))
        - 0.5 * num_coordinates * jnp.log(2.0 * jnp.pi)
    )


def masked_gaussian_logpdf(resid, observed, cov):
    """log N(resid_o; 0, cov_oo) over the observed coordinates o of one vector.

    resid (n,) and observed (n,) bool; the missing coordinates are replaced by an independent
    unit-variance zero (cov -> cov_oo (+) I, resid -> 0 there), whose log density
    -log(2 pi) / 2 per coordinate is added back, so shapes stay fixed under ``jit``. No
    coordinate observed gives 0.
    """
    both = observed[:, None] & observed[None, :]
    cov = jnp.where(both, cov, 0.0) + jnp.diag(jnp.where(observed, 0.0, 1.0).astype(cov.dtype))
    resid = jnp.where(observed, resid, 0.0)
    return _gauss_logpdf(resid, jnp.linalg.cholesky(cov), jnp.sum(observed))


@jax.jit
def switching_log_joint_unchecked(params: SwitchingParams, states, observations, inputs):
    """``switching_log_joint`` on checked arrays of one dtype (PD covariances; ``inputs``
    (T, k))."""
    chol_p0 = jnp.linalg.cholesky(params.initial_covs)
    chol_q = jnp.linalg.cholesky(params.dynamics_covs)
    per_mode = jax.vmap(_gauss_logpdf)  # over modes: resid (M, n), chol (M, n, n)
    dyn_off, emi_off = jax.vmap(step_offsets, in_axes=(None, 0))(params, inputs)  # (T, M, .)
    # state terms (T, M): log N(x_1; m0_j, P0_j), then log N(x_t; F_j x_{t-1} + b_j + B_j u_t, Q_j)
    first = per_mode(states[0] - params.initial_means, chol_p0)
    pred = jnp.einsum("jab,tb->tja", params.dynamics_matrices, states[:-1])
    resid_x = states[1:, None] - pred - dyn_off[1:]
    rest = jax.vmap(per_mode, in_axes=(0, None))(resid_x, chol_q)
    log_em = jnp.concatenate([first[None], rest])
    # observation terms (T, M): log N(y_t; H_j x_t + d_j + D_j u_t, R_j) over the observed
    # coordinates of y_t (a NaN coordinate is missing)
    observed = ~jnp.isnan(observations)
    obs = jnp.where(observed, observations, 0.0)
    resid_y = obs[:, None] - jnp.einsum("joa,ta->tjo", params.emission_matrices, states) - emi_off
    per_mode_y = jax.vmap(masked_gaussian_logpdf, in_axes=(0, None, 0))
    log_y = jax.vmap(per_mode_y, in_axes=(0, 0, None))(resid_y, observed, params.emission_covs)
    log_em = log_em + log_y

    # forward algorithm: alpha_t(j) = log p(s_t = j, x_{1:t}, y_{1:t})
    def step(alpha, inp):
        log_e, trans = inp
        log_trans = jnp.log(step_transition(params, trans))
        alpha = logsumexp(alpha[:, None] + log_trans, axis=0) + log_e
        return alpha, None

    scanned = (log_em[1:], per_step_transitions(params, 1))
    alpha, _ = jax.lax.scan(step, jnp.log(params.initial_probs) + log_em[0], scanned)
    return logsumexp(alpha)


def _check_definite(name: str, covs: np.ndarray, jitter: float = 0.0) -> None:
    """Raise if some (concrete) covs[j] + jitter I is numerically singular."""
    covs = covs + jitter * np.eye(covs.shape[-1])
    eig = np.linalg.eigvalsh(covs)
    tol = 100 * covs.shape[-1] * np.finfo(covs.dtype).eps * np.max(np.abs(eig), axis=-1)
    bad = np.flatnonzero(eig[:, 0] <= tol)
    if bad.size:
        raise ValueError(
            f"{name}: matrices {bad.tolist()} (+ jitter I, jitter = {jitter}) are singular; a "
            "density over the states needs positive definite covariances; pass jitter > 0 "
            "(e.g. 1e-6 times their scale) to use Q_j + jitter I"
        )


def _check_series(name: str, value, width: int, what: str, *, allow_nan: bool):
    arr = validation.as_float_array(name, value)
    if arr.ndim != 2 or arr.shape[1] != width or arr.shape[0] < 1:
        raise ValueError(f"{name}: expected shape (T, {width}) ({what}), got {tuple(arr.shape)}")
    if not validation.is_traced(arr):
        bad = np.isinf(arr) if allow_nan else ~np.isfinite(arr)
        if np.any(bad):
            extra = " (use a NaN row for a missing observation)" if allow_nan else ""
            raise ValueError(f"{name}: contains {int(bad.sum())} non-finite value(s){extra}")
    return arr


def switching_log_joint(params: SwitchingParams, states, observations, *, inputs=None):
    """log p(x_{1:T}, y_{1:T}) = log sum_{s_{1:T}} p(s, x, y), by the forward algorithm.

        alpha_1(j) = log pi0_j + e_1(j),
        alpha_t(j) = logsumexp_i(alpha_{t-1}(i) + log Pi_t,ij) + e_t(j),  result logsumexp alpha_T
        e_1(j) = log N(x_1; m0_j, P0_j) + log N(y_1; H_j x_1 + d_j + D_j u_1, R_j)
        e_t(j) = log N(x_t; F_j x_{t-1} + b_j + B_j u_t, Q_j) + log N(y_t; H_j x_t + d_j
                 + D_j u_t, R_j)

    A NaN coordinate of y is missing: the y-term is the density of the observed coordinates
    (a wholly missing row contributes nothing). Pi_t is the transition matrix, or its entry t
    when it is time-varying (T, M, M). Needs positive definite Q_j, P0_j and R_j
    (checked when the parameters are concrete). Pure JAX: jit-, vmap- and grad-able.

    Args:
        params: ``SwitchingParams``.
        states: (T, d) x_{1:T}.
        observations: (T, o) y_{1:T}.
        inputs: (T, k) u_{1:T}, required when ``params`` has input weights.

    Returns:
        () the log joint density.
    """
    params = check_params("params", params)  # value checks only on concrete fields
    for field in ("initial_covs", "dynamics_covs", "emission_covs"):
        if not validation.is_traced(getattr(params, field)):
            _check_definite(f"params.{field}", getattr(params, field))
    d = params.initial_means.shape[-1]
    o = params.emission_matrices.shape[-2]
    states = _check_series("states", states, d, "x_{1:T}", allow_nan=False)
    obs = _check_series("observations", observations, o, "y_{1:T}", allow_nan=True)
    if states.shape[0] != obs.shape[0]:
        raise ValueError(f"states: has {states.shape[0]} steps but observations has {obs.shape[0]}")
    check_transition_steps("params", params, obs.shape[0])
    inputs = check_input_series("inputs", inputs, params, obs.shape[0])
    dtype = jnp.result_type(jnp.asarray(states).dtype, jnp.asarray(obs).dtype)
    arrays = SwitchingParams(*(jnp.asarray(a, dtype) for a in params))
    return switching_log_joint_unchecked(
        arrays,
        jnp.asarray(states, dtype),
        jnp.asarray(obs, dtype),
        jnp.asarray(inputs, dtype),
    )


# ----------------------------------------------------------------------------- NumPyro program


def switching_model(
    y=None,
    *,
    params: SwitchingParams | str,
    num_steps: int | None = None,
    priors: SwitchingPriors | None = None,
    jitter: float = 0.0,
    inputs=None,
):
    """NumPyro program of the switching state-space model with the modes marginalised.

        Pi[i, :] ~ Dirichlet(transition_concentration[i])      (site "transition_matrix")
        c_j ~ InverseGamma(shape, rate), Q_j = c_j Q0_j + jitter I  (site "dynamics_cov_scale")
        r_j ~ InverseGamma(shape, rate), R_j = r_j R0_j          (site "emission_cov_scale")
        x_{1:T} ~ improper flat                                  (site "states", (T, d))
        factor "log_joint" = log sum_s p(s, x, y | Pi, Q, R)     (``switching_log_joint``)

    The flat base measure plus the factor make the density of "states" the model's
    p(x_{1:T}, y_{1:T}), so NUTS targets p(x_{1:T} (, Pi, c, r) | y_{1:T}). Without a prior the
    value in ``params`` is used (Q0, R0 are ``params.dynamics_covs``, ``params.emission_covs``).

    With ``y=None`` the program simulates instead (needs a PRNG key, e.g. under
    ``numpyro.infer.Predictive``): deterministic sites "modes" (T,), "states" (T, d) and
    "observations" (T, o) hold a draw of the model (with Q_j + jitter I), after the prior sites;
    Q_j may then be singular with ``jitter = 0``.

    Args:
        y: (T, o) observations, NaN rows missing; ``None`` to simulate.
        params: ``SwitchingParams`` or a scenario name; a time-varying (T, M, M)
            ``transition_matrix`` needs T = ``num_steps`` and no prior on Pi (``ValueError``
            naming ``params.transition_matrix`` / ``priors.transition_concentration``).
        num_steps: T; defaults to ``len(y)``, required when ``y`` is ``None``.
        priors: ``SwitchingPriors`` or ``None`` (all of Pi, Q, R fixed).
        jitter: >= 0 added to the diagonal of every Q_j. Must be > 0 when some Q_j is singular
            (e.g. the maneuvering target's rank-2 white-noise acceleration Q).
        inputs: (T, k) u_{1:T}, required when ``params`` has input weights (k > 0).

    ``switching_marginal_model`` (``attnbayes.inference.switching``) integrates the states out
    too, with a filter, so that NUTS samples the parameters alone.
    """
    if isinstance(params, str):
        params = get_scenario(params)
    params = check_params("params", params)
    m, d = params.initial_means.shape
    o = params.emission_matrices.shape[1]
    if isinstance(jitter, bool) or not isinstance(jitter, int | float | np.floating | np.integer):
        raise ValueError(f"jitter: expected a number >= 0, got {jitter!r}")
    jitter = float(jitter)
    if not np.isfinite(jitter) or jitter < 0:
        raise ValueError(f"jitter: must be a finite number >= 0, got {jitter}")
    priors = check_priors("priors", priors, m)
    if y is not None:  # a density over the states needs PD covariances; simulating does not
        for field, extra in (
            ("initial_covs", 0.0),
            ("dynamics_covs", jitter),
            ("emission_covs", 0.0),
        ):
            if not validation.is_traced(getattr(params, field)):
                _check_definite(f"params.{field}", getattr(params, field), extra)
        y = _check_series("y", y, o, "observations", allow_nan=True)
        if num_steps is not None and num_steps != y.shape[0]:
            raise ValueError(f"num_steps: {num_steps} does not match y with {y.shape[0]} rows")
        num_steps = y.shape[0]
    elif num_steps is None:
        raise ValueError("num_steps: required when y is None")
    num_steps = validation.check_positive_int("num_steps", num_steps)
    check_transition_steps("params", params, num_steps)
    if priors.transition_concentration is not None and np.ndim(params.transition_matrix) == 3:
        raise ValueError(
            "priors.transition_concentration: a Dirichlet prior draws one constant (M, M) "
            "transition matrix, but params.transition_matrix is time-varying (T, M, M); drop "
            "the prior to use the given per-step matrices, or pass an (M, M) matrix"
        )
    inputs = check_input_series("inputs", inputs, params, num_steps)

    dtype = jnp.asarray(params.initial_means).dtype if y is None else jnp.asarray(y).dtype
    inputs = jnp.asarray(inputs, dtype)
    arrays = SwitchingParams(*(jnp.asarray(a, dtype) for a in params))
    trans, dyn_covs, emi_covs = (
        arrays.transition_matrix,
        arrays.dynamics_covs,
        arrays.emission_covs,
    )
    if priors.transition_concentration is not None:
        conc = jnp.asarray(priors.transition_concentration, dtype)
        trans = numpyro.sample("transition_matrix", dist.Dirichlet(conc).to_event(1))
    if priors.dynamics_cov_scale is not None:
        shape, rate = (
            jnp.broadcast_to(jnp.asarray(v, dtype), (m,)) for v in priors.dynamics_cov_scale
        )
        scale = numpyro.sample("dynamics_cov_scale", dist.InverseGamma(shape, rate).to_event(1))
        dyn_covs = scale[:, None, None] * dyn_covs
    if priors.emission_cov_scale is not None:
        shape, rate = (
            jnp.broadcast_to(jnp.asarray(v, dtype), (m,)) for v in priors.emission_cov_scale
        )
        scale = numpyro.sample("emission_cov_scale", dist.InverseGamma(shape, rate).to_event(1))
        emi_covs = scale[:, None, None] * emi_covs
    dyn_covs = dyn_covs + jitter * jnp.eye(d, dtype=dtype)
    model = arrays._replace(transition_matrix=trans, dynamics_covs=dyn_covs, emission_covs=emi_covs)

    if y is None:
        key = numpyro.prng_key()
        if key is None:
            raise ValueError(
                "y: with y=None the program simulates and needs a PRNG key; run it under "
                "numpyro.handlers.seed or numpyro.infer.Predictive"
            )
        modes, states, obs = simulate_unchecked(key, model, inputs)
        numpyro.deterministic("modes", modes)
        numpyro.deterministic("states", states)
        numpyro.deterministic("observations", obs)
        return
    states = numpyro.sample("states", dist.ImproperUniform(constraints.real, (), (num_steps, d)))
    numpyro.factor(
        "log_joint", switching_log_joint_unchecked(model, states, jnp.asarray(y, dtype), inputs)
    )


def switching_dims(
    priors: SwitchingPriors | None = None, *, prior_predictive: bool = False
) -> dict[str, list[str]]:
    """ArviZ dimension names of the sites of ``switching_model(..., priors=priors)``.

    "states" is ["time", "state_dim"]; the prior sites present add "transition_matrix"
    ["mode_from", "mode_to"], "dynamics_cov_scale" ["mode"], "emission_cov_scale" ["mode"];
    ``prior_predictive`` adds the simulated "modes" ["time"] and "observations"
    ["time", "obs_dim"].
    """
    if priors is not None and not isinstance(priors, SwitchingPriors):
        raise ValueError(f"priors: expected a SwitchingPriors or None, got {type(priors).__name__}")
    priors = SwitchingPriors() if priors is None else priors
    dims = {"states": ["time", "state_dim"]}
    if priors.transition_concentration is not None:
        dims["transition_matrix"] = ["mode_from", "mode_to"]
    if priors.dynamics_cov_scale is not None:
        dims["dynamics_cov_scale"] = ["mode"]
    if priors.emission_cov_scale is not None:
        dims["emission_cov_scale"] = ["mode"]
    if prior_predictive:
        dims |= {"modes": ["time"], "observations": ["time", "obs_dim"]}
    return dims


__all__ = [
    "SCENARIOS",
    "SwitchingParams",
    "SwitchingPriors",
    "as_float_field",
    "check_input_series",
    "check_params",
    "check_priors",
    "check_transition_steps",
    "get_scenario",
    "is_psd",
    "maneuvering_target",
    "masked_gaussian_logpdf",
    "per_step_transitions",
    "psd_factor",
    "simulate",
    "simulate_unchecked",
    "step_offsets",
    "step_transition",
    "switching_dims",
    "switching_log_joint",
    "switching_log_joint_unchecked",
    "switching_model",
]
