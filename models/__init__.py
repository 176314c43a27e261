"""NumPyro programs and their simulators.

- ``deconvolution``: z ~ nu, x | z ~ N(z, sigma^2 I) with nu a discrete measure (finite
  Dirichlet or truncated Dirichlet-process mixture), its simulator and named measures; sigma
  one for all, one per observation (N,) or per observation and coordinate (N, p);
- ``switching``: the switching linear-Gaussian state-space model (``SwitchingParams``), its
  program, simulator and tracking scenarios;
- ``markov_switching``: parametrised switching models (``SwitchingSpec``): Markov-switching
  regression, Hamilton's MS-AR(p), the MS-VAR(p), a generic ``SwitchingParams`` with free
  fields;
- ``regime_laws``: the constraints and laws that label regimes (``ordered_first_column``,
  ``OrderedIID``, ``OrderedNormal``, ``OrderedFirstColumn``) and ``InverseWishart``;
- ``kinematics``: the tracking blocks the scenarios are built of (constant velocity, the
  coordinated turn, white-noise and continuous white-noise acceleration);
- ``kernel_joint``: the kernel density estimate of a joint density, whose conditional mean is
  Nadaraya-Watson regression;
- ``hierarchical``: the normal hierarchical model (Rubin's eight schools), units' effects
  theta_i ~ N(mu, tau^2) observed with known standard errors, non-centred by default.

Each module's ``__all__`` is its API; ``attnbayes.models`` exports the modules. The main names:

- ``deconvolution``: ``deconvolution_model`` (prior "dirichlet", "dp" or "uniform-weights"),
  ``DiscreteMeasure``, ``simulate``, ``get_measure`` and the named measures ``MEASURES``
  ("three-atoms", "sparse-means", "ring"), the ``SortedNormal`` prior, ``stick_breaking``;
  heteroscedastic data: ``noise_scales`` (s_i log-uniform), ``log_uniform_noise``,
  ``xie_kou_brown`` (``XIE_KOU_BROWN_SETTINGS``), ``heteroscedastic_scenario``
  (``HETEROSCEDASTIC_SCENARIOS``), ``NoisySample``, ``check_noise_scales``;
- ``switching``: ``SwitchingParams``, ``SwitchingPriors``, ``switching_model`` (modes summed by
  a forward algorithm), ``simulate``, ``get_scenario`` and ``SCENARIOS`` ("maneuvering-target",
  rank-2 DWNA noise, and "maneuvering-target-cwna"), ``check_params``;
- ``markov_switching``: ``SwitchingSpec``, ``markov_switching_regression``,
  ``markov_switching_ar`` (both with ``trend`` and per-column switching),
  ``markov_switching_var``, ``switching_state_space``, ``build_params``, ``default_priors``,
  ``regime_ordering``, ``relabel_regimes`` (statsmodels' conventions stated);
- ``regime_laws``: ``ordered_first_column``, ``OrderedIID``, ``OrderedNormal``,
  ``OrderedFirstColumn``, ``InverseWishart``;
- ``kinematics``: ``constant_velocity``, ``coordinated_turn``, ``white_noise_acceleration``,
  ``continuous_white_noise_acceleration``;
- ``kernel_joint``: ``kernel_joint_model``, ``kernel_conditional_model``,
  ``conditional_mean``, ``conditional_moments``;
- ``hierarchical``: ``normal_hierarchical_model`` (sites mu, tau, theta, theta_t, x) and
  ``DIMS``.

A simulator or log-density used inside traced programs comes as a pair: ``name`` checks its
arguments on concrete values (a ValueError naming the argument) and calls ``name_unchecked``,
the traceable kernel without checks.
"""

import sys

import numpyro.distributions


def _bind_numpyro_submodule() -> None:
    """Bind ``numpyro.distributions.distribution`` as an attribute of its package if an import
    order left it unbound. After ``import arviz`` (or ``arviz_stats``), a first
    ``import numpyro.distributions`` loads the submodule without setting the attribute, and
    ``numpyro.factor`` (which looks up ``numpyro.distributions.distribution.Unit``) then raises
    ``AttributeError``; this package's programs add their likelihoods with ``numpyro.factor``."""
    submodule = sys.modules.get("numpyro.distributions.distribution")
    if submodule is not None and not hasattr(numpyro.distributions, "distribution"):
        numpyro.distributions.distribution = submodule


_bind_numpyro_submodule()

from . import (  # noqa: E402
    deconvolution,
    hierarchical,
    kernel_joint,
    markov_switching,
    regime_laws,
    switching,
)

__all__ = [
    "deconvolution",
    "hierarchical",
    "kernel_joint",
    "markov_switching",
    "regime_laws",
    "switching",
]
