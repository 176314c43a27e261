"""The kernel-density joint of (key, value), whose conditional mean is Nadaraya-Watson.

Given pairs (k_i, v_i), i = 1..n, the Gaussian kernel density estimate of their joint law is
the equal-weight mixture with one component per pair,

    p(k, v) = (1/n) sum_i N(k; k_i, diag(h^2)) N(v; v_i, s^2 I),

written with the component as a latent: c ~ Cat(1/n), k | c ~ N(k_c, diag(h^2)),
v | c ~ N(v_c, s^2 I). Conditioning on k = q (Bayes' rule on c),

    p(c = i | k = q) = K_h(q - k_i) / sum_j K_h(q - k_j),   K_h(u) = prod_c exp(-u_c^2 / (2 h_c^2)),

the softmax attention weights of ``attnbayes.inference.attention.neg_sq_distance_scores``, so

    E[v | k = q] = sum_i p(c = i | q) v_i                  (Nadaraya-Watson, Gaussian kernel),
    Cov[v | k = q] = s^2 I + sum_i p(c = i | q) (v_i - E[v | q])(v_i - E[v | q])^T.

The value noise s widens the conditional law but does not move its mean.

Shape convention: keys (n,) or (n, d), values (n,) or (n, m), queries (Q,) or (Q, d);
results come back in the values' convention.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

from .. import validation


class ConditionalMoments(NamedTuple):
    """Exact moments of v given k = q under the kernel joint.

    Attributes:
        mean: (Q,) or (Q, m) E[v | k = q].
        covariance: (Q,) variance for scalar values, else (Q, m, m) Cov[v | k = q].
    """

    mean: jax.Array
    covariance: jax.Array


def _check_pairs(keys, values):
    k, _ = validation.as_points("keys", keys)
    v, scalar_values = validation.as_points("values", values)
    if v.shape[0] != k.shape[0]:
        raise ValueError(f"values: {v.shape[0]} rows do not match the {k.shape[0]} keys")
    dtype = jnp.result_type(k.dtype, v.dtype)
    return jnp.asarray(k, dtype), jnp.asarray(v, dtype), scalar_values


def _check_bandwidth(bandwidth, dim: int, dtype):
    return jnp.asarray(validation.check_bandwidth("bandwidth", bandwidth, dim, dtype))


def _check_queries(queries, dim: int, dtype):
    q, _ = validation.as_points("queries", queries)
    if q.shape[1] != dim:
        raise ValueError(f"queries: dimension {q.shape[1]} does not match the keys' {dim}")
    return jnp.asarray(q, dtype)


def component_posterior(keys, queries, *, bandwidth) -> jax.Array:
    """p(c = i | k = q) proportional to N(q; k_i, diag(h^2)): (Q, n), rows on the simplex.

    Computed from the mixture's own component densities (``numpyro`` ``Normal.log_prob``).
    """
    k, _ = validation.as_points("keys", keys)
    dtype = jnp.result_type(k.dtype, float)
    k = jnp.asarray(k, dtype)
    h = _check_bandwidth(bandwidth, k.shape[1], dtype)
    return _component_posterior(k, _check_queries(queries, k.shape[1], dtype), h)


@jax.jit
def _component_posterior(keys, queries, bandwidth):
    log_lik = dist.Normal(keys[None, :, :], bandwidth).log_prob(queries[:, None, :]).sum(-1)
    return jax.nn.softmax(log_lik, axis=-1)


@jax.jit
def _conditional_moments(keys, values, queries, bandwidth, value_scale):
    w = _component_posterior(keys, queries, bandwidth)
    mean = w @ values
    centred = values[None, :, :] - mean[:, None, :]
    cov = jnp.einsum("qi,qia,qib->qab", w, centred, centred)
    return mean, cov + value_scale**2 * jnp.eye(values.shape[1], dtype=values.dtype)


def conditional_mean(keys, values, queries, *, bandwidth) -> jax.Array:
    """E[v | k = q] = sum_i p(c = i | q) v_i under the kernel joint: (Q,) or (Q, m)."""
    return conditional_moments(keys, values, queries, bandwidth=bandwidth).mean


def conditional_moments(
    keys, values, queries, *, bandwidth, value_scale: float = 0.0
) -> ConditionalMoments:
    """E[v | k = q] and Cov[v | k = q] = s^2 I + Cov_{c | q}(v_c) under the kernel joint.

    Args:
        keys: (n,) or (n, d); values: (n,) or (n, m); queries: (Q,) or (Q, d).
        bandwidth: h > 0, scalar or (d,).
        value_scale: s >= 0 (only the covariance depends on it; 0 gives Cov_{c | q}(v_c)).
    """
    k, v, scalar_values = _check_pairs(keys, values)
    if value_scale != 0:
        value_scale = validation.check_positive_scalar("value_scale", value_scale)
    h = _check_bandwidth(bandwidth, k.shape[1], k.dtype)
    q = _check_queries(queries, k.shape[1], k.dtype)
    mean, cov = _conditional_moments(k, v, q, h, jnp.asarray(value_scale, k.dtype))
    if scalar_values:
        return ConditionalMoments(mean[:, 0], cov[:, 0, 0])
    return ConditionalMoments(mean, cov)


def kernel_joint_model(
    keys,
    values,
    *,
    bandwidth,
    value_scale: float,
    num_draws: int | None = None,
    k=None,
    v=None,
):
    """NumPyro program of the joint p(k, v) = (1/n) sum_i K_h(k - k_i) N(v; v_i, s^2).

        c_t ~ Categorical(1/n)                      t = 1..D, plate "draws"
        k_t | c_t ~ N(keys[c_t], diag(h^2))
        v_t | c_t ~ N(values[c_t], s^2 I)

    Args:
        keys: (n,) or (n, d) data keys (the mixture's component centres in k).
        values: (n,) or (n, m) data values.
        bandwidth: h > 0, scalar or (d,).
        value_scale: s > 0.
        num_draws: D; inferred from ``k`` or ``v`` when they are given.
        k, v: optional observed draws ((D,) / (D, d) and (D,) / (D, m)) to condition on.

    Sites: ``component`` (D,), ``k`` (D,) or (D, d), ``v`` (D,) or (D, m), in the keys' and
    values' conventions.
    """
    key_arr, scalar_keys = validation.as_points("keys", keys)
    val_arr, scalar_values = validation.as_points("values", values)
    if val_arr.shape[0] != key_arr.shape[0]:
        raise ValueError(
            f"values: {val_arr.shape[0]} rows do not match the {key_arr.shape[0]} keys"
        )
    dtype = jnp.result_type(key_arr.dtype, val_arr.dtype)
    key_arr, val_arr = jnp.asarray(key_arr, dtype), jnp.asarray(val_arr, dtype)
    h = _check_bandwidth(bandwidth, key_arr.shape[1], dtype)
    value_scale = validation.check_positive_scalar("value_scale", value_scale)
    for name, obs in (("k", k), ("v", v)):
        if obs is not None and not validation.is_traced(obs):
            validation.check_finite(name, validation.as_float_array(name, obs))
    num_draws = _num_draws(num_draws, k, v)
    n = key_arr.shape[0]
    centres_k = key_arr[:, 0] if scalar_keys else key_arr
    centres_v = val_arr[:, 0] if scalar_values else val_arr
    scale_k = h[0] if scalar_keys else h
    with numpyro.plate("draws", num_draws):
        c = numpyro.sample("component", dist.Categorical(logits=jnp.zeros(n, dtype)))
        k_dist = dist.Normal(centres_k[c], scale_k)
        v_dist = dist.Normal(centres_v[c], value_scale)
        numpyro.sample("k", k_dist if scalar_keys else k_dist.to_event(1), obs=k)
        numpyro.sample("v", v_dist if scalar_values else v_dist.to_event(1), obs=v)


def kernel_conditional_model(keys, values, query, *, bandwidth, value_scale: float, num_draws: int):
    """NumPyro program of p(v | k = q) under the kernel joint, for one query q.

        c_t ~ Categorical(p(c = i | k = q))         t = 1..D, plate "draws"
        v_t | c_t ~ N(values[c_t], s^2 I)

    Args:
        keys: (n,) or (n, d); values: (n,) or (n, m).
        query: scalar (scalar keys) or (d,).
        bandwidth: h > 0, scalar or (d,); value_scale: s > 0; num_draws: D.

    Sites: ``component`` (D,), ``v`` (D,) or (D, m).
    """
    key_arr, val_arr, scalar_values = _check_pairs(keys, values)
    q = validation.as_float_array("query", query)
    if q.ndim > 1:
        raise ValueError(f"query: expected a scalar or shape (d,), got {tuple(q.shape)}")
    if q.size != key_arr.shape[1]:
        raise ValueError(f"query: expected {key_arr.shape[1]} coordinate(s), got {q.size}")
    q = jnp.reshape(jnp.asarray(q, key_arr.dtype), (1, -1))
    value_scale = validation.check_positive_scalar("value_scale", value_scale)
    num_draws = validation.check_positive_int("num_draws", num_draws)
    probs = component_posterior(key_arr, q, bandwidth=bandwidth)[0]
    centres_v = val_arr[:, 0] if scalar_values else val_arr
    with numpyro.plate("draws", num_draws):
        c = numpyro.sample("component", dist.Categorical(probs=probs))
        v_dist = dist.Normal(centres_v[c], value_scale)
        numpyro.sample("v", v_dist if scalar_values else v_dist.to_event(1))


def _num_draws(num_draws, k, v) -> int:
    observed = {name: np.shape(x) for name, x in (("k", k), ("v", v)) if x is not None}
    for name, shape in observed.items():
        if len(shape) not in (1, 2):
            raise ValueError(f"{name}: expected shape (D,) or (D, p), got {shape}")
    sizes = {name: shape[0] for name, shape in observed.items()}
    if num_draws is None:
        if not sizes:
            raise ValueError("num_draws: required when neither k nor v is observed")
        num_draws = next(iter(sizes.values()))
    num_draws = validation.check_positive_int("num_draws", num_draws)
    for name, size in sizes.items():
        if size != num_draws:
            raise ValueError(f"{name}: {size} observed draws do not match num_draws={num_draws}")
    return num_draws


__all__ = [
    "ConditionalMoments",
    "component_posterior",
    "conditional_mean",
    "conditional_moments",
    "kernel_conditional_model",
    "kernel_joint_model",
]
