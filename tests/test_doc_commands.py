"""Every shell command of README.md and docs/*.md runs as copied, from a clean clone, and what it writes is ignored.

The commands are taken from the pages' ```bash blocks (``a && b`` is two commands, a trailing ``&`` and the
comments dropped, ``\\`` continuations joined). CHECKS says how each is checked; a documented command missing
from it, or an entry no page documents any more, fails the first test. The commands run with bash in a copy of
the files git tracks or would track (a clean clone, ``git init``-ed so that .gitignore applies), in the order of CHECKS, beside the
inputs a reader brings (INPUTS: a text corpus, the AllenNLP fixture as ``options.json`` + ``weights.hdf5``...),
with ``HOME`` in the temporary folder, so that ``~`` and the model cache are there. Afterwards every file they
wrote must be ignored by the clone's .gitignore.
"""
import gzip
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Set

import pytest

from tests.conftest import ALLENNLP, FIXTURE

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TRAIN_TEXT = FIXTURE / "bilm-tf" / "train" / "data.txt"
PRETRAIN_BUDGET = "--training.max_steps 2 --training.eval_every 2 --training.checkpoint_every 2"
PIP_DRY_RUN = "--dry-run --no-index --no-build-isolation --quiet"
# Published models served by the stand-in server (tests/sources/test_download.py's way): the AllenNLP fixture.
STAND_IN_MODELS = ("original", "small")
SITECUSTOMIZE = """
import json, os
from spacy_elmo.sources import catalog

for name, urls in json.loads(os.environ["STAND_IN_CATALOG"]).items():
    catalog.CATALOG[name] = catalog.ModelEntry(name, "allennlp", urls, *["stand-in"] * 5)
"""


@dataclass(frozen=True)
class Check:
    """How one documented command is checked.

    ``way``: ``"as written"``; ``"stand-in server"`` (as written, the published files served from 127.0.0.1);
    ``"budget"`` (as written plus ``extra``, a training budget: as written it trains for hours); ``"pip dry run"``
    (``pip install`` with ``PIP_DRY_RUN``: resolves against what is installed, installs nothing, as installing
    would change this environment); ``"help"`` (its ``--help``, a launcher dropped: it needs a GPU, several
    processes, the network or days); ``"project dry run"`` (``spacy project run ... --dry``: the workflow
    exists, nothing runs); ``"elsewhere"`` (``extra`` names the file and test that run it).
    """

    way: str
    slow: bool = False
    extra: str = ""


