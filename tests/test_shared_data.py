"""The research-only data sets: a test needing one skips, naming the folder, unless CI requires ../shared."""
import hashlib
import re

import pytest

from tests import conftest


@pytest.fixture
def no_shared(tmp_path, monkeypatch):
    monkeypatch.setattr(conftest, "SHARED", tmp_path / "shared")
    return tmp_path / "shared" / "data" / "conll2003"


def test_missing_data_set_skips_naming_its_folder(no_shared, monkeypatch):
    monkeypatch.delenv(conftest.REQUIRE_SHARED_VAR, raising=False)
    with pytest.raises(pytest.skip.Exception, match=str(no_shared)):
        conftest.shared_data("conll2003")


def test_missing_data_set_fails_when_ci_requires_it(no_shared, monkeypatch):
    monkeypatch.setenv(conftest.REQUIRE_SHARED_VAR, "1")
    with pytest.raises(pytest.fail.Exception, match=str(no_shared)):
        conftest.shared_data("conll2003")


def test_present_data_set_is_returned(tmp_path, monkeypatch):
    monkeypatch.setattr(conftest, "SHARED", tmp_path)
    (tmp_path / "data" / "sst").mkdir(parents=True)
    assert conftest.shared_data("sst") == tmp_path / "data" / "sst"


def test_bundled_reference_fixtures_are_those_their_readme_lists_with_licences():
    """Every file under tests/fixtures/elmo is listed, with its sha256, in the README that attributes it."""
    readme = (conftest.FIXTURE / "README.md").read_text(encoding="utf-8")
    listed = dict(reversed(line.split("  ")) for line in re.findall(r"^[0-9a-f]{64}  \S+$", readme, re.M))
    files = {p.relative_to(conftest.FIXTURE).as_posix(): p for p in conftest.FIXTURE.rglob("*") if p.is_file()}
    assert set(listed) == set(files) - {"README.md"}
    for name, digest in listed.items():
        assert hashlib.sha256(files[name].read_bytes()).hexdigest() == digest, name
    for folder in ("allennlp", "bilm-tf"):
        assert files[f"{folder}/LICENSE"].read_text(encoding="utf-8").lstrip().startswith("Apache License")
