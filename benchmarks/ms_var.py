"""The Markov-switching models of issue 37 against statsmodels where it has them, and the MS-VAR
where nobody does: fit times (first call, compiling included, and warm) and the maxima reached.

Cases (float64, default settings on both sides: ``fit_switching(jax.random.key(0), spec)``
and statsmodels' ``.fit()``):

- "mumps": statsmodels' published ``TestMumpspcNoconstL1Variance`` (no intercept, switching
  slope and variance; Stata's llf 131.7225). statsmodels ``MarkovRegression(y, 2, trend="n",
  exog=lag, switching_variance=True)``.
- "partial": the Fed funds rate on the output gap and inflation with only the gap's
  coefficient switching (statsmodels ``switching_exog=[True, False]``).
- "var1-o1": the MS-VAR(1) of one series (the Fed funds rate) is statsmodels'
  ``MarkovRegression(y[1:], exog=y[:-1], switching_variance=True)``.
- "var-o2", "var2-o2", "var-o3": MS(I)AH-VAR(p) of US real GDP growth and CPI inflation
  (statsmodels' macrodata, T = 202), p = 1 and 2, and with the unemployment rate's change
  (o = 3). No Python library fits it (statsmodels' issue 4564): ours alone, MLE and EM (EM
  warm; EM runs from one start, the spec's, and its log-likelihood minus the multi-start
  MLE's is in brackets: negative where EM stops at a lower local optimum).

Each case runs in this one process: the first fit (no persistent compilation cache:
``ATTNBAYES_CACHE_DIR=off`` is set before importing), then the warm fit (same shapes), then
statsmodels' fit; the ratios ours / statsmodels are within the run (the machine is shared).

    python -P benchmarks/ms_var.py [--cases mumps partial var1-o1 var-o2 var2-o2 var-o3]
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

os.environ.setdefault("ATTNBAYES_CACHE_DIR", "off")

import jax
import numpy as np
import statsmodels.api as sm
from statsmodels.tsa.regime_switching.tests import test_markov_regression as treg

jax.config.update("jax_enable_x64", True)

from attnbayes.inference.switching import fit_switching  # noqa: E402
from attnbayes.models.markov_switching import (  # noqa: E402
    markov_switching_regression,
    markov_switching_var,
)

CASES = ("mumps", "partial", "var1-o1", "var-o2", "var2-o2", "var-o3")


def _macro(columns: int) -> np.ndarray:
    data = sm.datasets.macrodata.load_pandas().data
    gdp = 100 * np.diff(np.log(data["realgdp"].to_numpy()))
    infl = data["infl"].to_numpy()[1:]
    unemp = np.diff(data["unemp"].to_numpy())
    return np.column_stack([gdp, infl, unemp][:columns])


def _case(name: str):
    """(our spec builder, statsmodels model builder or None)."""
    ff = np.asarray(treg.fedfunds)
    if name == "mumps":
        y = np.asarray(treg.mumpspc)
        return (
            lambda: markov_switching_regression(y[1:], y[:-1], trend="n", switching_variance=True),
            lambda: sm.tsa.MarkovRegression(
                y[1:], 2, trend="n", exog=y[:-1], switching_variance=True
            ),
        )
    if name == "partial":
        exog = np.c_[np.asarray(treg.ogap)[4:], np.asarray(treg.inf)[4:]]
        return (
            lambda: markov_switching_regression(
                ff[4:], exog, switching_coefficients=[True, False], switching_variance=False
            ),
            lambda: sm.tsa.MarkovRegression(ff[4:], 2, exog=exog, switching_exog=[True, False]),
        )
    if name == "var1-o1":
        return (
            lambda: markov_switching_var(ff[:, None], 1),
            lambda: sm.tsa.MarkovRegression(ff[1:], 2, exog=ff[:-1], switching_variance=True),
        )
    order, columns = {"var-o2": (1, 2), "var2-o2": (2, 2), "var-o3": (1, 3)}[name]
    y = _macro(columns)
    return (lambda: markov_switching_var(y, order)), None


def _fit_seconds(spec, **kwargs):
    """(fit, seconds) of ``fit_switching`` with its defaults (key 0)."""
    start = time.perf_counter()
    fit = fit_switching(jax.random.key(0), spec, **kwargs)
    return fit, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start (seconds)")
    header = (
        f"{'case':9} {'T':>4} {'k':>3} {'1st fit':>8} {'warm':>7} {'EM warm (llf - MLE)':>19} "
        f"{'sm fit':>7} {'1st/sm':>7} {'warm/sm':>8} {'llf sm':>12} {'llf ours':>12} "
        "optima (starts)"
    )
    print(header)
    for name in args.cases:
        make_spec, make_model = _case(name)
        _, t_first = _fit_seconds(make_spec())
        warm, t_warm = _fit_seconds(make_spec())
        em_warm = "-"
        if name.startswith("var"):
            _fit_seconds(make_spec(), method="em")  # compiles
            em, t_em = _fit_seconds(make_spec(), method="em")
            gap = em.log_likelihood[-1] - warm.log_likelihood[-1]
            em_warm = f"{t_em:.2f} ({gap:+.1e})"
        llf = warm.log_likelihood[-1]
        sm_cols = f"{'-':>7} {'-':>7} {'-':>8} {'-':>12}"
        if make_model is not None:
            start = time.perf_counter()
            res = make_model().fit()
            t_sm = time.perf_counter() - start
            sm_cols = f"{t_sm:7.2f} {t_first / t_sm:7.1f} {t_warm / t_sm:8.2f} {res.llf:12.5f}"
        optima = warm.local_optima
        found = ", ".join(
            f"{v:.3f} ({n})"
            for v, n in zip(optima.log_likelihoods[:3], optima.num_starts[:3], strict=False)
        )
        print(
            f"{name:9} {warm.num_observations:4d} {warm.num_parameters:3d} {t_first:8.2f} "
            f"{t_warm:7.2f} {em_warm:>19} {sm_cols} {llf:12.5f} {found}"
            + ("" if warm.converged else "  NOT CONVERGED")
        )


if __name__ == "__main__":
    main()
