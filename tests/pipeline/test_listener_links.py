"""A listening component predicts with the layers of the ``elmo`` component that ran on the Doc, whatever spaCy did to
the links in between: disabled at load then enabled, pipes added or removed while it was disabled, ``select_pipes``,
sourcing, copies, ``spacy train`` with a sourced frozen tagger; zeros (and one warning) only where no ``elmo`` ran.

The expected tags are those the trained pipeline gives as it was trained (every component enabled and linked)."""
import copy
import pickle
import warnings
from pathlib import Path
from typing import List

import pytest
import spacy
import srsly
from spacy.cli.init_config import fill_config
from spacy.cli.train import train
from spacy.language import Language
from spacy.tokens import Doc, DocBin
from spacy.training import Example
from thinc.api import fix_random_seed

from spacy_elmo import ElmoListenerWarning

TRAIN_DATA = [
    ("I like green eggs", ["N", "V", "J", "N"]),
    ("Eat blue ham", ["V", "J", "N"]),
    ("They like ham", ["N", "V", "N"]),
]
PROBES = ["I like blue eggs", "Eat green ham", "They eat eggs", "I like ham"]
TAGGER = {"model": {"@architectures": "spacy.Tagger.v2", "tok2vec": {"@architectures": "spacy_elmo.ElmoListener.v1"}}}


def examples(nlp: Language) -> List[Example]:
    return [Example.from_dict(nlp.make_doc(text), {"tags": tags}) for text, tags in TRAIN_DATA]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """``elmo`` (the embedded English biLM, frozen, nothing stored on Docs) and a tagger listening to it, trained
    until it tags :data:`TRAIN_DATA` right, saved."""
    fix_random_seed(0)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"store_vectors": False})
    nlp.add_pipe("tagger", config=TAGGER)
    optimizer = nlp.initialize(lambda: examples(nlp))
    for _ in range(60):
        nlp.update(examples(nlp), sgd=optimizer)
    path = tmp_path_factory.mktemp("trained") / "pipeline"
    nlp.to_disk(path)
    return path


@pytest.fixture(scope="module")
def expected(trained) -> List[List[str]]:
    nlp = spacy.load(trained)
    tags = [[t.tag_ for t in doc] for doc in nlp.pipe(PROBES)]
    assert len({tag for doc_tags in tags for tag in doc_tags}) == 3  # trained: N, V and J all predicted
    return tags


