"""``python -m spacy_elmo embed``: file contents against ``ElmoEmbedder``, layer modes, resume, shards, input errors."""
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, List

import h5py
import numpy as np
import pytest
import spacy
from click.testing import Result
from typer.testing import CliRunner

from spacy_elmo import ElmoEmbedder
from spacy_elmo.commands.cli import app
from tests.conftest import ROUNDING

REPO = Path(__file__).resolve().parents[2]
LINES = [
    "The bank of the river was muddy.",
    "",
    "She kept her savings in the bank, and then she went home to cook dinner for the whole family.",
    "Ünïcode wörds, too — naïve café.",
    "Short.",
    "  Spaces   around  ",
    "Two sentences here. And another one!",
]
MAX_TOKENS = 6  # line 2 has 20 tokens: four windows


@pytest.fixture(scope="module")
def embedder(allennlp_files) -> ElmoEmbedder:
    return ElmoEmbedder(*allennlp_files, initial_state="zeros")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "lines.txt"
    path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def spacy_tokens() -> List[List[str]]:
    tokenizer = spacy.blank("en").tokenizer
    return [[t.text for t in tokenizer(line) if not t.is_space] for line in LINES]


def embed(allennlp_files, *args: str) -> Result:
    options, weights = allennlp_files
    common = ["--options", str(options), "--weights", str(weights), "--initial-state", "zeros", "--quiet"]
    return CliRunner().invoke(app, ["embed", *args, *common])


def expected_layers(embedder: ElmoEmbedder, tokens: List[str], max_tokens: int) -> np.ndarray:
    """The embedder's layers of each window of ``max_tokens`` tokens, side by side."""
    windows = [tokens[i : i + max_tokens] for i in range(0, len(tokens), max_tokens)] or [[]]
    return np.concatenate(embedder.embed_batch(windows), axis=1)


def read_file(path: Path) -> Dict[str, np.ndarray]:
    """Every dataset of an output file (tokens decoded), plus its attributes under "attrs"."""
    with h5py.File(path, "r") as f:
        data = {name: f[name][...] for name in f if name != "tokens"}
        data.update({f"tokens/{name}": list(f["tokens"][name].asstr()[...]) for name in f["tokens"]})
        data["attrs"] = {key: f.attrs[key] for key in f.attrs}
    return data


def assert_same_file(a: Path, b: Path) -> None:
    first, second = read_file(a), read_file(b)
    assert sorted(first) == sorted(second)
    for name in first:
        if name == "attrs" or name.startswith("tokens/"):
            assert first[name] == second[name], name
        else:
            np.testing.assert_array_equal(first[name], second[name], err_msg=name)


def test_all_layers_equal_the_embedder_window_by_window(allennlp_files, embedder, corpus, spacy_tokens, tmp_path):
    out = tmp_path / "all.hdf5"
    done = embed(allennlp_files, str(corpus), str(out), "--max-tokens", str(MAX_TOKENS), "--batch-size", "3")
    assert done.exit_code == 0, done.output
    with h5py.File(out, "r") as f:
        assert sorted(f["tokens"], key=int) == [str(k) for k in range(len(LINES))]
        assert f.attrs["complete"] and f.attrs["next_line"] == len(LINES)
        for k, tokens in enumerate(spacy_tokens):
            assert list(f["tokens"][str(k)].asstr()[...]) == tokens
            want = expected_layers(embedder, tokens, MAX_TOKENS)
            assert f[str(k)].dtype == np.float32 and f[str(k)].shape == (3, len(tokens), 32)
            np.testing.assert_allclose(f[str(k)][...], want, **ROUNDING)
    total_tokens = sum(len(tokens) for tokens in spacy_tokens)
    assert f"Done: {len(LINES)} lines, {total_tokens} tokens →" in done.output


