"""Raw text in, tokenised sentence batches out: globally shuffled, sharded by rank, resumable.

Input files hold one sentence per line (plain text or ``.gz``), tokenised by :mod:`~spacy_elmo.util.text`. The
stream's position (epoch, line, pending batches, random state) is part of every checkpoint, so a resumed run
continues with exactly the batches the interrupted one would have seen.
"""
import glob
import gzip
import random
from itertools import islice
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence

import numpy as np

from ..errors import CorpusError, StreamStateError
from ..util.text import Tokenizer, open_text, split_long


def resolve_files(spec: str) -> List[Path]:
    """Files named by a path, a directory (all ``*.txt``/``*.gz`` in it) or a glob, sorted."""
    path = Path(spec)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".txt", ".gz") and p.is_file())
    elif path.is_file():
        files = [path]
    else:
        files = sorted(Path(p) for p in glob.glob(spec))
    if not files:
        raise CorpusError(f"No text files found for {spec!r}: give a file, a directory or a glob of .txt/.gz files")
    return files


def read_sentences(spec: str, tokenize: Tokenizer, max_tokens: int, limit: Optional[int] = None) -> List[List[str]]:
    """The first ``limit`` tokenised sentences of the files, in order (held-out evaluation)."""
    return list(islice(file_sentences(resolve_files(spec), tokenize, max_tokens, None), limit))


