"""What one process of ``embed`` works on: its input, its shard of the lines, its output file and its GPU, from the
command line or from torchrun's environment. Light (no torch, no spaCy): the command settles these before importing
the model, so that a wrong path or shard is reported at once."""
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from .checks import check_input_file, check_output_path
from ..errors import EmbedError
from ..util.files import PathLike

SHARD_PLACEHOLDER = "{shard}"


def check_input(path: PathLike) -> None:
    """Refuse an input that is not a readable file."""
    check_input_file(path, "Input file", EmbedError, "give a text or JSONL file, one document per line")


def check_output(path: PathLike) -> None:
    """Refuse an output file that cannot be written (its missing folders are made when it is)."""
    check_output_path(path, "Output file", EmbedError)


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count``: the input lines ``k`` with ``k % count == index``."""

    index: int = 0
    count: int = 1

    @classmethod
    def parse(cls, spec: str, environ: Mapping[str, str] = os.environ) -> "Shard":
        """``"i/n"``, or ``"auto"``: ``RANK``/``WORLD_SIZE`` as set by torchrun (``0/1`` when unset)."""
        try:
            torchrun = (environ.get("RANK", "0"), environ.get("WORLD_SIZE", "1"))
            index, count = torchrun if spec == "auto" else spec.split("/")
            shard = cls(int(index), int(count))
        except ValueError:
            raise EmbedError(f"--shard must be 'i/n' (e.g. 0/4) or 'auto', found {spec!r}") from None
        if not 0 <= shard.index < shard.count:
            raise EmbedError(f"shard {shard.index}/{shard.count} does not exist: i must be in 0..n-1")
        return shard

    def owns(self, line: int) -> bool:
        return line % self.count == self.index

    def lines_before(self, line: int) -> int:
        """How many of this shard's lines come before input line ``line``."""
        return max(0, (line - self.index + self.count - 1) // self.count)

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def shard_output(template: str, shard: Shard, auto: bool) -> Path:
    """The output file of ``shard``: ``{shard}`` in ``template`` becomes its index.

    Under ``--shard auto`` every process gets the same command line, so several shards need the
    placeholder to write different files.
    """
    if auto and shard.count > 1 and SHARD_PLACEHOLDER not in template:
        raise EmbedError(
            f"--shard auto runs {shard.count} processes with the same OUTPUT {template!r}: put {SHARD_PLACEHOLDER} "
            f"in it (e.g. out-{SHARD_PLACEHOLDER}.hdf5) so that each shard writes its own file"
        )
    return Path(template.replace(SHARD_PLACEHOLDER, str(shard.index)))


def resolve_device(device: str, environ: Mapping[str, str] = os.environ) -> str:
    """``"cuda"`` means the process's own GPU under torchrun (``cuda:$LOCAL_RANK``); anything else as given."""
    if device == "cuda" and "LOCAL_RANK" in environ:
        return f"cuda:{environ['LOCAL_RANK']}"
    return device
