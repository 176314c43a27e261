"""Calibration over the prior: simulation-based calibration and the coverage of intervals.

Simulation-based calibration (Talts, Betancourt, Simpson, Vehtari and Gelman 2018, "Validating
Bayesian inference algorithms with simulation-based calibration", arXiv:1804.06788, Alg. 1):

    theta~ ~ p(theta),  y~ ~ p(y | theta~),  theta_1..L ~ p(theta | y~)  (the method under test)
    r = #{l : f(theta_l) < f(theta~)}   is uniform on {0, ..., L}  for every test quantity f

when the method samples the posterior exactly and the L draws are independent. Draws are
thinned to about their effective size first (Talts et al., section 4.2: autocorrelated draws make
the ranks U-shaped although the sampler is right). Ties (a CDF of 1 in the truth and in a draw
differs by an ulp) are broken at random: with t ties within a relative tolerance, r = (number
below) + U{0, ..., t}, which keeps r exactly uniform. The PIT value u = (r + V) / (L + 1),
V ~ U(0, 1), is then exactly uniform on (0, 1), the scale of ECDF-PIT plots (Säilynoja, Bürkner
and Vehtari 2022, "Graphical test for discrete uniformity and its applications in goodness-of-
fit evaluation and multiple sample comparison", Stat. Comput. 32; Modrák et al. 2023,
"Simulation-based calibration checking for Bayesian computation: the choice of test quantities
shapes sensitivity", Bayesian Analysis).

Methods that give intervals instead of draws (plug-in empirical Bayes, approximate Gibbs,
filters and smoothers) get ``interval_coverage``: the fraction of replicates' true values inside
their 50% and 90% intervals, with binomial and between-replicate standard errors.

One compilation serves all replicates: a replicate is a pure function of its key
``fold_in(key, index)``, mapped over a chunk of replicates, and the chunk is split over the
devices of ``mesh`` (``attnbayes.sharding``: a one-axis ``jax.sharding.Mesh``, default every
device JAX sees, every process's under ``jax.distributed``). A chunk of C replicates is padded
to a multiple of the D devices with copies of its last replicate (computed and dropped: a chunk
size that is a multiple of D wastes nothing); each
device runs C / D replicates and nothing moves between devices while they run: the replicate
indices go out (4 bytes each) and the test quantities of the draws come back (C x chains x
draws x quantities numbers per chunk), against a whole sampler run per replicate. The ranks
are then computed on the host. The keys are per replicate and the chunks' boundaries do not
depend on the mesh. Each device runs its replicates one after another (``lax.map``), so every
replicate is computed by the same unbatched loop body whatever the mesh and the chunk size: the
same draws and ranks, replicate for replicate, bit for bit. (Replicates ``vmap``-ped together
were not: a replicate's NUTS ranks changed with the batch it shared, for 3 of 24 between chunks
of 24 and 12 on one device and for all 24 between one device and two, as XLA rounds each
batched program its own way and NUTS's adaptation and trajectories amplify an ulp into other
draws. Mapped, NUTS also no longer steps at the pace of the slowest replicate of a batch:
calibrating it is about 2x faster on the K = 2, N = 50 model, ``benchmarks/sbc_nuts.py``.)

Across processes every process makes the same call; each chunk's outputs are gathered to every
process (``sharding.gather``), which computes the same ranks and returns the same DataTree.
Process 0 alone (``sharding.is_writer``) writes the checkpoint: a long study saves every
finished chunk to ``checkpoint`` (an ``.npz`` written atomically) and resumes from it; with
several processes it must be on a file system every process reads (they check that they
resume from the same replicate).

Over 800 lines: simulation-based calibration and interval coverage share one replicate
runner (a chunk program mapped over replicates, sharded over the mesh, checkpointed and
resumed); the uniformity tests and the coverage summary read their outputs.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ... import sharding, validation

if TYPE_CHECKING:
    import pandas as pd
    import xarray as xr

__all__ = [
    "CHECKPOINT_VERSION",
    "PosteriorDraws",
    "coverage_summary",
    "interval_coverage",
    "rank_statistics",
    "sbc",
    "uniformity_tests",
]

CHECKPOINT_VERSION = 1
# "auto" thinning reads the ESS of the first THIN_PILOT replicates (all of the first chunk if it
# is smaller), so that the thinning, and the ranks, do not depend on the chunk size
THIN_PILOT = 16
# a test quantity's round-off: a float32 CDF of 1 is 1 - 2^-24 in the truth and 1 in every
# draw; differences within TIE_ULPS machine epsilons (relative) are ties (``sbc``)
TIE_ULPS = 16


class PosteriorDraws(NamedTuple):
    """What a sampler returns for one data set, for ``sbc``.

    Attributes:
        draws: a pytree with the structure of the simulator's ``truth``; every leaf has leading
            axes (num_chains, num_draws).
        num_divergent: () integer, divergent transitions after warmup (0 for a sampler
            without them).
    """

    draws: Any
    num_divergent: jax.Array


# ----------------------------------------------------------------------------- replicates


def _check_common(num_replicates, chunk_size, mesh):
    num_replicates = validation.check_positive_int("num_replicates", num_replicates)
    chunk_size = validation.check_positive_int("chunk_size", chunk_size)
    mesh = sharding.check_mesh(mesh)
    # the chunks' boundaries do not depend on the mesh; the program pads each chunk to a
    # multiple of the mesh size (``_chunk_program``)
    return num_replicates, min(chunk_size, num_replicates), mesh


def _mesh_attrs(mesh) -> dict:
    """What a reader needs of where a study ran: devices and processes of its mesh."""
    devices = mesh.devices.ravel()
    return {
        "devices": int(devices.size),
        "processes": len({d.process_index for d in devices}),
    }


def _chunk_program(one: Callable, key, mesh, size: int) -> Callable:
    """``indices (C,) -> outputs`` of ``one(fold_in(key, i))`` for a chunk of C <= ``size``
    replicate indices: padded to ``padded_size(size, mesh)`` with copies of the last index,
    split over ``mesh`` (``sharding.shard_batch``), mapped on each device (``lax.map``: one
    replicate at a time, so its arithmetic does not depend on how many share the device) and
    gathered to this process (``sharding.gather``: NumPy arrays, leading axis C)."""
    if _is_typed_key(key):
        impl = jax.random.key_impl(key)
        words = np.asarray(jax.random.key_data(key))

        def rebuild(w):
            return jax.random.wrap_key_data(w, impl=impl)
    else:
        words = np.asarray(key)

        def rebuild(w):
            return w

    def run(words, indices):
        k = rebuild(words)
        return jax.lax.map(lambda i: one(jax.random.fold_in(k, i)), indices)

    program = jax.jit(sharding.shard_batch(run, mesh, (False, True), True))
    padded = sharding.padded_size(size, mesh)

    def chunk(indices):
        count = len(indices)
        indices = np.pad(np.asarray(indices, np.uint32), (0, padded - count), mode="edge")
        outputs = sharding.gather(program(words, indices))
        return jax.tree_util.tree_map(lambda v: v[:count], outputs)

    return chunk


def _key_fingerprint(key) -> str:
    data = np.asarray(jax.random.key_data(key) if _is_typed_key(key) else key)
    return hashlib.sha256(data.astype(np.uint32).tobytes()).hexdigest()[:16]


def _is_typed_key(key) -> bool:
    return jnp.issubdtype(jnp.asarray(key).dtype, jax.dtypes.prng_key)


def _load_checkpoint(path: Path, meta: dict) -> tuple[dict, dict] | None:
    """The saved arrays and meta of ``path`` if it exists; a ValueError naming ``checkpoint``
    if it belongs to another study."""
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as saved:
            arrays = {k: saved[k] for k in saved.files}
    except (OSError, ValueError) as err:
        raise ValueError(
            f"checkpoint: {path.name} is not a calibration checkpoint ({err})"
        ) from err
    if "_meta" not in arrays:
        raise ValueError(f"checkpoint: {path.name} is not a calibration checkpoint (no _meta)")
    saved_meta = json.loads(str(arrays.pop("_meta")))
    if saved_meta.get("format_version") != CHECKPOINT_VERSION:
        raise ValueError(
            f"checkpoint: {path.name} has format version {saved_meta.get('format_version')}, "
            f"this attnbayes reads {CHECKPOINT_VERSION}"
        )
    differ = [k for k, v in meta.items() if saved_meta.get(k) != v]
    if differ:
        raise ValueError(
            f"checkpoint: {path.name} belongs to another study (different {differ}); "
            "remove it or choose another file"
        )
    return arrays, saved_meta


def _save_checkpoint(path: Path, arrays: dict, meta: dict) -> None:
    """Write ``path`` atomically: a temporary file in the same folder, then a rename."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".npz")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, _meta=np.asarray(json.dumps(meta)), **arrays)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _check_checkpoint(checkpoint) -> Path | None:
    if checkpoint is None:
        return None
    if not isinstance(checkpoint, (str, os.PathLike)):
        raise ValueError(f"checkpoint: expected a path or None, got {type(checkpoint).__name__}")
    path = Path(checkpoint)
    if path.suffix != ".npz":
        raise ValueError(f"checkpoint: expected a .npz file name, got {path.name!r}")
    if not path.parent.is_dir():
        raise ValueError(f"checkpoint: folder {path.parent} does not exist")
    if path.exists() and not path.is_file():
        raise ValueError(f"checkpoint: {path.name} exists and is not a file")
    return path


