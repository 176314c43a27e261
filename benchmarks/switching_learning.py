"""Learning switching models: MLE against statsmodels, and the cost of a gradient of the IMM
log-likelihood.

1. MLE of Hamilton's MS-AR(p) (switching mean, common variance) on US real GDP growth
   (statsmodels' macrodata, 202 quarters): ``fit_switching`` (L-BFGS, 8 starts in one vmapped
   program, Hessian standard errors) against ``MarkovAutoregression.fit`` (EM + BFGS) with its
   default start and with ``search_reps=20``. Wall seconds of a first call (ours compiles)
   and of a second call, the log-likelihood reached, and the ratio of warm times.
2. One gradient of the IMM log-likelihood in every parameter against one filter pass, on
   the maneuvering target (T = 200), both compiled: the ratio of their times.
3. Compiling an MLE: L-BFGS from 3 starts on a 1-D two-mode IMM likelihood (T = 60) with
   optax's ``lbfgs`` (zoom line search) against ``attnbayes.inference.optimize.minimize_lbfgs``
   (one value-and-gradient per loop step), and ``jax.hessian`` against
   ``hessian_by_differences``: seconds to lower and compile, and to run warm.

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
            lambda spec=spec: fit_switching(jax.random.key(0), spec, likelihood="exact")
        )
        second, fit = _seconds(
            lambda spec=spec: fit_switching(jax.random.key(1), spec, likelihood="exact")
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


def _scalar_spec():
    from attnbayes.models.markov_switching import switching_state_space
    from attnbayes.models.switching import SwitchingParams

    params = SwitchingParams(
        initial_probs=np.array([0.5, 0.5]),
        transition_matrix=np.array([[0.95, 0.05], [0.1, 0.9]]),
        initial_means=np.zeros((2, 1)),
        initial_covs=np.ones((2, 1, 1)),
        dynamics_matrices=np.full((2, 1, 1), 0.8),
        dynamics_biases=np.zeros((2, 1)),
        dynamics_covs=np.array([[[0.1]], [[2.0]]]),
        emission_matrices=np.ones((2, 1, 1)),
        emission_covs=np.full((2, 1, 1), 0.2),
    )
    y = np.random.default_rng(0).normal(size=(60, 1))
    return switching_state_space(params, y)


def _compile_and_run(fn, *args):
    start = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    built = time.perf_counter() - start
    jax.block_until_ready(compiled(*args))
    run = min(_seconds(lambda: compiled(*args))[0] for _ in range(3))
    return built, run, compiled(*args)


def compile_time_of_the_mle():
    import jax.numpy as jnp
    import optax
    from jax.flatten_util import ravel_pytree

    from attnbayes.inference.optimize import hessian_by_differences, minimize_lbfgs
    from attnbayes.inference.switching import switching_log_likelihood

    spec = _scalar_spec()
    free = spec.free
    from numpyro.distributions.transforms import biject_to

    transforms = {n: biject_to(spec.support[n]) for n in free}
    z = {n: transforms[n].inv(jnp.asarray(spec.theta[n])) for n in free}
    flat0, unravel = ravel_pytree(z)
    starts = flat0 + 0.3 * jax.random.normal(jax.random.key(0), (3, flat0.size))

    def objective(flat):
        theta = dict(spec.theta) | {n: transforms[n](v) for n, v in unravel(flat).items()}
        return -switching_log_likelihood(spec, theta, likelihood="imm") / 60.0

    def ours(starts):
        res = jax.vmap(lambda x: minimize_lbfgs(objective, x, max_iterations=500))(starts)
        return res.value, res.num_iterations

    def with_optax(starts):
        solver = optax.lbfgs()
        value_and_grad = optax.value_and_grad_from_state(objective)

        def run(x):
            def cond(carry):
                _, state, done = carry
                return (optax.tree_utils.tree_get(state, "count") < 500) & ~done

            def body(carry):
                x, state, _ = carry
                value, grad = value_and_grad(x, state=state)
                updates, state = solver.update(
                    grad, state, x, value=value, grad=grad, value_fn=objective
                )
                return optax.apply_updates(x, updates), state, jnp.max(jnp.abs(grad)) < 1e-8

            x, state, _ = jax.lax.while_loop(cond, body, (x, solver.init(x), False))
            return objective(x), optax.tree_utils.tree_get(state, "count")

        return jax.vmap(run)(starts)

    print("\n3. Compiling an MLE (1-D two-mode IMM likelihood, T = 60, 3 starts)")
    print(f"{'':<28}{'lower+compile s':>16}{'warm run s':>12}{'min -log L / T':>16}")
    for label, fn in (("optax.lbfgs (zoom)", with_optax), ("minimize_lbfgs", ours)):
        built, run, (values, _) = _compile_and_run(fn, starts)
        print(f"{label:<28}{built:>16.2f}{run:>12.4f}{float(jnp.min(values)):>16.8f}")
    x = starts[0]
    for label, fn in (
        ("jax.hessian", jax.hessian(objective)),
        ("hessian_by_differences", lambda x: hessian_by_differences(jax.grad(objective), x)),
    ):
        built, run, _ = _compile_and_run(fn, x)
        print(f"{label:<28}{built:>16.2f}{run:>12.4f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    mle_against_statsmodels()
    gradient_against_filter(args)
    compile_time_of_the_mle()


if __name__ == "__main__":
    main()
