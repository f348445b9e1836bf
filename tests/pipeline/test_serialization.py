"""Round trips: pipeline to disk / bytes / pickle, Docs to bytes / DocBin, and multiprocess ``nlp.pipe``."""
import io
import pickle
import subprocess
import sys
import textwrap

import h5py
import numpy as np
import pytest
import spacy
import srsly
import torch
from spacy.tokens import Doc, DocBin

from spacy_elmo.pipeline.architectures import build_bilm_model_v2, is_loaded
from spacy_elmo.formats.weights import weights_to_bytes

from tests.conftest import ROUNDING
from tests.pipeline.conftest import make_nlp

TEXTS = ["The cat sat on the mat .", "Short .", "Another , rather longer sentence with more words in it"]
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A pipeline saved to disk, with the vectors it gave before saving."""
    nlp = make_nlp(store_layers=True)
    path = tmp_path_factory.mktemp("pipeline") / "nlp"
    nlp.to_disk(path)
    return path, [nlp(text)._.elmo for text in TEXTS]


def assert_same_vectors(nlp, expected):
    for text, vectors in zip(TEXTS, expected):
        np.testing.assert_array_equal(nlp(text)._.elmo, vectors)


def test_to_disk_then_spacy_load(saved):
    path, expected = saved
    assert_same_vectors(spacy.load(path), expected)


def saved_payload(model_bytes: bytes) -> dict:
    """The biLM's saved record (options, hdf5 weights, checksum) inside the bytes of an ``elmo`` model."""
    model = srsly.msgpack_loads(model_bytes)
    (shim_bytes,) = [shims[0] for shims in model["shims"] if shims]
    return srsly.msgpack_loads(shim_bytes)


def saved_dtypes(payload: dict) -> set:
    """The dtypes of the datasets in the saved hdf5 weights."""
    found = set()
    with h5py.File(io.BytesIO(payload["weights"]), "r") as f:
        f.visititems(lambda key, obj: found.add(str(obj.dtype)) if isinstance(obj, h5py.Dataset) else None)
    return found


def test_saved_weights_are_hdf5_and_json_not_pickle(saved):
    path, _ = saved
    payload = saved_payload((path / "elmo" / "model").read_bytes())
    assert set(payload) == {"options", "weights", "sha256"}
    assert srsly.json_loads(payload["options"])["lstm"]["projection_dim"] == 16
    assert payload["weights"].startswith(HDF5_SIGNATURE)


def test_spacy_load_in_a_fresh_process_needs_no_import(saved):
    path, expected = saved
    script = textwrap.dedent(
        f"""
        import sys, numpy as np, spacy, torch
        torch.set_num_threads(1)
        nlp = spacy.load({str(path)!r})
        assert "spacy_elmo" in sys.modules  # imported by spaCy through the entry points, not by us
        np.save(sys.stdout.buffer, nlp({TEXTS[0]!r})._.elmo)
        """
    )
    assert "import spacy_elmo" not in script
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, check=True, timeout=300)
    from io import BytesIO

    np.testing.assert_array_equal(np.load(BytesIO(result.stdout)), expected[0])


def test_float32_weights_are_saved_as_float32(saved):
    path, _ = saved  # the reference fixture's weights are float32
    assert saved_dtypes(saved_payload((path / "elmo" / "model").read_bytes())) == {"float32"}


