"""Unrolled EM: an attention stack with its own parameters per layer (learned attention).

The note "Attention as deconvolution" closes: attention layers use different parameters at
each layer rather than iterating one EM update, "a flexible unrolling of EM-type algorithms".
This module is that stack for Gaussian deconvolution (z ~ nu, x | z ~ N(z, sigma^2 I_p)), in
units standardised by sigma, u = x / sigma, with one atom per data point, m_k^(0) = u_k.

Layer l = 1..L (parameters shared across atoms, so one stack runs at any N):

    q_i = W_q u_i,   k_k = W_k m_k,
    s_ik = -beta/2 |q_i - k_k|^2 + c |k_k|^2 + a log M_k,        A_ik = softmax_k(s_ik)
    M_k <- sum_i A_ik,    c_k = sum_i A_ik u_i / M_k,    m_k <- m_k + eta (W_v c_k + b_v - m_k)

and the read-out (its own q/k/beta/c/a, value map and an extra variance g):

    mean_i = sum_k A_ik v_k,  var_i = max(sum_k A_ik (v_k - mean_i)^2 + g, 0),  v_k = W_v m_k + b_v

The score is the dot-product form of the design note written from differences:
-beta/2 |q - k|^2 + c |k|^2 = beta <q, k> + (c - beta/2) |k|^2 - beta/2 |q|^2, and the last term
is constant along a row, so c is the key-norm bias in excess of EM's -beta |mu_k|^2 / 2.
M_k is the atom's mass (M_k = 1 before the first layer); a = 1 gives Kiefer-Wolfowitz EM's
weights w_k = M_k / N, a = 0 EM's fixed weights 1 / N.

At ``init_unrolled_em``'s values (W = I, beta = 1, c = 0, a = 0, b_v = 0, eta = 1, g = 0) the
stack is exactly L steps of K = N EM (``attnbayes.inference.deconvolution.em.em_step``)
followed by the posterior mean and the posterior variance under the fitted discrete measure
(``em.posterior``). Trained on tasks from a prior over mixing measures with squared error to z
(``training``), its target is the Bayes posterior mean under that prior.

Streaming. ``block_size=B`` runs every layer in two passes over blocks of B points and B atoms
(row log-sum-exp, then column sums), as ``em.em_step`` does, and the read-out as streamed
attention: memory O(B^2), never N x N; equal to the dense stack to round-off. The streamed
variance is sum_k A_ik (v_k - u_bar)^2 - (mean_i - u_bar)^2 (centred at the data mean u_bar);
the dense one sums (v_k - mean_i)^2 directly.

Masks. ``mask`` (N,) marks the real points of a padded task: masked points are neither atoms
nor rows of the column sums, so a padded task gives the unpadded task's answer on its real
points (tested).

Tracing. ``unrolled_em``, ``unrolled_em_moments`` and ``init_unrolled_em``'s result are
jit/vmap/grad-able in the parameters, x and sigma; ``num_layers``, ``block_size`` are static.
The checks on concrete inputs are ``em.check_problem``'s (finite x, sigma > 0 in range).
``unrolled_em_moments_unchecked`` is the traceable kernel of ``unrolled_em_moments``, and
``forward`` the stack itself in standardised units (what ``training`` and the learned
``comparison`` batch over tasks).
"""

from __future__ import annotations

import functools
import os
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .... import validation
from ...attention import scored_attention_unchecked
from ..checks import checked_problem
from ..estep import block_sums, weighted_differences
from .archive import archive_metadata, archive_version, read_archive, write_archive

FORMAT_VERSION = 1


class LayerParams(NamedTuple):
    """Parameters of one EM-like layer (leaves with a leading layer axis in a stack).

    Attributes:
        query, key: (p, p) W_q, W_k.
        inverse_temperature: () beta.
        key_norm: () c, the coefficient of |k_k|^2 beyond EM's.
        mass_weight: () a, the coefficient of log M_k (0: fixed weights, 1: updated weights).
        value: (p, p) W_v.
        value_bias: (p,) b_v.
        step: () eta, the residual step m <- m + eta (update - m).
    """

    query: jax.Array
    key: jax.Array
    inverse_temperature: jax.Array
    key_norm: jax.Array
    mass_weight: jax.Array
    value: jax.Array
    value_bias: jax.Array
    step: jax.Array


