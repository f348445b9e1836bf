import numpy as np
import pytest
import torch

from spacy_elmo.errors import ElmoSettingsError
from spacy_elmo.model.encoder import ElmoEncoder
from spacy_elmo.model.segment_encoder import SegmentEncoder
from spacy_elmo.formats.weights import load_files
from tests.conftest import ALLENNLP, ROUNDING


def _encoder(cache_size: int) -> ElmoEncoder:
    encoder = ElmoEncoder(load_files(ALLENNLP / "options.json", ALLENNLP / "lm_weights.hdf5"))
    encoder.set_cache_size(cache_size)
    return encoder


def test_cached_token_vectors_equal_the_char_cnn(allennlp_files):
    words = (ALLENNLP / "vocab_test.txt").read_text(encoding="utf-8").split("\n")
    plain, cached = _encoder(0), _encoder(100)
    cached.fill_cache(words[:80])
    sentences = [words[i : i + 30] for i in range(0, 400, 30)] + [["unseen-word", "another"]]
    with torch.no_grad():
        want, _ = SegmentEncoder(plain)(sentences)
        got, _ = SegmentEncoder(cached)(sentences)
    assert len(cached.cache) == 100  # pre-filled 80, then filled while running, and bounded
    torch.testing.assert_close(got, want, **ROUNDING)


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
    assert "51 bytes" in message and "first 48 bytes" in message and "\n" not in message


def test_a_batch_gives_each_sentence_its_own_layers_without_boundary_marks_and_zeros_past_its_end():
    encoder = _encoder(0)
    sentences = [["The", "cat", "sat", "."], ["A", "much", "longer", "sentence", "than", "that", "."], ["Hi"], []]
    with torch.no_grad():
        layers, mask, _ = encoder(sentences)
        alone = [encoder([s])[0][:, 0] for s in sentences]
        tokens = encoder.token_vectors(sentences[0])
    assert layers.shape == (3, 4, 7, 32)
    np.testing.assert_array_equal(mask.numpy(), np.arange(7)[None, :] < np.array([4, 7, 1, 0])[:, None])
    for b, sentence in enumerate(sentences):
        torch.testing.assert_close(layers[:, b, : len(sentence)], alone[b], **ROUNDING)
        assert (layers[:, b, len(sentence) :] == 0).all()
    torch.testing.assert_close(layers[0, 0, :4], torch.cat((tokens, tokens), dim=1), **ROUNDING)  # no <S>


def test_mixed_layers_are_the_weighted_sum_of_the_layers_in_every_batch(allennlp_files):
    from spacy_elmo.runtime import BiLmSettings, ElmoRuntime

    runtime = ElmoRuntime.load(BiLmSettings(*map(str, allennlp_files), max_batch_tokens=120))
    words = (ALLENNLP / "vocab_test.txt").read_text(encoding="utf-8").split("\n")
    segments = [words[i : i + n] for i, n in zip(range(0, 400, 40), [3, 12, 1, 30, 7, 0, 18, 5, 9, 25])]
    mix = (0.2, -0.5, 1.3)
    # several batches, longest first: each writes rows far apart in the one array of the call
    (full,) = runtime.layers(segments, joined=[len(segments)])
    (mixed,) = runtime.mixed(segments, mix, joined=[len(segments)])
    assert full.shape == (3, sum(map(len, segments)), 32)
    np.testing.assert_allclose(mixed, np.tensordot(mix, full, axes=1), rtol=0, atol=1e-5)


@pytest.mark.parametrize("cache_size", [-1, 2.5, True, "20000"])
def test_a_cache_size_that_is_not_a_whole_number_of_vectors_is_refused(cache_size, allennlp_files):
    from spacy_elmo import ElmoEmbedder

    with pytest.raises(ElmoSettingsError, match="cache_size must be"):
        ElmoEmbedder(*allennlp_files, cache_size=cache_size)


def test_a_run_calls_its_pause_before_every_lstm_step_and_a_pass_run_inside_changes_nothing():
    """Sentences of 3 and 5 words: 7 steps (the boundaries included) in each of the 2 layers. At the first pause
    another batch runs through the same encoder; both come out bit for bit as they do alone."""
    encoder = SegmentEncoder(_encoder(0))
    segments, other = [["a", "b", "c"], ["d", "e", "f", "g", "h"]], [["x", "y"]]
    inside = []

    def pause():
        inside.append(encoder(other)[0] if not inside else None)

    with torch.inference_mode():
        alone, other_alone = encoder(segments)[0], encoder(other)[0]
        paused, _ = encoder(segments, pause=pause)
    assert len(inside) == 2 * 7
    assert torch.equal(paused, alone) and torch.equal(inside[0], other_alone)
