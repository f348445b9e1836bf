"""``python -m spacy_elmo embed``: the ELMo layers of every line of a corpus into an HDF5 file, resumably.

Output layout (plain HDF5; read it with h5py alone)::

    /<k>           float32 dataset of input line k (0-based): (n_layers + 1, n_tokens, dim) for
                   ``--layers all``, (n_tokens, dim) for ``top``, ``average`` and ``mix``
    /tokens/<k>    UTF-8 string dataset (n_tokens,): the tokens of line k, one per row of /<k>
    attrs          "settings" (JSON: everything that decides the numbers), "next_line" (lines before it
                   are done), "n_lines" (lines in the input), "complete" (the whole shard is written)

Lines are processed in order, a batch at a time: each batch's datasets are written, then
``next_line`` moves past the batch and the file is flushed. A rerun of the same command drops any
dataset at or after ``next_line`` (left by a killed run) and continues from there, so the finished
file equals that of an uninterrupted run. A shard ``i/n`` holds the lines ``k`` with ``k % n == i``.
"""
import dataclasses
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import h5py
import numpy as np
import torch
from spacy.util import minibatch
from tqdm import tqdm

from ..sources.resolve import DEFAULT_LANG, model_files
from ..embedder import ElmoEmbedder
from ..errors import ElmoSettingsError, EmbedError
from ..util.files import PathLike
from ..model.fixed_mix import fixed_mix_weights
from ..model.encoder import DEFAULT_INITIAL_STATE
from ..model.precision import DEFAULT_PRECISION, check_precision
from ..runtime import BiLmSettings
from ..util.text import Tokenizer, make_tokenizer, open_text
from ..util.windows import DEFAULT_MAX_SENTENCE_TOKENS, cut_windows, window_tokens, windows_per_sequence

LAYER_MODES = ("all", "top", "average", "mix")
FORMAT = "spacy-elmo-embeddings/1"
# The biLM settings as this command's options name them, for its messages.
OPTION_NAMES = {
    "options_file": "--options",
    "weight_file": "--weights",
    "initial_state": "--initial-state",
    "max_sentence_tokens": "--max-tokens",
    "precision": "--precision",
}
SHARD_PLACEHOLDER = "{shard}"


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count``: the input lines ``k`` with ``k % count == index``."""

    index: int = 0
    count: int = 1

    @classmethod
    def parse(cls, spec: str, environ: Mapping[str, str] = os.environ) -> "Shard":
        """``"i/n"``, or ``"auto"``: ``RANK``/``WORLD_SIZE`` as set by torchrun (``0/1`` when unset)."""
        try:
            if spec == "auto":
                shard = cls(int(environ.get("RANK", "0")), int(environ.get("WORLD_SIZE", "1")))
            else:
                index, count = spec.split("/")
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


@dataclass(frozen=True)
class EmbedSettings:
    """Everything that decides the numbers written; stored in the file and checked when a run resumes.

    layers: ``all`` (every layer), ``top``, ``average`` (mean of the layers) or ``mix``
        (``gamma * sum_j mix_weights[j] * layer_j``, the weights used as given).
    max_tokens: longer lines are cut into consecutive windows of at most this many tokens, each
        embedded on its own (no context crosses a window boundary); their rows are concatenated.
    precision: the biLM's matrix products, as for ``ElmoEmbedder`` (fp32, int8, bf16; fp16 on a GPU).
    """

    layers: str = "all"
    mix_weights: Optional[Tuple[float, ...]] = None
    gamma: float = 1.0
    jsonl: bool = False
    lang: str = DEFAULT_LANG
    whitespace: bool = False
    max_tokens: int = DEFAULT_MAX_SENTENCE_TOKENS
    initial_state: str = DEFAULT_INITIAL_STATE
    options_file: Optional[str] = None
    weight_file: Optional[str] = None
    precision: str = DEFAULT_PRECISION
    shard: Shard = Shard()

    def __post_init__(self) -> None:
        if self.layers not in LAYER_MODES:
            raise EmbedError(f"--layers must be one of {', '.join(LAYER_MODES)}, found {self.layers!r}")
        if (self.layers == "mix") != (self.mix_weights is not None):
            raise EmbedError("--layers mix needs --mix-weights (one weight per layer, e.g. 0.2,0.5,0.3), and only mix uses them")
        try:
            self.bilm_settings()
        except ElmoSettingsError as err:  # the message names the setting: say the option instead
            raise EmbedError(re.sub("|".join(OPTION_NAMES), lambda m: OPTION_NAMES[m.group(0)], str(err))) from None

    def bilm_settings(self) -> BiLmSettings:
        """The biLM's settings (checked when made)."""
        shared = ("options_file", "weight_file", "lang", "initial_state", "precision")  # named alike in both
        return BiLmSettings(max_sentence_tokens=self.max_tokens, **{name: getattr(self, name) for name in shared})

    def model_files(self) -> Tuple[Path, Path]:
        """The biLM's options and weights files (the embedded model's when none were given)."""
        return model_files(self.options_file, self.weight_file, self.lang)

    def record(self, input_path: Path) -> str:
        """The JSON kept in the output's ``settings`` attribute (paths made absolute)."""
        data: Dict[str, Any] = dataclasses.asdict(self)
        options, weights = self.model_files()
        data.update(
            format=FORMAT,
            input=str(input_path.resolve()),
            options_file=str(options.resolve()),
            weight_file=str(weights.resolve()),
            shard=str(self.shard),
            mix_weights=None if self.mix_weights is None else list(self.mix_weights),
        )
        return json.dumps(data, sort_keys=True)

    def select(self, layers: np.ndarray) -> np.ndarray:
        """What is stored of one line's ``(n_layers + 1, n_tokens, dim)`` layers."""
        if self.layers == "all":
            return layers
        weights = np.float32(self.gamma) * self.mix_weights_for(layers.shape[0])
        return np.tensordot(weights, layers, axes=1).astype(np.float32, copy=False)

    def mix_weights_for(self, n_layers: int) -> np.ndarray:
        """The fixed mix of ``--layers top``, ``average`` or ``mix`` (before ``gamma``) for ``n_layers`` layers."""
        try:
            return fixed_mix_weights(self.layers if self.mix_weights is None else self.mix_weights, n_layers)
        except ElmoSettingsError as err:
            raise EmbedError(f"--mix-weights: {err}") from None

    def load_embedder(self, device: str) -> ElmoEmbedder:
        """The biLM these settings name, read and verified on ``device``, its layer count checked against the mix.

        Called before the output is created: a wrong ``--options``/``--weights`` path, a damaged file or mix
        weights that don't fit then leave nothing behind (a stub would record the wrong settings and refuse
        the corrected rerun).
        """
        device = resolve_device(device)
        try:
            check_precision(self.precision, torch.device(device))
        except ElmoSettingsError as err:  # a precision this device cannot run
            raise EmbedError(f"--precision: {err}") from None
        embedder = ElmoEmbedder.from_settings(self.bilm_settings(), device)
        if self.layers != "all":
            self.mix_weights_for(embedder.options.n_output_layers)
        return embedder

    def tokenizer(self) -> Tokenizer:
        return str.split if self.whitespace else make_tokenizer(self.lang)


