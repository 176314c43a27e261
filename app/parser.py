"""The ``attnbayes`` command's parser: its options, their defaults and the help texts.

Every list the parser offers comes from one place: the methods of ``--method`` (their names,
aliases, descriptions and sampler sizes) from the registry ``attnbayes.inference.methods``, the
scenarios, the learned parameters and the calibration sizes from ``attnbayes.constants``; the
defaults that only the command has (``DECONVOLVE_DEFAULT``, ``FIT_METHODS``, ``REGRESS_GRID``,
...) are here, and the runs read them from here. ``REGRESS_KERNELS`` repeats
``attnbayes.inference.kernel_regression.KERNELS`` (that package imports JAX; a test keeps the
two equal). Nothing here imports JAX, so ``attnbayes --help`` and a refused command line are
fast.

Over 1000 lines because it is six commands' options and help texts, most of it prose a user
reads in ``--help``; splitting it per command would scatter the shared texts (input format,
output folder, exit statuses) that every command prints the same.
"""

from __future__ import annotations

import argparse
import math
import textwrap

from ..constants import (
    CALIBRATION_ATOMS,
    CALIBRATION_CHUNK_SIZE,
    CALIBRATION_POINTS,
    CALIBRATION_REPLICATES,
    CALIBRATION_STEPS,
    STATE_SPACE_FREE,
    SWITCHING_SCENARIOS,
)
from ..inference import methods as registry
from . import devices
from .user_data import PARAMS_FIELDS, PARAMS_LABELS, PARAMS_OPTIONAL_FIELDS

# the default folder of ``attnbayes report`` (``attnbayes.app.report.write_report``'s name)
REPORT_NAME = "attnbayes"
# ``--method`` of deconvolve and filter when none is given
DECONVOLVE_DEFAULT = "em"
FILTER_DEFAULT = "imm"
# deconvolve: K of the samplers' finite mixture
DEFAULT_NUM_ATOMS = 5
# filter --template: the named univariate models (``attnbayes.app.filter.template_params``)
FILTER_TEMPLATES = ("local-level", "local-linear-trend")
# filter --fit: the methods, the optimiser starts of mle (fit_switching's default) and the
# sampler sizes of nuts over the parameters
FIT_METHODS = ("mle", "em", "nuts")
DEFAULT_STARTS = 8
FIT_NUTS_SIZES = {"num_warmup": 500, "num_samples": 500, "num_chains": 2}
# regimes: the default --method and the central levels of the forecast intervals
REGIMES_METHOD = "mle"
REGIMES_TRENDS = ("c", "n")
REGIMES_LEVELS = (0.5, 0.9)
# calibrate: the samplers' sizes unless --warmup, --draws, --chains say otherwise
CALIBRATE_SIZES = {"num_warmup": 300, "num_samples": 300, "num_chains": 2}
SIZES = ("num_warmup", "num_samples", "num_chains")
# regress: the kernels (``attnbayes.inference.kernel_regression.KERNELS``), the default kernel,
# the points of the grid the fit is evaluated on, the band's level, the bandwidths of the
# LOO-CV search grid, the fewest rows, and the rows above which the CV and the fit stream
# over blocks of ``REGRESS_BLOCK`` (memory O(REGRESS_BLOCK N) instead of O(N^2))
REGRESS_KERNELS = ("gaussian", "boxcar", "epanechnikov", "triangular", "tricube")
REGRESS_KERNEL = "gaussian"
REGRESS_GRID = 200
REGRESS_LEVEL = 0.9
REGRESS_CV_GRID = 30
REGRESS_MIN_ROWS = 5
REGRESS_DENSE_ROWS = 4096
REGRESS_BLOCK = 1024


def sampler_defaults(command: str, reading: str) -> dict[str, dict[str, int]]:
    """{method: its registry sizes} of the samplers a command offers."""
    return {
        m.name: {k: m.defaults[k] for k in SIZES}
        for m in registry.command_methods(command, reading)
        if m.returns == "draws"
    }


DECONVOLVE_SAMPLERS = sampler_defaults("deconvolve", "deconvolution")
FILTER_SAMPLERS = sampler_defaults("filter", "switching")
PARTICLE_METHODS = {
    m.name: m.defaults["num_particles"]
    for m in registry.command_methods("filter", "switching")
    if "num_particles" in m.defaults
}

EXIT_STATUSES = """exit status:
  0  success: the path of the written index.html is printed on stdout
  1  the run failed while computing or writing (e.g. a result that is not finite, a
     full disk): one line names the quantity or the file; nothing is written
  2  bad usage or bad input, refused before any computation (but a regress --bandwidth
     so small that a point is alone in its window, found after the fit); nothing is written
  130 interrupted (Ctrl-C), 143 terminated (SIGTERM); nothing is written
Every failure prints one line 'attnbayes: error: ...'; --debug (or ATTNBAYES_DEBUG=1)
also prints the full traceback."""

INPUT_FORMAT = """input CSV:
  {rows}
  Cells are separated by ',' (see --delimiter); quoted cells as in RFC 4180.
  The header row is optional: the first row is a header when none of its cells
  is a number, else it is data and the columns are called
  {names}; the first header cell may be empty (R's write.csv). Numbers use a
  decimal point (1.5, -2e-3); blank lines and lines starting with # are skipped.
  {missing}
  A malformed file is refused with the line and column of the first problem, e.g.
    attnbayes: error: data.csv line 7, column "x2": cannot parse 'abc' as a number"""

OUTPUT_FOLDER = """output folder OUT/NAME (default reports/<FILE stem>-{cmd}-<{what}>):
  assembled in a temporary folder and renamed into place, so a failed run leaves
  nothing behind. An existing OUT/NAME is replaced only if an earlier attnbayes
  run wrote it (it holds run.json); otherwise the command stops."""

