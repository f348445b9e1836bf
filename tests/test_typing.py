"""The package is typed for its users, installed as the README's set-up installs it (``pip install -e .``) and as a
wheel: a user's script on the public API passes ``mypy --strict`` with the real types of what it calls (not
``Any``), and mypy finds each mistake of a script that misuses it.

Each install is a venv of its own in a temporary folder, made with ``--system-site-packages`` (torch and spaCy come
from this environment) and ``--without-pip``; this environment's pip installs spacy-elmo into it from a clean copy of
the checkout (``--no-deps``, offline), editable or built into a wheel. mypy then reads that venv's ``sys.path``
(``--python-executable``), as it does for a user who runs it there.
"""
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[1]

USER_SCRIPT = '''
from typing import List

import numpy as np
import spacy
import torch
from spacy.tokens import Doc

import spacy_elmo
from spacy_elmo import CancelHandle, ElmoEmbedder, ElmoSettingsError, with_vector_hooks
from spacy_elmo.allennlp import Elmo, batch_to_ids


def token_count(texts: List[str]) -> int:
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    return sum(len(doc) for doc in nlp.pipe(texts))


def layers_of(tokens: List[str]) -> "np.typing.NDArray[np.float32]":
    embedder = ElmoEmbedder()
    layers = embedder.embed_sentence(tokens)
    reveal_type(layers)
    batch = embedder.embed_batch([tokens, tokens])
    reveal_type(batch)
    return layers


def allennlp_mix(sentences: List[List[str]]) -> torch.Tensor:
    elmo = Elmo(None, None, 1, dropout=0.0)
    reveal_type(elmo)
    ids = batch_to_ids(sentences)
    reveal_type(ids)
    output = elmo.forward(ids)
    reveal_type(output["mask"])
    return output["elmo_representations"][0]


def first_with_hooks(docs: List[Doc]) -> Doc:
    hooked = with_vector_hooks(docs)
    reveal_type(hooked)
    return hooked[0]


handle = CancelHandle()
reveal_type(handle)
reveal_type(spacy_elmo.ElmoOptions)
try:
    ElmoEmbedder(cache_size=-1)
except ElmoSettingsError as error:
    print(error)
'''

# What each reveal_type must show, in order: the real classes, none of them Any.
REVEALED = [
    ("layers", r"^numpy\.ndarray\[.*numpy\.(float32|floating\[.*_32Bit)"),
    ("batch", r"^(builtins\.)?list\[numpy\.ndarray\[.*numpy\.(float32|floating\[.*_32Bit)"),
    ("elmo", r"spacy_elmo\.allennlp\.elmo\.Elmo$"),
    ("ids", r"torch\._tensor\.Tensor$"),
    ('output["mask"]', r"torch\._tensor\.Tensor$"),
    ("hooked", r"^(builtins\.)?list\[spacy\.tokens\.doc\.Doc\]$"),
    ("handle", r"spacy_elmo\.serving\.cancel\.CancelHandle$"),
    ("spacy_elmo.ElmoOptions", r"spacy_elmo\.model\.options\.ElmoOptions"),
]

# A script that misuses the API: each line ending in ``# mypy: CODE`` is a mistake mypy must report there, with
# that error code; no other line may get an error.
WRONG_SCRIPT = '''
import spacy
import torch

from spacy_elmo import CancelHandle, ElmoEmbedder, with_vector_hooks
from spacy_elmo.allennlp import Elmo, ScalarMix, batch_to_ids

nlp = spacy.blank("en")
vectors: int = ElmoEmbedder().embed_sentence(["The", "cat"])  # mypy: assignment
ScalarMix("3")  # mypy: arg-type
with_vector_hooks([nlp("The cat sat.")]).append("a text")  # mypy: arg-type
mask: torch.Tensor = Elmo(None, None, 1).forward(batch_to_ids([["a"]]))["elmo_representations"]  # mypy: assignment
CancelHandle().cancel(True)  # mypy: call-arg
'''


