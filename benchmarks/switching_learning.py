"""Learning switching models: MLE against statsmodels, and the cost of a gradient of the IMM
log-likelihood.

1. MLE of Hamilton's MS-AR(p) (switching mean, common variance) on US real GDP growth
   (statsmodels' macrodata, 202 quarters): ``fit_switching`` (L-BFGS, 8 starts in one vmapped
   program, Hessian standard errors) against ``MarkovAutoregression.fit`` (EM + BFGS) with its
   default start and with ``search_reps=20``. Wall seconds of a first call (ours compiles)
   and of a second call, the log-likelihood reached, and the ratio of warm times.
2. One gradient of the IMM log-likelihood in every parameter against one filter pass, on
   the maneuvering target (T = 200), both compiled: the ratio of their times.

    python benchmarks/switching_learning.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import time
import warnings

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
import statsmodels.api as sm  # noqa: E402

from attnbayes.inference.switching import (  # noqa: E402
    check_inputs,
    fit_switching,
    imm_filter,
)
from attnbayes.models.switching import get_scenario, simulate  # noqa: E402


def _seconds(fn):
    start = time.perf_counter()
    out = fn()
    jax.block_until_ready(out)
    return time.perf_counter() - start, out


def mle_against_statsmodels():
    warnings.simplefilter("ignore")
    data = sm.datasets.macrodata.load_pandas().data
    gdp = 100.0 * np.diff(np.log(data["realgdp"].to_numpy()))
    from attnbayes.models.markov_switching import markov_switching_ar

    print("1. MLE of MS-AR(p) on GDP growth: seconds (first call / second call), log L")
    print(
        f"{'model':<10}{'ours 1st':>10}{'ours 2nd':>10}{'ours log L':>14}"
        f"{'sm default':>12}{'sm log L':>14}{'sm search20':>13}{'sm log L':>14}{'2nd ratio':>11}"
    )
    for order in (1, 2):
        spec = markov_switching_ar(gdp, order)
        first, fit = _seconds(
            lambda spec=spec: fit_switching(jax.random.key(0), None, spec, likelihood="exact")
        )
        second, fit = _seconds(
            lambda spec=spec: fit_switching(jax.random.key(1), None, spec, likelihood="exact")
        )
        model = sm.tsa.MarkovAutoregression(gdp, k_regimes=2, order=order, switching_ar=False)
        model.fit()
        sm_default, ref = _seconds(lambda model=model: model.fit())
        sm_search, ref_s = _seconds(lambda model=model: model.fit(search_reps=20, rng=1234))
        print(
            f"MS-AR({order})  {first:>9.2f} {second:>9.2f} {fit.log_likelihood[-1]:>13.4f}"
            f" {sm_default:>11.2f} {ref.llf:>13.4f} {sm_search:>12.2f} {ref_s.llf:>13.4f}"
            f" {second / sm_search:>10.2f}"
        )


def gradient_against_filter(args):
    params = get_scenario("maneuvering-target")
    _, _, y = simulate(jax.random.key(0), params, 200)
    checked, obs, u = check_inputs(params, y)
    arrays = jax.tree.map(jax.numpy.asarray, checked)
    value = jax.jit(lambda p: imm_filter(p, obs, inputs=u).log_likelihood)
    grad = jax.jit(jax.grad(lambda p: imm_filter(p, obs, inputs=u).log_likelihood))
    jax.block_until_ready(value(arrays))
    jax.block_until_ready(grad(arrays))
    t_value = min(_seconds(lambda: value(arrays))[0] for _ in range(args.repeats))
    t_grad = min(_seconds(lambda: grad(arrays))[0] for _ in range(args.repeats))
    print("\n2. IMM on the maneuvering target, T = 200 (best of repeats)")
    print(
        f"filter pass {1e3 * t_value:.2f} ms, gradient in every field {1e3 * t_grad:.2f} ms, "
        f"ratio {t_grad / t_value:.2f}"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    mle_against_statsmodels()
    gradient_against_filter(args)


if __name__ == "__main__":
    main()