PARAMS_HELP = (
    "--params FILE.json: a JSON object with these fields, nested lists of numbers\n"
    "(M modes, state dimension d, observation dimension o):\n"
    + "\n".join(f"  {k:<18} {shape:<10} {what}" for k, (shape, what) in PARAMS_FIELDS.items())
    + "\noptional fields (absent: zeros; k = the number of --inputs columns):\n"
    + "\n".join(
        f"  {k:<22} {shape:<10} {what}" for k, (shape, what) in PARAMS_OPTIONAL_FIELDS.items()
    )
    + "\n"
    + "\n".join(f"  {k:<18} {what}" for k, what in PARAMS_LABELS.items())
    + "\nThe params.json that a run writes (e.g. with --scenario, or the fitted parameters\n"
    "with --fit) is a template."
)
DECONVOLVE_INPUT = INPUT_FORMAT.format(
    rows="One row per observation x_i: a file of one column, or --columns naming the\n"
    "  column (or the p columns of points in R^p); a file with more columns and no\n"
    "  --columns is refused, its likely row index named. --se COLS names the column of\n"
    "  standard errors s_i (the data are then the other column, or --columns).\n"
    "  --binomial HITS,TRIALS names two columns of counts instead.",
    names="x (one column) or x1..xp",
    missing="Every cell of the chosen columns must be a finite number; a standard error\n"
    "  must be > 0; counts whole numbers with 0 <= hits <= trials, trials >= 1.",
)
FILTER_INPUT = INPUT_FORMAT.format(
    rows="One row per time step t = 1..T, one column per observed coordinate: exactly o\n"
    "  columns (2 for the maneuvering-target scenarios, 1 for the templates; choose them\n"
    "  with --columns).",
    names="y (one column) or y1..yo",
    missing="An empty cell, NA or NaN is missing: a row with every cell missing is a\n"
    "  step with no observation (predict only); a partly missing row updates on its\n"
    "  observed cells. With a single column, write NA for a missing step (blank lines\n"
    "  are skipped). --inputs COLS names columns of inputs u_t (never missing); the\n"
    "  observations are then the other columns (or --columns).",
)


def join_names(methods) -> str:
    """'a, b and c'."""
    methods = list(methods)
    return ", ".join(methods[:-1]) + (" and " if len(methods) > 1 else "") + methods[-1]


def method_list(command: str, reading: str) -> str:
    """The 'methods' paragraph of a command's help: each method the registry offers it, with
    its aliases, description and the options that apply to it only."""
    lines = []
    for m in registry.command_methods(command, reading):
        head = m.name + (f" ({', '.join(m.aliases)})" if m.aliases else "")
        options = []
        if command == "deconvolve" and m.returns == "draws":
            options.append("--num-atoms")
        if "num_particles" in m.defaults:
            options.append("--particles")
        if m.returns == "draws":
            options.append("--draws, --warmup, --chains")
        if m.needs_key:
            options.append("--seed")
        text = m.description if m.description.endswith(".") else f"{m.description}."
        if command == "filter" and m.target != "filter":
            text += " No filtered columns."
        if options:
            text += f" Options: {', '.join(options)}."
        lines.append(
            textwrap.fill(
                text,
                width=86,
                initial_indent=f"  {head:<18} ",
                subsequent_indent=" " * 21,
                break_on_hyphens=False,
            )
        )
    return "\n".join(lines)


def _per_method(sizes: dict[str, dict[str, int]], key: str) -> str:
    """'nuts 500, gibbs 2000': the default of ``key`` of each method."""
    return ", ".join(f"{name} {s[key]}" for name, s in sizes.items())


_EB = [
    m.name
    for m in registry.command_methods("deconvolve", "deconvolution")
    if m.returns == "intervals"
]

# the methods whose nu is discrete (measure.csv): not the normal-prior rules
_DISCRETE_NU = [m for m in _EB if m not in ("sure", "normal-eb")]
_MODEL = textwrap.fill(
    "z_i ~ nu,  x_i | z_i ~ N(z_i, s_i^2 I_p) with the noise known: estimate the mixing "
    f"measure nu and every z_i (empirical Bayes for {join_names(_EB)}, a full posterior for "
    f"{join_names(DECONVOLVE_SAMPLERS)}; learned takes one column only). The noise is one of",
    width=86,
    initial_indent="  ",
    subsequent_indent="  ",
    break_on_hyphens=False,
)

DECONVOLVE_EPILOG = f"""model:
{_MODEL}
    --sigma S       one sd for every row and coordinate (s_i = S);
    --se COL        a column of standard errors, s_i for row i and every coordinate of
                    it; --se C1,..,Cp: one column per data column (s_ic);
    --binomial H,T  counts H_i of T_i trials: Brown's (2008) variance-stabilising
                    transform x_i = arcsin(sqrt((H_i + 1/4) / (T_i + 1/2))), about
                    N(arcsin(sqrt(p_i)), s_i^2) with s_i = 1 / (2 sqrt(T_i)); the results
                    on that scale and as proportions p = sin(z)^2 (z clipped to [0, pi/2];
                    intervals map end to end; p_hat = sin(z_hat)^2 is not E[p | x]).

methods (--method takes a name or an alias in parentheses):
{method_list("deconvolve", "deconvolution")}

memory: em's dense E-step holds N x N matrices (40,000 rows: about 38 GB). Before
  computing, em estimates its memory and refuses when it exceeds what is available
  (ATTNBAYES_MEMORY_LIMIT=BYTES sets the limit), naming the alternatives: npmle
  (memory linear in N) or --block-size B (streams the E-step in blocks of B rows and
  atoms: memory O(B N), time unchanged).

{DECONVOLVE_INPUT}

output files in OUT/NAME:
  z_hat.csv        row, line, the --se column(s), then per column c: c, z_hat_c,
                   lower_50_c, upper_50_c, lower_90_c, upper_90_c (equal-tailed
                   intervals for z_i); --binomial: row, line, H, T, p_raw = H/T, x, se,
                   z_hat_x, its intervals, p_hat, p_lower_50, p_upper_50, p_lower_90,
                   p_upper_90
  measure.csv      ({join_names(_DISCRETE_NU)}) the fitted nu: weight, atom_c per
                   atom (learned: its effective prior on its grid)
  metrics.csv      metric, value: log-likelihood, wall time; for the samplers also
                   elpd_loo, pareto_k_max, worst R-hat, smallest bulk/tail ESS,
                   divergences (on permutation-invariant quantities)
  diagnostics.csv  ({join_names(DECONVOLVE_SAMPLERS)}) R-hat, ESS bulk and tail per
                   invariant element
  posterior.nc     ({join_names(DECONVOLVE_SAMPLERS)}) the posterior as an ArviZ DataTree, netCDF
  index.html       self-contained report: data with the fitted measure, z_hat with
                   intervals, sampler diagnostics
  run.json         input file and its SHA-256, settings, versions, wall time

{OUTPUT_FOLDER.format(cmd="deconvolve", what="method")}

{EXIT_STATUSES}

examples:
  attnbayes deconvolve scores.csv --sigma 1 --method nuts --num-atoms 4
  attnbayes deconvolve schools.csv --columns effect --se se --method npmle
  attnbayes deconvolve schools.csv --columns effect --se se --method learned
  attnbayes deconvolve batting.csv --binomial hits,at_bats"""


def fit_likelihood(method: registry.Method) -> str:
    """The filter whose log-likelihood ``filter --fit`` uses: the --method's own when it is a
    deterministic filter, else ``FILTER_DEFAULT``'s (imm)."""
    return method.name if method.target == "filter" and not method.needs_key else FILTER_DEFAULT


