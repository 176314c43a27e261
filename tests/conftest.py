"""Test configuration: float64 and two host devices (parallel chains), set before JAX starts."""

import os
from pathlib import Path

# XLA's expensive LLVM passes off: compiling dominates the suite (hundreds of small programs),
# and these passes only speed up the generated code (about 20% less compile time measured).
os.environ.setdefault(
    "XLA_FLAGS",
    "--xla_force_host_platform_device_count=2 --xla_llvm_disable_expensive_passes=true",
)
os.environ.setdefault("MPLBACKEND", "Agg")  # the CLI sets Agg itself; direct calls use this
# The report runs in this process unless a test asks for workers (app/report/test_report.py
# does): monkeypatched runners then reach it, and the two pytest workers already fill the cores.
os.environ["ATTNBAYES_WORKERS"] = "1"
# A persistent compilation cache inside the checkout (.cache/jax, ignored by git): a second
# `make test` reads the programs the first compiled, while a fresh clone (and CI) starts empty.
# The pytest workers and the processes tests start (the CLI, the report's workers) inherit it
# from the environment and share it (attnbayes.app.cache locks it, so no process reads an entry
# another is still writing). ATTNBAYES_TEST_CACHE_DIR moves it (`off`: no cache).
ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("ATTNBAYES_TEST_CACHE_DIR", str(ROOT / ".cache" / "jax"))
os.environ["ATTNBAYES_CACHE_DIR"] = os.environ["ATTNBAYES_TEST_CACHE_DIR"]

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

from attnbayes.app.cache import enable_compilation_cache  # noqa: E402

enable_compilation_cache()  # tests that call the library in-process share it too

import pytest  # noqa: E402

from attnbayes.inference.deconvolution.comparison import METHODS, compare_deconvolution  # noqa: E402
from attnbayes.models.deconvolution import simulate, three_atoms  # noqa: E402

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
        jax.random.PRNGKey(7),
        x,
        THREE_ATOMS_SIGMA,
        z_true=z,
        true_measure=measure,
        x_heldout=x_heldout,
        methods=METHODS,
        num_atoms_dp=8,
        nuts_kwargs={"num_warmup": 1000, "num_samples": 1000},
        method_kwargs={"nuts-dp": {"num_warmup": 300, "num_samples": 300}},
    )


# Under xdist the groups are scheduled in this order, the longest first (the report about
# 140 s of work on two cores, the comparison of `-m slow` about 50-130), so that no long group
# starts last while the other worker idles; the other groups follow in collection order.
# `make test` passes --no-loadscope-reorder so that xdist keeps it.
LONGEST_FIRST = ("app/report/test_report.py", "three_atom_comparison")
TESTS = ROOT / "tests"


def _group(item) -> str:
    """A test's xdist group: the session comparison's, else its module's ``XDIST_GROUP`` (files
    that compile the same programs, e.g. one sampler at the same shapes, share a worker and so
    its in-process compilation cache), else its file name."""
    fixtures = getattr(item, "fixturenames", ())
    if "three_atom_comparison" in fixtures:
        return "three_atom_comparison"
    module = getattr(item, "module", None)
    return getattr(module, "XDIST_GROUP", None) or item.path.relative_to(TESTS).as_posix()


@pytest.fixture
def empty_compilation_cache(tmp_path):
    """An empty persistent cache of the test's own, for tests that count compilations (a
    warm cache turns some of them into reads); the session's cache is put back after."""
    before = jax.config.jax_compilation_cache_dir
    enable_compilation_cache(tmp_path / "jax-cache")
    yield
    if before:
        enable_compilation_cache(before)


@pytest.fixture
def full_tracebacks():
    """JAX hides its own frames from tracebacks by default; show them so they can be seen."""
    old = jax.config.jax_traceback_filtering
    jax.config.update("jax_traceback_filtering", "off")
    yield
    jax.config.update("jax_traceback_filtering", old)


def pytest_configure(config):
    config.addinivalue_line("markers", "xdist_group(name): tests that share one xdist worker")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Groups for ``pytest -n 2 --dist loadgroup`` (what ``make test`` runs): each file's tests
    stay on one worker, so module fixtures are built once, and every test that uses the
    session's ``three_atom_comparison`` shares one worker, so that comparison is run once.
    On an xdist worker the items are also sorted by ``LONGEST_FIRST`` (stable otherwise).

    ``tryfirst``: xdist reads the ``xdist_group`` markers in its own hook, so they must be
    there before it runs."""
    for item in items:
        item.add_marker(pytest.mark.xdist_group(_group(item)))
    if getattr(config.option, "loadgroup", False):
        rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
        items.sort(key=lambda item: rank.get(_group(item), len(rank)))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session):
    """Make the groups take effect on pytest >= 9.2 (pytest-xdist issue #1386).

    On a loadgroup worker, xdist tells the scheduler an item's group by appending ``@group``
    to its node id. It writes the legacy ``_nodeid`` field, which pytest 9.2's structured ids
    no longer read, so every test was scheduled on its own: the session fixture was built on
    both workers and each file's module fixtures and compiled functions twice. Here the suffix
    is written where pytest 9.2 reads it, only where it is missing, before xdist's own
    ``pytest_collection_finish`` sends the ids to the scheduler (``tryfirst``)."""
    if not getattr(session.config.option, "loadgroup", False):
        return
    for item in session.items:
        group = "_".join(sorted({str(m.args[0]) for m in item.iter_markers("xdist_group")}))
        if not group or item.nodeid.endswith(f"@{group}"):
            continue
        node_id = getattr(item, "_id", None)
        if node_id is not None and hasattr(node_id, "parse"):
            item._id = type(node_id).parse(f"{item.nodeid}@{group}")
