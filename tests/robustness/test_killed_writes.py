"""``atomic_write`` killed at each of its steps (``SPACY_ELMO_KILL_AT``): the old file stays until the rename."""
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from spacy_elmo.util import files
from spacy_elmo.util.files import KILL_AT_VAR, WRITE_STEPS, atomic_write

# Loads files.py (argv[2]) alone, not the spacy_elmo package, which imports torch and spaCy; then writes
# argv[1] three times: the first write leaves "old", the second and third "new".
WRITER = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("files", sys.argv[2])
files = importlib.util.module_from_spec(spec)
spec.loader.exec_module(files)
for text in ("old", "new", "new"):
    files.atomic_write(sys.argv[1], lambda p: p.write_text(text))
"""


def run_writer(path: Path, kill_at: str) -> int:
    env = {**os.environ, KILL_AT_VAR: kill_at}
    command = [sys.executable, "-c", WRITER, str(path), files.__file__]
    return subprocess.run(command, env=env, capture_output=True, timeout=60).returncode


@pytest.mark.parametrize("step", WRITE_STEPS)
def test_a_write_killed_at_a_step_leaves_the_old_file_until_the_rename(tmp_path, step):
    path = tmp_path / "file.txt"
    assert run_writer(path, f"{path}:{step}:2") == -signal.SIGKILL
    renamed = step == "renamed"
    assert path.read_text() == ("new" if renamed else "old")
    tmp = path.with_name("file.txt.tmp")
    assert tmp.exists() != renamed and (renamed or tmp.read_text() == "new")


def test_writes_of_other_files_or_past_the_count_are_not_killed(tmp_path):
    path = tmp_path / "file.txt"
    assert run_writer(path, f"{tmp_path / 'other.txt'}:written:1") == 0
    assert run_writer(path, f"{path}:written:4") == 0
    assert path.read_text() == "new" and not path.with_name("file.txt.tmp").exists()


def test_a_malformed_kill_point_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv(KILL_AT_VAR, f"{tmp_path / 'file.txt'}:halfway:1")
    with pytest.raises(ValueError, match="written"):
        atomic_write(tmp_path / "file.txt", lambda p: p.write_text("x"))
    assert not (tmp_path / "file.txt").exists()
