"""Reading a fitted switching model: smoothed regime probabilities, and the choice of the
number of regimes.

- ``smoothed_regime_probabilities``: P(s_t = j | y_{1:T}) of the regimes (the backward
  recursion on the filter's mode probabilities, summed over the modes of each regime);
- ``select_num_regimes``: candidate numbers of regimes, each fitted by ``fit_switching``,
  scored by AIC and BIC (``information_criteria``, ``results``) and by the held-out one-step
  predictive density (``RegimeSelection``).

``information_criteria`` and ``expected_durations`` are in ``results`` beside the
``SwitchingFitResult`` they read. ``select_num_regimes`` is a Python-level driver over compiled
kernels, not traceable.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np

from .... import validation
from ....models.markov_switching import SwitchingSpec, regime_probabilities
from .em import em_expectations
from .likelihood import check_likelihood, switching_log_likelihood
from .mle import fit_switching
from .parameters import check_data, check_spec, check_theta, register_spec
from .results import information_criteria


def smoothed_regime_probabilities(spec: SwitchingSpec, theta=None, *, likelihood="imm"):
    """P(s_t = j | y_{1:T}) of the regimes (T, M): the modes' smoothed probabilities (the
    backward recursion on the filter's mode probabilities, exact for the econometric models)
    summed over the modes of each regime (the tuples of MS-AR)."""
    spec = check_spec("spec", spec)
    theta = check_theta("theta", spec, theta)
    obs, u = check_data(spec, None, None)
    likelihood = check_likelihood(likelihood, spec.structure, obs.shape[0])
    _, smooth, _ = em_expectations(register_spec(spec), likelihood, theta, obs, u)
    return np.asarray(regime_probabilities(spec.structure, smooth))


class RegimeSelection(NamedTuple):
    """Candidate numbers of regimes, each fitted by maximum likelihood.

    Attributes:
        num_regimes: (C,) the candidates M.
        log_likelihood, num_parameters, aic, bic: (C,) of the fit on the whole series.
        heldout_log_predictive: (C,) sum over the last ``holdout`` steps of
            log p(y_t | y_{1:t-1}, theta_hat), theta_hat fitted on the steps before them
            (a leave-future-out score with one fit per candidate, no refits).
        best_bic, best_heldout: the M each criterion picks.
        fits: the ``SwitchingFitResult`` of each candidate (whole series).
    """

    num_regimes: np.ndarray
    log_likelihood: np.ndarray
    num_parameters: np.ndarray
    aic: np.ndarray
    bic: np.ndarray
    heldout_log_predictive: np.ndarray
    best_bic: int
    best_heldout: int
    fits: tuple


def select_num_regimes(
    key,
    make_spec,
    endog,
    *,
    candidates=(1, 2, 3),
    holdout: int = 40,
    likelihood: str = "exact",
    num_starts: int = 8,
) -> RegimeSelection:
    """Choose the number of regimes by BIC and by held-out one-step predictive density.

    ``make_spec(endog, num_regimes)`` builds each candidate (e.g.
    ``lambda y, m: markov_switching_ar(y, 2, num_regimes=m)``). Each is fitted by
    ``fit_switching`` on the whole series (log-likelihood, k, AIC, BIC) and on all but the
    last ``holdout`` steps (marked missing, so both fits share one compiled program); the
    held-out score is log p(y_{T-H+1:T} | y_{1:T-H}, theta_hat) =
    log L_T(theta_hat) - log L_{T-H}(theta_hat), the sum of the one-step-ahead predictive log
    densities of the held-out steps.

    Not traceable: a Python-level driver (one ``fit_switching`` per candidate, NumPy
    results) over compiled kernels; ``jit``/``vmap`` ``switching_log_likelihood`` instead.

    Raises:
        ValueError: naming the argument (``key`` not a ``jax.random`` key, a bad ``endog``,
            ``holdout`` or ``candidates``).
    """
    validation.check_key("key", key)
    endog = validation.as_float_array("endog", endog).reshape(-1)
    holdout = validation.check_positive_int("holdout", holdout)
    if holdout >= endog.shape[0] - 10:
        raise ValueError(f"holdout: {holdout} leaves too few of the {endog.shape[0]} steps to fit")
    candidates = tuple(validation.check_positive_int("candidates", c) for c in candidates)
    keys = jax.random.split(key, 2 * len(candidates))
    rows, fits = [], []
    for c, m in enumerate(candidates):
        full_spec = make_spec(endog, m)
        full = fit_switching(keys[2 * c], full_spec, likelihood=likelihood, num_starts=num_starts)
        # the training fit: the same series with its last steps missing (NaN), so it reuses
        # the compiled fit of the whole series (same shapes)
        masked = np.array(full_spec.observations)
        masked[-holdout:] = np.nan
        train = fit_switching(
            keys[2 * c + 1],
            full_spec,
            masked,
            inputs=full_spec.inputs,
            likelihood=likelihood,
            num_starts=num_starts,
        )
        whole = float(switching_log_likelihood(full_spec, train.theta, likelihood=likelihood))
        crit = information_criteria(full)
        rows.append(
            (
                float(full.log_likelihood[-1]),
                full.num_parameters,
                crit["aic"],
                crit["bic"],
                whole - float(train.log_likelihood[-1]),
            )
        )
        fits.append(full)
    ll, k, aic, bic, heldout = (np.asarray(col) for col in zip(*rows, strict=True))
    return RegimeSelection(
        num_regimes=np.asarray(candidates),
        log_likelihood=ll,
        num_parameters=k,
        aic=aic,
        bic=bic,
        heldout_log_predictive=heldout,
        best_bic=int(candidates[int(np.argmin(bic))]),
        best_heldout=int(candidates[int(np.argmax(heldout))]),
        fits=tuple(fits),
    )


__all__ = ["RegimeSelection", "select_num_regimes", "smoothed_regime_probabilities"]
