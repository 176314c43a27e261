"""Algorithms: each takes arrays or parameters and returns a typed result.

A sub-package per reading of attention:

- ``attention``: scores, maps onto the simplex (softmax, sparsemax, entmax), pooling, streamed
  attention and the exponential-family view;
- ``deconvolution``: EM (iterated attention), the Kiefer-Wolfowitz NPMLE, exact and approximate
  Gibbs, permutation-invariant summaries, the normal-prior baselines (SURE shrinkage,
  James-Stein, the normal hierarchical model by empirical Bayes), and the comparison of all of
  them, with one noise scale for all or one per observation;
- ``switching``: Kalman blocks, GPB1/GPB2/IMM/exact filters, smoothers, the Rao-Blackwellised
  particle filter, Gibbs sampling, and their comparison;
- ``kernel_regression``: Nadaraya-Watson attention pooling and bandwidth selection;
- ``attention_prediction``: attention pooling inside a forecaster, trained end to end (the
  regularised-argmax note), against Nadaraya-Watson, moving averages and AR(p);

- ``calibration``: simulation-based calibration of the registry's methods over a fixed prior
  (SBC ranks for samplers, interval coverage for the others) with a verdict;

and shared modules, imported by their module names (each has its own ``__all__``):

- ``mcmc``: ``run_nuts(key, model, model_args, model_kwargs, *, settings)`` -> an ArviZ
  DataTree; ``run_nuts_unchecked``, its traceable kernel (for vmapping over data sets);
  ``sampler_sizes`` and ``check_sampler_sizes`` (the sizes the diagnostics need);
- ``diagnostics``: R-hat, bulk/tail ESS, divergences, PSIS-LOO; ``sbc`` and
  ``interval_coverage``;
- ``calibration``: ``calibrate`` (the registry's methods on the fixed priors
  ``DeconvolutionStudy`` and ``SwitchingStudy``), ``calibration_verdict``,
  ``calibration_table``;
- ``model_comparison``: ``loo_compare`` and ``compare_num_atoms`` (PSIS-LOO, ``az.compare``);
  ``switching_lfo`` and ``compare_num_modes`` (leave-future-out with Gibbs refits);
- ``methods``: the method registry (imports no JAX): ``Method``, ``REGISTRY``, ``get_method``,
  ``method_names``, ``settings``; the comparisons, the report and the command read it;
- ``optimize``: ``minimize_lbfgs`` (one value-and-gradient per step, compiled once) and
  ``hessian_by_differences``, on which ``fit_switching``'s MLE runs;
- ``sampling``: ``log_gamma`` and ``uniform_positive``, random variates the samplers share.

``attnbayes.inference.NAME`` imports a sub-package or module on first use. The learned stack's
entry points are also reachable here: ``init_unrolled_em``, ``pretrained_unrolled_em``,
``train_unrolled_em``, ``unrolled_em``, ``unrolled_em_moments`` (version 1) and
``init_grid_stack``, ``pretrained_grid_stack``, ``train_grid_stack``, ``grid_stack_mean``,
``grid_stack_moments`` (version 2) (from ``deconvolution``).

Conventions, as in NumPyro's ``MCMC.run(rng_key, ...)`` and BlackJAX's kernels:

- The PRNG key first and positional in every stochastic function: ``run_nuts(key, ...)``,
  ``run_gibbs(key, x, sigma, ...)``, ``run_switching_gibbs(key, params, observations, ...)``,
  ``rbpf(key, params, observations, num_particles)``, the models' ``simulate(key, ...)`` and
  the comparisons (``compare_deconvolution(key, x, sigma, ...)``, ``compare_switching(key,
  params, observations, ...)``, ``compare_num_atoms``, ``compare_num_modes``,
  ``switching_lfo``), which accept ``None`` when every method asked for is deterministic.
- Parameters before data: ``imm_filter(params, observations)``, ``fit_switching(key, init,
  observations)``, and ``SwitchingParams`` for every switching filter, smoother and sampler; a
  time series is called ``observations``. Deconvolution keeps its statistical order, data then
  noise scale (``fit_em(x, sigma)``, ``posterior_mean(x, atoms, weights, sigma)``); attention
  keeps ``(queries, keys, values)`` and kernel regression ``(keys, values, queries)``.
- ``max_iters`` is a cap (EM and the NPMLE stop earlier on convergence, and ``num_iters`` in
  the result says when); ``num_iters`` is an exact count (``approximate_gibbs``, entmax's
  bisection).
- One sampler API for the Gibbs samplers, in BlackJAX's shape: ``init``, then
  ``step(key, state, ...) -> (state, info)`` with State and Info as NamedTuples
  (``gibbs_init`` / ``gibbs_step``, ``switching_gibbs_init`` / ``switching_gibbs_step``);
  ``run_gibbs`` and ``run_switching_gibbs`` drive them and return DataTrees.
- Traceable: every public algorithm can be ``jax.jit``-ted, ``jax.vmap``-ped and differentiated
  in its array arguments, parameters included; results are pytrees of arrays (``FilterResult``,
  ``SmootherResult``, ``EMResult``, ``NPMLEResult``; counts and flags as 0-d arrays). The
  package and module docstrings say what is not differentiable and why (a ``lax.while_loop``,
  a discrete draw, a step function, an argmin); the drivers that build DataTrees and tables
  (``run_nuts``, ``run_gibbs``, ``run_switching_gibbs``, the comparisons) run eagerly.
  ``jax.grad`` of every switching filter's log-likelihood in every field of ``SwitchingParams``
  matches central finite differences in float64, as do the EM posterior mean (in sigma and the
  atoms), Nadaraya-Watson (in the bandwidth), entmax (in alpha) and the NPMLE objective (in its
  weights): ``tests/inference/*/test_traceable.py``.
"""

import importlib

_SUBMODULES = (
    "attention",
    "attention_prediction",
    "calibration",
    "deconvolution",
    "diagnostics",
    "kernel_regression",
    "mcmc",
    "methods",
    "model_comparison",
    "optimize",
    "sampling",
    "switching",
)


# the learned-attention entry points, also reachable here (``attnbayes.inference.unrolled_em``)
_LEARNED = (
    "grid_stack_mean",
    "grid_stack_moments",
    "init_grid_stack",
    "init_unrolled_em",
    "pretrained_grid_stack",
    "pretrained_unrolled_em",
    "train_grid_stack",
    "train_unrolled_em",
    "unrolled_em",
    "unrolled_em_moments",
)


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name in _LEARNED:
        return getattr(importlib.import_module(f"{__name__}.deconvolution"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted((*globals(), *_SUBMODULES, *_LEARNED))


__all__ = [*_SUBMODULES, *_LEARNED]
