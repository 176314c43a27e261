"""PSIS-LOO: Pareto-smoothed importance sampling leave-one-out cross-validation, vectorised.

For observation i with log-likelihood draws l_is (s = 1..S, chains x draws flattened in C
order) the leave-one-out importance ratios are r_is = 1 / p(y_i | theta_s), i.e.
log r_is = -l_is. PSIS (Vehtari et al. 2024) replaces the M = floor(3 sqrt(S / r_eff)) largest
ratios (floor(S / 5) when S r_eff <= 225) by the quantiles of a generalized Pareto
distribution fitted to their exceedances over the (M+1)-th largest ratio u,

    w_(S-M+j) = min(u + sigma ((1 - p_j)^(-k) - 1) / k, largest raw ratio),  p_j = (j - 1/2) / M,

with (k, sigma) the Zhang-Stephens empirical Bayes estimate and a weak prior on k centred at 0.5
(Vehtari et al. 2024: k <- (M k + 5) / (M + 10)); khat is the Pareto k diagnostic, and a tail
whose khat is not finite is left raw. With the normalised log weights log w_is,

    elpd_i = log sum_s w_is p(y_i | theta_s),  lppd_i = log (1/S) sum_s p(y_i | theta_s),
    p_loo_i = lppd_i - elpd_i,  elpd = sum_i elpd_i,  se = sqrt(N var(elpd_i, ddof=1)),
    p_loo = sum_i p_loo_i

(Vehtari, Gelman and Gabry 2017). r_eff, when not given, is the mean over all posterior
elements of the mean-ESS / S (1 for one chain), as arviz_stats computes it.

``psis_loo`` gives arviz_stats' numbers (``arviz_stats.loo(..., pointwise=True)``;
tests/inference/diagnostics/test_loo.py holds them to 1e-10) and returns its ``ELPDDataLOO``, so
``arviz_stats.compare`` accepts it; arviz_stats fits one observation at a time in Python,
this fits all of them at once (``benchmarks/psis_loo.py``).

References:
    Vehtari, A., Gelman, A., Gabry, J. (2017). Practical Bayesian model evaluation using
    leave-one-out cross-validation and WAIC. Statistics and Computing 27(5), 1413-1432.
    Vehtari, A., Simpson, D., Gelman, A., Yao, Y., Gabry, J. (2024). Pareto smoothed importance
    sampling. Journal of Machine Learning Research 25(72), 1-58.

ArviZ (arviz_stats), xarray and scipy are imported when ``psis_loo`` runs, not with this module.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import xarray as xr
    from arviz_stats.utils import ELPDDataLOO

__all__ = ["psis_loo"]

SAMPLE_DIMS = ("chain", "draw")
PRIOR_BS = 3  # arviz_stats' _gpdfit: scale of the grid of b around 1 / (first quartile)
PRIOR_K = 10  # weight (in observations) of the prior k = 0.5
BLOCK_VALUES = 2**20  # values per block of the (rows, grid, tail) GPD array: 8 MB


# ----------------------------------------------------------------------------- relative ESS


def _ess_mean(values: np.ndarray) -> np.ndarray:
    """ESS for the mean of every element of (E, C, D): the plain (not rank-normalised) ESS of
    the split chains, as arviz_stats' ``_ess_mean``; NaN with a non-finite draw or D < 4."""
    from .convergence import basic_ess, split_chains

    num_elements, _, num_draws = values.shape
    if num_draws < 4 or num_elements == 0:
        return np.full(num_elements, np.nan)
    bad = ~np.isfinite(values.reshape(num_elements, -1)).all(1)
    x = np.where(bad[:, None, None], 0.0, values)
    step = max(1, BLOCK_VALUES // x[0].size)
    with np.errstate(divide="ignore", invalid="ignore"):
        ess = np.concatenate(
            [basic_ess(split_chains(x[i : i + step])) for i in range(0, num_elements, step)]
        )
    return np.where(bad, np.nan, ess)


def _relative_ess(datatree: xr.DataTree, num_samples: int) -> float:
    """r_eff as arviz_stats' ``_get_r_eff``: 1 for one chain, else the mean (NaN if any is
    NaN) of the mean-ESS of every element of every posterior variable, divided by S."""
    if "posterior" not in datatree.children:
        raise ValueError("datatree: no 'posterior' group to estimate reff from; pass reff")
    posterior = datatree["posterior"]
    if posterior.sizes.get("chain", 0) == 1:
        return 1.0
    ess = []
    for name, da in posterior.data_vars.items():
        if not set(SAMPLE_DIMS) <= set(da.dims):
            raise ValueError(f"datatree: posterior variable {name!r} has no chain/draw dims")
        other = [d for d in da.dims if d not in SAMPLE_DIMS]
        values = np.asarray(da.transpose(*SAMPLE_DIMS, *other).values, dtype=np.float64)
        flat = values.reshape(values.shape[0], values.shape[1], -1)
        ess.append(_ess_mean(np.moveaxis(flat, -1, 0)))
    if not ess:
        raise ValueError("datatree: the posterior has no variables to estimate reff from")
    return np.hstack(ess).mean() / num_samples


# ----------------------------------------------------------------------------- PSIS


def _logsumexp_rows(a: np.ndarray, scale: float | None = None) -> np.ndarray:
    """log sum_s scale exp(a_s) of every row of a 2-D array with scipy.special.logsumexp's
    arithmetic (the n largest terms apart: log1p(sum of the others / n) + log(n) + max; the
    direct log sum exp where that is not finite), without its per-call overhead."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        a_max = np.max(a, axis=1, keepdims=True)
        at_max = a == a_max
        count = np.count_nonzero(at_max, axis=1).astype(a.dtype)[:, None]
        terms = np.subtract(a, a_max)
        np.exp(terms, out=terms)
        np.putmask(terms, at_max, 0.0)  # scipy sets the largest terms to -inf: exp = 0
        if scale is not None:
            count = count * scale
            np.multiply(scale, terms, out=terms)
        total = np.sum(terms, axis=1, keepdims=True)
        total = np.where(total == 0, total, total / count)
        out = (np.log1p(total) + np.log(count) + a_max)[:, 0]
        rows = np.flatnonzero(~np.isfinite(out))
        if rows.size:
            direct = np.exp(a[rows]) if scale is None else scale * np.exp(a[rows])
            out[rows] = np.log(np.sum(direct, axis=1))
    return out


def _tail_length(num_samples: int, r_eff: float) -> int:
    """M = floor(3 sqrt(S / r_eff)) if S r_eff > 225 else floor(S / 5) (arviz_stats'
    ``_get_ps_tails``; a NaN r_eff takes the second branch, as there)."""
    if num_samples * r_eff > 225:
        return int(np.floor(3 * (num_samples / r_eff) ** 0.5))
    return int(np.floor(num_samples / 5))


def _gpd_fit(exceedances: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Generalized Pareto (k, sigma) of every row of (R, M) sorted exceedances: the
    Zhang-Stephens empirical Bayes estimate, b_post = sum_j b_j w_j over the grid
    b_j = 1 / x_max + (1 - sqrt(m / (j - 1/2))) / (3 x_(M/4)), w_j proportional to
    exp(M (log(-b_j / k_j) - k_j - 1)), k_j = mean log1p(-b_j x), weights < 10 eps dropped;
    k = mean log1p(-b_post x), sigma = -k / b_post, then k <- (M k + 5) / (M + 10).
    (nan, nan) where the first quartile equals the minimum, (inf, nan) where k is NaN:
    arviz_stats' ``_gpdfit`` row by row."""
    num_rows, n = exceedances.shape
    m_est = 30 + int(n**0.5)
    kappa = np.full(num_rows, np.nan)
    sigma = np.full(num_rows, np.nan)
    xstar = exceedances[:, int((n / 4 + 0.5) - 1)]  # first quartile
    rows = np.flatnonzero(~(xstar <= exceedances[:, 0]))
    grid = 1 - np.sqrt(m_est / (np.arange(1, m_est + 1, dtype=float) - 0.5))
    step = max(1, BLOCK_VALUES // (m_est * n))
    for start in range(0, rows.size, step):
        block = rows[start : start + step]
        x = exceedances[block]
        b = grid[None, :] / (PRIOR_BS * xstar[block, None]) + 1 / x[:, -1:]
        log1p_grid = np.multiply(-b[:, :, None], x[:, None, :])
        np.log1p(log1p_grid, out=log1p_grid)
        k_grid = np.mean(log1p_grid, axis=2)
        len_scale = n * (np.log(-b / k_grid) - k_grid - 1)
        weights = np.exp(len_scale - _logsumexp_rows(len_scale)[:, None])
        kept = weights >= 10 * np.finfo(float).eps  # negligible weights removed
        weights = np.where(kept, weights, 0.0)
        weights = weights / weights.sum(1, keepdims=True)
        b_post = np.sum(np.where(kept, b * weights, 0.0), axis=1)  # 0 if none kept, as arviz
        k_post = np.mean(np.log1p(-b_post[:, None] * x), axis=1)
        sigma_post = -k_post / b_post
        k_post = (n * k_post + PRIOR_K * 0.5) / (n + PRIOR_K)
        failed = np.isnan(k_post)
        kappa[block] = np.where(failed, np.inf, k_post)
        sigma[block] = np.where(failed, np.nan, sigma_post)
    return kappa, sigma


def _gpd_quantiles(
    probs: np.ndarray, kappa: np.ndarray, sigma: np.ndarray, mu: np.ndarray
) -> np.ndarray:
    """Generalized Pareto quantiles mu + sigma ((1 - p)^(-k) - 1) / k (mu - sigma log(1 - p)
    for k = 0; NaN for sigma <= 0), one row per (k, sigma, mu): arviz_stats' ``_gpinv``."""
    kappa, sigma, mu = kappa[:, None], sigma[:, None], mu[:, None]
    log_tail = np.log1p(-probs)[None, :]
    q = np.where(
        kappa == 0,
        mu - sigma * log_tail,
        mu + sigma * np.expm1(-kappa * log_tail) / kappa,
    )
    return np.where(sigma <= 0, np.nan, q)


def _psis_log_weights(log_lik: np.ndarray, r_eff: float) -> tuple[np.ndarray, np.ndarray]:
    """Pareto-smoothed normalised log weights (N, S) and khat (N,) of every row of the (N, S)
    log-likelihood: arviz_stats' ``_psislw`` / ``_ps_tail`` (right tail, log weights), all rows
    at once. Rows whose khat is not finite keep their raw tail, as there."""
    num_samples = log_lik.shape[1]
    tail = _tail_length(num_samples, r_eff)
    if tail < 5:
        raise ValueError(
            f"datatree: {num_samples} draws give a Pareto tail of {tail} draws, fewer than the "
            "5 needed (arviz_stats: 'n_draws_tail must be at least 5')"
        )
    log_ratios = -log_lik
    log_ratios = log_ratios - np.max(log_ratios, axis=1, keepdims=True)
    order = np.argsort(log_ratios, axis=1)
    tail_ids = order[:, num_samples - tail :]
    tail_values = np.take_along_axis(log_ratios, tail_ids, axis=1)  # ascending
    cutoff = np.take_along_axis(log_ratios, order[:, num_samples - tail - 1, None], axis=1)[:, 0]
    max_tail = tail_values.max(1)
    same = np.abs(max_tail - tail_values.min(1)) < np.finfo(float).tiny
    if same.any():
        raise ValueError(
            "All tail values are the same (arviz_stats raises this too) for observations "
            f"(flat index) {np.flatnonzero(same)[:10].tolist()}: their log-likelihood is "
            "constant over the largest draws, no Pareto tail can be fitted"
        )
    cutoff = np.exp(cutoff)
    kappa, sigma = _gpd_fit(np.exp(tail_values) - cutoff[:, None])
    smooth = np.flatnonzero(np.isfinite(kappa))
    if smooth.size:
        probs = np.arange(0.5, tail) / tail
        smoothed = np.log(_gpd_quantiles(probs, kappa[smooth], sigma[smooth], cutoff[smooth]))
        bound = max_tail[smooth, None]
        tail_values[smooth] = np.where(smoothed > bound, bound, smoothed)
        np.put_along_axis(log_ratios, tail_ids, tail_values, axis=1)  # raw tail if not smoothed
    log_weights = log_ratios - _logsumexp_rows(log_ratios)[:, None]
    return log_weights, kappa


# ----------------------------------------------------------------------------- public


def _log_likelihood(datatree, var_name):
    import xarray as xr

    if not isinstance(datatree, xr.DataTree):
        raise ValueError(
            f"datatree: expected an xarray/ArviZ DataTree, got {type(datatree).__name__}"
        )
    if "log_likelihood" not in datatree.children:
        raise ValueError("datatree: expected a 'log_likelihood' group")
    group = datatree["log_likelihood"]
    names = list(group.data_vars)
    if var_name is None:
        if not names:
            raise ValueError("datatree: the 'log_likelihood' group has no variables")
        if len(names) > 1:
            raise ValueError(f"var_name: several log-likelihood variables {names}; name one")
        var_name = names[0]
    elif var_name not in names:
        raise ValueError(f"var_name: {var_name!r} is not in the 'log_likelihood' group {names}")
    da = group[var_name]
    if not set(SAMPLE_DIMS) <= set(da.dims):
        raise ValueError(f"datatree: log_likelihood {var_name!r} has no 'chain' and 'draw' dims")
    return da


def psis_loo(
    datatree: xr.DataTree, var_name: str | None = None, reff: float | None = None
) -> ELPDDataLOO:
    """PSIS-LOO of a DataTree's pointwise log-likelihood, all observations at once.

    The same result as ``arviz_stats.loo(datatree, pointwise=True, var_name=var_name,
    reff=reff)`` (to about 1e-13 relative; tests/inference/diagnostics/test_loo.py holds
    1e-10), as its
    ``ELPDDataLOO``: elpd = sum_i elpd_i, se = sqrt(N var(elpd_i, ddof=1)), p = sum_i p_loo_i,
    warning (some khat > good_k = min(1 - 1 / log10(S), 0.7)), elpd_i and pareto_k over the
    observation dims, log_weights over (obs dims..., chain, draw). The same UserWarnings as
    arviz_stats (high khat; pointwise elpd equal to the total).

    Args:
        datatree: ArviZ DataTree with a ``log_likelihood`` group (dims chain, draw, obs...) and,
            unless ``reff`` is given with several chains, a ``posterior`` group.
        var_name: the log-likelihood variable; needed when the group holds several.
        reff: relative efficiency ESS / S, a positive scalar; by default the mean over all
            posterior elements of the mean-ESS / S (1 for one chain), as arviz_stats.

    Raises:
        ValueError: bad input (named), fewer than 5 tail draws, or an observation whose
            largest log-likelihood ratios are all equal ("All tail values are the same", which
            arviz_stats raises as well). arviz_stats raises TypeError for some of these.
    """
    import xarray as xr
    from arviz_stats.utils import ELPDDataLOO

    da = _log_likelihood(datatree, var_name)
    obs_dims = [d for d in da.dims if d not in SAMPLE_DIMS]
    da = da.transpose(*obs_dims, *SAMPLE_DIMS)
    num_samples = da.sizes["chain"] * da.sizes["draw"]
    num_data_points = np.prod([da.sizes[d] for d in obs_dims])
    if reff is None:
        r_eff = _relative_ess(datatree, num_samples)
    else:
        try:
            r_eff = float(reff) if np.ndim(reff) == 0 else np.nan
        except (TypeError, ValueError):
            r_eff = np.nan
        if not (np.isfinite(r_eff) and r_eff > 0):
            raise ValueError(f"reff: expected a positive finite scalar, got {reff!r}")

    obs_shape = tuple(da.sizes[d] for d in obs_dims)
    log_lik = np.asarray(da.values, dtype=np.float64).reshape(-1, num_samples)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        log_weights, khat = _psis_log_weights(log_lik, r_eff)
        elpd_i = _logsumexp_rows(log_weights + log_lik)
        lppd_i = _logsumexp_rows(log_lik, scale=1 / num_samples)
    p_loo_i = lppd_i - elpd_i

    num = elpd_i.size
    elpd = np.sum(elpd_i)
    se = np.sqrt(num * np.var(elpd_i, ddof=1)) if num > 1 else 0.0
    p_loo = np.sum(p_loo_i)

    good_k = min(1 - 1 / np.log10(num_samples), 0.7) if num_samples > 1 else 0.7
    warning = bool(np.any(khat > good_k))
    if warning:  # arviz_stats' _warn_pareto_k
        warnings.warn(
            f"Estimated shape parameter of Pareto distribution is greater than {good_k:.2f} "
            "for one or more samples. You should consider using a more robust model, this is "
            "because importance sampling is less likely to work well if the marginal posterior "
            "and LOO posterior are very different. This is more likely to happen with a "
            "non-robust model and highly influential observations.",
            UserWarning,
            stacklevel=2,
        )
    if np.equal(elpd, elpd_i).all():  # arviz_stats' _warn_pointwise_loo
        warnings.warn(
            "The point-wise LOO is the same with the sum LOO, please double check "
            "the Observed RV in your model to make sure it returns element-wise logp.",
            UserWarning,
            stacklevel=2,
        )

    obs_coords = {
        name: coord for name, coord in da.coords.items() if not set(coord.dims) & set(SAMPLE_DIMS)
    }

    def pointwise(values: np.ndarray) -> xr.DataArray:
        return xr.DataArray(
            values.reshape(obs_shape),
            dims=obs_dims,
            coords=obs_coords,
            name=da.name,
            attrs=dict(da.attrs),
        )

    return ELPDDataLOO(
        elpd=elpd,
        se=se,
        p=p_loo,
        n_samples=num_samples,
        n_data_points=num_data_points,
        scale="log",
        warning=warning,
        good_k=good_k,
        elpd_i=pointwise(elpd_i),
        pareto_k=pointwise(khat),
        approx_posterior=False,
        log_weights=da.copy(data=log_weights.reshape(da.shape)),
    )
