"""Checks of the paths a command is given, made before the command imports torch, spaCy or the model: a mistyped
path is then a one-line error at once, not after seconds of imports. This module imports only the standard library,
the package's errors and the model sources' light name checks; each check raises the error class its command raises
for the same mistake later on."""
import os
from pathlib import Path
from typing import Optional, Type

from ..errors import ElmoError, ElmoOptionsError, ElmoWeightsError
from ..sources.resolve import is_url
from ..util.files import PathLike


def check_input_file(path: PathLike, what: str, error: Type[ElmoError], hint: str = "") -> None:
    """Refuse ``path`` unless it is a file this process can read; ``what`` names it (e.g. "Input file"), ``hint``
    says what to give instead."""
    path = Path(path)
    advice = f": {hint}" if hint else ""
    if not path.is_file():
        raise error(f"{what} {path} not found (or not a file){advice}")
    if not os.access(path, os.R_OK):
        raise error(f"{what} {path} cannot be read (no permission){advice}")


def check_input_path(path: PathLike, what: str, error: Type[ElmoError], hint: str = "") -> None:
    """Refuse ``path`` unless it is a file or folder that exists; ``what`` and ``hint`` as for :func:`check_input_file`."""
    if not Path(path).exists():
        raise error(f"{what} {path} not found" + (f": {hint}" if hint else ""))


def check_output_path(path: PathLike, what: str, error: Type[ElmoError], folder: bool = False) -> None:
    """Refuse an output ``path`` (a file, or with ``folder`` a folder) that cannot be written: one of the other kind
    in its place, a file on its way, or a first existing folder on its way (missing ones are created) that this
    process may not write in."""
    path = Path(path)
    if path.exists() and path.is_dir() != folder:
        raise error(f"{what} {path} is {'a file' if folder else 'a folder'}; give the path of a {'folder' if folder else 'file'}")
    if path.exists():
        if not os.access(path, os.W_OK):
            raise error(f"{what} {path} cannot be written (no permission); choose another path")
        return
    parent = next(place for place in (path.parent, *path.parent.parents) if place.exists())  # missing ones are made
    if not parent.is_dir():
        raise error(f"{what} {path} cannot be made: {parent} is a file, not a folder; choose another path")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise error(f"{what} {path} cannot be made: no permission to write in {parent}; choose another path")


def check_model_paths(options_file: Optional[PathLike], weight_file: Optional[PathLike]) -> None:
    """Refuse a given biLM options or weights file that does not exist, as loading it would, but before the model
    is imported. What is not a pair of paths is left to the biLM's settings (``sources.resolve.check_model_files``):
    one given alone may name a published model, and URLs may stand for one."""
    if options_file is not None and weight_file is not None and not (is_url(options_file) or is_url(weight_file)):
        hint = "give an ELMo model's file, or neither --options nor --weights for the embedded model"
        check_input_file(options_file, "ELMo options file", ElmoOptionsError, hint)
        check_input_file(weight_file, "ELMo weight file", ElmoWeightsError, hint)