class ReadoutParams(NamedTuple):
    """Parameters of the read-out attention (the posterior-mean step).

    Attributes: as ``LayerParams`` without the step, plus ``extra_variance`` (p,) g, added to
    the posterior variance (the spread a discrete measure of N atoms misses; the sum is
    clipped at 0). It enters linearly, so it trains from g = 0 (a squared parametrisation
    would have a zero gradient there).
    """

    query: jax.Array
    key: jax.Array
    inverse_temperature: jax.Array
    key_norm: jax.Array
    mass_weight: jax.Array
    value: jax.Array
    value_bias: jax.Array
    extra_variance: jax.Array


class UnrolledEMParams(NamedTuple):
    """An L-layer stack: ``layers`` (LayerParams with leaves of leading axis L), ``readout``."""

    layers: LayerParams
    readout: ReadoutParams

    @property
    def num_layers(self) -> int:
        return int(np.shape(self.layers.step)[0])

    @property
    def dim(self) -> int:
        return int(np.shape(self.readout.value_bias)[0])


class PosteriorMoments(NamedTuple):
    """Posterior moments of z_i, in the data's units and shape convention.

    Attributes:
        mean: E[z_i | x], (N,) or (N, p).
        variance: Var[z_i | x] per coordinate, like ``mean``.
    """

    mean: jax.Array
    variance: jax.Array

    @property
    def second_moment(self) -> jax.Array:
        """E[z_i^2 | x] = variance + mean^2 (per coordinate)."""
        return self.variance + self.mean**2


def init_unrolled_em(num_layers: int, dim: int = 1, dtype=None) -> UnrolledEMParams:
    """The parameters at which the stack is L steps of K = N EM and the posterior mean.

    W_q = W_k = W_v = I, beta = 1 (standardised units: 1 / sigma^2 = 1), c = 0, a = 0,
    b_v = 0, eta = 1, extra variance g = 0. (The first layer's a multiplies
    log M_k = 0, so it has no effect and no gradient.)
    """
    num_layers = validation.check_positive_int("num_layers", num_layers, minimum=0)
    dim = validation.check_positive_int("dim", dim)
    dtype = jnp.zeros(()).dtype if dtype is None else jnp.dtype(dtype)
    eye = jnp.eye(dim, dtype=dtype)

    def stacked(value):
        value = jnp.asarray(value, dtype)
        return jnp.broadcast_to(value, (num_layers, *value.shape))

    zero, one = jnp.zeros((), dtype), jnp.ones((), dtype)
    layers = LayerParams(
        query=stacked(eye),
        key=stacked(eye),
        inverse_temperature=stacked(one),
        key_norm=stacked(zero),
        mass_weight=stacked(zero),
        value=stacked(eye),
        value_bias=stacked(jnp.zeros((dim,), dtype)),
        step=stacked(one),
    )
    readout = ReadoutParams(
        query=eye,
        key=eye,
        inverse_temperature=one,
        key_norm=zero,
        mass_weight=zero,
        value=eye,
        value_bias=jnp.zeros((dim,), dtype),
        extra_variance=jnp.zeros((dim,), dtype),
    )
    return UnrolledEMParams(layers, readout)


# ----------------------------------------------------------------------------- kernels


def _sq_dist(q, k, beta):
    """(N, K) -beta/2 |q_i - k_k|^2, one coordinate at a time (fused by XLA)."""
    total = None
    for c in range(q.shape[1]):
        d = q[:, c, None] - k[None, :, c]
        total = d * d if total is None else total + d * d
    return -0.5 * beta * total


