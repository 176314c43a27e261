"""Bayesian model comparison: PSIS-LOO across mixtures, leave-future-out across switching models.

Deconvolution data are exchangeable, so models are compared by PSIS-LOO (``az.compare`` on
DataTrees that carry a ``log_likelihood`` group): ``compare_num_atoms`` fits the finite
mixture for several K with the same sampler, and any two DataTrees (e.g. the finite and the
Dirichlet-process fits of ``compare_deconvolution``) go straight into ``loo_compare``.

A time series is not exchangeable: leaving y_t out while keeping y_{t+1}, ... is not a
forecast. The switching model is therefore scored by the one-step-ahead log predictive
density of held-out future observations (leave-future-out, Burkner, Gabry and Vehtari 2020),

    elpd_LFO = sum_{t > L} log p(y_t | y_{1:t-1}),
    p(y_t | y_{1:t-1}) = E_{theta ~ p(theta | y_{1:t-1})} p(y_t | y_{1:t-1}, theta),

with p(y_t | y_{1:t-1}, theta) from the IMM filter (``filters.one_step_log_predictive``:
modes and states summed out, exact when M = 1). ArviZ's ``lfo_cv`` carries the posterior of
the Gibbs sampler fitted on y_{1:L} forward by Pareto-smoothed importance sampling and refits
(``SwitchingGibbsWrapper``: the future rows are masked as missing, so the refit has the same
shapes and reuses the compiled sampler) whenever the Pareto k exceeds its threshold.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple

import arviz_stats as azs
import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import xarray as xr
from arviz_stats.loo.wrapper import SamplingWrapper

from .. import validation
from ..models.deconvolution import deconvolution_model
from ..models.switching import SwitchingParams, SwitchingPriors, check_params, check_priors
from .deconvolution.gibbs import run_gibbs
from .diagnostics import diagnostics, psis_loo
from .mcmc import check_sampler_sizes, sampler_sizes
from .switching.filters import one_step_log_predictive_unchecked
from .switching.gibbs import run_switching_gibbs
from .switching.kalman import check_inputs


def loo_compare(datatrees: dict[str, xr.DataTree], *, loos: dict | None = None, **kwargs):
    """``az.compare`` (PSIS-LOO, stacking weights) of named fits, checked first.

    Every DataTree needs a ``log_likelihood`` group over the same observations. PSIS-LOO is
    ``psis_loo`` (arviz_stats' numbers, all observations at once); ``loos``: its results (or
    ``azs.loo(tree, pointwise=True)``'s) already computed for some of the fits. Returns the
    ArviZ comparison table (rank, elpd, p, elpd_diff, weight, se, dse, warning), best first,
    unrounded unless ``round_to`` is passed.
    """
    if not isinstance(datatrees, dict) or len(datatrees) < 2:
        raise ValueError("datatrees: expected a dict of at least two named DataTrees")
    shapes = {}
    for name, tree in datatrees.items():
        if not isinstance(tree, xr.DataTree) or "log_likelihood" not in tree.children:
            raise ValueError(f"datatrees[{name!r}]: needs a DataTree with a log_likelihood group")
        ll = tree["log_likelihood"]
        shapes[name] = {v: ll[v].shape[2:] for v in ll.data_vars}
    if len({tuple(sorted(s.items())) for s in shapes.values()}) > 1:
        raise ValueError(f"datatrees: log_likelihood shapes differ across models: {shapes}")
    kwargs.setdefault("round_to", "none")
    given = loos or {}
    loos = {
        name: given[name] if name in given else psis_loo(tree) for name, tree in datatrees.items()
    }
    return azs.compare(loos, **kwargs)


class AtomsComparison(NamedTuple):
    """PSIS-LOO across numbers of atoms.

    Attributes:
        table: ``az.compare`` table indexed by "K = k", best first.
        datatrees: {"K = k": DataTree} (posterior, log_likelihood, ...).
        summary: one row per K: elpd_loo, se, p_loo, max Pareto k, wall time and the
            sampler's worst R-hat / smallest bulk ESS on the invariant quantities.
    """

    table: pd.DataFrame
    datatrees: dict[str, xr.DataTree]
    summary: pd.DataFrame


def compare_num_atoms(
    key: jax.Array,
    x,
    sigma: float,
    num_atoms=(1, 2, 3, 4, 5),
    *,
    sampler: str = "gibbs",
    sampler_kwargs: dict | None = None,
    progress: Callable[[str], None] | None = None,
) -> AtomsComparison:
    """Fit the finite Dirichlet mixture with each K in ``num_atoms`` and compare by PSIS-LOO.

    Args:
        key: a ``jax.random`` key (one split per K), first and positional.
        x: (N,) or (N, p) observations.
        sigma: known noise standard deviation.
        num_atoms: the K to fit (at least two distinct values).
        sampler: "gibbs" (``run_gibbs``, conjugate; default) or "nuts" (``run_nuts`` on
            ``deconvolution_model`` with ordered atoms in 1-D).
        sampler_kwargs: passed to the sampler (e.g. num_warmup, num_samples, num_chains).
        progress: called with a message before each fit.
    """
    from .mcmc import run_nuts

    validation.check_key("key", key)
    ks = [validation.check_positive_int("num_atoms", k) for k in np.atleast_1d(num_atoms).tolist()]
    if len(set(ks)) < 2:
        raise ValueError(f"num_atoms: need at least two distinct K, got {ks}")
    if sampler not in ("gibbs", "nuts"):
        raise ValueError(f"sampler: expected 'gibbs' or 'nuts', got {sampler!r}")
    x = np.asarray(validation.as_float_array("x", x))
    kwargs = dict(sampler_kwargs or {})
    sizes = sampler_sizes(run_gibbs if sampler == "gibbs" else run_nuts, kwargs)
    check_sampler_sizes(sizes["num_samples"], sizes["num_chains"], loo=True, what=sampler)
    say = progress or (lambda message: None)
    trees, rows, loos = {}, [], {}
    for k, key_k in zip(ks, jax.random.split(key, len(ks)), strict=True):
        say(f"K = {k}: {sampler}")
        start = time.perf_counter()
        if sampler == "gibbs":
            tree = run_gibbs(key_k, x, sigma, num_atoms=k, **kwargs)
        else:
            tree = run_nuts(
                key_k,
                deconvolution_model,
                (x,),
                {"sigma": sigma, "num_atoms": k, "ordered": x.ndim == 1},
                **kwargs,
            )
        seconds = time.perf_counter() - start
        name = f"K = {k}"
        trees[name] = tree
        loo = loos[name] = psis_loo(tree)
        diag = _log_lik_diagnostics(tree)
        rows.append(
            {
                "model": name,
                "num_atoms": k,
                "elpd_loo": float(loo.elpd),
                "se": float(loo.se),
                "p_loo": float(loo.p),
                "pareto_k_max": float(np.max(np.asarray(loo.pareto_k))),
                "max_rhat": diag.max_r_hat,
                "min_ess_bulk": diag.min_ess_bulk,
                "wall_time_s": seconds,
            }
        )
    table = loo_compare(trees, loos=loos)
    return AtomsComparison(table, trees, pd.DataFrame(rows).set_index("model"))


def _log_lik_diagnostics(tree: xr.DataTree):
    """R-hat / ESS of the total log-likelihood per draw: invariant under relabelling atoms."""
    ll = tree["log_likelihood"].to_dataset()
    total = sum(v.sum([d for d in v.dims if d not in ("chain", "draw")]) for v in ll.values())
    groups = {"posterior": xr.Dataset({"log_lik_total": total})}
    if "sample_stats" in tree.children:
        groups["sample_stats"] = tree["sample_stats"].to_dataset()
    return diagnostics(xr.DataTree.from_dict(groups), var_names=["log_lik_total"])


# ----------------------------------------------------------------------------- switching


def default_switching_priors(num_modes: int) -> SwitchingPriors:
    """Weakly informative priors for comparing numbers of modes.

    Rows of Pi ~ Dirichlet(1 + 9 delta_ij) (sticky: prior mean 10 / (9 + M) of staying; no
    prior on Pi when M = 1), and inverse-gamma(3, 2) scales of every Q_j and R_j (prior mean
    1: the scenario's matrices, and a 90% interval of roughly 0.3 to 2.6 times them).
    """
    m = validation.check_positive_int("num_modes", num_modes)
    conc = None if m == 1 else 1.0 + 9.0 * np.eye(m)
    return SwitchingPriors(conc, (3.0, 2.0), (3.0, 2.0))


def draw_params(params: SwitchingParams, posterior: xr.Dataset | xr.DataTree) -> SwitchingParams:
    """The parameters of every posterior draw, batched as (chain, draw, ...).

    Q_j = c_j params.dynamics_covs[j] and R_j = r_j params.emission_covs[j] for the sampled
    scales; Pi from the sampled ``transition_matrix``; a quantity the posterior lacks stays
    at ``params``.
    """
    params = check_params("params", params)
    if isinstance(posterior, xr.DataTree):
        posterior = posterior.to_dataset()
    chains, draws = posterior.sizes["chain"], posterior.sizes["draw"]

    def batched(value):
        arr = np.asarray(value)
        return np.broadcast_to(arr, (chains, draws, *arr.shape))

    fields = {name: batched(value) for name, value in params._asdict().items()}
    if "transition_matrix" in posterior:
        fields["transition_matrix"] = np.asarray(posterior["transition_matrix"])
    if "dynamics_cov_scale" in posterior:
        scale = np.asarray(posterior["dynamics_cov_scale"])[..., None, None]
        fields["dynamics_covs"] = scale * np.asarray(params.dynamics_covs)
    if "emission_cov_scale" in posterior:
        scale = np.asarray(posterior["emission_cov_scale"])[..., None, None]
        fields["emission_covs"] = scale * np.asarray(params.emission_covs)
    return SwitchingParams(**fields)


@jax.jit
def _batched_log_predictive(params, observations):
    # explicit sizes: -1 is ambiguous for the zero-size input weights of a model without inputs
    flat = jax.tree.map(lambda a: a.reshape(a.shape[0] * a.shape[1], *a.shape[2:]), params)
    out = jax.vmap(lambda p: one_step_log_predictive_unchecked(p, observations, "imm"))(flat)
    return out.reshape(params.initial_probs.shape[:2] + out.shape[1:])


def switching_pointwise_log_likelihood(
    params: SwitchingParams, datatree: xr.DataTree, observations=None
) -> xr.DataArray:
    """log p(y_t | y_{1:t-1}, theta_s) for every posterior draw s, as (chain, draw, time).

    The pointwise log-likelihood of the switching model for LFO-CV: the IMM filter's
    one-step-ahead predictive density (modes and states summed out) at each draw's
    parameters. ``observations`` defaults to the DataTree's observed data.
    """
    post = datatree["posterior"]
    if observations is None:
        observations = datatree["observed_data"]["observations"].to_numpy()
    draws = draw_params(params, post)
    _, obs, _ = check_inputs(SwitchingParams(*(a[0, 0] for a in draws)), observations)
    values = np.asarray(_batched_log_predictive(SwitchingParams(*map(jnp.asarray, draws)), obs))
    return xr.DataArray(
        values,
        dims=("chain", "draw", "time"),
        coords={"chain": post["chain"].values, "draw": post["draw"].values},
        name="observations",
    )


def with_log_likelihood(params: SwitchingParams, datatree: xr.DataTree) -> xr.DataTree:
    """A copy of a switching DataTree with the ``log_likelihood`` group (one-step-ahead)."""
    tree = datatree.copy()
    ll = switching_pointwise_log_likelihood(params, datatree)
    tree["log_likelihood"] = xr.DataTree(xr.Dataset({"observations": ll}))
    return tree


class SwitchingGibbsWrapper(SamplingWrapper):
    """ArviZ ``SamplingWrapper`` that refits ``run_switching_gibbs`` on y_{1:L} for ``lfo_cv``.

    ``sel_observations`` masks the excluded rows as missing (NaN) instead of dropping them,
    so every refit has the shapes of the first fit and reuses its compiled sampler.
    """

    def __init__(
        self,
        key: jax.Array,
        params: SwitchingParams,
        observations,
        *,
        priors: SwitchingPriors | None,
        gibbs_kwargs: dict | None = None,
        progress: Callable[[str], None] | None = None,
    ):
        super().__init__(model=params, sample_kwargs=dict(gibbs_kwargs or {}))
        self.params = params
        self.observations = np.asarray(observations, dtype=float)
        self.priors = priors
        self.key = key
        self.num_fits = 0
        self.progress = progress or (lambda message: None)

    def sel_observations(self, idx):
        idx = np.asarray(idx, dtype=int)
        train = self.observations.copy()
        train[idx] = np.nan
        return train, idx

    def sample(self, modified_observed_data):
        self.num_fits += 1
        kept = int(np.sum(~np.isnan(modified_observed_data).any(axis=1)))
        self.progress(f"Gibbs fit on the first {kept} observations")
        key = jax.random.fold_in(self.key, self.num_fits)
        return run_switching_gibbs(
            key, self.params, modified_observed_data, priors=self.priors, **self.sample_kwargs
        )

    def get_inference_data(self, fitted_model):
        return fitted_model

    def log_likelihood__i(self, excluded_obs, idata__i):
        ll = switching_pointwise_log_likelihood(self.params, idata__i, self.observations)
        return ll.isel(time=np.asarray(excluded_obs, dtype=int))


def switching_lfo(
    key: jax.Array,
    params: SwitchingParams,
    observations,
    *,
    min_observations: int,
    priors: SwitchingPriors | None = None,
    gibbs_kwargs: dict | None = None,
    k_threshold: float = 0.7,
    datatree: xr.DataTree | None = None,
    progress: Callable[[str], None] | None = None,
):
    """Approximate leave-future-out CV of one-step-ahead predictions (ArviZ ``lfo_cv``).

    Fits the Gibbs sampler on y_{1:L} (L = ``min_observations``), scores p(y_t | y_{1:t-1})
    for t = L+1..T, moving the posterior forward by PSIS and refitting when Pareto k >
    ``k_threshold``. ``datatree`` is the fit on all T observations (fitted here if None);
    ArviZ uses it for the effective number of parameters p_lfo.

    Returns:
        (``ELPDDataLFO`` with pointwise elpd_i and pareto_k, the full-data DataTree with its
        ``log_likelihood`` group, the number of Gibbs fits made).
    """
    validation.check_key("key", key)
    params, obs, _ = check_inputs(params, observations)
    num_steps = obs.shape[0]
    min_observations = validation.check_positive_int("min_observations", min_observations)
    if min_observations >= num_steps:
        raise ValueError(
            f"min_observations: must be below the {num_steps} observations, got {min_observations}"
        )
    priors = check_priors("priors", priors, params.initial_probs.shape[0])
    sizes = sampler_sizes(run_switching_gibbs, gibbs_kwargs)
    check_sampler_sizes(sizes["num_samples"], sizes["num_chains"], loo=True, what="gibbs")
    key_full, key_lfo = jax.random.split(key)
    if datatree is None:
        datatree = run_switching_gibbs(key_full, params, obs, priors=priors, **(gibbs_kwargs or {}))
    full = with_log_likelihood(params, datatree)
    wrapper = SwitchingGibbsWrapper(
        key_lfo, params, obs, priors=priors, gibbs_kwargs=gibbs_kwargs, progress=progress
    )
    result = azs.lfo_cv(
        full,
        wrapper,
        min_observations=min_observations,
        forecast_horizon=1,
        pointwise=True,
        var_name="observations",
        k_threshold=k_threshold,
    )
    return result, full, wrapper.num_fits


class ModesComparison(NamedTuple):
    """Leave-future-out comparison of switching models.

    Attributes:
        table: ``az.compare`` of the LFO results (elpd, elpd_diff, se, dse, weight), best
            first.
        lfo: {name: ELPDDataLFO} with pointwise elpd_i (time) and pareto_k.
        datatrees: {name: full-data Gibbs DataTree with a log_likelihood group}.
        summary: one row per model: num_modes, elpd_lfo, se, number of Gibbs fits (the
            first fit and the refits), largest Pareto k, R-hat / bulk ESS of the full fit's
            parameters, wall time.
    """

    table: pd.DataFrame
    lfo: dict
    datatrees: dict[str, xr.DataTree]
    summary: pd.DataFrame


def compare_num_modes(
    key: jax.Array,
    candidates: dict[str, SwitchingParams],
    observations,
    *,
    min_observations: int,
    priors: dict[str, SwitchingPriors] | None = None,
    gibbs_kwargs: dict | None = None,
    k_threshold: float = 0.7,
    progress: Callable[[str], None] | None = None,
) -> ModesComparison:
    """Compare switching models (e.g. 1, 2, 3 modes) by held-out one-step-ahead lpd.

    Each candidate's parameters fix the dynamics of its modes; Pi and the scales of Q_j and
    R_j get ``priors[name]`` (default ``default_switching_priors(M)``) and are sampled by
    ``run_switching_gibbs``. Every model is scored on the same held-out steps
    t = ``min_observations`` + 1..T with ``switching_lfo``.
    """
    if not isinstance(candidates, dict) or len(candidates) < 2:
        raise ValueError("candidates: expected a dict of at least two named SwitchingParams")
    validation.check_key("key", key)
    checked = {}
    for name, p in candidates.items():
        checked[name], obs, _ = check_inputs(p, observations)
    priors = dict(priors or {})
    unknown = set(priors) - set(candidates)
    if unknown:
        raise ValueError(f"priors: names {sorted(unknown)} are not among the candidates")
    say = progress or (lambda message: None)
    lfo, trees, rows = {}, {}, []
    for (name, p), key_m in zip(checked.items(), jax.random.split(key, len(checked)), strict=True):
        m = p.initial_probs.shape[0]
        prior = priors.get(name, default_switching_priors(m))
        start = time.perf_counter()
        result, tree, fits = switching_lfo(
            key_m,
            p,
            obs,
            min_observations=min_observations,
            priors=prior,
            gibbs_kwargs=gibbs_kwargs,
            k_threshold=k_threshold,
            progress=lambda message, name=name: say(f"{name}: {message}"),
        )
        lfo[name], trees[name] = result, tree
        sampled = ("dynamics_cov_scale", "emission_cov_scale", "transition_matrix")
        diag = diagnostics(tree, var_names=[v for v in sampled if v in tree["posterior"]])
        k = np.asarray(result.pareto_k)
        rows.append(
            {
                "model": name,
                "num_modes": m,
                "elpd_lfo": float(result.elpd),
                "se": float(result.se),
                "elpd_per_step": float(result.elpd) / result.n_data_points,
                "gibbs_fits": fits + 1,
                "pareto_k_max": float(np.nanmax(k)) if np.isfinite(k).any() else np.nan,
                "max_rhat": diag.max_r_hat,
                "min_ess_bulk": diag.min_ess_bulk,
                "wall_time_s": time.perf_counter() - start,
            }
        )
    table = azs.compare(lfo, round_to="none")
    return ModesComparison(table, lfo, trees, pd.DataFrame(rows).set_index("model"))


__all__ = [
    "AtomsComparison",
    "ModesComparison",
    "SwitchingGibbsWrapper",
    "compare_num_atoms",
    "compare_num_modes",
    "default_switching_priors",
    "draw_params",
    "loo_compare",
    "switching_lfo",
    "switching_pointwise_log_likelihood",
    "with_log_likelihood",
]