CHECKS: Dict[str, Check] = {
    # README.md: set-up, published models
    "nvidia-smi -L >/dev/null 2>&1 || pip install -c constraints.txt torch --index-url https://download.pytorch.org/whl/cpu": Check("pip dry run"),
    "pip install -c constraints.txt -e .": Check("pip dry run"),
    "python -m spacy_elmo demo": Check("as written"),
    'pip install -c constraints.txt -e ".[test]"': Check("pip dry run"),
    "python -m pytest -q tests": Check("elsewhere", extra=".ci/run::python -m pytest -q tests"),
    "ruff check .": Check("elsewhere", extra=".ci/run::ruff check ."),
    "python -m spacy_elmo download original": Check("stand-in server"),
    "python -m spacy_elmo download small --from ~/elmo_small/": Check("stand-in server"),
    "python -m spacy_elmo embed corpus.txt out.h5 --model original": Check("stand-in server"),
    # docs/cli.md
    "python -m spacy_elmo demo --options options.json --weights weights.hdf5": Check("as written"),
    "python -m spacy_elmo list": Check("as written"),
    "python -m spacy_elmo list de": Check("as written"),
    "python -m spacy_elmo list --downloaded": Check("as written"),
    "python -m spacy_elmo download manylangs-de": Check("help"),
    "python -m spacy_elmo embed corpus.txt int8.hdf5 --layers top --precision int8": Check("as written"),
    "python -m spacy_elmo init-config --preset tiny pretrain.cfg": Check("as written"),
    'python -m spacy_elmo pretrain pretrain.cfg out/ --paths.train "corpus/*.txt.gz" --paths.dev heldout.txt.gz '
    "--training.max_steps 4000": Check("budget", extra=PRETRAIN_BUDGET),
    "python -m spacy_elmo plot-pretrain out/ curves.png": Check("as written"),
    # docs/pretraining.md
    'torchrun --nproc_per_node 2 -m spacy_elmo pretrain pretrain.cfg out/ --paths.train "corpus/*.txt.gz" '
    "--training.max_tokens 5000000": Check("help"),
    "python -m spacy_elmo pretrain configs/pretrain_zh_classics_tiny.cfg runs/zh_classics_tiny --training.max_steps 2100":
        Check("help"),
    "torchrun --nnodes 2 --node-rank 0 --nproc_per_node 1 --master-addr 10.0.0.1 --master-port 29500 -m spacy_elmo "
    'pretrain pretrain.cfg /shared/out --paths.train "corpus/*.txt.gz"': Check("help"),
    "torchrun --nnodes 2 --node-rank 1 --nproc_per_node 1 --master-addr 10.0.0.1 --master-port 29500 -m spacy_elmo "
    'pretrain pretrain.cfg /shared/out --paths.train "corpus/*.txt.gz"': Check("help"),
    # docs/usage.md
    "python -m spacy project run convert": Check("as written"),
    "python -m spacy_elmo embed corpus.txt corpus.hdf5": Check("as written"),
    "python -m spacy_elmo embed corpus.txt top.hdf5 --layers top --options options.json --weights weights.hdf5":
        Check("as written"),
    "python -m spacy_elmo embed docs.jsonl mix.hdf5 --jsonl --layers mix --mix-weights 0.2,0.5,0.3 --gamma 1.2":
        Check("as written"),
    "python -m spacy_elmo embed weibo.txt zh.hdf5 --lang zh": Check("as written"),
    "python -m spacy_elmo embed corpus.txt part-0.hdf5 --shard 0/2": Check("as written"),
    "python -m spacy_elmo embed corpus.txt part-1.hdf5 --shard 1/2": Check("as written"),
    'torchrun --nproc_per_node 4 -m spacy_elmo embed corpus.txt "parts/part-{shard}.hdf5" --shard auto --device cuda':
        Check("help"),
    "python -m spacy train spacy_elmo/pipeline/configs/ner.cfg --output training/ner --paths.train "
    "corpus/sample/ner/train.spacy --paths.dev corpus/sample/ner/dev.spacy": Check("as written", slow=True),
    "mkdir -p packages wheels": Check("as written"),
    "python -m spacy package training/ner/model-best packages --name ner_elmo --version 0.0.1 --build wheel":
        Check("as written", slow=True),
    "pip wheel --no-deps . -w wheels/": Check("elsewhere", extra="tests/pipeline/test_packaging.py::pip\", \"wheel"),
    "cp packages/en_ner_elmo-0.0.1/dist/*.whl wheels/": Check("as written", slow=True),
    "pip install en_ner_elmo --find-links wheels/": Check(
        "elsewhere", extra="tests/pipeline/test_packaging.py::test_a_packaged_pipeline_installs_beside_spacy_elmo"),
    "python -c \"import spacy; spacy.load('en_ner_elmo')\"": Check(
        "elsewhere", extra="tests/pipeline/test_packaging.py::test_a_packaged_pipeline_installs_beside_spacy_elmo"),
    # docs/usage.md: the example web app
    'pip install -c constraints.txt -e ".[serve]"': Check("pip dry run"),
    "uvicorn serve:app --app-dir examples --port 8000": Check(
        "elsewhere", extra="tests/examples/test_serve.py::\"serve:app\", \"--app-dir\", \"examples\""),
    "curl -s localhost:8000/embed -H 'content-type: application/json' -d '{\"text\": \"The cat sat on the mat.\"}'":
        Check("elsewhere", extra="tests/examples/test_serve.py::.post(\"/embed\", json={\"text\": text"),
    # docs/cli.md, on the pipeline docs/usage.md trains
    'pip install -c constraints.txt -e ".[plot]"': Check("pip dry run"),
    "python -m spacy_elmo plot-mix training/ner/model-best mix.png": Check("as written", slow=True),
    # docs/project.md
    "python -m spacy project run all": Check("elsewhere", extra="tests/test_project.py::test_project_run_all_on_the_sample"),
    "cat metrics/sample/comparison.md": Check("elsewhere", extra="tests/test_project.py::comparison.md"),
    "python -m spacy project run ner": Check("project dry run"),
    "python -m spacy project run tagger": Check("project dry run"),
    "python -m spacy project run textcat": Check("project dry run"),
    "python -m spacy project run weibo": Check("project dry run"),
    "python -m spacy project run ner . --vars.train_pct 10": Check("project dry run"),
    "cat metrics/full/comparison.md": Check("elsewhere", extra="tests/test_project.py::comparison.md"),
}


def documented_commands() -> List[str]:
    """The commands of every ```bash block of README.md and docs/*.md, in page order, each once."""
    commands: List[str] = []
    for page in PAGES:
        for block in re.findall(r"```bash\n(.*?)```", page.read_text(encoding="utf-8"), re.S):
            for line in re.sub(r"\\\n\s*", "", block).splitlines():
                line = re.sub(r"(^|\s+)#\s.*$", "", line).strip()
                for command in filter(None, (part.strip().removesuffix("&").strip() for part in line.split(" && "))):
                    if command not in commands:
                        commands.append(command)
    return commands


def test_every_documented_command_has_a_check_and_every_check_a_command():
    assert sorted(documented_commands()) == sorted(CHECKS)


