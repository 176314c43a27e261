"""The ``attnbayes`` command.

    attnbayes report [--quick] [--out DIR] [--name NAME] [--seed N] [--workers N]
    attnbayes deconvolve FILE.csv --sigma S [--method em|npmle|nuts|gibbs] [options]
    attnbayes filter FILE.csv (--scenario NAME | --params FILE.json)
                     [--method imm|gpb2|gpb1|rbpf|gibbs] [--fit mle|em|nuts]
                     [--inputs COLS] [options]
    attnbayes calibrate [--reading deconvolution|switching] [--method M ...] [--replicates R]
                        [options]

``report`` runs the built-in simulations (``attnbayes.app.report``); ``calibrate`` runs
calibration studies over a fixed prior (``attnbayes.app.calibrate``); ``deconvolve`` and ``filter``
run one method on a user's own CSV (``attnbayes.app.user_data`` reads and checks it,
``attnbayes.app.user_runs`` runs the method and writes the outputs). Exit status 0 on success, 2
for bad usage or bad input (reported before any JAX work), 1 when a run or writing its output
fails, 130 on Ctrl-C and 143 on SIGTERM; in every failure one line names what went wrong
(``--debug`` or ``ATTNBAYES_DEBUG=1`` adds the traceback) and nothing is written.

JAX is configured here, before it is first imported: float64, as many host devices as there
are chains to run in parallel (two), unless ``XLA_FLAGS`` already sets a count, and JAX's
persistent compilation cache (``attnbayes.app.cache``; ``ATTNBAYES_CACHE_DIR``, ``off`` to
turn it off).
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import textwrap
import threading
import time
import traceback
import warnings

import matplotlib

from .cache import enable_compilation_cache
from .user_data import PARAMS_FIELDS, PARAMS_LABELS, PARAMS_OPTIONAL_FIELDS

DEVICE_FLAG = "--xla_force_host_platform_device_count"
# the names of attnbayes.models.switching.SCENARIOS (tests/test_cli.py checks they agree); listed
# here so that building the parser and printing --help need not import JAX
FILTER_SCENARIOS = ("maneuvering-target", "maneuvering-target-cwna")
# the default folder of attnbayes.app.report.write_report (checked by tests/test_cli.py)
REPORT_NAME = "attnbayes"
DECONVOLVE_METHODS = ("em", "npmle", "nuts", "gibbs")
FILTER_METHODS = ("imm", "gpb2", "gpb1", "rbpf", "gibbs")
FIT_METHODS = ("mle", "em", "nuts")
# attnbayes.models.markov_switching.STATE_SPACE_FREE (tests/test_cli.py checks they agree)
FIT_FREE_DEFAULT = ("transition_matrix", "dynamics_cov_scale", "emission_cov_scale")
# attnbayes.inference.calibration.CALIBRATION_METHODS (tests/test_cli.py checks they agree)
CALIBRATE_METHODS = {
    "deconvolution": (
        "nuts",
        "nuts-dp",
        "gibbs",
        "attention-em",
        "npmle",
        "approx-gibbs",
        "james-stein",
        "oracle",
    ),
    "switching": ("gpb1", "gpb2", "imm", "exact", "kim-gpb2", "kim-imm", "exact-smoother"),
}
CALIBRATE_DEFAULT = {
    "deconvolution": ("nuts", "gibbs", "attention-em", "npmle", "oracle"),
    "switching": ("gpb2", "imm", "kim-imm"),
}

EXIT_STATUSES = """exit status:
  0  success: the path of the written index.html is printed on stdout
  1  the run failed while computing or writing (e.g. a result that is not finite, a
     full disk): one line names the quantity or the file; nothing is written
  2  bad usage or bad input, refused before any computation; nothing is written
  130 interrupted (Ctrl-C), 143 terminated (SIGTERM); nothing is written
