"""Download named models into a cache folder, verify them, and find them again by name.

A model ``NAME`` lives in ``<cache>/NAME/`` as ``options.json`` + ``weights.hdf5`` and a
``manifest.json`` written last, which records where the files came from and their SHA-256. A
model counts as downloaded only when its manifest exists and the files still have the recorded
checksums, so an interrupted, damaged or half-converted download is never used.

Transfers go to ``<file>.part`` and continue from where they stopped on the next run (HTTP
``Range``); a file is renamed into place only once complete. Every network wait is bounded by
``timeout`` seconds. The cache folder is ``$SPACY_ELMO_CACHE`` if set, else ``$XDG_CACHE_HOME/spacy-elmo`` or
``~/.cache/spacy-elmo``. Files fetched by hand (:func:`download`'s ``local``), and why names are never downloaded
implicitly: docs/models.md, "Downloads".
"""
import hashlib
import json
import os
import shutil
import socket
import urllib.error
import urllib.request
from contextlib import suppress
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from .catalog import CATALOG, ModelEntry, UnknownModelError, get_entry
from ..errors import DownloadError, ElmoError, NotDownloadedError
from ..util.files import PathLike, atomic_write

CACHE_ENV = "SPACY_ELMO_CACHE"
DEFAULT_TIMEOUT = 30.0
CHUNK = 1 << 20
MANIFEST = "manifest.json"


def cache_dir() -> Path:
    """Where downloaded models live (see the module docstring)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "spacy-elmo"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch(url: str, target: Path, timeout: float = DEFAULT_TIMEOUT, progress: bool = True) -> None:
    """Download ``url`` to ``target`` through ``target.part``, continuing a previous partial transfer.

    Raises :class:`DownloadError` for HTTP errors, unreachable hosts and stalls longer than
    ``timeout`` seconds; what arrived stays in the ``.part`` file for the next attempt.
    """
    from tqdm import tqdm

    part = target.with_name(target.name + ".part")
    target.parent.mkdir(parents=True, exist_ok=True)
    offset = part.stat().st_size if part.exists() else 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={offset}-"} if offset else {})
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as err:
        if err.code == 416 and offset:  # the partial file is already whole (or longer than the file): start over
            part.unlink()
            return fetch(url, target, timeout, progress)
        raise DownloadError(f"{url} answered HTTP {err.code} ({err.reason}); the publisher may have moved the file") from None
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        raise DownloadError(
            f"Cannot reach {url} ({reason}). Check the network connection (or a proxy), then run the same command again."
        ) from None
    with response:
        resumed = response.status == 206
        length = response.headers.get("Content-Length")
        total = (offset if resumed else 0) + int(length) if length is not None else None
        try:
            with open(part, "ab" if resumed else "wb") as f, tqdm(
                total=total, initial=offset if resumed else 0, unit="B", unit_scale=True,
                desc=target.name, disable=not progress, leave=False,
            ) as bar:
                for block in iter(lambda: response.read(CHUNK), b""):
                    f.write(block)
                    bar.update(len(block))
                f.flush()
                os.fsync(f.fileno())
        except (socket.timeout, TimeoutError, OSError, urllib.error.URLError) as err:
            raise DownloadError(
                f"The transfer of {url} stopped ({err}); what arrived is kept in {part}. Run the same command again to "
                f"continue."
            ) from None
    if total is not None and part.stat().st_size != total:
        raise DownloadError(
            f"The transfer of {url} ended early ({part.stat().st_size:,} of {total:,} bytes); what arrived is kept. Run "
            f"the same command again to continue."
        )
    os.replace(part, target)


def offline_hint(name: str, entry: Optional[ModelEntry] = None, flags: str = "") -> str:
    """How to get the model ``name`` (catalogue ``entry``, if known) on a machine without network: its files
    fetched elsewhere, registered with ``--from``."""
    where = " and ".join(entry.urls.values()) if entry else "its publisher"
    return (f"without network: fetch the files from {where} on another machine, then run python -m spacy_elmo "
            f"download {name} {flags}--from PATH")


def model_dir(name: str, cache: Optional[Path] = None) -> Path:
    return (cache or cache_dir()) / name


def verify(name: str, cache: Optional[Path] = None, catalog: Optional[Dict[str, ModelEntry]] = None) -> Tuple[Path, Path]:
    """The model's files if its manifest exists and they still have the recorded SHA-256; else an error that says
    how to get it, with and without network."""
    entry = (CATALOG if catalog is None else catalog).get(name)
    folder = model_dir(name, cache)
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise NotDownloadedError(
            f"The ELMo model {name!r} is not downloaded (looked in {folder}). Get it with: "
            f"python -m spacy_elmo download {name} ({offline_hint(name, entry)})"
        ) from None
    for file, digest in manifest["sha256"].items():
        path = folder / file
        if not path.is_file() or sha256_of(path) != digest:
            raise NotDownloadedError(
                f"The downloaded ELMo model {name!r} has changed on disk since it was verified ({path} is missing or "
                f"its SHA-256 differs). Download it again with: python -m spacy_elmo download {name} --force "
                f"({offline_hint(name, entry, '--force ')})"
            )
    return folder / "options.json", folder / "weights.hdf5"


def resolve_model(name: str, cache: Optional[Path] = None, catalog: Optional[Dict[str, ModelEntry]] = None) -> Tuple[Path, Path]:
    """``(options_file, weight_file)`` of the downloaded model ``name``; a clear error if it is unknown or missing."""
    get_entry(name, catalog)
    return verify(name, cache, catalog)


def is_name(options_file, weight_file) -> bool:
    """Whether the pair stands for a published model's name: an ``options_file`` alone that is not a file."""
    return options_file is not None and weight_file is None and not Path(options_file).is_file()


