"""The ``attnbayes`` command itself: its help (from the registry and the constants, without
JAX), the names it offers, and refusals before any work. Each command's runs are tested beside
its module: ``test_deconvolve.py``, ``test_filter.py``, ``test_regress.py``,
``test_calibrate.py``; the bad-input catalogue of all of them is ``test_bad_input.py``."""

import inspect
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

from attnbayes.app import parser as parser_module
from attnbayes.app.filter import SCENARIO_LABELS
from attnbayes.app.parser import build_parser
from attnbayes.app.user_data import PARAMS_FIELDS
from attnbayes.inference import methods as registry
from attnbayes.models.switching import SCENARIOS, get_scenario


def test_help_lists_commands_options_defaults_and_exit_statuses(run_cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # no wrapping inside the option texts
    done = subprocess.run(
        [sys.executable, "-m", "attnbayes.app.cli", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    for word in ("report", "deconvolve", "filter", "exit status", "0  success", "1  the run"):
        assert word in done.stdout
    code, out, _ = run_cli(["deconvolve", "--help"])
    assert code == 0
    for word in (
        "--sigma S",
        "--se COLS",
        "--binomial HITS,TRIALS",
        "applies to every coordinate of its row",
        "arcsin(sqrt((H_i + 1/4) / (T_i + 1/2)))",
        "p = sin(z)^2",
        "--method {attention-em,em,npmle,nuts,gibbs,sure,normal-eb,learned}",
        "[em]",
        "--num-atoms K",
        "[5]",
        "[nuts 500, gibbs 2000]",
        "[nuts 500, gibbs 1000]",
        "[nuts 2, gibbs 4]",
        "--columns COLS",
        "--delimiter C",
        "[reports]",
        "z_hat.csv",
        "posterior.nc",
        "run.json",
        "header row is optional",
        "2  bad usage or bad input",
    ):
        assert word in out, word
    code, out, _ = run_cli(["filter", "--help"])
    assert code == 0
    for word in (
        "--scenario NAME",
        "--params FILE.json",
        "{gpb1,gpb2,imm,rbpf,gibbs}",
        "[imm]",
        "[1000]",
        "[300]",
        "[4]",
        "maneuvering-target-cwna",
        *(f"{field:<18} {shape:<10} {what}" for field, (shape, what) in PARAMS_FIELDS.items()),
        "states.csv",
        "smoothed_prob_<mode>",
        "predict only",
        "exit status",
    ):
        assert word in out, word


def test_the_parser_offers_the_registry_and_the_library_names():
    """The --method choices are the registry's names and aliases; the scenarios, the learned
    parameters and the report's folder are the library's."""
    from attnbayes.app.report import write_report
    from attnbayes.models.markov_switching import STATE_SPACE_FREE

    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    options = {command: {a.dest: a for a in sub._actions} for command, sub in commands.items()}
    assert options["deconvolve"]["method"].choices == (
        "attention-em",
        "em",
        "npmle",
        "nuts",
        "gibbs",
        "sure",
        "normal-eb",
        "learned",
    )
    assert options["deconvolve"]["method"].choices == registry.command_choices(
        "deconvolve", "deconvolution"
    )
    assert options["filter"]["method"].choices == registry.command_choices("filter", "switching")
    for command, reading in (("deconvolve", "deconvolution"), ("filter", "switching")):
        default = options[command]["method"].default
        assert default in registry.command_choices(command, reading)
        assert registry.get_method(reading, default).name in registry.method_names(reading)
    assert tuple(options["filter"]["scenario"].choices) == tuple(SCENARIOS)
    assert "[" + ",".join(STATE_SPACE_FREE) + "]" in options["filter"]["free"].help
    name = inspect.signature(write_report).parameters["name"].default
    assert name == parser_module.REPORT_NAME
    assert f"[{name}]" in options["report"]["name"].help
    for name, (states, modes) in SCENARIO_LABELS.items():
        params = get_scenario(name)
        assert params.initial_means.shape == (len(modes), len(states))
    # defaults the command copies from the library: --fit mle's starts on the scenarios'
    # state-space models
    from attnbayes.inference.switching.learning.mle import default_num_starts
    from attnbayes.models.markov_switching import switching_state_space

    for name in SCENARIO_LABELS:
        params = get_scenario(name)
        spec = switching_state_space(params, np.zeros((3, params.emission_matrices.shape[1])))
        assert default_num_starts(spec, spec.free) == parser_module.DEFAULT_STARTS


HELP_WITHOUT_JAX = """
import sys
from attnbayes.app.cli import main
for argv in ([], ["deconvolve"], ["filter"], ["regress"], ["regimes"], ["calibrate"], ["report"]):
    try:
        main([*argv, "--help"])
    except SystemExit as done:
        assert done.code == 0, (argv, done.code)
heavy = [m for m in ("jax", "jaxlib", "numpyro", "arviz", "xarray") if m in sys.modules]
assert not heavy, heavy
print("no jax")
"""


def test_help_imports_no_jax():
    """``attnbayes --help`` and every ``attnbayes COMMAND --help`` build the parser and print
    its help from the registry and the constants, without importing JAX."""
    done = subprocess.run(
        [sys.executable, "-P", "-c", HELP_WITHOUT_JAX],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("no jax")


def test_a_refused_command_line_imports_no_jax():
    """A command line argparse refuses is refused before JAX is imported."""
    script = HELP_WITHOUT_JAX.replace('[*argv, "--help"]', '[*argv, "--no-such-option"]')
    script = script.replace("done.code == 0", "done.code == 2")
    done = subprocess.run(
        [sys.executable, "-P", "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr


# ----------------------------------------------------------------------------- report


def test_report_refuses_bad_workers_before_any_work(tmp_path, run_cli, monkeypatch, no_jax_work):
    out = tmp_path / "out"
    for bad in ("0", "-2", "two", "1.5"):
        code, _, err = run_cli(["report", "--quick", "--workers", bad, "--out", out])
        assert code == 2 and "argument --workers:" in err
    monkeypatch.setenv("ATTNBAYES_WORKERS", "many")
    code, _, err = run_cli(["report", "--quick", "--out", out])
    assert code == 2
    assert err.strip().splitlines()[-1] == (
        "attnbayes: error: ATTNBAYES_WORKERS: expected an integer >= 1, got 'many'"
    )
    assert not out.exists()


def _flat(text: str) -> str:
    """Help text with its line breaks and runs of spaces made one space."""
    return re.sub(r"\s+", " ", text)


def test_report_help_states_its_times_once_and_names_every_section(run_cli, monkeypatch):
    """The times are stated once, in README's numbers (two workers: the full report about 5.5
    minutes cold and 3 warm, --quick about 2.5 cold and under 1 warm), and the page's summary and
    nine sections are named (``SECTIONS``)."""
    from attnbayes.app.report import SECTIONS

    monkeypatch.setenv("COLUMNS", "100")
    code, out, _ = run_cli(["report", "--help"])
    assert code == 0
    text = _flat(out).lower()
    assert "a summary (which method wins on which measure" in text
    for number, (_, title) in enumerate(SECTIONS, start=1):
        name = title.split(". ", 1)[1].split(":")[0].lower()
        assert f"{number}. {name}" in text, name
    assert text.count("time on two workers") == 1
    assert text.count("minute") == 4
    for phrase in (
        "the full report about 5.5 minutes on a first run (cold",
        "about 3 minutes on later runs (warm",
        "--quick about 2.5 minutes cold and under 1 minute warm",
    ):
        assert phrase in text, phrase
    assert (
        "--keep-trees keep the samplers' full datatrees (by default they are thinned and " in text
    )


def test_report_keep_trees_reaches_write_report(tmp_path, run_cli, monkeypatch):
    import attnbayes.app.report

    calls = []

    def write_report(out_dir, **kwargs):
        calls.append(kwargs)
        return Path(out_dir) / "index.html"

    monkeypatch.setattr(attnbayes.app.report, "write_report", write_report)
    for argv, keep in ((["--keep-trees"], True), ([], False)):
        code, _, err = run_cli(["report", "--quick", *argv, "--out", tmp_path])
        assert code == 0, err
        assert calls.pop()["keep_trees"] is keep


def test_calibrate_help_prints_single_percent_signs(run_cli):
    code, out, _ = run_cli(["calibrate", "--help"])
    assert code == 0
    assert "50% and 90%" in _flat(out) and "%%" not in out


def test_regress_help_lists_options_defaults_and_outputs(run_cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = run_cli(["regress", "--help"])
    assert code == 0
    for word in (
        "--x COL",
        "--y COL",
        "--kernel {gaussian,boxcar,epanechnikov,triangular,tricube}",
        "[gaussian]",
        "--bandwidth H",
        "[chosen by leave-one-out CV]",
        "--grid N",
        "[200]",
        "--level P",
        "[0.9]",
        "--delimiter C",
        "fitted.csv",
        "curve.csv",
        "cv.csv",
        "metrics.csv",
        "run.json",
        "ignores the bias",
        "header row is optional",
        "<FILE stem>-regress-<kernel>",
        "2  bad usage or bad input",
    ):
        assert word in out, word
    assert "--columns" not in out


def test_regimes_help_lists_options_defaults_and_outputs(run_cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = run_cli(["regimes", "--help"])
    assert code == 0
    for word in (
        "--y COLS",
        "--exog COLS",
        "--common-exog COLS",
        "--trend {c,n}",
        "--order P",
        "--regimes M",
        "--tvtp COLS",
        "--switching-variance",
        "--switching-ar",
        "--method {mle,em,nuts}",
        "[mle]",
        "--horizon H",
        "50% and 90% intervals",
        "[500]",
        "parameters.csv",
        "durations.csv",
        "local_optima.csv",
        "regimes.csv",
        "regimes.png",
        "forecast.csv",
        "fit_posterior.nc",
        "MS-VAR(P)",
        "--time COL",
        "mean_mc_se",
        "s_(t-P+1) there: the two fits differ",
        "A.Lk.B[j] the coefficient",
        "p[i->j].const, p[i->j].COL",
        "header row is optional",
        "<FILE stem>-regimes-<method>",
        "2  bad usage or bad input",
    ):
        assert word in out, word
    assert "--columns" not in out and "%%" not in out


def test_filter_help_lists_the_templates(run_cli, monkeypatch):
    from attnbayes.app.parser import FILTER_TEMPLATES

    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = run_cli(["filter", "--help"])
    assert code == 0
    assert "--template NAME" in out
    for name in FILTER_TEMPLATES:
        assert f"  {name} " in out, name


def test_every_argparse_error_is_one_line_naming_the_option(tmp_path, run_cli, no_jax_work):
    """argparse's refusals (a bad value, an unknown choice, a missing option, an unknown
    command or option) print one line 'attnbayes: error: ...' naming the option, no usage,
    exit status 2, nothing written; --help is argparse's (review N9)."""
    path = tmp_path / "data.csv"
    path.write_text("y\n1\n2\n")
    out = tmp_path / "out"
    cases = [
        (
            ["regimes", path, "--y", "y", "--regimes", "0"],
            "argument --regimes: must be >= 1, got 0",
        ),
        (
            ["regimes", path, "--y", "y", "--regimes", "2", "--trend", "x"],
            "argument --trend: invalid choice: 'x' (choose from 'c', 'n')",
        ),
        (
            ["filter", path, "--template", "locallevel"],
            "argument --template: invalid choice: 'locallevel' (choose from 'local-level', "
            "'local-linear-trend')",
        ),
        (["regimes", path, "--y", "y"], "the following arguments are required: --regimes"),
        (["report", "--workers", "0"], "argument --workers: must be >= 1, got 0"),
        (["deconvolve", path, "--sigma", "1", "--bogus"], "unrecognized arguments: --bogus"),
        (["regime"], "argument COMMAND: invalid choice: 'regime' (choose from 'report',"),
    ]
    for argv, message in cases:
        code, stdout, err = run_cli([*argv, "--out", out])
        assert code == 2 and not stdout, argv
        (line,) = err.strip().splitlines()
        assert line.startswith(f"attnbayes: error: {message}"), line
    assert not out.exists()
    code, stdout, _ = run_cli(["regimes", "--help"])
    assert code == 0 and stdout.startswith("usage: attnbayes regimes")


# ----------------------------------------------------------------------------- processes

LAUNCH = ["--coordinator", "127.0.0.1:8476", "--num-processes", "2"]


def test_launch_settings_are_refused_by_name_before_any_work(
    tmp_path, run_cli, monkeypatch, no_jax_work
):
    """Bad launch values (an option or its ATTNBAYES_ variable): one line naming it, exit 2,
    nothing written, no JAX work."""
    for name in ("COORDINATOR", "PROCESS_ID", "NUM_PROCESSES"):
        monkeypatch.delenv(f"ATTNBAYES_{name}", raising=False)
    out = tmp_path / "out"
    cases = [
        (["calibrate", "--coordinator", "localhost"], "argument --coordinator: expected HOST:P"),
        (["calibrate", "--process-id", "x"], "argument --process-id: expected an integer >= 0"),
        (["report", "--num-processes", "0"], "argument --num-processes: must be >= 1, got 0"),
        (["calibrate", *LAUNCH], "--process-id (ATTNBAYES_PROCESS_ID): missing; a run of sev"),
        (["report", *LAUNCH, "--process-id", "2"], "--process-id: must be < --num-processes (2)"),
        (
            ["report", *LAUNCH, "--process-id", "0", "--workers", "2"],
            "--workers: does not apply with --num-processes 2: the processes replace the workers",
        ),
    ]
    for argv, message in cases:
        code, stdout, err = run_cli([*argv, "--out", out])
        assert code == 2 and not stdout, argv
        (line,) = err.strip().splitlines()
        assert line.startswith(f"attnbayes: error: {message}"), line
    monkeypatch.setenv("ATTNBAYES_NUM_PROCESSES", "zero")
    code, stdout, err = run_cli(["calibrate", "--out", out])
    assert code == 2 and not stdout
    assert (
        err.strip()
        == "attnbayes: error: ATTNBAYES_NUM_PROCESSES: expected an integer >= 1, got 'zero'"
    )
    assert not out.exists()


def test_a_launch_joins_before_the_run_and_only_process_0_speaks(tmp_path, run_cli, monkeypatch):
    """The options (or, each one missing, its variable) reach ``devices.join`` before the run;
    a process other than 0 prints neither the progress nor the path."""
    import attnbayes.app.calibrate
    from attnbayes.app import devices

    events = []
    monkeypatch.setattr(devices, "join", lambda launch: events.append(launch))

    def run_calibration(reading, methods, *, progress, out_dir, **kwargs):
        events.append("run")
        progress("calibrating")
        return Path(out_dir) / "index.html"

    monkeypatch.setattr(attnbayes.app.calibrate, "run_calibration", run_calibration)
    monkeypatch.setenv("ATTNBAYES_PROCESS_ID", "1")
    monkeypatch.setenv("ATTNBAYES_COORDINATOR", "10.0.0.1:1")
    code, stdout, err = run_cli(["calibrate", *LAUNCH, "--out", tmp_path])
    assert code == 0, err
    assert events == [devices.Launch("127.0.0.1:8476", 1, 2), "run"]
    assert stdout == "" and "calibrating" not in err
    code, stdout, err = run_cli(["calibrate", *LAUNCH, "--process-id", "0", "--out", tmp_path])
    assert code == 0 and stdout.strip() == str(tmp_path / "index.html")
    assert "calibrating" in err
