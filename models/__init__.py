"""NumPyro programs and their simulators.

- ``deconvolution``: z ~ nu, x | z ~ N(z, sigma^2 I) with nu a discrete measure (finite
  Dirichlet or truncated Dirichlet-process mixture), its simulator and named measures;
- ``switching``: the switching linear-Gaussian state-space model (``SwitchingParams``), its
  program, simulator and tracking scenarios;
- ``markov_switching``: parametrised switching models (``SwitchingSpec``): Markov-switching
  regression, Hamilton's MS-AR(p), a generic ``SwitchingParams`` with free fields;
- ``kernel_joint``: the kernel density estimate of a joint density, whose conditional mean is
  Nadaraya-Watson regression.
"""

from . import deconvolution, kernel_joint, markov_switching, switching

__all__ = ["deconvolution", "kernel_joint", "markov_switching", "switching"]
