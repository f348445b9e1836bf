"""Package metadata (setup.py) against the code: every third-party import declared, one version string."""
import ast
import re
import runpy
import sys
from importlib.metadata import packages_distributions
from pathlib import Path
from typing import Dict, Set, Tuple

import pytest
import setuptools

import spacy_elmo

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "spacy_elmo"


@pytest.fixture(scope="module")
def setup_kwargs() -> Dict:
    """What setup.py passes to ``setuptools.setup``, captured without building anything."""
    captured: Dict = {}
    patch = pytest.MonkeyPatch()
    patch.setattr(setuptools, "setup", lambda **kwargs: captured.update(kwargs))
    patch.chdir(ROOT)
    try:
        runpy.run_path(str(ROOT / "setup.py"), run_name="__main__")
    finally:
        patch.undo()
    return captured


def _requirement_names(requirements) -> Set[str]:
    return {re.split(r"[<>=!~ \[;]", r, maxsplit=1)[0].lower().replace("_", "-") for r in requirements}


def _third_party_imports() -> Tuple[Set[str], Set[str]]:
    """Top-level names of the modules the package imports: at module level, and only inside functions."""
    module_level, lazy = set(), set()
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top = {id(node) for node in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                root = name.split(".")[0]
                if root != "spacy_elmo" and root not in sys.stdlib_module_names:
                    (module_level if id(node) in top else lazy).add(root)
    return module_level, lazy - module_level


def _distributions(modules: Set[str]) -> Set[str]:
    installed = packages_distributions()
    missing = sorted(m for m in modules if m not in installed)
    assert not missing, f"imported but not installed: {missing}"
    return {installed[m][0].lower().replace("_", "-") for m in modules}


@pytest.mark.skipif(sys.version_info < (3, 10), reason="sys.stdlib_module_names and packages_distributions: 3.10+")
def test_every_third_party_import_is_declared(setup_kwargs):
    module_level, lazy = _third_party_imports()
    assert {"torch", "spacy", "typer", "tqdm", "pydantic", "confection"} <= module_level  # the scan finds imports
    required = _requirement_names(setup_kwargs["install_requires"])
    optional = set().union(*(_requirement_names(r) for r in setup_kwargs["extras_require"].values()))
    assert _distributions(module_level) - required == set()
    assert _distributions(lazy) - required - optional == set()


def test_version_is_written_once(setup_kwargs):
    about = runpy.run_path(str(PACKAGE / "about.py"))["__version__"]
    assert setup_kwargs["version"] == about == spacy_elmo.__version__
    assert [p.name for p in PACKAGE.rglob("*.py") if "__version__ = " in p.read_text(encoding="utf-8")] == ["about.py"]
