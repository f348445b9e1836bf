"""Elmo and its biLM module against the reference fixtures, AllenNLP's documented semantics and hand computations."""
from pathlib import Path

import numpy as np
import pytest
import torch

from spacy_elmo.allennlp import Elmo, ElmoBiLm, batch_to_ids
from spacy_elmo.errors import ElmoSettingsError, NotDownloadedError
from spacy_elmo.formats.manylangs import convert
from tests.allennlp.conftest import reference_batches
from tests.conftest import ALLENNLP, BILM_TF, ROUNDING

SENTENCES = [["The", "sentence", "."], ["ELMo", "helps", "disambiguate", "ELMo", "from", "Elmo", "."]]
# Only the top layer: its representation is the fixture's expected array.
TOP = [-1e10, -1e10, 0.0]


@pytest.mark.parametrize("folder, sentences_file", [(ALLENNLP, "sentences.json"), (BILM_TF, "lm_embeddings_sentences.json")])
def test_state_carried_from_batch_to_batch_reproduces_the_reference(folder, sentences_file):
    elmo = Elmo(folder / "options.json", folder / "lm_weights.hdf5", 1, dropout=0.0, scalar_mix_parameters=TOP)
    for sentences, expected in reference_batches(folder, sentences_file):
        out = elmo(batch_to_ids(sentences))
        assert out["mask"].sum(dim=1).tolist() == [len(s) for s in sentences]
        for row, want in enumerate(expected):
            got = out["elmo_representations"][0][row, : len(want)].detach().numpy()
            np.testing.assert_allclose(got, want, atol=1e-6, rtol=1e-5)


def test_without_carried_state_the_reference_differs_after_the_first_batch(allennlp_files):
    """The fixture's later batches need the carried state: a fresh state each batch misses them by far."""
    elmo = Elmo(*allennlp_files, 1, dropout=0.0, scalar_mix_parameters=TOP, stateful=False, initial_state="zeros")
    batches = reference_batches(ALLENNLP, "sentences.json")
    first = elmo(batch_to_ids(batches[0][0]))["elmo_representations"][0]
    np.testing.assert_allclose(first[0, : len(batches[0][1][0])].detach().numpy(), batches[0][1][0], atol=1e-6, rtol=1e-5)
    later = elmo(batch_to_ids(batches[1][0]))["elmo_representations"][0]
    assert np.abs(later[0, : len(batches[1][1][0])].detach().numpy() - batches[1][1][0]).max() > 0.1


def test_shapes_mask_and_output_dim(allennlp_files):
    elmo = Elmo(*allennlp_files, 2, dropout=0.0)
    out = elmo(batch_to_ids(SENTENCES))
    assert [tuple(r.shape) for r in out["elmo_representations"]] == [(2, 7, 32)] * 2
    assert out["mask"].dtype == torch.bool and out["mask"].sum(dim=1).tolist() == [3, 7]
    assert elmo.get_output_dim() == 32
    assert not out["elmo_representations"][0][0, 3:].any()  # zero past the sentence's end


def test_keep_sentence_boundaries_adds_the_markers_around_the_same_vectors(allennlp_files):
    kept = Elmo(*allennlp_files, 1, dropout=0.0, keep_sentence_boundaries=True)(batch_to_ids(SENTENCES))
    plain = Elmo(*allennlp_files, 1, dropout=0.0)(batch_to_ids(SENTENCES))
    assert kept["elmo_representations"][0].shape == (2, 9, 32)
    assert kept["mask"].sum(dim=1).tolist() == [5, 9]
    torch.testing.assert_close(kept["elmo_representations"][0][1, 1:8], plain["elmo_representations"][0][1])


def test_bos_and_eos_tokens_in_the_text_get_the_markers_vectors(allennlp_files):
    """AllenNLP's check: the text ``<S>`` is encoded as the added ``<S>``, so its layer-0 vector is the same."""
    bilm = ElmoBiLm(*allennlp_files)
    for token, marker in (("<S>", 0), ("</S>", 2)):
        layer0 = bilm(batch_to_ids([[token]]))["activations"][0][0]
        torch.testing.assert_close(layer0[1], layer0[marker])


def test_the_token_layer_matches_the_reference_token_embeddings(allennlp_files):
    """AllenNLP's token-embedding test: 458 words, as 10 sentences of 50, through the char CNN only."""
    import h5py

    words = (ALLENNLP / "vocab_test.txt").read_text(encoding="utf-8").split("\n")
    expected = h5py.File(ALLENNLP / "elmo_token_embeddings.hdf5", "r")["embedding"][()]
    ids = batch_to_ids([words[i : i + 50] for i in range(0, 500, 50)])
    layer0 = ElmoBiLm(*allennlp_files)(ids)["activations"][0]
    tokens = layer0[:, 1:51, :16].reshape(-1, 16)[: len(words)]
    np.testing.assert_allclose(tokens.detach().numpy(), expected, **ROUNDING)


