"""The notebooks are committed with their outputs and kept in sync with their jupytext pairs.

(They are executed by `pytest --nbmake notebooks`, which `make notebooks` runs in CI.)
"""

from pathlib import Path

import jupytext
import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))


def test_the_eight_notebooks_exist():
    assert [p.name[:2] for p in NOTEBOOKS] == ["01", "02", "03", "04", "05", "06", "07", "08"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_matches_its_py_pair(path):
    paired = path.with_suffix(".py")
    assert paired.exists(), f"{paired.name} missing: pair it with `jupytext --set-formats`"
    notebook = nbformat.read(path, as_version=4)
    script = jupytext.read(paired)
    assert "py:percent" in notebook.metadata.get("jupytext", {}).get("formats", "")
    mine = [(c.cell_type, c.source.strip()) for c in notebook.cells]
    theirs = [(c.cell_type, c.source.strip()) for c in script.cells]
    assert mine == theirs, f"{path.name} and {paired.name} differ: run `jupytext --sync`"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_committed_with_outputs(path):
    notebook = nbformat.read(path, as_version=4)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert code and all(c.execution_count is not None for c in code), "not executed"
    images = [o for c in code for o in c.outputs if "image/png" in o.get("data", {})]
    assert images, "no figure in the committed outputs"
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors
    assert "ATTNBAYES_NB_N" in "".join(c.source for c in code)
