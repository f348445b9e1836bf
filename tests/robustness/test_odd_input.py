"""Odd and hostile input through ``nlp.pipe``: every token gets a finite vector and every Doc its own vectors.

The reference for a Doc in a batch is the same Doc run on its own (``nlp(doc.copy())``): a mix-up between
Docs, a lost or shifted row, or a batch-dependent result shows as a difference far above float rounding.
"""
import random
from typing import List, Optional

import numpy as np
import pytest
import spacy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spacy.language import Language
from spacy.tokens import Doc

from spacy_elmo import ElmoEmbedder
from spacy_elmo.model.chars import token_to_ids

from tests.conftest import ROUNDING
from tests.pipeline.conftest import OPTIONS, WEIGHTS, make_nlp

DIM = 32  # 2 * projection_dim of the fixture biLM

NASTY = [
    "\x00", "\x01\x02\x03", "\x7f", "\x1b[31m", "\u200b", "\ufeff", "\u202e", "\u2028", "\uffff", "\U0010ffff",
    "👍🏽", "👨‍👩‍👧‍👦", "🇩🇪", "😀😀😀", "中文", "日本語のテキスト", "한국어", "שלום", "مرحبا", "עבריתabc", "aب中😀Ж",
    "e\u0301", "Ω≈ç√∫", " ", "  ", "\t", "\n", "\r\n", "\u3000", "\xa0", "<S>", "</S>", "x" * 10_000, "中" * 5_000,
]
PLAIN = ["the", "cat", "sat", "on", "mat", ".", ",", "It", "was", "1996", "Leicestershire", "!"]


def words(doc: Doc) -> List[str]:
    return [t.text for t in doc]


def make_doc(nlp: Language, tokens: List[str], sent_starts: Optional[List[bool]] = None) -> Doc:
    return Doc(nlp.vocab, words=tokens, spaces=[False] * len(tokens), sent_starts=sent_starts)


def random_docs(nlp: Language, n: int, seed: int) -> List[Doc]:
    """Empty Docs, nasty tokens mixed with plain ones, some Docs with sentence boundaries, lengths 0 to 40."""
    rng = random.Random(seed)
    docs = []
    for _ in range(n):
        length = rng.choice([0, 0, 1, 2, 3, 5, 8, 13, 21, 40])
        tokens = [rng.choice(NASTY) if rng.random() < 0.4 else rng.choice(PLAIN) for _ in range(length)]
        sent_starts = None
        if length and rng.random() < 0.5:
            sent_starts = [i == 0 or rng.random() < 0.2 for i in range(length)]
        docs.append(make_doc(nlp, tokens, sent_starts))
    return docs


def assert_each_doc_has_its_own_finite_vectors(
    nlp: Language, docs: List[Doc], batch_size: int, alone: Optional[List[np.ndarray]] = None
) -> None:
    """``alone``: each Doc's vectors from a run on its own (computed here if not given)."""
    if alone is None:
        alone = [nlp(doc.copy())._.elmo for doc in docs]
    out = list(nlp.pipe(docs, batch_size=batch_size))
    assert len(out) == len(docs) and all(a is b for a, b in zip(out, docs))  # the same Docs, in order
    for doc, expected in zip(out, alone):
        assert doc._.elmo.shape == (len(doc), DIM) and doc._.elmo.dtype == np.float32
        assert np.isfinite(doc._.elmo).all()
        np.testing.assert_allclose(doc._.elmo, expected, **ROUNDING)  # batching with other sentences changes float rounding only


@pytest.fixture(scope="module")
def nlp() -> Language:
    return make_nlp()


@pytest.fixture(scope="module")
def odd_docs(nlp):
    """300 Docs (so that even batch_size 256 makes a full and a partial batch) and their single-Doc vectors."""
    docs = random_docs(nlp, 300, seed=0)
    return docs, [nlp(doc.copy())._.elmo for doc in docs]


@pytest.mark.parametrize("batch_size", [1, 7, 64, 256])
def test_odd_docs_in_batches(nlp, odd_docs, batch_size):
    docs, alone = odd_docs
    assert_each_doc_has_its_own_finite_vectors(nlp, [doc.copy() for doc in docs], batch_size, alone)


def test_only_empty_docs(nlp):
    docs = list(nlp.pipe([make_doc(nlp, []) for _ in range(5)], batch_size=2))
    assert [d._.elmo.shape for d in docs] == [(0, DIM)] * 5


def test_each_nasty_token_alone_and_in_a_sentence(nlp):
    embedder = ElmoEmbedder(OPTIONS, WEIGHTS, initial_state="zeros")
    docs = [make_doc(nlp, [token]) for token in NASTY] + [make_doc(nlp, ["The", token, "sat", "."]) for token in NASTY]
    for doc in nlp.pipe(docs, batch_size=16):
        assert np.isfinite(doc._.elmo).all()
        np.testing.assert_allclose(doc._.elmo, embedder.embed_sentence(words(doc))[-1], atol=1e-5)


def test_text_through_the_tokenizer(nlp):
    texts = ["", " ", "\n\n\t", "x" * 10_000, "Hello\x00world \u202eevil\u202c text", "中文和English混合 😀!", "שלום עולם"]
    docs = list(nlp.pipe(texts, batch_size=3))
    assert [d.text for d in docs] == texts
    for doc in docs:
        assert doc._.elmo.shape == (len(doc), DIM) and np.isfinite(doc._.elmo).all()
        np.testing.assert_allclose(doc._.elmo, nlp(doc.text)._.elmo, **ROUNDING)  # batching with other sentences changes float rounding only


