"""Convergence diagnostics of MCMC output: rank-normalised split R-hat, bulk and tail ESS,
divergences (Vehtari, Gelman, Simpson, Carpenter and Bürkner 2021).

ArviZ (arviz_stats), xarray and pandas are imported when ``diagnostics`` runs, not with this module.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:
    import pandas as pd
    import xarray as xr

__all__ = ["Diagnostics", "diagnostics"]


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


def diagnostics(datatree: xr.DataTree, var_names: list[str] | None = None) -> Diagnostics:
    """R-hat and bulk/tail ESS of every scalar element of the posterior, and divergences.

    Uses ArviZ's rank-normalised split R-hat and ESS (Vehtari et al. 2021).
    """
    import arviz_stats as azs  # arviz.rhat and arviz.ess are these, without the plotting stack
    import pandas as pd
    import xarray as xr

    if not isinstance(datatree, xr.DataTree) or "posterior" not in datatree.children:
        raise ValueError("datatree: expected an ArviZ DataTree with a 'posterior' group")
    posterior = datatree["posterior"].to_dataset()
    names = list(posterior.data_vars) if var_names is None else list(var_names)
    unknown = [n for n in names if n not in posterior.data_vars]
    if unknown:
        raise ValueError(f"var_names: not in the posterior: {unknown}")
    with warnings.catch_warnings(), np.errstate(divide="ignore", invalid="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        r_hat = azs.rhat(datatree, var_names=names)
        ess_bulk = azs.ess(datatree, var_names=names, method="bulk")
        ess_tail = azs.ess(datatree, var_names=names, method="tail")
    frames, num_constant = [], 0
    for name in names:
        da = posterior[name]
        constant = np.asarray(da.max(("chain", "draw")) == da.min(("chain", "draw"))).ravel()
        labels = _element_labels(name, r_hat[name])
        frame = pd.DataFrame(
            {
                "r_hat": np.asarray(r_hat[name]).ravel(),
                "ess_bulk": np.asarray(ess_bulk[name]).ravel(),
                "ess_tail": np.asarray(ess_tail[name]).ravel(),
            },
            index=labels,
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
