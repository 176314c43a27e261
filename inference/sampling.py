"""Random variates the samplers share, written for fast compilation inside ``lax.scan``."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import ndtri


def uniform_positive(key, shape, dtype):
    """Uniforms on [tiny, 1), drawn flat and reshaped (multi-axis draws compile much slower)."""
    size = int(np.prod(shape))
    return jax.random.uniform(key, (size,), dtype, jnp.finfo(dtype).tiny).reshape(shape)


def log_gamma(key, alpha):
    """log of independent Gamma(alpha, 1) draws (alpha > 0, any shape), exactly.

    Marsaglia & Tsang (2000) on alpha + 1, rejection until every entry is accepted, then the
    boost Gamma(alpha) = Gamma(alpha + 1) U^(1/alpha) taken in log space (so tiny alpha gives a
    very negative log, not an underflowed 0). Written out because ``jax.random.loggamma``
    compiles several times slower (one while loop per element), and the sampler is compiled
    once per shape.
    """
    dtype = alpha.dtype
    key_boost, key_loop = jax.random.split(key)
    d = alpha + 1.0 - 1.0 / 3.0
    c = jax.lax.rsqrt(9.0 * d)

    def body(state):
        i, done, log_v = state
        u = uniform_positive(jax.random.fold_in(key_loop, i), (2, *alpha.shape), dtype)
        z = ndtri(u[0])
        v = (1.0 + c * z) ** 3
        log_v_new = jnp.log(jnp.where(v > 0, v, 1.0))
        ok = (v > 0) & (jnp.log(u[1]) < 0.5 * z**2 + d - d * v + d * log_v_new)
        log_v = jnp.where(ok & ~done, log_v_new, log_v)
        return i + 1, done | ok, log_v

    state = (jnp.asarray(0, jnp.int32), jnp.zeros(alpha.shape, bool), jnp.zeros_like(alpha))
    _, _, log_v = jax.lax.while_loop(lambda s: ~jnp.all(s[1]), body, state)
    return jnp.log(d) + log_v + jnp.log(uniform_positive(key_boost, alpha.shape, dtype)) / alpha


__all__ = ["log_gamma", "uniform_positive"]