def _run(command: List[str], **kwargs) -> subprocess.CompletedProcess:
    """``command`` run to its end (600 s at most), its output kept; fail with that output if it fails."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, **kwargs)
    assert done.returncode == 0, f"{' '.join(command)}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
    return done


@pytest.fixture(scope="module")
def mypy_cache(tmp_path_factory) -> Path:
    """One mypy cache for both installs: torch's and spaCy's stubs are read once."""
    return tmp_path_factory.mktemp("mypy_cache")


@pytest.fixture(scope="module", params=["editable", "wheel"])
def venv_python(request, tmp_path_factory) -> Path:
    """The interpreter of a venv into which spacy-elmo is installed from a clean copy of the checkout: editable
    (``pip install -e .``, the README's set-up) or as a wheel (``pip install .``, which builds and installs one)."""
    work = tmp_path_factory.mktemp(request.param)
    source = work / "spacy-elmo"  # installing from the checkout would leave build/ and egg-info there
    shutil.copytree(ROOT / "spacy_elmo", source / "spacy_elmo", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("setup.py", "README.md"):
        shutil.copy(ROOT / name, source)
    _run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(work / "venv")])
    python = work / "venv" / "bin" / "python"
    editable = ["-e"] if request.param == "editable" else []
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index",
          "--no-build-isolation", *editable, str(source)], cwd=work)
    imported = _run([str(python), "-c", "import spacy_elmo; print(spacy_elmo.__file__)"], cwd=work, env=_bare_env(work))
    expected = source if request.param == "editable" else work / "venv"
    assert Path(imported.stdout.strip()).is_relative_to(expected), imported.stdout
    return python


def _bare_env(home: Path) -> Dict[str, str]:
    """An environment without this session's PYTHONPATH (which would show mypy the checkout itself)."""
    return {"PATH": "/usr/bin:/bin", "HOME": str(home)}


def _mypy(python: Path, cache: Path, folder: Path, script: str) -> Tuple[List[str], List[str]]:
    """``mypy --strict`` on ``script`` with the venv of ``python``: its error lines and its revealed types."""
    (folder / "user.py").write_text(script, encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--python-executable", str(python),
                           "--cache-dir", str(cache), "--show-error-codes", "--no-error-summary", "user.py"],
                          cwd=folder, env=_bare_env(folder), capture_output=True, text=True, timeout=900)
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-2000:]  # 2: mypy itself failed
    lines = done.stdout.splitlines()
    revealed = [re.search(r'Revealed type is "(.*)"', line)[1] for line in lines if "Revealed type" in line]
    return [line for line in lines if ": error:" in line], revealed


@pytest.mark.slow
def test_a_user_script_passes_mypy_strict_with_the_real_types(venv_python: Path, mypy_cache: Path, tmp_path: Path):
    errors, revealed = _mypy(venv_python, mypy_cache, tmp_path, USER_SCRIPT)
    assert errors == [], errors
    assert len(revealed) == len(REVEALED), revealed
    for (name, pattern), shown in zip(REVEALED, revealed):
        assert re.search(pattern, shown) and "Any" not in shown.split("[")[0], (name, shown)


@pytest.mark.slow
def test_mypy_finds_each_mistake_of_a_script_that_misuses_the_api(venv_python: Path, mypy_cache: Path,
                                                                   tmp_path: Path):
    errors, _ = _mypy(venv_python, mypy_cache, tmp_path, WRONG_SCRIPT)
    found = sorted((int(re.match(r"user\.py:(\d+):", line)[1]), re.search(r"\[([\w-]+)\]$", line)[1])
                   for line in errors)
    marked = sorted((number, line.rsplit("# mypy: ", 1)[1]) for number, line in
                    enumerate(WRONG_SCRIPT.splitlines(), start=1) if "# mypy: " in line)
    assert found == marked, errors


@pytest.mark.slow
def test_the_installed_package_ships_py_typed(venv_python: Path):
    done = _run([str(venv_python), "-c", "import spacy_elmo; print(spacy_elmo.__file__)"], env=_bare_env(Path("/tmp")))
    assert (Path(done.stdout.strip()).parent / "py.typed").is_file()
