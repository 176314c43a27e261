"""attnbayes: the attention mechanism of transformers read as statistical inference.

Three packages, layered (each imports only those below it; import-linter holds this):

- ``attnbayes.app``: the ``attnbayes`` command, the HTML report, user data and runs (the only
  code that plots with pyplot or writes files);
- ``attnbayes.inference``: the algorithms, a sub-package per reading (``attention``,
  ``deconvolution``, ``switching``, ``kernel_regression``) over shared modules (``mcmc``,
  ``diagnostics``, ``model_comparison``, ``methods``, ``sampling``);
- ``attnbayes.models``: NumPyro programs and their simulators;

and three modules every layer shares: ``validation``, the checks of concrete inputs (a
``ValueError`` whose message starts with the argument's name), ``constants``, the names the
command line and the library share (free of JAX, so ``attnbayes --help`` is fast), and
``sharding``, where batch work runs (a one-axis ``Mesh``; every batch entry point takes
``mesh=None``).

The folders ``models/``, ``inference/`` and ``app/`` sit at the top of the repository
(``pyproject.toml`` maps them); each sub-package's ``__init__.py`` is its public API.

Layers. Imports go downwards only: ``app`` over ``inference`` over ``models`` over
``validation``, ``constants`` and ``sharding``. Inside ``inference``: ``model_comparison`` and
``calibration`` on top; then the readings ``deconvolution``, ``switching`` and
``kernel_regression``, which never import one another; then the registry ``methods``, the
shared ``attention`` maps and the helpers ``mcmc``, ``diagnostics``, ``sampling``,
``optimize``. Inside a reading a call goes downhill: in ``switching``, ``comparison`` and
``learning`` over the samplers and filters, over ``kalman``, over ``linalg``; in
``deconvolution``, ``learned`` over ``comparison`` over the fits over ``estep`` and ``checks``;
in ``app``, the command over the report over the runs over the shared pieces. No algorithm
imports a comparison or the registry, sibling modules form no import cycle, and matplotlib
stays in ``app``. import-linter contracts in ``pyproject.toml`` hold this
(``tests/test_layers.py`` also shows each contract failing on the import it refuses).

Names. A helper used by two modules has a plain name in its own module; an underscore marks a
helper of one module only, and no test reaches a private name outside the sub-package its
folder mirrors. A checked public function ``name`` validates its arguments on concrete values
and calls ``name_unchecked``, its traceable kernel without checks. Tests and notebooks run with
``python -P``, and ruff (TID251) bans bare ``import models`` / ``inference`` / ``app`` outside
the packages, so no second copy can be imported.

Public API (``__all__``):

- ``__version__``: the version of the distribution.
"""

__version__ = "0.2.0"

__all__ = ["__version__"]
