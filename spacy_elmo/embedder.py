"""``spacy_elmo.ElmoEmbedder``: ELMo vectors for tokenised sentences as numpy arrays, outside spaCy; not AllenNLP
0.9's class of the same name (docs/api.md, "Two classes called ElmoEmbedder")."""
import reprlib
from typing import Iterable, Iterator, List, Optional, Sequence, Union

import numpy as np
import numpy.typing as npt
import torch
from spacy.tokens import Doc, Span, Token

from .model.encoder import ElmoEncoder
from .model.options import ElmoOptions
from .runtime import BiLmSettings, ElmoRuntime
from .runtime.settings import DEFAULTS
from .util.chunks import chunked
from .util.files import PathLike


# What ElmoEmbedder takes as one sentence: its tokens, as str or spaCy Tokens, or a spaCy Doc or Span.
Sentence = Union[Sequence[str], Sequence[Token], Doc, Span]

# One sentence's layers, float32 ``(n_layers + 1, n_tokens, 2 * projection_dim)``.
Vectors = npt.NDArray[np.float32]


class ElmoEmbedder:
    """spacy-elmo's own embedder, stateless by default (not AllenNLP 0.9's ``spacy_elmo.allennlp.ElmoEmbedder``).

    Its arguments (``device`` and ``cache_words`` aside) are :class:`~spacy_elmo.runtime.BiLmSettings` fields, and
    docs/api.md's ``ElmoEmbedder`` table says what each does (tests/test_readme.py checks that it lists each one).
    A sentence's vectors depend on it alone unless ``stateful=True`` (``reset_states()`` clears the carried state).
    Sharing one embedder between threads: docs/limits.md, "Threads".
    """

    def __init__(
        self,
        options_file: Optional[PathLike] = None,
        weight_file: Optional[PathLike] = None,
        initial_state: str = DEFAULTS.initial_state,
        stateful: bool = DEFAULTS.stateful,
        device: Union[str, torch.device] = "cpu",
        cache_size: int = DEFAULTS.cache_size,
        cache_words: Optional[Iterable[str]] = None,
        max_batch_tokens: int = DEFAULTS.max_batch_tokens,
        lang: str = DEFAULTS.lang,
        threads: Optional[int] = DEFAULTS.threads,
        precision: str = DEFAULTS.precision,
        batch_requests: bool = DEFAULTS.batch_requests,
        batch_wait_ms: float = DEFAULTS.batch_wait_ms,
        shared_batch_tokens: int = DEFAULTS.shared_batch_tokens,
    ):
        settings = BiLmSettings(
            options_file=options_file, weight_file=weight_file, lang=lang, initial_state=initial_state,
            stateful=stateful, max_batch_tokens=max_batch_tokens, precision=precision, cache_size=cache_size,
            threads=threads, batch_requests=batch_requests, batch_wait_ms=batch_wait_ms,
            shared_batch_tokens=shared_batch_tokens,
        )
        self.runtime = ElmoRuntime.load(settings, device)
        if cache_words is not None:
            self.runtime.fill_cache(cache_words)

    def __repr__(self) -> str:
        return f"spacy_elmo.ElmoEmbedder({self.runtime.describe()})"

    @property
    def settings(self) -> BiLmSettings:
        return self.runtime.settings

    @property
    def stateful(self) -> bool:
        return self.runtime.settings.stateful

    @property
    def options(self) -> ElmoOptions:
        return self.runtime.options

    @property
    def encoder(self) -> ElmoEncoder:
        """The biLM with its token layer (read-only use: settings change through a new embedder)."""
        return self.runtime.encoder

    def reset_states(self) -> None:
        """Forget carried state (stateful mode): the next call starts from the initial state."""
        self.runtime.reset_states()

    def embed_sentence(self, sentence: Sequence[str]) -> Vectors:
        """Layers of one sentence: float32 ``(n_layers + 1, len(sentence), 2 * projection_dim)``."""
        return self.embed_batch([sentence])[0]

    def embed_batch(self, batch: Sequence[Sequence[str]]) -> List[Vectors]:
        """Layers of each sentence, in order; see :meth:`embed_sentence`. Each array holds its sentence's rows only."""
        return self.runtime.layers(_token_lists(batch))

    def embed_sentences(self, sentences: Iterable[Sequence[str]], batch_size: int = 64) -> Iterator[Vectors]:
        """Layers of each sentence of a stream, computed ``batch_size`` sentences at a time."""
        for batch in chunked(sentences, batch_size):
            yield from self.embed_batch(batch)


def _token_lists(batch: Iterable[Sentence]) -> List[List[str]]:
    """Each sentence of a batch as a list of token texts; a spaCy Doc or Span, or a list of Tokens, gives its texts.

    Any other shape is refused with a one-line TypeError naming what was found and where: a str where a sentence
    is expected would silently embed its characters as one-character tokens, and other shapes (a sentence nested
    once too deep, ints or None as tokens) would fail deep inside the model without saying which input was wrong.
    """
    if isinstance(batch, (str, Doc, Span)):
        one = "embed_sentence(text.split())" if isinstance(batch, str) else "embed_sentence(doc)"
        raise TypeError(
            f"spacy_elmo.ElmoEmbedder takes a batch as a list of sentences, found {_describe(batch)}: pass a sentence as a list "
            f"of tokens or a spaCy Doc, e.g. {one}, and a batch as a list of them"
        )
    try:
        sentences = iter(batch)
    except TypeError:
        raise TypeError(f"spacy_elmo.ElmoEmbedder takes a batch as a list of sentences, found {_describe(batch)}") from None
    return [_sentence_tokens(sentence, position) for position, sentence in enumerate(sentences)]


def _sentence_tokens(sentence: Sentence, position: int) -> List[str]:
    """The token texts of the batch's sentence number ``position`` (0-based; named in the error)."""
    if isinstance(sentence, (Doc, Span)):
        return [token.text for token in sentence]
    where = f"sentence {position} of the batch"
    if isinstance(sentence, str):
        raise TypeError(
            f"spacy_elmo.ElmoEmbedder takes tokenised sentences, found the string {sentence[:40]!r} as {where}: pass a sentence "
            f"as a list of tokens, e.g. embed_sentence(text.split()) or a spaCy Doc, and a batch as a list of them"
        )
    try:
        tokens = iter(sentence)
    except TypeError:
        raise TypeError(f"spacy_elmo.ElmoEmbedder: {where} is {_describe(sentence)}; expected a list of str tokens or a spaCy Doc") from None
    texts = list(tokens)
    if set(map(type, texts)) <= {str}:  # the usual case, checked at C speed
        return texts
    for index, token in enumerate(texts):  # a spaCy Token gives its text; anything else but a str is refused
        if not isinstance(token, (str, Token)):
            deeper = "; a sentence nested one level too deep?" if isinstance(token, (list, tuple, Doc, Span)) else ""
            found = f"token {index} of {where} is {_describe(token)}"
            raise TypeError(f"spacy_elmo.ElmoEmbedder: {found}; tokens must be str (or spaCy Tokens){deeper}")
    return [token.text if isinstance(token, Token) else token for token in texts]


def _describe(value: object) -> str:
    """A value for an error message: its type and a short repr, e.g. ``a list (['a', 'b'])``."""
    if value is None:
        return "None"
    name = type(value).__name__
    article = "an" if name[0].lower() in "aeiou" else "a"
    return f"{article} {name} ({reprlib.repr(value)})".replace("\n", "\\n")  # one line even for a Doc's text
