"""The spaCy project (project.yml): configs, converters, comparison, and `spacy project run all` on the sample.

The end-to-end test copies the project to a temporary folder (nothing is written to the repository) and runs
the `all` workflow with training capped at 2 steps by the project's vars, as the README's smoke test does. It
uses the English model embedded in the package when it is there, otherwise the tiny AllenNLP fixture biLM, and
says which in its output.
"""
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Tuple

import pytest
from spacy.lang.en import English
from spacy.tokens import DocBin
from thinc.api import Config

from spacy_elmo.sources.resolve import DEFAULT_MODEL_DIR

from tests.conftest import ALLENNLP, shared_data

ROOT = Path(__file__).resolve().parents[1]
TASKS = ("ner", "tagger", "textcat")
PROJECT_FILES = ("project.yml", "scripts", "configs", "assets")


def _load_script(name: str):
    spec = importlib.util.spec_from_file_location(f"project_scripts_{name}", ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


corpus = _load_script("corpus")
compare = _load_script("compare")
make_configs = _load_script("make_configs")


# ------------------------------------------------------------------------------------------------ configs
def test_configs_are_generated_from_the_package_configs():
    stale = [str(p.relative_to(ROOT)) for p, text in make_configs.outputs().items()
             if not p.exists() or p.read_text(encoding="utf-8") != text]
    assert not stale, f"configs out of date: {stale}; run python scripts/make_configs.py"


def _without_embedding(cfg: Config) -> dict:
    cfg = Config(cfg).copy()
    cfg["nlp"]["pipeline"] = [n for n in cfg["nlp"]["pipeline"] if n not in ("elmo", "tok2vec")]
    for name in ("elmo", "tok2vec"):
        cfg["components"].pop(name, None)
    for component in cfg["components"].values():
        if "tok2vec" in component.get("model", {}):
            component["model"]["tok2vec"] = "<embedding>"
    for key in ("elmo_options", "elmo_weights"):
        cfg["paths"].pop(key, None)
    return dict(cfg)


@pytest.mark.parametrize("task", [*TASKS, "ner_zh"])
def test_baseline_is_the_elmo_config_without_elmo(task):
    elmo = Config().from_disk(ROOT / "configs" / f"{task}.cfg", interpolate=False)
    base = Config().from_disk(ROOT / "configs" / f"{task}_baseline.cfg", interpolate=False)
    assert "elmo" in elmo["nlp"]["pipeline"]
    assert [n for n in elmo["nlp"]["pipeline"] if n != "elmo"] == base["nlp"]["pipeline"]
    # Same CNN; each ELMo listener adds the biLM mix to exactly what the baseline's component listens to.
    assert elmo["components"]["tok2vec"] == base["components"]["tok2vec"]
    tasks = {name: c for name, c in elmo["components"].items() if "tok2vec" in c.get("model", {})}
    assert tasks and {c["model"]["tok2vec"]["@architectures"] for c in tasks.values()} == {"spacy_elmo.ElmoListener.v1"}
    for name, component in tasks.items():
        assert component["model"]["tok2vec"]["embed"] == base["components"][name]["model"]["tok2vec"]
    assert _without_embedding(elmo) == _without_embedding(base)
    # Both are complete, valid spaCy configs.
    from spacy.util import load_config_from_str

    for cfg in (elmo, base):
        load_config_from_str(cfg.to_str(), interpolate=True)


# ------------------------------------------------------------------------------------------------ converters
def test_select_is_seeded_ordered_and_proportional():
    assert corpus.select(10, 100) == list(range(10))
    chosen = corpus.select(1000, 10, seed=3)
    assert len(chosen) == 100 and chosen == sorted(chosen) and chosen == corpus.select(1000, 10, seed=3)
    assert corpus.select(1000, 10, seed=4) != chosen
    assert corpus.select(3, 1) == corpus.select(3, 1) and len(corpus.select(3, 1)) == 1
    with pytest.raises(ValueError):
        corpus.select(10, 0)


def test_spaces_from_text():
    assert corpus.spaces_from_text(["Hi", "there", "!"], "Hi there!") == [True, False, False]
    assert corpus.spaces_from_text(["a", "b"], None) == [True, False]
    assert corpus.spaces_from_text(["a", "x"], "a b") == [True, False]  # mismatch: plain spacing


def test_chinese_configs_tokenize_one_character_per_token():
    from spacy.util import load_config, load_model_from_config

    for name in ("ner_zh", "ner_zh_baseline"):
        cfg = load_config(ROOT / "configs" / f"{name}.cfg")
        nlp = load_model_from_config(cfg, auto_fill=True, validate=True)
        assert nlp.lang == "zh" and [t.text for t in nlp.make_doc("我爱ab")] == ["我", "爱", "a", "b"]


def _docs(path: Path):
    return list(DocBin().from_disk(path).get_docs(English().vocab))


def test_convert_conll_ner_and_uner(tmp_path):
    conll = tmp_path / "c.txt"
    conll.write_text(
        "-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n# NN I-NP O\n\n"
        "Peter NNP B-NP B-PER\nBlackburn NNP I-NP I-PER\n\n", encoding="utf-8")
    docs = corpus.convert("conll-ner", conll)
    assert [d.text for d in docs] == ["EU rejects #", "Peter Blackburn"]
    assert [(e.text, e.label_) for d in docs for e in d.ents] == [("EU", "ORG"), ("Peter Blackburn", "PER")]
    uner = tmp_path / "u.iob2"
    uner.write_text(
        "# sent_id = x-1\n# text = Go to Tampa Bay, now!\n1\tGo\tO\t-\t-\n2\tto\tO\t-\t-\n3\tTampa\tB-LOC\t-\t-\n"
        "4\tBay\tI-LOC\t-\t-\n5\t,\tO\t-\t-\n6\tnow\tO\t-\t-\n7\t!\tO\t-\t-\n\n", encoding="utf-8")
    (doc,) = corpus.convert("uner", uner)
    assert doc.text == "Go to Tampa Bay, now!" and [(e.text, e.label_) for e in doc.ents] == [("Tampa Bay", "LOC")]


def test_convert_char_bio_joins_characters_without_spaces(tmp_path):
    bio = tmp_path / "w.char.bio"
    bio.write_text("我\tO\n在\tO\n北\tB-GPE.NAM\n京\tI-GPE.NAM\n��\tO\n\n张\tB-PER.NAM\n三\tI-PER.NAM\n\n", encoding="utf-8")
    docs = corpus.convert("char-bio", bio)
    assert [d.text for d in docs] == ["我在北京��", "张三"]
    assert [len(d) for d in docs] == [5, 2]  # a two-character token of the source stays one token
    assert [(e.text, e.label_) for d in docs for e in d.ents] == [("北京", "GPE.NAM"), ("张三", "PER.NAM")]


def test_convert_sst_and_genre_and_conllu(tmp_path):
    sst = tmp_path / "s.tsv"
    sst.write_text("label\ttext\n4\tA great film\\/show .\n0\tAwful .\n", encoding="utf-8")
    docs = corpus.convert("sst", sst)
    assert docs[0].text == "A great film/show ." and docs[0].cats["very_positive"] == 1.0
    assert sum(docs[1].cats.values()) == 1.0 and docs[1].cats["very_negative"] == 1.0
    ud = ROOT / "assets" / "sample" / "ud_english_ewt" / "dev.conllu"
    genres = corpus.convert("genre", ud)
    parsed = corpus.convert("conllu", ud)
    assert len(genres) == len(parsed) == 100
    assert {max(d.cats, key=d.cats.get) for d in genres} == set(corpus.EWT_GENRES)
    assert all(d.has_annotation("DEP") and d.has_annotation("POS") and d.has_annotation("TAG") for d in parsed)
    assert len(corpus.convert("conllu", ud, percent=10)) == 10


def test_bundled_sample_is_open_data_with_attribution():
    sample = ROOT / "assets" / "sample"
    names = {p.relative_to(sample).as_posix() for p in sample.rglob("*") if p.is_file()}
    assert names == {
        "README.md", "LICENSE.txt",
        *(f"ud_english_ewt/{s}.conllu" for s in ("train", "dev", "test")),
        *(f"uner_english_ewt/{s}.iob2" for s in ("train", "dev", "test")),
    }
    readme = (sample / "README.md").read_text(encoding="utf-8")
    assert "CC BY-SA 4.0" in readme and "UniversalDependencies/UD_English-EWT" in readme
    assert (sample / "LICENSE.txt").read_text(encoding="utf-8").startswith("Attribution-ShareAlike 4.0 International")


# ------------------------------------------------------------------------------------------------ compare
def test_compare_table(tmp_path):
    (tmp_path / "ner-elmo.json").write_text(json.dumps({"ents_f": 0.9, "ents_p": 0.91, "ents_r": 0.89}))
    (tmp_path / "ner-baseline.json").write_text(json.dumps({"ents_f": 0.85, "ents_p": 0.86, "ents_r": 0.84}))
    (tmp_path / "textcat-elmo.json").write_text(json.dumps({"cats_micro_f": 0.5, "cats_macro_f": 0.4, "ents_f": None}))
    rows = compare.collect(tmp_path)
    assert [(r["run"], r["key"]) for r in rows] == [
        ("ner", "ents_f"), ("ner", "ents_p"), ("ner", "ents_r"), ("textcat", "cats_micro_f"), ("textcat", "cats_macro_f")]
    assert rows[0]["delta"] == pytest.approx(5.0) and rows[3]["baseline"] is None
    text = compare.markdown(rows)
    assert "| ner | NER F1 | 85.00 | 90.00 | +5.00 |" in text and "| textcat | accuracy | — | 50.00 | — |" in text


# ------------------------------------------------------------------------------------------------ the workflow
def _elmo_vars():
    """The embedded English model if the package has it, else the tiny fixture biLM: chosen explicitly."""
    if (DEFAULT_MODEL_DIR / "options.json").exists() and (DEFAULT_MODEL_DIR / "weights.hdf5").exists():
        return "embedded", []
    options, weights = ALLENNLP / "options.json", ALLENNLP / "lm_weights.hdf5"
    return "fixture", ["--vars.elmo_options", str(options), "--vars.elmo_weights", str(weights)]


def _run_workflow(
    tmp_path: Path, workflow: str, *extra: str, config_overrides: str = ""
) -> Tuple[Path, subprocess.CompletedProcess]:
    """``spacy project run WORKFLOW`` on a copy of the project; ``config_overrides`` go to ``spacy train``."""
    project = tmp_path / "project"
    project.mkdir()
    for name in PROJECT_FILES:
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, project / name)
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    for name in ("WEASEL_CONFIG_OVERRIDES", "SPACY_CONFIG_OVERRIDES"):
        env.pop(name, None)
    if config_overrides:
        env["SPACY_CONFIG_OVERRIDES"] = config_overrides
    cmd = [sys.executable, "-m", "spacy", "project", "run", workflow, str(project), *extra]
    proc = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"spacy project run {workflow} failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}"
    return project, proc


