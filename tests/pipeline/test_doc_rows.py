"""``Doc._.elmo``, ``Token._.elmo``, ``Span._.elmo``, ``Doc._.elmo_layers`` and the vector hooks follow the Doc through
retokenizing, ``Span.as_doc``, ``Doc.from_docs``, ``Doc.copy`` and DocBin: each token reads the rows of the tokens it
came from (a merged token their mean, each piece of a split token its token's row), never another token's.

The expected rows are those of the Doc as the biLM saw it, taken before the Doc was changed."""
import numpy as np
import pytest
from spacy.pipeline import merge_entities, merge_noun_chunks
from spacy.tokens import Doc, DocBin, Span

from spacy_elmo import install_vector_hooks

from tests.pipeline.conftest import make_nlp
from tests.conftest import ROUNDING

TEXT = "I like green eggs and ham in New York ."


@pytest.fixture(scope="module")
def nlp():
    return make_nlp(store_layers=True, set_tensor=True)


@pytest.fixture
def doc(nlp):
    return nlp(TEXT)


def cosine(a, b):
    return float(a.dot(b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_a_merged_token_reads_the_mean_of_its_rows_and_the_others_their_own(doc):
    vectors, layers = doc._.elmo.copy(), doc._.elmo_layers.copy()
    with doc.retokenize() as retokenizer:
        retokenizer.merge(doc[2:4])  # "green eggs"
    assert doc._.elmo.shape == (9, vectors.shape[1])
    np.testing.assert_array_equal(doc[2]._.elmo, vectors[2:4].mean(axis=0))
    np.testing.assert_array_equal(doc[3]._.elmo, vectors[4])  # "and": its own row, not "eggs"'
    np.testing.assert_array_equal(doc._.elmo[4:], vectors[5:])
    np.testing.assert_allclose(doc._.elmo_layers[:, 2], layers[:, 2:4].mean(axis=1), **ROUNDING)  # another axis order
    assert doc[3].similarity(doc[4]) == pytest.approx(cosine(vectors[4], vectors[5]))
    np.testing.assert_array_equal(doc.tensor[2], vectors[3])  # doc.tensor: spaCy's rule, the last row


def test_each_piece_of_a_split_token_reads_the_row_of_the_token_it_came_from(nlp):
    doc = nlp("I visited NewYork yesterday .")
    vectors = doc._.elmo.copy()
    with doc.retokenize() as retokenizer:
        retokenizer.split(doc[2], ["New", "York"], heads=[(doc[2], 1), doc[1]])
    assert doc._.elmo.shape[0] == len(doc) == 6
    for i, row in enumerate([0, 1, 2, 2, 3, 4]):
        np.testing.assert_array_equal(doc[i]._.elmo, vectors[row])
        np.testing.assert_array_equal(doc[i].vector, vectors[row])
    assert all(token.has_vector for token in doc)


def test_merging_back_a_split_token_reads_its_first_rows_again(nlp):
    doc = nlp("I visited NewYork yesterday .")
    vectors = doc._.elmo.copy()
    with doc.retokenize() as retokenizer:
        retokenizer.split(doc[2], ["New", "York"], heads=[(doc[2], 1), doc[1]])
    with doc.retokenize() as retokenizer:
        retokenizer.merge(doc[2:4])
    np.testing.assert_array_equal(doc._.elmo, vectors)


def test_merge_entities_and_noun_chunks_keep_rows_with_their_tokens(nlp):
    doc = nlp(TEXT)
    vectors = doc._.elmo.copy()
    doc.ents = [Span(doc, 7, 9, label="GPE")]
    merged = merge_entities(doc)
    np.testing.assert_array_equal(merged[7]._.elmo, vectors[7:9].mean(axis=0))
    np.testing.assert_array_equal(merged[8]._.elmo, vectors[9])
    doc = nlp("The big dog barked .")
    vectors = doc._.elmo.copy()
    for token, head, dep in zip(doc, [2, 2, 3, 3, 3], ["det", "amod", "nsubj", "ROOT", "punct"]):
        token.head, token.dep_, token.pos_ = doc[head], dep, "NOUN" if dep == "nsubj" else "DET"
    merged = merge_noun_chunks(doc)
    assert len(merged) == 3
    np.testing.assert_array_equal(merged[0]._.elmo, vectors[0:3].mean(axis=0))
    np.testing.assert_array_equal(merged[1]._.elmo, vectors[3])


def test_a_span_as_a_doc_keeps_its_rows_with_copy_user_data(doc):
    vectors = doc._.elmo
    new = doc[7:10].as_doc(copy_user_data=True)
    np.testing.assert_array_equal(new._.elmo, vectors[7:10])
    np.testing.assert_array_equal(new[0].vector, vectors[7])
    np.testing.assert_array_equal(new._.elmo_layers, doc._.elmo_layers[:, 7:10])


def test_a_span_as_a_doc_without_user_data_has_zero_vectors_never_none(doc):
    new = doc[7:10].as_doc()
    assert new._.elmo is None and new[0]._.elmo is None
    for obj in (new, new[0:2], new[0]):
        assert obj.vector.shape == (doc._.elmo.shape[1],) and not obj.vector.any() and not obj.has_vector


def test_docs_joined_keep_each_doc_s_rows(nlp):
    first, second = nlp("New York is big ."), nlp("So is Paris .")
    joined = Doc.from_docs([first, second])
    np.testing.assert_array_equal(joined._.elmo, np.concatenate([first._.elmo, second._.elmo]))
    sentences = nlp("One sentence . And another one .")
    cut = [Span(sentences, 0, 3).as_doc(copy_user_data=True), Span(sentences, 3, 7).as_doc(copy_user_data=True)]
    np.testing.assert_array_equal(Doc.from_docs(cut)._.elmo, sentences._.elmo)


def test_a_doc_joined_with_one_elmo_did_not_see_has_rows_only_for_its_own_tokens():
    nlp = make_nlp()  # no doc.tensor: spaCy's from_docs cannot join a Doc with a tensor and one without
    annotated, plain = nlp("New York ."), nlp.make_doc("Paris")
    joined = Doc.from_docs([annotated, plain])
    np.testing.assert_array_equal(joined._.elmo[:3], annotated._.elmo)
    assert joined[3]._.elmo is None and not joined._.elmo[3].any()
    install_vector_hooks(joined)  # spaCy's from_docs copies no hooks
    assert joined[0].has_vector and not joined[3].has_vector and not joined[3].vector.any()


def test_copies_and_docbin_keep_the_rows_and_their_alignment(nlp, doc):
    vectors = doc._.elmo.copy()
    with doc.retokenize() as retokenizer:
        retokenizer.merge(doc[7:9])
    copy = doc.copy()
    restored = next(DocBin(docs=[doc], store_user_data=True).get_docs(nlp.vocab))
    for other in (copy, restored):
        np.testing.assert_array_equal(other[7]._.elmo, vectors[7:9].mean(axis=0))
        np.testing.assert_array_equal(other._.elmo, doc._.elmo)


def test_pieces_of_different_docs_joined_read_their_own_rows_where_the_texts_differ(nlp):
    first, second = nlp("Cats purr loudly . Dogs bark at cars"), nlp("Birds sing . Fish swim in lakes")
    pieces = [first[0:4].as_doc(copy_user_data=True), second[3:7].as_doc(copy_user_data=True)]  # each copies it all
    joined = Doc.from_docs(pieces)  # first's rows of "Dogs bark at cars" fall on "Fish swim in lakes"
    assert joined.text.strip() == "Cats purr loudly . Fish swim in lakes"
    np.testing.assert_array_equal(joined._.elmo, np.concatenate([first._.elmo[0:4], second._.elmo[3:7]]))


def test_a_doc_saved_by_version_0_2_reads_its_saved_rows(nlp):
    doc = nlp.make_doc("New York .")
    rows = np.arange(3 * 4, dtype=np.float32).reshape(3, 4)
    doc.user_data[("._.", "elmo", None, None)] = rows  # how 0.2 kept Doc._.elmo, saved by DocBin(store_user_data=True)
    restored = next(DocBin(docs=[doc], store_user_data=True).get_docs(nlp.vocab))
    np.testing.assert_array_equal(restored._.elmo, rows)
    np.testing.assert_array_equal(restored[1]._.elmo, rows[1])


def test_a_piece_joined_with_a_doc_elmo_did_not_see_lends_it_no_rows_even_where_the_characters_line_up():
    nlp = make_nlp()
    first = nlp("Cats purr . Dogs bark .")
    joined = Doc.from_docs([first[0:3].as_doc(copy_user_data=True), nlp.make_doc("Fish swim .")])
    assert len(joined.text) == len(first.text)  # the piece's record, copied whole, spans the joined Doc exactly
    # ("." at the end has the recorded "."'s text at its place: the limit docs/usage.md states)
    assert [t._.elmo is None for t in joined[:5]] == [False, False, False, True, True]
    np.testing.assert_array_equal(joined[1]._.elmo, first._.elmo[1])
    assert not joined._.elmo[3:5].any()


def test_a_token_reads_the_row_the_doc_gives_it(nlp):
    first, second = nlp("Cats purr . Dogs bark ."), nlp("Birds sing . Fish swim .")
    joined = Doc.from_docs([first[0:3].as_doc(copy_user_data=True), second[3:6].as_doc(copy_user_data=True)])
    for token, row in zip(joined, joined._.elmo):
        np.testing.assert_array_equal(token._.elmo, row)
    np.testing.assert_array_equal(joined[3]._.elmo, second._.elmo[3])  # "Fish", not "Dogs" at the same characters
