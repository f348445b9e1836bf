"""The word vocabulary the language model predicts: the most frequent training tokens."""
from collections import Counter
from itertools import chain
from pathlib import Path
from typing import Dict, Iterable, List, Sequence

from ..errors import VocabularyError
from ..util.files import atomic_write
from ..model.chars import BOS_TOKEN, EOS_TOKEN

UNK_TOKEN = "<UNK>"
SPECIALS = (BOS_TOKEN, EOS_TOKEN, UNK_TOKEN)


class Vocab:
    """Words ↔ ids. Ids 0, 1, 2 are ``<S>``, ``</S>``, ``<UNK>`` (bilm-tf's order), then by frequency.

    ``<UNK>`` is only ever a target: the biLM reads every word through its characters.
    """

    unk = 2  # the id of <UNK>

    def __init__(self, words: Sequence[str]):
        if tuple(words[:3]) != SPECIALS:
            raise VocabularyError(f"A vocabulary must start with {SPECIALS}, found {tuple(words[:3])}")
        self.words: List[str] = list(words)
        self.ids: Dict[str, int] = {w: i for i, w in enumerate(self.words)}

    def __len__(self) -> int:
        return len(self.words)

    def encode(self, tokens: Iterable[str]) -> List[int]:
        return [self.ids.get(t, self.unk) for t in tokens]

    @classmethod
    def build(cls, sentences: Iterable[Sequence[str]], size: int) -> "Vocab":
        """The ``size - 3`` most frequent tokens (ties broken by first occurrence) plus the specials."""
        counts = Counter(chain.from_iterable(sentences))
        for special in SPECIALS:
            counts.pop(special, None)
        return cls(list(SPECIALS) + [w for w, _ in counts.most_common(max(0, size - 3))])

    def to_file(self, path: Path) -> None:
        atomic_write(path, lambda p: p.write_text("\n".join(self.words) + "\n", encoding="utf-8"))

    @classmethod
    def from_file(cls, path: Path) -> "Vocab":
        return cls(Path(path).read_text(encoding="utf-8").rstrip("\n").split("\n"))

