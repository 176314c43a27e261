"""Learned attention for deconvolution: EM unrolled into a stack with parameters of its own.

The note "Attention as deconvolution" closes on attention layers that use different parameters
at each layer, "a flexible unrolling of EM-type algorithms". This sub-package is that stack,
trained as amortised empirical Bayes, and its comparison with the classical estimators of
``attnbayes.inference.deconvolution`` (whose E-step kernels and checks it calls).

Modules:

- ``unrolled``: the version-1 stack: L layers on K = N atoms, one sigma (``init_unrolled_em``
  is exactly L steps of K = N EM and the posterior mean), its posterior moments and normal
  intervals, dense or streamed, padded tasks (masks), saving and loading, and the shipped
  stack (``pretrained_unrolled_em``);
- ``grid_stack``: the version-2 stack: a standard error per unit (x_i, s_i), keys on a grid of
  M points (linear in N), the NPMLE and the normal model as inputs it learns to trust, and a
  read-out that attends over priors from the NPMLE's to the normal model's
  (``init_grid_stack`` is exactly L steps of heteroscedastic Kiefer-Wolfowitz EM on the grid);
- ``grid_training``: tasks with standard errors from a ``NoisePrior``, their oracle Bayes rule,
  and ``train_grid_stack``;
- ``archive``: the versioned .npz archives both stacks are saved in;
- ``regret``: the table no anchor has: regret against the oracle Bayes rule versus N of v1, v2,
  EM, the NPMLE, James-Stein, SURE and NUTS, homoscedastic and heteroscedastic, with paired
  differences to the best classical rule, coverage and time; the Xie-Kou-Brown settings; the
  Efron-Morris batting averages and the eight schools;
- ``training``: tasks from a prior over mixing measures (``TaskPrior``, ``sample_tasks``,
  ``heldout_tasks``), the oracle Bayes rule, the regret, and ``train_unrolled_em`` (optax);
- ``comparison``: the regret (against the oracle Bayes rule) of the stack, tied EM, the NPMLE,
  James-Stein and NUTS, their coverage, length generalisation, and the Efron-Morris batting
  averages;
- ``pretrained/``: package data, the shipped stacks (``unrolled_em_v1.npz``, ``MODEL_CARD.md``,
  written by ``scripts/train_pretrained_unrolled_em.py``; ``grid_stack_v2.npz``,
  ``MODEL_CARD_V2.md``, written by ``scripts/train_pretrained_grid_stack.py``).

Checked fronts and unchecked kernels, one spelling across attnbayes: the public function
``name`` checks its arguments on concrete values (a ``ValueError`` naming the argument, before
any tracing) and then calls ``name_unchecked``, its traceable kernel without checks, a plain
name that other modules call inside ``jax.jit``, ``jax.vmap`` and ``jax.grad`` on inputs they
checked themselves: here ``unrolled_em_moments`` / ``unrolled.unrolled_em_moments_unchecked``
and ``task_regret`` / ``training.task_regret_unchecked`` (``unrolled.forward``, the stack in
standardised units, is the kernel both batch over tasks). A helper used by one module only
keeps an underscore.

What it measures (BENCHMARKS.md, ``MODEL_CARD.md``): at N = 100 the shipped 6-layer stack beats
EM, the NPMLE and EM to convergence in 7 of 9 families, including the three outside its
training prior, and ties them in the other two; it is level with NUTS under the training prior,
at 0.4 ms per data set instead of about 2 s. It loses to James-Stein on a normal prior, is the
worst of the shrinkage rules on the 18 Efron-Morris batting averages (N = 18, below its training
sizes), and loses to the NPMLE from N = 1,000 on, where the NPMLE approaches the oracle.

Public API (``__all__``), one line each:

- ``init_unrolled_em``: the parameters at which the stack is L steps of K = N EM + posterior mean.
- ``unrolled_em``: E[z_i | x] from the stack, like ``x``.
- ``unrolled_em_moments``: posterior mean and variance of z_i, dense or streamed, with masks.
- ``unrolled_em_intervals``: equal-tailed normal intervals from ``PosteriorMoments``.
- ``pretrained_unrolled_em``: the stack shipped with attnbayes (``pretrained/MODEL_CARD.md``).
- ``save_unrolled_em``: write a stack to a versioned .npz, atomically.
- ``load_unrolled_em``: read a stack written by ``save_unrolled_em``: (params, metadata).
- ``UnrolledEMParams``: an L-layer stack: ``layers`` (leading axis L) and ``readout``.
- ``LayerParams``: the parameters of one EM-like layer.
- ``ReadoutParams``: the parameters of the read-out attention (the posterior-mean step).
- ``PosteriorMoments``: posterior means and variances of z_i, in the data's units.
- ``train_unrolled_em``: train the stack on tasks from a prior with optax.
- ``TrainResult``: the trained stack, the loss per step and the held-out loss per chunk.
- ``TrainProgress``: what the training callback sees after each chunk.
- ``TaskPrior``: a prior over mixing measures and sizes, in units of sigma.
- ``Tasks``: a batch of tasks padded to a common N (x, z, mask, measures, family).
- ``sample_tasks``: tasks drawn from a ``TaskPrior``, padded.
- ``heldout_tasks``: tasks of one named family of ``HELDOUT_FAMILIES``.
- ``oracle_posterior_mean``: E[z_i | x_i, nu] under each task's true measure (the oracle rule).
- ``task_regret``: per task, the MSE of the stack's posterior mean and of the oracle.
- ``FAMILIES``: the families of the training prior.
- ``HELDOUT_FAMILIES``: the families of the held-out comparison (``OUTSIDE_PRIOR`` included).
- ``OUTSIDE_PRIOR``: the held-out families outside the training prior.
- ``compare_learned_attention``: regret and coverage of every method on held-out tasks.
- ``LearnedComparison``: its result (``regret`` and ``coverage`` tables).
- ``LEARNED_METHODS``: the methods it compares (learned, em-steps, em, npmle, james-stein, ...).
- ``COVERAGE_PROBS``: the interval levels whose coverage it reports.
- ``length_generalisation``: regret across N of the stack (trained at N <= 200) and the others.
- ``batting_averages_comparison``: every method on the Efron-Morris batting averages.
- ``EFRON_MORRIS_PLAYERS``: the 18 players of Efron and Morris (1975).
- ``EFRON_MORRIS_HITS``: their hits in their first ``EFRON_MORRIS_AT_BATS`` at bats.
- ``EFRON_MORRIS_AT_BATS``: 45 at bats.
- ``EFRON_MORRIS_REST_OF_SEASON``: their averages over the rest of the season (the truth).
- ``arcsine_transform``: x = sqrt(n) arcsin(2 y - 1), approximately N(., 1).
- ``init_grid_stack``: the version-2 parameters at which the stack is L steps of grid EM.
- ``grid_stack_mean``: E[z_i | x] from the grid stack, with a standard error per unit.
- ``grid_stack_moments``: its posterior mean and variance (``PosteriorMoments``).
- ``grid_stack_fit``: everything it computed (``GridStackFit``: moments, grid, priors, inputs).
- ``pretrained_grid_stack``: the version-2 stack shipped with attnbayes (``MODEL_CARD_V2.md``).
- ``save_grid_stack``: write a grid stack to a version-2 .npz, atomically.
- ``load_grid_stack``: read one: (params, metadata); a version-1 file is named as such.
- ``GridStackParams``: a grid stack: ``layers`` (``GridLayerParams``) and ``readout``.
- ``GridLayerParams``: its layers' mass exponents, pseudo-counts and steps.
- ``GridReadoutParams``: its start (trust in the NPMLE) and read-out (scores over priors, gate).
- ``GridStackFit``: what ``grid_stack_fit`` returns.
- ``RHO_LADDER``: the normal model's shares in the read-out's candidate priors.
- ``train_grid_stack``: train it on tasks with standard errors (optax).
- ``NoisePrior``: a prior over the standard errors of a task.
- ``HOMOSCEDASTIC``: the ``NoisePrior`` with every s_i = 1.
- ``NoisyTasks``: a batch of tasks with a standard error per point.
- ``sample_noisy_tasks``: tasks drawn from a ``TaskPrior`` and a ``NoisePrior``, padded.
- ``heldout_noisy_tasks``: tasks of one named family with standard errors.
- ``oracle_noisy_posterior_mean``: E[z_i | x_i, s_i, nu] under each task's true measure.
- ``grid_task_regret``: per task, the MSE of the grid stack and of the oracle.
- ``regret_versus_n``: regret, paired differences to the best classical rule, coverage and time,
  by noise kind, family, N and method: one tidy DataFrame.
- ``xie_kou_brown_table``: MSE of each method on the Xie-Kou-Brown settings a, b, c.
- ``real_data_estimates``: every method on the Efron-Morris batting averages and eight schools.
- ``REGRET_METHODS``: the methods ``regret_versus_n`` knows (oracle, v2, v1, em, npmle, ...).
- ``DEFAULT_METHODS``: the methods it runs unless told.
- ``CLASSICAL_METHODS``: the rules the requirement compares with (em, npmle, james-stein, sure).
- ``XKB_METHODS``: the methods of ``xie_kou_brown_table``.
- ``REAL_DATA_METHODS``: the methods of ``real_data_estimates``.
- ``NOISE_KINDS``: "homoscedastic" and "heteroscedastic".
- ``inverse_arcsine_transform``: the batting average back from x.
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
from .grid_stack import (
    RHO_LADDER,
    GridLayerParams,
    GridReadoutParams,
    GridStackFit,
    GridStackParams,
    grid_stack_fit,
    grid_stack_mean,
    grid_stack_moments,
    init_grid_stack,
    load_grid_stack,
    pretrained_grid_stack,
    save_grid_stack,
)
from .grid_training import (
    HOMOSCEDASTIC,
    NoisePrior,
    NoisyTasks,
    grid_task_regret,
    heldout_noisy_tasks,
    oracle_noisy_posterior_mean,
    sample_noisy_tasks,
    train_grid_stack,
)
from .regret import (
    CLASSICAL_METHODS,
    DEFAULT_METHODS,
    NOISE_KINDS,
    REAL_DATA_METHODS,
    REGRET_METHODS,
    XKB_METHODS,
    real_data_estimates,
    regret_versus_n,
    xie_kou_brown_table,
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
    "CLASSICAL_METHODS",
    "COVERAGE_PROBS",
    "DEFAULT_METHODS",
    "EFRON_MORRIS_AT_BATS",
    "EFRON_MORRIS_HITS",
    "EFRON_MORRIS_PLAYERS",
    "EFRON_MORRIS_REST_OF_SEASON",
    "FAMILIES",
    "HELDOUT_FAMILIES",
    "HOMOSCEDASTIC",
    "LEARNED_METHODS",
    "NOISE_KINDS",
    "OUTSIDE_PRIOR",
    "REAL_DATA_METHODS",
    "REGRET_METHODS",
    "RHO_LADDER",
    "XKB_METHODS",
    "GridLayerParams",
    "GridReadoutParams",
    "GridStackFit",
    "GridStackParams",
    "LayerParams",
    "LearnedComparison",
    "NoisePrior",
    "NoisyTasks",
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
    "grid_stack_fit",
    "grid_stack_mean",
    "grid_stack_moments",
    "grid_task_regret",
    "heldout_noisy_tasks",
    "heldout_tasks",
    "init_grid_stack",
    "init_unrolled_em",
    "inverse_arcsine_transform",
    "length_generalisation",
    "load_grid_stack",
    "load_unrolled_em",
    "oracle_noisy_posterior_mean",
    "oracle_posterior_mean",
    "pretrained_grid_stack",
    "pretrained_unrolled_em",
    "real_data_estimates",
    "regret_versus_n",
    "sample_noisy_tasks",
    "sample_tasks",
    "save_grid_stack",
    "save_unrolled_em",
    "task_regret",
    "train_grid_stack",
    "train_unrolled_em",
    "unrolled_em",
    "unrolled_em_intervals",
    "unrolled_em_moments",
    "xie_kou_brown_table",
]
