import re
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from confection import Config
import typer
from typer.testing import CliRunner

from spacy_elmo.commands.cli import _held_out, app
from spacy_elmo.runtime.settings import DEFAULTS, embed_options
from spacy_elmo.model.options import preset

from tests.conftest import torchrun


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "spacy_elmo", *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_init_config_writes_the_preset(tmp_path):
    done = _cli("init-config", "--preset", "small", str(tmp_path / "small.cfg"))
    assert done.returncode == 0, done.stderr
    config = Config().from_disk(tmp_path / "small.cfg", interpolate=False)
    assert (config["model"]["lstm_dim"], config["model"]["projection_dim"]) == (1024, 128)
    assert config["model"]["n_highway"] == preset("small").n_highway


def test_init_config_makes_the_missing_folders_of_its_output(tmp_path):
    done = CliRunner().invoke(app, ["init-config", str(tmp_path / "new" / "folder" / "tiny.cfg")])
    assert done.exit_code == 0, done.output
    config = Config().from_disk(tmp_path / "new" / "folder" / "tiny.cfg", interpolate=False)
    assert config["model"]["lstm_dim"] == preset("tiny").lstm_dim


def test_pretrain_reports_a_bad_config_without_a_traceback(tmp_path):
    _cli("init-config", str(tmp_path / "c.cfg"))
    done = _cli("pretrain", str(tmp_path / "c.cfg"), str(tmp_path / "out"), "--paths.train", "x.txt", "--training.optimizer", "lion")
    assert done.returncode == 1
    assert "optimizer" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_version_prints_the_package_version():
    about = (Path(__file__).resolve().parents[2] / "spacy_elmo" / "about.py").read_text(encoding="utf-8")
    version = re.search(r'__version__ = "([^"]+)"', about).group(1)
    done = _cli("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"spacy-elmo {version}"



def _help(*command: str) -> str:
    """What ``python -m spacy_elmo [command] --help`` prints."""
    done = CliRunner().invoke(app, [*command, "--help"])
    assert done.exit_code == 0, done.output
    return done.output


@pytest.mark.parametrize("command", [None, *typer.main.get_command(app).commands])
def test_help_shows_a_value_placeholder_exactly_for_the_options_that_take_a_value(command):
    """Flags (--jsonl, --quiet, --version, --help) take no value, so --help shows none after them; the others show
    the kind of value they take (``<int>``)."""
    group = typer.main.get_command(app)
    click_command = group if command is None else group.commands[command]
    shown = _help(*([] if command is None else [command]))
    options = [param for param in click_command.params if param.param_type_name == "option"]
    for option in [*options, click_command.get_help_option(typer.Context(click_command))]:
        names = ", ".join(sorted(option.opts, key=len))
        after = re.search(rf"^  {re.escape(names)}( \S+)?", shown, re.M)
        assert after is not None, (names, shown)
        assert (after[1] is not None and after[1].startswith(" <")) == (not option.is_flag), after[0]


def test_embed_help_shows_the_defaults_of_the_biLM_options_the_settings_have():
    """An option left out keeps the biLM setting's default: --help shows that value (docs/cli.md's table)."""
    shown = " ".join(_help("embed").split())
    for option, setting in embed_options().items():
        default = getattr(DEFAULTS, setting)
        if default is not None:  # the model files: the embedded model, said in words
            assert re.search(rf"{option} <\w+> [^[]*\[default: {default}\]", shown), (option, default)


def test_list_starts_with_the_cache_and_shows_the_embedded_models(tmp_path):
    done = CliRunner().invoke(app, ["list"], env={"SPACY_ELMO_CACHE": str(tmp_path)})
    lines = done.output.splitlines()
    assert lines[0] == f"Cache: {tmp_path}"
    assert any(line.split()[:2] == ["en_gutenberg_tiny", "en"] for line in lines)
    assert any(line.split()[:2] == ["zh_classics_tiny", "zh"] for line in lines)


def test_list_filters_by_name_or_language():
    names = re.findall(r"^[ *] (\S+)", CliRunner().invoke(app, ["list", "de"]).output, re.MULTILINE)
    assert names == ["manylangs-de"]
    english = CliRunner().invoke(app, ["list", "en"]).output
    assert "  original " in english and "manylangs-en" in english and "en_gutenberg_tiny" in english
    assert "manylangs-fr" not in english and "zh_classics_tiny" not in english


def test_list_of_nothing_matching_is_an_error():
    done = CliRunner().invoke(app, ["list", "klingon"])
    assert done.exit_code == 1 and "No model matches 'klingon'" in done.output


def test_pretrain_reports_perplexities_readably():
    scores = {"forward_ppl": 516.5161647721333, "backward_ppl": 520.0849, "average_ppl": 518.2972}
    assert _held_out(scores) == "held-out perplexity: forward 516.5, backward 520.1 (average 518.3)"


@pytest.mark.parametrize("vnni, bf16, expected", [(True, True, "int8"), (True, False, "int8"), (False, True, "fp32"),
                                                  (False, False, "fp32")])
def test_list_says_which_precision_suits_the_cpu(monkeypatch, vnni, bf16, expected):
    import spacy_elmo.model.cpu as cpu_module

    monkeypatch.setattr(cpu_module, "vnni_cpu", lambda: vnni)
    monkeypatch.setattr(cpu_module, "native_bf16_cpu", lambda: bf16)
    line = CliRunner().invoke(app, ["list", "zh"]).output.splitlines()[1]
    assert line.startswith(f"Precision for this machine: '{expected}'")
    assert ("'bf16' is closer to fp32" in line) == (vnni and bf16)


def test_list_gives_each_published_model_its_urls_licence_and_citation(tmp_path):
    from spacy_elmo.sources.catalog import CATALOG

    output = CliRunner().invoke(app, ["list"], env={"SPACY_ELMO_CACHE": str(tmp_path)}).output
    cited = dict(re.findall(r"^\[(\d+)\] (.+)$", output, re.MULTILINE))
    for entry in CATALOG.values():
        block = re.search(rf"^  {re.escape(entry.name)} .*?\n((?:    .*\n)+)", output, re.MULTILINE).group(1)
        fields = dict(re.findall(r"^    (\w+): (.*)$", block, re.MULTILINE))
        assert fields["url"].split() == list(entry.urls.values())
        assert fields["licence"] == entry.license
        assert cited[fields["cite"].strip("[]")] == entry.citation


def test_list_downloaded_shows_no_embedded_model(tmp_path):
    output = CliRunner().invoke(app, ["list", "--downloaded"], env={"SPACY_ELMO_CACHE": str(tmp_path)}).output
    assert "en_gutenberg_tiny" not in output and "zh_classics_tiny" not in output
    assert "No published model is downloaded yet" in output


def test_the_readme_states_the_embedded_models_size_that_list_shows():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    output = CliRunner().invoke(app, ["list"]).output
    sizes = {re.search(rf"^  {name} +\w+  ([\d.]+ MB),", output, re.MULTILINE).group(1)
             for name in ("en_gutenberg_tiny", "zh_classics_tiny")}
    assert len(sizes) == 1
    assert f"| {sizes.pop()} each, in the package |" in readme


@pytest.mark.parametrize("wrong", ["--options", "--weights", "damaged", "--precision"])
def test_embed_reports_a_wrong_model_option_in_one_line_without_a_traceback(tmp_path, wrong):
    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "elmo" / "allennlp"
    damaged = tmp_path / "damaged.hdf5"
    damaged.write_bytes((fixtures / "lm_weights.hdf5").read_bytes()[:2000])
    given = {"--options": str(fixtures / "options.json"), "--weights": str(fixtures / "lm_weights.hdf5")}
    named = {"--options": str(tmp_path / "nope.json"), "--weights": str(tmp_path / "nope.hdf5"), "damaged": str(damaged)}
    if wrong == "--precision":
        given["--precision"], named[wrong] = "fp16", "--precision"  # on a CPU
    else:
        given["--weights" if wrong == "damaged" else wrong] = named[wrong]
    (tmp_path / "in.txt").write_text("The cat sat .\n", encoding="utf-8")
    args = [arg for item in given.items() for arg in item]
    done = _cli("embed", str(tmp_path / "in.txt"), str(tmp_path / "out.hdf5"), *args, "--quiet")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("✘ ") and named[wrong] in done.stderr, done.stderr
    assert ("damaged" in done.stderr) == (wrong == "damaged")


def test_embed_leaves_a_published_models_urls_to_the_model_sources(tmp_path):
    """AllenNLP's URLs of the original model are not local paths to check: not downloaded, the one line says how."""
    urls = [f"https://allennlp.s3.amazonaws.com/models/elmo/2x4096_512_2048cnn_2xhighway/"
            f"elmo_2x4096_512_2048cnn_2xhighway_{name}" for name in ("options.json", "weights.hdf5")]
    (tmp_path / "in.txt").write_text("The cat sat .\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "spacy_elmo", "embed", str(tmp_path / "in.txt"), str(tmp_path / "out.hdf5"),
         "--options", urls[0], "--weights", urls[1], "--quiet"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "SPACY_ELMO_CACHE": str(tmp_path / "cache")},
    )
    assert done.returncode == 1 and done.stderr.startswith("✘ ") and done.stderr.count("\n") == 1, done.stderr
    assert "python -m spacy_elmo download original" in done.stderr and "not found" not in done.stderr