_MESSAGE_BYTES = 512  # of a checkpoint error, shared between processes


def _agreed(done: int, error: str | None) -> None:
    """Every process alike: raise ``error`` (this process's checkpoint refused) or another
    process's, and refuse to resume from checkpoints that differ between processes (a file
    system some process does not see). Under several processes the refusals travel in one
    collective that every process joins, so a process that refused does not leave the others
    waiting in the next one."""
    if jax.process_count() == 1:
        if error is not None:
            raise ValueError(error)
        return
    from jax.experimental import multihost_utils

    text = (error or "").encode()[:_MESSAGE_BYTES].ljust(_MESSAGE_BYTES, b"\0")
    mine = np.concatenate([[done], np.frombuffer(text, np.uint8)]).astype(np.int64)
    seen = np.asarray(multihost_utils.process_allgather(mine)).reshape(-1, 1 + _MESSAGE_BYTES)
    own = jax.process_index()
    for i in sorted(range(len(seen)), key=lambda i: i != own):  # this process's own first
        message = bytes(seen[i, 1:].astype(np.uint8)).rstrip(b"\0").decode(errors="replace")
        if message:
            raise ValueError(message if i == own else f"{message} (on process {i})")
    if np.any(seen[:, 0] != seen[0, 0]):
        raise ValueError(
            "checkpoint: the processes resume from different replicates "
            f"({seen[:, 0].tolist()}); put it on a file system every process reads"
        )


