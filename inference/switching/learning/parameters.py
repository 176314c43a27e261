"""The parameters theta of a parametrised switching model (``SwitchingSpec``,
``attnbayes.models.markov_switching``): their checks, and the transforms of the free ones.

- ``check_spec`` (a spec whose theta is a valid model), ``check_theta`` (names, shapes, finite
  values, each inside its support),
  ``check_free`` (the fitted names) and ``check_free_values`` (a free parameter's start inside
  its support, where its unconstrained coordinates are finite);
- ``check_data``: the observations and inputs of a fit (the spec's own by default);
- ``unconstrain``, ``constrain``, ``num_free``: the unconstrained parametrisation of the free
  parameters (``numpyro.distributions.transforms.biject_to`` of each parameter's support:
  stick-breaking for transition rows, log for variances, an ordered transform for regime means,
  Cholesky for covariances) and the number of free scalars (statsmodels' k);
- ``register_spec``, ``registered_spec``: specs hold arrays, so they are not hashable; the
  compiled kernels of the fits take a key made of the structure, the constraint types and the
  shapes, and look the spec up by it.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.distributions import constraints
from numpyro.distributions.transforms import biject_to

from .... import validation
from ....models.markov_switching import SwitchingSpec, build_params
from ....models.regime_laws import ordered_first_column
from ....models.switching import is_psd
from ..kalman import check_inputs


def check_spec(name: str, spec) -> SwitchingSpec:
    """``spec`` if it is a ``SwitchingSpec`` whose theta is a valid model, else a ``ValueError``
    naming ``name`` and the theta entry at fault (``name.theta['variances']``).

    A concrete theta is checked before any work, as ``check_theta`` does but by the rules of a
    valid model (the tolerance of ``check_params``; the order of regime means is a labelling
    convention that binds a free parameter only, ``check_free_values``): a transition row
    that does not sum to 1, a variance <= 0, a NaN mean are named as the user gave them, not
    by the ``SwitchingParams`` fields the model builds from them."""
    if not isinstance(spec, SwitchingSpec):
        raise ValueError(
            f"{name}: expected a SwitchingSpec (markov_switching_regression, "
            f"markov_switching_ar, switching_state_space), got {type(spec).__name__}"
        )
    _checked_theta(f"{name}.theta", spec, spec.theta, model=True)
    return spec


def check_theta(name: str, spec: SwitchingSpec, theta) -> dict:
    """theta: a dict with the spec's names and shapes (finite and inside each support when
    concrete), or the spec's own when None."""
    return _checked_theta(name, spec, spec.theta if theta is None else theta, model=False)


def _support_problem(support, arr: np.ndarray, model: bool) -> str | None:
    """What puts a concrete ``arr`` outside ``support``, in the user's terms (None: inside).

    ``model``: the rules of a valid model rather than of a fit's support (``check_spec``):
    probability rows summing to 1 to ``check_params``'s tolerance (1e-5). The order of the
    parameter that labels the regimes (``ordered_vector``, ``ordered_first_column``,
    ``positive_ordered_vector``) never binds here: any labelling is the same model (the fits
    optimise over unlabelled regimes and label their optimum; NUTS samples under the ordered
    prior), so a theta in another labelling is evaluated, forecast and smoothed as given."""
    if support is constraints.positive_definite:
        # the model takes singular PSD covariances (e.g. a rank-deficient Q0); only a free one
        # must be positive definite (``check_free_values``)
        return None if is_psd(arr) else "a matrix is not symmetric positive semi-definite"
    if support is constraints.ordered_vector or support is ordered_first_column:
        return None  # the labelling order is a convention of the fits, not of the model
    if support is constraints.positive_ordered_vector:
        support = constraints.positive
    if model and support is constraints.simplex:
        rows = arr.reshape(-1, arr.shape[-1])
        inside = np.all(rows >= 0, axis=-1) & np.isclose(rows.sum(axis=-1), 1.0, atol=1e-5)
    elif support is constraints.real:
        inside = np.isfinite(arr)
    elif support is constraints.positive:
        inside = arr > 0
    elif support is constraints.simplex:
        rows = arr.reshape(-1, arr.shape[-1])
        inside = np.all(rows >= 0, axis=-1) & (np.abs(rows.sum(axis=-1) - 1.0) < 1e-6)
        inside = inside.reshape(arr.shape[:-1])
    else:
        # eagerly, also while a caller traces the other fields (under jit an operation on a
        # constant would otherwise be staged out and its truth value unknown)
        with jax.ensure_compile_time_eval():
            inside = np.asarray(support(jnp.asarray(arr)))
    if inside.all():
        return None
    i = int(np.flatnonzero(~inside.reshape(-1))[0])
    if support is constraints.simplex:
        row = arr.reshape(-1, arr.shape[-1])[i]
        index = ", ".join(str(int(k)) for k in np.unravel_index(i, arr.shape[:-1]))
        where = "it" if arr.ndim == 1 else f"row {index}"
        if np.any(row < 0):
            return f"{where} has a negative entry {row.min():.6g} (a probability)"
        return f"{where} sums to {row.sum():.6g}, not 1 (a vector of probabilities)"
    if isinstance(support, type(constraints.positive)):
        entry = (
            "" if arr.ndim == 0 else f"entry {[int(k) for k in np.unravel_index(i, arr.shape)]} "
        )
        return f"{entry}is {arr.reshape(-1)[i]:.6g}, not > 0"
    return f"{arr.tolist()}"


