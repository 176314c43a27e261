"""The documentation says what is there: README's tour names every package, each package's
``__init__`` docstring names its modules and (in the library) every public name of its
``__all__``, and README's Python blocks run as printed."""

import ast
import builtins
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _packages() -> dict[str, Path]:
    """Every package folder (holding an ``__init__.py``), by its dotted name."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {}
    for dotted, folder in setuptools["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            found[".".join((dotted, *rel))] = init.parent
    return found


def _members(folder: Path) -> list[str]:
    """The modules (without ``.py``) and sub-packages directly in a package folder."""
    modules = [p.stem for p in folder.glob("*.py") if p.stem != "__init__"]
    subpackages = [p.name for p in folder.iterdir() if (p / "__init__.py").is_file()]
    return sorted(modules + subpackages)


def _tour() -> str:
    text = (ROOT / "README.md").read_text()
    match = re.search(r"^## A short tour\n(.*?)(?=^## )", text, flags=re.M | re.S)
    assert match, "README has no '## A short tour' section"
    return match.group(1)


def _names(text: str, name: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(name)}(?!\w|\.\w)", text) is not None


def _docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text())) or ""


def _public(path: Path) -> list[str]:
    """The names in a module's ``__all__``, read from its source (literal, or built of the
    module's literal tuples as ``[*_SUBMODULES, *_LEARNED]``); none if it has no ``__all__``."""
    literals = {}
    for node in ast.parse(path.read_text()).body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target = node.targets[0]
        if isinstance(target, ast.Name) and target.id == "__all__":
            expression = ast.Expression(node.value)
            return list(eval(compile(expression, str(path), "eval"), {}, literals))
        if isinstance(target, ast.Name):
            try:
                literals[target.id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    return []


def _api(folder: Path) -> list[str]:
    """What a library package's docstring must name: its ``__all__``."""
    return _public(folder / "__init__.py")


def _listed(doc: str) -> list[str]:
    """The names that open a line of a docstring's "Public API" list: ``- ``name``: ...``."""
    api = doc.partition("\nPublic API")[2]
    return re.findall(r"^\s*- ``(\w+)``", api, flags=re.M)


def _library() -> dict[str, Path]:
    """The packages of the library: everything but the application."""
    return {d: f for d, f in _packages().items() if not d.startswith("attnbayes.app")}


README_MAX_LINES = 310  # "a README a newcomer reads in five minutes": about 300 lines


def test_readme_stays_short():
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines (at most {README_MAX_LINES})"


def test_readme_tour_names_every_package():
    tour = _tour()
    missing = [dotted for dotted in _packages() if not _names(tour, dotted)]
    assert not missing, f"README's tour does not name these packages: {missing}"


def test_readme_tour_names_every_module_of_the_app():
    """The tour's row of ``attnbayes.app`` names each of its modules (the commands)."""
    rows = [line for line in _tour().splitlines() if line.startswith("| `attnbayes.app` |")]
    assert len(rows) == 1, "README's tour has no table row for attnbayes.app"
    (row,) = rows
    app = _packages()["attnbayes.app"]
    missing = [
        m for m in _members(app) if (app / f"{m}.py").is_file() and not _names(row, f"{m}.py")
    ]
    assert not missing, f"README's tour does not name these modules of attnbayes.app: {missing}"


def test_each_package_docstring_names_its_modules():
    missing = []
    for dotted, folder in _packages().items():
        doc = _docstring(folder / "__init__.py")
        missing += [f"{dotted}.{m}" for m in _members(folder) if not _names(doc, m)]
    assert not missing, f"not named in their package's __init__ docstring: {missing}"


def test_each_library_docstring_names_its_public_api_and_nothing_else():
    """Each library package's docstring names every public name (its ``__all__``), and every
    name that opens a line of its lists is a public name or one of its modules."""
    missing, stale = [], []
    for dotted, folder in _library().items():
        doc, api = _docstring(folder / "__init__.py"), _api(folder)
        missing += [f"{dotted}.{n}" for n in api if not _names(doc, f"``{n}``")]
        known = {*api, *_members(folder)}
        stale += [f"{dotted}.{n}" for n in _listed(doc) if n not in known]
    assert not missing, f"public names missing from their package's docstring: {missing}"
    assert not stale, f"listed in a package's docstring but not public there: {stale}"


def test_the_checks_can_fail():
    assert _names("``learning``: the fits", "learning")
    assert not _names("``learning_comparison``", "learning")
    assert not _names("attnbayes.inference.switching.learning", "attnbayes.inference.switching")
    assert _names("  marginal.py  the program", "marginal.py")
    assert "comparison" in _members(ROOT / "inference" / "switching")
    doc = "Rules:\n\n- ``max_iters``: a cap\n\nPublic API:\n\n- ``fit_em``: EM.\n  - ``npmle``: x\n"
    assert _listed(doc + "``attend`` and ``posterior``") == ["fit_em", "npmle"]
    assert "fit_em" in _api(ROOT / "inference" / "deconvolution")
    assert "unrolled_em" in _api(ROOT / "inference")  # __all__ = [*_SUBMODULES, *_LEARNED]
    assert "attnbayes.app.report" not in _library() and "attnbayes.models" in _library()
    assert _undefined("import jax\nx = jax.numpy.ones(3)\nprint(y, x)") == ["y"]


def python_blocks() -> list[str]:
    """README's ```python blocks, as printed."""
    text = (ROOT / "README.md").read_text()
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.M | re.S)


def _block_id(block: str) -> str:
    """A readable test id: the first name a block imports from attnbayes."""
    match = re.search(r"^from attnbayes[\w.]* import \(?\s*(\w+)", block, flags=re.M)
    return match.group(1) if match else "block"


def _ids() -> list[str]:
    return [_block_id(b) for b in python_blocks()]


def _undefined(source: str) -> list[str]:
    """Names a block reads that it neither binds nor imports nor has from builtins: each would
    be a NameError when the block runs on its own (scopes are not told apart)."""
    tree = ast.parse(source)
    bound = set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            bound.add(node.id)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    read = [n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
    return sorted(set(read) - bound)


# What a block must print, by id: the tracing paragraph shows check_filter_result naming the step
# at which a compiled filter overflowed.
EXPECTED_OUTPUT = {"check_filter_result": "non-finite values (NaN or inf) from step"}


@pytest.mark.parametrize("block", python_blocks(), ids=_ids())
def test_readme_block_names_only_what_it_binds(block):
    """Cheap, in ``make test``: no block reads a name it does not import or assign."""
    assert not _undefined(block), f"would raise NameError on its own: {_undefined(block)}"


def test_readme_blocks_have_distinct_ids_and_the_expected_outputs():
    assert len(set(_ids())) == len(python_blocks()), _ids()
    assert set(EXPECTED_OUTPUT) <= set(_ids()), (EXPECTED_OUTPUT, _ids())


@pytest.mark.parametrize("block", python_blocks(), ids=_ids())
def test_readme_block_runs(block, tmp_path):
    """Each block runs on its own as printed, in a fresh interpreter (``-P``: the checkout's
    folders are not importable by their bare names) in an empty folder. ``make notebooks``
    runs these (about 40 s on two workers); ``make test`` leaves them out."""
    block_id = _block_id(block)
    script = tmp_path / f"{block_id}.py"
    script.write_text(block)
    run = subprocess.run(
        [sys.executable, "-P", str(script)], capture_output=True, text=True, cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr[-4000:]
    assert EXPECTED_OUTPUT.get(block_id, "") in run.stdout
