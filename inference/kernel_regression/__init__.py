"""Nadaraya-Watson kernel regression as attention, and its bandwidth selection.

Modules:

- ``kernels``: the log-kernels as attention score functions (``LOG_KERNEL_SCORES``) and the
  argument checks;
- ``estimator``: ``nadaraya_watson`` (attention pooling with log-kernel scores, dense or
  streamed), ``kernel_scores`` and the closed-form ``leave_one_out`` CV with its kernels;
- ``bandwidth``: ``select_bandwidth``, by leave-one-out CV or by gradient descent on a held-out
  split.

For keys k_i (n, d), values v_i (n, m), a kernel K and bandwidths h (scalar or per coordinate),

    f(q) = sum_i v_i K_h(q - k_i) / sum_j K_h(q - k_j),      K_h(u) = prod_c K(u_c / h_c),

a multivariate *product* kernel (the statsmodels convention). This is softmax attention with
scores s(q, k) = log K_h(q - k) = sum_c log K((q_c - k_c) / h_c), -inf outside a compact
kernel's support; normalising constants of K cancel in the ratio. ``nadaraya_watson`` runs
``attnbayes.inference.attention.scored_attention`` with a module-level log-kernel score function, so
``block_size`` streams over key/query blocks with a running log-sum-exp (memory O(block^2)).
For the Gaussian kernel the scores are exactly ``neg_sq_distance_scores``:
-sum_c (q_c - k_c)^2 / (2 h_c^2).

Kernels K(u), up to constants (which cancel), with statsmodels' supports:

    gaussian      exp(-u^2 / 2)                 (statsmodels "gaussian": times 1/sqrt(2 pi))
    boxcar        1{|u| <= 1}                    (statsmodels sandbox Uniform: 1/2 on [-1, 1])
    epanechnikov  (1 - u^2)   for |u| < 1        (sandbox Epanechnikov: 3/4 (1 - u^2))
    triangular    (1 - |u|)   for |u| < 1        (sandbox Triangular)
    tricube       (1 - |u|^3)^3 for |u| < 1      (sandbox Tricube: 70/81 (1 - |u|^3)^3)

The seed's (d2l's) "Epanechikov" kernel max(0, 1 - |q - k|) is the triangular kernel here.
``statsmodels.nonparametric.kernels.tricube`` (``KernelReg(ckertype="tricube")``) sets u = 0
outside |u| <= 1, so it returns the kernel's maximum there instead of 0; it agrees with ours
only when every |u| <= 1.

Empty windows. A query with no key inside a compact kernel's window (log-normaliser -inf)
gets the value of its nearest key, in the Euclidean distance scaled by h,
|(q - k) / h|, ties to the lowest index; a warning (``EmptyWindowWarning``) says how many.
The same rule gives f_{-i}(k_i) in leave-one-out cross-validation (the nearest *other* key),
so the CV criterion is that of the estimator actually returned and is never NaN.

Errors. Bad input is refused before any tracing with a ``ValueError`` whose message starts with
the argument's name: keys, values and queries that are empty, of the wrong rank, complex, not
numbers, NaN or +-inf, or so far apart that their squared distances overflow the dtype
(sum_c (max - min)^2 > finfo.max: the leave-one-out pass and the nearest-key fallback form
them); a bandwidth that is not a finite number > 0 (bools refused) or whose 1/h^2 overflows;
unknown kernel or method names; a bad block_size, bounds, num_grid or optimiser setting. Under
``jax.jit`` only the static checks run, and a NaN output means input that the eager call
refuses (call the function once on the concrete inputs to see which).

Checked fronts and unchecked kernels, one spelling across attnbayes: a public function
``name`` checks its arguments on concrete values (a ``ValueError`` naming the argument, before
any tracing) and then calls ``name_unchecked``, its traceable kernel without checks, when other
modules use that kernel (here ``attnbayes.inference.attention.scored_attention_unchecked``
beneath ``nadaraya_watson``); the leave-one-out kernels ``bandwidth`` minimises are plain names
of ``estimator``. A helper used by one module only keeps an underscore.

Tracing and differentiability. ``nadaraya_watson``, ``kernel_scores`` and ``leave_one_out``
(dense and streamed) are traceable under ``jax.jit`` and ``jax.vmap`` in the keys, values,
queries and the bandwidth (``kernel`` and ``block_size`` are static), and ``jax.grad`` gives
their derivatives in the bandwidth, queries, keys and values: everywhere for the Gaussian
kernel; for the compact kernels away from the window edges |u_c| = 1, where the weights have
kinks (the boxcar's are piecewise constant in h: zero gradient). The nearest-key value of an
empty window is an argmin (piecewise constant). Not differentiable or traceable:
``select_bandwidth`` (an argmin over a grid, then a SciPy optimiser; eager only).

Checked against statsmodels: ``nadaraya_watson`` agrees with ``KernelReg(reg_type="lc")`` to
1e-8, and the LOO-CV bandwidth matches ``bw="cv_ls"`` within its optimiser's tolerance (tested
to 2 %, with a CV no worse than statsmodels'); BENCHMARKS.md gives the speed.

Public API (``__all__``), one line each:

- ``nadaraya_watson``: f(q) = sum_i v_i K_h(q - k_i) / sum_j K_h(q - k_j), as attention.
- ``kernel_scores``: the dense (Q, K) scores log K_h(q - k) (-inf off a compact support).
- ``leave_one_out``: the closed-form leave-one-out CV(h) = (1/n) sum_i |v_i - f_{-i}(k_i)|^2.
- ``select_bandwidth``: h by LOO-CV (a grid, then refined locally) or by Adam on a held-out split.
- ``BandwidthResult``: the selected h, its criterion, and the trace (the CV grid or Adam's steps).
- ``LeaveOneOut``: CV(h) at one bandwidth, the fits f_{-i}(k_i) and the empty windows.
- ``EmptyWindowWarning``: some queries had no key in a compact window (nearest key used).
- ``WideBandwidthWarning``: the selected bandwidth exceeds the keys' range.
- ``KERNELS``: the kernel names (gaussian and the compact ones).
- ``COMPACT_KERNELS``: boxcar, epanechnikov, triangular, tricube.
- ``LOG_KERNEL_SCORES``: kernel name -> its log-kernel score function.
- ``SELECTION_METHODS``: "loo-cv" and "gradient".
"""

from .bandwidth import SELECTION_METHODS, BandwidthResult, WideBandwidthWarning, select_bandwidth
from .estimator import (
    EmptyWindowWarning,
    LeaveOneOut,
    kernel_scores,
    leave_one_out,
    nadaraya_watson,
)
from .kernels import COMPACT_KERNELS, KERNELS, LOG_KERNEL_SCORES

__all__ = [
    "COMPACT_KERNELS",
    "KERNELS",
    "LOG_KERNEL_SCORES",
    "SELECTION_METHODS",
    "BandwidthResult",
    "EmptyWindowWarning",
    "LeaveOneOut",
    "WideBandwidthWarning",
    "kernel_scores",
    "leave_one_out",
    "nadaraya_watson",
    "select_bandwidth",
]
