"""Test configuration: float64 and two host devices (parallel chains), set before JAX starts."""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")

import jax

jax.config.update("jax_enable_x64", True)

import pytest  # noqa: E402

from inference.compare import compare_deconvolution  # noqa: E402
from models.deconvolution import simulate, three_atoms  # noqa: E402

THREE_ATOMS_SIGMA = 1.0


@pytest.fixture(scope="session")
def three_atom_data():
    """N = 300 draws of the three-atom measure with sigma = 1: (measure, z, x)."""
    measure = three_atoms()
    z, x = simulate(jax.random.PRNGKey(20261122), measure, THREE_ATOMS_SIGMA, 300)
    return measure, z, x


@pytest.fixture(scope="session")
def three_atom_comparison(three_atom_data):
    """attention-EM, NUTS (K = 3, ordered, 2 x 1000 draws) and the oracle on the same data.

    Built once per session: the NUTS run (compile + sample) is the slowest thing in the suite.
    """
    measure, z, x = three_atom_data
    return compare_deconvolution(
        x,
        THREE_ATOMS_SIGMA,
        z_true=z,
        true_measure=measure,
        methods=("attention-em", "nuts", "oracle"),
        key=jax.random.PRNGKey(7),
        nuts_kwargs={"num_warmup": 1000, "num_samples": 1000},
    )
