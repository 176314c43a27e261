"""Attention: scores, weights on the simplex, pooling, and its exponential-family reading.

Modules:

- ``scores``: dot-product, additive (Bahdanau) and negative-squared-distance scores, and the
  checks of dot-product attention (``check_scored``, ``check_mask``);
- ``simplex``: maps onto the simplex as a regularised argmax (softmax, sparsemax, entmax) and
  ``check_score_inputs``, the one check of every score and weight map;
- ``pooling``: attention pooling, dense or streamed over key blocks (``attend``,
  ``scored_attention``, ``softmax_attention``) and the ``Attention`` result;
- ``exponential_family``: the log-partition reading of softmax attention (``log_partition``,
  ``key_moments``);
- ``link_conjecture``: the link-function study (linear link, Poisson key weights, the
  normaliser blow-up, the skip-connection iteration).

For queries q_i, keys k_j, values v_j and key bias b_j,

    s_ij = score(q_i, k_j) + b_j,     A_i. = weights(s_i.),     o_i = sum_j A_ij v_j.

Scores: dot product beta <q, k> (beta = 1/sqrt(d) by default; 1/sigma^2 in deconvolution EM),
additive (Bahdanau) v^T tanh(W q + U k), and negative squared distance -|q - k|^2 / (2 h^2)
(Nadaraya-Watson with a Gaussian kernel). Weights: softmax, sparsemax, entmax (see
``simplex``). With softmax, log Z_i = logsumexp_j s_ij is the
log-partition function of p(k_j | q_i) = exp(<k_j, q_i> - log Z_i) on the set of keys; its
gradient in q is the attention output with V = K and its Hessian the covariance of the keys
under A_i. (``log_partition``).

``attend(..., block_size=B)`` streams over blocks of B keys (and of B queries) with a running
log-sum-exp, as memory-efficient attention does: memory O(B^2), never Q x K.

Shapes: queries (Q, d), keys (K, d), values (K, dv); the dense paths broadcast leading batch
axes.

Errors. Every public function checks its concrete inputs before any tracing, with
``simplex.check_score_inputs`` (the check of the weight maps too), and raises a
``ValueError`` whose message starts with the argument's name: arrays that are empty, of the
wrong rank or shape, complex, not numbers, NaN or +-inf (-inf only in a bias or mask, where it
removes a key), a non-finite scale, a bad temperature, and inputs whose scores could overflow
the dtype. Scores are formed inside the compiled kernels, so the overflow check bounds them
from the inputs: for s_ij = scale <q_i, k_j> + b_j (then / tau),

    |<q_i, k_j>| <= sum_c max_i |q_ic| max_j |k_jc|,      |s_ij| <= |scale| * that + max |b|,

and each intermediate (the dot products, scale times them, the bias added, the division by tau)
must stay below finfo(dtype).max; the first that cannot is named (queries or keys, whichever
is larger in magnitude, then scale, bias, temperature). The bound is at most d times the largest
product q_ic k_jc the kernel forms, so it refuses only inputs within a factor d of overflowing.
A score that overflows is not a rounding matter: +inf gives softmax inf - inf = NaN, and makes
sparsemax and entmax treat the key as masked, giving the weight to another key. Finite scores
anywhere in the range are handled exactly (the kernels subtract the row maximum). Under
``jax.jit`` the arguments are tracers and only the static checks (dtype, rank, shapes) run; a
NaN output there means NaN / inf inputs or overflowing scores, which the eager call refuses
(call ``simplex.check_score_inputs``, or the function itself, on the concrete inputs first).

Checked fronts and unchecked kernels, one spelling across attnbayes: the public function
``name`` checks its arguments on concrete values (a ``ValueError`` naming the argument, before
any tracing) and then calls ``name_unchecked``, its traceable kernel without checks, a plain
name that other modules call inside ``jax.jit``, ``jax.vmap`` and ``jax.grad`` on inputs they
checked themselves: here ``scored_attention`` / ``scored_attention_unchecked`` (public, for
``attnbayes.inference.kernel_regression`` and ``attnbayes.inference.deconvolution``) and
``dot_product_scores`` / ``scores.dot_product_scores_unchecked``. A helper used by one module
only keeps an underscore.

Tracing and differentiability. Every function here is traceable under ``jax.jit`` and
``jax.vmap`` over its array arguments, parameters included (``scale``, ``temperature``,
``bias``, entmax's ``alpha``, a bandwidth); names, axes, ``block_size`` and ``num_iters`` are
static. ``jax.grad`` is exact everywhere for the scores, ``softmax``, ``softmax_attention``,
``scored_attention``, ``scored_attention_unchecked`` (dense and streamed), ``attend`` with
softmax, ``log_partition`` and ``key_moments``. Not differentiable everywhere:

- ``sparsemax``, ``entmax15``, ``entmax_bisect`` (also in alpha), ``regularised_argmax`` with
  "gini" or "tsallis", and ``attend`` with sparsemax or entmax15: continuous and piecewise
  smooth, with kinks where the support changes (a weight reaching 0); their custom JVPs give
  the derivative on the current support, a one-sided derivative at a kink.
- ``regularised_argmax`` with ``temperature=0``: the argmax vertex, piecewise constant (zero
  gradient, undefined at ties).
- ``regulariser_value`` / ``regularised_objective`` with "shannon": p log p has an infinite
  derivative as p -> 0 (the value at p = 0 is taken as 0, with gradient 0 there).
- A boolean ``mask`` is not an array of numbers to differentiate.

Public API (``__all__``), one line each:

- ``dot_product_scores``: s_ij = scale <q_i, k_j> + b_j (scale 1/sqrt(d) by default).
- ``additive_scores``: Bahdanau scores v^T tanh(W q_i + U k_j).
- ``neg_sq_distance_scores``: -|q_i - k_j|^2 / (2 h^2), the Gaussian-kernel scores.
- ``softmax``: softmax(s / tau), the Shannon-regularised argmax.
- ``sparsemax``: the Euclidean projection of s / tau onto the simplex (Gini-regularised).
- ``entmax15``: 1.5-entmax (Tsallis, alpha = 1.5), exact by sorting.
- ``entmax_bisect``: alpha-entmax for any alpha > 1, by bisection on the threshold.
- ``regularised_argmax``: argmax_{p in simplex} <p, s> - tau Omega(p), by regulariser name.
- ``regularised_objective``: <p, s> - tau Omega(p), the objective it maximises.
- ``regulariser_value``: Omega(p) (0 log 0 = 0).
- ``REGULARISERS``: the regulariser names ("shannon", "gini", "tsallis").
- ``attend``: attention pooling with softmax / sparsemax / entmax15; ``block_size`` streams;
  a temperature per query and a ``log_prior`` per key (the heteroscedastic E-step).
- ``scored_attention``: softmax attention for any score function, dense or streamed.
- ``scored_attention_unchecked``: its traceable kernel, for inputs already checked.
- ``softmax_attention``: dense softmax attention with a key bias and a boolean mask.
- ``Attention``: the result of one attention pass (output, weights, log-normaliser).
- ``WEIGHT_MAPS``: the weight maps ``attend`` takes.
- ``log_partition``: log Z(q) = log sum_j exp(<k_j, q>), the log-partition of attention.
- ``key_moments``: its gradient and Hessian in closed form (mean and covariance of the keys).
- ``poisson_key_weights``: exact attention as the Poisson posterior over keys (Robbins).
- ``poisson_posterior_mean``: Robbins' Poisson empirical Bayes as attention (values = rates).
- ``fit_linear_link``: the best linear surrogate of the link (key linear in the mean).
- ``link_kl``: KL(exact || linear surrogate) of the attention weights.
- ``skip_connection_iteration``: the skip connection as gradient ascent on eta (the note, 4.1).
- ``normaliser_blowup``: the true log-normaliser at the skip-connection iterate.
- ``LINKS``: the links compared ("exact", "linear").
- ``LinearLink``: a linear surrogate of the Poisson link (key and bias linear in lambda).
- ``LinearLinkFit``: the result of ``fit_linear_link``.
- ``SkipConnectionTrace``: the result of ``skip_connection_iteration``.
- ``NormaliserBlowup``: the result of ``normaliser_blowup``.
"""

