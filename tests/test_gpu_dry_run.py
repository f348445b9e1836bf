"""The GPU pretraining command, run on the CPU with a tiny bundle and budget where spaCy cannot be imported.

A lent GPU machine has torch, numpy, h5py, tqdm and typer but no spaCy, thinc, srsly or cupy; confection and
pydantic travel as wheels (scripts/gpu_bundle.py WHEELS). This runs the same scripts with those modules made
unimportable and checks what they import, what they bring back and what would travel.
"""
import gzip
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.pretrain.conftest import TRAIN_TEXT

ROOT = Path(__file__).resolve().parents[1]
BLOCKED = ("spacy", "thinc", "srsly", "catalogue", "cupy", "weasel", "wasabi")
# On the lent machine: torch (with what it imports), numpy, h5py, tqdm, typer; and the wheels that travel.
LENT = {"torch", "numpy", "h5py", "tqdm", "typer", "typing_extensions", "sympy", "mpmath", "networkx", "jinja2",
        "markupsafe", "filelock", "fsspec", "torchgen"}
# Imported here only because installed (site's setuptools hook; tqdm's and torch's optional imports; the finder of
# an editable install, named after the package's version).
OPTIONAL = {"_distutils_hack", "colorama", "certifi"}
SITECUSTOMIZE = """
import atexit, os, sys

class _Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ImportError(f"{{name}} is not installed on a lent GPU machine")

sys.meta_path.insert(0, _Block())

@atexit.register
def _record():
    loaded = {{m.split(".")[0] for m, mod in list(sys.modules.items())
              if "site-packages" in (getattr(mod, "__file__", None) or "")}}
    with open(os.environ["IMPORTS_RECORD"], "a") as f:
        f.write(" ".join(sorted(loaded)) + "\\n")
"""


def _source(tmp_path: Path) -> Path:
    """A corpus folder laid out as ``../shared/data/lm_gutenberg_en`` is, from bilm-tf's training fixture (so the
    test runs from a plain clone)."""
    source = tmp_path / "source"
    source.mkdir()
    text = TRAIN_TEXT.read_bytes()
    for name in ("train-000.txt.gz", "heldout.txt.gz"):
        (source / name).write_bytes(gzip.compress(text))
    return source


def _bundle(tmp_path: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "scripts/gpu_bundle.py", "--train-mib", "0.02", "--dev-lines", "20",
               "--source", str(_source(tmp_path)), "--out", str(tmp_path / "bundle")]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)


def _dry_run(tmp_path: Path) -> subprocess.CompletedProcess:
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(SITECUSTOMIZE.format(blocked=BLOCKED))
    env = {**os.environ, "PYTHONPATH": str(blocker), "IMPORTS_RECORD": str(tmp_path / "imports.txt"),
           "GPU_BUNDLE": str(tmp_path / "bundle"), "CUDA_VISIBLE_DEVICES": ""}
    command = ["bash", "scripts/gpu_pretrain.sh", "900", str(tmp_path / "out"), "256", "0.004", "2"]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.slow
def test_gpu_pretraining_dry_run_trains_checks_and_returns_files_without_spacy(tmp_path):
    bundled = _bundle(tmp_path)
    assert bundled.returncode == 0, bundled.stderr
    mib = float(bundled.stdout.split("would travel: ")[1].split(" MiB")[0])
    print(f"would travel: {mib} MiB")  # the tree and this tiny bundle; a real bundle adds --train-mib and wheels
    done = _dry_run(tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    back = sorted((tmp_path / "out").iterdir())
    assert [p.name for p in back] == sorted(
        ["options.json", "weights.hdf5", "best_weights.hdf5", "best_scores.json", "log.jsonl", "config.cfg", "gpu_check.txt"]
    )
    assert all(p.stat().st_size <= 16 * 2**20 for p in back)
    evals = [r["step"] for r in map(json.loads, (tmp_path / "out" / "log.jsonl").read_text().splitlines()) if r.get("event") == "eval"]
    assert evals == [0, 2]
    report = (tmp_path / "out" / "gpu_check.txt").read_text()
    assert "0. torch on cpu: ok" in report and "checks 1-3 not run: spaCy is not installed" in report

    imported = {name for name in (tmp_path / "imports.txt").read_text().split() if not name.startswith("__editable__")}
    assert imported - LENT - OPTIONAL - set(_wheels()) == set()
    assert {"confection", "pydantic"} <= imported  # the config path needs them: hence the wheels


def _gpu_bundle():
    spec = importlib.util.spec_from_file_location("gpu_bundle", ROOT / "scripts" / "gpu_bundle.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _wheels():
    return _gpu_bundle().WHEELS


def test_what_would_travel_is_the_tracked_files_and_the_bundle_whatever_else_lies_in_the_tree(tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    tree = subprocess.run(["git", "-C", str(clone), "ls-tree", "-r", "-l", "HEAD"], capture_output=True, text=True,
                          check=True).stdout
    committed = sum(int(line.split()[3]) for line in tree.splitlines())
    bundle = tmp_path / "bundle"
    (bundle / "corpus").mkdir(parents=True)
    (bundle / "corpus" / "train-000.txt.gz").write_bytes(b"x" * 1234)
    for big in (clone / "runs" / "ignored.bin", clone / "untracked.bin"):  # /runs/ is git-ignored
        big.parent.mkdir(exist_ok=True)
        with open(big, "wb") as f:
            f.truncate(80 * 2**20)
    assert _gpu_bundle().travel_bytes(clone, bundle) == committed + 1234
