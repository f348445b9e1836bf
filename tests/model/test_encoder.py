import numpy as np
import torch

from spacy_elmo.model.encoder import ElmoEncoder
from spacy_elmo.model.batch_encoder import BatchEncoder
from spacy_elmo.formats.weights import load_files
from tests.conftest import ALLENNLP


def _encoder(cache_size: int) -> ElmoEncoder:
    return ElmoEncoder(load_files(ALLENNLP / "options.json", ALLENNLP / "lm_weights.hdf5"), cache_size=cache_size)


def test_cached_token_vectors_equal_the_char_cnn(allennlp_files):
    words = (ALLENNLP / "vocab_test.txt").read_text(encoding="utf-8").split("\n")
    plain, cached = _encoder(0), _encoder(100)
    cached.fill_cache(words[:80])
    sentences = [words[i : i + 30] for i in range(0, 400, 30)] + [["unseen-word", "another"]]
    with torch.no_grad():
        want = BatchEncoder(plain)(sentences, 4096)
        got = BatchEncoder(cached)(sentences, 4096)
    assert len(cached.cache) == 100  # pre-filled 80, then filled while running, and bounded
    assert (want - got).abs().max().item() <= 1e-6


def test_auto_start_is_warm_for_published_models_and_zeros_for_our_own(tmp_path, allennlp_files):
    from spacy_elmo import ElmoEmbedder
    from spacy_elmo.model.encoder import TRAINING_START_KEY
    from spacy_elmo.model.options import ElmoOptions

    sentence = ["A", "short", "one"]
    auto = ElmoEmbedder(*allennlp_files).embed_sentence(sentence)
    warm = ElmoEmbedder(*allennlp_files, initial_state="warm").embed_sentence(sentence)
    zeros = ElmoEmbedder(*allennlp_files, initial_state="zeros").embed_sentence(sentence)
    np.testing.assert_array_equal(auto, warm)
    assert np.abs(auto - zeros).max() > 1e-3
    data = ElmoOptions.from_file(allennlp_files[0]).to_dict()
    data[TRAINING_START_KEY] = "zeros"  # what `pretrain` writes
    ElmoOptions.from_dict(data).to_file(tmp_path / "options.json")
    ours = ElmoEmbedder(tmp_path / "options.json", allennlp_files[1]).embed_sentence(sentence)
    np.testing.assert_array_equal(ours, zeros)


def test_a_token_past_the_byte_limit_warns_once_per_encoder():
    import warnings

    from spacy_elmo import TokenTruncationWarning

    encoder = _encoder(0)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with torch.no_grad():
            encoder([["中" * 16, "fits"]])
            assert not seen
            encoder([["中" * 17], ["x" * 60]])
            encoder([["y" * 70]])
    assert [w.category for w in seen] == [TokenTruncationWarning]
    message = str(seen[0].message)
    assert "51 bytes" in message and "first 48 bytes" in message and "16 Chinese" in message