def test_long_tokens_keep_their_first_48_utf8_bytes():
    """The fixture's max_characters_per_token is 50: begin/end-of-word markers and 48 bytes.

    Without a token cache a cut token and its first 48 bytes give the same character ids, hence the very same
    computation, bit for bit. (With the cache, the second call would run only the new token through the token
    layer, a smaller product whose float rounding may differ.)
    """
    nlp = make_nlp(cache_size=0)

    def vectors(token: str) -> np.ndarray:
        return nlp(make_doc(nlp, ["A", token, "here"]))._.elmo

    np.testing.assert_array_equal(vectors("a" * 10_000), vectors("a" * 48))
    assert not np.allclose(vectors("a" * 48), vectors("a" * 47))
    # a Chinese character is 3 UTF-8 bytes: 16 of them fill the 48 bytes
    np.testing.assert_array_equal(vectors("中" * 5_000), vectors("中" * 16))
    assert not np.allclose(vectors("中" * 16), vectors("中" * 15))


def test_strings_that_do_not_encode_to_utf8():
    """spaCy cannot hold lone surrogates in a Doc; ElmoEmbedder takes them, as the bytes Python's surrogatepass gives."""
    with pytest.raises(UnicodeEncodeError):
        spacy.blank("en")("a \ud800 b")  # raised by spaCy when it makes the Doc, before any component runs
    assert token_to_ids("\ud800")[:5].tolist() == [259, 0xED + 1, 0xA0 + 1, 0x80 + 1, 260]
    embedder = ElmoEmbedder(OPTIONS, WEIGHTS, initial_state="zeros")
    for sentence in (["\ud800"], ["a\udfffb", "\udc80\udcff", "ok"], ["\ud83d", "\ude00", "x" * 100 + "\ud800"]):
        layers = embedder.embed_sentence(sentence)
        assert layers.shape == (3, len(sentence), DIM) and np.isfinite(layers).all()


def test_odd_docs_and_their_sentences_given_to_the_embedder_directly(nlp):
    """Docs and Spans (empty ones, nasty tokens) give exactly the vectors of their token texts."""
    embedder = ElmoEmbedder(OPTIONS, WEIGHTS, initial_state="zeros")
    docs = random_docs(nlp, 40, seed=3)
    spans = [sent for doc in docs if doc.has_annotation("SENT_START") for sent in doc.sents]
    assert len(spans) > 10
    for batch in (docs, spans):
        for got, expected in zip(embedder.embed_batch(batch), embedder.embed_batch([words(d) for d in batch])):
            np.testing.assert_array_equal(got, expected)


# --- 100,000-token Docs -----------------------------------------------------------------------------------------

LONG = 100_000


def long_doc(nlp: Language, with_sentences: bool) -> Doc:
    rng = random.Random(7)
    tokens = [rng.choice(PLAIN + NASTY[:-2]) for _ in range(LONG)]
    sent_starts = None
    if with_sentences:
        sent_starts = [i == 0 or rng.random() < 0.05 for i in range(LONG)]
    return make_doc(nlp, tokens, sent_starts)


@pytest.mark.parametrize("with_sentences", [False, True])
def test_a_100k_token_doc_among_small_ones(nlp, with_sentences):
    embedder = ElmoEmbedder(OPTIONS, WEIGHTS, initial_state="zeros")
    big = long_doc(nlp, with_sentences)
    small = random_docs(nlp, 12, seed=1)
    docs = small[:6] + [big] + small[6:]
    assert_each_doc_has_its_own_finite_vectors(nlp, docs, batch_size=7)
    # independently: the biLM inputs are the sentences, or windows of max_sentence_tokens (256) tokens
    tokens = words(big)
    if with_sentences:
        spans = [(s.start, s.end) for s in big.sents]
        assert 1000 < len(spans) < 10_000
        spans = spans[:3] + spans[len(spans) // 2 : len(spans) // 2 + 3] + spans[-3:]
    else:
        spans = [(0, 256), (256, 512), (50_176, 50_432), (99_840, LONG)]
    for start, end in spans:
        expected = embedder.embed_sentence(tokens[start:end])[-1]
        np.testing.assert_allclose(big._.elmo[start:end], expected, atol=1e-5)


# --- property: any tokens, any batch split ---------------------------------------------------------------------

TOKEN = st.one_of(
    st.sampled_from(NASTY + PLAIN),
    st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=60),  # no lone surrogates: see above
)
DOC = st.tuples(st.lists(TOKEN, max_size=25), st.booleans(), st.randoms(use_true_random=False))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(docs=st.lists(DOC, max_size=12), batch_size=st.integers(1, 13))
def test_property_any_tokens_any_batches(docs, batch_size):
    nlp = PROPERTY_NLP
    built = []
    for tokens, with_sentences, rng in docs:
        sent_starts = [i == 0 or rng.random() < 0.3 for i in range(len(tokens))] if with_sentences and tokens else None
        built.append(make_doc(nlp, tokens, sent_starts))
    assert_each_doc_has_its_own_finite_vectors(nlp, built, batch_size)


PROPERTY_NLP = make_nlp(max_batch_tokens=64, max_sentence_tokens=9)  # small caps: many batches and windows
