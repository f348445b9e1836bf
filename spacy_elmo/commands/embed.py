"""``python -m spacy_elmo embed``: the ELMo layers of every line of a corpus into an HDF5 file, resumably.

Output layout (plain HDF5; read it with h5py alone): docs/usage.md, "HDF5 layout".

Lines are processed in order, a batch at a time: each batch's datasets are written, then
``next_line`` moves past the batch and the file is flushed. A rerun of the same command drops any
dataset at or after ``next_line`` (left by a killed run) and continues from there, so the finished
file equals that of an uninterrupted run.
"""
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import h5py
import numpy as np
from spacy.util import minibatch
from tqdm import tqdm

from .embed_job import Shard, check_input, check_output, resolve_device
from ..errors import ElmoError, ElmoSettingsError, EmbedError
from ..model.fixed_mix import fixed_mix_weights
from ..runtime import BiLmSettings, ElmoRuntime, MixWeights
from ..runtime.settings import DEFAULTS, embed_options
from ..sources.load import load_encoder
from ..sources.resolve import model_files
from ..util.files import PathLike
from ..util.text import Tokenizer, make_tokenizer, open_text
from ..util.windows import cut_windows, window_tokens, windows_per_sequence

LAYER_MODES = ("all", "top", "average", "mix")
FORMAT = "spacy-elmo-embeddings/1"


# embed's options that set the biLM, and the setting each gives: an error of a setting is reported as its option's.
BILM_OPTIONS = embed_options()
MODEL_FILE_OPTIONS = ("--options", "--weights")  # checked as a pair: one alone is either a model's name or an error
# The biLM settings that change the numbers written, besides its files (recorded, and compared on resume).
RECORDED_BILM_SETTINGS = tuple(name for option, name in BILM_OPTIONS.items() if option not in MODEL_FILE_OPTIONS)


def settings_from_options(options: Mapping[str, Any]) -> BiLmSettings:
    """The biLM settings of embed's options, as ``{"--precision": "int8", ...}`` (an option absent or None keeps
    the setting's default). They are applied one option at a time, so that an error names the option it is about."""
    given = {option: value for option, value in options.items() if value is not None}
    files = [option for option in MODEL_FILE_OPTIONS if option in given]
    steps = [("/".join(files), files)] if files else []
    steps += [(option, [option]) for option in given if option not in MODEL_FILE_OPTIONS]
    settings = DEFAULTS
    for name, step in steps:
        try:
            settings = settings.replace(**{BILM_OPTIONS[option]: given[option] for option in step})
        except ElmoError as err:  # a setting's check, or (a lone --options) the published models' names
            raise EmbedError(f"{name}: {err}") from None
    return settings


@dataclass(frozen=True)
class EmbedSettings:
    """Everything that decides the numbers written; stored in the file and checked when a run resumes.

    bilm: the biLM and how it runs; its ``max_sentence_tokens`` cuts long lines into windows (:func:`embed_windows`),
        its ``lang`` also chooses the tokenizer.
    layers: ``all`` (every layer), ``top``, ``average`` (mean of the layers) or ``mix``
        (``gamma * sum_j mix_weights[j] * layer_j``, the weights used as given).
    jsonl, whitespace: lines are JSON objects (``"text"`` or ``"tokens"``); text is split on whitespace, not by
        spaCy's tokenizer.
    shard: which of the input's lines are embedded.
    """

    bilm: BiLmSettings = DEFAULTS
    layers: str = "all"
    mix_weights: Optional[Tuple[float, ...]] = None
    gamma: float = 1.0
    jsonl: bool = False
    whitespace: bool = False
    shard: Shard = Shard()

    def __post_init__(self) -> None:
        if self.layers not in LAYER_MODES:
            raise EmbedError(f"--layers must be one of {', '.join(LAYER_MODES)}, found {self.layers!r}")
        if (self.layers == "mix") != (self.mix_weights is not None):
            raise EmbedError("--layers mix needs --mix-weights (one weight per layer, e.g. 0.2,0.5,0.3), and only mix uses them")

    def record(self, input_path: Path) -> str:
        """The JSON kept in the output's ``settings`` attribute (paths made absolute)."""
        options, weights = model_files(self.bilm.options_file, self.bilm.weight_file, self.bilm.lang)
        data: Dict[str, Any] = {name: getattr(self.bilm, name) for name in RECORDED_BILM_SETTINGS}
        data.update(
            format=FORMAT,
            input=str(input_path.resolve()),
            options_file=str(options.resolve()),
            weight_file=str(weights.resolve()),
            layers=self.layers,
            mix_weights=None if self.mix_weights is None else list(self.mix_weights),
            gamma=self.gamma,
            jsonl=self.jsonl,
            whitespace=self.whitespace,
            shard=str(self.shard),
        )
        return json.dumps(data, sort_keys=True)

    def mix(self, n_layers: int) -> Optional[MixWeights]:
        """The weights of the fixed mix written, ``gamma`` included, for a biLM of ``n_layers`` layers; None for
        ``--layers all``."""
        if self.layers == "all":
            return None
        try:
            weights = fixed_mix_weights(self.layers if self.mix_weights is None else self.mix_weights, n_layers)
        except ElmoSettingsError as err:
            raise EmbedError(f"--mix-weights: {err}") from None
        return tuple(float(w) for w in np.float32(self.gamma) * weights)

    def load_runtime(self, device: str) -> ElmoRuntime:
        """The biLM these settings name, read and verified on ``device``.

        Called before the output is created: a wrong ``--options``/``--weights`` path, a damaged file or a precision
        the device cannot run then leaves nothing behind (a stub would record the wrong settings and refuse the
        corrected rerun).
        """
        encoder = load_encoder(self.bilm.options_file, self.bilm.weight_file, self.bilm.lang, resolve_device(device))
        try:
            return ElmoRuntime(encoder, self.bilm)
        except ElmoSettingsError as err:  # the one setting a runtime checks against its device
            raise EmbedError(f"--precision: {err}") from None

    def tokenizer(self) -> Tokenizer:
        return str.split if self.whitespace else make_tokenizer(self.bilm.lang)


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
    check_input(input_path)
    check_output(output_path)
    shard = settings.shard
    runtime = settings.load_runtime(device)  # paths, model, mix, then the input's lines: nothing is written unless all check out
    mix = settings.mix(runtime.options.n_output_layers)
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
                vectors = embed_windows(runtime, [tokens for _, tokens in tokenized], mix)
                out.write_batch([(n, tokens, v) for (n, tokens), v in zip(tokenized, vectors)], batch[-1][0] + 1)
                lines_written += len(batch)
                tokens_written += sum(len(tokens) for _, tokens in tokenized)
                bar.update(len(batch))
                bar.set_postfix(tok_s=f"{tokens_written / max(time.perf_counter() - start, 1e-9):.0f}")
        out.finish()
        return EmbedResult(output_path, total, lines_written, tokens_written, already_complete=False)
    finally:
        out.close()


def embed_windows(runtime: ElmoRuntime, documents: Sequence[List[str]], mix: Optional[MixWeights]) -> List[np.ndarray]:
    """What is written of each document: all its layers, ``(n_layers + 1, n_tokens, dim)``, or (``mix``) their mix,
    ``(n_tokens, dim)``. Windows of at most the biLM's ``max_sentence_tokens`` are embedded, and put back end to end."""
    windows = cut_windows([[(0, len(tokens))] for tokens in documents], runtime.settings.max_sentence_tokens)
    segments, joined = window_tokens(documents, windows), windows_per_sequence(windows, len(documents))
    return runtime.layers(segments, joined) if mix is None else runtime.mixed(segments, mix, joined)
