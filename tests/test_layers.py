"""The house rules: layers, no cycles, no private names across sub-packages, one copy.

The import-linter contracts live in pyproject.toml. grimp walks one folder per top-level
package, while ours maps three folders (models/, inference/, app/) into ``attnbayes``, so the
contracts are checked on a staged package: a folder ``attnbayes/`` linking the four parts.
"""

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PARTS = {"models": "models", "inference": "inference", "app": "app"}
# Each source folder and the dotted package it installs as.
PACKAGE_DIRS = {ROOT / "attnbayes": "attnbayes"} | {
    ROOT / folder: f"attnbayes.{name}" for name, folder in PARTS.items()
}

LINT = """
import sys, attnbayes
assert attnbayes.__file__.startswith(sys.argv[1]), attnbayes.__file__
from importlinter.cli import lint_imports
sys.exit(lint_imports(config_filename=sys.argv[2], no_cache=True, no_logo=True))
"""


def _stage(where: Path, *, copy: bool) -> Path:
    """A folder holding ``attnbayes/`` with the three mapped folders inside it."""
    package = where / "attnbayes"
    package.mkdir(parents=True)
    for source in (ROOT / "attnbayes").glob("*.py"):
        (package / source.name).symlink_to(source)
    for name, folder in PARTS.items():
        if copy:
            shutil.copytree(
                ROOT / folder, package / name, ignore=shutil.ignore_patterns("__pycache__")
            )
        else:
            (package / name).symlink_to(ROOT / folder, target_is_directory=True)
    return where