def _run_replicates(
    one, key, num_replicates, chunk_size, mesh, checkpoint, meta, reduce, progress, pilot=1
):
    """Run ``one(key_i)`` for i = 0..num_replicates-1 in compiled chunks over ``mesh``.

    ``reduce(outputs, indices, state)`` turns outputs (per-replicate NumPy arrays, leading
    axis: replicate) into the arrays kept, and may set entries of ``state`` (a dict saved with
    the checkpoint, e.g. the thinning chosen on the first replicates). Its first call sees at
    least ``pilot`` replicates (chunks are held back until then), whatever the chunk size.
    Every process computes the same; process 0 alone writes ``checkpoint``. Returns
    (arrays, state).
    """
    chunk = _chunk_program(one, key, mesh, chunk_size)
    parts: dict[str, list[np.ndarray]] = {}
    state: dict = {}
    done = 0
    path = loaded = None
    if checkpoint is not None:
        error = None
        try:
            path = _check_checkpoint(checkpoint)
            loaded = _load_checkpoint(path, meta)
        except ValueError as err:
            error = str(err)
        if loaded is not None:
            arrays, saved_meta = loaded
            state = saved_meta.get("state", {})
            done = int(saved_meta["done"])
            parts = {k: [v] for k, v in arrays.items()}
        _agreed(done, error)
        if loaded is not None and progress is not None:
            progress(f"resumed from {path.name}: {done}/{num_replicates} replicates")
    pilot = min(pilot, num_replicates)
    held: list = []  # outputs computed but not reduced yet (before the pilot is complete)
    start = done
    while done < num_replicates:
        stop = min(done + chunk_size, num_replicates)
        held.append(chunk(np.arange(done, stop)))
        done = stop
        if done >= pilot:
            outputs = jax.tree_util.tree_map(lambda *v: np.concatenate(v), *held)
            held = []
            for name, value in reduce(outputs, np.arange(start, done), state).items():
                parts.setdefault(name, []).append(value)
            start = done
            if path is not None:
                arrays = {k: np.concatenate(v) for k, v in parts.items()}
                parts = {k: [v] for k, v in arrays.items()}
                if sharding.is_writer():
                    _save_checkpoint(path, arrays, {**meta, "done": done, "state": state})
        if progress is not None:
            progress(f"{done}/{num_replicates} replicates")
    return {k: np.concatenate(v) for k, v in parts.items()}, state


def _flatten_quantities(values: dict, lead: int) -> dict[str, np.ndarray]:
    """name -> (*lead_shape, E) with E the product of the quantity's own shape."""
    out = {}
    for name, v in values.items():
        v = np.asarray(v, dtype=np.float64)
        out[name] = v.reshape(*v.shape[:lead], -1)
    return out


def _element_labels(name: str, shape: tuple[int, ...]) -> list[str]:
    if not shape:
        return [name]
    return [f"{name}[{','.join(map(str, i))}]" for i in np.ndindex(*shape)]


def _check_quantities(values, what: str) -> dict:
    if not isinstance(values, dict) or not values:
        raise ValueError(f"quantities: expected a non-empty dict of arrays from {what}")
    for name in values:
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"quantities: names must be identifiers, got {name!r}")
    return values


# ----------------------------------------------------------------------------- ranks