@pytest.mark.parametrize(
    "mode,extra,reduce",
    [
        ("top", [], lambda x: x[2]),
        ("average", [], lambda x: (x[0] + x[1] + x[2]) / 3),
        ("mix", ["--mix-weights", "0.5,-0.25,2", "--gamma", "0.75"], lambda x: 0.75 * (0.5 * x[0] - 0.25 * x[1] + 2 * x[2])),
    ],
)
def test_reduced_layers_are_computed_from_the_full_layers(allennlp_files, embedder, corpus, spacy_tokens, tmp_path, mode, extra, reduce):
    out = tmp_path / f"{mode}.hdf5"
    done = embed(allennlp_files, str(corpus), str(out), "--layers", mode, "--max-tokens", str(MAX_TOKENS), *extra)
    assert done.exit_code == 0, done.output
    with h5py.File(out, "r") as f:
        for k, tokens in enumerate(spacy_tokens):
            full = np.asarray(expected_layers(embedder, tokens, MAX_TOKENS), dtype=np.float64)
            assert f[str(k)].shape == (len(tokens), 32)
            np.testing.assert_allclose(f[str(k)][...], reduce(full), **ROUNDING)


@pytest.mark.parametrize("mode,extra", [("all", []), ("top", []), ("mix", ["--mix-weights", "1,0,1"])])
def test_only_what_is_written_is_computed(allennlp_files, corpus, tmp_path, monkeypatch, mode, extra):
    """A fixed mix asks the runtime for the mixed vectors; all layers are asked for only when all are written."""
    from spacy_elmo.runtime import ElmoRuntime

    asked = []
    for method in ("layers", "mixed"):
        real = getattr(ElmoRuntime, method)

        def spy(self, *args, _real=real, _method=method, **kwargs):
            asked.append(_method)
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(ElmoRuntime, method, spy)
    done = embed(allennlp_files, str(corpus), str(tmp_path / "out.hdf5"), "--layers", mode, "--batch-size", "3", *extra)
    assert done.exit_code == 0, done.output
    assert asked == ["layers" if mode == "all" else "mixed"] * 3  # 7 lines, 3 a batch


def test_whitespace_tokens_and_a_mix_weight_count_that_does_not_fit(allennlp_files, corpus, tmp_path):
    out = tmp_path / "ws.hdf5"
    assert embed(allennlp_files, str(corpus), str(out), "--whitespace").exit_code == 0
    with h5py.File(out, "r") as f:
        assert [list(f["tokens"][str(k)].asstr()[...]) for k in range(len(LINES))] == [line.split() for line in LINES]
    bad = embed(allennlp_files, str(corpus), str(tmp_path / "mix.hdf5"), "--layers", "mix", "--mix-weights", "1,1")
    assert bad.exit_code == 1 and "2 weights" in bad.output and "3 layers" in bad.output
    assert not (tmp_path / "mix.hdf5").exists()


def test_jsonl_text_and_tokens(allennlp_files, embedder, tmp_path):
    records = [{"text": "A cat sat."}, {"tokens": ["Pre", "split", "tokens"]}, {"text": ""}, {"tokens": []}]
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n\n", encoding="utf-8")
    out = tmp_path / "out.hdf5"
    done = embed(allennlp_files, str(path), str(out), "--jsonl", "--layers", "top")
    assert done.exit_code == 0, done.output
    expected_tokens = [["A", "cat", "sat", "."], ["Pre", "split", "tokens"], [], [], []]
    with h5py.File(out, "r") as f:
        for k, tokens in enumerate(expected_tokens):
            assert list(f["tokens"][str(k)].asstr()[...]) == tokens
            want = embedder.embed_sentence(tokens)[-1]
            assert f[str(k)].shape == (len(tokens), 32)
            np.testing.assert_allclose(f[str(k)][...], want, **ROUNDING)


