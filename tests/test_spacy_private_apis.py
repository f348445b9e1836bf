"""What the package takes from spaCy's private ``spacy.cli._util.parse_config_overrides`` (no public equivalent).

The other private use, ``spacy.language._apply_pipes`` (telling ``nlp.pipe`` workers apart, which install no
similarity hooks), is checked by what it does: tests/robustness/test_processes.py expects no W109 warning from them.
"""
from spacy.cli._util import parse_config_overrides


def test_dotted_overrides_parse_as_pretrain_reads_them():
    args = ["--training.max_steps", "3", "--corpus.path=text.txt", "--model.name", '"tiny"', "--training.resume"]
    assert parse_config_overrides(args, env_var=None) == {
        "training.max_steps": 3,  # values are JSON where they parse: an int, not "3"
        "corpus.path": "text.txt",  # --key=value works as --key value
        "model.name": "tiny",
        "training.resume": True,  # a key without a value is a flag
    }


def test_overrides_do_not_read_spacy_s_environment_variable(monkeypatch):
    monkeypatch.setenv("SPACY_CONFIG_OVERRIDES", "--training.max_steps 9")
    assert parse_config_overrides([], env_var=None) == {}