def _checked_theta(name: str, spec: SwitchingSpec, theta, *, model: bool) -> dict:
    """``check_theta``; ``model``: with the rules of a valid model (``_support_problem``)."""
    if not isinstance(theta, dict):
        raise ValueError(f"{name}: expected a dict of parameters, got {type(theta).__name__}")
    missing = set(spec.support) - set(theta)  # the spec's parameters: those with a support
    extra = set(theta) - set(spec.support)
    if missing or extra:
        raise ValueError(
            f"{name}: expected the parameters {sorted(spec.support)}; missing "
            f"{sorted(missing)}, unknown {sorted(extra)}"
        )
    out = {}
    for key, value in theta.items():
        arr = validation.as_float_array(f"{name}[{key!r}]", value)
        if tuple(arr.shape) != tuple(np.shape(spec.theta[key])):
            raise ValueError(
                f"{name}[{key!r}]: expected shape {np.shape(spec.theta[key])}, got {arr.shape}"
            )
        support = spec.support[key]
        if not validation.is_traced(arr):
            validation.check_finite(f"{name}[{key!r}]", arr)
            problem = _support_problem(support, np.asarray(arr, np.float64), model)
            if problem is not None:
                raise ValueError(f"{name}[{key!r}]: outside its support {support}: {problem}")
        out[key] = arr
    return out


def check_data(spec: SwitchingSpec, observations, inputs):
    """The observations and inputs of a fit, checked against the spec's params (``check_inputs``):
    the spec's own data when ``observations`` is None (its inputs too, unless given).

    With TVTP (``spec.structure.num_tvtp`` > 0) the inputs carry the covariates (their last
    columns) and the per-step transition matrices are built from them: required with other
    observations, of shape (T, ``input_width``) with T the observations' rows, finite when
    concrete (``ValueError`` naming ``inputs``)."""
    obs = spec.observations if observations is None else observations
    u = spec.inputs if (inputs is None and observations is None) else inputs
    structure = spec.structure
    if structure.num_tvtp == 0:
        params = built_params(structure, spec.theta, spec.inputs)
    else:
        num_rows = np.shape(obs)[0] if np.ndim(obs) >= 1 else None
        width = structure.input_width
        if u is None:
            raise ValueError(
                f"inputs: required (shape ({num_rows}, {width})) with observations: the model "
                f"has time-varying transition probabilities, whose {structure.num_tvtp} "
                "covariate(s) are the inputs' last columns"
            )
        u = validation.as_float_array("inputs", u)
        if u.ndim != 2 or u.shape != (num_rows, width):
            raise ValueError(
                f"inputs: expected shape ({num_rows}, {width}) (one row per observation: the "
                f"regressors or lags, then the TVTP covariates), got {tuple(u.shape)}"
            )
        validation.check_finite("inputs", u)
        params = built_params(structure, spec.theta, u)
    _, obs, u = check_inputs(params, obs, inputs=u)
    return obs, u


# ----------------------------------------------------------------------------- transforms


def _transforms(spec: SwitchingSpec, free: tuple) -> dict:
    return {name: biject_to(spec.support[name]) for name in free}


def unconstrain(spec, free, theta):
    """{name: z} the unconstrained coordinates of the ``free`` parameters of ``theta``."""
    tf = _transforms(spec, free)
    return {n: tf[n].inv(jnp.asarray(theta[n])) for n in free}


