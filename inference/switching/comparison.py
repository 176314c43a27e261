"""Run the switching-model filters, smoothers and samplers side by side on one series.

Methods (``SWITCHING_METHODS``), each reduced to a Gaussian summary per step (mean (T, d),
marginal intervals, mode probabilities (T, M)) with its wall time:
- filters, targeting p(x_t, s_t | y_{1:t}): ``"gpb1"``, ``"gpb2"``, ``"imm"``, ``"rbpf"``
  and ``"exact"`` (all M^T histories; short series only);
- smoothers, targeting p(x_t, s_t | y_{1:T}): ``"kim-gpb2"`` and ``"kim-imm"`` (Kim's
  backward pass over the GPB2 / IMM filter) and ``"exact-smoother"``;
- samplers of the smoothing posterior: ``"gibbs"`` (collapsed-mode blocked Gibbs,
  ``attnbayes.inference.switching.gibbs``) and ``"nuts"`` (NUTS on
  ``attnbayes.models.switching.switching_model`` with the modes marginalised; short series; a
  singular Q gets ``jitter`` on its diagonal);
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

import functools
import inspect
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import jax
import numpy as np

from ... import validation
from ...models.switching import SwitchingParams, switching_dims, switching_model
from .. import methods as registry
from ..diagnostics import diagnostics
from ..mcmc import NUTS_SETTINGS, check_sampler_sizes, run_nuts
from .filters import (
    check_filter_result,
    imm_filter,
)
from .gibbs import run_switching_gibbs
from .kalman import check_inputs
from .smoothers import exact_smoother, fixed_modes_smoother, kim_smoother

if TYPE_CHECKING:  # pandas and xarray are imported where used
    import pandas as pd
    import xarray as xr

SWITCHING_METHODS = registry.method_names("switching")
_KINDS = {m: registry.get_method("switching", m) for m in SWITCHING_METHODS}
FILTERS = tuple(m for m, spec in _KINDS.items() if spec.target == "filter")
SMOOTHERS = tuple(
    m for m, spec in _KINDS.items() if spec.target == "smoother" and spec.returns == "intervals"
)
SWITCHING_SAMPLERS = tuple(m for m, spec in _KINDS.items() if spec.returns == "draws")
EXACT_METHODS = ("exact", "exact-smoother")
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


def _is_datatree(value) -> bool:
    """An xarray DataTree, without importing xarray when none was ever made."""
    xarray = sys.modules.get("xarray")
    return xarray is not None and isinstance(value, xarray.DataTree)


def _timed(fn, *args, **kwargs):
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    if not _is_datatree(out):  # a DataTree holds NumPy arrays already
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
    validation.check_finite(name, validation.as_float_array(name, arr))
    return arr.astype(np.float64)


class _Problem(NamedTuple):
    """What every method of the comparison sees; ``filtered`` caches each filter's (result,
    seconds) for the smoothers built on it."""

    params: SwitchingParams
    obs: np.ndarray
    modes_true: np.ndarray | None
    max_histories: int
    num_modes: int
    filtered: dict


def _filter(p: _Problem, name: str):
    """The filter ``name`` run once per comparison (cached), checked: (result, seconds)."""
    if name not in p.filtered:
        fn = registry.get_method("switching", name).fit
        kwargs = {"max_histories": p.max_histories} if name == "exact" else {}
        res, sec = _timed(fn, p.params, p.obs, **kwargs)
        check_filter_result(res, name=name, params=p.params)
        p.filtered[name] = (res, sec)
    return p.filtered[name]


def _run_filter(p: _Problem, key, opts, name) -> SwitchingFit:
    res, sec = _filter(p, name)
    return _gaussian_fit("filter", res, sec)


def _run_rbpf(p: _Problem, key, opts) -> SwitchingFit:
    fit = registry.get_method("switching", "rbpf").fit
    res, sec = _timed(fit, key, p.params, p.obs, opts["num_particles"])
    check_filter_result(res, name="rbpf", params=p.params)
    return _gaussian_fit("filter", res, sec)


def _run_kim(p: _Problem, key, opts, base) -> SwitchingFit:
    filt, sec_f = _filter(p, base)
    res, sec = _timed(kim_smoother, p.params, p.obs, filt)
    return _gaussian_fit("smoother", res, sec + sec_f)


def _run_exact_smoother(p: _Problem, key, opts) -> SwitchingFit:
    res, sec = _timed(exact_smoother, p.params, p.obs, max_histories=p.max_histories)
    return _gaussian_fit("smoother", res, sec)


def _run_known_modes(p: _Problem, key, opts) -> SwitchingFit:
    res, sec = _timed(fixed_modes_smoother, p.params, p.obs, p.modes_true)
    return _gaussian_fit("smoother", res, sec)


def _run_gibbs(p: _Problem, key, opts) -> SwitchingFit:
    tree, sec = _timed(run_switching_gibbs, key, p.params, p.obs, **opts)
    return _sampler_fit(tree, p.num_modes, sec)


def _run_nuts(p: _Problem, key, opts) -> SwitchingFit:
    """NUTS on ``switching_model``: ``opts`` holds the sampler's settings and the model's
    options (``_NUTS_MODEL_OPTIONS``), which go to the model."""
    model_kwargs = {n: opts.pop(n) for n in _NUTS_MODEL_OPTIONS if n in opts}
    jitter = model_kwargs.setdefault("jitter", _default_jitter(p.params))
    opts.setdefault("init_values", _nuts_init(p.params, p.obs))
    tree, sec = _timed(
        run_nuts,
        key,
        switching_model,
        (p.obs,),
        {"params": p.params, **model_kwargs},
        dims=switching_dims(model_kwargs.get("priors")),
        posterior_predictive=False,
        **opts,
    )
    tree["posterior"].attrs["jitter"] = jitter
    return _sampler_fit(tree, p.num_modes, sec)


def _keyword_only(fn, leave_out=()) -> tuple:
    """The keyword-only parameters of ``fn`` but ``leave_out``."""
    return tuple(
        name
        for name, p in inspect.signature(fn).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY and name not in leave_out
    )


# what ``gibbs_kwargs`` and ``nuts_kwargs`` may hold: the samplers' settings and, for NUTS, the
# options of ``switching_model`` (the comparison passes the params, dims and no predictive)
_GIBBS_OPTIONS = _keyword_only(run_switching_gibbs)
_NUTS_MODEL_OPTIONS = _keyword_only(switching_model, leave_out=("params",))
_NUTS_OPTIONS = (
    *(name for name in NUTS_SETTINGS if name not in ("dims", "posterior_predictive")),
    *_NUTS_MODEL_OPTIONS,
)

# each registered method's runner: (problem, key or None, settings) -> SwitchingFit
_RUNNERS = {
    "gpb1": functools.partial(_run_filter, name="gpb1"),
    "gpb2": functools.partial(_run_filter, name="gpb2"),
    "imm": functools.partial(_run_filter, name="imm"),
    "rbpf": _run_rbpf,
    "exact": functools.partial(_run_filter, name="exact"),
    "kim-gpb2": functools.partial(_run_kim, base="gpb2"),
    "kim-imm": functools.partial(_run_kim, base="imm"),
    "exact-smoother": _run_exact_smoother,
    "known-modes": _run_known_modes,
    "gibbs": _run_gibbs,
    "nuts": _run_nuts,
}
assert tuple(_RUNNERS) == SWITCHING_METHODS, "every registered switching method has a runner"


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
    key: jax.Array | None,
    params: SwitchingParams,
    observations,
    *,
    states_true=None,
    modes_true=None,
    methods=None,
    num_particles: int | None = None,
    max_histories: int = 2**12,
    gibbs_kwargs: dict | None = None,
    nuts_kwargs: dict | None = None,
    progress: Callable[[str], None] | None = None,
) -> SwitchingComparison:
    """Run ``methods`` on the same series; return a tidy table and each method's fit.

    Args:
        key: ``jax.random`` key, first and positional; required for "rbpf", "gibbs" and
            "nuts", ``None`` allowed when every method is deterministic.
        params: ``SwitchingParams`` (known; the samplers take priors through their kwargs).
        observations: (T, o); a row with NaN is a missing observation.
        states_true, modes_true: the simulated x (T, d) and s (T,) when known: enable
            ``state_rmse``, coverage, ``mode_accuracy`` and (modes) "known-modes".
        methods: any of ``SWITCHING_METHODS``; default ``default_switching_methods`` (plus
            "known-modes" when ``modes_true`` is given).
        num_particles: RBPF particles (default: the method registry's, 1000).
        max_histories: the exact methods refuse M^T above this.
        gibbs_kwargs: for ``run_switching_gibbs`` (default, the method registry's
            (``attnbayes.inference.methods``): 4 chains x (300 + 1000) sweeps).
        nuts_kwargs: for ``run_nuts`` and the model (default, the registry's: 2 chains x
            (500 + 500), dense mass matrix; started at the Kim-IMM smoothed means; ``jitter``
            for a singular Q).
        progress: called with a short message before each method (e.g. ``print``).

    Returns:
        ``SwitchingComparison(table, fits, references)``.
    """
    params, obs, _ = check_inputs(params, observations)
    m, d, t_max = params.initial_probs.shape[0], params.initial_means.shape[1], obs.shape[0]
    states_true = _check_truth("states_true", states_true, (t_max, d))
    modes_true = _check_truth("modes_true", modes_true, (t_max,), integer=True, num_modes=m)
    max_histories = validation.check_positive_int("max_histories", max_histories)
    for arg, value, known, names in (
        ("gibbs_kwargs", gibbs_kwargs, _GIBBS_OPTIONS, "run_switching_gibbs"),
        ("nuts_kwargs", nuts_kwargs, _NUTS_OPTIONS, "run_nuts / switching_model"),
    ):
        if value is not None and not isinstance(value, dict):
            raise ValueError(f"{arg}: expected a dict of keyword arguments, got {value!r}")
        unknown = sorted(set(value or {}) - set(known))
        if unknown:
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
        validation.check_key("key", key)
    if num_particles is None:
        num_particles = registry.get_method("switching", "rbpf").defaults["num_particles"]
    num_particles = validation.check_positive_int("num_particles", num_particles)
    opts = {method: registry.settings("switching", method) for method in SWITCHING_METHODS}
    opts["gibbs"].update(gibbs_kwargs or {})
    opts["nuts"].update(nuts_kwargs or {})
    opts["rbpf"]["num_particles"] = num_particles
    for method in SWITCHING_SAMPLERS:
        if method in methods:  # their R-hat and ESS go into the table
            check_sampler_sizes(
                opts[method]["num_samples"], opts[method]["num_chains"], what=method
            )
    say = progress or (lambda message: None)
    keys = {}
    if key is not None:
        keys = dict(zip(("rbpf", "gibbs", "nuts"), jax.random.split(key, 3), strict=True))

    problem = _Problem(params, obs, modes_true, max_histories, m, {})
    fits: dict[str, SwitchingFit] = {}
    for method in methods:
        say(f"{method}: running")
        fits[method] = _RUNNERS[method](problem, keys.get(method), dict(opts[method]))

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
        if _is_datatree(fit.result):
            diag = diagnostics(fit.result, var_names=["states"])
            rows.append((method, "max_rhat_states", diag.max_r_hat))
            rows.append((method, "min_ess_bulk_states", diag.min_ess_bulk))
            rows.append((method, "min_ess_tail_states", diag.min_ess_tail))
            if method == "nuts":
                rows.append((method, "divergences", float(diag.num_divergences)))
    import pandas as pd

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
