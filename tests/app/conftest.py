"""What the tests of the ``attnbayes`` commands share: the command run in-process, the listing
of an output folder, a user's deconvolution and tracking files, and a guard that fails a test
when a method starts on input that should have been refused."""

import numpy as np
import pandas as pd
import pytest

from attnbayes.app.cli import main
from attnbayes.models.switching import get_scenario


@pytest.fixture
def run_cli(capsys):
    """``run_cli(argv)`` runs ``main(argv)`` -> (exit status, stdout, stderr); argparse exits
    count as statuses."""

    def run(argv):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exit_info:
            code = exit_info.code
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture
def listing():
    """``listing(folder)``: the sorted relative paths under ``folder`` (None if it is absent)."""

    def files(folder):
        if not folder.exists():
            return None
        return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))

    return files


@pytest.fixture(scope="module")
def dec_csv(tmp_path_factory):
    """N = 60 draws of 0.5 delta(-2) + 0.3 delta(0) + 0.2 delta(3) plus N(0, 1) noise, one
    column with a header (NumPy draws: no JAX compilation for the data)."""
    rng = np.random.default_rng(5)
    x = rng.choice([-2.0, 0.0, 3.0], size=60, p=[0.5, 0.3, 0.2]) + rng.normal(size=60)
    path = tmp_path_factory.mktemp("data") / "scores.csv"
    pd.DataFrame({"score": x}).to_csv(path, index=False)
    return path, x


@pytest.fixture(scope="module")
def track_csv(tmp_path_factory):
    """T = 40 steps of the maneuvering target (straight, a turn from step 15 to 26, straight),
    its 2 positions measured with sd 10, steps 4, 5 and 17 (0-based) missing."""
    rng = np.random.default_rng(8)
    dynamics = np.asarray(get_scenario("maneuvering-target").dynamics_matrices)
    state, y = np.array([0.0, 10.0, 0.0, 0.0]), []
    for mode in np.repeat([0, 1, 0], [15, 12, 13]):
        state = dynamics[mode] @ state + rng.normal(0.0, [0.05, 0.1, 0.05, 0.1])
        y.append(state[[0, 2]] + rng.normal(0.0, 10.0, 2))
    y = np.array(y)
    y[[4, 5, 17]] = np.nan
    path = tmp_path_factory.mktemp("data") / "track.csv"
    pd.DataFrame(y, columns=["px", "py"]).to_csv(path, index=False)
    return path, y


@pytest.fixture
def refuse_methods(monkeypatch):
    """``refuse_methods(message)`` replaces every method the commands start (comparisons,
    filters, samplers, fits) by a stub raising ``AssertionError(message)``, and returns it."""

    def apply(message: str):
        def refuse(*args, **kwargs):
            raise AssertionError(message)

        import attnbayes.inference.deconvolution.comparison
        import attnbayes.inference.mcmc
        import attnbayes.inference.switching
        import attnbayes.inference.switching.filters
        import attnbayes.inference.switching.gibbs
        import attnbayes.inference.switching.particle

        monkeypatch.setattr(
            attnbayes.inference.deconvolution.comparison, "compare_deconvolution", refuse
        )
        for name in ("imm_filter", "gpb1_filter", "gpb2_filter"):
            monkeypatch.setattr(attnbayes.inference.switching.filters, name, refuse)
        monkeypatch.setattr(attnbayes.inference.switching.particle, "rbpf", refuse)
        monkeypatch.setattr(attnbayes.inference.switching.gibbs, "run_switching_gibbs", refuse)
        # the commands import fit_switching from the package when --fit starts
        monkeypatch.setattr(attnbayes.inference.switching, "fit_switching", refuse)
        monkeypatch.setattr(attnbayes.inference.mcmc, "run_nuts", refuse)
        return refuse

    return apply


@pytest.fixture
def no_jax_work(refuse_methods):
    """Fail the test if a method starts: bad input must be refused before any JAX work."""
    refuse_methods("JAX work started on bad input")
