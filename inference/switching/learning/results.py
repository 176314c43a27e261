"""What a fit of a switching model returns (``SwitchingFitResult``), and what statsmodels users
read off it: information criteria and expected regime durations.

- ``SwitchingFitResult``: the estimate, the log-likelihood trace, standard errors, the entries
  on the boundary of their support, the number of free scalars k and of observed steps T
  (``fit_switching``, ``mle``; EM, ``em``);
- ``boundary_mask``: which unconstrained coordinates of an estimate, and which of its
  reported entries, lie on the boundary of the support (a scale at 0, a probability at 0 or
  1, two ordered means merged);
- ``information_criteria``: AIC, BIC and HQIC with statsmodels' definitions;
- ``expected_durations``: 1 / (1 - P[i, i]) per regime.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import numpy as np
from jax.flatten_util import ravel_pytree

from ....models.switching import SwitchingParams
from .parameters import constrain, register_spec, registered_spec, unconstrained

# an unconstrained coordinate is on the boundary when the reported parameters have (nearly)
# stopped moving with it (its Jacobian column below this fraction of its size at the start)
# and the log-likelihood is flat in it (``BOUNDARY_INFORMATION``)
BOUNDARY_RATIO = 1e-6
# ... flat: its observed information -d2 log L / dz2 below this many nats per observed step
BOUNDARY_INFORMATION = 1e-6


class LocalOptima(NamedTuple):
    """The distinct end points of a multi-start fit (``fit_switching``), best first: starts
    whose final log-likelihoods lie within ``tolerance`` nats of each other (single linkage on
    the sorted values) count as one optimum.

    Attributes:
        log_likelihoods: (K,) the best log-likelihood in each group.
        num_starts: (K,) how many starts ended there.
        num_converged: (K,) how many of those converged (``fit_switching``: the gradient
            tolerance, or settled at round-off).
        tolerance: the grouping tolerance in nats.
        thetas: (K,) tuple of the estimates {name: array} of the free parameters at each
            optimum (its best start), labelled by the suite's convention as the fit's
            estimate is; None when not recorded.
    """

    log_likelihoods: np.ndarray
    num_starts: np.ndarray
    num_converged: np.ndarray
    tolerance: float
    thetas: tuple | None = None


def local_optima(values, converged=None, *, tolerance: float = 1e-4, thetas=None) -> LocalOptima:
    """Group the final log-likelihoods of a fit's starts into distinct optima (``LocalOptima``):
    sorted from the best, a value more than ``tolerance`` below the previous one opens a new
    group. Non-finite values (a start that failed) form no group. ``thetas``: one estimate per
    start (aligned with ``values``), of which each group keeps its best start's."""
    values = np.asarray(values, dtype=float)
    if thetas is not None and len(thetas) != values.size:
        raise ValueError(
            f"thetas: expected one estimate per start ({values.size}), got {len(thetas)}"
        )
    converged = np.ones(values.shape, bool) if converged is None else np.asarray(converged, bool)
    order = np.argsort(-np.where(np.isfinite(values), values, -np.inf), kind="stable")
    order = order[np.isfinite(values[order])]
    best, counts, done, kept = [], [], [], []
    previous = np.inf
    for i in order:
        if not best or values[i] < previous - tolerance:
            best.append(values[i])
            counts.append(0)
            done.append(0)
            kept.append(None if thetas is None else thetas[i])
        counts[-1] += 1
        done[-1] += int(converged[i])
        previous = values[i]
    return LocalOptima(
        np.asarray(best, float),
        np.asarray(counts, int),
        np.asarray(done, int),
        float(tolerance),
        None if thetas is None else tuple(kept),
    )


class SwitchingFitResult(NamedTuple):
    """A fitted switching model.

    Attributes:
        params: ``SwitchingParams`` at the estimate.
        theta: dict, the estimate of every parameter (the fixed ones as given).
        log_likelihood: (num_iterations + 1,) the trace of log p(y | theta) of the best start
            (EM: one entry per iteration; L-BFGS: per accepted step), last = the maximum.
        stderr: dict name -> standard errors (NaN for fixed parameters, for an entry on the
            boundary, for every entry with EM, or where the Hessian on the interior
            coordinates is not negative definite).
        on_boundary: dict name -> bool array of the parameter's shape: the entry lies on the
            boundary of its support (``boundary_mask``, from the MLE's observed information;
            False for fixed parameters and everywhere with EM, which computes no Hessian).
        start_log_likelihoods: (num_starts,) the final log-likelihood from each start.
        num_parameters: the free scalars (a transition row counts M - 1), statsmodels' k.
        num_observations: T (observed steps).
        converged: whether the best start converged (``fit_switching``: the gradient
            tolerance, settled at round-off, or on the boundary with the interior gradient
            passing).
        method, likelihood: as requested.
        seconds: wall time of the fit (compilation included).
        local_optima: ``LocalOptima``, the distinct end points of the starts (best first,
            with how many starts reached each).
    """

    params: SwitchingParams
    theta: dict
    log_likelihood: np.ndarray
    stderr: dict
    on_boundary: dict
    start_log_likelihoods: np.ndarray
    num_parameters: int
    num_observations: int
    converged: bool
    method: str
    likelihood: str
    seconds: float
    local_optima: LocalOptima | None = None

    @property
    def aic(self) -> float:
        """-2 log L + 2 k."""
        return information_criteria(self)["aic"]

    @property
    def bic(self) -> float:
        """-2 log L + k log T."""
        return information_criteria(self)["bic"]