@pytest.mark.slow
def test_project_run_all_on_the_sample(tmp_path):
    which, extra = _elmo_vars()
    print(f"ELMo weights for the workflow: {which}")
    project, proc = _run_workflow(tmp_path, "all", "--vars.sample_max_steps", "2", "--vars.sample_eval_frequency", "2", *extra)
    assert "SPACY_CONFIG_OVERRIDES" not in proc.stdout + proc.stderr  # the smoke test sets no deprecated variable

    for task in TASKS:
        for split in ("train", "dev", "test"):
            assert len(_docs(project / "corpus" / "sample" / task / f"{split}.spacy")) > 0
        for kind in ("elmo", "baseline"):
            assert (project / "training" / "sample" / task / kind / "model-best" / "config.cfg").exists()
    expected = {"ner": ["ents_f", "ents_p", "ents_r"], "tagger": ["tag_acc", "pos_acc", "dep_las", "dep_uas"],
                "textcat": ["cats_micro_f", "cats_macro_f"]}
    for task, keys in expected.items():
        for kind in ("elmo", "baseline"):
            metrics = json.loads((project / "metrics" / "sample" / f"{task}-{kind}.json").read_text())
            for key in keys:
                assert isinstance(metrics[key], float) and 0.0 <= metrics[key] <= 1.0, (task, kind, key)
    table = (project / "metrics" / "sample" / "comparison.md").read_text(encoding="utf-8")
    rows = json.loads((project / "metrics" / "sample" / "comparison.json").read_text())
    assert {r["run"] for r in rows} == set(TASKS) and all(r["delta"] is not None for r in rows)
    assert "| ner | NER F1 |" in table and "| tagger | LAS |" in table and "| textcat | accuracy |" in table
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "matplotlib is not installed" in proc.stdout
    else:
        assert (project / "metrics" / "sample" / "comparison.png").stat().st_size > 0
    sdists = list((project / "packages").glob("en_ner_elmo_sample-0.0.0/dist/en_ner_elmo_sample-0.0.0.tar.gz"))
    assert len(sdists) == 1, sorted(p.as_posix() for p in (project / "packages").rglob("*"))[:20]
    with tarfile.open(sdists[0]) as sdist:
        packaged = {Path(name).name: name for name in sdist.getnames()}
        for name, source in (("LICENSE", "LICENSE.txt"), ("LICENSES_SOURCES", "README.md")):
            assert sdist.extractfile(packaged[name]).read() == (ROOT / "assets" / "sample" / source).read_bytes()
    assert (project / "project.lock").exists()


