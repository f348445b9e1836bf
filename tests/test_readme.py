"""The README's and docs/'s code runs as written, their configs name real settings, and the API tables list the code's.

Every ```python block of README.md and docs/*.md runs as copied, page by page in order (one namespace per page, as a
reader runs them), in a new process in an empty folder, offline, with the published models the page downloads in its
bash blocks in the model cache (the AllenNLP fixture standing in for them). The blocks use public names only, so these
tests do too.
"""
import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Set

import pytest
from spacy.cli.init_config import fill_config
from spacy.language import Language
from spacy.util import registry
from thinc.api import Config

from spacy_elmo import ElmoEmbedder

from tests.conftest import stand_in_download

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
SHAPE_COMMENT = re.compile(r"^(?P<expr>\S.*\.shape)\s+# \((?P<shape>[\d, ]+)\)")
COSINE_COMMENT = re.compile(r"^(?P<expr>\S.*\.similarity\(.*\))\s+# (?P<cosine>\d\.\d\d):")


def _blocks(page: Path, kind: str) -> List[str]:
    return re.findall(rf"```{kind}\n(.*?)```", page.read_text(encoding="utf-8"), re.S)


def _quick_start() -> str:
    return next(block for block in _blocks(README, "python") if "doc._.elmo.shape" in block)


def test_quick_start_shape_and_cosine_comments_are_true():
    namespace: dict = {}
    checked = []
    for line in _quick_start().splitlines():
        shape, cosine = SHAPE_COMMENT.match(line), COSINE_COMMENT.match(line)
        if shape:
            expected = tuple(int(n) for n in shape["shape"].split(","))
            assert eval(shape["expr"], namespace) == expected, line
            checked.append(shape["expr"])
        elif cosine:
            assert f"{eval(cosine['expr'], namespace):.2f}" == cosine["cosine"], line
            checked.append(cosine["cosine"])
        else:
            exec(line.split("#")[0].rstrip() or "pass", namespace)
    assert checked == ["doc._.elmo.shape", "0.89", "0.33", 'zh("宝玉在园中读书。")._.elmo.shape']



def test_the_readme_is_one_page_whose_set_up_is_two_commands():
    """A newcomer skims one page (150 lines at most); its set-up block is two commands (continued lines joined,
    comments left out): the package with a demo, and the tests with the linter."""
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 150
    set_up = _blocks(README, "bash")[0].replace("\\\n", " ")
    commands = [line for line in set_up.splitlines() if line.strip() and not line.startswith("#")]
    assert len(commands) == 2 and commands[0].endswith("python -m spacy_elmo demo"), commands


# Run in a new process: a page's python blocks in order, in one namespace, as a reader runs them.
READER = """
import json, sys
namespace = {"__name__": "__docs__"}
for number, block in enumerate(json.load(open(sys.argv[1], encoding="utf-8"))):
    exec(compile(block, f"{sys.argv[2]}, python block {number}", "exec"), namespace)
"""
# Every connection refused: a block that reaches for the network fails.
OFFLINE = {"http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9", "no_proxy": ""}


@pytest.mark.slow
@pytest.mark.parametrize("page", [page for page in PAGES if _blocks(page, "python")], ids=lambda page: page.name)
def test_python_blocks_run_as_copied_in_an_empty_folder_offline(page: Path, tmp_path: Path):
    """Each page's blocks in a new process, from an empty folder of the reader's own (nothing of the repository
    beside it), offline. The published models that the page's bash blocks download (``python -m spacy_elmo download
    NAME``, which a block needing one has just above it) are in the model cache as a download leaves them, the
    AllenNLP test model standing in."""
    folder, cache = tmp_path / "reader", tmp_path / "cache"
    folder.mkdir()
    for name in re.findall(r"python -m spacy_elmo download (\w+)", "".join(_blocks(page, "bash"))):
        stand_in_download(cache, name)
    blocks = tmp_path / "blocks.json"
    blocks.write_text(json.dumps(_blocks(page, "python")), encoding="utf-8")
    env = {**os.environ, **OFFLINE, "HOME": str(tmp_path), "SPACY_ELMO_CACHE": str(cache)}
    run = subprocess.run([sys.executable, "-c", READER, str(blocks), page.name], cwd=folder, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]


def test_every_page_runs_or_has_no_python():
    """A page whose python blocks are not found (a misspelt fence) would pass the test above unseen."""
    for page in PAGES:
        fences = re.findall(r"^```(\S*)$", page.read_text(encoding="utf-8"), re.M)
        openings = fences[0::2]
        assert set(openings) <= {"bash", "python", "ini"}, (page.name, openings)


def _parse_fragment(block: str) -> Config:
    """A config excerpt as a Config: the parent sections it leaves out (``[components]``) declared empty."""
    names = re.findall(r"^\[([^\]]+)\]", block, re.M)
    parents = {".".join(name.split(".")[:depth]) for name in names for depth in range(1, name.count(".") + 1)}
    headers = "".join(f"[{parent}]\n" for parent in sorted(parents - set(names), key=len))
    return Config().from_str(headers + block, interpolate=False)


def _architecture_sections(config: Config, path: str = ""):
    for key, value in config.items():
        if isinstance(value, dict):
            if "@architectures" in value:
                yield f"{path}{key}", value
            yield from _architecture_sections(value, f"{path}{key}.")