def file_sentences(
    files: Sequence[Path], tokenize: Tokenizer, max_tokens: int, max_lines: Optional[int]
) -> Iterable[List[str]]:
    """Tokenised sentences of ``files``, in order: up to ``max_lines`` lines (None: all), spread evenly over ``files``
    (the vocabulary's word counts read a sample)."""
    per_file = None if max_lines is None else max(1, max_lines // len(files))
    for path in files:
        with open_text(path) as f:
            for line in islice(f, per_file):
                yield from split_long(tokenize(line.strip()), max_tokens)


class LineStore:
    """Every non-blank line of the training files, in memory as one UTF-8 buffer plus offsets.

    About the corpus's uncompressed size in memory (40 M words: ~230 MB), and a fraction of that
    as Python strings would take; it lets every epoch draw the lines in one global random order.
    """

    def __init__(self, files: Sequence[Path]):
        parts: List[bytes] = []
        for path in files:
            with (gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")) as f:
                parts.extend(line for line in (raw.strip() for raw in f) if line)
        lengths = np.fromiter((len(p) for p in parts), dtype=np.int64, count=len(parts))
        self.offsets = np.concatenate(([0], np.cumsum(lengths)))
        self.data = b"".join(parts)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> str:
        return self.data[self.offsets[i] : self.offsets[i + 1]].decode("utf-8", errors="replace")


class SentenceStream:
    """An endless stream of token batches over the training files, for one rank.

    Each epoch reads every non-blank line once, in a random order over the whole corpus (so every
    batch mixes many books, whatever order the files hold them in), and rank ``r`` of ``n`` takes
    every ``n``-th line of that order. A pool of ``pool_batches`` batches' worth of sentences is
    sorted by length and cut into batches of about ``batch_tokens`` tokens, served in random
    order: sentences of similar length keep the LSTM's batch full at every time step, which on a
    CPU roughly doubles the training speed over unsorted batches.
    """

    STATE_VERSION = 2

    def __init__(
        self,
        files: Sequence[Path],
        tokenize: Tokenizer,
        batch_tokens: int,
        max_sentence_tokens: int = 100,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        pool_batches: int = 50,
    ):
        self.files = list(files)
        self.lines = LineStore(self.files)
        names = [str(p) for p in self.files]
        if not len(self.lines):
            raise CorpusError(f"The training files {names} hold no text: give files with one sentence per line")
        if len(self.lines) < world_size:
            raise CorpusError(
                f"The training files {names} hold {len(self.lines)} non-blank lines, fewer than the {world_size} "
                "training processes, so some would get no data: give more text or use fewer processes"
            )
        self.tokenize = tokenize
        self.batch_tokens = batch_tokens
        self.max_sentence_tokens = max_sentence_tokens
        self.pool_batches = pool_batches
        self.seed, self.rank, self.world_size = seed, rank, world_size
        self.rng = random.Random(seed * 65536 + rank)
        self.epoch = 0
        self.position = 0  # lines of this rank's share of the epoch already read
        self.pending: List[List[str]] = []  # pieces of a split line not yet served
        self.ready: List[List[List[str]]] = []  # batches cut from the current pool, served from the end
        self._order = self._epoch_order()

    def _epoch_order(self) -> np.ndarray:
        """This rank's lines of the current epoch; the permutation is the same on every rank."""
        return np.random.default_rng([self.seed, self.epoch]).permutation(len(self.lines))[self.rank :: self.world_size]

    def _next_line(self) -> str:
        if self.position >= len(self._order):
            self.epoch += 1
            self.position = 0
            self._order = self._epoch_order()
        self.position += 1
        return self.lines[int(self._order[self.position - 1])]

    def next_sentence(self) -> List[str]:
        empty = 0
        while not self.pending:
            self.pending = split_long(self.tokenize(self._next_line()), self.max_sentence_tokens)
            empty += 1
            if empty > len(self._order):
                raise CorpusError(f"The tokenizer finds no tokens in the training files {[str(p) for p in self.files]}")
        return self.pending.pop(0)

    def next_batch(self) -> List[List[str]]:
        """About ``batch_tokens`` tokens of sentences of similar length."""
        if not self.ready:
            self.ready = self._cut_pool()
        return self.ready.pop()

    def _cut_pool(self) -> List[List[List[str]]]:
        pool: List[List[str]] = []
        tokens = 0
        while tokens < self.batch_tokens * self.pool_batches:
            pool.append(self.next_sentence())
            tokens += len(pool[-1])
        pool.sort(key=len)
        batches: List[List[List[str]]] = [[]]
        size = 0
        for sentence in pool:
            if size >= self.batch_tokens:
                batches.append([])
                size = 0
            batches[-1].append(sentence)
            size += len(sentence)
        self.rng.shuffle(batches)
        return batches

    def state_dict(self) -> Dict[str, Any]:
        """Everything needed to continue the stream exactly (plain Python values only)."""
        return {
            "version": self.STATE_VERSION,
            "rng": [*self.rng.getstate()],  # JSON turns tuples into lists; load_state_dict turns them back
            "seed": self.seed,
            "epoch": self.epoch,
            "position": self.position,
            "pending": [list(s) for s in self.pending],
            "ready": [[list(s) for s in b] for b in self.ready],
            "files": [p.name for p in self.files],
            "n_lines": len(self.lines),
            "rank": self.rank,
            "world_size": self.world_size,
        }

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continue from :meth:`state_dict`'s output; refuses a state of other files, lines or ranks.

        Files are known by name and line count, so a corpus moved to another folder still resumes.
        """
        self._check_same_text(state)
        if (state["rank"], state["world_size"]) != (self.rank, self.world_size):
            raise StreamStateError(
                f"The checkpoint's data position is rank {state['rank']} of {state['world_size']}; "
                f"this is rank {self.rank} of {self.world_size}"
            )
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self.epoch, self.position = state["epoch"], state["position"]
        self.pending = [list(s) for s in state["pending"]]
        self.ready = [[list(s) for s in b] for b in state["ready"]]
        self._order = self._epoch_order()

    def continue_epoch(self, states: Sequence[Dict[str, Any]]) -> None:
        """Take up the epoch that another number of processes was reading, at the same share of it.

        The model and optimizer of such a run resume exactly, the text nearly: the lines the old processes
        held in their pools are not served, and a few lines near the old ranks' positions may be read
        twice or not at all in this epoch.
        """
        for state in states:
            self._check_same_text(state)
        epoch = min(state["epoch"] for state in states)
        share = len(self.lines) / len(states)
        read = sum(state["position"] if state["epoch"] == epoch else share for state in states)
        self.epoch, self.position = epoch, int(read) // self.world_size
        self.pending, self.ready = [], []
        self._order = self._epoch_order()

    def _check_same_text(self, state: Dict[str, Any]) -> None:
        if state.get("version") != self.STATE_VERSION:
            raise StreamStateError("The checkpoint's data position was written by an older spacy-elmo")
        mine = (self.seed, [p.name for p in self.files], len(self.lines))
        theirs = (state["seed"], [Path(f).name for f in state["files"]], state["n_lines"])
        if mine != theirs:
            raise StreamStateError(
                "The checkpoint was written for other training files or another seed; resume with the same "
                "--paths.train and seed, or start a new OUTPUT_DIR"
            )