def _key_bias(keys, log_mass, mask, key_norm, mass_weight):
    """b_k = c |k_k|^2 + a log M_k for real atoms, -inf for masked ones."""
    bias = key_norm * jnp.sum(keys**2, axis=-1) + mass_weight * log_mass
    return jnp.where(mask, bias, -jnp.inf)


def _log_mass(mass, dtype):
    return jnp.log(jnp.maximum(mass, jnp.finfo(dtype).tiny))


def _dense_layer(u, atoms, log_mass, mask, layer: LayerParams):
    """One layer, dense: (new atoms, new log masses)."""
    q, k = u @ layer.query.T, atoms @ layer.key.T
    scores = _sq_dist(q, k, layer.inverse_temperature)
    scores = scores + _key_bias(k, log_mass, mask, layer.key_norm, layer.mass_weight)[None, :]
    resp = jax.nn.softmax(scores, axis=-1) * mask[:, None]
    mass = jnp.sum(resp, axis=0)
    shift = weighted_differences(resp, u, atoms)
    return _layer_update(atoms, mass, shift, layer), _log_mass(mass, u.dtype)


def _layer_update(atoms, mass, shift, layer: LayerParams):
    """m_k + eta (W_v c_k + b_v - m_k), c_k = m_k + shift_k / M_k (m_k where M_k = 0)."""
    empty = mass == 0
    centre = atoms + shift / jnp.where(empty, 1.0, mass)[:, None]
    centre = jnp.where(empty[:, None], atoms, centre)
    update = centre @ layer.value.T + layer.value_bias
    return atoms + layer.step * (update - atoms)


def _streamed_layer(u, atoms, log_mass, mask, layer: LayerParams, block_size):
    """One layer in two streamed passes: row log-sum-exp, then column sums per atom block."""
    n, p, b = u.shape[0], u.shape[1], block_size
    q, k = u @ layer.query.T, atoms @ layer.key.T
    bias = _key_bias(k, log_mass, mask, layer.key_norm, layer.mass_weight)
    beta = layer.inverse_temperature
    _, _, lse = scored_attention_unchecked(
        _score_fn, beta, q, k, jnp.zeros((n, 1), u.dtype), bias, block_size, False
    )
    lse = jnp.where(mask, lse, jnp.inf)  # masked rows contribute nothing
    pad = (-n) % b

    def blocks(a, fill):
        widths = ((0, pad),) + ((0, 0),) * (a.ndim - 1)
        if fill is None:
            return jnp.pad(a, widths, mode="edge").reshape(-1, b, *a.shape[1:])
        return jnp.pad(a, widths, constant_values=fill).reshape(-1, b, *a.shape[1:])

    rows = (blocks(q, None), blocks(u, None), blocks(lse, jnp.inf))
    cols = (blocks(k, None), blocks(atoms, None), blocks(bias, -jnp.inf))

    def one_atom_block(col):
        kb, mb, bias_b = col

        def body(carry, row):
            mass, shift = carry
            qb, ub, lse_b = row
            s = _sq_dist(qb, kb, beta) + bias_b[None, :]
            a = jnp.exp(s - lse_b[:, None])
            block_mass, block_shift = block_sums(a, ub, mb)
            return (mass + block_mass, shift + block_shift), None

        init = (jnp.zeros((b,), u.dtype), jnp.zeros((b, p), u.dtype))
        return jax.lax.scan(jax.checkpoint(body), init, rows)[0]

    mass, shift = jax.lax.map(one_atom_block, cols)
    mass, shift = mass.reshape(-1)[:n], shift.reshape(-1, p)[:n]
    return _layer_update(atoms, mass, shift, layer), _log_mass(mass, u.dtype)


def _score_fn(qb, kb, beta):
    return _sq_dist(qb, kb, beta)


