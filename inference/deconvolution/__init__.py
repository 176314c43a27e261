"""Deconvolution: z ~ nu, x | z ~ N(z, sigma^2 I), nu discrete; attention as its E-step.

sigma is one noise scale for all, one per observation (N,) or one per observation and
coordinate (N, p) (``checks.check_sigma``).

Modules:

- ``em``: EM with one atom per data point, whose E-step is softmax attention with
  Q K^T = I / sigma^2 and key bias -|mu_k|^2 / (2 sigma^2); the posterior mean z_hat as one
  attention step (Tweedie's denoiser); streamed for large N; the checked public functions.
- ``estep``: the traceable kernels beneath ``em`` (dense and streamed E-step and M-step,
  row-sharded over devices), which ``gibbs``, ``kiefer_wolfowitz``, the comparisons and the
  learned stack call on inputs they checked.
- ``checks``: the value checks of a problem (x, atoms, weights, sigma) that ``em``,
  ``kiefer_wolfowitz``, ``gibbs`` and the learned stack share.
- ``kiefer_wolfowitz``: the Kiefer-Wolfowitz NPMLE of nu on a grid (Koenker and Mizera 2014), by
  mix-SQP (Kim, Carbonetto, Stephens and Anitescu 2020), SQUAREM or EM.
- ``gibbs``: the conjugate Gibbs sampler over assignments, weights and atoms, and "approximate
  Gibbs" (each draw replaced by its expectation: iterated attention with tied weights).
- ``invariants``: permutation-invariant summaries of mixture draws (CDF of nu, moments).
- ``intervals``: equal-tailed intervals of a discrete posterior.
- ``shrinkage``: the normal-prior baselines for heteroscedastic data x_i ~ N(theta_i, s_i^2):
  Xie-Kou-Brown SURE shrinkage, the heteroscedastic James-Stein rule, and the normal
  hierarchical model (eight schools) by marginal maximum likelihood.
- ``comparison``: every method on the same data, one tidy table.
- ``learned`` (a sub-package): learned attention, an L-layer stack with its own parameters per
  layer that starts as L steps of K = N EM and the posterior mean (the note's closing remark):

  - ``learned.unrolled``: the stack, streamed, saved and loaded, and a pretrained stack
    (``pretrained_unrolled_em``, package data in ``learned/pretrained/``);
  - ``learned.training``: training the stack as amortised empirical Bayes on tasks from a
    prior over mixing measures (``TaskPrior``), and its regret against the oracle Bayes rule;
  - ``learned.comparison``: the learned stack's regret against the oracle Bayes rule, tied EM,
    the NPMLE, James-Stein and NUTS, its coverage, length generalisation, and the Efron-Morris
    batting averages;
  - ``learned.grid_stack`` and ``learned.grid_training``: the version-2 stack, a standard error
    per unit and keys on a grid (linear in N), the NPMLE and the normal model as inputs, and
    its training over priors on measures and on standard errors (``pretrained_grid_stack``).

Checked fronts and unchecked kernels, one spelling across attnbayes: the public function
``name`` checks its arguments on concrete values (a ``ValueError`` naming the argument, before
any tracing) and then calls ``name_unchecked``, its traceable kernel without checks, a plain
name that other modules call inside ``jax.jit``, ``jax.vmap`` and ``jax.grad`` on inputs they
checked themselves: ``em.posterior`` / ``estep.posterior_unchecked``, and likewise
``em_step``, ``log_likelihood``, ``posterior_mean`` and ``e_step_attention``. A helper used by
one module only keeps an underscore.

Tracing. Each public function validates its arguments once, at its own boundary, on concrete
values (``em.check_problem`` runs the same checks on their own); on tracers (under
``jax.jit``, ``jax.vmap``, ``jax.grad``) only the static checks (shapes, ranks, dtypes) run
and bad values give NaN results instead of a ``ValueError``. ``fit_em``, ``em_step``,
``posterior``, ``posterior_mean``, ``responsibilities``, ``log_likelihood``,
``e_step_attention``, ``npmle``, ``npmle_gradient``, ``npmle_posterior``, ``approximate_gibbs``,
``gibbs_init``, ``gibbs_step``, ``initial_atoms``, ``default_grid`` and ``measure_cdf`` are
traceable over their array arguments (sigma, atoms, weights, grids, tolerances and step sizes
included); iteration caps, sizes, method names and flags are static. Results are pytrees of
arrays (counts and flags as 0-d arrays).

Differentiability. ``jax.grad`` gives the exact derivatives of ``posterior_mean``,
``posterior``, ``responsibilities``, ``log_likelihood``, ``em_step`` and ``e_step_attention``
(dense and streamed) in x, the atoms, the weights and sigma; of ``approximate_gibbs``'s states
and summaries (a ``lax.scan``) in those and the step size; of ``npmle_gradient`` and of the
NPMLE objective ``log_likelihood(x, grid, w, sigma)`` in the weights w (its gradient is
N * ``npmle_gradient``). Not differentiable:

- ``fit_em`` and ``npmle``: their iterations run in ``lax.while_loop``, which has no
  reverse-mode derivative, and the NPMLE's solution map is only piecewise smooth (its support
  changes with the data and sigma). Differentiate the quantities above at the fitted measure.
- ``initial_atoms`` (K < N) and ``default_grid`` (p > 1): a sort, a farthest-point selection.
- ``discrete_posterior_intervals`` and the intervals of ``npmle_posterior``: the end points
  are atoms picked by thresholds on a CDF (piecewise constant); ``measure_cdf`` is a step
  function of the atoms.
- ``run_gibbs``, ``gibbs_init``, ``gibbs_step``: discrete draws (assignments, and the
  permutation of "data" starts), so a derivative of a draw is not that of any expectation.
  ``approximate_gibbs``'s ``diverged`` and ``first_nonfinite`` are a flag and an index.
- Eager only (NumPy, SciPy or xarray; not traceable): ``run_gibbs``, ``relaxation_stability``
  (NumPy eigenvalues), ``add_invariants``, ``compare_deconvolution``, ``estep_memory_bytes``.

Public API (``__all__``), one line each:

- ``fit_em``: nu = sum_k w_k delta(mu_k) by EM, iterating attention E-steps (``max_iters`` a cap).
- ``em_step``: one EM step: the E-step by softmax attention, then the M-step.
- ``e_step_attention``: the E-step as attention: queries x, keys = values = atoms.
- ``responsibilities``: A_ik = P(z_i = mu_k | x_i), the E-step's attention matrix (N, K).
- ``posterior``: one E-step under nu: (E[z_i | x_i], A).
- ``posterior_mean``: E[z_i | x_i] = sum_k A_ik mu_k, one attention step (Tweedie's denoiser).
- ``log_likelihood``: log p(x) = sum_i log sum_k w_k N(x_i; mu_k, sigma^2 I), streamed or sharded.
- ``initial_atoms``: starting atoms: the data (K = N), K data at spread ranks, or an array.
- ``check_problem``: every value check of the EM entry points, on concrete inputs.
- ``estep_memory_bytes``: the peak memory of one EM iteration on N points and K atoms.
- ``EMResult``: the fitted measure, the log-likelihood trace, ``num_iters`` and ``converged``.
- ``npmle``: the Kiefer-Wolfowitz NPMLE of nu on a grid (mix-SQP, SQUAREM or EM).
- ``npmle_posterior``: the empirical-Bayes posterior of z_i under the fitted measure (GMLEB).
- ``npmle_gradient``: the NPMLE objective's gradient in the weights (the KKT certificate).
- ``default_grid``: the default grid of G points spanning the data.
- ``NPMLEResult``: the fitted NPMLE and the solver's record.
- ``run_gibbs``: blocked conjugate Gibbs on the Dirichlet mixture, as a DataTree like ``run_nuts``.
- ``gibbs_init``: the starting state of one chain (BlackJAX style: ``init`` then ``step``).
- ``gibbs_step``: one sweep c | (mu, w); w | c; mu | c, x -> (state, info).
- ``GibbsState``: one chain's state (atoms, log weights).
- ``GibbsInfo``: what one sweep computed (log-likelihood, log density, occupied atoms).
- ``approximate_gibbs``: every draw replaced by its expectation (iterated attention, step eta).
- ``ApproximateGibbsTrace``: its states and scalar summaries.
- ``relaxation_stability``: where the relaxed iteration mu + eta (EM(mu) - mu) blows up.
- ``RelaxationStability``: its eigenvalues and critical step size.
- ``add_invariants``: a DataTree's posterior with the permutation-invariant quantities added.
- ``measure_cdf``: F(t) = sum_k w_k 1[mu_k <= t] for scalar atoms.
- ``INVARIANT_NAMES``: the invariant quantities (z_mean, nu_cdf, log_lik_total).
- ``discrete_posterior_intervals``: equal-tailed intervals of a discrete posterior.
- ``INTERVAL_PROBS``: the interval levels reported (0.5, 0.9).
- ``compare_deconvolution``: every method on the same data: a tidy table and each fit.
- ``DeconvolutionComparison``: its result (``table``: method, metric, value; ``fits``).
- ``MethodFit``: what one method estimated, in the data's shape convention.
- ``METHODS``: the methods ``compare_deconvolution`` runs (the registry's names).
- ``wasserstein1``: W1 between two discrete measures on the line, exact.
- ``sure_shrinkage``: Xie-Kou-Brown SURE shrinkage toward the grand mean, a SURE-fitted or fixed m.
- ``sure_monotone``: XKB's semiparametric SURE-SG: shrinkage factors monotone in s_i (isotonic).
- ``james_stein``: the heteroscedastic positive-part James-Stein rule (one factor, whitened).
- ``normal_eb``: the normal hierarchical model by marginal ML (tau = 0 reported), plug-in posterior.
- ``ShrinkageResult``: a shrinkage rule's estimates, plug-in posterior sd and hyperparameters.
- ``NormalEBResult``: the normal-EB fit: posterior, (mu, tau^2), log-likelihood, at_boundary.

and the learned stack's names, re-exported from ``learned`` (listed there): ``FAMILIES``,
``HELDOUT_FAMILIES``, ``LEARNED_METHODS``, ``GridStackFit``, ``GridStackParams``, ``LayerParams``,
``LearnedComparison``, ``NoisePrior``, ``PosteriorMoments``, ``ReadoutParams``, ``TaskPrior``,
``Tasks``, ``TrainProgress``, ``TrainResult``, ``UnrolledEMParams``,
``batting_averages_comparison``, ``compare_learned_attention``, ``grid_stack_fit``,
``grid_stack_mean``, ``grid_stack_moments``, ``heldout_noisy_tasks``, ``heldout_tasks``,
``init_grid_stack``, ``init_unrolled_em``, ``length_generalisation``, ``load_grid_stack``,
``load_unrolled_em``, ``oracle_posterior_mean``, ``pretrained_grid_stack``,
``pretrained_unrolled_em``, ``sample_tasks``, ``save_grid_stack``, ``save_unrolled_em``,
``task_regret``, ``train_grid_stack``, ``train_unrolled_em``, ``unrolled_em``,
``unrolled_em_intervals``, ``unrolled_em_moments``.
"""

