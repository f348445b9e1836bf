"""Downloading named models from a local HTTP server: resume, damage, 404, stalls, and loading by name."""
import http.server
import json
import shutil
import threading
import time
import zipfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from spacy_elmo import ElmoEmbedder
from spacy_elmo.sources.catalog import CATALOG, ModelEntry
from spacy_elmo.commands.cli import app
from spacy_elmo.sources.download import (
    DownloadError,
    NotDownloadedError,
    download,
    fetch,
    resolve_model,
    sha256_of,
)
from spacy_elmo.formats.manylangs import convert

from tests.conftest import ALLENNLP

MANYLANGS = Path(__file__).resolve().parents[1] / "data" / "manylangs_tiny"


class Handler(http.server.BaseHTTPRequestHandler):
    """Serves ``server.files`` (path -> bytes) with Range support; ``server.mode`` misbehaves on purpose:
    "cut" sends half of a body then closes, "stall" sends half then goes silent."""

    def log_message(self, *args):
        pass

    def do_GET(self):
        data = self.server.files.get(self.path)
        if data is None:
            self.send_error(404)
            return
        start = 0
        if self.headers.get("Range"):
            start = int(self.headers["Range"].split("=")[1].rstrip("-"))
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        body = data[start:]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        mode = self.server.modes.pop(self.path, None)
        if mode in ("cut", "stall"):
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            if mode == "stall":
                time.sleep(3)
            return
        self.wfile.write(body)


@pytest.fixture()
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.files, httpd.modes = {}, {}
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    httpd.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def _allennlp_entry(server, name="tiny-allennlp"):
    server.files["/o.json"] = (ALLENNLP / "options.json").read_bytes()
    server.files["/w.hdf5"] = (ALLENNLP / "lm_weights.hdf5").read_bytes()
    return {name: ModelEntry(name, "allennlp", {"options": f"{server.url}/o.json", "weights": f"{server.url}/w.hdf5"},
                             "test", "test", "test", "test", "test")}


def test_download_then_load_by_name_gives_the_files_vectors(server, tmp_path, monkeypatch):
    catalog = _allennlp_entry(server)
    options, weights = download("tiny-allennlp", cache=tmp_path, progress=False, timeout=2, catalog=catalog)
    assert sha256_of(weights) == sha256_of(ALLENNLP / "lm_weights.hdf5")
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path))
    monkeypatch.setattr("spacy_elmo.sources.download.get_entry", lambda name, catalog_=None: catalog["tiny-allennlp"])
    by_name = ElmoEmbedder("tiny-allennlp").embed_sentence(["The", "cat", "."])
    by_files = ElmoEmbedder(ALLENNLP / "options.json", ALLENNLP / "lm_weights.hdf5").embed_sentence(["The", "cat", "."])
    np.testing.assert_array_equal(by_name, by_files)


def test_interrupted_transfer_resumes_where_it_stopped(server, tmp_path):
    server.files["/f"] = bytes(range(256)) * 4000
    server.modes["/f"] = "cut"
    with pytest.raises(DownloadError, match="ended early|stopped"):
        fetch(f"{server.url}/f", tmp_path / "f", timeout=2, progress=False)
    part = tmp_path / "f.part"
    assert 0 < part.stat().st_size < len(server.files["/f"]) and not (tmp_path / "f").exists()
    fetch(f"{server.url}/f", tmp_path / "f", timeout=2, progress=False)
    assert (tmp_path / "f").read_bytes() == server.files["/f"] and not part.exists()


def test_a_server_that_stops_answering_times_out(server, tmp_path):
    server.files["/f"] = b"x" * 200_000
    server.modes["/f"] = "stall"
    with pytest.raises(DownloadError, match="run the same command again|Run the same command again"):
        fetch(f"{server.url}/f", tmp_path / "f", timeout=0.5, progress=False)
    assert not (tmp_path / "f").exists()


def test_404_names_the_url(server, tmp_path):
    with pytest.raises(DownloadError, match="HTTP 404"):
        fetch(f"{server.url}/missing", tmp_path / "f", timeout=2, progress=False)


def test_no_server_is_a_clear_error(tmp_path):
    with pytest.raises(DownloadError, match="Cannot reach"):
        fetch("http://127.0.0.1:9/x", tmp_path / "f", timeout=1, progress=False)


