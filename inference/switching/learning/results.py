"""What a fit of a switching model returns (``SwitchingFitResult``), and what statsmodels users
read off it: information criteria and expected regime durations.

- ``SwitchingFitResult``: the estimate, the log-likelihood trace, standard errors, the number
  of free scalars k and of observed steps T (``fit_switching``, ``mle``; EM, ``em``);
- ``information_criteria``: AIC, BIC and HQIC with statsmodels' definitions;
- ``expected_durations``: 1 / (1 - P[i, i]) per regime.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ....models.switching import SwitchingParams


class SwitchingFitResult(NamedTuple):
    """A fitted switching model.

    Attributes:
        params: ``SwitchingParams`` at the estimate.
        theta: dict, the estimate of every parameter (the fixed ones as given).
        log_likelihood: (num_iterations + 1,) the trace of log p(y | theta) of the best start
            (EM: one entry per iteration; L-BFGS: per accepted step), last = the maximum.
        stderr: dict name -> standard errors (NaN for fixed parameters, or where the Hessian
            is not negative definite).
        start_log_likelihoods: (num_starts,) the final log-likelihood from each start.
        num_parameters: the free scalars (a transition row counts M - 1), statsmodels' k.
        num_observations: T (observed steps).
        converged: whether the best start met the tolerance.
        method, likelihood: as requested.
        seconds: wall time of the fit (compilation included).
    """

    params: SwitchingParams
    theta: dict
    log_likelihood: np.ndarray
    stderr: dict
    start_log_likelihoods: np.ndarray
    num_parameters: int
    num_observations: int
    converged: bool
    method: str
    likelihood: str
    seconds: float

    @property
    def aic(self) -> float:
        """-2 log L + 2 k."""
        return information_criteria(self)["aic"]

    @property
    def bic(self) -> float:
        """-2 log L + k log T."""
        return information_criteria(self)["bic"]


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


__all__ = ["SwitchingFitResult", "expected_durations", "information_criteria"]