@functools.partial(jax.jit, static_argnums=(0, 1))
def reported_jacobian(spec_key, free, flat, like):
    """d (the free parameters, constrained and flattened) / d (their unconstrained coordinates
    ``flat``, laid out as ``like``)."""
    spec = registered_spec(spec_key)
    _, unravel = ravel_pytree(like)

    def reported(f):
        theta = constrain(spec, free, {}, unravel(f))
        return ravel_pytree({n: theta[n] for n in free})[0]

    return jax.jacfwd(reported)(flat)


def flatten(tree) -> np.ndarray:
    """The leaves of a dict of arrays, raveled and concatenated in ``ravel_pytree``'s order
    (sorted keys), in NumPy: no JAX operation is dispatched."""
    leaves = [np.ravel(np.asarray(leaf)) for leaf in jax.tree.leaves(tree)]
    return np.concatenate(leaves) if leaves else np.zeros(0)


def unflatten(flat, like: dict) -> dict:
    """``flatten``'s inverse: the dict of ``like``'s keys and shapes from ``flat``, in NumPy."""
    out, start = {}, 0
    for name in sorted(like):
        shape = np.shape(like[name])
        size = int(np.prod(shape, dtype=int))
        out[name] = np.asarray(flat[start : start + size]).reshape(shape)
        start += size
    return out


def boundary_mask(
    spec, free: tuple, theta: dict, information, num_observations: int
) -> tuple[np.ndarray, np.ndarray]:
    """Where an estimate ``theta`` lies on the boundary of the support of its ``free``
    parameters: (coordinates, entries), boolean over the unconstrained coordinates z
    (``unconstrain``, flattened) and over the reported entries (the free parameters
    flattened in C order).

    A coordinate z_j is on the boundary when both hold:

    - the reported parameters have stopped moving with it: the norm of its column of
      d theta / d z is below ``BOUNDARY_RATIO`` times that at the spec's start (a scale
      c = e^z far below its start, a transition probability p near 0 or 1, where
      dp/dz = p (1 - p), two ordered means merged, a covariance's Cholesky diagonal near 0);
    - the log-likelihood is flat in it: its observed information ``information[j]``
      (-d2 log L / dz_j2 at theta) is below ``BOUNDARY_INFORMATION`` times
      ``num_observations``. In z = log c the information is free of units (about T / 2 for
      a well-determined noise scale, whatever its size), so a small scale in the data's
      units is not mistaken for one at 0; at the boundary it vanishes like c.

    There the Hessian in z is singular and its inverse says nothing. An entry is on the
    boundary when it moves with a boundary coordinate (d theta / d z nonzero at the start)
    and has itself stopped moving (the norm of its row of d theta / d z below
    ``BOUNDARY_RATIO`` times that at the start: a probability at 0 or 1, a variance at 0).
    The other entries of a transition row with a probability at 0 are inside the support:
    p[1->1] = 1 - p[1->0] when p[1->2] = 0, with the standard error of p[1->0].

    Args:
        spec, free, theta: the spec, the fitted names and the estimate (concrete).
        information: (n_z,) the diagonal of -d2 log L / dz2 at theta (``fit_switching``'s
            Hessian).
        num_observations: the observed steps T.
    """
    spec_key = register_spec(spec)
    like = unconstrained(spec_key, free, {n: np.asarray(spec.theta[n]) for n in free})
    z_start = flatten(like)
    flat = flatten(unconstrained(spec_key, free, {n: np.asarray(theta[n]) for n in free}))
    start = np.asarray(reported_jacobian(spec_key, free, z_start, like))
    at = np.asarray(reported_jacobian(spec_key, free, flat.astype(z_start.dtype), like))
    information = np.asarray(information, dtype=float)
    if information.shape != (at.shape[1],):
        raise ValueError(
            f"information: expected shape ({at.shape[1]},) (one per unconstrained coordinate), "
            f"got {information.shape}"
        )
    with np.errstate(invalid="ignore"):
        still = ~(np.linalg.norm(at, axis=0) > BOUNDARY_RATIO * np.linalg.norm(start, axis=0))
        flat_here = ~(information > BOUNDARY_INFORMATION * max(int(num_observations), 1))
        stopped = ~(np.linalg.norm(at, axis=1) > BOUNDARY_RATIO * np.linalg.norm(start, axis=1))
    coordinates = still & flat_here
    entries = np.any(start[:, coordinates] != 0, axis=1) & stopped
    return coordinates, entries


def information_criteria(result: SwitchingFitResult) -> dict:
    """AIC = -2 log L + 2 k, BIC = -2 log L + k log T, HQIC = -2 log L + 2 k log log T, with k the
    free scalars and T the observed steps (statsmodels' definitions)."""
    ll = float(result.log_likelihood[-1])
    k, n = result.num_parameters, result.num_observations
    return {
        "aic": -2.0 * ll + 2.0 * k,
        "bic": -2.0 * ll + k * math.log(n),
        "hqic": -2.0 * ll + 2.0 * k * math.log(math.log(n)),
    }


def expected_durations(transition_matrix) -> np.ndarray:
    """The expected stay in each regime, 1 / (1 - P[i, i]) steps (inf for an absorbing one)."""
    p = np.asarray(transition_matrix, dtype=float)
    with np.errstate(divide="ignore"):
        return 1.0 / (1.0 - np.diagonal(p, axis1=-2, axis2=-1))


__all__ = [
    "BOUNDARY_RATIO",
    "LocalOptima",
    "SwitchingFitResult",
    "boundary_mask",
    "expected_durations",
    "flatten",
    "information_criteria",
    "local_optima",
    "reported_jacobian",
    "unflatten",
]
