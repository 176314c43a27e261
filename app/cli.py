"""The ``attnbayes`` command.

    attnbayes report [--quick] [--keep-trees] [--out DIR] [--name NAME] [--seed N]
                     [--workers N] [--coordinator HOST:PORT --process-id I --num-processes N]
    attnbayes deconvolve FILE.csv (--sigma S | --se COLS | --binomial HITS,TRIALS)
                         [--method attention-em|em|npmle|nuts|gibbs|...] [options]
    attnbayes filter FILE.csv (--scenario NAME | --params FILE.json | --template NAME)
                     [--method gpb1|gpb2|imm|rbpf|gibbs] [--fit mle|em|nuts]
                     [--inputs COLS] [options]
    attnbayes regress FILE.csv --x COL --y COL
                      [--kernel gaussian|boxcar|epanechnikov|triangular|tricube]
                      [--bandwidth H] [--grid N] [--level P] [options]
    attnbayes regimes FILE.csv --y COLS --regimes M [--exog COLS] [--order P] [--tvtp COLS]
                      [--time COL] [--trend c|n] [--common-exog COLS] [--switching-variance]
                      [--switching-ar] [--method mle|em|nuts]
                      [--horizon H] [options]
    attnbayes calibrate [--reading deconvolution|switching] [--method M ...] [--replicates R]
                        [--coordinator HOST:PORT --process-id I --num-processes N] [options]

The parser, its defaults and help texts are ``attnbayes.app.parser`` (the methods each command
offers come from the registry, ``attnbayes.inference.methods``). ``report`` runs the built-in
simulations (``attnbayes.app.report``); ``calibrate`` runs calibration studies over a fixed prior
(``attnbayes.app.calibrate``); ``deconvolve`` and ``filter`` run one method on a user's own CSV
(``attnbayes.app.user_data`` reads and checks it, ``attnbayes.app.deconvolve`` and
``attnbayes.app.filter`` run the method and write the outputs); ``regress`` runs Nadaraya-Watson
kernel regression on two columns of a user's CSV (``attnbayes.app.regress``); ``regimes`` fits a
Markov-switching regression, MS-AR or MS-VAR model to columns of a user's CSV
(``attnbayes.app.regimes``; its summary goes to stderr). Exit status 0 on
success, 2 for bad usage or bad input (reported before any JAX work), 1 when a run or writing its
output fails, 130 on Ctrl-C and 143 on SIGTERM; in every failure one line names what went wrong
(``--debug`` or ``ATTNBAYES_DEBUG=1`` adds the traceback) and nothing is written.

JAX is configured here, before it starts: float64, one host device per usable core unless
``XLA_FLAGS`` already sets a count (``attnbayes.app.devices.use_every_core``), and JAX's
persistent compilation cache (``attnbayes.app.cache``; ``ATTNBAYES_CACHE_DIR``, ``off`` to
turn it off). ``report`` and ``calibrate`` run across several processes with
``--coordinator HOST:PORT --process-id I --num-processes N`` (or ``ATTNBAYES_COORDINATOR``,
``ATTNBAYES_PROCESS_ID``, ``ATTNBAYES_NUM_PROCESSES``): checked with the other options (exit 2
on a bad value), then ``jax.distributed.initialize`` (``attnbayes.app.devices.join``) before any
computation; every process runs the same calls, process 0 writes and prints the path, the
others print only a failure (``process I: ...``).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
import warnings

import matplotlib

from ..inference import methods as registry
from . import devices
from .cache import enable_compilation_cache
from .parser import CALIBRATE_SIZES, build_parser


def _launch(args) -> devices.Launch | None:
    """The run's processes (``devices.launch_settings``) for ``report`` and ``calibrate``."""
    if args.command not in ("report", "calibrate"):
        return None
    launch = devices.launch_settings(args.coordinator, args.process_id, args.num_processes)
    if args.command == "report" and launch is not None and launch.num_processes > 1:
        if args.workers not in (None, 1):
            raise ValueError(
                f"--workers: does not apply with --num-processes {launch.num_processes}: the "
                "processes replace the workers (each runs every part)"
            )
    return launch


