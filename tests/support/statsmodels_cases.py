"""The data of statsmodels' published Markov-switching cases (Stata's and E-views' fits, in
``statsmodels/tsa/regime_switching/tests/``), read from its test modules. Importing those
modules registers statsmodels' own pytest marks (``smoke``), which pytest would warn about
here: the import silences that warning only."""

import importlib
import warnings

import numpy as np
import pytest


def _module(name: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pytest.PytestUnknownMarkWarning)
        return importlib.import_module(f"statsmodels.tsa.regime_switching.tests.{name}")


REGRESSION_CASES = _module("test_markov_regression")
AUTOREGRESSION_CASES = _module("test_markov_autoregression")

FEDFUNDS = np.asarray(REGRESSION_CASES.fedfunds)
OGAP = np.asarray(REGRESSION_CASES.ogap)
INFLATION = np.asarray(REGRESSION_CASES.inf)
ARETURNS = np.asarray(REGRESSION_CASES.areturns)
RGNP = np.asarray(AUTOREGRESSION_CASES.rgnp)
RECESSIONS = np.asarray(AUTOREGRESSION_CASES.rec)