def _readout(u, atoms, log_mass, mask, readout: ReadoutParams, block_size):
    """(mean (N, p), variance (N, p)) in standardised units."""
    q, k = u @ readout.query.T, atoms @ readout.key.T
    bias = _key_bias(k, log_mass, mask, readout.key_norm, readout.mass_weight)
    values = atoms @ readout.value.T + readout.value_bias
    extra = readout.extra_variance
    if block_size is None:
        scores = _sq_dist(q, k, readout.inverse_temperature) + bias[None, :]
        resp = jax.nn.softmax(scores, axis=-1)
        mean = resp @ values
        p = u.shape[1]
        var = jnp.stack(
            [jnp.sum(resp * (values[None, :, c] - mean[:, c, None]) ** 2, -1) for c in range(p)],
            axis=-1,
        )
        return mean, jnp.maximum(var + extra, 0.0)
    n_real = jnp.maximum(jnp.sum(mask), 1)
    centre = jnp.sum(jnp.where(mask[:, None], u, 0.0), axis=0) / n_real
    centred = values - centre
    out, _, _ = scored_attention_unchecked(
        _score_fn,
        readout.inverse_temperature,
        q,
        k,
        jnp.concatenate([centred, centred**2], axis=-1),
        bias,
        block_size,
        False,
    )
    p = u.shape[1]
    mean_c, m2 = out[:, :p], out[:, p:]
    return mean_c + centre, jnp.maximum(jnp.maximum(m2 - mean_c**2, 0.0) + extra, 0.0)


def forward(params: UnrolledEMParams, u, mask, block_size=None):
    """The stack on standardised points u = x / sigma (N, p) with ``mask`` (N,): the posterior
    (mean, variance) of z / sigma, each (N, p); dense, or streamed with ``block_size``. No
    checks: the kernel beneath ``unrolled_em_moments_unchecked``, traceable and differentiable
    in the parameters and u."""
    atoms = u
    log_mass = jnp.zeros(u.shape[:1], u.dtype)

    def body(carry, layer):
        atoms, log_mass = carry
        if block_size is None:
            return _dense_layer(u, atoms, log_mass, mask, layer), None
        return _streamed_layer(u, atoms, log_mass, mask, layer, block_size), None

    (atoms, log_mass), _ = jax.lax.scan(body, (atoms, log_mass), params.layers)
    return _readout(u, atoms, log_mass, mask, params.readout, block_size)


@functools.partial(jax.jit, static_argnames=("block_size",))
def unrolled_em_moments_unchecked(params, x, sigma, mask, block_size=None):
    """The kernel of ``unrolled_em_moments``: (mean, variance) (N, p) in x's units, for x (N, p),
    a boolean ``mask`` (N,) and parameters already checked (``check_params``)."""
    mean, var = forward(params, x / sigma, mask, block_size)
    return mean * sigma, var * sigma**2


# ----------------------------------------------------------------------------- validation


def check_params(name: str, params, dim: int | None = None, dtype=None) -> UnrolledEMParams:
    """Validate a stack's parameters: the pytree structure, shapes (p from ``dim``), finiteness.

    Traced leaves pass the shape checks only.
    """
    if not isinstance(params, UnrolledEMParams) or not isinstance(params.layers, LayerParams):
        raise ValueError(
            f"{name}: expected UnrolledEMParams (from init_unrolled_em, train_unrolled_em or "
            f"load_unrolled_em), got {type(params).__name__}"
        )
    if not isinstance(params.readout, ReadoutParams):
        raise ValueError(f"{name}.readout: expected ReadoutParams")
    p = int(np.shape(params.readout.value_bias)[0]) if np.ndim(params.readout.value_bias) else 0
    if dim is not None and p != dim:
        raise ValueError(f"{name}: a stack for {p}-dimensional data, but x has {dim} coordinates")
    query = params.layers.query
    num_layers = int(np.shape(query)[0]) if np.ndim(query) == 3 else -1
    shapes = {
        "query": (p, p),
        "key": (p, p),
        "inverse_temperature": (),
        "key_norm": (),
        "mass_weight": (),
        "value": (p, p),
        "value_bias": (p,),
    }
    for field, shape in {**shapes, "step": ()}.items():
        leaf = getattr(params.layers, field)
        if tuple(np.shape(leaf)) != (num_layers, *shape):
            raise ValueError(
                f"{name}.layers.{field}: expected shape {(num_layers, *shape)}, "
                f"got {tuple(np.shape(leaf))}"
            )
    for field, shape in {**shapes, "extra_variance": (p,)}.items():
        leaf = getattr(params.readout, field)
        if tuple(np.shape(leaf)) != shape:
            raise ValueError(
                f"{name}.readout.{field}: expected shape {shape}, got {tuple(np.shape(leaf))}"
            )
    return checked_leaves(name, params, dtype)