_NOT_A_LIKELIHOOD = [
    m.name for m in registry.command_methods("filter", "switching") if fit_likelihood(m) != m.name
]

FILTER_EPILOG = f"""model (M modes, state x_t in R^d, observation y_t in R^o, t = 1..T):
  s_1 ~ pi0, s_t | s_(t-1) = i ~ Pi[i, :];  x_1 | s_1 = j ~ N(m0_j, P0_j);
  x_t = F_j x_(t-1) + b_j + B_j u_t + N(0, Q_j);  y_t = H_j x_t + d_j + D_j u_t + N(0, R_j),
  with inputs u_t (--inputs; none by default); the parameters known (--params or
  --scenario) or learned from the data first (--fit).

learning the parameters (--fit), started from --params, --scenario or --template:
  mle    maximum likelihood: L-BFGS from --starts starts (the given parameters and
         random perturbations, --seed), standard errors from the Hessian
  em     EM: Kim's smoother for the E-step, the expected complete-data log-likelihood
         maximised in the M-step
  nuts   NUTS over the parameters (states and modes integrated out by the filter) under
         Dirichlet(1 + 2 I) rows, InverseGamma(3, 2) noise scales (ordered over modes
         that are otherwise the same: the labels), wide normals on other real fields;
         the posterior mean is used (--draws, --warmup, --chains)
  The likelihood is the --method's filter ({FILTER_DEFAULT} for {join_names(_NOT_A_LIKELIHOOD)}).
  Free by default: the transition matrix and the scales c_j, r_j of Q_j = c_j Q0_j and
  R_j = r_j R0_j (dynamics_cov_scale, emission_cov_scale); --free FIELDS names others,
  e.g. dynamics_biases, emission_biases or the input weights (any field of --params).

methods (each filter is followed by Kim's smoother over its per-mode Gaussians):
{method_list("filter", "switching")}

scenarios (--scenario):
  maneuvering-target       state [px, vx, py, vy], o = 2 observed positions (px, py);
                           modes constant-velocity and coordinated-turn (3 deg/step)
  maneuvering-target-cwna  the same with full-rank (continuous) process noise

templates (--template; one observed column, two modes calm and volatile, starting
values from the data: s2 the variance of the first differences, v the larger of s2 and
the variance of the values):
  local-level              x_t = x_(t-1) + N(0, q_j), y_t = x_t + N(0, r_j): q = s2/20
                           (calm) and s2 (volatile), r = s2/4, x_1 ~ N(first y, v)
  local-linear-trend       state [level, slope]: level_t = level_(t-1) + slope_(t-1) +
                           noise, slope_t = slope_(t-1) + noise, y_t = level_t + N(0, r):
                           Q = diag(s2/20, s2/400) (calm) and diag(s2, s2/20) (volatile)
  The modes stay with probability 0.9. With --fit the modes are named by their fitted
  process noise (calm the smaller); e.g. --fit mle learns the transition matrix and the
  noise scales (--free for more).

{PARAMS_HELP}

{FILTER_INPUT}

output files in OUT/NAME:
  states.csv       one row per step: t, line, the observations, then
                   filtered_mean_<state>, filtered_sd_<state>, filtered_prob_<mode>
                   (not for {join_names(FILTER_SAMPLERS)}) and smoothed_mean_<state>,
                   smoothed_sd_<state>, smoothed_prob_<mode>
  metrics.csv      metric, value: wall time, the filter's log p(y_1:T); samplers:
                   worst R-hat and smallest bulk/tail ESS of the states; --fit: the
                   fit's log-likelihood, AIC and BIC (mle, em) or R-hat, ESS and
                   divergences of the parameters (nuts), its wall time
  params.json      the parameters used (with --fit: the fitted ones), --params format
  fit.csv          (--fit) one row per free scalar: parameter, initial, estimate, and
                   stderr (mle, em) or sd, q5, q95, r_hat, ess_bulk (nuts)
  fit_posterior.nc (--fit nuts) the draws of the parameters as an ArviZ DataTree
  diagnostics.csv  ({join_names(FILTER_SAMPLERS)}) R-hat, ESS bulk and tail per state element
  posterior.nc     ({join_names(FILTER_SAMPLERS)}) the draws of states and modes as an ArviZ
                   DataTree, netCDF
  index.html       self-contained report: states with bands, mode probabilities, track
  run.json         input file and its SHA-256, settings, versions, wall time

{OUTPUT_FOLDER.format(cmd="filter", what="method")}

{EXIT_STATUSES}

examples:
  attnbayes filter track.csv --scenario maneuvering-target --method imm
  attnbayes filter track.csv --scenario maneuvering-target-cwna --fit mle
  attnbayes filter nile.csv --columns volume --template local-level --fit mle"""


REGRESS_INPUT = INPUT_FORMAT.format(
    rows="One row per observation (x_i, y_i): --x and --y name the two columns (header\n"
    "  names or 1-based numbers); the other columns are not read.",
    names="column1..columnp",
    missing="Every cell of the two columns must be a finite number.",
)