def _damaged_weights(folder: Path) -> Path:
    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "elmo" / "allennlp"
    damaged = folder / "damaged.hdf5"
    damaged.write_bytes((fixtures / "lm_weights.hdf5").read_bytes()[:2000])
    return damaged


@pytest.mark.parametrize("weights", ["missing", "damaged"])
def test_demo_reports_a_missing_or_damaged_weight_file_in_one_line(tmp_path, weights):
    options = Path(__file__).resolve().parents[1] / "fixtures" / "elmo" / "allennlp" / "options.json"
    path = tmp_path / "nope.hdf5" if weights == "missing" else _damaged_weights(tmp_path)
    done = CliRunner().invoke(app, ["demo", "--options", str(options), "--weights", str(path)])
    assert done.exit_code == 1 and isinstance(done.exception, SystemExit)
    errors = [line for line in done.output.splitlines() if line.startswith("✘ ")]
    assert len(errors) == 1 and str(path) in errors[0], done.output
    assert ("not found" in errors[0]) == (weights == "missing")


def _absent_device() -> str:
    """A CUDA device this machine lacks: any, without CUDA; else the one after the last."""
    return f"cuda:{torch.cuda.device_count()}" if torch.cuda.is_available() else "cuda"


@pytest.mark.parametrize("device", ["absent", "cdua", "meta"])
def test_embed_reports_a_device_this_machine_lacks_in_one_line_before_writing(tmp_path, device):
    device = _absent_device() if device == "absent" else device
    (tmp_path / "in.txt").write_text("The cat sat .\n", encoding="utf-8")
    done = CliRunner().invoke(app, ["embed", str(tmp_path / "in.txt"), str(tmp_path / "out.hdf5"), "--device", device])
    assert done.exit_code == 1 and isinstance(done.exception, SystemExit)
    assert done.output.startswith("✘ --device: ") and done.output.count("\n") == 1, done.output
    assert repr(device) in done.output
    assert not (tmp_path / "out.hdf5").exists()