Every failure prints one line 'attnbayes: error: ...'; --debug (or ATTNBAYES_DEBUG=1)
also prints the full traceback."""

INPUT_FORMAT = """input CSV:
  {rows}
  Cells are separated by ',' (see --delimiter); quoted cells as in RFC 4180.
  The header row is optional: the first row is a header when none of its cells
  is a number, else it is data and the columns are called
  {names}. Numbers use a decimal point (1.5, -2e-3); blank lines
  and lines starting with # are skipped.
  {missing}
  A malformed file is refused with the line and column of the first problem, e.g.
    attnbayes: error: data.csv line 7, column "x2": cannot parse 'abc' as a number"""

OUTPUT_FOLDER = """output folder OUT/NAME (default reports/<FILE stem>-{cmd}-<method>):
  assembled in a temporary folder and renamed into place, so a failed run leaves
  nothing behind. An existing OUT/NAME is replaced only if an earlier attnbayes
  deconvolve or filter run wrote it (it holds run.json); otherwise the command stops."""

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
    rows="One row per observation x_i; one column for scalar data, p columns for points\n"
    "  in R^p (choose them with --columns).",
    names="x (one column) or x1..xp",
    missing="Every cell of the chosen columns must be a finite number.",
)
FILTER_INPUT = INPUT_FORMAT.format(
    rows="One row per time step t = 1..T, one column per observed coordinate: exactly o\n"
    "  columns (2 for the maneuvering-target scenarios; choose them with --columns).",
    names="y (one column) or y1..yo",
    missing="An empty cell, NA or NaN is missing: a row with every cell missing is a\n"
    "  step with no observation (predict only); a partly missing row updates on its\n"
    "  observed cells. With a single column, write NA for a missing step (blank lines\n"
    "  are skipped). --inputs COLS names columns of inputs u_t (never missing); the\n"
    "  observations are then the other columns (or --columns).",
)

DECONVOLVE_EPILOG = f"""model:
  z_i ~ nu,  x_i | z_i ~ N(z_i, sigma^2 I_p) with sigma known: estimate the mixing
  measure nu and every z_i (empirical Bayes for em/npmle, full posterior for nuts/gibbs).

methods:
  em     attention-EM: K = N atoms started at the data, weights 1/N; z_hat is one
         more attention step; plug-in intervals from the discrete posterior
  npmle  Kiefer-Wolfowitz NPMLE of nu on a 300-point grid, then its posterior (GMLEB)
  nuts   NUTS on a finite Dirichlet mixture of --num-atoms atoms (sorted in 1-D)
  gibbs  blocked conjugate Gibbs on the same finite mixture

memory: em's dense E-step holds N x N matrices (40,000 rows: about 38 GB). Before
  computing, em estimates its memory and refuses when it exceeds what is available
  (ATTNBAYES_MEMORY_LIMIT=BYTES sets the limit), naming the alternatives: npmle
  (memory linear in N) or --block-size B (streams the E-step in blocks of B rows and
  atoms: memory O(B N), time unchanged).

{DECONVOLVE_INPUT}

output files in OUT/NAME:
  z_hat.csv        row, line, then per column c: c, z_hat_c, lower_50_c, upper_50_c,
                   lower_90_c, upper_90_c (equal-tailed intervals for z_i)
  measure.csv      (em, npmle) the fitted nu: weight, atom_c per atom
  metrics.csv      metric, value: log-likelihood, wall time; for nuts/gibbs also
                   elpd_loo, pareto_k_max, worst R-hat, smallest bulk/tail ESS,
                   divergences (on permutation-invariant quantities)
  diagnostics.csv  (nuts, gibbs) R-hat, ESS bulk and tail per invariant element
  posterior.nc     (nuts, gibbs) the posterior as an ArviZ DataTree, netCDF
  index.html       self-contained report: data with the fitted measure, z_hat with
                   intervals, sampler diagnostics
  run.json         input file and its SHA-256, settings, versions, wall time

{OUTPUT_FOLDER.format(cmd="deconvolve")}

{EXIT_STATUSES}

example:
  attnbayes deconvolve scores.csv --sigma 1 --method nuts --num-atoms 4"""

FILTER_EPILOG = f"""model (M modes, state x_t in R^d, observation y_t in R^o, t = 1..T):
  s_1 ~ pi0, s_t | s_(t-1) = i ~ Pi[i, :];  x_1 | s_1 = j ~ N(m0_j, P0_j);
  x_t = F_j x_(t-1) + b_j + B_j u_t + N(0, Q_j);  y_t = H_j x_t + d_j + D_j u_t + N(0, R_j),
  with inputs u_t (--inputs; none by default); the parameters known (--params or
  --scenario) or learned from the data first (--fit).

