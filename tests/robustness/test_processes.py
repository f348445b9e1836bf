"""``nlp.pipe(n_process=2)``: the same vectors as one process, no hang, no warning, one torch thread per worker."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROUNDING

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_two_worker_processes_fork_and_spawn(tmp_path):
    out = tmp_path / "vectors.npz"
    command = [sys.executable, "-m", "tests.robustness.pipe_workers", str(out)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)  # a hang fails here
    assert done.returncode == 0, done.stderr[-3000:]
    assert "W109" not in done.stderr  # spaCy's "Unable to save user hooks", once per Doc a worker sends back
    found = np.load(out)
    for method in ("fork", "spawn"):  # spaCy decides the workers' batches: equal up to rounding
        np.testing.assert_allclose(found[method], found["one_process"], **ROUNDING)
        assert set(found[f"{method}_threads"].tolist()) == {1}  # the component's setting, applied in each worker
    assert int(found["own_child_threads"]) == 1  # ... and in any process where the biLM runs first,
    assert int(found["parent_threads"]) == 2  # once: the application's later choice stays
