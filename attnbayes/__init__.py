"""attnbayes: the attention mechanism of transformers read as statistical inference.

Three packages, layered (each imports only those below it; import-linter holds this):

- ``attnbayes.app``: the ``attnbayes`` command, the HTML report, user data and runs (the only
  code that plots with pyplot or writes files);
- ``attnbayes.inference``: the algorithms, a sub-package per reading (``attention``,
  ``deconvolution``, ``switching``, ``kernel_regression``) over shared modules (``mcmc``,
  ``diagnostics``, ``model_comparison``, ``methods``, ``sampling``);
- ``attnbayes.models``: NumPyro programs and their simulators;

and two modules every layer shares: ``validation``, the checks of concrete inputs, and
``constants``, the names the command line and the library share (free of JAX).
"""

__version__ = "0.2.0"

__all__ = ["__version__"]
