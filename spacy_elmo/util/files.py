"""File paths as the package takes them, and crash-safe writing: a killed process or a power cut leaves
either the old file or the new one."""
import os
from pathlib import Path
from typing import Callable, Union

PathLike = Union[str, Path]


def atomic_write(path: PathLike, write: Callable[[Path], None]) -> None:
    """Call ``write`` on a temporary file beside ``path``, flush it to disk, then rename it over ``path``.

    Missing folders on the way to ``path`` are created.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # make the rename itself durable
    finally:
        os.close(directory)

