"""The wheel: one top-level package, every dependency declared, usable outside the repository.

The fast test reads pyproject.toml; the slow one builds the wheel, installs it into a fresh
virtual environment outside the repository and uses it from a folder holding a user's own
``models.py`` and ``inference/``.
"""

import ast
import importlib.metadata
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import attnbayes

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ["attnbayes", "models", "inference", "app"]


def _requirement_name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _imported_top_level_modules() -> set[str]:
    names = set()
    for folder in FOLDERS:
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names.update(a.name.split(".")[0] for a in node.names)
                elif isinstance(node, ast.ImportFrom) and not node.level:
                    names.add((node.module or "").split(".")[0])
    return names - set(sys.stdlib_module_names) - {"attnbayes", "__future__"}


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {_requirement_name(r) for r in project["dependencies"]}


def test_every_imported_distribution_is_declared():
    """Each third-party module the packages import comes from a declared dependency."""
    provided_by = importlib.metadata.packages_distributions()
    declared = _declared()
    missing = {}
    for module in sorted(_imported_top_level_modules()):
        dists = {d.lower().replace("_", "-") for d in provided_by.get(module, [])}
        assert dists, f"{module} is imported but no installed distribution provides it"
        if not dists & declared:
            missing[module] = sorted(dists)
    assert not missing, f"imported but not declared in [project] dependencies: {missing}"
    assert {"scipy", "jax", "numpyro", "arviz", "matplotlib"} <= declared


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def _package_folders() -> dict[str, Path]:
    """Every folder of the package holding an ``__init__.py``, and every folder of data files
    inside one (setuptools takes such a folder for a namespace package, and warns at install
    when it is not listed), by its dotted name."""
    found = {}
    for dotted, folder in _setuptools()["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            found[".".join((dotted, *rel))] = init.parent
    for dotted, package in list(found.items()):
        for sub in package.iterdir():
            data = [p for p in sub.glob("*") if p.is_file() and p.suffix not in (".py", ".pyc")]
            if sub.is_dir() and sub.name != "__pycache__" and data and sub not in found.values():
                found[f"{dotted}.{sub.name}"] = sub
    return found


def test_the_package_lists_follow_the_tree():
    """pyproject's ``packages`` names every package folder (a moved module's new folder
    included), and its ``package-data`` every file of the package that is not Python."""
    folders = _package_folders()
    assert sorted(_setuptools()["packages"]) == sorted(folders)
    data = _setuptools()["package-data"]
    unlisted = []
    for path in {p for folder in folders.values() for p in folder.rglob("*") if p.is_file()}:
        if path.suffix in (".py", ".pyc") or "__pycache__" in path.parts:
            continue
        owner = max((d for d in folders if path.is_relative_to(folders[d])), key=len)
        rel = path.relative_to(folders[owner]).as_posix()
        if not any(Path(rel).match(glob) for glob in data.get(owner, [])):
            unlisted.append(rel)
    assert not unlisted, f"not in [tool.setuptools.package-data]: {unlisted}"


def test_version_is_single_sourced():
    assert attnbayes.__version__ == "0.2.0"
    assert importlib.metadata.version("attnbayes") == attnbayes.__version__


USE_THE_WHEEL = """
import importlib.util, sys
import jax, jax.numpy as jnp
jax.config.update("jax_enable_x64", True)
import attnbayes, attnbayes.models, attnbayes.inference, attnbayes.app
assert attnbayes.__version__ == "0.2.0"
assert "site-packages" in attnbayes.__file__, attnbayes.__file__
# The user's own models.py and inference/ in this folder stay theirs and never mix with ours.
assert importlib.util.find_spec("models").origin.endswith("elsewhere/models.py")
assert importlib.util.find_spec("inference").origin.endswith("elsewhere/inference/__init__.py")
assert importlib.util.find_spec("app") is None
from attnbayes.models.deconvolution import simulate, three_atoms, deconvolution_model
from attnbayes.inference.deconvolution import fit_em
from attnbayes.inference.mcmc import run_nuts
from attnbayes.models.switching import maneuvering_target, simulate as simulate_switching
from attnbayes.inference.switching import imm_filter
z, x = simulate(jax.random.PRNGKey(0), three_atoms(), 1.0, 60)
em = fit_em(x, 1.0, max_iters=50)
assert bool(jnp.all(jnp.isfinite(em.atoms)))
params = maneuvering_target()
modes, states, ys = simulate_switching(jax.random.PRNGKey(1), params, 40)
filtered = imm_filter(params, ys)
assert bool(jnp.isfinite(filtered.log_likelihood))
tree = run_nuts(jax.random.PRNGKey(2), deconvolution_model, (x,), dict(sigma=1.0, num_atoms=3),
                num_warmup=50, num_samples=50, num_chains=2, progress_bar=False)
assert "posterior" in tree.children
print("wheel works")
"""


@pytest.mark.slow
def test_the_wheel_installs_and_works_outside_the_repository(tmp_path):
    # Build from a copy, so setuptools' build/ folder never lands in the working tree.
    source = tmp_path / "source"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".venv", ".git", "build", "dist", "reports", "*.egg-info", "__pycache__", ".*_cache"
        ),
    )
    dist = tmp_path / "dist"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w", str(dist), str(source)],
        check=True,
        timeout=600,
        capture_output=True,
        text=True,
    )
    # setuptools' 40-line warning about a data folder missing from `packages`
    assert "would be ignored" not in build.stdout + build.stderr
    (wheel,) = dist.glob("attnbayes-0.2.0-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        top = {n.split("/")[0] for n in names}
        assert top == {"attnbayes", "attnbayes-0.2.0.dist-info"}, top
        for package in ["models", "inference", "app", "inference/switching", "app/report"]:
            assert f"attnbayes/{package}/__init__.py" in names, package
        pretrained = "attnbayes/inference/deconvolution/learned/pretrained/"
        assert {f"{pretrained}unrolled_em_v1.npz", f"{pretrained}MODEL_CARD.md"} <= set(names)
        metadata = archive.read("attnbayes-0.2.0.dist-info/METADATA").decode()
        entry_points = archive.read("attnbayes-0.2.0.dist-info/entry_points.txt").decode()
    required = {
        _requirement_name(line.split(":", 1)[1])
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    }
    assert required == _declared()
    assert "attnbayes = attnbayes.app.cli:main" in entry_points

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", str(wheel)], check=True, timeout=1200
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # A user's own models.py and inference/ must not shadow or mix with ours.
    (elsewhere / "models.py").write_text("raise ImportError('the user models.py was imported')\n")
    (elsewhere / "inference").mkdir()
    (elsewhere / "inference" / "__init__.py").write_text("raise ImportError('user inference')\n")
    run = subprocess.run(
        [str(python), "-c", USE_THE_WHEEL],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "wheel works" in run.stdout
    empty = tmp_path / "empty"
    empty.mkdir()
    for bare in ("models", "inference", "app"):
        refused = subprocess.run(
            [str(python), "-c", f"import {bare}"], cwd=empty, capture_output=True, text=True
        )
        assert refused.returncode == 1, bare
        assert f"ModuleNotFoundError: No module named '{bare}'" in refused.stderr
    cli = subprocess.run(
        [str(venv / "bin" / "attnbayes"), "--help"], cwd=elsewhere, capture_output=True, text=True
    )
    assert cli.returncode == 0, cli.stderr
    assert "deconvolve" in cli.stdout and "report" in cli.stdout
    # and the site-packages holds no top-level models/ or inference/
    site = next((venv / "lib").glob("python3.*/site-packages"))
    assert not (site / "models").exists() and not (site / "inference").exists()
    assert not (site / "app").exists()