def test_shards_cover_every_line_once_with_the_unsharded_vectors(allennlp_files, corpus, tmp_path, monkeypatch):
    whole = tmp_path / "whole.hdf5"
    assert embed(allennlp_files, str(corpus), str(whole)).exit_code == 0
    names = []
    for rank in range(2):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        done = embed(allennlp_files, str(corpus), str(tmp_path / "part-{shard}.hdf5"), "--shard", "auto")
        assert done.exit_code == 0, done.output
        with h5py.File(tmp_path / f"part-{rank}.hdf5", "r") as f:
            shard_names = sorted((n for n in f if n != "tokens"), key=int)
            assert shard_names == [str(k) for k in range(rank, len(LINES), 2)]
            assert sorted(f["tokens"], key=int) == shard_names
            with h5py.File(whole, "r") as w:
                for name in shard_names:
                    np.testing.assert_allclose(f[name][...], w[name][...], **ROUNDING)  # other batches
        names += shard_names
    assert sorted(names, key=int) == [str(k) for k in range(len(LINES))]
    # an explicit i/n writes the file it is given; auto with several processes needs {shard} in OUTPUT
    explicit = embed(allennlp_files, str(corpus), str(tmp_path / "one.hdf5"), "--shard", "1/2")
    assert explicit.exit_code == 0 and read_file(tmp_path / "one.hdf5").keys() == read_file(tmp_path / "part-1.hdf5").keys()
    clash = embed(allennlp_files, str(corpus), str(tmp_path / "same.hdf5"), "--shard", "auto")
    assert clash.exit_code == 1 and "{shard}" in clash.output
    bad = embed(allennlp_files, str(corpus), str(tmp_path / "x.hdf5"), "--shard", "2/2")
    assert bad.exit_code == 1 and "2/2" in bad.output


def interrupt_on_batch(monkeypatch, batch: int) -> None:
    """Make the ``batch``-th call of ``embed_windows`` (1-based) raise KeyboardInterrupt, as Ctrl-C there would."""
    import spacy_elmo.commands.embed

    real, calls = spacy_elmo.commands.embed.embed_windows, []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == batch:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(spacy_elmo.commands.embed, "embed_windows", interrupted)


def test_interrupted_run_resumes_to_the_uninterrupted_file(allennlp_files, corpus, spacy_tokens, tmp_path, monkeypatch):
    whole = tmp_path / "whole.hdf5"
    assert embed(allennlp_files, str(corpus), str(whole), "--batch-size", "2").exit_code == 0
    interrupt_on_batch(monkeypatch, 3)
    out = tmp_path / "resumed.hdf5"
    stopped = embed(allennlp_files, str(corpus), str(out), "--batch-size", "2")
    assert stopped.exit_code == 130 and "run the same command" in stopped.output
    with h5py.File(out, "a") as f:
        assert f.attrs["next_line"] == 4 and not f.attrs["complete"]
        assert sorted(n for n in f if n != "tokens") == ["0", "1", "2", "3"]
        # what a run killed mid-batch may leave: a dataset past next_line, of the wrong shape
        f.create_dataset("4", data=np.zeros((1, 1, 1), dtype=np.float32))
        f.create_dataset("tokens/4", data=np.array(["stale"], dtype=h5py.string_dtype()))
    monkeypatch.undo()
    resumed = embed(allennlp_files, str(corpus), str(out), "--batch-size", "2")
    assert resumed.exit_code == 0, resumed.output
    this_run = sum(len(tokens) for tokens in spacy_tokens[4:])  # lines 4-6 only
    assert f"Done: {len(LINES)} lines (3 lines and {this_run} tokens in this run) →" in resumed.output
    assert_same_file(out, whole)
    again = embed(allennlp_files, str(corpus), str(out), "--batch-size", "2")
    assert again.exit_code == 0 and "already complete" in again.output