from .comparison import (
    METHODS,
    DeconvolutionComparison,
    MethodFit,
    compare_deconvolution,
    wasserstein1,
)
from .em import (
    EMResult,
    check_problem,
    e_step_attention,
    em_step,
    estep_memory_bytes,
    fit_em,
    initial_atoms,
    log_likelihood,
    posterior,
    posterior_mean,
    responsibilities,
)
from .gibbs import (
    ApproximateGibbsTrace,
    GibbsInfo,
    GibbsState,
    RelaxationStability,
    approximate_gibbs,
    gibbs_init,
    gibbs_step,
    relaxation_stability,
    run_gibbs,
)
from .intervals import INTERVAL_PROBS, discrete_posterior_intervals
from .invariants import INVARIANT_NAMES, add_invariants, measure_cdf
from .kiefer_wolfowitz import NPMLEResult, default_grid, npmle, npmle_gradient, npmle_posterior
from .learned import (
    FAMILIES,
    HELDOUT_FAMILIES,
    LEARNED_METHODS,
    GridStackFit,
    GridStackParams,
    LayerParams,
    LearnedComparison,
    NoisePrior,
    PosteriorMoments,
    ReadoutParams,
    TaskPrior,
    Tasks,
    TrainProgress,
    TrainResult,
    UnrolledEMParams,
    batting_averages_comparison,
    compare_learned_attention,
    grid_stack_fit,
    grid_stack_mean,
    grid_stack_moments,
    heldout_noisy_tasks,
    heldout_tasks,
    init_grid_stack,
    init_unrolled_em,
    length_generalisation,
    load_grid_stack,
    load_unrolled_em,
    oracle_posterior_mean,
    pretrained_grid_stack,
    pretrained_unrolled_em,
    sample_tasks,
    save_grid_stack,
    save_unrolled_em,
    task_regret,
    train_grid_stack,
    train_unrolled_em,
    unrolled_em,
    unrolled_em_intervals,
    unrolled_em_moments,
)
from .shrinkage import (
    NormalEBResult,
    ShrinkageResult,
    james_stein,
    normal_eb,
    sure_monotone,
    sure_shrinkage,
)

