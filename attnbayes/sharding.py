"""Where batch work runs: a one-axis ``Mesh`` over devices, and a batch axis sharded over it.

Every batch entry point of the suite (the streamed E-step and NPMLE, SBC and calibration,
batched filters, the learning and regret studies, the learned stacks' training) takes
``mesh=None``: a ``jax.sharding.Mesh`` with one axis, or ``None`` for ``batch_mesh()``, every
device JAX sees (under ``jax.distributed``, every device of every process). Its batch axis
(rows, replicates, series, tasks) is split into ``mesh.size`` equal slices, one per device
(``jax.shard_map``); reductions over the axis are ``psum``-reduced (``batch_sum``). Keys are
derived per item (``jax.random.fold_in(key, item)``), never per slice, and every item is
computed by the same program whatever the mesh, so results do not depend on the number of
devices: deterministic ones equal to round-off (sums taken in another order), random ones
identical draw for draw. A mesh of one device runs the plain program (no ``shard_map``) on
JAX's default device (place the inputs there, or use ``jax.default_device``, to choose it).

Across processes (``jax.distributed.initialize``; JAX's multi-controller model) every process
runs the same calls with the same host values; a jitted program fed NumPy (or local) arrays
treats them as that one global value. Outputs reduced over the batch axis come back
replicated on every process; outputs that keep the batch axis are split over the processes
and ``gather`` brings them to every process (``process_allgather``), after which each holds
the whole array. The library sets no global state: it never changes ``XLA_FLAGS`` or JAX's
configuration; the app (``attnbayes.app.devices``) decides how many host devices a run gets.

Bytes against compute, per reduction: a psum of a K-vector moves O(K) bytes per device while
each device computes O(N K / D) pairs (module ``attnbayes.inference.deconvolution.estep``).

Public API: ``BATCH``, ``batch_mesh``, ``check_mesh``, ``mesh_size``, ``padded_size``,
``pad_batch``, ``shard_batch``, ``batch_sum``, ``gather``, ``is_writer``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

__all__ = [
    "BATCH",
    "batch_mesh",
    "batch_sum",
    "check_mesh",
    "gather",
    "is_writer",
    "mesh_size",
    "pad_batch",
    "padded_size",
    "shard_batch",
]

BATCH = "batch"  # the axis name of the meshes ``batch_mesh`` builds


def batch_mesh(devices: Sequence | None = None) -> Mesh:
    """A one-axis mesh (axis ``BATCH``) over ``devices``; default ``jax.devices()``, every
    device of every process. ``batch_mesh(jax.devices()[:1])`` runs on one device."""
    if devices is None:
        devices = jax.devices()
    devices = list(devices)
    if not devices:
        raise ValueError("devices: expected at least one device, got none")
    if len({d.id for d in devices}) != len(devices):
        raise ValueError("devices: a device appears more than once")
    return Mesh(np.asarray(devices, dtype=object), (BATCH,))


def check_mesh(mesh, name: str = "mesh") -> Mesh:
    """``None`` -> ``batch_mesh()``; a one-axis ``Mesh`` -> itself; anything else is refused
    with a ``ValueError`` (``TypeError`` for a non-mesh) naming ``name``."""
    if mesh is None:
        return batch_mesh()
    if not isinstance(mesh, Mesh):
        raise TypeError(
            f"{name}: expected a jax.sharding.Mesh with one axis (e.g. "
            f"attnbayes.sharding.batch_mesh()) or None, got {type(mesh).__name__}"
        )
    if len(mesh.axis_names) != 1:
        raise ValueError(
            f"{name}: expected a mesh with one axis (the batch is split along it), got axes "
            f"{tuple(mesh.axis_names)}"
        )
    return mesh


def mesh_size(mesh: Mesh) -> int:
    """The number of devices of a one-axis mesh (the slices the batch axis is cut into)."""
    return int(mesh.devices.size)


def padded_size(n: int, mesh: Mesh, multiple: int = 1) -> int:
    """The smallest size >= ``n`` (and >= one slice) divisible by ``mesh_size * multiple``."""
    step = mesh_size(mesh) * multiple
    return max(-(-n // step), 1) * step


def pad_batch(tree, size: int):
    """Every leaf's leading axis padded to ``size`` with copies of its last item (so padded
    items are as finite as real ones; mask or drop them). Traceable."""

    def pad(leaf):
        leaf = jnp.asarray(leaf)
        extra = size - leaf.shape[0]
        if extra < 0:
            raise ValueError(f"pad_batch: leading axis {leaf.shape[0]} exceeds size {size}")
        if extra == 0:
            return leaf
        return jnp.pad(leaf, [(0, extra)] + [(0, 0)] * (leaf.ndim - 1), mode="edge")

    return jax.tree.map(pad, tree)


def _spec(split, axis):
    return jax.tree.map(lambda s: P(axis) if s else P(), split)


def shard_batch(fn: Callable, mesh: Mesh, in_split, out_split) -> Callable:
    """``fn`` with the arguments marked True in ``in_split`` (a tuple, one bool or a pytree of
    bools per argument) split along their leading axis over ``mesh``, and the outputs marked
    True in ``out_split`` concatenated back; the others are replicated (an output marked
    False must be the same on every device, e.g. a ``batch_sum``). Split axes must divide by
    ``mesh_size(mesh)`` (``padded_size``). With one device, ``fn`` itself. Use inside
    ``jax.jit``; ``fn`` reduces over the batch with ``batch_sum(value, mesh)``."""
    if mesh_size(mesh) == 1:
        return fn
    axis = mesh.axis_names[0]
    return jax.shard_map(
        fn,
        mesh=mesh,
        in_specs=tuple(_spec(s, axis) for s in in_split),
        out_specs=_spec(out_split, axis),
        check_vma=False,
    )


def batch_sum(value, mesh: Mesh):
    """Inside ``shard_batch``'s ``fn``: the sum of ``value`` (a pytree) over the devices of
    ``mesh`` (``lax.psum``); with one device, ``value``."""
    if mesh_size(mesh) == 1:
        return value
    return jax.lax.psum(value, mesh.axis_names[0])


def gather(tree):
    """Every leaf as a NumPy array holding the whole value on this process: a leaf split over
    several processes is all-gathered (every process must call this); others are read."""

    def one(leaf):
        if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
            if leaf.is_fully_replicated:
                return np.asarray(leaf.addressable_data(0))
            from jax.experimental import multihost_utils

            return np.asarray(multihost_utils.process_allgather(leaf, tiled=True))
        return np.asarray(leaf)

    return jax.tree.map(one, tree)


def is_writer() -> bool:
    """True on the one process that writes files (process 0; always, without
    ``jax.distributed``)."""
    return jax.process_index() == 0