def test_a_killed_process_resumes_to_the_uninterrupted_file(allennlp_files, corpus, tmp_path):
    """SIGKILL in the middle of a batch's writes (the 9th dataset: line 4's tokens), then the same command again."""
    options, weights = allennlp_files
    args = ["embed", str(corpus), str(tmp_path / "{name}.hdf5"), "--options", str(options), "--weights", str(weights),
            "--initial-state", "zeros", "--batch-size", "2", "--quiet"]
    killer = textwrap.dedent(
        """
        import os, signal, sys
        import h5py, torch
        from spacy_elmo.commands.cli import app
        torch.set_num_threads(1)  # as in this test process: same sums in the same order
        create, count = h5py.Group.create_dataset, [0]
        def create_then_die(self, *args, **kwargs):
            result = create(self, *args, **kwargs)
            count[0] += 1
            if count[0] == 9:
                os.kill(os.getpid(), signal.SIGKILL)
            return result
        h5py.Group.create_dataset = create_then_die
        app(sys.argv[1:])
        """
    )
    killed_args = [a.replace("{name}", "killed") for a in args]
    done = subprocess.run([sys.executable, "-c", killer, *killed_args], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == -9, done.stderr
    with h5py.File(tmp_path / "killed.hdf5", "r") as f:
        assert f.attrs["next_line"] == 4 and not f.attrs["complete"]
    assert CliRunner().invoke(app, killed_args).exit_code == 0
    assert CliRunner().invoke(app, [a.replace("{name}", "whole") for a in args]).exit_code == 0
    assert_same_file(tmp_path / "killed.hdf5", tmp_path / "whole.hdf5")


def test_resuming_with_other_settings_is_refused(allennlp_files, corpus, tmp_path):
    out = tmp_path / "out.hdf5"
    assert embed(allennlp_files, str(corpus), str(out), "--layers", "top").exit_code == 0
    done = embed(allennlp_files, str(corpus), str(out), "--layers", "average")
    assert done.exit_code == 1
    assert "'top' then, 'average' now" in done.output and "delete it" in done.output


def test_resuming_with_another_window_length_is_refused_naming_the_setting(allennlp_files, corpus, tmp_path):
    out = tmp_path / "out.hdf5"
    assert embed(allennlp_files, str(corpus), str(out), "--max-tokens", "6").exit_code == 0
    with h5py.File(out, "r") as f:
        recorded = json.loads(f.attrs["settings"])
    assert recorded["max_sentence_tokens"] == 6 and recorded["initial_state"] == "zeros"
    done = embed(allennlp_files, str(corpus), str(out), "--max-tokens", "7")
    assert done.exit_code == 1 and "max_sentence_tokens: 6 then, 7 now" in done.output, done.output
    assert embed(allennlp_files, str(corpus), str(out), "--max-tokens", "6").output.strip().endswith("nothing to do.")


def test_input_errors_name_the_file_and_line(allennlp_files, tmp_path):
    missing = embed(allennlp_files, str(tmp_path / "nope.txt"), str(tmp_path / "a.hdf5"))
    assert missing.exit_code == 1 and "nope.txt not found" in missing.output and "Traceback" not in missing.output
    cases = {
        '{"text": "fine"}\n{"text": "also fine"}\n{"text": oops}\n': "line 3: not valid JSON",
        '{"text": "fine"}\n[1, 2]\n': 'line 2: expected an object with a "text" string or a "tokens" list',
        '{"tokens": ["a", 3]}\n': 'line 1: "tokens" must be a list of strings',
    }
    for i, (text, message) in enumerate(cases.items()):
        path = tmp_path / f"bad{i}.jsonl"
        path.write_text(text, encoding="utf-8")
        done = embed(allennlp_files, str(path), str(tmp_path / f"bad{i}.hdf5"), "--jsonl")
        assert done.exit_code == 1 and f"{path}, {message}" in done.output, done.output
        assert not (tmp_path / f"bad{i}.hdf5").exists()  # checked before anything is written


def test_an_output_that_is_not_ours_is_left_alone(allennlp_files, corpus, tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("precious\n")
    done = embed(allennlp_files, str(corpus), str(text))
    assert done.exit_code == 1 and "Cannot open" in done.output and "choose another OUTPUT" in done.output
    assert text.read_text() == "precious\n"
    with h5py.File(tmp_path / "other.hdf5", "w") as f:
        f["data"] = np.arange(3)
    done = embed(allennlp_files, str(corpus), str(tmp_path / "other.hdf5"))
    assert done.exit_code == 1 and "not written by 'spacy_elmo embed'" in done.output
    with h5py.File(tmp_path / "other.hdf5", "r") as f:
        assert list(f) == ["data"] and not f.attrs


def test_interrupted_starts_its_own_line_after_the_progress_bar(allennlp_files, corpus, tmp_path, monkeypatch):
    interrupt_on_batch(monkeypatch, 3)
    options, weights = allennlp_files
    args = ["embed", str(corpus), str(tmp_path / "out.hdf5"), "--options", str(options), "--weights", str(weights),
            "--batch-size", "2"]  # no --quiet: the bar is drawn
    stopped = CliRunner().invoke(app, args)
    assert stopped.exit_code == 130
    lines = stopped.stderr.split("\n")  # not splitlines(): the bar redraws itself after a carriage return
    assert any(f"4/{len(LINES)}" in line for line in lines), stopped.stderr  # the bar was drawn, up to 4 lines
    assert [line for line in lines if "Interrupted:" in line] == [
        f"Interrupted: finished batches are kept in {tmp_path / 'out.hdf5'}; run the same command to continue."
    ]


def test_interrupted_before_the_output_exists_says_nothing_was_written(allennlp_files, corpus, tmp_path, monkeypatch):
    import spacy_elmo.commands.embed

    def interrupted_while_loading(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(spacy_elmo.commands.embed, "load_encoder", interrupted_while_loading)
    stopped = embed(allennlp_files, str(corpus), str(tmp_path / "out.hdf5"))
    assert stopped.exit_code == 130 and "Interrupted: nothing was written." in stopped.output
    assert not (tmp_path / "out.hdf5").exists()


@pytest.fixture(scope="module")
def reference_output(allennlp_files, corpus, tmp_path_factory) -> Path:
    """The file of a run with the right model files and input."""
    out = tmp_path_factory.mktemp("reference") / "out.hdf5"
    assert embed(allennlp_files, str(corpus), str(out)).exit_code == 0
    return out


@pytest.mark.parametrize("wrong", ["options", "weights", "damaged weights", "input"])
def test_a_wrong_model_or_input_writes_nothing_and_the_corrected_rerun_works(allennlp_files, corpus, reference_output, tmp_path, wrong):
    """A stub left by the failed run would record the wrong settings and refuse the corrected rerun."""
    options, weights = allennlp_files
    damaged = tmp_path / "damaged.hdf5"
    damaged.write_bytes(weights.read_bytes()[:2000])
    bad = {
        "options": {"options": tmp_path / "option.json"},
        "weights": {"weights": tmp_path / "weights.hdf5"},
        "damaged weights": {"weights": damaged},
        "input": {"input": tmp_path / "corpus.txt"},
    }[wrong]
    out = tmp_path / "new" / "out.hdf5"

    def run(input_file: Path, options_file: Path, weight_file: Path) -> Result:
        return CliRunner().invoke(app, ["embed", str(input_file), str(out), "--options", str(options_file),
                                        "--weights", str(weight_file), "--initial-state", "zeros", "--quiet"])

    failed = run(bad.get("input", corpus), bad.get("options", options), bad.get("weights", weights))
    assert failed.exit_code == 1 and failed.output.startswith("✘ ") and "Traceback" not in failed.output
    assert str(next(iter(bad.values()))) in failed.output  # the wrong file is named
    assert not out.parent.exists()  # nothing written, not even the output's folder
    fixed = run(corpus, options, weights)
    assert fixed.exit_code == 0, fixed.output
    assert_same_file(out, reference_output)


def test_precision_int8_writes_what_an_int8_embedder_gives_and_is_recorded(allennlp_files, corpus, spacy_tokens, tmp_path):
    out = tmp_path / "int8.hdf5"
    assert embed(allennlp_files, str(corpus), str(out), "--precision", "int8").exit_code == 0
    int8 = ElmoEmbedder(*allennlp_files, initial_state="zeros", precision="int8")
    fp32 = ElmoEmbedder(*allennlp_files, initial_state="zeros")
    with h5py.File(out, "r") as f:
        assert json.loads(f.attrs["settings"])["precision"] == "int8"
        got = f["0"][()]
    np.testing.assert_allclose(got, expected_layers(int8, spacy_tokens[0], 256), **ROUNDING)
    assert np.abs(got - expected_layers(fp32, spacy_tokens[0], 256)).max() > 1e-4  # really not fp32


def test_a_precision_this_cpu_refuses_writes_nothing(allennlp_files, corpus, tmp_path, monkeypatch):
    import spacy_elmo.model.precision as precision_module

    monkeypatch.setattr(precision_module, "native_bf16_cpu", lambda: False)
    out = tmp_path / "bf16.hdf5"
    result = embed(allennlp_files, str(corpus), str(out), "--precision", "bf16")
    assert result.exit_code == 1 and "--precision: precision 'bf16' needs a CPU with native bf16" in result.output
    assert not out.exists()


@pytest.mark.parametrize("option", ["--options", "--weights", "damaged --weights", "--precision"])
def test_a_wrong_option_is_one_line_naming_it_or_its_file(allennlp_files, corpus, tmp_path, option):
    """A load error names the file, not --precision; a damaged weights file says so; a bad --precision names it."""
    options, weights = allennlp_files
    damaged = tmp_path / "damaged.hdf5"
    damaged.write_bytes(weights.read_bytes()[:2000])
    flag, value, expected = {
        "--options": ("--options", str(tmp_path / "missing.json"), [str(tmp_path / "missing.json")]),
        "--weights": ("--weights", str(tmp_path / "missing.hdf5"), [str(tmp_path / "missing.hdf5")]),
        "damaged --weights": ("--weights", str(damaged), [str(damaged), "damaged"]),
        "--precision": ("--precision", "fp17", ["--precision", "fp17"]),
    }[option]
    given = {"--options": str(options), "--weights": str(weights), "--precision": "fp32", flag: value}
    args = [arg for key, value in given.items() for arg in (key, value)]
    result = CliRunner().invoke(app, ["embed", str(corpus), str(tmp_path / "out.hdf5"), *args, "--quiet"])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.exception  # not uncaught
    assert result.output.startswith("✘ ") and len(result.output.strip().splitlines()) == 1, result.output
    assert all(part in result.output for part in expected), result.output
    assert ("--precision" in result.output) == (option == "--precision"), result.output


@pytest.mark.parametrize(
    "args,option,setting",
    [
        (["--max-tokens", "0"], "--max-tokens", "max_sentence_tokens"),
        (["--initial-state", "cold"], "--initial-state", "cold"),
        (["--precision", "fp17"], "--precision", "fp17"),
        (["--weights", "w.hdf5"], "--weights", "weight_file"),
    ],
)
def test_a_bad_bilm_setting_is_one_line_naming_its_option(corpus, tmp_path, args, option, setting):
    """The biLM's own check decides; the user reads the option they typed, and nothing is written."""
    out = tmp_path / "out.hdf5"
    result = CliRunner().invoke(app, ["embed", str(corpus), str(out), *args, "--quiet"])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.exception
    assert result.output.startswith(f"✘ {option}: ") and len(result.output.strip().splitlines()) == 1, result.output
    assert setting in result.output and not out.exists()