def test_a_damaged_download_is_removed_and_never_used(server, tmp_path):
    catalog = _allennlp_entry(server, "bad")
    data = bytearray(server.files["/w.hdf5"])
    data[len(data) // 2 : len(data) // 2 + 4096] = b"\xff" * 4096
    server.files["/w.hdf5"] = bytes(data[: len(data) - 1000])
    with pytest.raises(DownloadError, match="damaged"):
        download("bad", cache=tmp_path, progress=False, timeout=2, catalog=catalog)
    assert not (tmp_path / "bad" / "weights.hdf5").exists()
    with pytest.raises(NotDownloadedError, match="python -m spacy_elmo download bad"):
        resolve_model("bad", cache=tmp_path, catalog=catalog)


def test_a_file_changed_after_download_is_refused(server, tmp_path):
    catalog = _allennlp_entry(server)
    _, weights = download("tiny-allennlp", cache=tmp_path, progress=False, timeout=2, catalog=catalog)
    with open(weights, "r+b") as f:
        f.seek(100)
        f.write(b"\0")
    with pytest.raises(NotDownloadedError, match="--force"):
        resolve_model("tiny-allennlp", cache=tmp_path, catalog=catalog)


def test_manylangs_archive_is_converted_on_download(server, tmp_path):
    archive = tmp_path / "m.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in MANYLANGS.iterdir():
            zf.write(path, f"de.model/{path.name}")
    server.files["/142.zip"] = archive.read_bytes()
    catalog = {"manylangs-xx": ModelEntry("manylangs-xx", "manylangs", {"archive": f"{server.url}/142.zip"},
                                          "t", "t", "t", "t", "t")}
    options, weights = download("manylangs-xx", cache=tmp_path / "cache", progress=False, timeout=2, catalog=catalog)
    convert(MANYLANGS, tmp_path / "o.json", tmp_path / "w.hdf5")
    sentence = ["the", "cat", "sat"]
    np.testing.assert_array_equal(
        ElmoEmbedder(options, weights).embed_sentence(sentence),
        ElmoEmbedder(tmp_path / "o.json", tmp_path / "w.hdf5").embed_sentence(sentence),
    )
    kept = sorted(p.name for p in (tmp_path / "cache" / "manylangs-xx").iterdir())
    assert kept == ["manifest.json", "options.json", "weights.hdf5"]  # the archive and extracted files are gone


def test_cli_download_and_missing_model_messages(server, tmp_path, monkeypatch):
    catalog = _allennlp_entry(server, "small")
    monkeypatch.setattr("spacy_elmo.sources.catalog.CATALOG", catalog)
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path))
    runner = CliRunner()
    missing = runner.invoke(app, ["embed", "in.txt", "out.h5", "--model", "small"])
    assert missing.exit_code == 1 and "python -m spacy_elmo download small" in missing.output
    done = runner.invoke(app, ["download", "small", "--quiet", "--timeout", "2"])
    assert done.exit_code == 0, done.output
    listed = runner.invoke(app, ["list"])
    assert "* small" in listed.output
    server.files.clear()
    again = runner.invoke(app, ["download", "small", "--quiet"])  # already there: no network needed
    assert again.exit_code == 0, again.output


def test_pipeline_component_takes_a_model_name(server, tmp_path, monkeypatch):
    import spacy
    from confection import ConfigValidationError

    catalog = _allennlp_entry(server, "small")
    monkeypatch.setattr("spacy_elmo.sources.catalog.CATALOG", catalog)
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path))
    nlp = spacy.blank("en")
    with pytest.raises(ConfigValidationError, match="'small' is not the name of a downloaded published model"):
        nlp.add_pipe("elmo", config={"model": "small"})
    download("small", progress=False, timeout=2)
    nlp.add_pipe("elmo", config={"model": "small"})
    doc = nlp("The cat sat .")
    expected = ElmoEmbedder(ALLENNLP / "options.json", ALLENNLP / "lm_weights.hdf5").embed_sentence([t.text for t in doc])
    np.testing.assert_allclose(doc._.elmo, expected[-1], atol=1e-5)
    # The same name in the architecture block, as the project's `--vars.elmo_options small` puts it there.
    block = {"@architectures": "spacy_elmo.ElmoBiLm.v2", "options_file": "small", "weight_file": None}
    in_block = spacy.blank("en")
    in_block.add_pipe("elmo", config={"model": block})
    np.testing.assert_allclose(in_block("The cat sat .")._.elmo, expected[-1], atol=1e-5)
    with pytest.raises(ConfigValidationError, match="'smal' is not an options.json file, or the name of a downloaded"):
        spacy.blank("en").add_pipe("elmo", config={"model": {**block, "options_file": "smal"}})


