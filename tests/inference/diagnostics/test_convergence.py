"""``diagnostics``: vectorised rank-normalised R-hat and bulk/tail ESS equal arviz_stats'."""

import warnings

import arviz_stats as azs
import numpy as np
import pytest
import xarray as xr

from attnbayes.inference.diagnostics import diagnostics


def tree(num_chains=4, num_draws=301, seed=0):
    rng = np.random.default_rng(seed)
    walk = rng.normal(size=(num_chains, num_draws, 3, 2)).cumsum(1) * 0.2
    mixed = walk + rng.normal(size=walk.shape)
    mixed[-1, :, 0, 1] += 2.0  # one chain off: R-hat large
    binary = (rng.random((num_chains, num_draws)) < 0.2).astype(float)  # ties
    constant = np.ones((num_chains, num_draws))
    return xr.DataTree.from_dict(
        {
            "posterior": xr.Dataset(
                {
                    "a": (("chain", "draw", "i", "j"), mixed),
                    "b": (("chain", "draw"), binary),
                    "c": (("chain", "draw"), constant),
                    "d": (("chain", "draw"), rng.normal(size=(num_chains, num_draws))),
                }
            )
        }
    )


@pytest.mark.parametrize("shape", [(4, 301), (2, 100), (1, 50), (3, 5)])
def test_diagnostics_equal_arviz_stats(shape):
    dt = tree(*shape)
    got = diagnostics(dt).table
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        ref = {
            "r_hat": azs.rhat(dt),
            "ess_bulk": azs.ess(dt, method="bulk"),
            "ess_tail": azs.ess(dt, method="tail"),
        }
    for column, values in ref.items():
        want = np.concatenate([np.asarray(values[n].values).ravel() for n in ("a", "b", "d")])
        np.testing.assert_allclose(got[column].to_numpy(), want, rtol=1e-12, equal_nan=True)
    assert got.index[0] == "a[0,0]" and "c" not in got.index  # constant: left out


def test_a_non_finite_draw_gives_nan_not_a_number():
    dt = tree()
    posterior = dt["posterior"].to_dataset()
    values = posterior["d"].values.copy()
    values[0, 3] = np.nan
    dt = xr.DataTree.from_dict({"posterior": posterior.assign(d=(("chain", "draw"), values))})
    row = diagnostics(dt).table.loc["d"]
    assert np.isnan(row["r_hat"]) and np.isnan(row["ess_bulk"]) and np.isnan(row["ess_tail"])


def test_average_ranks_equal_scipy_with_many_ties():
    from scipy import stats

    from attnbayes.inference.diagnostics.convergence import _doubled_average_ranks

    rng = np.random.default_rng(3)
    rows = np.stack(
        [
            rng.integers(0, 4, 500).astype(float),  # four long tie groups
            rng.normal(size=500),  # no ties
            np.ones(500),  # one group
            np.round(rng.normal(size=500), 1),  # short groups
        ]
    )
    want = 2.0 * stats.rankdata(rows, method="average", axis=1)
    np.testing.assert_array_equal(_doubled_average_ranks(rows), want.astype(np.intp))
