"""One process of tests/app/test_distributed.py's two-process run (jax.distributed on 127.0.0.1).

    python -P tests/support/two_processes.py HOST:PORT PROCESS_ID NUM_PROCESSES OUT.npz

joins the run through the app's launcher (``attnbayes.app.devices``), then runs the sharded
batch entry points over the global mesh (every device of every process, the default) on the
data of ``problem()``: the streamed E-step (``em_step`` and ``log_likelihood`` with
``block_size``) and, when its API has ``block_size``, the streamed NPMLE. Process 0 writes the
results to OUT.npz (the others write nothing). The test compares them with the same calls on
one device of its own process. Also ``worker_devices``: a task that returns the ``XLA_FLAGS``
a report worker started with and its device count (tests/app/test_parallel.py).
"""

import os
import sys

import numpy as np

BLOCK_SIZE = 8


def problem():
    """N = 203 rows (odd: the global mesh pads them), K = 5 atoms, one s_i per row; NumPy
    draws, the same on every process."""
    rng = np.random.default_rng(39)
    n, k = 203, 5
    atoms = np.linspace(-3.0, 3.0, k)
    z = rng.choice(atoms, size=n)
    sigma = rng.uniform(0.6, 1.4, size=n)
    x = z + sigma * rng.normal(size=n)
    weights = np.full(k, 1.0 / k)
    return x, sigma, atoms + 0.3, weights


def results(mesh=None) -> dict[str, np.ndarray]:
    """The batch entry points on ``problem()`` over ``mesh`` (None: every device)."""
    from attnbayes.inference.deconvolution import em_step, log_likelihood, npmle
    from attnbayes.sharding import gather

    x, sigma, atoms, weights = problem()
    out = {}
    new_atoms, new_weights = em_step(
        x, atoms, weights, sigma, update_weights=True, block_size=BLOCK_SIZE, mesh=mesh
    )
    out["em_atoms"], out["em_weights"] = gather((new_atoms, new_weights))
    loglik = log_likelihood(x, atoms, weights, sigma, block_size=BLOCK_SIZE, mesh=mesh)
    out["log_likelihood"] = gather(loglik)
    fit = npmle(x, sigma, grid_size=20, block_size=BLOCK_SIZE, mesh=mesh)
    out["npmle_weights"] = gather(fit.weights)
    return out


def worker_devices(*, progress):
    """A report worker's task: the ``XLA_FLAGS`` it started with and its device count."""
    import jax

    return os.environ.get("XLA_FLAGS", ""), jax.local_device_count()


def main(argv) -> int:
    coordinator, process_id, num_processes, out = argv
    from attnbayes.app import devices

    launch = devices.launch_settings(coordinator, process_id, num_processes, environ={})
    devices.use_every_core()
    devices.join(launch, timeout_s=60)
    import jax

    jax.config.update("jax_enable_x64", True)
    from attnbayes.sharding import is_writer

    assert jax.process_count() == launch.num_processes
    found = results()
    found["num_devices"] = np.asarray(jax.device_count())
    if is_writer():
        np.savez(out, **found)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