@pytest.mark.slow
def test_embed_under_torchrun_reports_a_device_this_machine_lacks_in_one_line_per_process(tmp_path):
    (tmp_path / "in.txt").write_text("The cat sat .\nA dog barked .\n", encoding="utf-8")
    command = torchrun("-m", "spacy_elmo", "embed", str(tmp_path / "in.txt"), str(tmp_path / "out-{shard}.hdf5"),
                       "--shard", "auto", "--device", "cuda" if not torch.cuda.is_available() else "cuda:99")
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode != 0
    errors = [line for line in output.splitlines() if line.startswith("✘ --device: ")]
    assert 1 <= len(errors) <= 2, output  # torchrun may stop the second process before it reports
    assert "spacy_elmo/" not in output, output  # torchrun's own report follows, but no frame of the package's code


# The command line with torch, spaCy, thinc and h5py made unimportable: a command that reaches any of them fails
# naming the blocked import, so a clean one-line error shows that the paths were checked before those imports.
WITHOUT_HEAVY_IMPORTS = textwrap.dedent(
    """
    import sys

    class Refuse:
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in ("torch", "spacy", "thinc", "h5py"):
                raise ImportError("BLOCKED import of " + name)

    sys.meta_path.insert(0, Refuse())
    from spacy_elmo.commands.cli import app
    app(sys.argv[1:], prog_name="spacy_elmo")
    """
)