REGRESS_EPILOG = f"""model and estimator:
  y_i = m(x_i) + e_i, m estimated by Nadaraya-Watson (attention pooling over the data):
    m_hat(x) = sum_i w_i(x) y_i,  w_i(x) = K((x - x_i) / h) / sum_j K((x - x_j) / h),
  softmax weights of the scores log K((x - x_i) / h). The bandwidth h minimises the
  leave-one-out CV(h) = (1/N) sum_i (y_i - m_hat_(-i)(x_i))^2: a grid of {REGRESS_CV_GRID}
  bandwidths from 0.001 to 4 times the spread of x (min(sd, IQR / 1.349)), refined by
  Brent's method. --bandwidth H fixes h instead (the CV curve is still drawn, with H and
  the LOO-CV choice on it). Above {REGRESS_DENSE_ROWS} rows the CV and the fit stream over blocks
  of {REGRESS_BLOCK} rows (memory O({REGRESS_BLOCK} N)); the time grows as N^2.

kernels K(u) (--kernel), 0 outside |u| < 1 for all but the gaussian:
  gaussian exp(-u^2 / 2), boxcar 1 (|u| <= 1), epanechnikov 1 - u^2, triangular
  1 - |u|, tricube (1 - |u|^3)^3. Where no x_i lies within h of a grid point (a
  compact kernel), the fit there is the y of the nearest x_i, and a warning says so.

pointwise band (--level P, z the (1 + P) / 2 quantile of the standard normal):
  m_hat(x) +- z se(x),  se(x)^2 = sigma_hat^2(x) sum_i w_i(x)^2:
  the variance sum_i w_i(x)^2 sigma^2(x_i) of m_hat(x) with the noise variance smooth
  near x (Haerdle 1990, sec. 4.2; Wasserman 2006, ch. 5, variance estimation and
  confidence bands). sigma_hat^2(x) = sum_i w_i(x) r_i^2 smooths the squared residuals
  r_i^2 = (y_i - m_hat(x_i))^2 / (1 - 2 L_ii + sum_j L_ij^2), each divided by its
  expectation under constant noise (L_ij = w_j(x_i); summed over i the divisors make
  Wasserman's N - 2 nu + nu~). A normal approximation around the smoothed curve
  sum_i w_i(x) m(x_i): it ignores the bias (largest where m bends sharply and at the
  ends of the data), so it is not a band for m(x) itself, and it holds at each x
  separately, not for the whole curve at once.

{REGRESS_INPUT}

output files in OUT/NAME (P the level in percent, e.g. 90):
  fitted.csv   one row per observation: row, line, x, y (the file's column names),
               fit, se, lower_P, upper_P, residual (y - fit), loo_fit (m_hat_(-i)(x_i))
  curve.csv    one row per grid point (--grid, from min to max x): x, fit, se, lower_P,
               upper_P, effective_points (1 / sum_i w_i(x)^2)
  cv.csv       bandwidth, cv, kind: the CV curve on the search grid (grid), its
               minimum (loo-cv) and --bandwidth H (given)
  metrics.csv  metric, value: bandwidth (the h used), loo_cv_bandwidth, cv_at_bandwidth,
               cv_at_loo_cv_bandwidth, residual_sd (sqrt(sum_i (y_i - fit_i)^2 /
               (N - 2 nu + nu~)), nu = sum_i L_ii, nu~ = sum_ij L_ij^2), effective_df
               (nu), wall_time_s
  index.html   self-contained report: the data with the fit and its band, the CV curve
  run.json     input file and its SHA-256, settings, versions, wall time

{OUTPUT_FOLDER.format(cmd="regress", what="kernel")}

{EXIT_STATUSES}

examples:
  attnbayes regress engel.csv --x income --y foodexp
  attnbayes regress engel.csv --x income --y foodexp --kernel epanechnikov --bandwidth 150"""


REGIMES_INPUT = INPUT_FORMAT.format(
    rows="One row per time step: --y names the column of the series, --exog and --tvtp\n"
    "  the columns of regressors and TVTP covariates (header names or 1-based numbers);\n"
    "  the other columns are not read.",
    names="column1..columnp",
    missing="The series is the rows from the first to the last value of y: rows before\n"
    "  are left out (said in the output), a missing y between them is refused, and so\n"
    "  is a missing --exog or --tvtp cell in them. The rows after the last y (y empty)\n"
    "  hold the regressors and covariates of a forecast (--horizon H: the first H).",
)

REGIMES_EPILOG = f"""models (s_t a Markov chain on M regimes, P[i, j] = P(s_t = j | s_(t-1) = i)):
  regression (no --order):  y_t = mu_(s_t) + x_t' beta_(s_t) + e_t,  e_t ~ N(0, sigma2),
                            x_t the --exog columns (statsmodels' MarkovRegression)
  MS-AR(P) (--order P):     y_t - mu_(s_t) = sum_k phi_k (y_(t-k) - mu_(s_(t-k))) + e_t
                            (Hamilton 1989; statsmodels' MarkovAutoregression, but with
                            --switching-variance and P >= 2 sigma2 follows s_t here and
                            s_(t-P+1) there: the two fits differ)
  MS-VAR(P) (--y A,B,...    y_t = nu_(s_t) + sum_l A_(l, s_t) y_(t-l) + e_t,
   --order P):              e_t ~ N(0, Sigma) (Krolzig 1997; in no other Python library)
  sigma2 (Sigma) switches with --switching-variance, phi (A_l) with --switching-ar, beta
  unless --common-exog names its column; --trend n drops mu. --tvtp COLS:
  P_t[i, j] = softmax_j(z_t' gamma_ij), gamma_(i, M-1) = 0, z_t = (1, the columns).
  The regimes are labelled by increasing intercept / mean (MS-VAR: of the first series;
  --trend n: by the first switching coefficient, else the variance), regime 0 the lowest.

methods (--method):
  mle    maximum likelihood: L-BFGS from several starts (--starts, --seed), standard
         errors from the Hessian; the distinct local optima found are listed
  em     EM (Hamilton's smoothed probabilities in the E-step); no standard errors
  nuts   NUTS over the parameters, the regimes integrated out by Hamilton's filter;
         the posterior mean is the estimate, with R-hat and ESS checks (--draws,
         --warmup, --chains); an MS-VAR's chains start at the mle
  A fit that did not converge, estimates on the boundary of the parameter space (no
  standard error), R-hat > 1.01, another local optimum within 2 log-likelihood units
  of the best, or regimes whose labelling parameter differs by less than 2 standard
  errors are said on the terminal and in the page.

{REGIMES_INPUT}

output files in OUT/NAME:
  parameters.csv   one row per parameter (statsmodels' names: const[j], sigma2[j],
                   p[i->j] (also p[i->M-1], which statsmodels leaves out), ar.Lk, the
                   regressors by column; TVTP: p[i->j].const, p[i->j].COL, statsmodels'
                   .tvtp0, .tvtp1; MS-VAR: const.A[j], A.Lk.B[j] the coefficient of
                   B_(t-k) in the equation of A, sigma[A,B][j] both off-diagonal entries
                   of Sigma): estimate, stderr, z,
                   p_value, lower_95, upper_95, on_boundary, note (why a stderr is
                   blank); nuts: estimate (posterior mean), sd, q5, q95, r_hat, ess_bulk
  durations.csv    regime, expected_duration 1 / (1 - p_jj) (TVTP: its sample average)
  metrics.csv      metric, value: log-likelihood, AIC, BIC, HQIC, observations, free
                   parameters, converged, on_boundary (nuts: the log-likelihood at the
                   posterior mean, R-hat, ESS, divergences), wall time
  local_optima.csv (mle, em) log_likelihood, starts, converged per distinct optimum
  regimes.csv      t, line, time (--time), y, smoothed_prob_regime<j>
                   (P(s_t = j | y_1:T))
  regimes.png      the series over its smoothed regime probabilities, the regimes
                   named by their labelling parameter (x-axis: --time, else rows)
  forecast.csv     (--horizon) h, line, time (--time; LAST+h without a row), mean
                   (of 4000 simulated paths), mean_mc_se (its Monte Carlo standard
                   error), lower_50, upper_50, lower_90, upper_90, prob_regime<j>
  fit_posterior.nc (nuts) the draws of the parameters as an ArviZ DataTree
  index.html       self-contained report of all of it
  run.json         input file and its SHA-256, settings, warnings, versions, wall time

{OUTPUT_FOLDER.format(cmd="regimes", what="method")}

{EXIT_STATUSES}

examples:
  attnbayes regimes fedfunds.csv --y fedfunds --regimes 2
  attnbayes regimes rgnp.csv --y rgnp --order 4 --regimes 2 --horizon 8
  attnbayes regimes ogap.csv --y inf --exog ogap --regimes 2 --switching-variance
  attnbayes regimes macro.csv --y growth,inflation --order 1 --regimes 2"""


