"""Learning switching models: MLE against statsmodels, NUTS over theta against the Gibbs
sampler, and the cost of a gradient of the IMM log-likelihood.

1. MLE of Hamilton's MS-AR(p) (switching mean, common variance) on US real GDP growth
   (statsmodels' macrodata, 202 quarters): ``fit_switching`` (L-BFGS, 8 starts in one vmapped
   program, Hessian standard errors) against ``MarkovAutoregression.fit`` (EM + BFGS) with its
   default start and with ``search_reps=20``. Wall seconds of a first call (ours compiles)
   and of a second call, the log-likelihood reached, and the ratio of warm times.
2. NUTS over theta against the Gibbs sampler under the same priors, on the maneuvering
   target with full-rank process noise (T = 200): Pi rows ~ Dirichlet(1 + 9 I), the scales
   c_j, r_j ~ InverseGamma(3, 2) of Q_j = c_j Q0_j and R_j = r_j R0_j. NUTS samples those six
   numbers with the IMM (or GPB2) likelihood (``switching_marginal_model``); Gibbs samples
   them with the modes and states (``run_switching_gibbs``). Min bulk ESS per second over
   the parameters (sampling only, after a compiled warm-up run), and their posterior means.
3. One gradient of the IMM log-likelihood in every parameter against one filter pass, on
   the maneuvering target (T = 200), both compiled: the ratio of their times.

    python benchmarks/switching_learning.py [--num-samples 1000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import time
import warnings

import jax

jax.config.update("jax_enable_x64", True)

import arviz_stats  # noqa: E402
import numpy as np  # noqa: E402
import numpyro.distributions as dist  # noqa: E402
import statsmodels.api as sm  # noqa: E402

from attnbayes.inference.mcmc import run_nuts  # noqa: E402
from attnbayes.inference.switching import (  # noqa: E402
    check_inputs,
    fit_switching,
    run_switching_gibbs,
    switching_marginal_model,
)
from attnbayes.inference.switching.filters import _imm_filter  # noqa: E402
from attnbayes.models.markov_switching import switching_state_space  # noqa: E402
from attnbayes.models.switching import SwitchingPriors, get_scenario, simulate  # noqa: E402


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


def nuts_against_gibbs(args):
    params = get_scenario("maneuvering-target-cwna")
    _, _, y = simulate(jax.random.key(0), params, 200)
    y = np.asarray(y)
    m = 2
    alpha = np.ones((m, m)) + 9.0 * np.eye(m)
    priors = {
        "transition_matrix": dist.Dirichlet(alpha).to_event(1),
        "dynamics_cov_scale": dist.InverseGamma(3.0 * np.ones(m), 2.0).to_event(1),
        "emission_cov_scale": dist.InverseGamma(3.0 * np.ones(m), 2.0).to_event(1),
    }
    free = ("transition_matrix", "dynamics_cov_scale", "emission_cov_scale")
    spec = switching_state_space(params, y)
    names = ("transition_matrix", "dynamics_cov_scale", "emission_cov_scale")

    def summarise(post, seconds):
        ess = []
        means = []
        for n in names:
            arr = np.asarray(post[n])
            flat = arr.reshape(arr.shape[0], arr.shape[1], -1)
            for i in range(flat.shape[-1]):
                if n == "transition_matrix" and i % (m + 1) != 0:
                    continue  # the diagonal (the rows have one free number each for M = 2)
                ess.append(float(arviz_stats.ess(flat[..., i])))
                means.append(float(flat[..., i].mean()))
        return min(ess), min(ess) / seconds, np.round(means, 3)

    print("\n2. NUTS over theta vs Gibbs, maneuvering target (CWNA), T = 200, 2 chains")
    print(
        f"{'sampler':<16}{'seconds':>9}{'min ESS':>9}{'ESS/s':>8}  posterior means "
        "(P00, P11, c0, c1, r0, r1)"
    )
    for lik in ("imm", "gpb2"):
        run = lambda key, lik=lik: run_nuts(  # noqa: E731
            key,
            switching_marginal_model,
            spec.observations,
            spec=spec,
            likelihood=lik,
            priors=priors,
            free=free,
            num_warmup=args.num_samples,
            num_samples=args.num_samples,
            num_chains=2,
            posterior_predictive=False,
        )
        run(jax.random.key(1))
        seconds, tree = _seconds(lambda run=run: run(jax.random.key(2)))
        ess, rate, means = summarise(tree["posterior"], seconds)
        print(f"NUTS ({lik}){'':<6}{seconds:>9.1f}{ess:>9.0f}{rate:>8.1f}  {means}")
    gibbs_priors = SwitchingPriors(alpha, (3.0, 2.0), (3.0, 2.0))
    draws = 4 * args.num_samples
    run = lambda key: run_switching_gibbs(  # noqa: E731
        key, params, y, priors=gibbs_priors, num_warmup=draws // 2, num_samples=draws, num_chains=2
    )
    run(jax.random.key(1))
    seconds, tree = _seconds(lambda: run(jax.random.key(2)))
    ess, rate, means = summarise(tree["posterior"], seconds)
    print(f"Gibbs ({draws} draws){seconds:>7.1f}{ess:>9.0f}{rate:>8.1f}  {means}")


def gradient_against_filter(args):
    params = get_scenario("maneuvering-target")
    _, _, y = simulate(jax.random.key(0), params, 200)
    checked, obs, u = check_inputs(params, y)
    arrays = jax.tree.map(jax.numpy.asarray, checked)
    value = jax.jit(lambda p: _imm_filter(p, obs, u).log_likelihood)
    grad = jax.jit(jax.grad(lambda p: _imm_filter(p, obs, u).log_likelihood))
    jax.block_until_ready(value(arrays))
    jax.block_until_ready(grad(arrays))
    t_value = min(_seconds(lambda: value(arrays))[0] for _ in range(args.repeats))
    t_grad = min(_seconds(lambda: grad(arrays))[0] for _ in range(args.repeats))
    print("\n3. IMM on the maneuvering target, T = 200 (best of repeats)")
    print(
        f"filter pass {1e3 * t_value:.2f} ms, gradient in every field {1e3 * t_grad:.2f} ms, "
        f"ratio {t_grad / t_value:.2f}"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-samples", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    mle_against_statsmodels()
    nuts_against_gibbs(args)
    gradient_against_filter(args)


if __name__ == "__main__":
    main()