def test_a_smaller_batch_leaves_the_state_of_later_rows(allennlp_files):
    """Row r continues from the last call that had a row r: after [A, B], [C], the row 1 of [D, E] continues B."""
    a, b, c, d, e = (s.split() for s in ("a b", "the cat sat", "x", "one two", "it ran away"))
    elmo = Elmo(*allennlp_files, 1, dropout=0.0)
    for batch in ([a, b], [c]):
        elmo(batch_to_ids(batch))
    got = elmo(batch_to_ids([d, e]))["elmo_representations"][0]
    row0 = Elmo(*allennlp_files, 1, dropout=0.0)
    for batch in ([a], [c]):
        row0(batch_to_ids(batch))
    row1 = Elmo(*allennlp_files, 1, dropout=0.0)
    row1(batch_to_ids([a, b]))
    torch.testing.assert_close(got[0, :2], row0(batch_to_ids([d]))["elmo_representations"][0][0], **ROUNDING)
    torch.testing.assert_close(got[1], row1(batch_to_ids([a, e]))["elmo_representations"][0][1], **ROUNDING)


def test_reset_states_starts_over(allennlp_files):
    elmo = Elmo(*allennlp_files, 1, dropout=0.0)
    ids = batch_to_ids(SENTENCES)
    first = elmo(ids)["elmo_representations"][0]
    second = elmo(ids)["elmo_representations"][0]
    elmo.reset_states()
    assert not torch.equal(first, second)
    assert torch.equal(elmo(ids)["elmo_representations"][0], first)


def test_four_dimensional_input_is_the_batches_run_in_turn(allennlp_files):
    elmo = Elmo(*allennlp_files, 1, dropout=0.0)
    ids = batch_to_ids(SENTENCES * 2)
    out = elmo(ids.view(2, 2, 7, 50))
    assert out["elmo_representations"][0].shape == (2, 2, 7, 32) and out["mask"].shape == (2, 2, 7)
    elmo.reset_states()
    flat = elmo(ids)["elmo_representations"][0]
    torch.testing.assert_close(out["elmo_representations"][0].reshape(4, 7, 32), flat)


def test_stateless_mode_gives_each_sentence_its_own_vectors(allennlp_files):
    elmo = Elmo(*allennlp_files, 1, dropout=0.0, stateful=False)
    alone = elmo(batch_to_ids(SENTENCES[1:]))["elmo_representations"][0][0]
    elmo(batch_to_ids(SENTENCES))
    again = elmo(batch_to_ids(SENTENCES[::-1]))["elmo_representations"][0][0]
    torch.testing.assert_close(again, alone, **ROUNDING)


def test_dropout_applies_in_training_mode_only(allennlp_files):
    elmo = Elmo(*allennlp_files, 1, dropout=0.5, stateful=False)
    ids = batch_to_ids(SENTENCES)
    elmo.eval()
    clean = elmo(ids)["elmo_representations"][0]
    elmo.train()
    dropped = elmo(ids)["elmo_representations"][0]
    kept = dropped != 0
    assert 0 < kept[0, :3].float().mean() < 1
    torch.testing.assert_close(dropped[kept], 2.0 * clean[kept])


def test_word_ids_from_the_cached_vocabulary_match_the_character_ids(allennlp_files):
    vocab = ["@@PADDING@@", "The", "sentence", ".", "ELMo", "helps", "disambiguate", "from", "Elmo"]
    word_ids = torch.tensor([[vocab.index(w) for w in s] + [0] * (7 - len(s)) for s in SENTENCES])
    ids = batch_to_ids(SENTENCES)
    by_chars = Elmo(*allennlp_files, 1, dropout=0.0, vocab_to_cache=vocab)(ids)
    by_words = Elmo(*allennlp_files, 1, dropout=0.0, vocab_to_cache=vocab)(ids, word_ids)
    torch.testing.assert_close(by_words["elmo_representations"][0], by_chars["elmo_representations"][0], **ROUNDING)
    assert torch.equal(by_words["mask"], by_chars["mask"])


