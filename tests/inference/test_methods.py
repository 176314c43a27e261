"""The method registry (``attnbayes.inference.methods``): every entry's function resolves, names
and aliases are unambiguous, and the commands' lists are consistent with what runs them."""

import subprocess
import sys

import pytest

from attnbayes.inference import methods as registry

ENTRIES = [m for reading in registry.REGISTRY.values() for m in reading.values()]


@pytest.mark.parametrize("method", ENTRIES, ids=[f"{m.reading}-{m.name}" for m in ENTRIES])
def test_every_function_resolves(method):
    """``Method.fit`` is looked up lazily from its "module:function" string: a module moved or a
    function renamed would otherwise break only when the method is run."""
    if method.function is None:
        assert method.fit is None
        return
    fit = method.fit
    assert callable(fit), method.function
    assert fit.__name__ == method.function.split(":")[1]


def test_aliases_name_their_method_and_shadow_nothing():
    assert registry.get_method("deconvolution", "em") is registry.get_method(
        "deconvolution", "attention-em"
    )
    assert registry.settings("deconvolution", "em") == registry.settings(
        "deconvolution", "attention-em"
    )
    for reading, methods in registry.REGISTRY.items():
        names = [n for m in methods.values() for n in (m.name, *m.aliases)]
        assert len(names) == len(set(names)), reading
        for method in methods.values():
            assert method.reading == reading
            for alias in method.aliases:
                assert registry.get_method(reading, alias) is method
    with pytest.raises(ValueError, match="method: unknown 'kalman'"):
        registry.get_method("switching", "kalman")
    with pytest.raises(ValueError, match="reading: unknown"):
        registry.get_method("filters", "imm")


def test_the_commands_lists_come_from_the_registry():
    assert registry.command_choices("deconvolve", "deconvolution") == (
        "attention-em",
        "em",
        "npmle",
        "nuts",
        "gibbs",
        "sure",
        "normal-eb",
        "learned",
    )
    assert registry.command_choices("filter", "switching") == (
        "gpb1",
        "gpb2",
        "imm",
        "rbpf",
        "gibbs",
    )
    for command, readings in registry.COMMANDS.items():
        for reading in readings:
            offered = registry.command_methods(command, reading)
            assert offered, (command, reading)
            if command != "calibrate":  # the commands' help and pages describe each method
                assert all(m.description for m in offered)
    for reading, default in registry.CALIBRATE_DEFAULT.items():
        assert set(default) <= set(registry.command_choices("calibrate", reading))
    with pytest.raises(ValueError, match="command: unknown"):
        registry.command_methods("smooth", "switching")


def test_the_commands_can_run_what_they_offer():
    """deconvolve runs its methods through ``compare_deconvolution``; filter runs a filter then
    Kim's smoother, or a sampler of the smoothing posterior; calibrate is ``calibrate``."""
    from attnbayes.inference.calibration import CALIBRATION_METHODS
    from attnbayes.inference.deconvolution.comparison import METHODS

    assert {m.name for m in registry.command_methods("deconvolve", "deconvolution")} <= set(METHODS)
    for method in registry.command_methods("filter", "switching"):
        kind = (method.returns, method.target)
        assert kind in (("intervals", "filter"), ("draws", "smoother")), method.name
        if method.returns == "draws":
            assert {"num_warmup", "num_samples", "num_chains"} <= set(method.defaults)
    for reading in registry.READINGS:
        offered = registry.command_methods("calibrate", reading)
        assert tuple(m.name for m in offered) == CALIBRATION_METHODS[reading]


def test_the_learned_method_runs_the_grid_stack_with_its_shipped_parameters(monkeypatch):
    """ "learned" is the version-2 grid stack: an interval method offered by deconvolve and
    calibrate, whose ``fit`` and ``load_pretrained`` are looked up when asked for (a patched
    module attribute is what runs)."""
    from attnbayes.inference.deconvolution.learned import grid_stack

    method = registry.get_method("deconvolution", "learned")
    assert (method.returns, method.target, method.needs_key) == (
        "intervals",
        "prior-posterior",
        False,
    )
    assert method.commands == ("deconvolve", "calibrate")
    assert "learned" in registry.command_choices("calibrate", "deconvolution")
    assert method.fit is grid_stack.grid_stack_fit
    assert dict(method.defaults) == {"grid_size": grid_stack.GRID_SIZE}
    assert "p = 1" in method.description and "standard error per row" in method.description
    monkeypatch.setattr(grid_stack, "pretrained_grid_stack", lambda **kw: ("shipped", kw))
    assert method.load_pretrained(metadata=True) == ("shipped", {"metadata": True})
    assert registry.get_method("deconvolution", "npmle").load_pretrained() is None


def test_normal_nuts_is_a_sampler_of_the_comparison_not_of_a_command():
    """ "normal-nuts" (the eight-schools model by NUTS) returns draws, needs a key, runs NUTS with
    the sampler sizes of "nuts" and is run by ``compare_deconvolution`` (one of its samplers);
    no command offers it (``attnbayes deconvolve`` would need its own output for it)."""
    from attnbayes.inference import mcmc
    from attnbayes.inference.deconvolution.comparison import METHODS, SAMPLERS

    method = registry.get_method("deconvolution", "normal-nuts")
    assert (method.returns, method.target, method.needs_key) == (
        "draws",
        "prior-posterior",
        True,
    )
    assert method.fit is mcmc.run_nuts
    nuts = registry.settings("deconvolution", "nuts")
    for size in ("num_warmup", "num_samples", "num_chains"):
        assert method.defaults[size] == nuts[size]
    assert set(method.defaults) <= set(mcmc.NUTS_SETTINGS)  # sampler settings only
    assert method.commands == ()
    assert "normal-nuts" in METHODS and "normal-nuts" in SAMPLERS
    assert "normal-nuts" not in registry.command_choices("deconvolve", "deconvolution")
    assert "non-centred" in method.description and "per coordinate" in method.description


def test_the_registry_imports_no_jax():
    """The command's parser reads the registry, so ``attnbayes --help`` needs no JAX."""
    script = (
        "import sys\n"
        "from attnbayes.inference import methods\n"
        "methods.command_choices('deconvolve', 'deconvolution')\n"
        "assert 'jax' not in sys.modules\n"
    )
    done = subprocess.run(
        [sys.executable, "-P", "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
