"""The parameters theta of a parametrised switching model (``SwitchingSpec``,
``attnbayes.models.markov_switching``): their checks, and the transforms of the free ones.

- ``check_spec``, ``check_theta`` (names, shapes, finite values, each inside its support),
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

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.distributions import constraints
from numpyro.distributions.transforms import biject_to

from .... import validation
from ....models.markov_switching import SwitchingSpec
from ....models.switching import is_psd
from ..kalman import check_inputs


def check_spec(name: str, spec) -> SwitchingSpec:
    """``spec`` if it is a ``SwitchingSpec``, else a ``ValueError`` naming ``name``."""
    if not isinstance(spec, SwitchingSpec):
        raise ValueError(
            f"{name}: expected a SwitchingSpec (markov_switching_regression, "
            f"markov_switching_ar, switching_state_space), got {type(spec).__name__}"
        )
    return spec


def check_theta(name: str, spec: SwitchingSpec, theta) -> dict:
    """theta: a dict with the spec's names and shapes (finite when concrete)."""
    if theta is None:
        theta = spec.theta
    if not isinstance(theta, dict):
        raise ValueError(f"{name}: expected a dict of parameters, got {type(theta).__name__}")
    missing = set(spec.theta) - set(theta)
    extra = set(theta) - set(spec.theta)
    if missing or extra:
        raise ValueError(
            f"{name}: expected the parameters {sorted(spec.theta)}; missing {sorted(missing)}, "
            f"unknown {sorted(extra)}"
        )
    out = {}
    for key, value in theta.items():
        arr = validation.as_float_array(f"{name}[{key!r}]", value)
        if tuple(arr.shape) != tuple(np.shape(spec.theta[key])):
            raise ValueError(
                f"{name}[{key!r}]: expected shape {np.shape(spec.theta[key])}, got {arr.shape}"
            )
        if not validation.is_traced(arr):
            validation.check_finite(f"{name}[{key!r}]", arr)
            if spec.support[key] is constraints.positive_definite:
                # the model takes singular PSD covariances (e.g. a rank-deficient Q0); only a
                # free one must be positive definite (``check_free_values``)
                inside = is_psd(arr)
            else:
                # eagerly, also while a caller traces the other fields (under jit an operation
                # on a constant would otherwise be staged out and its truth value unknown)
                with jax.ensure_compile_time_eval():
                    inside = bool(spec.support[key](jnp.asarray(arr)).all())
            if not inside:
                raise ValueError(f"{name}[{key!r}]: outside its support {spec.support[key]}")
        out[key] = arr
    return out


def check_data(spec: SwitchingSpec, observations, inputs):
    """The observations and inputs of a fit, checked against the spec's params (``check_inputs``):
    the spec's own data when ``observations`` is None (its inputs too, unless given)."""
    obs = spec.observations if observations is None else observations
    u = spec.inputs if (inputs is None and observations is None) else inputs
    _, obs, u = check_inputs(spec.params, obs, inputs=u)
    return obs, u


# ----------------------------------------------------------------------------- transforms


def _transforms(spec: SwitchingSpec, free: tuple) -> dict:
    return {name: biject_to(spec.support[name]) for name in free}


def unconstrain(spec, free, theta):
    """{name: z} the unconstrained coordinates of the ``free`` parameters of ``theta``."""
    tf = _transforms(spec, free)
    return {n: tf[n].inv(jnp.asarray(theta[n])) for n in free}


def constrain(spec, free, theta_fixed, z):
    """theta: the fixed parameters ``theta_fixed`` and the free ones mapped back from ``z``."""
    tf = _transforms(spec, free)
    return theta_fixed | {n: tf[n](z[n]) for n in free}


def num_free(spec: SwitchingSpec, free: tuple) -> int:
    """The number of free scalars: the size of the unconstrained vector (a simplex row of
    length M counts M - 1)."""
    z = unconstrain(spec, free, spec.theta)
    return int(sum(np.size(v) for v in z.values()))


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
    no logarithm, unordered regime means no ordered coordinates. (A zero transition
    probability passes: the stick-breaking inverse clips it.)"""
    z = unconstrain(spec, free, {n: np.asarray(spec.theta[n], float) for n in free})
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
            f"{spec.support[name]} (e.g. a zero variance, or unordered regime means), where "
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
]
