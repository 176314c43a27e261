"""Run the switching-model filters, smoothers and samplers side by side on one series.

Methods (``SWITCHING_METHODS``), each reduced to a Gaussian summary per step (mean (T, d),
marginal intervals, mode probabilities (T, M)) with its wall time:
- filters, targeting p(x_t, s_t | y_{1:t}): ``"gpb1"``, ``"gpb2"``, ``"imm"``, ``"rbpf"``
  and ``"exact"`` (all M^T histories; short series only);
- smoothers, targeting p(x_t, s_t | y_{1:T}): ``"kim-gpb2"`` and ``"kim-imm"`` (Kim's
  backward pass over the GPB2 / IMM filter) and ``"exact-smoother"``;
- samplers of the smoothing posterior: ``"gibbs"`` (collapsed-mode blocked Gibbs,
  ``inference.switching_gibbs``) and ``"nuts"`` (NUTS on ``models.switching.switching_model``
  with the modes marginalised; short series; a singular Q gets ``jitter`` on its diagonal);
- ``"known-modes"`` (needs the true modes): the Kalman smoother along the true mode sequence,
  the floor any method that has to infer the modes is measured against.

Metrics (tidy table: method, metric, value): ``state_rmse`` (root mean square over steps and
coordinates of mean - x_true), ``mode_accuracy`` (argmax of the mode probabilities against the
true modes), ``coverage_50`` / ``coverage_90`` (share of (t, coordinate) pairs whose true state
lies in the equal-tailed marginal interval: Gaussian from the moment-matched mean and variance
for filters and smoothers, posterior quantiles for samplers), ``reference_rms`` and
``reference_mode_dev`` (root mean square deviation of the mean, and largest deviation of the
mode probabilities, from the reference posterior of the same target: the exact filter for
filters and the exact smoother for smoothers and samplers when M^T is small, else the Gibbs
sampler for smoothers), ``log_likelihood`` (a filter's log p(y_{1:T}); a smoother carries its
filter's), ``wall_time_s`` (compilation included), and for samplers the worst R-hat and
smallest bulk/tail ESS over the state means and, for NUTS, the divergences.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import NamedTuple

import jax
import numpy as np
import pandas as pd
import xarray as xr

from inference.filters import (
    check_filter_result,
    exact_filter,
    gpb1_filter,
    gpb2_filter,
    imm_filter,
)
from inference.kalman import check_inputs
from inference.mcmc import check_sampler_sizes, diagnostics, run_nuts
from inference.rbpf import rbpf
from inference.smoothers import exact_smoother, fixed_modes_smoother, kim_smoother
from inference.switching_gibbs import run_switching_gibbs
from models import _checks
from models.switching import SwitchingParams, switching_dims, switching_model

FILTERS = ("gpb1", "gpb2", "imm", "rbpf", "exact")
SMOOTHERS = ("kim-gpb2", "kim-imm", "exact-smoother", "known-modes")
SWITCHING_SAMPLERS = ("gibbs", "nuts")
SWITCHING_METHODS = (*FILTERS, *SMOOTHERS, *SWITCHING_SAMPLERS)
EXACT_METHODS = ("exact", "exact-smoother")
# sampler settings when not given (gibbs_kwargs / nuts_kwargs override them)
GIBBS_SIZES = {"num_warmup": 300, "num_samples": 1000, "num_chains": 4}
NUTS_SETTINGS = {"num_warmup": 500, "num_samples": 500, "num_chains": 2, "dense_mass": True}
INTERVAL_PROBS = (0.5, 0.9)
_Z = {0.5: 0.6744897501960817, 0.9: 1.6448536269514722}


class SwitchingFit(NamedTuple):
    """One method's summary of its target posterior.

    Attributes:
        target: "filter" (p(x_t, s_t | y_{1:t})) or "smoother" (p(x_t, s_t | y_{1:T})).
        mean: (T, d) posterior means of x_t.
        intervals: {prob: (lower (T, d), upper (T, d))} equal-tailed marginal intervals.
        mode_probs: (T, M) P(s_t = j | ...), or None (NUTS: the modes are marginalised).
        seconds: wall time, compilation included.
        log_likelihood: the method's log p(y_{1:T}) (filters and the smoothers built on
            them), else None.
        result: the FilterResult / SmootherResult, or the sampler's DataTree.
    """

    target: str
    mean: np.ndarray
    intervals: dict
    mode_probs: np.ndarray | None
    seconds: float
    log_likelihood: float | None
    result: object


class SwitchingComparison(NamedTuple):
    """``table`` (columns method, metric, value), the per-method ``fits`` and, per target,
    the name of the reference method the ``reference_*`` metrics are measured against."""

    table: pd.DataFrame
    fits: dict[str, SwitchingFit]
    references: dict[str, str]


def _gaussian_fit(target, result, seconds, log_likelihood=None) -> SwitchingFit:
    mean = np.asarray(result.mean)
    sd = np.sqrt(np.clip(np.diagonal(np.asarray(result.cov), axis1=-2, axis2=-1), 0.0, None))
    intervals = {p: (mean - _Z[p] * sd, mean + _Z[p] * sd) for p in INTERVAL_PROBS}
    if log_likelihood is None:
        log_likelihood = float(result.log_likelihood)
    return SwitchingFit(
        target, mean, intervals, np.asarray(result.mode_probs), seconds, log_likelihood, result
    )


def _sampler_fit(datatree: xr.DataTree, num_modes: int, seconds: float) -> SwitchingFit:
    post = datatree["posterior"]
    draws = np.asarray(post["states"]).reshape(-1, *post["states"].shape[2:])
    intervals = {
        p: tuple(np.quantile(draws, [(1 - p) / 2, (1 + p) / 2], axis=0)) for p in INTERVAL_PROBS
    }
    mode_probs = None
    if "modes" in post:
        modes = np.asarray(post["modes"]).reshape(-1, draws.shape[1])
        mode_probs = np.stack([(modes == j).mean(axis=0) for j in range(num_modes)], axis=-1)
    return SwitchingFit(
        "smoother", draws.mean(axis=0), intervals, mode_probs, seconds, None, datatree
    )


def _timed(fn, *args, **kwargs):
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    if not isinstance(out, xr.DataTree):  # a DataTree holds NumPy arrays already
        jax.block_until_ready(out)
    return out, time.perf_counter() - start


def _nuts_init(params, obs):
    """Start NUTS at the Kim-IMM smoothed means (a point in the bulk of the posterior)."""
    return {"states": np.asarray(kim_smoother(params, obs, imm_filter(params, obs)).mean)}


def _default_jitter(params: SwitchingParams) -> float:
    """0 for PD Q_j; else 1e-4 of the largest process-noise variance (a singular Q has no
    density over the states, which NUTS needs)."""
    q = np.asarray(params.dynamics_covs)
    if np.min(np.linalg.eigvalsh(q)) > 1e-12 * max(1.0, float(np.abs(q).max())):
        return 0.0
    return 1e-4 * float(np.max(np.diagonal(q, axis1=-2, axis2=-1)))


def _check_truth(name, value, shape, integer=False, num_modes=None):
    if value is None:
        return None
    arr = np.asarray(value)
    if arr.shape != shape:
        raise ValueError(f"{name}: expected shape {shape}, got {arr.shape}")
    if integer:
        if not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"{name}: expected integer mode labels, got dtype {arr.dtype}")
        if num_modes is not None and arr.size and not (0 <= arr.min() and arr.max() < num_modes):
            raise ValueError(
                f"{name}: mode labels must be in 0..{num_modes - 1}, got {arr.min()}..{arr.max()}"
            )
        return arr
    _checks.check_finite(name, _checks.as_float_array(name, arr))
    return arr.astype(np.float64)


def default_switching_methods(num_modes: int, num_steps: int, *, max_histories: int = 2**12):
    """Every method that fits: the exact ones when M^T <= ``max_histories``, NUTS when T <= 30
    (it mixes only on short series), "known-modes" left to the caller."""
    methods = [m for m in SWITCHING_METHODS if m != "known-modes"]
    if num_modes**num_steps > max_histories:
        methods = [m for m in methods if m not in EXACT_METHODS]
    if num_steps > 30:
        methods.remove("nuts")
    return tuple(methods)


def compare_switching(
    params: SwitchingParams,
    observations,
    *,
    states_true=None,
    modes_true=None,
    methods=None,
    key: jax.Array | None = None,
    num_particles: int = 1000,
    max_histories: int = 2**12,
    gibbs_kwargs: dict | None = None,
    nuts_kwargs: dict | None = None,
    progress: Callable[[str], None] | None = None,
) -> SwitchingComparison:
    """Run ``methods`` on the same series; return a tidy table and each method's fit.

    Args:
        params: ``SwitchingParams`` (known; the samplers take priors through their kwargs).
        observations: (T, o); a row with NaN is a missing observation.
        states_true, modes_true: the simulated x (T, d) and s (T,) when known: enable
            ``state_rmse``, coverage, ``mode_accuracy`` and (modes) "known-modes".
        methods: any of ``SWITCHING_METHODS``; default ``default_switching_methods`` (plus
            "known-modes" when ``modes_true`` is given).
        key: ``jax.random`` key for "rbpf", "gibbs" and "nuts".
        num_particles: RBPF particles.
        max_histories: the exact methods refuse M^T above this.
        gibbs_kwargs: for ``run_switching_gibbs`` (default 4 chains x (300 + 1000) sweeps).
        nuts_kwargs: for ``run_nuts`` and the model (default 2 chains x (500 + 500), dense mass
            matrix, started at the Kim-IMM smoothed means; ``jitter`` for a singular Q).
        progress: called with a short message before each method (e.g. ``print``).

    Returns:
        ``SwitchingComparison(table, fits, references)``.
    """
    params, obs = check_inputs(params, observations)
    m, d, t_max = params.initial_probs.shape[0], params.initial_means.shape[1], obs.shape[0]
    states_true = _check_truth("states_true", states_true, (t_max, d))
    modes_true = _check_truth("modes_true", modes_true, (t_max,), integer=True, num_modes=m)
    max_histories = _checks.check_positive_int("max_histories", max_histories)
    for arg, value, takers in (
        ("gibbs_kwargs", gibbs_kwargs, (run_switching_gibbs,)),
        ("nuts_kwargs", nuts_kwargs, (run_nuts, switching_model)),
    ):
        if value is not None and not isinstance(value, dict):
            raise ValueError(f"{arg}: expected a dict of keyword arguments, got {value!r}")
        known = {
            name
            for fn in takers
            for name, p in inspect.signature(fn).parameters.items()
            if p.kind is not inspect.Parameter.VAR_KEYWORD
        }
        unknown = sorted(set(value or {}) - known)
        if unknown:
            names = " / ".join(fn.__name__ for fn in takers)
            raise ValueError(f"{arg}: unknown keyword(s) {unknown} for {names}")
    if progress is not None and not callable(progress):
        raise ValueError(f"progress: expected a callable, got {progress!r}")
    if methods is None:
        methods = default_switching_methods(m, t_max, max_histories=max_histories)
        if modes_true is not None:
            methods = (*methods, "known-modes")
    methods = (methods,) if isinstance(methods, str) else tuple(methods)
    unknown = [x for x in methods if x not in SWITCHING_METHODS]
    if unknown or not methods:
        raise ValueError(f"methods: unknown {unknown}; choose from {list(SWITCHING_METHODS)}")
    if "known-modes" in methods and modes_true is None:
        raise ValueError("modes_true: required for the 'known-modes' method")
    if any(x in EXACT_METHODS for x in methods) and m**t_max > max_histories:
        raise ValueError(
            f"methods: the exact methods need M^T = {m}^{t_max} histories, more than "
            f"max_histories = {max_histories}"
        )
    if any(x in ("rbpf", *SWITCHING_SAMPLERS) for x in methods):
        if key is None:
            raise ValueError("key: a jax.random key is required for 'rbpf', 'gibbs' and 'nuts'")
        _checks.check_key("key", key)
    num_particles = _checks.check_positive_int("num_particles", num_particles)
    gibbs_opts = {**GIBBS_SIZES, **(gibbs_kwargs or {})}
    nuts_opts = {**NUTS_SETTINGS, **(nuts_kwargs or {})}
    for method, opts in (("gibbs", gibbs_opts), ("nuts", nuts_opts)):
        if method in methods:  # their R-hat and ESS go into the table
            check_sampler_sizes(opts["num_samples"], opts["num_chains"], what=method)
    say = progress or (lambda message: None)
    keys = {}
    if key is not None:
        keys = dict(zip(("rbpf", "gibbs", "nuts"), jax.random.split(key, 3), strict=True))

    fits: dict[str, SwitchingFit] = {}
    filtered = {}
    for method in methods:
        say(f"{method}: running")
        if method in ("gpb1", "gpb2", "imm", "exact"):
            fn = {"gpb1": gpb1_filter, "gpb2": gpb2_filter, "imm": imm_filter}.get(method)
            if fn is None:
                res, sec = _timed(exact_filter, params, obs, max_histories=max_histories)
            else:
                res, sec = _timed(fn, params, obs)
            check_filter_result(res, name=method, params=params)
            filtered[method] = (res, sec)
            fits[method] = _gaussian_fit("filter", res, sec)
        elif method == "rbpf":
            res, sec = _timed(rbpf, keys["rbpf"], params, obs, num_particles)
            check_filter_result(res, name=method, params=params)
            fits[method] = _gaussian_fit("filter", res, sec)
        elif method in ("kim-gpb2", "kim-imm"):
            base = method.removeprefix("kim-")
            if base not in filtered:
                fn = gpb2_filter if base == "gpb2" else imm_filter
                filtered[base] = _timed(fn, params, obs)
                check_filter_result(filtered[base][0], name=base, params=params)
            filt, sec_f = filtered[base]
            res, sec = _timed(kim_smoother, params, obs, filt)
            fits[method] = _gaussian_fit("smoother", res, sec + sec_f)
        elif method == "exact-smoother":
            res, sec = _timed(exact_smoother, params, obs, max_histories=max_histories)
            fits[method] = _gaussian_fit("smoother", res, sec)
        elif method == "known-modes":
            res, sec = _timed(fixed_modes_smoother, params, obs, modes_true)
            fits[method] = _gaussian_fit("smoother", res, sec)
        elif method == "gibbs":
            tree, sec = _timed(run_switching_gibbs, keys["gibbs"], params, obs, **gibbs_opts)
            fits[method] = _sampler_fit(tree, m, sec)
        else:  # nuts
            opts = dict(nuts_opts)
            jitter = opts.pop("jitter", _default_jitter(params))
            opts.setdefault("init_values", _nuts_init(params, obs))
            tree, sec = _timed(
                run_nuts,
                switching_model,
                keys["nuts"],
                obs,
                params=params,
                jitter=jitter,
                dims=switching_dims(opts.get("priors")),
                posterior_predictive=False,
                **opts,
            )
            tree["posterior"].attrs["jitter"] = jitter
            fits[method] = _sampler_fit(tree, m, sec)

    references = {}
    for target, exact_name in (("filter", "exact"), ("smoother", "exact-smoother")):
        if exact_name in fits:
            references[target] = exact_name
        elif target == "smoother" and "gibbs" in fits:
            references[target] = "gibbs"

    rows = []
    for method, fit in fits.items():
        rows.append((method, "wall_time_s", fit.seconds))
        if states_true is not None:
            rows.append(
                (method, "state_rmse", float(np.sqrt(np.mean((fit.mean - states_true) ** 2))))
            )
            for p, (lo, hi) in fit.intervals.items():
                covered = (lo <= states_true) & (states_true <= hi)
                rows.append((method, f"coverage_{round(p * 100)}", float(covered.mean())))
        if modes_true is not None and fit.mode_probs is not None:
            accuracy = float(np.mean(np.argmax(fit.mode_probs, axis=-1) == modes_true))
            rows.append((method, "mode_accuracy", accuracy))
        ref_name = references.get(fit.target)
        if ref_name is not None and ref_name != method:
            ref = fits[ref_name]
            rows.append(
                (method, "reference_rms", float(np.sqrt(np.mean((fit.mean - ref.mean) ** 2))))
            )
            if fit.mode_probs is not None and ref.mode_probs is not None:
                dev = float(np.max(np.abs(fit.mode_probs - ref.mode_probs)))
                rows.append((method, "reference_mode_dev", dev))
        if fit.log_likelihood is not None:
            rows.append((method, "log_likelihood", fit.log_likelihood))
        if isinstance(fit.result, xr.DataTree):
            diag = diagnostics(fit.result, var_names=["states"])
            rows.append((method, "max_rhat_states", diag.max_r_hat))
            rows.append((method, "min_ess_bulk_states", diag.min_ess_bulk))
            rows.append((method, "min_ess_tail_states", diag.min_ess_tail))
            if method == "nuts":
                rows.append((method, "divergences", float(diag.num_divergences)))
    table = pd.DataFrame(rows, columns=["method", "metric", "value"])
    return SwitchingComparison(table=table, fits=fits, references=references)


__all__ = [
    "FILTERS",
    "SMOOTHERS",
    "SWITCHING_METHODS",
    "SWITCHING_SAMPLERS",
    "SwitchingComparison",
    "SwitchingFit",
    "compare_switching",
    "default_switching_methods",
]
