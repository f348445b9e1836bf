"""File paths as the package takes them, and crash-safe writing: a killed process or a power cut leaves
either the old file or the new one."""
import os
import signal
from pathlib import Path
from typing import Callable, Dict, Optional, Union

PathLike = Union[str, Path]

KILL_AT_VAR = "SPACY_ELMO_KILL_AT"
WRITE_STEPS = ("written", "synced", "renamed")
_writes_seen: Dict[Path, int] = {}


def atomic_write(path: PathLike, write: Callable[[Path], None]) -> None:
    """Call ``write`` on a temporary file beside ``path``, flush it to disk, then rename it over ``path``.

    Missing folders on the way to ``path`` are created.

    Fault injection, for tests of what a killed process leaves: ``SPACY_ELMO_KILL_AT=<path>:<step>:<n>`` makes
    the process SIGKILL itself during its ``n``-th write of ``path`` (counted in this process), at ``step``:
    ``written`` (the temporary file written, not yet flushed), ``synced`` (flushed, not renamed) or ``renamed``
    (renamed, the folder not yet flushed). Unset, it costs one environment lookup per call.
    """
    path = Path(path)
    kill_at = _kill_step(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    _die_at(kill_at, "written")
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    _die_at(kill_at, "synced")
    os.replace(tmp, path)
    _die_at(kill_at, "renamed")
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # make the rename itself durable
    finally:
        os.close(directory)


def _kill_step(path: Path) -> Optional[str]:
    """The step of this write of ``path`` at which ``SPACY_ELMO_KILL_AT`` asks to die; None for any other write.

    A malformed value raises, so that a typo cannot make a fault-injection test pass without its fault.
    """
    spec = os.environ.get(KILL_AT_VAR)
    if not spec:
        return None
    parts = spec.rsplit(":", 2)
    if len(parts) != 3 or parts[1] not in WRITE_STEPS or not parts[2].isdigit():
        raise ValueError(f"{KILL_AT_VAR}={spec!r}: expected <path>:<step>:<n> with step one of {WRITE_STEPS}")
    target, step, nth = parts
    key = path.resolve()
    if Path(target).resolve() != key:
        return None
    _writes_seen[key] = count = _writes_seen.get(key, 0) + 1
    return step if count == int(nth) else None


def _die_at(kill_at: Optional[str], step: str) -> None:
    """SIGKILL this process if ``step`` is the one :func:`_kill_step` chose: no cleanup, as a power cut."""
    if kill_at == step:
        os.kill(os.getpid(), signal.SIGKILL)
