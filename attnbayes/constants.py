"""Names shared by the command line and the library, free of JAX so ``attnbayes --help`` is fast.

The library reads them from here (``attnbayes.models.switching.SCENARIOS`` is keyed by
``SWITCHING_SCENARIOS``, ``attnbayes.models.markov_switching.STATE_SPACE_FREE`` is
``STATE_SPACE_FREE``), and so does the command's parser: one source for each list. The method
names live in the registry, ``attnbayes.inference.methods``, which imports no JAX either.
"""

# the built-in switching scenarios of ``attnbayes filter --scenario``
SWITCHING_SCENARIOS = ("maneuvering-target", "maneuvering-target-cwna")

# the parameters of a switching state-space model learned by default (``attnbayes filter --fit``;
# the set the conjugate Gibbs sampler learns)
STATE_SPACE_FREE = ("transition_matrix", "dynamics_cov_scale", "emission_cov_scale")

__all__ = ["STATE_SPACE_FREE", "SWITCHING_SCENARIOS"]