def _configure_jax(launch: devices.Launch | None = None) -> None:
    """Before JAX starts: one host device per usable core (unless ``XLA_FLAGS`` sets a
    count), the processes joined (``launch``), float64 and the compilation cache."""
    devices.use_every_core()
    if launch is not None:
        devices.join(launch)
    import jax

    jax.config.update("jax_enable_x64", True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        enable_compilation_cache()
    for warning in caught:
        print(f"attnbayes: warning: {warning.message}", file=sys.stderr)


def _report(args, progress, argv):
    from .report import write_report

    named = {} if args.name is None else {"name": args.name}
    return write_report(
        args.out,
        quick=args.quick,
        seed=args.seed,
        workers=args.workers,
        keep_trees=args.keep_trees,
        progress=progress,
        **named,
    )


def _deconvolve(args, progress, argv):
    from .deconvolve import run_deconvolve
    from .user_data import InputError, read_counts, read_standard_errors, read_table

    if args.binomial is not None:
        if args.columns is not None:
            raise InputError("--columns: does not apply with --binomial (HITS,TRIALS are the data)")
        table = read_counts(args.file, args.binomial, delimiter=args.delimiter)
        sigma = None
    else:
        table = read_table(
            args.file,
            delimiter=args.delimiter,
            columns=args.columns,
            prefix="x",
            exclude=args.se,
            exclude_option="--se",
        )
        sigma = args.sigma
        if args.se is not None:
            sigma = read_standard_errors(args.file, args.se, table, delimiter=args.delimiter)
    return run_deconvolve(
        table,
        sigma,
        binomial=args.binomial is not None,
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


def _regress(args, progress, argv):
    from .regress import read_xy, run_regress

    table = read_xy(args.file, args.x, args.y, delimiter=args.delimiter)
    return run_regress(
        table,
        kernel=args.kernel,
        bandwidth=args.bandwidth,
        grid=args.grid,
        level=args.level,
        out_dir=args.out,
        name=args.name,
        progress=progress,
        argv=argv,
    )


def _regimes(args, progress, argv):
    from .regimes import read_regimes_data, run_regimes

    data = read_regimes_data(
        args.file,
        args.y,
        exog=args.exog,
        tvtp=args.tvtp,
        time=args.time,
        delimiter=args.delimiter,
    )
    return run_regimes(
        data,
        order=args.order,
        num_regimes=args.regimes,
        trend=args.trend,
        common_exog=args.common_exog,
        switching_variance=args.switching_variance,
        switching_ar=args.switching_ar,
        method=args.method,
        horizon=args.horizon,
        num_starts=args.starts,
        num_warmup=args.warmup,
        num_samples=args.draws,
        num_chains=args.chains,
        seed=args.seed,
        out_dir=args.out,
        name=args.name,
        progress=progress,
        summary=lambda text: print(text, file=sys.stderr, flush=True),
        argv=argv,
    )


def _calibrate(args, progress, argv):
    from .calibrate import run_calibration
    from .user_data import InputError

    reading = args.reading
    methods = args.method or list(registry.CALIBRATE_DEFAULT[reading])
    offered = registry.command_choices("calibrate", reading)
    unknown = [m for m in methods if m not in offered]
    if unknown:
        raise InputError(
            f"--method: unknown {unknown} for --reading {reading}; choose from {list(offered)}"
        )
    given = {"--points": args.points, "--atoms": args.atoms, "--steps": args.steps}
    wrong = {"deconvolution": ("--steps",), "switching": ("--points", "--atoms")}[reading]
    for option in wrong:
        if given[option] is not None:
            raise InputError(f"{option}: does not apply to --reading {reading}")
    if reading == "switching" and (args.sigma_factor or args.data_fraction):
        raise InputError("--sigma-factor/--data-fraction: apply to --reading deconvolution only")
    from ..inference import calibration as cal

    if reading == "deconvolution":  # the study's default sizes unless given
        sizes = {"num_atoms": args.atoms, "num_points": args.points}
        study = cal.DeconvolutionStudy(**{k: v for k, v in sizes.items() if v is not None})
    else:
        study = cal.SwitchingStudy(**({} if args.steps is None else {"num_steps": args.steps}))
    sizes = {"num_warmup": args.warmup, "num_samples": args.draws, "num_chains": args.chains}
    overrides = {k: CALIBRATE_SIZES[k] if v is None else v for k, v in sizes.items()}
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

    template = None
    if args.scenario is not None:
        from ..models.switching import check_params, get_scenario

        params, labels = check_params("params", get_scenario(args.scenario)), {}
        o = params.emission_matrices.shape[1]
        reason = f'the scenario "{args.scenario}" observes {o} values per step'
    elif args.template is not None:
        params, o = None, 1
        reason = f'the template "{args.template}" observes one value per step'
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
    from .filter import run_filter, template_params

    if args.template is not None:
        params, labels = template_params(args.template, table)
        template = args.template
    return run_filter(
        table,
        params,
        method=args.method,
        scenario=args.scenario,
        params_path=args.params,
        template=template,
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

    # under several processes, process 0 says the progress and prints the path; the others
    # print only a failure, naming their process
    quiet = False
    launch = None

    def progress(message: str) -> None:
        if pending:
            raise pending[0]
        if not quiet:
            print(f"[{time.perf_counter() - start:6.1f}s] {message}", file=sys.stderr, flush=True)

    def fail(message: str, status: int) -> int:
        if debug:
            traceback.print_exc()
        who = f"process {launch.process_id}: " if launch is not None and launch.process_id else ""
        print(f"attnbayes: {who}{message}", file=sys.stderr)
        if launch is not None and launch.num_processes > 1 and devices.joined():
            # a normal exit would wait in jax.distributed's shutdown barrier (300 s) while the
            # other processes wait in a collective for this one: end now, and JAX's heartbeat
            # timeout ends the others (100 s)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
        return status

    run = {
        "report": _report,
        "deconvolve": _deconvolve,
        "filter": _filter,
        "regress": _regress,
        "regimes": _regimes,
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
        launch = _launch(args)
        if launch is not None:
            progress(
                f"process {launch.process_id} of {launch.num_processes}: joining "
                f"{launch.coordinator} (waiting at most {devices.JOIN_TIMEOUT_S} s)"
            )
        _configure_jax(launch)
        quiet = launch is not None and launch.process_id != 0
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
    if not quiet:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
