"""Names shared by the command line and the library, free of JAX so ``attnbayes --help`` is fast.

The library reads them from here (``attnbayes.models.switching.SCENARIOS`` is keyed by
``SWITCHING_SCENARIOS``, ``attnbayes.models.markov_switching.STATE_SPACE_FREE`` is
``STATE_SPACE_FREE``, the calibration studies of ``attnbayes.inference.calibration`` take their
default sizes from the ``CALIBRATION_*`` names), and so does the command's parser: one source for
each list and default. The method names live in the registry, ``attnbayes.inference.methods``,
which imports no JAX either.
"""

# the built-in switching scenarios of ``attnbayes filter --scenario``
SWITCHING_SCENARIOS = ("maneuvering-target", "maneuvering-target-cwna")

# the parameters of a switching state-space model learned by default (``attnbayes filter --fit``;
# the set the conjugate Gibbs sampler learns)
STATE_SPACE_FREE = ("transition_matrix", "dynamics_cov_scale", "emission_cov_scale")

# the default sizes of a calibration study (``attnbayes.inference.calibration.calibrate`` and
# ``attnbayes calibrate``): replicates, replicates per compiled call, and the studies' sizes
CALIBRATION_REPLICATES = 200
CALIBRATION_CHUNK_SIZE = 24
CALIBRATION_ATOMS = 2  # DeconvolutionStudy.num_atoms: K
CALIBRATION_POINTS = 50  # DeconvolutionStudy.num_points: N
CALIBRATION_STEPS = 50  # SwitchingStudy.num_steps: T

__all__ = [
    "CALIBRATION_ATOMS",
    "CALIBRATION_CHUNK_SIZE",
    "CALIBRATION_POINTS",
    "CALIBRATION_REPLICATES",
    "CALIBRATION_STEPS",
    "STATE_SPACE_FREE",
    "SWITCHING_SCENARIOS",
]
