"""The layers as imports show them: the torch-level packages load without spaCy or thinc, the command line starts
without spaCy or torch, and the package's names and spaCy entry points still reach everything."""
import subprocess
import sys
from pathlib import Path

import pytest

import spacy_elmo

ROOT = Path(__file__).resolve().parents[1]


def _modules(package: str) -> list:
    """Every module of ``spacy_elmo.<package>``, by dotted name."""
    folder = ROOT / "spacy_elmo" / package
    return [f"spacy_elmo.{package}.{p.stem}" for p in sorted(folder.glob("*.py")) if p.stem != "__init__"]


def _loaded_after(code: str) -> set:
    """The top-level modules a fresh interpreter holds after running ``code``."""
    done = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys; print(' '.join(sorted({{m.split('.')[0] for m in sys.modules}})))"],
        capture_output=True, text=True, cwd=ROOT, timeout=300, check=True,
    )
    return set(done.stdout.split())


@pytest.mark.slow
@pytest.mark.parametrize("package", ["model", "pretrain"])
def test_the_torch_level_packages_import_neither_spacy_nor_thinc(package):
    modules = _modules(package)
    assert modules
    loaded = _loaded_after("\n".join(f"import {m}" for m in modules))
    assert "torch" in loaded  # the imports ran
    assert not loaded & {"spacy", "thinc"}


@pytest.mark.slow
@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["list"]])
def test_the_command_line_starts_without_spacy_or_torch(argv):
    code = f"import sys; sys.argv = ['spacy_elmo', *{argv!r}]\nimport runpy\ntry:\n    runpy.run_module('spacy_elmo', run_name='__main__')\nexcept SystemExit:\n    pass"
    loaded = _loaded_after(code)
    assert "typer" in loaded
    assert not loaded & {"spacy", "thinc", "torch"}


@pytest.mark.slow
def test_spacy_finds_the_factory_and_architectures_without_importing_spacy_elmo():
    code = (
        "import spacy\n"
        "nlp = spacy.blank('en')\n"
        "nlp.add_pipe('elmo')\n"
        "from spacy.util import registry\n"
        "for name in ('spacy_elmo.ElmoListener.v1', 'spacy_elmo.ElmoEmbedding.v2', 'spacy_elmo.ElmoBiLm.v2'):\n"
        "    registry.get('architectures', name)\n"
        "print(nlp('A cat .')._.elmo.shape)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0].startswith("(3, ")


def test_every_public_name_imports_from_the_package_and_is_the_defining_modules_object():
    from spacy_elmo.embedder import ElmoEmbedder
    from spacy_elmo.model.options import ElmoOptions
    from spacy_elmo.pipeline.component import ElmoComponent

    for name in spacy_elmo.__all__:
        assert getattr(spacy_elmo, name) is not None, name
    assert (spacy_elmo.ElmoEmbedder, spacy_elmo.ElmoOptions, spacy_elmo.ElmoComponent) == (ElmoEmbedder, ElmoOptions, ElmoComponent)
    assert set(spacy_elmo.__all__) <= set(dir(spacy_elmo))
    with pytest.raises(ImportError, match="Elmoo"):
        from spacy_elmo import Elmoo  # noqa: F401


def test_the_component_class_s_former_name_still_imports_and_names_the_new_one():
    """``spacy_elmo.Elmo`` was the component's class, whose name AllenNLP's module (spacy_elmo.allennlp.Elmo) shares."""
    with pytest.warns(DeprecationWarning, match="spacy_elmo.Elmo is now spacy_elmo.ElmoComponent"):
        from spacy_elmo import Elmo
    assert Elmo is spacy_elmo.ElmoComponent
