"""The example training configs: ``spacy debug config`` accepts them and ``spacy train`` runs a few steps."""
from pathlib import Path

import pytest
from spacy.cli.debug_config import debug_config
from spacy.cli.train import train
from spacy.tokens import Doc, DocBin
from spacy.util import load_model

from tests.pipeline.conftest import OPTIONS, WEIGHTS, conll_train, read_conll

CONFIGS = Path(__file__).resolve().parents[2] / "spacy_elmo" / "pipeline" / "configs"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Twelve CoNLL sentences with entities, POS tags and a made-up category, as a .spacy file."""
    import spacy

    vocab = spacy.blank("en").vocab
    docbin = DocBin()
    for sentence in read_conll(conll_train(), 12):
        words, ents = [w for w, _ in sentence], [t for _, t in sentence]
        doc = Doc(vocab, words=words, ents=ents, tags=[t.split("-")[-1] for t in ents])
        has_entity = any(t != "O" for t in ents)
        doc.cats = {"ENTITY": float(has_entity), "NONE": float(not has_entity)}
        docbin.add(doc)
    path = tmp_path_factory.mktemp("corpus") / "train.spacy"
    docbin.to_disk(path)
    return path


def overrides(corpus: Path) -> dict:
    return {
        "paths.train": str(corpus),
        "paths.dev": str(corpus),
        "paths.elmo_options": OPTIONS,
        "paths.elmo_weights": WEIGHTS,
        "training.max_steps": 3,
        "training.eval_frequency": 3,
    }


@pytest.mark.parametrize("name", ["ner", "tagger", "textcat"])
def test_example_config_validates_and_trains(name, corpus, tmp_path):
    config = CONFIGS / f"{name}.cfg"
    debug_config(config, overrides=overrides(corpus))
    train(config, tmp_path, overrides=overrides(corpus))
    nlp = load_model(tmp_path / "model-last")
    assert "elmo" in nlp.pipe_names and nlp.get_pipe("elmo").listening_components == [nlp.pipe_names[-1]]
    nlp("A sentence after training .")
