"""A pipeline made with ``spacy package`` installs where spacy-elmo is not on the package index (README, Deploying).

spacy-elmo is not on PyPI, so the packaged pipeline's requirement ``spacy-elmo>=0.1.0,<0.2.0`` is met by
spacy-elmo's own wheel shipped beside it. The test builds both wheels as the README says and installs the
pipeline into a fresh virtual environment that sees this interpreter's packages (spaCy, torch...) except
spacy-elmo, as a target machine with spaCy installed would; there it loads with ``spacy.load``. About a minute.
"""
import shutil
import site
import subprocess
import sys
from pathlib import Path
from typing import List

import numpy as np
import pytest
import spacy

REPO = Path(__file__).resolve().parents[2]
TEXT = "The bank of the river ."


def run(command: List[str], cwd: Path) -> subprocess.CompletedProcess:
    """Run ``command``; fail the test with its output if it fails."""
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{' '.join(command)}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


def venv_without_spacy_elmo(path: Path) -> Path:
    """A fresh venv whose base packages are this interpreter's, spacy-elmo's (editable or not) left out."""
    base = path / "base-site-packages"
    base.mkdir()
    for folder in map(Path, site.getsitepackages()):
        for entry in folder.iterdir():
            if "spacy_elmo" not in entry.name and "spacy-elmo" not in entry.name and not (base / entry.name).exists():
                (base / entry.name).symlink_to(entry)
    run([sys.executable, "-m", "venv", "--without-pip", str(path / "venv")], cwd=path)
    python = path / "venv" / "bin" / "python"
    venv_site = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=path)
    (Path(venv_site.stdout.strip()) / "_base.pth").write_text(f"import site; site.addsitedir({str(base)!r})\n")
    return python


@pytest.mark.slow
def test_a_packaged_pipeline_installs_beside_spacy_elmo_s_wheel_and_loads(tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")  # the embedded English model
    nlp.to_disk(tmp_path / "pipeline")
    expected = nlp(TEXT)._.elmo

    (tmp_path / "packages").mkdir()
    run([sys.executable, "-m", "spacy", "package", str(tmp_path / "pipeline"), str(tmp_path / "packages"),
         "--name", "elmo_test", "--version", "0.0.1", "--build", "wheel"], cwd=tmp_path)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (pipeline_wheel,) = (tmp_path / "packages" / "en_elmo_test-0.0.1" / "dist").glob("*.whl")
    shutil.copy(pipeline_wheel, wheels)
    source = tmp_path / "spacy-elmo"  # a clean copy: building in the checkout would leave build/ there
    shutil.copytree(REPO / "spacy_elmo", source / "spacy_elmo", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("setup.py", "README.md"):
        shutil.copy(REPO / name, source)

    python = venv_without_spacy_elmo(tmp_path)
    missing = subprocess.run([str(python), "-c", "import spacy_elmo"], cwd=tmp_path, capture_output=True, text=True)
    assert "No module named 'spacy_elmo'" in missing.stderr  # the venv is a machine without spacy-elmo
    install = [str(python), "-m", "pip", "install", "--no-index", "--find-links", str(wheels), "en_elmo_test"]
    refused = subprocess.run(install, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert refused.returncode != 0 and "spacy-elmo" in refused.stderr  # the pipeline alone cannot install

    run([sys.executable, "-m", "pip", "wheel", "--no-deps", str(source), "-w", str(wheels)], cwd=tmp_path)
    run(install, cwd=tmp_path)
    script = (
        "import sys, numpy as np, spacy, spacy_elmo; "
        f"assert spacy_elmo.__file__.startswith(sys.prefix), spacy_elmo.__file__; "
        f"np.save(sys.argv[1], spacy.load('en_elmo_test')({TEXT!r})._.elmo)"
    )
    run([str(python), "-c", script, str(tmp_path / "vectors.npy")], cwd=tmp_path)
    np.testing.assert_array_equal(np.load(tmp_path / "vectors.npy"), expected)