def checked_leaves(name: str, params, dtype=None):
    """A stack's leaves as floats with finite values (on concrete leaves; traced ones pass),
    named by their path under ``name``; cast to ``dtype`` when given. Both stacks' checks end
    here."""
    leaves = jax.tree_util.tree_leaves(params)
    if not any(validation.is_traced(leaf) for leaf in leaves):
        for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
            arr = np.asarray(leaf)
            if not np.issubdtype(arr.dtype, np.floating):
                raise ValueError(f"{name}{jax.tree_util.keystr(path)}: expected floats")
            if not np.all(np.isfinite(arr)):
                raise ValueError(f"{name}{jax.tree_util.keystr(path)}: has NaN or inf values")
    if dtype is None:
        return params
    return jax.tree_util.tree_map(lambda a: jnp.asarray(a, dtype), params)


def _check_mask(mask, n):
    if mask is None:
        return jnp.ones((n,), bool)
    if validation.is_traced(mask):
        if tuple(mask.shape) != (n,):
            raise ValueError(f"mask: expected shape ({n},), got {tuple(mask.shape)}")
        return mask.astype(bool)
    arr = np.asarray(mask)
    if arr.shape != (n,) or arr.dtype != bool:
        raise ValueError(
            f"mask: expected a boolean array of shape ({n},), got {arr.dtype} {arr.shape}"
        )
    if not arr.any():
        raise ValueError("mask: marks no point as real")
    return jnp.asarray(arr)


def _prepare(params, x, sigma, mask, block_size):
    if np.ndim(sigma) > 0:
        raise ValueError(
            f"sigma: the unrolled-EM stack was built for one noise scale for all points, got "
            f"an array of shape {np.shape(sigma)}; for one sigma per observation use fit_em or "
            "npmle"
        )
    xs, _, _, s, scalar = checked_problem(x, None, None, sigma)
    params = check_params("params", params, dim=xs.shape[1], dtype=xs.dtype)
    mask = _check_mask(mask, xs.shape[0])
    if block_size is not None:
        block_size = validation.check_positive_int("block_size", block_size)
    return params, xs, s, mask, block_size, scalar


# ----------------------------------------------------------------------------- public API


def unrolled_em_moments(
    params: UnrolledEMParams, x, sigma, *, mask=None, block_size: int | None = None
) -> PosteriorMoments:
    """Posterior mean and variance of z_i from the stack (module docstring), like ``x``.

    Args:
        params: ``UnrolledEMParams`` for p-dimensional data (standardised units).
        x: (N,) or (N, p) observations.
        sigma: known noise scale (the stack sees x / sigma).
        mask: optional boolean (N,) marking the real points of a padded task.
        block_size: stream every layer over blocks of this many points and atoms.

    Returns:
        ``PosteriorMoments(mean, variance)``; ``.second_moment`` is E[z^2 | x].
    """
    params, xs, s, mask, block_size, scalar = _prepare(params, x, sigma, mask, block_size)
    mean, var = unrolled_em_moments_unchecked(params, xs, s, mask, block_size)
    return PosteriorMoments(
        validation.restore_shape(mean, scalar), validation.restore_shape(var, scalar)
    )


def unrolled_em(params: UnrolledEMParams, x, sigma, *, mask=None, block_size: int | None = None):
    """E[z_i | x] from the stack: (N,) or (N, p), like ``x`` (see ``unrolled_em_moments``)."""
    return unrolled_em_moments(params, x, sigma, mask=mask, block_size=block_size).mean