def _wrap(text: str) -> str:
    return textwrap.fill(text, width=78)


# ----------------------------------------------------------------------------- option types


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError(f"must be in [0, 2**32), got {value}")
    return value


def _count(minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    parse.__name__ = "integer"
    return parse


def _sigma(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def _fraction(text: str) -> float:
    value = _sigma(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return value


def _level(text: str) -> float:
    value = _sigma(text)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1), got {text}")
    return value


def _delimiter(text: str) -> str:
    if text.lower() in ("tab", "\\t"):
        return "\t"
    if len(text) != 1 or text in '\r\n"#':
        raise argparse.ArgumentTypeError(
            f"expected one character (or 'tab'), not a quote, # or newline; got {text!r}"
        )
    return text


def _columns(text: str) -> list[str]:
    items = [c.strip() for c in text.split(",")]
    if not all(items):
        raise argparse.ArgumentTypeError(f"expected comma-separated names or numbers, got {text!r}")
    return items


def _pair(text: str) -> list[str]:
    items = _columns(text)
    if len(items) != 2:
        raise argparse.ArgumentTypeError(
            f"expected two columns HITS,TRIALS (names or numbers), got {text!r}"
        )
    return items


def _checked(parse, name: str):
    """An option type from a ``devices`` parser (its ``ValueError`` as argparse's error)."""

    def check(text: str):
        try:
            return parse(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    check.__name__ = name
    return check


# ----------------------------------------------------------------------------- the parser

LAUNCH_HELP = """several processes (jax.distributed; one machine or many):
  Start the same command once per process, each with --coordinator HOST:PORT
  (process 0 listens there), --process-id I (0..N-1) and --num-processes N, or
  with ATTNBAYES_COORDINATOR, ATTNBAYES_PROCESS_ID and ATTNBAYES_NUM_PROCESSES
  (an option wins over its variable; all three or none). Every process runs
  the same computation, the batch work (calibration replicates) split over
  every process's devices; process 0 writes OUT/NAME and prints its path, the
  others write nothing. Processes wait at most {timeout} s for one another to
  join; then, or when one dies mid-run, JAX ends the others (exit status 134,
  JAX's message). Each process uses one host device per core it may run on:
  give processes on one machine their own cores (taskset -c) or set XLA_FLAGS."""


def _add_launch(sub: argparse.ArgumentParser) -> None:
    group = sub.add_argument_group("several processes (see below)")
    group.add_argument(
        "--coordinator",
        type=_checked(devices.parse_coordinator, "HOST:PORT"),
        metavar="HOST:PORT",
        help=f"the address of process 0 [${devices.COORDINATOR_ENV}]",
    )
    group.add_argument(
        "--process-id",
        type=_checked(devices.parse_process_id, "integer"),
        metavar="I",
        help=f"this process's id, 0..N-1 [${devices.PROCESS_ID_ENV}]",
    )
    group.add_argument(
        "--num-processes",
        type=_checked(devices.parse_num_processes, "integer"),
        metavar="N",
        help=f"the number of processes [${devices.NUM_PROCESSES_ENV}]",
    )


def _add_data_options(sub: argparse.ArgumentParser, command: str, what: str = "method") -> None:
    if command not in ("regress", "regimes"):  # they choose their columns with --x, --y, ...
        sub.add_argument(
            "--columns",
            type=_columns,
            metavar="COLS",
            help="comma-separated header names or 1-based numbers of the columns to use, in "
            "that order; the other columns are not read [deconvolve: the file's only column; "
            "filter: the o columns besides --inputs; never guessed]",
        )
    sub.add_argument(
        "--delimiter",
        type=_delimiter,
        default=",",
        metavar="C",
        help="the character separating cells; 'tab' for a tab [',']",
    )
    sub.add_argument("--out", default="reports", metavar="DIR", help="output folder [reports]")
    sub.add_argument(
        "--name",
        metavar="NAME",
        help=f"folder name inside DIR [<FILE stem>-{command}-<{what}>]",
    )


def _add_debug(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="on failure, print the full traceback as well (or set ATTNBAYES_DEBUG=1)",
    )


class _OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line, 'attnbayes: error: ...' naming the
    option (argparse prints the usage and the subcommand's name first), exit status 2;
    --help is argparse's."""

    def error(self, message: str):
        self.exit(2, f"attnbayes: error: {' '.join(message.split())}\n")


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``attnbayes report | deconvolve | filter | regress | regimes |
    calibrate``; its errors are one line (``attnbayes: error: argument --X: ...``), exit
    status 2."""
    parser = _OneLineParser(
        prog="attnbayes",
        description=_wrap(
            "Attention as statistical inference: run EM/attention and full-posterior MCMC "
            "side by side and report how they differ, on built-in simulations (report) or on "
            "your own data (deconvolve, filter); Nadaraya-Watson kernel regression on your data "
            "(regress)."
        ),
        epilog=EXIT_STATUSES + "\n\nRun 'attnbayes COMMAND --help' for a command's options, "
        "input format and output files.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_debug(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_report(sub)
    _add_deconvolve(sub)
    _add_filter(sub)
    _add_regress(sub)
    _add_regimes(sub)
    _add_calibrate(sub)
    return parser


def _add_report(sub) -> None:
    report = sub.add_parser(
        "report",
        help="simulate the built-in data, run every method, write an HTML report",
        description=_wrap(
            "Simulate the built-in data (the deconvolution scenarios and the maneuvering "
            "target), run every method side by side, and write OUT/NAME/index.html: a summary "
            "(which method wins on which measure, by how much), then nine sections: 1. data, "
            "2. methods side by side, 3. posterior diagnostics, 4. model comparison, 5. "
            "learning the switching model's parameters, 6. attention maps, 7. Nadaraya-Watson "
            "kernel regression, 8. learned attention, 9. calibration over the prior; with "
            "results.csv, the PNG figures and the samplers' DataTrees (netCDF; thinned and "
            "compressed unless --keep-trees)."
        )
        + "\n\n"
        + _wrap(
            "Time on two workers: the full report about 5.5 minutes on a first run (cold: JAX "
            "compiles every program) and about 3 minutes on later runs (warm: the compilation "
            "cache); --quick about 2.5 minutes cold and under 1 minute warm."
        )
        + "\n\n"
        + _wrap(
            "Cores: with W workers on C cores each worker gets max(1, C // W) host devices "
            "(one worker: all C, in this process), so workers and devices share the cores "
            "without oversubscribing them; an XLA_FLAGS that sets "
            f"{devices.DEVICE_FLAG} is used as given instead. Under several processes "
            "(below) the processes replace the workers: the worker pool is off, every "
            "process runs every part in turn (the calibration's replicates split over every "
            "process's devices, the other parts repeated with the same keys) and process 0 "
            "writes."
        ),
        epilog=LAUNCH_HELP.format(timeout=devices.JOIN_TIMEOUT_S) + "\n\n" + EXIT_STATUSES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    report.add_argument(
        "--quick",
        action="store_true",
        help="small sizes and fewer scenarios (times above)",
    )
    report.add_argument(
        "--keep-trees",
        action="store_true",
        help="keep the samplers' full DataTrees (by default they are thinned and compressed; "
        "see the page)",
    )
    report.add_argument("--out", default="reports", metavar="DIR", help="output folder [reports]")
    report.add_argument(
        "--name",
        metavar="NAME",
        help=f"report folder name inside DIR [{REPORT_NAME}]",
    )
    report.add_argument("--seed", type=_seed, default=0, metavar="N", help="random seed [0]")
    report.add_argument(
        "--workers",
        type=_count(1),
        metavar="N",
        help="processes running the report's parts side by side [one per core, at most 4, or "
        "$ATTNBAYES_WORKERS]; each gets max(1, C // N) of the C cores as host devices; the "
        "report is the same for any N; 1 under several processes",
    )
    _add_launch(report)
    _add_debug(report)


def _add_deconvolve(sub) -> None:
    samplers = ", ".join(DECONVOLVE_SAMPLERS)
    dec = sub.add_parser(
        "deconvolve",
        help="estimate the mixing measure and each z_i from your CSV of noisy observations",
        description=_wrap(
            "Read a CSV of observations x_i (one column, or p columns for points in R^p), fit "
            "the mixing measure nu of the z_i with one method, and write z_hat with intervals "
            "(CSV) and a small HTML report to OUT/NAME."
        ),
        epilog=DECONVOLVE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    dec.add_argument("file", metavar="FILE.csv", help="the observations (format below)")
    noise = dec.add_mutually_exclusive_group(required=True)
    noise.add_argument(
        "--sigma",
        type=_sigma,
        metavar="S",
        help="the known noise sd of every coordinate of every observation, > 0",
    )
    noise.add_argument(
        "--se",
        type=_columns,
        metavar="COLS",
        help="the column of known standard errors s_i, one per row (x_i ~ N(z_i, s_i^2 I_p): "
        "with several --columns it applies to every coordinate of its row), or as many "
        "columns as --columns, one per coordinate; every cell a number > 0",
    )
    noise.add_argument(
        "--binomial",
        type=_pair,
        metavar="HITS,TRIALS",
        help="binomial counts: the columns of hits H_i and trials T_i (whole numbers, "
        "0 <= H_i <= T_i, T_i >= 1), fitted on Brown's scale x_i = arcsin(sqrt((H_i + 1/4) / "
        "(T_i + 1/2))) with s_i = 1 / (2 sqrt(T_i)); results also as proportions p = sin(z)^2 "
        "(no --columns)",
    )
    dec.add_argument(
        "--method",
        choices=registry.command_choices("deconvolve", "deconvolution"),
        default=DECONVOLVE_DEFAULT,
        help=f"[{DECONVOLVE_DEFAULT}]",
    )
    dec.add_argument(
        "--num-atoms",
        type=_count(1),
        metavar="K",
        help=f"atoms of the finite mixture ({samplers}) [{DEFAULT_NUM_ATOMS}]",
    )
    dec.add_argument(
        "--draws",
        type=_count(1),
        metavar="N",
        help=f"draws kept per chain ({samplers}) "
        f"[{_per_method(DECONVOLVE_SAMPLERS, 'num_samples')}]",
    )
    dec.add_argument(
        "--warmup",
        type=_count(0),
        metavar="N",
        help=f"warmup iterations per chain ({samplers}) "
        f"[{_per_method(DECONVOLVE_SAMPLERS, 'num_warmup')}]",
    )
    dec.add_argument(
        "--chains",
        type=_count(1),
        metavar="N",
        help=f"chains ({samplers}; two run in parallel) "
        f"[{_per_method(DECONVOLVE_SAMPLERS, 'num_chains')}]",
    )
    dec.add_argument(
        "--seed", type=_seed, default=0, metavar="N", help=f"random seed ({samplers}) [0]"
    )
    dec.add_argument(
        "--block-size",
        type=_count(1),
        metavar="B",
        help="em: stream the E-step over blocks of B rows and atoms, memory O(B N) instead "
        "of O(N^2) [dense]",
    )
    _add_data_options(dec, "deconvolve")
    _add_debug(dec)


def _add_filter(sub) -> None:
    filt = sub.add_parser(
        "filter",
        help="filter and smooth your CSV time series under a switching state-space model",
        description=_wrap(
            "Read a CSV of observations y_t (one row per time step; empty cells for a step "
            "with no observation), run a filter of the switching linear-Gaussian state-space "
            "model and Kim's smoother (or the Gibbs sampler), and write the state estimates "
            "and mode probabilities (CSV) and a short HTML report to OUT/NAME."
        ),
        epilog=FILTER_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    filt.add_argument("file", metavar="FILE.csv", help="the observations (format below)")
    model = filt.add_mutually_exclusive_group(required=True)
    model.add_argument(
        "--scenario",
        choices=SWITCHING_SCENARIOS,
        metavar="NAME",
        help="a built-in model (scenarios below)",
    )
    model.add_argument(
        "--params",
        metavar="FILE.json",
        help="the model's parameters as JSON (format below)",
    )
    model.add_argument(
        "--template",
        choices=FILTER_TEMPLATES,
        metavar="NAME",
        help="a named model of one column, its starting values from the data (templates "
        "below): no JSON needed",
    )
    filt.add_argument(
        "--method",
        choices=registry.command_choices("filter", "switching"),
        default=FILTER_DEFAULT,
        help=f"[{FILTER_DEFAULT}]",
    )
    particles = ", ".join(f"{name} [{n}]" for name, n in PARTICLE_METHODS.items())
    filt.add_argument("--particles", type=_count(1), metavar="N", help=f"particles ({particles})")

    def sizes(key: str) -> str:
        given = [f"{name} [{s[key]}]" for name, s in FILTER_SAMPLERS.items()]
        return ", ".join([*given, f"--fit nuts [{FIT_NUTS_SIZES[key]}]"])

    filt.add_argument(
        "--draws",
        type=_count(1),
        metavar="N",
        help=f"draws kept per chain ({sizes('num_samples')})",
    )
    filt.add_argument(
        "--warmup", type=_count(0), metavar="N", help=f"warmup per chain ({sizes('num_warmup')})"
    )
    filt.add_argument(
        "--chains", type=_count(1), metavar="N", help=f"chains ({sizes('num_chains')})"
    )
    filt.add_argument(
        "--fit",
        choices=FIT_METHODS,
        help="learn the parameters first, starting from --params, --scenario or --template (below)",
    )
    filt.add_argument(
        "--free",
        type=_columns,
        metavar="FIELDS",
        help="--fit: comma-separated parameters to learn [" + ",".join(STATE_SPACE_FREE) + "]",
    )
    filt.add_argument(
        "--starts",
        type=_count(1),
        metavar="N",
        help=f"--fit mle: optimiser starts [{DEFAULT_STARTS}]",
    )
    filt.add_argument(
        "--inputs",
        type=_columns,
        metavar="COLS",
        help="comma-separated header names or 1-based numbers of the input columns u_t",
    )
    keyed = [m.name for m in registry.command_methods("filter", "switching") if m.needs_key]
    filt.add_argument(
        "--seed",
        type=_seed,
        default=0,
        metavar="N",
        help=f"random seed ({', '.join(keyed)}, --fit) [0]",
    )
    _add_data_options(filt, "filter")
    _add_debug(filt)


def _add_regress(sub) -> None:
    reg = sub.add_parser(
        "regress",
        help="Nadaraya-Watson kernel regression of one column of your CSV on another",
        description=_wrap(
            "Read two columns x and y of a CSV, choose the bandwidth of Nadaraya-Watson "
            "kernel regression by leave-one-out cross-validation, and write the fit with a "
            "pointwise band at the data and on a grid (CSV), the CV curve (CSV) and a small "
            "HTML report to OUT/NAME."
        ),
        epilog=REGRESS_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    reg.add_argument("file", metavar="FILE.csv", help="the observations (format below)")
    reg.add_argument(
        "--x",
        required=True,
        metavar="COL",
        help="the column of the regressor x: a header name or a 1-based number (required)",
    )
    reg.add_argument(
        "--y",
        required=True,
        metavar="COL",
        help="the column of the response y: a header name or a 1-based number (required)",
    )
    reg.add_argument(
        "--kernel",
        choices=REGRESS_KERNELS,
        default=REGRESS_KERNEL,
        help=f"[{REGRESS_KERNEL}]",
    )
    reg.add_argument(
        "--bandwidth",
        type=_sigma,
        metavar="H",
        help="the bandwidth h in the units of x, > 0 [chosen by leave-one-out CV]",
    )
    reg.add_argument(
        "--grid",
        type=_count(2),
        default=REGRESS_GRID,
        metavar="N",
        help=f"points from min to max x where the fit and its band are evaluated [{REGRESS_GRID}]",
    )
    reg.add_argument(
        "--level",
        type=_level,
        default=REGRESS_LEVEL,
        metavar="P",
        help=f"the pointwise band's level, in (0, 1) [{REGRESS_LEVEL}]",
    )
    _add_data_options(reg, "regress", "kernel")
    _add_debug(reg)


def _add_regimes(sub) -> None:
    reg = sub.add_parser(
        "regimes",
        help="fit a Markov-switching regression, MS-AR or MS-VAR model to columns of your CSV",
        description=_wrap(
            "Read a series y (and regressors or TVTP covariates) from a CSV, fit a "
            "Markov-switching regression (without --order), Hamilton's MS-AR(p) (--order P) or, "
            "for several --y columns, an MS-VAR(p), with M regimes, by maximum likelihood, EM "
            "or NUTS, and write the table statsmodels users expect (estimates, standard "
            "errors, z, p-values, expected durations, log-likelihood, AIC, BIC, the local "
            "optima found), the smoothed regime probabilities (CSV and PNG), forecasts "
            "(--horizon) and an HTML report to "
            "OUT/NAME; a summary is printed on stderr."
        ),
        epilog=REGIMES_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    reg.add_argument("file", metavar="FILE.csv", help="the data (format below)")
    reg.add_argument(
        "--y",
        required=True,
        type=_columns,
        metavar="COLS",
        help="the column of the series y: a header name or a 1-based number; several "
        "comma-separated columns with --order: an MS-VAR (required)",
    )
    reg.add_argument(
        "--exog",
        type=_columns,
        metavar="COLS",
        help="comma-separated columns of regressors x_t, whose coefficients switch unless "
        "--common-exog names them (no constant: the intercept is the model's; not with --order)",
    )
    reg.add_argument(
        "--common-exog",
        type=_columns,
        metavar="COLS",
        help="--exog columns whose coefficients are the same in every regime (statsmodels' "
        "switching_exog=False for them)",
    )
    reg.add_argument(
        "--trend",
        choices=REGIMES_TRENDS,
        default="c",
        help="c: a switching intercept (regression) or mean (MS-AR); n: none (statsmodels' "
        "trend='n'; the regimes are then labelled by the first switching coefficient, else "
        "the variance) [c]",
    )
    reg.add_argument(
        "--order",
        type=_count(1),
        metavar="P",
        help="fit Hamilton's MS-AR(P) (switching mean) instead of a regression; with several "
        "--y columns the MS-VAR(P)",
    )
    reg.add_argument(
        "--regimes",
        required=True,
        type=_count(1),
        metavar="M",
        help="the number of regimes, >= 1 (1: the model without switching) (required)",
    )
    reg.add_argument(
        "--tvtp",
        type=_columns,
        metavar="COLS",
        help="comma-separated columns of covariates z_t of time-varying transition "
        "probabilities (a constant is added)",
    )
    reg.add_argument(
        "--time",
        metavar="COL",
        help="the column of the rows' times (numbers, ISO 8601 dates or YYYYQn quarters, "
        "increasing strictly; or distinct labels): the x-axis of regimes.png and a column of "
        "regimes.csv and forecast.csv (never guessed; without it the rows are numbered)",
    )
    reg.add_argument(
        "--switching-variance",
        action="store_true",
        help="the noise variance (MS-VAR: covariance matrix) differs by regime [one]",
    )
    reg.add_argument(
        "--switching-ar",
        action="store_true",
        help="--order: the AR coefficients (MS-VAR: matrices) differ by regime [one set]",
    )
    reg.add_argument(
        "--method",
        choices=FIT_METHODS,
        default=REGIMES_METHOD,
        help=f"[{REGIMES_METHOD}]",
    )
    reg.add_argument(
        "--starts",
        type=_count(1),
        metavar="N",
        help="--method mle: optimiser starts [8 to 32: every start that covers the regimes' "
        "orderings, and as many random ones]",
    )
    for option, key, minimum, what in (
        ("--draws", "num_samples", 1, "draws kept per chain"),
        ("--warmup", "num_warmup", 0, "warmup per chain"),
        ("--chains", "num_chains", 1, "chains"),
    ):
        reg.add_argument(
            option,
            type=_count(minimum),
            metavar="N",
            help=f"--method nuts: {what} [{FIT_NUTS_SIZES[key]}]",
        )
    reg.add_argument(
        "--horizon",
        type=_count(1),
        metavar="H",
        help="forecast y_(T+1..T+H) with 50%% and 90%% intervals (with --exog or --tvtp: "
        "their values in the H rows after the last y)",
    )
    reg.add_argument(
        "--seed",
        type=_seed,
        default=0,
        metavar="N",
        help="random seed (the starts of mle, nuts, the forecast's paths) [0]",
    )
    _add_data_options(reg, "regimes")
    _add_debug(reg)


def _add_calibrate(sub) -> None:
    names = "\n".join(
        textwrap.fill(
            ", ".join(
                m.name + (f" ({', '.join(m.aliases)})" if m.aliases else "")
                for m in registry.command_methods("calibrate", reading)
            ),
            width=80,
            initial_indent=f"  {reading}: ",
            subsequent_indent="    ",
        )
        for reading in registry.COMMANDS["calibrate"]
    )
    defaults = "; ".join(
        f"{reading}: {','.join(methods)}" for reading, methods in registry.CALIBRATE_DEFAULT.items()
    )
    cal = sub.add_parser(
        "calibrate",
        help="simulation-based calibration of methods over a fixed prior",
        description=_wrap(
            "Draw parameters and data from a fixed prior, run each method on every replicate "
            "(one compilation for all of them) and test its calibration: SBC ranks for "
            "samplers, coverage of 50% and 90% intervals for interval methods, with a "
            "verdict (calibrated / over-confident / under-confident / biased). Writes "
            "OUT/NAME/ with calibration.csv, one DataTree per method (netCDF), the ECDF-PIT "
            "figure and index.html."
        ),
        epilog=f"methods (a name or an alias in parentheses):\n{names}\n\n"
        + LAUNCH_HELP.format(timeout=devices.JOIN_TIMEOUT_S)
        + "\n\n"
        + EXIT_STATUSES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cal.add_argument(
        "--reading",
        choices=registry.COMMANDS["calibrate"],
        default="deconvolution",
        help="[deconvolution]",
    )
    cal.add_argument(
        "--method",
        action="append",
        metavar="M",
        help=f"a method to calibrate (repeat for several) [{defaults}]",
    )
    cal.add_argument(
        "--replicates",
        type=_count(2),
        default=CALIBRATION_REPLICATES,
        metavar="R",
        help=f"[{CALIBRATION_REPLICATES}]",
    )
    cal.add_argument(
        "--points", type=_count(2), metavar="N", help=f"deconvolution: N [{CALIBRATION_POINTS}]"
    )
    cal.add_argument(
        "--atoms", type=_count(1), metavar="K", help=f"deconvolution: K [{CALIBRATION_ATOMS}]"
    )
    cal.add_argument(
        "--steps", type=_count(1), metavar="T", help=f"switching: T [{CALIBRATION_STEPS}]"
    )
    cal.add_argument(
        "--warmup",
        type=_count(0),
        metavar="N",
        help=f"samplers: warmup [{CALIBRATE_SIZES['num_warmup']}]",
    )
    cal.add_argument(
        "--draws",
        type=_count(4),
        metavar="N",
        help=f"samplers: draws [{CALIBRATE_SIZES['num_samples']}]",
    )
    cal.add_argument(
        "--chains",
        type=_count(2),
        metavar="N",
        help=f"samplers: chains [{CALIBRATE_SIZES['num_chains']}]",
    )
    cal.add_argument(
        "--sigma-factor",
        type=_sigma,
        metavar="F",
        help="power check: the methods assume noise F sigma (deconvolution) [1]",
    )
    cal.add_argument(
        "--data-fraction",
        type=_fraction,
        metavar="F",
        help="power check: the methods see the first F of the data (deconvolution) [1]",
    )
    cal.add_argument(
        "--chunk-size",
        type=_count(1),
        default=CALIBRATION_CHUNK_SIZE,
        metavar="C",
        help=f"replicates per call [{CALIBRATION_CHUNK_SIZE}]",
    )
    cal.add_argument(
        "--checkpoint-dir",
        metavar="DIR",
        help="save each method's finished chunks in DIR/<method>.npz and resume from them",
    )
    cal.add_argument("--seed", type=_seed, default=0, metavar="N", help="random seed [0]")
    cal.add_argument("--out", default="reports", metavar="DIR", help="output folder [reports]")
    cal.add_argument("--name", metavar="NAME", help="folder name inside DIR [calibrate-READING]")
    _add_launch(cal)
    _add_debug(cal)


__all__ = [
    "CALIBRATE_SIZES",
    "DECONVOLVE_DEFAULT",
    "DECONVOLVE_SAMPLERS",
    "DEFAULT_NUM_ATOMS",
    "DEFAULT_STARTS",
    "EXIT_STATUSES",
    "FILTER_DEFAULT",
    "FILTER_SAMPLERS",
    "FILTER_TEMPLATES",
    "FIT_METHODS",
    "FIT_NUTS_SIZES",
    "LAUNCH_HELP",
    "PARTICLE_METHODS",
    "REGIMES_LEVELS",
    "REGIMES_METHOD",
    "REGIMES_TRENDS",
    "REGRESS_BLOCK",
    "REGRESS_CV_GRID",
    "REGRESS_DENSE_ROWS",
    "REGRESS_GRID",
    "REGRESS_KERNEL",
    "REGRESS_KERNELS",
    "REGRESS_LEVEL",
    "REGRESS_MIN_ROWS",
    "REPORT_NAME",
    "build_parser",
    "fit_likelihood",
    "join_names",
    "method_list",
    "sampler_defaults",
]