@functools.partial(jax.jit, static_argnums=(0, 1))
def unconstrained(spec_key, free, theta):
    """``unconstrain`` compiled (one program per spec shape, where the eager transforms
    dispatch a small program per operation): the spec of ``register_spec``'s key."""
    return unconstrain(registered_spec(spec_key), free, theta)


# ``build_params`` compiled: one program per structure and shapes (a fit's checks would
# otherwise dispatch some 25-60 eager operations, each compiled on its first use)
built_params = jax.jit(build_params, static_argnums=0)


def constrain(spec, free, theta_fixed, z):
    """theta: the fixed parameters ``theta_fixed`` and the free ones mapped back from ``z``."""
    tf = _transforms(spec, free)
    return theta_fixed | {n: tf[n](z[n]) for n in free}


def num_free(spec: SwitchingSpec, free: tuple) -> int:
    """The number of free scalars: the size of the unconstrained vector (a simplex row of
    length M counts M - 1)."""
    shapes = jax.eval_shape(
        lambda theta: unconstrain(spec, free, theta),
        {n: np.asarray(spec.theta[n]) for n in free},
    )
    return int(sum(np.prod(v.shape, dtype=int) for v in shapes.values()))


def check_free(spec: SwitchingSpec, free) -> tuple:
    """The names to fit: ``spec.free`` when None, else a non-empty sequence of its names."""
    if free is None:
        return tuple(spec.free)
    if isinstance(free, str) or not all(isinstance(n, str) for n in free):
        raise ValueError(f"free: expected a sequence of parameter names, got {free!r}")
    free = tuple(free)
    unknown = [n for n in free if n not in spec.theta]
    if unknown:
        raise ValueError(f"free: unknown parameter(s) {unknown}; known: {list(spec.theta)}")
    if not free:
        raise ValueError("free: nothing to fit (empty)")
    return free


def check_free_values(spec: SwitchingSpec, free: tuple) -> None:
    """Each free parameter's start value must map to finite unconstrained coordinates (the
    interior of its support): a singular covariance has no Cholesky factor, a zero variance
    no logarithm. (Unordered regime means start a fit: it optimises over unlabelled regimes,
    ``unlabelled``, so pass that spec here; a zero transition
    probability passes: the stick-breaking inverse clips it.)"""
    z = unconstrained(register_spec(spec), free, {n: np.asarray(spec.theta[n]) for n in free})
    for name in free:
        if np.all(np.isfinite(np.asarray(z[name]))):
            continue
        value = np.asarray(spec.theta[name], float)
        if spec.support[name] is constraints.positive_definite:
            eig = np.linalg.eigvalsh(value.reshape(-1, *value.shape[-2:]))
            bad = np.flatnonzero(eig[:, 0] <= 0.0).tolist()
            hint = ""
            if name in ("dynamics_covs", "emission_covs"):
                scale = name.replace("covs", "cov_scale")
                hint = (
                    f"; keep it fixed and free {scale!r} instead (the scale is fitted on the "
                    "range of a singular covariance)"
                )
            raise ValueError(
                f"free: {name!r} is singular in init (matrices {bad}), and its "
                f"positive-definite parametrisation (Cholesky) cannot start there{hint}"
            )
        raise ValueError(
            f"free: {name!r} starts outside or on the boundary of its support "
            f"{spec.support[name]} (e.g. a zero variance), where "
            "its unconstrained coordinates are not finite; keep it fixed or start it inside"
        )


# ----------------------------------------------------------------------------- compiled kernels

# specs are not hashable (they hold arrays): the compiled kernels take a key into this table,
# made from the structure, the support's constraint types and the fixed shapes
_SPECS: dict = {}


def register_spec(spec: SwitchingSpec):
    """The hashable key of ``spec`` for a compiled kernel (a static argument), registered so
    that ``registered_spec`` finds a spec of the same structure, constraints and shapes."""
    key = (
        spec.structure,
        tuple((n, type(c).__name__, repr(c)) for n, c in spec.support.items()),
        tuple((n, np.shape(v)) for n, v in spec.theta.items()),
    )
    _SPECS.setdefault(key, spec)
    return key


def registered_spec(key) -> SwitchingSpec:
    """The spec registered under ``key`` by ``register_spec`` (inside a compiled kernel: its
    structure and supports are what the key fixes)."""
    return _SPECS[key]


__all__ = [
    "built_params",
    "check_data",
    "check_free",
    "check_free_values",
    "check_spec",
    "check_theta",
    "constrain",
    "num_free",
    "register_spec",
    "registered_spec",
    "unconstrain",
    "unconstrained",
]