def unrolled_em_intervals(moments: PosteriorMoments, prob: float = 0.9):
    """Equal-tailed normal intervals mean -+ z_{(1+prob)/2} sd from ``PosteriorMoments``."""
    prob = validation.check_real_scalar("prob", prob, "a probability in (0, 1)")
    if not 0.0 < float(prob) < 1.0:
        raise ValueError(f"prob: must be in (0, 1), got {prob!r}")
    half = jax.scipy.special.ndtri(0.5 + 0.5 * float(prob)) * jnp.sqrt(moments.variance)
    return moments.mean - half, moments.mean + half


# ----------------------------------------------------------------------------- save / load


def save_unrolled_em(path, params: UnrolledEMParams, metadata: dict | None = None) -> None:
    """Write the parameters to ``path`` (.npz), atomically (a temporary file, then a rename).

    Format (version ``FORMAT_VERSION``): arrays ``layers.<field>`` (leading axis L) and
    ``readout.<field>``, plus ``format_version``, ``num_layers``, ``dim`` and, for each
    metadata entry, ``meta.<name>`` (strings or numbers). Refuses non-finite parameters.
    """
    params = check_params("params", params)
    arrays = {f"layers.{f}": np.asarray(v) for f, v in params.layers._asdict().items()}
    arrays.update({f"readout.{f}": np.asarray(v) for f, v in params.readout._asdict().items()})
    arrays["format_version"] = np.asarray(FORMAT_VERSION)
    arrays["num_layers"] = np.asarray(params.num_layers)
    arrays["dim"] = np.asarray(params.dim)
    write_archive(path, arrays, metadata)


def load_unrolled_em(path) -> tuple[UnrolledEMParams, dict]:
    """Read parameters written by ``save_unrolled_em``: ``(params, metadata)``.

    Raises:
        ValueError: naming the path, for a missing file, one that is not a whole .npz archive
            (empty, truncated, another format), another or an unreadable ``format_version``
            (a version-2 grid stack is named as such: ``load_grid_stack`` reads it), and
            missing, non-float, misshapen or non-finite arrays or non-scalar metadata.
    """
    path = os.fspath(path)
    arrays = read_archive(path)
    archive_version(arrays, path, FORMAT_VERSION)
    fields = [f"layers.{f}" for f in LayerParams._fields]
    fields += [f"readout.{f}" for f in ReadoutParams._fields]
    for name in fields:
        if name not in arrays:
            raise ValueError(f"path: missing array {name!r} in {path!r}")
        if not np.issubdtype(arrays[name].dtype, np.floating):
            raise ValueError(
                f"path: array {name!r} in {path!r} holds {arrays[name].dtype}, expected floats"
            )
    layers = LayerParams(**{f: jnp.asarray(arrays[f"layers.{f}"]) for f in LayerParams._fields})
    readout = ReadoutParams(
        **{f: jnp.asarray(arrays[f"readout.{f}"]) for f in ReadoutParams._fields}
    )
    try:
        params = check_params("path", UnrolledEMParams(layers, readout))
    except ValueError as err:
        raise ValueError(f"{err} (in {path!r})") from None
    return params, archive_metadata(arrays, path)


PRETRAINED_FILE = "unrolled_em_v1.npz"


def pretrained_unrolled_em(*, metadata: bool = False):
    """The stack shipped with attnbayes (``learned/pretrained/MODEL_CARD.md``: scalar data, units
    of sigma, trained on ``TaskPrior()`` at N = 20..200 by
    ``scripts/train_pretrained_unrolled_em.py``).

    Returns the ``UnrolledEMParams`` (float64 arrays), or ``(params, metadata)`` with
    ``metadata=True`` (training settings and the recorded held-out regret per family).
    """
    from importlib import resources

    resource = resources.files(__package__) / "pretrained" / PRETRAINED_FILE
    with resources.as_file(resource) as path:
        params, meta = load_unrolled_em(path)
    return (params, meta) if metadata else params