def test_word_ids_outside_the_cache_run_the_character_cnn_as_allennlp_does(allennlp_files):
    ids = batch_to_ids(SENTENCES)
    word_ids = torch.tensor([[1, 2, 0, 0, 0, 0, 0], [1, 2, 3, 1, 2, 3, 9]])  # 9: no such cached word
    by_chars = Elmo(*allennlp_files, 1, dropout=0.0)(ids)
    fallback = Elmo(*allennlp_files, 1, dropout=0.0, vocab_to_cache=["@@PADDING@@", "a", "b", "c"])(ids, word_ids)
    torch.testing.assert_close(fallback["elmo_representations"][0], by_chars["elmo_representations"][0], rtol=0, atol=0)
    assert torch.equal(fallback["mask"], by_chars["mask"])


def test_allennlps_path_to_the_lstm_state_resets_it(allennlp_files):
    """AllenNLP-based models call ``elmo._elmo_lstm._elmo_lstm.reset_states()`` between documents."""
    ids = batch_to_ids(SENTENCES)
    elmo = Elmo(*allennlp_files, 1, dropout=0.0)
    first = elmo(ids)["elmo_representations"][0]
    assert not torch.equal(elmo(ids)["elmo_representations"][0], first)
    elmo._elmo_lstm._elmo_lstm.reset_states()
    torch.testing.assert_close(elmo(ids)["elmo_representations"][0], first, rtol=0, atol=0)


def test_configuration_error_catches_a_settings_mistake_as_in_allennlp(allennlp_files):
    from spacy_elmo.allennlp import ConfigurationError

    with pytest.raises(ConfigurationError):
        Elmo(*allennlp_files, 1, scalar_mix_parameters=[0.0])
    assert issubclass(ElmoSettingsError, ConfigurationError)


def test_the_settings_are_one_checked_biLM_settings_value(allennlp_files):
    from spacy_elmo.runtime import BiLmSettings

    bilm = Elmo(*allennlp_files, 1, stateful=False, initial_state="zeros")._elmo_lstm
    # threads None: torch's count left as it is, as in AllenNLP
    assert bilm.settings == BiLmSettings(*map(str, allennlp_files), stateful=False, initial_state="zeros", threads=None)
    with pytest.raises(ElmoSettingsError, match="precision 'int8' is for a frozen biLM"):
        ElmoBiLm(*allennlp_files, requires_grad=True).set_precision("int8")


def test_a_state_dict_round_trip_gives_the_same_vectors(allennlp_files, tmp_path):
    trained = Elmo(*allennlp_files, 2, dropout=0.0, vocab_to_cache=["@@PADDING@@", "a"], stateful=False)
    with torch.no_grad():
        trained.scalar_mix_0.scalar_parameters[2].fill_(1.5)
        trained.scalar_mix_1.gamma.fill_(0.25)
        trained._elmo_lstm.encoder.bilm.b_proj.add_(0.1)
    torch.save(trained.state_dict(), tmp_path / "elmo.pt")
    loaded = Elmo(*allennlp_files, 2, dropout=0.0, vocab_to_cache=["@@PADDING@@", "a"], stateful=False)
    loaded.load_state_dict(torch.load(tmp_path / "elmo.pt"))
    ids = batch_to_ids(SENTENCES)
    for got, want in zip(loaded(ids)["elmo_representations"], trained(ids)["elmo_representations"]):
        torch.testing.assert_close(got, want)


def test_moving_the_module_moves_the_carried_state(allennlp_files):
    elmo = Elmo(*allennlp_files, 1, dropout=0.0)
    ids = batch_to_ids(SENTENCES)
    elmo(ids)
    want = elmo(ids)["elmo_representations"][0]
    moved = Elmo(*allennlp_files, 1, dropout=0.0)
    moved(ids)
    moved = moved.to(torch.float64).to(torch.float32).to("cpu")
    torch.testing.assert_close(moved(ids)["elmo_representations"][0], want, **ROUNDING)


def test_precision_is_an_inference_setting(allennlp_files):
    with pytest.raises(ElmoSettingsError, match="fine-tuning"):
        Elmo(*allennlp_files, 1, requires_grad=True, precision="int8")
    fp32 = Elmo(*allennlp_files, 1, dropout=0.0, stateful=False)(batch_to_ids(SENTENCES))["elmo_representations"][0]
    int8 = Elmo(*allennlp_files, 1, dropout=0.0, stateful=False, precision="int8")(batch_to_ids(SENTENCES))
    got = int8["elmo_representations"][0]
    assert got.shape == fp32.shape and not torch.equal(got, fp32)
    assert (got - fp32).abs().max() < 0.1 * fp32.abs().max()


