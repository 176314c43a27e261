"""How far the collapsed filters' likelihoods move the posterior of a switching model's
parameters: ``posterior_shift``.

It runs NUTS over theta (``posteriors``: ``switching_marginal_model``) with several filter
likelihoods on one series (and the Gibbs sampler) under the same conjugate priors, and measures
each posterior against a reference: the exact likelihood (all M^T mode histories, short series)
or the Gibbs sampler (long series), each reference run twice with different seeds to give the
Monte Carlo noise floor.

Where the work runs: nowhere split over devices, and ``posterior_shift`` takes no ``mesh``
(``attnbayes.sharding``). The study is a handful of sampler runs (the reference, its repeat and
one per method), each a different program (another likelihood, or Gibbs) on one series, run
one after another; there is no batch of like items to split. Each run's key is
``jax.random.split(key, number of runs)[i]``, independent of the devices; the chains within a
run are the sampler's (``run_nuts``'s ``chain_method``). Under ``jax.distributed`` every process
computes the same study.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import jax
import numpy as np

from .... import validation
from ....models.markov_switching import SwitchingSpec
from ....models.switching import SwitchingParams, SwitchingPriors
from ...diagnostics import diagnostics
from .posteriors import POSTERIORS, check_samplers, learning_problem, posterior_draws, sample_theta

if TYPE_CHECKING:  # pandas is imported where used
    import pandas as pd


# ----------------------------------------------------------------------------- posterior shift


class PosteriorShift(NamedTuple):
    """The result of ``posterior_shift``.

    Attributes:
        table: pandas DataFrame, one row per (method, parameter): columns method, parameter
            (e.g. "transition_matrix[0,1]"), mean, sd, ref_mean, ref_sd, shift, shift_mcse,
            sd_ratio, sd_ratio_mcse, w1 (see ``posterior_shift``). The method
            ``"<reference>-repeat"`` is the reference run again with another seed: its rows
            are the noise floor.
        summary: pandas DataFrame, one row per run: max_abs_shift, max_shift_in_mcse
            (max |shift| / shift_mcse), max_abs_log_sd_ratio, max_w1 (NaN for the reference
            itself), seconds, min_ess_bulk, max_rhat (over the scalar entries of theta).
        posteriors: {run: DataTree} the runs (the methods, the reference and its repeat).
        seconds: {run: wall seconds} (compilation included where the run compiled).
        reference: the reference's name.
        free: the parameter names.
    """

    table: pd.DataFrame
    summary: pd.DataFrame
    posteriors: dict
    seconds: dict
    reference: str
    free: tuple


def _labels(name: str, shape: tuple) -> list[str]:
    if not shape:
        return [name]
    return [f"{name}[{','.join(str(i) for i in idx)}]" for idx in np.ndindex(shape)]


def _mcse(draws: np.ndarray, method: str) -> float:
    """The Monte Carlo standard error of the mean or sd of (chains, draws) draws (arviz_stats:
    ESS-based, Vehtari et al. 2021)."""
    import arviz_stats

    return float(arviz_stats.mcse(draws, method=method))


def _wasserstein1(a: np.ndarray, b: np.ndarray) -> float:
    """W1 between the empirical laws of two 1-D samples: the integral of |F_a - F_b|."""
    from scipy import stats

    return float(stats.wasserstein_distance(a, b))


def _shift_rows(method: str, draws: dict, ref: dict) -> list[tuple]:
    rows = []
    for name, values in draws.items():
        shape = values.shape[2:]
        a = values.reshape(*values.shape[:2], -1)
        b = ref[name].reshape(*ref[name].shape[:2], -1)
        for i, label in enumerate(_labels(name, shape)):
            x, y = a[..., i], b[..., i]
            mean, sd = float(x.mean()), float(x.std(ddof=1))
            ref_mean, ref_sd = float(y.mean()), float(y.std(ddof=1))
            if ref_sd <= 0:
                raise ValueError(f"reference: the draws of {label} do not vary (sd 0)")
            shift = (mean - ref_mean) / ref_sd
            shift_mcse = float(np.hypot(_mcse(x, "mean"), _mcse(y, "mean"))) / ref_sd
            ratio = sd / ref_sd
            ratio_mcse = ratio * float(
                np.hypot(_mcse(x, "sd") / max(sd, 1e-300), _mcse(y, "sd") / ref_sd)
            )
            w1 = _wasserstein1(x.ravel(), y.ravel()) / ref_sd
            figures = (shift, shift_mcse, ratio, ratio_mcse, w1)
            rows.append((method, label, mean, sd, ref_mean, ref_sd, *figures))
    return rows


def posterior_shift(
    key: jax.Array,
    model: SwitchingParams | SwitchingSpec,
    observations=None,
    *,
    methods=("gpb2", "imm"),
    reference: str = "exact",
    free=None,
    priors: SwitchingPriors | None = None,
    inputs=None,
    nuts_kwargs: dict | None = None,
    gibbs_kwargs: dict | None = None,
) -> PosteriorShift:
    """How far the collapsed filters' likelihoods move the posterior of theta.

    Each method gives a posterior of theta under the same priors (``study_priors`` by default;
    theta = ``GIBBS_FREE`` for a state-space model): a filter likelihood name ("exact",
    "gpb2", "imm", "gpb1") is NUTS over theta on ``switching_marginal_model`` with that
    likelihood, p_m(theta | y) ∝ p(theta) L_m(theta), and "gibbs" the Gibbs sampler of
    p(s, x, theta | y), exact. The exact posterior is "exact" (all M^T mode histories: short
    series) or "gibbs" (any length). Per scalar entry theta_k of theta and method m, against
    the reference run r:

        shift_k    = (E_m[theta_k] - E_r[theta_k]) / sd_r(theta_k)
        sd_ratio_k = sd_m(theta_k) / sd_r(theta_k)
        w1_k       = W1(p_m(theta_k), p_r(theta_k)) / sd_r(theta_k),
                     W1 = int |F_m(x) - F_r(x)| dx   (empirical CDFs of the draws)

    with Monte Carlo errors shift_mcse = sqrt(mcse_m(mean)^2 + mcse_r(mean)^2) / sd_r and
    sd_ratio_mcse = sd_ratio sqrt((mcse_m(sd) / sd_m)^2 + (mcse_r(sd) / sd_r)^2) (ESS-based
    MCSE). The reference runs twice with different seeds; the second run against the first
    ("<reference>-repeat") is the noise floor: a method whose figures are at the floor is
    indistinguishable from the exact posterior at this Monte Carlo size. Where the collapse is
    exact (F_j = 0: the state forgets its past, so GPB1, GPB2 and IMM are the exact filter)
    every method is at the floor (tested).

    Args:
        key: a ``jax.random`` key.
        model: the ``SwitchingParams`` of the model (its covariances are Q0_j, R0_j; the
            fixed parameters stay at their values) or a ``SwitchingSpec`` (its theta holds the
            fixed parameters).
        observations: (T, o) y_{1:T}; with a spec, None for its own data.
        methods: the posteriors to measure, names from ``POSTERIORS``, not the reference.
        reference: "exact" (default; refused above 2^16 histories) or "gibbs", or another
            name of ``POSTERIORS``.
        free: the parameters (default ``GIBBS_FREE`` for a state-space model, ``spec.free``
            otherwise; "gibbs" needs them within ``GIBBS_FREE``).
        priors: ``SwitchingPriors`` (default ``study_priors(M)``).
        inputs: (T, k) u_{1:T} when the model has inputs.
        nuts_kwargs: for every NUTS run (``run_nuts``: num_warmup, num_samples, num_chains,
            target_accept_prob, max_tree_depth, dense_mass, init_values, chain_method);
            default 2 x (500 + 1000).
        gibbs_kwargs: for every Gibbs run (num_warmup, num_samples, num_chains, mode_sampler,
            init_modes); default 2 x (1000 + 4000).

    Returns:
        ``PosteriorShift``.

    References: Kim (1994), J. Econometrics 60, 1-22 (GPB2); Blom and Bar-Shalom (1988), IEEE
    Trans. Automatic Control 33, 780-783 (IMM); Frühwirth-Schnatter (2006), Finite Mixture
    and Markov Switching Models, Springer (the exact posterior of a switching model, Gibbs);
    Vehtari, Gelman, Simpson, Carpenter and Bürkner (2021), Bayesian Analysis 16, 667-718
    (ESS, MCSE).
    """
    validation.check_key("key", key)
    p = learning_problem(model, observations, inputs, None, free, priors, None)
    methods = (methods,) if isinstance(methods, str) else tuple(methods)
    if not isinstance(reference, str) or reference not in POSTERIORS:
        raise ValueError(f"reference: expected one of {list(POSTERIORS)}, got {reference!r}")
    unknown = [m for m in methods if not isinstance(m, str) or m not in POSTERIORS]
    if unknown or not methods or len(set(methods)) != len(methods):
        raise ValueError(
            f"methods: expected distinct names from {list(POSTERIORS)}, got {list(methods)}"
        )
    if reference in methods:
        raise ValueError(
            f"methods: {reference!r} is the reference (its repeat run is the noise floor); "
            "leave it out of methods"
        )
    opts = check_samplers(
        p, {reference: "reference"} | dict.fromkeys(methods, "methods"), nuts_kwargs, gibbs_kwargs
    )
    runs = (reference, f"{reference}-repeat", *methods)
    posteriors, seconds, draws = {}, {}, {}
    for run, run_key in zip(runs, jax.random.split(key, len(runs)), strict=True):
        name = reference if run == f"{reference}-repeat" else run
        posteriors[run], seconds[run] = sample_theta(run_key, p, name, opts)
        draws[run] = posterior_draws(posteriors[run], p.free)

    rows = []
    for run in runs[1:]:
        rows += _shift_rows(run, draws[run], draws[reference])
    import pandas as pd

    columns = [
        "method",
        "parameter",
        "mean",
        "sd",
        "ref_mean",
        "ref_sd",
        "shift",
        "shift_mcse",
        "sd_ratio",
        "sd_ratio_mcse",
        "w1",
    ]
    table = pd.DataFrame(rows, columns=columns)
    summary_rows = []
    for run in runs[1:]:
        part = table[table["method"] == run]
        diag = diagnostics(posteriors[run], var_names=list(p.free))
        summary_rows.append(
            (
                run,
                float(part["shift"].abs().max()),
                float((part["shift"].abs() / part["shift_mcse"]).max()),
                float(np.abs(np.log(part["sd_ratio"])).max()),
                float(part["w1"].max()),
                seconds[run],
                diag.min_ess_bulk,
                diag.max_r_hat,
            )
        )
    ref_diag = diagnostics(posteriors[reference], var_names=list(p.free))
    summary_rows.insert(
        0,
        (
            reference,
            np.nan,
            np.nan,
            np.nan,
            np.nan,
            seconds[reference],
            ref_diag.min_ess_bulk,
            ref_diag.max_r_hat,
        ),
    )
    summary = pd.DataFrame(
        summary_rows,
        columns=[
            "method",
            "max_abs_shift",
            "max_shift_in_mcse",
            "max_abs_log_sd_ratio",
            "max_w1",
            "seconds",
            "min_ess_bulk",
            "max_rhat",
        ],
    )
    return PosteriorShift(table, summary, posteriors, seconds, reference, p.free)


__all__ = ["PosteriorShift", "posterior_shift"]
