"""The package is typed for its users: its wheel ships ``py.typed``, and a user's script on the public API passes
``mypy --strict`` with the real types of what it calls (not ``Any``).

The script is type-checked against spacy-elmo as its wheel installs it: the wheel is built from a clean copy of the
package and unpacked into a folder on the script's path, as ``pip install`` lays it out.
"""
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Dict

import pytest

ROOT = Path(__file__).resolve().parents[1]

USER_SCRIPT = '''
from typing import List

import numpy as np
import spacy
import torch

import spacy_elmo
from spacy_elmo import CancelHandle, ElmoEmbedder, ElmoSettingsError
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
    return elmo.forward(ids)["elmo_representations"][0]


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
    ("handle", r"spacy_elmo\.util\.cancel\.CancelHandle$"),
    ("spacy_elmo.ElmoOptions", r"spacy_elmo\.model\.options\.ElmoOptions"),
]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A folder holding spacy-elmo as its wheel installs it (the wheel built from a clean copy, unpacked)."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "spacy-elmo"  # building in the checkout would leave build/ there
    shutil.copytree(ROOT / "spacy_elmo", source / "spacy_elmo", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("setup.py", "README.md"):
        shutil.copy(ROOT / name, source)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", str(source),
                    "-w", str(work / "dist")], check=True, capture_output=True, timeout=600)
    (wheel,) = (work / "dist").glob("spacy_elmo-*.whl")
    site = work / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    return site


@pytest.mark.slow
def test_the_wheel_ships_py_typed(installed: Path):
    assert (installed / "spacy_elmo" / "py.typed").is_file()


@pytest.mark.slow
def test_a_user_script_passes_mypy_strict_with_the_real_types(installed: Path, tmp_path: Path):
    (tmp_path / "user.py").write_text(USER_SCRIPT, encoding="utf-8")
    env: Dict[str, str] = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(installed), "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"),
                           "user.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    lines = done.stdout.splitlines()
    errors = [line for line in lines if ": error:" in line]
    assert done.returncode == 0 and errors == [], done.stdout[-3000:] + done.stderr[-2000:]
    revealed = [re.search(r'Revealed type is "(.*)"', line)[1] for line in lines if "Revealed type" in line]
    assert len(revealed) == len(REVEALED), lines
    for (name, pattern), shown in zip(REVEALED, revealed):
        assert re.search(pattern, shown) and "Any" not in shown.split("[")[0], (name, shown)