learning the parameters (--fit), started from --params or --scenario:
  mle    maximum likelihood: L-BFGS from --starts starts (the given parameters and
         random perturbations, --seed), standard errors from the Hessian
  em     EM: Kim's smoother for the E-step, the expected complete-data log-likelihood
         maximised in the M-step
  nuts   NUTS over the parameters (states and modes integrated out by the filter) under
         Dirichlet(1 + 2 I) rows, InverseGamma(3, 2) noise scales, wide normals on
         other real fields; the posterior mean is used (--draws, --warmup, --chains)
  The likelihood is the --method's filter (imm for rbpf and gibbs). Free by default:
  the transition matrix and the scales c_j, r_j of Q_j = c_j Q0_j and R_j = r_j R0_j
  (dynamics_cov_scale, emission_cov_scale); --free FIELDS names others, e.g.
  dynamics_biases, emission_biases or the input weights (any field of --params).

methods (each filter is followed by Kim's smoother over its per-mode Gaussians):
  imm    interacting multiple model filter (Blom and Bar-Shalom)
  gpb2   generalised pseudo-Bayes, order 2 (M^2 Kalman steps per step)
  gpb1   generalised pseudo-Bayes, order 1
  rbpf   Rao-Blackwellised particle filter (--particles, --seed)
  gibbs  Gibbs sampler of the smoothing posterior (no filtered columns;
         --draws, --warmup, --chains, --seed)

scenarios (--scenario):
  maneuvering-target       state [px, vx, py, vy], o = 2 observed positions (px, py);
                           modes constant-velocity and coordinated-turn (3 deg/step)
  maneuvering-target-cwna  the same with full-rank (continuous) process noise

{PARAMS_HELP}

{FILTER_INPUT}

output files in OUT/NAME:
  states.csv       one row per step: t, line, the observations, then
                   filtered_mean_<state>, filtered_sd_<state>, filtered_prob_<mode>
                   (not for gibbs) and smoothed_mean_<state>, smoothed_sd_<state>,
                   smoothed_prob_<mode>
  metrics.csv      metric, value: wall time, the filter's log p(y_1:T); gibbs:
                   worst R-hat and smallest bulk/tail ESS of the states; --fit: the
                   fit's log-likelihood, AIC and BIC (mle, em) or R-hat, ESS and
                   divergences of the parameters (nuts), its wall time
  params.json      the parameters used (with --fit: the fitted ones), --params format
  fit.csv          (--fit) one row per free scalar: parameter, initial, estimate, and
                   stderr (mle, em) or sd, q5, q95, r_hat, ess_bulk (nuts)
  fit_posterior.nc (--fit nuts) the draws of the parameters as an ArviZ DataTree
  diagnostics.csv  (gibbs) R-hat, ESS bulk and tail per state element
  posterior.nc     (gibbs) the draws of states and modes as an ArviZ DataTree, netCDF
  index.html       self-contained report: states with bands, mode probabilities, track
  run.json         input file and its SHA-256, settings, versions, wall time

{OUTPUT_FOLDER.format(cmd="filter")}

{EXIT_STATUSES}

examples:
  attnbayes filter track.csv --scenario maneuvering-target --method imm
  attnbayes filter track.csv --scenario maneuvering-target-cwna --fit mle"""


def _wrap(text: str) -> str:
    return textwrap.fill(text, width=78)


def _configure_jax(num_devices: int = 2) -> None:
    flags = os.environ.get("XLA_FLAGS", "")
    if DEVICE_FLAG not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {DEVICE_FLAG}={num_devices}".strip()
    import jax

    jax.config.update("jax_enable_x64", True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        enable_compilation_cache()
    for warning in caught:
        print(f"attnbayes: warning: {warning.message}", file=sys.stderr)


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


def _add_data_options(sub: argparse.ArgumentParser, command: str) -> None:
    sub.add_argument(
        "--columns",
        type=_columns,
        metavar="COLS",
        help="comma-separated header names or 1-based numbers of the columns to use, in "
        "that order; the other columns are not read [all columns]",
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
        help=f"folder name inside DIR [<FILE stem>-{command}-<method>]",
    )


def _add_debug(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="on failure, print the full traceback as well (or set ATTNBAYES_DEBUG=1)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attnbayes",
        description=_wrap(
            "Attention as statistical inference: run EM/attention and full-posterior MCMC "
            "side by side and report how they differ, on built-in simulations (report) or on "
            "your own data (deconvolve, filter)."
        ),
        epilog=EXIT_STATUSES + "\n\nRun 'attnbayes COMMAND --help' for a command's options, "
        "input format and output files.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_debug(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    report = sub.add_parser(
        "report",
        help="simulate the built-in data, run every method, write an HTML report",
        description=_wrap(
            "Simulate the built-in data (the deconvolution scenarios and the maneuvering "
            "target), run every method side by side, and write OUT/NAME/index.html: data, "
            "methods compared, posterior diagnostics, model comparison, attention maps and "
            "Nadaraya-Watson, with results.csv, the PNG figures and the samplers' DataTrees "
            "(netCDF)."
        ),
        epilog=EXIT_STATUSES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    report.add_argument(
        "--quick",
        action="store_true",
        help="small sizes and fewer scenarios (about 2 minutes on 2 cores instead of 10)",
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
        help="processes running the report's parts side by side [one per core, at most 4]; "
        "the report is the same for any N",
    )
    _add_debug(report)

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
    dec.add_argument(
        "--sigma",
        type=_sigma,
        required=True,
        metavar="S",
        help="the known noise sd of every coordinate of every observation, > 0 (required)",
    )
    dec.add_argument("--method", choices=DECONVOLVE_METHODS, default="em", help="[em]")
    dec.add_argument(
        "--num-atoms",
        type=_count(1),
        metavar="K",
        help="atoms of the finite mixture (nuts, gibbs) [5]",
    )
    dec.add_argument(
        "--draws",
        type=_count(1),
        metavar="N",
        help="draws kept per chain (nuts, gibbs) [nuts 500, gibbs 2000]",
    )
    dec.add_argument(
        "--warmup",
        type=_count(0),
        metavar="N",
        help="warmup iterations per chain (nuts, gibbs) [nuts 500, gibbs 1000]",
    )
    dec.add_argument(
        "--chains",
        type=_count(1),
        metavar="N",
        help="chains (nuts, gibbs; two run in parallel) [nuts 2, gibbs 4]",
    )
    dec.add_argument(
        "--seed", type=_seed, default=0, metavar="N", help="random seed (nuts, gibbs) [0]"
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
        choices=FILTER_SCENARIOS,
        metavar="NAME",
        help="a built-in model (scenarios below)",
    )
    model.add_argument(
        "--params",
        metavar="FILE.json",
        help="the model's parameters as JSON (format below)",
    )
    filt.add_argument("--method", choices=FILTER_METHODS, default="imm", help="[imm]")
    filt.add_argument("--particles", type=_count(1), metavar="N", help="particles (rbpf) [1000]")
    filt.add_argument(
        "--draws",
        type=_count(1),
        metavar="N",
        help="draws kept per chain (gibbs [1000], --fit nuts [500])",
    )
    filt.add_argument(
        "--warmup",
        type=_count(0),
        metavar="N",
        help="warmup per chain (gibbs [300], --fit nuts [500])",
    )
    filt.add_argument(
        "--chains", type=_count(1), metavar="N", help="chains (gibbs [4], --fit nuts [2])"
    )
    filt.add_argument(
        "--fit",
        choices=FIT_METHODS,
        help="learn the parameters first, starting from --params or --scenario (below)",
    )
    filt.add_argument(
        "--free",
        type=_columns,
        metavar="FIELDS",
        help="--fit: comma-separated parameters to learn [" + ",".join(FIT_FREE_DEFAULT) + "]",
    )
    filt.add_argument(
        "--starts", type=_count(1), metavar="N", help="--fit mle: optimiser starts [8]"
    )
    filt.add_argument(
        "--inputs",
        type=_columns,
        metavar="COLS",
        help="comma-separated header names or 1-based numbers of the input columns u_t",
    )
    filt.add_argument(
        "--seed",
        type=_seed,
        default=0,
        metavar="N",
        help="random seed (rbpf, gibbs, --fit) [0]",
    )
    _add_data_options(filt, "filter")
    _add_debug(filt)
    _add_calibrate(sub)
    return parser


def _fraction(text: str) -> float:
    value = _sigma(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return value


def _add_calibrate(sub) -> None:
    names = "; ".join(f"{r}: {', '.join(m)}" for r, m in CALIBRATE_METHODS.items())
    cal = sub.add_parser(
        "calibrate",
        help="simulation-based calibration of methods over a fixed prior",
        description=_wrap(
            "Draw parameters and data from a fixed prior, run each method on every replicate "
            "(one compilation for all of them) and test its calibration: SBC ranks for "
            "samplers, coverage of 50%% and 90%% intervals for interval methods, with a "
            "verdict (calibrated / over-confident / under-confident / biased). Writes "
            "OUT/NAME/ with calibration.csv, one DataTree per method (netCDF), the ECDF-PIT "
            "figure and index.html."
        ),
        epilog=f"methods: {names}\n\n" + EXIT_STATUSES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cal.add_argument(
        "--reading",
        choices=tuple(CALIBRATE_METHODS),
        default="deconvolution",
        help="[deconvolution]",
    )
    cal.add_argument(
        "--method",
        action="append",
        metavar="M",
        help="a method to calibrate (repeat for several) [deconvolution: "
        + ",".join(CALIBRATE_DEFAULT["deconvolution"])
        + "; switching: "
        + ",".join(CALIBRATE_DEFAULT["switching"])
        + "]",
    )
    cal.add_argument("--replicates", type=_count(2), default=200, metavar="R", help="[200]")
    cal.add_argument("--points", type=_count(2), metavar="N", help="deconvolution: N [50]")
    cal.add_argument("--atoms", type=_count(1), metavar="K", help="deconvolution: K [2]")
    cal.add_argument("--steps", type=_count(1), metavar="T", help="switching: T [50]")
    cal.add_argument("--warmup", type=_count(0), metavar="N", help="samplers: warmup [300]")
    cal.add_argument("--draws", type=_count(4), metavar="N", help="samplers: draws [300]")
    cal.add_argument("--chains", type=_count(2), metavar="N", help="samplers: chains [2]")
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
        "--chunk-size", type=_count(1), default=24, metavar="C", help="replicates per call [24]"
    )
    cal.add_argument(
        "--checkpoint-dir",
        metavar="DIR",
        help="save each method's finished chunks in DIR/<method>.npz and resume from them",
    )
    cal.add_argument("--seed", type=_seed, default=0, metavar="N", help="random seed [0]")
    cal.add_argument("--out", default="reports", metavar="DIR", help="output folder [reports]")
    cal.add_argument("--name", metavar="NAME", help="folder name inside DIR [calibrate-READING]")
    _add_debug(cal)


def _report(args, progress, argv):
    from .report import write_report

    named = {} if args.name is None else {"name": args.name}
    return write_report(
        args.out,
        quick=args.quick,
        seed=args.seed,
        workers=args.workers,
        progress=progress,
        **named,
    )


def _deconvolve(args, progress, argv):
    from .user_data import read_table
    from .user_runs import run_deconvolve

    table = read_table(args.file, delimiter=args.delimiter, columns=args.columns, prefix="x")
    return run_deconvolve(
        table,
        args.sigma,
        method=args.method,
        out_dir=args.out,
        name=args.name,
        seed=args.seed,
        num_atoms=args.num_atoms,
        num_warmup=args.warmup,
        num_samples=args.draws,
        num_chains=args.chains,
        block_size=args.block_size,
        progress=progress,
        argv=argv,
    )


def _calibrate(args, progress, argv):
    from .calibrate import run_calibration
    from .user_data import InputError

    reading = args.reading
    methods = args.method or list(CALIBRATE_DEFAULT[reading])
    unknown = [m for m in methods if m not in CALIBRATE_METHODS[reading]]
    if unknown:
        raise InputError(
            f"--method: unknown {unknown} for --reading {reading}; choose from "
            f"{list(CALIBRATE_METHODS[reading])}"
        )
    given = {"--points": args.points, "--atoms": args.atoms, "--steps": args.steps}
    wrong = {"deconvolution": ("--steps",), "switching": ("--points", "--atoms")}[reading]
    for option in wrong:
        if given[option] is not None:
            raise InputError(f"{option}: does not apply to --reading {reading}")
    if reading == "switching" and (args.sigma_factor or args.data_fraction):
        raise InputError("--sigma-factor/--data-fraction: apply to --reading deconvolution only")
    from ..inference import calibration as cal

    if reading == "deconvolution":
        study = cal.DeconvolutionStudy(num_atoms=args.atoms or 2, num_points=args.points or 50)
    else:
        study = cal.SwitchingStudy(num_steps=args.steps or 50)
    overrides = {
        "num_warmup": 300 if args.warmup is None else args.warmup,
        "num_samples": args.draws or 300,
        "num_chains": args.chains or 2,
    }
    if args.sigma_factor is not None:
        overrides["sigma_factor"] = args.sigma_factor
    if args.data_fraction is not None:
        overrides["data_fraction"] = args.data_fraction
    return run_calibration(
        reading,
        methods,
        study=study,
        num_replicates=args.replicates,
        overrides=overrides,
        seed=args.seed,
        chunk_size=args.chunk_size,
        out_dir=args.out,
        name=args.name,
        checkpoint_dir=args.checkpoint_dir,
        progress=progress,
        argv=argv,
    )


def _filter(args, progress, argv):
    from .user_data import read_params, read_table

    if args.scenario is not None:
        from ..models.switching import check_params, get_scenario

        params, labels = check_params("params", get_scenario(args.scenario)), {}
        o = params.emission_matrices.shape[1]
        reason = f'the scenario "{args.scenario}" observes {o} values per step'
    else:
        params, labels = read_params(args.params)
        o = params.emission_matrices.shape[1]
        reason = f"{args.params} has o = {o} (emission_matrices is (M, o, d))"
    inputs = None
    if args.inputs is not None:
        inputs = read_table(
            args.file, delimiter=args.delimiter, columns=args.inputs, prefix="y", option="--inputs"
        )
    table = read_table(
        args.file,
        delimiter=args.delimiter,
        columns=args.columns,
        width=o,
        width_reason=reason,
        allow_missing=True,
        prefix="y",
        exclude=args.inputs,
    )
    from .user_runs import run_filter

    return run_filter(
        table,
        params,
        method=args.method,
        scenario=args.scenario,
        params_path=args.params,
        labels=labels,
        out_dir=args.out,
        name=args.name,
        seed=args.seed,
        num_particles=args.particles,
        num_warmup=args.warmup,
        num_samples=args.draws,
        num_chains=args.chains,
        fit=args.fit,
        free=args.free,
        num_starts=args.starts,
        inputs=inputs,
        progress=progress,
        argv=argv,
    )


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that every temporary output is removed."""


def _debug_requested(args) -> bool:
    return bool(getattr(args, "debug", False)) or os.environ.get("ATTNBAYES_DEBUG", "") not in (
        "",
        "0",
    )


def main(argv: list[str] | None = None) -> int:
    """Run one command; return its exit status (see ``EXIT_STATUSES``)."""
    args = build_parser().parse_args(argv)
    debug = _debug_requested(args)
    command_line = ["attnbayes", *(sys.argv[1:] if argv is None else argv)]
    start = time.perf_counter()

    # A signal handler raises in whatever frame runs. In a garbage-collector callback (JAX has
    # one) Python drops the exception and reports it through sys.unraisablehook, so the run
    # would go on. The signal is remembered instead: the next progress step raises it again,
    # before anything is written, and the dropped one is not reported.
    pending: list[type[BaseException]] = []

    def on_signal(signum, frame):
        pending.append(KeyboardInterrupt if signum == signal.SIGINT else Terminated)
        raise pending[-1]

    previous_unraisable = sys.unraisablehook

    def drop_pending(unraisable) -> None:
        if unraisable.exc_type not in pending:
            previous_unraisable(unraisable)

    def progress(message: str) -> None:
        if pending:
            raise pending[0]
        print(f"[{time.perf_counter() - start:6.1f}s] {message}", file=sys.stderr, flush=True)

    def fail(message: str, status: int) -> int:
        if debug:
            traceback.print_exc()
        print(f"attnbayes: {message}", file=sys.stderr)
        return status

    run = {
        "report": _report,
        "deconvolve": _deconvolve,
        "filter": _filter,
        "calibrate": _calibrate,
    }[args.command]
    previous = signal.getsignal(signal.SIGTERM)
    previous_int = signal.getsignal(signal.SIGINT)
    in_main_thread = threading.current_thread() is threading.main_thread()
    if in_main_thread:
        signal.signal(signal.SIGTERM, on_signal)
        if previous_int is signal.default_int_handler:  # an ignored SIGINT stays ignored
            signal.signal(signal.SIGINT, on_signal)
        sys.unraisablehook = drop_pending
    try:
        _configure_jax()
        matplotlib.use("Agg")  # figures go to files only; the one place a backend is set
        path = run(args, progress, command_line)
    except KeyboardInterrupt:
        return fail("interrupted; nothing written", 130)
    except Terminated:
        return fail("terminated; nothing written", 143)
    except ValueError as err:  # refused before any computation (InputError and the like)
        return fail(f"error: {err}", 2)
    except OSError as err:
        return fail(f"error: cannot write the output: {err}", 1)
    except (RuntimeError, ArithmeticError) as err:  # failed while computing (RunFailed, ...)
        return fail(f"error: the {args.command} run failed: {err}", 1)
    except Exception as err:
        return fail(
            f"error: internal error in {args.command} ({type(err).__name__}: {err}); nothing "
            "written; run with --debug for the traceback",
            1,
        )
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)
            signal.signal(signal.SIGINT, previous_int)
            sys.unraisablehook = previous_unraisable
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