def _lint(stage: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(stage)}
    return subprocess.run(
        [sys.executable, "-P", "-c", LINT, str(stage), str(ROOT / "pyproject.toml")],
        cwd=stage,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_import_contracts_are_kept(tmp_path):
    result = _lint(_stage(tmp_path, copy=False))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


# One violation per contract: (file under the staged package, line appended, contract broken).
VIOLATIONS = [
    ("models/switching.py", "from ..app import cli", "The app sits above inference"),
    ("inference/attention/simplex.py", "from .. import kernel_regression", "Inside inference"),
    ("inference/deconvolution/em.py", "from ..switching import kalman", "Inside inference"),
    ("inference/switching/filters.py", "from . import comparison", "Algorithms never import"),
    ("models/deconvolution.py", "from . import switching", "Model families are independent"),
    ("inference/deconvolution/em.py", "from . import invariants", "No import cycles"),
    ("inference/mcmc.py", "import matplotlib.pyplot", "Only the app plots"),
    ("inference/switching/kalman.py", "from . import filters", "The switching rooms"),
    ("inference/switching/learning/parameters.py", "from . import mle", "The learning rooms"),
    ("inference/deconvolution/estep.py", "from . import gibbs", "The deconvolution rooms"),
    ("inference/deconvolution/learned/unrolled.py", "from . import training", "The learned rooms"),
    ("inference/kernel_regression/kernels.py", "from . import estimator", "The kernel-regression"),
    ("models/markov_switching/structure.py", "from . import labels", "The Markov-switching rooms"),
    ("inference/attention/simplex.py", "from . import scores", "The attention rooms"),
    ("app/user_data.py", "from . import runs", "The app's rooms"),
]


def test_each_contract_can_fail(tmp_path):
    """Every contract is broken by the one import it exists to refuse (a single lint run)."""
    stage = _stage(tmp_path, copy=True)
    for path, line, _ in VIOLATIONS:
        with open(stage / "attnbayes" / path, "a") as f:
            f.write(f"\n{line}  # noqa\n")
    result = _lint(stage)
    assert result.returncode != 0
    report = " ".join(result.stdout.split())  # names wrap over lines in the report
    for _, _, contract in VIOLATIONS:
        verdict = re.search(re.escape(contract) + r".*?\b(KEPT|BROKEN)\b", report)
        assert verdict and verdict.group(1) == "BROKEN", (contract, result.stdout)
    assert "0 kept" in report, result.stdout


def _modules():
    """(dotted name, is package, path) for every module of the installed package."""
    for folder, dotted in PACKAGE_DIRS.items():
        for path in sorted(folder.rglob("*.py")):
            rel = path.relative_to(folder).with_suffix("").parts
            is_package = rel[-1] == "__init__"
            name = ".".join((dotted, *rel[:-1])) if is_package else ".".join((dotted, *rel))
            yield name, is_package, path


MODULES = {name: (is_package, path) for name, is_package, path in _modules()}


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _owner(module: str) -> str:
    """The sub-package a module belongs to (itself if it is a package)."""
    return module if MODULES.get(module, (False,))[0] else module.rpartition(".")[0]


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_uses(module: str, is_package: bool, tree: ast.AST, allowed) -> list[str]:
    """``from X import _y`` and ``X._y`` in ``tree`` for an attnbayes module X not ``allowed``."""
    offences = []
    imported_modules = {}  # local name -> dotted module
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = _resolve(module, is_package, node)
            for alias in node.names:
                full = f"{source}.{alias.name}"
                if full in MODULES:
                    imported_modules[alias.asname or alias.name] = full
                elif (
                    _private(alias.name) and source.startswith("attnbayes") and not allowed(source)
                ):
                    offences.append(f"{node.lineno}: imports {full}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("attnbayes"):
                    imported_modules[alias.asname or alias.name] = alias.name
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and _private(node.attr)):
            continue
        dotted = ast.unparse(node.value)
        target = imported_modules.get(dotted) or (dotted if dotted in MODULES else None)
        if target is not None and not allowed(target):
            offences.append(f"{node.lineno}: uses {dotted}.{node.attr}")
    return offences


def test_no_private_name_crosses_a_module():
    """A helper used by two modules has a plain name: ``from X import _y`` and ``X._y`` only
    inside X itself."""
    offences = []
    for module, (is_package, path) in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        offences += [
            f"{module} {o}"
            for o in _private_uses(module, is_package, tree, lambda source, m=module: source == m)
        ]
    assert not offences, offences


TESTS = ROOT / "tests"


def _mirrored_package(test_path: Path) -> str:
    """The sub-package a test file mirrors: tests/inference/switching/x.py ->
    attnbayes.inference.switching (tests/ itself mirrors ``attnbayes``)."""
    parts = test_path.relative_to(TESTS).parent.parts
    return ".".join(("attnbayes", *parts))


def test_no_test_calls_a_private_function_of_another_sub_package():
    """A test may reach private names of the sub-package it mirrors, and of no other."""
    offences = []
    for path in sorted(TESTS.rglob("*.py")):
        package = _mirrored_package(path)
        tree = ast.parse(path.read_text(), str(path))

        def allowed(source, package=package):
            return _owner(source) == package

        offences += [
            f"{path.relative_to(TESTS)}:{o}"
            for o in _private_uses("tests", False, tree, allowed)
            if not package == "attnbayes.support"
        ]
    assert not offences, offences


def test_the_private_name_checks_can_fail():
    tree_module = "attnbayes.inference.switching.filters"
    node = ast.parse("from ..deconvolution.em import _em_step").body[0]
    source = _resolve(tree_module, False, node)
    assert source == "attnbayes.inference.deconvolution.em"
    assert _owner(source) != _owner(tree_module)
    assert _owner("attnbayes.inference.switching") == "attnbayes.inference.switching"
    sibling = ast.parse("from .kalman import _chol\nfrom . import kalman\nkalman._mm(1, 2)")
    uses = _private_uses(tree_module, False, sibling, lambda s: s == tree_module)
    assert len(uses) == 2, uses
    in_test = ast.parse("from attnbayes.inference.switching import kalman as k\nk._chol(1)")
    assert _private_uses("tests", False, in_test, lambda s: s.startswith("attnbayes.models"))
    assert not _private_uses("tests", False, in_test, lambda s: s.startswith("attnbayes.inference"))
    assert _mirrored_package(TESTS / "inference" / "switching" / "test_x.py") == (
        "attnbayes.inference.switching"
    )


def test_packages_import_each_other_relatively():
    """No absolute ``attnbayes``/``models``/``inference``/``app`` import inside the packages."""
    offences = []
    for module, (_, path) in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            for name in names:
                if name.split(".")[0] in {"attnbayes", *PARTS}:
                    offences.append(f"{module}:{node.lineno} imports {name}")
    assert not offences, offences


def _backend_and_pyplot(tree: ast.AST) -> tuple[bool, bool]:
    """Whether a module calls ``matplotlib.use(...)`` and whether it imports pyplot."""
    sets_backend = any(
        isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "use"
        and isinstance(n.func.value, ast.Name)
        and n.func.value.id == "matplotlib"
        for n in ast.walk(tree)
    )
    imports_pyplot = any(
        (isinstance(n, ast.Import) and any("pyplot" in a.name for a in n.names))
        or (
            isinstance(n, ast.ImportFrom)
            and ("pyplot" in (n.module or "") or any(a.name == "pyplot" for a in n.names))
        )
        for n in ast.walk(tree)
    )
    return sets_backend, imports_pyplot


def test_only_the_cli_sets_a_backend_and_only_the_app_uses_pyplot():
    found = {m: _backend_and_pyplot(ast.parse(p.read_text())) for m, (_, p) in MODULES.items()}
    assert [m for m, (backend, _) in found.items() if backend] == ["attnbayes.app.cli"]
    pyplot = [m for m, (_, uses) in found.items() if uses]
    assert pyplot and all(m.startswith("attnbayes.app.") for m in pyplot), pyplot
    assert _backend_and_pyplot(ast.parse("import matplotlib\nmatplotlib.use('Agg')")) == (
        True,
        False,
    )
    assert _backend_and_pyplot(ast.parse("from matplotlib import pyplot as plt")) == (False, True)


def test_the_longest_test_groups_exist():
    """conftest's LONGEST_FIRST names test files (or the session fixture) that are there: a moved
    file would silently lose its place at the head of the queue."""
    source = (ROOT / "tests" / "conftest.py").read_text()
    assignment = next(
        node
        for node in ast.parse(source).body
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "LONGEST_FIRST"
    )
    groups = ast.literal_eval(assignment.value)
    assert groups
    for group in groups:
        assert (ROOT / "tests" / group).is_file() or f"def {group}(" in source, group


def test_no_second_copy_under_bare_names():
    """Tests run with ``python -P``: the folders are not importable as top-level packages."""
    import importlib.util

    for name in PARTS:
        assert importlib.util.find_spec(name) is None, name
    import attnbayes.models

    assert Path(attnbayes.models.__file__).parent == ROOT / "models"


@pytest.mark.parametrize("line", ["import models", "from inference.mcmc import run_nuts"])
def test_ruff_refuses_bare_imports_outside_the_packages(line):
    """tests/, notebooks/ and benchmarks/ are linted with TID251 banning the bare names."""
    result = subprocess.run(
        [str(Path(sys.executable).parent / "ruff"), "check", "--stdin-filename", "tests/probe.py"],
        input=line + "\n",
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    assert "TID251" in result.stdout and "is banned" in result.stdout


LEAN_IMPORT = """
import sys
import attnbayes.inference
from attnbayes.inference import attention, deconvolution, kernel_regression, mcmc, switching
from attnbayes.inference import diagnostics
heavy = sorted(m for m in ("arviz", "arviz_base", "arviz_stats", "xarray", "pandas")
               if m in sys.modules)
print(",".join(heavy))
"""


def test_the_algorithms_import_without_arviz_xarray_or_pandas():
    """ArviZ, xarray and pandas cost seconds to import; only the code that uses them imports
    them (the samplers' DataTrees, the comparisons' tables, model comparison, the app)."""
    result = subprocess.run(
        [sys.executable, "-P", "-c", LEAN_IMPORT], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "", f"imported at import time: {result.stdout.strip()}"


LONG_MODULE_LINES = 800


def test_a_module_over_800_lines_says_why():
    """No module over 800 lines without a reason in its docstring ("Over 800 lines: ...")."""
    unexplained = []
    for name, (_, path) in MODULES.items():
        source = path.read_text(encoding="utf-8")
        if source.count("\n") <= LONG_MODULE_LINES:
            continue
        doc = ast.get_docstring(ast.parse(source)) or ""
        if not re.search(r"\bover [\d,]+ lines\b", doc, re.IGNORECASE):
            unexplained.append(f"{name} ({source.count(chr(10))} lines)")
    assert not unexplained, unexplained


def _function_bodies():
    """(module, function name, its body as an AST dump without the docstring) for every
    top-level function of the package with two statements or more."""
    for name, (_, path) in MODULES.items():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if not isinstance(node, ast.FunctionDef):
                continue
            body = node.body
            if ast.get_docstring(node) is not None:
                body = body[1:]
            if len(body) >= 2:
                yield name, node.name, ast.dump(ast.Module(body=body, type_ignores=[]))


def test_no_function_is_defined_twice():
    """A helper two modules need lives once, under a plain name (a second copy with the
    same statements, whatever its name, is refused)."""
    seen, copies = {}, []
    for module, function, body in _function_bodies():
        first = seen.setdefault(body, (module, function))
        if first[0] != module:
            copies.append((first, (module, function)))
    assert not copies, copies
