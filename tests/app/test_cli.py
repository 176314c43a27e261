"""The ``attnbayes`` command itself: its help (from the registry and the constants, without
JAX), the names it offers, and refusals before any work. Each command's runs are tested beside
its module: ``test_deconvolve.py``, ``test_filter.py``, ``test_calibrate.py``; the bad-input
catalogue of all of them is ``test_bad_input.py``."""

import inspect
import subprocess
import sys

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
        "--method {attention-em,em,npmle,nuts,gibbs}",
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
    # defaults the command copies from the library: --fit mle's starts
    from attnbayes.inference.switching import fit_switching

    starts = inspect.signature(fit_switching).parameters["num_starts"].default
    assert starts == parser_module.DEFAULT_STARTS


HELP_WITHOUT_JAX = """
import sys
from attnbayes.app.cli import main
for argv in ([], ["deconvolve"], ["filter"], ["calibrate"], ["report"]):
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