def _cli_without_heavy_imports(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WITHOUT_HEAVY_IMPORTS, *args], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2], timeout=120)


@pytest.mark.parametrize(
    "args,named",
    [
        (["embed", "{tmp}/missing.txt", "{tmp}/out.hdf5"], "{tmp}/missing.txt"),
        (["embed", "{tmp}/in.txt", "{tmp}/a_file/out.hdf5"], "{tmp}/a_file"),
        (["embed", "{tmp}/in.txt", "{tmp}/out.hdf5", "--options", "{tmp}/no.json", "--weights", "{tmp}/in.txt"], "{tmp}/no.json"),
        (["embed", "{tmp}/in.txt", "{tmp}/out.hdf5", "--options", "{tmp}/in.txt", "--weights", "{tmp}/no.hdf5"], "{tmp}/no.hdf5"),
        (["demo", "--options", "{tmp}/in.txt", "--weights", "{tmp}/no.hdf5"], "{tmp}/no.hdf5"),
        (["init-config", "{tmp}/a_file/pretrain.cfg"], "{tmp}/a_file"),
        (["pretrain", "{tmp}/missing.cfg", "{tmp}/run"], "{tmp}/missing.cfg"),
        (["pretrain", "{tmp}/in.txt", "{tmp}/a_file"], "{tmp}/a_file"),
        (["plot-mix", "{tmp}/no_pipeline", "{tmp}/mix.png"], "{tmp}/no_pipeline"),
        (["plot-mix", "{tmp}", "{tmp}/a_file/mix.png"], "{tmp}/a_file"),
        (["plot-pretrain", "{tmp}/no_run", "{tmp}/curves.png"], "{tmp}/no_run"),
    ],
)
def test_a_wrong_path_is_one_line_naming_it_before_torch_or_spacy_is_imported(tmp_path, args, named):
    (tmp_path / "in.txt").write_text("The cat sat .\n", encoding="utf-8")
    (tmp_path / "a_file").write_text("not a folder\n", encoding="utf-8")
    done = _cli_without_heavy_imports(*(arg.format(tmp=tmp_path) for arg in args))
    assert done.returncode == 1 and "BLOCKED" not in done.stderr, done.stderr
    assert done.stderr.startswith("✘ ") and done.stderr.count("\n") == 1, done.stderr
    assert named.format(tmp=tmp_path) in done.stderr and not (tmp_path / "out.hdf5").exists()


def test_the_import_blocker_stops_a_command_whose_paths_are_right(tmp_path):
    """The check above could pass without its blocker: with good paths the same command reaches the blocked imports."""
    (tmp_path / "in.txt").write_text("The cat sat .\n", encoding="utf-8")
    done = _cli_without_heavy_imports("embed", str(tmp_path / "in.txt"), str(tmp_path / "out.hdf5"))
    assert done.returncode != 0 and "BLOCKED import of" in done.stderr, done.stderr