def parse_line(line: str, number: int, path: Path, jsonl: bool) -> Union[str, List[str]]:
    """A line's text, or (JSONL with ``"tokens"``) its token list; errors name the line (1-based)."""
    if not jsonl:
        return line.rstrip("\r\n")
    if not line.strip():
        return ""
    where = f"{path}, line {number + 1}"
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        raise EmbedError(f"{where}: not valid JSON ({err.msg}, column {err.colno}); fix that line") from None
    if isinstance(record, dict) and isinstance(record.get("tokens"), list):
        if all(isinstance(token, str) for token in record["tokens"]):
            return list(record["tokens"])
        raise EmbedError(f"{where}: \"tokens\" must be a list of strings")
    if isinstance(record, dict) and isinstance(record.get("text"), str):
        return record["text"]
    raise EmbedError(f"{where}: expected an object with a \"text\" string or a \"tokens\" list of strings")


def scan_input(path: Path, jsonl: bool, shard: Shard) -> int:
    """Count the input's lines, checking the shard's JSONL lines first, so a bad line stops the run before any work."""
    if not path.is_file():
        raise EmbedError(f"Input file {path} not found (or not a file): give a text or JSONL file, one document per line")
    n_lines = 0
    with open_text(path) as f:
        for number, line in enumerate(f):
            if jsonl and shard.owns(number):
                parse_line(line, number, path, jsonl)
            n_lines += 1
    return n_lines


def read_lines(path: Path, jsonl: bool, shard: Shard, start: int) -> Iterator[Tuple[int, Union[str, List[str]]]]:
    """``(line number, text or tokens)`` of the shard's lines from ``start`` on."""
    with open_text(path) as f:
        for number, line in enumerate(f):
            if number >= start and shard.owns(number):
                yield number, parse_line(line, number, path, jsonl)