# --- files fetched by hand, and failed downloads ---------------------------------------------------------------

UNREACHABLE = "http://127.0.0.1:9"  # nothing listens there: a test that fetched would fail


def _offline_entry(kind="allennlp", name="small"):
    urls = ({"options": f"{UNREACHABLE}/elmo_small_options.json", "weights": f"{UNREACHABLE}/elmo_small_weights.hdf5"}
            if kind == "allennlp" else {"archive": f"{UNREACHABLE}/142.zip"})
    return {name: ModelEntry(name, kind, urls, "t", "t", "t", "t", "t")}


def _two_files(folder: Path, options_name="options.json", weights_name="lm_weights.hdf5") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(ALLENNLP / "options.json", folder / options_name)
    shutil.copy(ALLENNLP / "lm_weights.hdf5", folder / weights_name)
    return folder


@pytest.mark.parametrize("given", ["folder", "files"])
def test_allennlp_files_fetched_by_hand_are_registered_under_their_name(tmp_path, given):
    folder = _two_files(tmp_path / "fetched", "elmo_small_options.json", "x.h5")
    local = [folder] if given == "folder" else [folder / "x.h5", folder / "elmo_small_options.json"]
    catalog = _offline_entry()
    download("small", cache=tmp_path / "cache", progress=False, catalog=catalog, local=local)
    options, weights = resolve_model("small", cache=tmp_path / "cache", catalog=catalog)  # verified by its manifest
    assert sha256_of(weights) == sha256_of(ALLENNLP / "lm_weights.hdf5")
    assert sha256_of(options) == sha256_of(ALLENNLP / "options.json")
    manifest = json.loads((tmp_path / "cache" / "small" / "manifest.json").read_text())
    assert manifest["sources"]["weights.hdf5"] == (folder / "x.h5").resolve().as_uri()


def test_the_publishers_file_name_picks_among_several(tmp_path):
    folder = _two_files(tmp_path / "fetched", "elmo_small_options.json")
    (folder / "notes.json").write_text("{}")
    download("small", cache=tmp_path / "cache", progress=False, catalog=_offline_entry(), local=[folder])
    assert sha256_of(tmp_path / "cache" / "small" / "options.json") == sha256_of(ALLENNLP / "options.json")


def test_a_folder_with_two_candidate_options_files_is_refused(tmp_path):
    folder = _two_files(tmp_path / "fetched")
    (folder / "notes.json").write_text("{}")
    with pytest.raises(DownloadError, match=r"More than one \.json file for the options of 'small'.*notes\.json"):
        download("small", cache=tmp_path / "cache", progress=False, catalog=_offline_entry(), local=[folder])
    assert not (tmp_path / "cache" / "small").exists()


def test_damaged_files_fetched_by_hand_are_refused_and_not_kept(tmp_path):
    folder = _two_files(tmp_path / "fetched")
    data = bytearray((folder / "lm_weights.hdf5").read_bytes())
    data[len(data) // 2 : len(data) // 2 + 4096] = b"\xff" * 4096
    (folder / "lm_weights.hdf5").write_bytes(bytes(data))
    with pytest.raises(DownloadError, match=f"damaged.*Fetch the files again from {UNREACHABLE}/elmo_small_options"):
        download("small", cache=tmp_path / "cache", progress=False, catalog=_offline_entry(), local=[folder])
    assert not (tmp_path / "cache" / "small").exists()
    assert (folder / "lm_weights.hdf5").read_bytes() == bytes(data)  # the user's own copy is left as it was


@pytest.mark.parametrize("given", ["zip", "folder"])
def test_manylangs_fetched_by_hand_is_converted(tmp_path, given):
    source = tmp_path / "unpacked"
    shutil.copytree(MANYLANGS, source / "de.model")
    if given == "zip":
        source = tmp_path / "142.zip"
        with zipfile.ZipFile(source, "w") as zf:
            for path in MANYLANGS.iterdir():
                zf.write(path, path.name)
    catalog = _offline_entry("manylangs", "manylangs-xx")
    options, weights = download("manylangs-xx", cache=tmp_path / "cache", progress=False, catalog=catalog, local=[source])
    convert(MANYLANGS, tmp_path / "o.json", tmp_path / "w.hdf5")
    sentence = ["the", "cat", "sat"]
    np.testing.assert_array_equal(
        ElmoEmbedder(options, weights).embed_sentence(sentence),
        ElmoEmbedder(tmp_path / "o.json", tmp_path / "w.hdf5").embed_sentence(sentence),
    )
    assert sorted(p.name for p in options.parent.iterdir()) == ["manifest.json", "options.json", "weights.hdf5"]
    assert source.exists()


def test_a_download_without_network_leaves_nothing_in_the_cache(tmp_path):
    with pytest.raises(DownloadError, match="Cannot reach"):
        download("small", cache=tmp_path, progress=False, timeout=1, catalog=_offline_entry())
    assert list(tmp_path.iterdir()) == []


def test_a_cut_download_keeps_only_what_resumes_it(server, tmp_path):
    catalog = _allennlp_entry(server)
    server.modes["/w.hdf5"] = "cut"
    with pytest.raises(DownloadError, match="ended early|stopped"):
        download("tiny-allennlp", cache=tmp_path, progress=False, timeout=2, catalog=catalog)
    assert [p.name for p in (tmp_path / "tiny-allennlp").iterdir()] == ["weights.hdf5.part"]


def test_cli_download_from_files_fetched_by_hand(tmp_path, monkeypatch):
    monkeypatch.setattr("spacy_elmo.sources.catalog.CATALOG", _offline_entry())
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path / "cache"))
    folder = _two_files(tmp_path / "fetched")
    runner = CliRunner()
    done = runner.invoke(app, ["download", "small", "--from", str(folder)])
    assert done.exit_code == 0, done.output
    assert "* small" in runner.invoke(app, ["list", "--downloaded"]).output
    wrong = runner.invoke(app, ["download", "small", "--force", "--from", str(tmp_path / "nowhere")])
    assert wrong.exit_code == 1 and "Not found" in wrong.output and "Traceback" not in wrong.output
    assert "* small" in runner.invoke(app, ["list", "--downloaded"]).output  # refused before the model was touched


