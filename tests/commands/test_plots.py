"""``plot-mix`` and ``plot-pretrain``: the numbers read from a pipeline and a log, and the PNG files."""
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import spacy
from spacy.training import Example
from typer.testing import CliRunner

from spacy_elmo.commands.cli import app
from spacy_elmo.commands.plots import PlotError, learned_mixes, plot_mixes, pretrain_curves
from spacy_elmo.pretrain.config import load_config
from spacy_elmo.pretrain.trainer import Trainer

from tests.pipeline.conftest import elmo_config
from tests.pretrain.conftest import tiny_config

LISTENER = {"@architectures": "spacy_elmo.ElmoListener.v1", "upstream": "*"}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# pre-softmax layer weights and gamma set on each component's mix
SET = {"ner": ([0.5, -1.0, 2.0], 1.25), "tagger": ([0.0, 0.0, 0.0], 0.5)}


@pytest.fixture(scope="module")
def pipeline_dir(tmp_path_factory):
    """An ELMo NER + tagger pipeline, initialized, with known mix parameters, saved to disk."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config=elmo_config(store_vectors=False))
    nlp.add_pipe("ner", config={"model": {"@architectures": "spacy.TransitionBasedParser.v2", "state_type": "ner",
                                          "hidden_width": 16, "maxout_pieces": 2, "tok2vec": LISTENER}})
    nlp.add_pipe("tagger", config={"model": {"@architectures": "spacy.Tagger.v2", "tok2vec": LISTENER}})
    doc = nlp.make_doc("Ann lives in Paris")
    example = Example.from_dict(doc, {"entities": [(0, 3, "PER"), (13, 18, "LOC")], "tags": ["N", "V", "P", "N"]})
    nlp.initialize(lambda: [example])
    for name, (scalars, gamma) in SET.items():
        (mix,) = [node for node in nlp.get_pipe(name).model.walk() if node.name == "elmo_scalar_mix"]
        mix.set_param("scalars", mix.ops.asarray1f(scalars))
        mix.set_param("gamma", mix.ops.asarray1f([gamma]))
    path = tmp_path_factory.mktemp("pipeline") / "model"
    nlp.to_disk(path)
    return path


def test_learned_mixes_are_the_softmax_weights_and_gamma_of_each_listener(pipeline_dir):
    mixes = learned_mixes(spacy.load(pipeline_dir))
    assert [m.component for m in mixes] == ["ner", "tagger"]
    for mix in mixes:
        scalars, gamma = SET[mix.component]
        exp = [np.exp(s) for s in scalars]
        np.testing.assert_allclose(mix.weights, [e / sum(exp) for e in exp], rtol=1e-6)
        assert mix.gamma == pytest.approx(gamma)


def test_plot_mix_command_prints_the_weights_and_writes_a_png(pipeline_dir, tmp_path):
    done = CliRunner().invoke(app, ["plot-mix", str(pipeline_dir), str(tmp_path / "mix.png")])
    assert done.exit_code == 0, done.output
    assert "tagger: layer weights 0.3333,0.3333,0.3333  gamma 0.5000" in done.output
    assert (tmp_path / "mix.png").read_bytes()[:8] == PNG_MAGIC


def test_a_pipeline_without_listeners_has_nothing_to_plot(tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config=elmo_config())
    with pytest.raises(PlotError, match="No ELMo listener"):
        learned_mixes(nlp)


def test_missing_matplotlib_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` raise ImportError
    with pytest.raises(PlotError, match=r'pip install "spacy-elmo\[plot\]"'):
        plot_mixes([], tmp_path / "x.png")


def test_curves_of_a_real_pretraining_run_and_its_png(tmp_path):
    typed, raw = load_config(tiny_config(10, eval_every=5, log_every=5))
    Trainer(typed, raw, tmp_path / "run").run(progress=False)
    records = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    evals = [r for r in records if r.get("event") == "eval"]
    train = [r for r in records if r.get("event") != "eval"]
    curves = pretrain_curves(tmp_path / "run")
    assert curves.train["tokens_seen"].tolist() == [r["tokens_seen"] for r in train] and len(train) == 2
    assert curves.train["loss"].tolist() == [r["loss"] for r in train]
    assert curves.held_out["tokens_seen"].tolist() == [r["tokens_seen"] for r in evals] and len(evals) == 3
    for key in ("forward_ppl", "backward_ppl", "average_ppl"):
        assert curves.held_out[key].tolist() == [r[key] for r in evals]
    done = CliRunner().invoke(app, ["plot-pretrain", str(tmp_path / "run" / "log.jsonl"), str(tmp_path / "curves.png")])
    assert done.exit_code == 0, done.output
    assert (tmp_path / "curves.png").read_bytes()[:8] == PNG_MAGIC


def train_record(step: int, loss: float) -> str:
    return json.dumps({"step": step, "tokens_seen": 100 * step, "loss": loss, "train_ppl": float(np.exp(loss)),
                       "tokens_per_s": 1.0, "elapsed_s": 1.0})


def eval_record(step: int, ppl: float) -> str:
    return json.dumps({"step": step, "tokens_seen": 100 * step, "event": "eval", "forward_ppl": ppl,
                       "backward_ppl": ppl + 1, "average_ppl": ppl + 0.5})


def test_a_resumed_run_keeps_the_later_record_of_each_step_and_a_cut_last_line_is_ignored(tmp_path):
    lines = [eval_record(0, 900.0), train_record(5, 6.0), train_record(10, 5.5), train_record(15, 5.2),
             train_record(10, 5.4), train_record(15, 5.1), eval_record(15, 300.0), '{"step": 20, "tok']
    (tmp_path / "log.jsonl").write_text("\n".join(lines), encoding="utf-8")
    curves = pretrain_curves(tmp_path)
    assert curves.train["tokens_seen"].tolist() == [500, 1000, 1500]
    assert curves.train["loss"].tolist() == [6.0, 5.4, 5.1]
    assert curves.held_out["average_ppl"].tolist() == [900.5, 300.5]


def test_log_errors_name_the_file_and_line(tmp_path):
    with pytest.raises(PlotError, match="No pretraining log"):
        pretrain_curves(tmp_path / "nowhere")
    (tmp_path / "log.jsonl").write_text(train_record(5, 6.0) + "\n{oops\n" + train_record(10, 5.0) + "\n")
    with pytest.raises(PlotError, match="log.jsonl, line 2: not valid JSON"):
        pretrain_curves(tmp_path)
    (tmp_path / "log.jsonl").write_text(json.dumps({"step": 5, "tokens_seen": 10}) + "\n")
    with pytest.raises(PlotError, match="line 1: expected 'step' and tokens_seen, loss, train_ppl"):
        pretrain_curves(tmp_path)


def test_the_project_compare_step_tabulates_each_runs_mixes(pipeline_dir, tmp_path):
    script = Path(__file__).resolve().parents[2] / "scripts" / "compare.py"
    spec = importlib.util.spec_from_file_location("compare_for_mix_test", script)
    compare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(compare)
    mixes = compare.load_mixes([f"sample={pipeline_dir}"])
    assert [m.component for m in mixes] == ["sample/ner", "sample/tagger"]
    table = compare.mix_markdown(mixes)
    assert "| component | layer 0 | layer 1 | layer 2 | gamma |" in table
    assert "| sample/ner | 0.175 | 0.039 | 0.786 | 1.250 |" in table  # softmax(0.5, -1, 2)
