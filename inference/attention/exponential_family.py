"""The exponential-family reading of softmax attention.

p(k_j | q) = exp(<k_j, q> - log G(q)) on the set of keys, log G = logsumexp_j <k_j, q>:
grad_q log G = sum_j A_j k_j (attention with V = K), and its Hessian is the covariance of
the keys under A.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .scores import check_scored
from .simplex import (
    check_array,
)

# ----------------------------------------------------------------------------- exponential family


def _check_query_keys(query, keys):
    """query (d,) and keys (K, d), with the overflow bound of <k_i, q>: (query, keys)."""
    query = check_array("query", query, min_rank=1, max_rank=1)
    q, k, *_ = check_scored(query[None, :], keys, scale=1.0, batched=False, names=("query", "bias"))
    return jnp.asarray(q)[0], jnp.asarray(k)


def log_partition(query, keys) -> jax.Array:
    """log G(q) = log sum_i exp(<k_i, q>): the log-partition function of attention.

    With p(k_i | q) = exp(<k_i, q> - log G(q)), grad_q log G = sum_i A_i k_i (attention with
    values = keys) and hess_q log G = sum_i A_i (k_i - m)(k_i - m)^T, the covariance of the keys
    under the attention weights A = softmax(K q). ``query`` (d,), ``keys`` (K, d). Inputs whose
    <k_i, q> could overflow are refused; traced (under ``jax.grad`` or ``jax.jit``) they would
    give +inf or NaN.
    """
    query, keys = _check_query_keys(query, keys)
    return jax.nn.logsumexp(keys @ query)


def key_moments(query, keys) -> tuple[jax.Array, jax.Array]:
    """Closed forms of grad and Hessian of ``log_partition``: (sum_i A_i k_i, Cov_A(k))."""
    query, keys = _check_query_keys(query, keys)
    a = jax.nn.softmax(keys @ query)
    mean = a @ keys
    centred = keys - mean
    return mean, (a[:, None] * centred).T @ centred