@pytest.fixture(scope="module")
def embedded_nlp():
    """A pipeline with the embedded English model, whose weight file is float16."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    nlp.initialize()
    return nlp


def test_float16_weights_are_saved_as_float16_at_half_the_size(embedded_nlp, tmp_path):
    embedded_nlp.to_disk(tmp_path / "nlp")
    payload = saved_payload((tmp_path / "nlp" / "elmo" / "model").read_bytes())
    assert saved_dtypes(payload) == {"float16"}
    as_float32 = weights_to_bytes(embedded_nlp.get_pipe("elmo").runtime.encoder.bilm, "float32")
    assert 0.45 < len(payload["weights"]) / len(as_float32) < 0.55
    loaded = spacy.load(tmp_path / "nlp")
    for text in TEXTS:
        np.testing.assert_array_equal(loaded(text)._.elmo, embedded_nlp(text)._.elmo)


def test_changed_float16_weights_are_saved_as_float32_exactly():
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    nlp.initialize()
    bilm = nlp.get_pipe("elmo").runtime.encoder.bilm
    with torch.no_grad():  # as fine-tuning would: a weight that is no longer a float16 value
        bilm.b_proj[0] += 1e-4
    payload = saved_payload(nlp.get_pipe("elmo").model.to_bytes())
    assert saved_dtypes(payload) == {"float32"}
    loaded = spacy.blank("en")
    loaded.add_pipe("elmo")
    loaded.from_bytes(nlp.to_bytes())
    for text in TEXTS:
        np.testing.assert_array_equal(loaded(text)._.elmo, nlp(text)._.elmo)


def test_to_bytes_from_bytes():
    nlp = make_nlp(mix="top")
    expected = [nlp(text)._.elmo for text in TEXTS]
    loaded = spacy.blank("en")
    loaded.add_pipe("elmo", config={"mix": "top", "model": {"@architectures": "spacy_elmo.ElmoBiLm.v2", "initial_state": "zeros"}})
    loaded.from_bytes(nlp.to_bytes())
    assert_same_vectors(loaded, expected)


def test_component_from_bytes_decodes_its_bytes_once(monkeypatch):
    data = make_nlp().get_pipe("elmo").to_bytes()
    decoded = []
    real_loads = srsly.msgpack_loads

    def counting_loads(bytes_data, *args, **kwargs):
        decoded.append(bytes_data is data)
        return real_loads(bytes_data, *args, **kwargs)

    monkeypatch.setattr(srsly, "msgpack_loads", counting_loads)
    loaded = spacy.blank("en").add_pipe("elmo", config={"model": {"@architectures": "spacy_elmo.ElmoBiLm.v2", "initial_state": "zeros"}})
    loaded.from_bytes(data)
    assert decoded.count(True) == 1  # the weights inside are decoded by the model, not the whole again


def test_an_unloaded_biLM_model_round_trips_as_empty():
    model = build_bilm_model_v2()
    copy = build_bilm_model_v2().from_bytes(model.to_bytes())
    assert not is_loaded(copy)


def test_pickled_pipeline_gives_the_same_vectors():
    nlp = make_nlp()
    expected = [nlp(text)._.elmo for text in TEXTS]
    assert_same_vectors(pickle.loads(pickle.dumps(nlp)), expected)


@pytest.mark.slow
def test_two_processes_give_the_same_vectors_as_one():
    nlp = make_nlp()
    expected = [doc._.elmo for doc in nlp.pipe(TEXTS * 2, batch_size=2)]
    # How spaCy splits the texts between workers decides their batches: equal up to rounding.
    found = [doc._.elmo for doc in nlp.pipe(TEXTS * 2, n_process=2, batch_size=2)]
    for a, b in zip(found, expected):
        np.testing.assert_allclose(a, b, **ROUNDING)


def test_doc_to_bytes_and_docbin_keep_the_attributes():
    nlp = make_nlp(store_layers=True)
    docs = list(nlp.pipe(TEXTS))
    restored = Doc(nlp.vocab).from_bytes(docs[0].to_bytes())
    np.testing.assert_array_equal(restored._.elmo, docs[0]._.elmo)
    np.testing.assert_array_equal(restored._.elmo_layers, docs[0]._.elmo_layers)
    assert restored._.elmo.dtype == np.float32
    docbin = DocBin(store_user_data=True, docs=docs)
    for before, after in zip(docs, DocBin().from_bytes(docbin.to_bytes()).get_docs(nlp.vocab)):
        np.testing.assert_array_equal(after._.elmo, before._.elmo)
        np.testing.assert_array_equal(after._.elmo_layers, before._.elmo_layers)
        np.testing.assert_array_equal(after[1]._.elmo, before._.elmo[1])


def test_a_docbin_read_in_a_new_process_gives_its_vectors_through_with_vector_hooks(tmp_path):
    """docs/usage.md: a process that only reads a DocBin gets spaCy's E046 from ``doc._.elmo``, and after
    ``with_vector_hooks`` the rows the Doc had when it was saved."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    doc = nlp("She sat by the river bank.")
    DocBin(docs=[doc], store_user_data=True).to_disk(tmp_path / "docs.spacy")
    np.save(tmp_path / "rows.npy", doc._.elmo)
    reader = textwrap.dedent("""
        import sys
        import numpy, spacy
        from spacy.tokens import DocBin

        doc = next(DocBin().from_disk(sys.argv[1]).get_docs(spacy.blank("en").vocab))
        try:
            doc._.elmo
        except AttributeError as error:
            print(error)
        from spacy_elmo import with_vector_hooks
        [doc] = with_vector_hooks([doc])
        numpy.testing.assert_array_equal(doc._.elmo, numpy.load(sys.argv[2]))
    """)
    run = subprocess.run([sys.executable, "-c", reader, str(tmp_path / "docs.spacy"), str(tmp_path / "rows.npy")],
                         cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("[E046] Can't retrieve unregistered extension attribute 'elmo'")
