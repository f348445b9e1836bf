"""The ``elmo`` component: values against ``ElmoEmbedder``, batching, sentences and windows, options, errors."""
import warnings

import numpy as np
import pytest
import spacy
from spacy.tokens import Doc
from spacy.training import Example

from spacy_elmo import ElmoEmbedder, TokenTruncationWarning
from spacy_elmo.errors import ElmoOptionsError

from tests.pipeline.conftest import OPTIONS, WEIGHTS, elmo_config, make_nlp
from tests.conftest import ROUNDING

TEXTS = [
    "The cat sat on the mat .",
    "Short .",
    "",
    "A considerably longer sentence , with commas , numbers like 1996 and names such as Leicestershire , goes here .",
    "Hello",
    "Two words",
]


@pytest.fixture(scope="module")
def embedder() -> ElmoEmbedder:
    return ElmoEmbedder(OPTIONS, WEIGHTS, initial_state="zeros")


def words(doc: Doc):
    return [t.text for t in doc]


def test_outside_check_config_gives_the_top_layer_of_the_embedder(embedder):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": {"@architectures": "spacy_elmo.ElmoBiLm.v2", "options_file": OPTIONS, "weight_file": WEIGHTS, "initial_state": "zeros"}})
    doc = nlp("The cat sat on the mat .")
    assert isinstance(doc._.elmo, np.ndarray) and doc._.elmo.dtype == np.float32 and doc._.elmo.shape == (7, 32)
    np.testing.assert_allclose(doc._.elmo, embedder.embed_sentence(words(doc))[-1], atol=1e-5)
    np.testing.assert_array_equal(doc[2]._.elmo, doc._.elmo[2])
    np.testing.assert_allclose(doc[1:4]._.elmo, doc._.elmo[1:4].mean(axis=0), rtol=1e-6)


def test_batches_of_mixed_lengths_give_each_doc_its_own_vectors(nlp, embedder):
    # A small padded-token cap forces several biLM batches that mix sentences of different docs.
    batched = make_nlp(max_batch_tokens=40)
    docs = list(batched.pipe(TEXTS * 2, batch_size=5))
    assert [d.text for d in docs] == TEXTS * 2
    for doc in docs:
        assert doc._.elmo.shape == (len(doc), 32)
        np.testing.assert_allclose(doc._.elmo, nlp(doc.text)._.elmo, **ROUNDING)  # padding changes float rounding only
        if len(doc):
            np.testing.assert_allclose(doc._.elmo, embedder.embed_sentence(words(doc))[-1], atol=1e-5)


def test_sentences_are_separate_biLM_inputs(embedder):
    nlp = make_nlp()
    nlp.add_pipe("sentencizer", before="elmo")
    doc = nlp("The cat sat . It was happy about that . End")
    sentences = [words(s) for s in doc.sents]
    assert len(sentences) == 3
    expected = np.concatenate([embedder.embed_sentence(s)[-1] for s in sentences])
    np.testing.assert_allclose(doc._.elmo, expected, atol=1e-5)


def test_docs_without_sentences_run_in_windows(embedder):
    doc = make_nlp(max_sentence_tokens=4)("one two three four five six seven eight nine ten")
    tokens = words(doc)
    expected = np.concatenate([embedder.embed_sentence(tokens[i : i + 4])[-1] for i in range(0, 10, 4)])
    np.testing.assert_allclose(doc._.elmo, expected, atol=1e-5)


def test_a_100k_token_doc_runs_window_by_window(embedder):
    nlp = make_nlp(max_sentence_tokens=100)
    vocabulary = "the of and a to in is was he for it with as his on be at by".split()
    tokens = [vocabulary[(i * 7) % len(vocabulary)] for i in range(100_000)]
    doc = nlp(Doc(nlp.vocab, words=tokens))
    assert doc._.elmo.shape == (100_000, 32)
    window = slice(54_300, 54_400)  # one of the windows, anywhere in the doc
    np.testing.assert_allclose(doc._.elmo[window], embedder.embed_sentence(tokens[window])[-1], atol=1e-5)


def test_store_layers_and_token_span_attributes(embedder):
    doc = make_nlp(store_layers=True)("Layers are stored here")
    layers = embedder.embed_sentence(words(doc))
    assert doc._.elmo_layers.dtype == np.float32
    np.testing.assert_allclose(doc._.elmo_layers, layers, atol=1e-5)
    np.testing.assert_allclose(doc[1:3]._.elmo, layers[-1][1:3].mean(axis=0), atol=1e-5)
    assert doc[0:0]._.elmo.shape == (32,) and not doc[0:0]._.elmo.any()