def test_a_downloaded_models_name_stands_for_its_files(allennlp_files, downloaded_original):
    ids = batch_to_ids(SENTENCES)
    by_name = Elmo("original", None, 1, dropout=0.0)(ids)["elmo_representations"][0]
    torch.testing.assert_close(by_name, Elmo(*allennlp_files, 1, dropout=0.0)(ids)["elmo_representations"][0], rtol=0, atol=0)


def test_without_files_elmo_runs_the_embedded_english_model():
    """``Elmo(None, None, n)``: the embedded English model. Its first call starts from zeros (the carried state is
    empty), so its top layer is what spacy_elmo's own embedder gives from a zero start, computed by the runtime."""
    from spacy_elmo import ElmoEmbedder

    elmo = Elmo(None, None, 1, dropout=0.0, scalar_mix_parameters=TOP)
    got = elmo(batch_to_ids([SENTENCES[1]]))["elmo_representations"][0][0].detach().numpy()
    want = ElmoEmbedder(initial_state="zeros").embed_sentence(SENTENCES[1])[-1]
    assert got.shape == (len(SENTENCES[1]), 256)
    np.testing.assert_allclose(got, want, **ROUNDING)


def test_a_model_name_that_is_not_downloaded_says_how_to_get_it(monkeypatch, tmp_path):
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path))
    with pytest.raises(NotDownloadedError, match="python -m spacy_elmo download original"):
        Elmo("original", None, 1)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda f: Elmo(*f, 1, module=torch.nn.Linear(1, 1)), "either module or options_file"),
        (lambda f: Elmo(None, f[1], 1), "Give both options_file and weight_file"),
        (lambda f: Elmo(*f, 1, vocab_to_cache=["@@PADDING@@", "a"])(batch_to_ids([["a"]]), torch.tensor([[1, 1]])), "word_inputs has shape"),
        (lambda f: Elmo(*f, 1, stateful=False, cache_size=8), r"unknown ELMo setting\(s\) \['cache_size'\]"),
        (lambda f: Elmo(None, None, 1, module=ElmoBiLm(*f), stateful=False), "give them to that module"),
        (lambda f: Elmo(*f, 1)(torch.zeros(2, 3, dtype=torch.long)), r"^inputs must be .*\(batch, timesteps, 50\)"),
        (lambda f: Elmo(*f, 1, scalar_mix_parameters=[0.0, 1.0]), "^scalar_mix_parameters gives 2 weights, but the biLM "
                                                                  "has 3 layers; give one weight per layer"),
    ],
    ids=["module-and-files", "weights-alone", "word-shape", "unknown-setting", "module-and-settings", "char-shape", "mix-length"],
)
def test_a_users_mistake_is_a_one_line_error(allennlp_files, call, message):
    with pytest.raises(ElmoSettingsError, match=message) as error:
        call(allennlp_files)
    assert "\n" not in str(error.value)


def test_with_requires_grad_the_cached_word_vectors_learn_too(allennlp_files):
    """As in AllenNLP: the cache of a fine-tuned biLM is a trainable table."""
    vocab = ["@@PADDING@@", "a", "b"]
    assert not Elmo(*allennlp_files, 1, vocab_to_cache=vocab)._elmo_lstm.word_vectors.requires_grad
    elmo = Elmo(*allennlp_files, 1, requires_grad=True, vocab_to_cache=vocab, dropout=0.0)
    elmo(batch_to_ids([["a", "b"]]), torch.tensor([[1, 2]]))["elmo_representations"][0].sum().backward()
    grad = elmo._elmo_lstm.word_vectors.grad
    assert grad[1:].abs().sum(dim=1).min() > 0 and not grad[0].any()


@pytest.mark.slow
def test_importing_the_package_imports_neither_spacy_nor_thinc():
    import subprocess
    import sys

    code = "import sys, spacy_elmo.allennlp; print(sorted({m.split('.')[0] for m in sys.modules} & {'spacy', 'thinc'}))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_an_empty_batch_gives_empty_outputs(allennlp_files):
    out = Elmo(*allennlp_files, 2)(batch_to_ids([]))
    assert [tuple(r.shape) for r in out["elmo_representations"]] == [(0, 0, 32)] * 2 and out["mask"].shape == (0, 0)


def test_a_model_with_its_own_character_table_is_refused_naming_its_options_file(tmp_path):
    """An ELMoForManyLangs conversion reads no byte ids from batch_to_ids: the error names the options_file given."""
    options, weights = tmp_path / "options.json", tmp_path / "weights.hdf5"
    convert(Path(__file__).resolve().parents[1] / "data" / "manylangs_tiny", options, weights)
    with pytest.raises(ElmoSettingsError, match=f"^options_file '{options}' is a model that reads its own character"):
        ElmoBiLm(options, weights)
