"""``Doc._.elmo``, ``Token._.elmo``, ``Span._.elmo``, ``Doc._.elmo_layers``, ``.vector`` and ``.similarity`` after
every flow spaCy takes a Doc through: each token reads its own row, the row of a token it was made of, or none; never
another token's.

The expected rows are the parent's, taken before the flow: ``EXPECTED[i]`` is the row of token ``i`` of the Doc the
biLM saw. Each flow's expectation is the list of the parent tokens whose rows the new Doc's tokens should read (None:
no row), worked out from what the flow does to the tokens."""
import copy
import pickle
from itertools import permutations
from pathlib import Path
from typing import List, Optional

import numpy as np
import pytest
import spacy
from spacy.tokens import Doc, DocBin

import spacy_elmo

TEXT = "I saw it . The cat sat . They left . The dog barked twice . Then it slept ."
ZH_MODEL = Path(spacy_elmo.__file__).parent / "data" / "zh_classics_tiny"


def pipeline(vocab=True, **config) -> spacy.language.Language:
    nlp = spacy.blank("en", vocab=vocab)
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config=config)
    return nlp


@pytest.fixture(scope="module")
def nlp():
    return pipeline(store_layers=True)


@pytest.fixture(scope="module")
def parent(nlp):
    doc = nlp(TEXT)
    return doc, doc._.elmo.copy(), doc._.elmo_layers.copy()


def sentences(doc: Doc) -> List[range]:
    return [range(sent.start, sent.end) for sent in doc.sents]


def assert_reads(doc: Doc, rows: np.ndarray, origin: List[Optional[int]], layers: Optional[np.ndarray] = None):
    """Every way of reading ``doc``'s vectors gives token ``j`` the row ``rows[origin[j]]``, or none. The similarity
    hooks are put back where spaCy dropped them (``Doc.from_docs``, ``DocBin``), as the docs say to."""
    assert len(doc) == len(origin)
    if "vector" not in doc.user_token_hooks:
        spacy_elmo.with_vector_hooks([doc])
    want = np.stack([rows[i] if i is not None else np.zeros(rows.shape[1], np.float32) for i in origin])
    np.testing.assert_array_equal(doc._.elmo, want)
    for token, i in zip(doc, origin):
        if i is None:
            assert token._.elmo is None and not token.has_vector
        else:
            np.testing.assert_array_equal(token._.elmo, rows[i])
            assert token.has_vector
        np.testing.assert_array_equal(token.vector, want[token.i])
    np.testing.assert_allclose(doc[1:4]._.elmo, want[1:4].mean(axis=0), rtol=1e-6)
    np.testing.assert_allclose(doc.vector, want.mean(axis=0), rtol=1e-6)
    a, b = want[0].astype(np.float64), want[-1].astype(np.float64)
    if np.linalg.norm(a) and np.linalg.norm(b):
        assert doc[0].similarity(doc[-1]) == pytest.approx(a @ b / np.linalg.norm(a) / np.linalg.norm(b))
    if layers is not None:
        want_layers = np.stack([layers[:, i] if i is not None else np.zeros_like(layers[:, 0]) for i in origin], 1)
        np.testing.assert_array_equal(doc._.elmo_layers, want_layers)


@pytest.mark.parametrize("copy_user_data", [False, True])
def test_each_sentence_as_a_doc_reads_its_own_rows(parent, copy_user_data):
    doc, rows, layers = parent
    for sent, span in zip(sentences(doc), doc.sents):
        assert_reads(span.as_doc(copy_user_data=copy_user_data), rows, list(sent), layers)


@pytest.mark.parametrize("copy_user_data", [False, True])
def test_every_ordered_pair_and_a_triple_of_sentence_pieces_joined(parent, copy_user_data):
    doc, rows, layers = parent
    spans, sents = list(doc.sents), sentences(doc)
    pieces = [span.as_doc(copy_user_data=copy_user_data) for span in spans]
    for order in [*permutations(range(5), 2), (4, 0, 2)]:
        joined = Doc.from_docs([pieces[k] for k in order])
        assert_reads(joined, rows, [i for k in order for i in sents[k]], layers)


def test_pieces_of_two_docs_and_of_two_bilms_joined(nlp, parent):
    doc, rows, _ = parent
    other_nlp = pipeline(nlp.vocab, store_layers=True, model={"options_file": str(ZH_MODEL / "options.json"), "weight_file": str(ZH_MODEL / "weights.hdf5")})
    for second in (nlp, other_nlp):
        other = second(TEXT)  # the same text: only the rows can tell the pieces apart
        other_rows = other._.elmo.copy()
        assert not np.array_equal(other_rows, rows) or second is nlp
        both = np.concatenate([rows, other_rows])
        for cu in (False, True):
            joined = Doc.from_docs([other[4:8].as_doc(copy_user_data=cu), doc[0:4].as_doc(copy_user_data=cu)])
            assert_reads(joined, both, [len(doc) + i for i in range(4, 8)] + [0, 1, 2, 3])