@pytest.mark.parametrize("mix", ["top", [0.5, 0.3, 0.2]])
def test_fixed_mixes(mix, embedder):
    doc = make_nlp(mix=mix)("Mixing the layers")
    layers = embedder.embed_sentence(words(doc))
    weights = [0.0, 0.0, 1.0] if mix == "top" else mix
    np.testing.assert_allclose(doc._.elmo, np.tensordot(weights, layers, axes=1), atol=1e-5)


def test_mix_with_the_wrong_number_of_weights_says_how_many_are_needed():
    with pytest.raises(ValueError, match="3 layers"):
        make_nlp(mix=[0.5, 0.5])("text")


def test_only_the_mark_of_the_run_is_stored_when_everything_is_off():
    doc = make_nlp(store_vectors=False)("Nothing stored")
    assert doc._.elmo is None and doc._.elmo_layers is None
    assert doc.tensor.size == 0 and not doc.user_hooks
    assert list(doc.user_data.values()) == [{}]  # a record with no rows: listeners know that 'elmo' ran on it


def test_tensor_and_similarity_hooks_use_elmo():
    nlp = make_nlp(set_tensor=True, vector_hooks=True)
    doc, other = nlp("The cat sat on the mat"), nlp("A dog lay on a rug")
    width = doc._.elmo.shape[1]
    np.testing.assert_array_equal(doc.tensor[:, :width], doc._.elmo)  # then elmo's mark column
    assert doc.tensor.shape == (len(doc), width + 1)
    np.testing.assert_allclose(doc.vector, doc._.elmo.mean(axis=0), rtol=1e-6)
    assert doc[1].has_vector and doc.has_vector

    def cosine(a, b):
        return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))

    assert doc[1].similarity(doc[2]) == pytest.approx(cosine(doc._.elmo[1], doc._.elmo[2]), rel=1e-5)
    assert doc[0:2].similarity(other[0:2]) == pytest.approx(
        cosine(doc._.elmo[0:2].mean(0), other._.elmo[0:2].mean(0)), rel=1e-5
    )
    assert doc.similarity(other) == pytest.approx(cosine(doc._.elmo.mean(0), other._.elmo.mean(0)), rel=1e-5)


def test_initialize_takes_the_weights_from_initialize_settings(embedder):
    nlp = spacy.blank("en")
    nlp.add_pipe(
        "elmo", config=elmo_config(options_file="missing/options.json", weight_file="missing/weights.hdf5")
    )
    with pytest.raises(ElmoOptionsError, match="missing/options.json"):
        nlp.initialize()
    nlp.config["initialize"]["components"]["elmo"] = {"options_file": OPTIONS, "weight_file": WEIGHTS}
    nlp.initialize()
    doc = nlp("Loaded at initialize")
    np.testing.assert_allclose(doc._.elmo, embedder.embed_sentence(words(doc))[-1], atol=1e-5)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"weight_file": None}, "both options_file and weight_file"),
        ({"initial_state": "random"}, "initial_state"),
        ({"mix": "bottom"}, r"mix\s+at root: 'bottom' is not"),
        ({"max_sentence_tokens": 0}, "max_sentence_tokens"),
    ],
)
def test_bad_settings_are_refused_with_a_hint(overrides, message):
    with pytest.raises(ValueError, match=message):
        make_nlp(**overrides)


def test_a_missing_weight_file_is_reported_on_first_use():
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config=elmo_config(options_file="no/such/options.json"))
    with pytest.raises(ElmoOptionsError, match="not found"):
        nlp("text")


def test_no_weight_files_means_the_embedded_model():
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    doc = nlp("The default model")
    expected = ElmoEmbedder().embed_sentence([t.text for t in doc])[-1]
    np.testing.assert_allclose(doc._.elmo, expected, atol=1e-5)


def test_a_training_token_longer_than_the_model_reads_is_said_at_initialize_and_not_while_training():
    """``spacy train`` prints its table after ``nlp.initialize``: the warning comes before it, once."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    url = "https://example.com/" + "a" * 46  # 66 bytes: the model reads 48
    examples = [Example.from_dict(nlp.make_doc(f"See {url} for more ."), {}), Example.from_dict(nlp.make_doc("No."), {})]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        nlp.initialize(lambda: examples)
        said = len(seen)
        nlp.update(examples)
        nlp(f"Again {url} .")
    assert [w.category for w in seen] == [TokenTruncationWarning] and said == 1
    assert "66 bytes" in str(seen[0].message) and "\n" not in str(seen[0].message)