@pytest.mark.parametrize("command", [c for c, check in CHECKS.items() if check.way == "elsewhere"])
def test_commands_checked_elsewhere_name_a_file_that_runs_them(command: str):
    path, needle = CHECKS[command].extra.split("::")
    assert needle in (ROOT / path).read_text(encoding="utf-8"), (command, path, needle)


def runnable(command: str, check: Check) -> str:
    """The command line a check runs for a documented command (see :class:`Check`)."""
    if check.way == "pip dry run":
        return command.replace("pip install ", f"pip install {PIP_DRY_RUN} ", 1)
    if check.way == "help":
        return re.sub(r"^torchrun( --\S+ \S+)* -m ", "python -m ", command) + " --help"
    if check.way == "project dry run":
        return f"{command} --dry"
    return f"{command} {check.extra}".strip()


def write_inputs(clone: Path, home: Path) -> None:
    """What the documented commands expect a reader to bring: texts to embed, a model's two files, a pretraining
    corpus (bilm-tf's training fixture), files of ``small`` fetched by hand into ``~/elmo_small/``."""
    lines = [f"Line {k} of the corpus , with a few words ." for k in range(20)]
    (clone / "corpus.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (clone / "docs.jsonl").write_text("".join(json.dumps({"text": line}) + "\n" for line in lines[:5]))
    (clone / "weibo.txt").write_text("宝玉在园中读书。\n我爱北京。\n", encoding="utf-8")
    for folder in (clone, home / "elmo_small"):
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(ALLENNLP / "options.json", folder / "options.json")
        shutil.copy(ALLENNLP / "lm_weights.hdf5", folder / "weights.hdf5")
    text = TRAIN_TEXT.read_bytes()
    (clone / "corpus").mkdir()
    (clone / "corpus" / "train.txt.gz").write_bytes(gzip.compress(text))
    (clone / "heldout.txt.gz").write_bytes(gzip.compress(text))


def clean_clone(target: Path) -> Path:
    """This checkout's files that git tracks or would track (not ignored), as a clone would hold them once they are
    committed, in ``target``, a fresh git repository: no build or run outputs."""
    listed = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                            check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        if (ROOT / name).is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, target / name)
    subprocess.run(["git", "init", "-q"], cwd=target, check=True)
    return target


def not_ignored(clone: Path) -> Set[str]:
    """The clone's files that its .gitignore does not ignore."""
    listed = subprocess.run(["git", "ls-files", "-z", "-o", "--exclude-standard"], cwd=clone, capture_output=True,
                            check=True).stdout
    return set(filter(None, listed.decode().split("\0")))


@pytest.fixture()
def stand_in_server() -> Iterator[Dict[str, Dict[str, str]]]:
    """A local HTTP server with the AllenNLP fixture's two files; the catalogue entries of STAND_IN_MODELS."""
    files = {"/options.json": (ALLENNLP / "options.json").read_bytes(),
             "/weights.hdf5": (ALLENNLP / "lm_weights.hdf5").read_bytes()}

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            data = files.get(self.path)
            if data is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    yield {name: {"options": f"{url}/options.json", "weights": f"{url}/weights.hdf5"} for name in STAND_IN_MODELS}
    httpd.shutdown()
    httpd.server_close()


def run_documented(tmp_path: Path, catalog: Dict[str, Dict[str, str]], slow: bool) -> None:
    """Run the commands of CHECKS that run here (the slow ones only if ``slow``) in a clean clone, in order; then
    check that what they wrote is git-ignored."""
    clone, home, stand_in = clean_clone(tmp_path / "clone"), tmp_path / "home", tmp_path / "stand_in"
    write_inputs(clone, home)
    stand_in.mkdir()
    (stand_in / "sitecustomize.py").write_text(SITECUSTOMIZE)
    before = not_ignored(clone)
    env = {key: value for key, value in os.environ.items() if key not in ("SPACY_ELMO_CACHE", "XDG_CACHE_HOME")}
    env.update(HOME=str(home), STAND_IN_CATALOG=json.dumps(catalog), PATH=f"{Path(sys.executable).parent}:{env['PATH']}")
    for command, check in CHECKS.items():
        if check.way == "elsewhere" or (check.slow and not slow):
            continue
        extra_path = {"PYTHONPATH": str(stand_in)} if check.way == "stand-in server" else {}
        line = runnable(command, check)
        done = subprocess.run(["bash", "-c", line], cwd=clone, env={**env, **extra_path}, capture_output=True,
                              text=True, timeout=1800)
        assert done.returncode == 0, f"{line}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert not_ignored(clone) - before == set()


@pytest.mark.slow
def test_documented_commands_run_and_write_only_ignored_files(tmp_path, stand_in_server):
    run_documented(tmp_path, stand_in_server, slow=False)


@pytest.mark.slow
def test_documented_commands_that_train_and_package_run_too(tmp_path, stand_in_server):
    run_documented(tmp_path, stand_in_server, slow=True)