def test_copies_pickles_and_bytes_keep_every_row(parent, nlp):
    doc, rows, layers = parent
    for same in (doc.copy(), copy.deepcopy(doc), pickle.loads(pickle.dumps(doc)), Doc(nlp.vocab).from_bytes(doc.to_bytes())):
        assert_reads(same, rows, list(range(len(doc))), layers)


def test_a_merge_reads_the_last_row_and_a_split_none(nlp):
    doc = nlp(TEXT)
    rows, layers = doc._.elmo.copy(), doc._.elmo_layers.copy()
    with doc.retokenize() as retokenizer:
        retokenizer.merge(doc[4:6])  # "The cat": spaCy keeps the last token's row
    merged = [0, 1, 2, 3, 5, *range(6, 20)]
    assert_reads(doc, rows, merged, layers)
    with doc.retokenize() as retokenizer:
        retokenizer.split(doc[5], ["s", "at"], heads=[(doc[5], 1), doc[4]])  # "sat": new pieces, no rows
    assert_reads(doc, rows, [*merged[:5], None, None, *merged[6:]], layers)
    assert_reads(nlp.get_pipe("elmo")(doc), doc._.elmo, list(range(len(doc))))  # fresh rows of its own tokens


def test_a_docbin_keeps_a_whole_doc_and_gives_pieces_and_joined_docs_their_own_rows_or_none(nlp, parent):
    doc, rows, layers = parent
    spans = list(doc.sents)
    joined_in_order = Doc.from_docs([span.as_doc(copy_user_data=True) for span in spans])
    docs = [
        doc,
        spans[1].as_doc(copy_user_data=True),
        spans[1].as_doc(),
        Doc.from_docs([spans[2].as_doc(copy_user_data=True), spans[0].as_doc(copy_user_data=True)]),
        joined_in_order,
    ]
    saved = DocBin(store_user_data=True, docs=docs).to_bytes()
    whole, piece, bare_piece, joined, rejoined = DocBin().from_bytes(saved).get_docs(nlp.vocab)
    assert_reads(whole, rows, list(range(len(doc))), layers)
    for part in (piece, bare_piece, joined):
        assert part._.elmo is None and part._.elmo_layers is None
        assert all(token._.elmo is None for token in part)
    assert rejoined.text == doc.text  # the pieces of one Doc, in order: the Doc's very tokens
    assert_reads(rejoined, rows, list(range(len(doc))), layers)


def test_a_whole_doc_of_two_annotations_read_back_has_no_rows(nlp):
    one, two = nlp("The cat sat ."), pipeline(nlp.vocab, store_layers=True)("The cat sat .")
    joined = Doc.from_docs([one[0:2].as_doc(copy_user_data=True), two[2:].as_doc(copy_user_data=True)])
    (back,) = DocBin(store_user_data=True, docs=[joined]).get_docs(nlp.vocab)
    assert back.text == one.text and back._.elmo is None


def test_rows_kept_in_user_data_alone_are_read_by_whole_docs_only():
    nlp = pipeline(set_tensor=False)
    doc = nlp(TEXT)
    rows = doc._.elmo.copy()
    assert doc.tensor.size == 0
    assert_reads(doc.copy(), rows, list(range(len(doc))))
    assert_reads(doc[:].as_doc(copy_user_data=True), rows, list(range(len(doc))))
    for part in (doc[4:8].as_doc(), doc[4:8].as_doc(copy_user_data=True), Doc.from_docs([doc[4:8].as_doc(copy_user_data=True), doc[0:4].as_doc(copy_user_data=True)])):
        assert part._.elmo is None and all(token._.elmo is None for token in part)
    with doc.retokenize() as retokenizer:
        retokenizer.merge(doc[4:6])
    assert doc._.elmo is None


def test_the_rows_go_after_the_columns_of_an_earlier_writer_and_replace_an_earlier_block(nlp):
    doc = nlp.make_doc("The cat sat .")
    doc.tensor = np.arange(8, dtype=np.float32).reshape(4, 2)
    nlp.get_pipe("elmo")(doc)
    np.testing.assert_array_equal(doc.tensor[:, :2], np.arange(8).reshape(4, 2))
    first = doc._.elmo.copy()
    nlp.get_pipe("elmo")(doc)  # again: its block is replaced, the earlier columns kept
    assert doc.tensor.shape == (4, 2 + 256 + 3 * 256 + 1)
    np.testing.assert_array_equal(doc.tensor[:, :2], np.arange(8).reshape(4, 2))
    np.testing.assert_allclose(doc._.elmo, first, rtol=1e-5, atol=1e-6)


def test_an_empty_doc_reads_an_empty_array(nlp):
    doc = nlp("")
    assert doc._.elmo.shape == (0, 256) and doc._.elmo_layers.shape == (3, 0, 256)
