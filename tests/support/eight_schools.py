"""Rubin's eight schools (Rubin 1981; Gelman et al. 2013, BDA3 Table 5.2): the estimated
coaching effects and their standard errors, as in ArviZ's ``centered_eight`` example data."""

import numpy as np

SCHOOLS_Y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
SCHOOLS_SIGMA = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])