def tags(nlp: Language, again: bool = False, **pipe_kwargs) -> List[List[str]]:
    """The tags of :data:`PROBES`. An ELMo listener reading zeros is an error here; one that runs the biLM again for
    Docs ``elmo`` ran on says so once, where ``again`` (its component had been left out when ``elmo`` ran, or reads
    other batches), and only there."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ElmoListenerWarning)
        found = [[t.tag_ for t in doc] for doc in nlp.pipe(PROBES, **pipe_kwargs)]
    said = [str(w.message) for w in caught if issubclass(w.category, ElmoListenerWarning)]
    assert [("ran the biLM again" in message) for message in said] == ([True] if again else [])
    return found


def test_loaded_with_the_tagger_disabled_then_enabled(trained, expected):
    nlp = spacy.load(trained, disable=["tagger"])
    nlp.enable_pipe("tagger")
    assert tags(nlp, again=True) == expected  # elmo did not know the tagger would read: its first batch runs again
    assert tags(nlp) == expected
    assert [[t.tag_ for t in nlp(text)] for text in PROBES] == expected  # one Doc per call too


def test_saved_with_the_tagger_disabled_loaded_then_enabled(trained, expected, tmp_path):
    nlp = spacy.load(trained)
    nlp.disable_pipe("tagger")
    nlp.to_disk(tmp_path)
    loaded = spacy.load(tmp_path)
    assert loaded.get_pipe("elmo").listening_components == []  # spaCy linked the enabled components only
    loaded.enable_pipe("tagger")
    assert tags(loaded, again=True) == expected


@pytest.mark.parametrize("change", ["add", "remove"])
def test_a_pipe_added_or_removed_while_the_tagger_is_disabled(trained, expected, change):
    nlp = spacy.load(trained)
    if change == "remove":
        nlp.add_pipe("sentencizer", first=True)
    with nlp.select_pipes(disable=["tagger"]):
        nlp.add_pipe("sentencizer", first=True) if change == "add" else nlp.remove_pipe("sentencizer")
    assert tags(nlp, again=True) == expected


@pytest.mark.parametrize("selection", [{"disable": ["tagger"]}, {"enable": ["elmo"]}])
def test_select_pipes_then_back(trained, expected, selection):
    nlp = spacy.load(trained)
    with nlp.select_pipes(**selection):
        assert nlp.pipe_names == ["elmo"]
        list(nlp.pipe(PROBES))  # the Docs are gone: their unread layers say nothing about the tagger
    assert tags(nlp) == expected


def test_sourced_into_a_new_pipeline(trained, expected):
    base = spacy.load(trained)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", source=base)
    nlp.add_pipe("tagger", source=base)
    assert tags(nlp) == expected


@pytest.mark.parametrize("duplicate", [copy.deepcopy, lambda nlp: pickle.loads(pickle.dumps(nlp))])
def test_a_copy_predicts_as_the_original(trained, expected, duplicate):
    nlp = duplicate(spacy.load(trained))
    assert tags(nlp) == expected


def test_a_tagger_enabled_late_with_larger_batches_than_elmo_still_reads_the_right_layers(trained, expected):
    """The tagger asks for more Docs than the layers kept (those of elmo's latest batch): the Docs it missed go
    through the biLM again, and it says so."""
    nlp = spacy.load(trained, disable=["tagger"])
    nlp.enable_pipe("tagger")
    assert tags(nlp, again=True, batch_size=1, component_cfg={"tagger": {"batch_size": 4}}) == expected


@Language.component("merge_first_two_tokens")
def merge_first_two_tokens(doc):
    with doc.retokenize() as retokenizer:
        retokenizer.merge(doc[0:2])
    return doc


def test_a_doc_whose_tokens_changed_after_elmo_is_read_with_its_new_tokens(trained):
    """A component between ``elmo`` and the tagger merges tokens: the layers ``elmo`` left no longer fit, and the
    tagger gets the layers of the merged Doc, as if ``elmo`` had run on it."""
    merging = spacy.load(trained)
    merging.add_pipe("merge_first_two_tokens", after="elmo")
    merged_words = spacy.load(trained)
    texts = [text.split(" ", 1) for text in PROBES]
    expected = [
        [t.tag_ for t in merged_words(Doc(merged_words.vocab, words=[first + " " + rest.split()[0], *rest.split()[1:]]))]
        for first, rest in texts
    ]
    assert tags(merging, again=True) == expected


def _disabled_by_select_pipes(nlp):
    with nlp.select_pipes(disable=["tagger"]):
        return list(nlp.pipe(PROBES * 5, batch_size=2))


def _disabled_in_pipe(nlp):
    return list(nlp.pipe(PROBES * 5, batch_size=2, disable=["tagger"]))


def _disable_pipe(nlp):
    nlp.disable_pipe("tagger")
    return list(nlp.pipe(PROBES * 5, batch_size=2))


def _remove_pipe(nlp):
    nlp.remove_pipe("tagger")
    return list(nlp.pipe(PROBES * 5, batch_size=2))


@pytest.mark.parametrize("skip", [_disabled_by_select_pipes, _disabled_in_pipe, _disable_pipe, _remove_pipe])
def test_nothing_is_held_for_kept_docs_once_the_listener_does_not_run(trained, skip):
    nlp = spacy.load(trained)
    docs = skip(nlp)  # kept alive: a handoff keyed by Doc could hold layers for all 20
    handoff = nlp.get_pipe("elmo").handoff
    assert len(docs) == 20 and len(handoff) == 0 and handoff.nbytes == 0
    assert not handoff.begin_batch()  # nothing listens: the next batch takes the vectors-only path


def test_a_listener_back_from_a_pause_reads_the_right_layers(trained, expected):
    nlp = spacy.load(trained)
    _disabled_by_select_pipes(nlp)
    assert tags(nlp, again=True) == expected
    assert tags(nlp) == expected  # elmo keeps the layers for it again


def test_zeros_and_one_warning_only_where_elmo_did_not_run(trained, expected):
    nlp = spacy.load(trained)
    tags(nlp)
    with nlp.select_pipes(disable=["elmo"]):
        with pytest.warns(ElmoListenerWarning, match="no 'elmo' component ran"):
            nlp(PROBES[0])
        with warnings.catch_warnings():
            warnings.simplefilter("error", ElmoListenerWarning)
            nlp(PROBES[1])  # said once
    assert tags(nlp) == expected


def test_zeros_and_one_warning_when_elmo_is_disabled_at_load(trained):
    nlp = spacy.load(trained, disable=["elmo"])
    with pytest.warns(ElmoListenerWarning, match="no 'elmo' component ran"):
        nlp(PROBES[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error", ElmoListenerWarning)
        nlp(PROBES[1])  # said once


def test_no_warning_for_a_listener_initialized_after_the_pipeline_ran(trained, expected):
    nlp = spacy.load(trained)
    nlp(PROBES[0])
    tagger2 = nlp.add_pipe("tagger", name="tagger2", config=TAGGER)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ElmoListenerWarning)
        tagger2.initialize(lambda: examples(nlp), nlp=nlp)  # thinc's shape inference runs it on Docs elmo did not see
        nlp(PROBES[0])
    assert tags(nlp) == expected


# --- spacy train with the trained tagger sourced and frozen ---

SOURCED_CONFIG = """
[paths]
train = null
dev = null

[nlp]
lang = "en"
pipeline = ["elmo", "tagger", "ner"]
batch_size = 4

[components]

[components.elmo]
{elmo}

[components.tagger]
source = "{base}"

[components.ner]
factory = "ner"

[components.ner.model]
@architectures = "spacy.TransitionBasedParser.v2"
state_type = "ner"
hidden_width = 16

[components.ner.model.tok2vec]
@architectures = "spacy_elmo.ElmoListener.v1"

[corpora]

[corpora.train]
@readers = "spacy.Corpus.v1"
path = ${{paths.train}}

[corpora.dev]
@readers = "spacy.Corpus.v1"
path = ${{paths.dev}}

[training]
frozen_components = ["elmo", "tagger"]
annotating_components = ["elmo"]
max_steps = 4
eval_frequency = 2

[training.score_weights]
tag_acc = 0.5
ents_f = 0.5
"""
SOURCED_ELMO = 'source = "{base}"'
NEW_ELMO = 'factory = "elmo"\nstore_vectors = false'


@pytest.mark.slow
@pytest.mark.parametrize("elmo", [SOURCED_ELMO, NEW_ELMO], ids=["sourced-elmo", "new-elmo"])
def test_spacy_train_scores_a_sourced_frozen_tagger_as_its_own(trained, expected, elmo, tmp_path, capsys):
    nlp = spacy.blank("en")
    docbin = DocBin()
    for text, doc_tags in TRAIN_DATA:
        doc = nlp.make_doc(text)
        for token, tag in zip(doc, doc_tags):
            token.tag_ = tag
        doc.ents = [doc.char_span(0, len(doc[0].text), label="X")]
        docbin.add(doc)
    corpus = tmp_path / "corpus.spacy"
    docbin.to_disk(corpus)
    own = spacy.load(trained).evaluate(examples(spacy.load(trained)))["tag_acc"]
    config = tmp_path / "config.cfg"
    config.write_text(SOURCED_CONFIG.format(elmo=elmo.format(base=trained), base=trained), encoding="utf-8")
    fill_config(config, config, silent=True)
    overrides = {"paths.train": str(corpus), "paths.dev": str(corpus)}
    train(config, tmp_path / "out", overrides=overrides)
    assert logged_tag_accuracies(capsys.readouterr().out) == [round(100 * own, 2)] * 3  # evaluations at 0, 2, 4
    for saved in ("model-last", "model-best"):
        assert srsly.read_json(tmp_path / "out" / saved / "meta.json")["performance"]["tag_acc"] == own
    assert tags(spacy.load(tmp_path / "out" / "model-last")) == expected


def logged_tag_accuracies(output: str) -> List[float]:
    """The TAG_ACC column of the table ``spacy train`` prints (its header names a loss in two words, "LOSS NER",
    above one value)."""
    lines = output.splitlines()
    header = next(line.split() for line in lines if "TAG_ACC" in line)
    column = header.index("TAG_ACC") - header[: header.index("TAG_ACC")].count("LOSS")
    rows = [line.split() for line in lines if line.split() and line.split()[0].isdigit()]
    return [float(row[column]) for row in rows]