@pytest.mark.slow
def test_project_weibo_workflow_trains_chinese_ner_with_the_embedded_chinese_model(tmp_path):
    weibo = shared_data("weibo_ner")
    project, _ = _run_workflow(
        tmp_path, "weibo", "--vars.weibo_dir", str(weibo),
        config_overrides="--training.max_steps=2 --training.eval_frequency=2",
    )
    config = Config().from_disk(project / "training" / "full" / "weibo" / "elmo" / "model-best" / "config.cfg")
    assert config["nlp"]["lang"] == "zh" and "elmo" in config["nlp"]["pipeline"]
    for kind in ("elmo", "baseline"):
        metrics = json.loads((project / "metrics" / "full" / f"weibo-{kind}.json").read_text())
        assert isinstance(metrics["ents_f"], float) and 0.0 <= metrics["ents_f"] <= 1.0
    rows = json.loads((project / "metrics" / "full" / "comparison.json").read_text())
    assert {r["run"] for r in rows} == {"weibo"}


@pytest.mark.slow
def test_project_sample_adapt_workflow_fine_tunes_the_embedded_bilm_on_training_text(tmp_path):
    # What a plain clone has: the run's vocabulary and fp16 softmax, and the biLM the package ships (no checkpoint).
    run, shipped = ROOT / "pretrain_runs" / "en_gutenberg_tiny", ROOT / "spacy_elmo" / "data" / "en_gutenberg_tiny"
    project, _ = _run_workflow(
        tmp_path, "sample-adapt", "--vars.adapt_from", str(run), "--vars.adapt_options", str(shipped / "options.json"),
        "--vars.adapt_weights", str(shipped / "weights.hdf5"), "--vars.adapt_steps", "6", "--vars.sample_max_steps", "2",
    )
    train_text = (project / "corpus" / "sample" / "ner" / "train.txt").read_text(encoding="utf-8").splitlines()
    assert len(train_text) == len(_docs(project / "corpus" / "sample" / "ner" / "train.spacy"))
    log = [json.loads(line) for line in (project / "training" / "sample" / "ner" / "bilm" / "log.jsonl").read_text().splitlines()]
    evals = [r for r in log if r.get("event") == "eval"]
    assert [r["step"] for r in evals] == [0, 6]
    adapted = Config().from_disk(project / "training" / "sample" / "ner" / "adapted" / "model-best" / "config.cfg")
    assert adapted["components"]["elmo"]["model"]["weight_file"].endswith("training/sample/ner/bilm/best/weights.hdf5")
    metrics = json.loads((project / "metrics" / "sample" / "ner-adapted.json").read_text())
    assert 0.0 <= metrics["ents_f"] <= 1.0
