"""Reading text: UTF-8 files (plain or ``.gz``), spaCy's tokenization, long sentences cut into windows.

Shared by everything that turns raw text into biLM input (the ``embed`` command, pretraining), so
that both see the same tokens as the ``elmo`` component does in a pipeline of the same language.
"""
import gzip
import io
from pathlib import Path
from typing import Callable, List

from .windows import cut_windows, window_tokens

Tokenizer = Callable[[str], List[str]]


def make_tokenizer(lang: str) -> Tokenizer:
    """The spaCy tokenizer of ``lang`` as a function from a line to its non-space tokens."""
    import spacy  # here, not above: pretraining on pre-tokenized text runs where spaCy is not installed

    tokenizer = spacy.blank(lang).tokenizer
    return lambda line: [t.text for t in tokenizer(line) if not t.is_space]


def open_text(path: Path) -> io.TextIOBase:
    """``path`` opened for reading as UTF-8 text (gunzipped if it ends in ``.gz``); bad bytes become U+FFFD."""
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")  # type: ignore[return-value]
    return open(path, encoding="utf-8", errors="replace")


def split_long(tokens: List[str], max_sentence_tokens: int) -> List[List[str]]:
    """Cut a sentence into consecutive windows of at most ``max_sentence_tokens`` tokens (none for an empty
    sentence)."""
    return window_tokens([tokens], cut_windows([[(0, len(tokens))]], max_sentence_tokens))
