"""``atomic_write`` killed at each of its steps (``tests/robustness/kill_at.py``): the old file stays until the
rename."""
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from spacy_elmo.util import files
from tests.robustness import kill_at
from tests.robustness.kill_at import WRITE_STEPS

# Loads files.py and kill_at.py alone (argv[2:4]), not the spacy_elmo package, which imports torch and spaCy; puts
# the kill of argv[4:7] in place, then writes argv[1] three times: the first write leaves "old", the others "new".
WRITER = """
import importlib.util, sys
def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
files, kill_at = load("files", sys.argv[2]), load("kill_at", sys.argv[3])
kill_at.install(files, sys.argv[4], sys.argv[5], int(sys.argv[6]))
for text in ("old", "new", "new"):
    files.atomic_write(sys.argv[1], lambda p: p.write_text(text))
"""


def run_writer(path: Path, target: Path, step: str, nth: int) -> int:
    command = [sys.executable, "-c", WRITER, str(path), files.__file__, kill_at.__file__, str(target), step, str(nth)]
    return subprocess.run(command, capture_output=True, timeout=60).returncode


@pytest.mark.parametrize("step", WRITE_STEPS)
def test_a_write_killed_at_a_step_leaves_the_old_file_until_the_rename(tmp_path, step):
    path = tmp_path / "file.txt"
    assert run_writer(path, path, step, 2) == -signal.SIGKILL
    renamed = step == "renamed"
    assert path.read_text() == ("new" if renamed else "old")
    tmp = path.with_name("file.txt.tmp")
    assert tmp.exists() != renamed and (renamed or tmp.read_text() == "new")


def test_writes_of_other_files_or_past_the_count_are_not_killed(tmp_path):
    path = tmp_path / "file.txt"
    assert run_writer(path, tmp_path / "other.txt", "written", 1) == 0
    assert run_writer(path, path, "written", 4) == 0
    assert path.read_text() == "new" and not path.with_name("file.txt.tmp").exists()