from .exponential_family import key_moments, log_partition
from .link_conjecture import (
    LINKS,
    LinearLink,
    LinearLinkFit,
    NormaliserBlowup,
    SkipConnectionTrace,
    fit_linear_link,
    link_kl,
    normaliser_blowup,
    poisson_key_weights,
    poisson_posterior_mean,
    skip_connection_iteration,
)
from .pooling import (
    WEIGHT_MAPS,
    Attention,
    attend,
    scored_attention,
    scored_attention_unchecked,
    softmax_attention,
)
from .scores import additive_scores, dot_product_scores, neg_sq_distance_scores
from .simplex import (
    REGULARISERS,
    entmax15,
    entmax_bisect,
    regularised_argmax,
    regularised_objective,
    regulariser_value,
    softmax,
    sparsemax,
)

__all__ = [
    "LINKS",
    "REGULARISERS",
    "WEIGHT_MAPS",
    "Attention",
    "LinearLink",
    "LinearLinkFit",
    "NormaliserBlowup",
    "SkipConnectionTrace",
    "additive_scores",
    "attend",
    "dot_product_scores",
    "entmax15",
    "entmax_bisect",
    "fit_linear_link",
    "key_moments",
    "link_kl",
    "log_partition",
    "neg_sq_distance_scores",
    "normaliser_blowup",
    "poisson_key_weights",
    "poisson_posterior_mean",
    "regularised_argmax",
    "regularised_objective",
    "regulariser_value",
    "scored_attention",
    "scored_attention_unchecked",
    "skip_connection_iteration",
    "softmax",
    "softmax_attention",
    "sparsemax",
]