__all__ = [
    "FAMILIES",
    "HELDOUT_FAMILIES",
    "INTERVAL_PROBS",
    "INVARIANT_NAMES",
    "LEARNED_METHODS",
    "METHODS",
    "ApproximateGibbsTrace",
    "DeconvolutionComparison",
    "EMResult",
    "GibbsInfo",
    "GibbsState",
    "GridStackFit",
    "GridStackParams",
    "LayerParams",
    "LearnedComparison",
    "MethodFit",
    "NPMLEResult",
    "NoisePrior",
    "NormalEBResult",
    "PosteriorMoments",
    "ReadoutParams",
    "RelaxationStability",
    "ShrinkageResult",
    "TaskPrior",
    "Tasks",
    "TrainProgress",
    "TrainResult",
    "UnrolledEMParams",
    "add_invariants",
    "approximate_gibbs",
    "batting_averages_comparison",
    "check_problem",
    "compare_deconvolution",
    "compare_learned_attention",
    "default_grid",
    "discrete_posterior_intervals",
    "e_step_attention",
    "em_step",
    "estep_memory_bytes",
    "fit_em",
    "gibbs_init",
    "gibbs_step",
    "grid_stack_fit",
    "grid_stack_mean",
    "grid_stack_moments",
    "heldout_noisy_tasks",
    "heldout_tasks",
    "init_grid_stack",
    "init_unrolled_em",
    "initial_atoms",
    "james_stein",
    "length_generalisation",
    "load_grid_stack",
    "load_unrolled_em",
    "log_likelihood",
    "measure_cdf",
    "normal_eb",
    "npmle",
    "npmle_gradient",
    "npmle_posterior",
    "oracle_posterior_mean",
    "posterior",
    "posterior_mean",
    "pretrained_grid_stack",
    "pretrained_unrolled_em",
    "relaxation_stability",
    "responsibilities",
    "run_gibbs",
    "sample_tasks",
    "save_grid_stack",
    "save_unrolled_em",
    "sure_monotone",
    "sure_shrinkage",
    "task_regret",
    "train_grid_stack",
    "train_unrolled_em",
    "unrolled_em",
    "unrolled_em_intervals",
    "unrolled_em_moments",
    "wasserstein1",
]