def test_a_file_differing_from_the_published_checksum_is_refused(tmp_path):
    catalog = {"small": replace(_offline_entry()["small"], sha256={"weights": "0" * 64})}
    with pytest.raises(DownloadError, match=r"weights.hdf5 of 'small' does not have the published SHA-256 \(0{64}\)"):
        download("small", cache=tmp_path / "cache", progress=False, catalog=catalog, local=[_two_files(tmp_path / "f")])
    assert not (tmp_path / "cache" / "small").exists()


def test_files_of_another_model_are_refused(tmp_path):
    catalog = {"small": replace(_offline_entry()["small"], architecture=CATALOG["small"].architecture)}
    with pytest.raises(DownloadError, match=r"are of another model: lstm_dim 64 \(not 1024\), projection_dim 16 \(not 128\)"):
        download("small", cache=tmp_path / "cache", progress=False, catalog=catalog, local=[_two_files(tmp_path / "f")])
    assert not (tmp_path / "cache" / "small").exists()


def test_the_catalogue_states_the_published_architectures():
    # AllenNLP's model page: small is LSTM 1024 / output 128 with 1 highway; original 4096 / 512 with 2.
    assert CATALOG["small"].architecture == {"n_layers": 2, "lstm_dim": 1024, "projection_dim": 128, "n_filters": 2048,
                                             "n_highway": 1}
    assert CATALOG["pubmed"].architecture == CATALOG["original"].architecture == {
        "n_layers": 2, "lstm_dim": 4096, "projection_dim": 512, "n_filters": 2048, "n_highway": 2}


def test_without_network_download_names_the_way_from_files_fetched_by_hand(tmp_path):
    catalog = _offline_entry()
    with pytest.raises(DownloadError, match=r"Cannot reach.*download small --from PATH"):
        download("small", cache=tmp_path, progress=False, timeout=1, catalog=catalog)


def test_a_model_not_downloaded_names_download_with_and_without_network(tmp_path):
    catalog = _offline_entry()
    with pytest.raises(NotDownloadedError) as caught:
        resolve_model("small", cache=tmp_path, catalog=catalog)
    assert "python -m spacy_elmo download small " in str(caught.value)
    assert f"from {catalog['small'].urls['options']} and" in str(caught.value)
    assert str(caught.value).endswith("download small --from PATH)")


def test_a_changed_cached_model_names_force_and_from(server, tmp_path):
    catalog = _allennlp_entry(server)
    _, weights = download("tiny-allennlp", cache=tmp_path, progress=False, timeout=2, catalog=catalog)
    weights.write_bytes(weights.read_bytes()[:-10])
    with pytest.raises(NotDownloadedError, match=r"download tiny-allennlp --force --from PATH"):
        resolve_model("tiny-allennlp", cache=tmp_path, catalog=catalog)