class EmbeddingFile:
    """An output file open for appending: checks the settings it was started with, and commits whole batches."""

    def __init__(self, path: Path, settings: str, n_lines: int):
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.file = h5py.File(path, "a")
        except OSError as err:
            raise EmbedError(
                f"Cannot open {path} as HDF5 ({err}). If it is the output of a run killed while writing, delete it "
                f"and start over; otherwise choose another OUTPUT"
            ) from None
        attrs = self.file.attrs
        if "settings" not in attrs:
            if len(self.file):
                self.file.close()
                raise EmbedError(f"{path} is an HDF5 file not written by 'spacy_elmo embed'; choose another OUTPUT")
            attrs.update({"settings": settings, "next_line": 0, "n_lines": n_lines, "complete": False})
        elif attrs["settings"] != settings or attrs["n_lines"] != n_lines:
            old = json.loads(attrs["settings"])
            self.file.close()
            raise EmbedError(_settings_mismatch(path, old, json.loads(settings)))
        self.next_line = int(attrs["next_line"])
        self.complete = bool(attrs["complete"])
        self._drop_uncommitted()

    def _drop_uncommitted(self) -> None:
        """Delete datasets of lines at or after ``next_line``: what a killed run wrote of an unfinished batch."""
        for group in (self.file, self.file.get("tokens", {})):
            for name in [n for n in group if n.isdigit() and int(n) >= self.next_line]:
                del group[name]

    def write_batch(self, lines: Sequence[Tuple[int, List[str], np.ndarray]], next_line: int) -> None:
        """Write each line's tokens and vectors, then mark everything before ``next_line`` done, and flush."""
        for number, tokens, vectors in lines:
            self.file.create_dataset(f"tokens/{number}", data=np.array(tokens, dtype=h5py.string_dtype()))
            self.file.create_dataset(str(number), data=vectors)
        self.file.flush()
        self.file.attrs["next_line"] = self.next_line = next_line
        self.file.flush()

    def finish(self) -> None:
        self.file.attrs["next_line"] = self.next_line = int(self.file.attrs["n_lines"])
        self.file.attrs["complete"] = self.complete = True
        self.file.flush()

    def close(self) -> None:
        self.file.close()


def _settings_mismatch(path: Path, old: Dict[str, Any], new: Dict[str, Any]) -> str:
    changed = [f"{key}: {old.get(key)!r} then, {new.get(key)!r} now" for key in sorted(new) if old.get(key) != new.get(key)]
    what = "; ".join(changed) or "the input has a different number of lines"
    return (
        f"{path} was started with other settings or input ({what}). Rerun with the original settings to continue it, "
        f"or delete it (or choose another OUTPUT) to start over."
    )


@dataclass
class EmbedResult:
    """What a call of :func:`embed_file` did."""

    output: Path
    lines_total: int  # the shard's lines, all in the file now
    lines_written: int  # of them, those embedded by this call (fewer when it resumed a run)
    tokens_written: int  # tokens of the lines_written
    already_complete: bool


def embed_file(
    input_path: PathLike,
    output_path: PathLike,
    settings: EmbedSettings = EmbedSettings(),
    batch_size: int = 32,
    device: str = "cpu",
    progress: bool = True,
) -> EmbedResult:
    """Embed the shard's lines of ``input_path`` into ``output_path`` (HDF5; see the module doc), resuming a previous run.

    ``batch_size`` lines go to the biLM at a time; results do not depend on it or on ``device``.
    A Dask or Ray task per input file can call this directly.
    """
    if batch_size < 1:
        raise EmbedError(f"--batch-size must be at least 1, found {batch_size}")
    input_path, output_path = Path(input_path), Path(output_path)
    shard = settings.shard
    embedder = settings.load_embedder(device)  # model, input, then output: nothing is written unless all check out
    n_lines = scan_input(input_path, settings.jsonl, shard)
    total = shard.lines_before(n_lines)
    out = EmbeddingFile(output_path, settings.record(input_path), n_lines)
    try:
        if out.complete:
            return EmbedResult(output_path, total, 0, 0, already_complete=True)
        tokenize = settings.tokenizer()
        lines_written = tokens_written = 0
        start = time.perf_counter()
        # the context closes the bar (ending its line) on an interruption too, so that a message after it starts a line
        with tqdm(total=total, initial=shard.lines_before(out.next_line), unit="line", disable=not progress) as bar:
            for batch in minibatch(read_lines(input_path, settings.jsonl, shard, out.next_line), batch_size):
                tokenized = [(n, item if isinstance(item, list) else tokenize(item)) for n, item in batch]
                vectors = embed_windows(embedder, [tokens for _, tokens in tokenized], settings.max_tokens)
                out.write_batch(
                    [(n, tokens, settings.select(v)) for (n, tokens), v in zip(tokenized, vectors)], batch[-1][0] + 1
                )
                lines_written += len(batch)
                tokens_written += sum(len(tokens) for _, tokens in tokenized)
                bar.update(len(batch))
                bar.set_postfix(tok_s=f"{tokens_written / max(time.perf_counter() - start, 1e-9):.0f}")
        out.finish()
        return EmbedResult(output_path, total, lines_written, tokens_written, already_complete=False)
    finally:
        out.close()


def embed_windows(embedder: ElmoEmbedder, documents: Sequence[List[str]], max_tokens: int) -> List[np.ndarray]:
    """All layers of each document, ``(n_layers + 1, n_tokens, dim)``, embedding windows of at most ``max_tokens``."""
    windows = cut_windows([[(0, len(tokens))] for tokens in documents], max_tokens)
    return embedder.runtime.layers(window_tokens(documents, windows), windows_per_sequence(windows, len(documents)))
