"""Algorithms: each takes arrays or parameters and returns a typed result.

A sub-package per reading of attention:

- ``attention``: scores, maps onto the simplex (softmax, sparsemax, entmax), pooling, streamed
  attention and the exponential-family view;
- ``deconvolution``: EM (iterated attention), the Kiefer-Wolfowitz NPMLE, exact and approximate
  Gibbs, permutation-invariant summaries, and the comparison of all of them;
- ``switching``: Kalman blocks, GPB1/GPB2/IMM/exact filters, smoothers, the Rao-Blackwellised
  particle filter, Gibbs sampling, and their comparison;
- ``kernel_regression``: Nadaraya-Watson attention pooling and bandwidth selection;
- ``attention_prediction``: attention pooling inside a forecaster, trained end to end (the
  regularised-argmax note), against Nadaraya-Watson, moving averages and AR(p);

- ``calibration``: simulation-based calibration of the registry's methods over a fixed prior
  (SBC ranks for samplers, interval coverage for the others) with a verdict;

and shared modules: ``mcmc`` (NUTS to an ArviZ DataTree, and ``run_nuts_unchecked``, its traceable
core), ``diagnostics`` (R-hat, ESS; ``sbc`` and ``interval_coverage``),
``model_comparison`` (PSIS-LOO, leave-future-out), ``methods`` (the method registry),
``sampling`` (random variates the samplers share) and ``optimize`` (L-BFGS compiled with one
gradient, a Hessian by differences). Sub-packages are imported on first use.
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
    "init_unrolled_em",
    "pretrained_unrolled_em",
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
