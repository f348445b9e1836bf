"""Kill this process at a chosen step of its ``n``-th ``atomic_write`` of a path, as a power cut would (SIGKILL, no
cleanup): tests of what a killed process leaves, with no race against a signal.

``python -m tests.robustness.kill_at PATH STEP N MODULE [ARGS...]`` runs ``python -m MODULE ARGS...`` with the kill
in place; :func:`install` puts it into a ``spacy_elmo.util.files`` module already loaded. The steps: ``written``
(the temporary file written, not yet flushed), ``synced`` (flushed, not renamed), ``renamed`` (renamed, the folder
not yet flushed). The package's modules bind ``atomic_write`` when they are imported, so it goes in first.
"""
import os
import runpy
import signal
import sys
import types
from pathlib import Path
from typing import Any, Callable

WRITE_STEPS = ("written", "synced", "renamed")


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def install(files: Any, target: Path, step: str, nth: int) -> None:
    """Make ``files.atomic_write`` kill the process at ``step`` of its ``nth`` write of ``target``."""
    if step not in WRITE_STEPS:
        raise ValueError(f"step {step!r}: expected one of {WRITE_STEPS}")
    real, target, seen = files.atomic_write, Path(target).resolve(), [0]

    def replace(src: Any, dst: Any) -> None:
        if step == "synced":
            die()
        os.replace(src, dst)
        die()

    def atomic_write(path: Any, write: Callable[[Path], None]) -> None:
        if Path(path).resolve() == target:
            seen[0] += 1
            if seen[0] == nth:
                if step == "written":
                    return real(path, lambda tmp: (write(tmp), die()))
                files.os = types.SimpleNamespace(**{**vars(os), "replace": replace})
        return real(path, write)

    files.atomic_write = atomic_write


if __name__ == "__main__":
    path, step, nth, module, *args = sys.argv[1:]
    from spacy_elmo.util import files

    install(files, Path(path), step, int(nth))
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
