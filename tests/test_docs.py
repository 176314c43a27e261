"""The documentation names what is there: README's tour every package and module, and each
package's ``__init__`` docstring each of its modules and sub-packages."""

import ast
import re
import tomllib
from pathlib import Path

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


def test_readme_tour_names_every_package_and_module():
    tour = _tour()
    missing = [dotted for dotted in _packages() if not _names(tour, dotted)]
    assert not missing, f"README's tour does not name these packages: {missing}"
    missing = [
        f"{dotted}.{member}"
        for dotted, folder in _packages().items()
        for member in _members(folder)
        if not (_names(tour, f"{member}.py") or _names(tour, f"{member}/"))
    ]
    assert not missing, f"README's tour does not name these modules: {missing}"


def test_each_package_docstring_names_its_modules():
    missing = []
    for dotted, folder in _packages().items():
        doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
        missing += [f"{dotted}.{m}" for m in _members(folder) if not _names(doc, m)]
    assert not missing, f"not named in their package's __init__ docstring: {missing}"


def test_the_checks_can_fail():
    assert _names("``learning``: the fits", "learning")
    assert not _names("``learning_comparison``", "learning")
    assert not _names("attnbayes.inference.switching.learning", "attnbayes.inference.switching")
    assert _names("  marginal.py  the program", "marginal.py")
    assert "comparison" in _members(ROOT / "inference" / "switching")


def python_blocks() -> list[str]:
    """README's ```python blocks, as printed."""
    text = (ROOT / "README.md").read_text()
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.M | re.S)


def test_the_tracing_example_runs_on_its_own_and_shows_the_check(tmp_path):
    """README's paragraph on traced kernels returning NaN shows ``check_filter_result`` naming
    the step where a compiled filter overflowed, and its block runs as printed."""
    import subprocess
    import sys

    (block,) = [b for b in python_blocks() if "check_filter_result(" in b]
    script = tmp_path / "tracing_example.py"
    script.write_text(block)
    run = subprocess.run(
        [sys.executable, "-P", str(script)], capture_output=True, text=True, cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr
    assert "non-finite values (NaN or inf) from step" in run.stdout
