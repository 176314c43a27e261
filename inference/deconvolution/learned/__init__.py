"""Learned attention for deconvolution: EM unrolled into a stack with parameters of its own.

The note "Attention as deconvolution" closes on attention layers that use different parameters
at each layer, "a flexible unrolling of EM-type algorithms". This sub-package is that stack,
trained as amortised empirical Bayes, and its comparison with the classical estimators of
``attnbayes.inference.deconvolution`` (whose E-step kernels and checks it calls).

Modules:

- ``unrolled``: the L-layer stack (``init_unrolled_em`` is exactly L steps of K = N EM and the
  posterior mean), its posterior moments and normal intervals, dense or streamed, padded
  tasks (masks), saving and loading, and the shipped stack (``pretrained_unrolled_em``);
- ``training``: tasks from a prior over mixing measures (``TaskPrior``, ``sample_tasks``,
  ``heldout_tasks``), the oracle Bayes rule, the regret, and ``train_unrolled_em`` (optax);
- ``comparison``: the regret (against the oracle Bayes rule) of the stack, tied EM, the NPMLE,
  James-Stein and NUTS, their coverage, length generalisation, and the Efron-Morris batting
  averages;
- ``pretrained/``: package data, the shipped stack (``unrolled_em_v1.npz``) and its
  ``MODEL_CARD.md``, written by ``scripts/train_pretrained_unrolled_em.py``.

Checked fronts and unchecked kernels, one spelling across attnbayes: the public function
``name`` checks its arguments on concrete values (a ``ValueError`` naming the argument, before
any tracing) and then calls ``name_unchecked``, its traceable kernel without checks, a plain
name that other modules call inside ``jax.jit``, ``jax.vmap`` and ``jax.grad`` on inputs they
checked themselves: here ``unrolled_em_moments`` / ``unrolled.unrolled_em_moments_unchecked``
and ``task_regret`` / ``training.task_regret_unchecked`` (``unrolled.forward``, the stack in
standardised units, is the kernel both batch over tasks). A helper used by one module only
keeps an underscore.
"""

from .comparison import (
    COVERAGE_PROBS,
    EFRON_MORRIS_AT_BATS,
    EFRON_MORRIS_HITS,
    EFRON_MORRIS_PLAYERS,
    EFRON_MORRIS_REST_OF_SEASON,
    LEARNED_METHODS,
    LearnedComparison,
    arcsine_transform,
    batting_averages_comparison,
    compare_learned_attention,
    inverse_arcsine_transform,
    length_generalisation,
)
from .training import (
    FAMILIES,
    HELDOUT_FAMILIES,
    OUTSIDE_PRIOR,
    TaskPrior,
    Tasks,
    TrainProgress,
    TrainResult,
    heldout_tasks,
    oracle_posterior_mean,
    sample_tasks,
    task_regret,
    train_unrolled_em,
)
from .unrolled import (
    LayerParams,
    PosteriorMoments,
    ReadoutParams,
    UnrolledEMParams,
    init_unrolled_em,
    load_unrolled_em,
    pretrained_unrolled_em,
    save_unrolled_em,
    unrolled_em,
    unrolled_em_intervals,
    unrolled_em_moments,
)

__all__ = [
    "COVERAGE_PROBS",
    "EFRON_MORRIS_AT_BATS",
    "EFRON_MORRIS_HITS",
    "EFRON_MORRIS_PLAYERS",
    "EFRON_MORRIS_REST_OF_SEASON",
    "FAMILIES",
    "HELDOUT_FAMILIES",
    "LEARNED_METHODS",
    "OUTSIDE_PRIOR",
    "LayerParams",
    "LearnedComparison",
    "PosteriorMoments",
    "ReadoutParams",
    "TaskPrior",
    "Tasks",
    "TrainProgress",
    "TrainResult",
    "UnrolledEMParams",
    "arcsine_transform",
    "batting_averages_comparison",
    "compare_learned_attention",
    "heldout_tasks",
    "init_unrolled_em",
    "inverse_arcsine_transform",
    "length_generalisation",
    "load_unrolled_em",
    "oracle_posterior_mean",
    "pretrained_unrolled_em",
    "sample_tasks",
    "save_unrolled_em",
    "task_regret",
    "train_unrolled_em",
    "unrolled_em",
    "unrolled_em_intervals",
    "unrolled_em_moments",
]
