"""Test configuration: float64 and two host devices (parallel chains), set before JAX starts."""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")

import jax

jax.config.update("jax_enable_x64", True)

import pytest  # noqa: E402

from inference.compare import METHODS, compare_deconvolution  # noqa: E402
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
    """Every method of ``compare_deconvolution`` on the same data, with 300 held-out points:
    NUTS (K = 3, ordered, 2 x 1000 draws), NUTS-DP (8 sticks, 2 x 300), Gibbs (4 x 2000).

    Built once per session: the samplers (compile + sample) are the slowest thing in the suite.
    """
    measure, z, x = three_atom_data
    _, x_heldout = simulate(jax.random.PRNGKey(11), measure, THREE_ATOMS_SIGMA, 300)
    return compare_deconvolution(
        x,
        THREE_ATOMS_SIGMA,
        z_true=z,
        true_measure=measure,
        x_heldout=x_heldout,
        methods=METHODS,
        key=jax.random.PRNGKey(7),
        num_atoms_dp=8,
        nuts_kwargs={"num_warmup": 1000, "num_samples": 1000},
        method_kwargs={"nuts-dp": {"num_warmup": 300, "num_samples": 300}},
    )


def pytest_collection_modifyitems(config, items):
    """Groups for ``pytest -n 2 --dist loadgroup`` (what ``make test`` runs): each file's tests
    stay on one worker, so module fixtures are built once, and every test that uses the
    session's ``three_atom_comparison`` shares one worker, so that comparison is run once."""
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        group = "three_atom_comparison" if "three_atom_comparison" in fixtures else item.path.name
        item.add_marker(pytest.mark.xdist_group(group))