@pytest.mark.parametrize("page", [page for page in PAGES if _blocks(page, "ini")], ids=lambda page: page.name)
def test_config_blocks_use_registered_settings(page: Path):
    """Each architecture block of a config shown in the docs is registered and sets only what its function takes."""
    sections = 0
    for block in _blocks(page, "ini"):
        config = _parse_fragment(block)
        for name, section in _architecture_sections(config):
            function = registry.get("architectures", section["@architectures"])
            parameters = set(inspect.signature(function).parameters)
            assert set(section) - {"@architectures"} <= parameters, (name, set(section) - parameters)
            sections += 1
        for name, component in config.get("components", {}).items():
            if component.get("factory") == "elmo":
                known = set(Language.get_factory_meta("elmo").default_config) | {"factory"}
                assert set(component) <= known, (name, set(component) - known)
    assert sections > 0


SHIPPED_CONFIGS = sorted((ROOT / "spacy_elmo" / "pipeline" / "configs").glob("*.cfg"))
INI_BLOCKS = [(page, number, block) for page in PAGES for number, block in enumerate(_blocks(page, "ini"))]
INI_IDS = [f"{page.name}-{number}" for page, number, _ in INI_BLOCKS]


def _settings_of(config: dict, path: str = ""):
    """Every setting of a (nested) config as its dotted path and value."""
    for key, value in config.items():
        if isinstance(value, dict):
            yield from _settings_of(value, f"{path}{key}.")
        else:
            yield f"{path}{key}", value


@pytest.mark.parametrize("page, number, block", INI_BLOCKS, ids=INI_IDS)
def test_config_blocks_hold_no_comment_inside_a_value(page: Path, number: int, block: str):
    """spaCy's config format has no trailing comments: ``x = false  # why`` reads as the string ``'false  # why'``."""
    read = _parse_fragment(block)
    assert [(path, value) for path, value in _settings_of(read) if isinstance(value, str) and "#" in value] == []


def _base_config(fragment: Config) -> Path:
    """The shipped example config whose pipeline holds every component the fragment sets."""
    named = set(fragment.get("components", {}))
    for path in SHIPPED_CONFIGS:
        if named <= set(Config().from_disk(path, interpolate=False)["nlp"]["pipeline"]):
            return path
    raise AssertionError(f"no config in spacy_elmo/pipeline/configs has the components {sorted(named)}")


@pytest.mark.parametrize("page, number, block", INI_BLOCKS, ids=INI_IDS)
def test_config_blocks_fill_as_part_of_a_shipped_config(page: Path, number: int, block: str, tmp_path: Path):
    """A config excerpt, merged into the shipped config it belongs to, passes ``spacy init fill-config``, which
    builds the pipeline and validates every setting's type; the filled config keeps the excerpt's settings."""
    fragment = _parse_fragment(block)
    merged = Config().from_disk(_base_config(fragment), interpolate=False).merge(fragment)
    merged.to_disk(tmp_path / "merged.cfg")
    fill_config(tmp_path / "filled.cfg", tmp_path / "merged.cfg", silent=True)
    kept = dict(_settings_of(Config().from_disk(tmp_path / "filled.cfg", interpolate=False)))
    assert {path: kept.get(path) for path, _ in _settings_of(fragment)} == dict(_settings_of(fragment))


def _api_tables() -> Dict[str, Set[str]]:
    """The first-column names of each table of docs/api.md, by the section heading above it."""
    tables: Dict[str, Set[str]] = {}
    heading = ""
    for line in (ROOT / "docs" / "api.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            heading = line[3:].replace("`", "").strip()
        match = re.match(r"^\| `(\w+)` \|", line)
        if match:
            tables.setdefault(heading, set()).add(match[1])
    return tables


def _settings(heading: str) -> Set[str]:
    """What the code takes for the thing a docs/api.md section is about."""
    if heading == "The elmo factory":
        return set(Language.get_factory_meta("elmo").default_config)
    if heading == "ElmoEmbedder":
        return set(inspect.signature(ElmoEmbedder.__init__).parameters) - {"self"}
    return set(inspect.signature(registry.get("architectures", heading)).parameters)


@pytest.mark.parametrize(
    "heading",
    ["spacy_elmo.ElmoBiLm.v2", "spacy_elmo.ElmoListener.v1", "spacy_elmo.ElmoEmbedding.v2", "The elmo factory",
     "ElmoEmbedder"],
)
def test_api_tables_list_every_setting(heading: str):
    assert _api_tables()[heading] == _settings(heading)


def test_every_exported_name_is_in_the_api_page():
    """A name ``from spacy_elmo import *`` gives is public, so docs/api.md names it (in backquotes)."""
    import spacy_elmo

    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    assert [name for name in spacy_elmo.__all__ if f"`{name}`" not in text] == []


def _anchors(page: Path) -> Set[str]:
    """GitHub's anchors for the headings of a page (code blocks left out)."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    headings = (line.lstrip("#").strip().lower() for line in text.splitlines() if line.startswith("#"))
    return {re.sub(r"[^\w\- ]", "", heading).replace(" ", "-") for heading in headings}


def test_relative_links_point_to_files():
    for page in [*PAGES, ROOT / "CONTRIBUTING.md", ROOT / "BENCHMARKS.md"]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if not target.startswith(("http://", "https://")):
                assert (page.parent / target).exists(), (page.name, target)


def test_links_into_the_readme_and_docs_name_their_headings():
    for page in [*PAGES, ROOT / "CONTRIBUTING.md", ROOT / "BENCHMARKS.md", ROOT / "MODEL_CARD.md"]:
        for target, anchor in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", page.read_text(encoding="utf-8")):
            linked = (page.parent / target).resolve() if target else page
            if linked in PAGES:
                assert anchor in _anchors(linked), (page.name, target, anchor)
