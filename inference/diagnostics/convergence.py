"""Convergence diagnostics of MCMC output: rank-normalised split R-hat, bulk and tail ESS,
divergences (Vehtari, Gelman, Simpson, Carpenter and Bürkner 2021).

ArviZ (arviz_stats), xarray and pandas are imported when ``diagnostics`` runs, not with this module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:
    import pandas as pd
    import xarray as xr

__all__ = ["Diagnostics", "basic_ess", "diagnostics", "split_chains"]


class Diagnostics(NamedTuple):
    """Convergence diagnostics of an MCMC DataTree.

    Attributes:
        table: one row per scalar element (index "name[i,j]"): r_hat (rank-normalised split
            R-hat), ess_bulk, ess_tail. Elements constant over all draws (R-hat undefined,
            e.g. a CDF below every atom) are left out and counted in ``num_constant``. The
            max/min properties propagate NaN: a quantity that varies but has no finite
            diagnostic is a failure, not something to skip.
        num_divergences: divergent transitions after warmup, over all chains.
        num_constant: scalar elements left out because they never vary.
        num_chains, num_draws: sizes of the posterior.
    """

    table: pd.DataFrame
    num_divergences: int
    num_constant: int
    num_chains: int
    num_draws: int

    @property
    def max_r_hat(self) -> float:
        return float(self.table["r_hat"].max(skipna=False))

    @property
    def min_ess_bulk(self) -> float:
        return float(self.table["ess_bulk"].min(skipna=False))

    @property
    def min_ess_tail(self) -> float:
        return float(self.table["ess_tail"].min(skipna=False))


def _element_labels(name: str, da: xr.DataArray) -> list[str]:
    import pandas as pd

    if da.ndim == 0:
        return [name]
    index = pd.MultiIndex.from_product([da[d].values for d in da.dims])
    return [f"{name}[{','.join(str(v) for v in item)}]" for item in index]


# ----------------------------------------------------------------------------- vectorised


def split_chains(x: np.ndarray) -> np.ndarray:
    """(E, C, S) -> (E, 2C, S // 2): first and last halves of every chain (odd S drops the
    middle draw), as arviz_stats splits them."""
    half = x.shape[-1] // 2
    return np.concatenate([x[..., :half], x[..., -half:]], axis=1)


def _doubled_average_ranks(flat: np.ndarray) -> np.ndarray:
    """Twice the average rank (1-based, ties share the mean of their ranks) of every row of
    (E, n): ``scipy.stats.rankdata(flat, method="average", axis=1) * 2`` as integers.

    One unstable argsort per row (ties are averaged afterwards, so their order in the sort does
    not matter); a tie group spanning sorted positions first..last (0-based) gets
    first + last + 2.
    """
    e, n = flat.shape
    order = np.argsort(flat, axis=1)
    ordered = np.take_along_axis(flat, order, axis=1)
    positions = np.broadcast_to(np.arange(n), (e, n))
    starts = np.ones((e, n), dtype=bool)
    starts[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    ends = np.ones((e, n), dtype=bool)
    ends[:, :-1] = starts[:, 1:]
    first = np.maximum.accumulate(np.where(starts, positions, 0), axis=1)
    last = np.minimum.accumulate(np.where(ends, positions, n - 1)[:, ::-1], axis=1)[:, ::-1]
    doubled = np.empty((e, n), dtype=np.intp)
    np.put_along_axis(doubled, order, first + last + 2, axis=1)
    return doubled


def _z_scale(x: np.ndarray) -> np.ndarray:
    """Rank normalisation per element: Phi^-1((r - 3/8) / (n + 1/4)), average ranks for ties
    over all chains and draws (Vehtari et al. 2021, eq. 14; Blom's offsets)."""
    from scipy import stats

    flat = x.reshape(x.shape[0], -1)
    n = flat.shape[1]
    # Average ranks are multiples of 1/2 in [1, n]: Phi^-1 is evaluated once per possible
    # value (2n - 1 of them) and looked up, the same numbers as evaluating it per draw.
    table = stats.norm.ppf((0.5 * np.arange(2, 2 * n + 1) - 0.375) / (n + 0.25))
    return table[_doubled_average_ranks(flat) - 2].reshape(x.shape)


def _basic_rhat(x: np.ndarray) -> np.ndarray:
    """sqrt((B / W + n - 1) / n) per element of (E, C, n): B = n var(chain means), W = mean
    within-chain variance (Gelman et al. 2013, BDA3 eq. 11.4)."""
    n = x.shape[-1]
    between = n * np.var(x.mean(-1), axis=1, ddof=1)
    within = np.mean(np.var(x, axis=-1, ddof=1), axis=1)
    return np.sqrt((between / within + n - 1) / n)


def _rank_rhat(split: np.ndarray, z_split: np.ndarray) -> np.ndarray:
    """Rank-normalised split R-hat, the larger of the bulk and folded (tail) versions
    (Vehtari et al. 2021, section 4.2), from the split chains and their rank normalisation."""
    median = np.median(split.reshape(split.shape[0], -1), axis=1)[:, None, None]
    folded = _z_scale(np.abs(split - median))
    return np.maximum(_basic_rhat(z_split), _basic_rhat(folded))


def _autocovariance(x: np.ndarray) -> np.ndarray:
    """Autocovariance at every lag along the last axis, by FFT (zero-padded to 2n)."""
    from scipy.fft import next_fast_len

    n = x.shape[-1]
    m = next_fast_len(2 * n)
    centred = x - x.mean(-1, keepdims=True)
    spectrum = np.fft.rfft(centred, n=m, axis=-1)
    spectrum *= np.conjugate(spectrum)
    return np.fft.irfft(spectrum, n=m, axis=-1)[..., :n] / n


def basic_ess(x: np.ndarray) -> np.ndarray:
    """ESS of every element of (E, C, n) from the multi-chain autocorrelations, truncated by
    Geyer's initial positive and monotone sequences (Vehtari et al. 2021, section 3.2; BDA3
    eq. 11.7-11.8), all elements at once: the steps of arviz_stats' loop, lane by lane."""
    e, c, n = x.shape
    acov = _autocovariance(x)
    mean_var = acov[:, :, 0].mean(1) * n / (n - 1.0)
    var_plus = mean_var * (n - 1.0) / n
    if c > 1:
        var_plus = var_plus + np.var(x.mean(-1), axis=1, ddof=1)
    mean_acov = acov.mean(1)
    rho = np.zeros((e, n))
    rho[:, 0] = 1.0
    even = np.ones(e)
    odd = 1.0 - (mean_var - mean_acov[:, 1]) / var_plus
    rho[:, 1] = odd
    last = np.ones(e, dtype=int)
    active = np.ones(e, dtype=bool)
    t = 1
    while True:  # initial positive sequence: pairs (even, odd) while their sum is positive
        active &= (t < n - 3) & ((even + odd) > 0.0)
        if not active.any():
            break
        even = np.where(active, 1.0 - (mean_var - mean_acov[:, t + 1]) / var_plus, even)
        odd = np.where(active, 1.0 - (mean_var - mean_acov[:, t + 2]) / var_plus, odd)
        keep = active & ((even + odd) >= 0)
        rho[keep, t + 1] = even[keep]
        rho[keep, t + 2] = odd[keep]
        last = np.where(active, t + 2, last)
        t += 2
    max_t = last - 2
    lanes = np.flatnonzero(even > 0)
    rho[lanes, max_t[lanes] + 1] = even[lanes]
    t = 1
    while True:  # initial monotone sequence
        live = t <= max_t - 2
        if not live.any():
            break
        bigger = live & ((rho[:, t + 1] + rho[:, t + 2]) > (rho[:, t - 1] + rho[:, t]))
        average = (rho[:, t - 1] + rho[:, t]) / 2.0
        rho[bigger, t + 1] = average[bigger]
        rho[bigger, t + 2] = average[bigger]
        t += 2
    total = c * n
    lags = np.arange(n)[None, :]
    head = np.where(lags <= max_t[:, None], rho, 0.0).sum(1)
    following = np.where(lags == (max_t + 1)[:, None], rho, 0.0).sum(1)
    tau = np.maximum(-1.0 + 2.0 * head + following, 1 / np.log10(total))
    ess = np.where(np.isnan(rho).any(1), np.nan, total / tau)
    flat = x.reshape(e, -1)
    constant = (flat.max(1) - flat.min(1)) < np.finfo(float).resolution
    return np.where(constant, float(total), ess)


def _tail_ess(x: np.ndarray, prob: float) -> np.ndarray:
    """Tail ESS: the smaller ESS of the indicators x <= q_lo and x <= q_hi (split chains), the
    quantiles (1 - prob, prob) sorted, as arviz_stats reads its ``prob``."""
    flat = x.reshape(x.shape[0], -1)
    quantiles = np.quantile(flat, sorted((prob, 1 - prob)), axis=1)  # (2, E), one pass
    low, high = (basic_ess(split_chains((x <= q[:, None, None]).astype(float))) for q in quantiles)
    return np.minimum(low, high)


def _element_diagnostics(values: np.ndarray, tail_prob: float):
    """(r_hat, ess_bulk, ess_tail) of every element of (E, C, S); NaN where arviz_stats gives
    NaN (a non-finite draw, fewer than 4 draws per chain, and for R-hat fewer than 2 chains)."""
    e, c, s = values.shape
    bad = ~np.isfinite(values.reshape(e, -1)).all(1)
    if s < 4 or e == 0:
        nan = np.full(e, np.nan)
        return nan, nan.copy(), nan.copy()
    x = np.where(bad[:, None, None], 0.0, values.astype(np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        split = split_chains(x)
        z_split = _z_scale(split)  # shared by the bulk R-hat and the bulk ESS
        r_hat = _rank_rhat(split, z_split) if c >= 2 else np.full(e, np.nan)
        bulk, tail = basic_ess(z_split), _tail_ess(x, tail_prob)
    return tuple(np.where(bad, np.nan, v) for v in (r_hat, bulk, tail))


def diagnostics(datatree: xr.DataTree, var_names: list[str] | None = None) -> Diagnostics:
    """R-hat and bulk/tail ESS of every scalar element of the posterior, and divergences.

    ArviZ's rank-normalised split R-hat and bulk/tail ESS (Vehtari et al. 2021), the same
    numbers as ``arviz_stats.rhat`` / ``ess`` (tests/inference/diagnostics/test_convergence.py
    holds them to 1e-12), but
    computed for all elements of a variable at once, where arviz_stats loops over elements in
    Python (50 s of a warm ``make run``; ``benchmarks/profile_report.py``).
    """
    import pandas as pd
    import xarray as xr

    if not isinstance(datatree, xr.DataTree) or "posterior" not in datatree.children:
        raise ValueError("datatree: expected an ArviZ DataTree with a 'posterior' group")
    posterior = datatree["posterior"].to_dataset()
    names = list(posterior.data_vars) if var_names is None else list(var_names)
    unknown = [n for n in names if n not in posterior.data_vars]
    if unknown:
        raise ValueError(f"var_names: not in the posterior: {unknown}")
    from arviz_base import rcParams

    tail_prob = float(rcParams["stats.ci_prob"])  # arviz_stats' default for method="tail"
    frames, num_constant = [], 0
    for name in names:
        da = posterior[name]
        other = [d for d in da.dims if d not in ("chain", "draw")]
        da = da.transpose("chain", "draw", *other)
        values = np.asarray(da.values, dtype=np.float64)
        flat = np.moveaxis(values.reshape(values.shape[0], values.shape[1], -1), -1, 0)
        r_hat, ess_bulk, ess_tail = _element_diagnostics(flat, tail_prob)
        constant = np.asarray(da.max(("chain", "draw")) == da.min(("chain", "draw"))).ravel()
        labels = _element_labels(name, da.isel(chain=0, draw=0, drop=True))
        frame = pd.DataFrame(
            {"r_hat": r_hat, "ess_bulk": ess_bulk, "ess_tail": ess_tail}, index=labels
        )
        num_constant += int(constant.sum())
        frames.append(frame[~constant])
    table = pd.concat(frames) if frames else pd.DataFrame(columns=["r_hat", "ess_bulk", "ess_tail"])
    num_div = 0
    if "sample_stats" in datatree.children and "diverging" in datatree["sample_stats"]:
        num_div = int(np.asarray(datatree["sample_stats"]["diverging"]).sum())
    return Diagnostics(
        table=table,
        num_divergences=num_div,
        num_constant=num_constant,
        num_chains=int(posterior.sizes["chain"]),
        num_draws=int(posterior.sizes["draw"]),
    )