def check_name(name: str) -> None:
    """Refuse a value that is neither an existing options file nor a published model's name."""
    try:
        get_entry(name)
    except UnknownModelError:
        raise UnknownModelError(
            f"{name!r} is neither an existing options file nor the name of a published ELMo model (see: "
            f"python -m spacy_elmo list). Give an options.json with its weights file, or a model name."
        ) from None


def download(
    name: str,
    cache: Optional[Path] = None,
    timeout: float = DEFAULT_TIMEOUT,
    progress: bool = True,
    force: bool = False,
    catalog: Optional[Dict[str, ModelEntry]] = None,
    log: Callable[[str], None] = lambda message: None,
    local: Sequence[PathLike] = (),
) -> Tuple[Path, Path]:
    """Fetch, convert if needed, verify and record the model ``name``; returns its two files.

    ``local``: files fetched by hand instead of from the publisher (for a machine that cannot reach
    it): a folder holding the options ``.json`` and weights ``.hdf5``, or the two files; for an
    ELMoForManyLangs model, its ``.zip`` or the folder it unpacks to. They are copied or converted
    into the cache and go through the same checks and manifest as a download; the network is not used.

    A model already downloaded and intact is not fetched again unless ``force``. Verification
    loads the model with the package's checked loader (structure, shapes, plausible values) and
    compares published checksums when there are any. On failure the model's folder keeps only
    the ``.part`` files of interrupted transfers (to continue from), or is removed.
    """
    entry = get_entry(name, catalog)
    folder = model_dir(name, cache)
    if not force:
        with suppress(NotDownloadedError):
            found = verify(name, cache, catalog)
            log(f"{name} is already in the cache and intact (--force replaces it)")
            return found
    given = _given_files(entry, [Path(p) for p in local]) if local else None
    (folder / MANIFEST).unlink(missing_ok=True)  # from here until the end, the model does not count as downloaded
    try:
        sources = _obtain(entry, folder, given, timeout, progress, log)
        _check_loads(entry, folder, retry=_retry(entry, given))
    except BaseException:
        _clean_failed(folder)
        raise
    files = (folder / "options.json", folder / "weights.hdf5")
    manifest = {"name": name, "sources": sources, "sha256": {p.name: sha256_of(p) for p in files}}
    atomic_write(folder / MANIFEST, lambda p: p.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8"))
    return files


def _given_files(entry: ModelEntry, paths: List[Path]) -> Dict[str, Path]:
    """The hand-fetched file of each role of ``entry`` (``options`` + ``weights``, or ``archive``) among ``paths``.

    A folder given for an AllenNLP model stands for the files in it; the publisher's file name is
    preferred where several could fit.
    """
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise DownloadError(f"Not found: {', '.join(missing)}. Give the files fetched by hand for {entry.name!r}.")
    if entry.kind != "allennlp":
        if len(paths) != 1:
            raise DownloadError(
                f"{entry.name!r} is an ELMoForManyLangs model: give its .zip ({entry.urls['archive']}) or the folder "
                f"it unpacks to, once; found {len(paths)} paths."
            )
        return {"archive": paths[0]}
    files = [f for p in paths for f in (sorted(p.iterdir()) if p.is_dir() else [p]) if f.is_file()]
    given = {}
    for role, suffixes in (("options", (".json",)), ("weights", (".hdf5", ".h5"))):
        published = Path(entry.urls[role]).name
        fitting = [f for f in files if f.suffix.lower() in suffixes]
        named = [f for f in fitting if f.name == published]
        if len(named) != 1 and len(fitting) != 1:
            raise DownloadError(
                f"{'No' if not fitting else 'More than one'} {'/'.join(suffixes)} file for the {role} of "
                f"{entry.name!r} in {', '.join(map(str, paths))}"
                f"{': ' + ', '.join(f.name for f in fitting) if fitting else ''}. Give the two files themselves "
                f"(from {entry.urls['options']} and {entry.urls['weights']})."
            )
        given[role] = (named or fitting)[0]
    return given


def _obtain(
    entry: ModelEntry, folder: Path, given: Optional[Dict[str, Path]], timeout: float, progress: bool,
    log: Callable[[str], None],
) -> Dict[str, str]:
    """Put ``options.json`` and ``weights.hdf5`` in ``folder``: fetched (``given`` None) or from the hand-fetched
    files, converted for ELMoForManyLangs. Returns where each came from, for the manifest."""
    sources: Dict[str, str] = {}
    if entry.kind == "allennlp":
        for role, target in (("options", folder / "options.json"), ("weights", folder / "weights.hdf5")):
            sources[target.name] = _get(entry, role, target, given, timeout, progress, log)
            _check_published(entry, role, target)
        return sources
    from ..formats.manylangs import ManyLangsError, convert_archive

    archive = given["archive"] if given else folder / "model.zip"
    sources["archive"] = _get(entry, "archive", archive, given, timeout, progress, log)
    if archive.is_file():  # not for an unpacked folder fetched by hand
        _check_published(entry, "archive", archive)
        sources["archive sha256"] = sha256_of(archive)
    log("Converting the ELMoForManyLangs model")
    try:
        convert_archive(archive, folder / "extracted", folder / "options.json", folder / "weights.hdf5")
    except ManyLangsError as err:
        raise DownloadError(
            f"The ELMoForManyLangs model {'given' if given else 'downloaded'} for {entry.name!r} cannot be converted "
            f"({err}). {_retry(entry, given)}"
        ) from None
    finally:
        if not given:
            archive.unlink(missing_ok=True)
    return sources


def _get(
    entry: ModelEntry, role: str, target: Path, given: Optional[Dict[str, Path]], timeout: float, progress: bool,
    log: Callable[[str], None],
) -> str:
    """Fetch the file of ``role`` to ``target``, or copy the hand-fetched one there (an archive is read where it
    is); returns its source as a URL."""
    if given is None:
        log(f"Fetching {entry.urls[role]}")
        try:
            fetch(entry.urls[role], target, timeout, progress)
        except DownloadError as err:
            raise DownloadError(f"{err} Or, {offline_hint(entry.name, entry)}.") from None
        return entry.urls[role]
    source = given[role].resolve()
    if source != target.resolve():
        log(f"Copying {source}")
        atomic_write(target, lambda p: shutil.copyfile(source, p))
    return source.as_uri()


def _retry(entry: ModelEntry, given: Optional[Dict[str, Path]]) -> str:
    """What to do after a failed verification, for a download or for files fetched by hand."""
    if given is None:
        return f"Run the same command to fetch it again ({offline_hint(entry.name, entry)})."
    return f"Fetch the files again from {' and '.join(entry.urls.values())}, then rerun the command."


def _check_loads(entry: ModelEntry, folder: Path, retry: str) -> None:
    """Load the model's two files with the checked loader and compare its sizes with the catalogue's; a
    :class:`DownloadError` saying what failed otherwise."""
    from ..formats.weights import load_files

    try:
        options = load_files(folder / "options.json", folder / "weights.hdf5").options
    except ElmoError as err:
        raise DownloadError(f"The model for {entry.name!r} is damaged and was not kept: {err} {retry}") from None
    differ = {key: getattr(options, key) for key, size in entry.architecture.items() if getattr(options, key) != size}
    if differ:
        found = ", ".join(f"{key} {value} (not {entry.architecture[key]})" for key, value in differ.items())
        raise DownloadError(f"The files for {entry.name!r} are of another model: {found}; they were not kept. {retry}")


def _check_published(entry: ModelEntry, role: str, path: Path) -> None:
    """Compare with the publisher's SHA-256 when the catalogue has one."""
    expected = entry.sha256.get(role)
    if expected and sha256_of(path) != expected:
        raise DownloadError(
            f"{path} of {entry.name!r} does not have the published SHA-256 ({expected}); fetch it again from "
            f"{entry.urls[role]}."
        )


def _clean_failed(folder: Path) -> None:
    """After a failed download: remove everything of ``folder`` but the ``.part`` files a rerun continues from,
    and ``folder`` itself if nothing is left."""
    if not folder.is_dir():
        return
    for path in folder.iterdir():
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        elif path.suffix != ".part":
            path.unlink(missing_ok=True)
    if not any(folder.iterdir()):
        folder.rmdir()


def downloaded(cache: Optional[Path] = None) -> Dict[str, Path]:
    """Names in the catalogue with a manifest in the cache (not re-verified)."""
    root = cache or cache_dir()
    return {name: root / name for name in CATALOG if (root / name / MANIFEST).exists()}
