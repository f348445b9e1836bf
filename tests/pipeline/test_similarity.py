"""Similarity with the default ``elmo`` component: spaCy's ``.similarity`` is the cosine of the stored vectors,
in the process and after spaCy rebuilds Docs from bytes (``n_process``, ``DocBin``, ``Doc.from_bytes``)."""
import sys
import warnings
from typing import Iterable, List, Tuple

import numpy as np
import pytest
from spacy.tokens import Doc, DocBin

from spacy_elmo import with_vector_hooks

from tests.pipeline.conftest import make_nlp

RIVER, MONEY = "We sat on the bank of the river .", "He went to the bank to borrow money ."
BANK = 4  # the token "bank" in both sentences
SPACY_VECTOR_WARNINGS = ("[W007]", "[W008]", "[W109]")


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def expected(doc: Doc, other: Doc) -> Tuple[float, float, float]:
    """Token, span (first 4 tokens) and Doc cosines computed from the stored ``Doc._.elmo`` rows."""
    a, b = doc._.elmo, other._.elmo
    return cosine(a[BANK], b[BANK]), cosine(a[:4].mean(0), b[:4].mean(0)), cosine(a.mean(0), b.mean(0))


def similarities(doc: Doc, other: Doc) -> Tuple[Tuple[float, float, float], List[str]]:
    """spaCy's token, span and Doc similarity, and the messages of spaCy's vector warnings they raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = (doc[BANK].similarity(other[BANK]), doc[:4].similarity(other[:4]), doc.similarity(other))
    return found, [str(w.message) for w in caught if str(w.message).startswith(SPACY_VECTOR_WARNINGS)]


def assert_cosines_of_stored_vectors(docs: Iterable[Doc]) -> None:
    doc, other = docs
    found, spacy_warnings = similarities(doc, other)
    assert spacy_warnings == []
    assert found == pytest.approx(expected(doc, other), rel=1e-5)
    assert all(0.0 < value < 0.999 for value in found)  # not 0.0 (no vectors) nor 1.0 (spaCy's same-word rule)


def print_warning(message, category, filename, lineno, file=None, line=None) -> None:
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def test_the_default_component_gives_similarity_from_its_vectors():
    nlp = make_nlp()
    assert_cosines_of_stored_vectors(nlp.pipe([RIVER, MONEY]))


@pytest.mark.slow
def test_docs_from_two_worker_processes_get_similarity_back_and_workers_do_not_warn(capfd):
    nlp = make_nlp()
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = print_warning  # forked workers inherit this: their warnings reach the captured stderr
        docs = list(nlp.pipe([RIVER, MONEY], n_process=2, batch_size=1))
    assert "[W109]" not in capfd.readouterr().err
    assert_cosines_of_stored_vectors(with_vector_hooks(docs))


def test_docs_from_a_docbin_get_similarity_back():
    nlp = make_nlp()
    saved = DocBin(store_user_data=True, docs=nlp.pipe([RIVER, MONEY])).to_bytes()
    assert_cosines_of_stored_vectors(with_vector_hooks(DocBin().from_bytes(saved).get_docs(nlp.vocab)))


def test_docs_from_bytes_get_similarity_back():
    nlp = make_nlp()
    saved = [doc.to_bytes(exclude=["user_hooks"]) for doc in nlp.pipe([RIVER, MONEY])]
    assert_cosines_of_stored_vectors(with_vector_hooks(Doc(nlp.vocab).from_bytes(b) for b in saved))


def test_a_list_of_docs_gets_its_hooks_back_in_place_even_if_the_result_is_not_used():
    nlp = make_nlp()
    saved = DocBin(store_user_data=True, docs=nlp.pipe([RIVER, MONEY])).to_bytes()
    docs = list(DocBin().from_bytes(saved).get_docs(nlp.vocab))
    returned = with_vector_hooks(docs)
    assert returned is docs
    assert_cosines_of_stored_vectors(docs)


def test_a_stream_of_docs_is_wrapped_and_gets_its_hooks_as_it_is_read():
    nlp = make_nlp()
    saved = DocBin(store_user_data=True, docs=nlp.pipe([RIVER, MONEY, RIVER])).to_bytes()
    stream = with_vector_hooks(DocBin().from_bytes(saved).get_docs(nlp.vocab))
    first, second = next(stream), next(stream)
    assert_cosines_of_stored_vectors([first, second])
    assert "similarity" not in next(DocBin().from_bytes(saved).get_docs(nlp.vocab)).user_hooks  # spaCy drops them


def test_a_docbin_without_user_data_is_refused_with_the_setting_that_keeps_the_vectors():
    nlp = make_nlp()
    saved = DocBin(docs=nlp.pipe([RIVER])).to_bytes()
    with pytest.raises(ValueError, match=r"DocBin\(store_user_data=True\)"):
        list(with_vector_hooks(DocBin().from_bytes(saved).get_docs(nlp.vocab)))