def rank_statistics(
    truth: np.ndarray,
    draws: np.ndarray,
    rng: np.random.Generator,
    *,
    tolerance: float = 1e-9,
) -> tuple[np.ndarray, np.ndarray]:
    """Ranks of ``truth`` (E,) among ``draws`` (L, E) with random tie-breaking, and PIT values.

        r = #{l : d_l < t - tol} + U{0, ..., #{l : |d_l - t| <= tol}},   tol = tolerance (1 + |t|)
        u = (r + V) / (L + 1),  V ~ U(0, 1)

    Under calibration r is uniform on {0..L} and u on (0, 1), ties or not.
    """
    truth = np.asarray(truth, dtype=np.float64)
    draws = np.asarray(draws, dtype=np.float64)
    scale = tolerance * (1.0 + np.abs(truth))
    diff = draws - truth
    below = np.sum(diff < -scale, axis=0)
    ties = np.sum(np.abs(diff) <= scale, axis=0)
    ranks = below + np.floor(rng.random(truth.shape) * (ties + 1)).astype(np.int64)
    pit = (ranks + rng.random(truth.shape)) / (draws.shape[0] + 1)
    return ranks, pit


def _choose_thin(q_draws: dict[str, np.ndarray]) -> tuple[int, np.ndarray]:
    """The thinning that leaves about the effective number of draws, from one chunk.

    ESS (bulk, rank-normalised; Vehtari et al. 2021) of every scalar quantity in every replicate;
    per replicate the smallest over quantities that vary; thin = floor(C S / median ESS), at
    least 1. Returns (thin, ess per replicate).
    """
    from arviz_stats.base import array_stats

    per_replicate = []
    for v in q_draws.values():  # (R, C, S, E)
        moved = np.moveaxis(v, -1, 1)  # (R, E, C, S)
        with np.errstate(all="ignore"):
            ess = np.asarray(array_stats.ess(moved, chain_axis=-2, draw_axis=-1, method="bulk"))
        constant = np.ptp(moved, axis=(-2, -1)) == 0
        per_replicate.append(np.where(constant | ~np.isfinite(ess), np.inf, ess))
    ess = np.min(np.concatenate(per_replicate, axis=1), axis=1)
    total = next(iter(q_draws.values())).shape[1] * next(iter(q_draws.values())).shape[2]
    finite = ess[np.isfinite(ess)]
    if finite.size == 0:
        return 1, ess
    return max(1, int(total // max(np.median(finite), 1.0))), ess


def _tie_tolerance(tolerance: float, dtype) -> float:
    """``tolerance``, raised to ``TIE_ULPS`` machine epsilons of a floating ``dtype``."""
    if np.issubdtype(dtype, np.floating):
        return max(tolerance, TIE_ULPS * float(np.finfo(dtype).eps))
    return tolerance


def _seed_words(key) -> list[int]:
    data = np.asarray(jax.random.key_data(key) if _is_typed_key(key) else key)
    return [int(w) for w in data.astype(np.uint32).ravel()]


def sbc(
    key: jax.Array,
    simulate: Callable,
    posterior: Callable,
    quantities: Callable,
    *,
    num_replicates: int,
    chunk_size: int = 24,
    thin: int | str = "auto",
    mesh: jax.sharding.Mesh | None = None,
    tie_tolerance: float = 1e-9,
    checkpoint: str | os.PathLike | None = None,
    study: dict | None = None,
    progress: Callable[[str], None] | None = None,
) -> xr.DataTree:
    """Simulation-based calibration of ``posterior`` (Talts et al. 2018, Alg. 1; module doc).

    Args:
        key: a ``jax.random`` key; replicate i uses ``fold_in(key, i)``.
        simulate: ``simulate(key) -> (truth, data)``, a draw from the *fixed* prior and the data
            given it (pytrees of arrays). Pure and traceable.
        posterior: ``posterior(key, data) -> PosteriorDraws`` whose ``draws`` have the
            structure of ``truth`` with leading (num_chains, num_draws) axes. Pure and traceable.
        quantities: ``quantities(values, data) -> dict[str, array]``: the test quantities,
            applied to the truth and to every draw (permutation-invariant ones for mixtures).
        num_replicates: number of simulated data sets.
        chunk_size: replicates per compiled call (split over the mesh's D devices, padded to
            a multiple of D; each device runs its share one after another). The result does
            not depend on it (a multiple of D wastes nothing); a chunk is also the unit of
            progress messages and checkpoints, and its outputs are held until it ends.
        thin: keep every ``thin``-th draw of each chain; "auto" chooses it on the first
            ``THIN_PILOT`` replicates (``floor(C S / median over them of the smallest bulk
            ESS)``).
        mesh: a one-axis ``jax.sharding.Mesh`` the replicates are split over
            (``attnbayes.sharding.batch_mesh``), or None for every device (every process's
            under ``jax.distributed``; module docstring). The result does not depend on it.
        tie_tolerance: relative tolerance below which a draw ties with the truth; raised to
            ``TIE_ULPS`` machine epsilons of a floating quantity's dtype (round-off of a few
            ulps is a tie, not a rank: 16 eps = 1.9e-6 in float32).
        checkpoint: a ``.npz`` path; finished chunks are saved there and a later call with the
            same study resumes from it (``study`` plus the key, sizes and thinning must match).
        study: JSON-serialisable settings that identify the study in the checkpoint (model,
            method, sizes); a checkpoint of another study is refused.
        progress: called with a message after every chunk.

    Returns:
        An ArviZ DataTree with groups ``ranks`` (integer ranks, -1 for a failed replicate),
        ``prior_sbc`` (PIT values, NaN for a failed replicate; ``azp.plot_ecdf_pit(dt,
        sample_dims="replicate")``), ``truth`` (the test quantities' true values),
        ``replicates`` (``failed``, ``num_divergent``, ``ess``) and ``uniformity`` (the table of
        ``uniformity_tests``); attrs give the sizes, thinning, counts of failed and
        divergent replicates, and where the study ran (``devices`` and ``processes`` of the
        mesh; the numbers do not depend on them). A replicate fails when its truth, a draw's
        test quantity or its divergence count is not finite; it is counted, never silently
        dropped.
    """
    import xarray as xr

    validation.check_key("key", key)
    for name, fn in (("simulate", simulate), ("posterior", posterior), ("quantities", quantities)):
        if not callable(fn):
            raise ValueError(f"{name}: expected a callable, got {type(fn).__name__}")
    num_replicates, chunk_size, mesh = _check_common(num_replicates, chunk_size, mesh)
    if thin != "auto":
        thin = validation.check_positive_int("thin", thin)
    tie_tolerance = validation.check_positive_scalar("tie_tolerance", tie_tolerance)
    study = dict(study or {})
    try:
        json.dumps(study)
    except TypeError as err:
        raise ValueError(f"study: must be JSON-serialisable ({err})") from err

    # probe the shapes once, abstractly (no compile): truth, draws and quantities
    probe_key = jax.random.fold_in(key, 0)
    truth_shape, data_shape = jax.eval_shape(simulate, probe_key)
    post_shape = jax.eval_shape(posterior, probe_key, data_shape)
    if not isinstance(post_shape, PosteriorDraws):
        raise ValueError("posterior: must return a PosteriorDraws(draws, num_divergent)")
    q_shape = _check_quantities(
        jax.eval_shape(quantities, truth_shape, data_shape), "quantities(truth, data)"
    )
    leaves = jax.tree_util.tree_leaves(post_shape.draws)
    if not leaves or any(len(v.shape) < 2 for v in leaves):
        raise ValueError("posterior: every leaf of draws needs (num_chains, num_draws) axes")
    num_chains, num_draws = leaves[0].shape[:2]
    names = sorted(q_shape)
    shapes = {n: tuple(q_shape[n].shape) for n in names}
    tolerances = {n: _tie_tolerance(tie_tolerance, q_shape[n].dtype) for n in names}

    def one(k):
        k_sim, k_post = jax.random.split(k)
        truth, data = simulate(k_sim)
        post = posterior(k_post, data)
        q_true = quantities(truth, data)
        q_draws = jax.vmap(jax.vmap(lambda d: quantities(d, data)))(post.draws)
        return q_true, q_draws, jnp.asarray(post.num_divergent, jnp.float32)

    rank_words = _seed_words(jax.random.fold_in(key, 2**31 - 1))

    def reduce(outputs, indices, state):
        q_true, q_draws, divergent = outputs
        q_true = _flatten_quantities({n: q_true[n] for n in names}, 1)
        q_draws = _flatten_quantities({n: q_draws[n] for n in names}, 3)
        ess = _choose_thin(q_draws)[1]
        if "thin" not in state:
            pilot = {n: v[:THIN_PILOT] for n, v in q_draws.items()}
            state["thin"] = _choose_thin(pilot)[0] if thin == "auto" else thin
        step = state["thin"]
        failed = ~np.isfinite(divergent)
        for n in names:
            failed |= ~np.isfinite(q_true[n]).all(axis=1)
            failed |= ~np.isfinite(q_draws[n]).all(axis=(1, 2, 3))
        out = {"failed": failed, "num_divergent": divergent, "ess": ess}
        for n in names:
            kept = q_draws[n][:, :, ::step].reshape(len(indices), -1, q_draws[n].shape[-1])
            ranks = np.full(q_true[n].shape, -1, np.int64)
            pit = np.full(q_true[n].shape, np.nan)
            for j, (i, bad) in enumerate(zip(indices, failed, strict=True)):
                if not bad:
                    rng = np.random.default_rng([*rank_words, int(i), names.index(n)])
                    ranks[j], pit[j] = rank_statistics(
                        q_true[n][j], kept[j], rng, tolerance=tolerances[n]
                    )
            out[f"rank__{n}"], out[f"pit__{n}"], out[f"truth__{n}"] = ranks, pit, q_true[n]
            state["num_ranked_draws"] = int(kept.shape[1])
        return out

    meta = {
        "format_version": CHECKPOINT_VERSION,
        "kind": "sbc",
        "key": _key_fingerprint(key),
        "num_replicates": num_replicates,
        "chunk_size": chunk_size,
        "thin": thin,
        "tie_tolerance": tolerances,
        "names": names,
        "shapes": {n: list(s) for n, s in shapes.items()},
        "num_chains": int(num_chains),
        "num_draws": int(num_draws),
        "study": study,
    }
    arrays, state = _run_replicates(
        one,
        key,
        num_replicates,
        chunk_size,
        mesh,
        checkpoint,
        meta,
        reduce,
        progress,
        pilot=THIN_PILOT if thin == "auto" else 1,
    )

    replicate = np.arange(num_replicates)

    def dataset(prefix):
        data_vars, coords = {}, {"replicate": replicate}
        for n in names:
            values = arrays[f"{prefix}__{n}"].reshape(num_replicates, *shapes[n])
            dims = ["replicate", *(f"{n}_dim_{d}" for d in range(len(shapes[n])))]
            data_vars[n] = (dims, values)
            coords.update(_element_coords(dims[1:], shapes[n]))
        return xr.Dataset(data_vars, coords=coords)

    num_ranked = int(state["num_ranked_draws"])
    pit = dataset("pit")
    tests = uniformity_tests(pit)
    failed = arrays["failed"].astype(bool)
    divergent = arrays["num_divergent"]
    attrs = {
        "num_replicates": num_replicates,
        "num_failed": int(failed.sum()),
        "num_divergent_replicates": int(np.sum(np.nan_to_num(divergent) > 0)),
        "num_divergent": int(np.nansum(divergent)),
        "num_chains": int(num_chains),
        "num_draws": int(num_draws),
        "thin": int(state["thin"]),
        "num_ranked_draws": num_ranked,
        "tie_tolerance": tie_tolerance,
        "chunk_size": chunk_size,
        **_mesh_attrs(mesh),
        "multiplicity": "holm",
        "study": json.dumps(study),
    }
    return _tree(
        {
            "ranks": dataset("rank"),
            "prior_sbc": pit,
            "truth": dataset("truth"),
            "replicates": xr.Dataset(
                {
                    "failed": ("replicate", failed),
                    "num_divergent": ("replicate", divergent),
                    "ess": ("replicate", arrays["ess"]),
                },
                coords={"replicate": replicate},
            ),
            "uniformity": xr.Dataset.from_dataframe(tests.set_index("quantity")),
        },
        attrs,
    )


def _element_coords(dims, shape) -> dict:
    """0-based coordinates for a quantity's element dimensions: ArviZ selects panels by
    coordinate (``plot_ecdf_pit`` fails on a dimension without one)."""
    return {d: np.arange(size) for d, size in zip(dims, shape, strict=True)}


def _tree(groups: dict, attrs: dict):
    import xarray as xr

    tree = xr.DataTree.from_dict(groups)
    tree.attrs.update(attrs)
    return tree


# ----------------------------------------------------------------------------- uniformity


def _holm(p_values: np.ndarray) -> np.ndarray:
    """Holm's step-down adjustment (Holm 1979): controls the family-wise error rate."""
    p = np.asarray(p_values, dtype=np.float64)
    order = np.argsort(p)
    m = p.size
    adjusted = np.empty(m)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adjusted[i] = running
    return adjusted


def uniformity_tests(pit: xr.Dataset, *, num_bins: int | None = None) -> pd.DataFrame:
    """Chi-square and Kolmogorov-Smirnov tests of uniform PIT values, per scalar quantity.

    For each scalar element: Pearson's chi-square on ``num_bins`` equal bins of u (default
    min(20, max(2, n // 5)): at least 5 expected per bin) and the KS test against U(0, 1), on the
    n replicates with a finite u. Multiplicity: Holm's adjustment over all 2 E tests (E scalar
    quantities), ``p_adjusted``, is what a verdict reads; ``p_min`` is the smaller of each row's
    two adjusted p-values. Also per row: ``mean_pit`` (0.5 under calibration, standard error
    1 / sqrt(12 n)) and ``tail_fraction``, the fraction of u outside [0.05, 0.95] (0.1).
    """
    import pandas as pd
    from scipy import stats

    rows = []
    for name in pit.data_vars:
        da = pit[name]
        values = np.asarray(da.values, dtype=np.float64).reshape(da.sizes["replicate"], -1)
        shape = tuple(da.sizes[d] for d in da.dims if d != "replicate")
        for j, label in enumerate(_element_labels(name, shape)):
            u = values[:, j]
            u = u[np.isfinite(u)]
            n = u.size
            if n < 2:
                rows.append({"quantity": label, "n": n})
                continue
            bins = num_bins or min(20, max(2, n // 5))
            counts = np.bincount(np.minimum((u * bins).astype(int), bins - 1), minlength=bins)
            chi2 = stats.chisquare(counts)
            ks = stats.kstest(u, "uniform")
            rows.append(
                {
                    "quantity": label,
                    "n": n,
                    "num_bins": bins,
                    "chi2": float(chi2.statistic),
                    "chi2_p": float(chi2.pvalue),
                    "ks": float(ks.statistic),
                    "ks_p": float(ks.pvalue),
                    "mean_pit": float(u.mean()),
                    "tail_fraction": float(np.mean((u < 0.05) | (u > 0.95))),
                }
            )
    table = pd.DataFrame(rows)
    if "chi2_p" in table:
        p = table[["chi2_p", "ks_p"]].to_numpy().ravel()
        ok = np.isfinite(p)
        adjusted = np.full(p.shape, np.nan)
        adjusted[ok] = _holm(p[ok])
        adjusted = adjusted.reshape(-1, 2)
        table["chi2_p_adjusted"], table["ks_p_adjusted"] = adjusted[:, 0], adjusted[:, 1]
        table["p_min"] = np.fmin(adjusted[:, 0], adjusted[:, 1])
    return table


# ----------------------------------------------------------------------------- coverage


def interval_coverage(
    key: jax.Array,
    simulate: Callable,
    posterior_cdf: Callable,
    targets: Callable,
    *,
    num_replicates: int,
    levels: tuple[float, ...] = (0.5, 0.9),
    chunk_size: int = 24,
    mesh: jax.sharding.Mesh | None = None,
    checkpoint: str | os.PathLike | None = None,
    study: dict | None = None,
    progress: Callable[[str], None] | None = None,
) -> xr.DataTree:
    """Coverage of a method's central intervals over the prior, from its PIT values.

    For replicate r: (truth, data) = simulate(k_r), t = targets(truth, data) (name -> array),
    and ``posterior_cdf(k_r', data, t)`` returns name -> (F(t-), F(t)), the method's posterior
    probability below and at-or-below each true value. The randomised PIT
    u = F(t-) + V (F(t) - F(t-)), V ~ U(0, 1) (clipped to [0, 1] against round-off in F), is
    exactly uniform when the method's posterior is right, discrete (atoms of a fitted nu) or not
    (Czado, Gneiting and Held 2009, "Predictive model assessment for count data", Biometrics 65,
    section 2.1); the equal-tailed interval of level l covers t iff
    (1 - l) / 2 <= u <= (1 + l) / 2, which for a discrete posterior is the randomised interval
    (a plain one, with atoms for ends, over-covers by construction). Per replicate, level and
    name: the fractions below, inside and above. A replicate whose PIT is
    not finite fails (counted, left out of the summary).

    Replicates, chunks, ``mesh``, ``checkpoint``, ``study`` and ``progress`` as in ``sbc``
    (module docstring: the replicates split over the mesh's devices, the same result on any
    mesh and chunk size).

    Returns a DataTree: one group per target name with ``pit`` (replicate, *shape) and
    ``covered``, ``below``, ``above`` (replicate, level); ``replicates`` (``failed``);
    ``coverage`` (``coverage_summary``); attrs give the sizes, levels and where the study ran
    (``devices``, ``processes``).
    """
    import xarray as xr

    validation.check_key("key", key)
    for name, fn in (
        ("simulate", simulate),
        ("posterior_cdf", posterior_cdf),
        ("targets", targets),
    ):
        if not callable(fn):
            raise ValueError(f"{name}: expected a callable, got {type(fn).__name__}")
    num_replicates, chunk_size, mesh = _check_common(num_replicates, chunk_size, mesh)
    levels = tuple(float(v) for v in np.atleast_1d(np.asarray(levels, dtype=np.float64)))
    if not levels or not all(0.0 < v < 1.0 for v in levels):
        raise ValueError(f"levels: expected probabilities in (0, 1), got {levels}")
    study = dict(study or {})
    probe = jax.random.fold_in(key, 0)
    truth_shape, data_shape = jax.eval_shape(simulate, probe)
    t_shape = _check_quantities(jax.eval_shape(targets, truth_shape, data_shape), "targets")
    names = sorted(t_shape)
    c_shape = jax.eval_shape(posterior_cdf, probe, data_shape, t_shape)
    for n in names:
        if not isinstance(c_shape, dict) or n not in c_shape or len(c_shape[n]) != 2:
            raise ValueError(
                f"posterior_cdf: must return (F(t-), F(t)) for every target, not {n!r}"
            )
        for part in c_shape[n]:
            if tuple(part.shape) != tuple(t_shape[n].shape):
                raise ValueError(
                    f"posterior_cdf: {n!r} has shape {part.shape}, expected {t_shape[n].shape}"
                )
    lv = np.asarray(levels)

    def one(k):
        k_sim, k_fit, k_pit = jax.random.split(k, 3)
        truth, data = simulate(k_sim)
        target = targets(truth, data)
        cdf = posterior_cdf(k_fit, data, target)
        out = {}
        for j, n in enumerate(names):
            below_t, at_t = cdf[n]
            v = jax.random.uniform(jax.random.fold_in(k_pit, j), jnp.shape(below_t))
            u = below_t + v * (at_t - below_t)
            flat = jnp.reshape(u, (1, -1))
            lo = jnp.asarray((1 - lv) / 2, flat.dtype)[:, None]
            hi = jnp.asarray((1 + lv) / 2, flat.dtype)[:, None]
            below = jnp.mean((flat < lo).astype(flat.dtype), axis=1)
            above = jnp.mean((flat > hi).astype(flat.dtype), axis=1)
            out[n] = (u, below, above)
        return out

    def reduce(outputs, indices, state):
        out, failed = {}, np.zeros(len(indices), bool)
        for n in names:
            u, below, above = outputs[n]
            failed |= ~np.isfinite(u.reshape(len(indices), -1)).all(axis=1)
            out[f"pit__{n}"], out[f"below__{n}"], out[f"above__{n}"] = u, below, above
        out["failed"] = failed
        return out

    meta = {
        "format_version": CHECKPOINT_VERSION,
        "kind": "coverage",
        "key": _key_fingerprint(key),
        "num_replicates": num_replicates,
        "chunk_size": chunk_size,
        "levels": list(levels),
        "names": names,
        "study": study,
    }
    arrays, _ = _run_replicates(
        one, key, num_replicates, chunk_size, mesh, checkpoint, meta, reduce, progress
    )
    failed = arrays["failed"].astype(bool)
    coords = {"replicate": np.arange(num_replicates), "level": list(levels)}
    groups = {}
    for n in names:
        shape = tuple(t_shape[n].shape)
        below = np.where(failed[:, None], np.nan, arrays[f"below__{n}"])
        above = np.where(failed[:, None], np.nan, arrays[f"above__{n}"])
        # F(t) summed in float32 can exceed 1 by an ulp: a PIT value is in [0, 1] (plotting
        # code reads values above 1 as ranks and rescales them)
        u = np.clip(arrays[f"pit__{n}"], 0.0, 1.0)
        pit = np.where(failed.reshape(-1, *([1] * len(shape))), np.nan, u)
        dims = ["replicate", *(f"{n}_dim_{d}" for d in range(len(shape)))]
        groups[n] = xr.Dataset(
            {
                "pit": (dims, pit),
                "below": (("replicate", "level"), below),
                "above": (("replicate", "level"), above),
                "covered": (("replicate", "level"), 1.0 - below - above),
            },
            coords={**coords, **_element_coords(dims[1:], shape)},
            attrs={"num_elements": int(np.prod(shape))},
        )
    groups["replicates"] = xr.Dataset({"failed": ("replicate", failed)}, coords=coords)
    tree = _tree(
        groups,
        {
            "num_replicates": num_replicates,
            "num_failed": int(failed.sum()),
            "levels": list(levels),
            "chunk_size": chunk_size,
            **_mesh_attrs(mesh),
            "study": json.dumps(study),
        },
    )
    summary = coverage_summary(tree)
    tree["coverage"] = xr.DataTree(
        xr.Dataset.from_dataframe(summary.set_index(["target", "level"]))
    )
    return tree


def coverage_summary(tree: xr.DataTree) -> pd.DataFrame:
    """Coverage per target and level, with two standard errors.

    ``se_binomial`` = sqrt(c (1 - c) / n) with n = replicates x elements, exact when the
    elements are independent; ``se_replicates`` = the standard deviation of the per-replicate
    coverages over sqrt(R), which allows for the dependence between the elements of one
    replicate (they share the fitted prior). A verdict reads the larger, ``se``. ``below`` and
    ``above`` are the mean fractions missed on each side.
    """
    import pandas as pd

    rows = []
    failed = np.asarray(tree["replicates"]["failed"].values, bool)
    for name, node in tree.children.items():
        if name in ("replicates", "coverage"):
            continue
        ds = node.to_dataset()
        elements = int(ds.attrs.get("num_elements", 1))
        for j, level in enumerate(np.asarray(ds["level"].values)):
            covered = np.asarray(ds["covered"].values[:, j])[~failed]
            r = covered.size
            c = float(covered.mean()) if r else np.nan
            se_b = float(np.sqrt(c * (1 - c) / max(r * elements, 1))) if r else np.nan
            se_r = float(covered.std(ddof=1) / np.sqrt(r)) if r > 1 else np.nan
            rows.append(
                {
                    "target": name,
                    "level": float(level),
                    "coverage": c,
                    "se_binomial": se_b,
                    "se_replicates": se_r,
                    "se": float(np.fmax(se_b, se_r)),
                    "below": float(np.asarray(ds["below"].values[:, j])[~failed].mean())
                    if r
                    else np.nan,
                    "above": float(np.asarray(ds["above"].values[:, j])[~failed].mean())
                    if r
                    else np.nan,
                    "num_replicates": r,
                    "num_elements": elements,
                }
            )
    return pd.DataFrame(rows)
