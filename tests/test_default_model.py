"""The English model shipped in the package (MODEL_CARD.md)."""
from pathlib import Path

import numpy as np
import torch

from spacy_elmo import ElmoEmbedder
from spacy_elmo import embedded_model_files
from spacy_elmo.model.encoder import TRAINING_START_KEY
from spacy_elmo.model.options import ElmoOptions, preset
from tests.conftest import ROUNDING


def test_embedded_model_is_the_tiny_architecture_trained_from_zeros_and_small():
    options_file, weight_file = embedded_model_files()
    options = ElmoOptions.from_file(options_file)
    assert options == preset("tiny")
    assert options.extra[TRAINING_START_KEY] == "zeros"
    assert weight_file.stat().st_size <= 25 * 2**20


def test_no_arguments_use_the_embedded_model_from_the_zero_state():
    sentence = ["The", "bank", "of", "the", "river", "."]
    default = ElmoEmbedder().embed_sentence(sentence)
    explicit = ElmoEmbedder(*embedded_model_files(), initial_state="zeros").embed_sentence(sentence)
    assert default.shape == (3, 6, 256) and default.dtype == np.float32 and np.isfinite(default).all()
    np.testing.assert_array_equal(default, explicit)


def test_chinese_model_is_picked_by_language_and_reads_one_character_tokens():
    options_file, weight_file = embedded_model_files("zh")
    options = ElmoOptions.from_file(options_file)
    assert options_file.parent.name == "zh_classics_tiny" and options.max_characters_per_token == 10
    assert weight_file.stat().st_size <= 25 * 2**20
    sentence = list("宝玉在园中读书。")
    by_lang = ElmoEmbedder(lang="zh").embed_sentence(sentence)
    explicit = ElmoEmbedder(options_file, weight_file, initial_state="zeros").embed_sentence(sentence)
    np.testing.assert_array_equal(by_lang, explicit)


def test_pipeline_language_picks_the_embedded_model():
    import spacy

    text = "宝玉在园中读书。"
    nlp = spacy.blank("zh")
    nlp.add_pipe("elmo")
    doc = nlp(text)
    words = [t.text for t in doc]
    assert words == list(text)
    want = ElmoEmbedder(lang="zh").embed_sentence(words)[-1]
    np.testing.assert_allclose(doc._.elmo, want, **ROUNDING)


def test_a_language_without_embedded_model_warns_and_uses_english():
    import pytest

    with pytest.warns(UserWarning, match="no ELMo model for language 'de'"):
        files = embedded_model_files("de")
    assert files == embedded_model_files("en")


def test_committed_pretraining_runs_hold_the_softmax_over_their_vocabulary_for_the_shipped_biLM():
    """`pretrain_runs/<name>` (adaptation) keeps the softmax over its vocab for the biLM the package ships.

    The weights themselves are compared with the run's checkpoint, restored from git history, in
    tests/pretrain/test_lean_run.py.
    """
    root = Path(__file__).resolve().parents[1] / "pretrain_runs"
    for lang, name in (("en", "en_gutenberg_tiny"), ("zh", "zh_classics_tiny")):
        options_file, _ = embedded_model_files(lang)
        assert ElmoOptions.from_file(root / name / "options.json") == ElmoOptions.from_file(options_file), name
        softmax = torch.load(root / name / "softmax.pt", weights_only=True)
        clusters = len([k for k in softmax if k.endswith(".1.weight")])
        classes = softmax["head.weight"].shape[0] - clusters + sum(softmax[f"tail.{i}.1.weight"].shape[0] for i in range(clusters))
        words = (root / name / "vocab.txt").read_text(encoding="utf-8").rstrip("\n").split("\n")
        assert classes == len(words), name
        assert softmax["head.weight"].shape[1] == ElmoOptions.from_file(options_file).projection_dim, name
