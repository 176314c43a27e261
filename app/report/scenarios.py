"""The report's built-in data sets and sizes (quick and full runs), its sections and colours."""

from __future__ import annotations

from typing import NamedTuple

METHOD_COLORS = {
    "attention-em": "tab:blue",
    "npmle": "tab:purple",
    "nuts": "tab:orange",
    "nuts-dp": "tab:brown",
    "gibbs": "tab:red",
    "approx-gibbs": "tab:cyan",
    "james-stein": "tab:gray",
    "sure": "tab:olive",
    "normal-eb": "tab:pink",
    "normal-nuts": "darkgoldenrod",
    "learned": "magenta",
    "oracle": "tab:green",
}
NUM_ATOMS_DP = 12
REQUIRED_METHODS = ("attention-em", "nuts", "oracle")
# methods for scalar data only (p = 1), and why: a scenario of p-D data leaves them out and
# says so (``runners.scenario_methods``)
SCALAR_ONLY = {"learned": "the grid stack is for scalar data"}
SECTIONS = (
    ("data", "1. Data"),
    ("methods", "2. Methods side by side"),
    ("diagnostics", "3. Posterior diagnostics"),
    ("model-comparison", "4. Model comparison"),
    ("learning", "5. Learning the switching model's parameters"),
    ("attention", "6. Attention maps"),
    ("kernel-regression", "7. Nadaraya-Watson kernel regression"),
    ("learned", "8. Learned attention: unrolled EM, the link conjecture, pooling in a forecaster"),
    ("calibration", "9. Calibration over the prior: SBC ranks and interval coverage"),
)


class Scenario(NamedTuple):
    """A built-in deconvolution data set and its sizes (quick run, full run).

    ``sigma`` is the noise scale: a number (every observation), or ``(low, high)``: each
    observation its own s_i, log-uniform on [low, high] and independent of its mean
    (``attnbayes.models.deconvolution.noise_scales``), known to every method."""

    name: str
    measure: str
    measure_kwargs: dict
    sigma: float | tuple[float, float]
    num_points: tuple[int, int]
    nuts_draws: tuple[int, int]
    description: str
    quick: bool = True

    @property
    def per_unit(self) -> bool:
        """Whether each observation has its own noise scale."""
        return isinstance(self.sigma, tuple)


SCENARIOS = (
    Scenario(
        "three-atoms",
        "three-atoms",
        {},
        1.0,
        (200, 1000),
        (250, 1000),
        "nu = 0.5 delta(-2) + 0.3 delta(0) + 0.2 delta(3) in 1-D, sigma = 1: the atoms overlap "
        "after noise, so recovering nu is a genuine deconvolution.",
    ),
    Scenario(
        "log-uniform-noise",
        "three-atoms",
        {},
        (0.5, 3.0),
        (200, 1000),
        (250, 1000),
        "The three atoms of three-atoms, but each observation its own noise scale s_i, "
        "log-uniform on [0.5, 3] and independent of z_i (a 36-fold range of precisions), "
        "known to every method: x_i ~ N(z_i, s_i^2). EM's E-step is attention with a "
        "per-query temperature s_i^2.",
    ),
    Scenario(
        "sparse-means",
        "sparse-means",
        {"num_nonzero": 50, "num_points": 1000, "mean": 4.0},
        1.0,
        (300, 1000),
        (300, 1000),
        "Johnstone-Silverman sparse normal means: 95% of the z_i are 0, 5% equal 4, sigma = 1.",
        quick=False,
    ),
    Scenario(
        "ring",
        "ring",
        {"num_atoms": 8, "radius": 3.0},
        0.5,
        (200, 500),
        (300, 800),
        "Eight equal atoms on the circle of radius 3 in 2-D, sigma = 0.5: the spherical case "
        "of the note 'Attention as deconvolution', where the EM key bias is nearly constant "
        "and the E-step is plain softmax attention.",
        quick=False,
    ),
)


class SwitchingSettings(NamedTuple):
    """Sizes of the switching part (quick run, full run)."""

    num_steps: tuple[int, int] = (60, 200)
    gibbs_draws: tuple[int, int] = (200, 1000)
    gibbs_chains: int = 2
    heldout_fraction: float = 0.3
    mode_counts: tuple[tuple[int, ...], tuple[int, ...]] = ((1, 2), (1, 2, 3))
    # learning the parameters (``compare_switching_learning``) of a 1-D two-mode model:
    # training steps, held-out steps, NUTS draws per chain (Gibbs: 4 times as many sweeps)
    learning_steps: tuple[int, int] = (60, 200)
    learning_heldout: int = 50
    learning_draws: tuple[int, int] = (100, 300)
    # the posterior shift of theta under GPB2 / IMM from the exact likelihood, on a short 1-D
    # series (all 2^T mode histories): steps and NUTS draws (quick, full)
    shift_steps: tuple[int, int] = (6, 8)
    shift_draws: tuple[int, int] = (150, 500)


SWITCHING = SwitchingSettings()
ATOM_COUNTS = ((1, 2, 3), (1, 2, 3, 4, 5))
