"""Which biLM files to read: those given, or the biLM shipped inside the package for the language.

:func:`model_files` is the one place where settings become files; everything that loads a biLM
(``ElmoEmbedder``, the ``elmo`` component's architecture, ``embed``) goes through it.
"""
import warnings
from pathlib import Path
from typing import Dict, Optional, Tuple

from .catalog import CATALOG
from .download import MANIFEST, check_name, is_name, model_dir, verify
from ..errors import ElmoSettingsError, ElmoWeightsError, NotDownloadedError
from ..util.files import PathLike

DATA_DIR = Path(__file__).resolve().parents[1] / "data"
# Language code (as spaCy names languages) -> folder under ``data/`` holding options.json and weights.hdf5.
EMBEDDED_MODELS: Dict[str, str] = {"en": "en_gutenberg_tiny", "zh": "zh_classics_tiny"}
DEFAULT_LANG = "en"
DEFAULT_MODEL_DIR = DATA_DIR / EMBEDDED_MODELS[DEFAULT_LANG]


def embedded_model_size(name: str) -> Tuple[Path, str]:
    """The folder of the embedded model ``name`` and its size on disk, as the docs state it (decimal MB)."""
    folder = DATA_DIR / name
    size = sum(path.stat().st_size for path in folder.iterdir() if path.is_file())
    return folder, f"{size / 1e6:.1f} MB"


def check_model_files(
    options_file: Optional[PathLike], weight_file: Optional[PathLike], names: Tuple[str, str] = ("options_file", "weight_file")
) -> None:
    """Refuse one file without the other, unless the one is a published model's name (checked against the
    catalogue; found on disk when the model loads). ``names``: what the caller calls the two settings."""
    if is_name(options_file, weight_file):
        check_name(str(options_file))
    elif (options_file is None) != (weight_file is None):
        raise ElmoSettingsError(
            f"Give both {names[0]} and {names[1]} (the biLM's options.json and its weights .hdf5), or neither to "
            f"use the ELMo model embedded in spacy-elmo"
        )


def check_downloaded(name: str) -> None:
    """Refuse a name that is not a published model's, or whose model is not downloaded: its manifest is missing
    (cheap: no file is read; the checksums are verified when the model loads)."""
    check_name(name)
    folder = model_dir(name)
    if not (folder / MANIFEST).is_file():
        raise NotDownloadedError(
            f"The ELMo model {name!r} is not downloaded (looked in {folder}). Get it with: python -m spacy_elmo "
            f"download {name}, or from files fetched by hand: python -m spacy_elmo download {name} --from PATH"
        )


def check_model_source(options_file: Optional[PathLike]) -> None:
    """Refuse an ``options_file`` that is a name (no folder, no ``.json``, no such file) of a model that is not
    published or not downloaded. A path passes even where it is missing: a saved pipeline names the files it was
    trained from, which need not exist where it is loaded (it carries the weights)."""
    if options_file is None or Path(options_file).is_file():
        return
    text = str(options_file)
    if "/" not in text and "\\" not in text and Path(text).suffix != ".json":
        check_downloaded(text)


URL_SCHEMES = ("http://", "https://")
# AllenNLP served its models from two S3 addresses, which name the same files by the same path after them.
ALLENNLP_PREFIXES = ("allennlp.s3.amazonaws.com/", "s3-us-west-2.amazonaws.com/allennlp/")


def is_url(value: Optional[PathLike]) -> bool:
    """Whether a file setting is a web address (as AllenNLP, which fetched its files, accepted) rather than a path."""
    return isinstance(value, str) and value.startswith(URL_SCHEMES)


def _url_key(url: str) -> str:
    """A URL without its scheme and AllenNLP's host, so that both S3 addresses of a file compare equal."""
    rest = url.split("://", 1)[1]
    return next((rest[len(prefix):] for prefix in ALLENNLP_PREFIXES if rest.startswith(prefix)), rest)


def published_name(options_file: Optional[PathLike], weight_file: Optional[PathLike]) -> Optional[str]:
    """The catalogue name of the published model whose URLs are given (None when neither file is a URL).

    The weights name the model; the options URL may be any published model's of the same architecture (flair
    pairs the contributed PubMed weights with the original's options). A URL of no published model is an error
    saying to download the file and give its path: files are read from disk, never fetched on the fly.
    """
    if not (is_url(options_file) or is_url(weight_file)):
        return None
    if not (is_url(options_file) and is_url(weight_file)):
        raise ElmoSettingsError(
            f"options_file {options_file!r} and weight_file {weight_file!r}: give both as URLs of a published "
            f"model (python -m spacy_elmo list) or both as local paths"
        )
    models = [entry for entry in CATALOG.values() if entry.kind == "allennlp"]
    entry = next((e for e in models if _url_key(e.urls["weights"]) == _url_key(str(weight_file))), None)
    if entry is None:
        raise ElmoSettingsError(
            f"{weight_file} is not the weights of a published ELMo model that spacy-elmo knows (python -m spacy_elmo "
            f"list); download the file and give its local path"
        )
    options_key = _url_key(str(options_file))
    if not any(_url_key(e.urls["options"]) == options_key and e.architecture == entry.architecture for e in models):
        raise ElmoSettingsError(
            f"{options_file} is not the options of the published model {entry.name!r}, whose weights are given; "
            f"give {entry.urls['options']}, or the model's name {entry.name!r}"
        )
    return entry.name


def model_files(
    options_file: Optional[PathLike],
    weight_file: Optional[PathLike],
    lang: str = DEFAULT_LANG,
    names: Tuple[str, str] = ("options_file", "weight_file"),
) -> Tuple[Path, Path]:
    """The biLM's ``options.json`` and weights: both given, a published model's name given alone as
    ``options_file`` (``python -m spacy_elmo list``) or both by their URLs (a downloaded model only: see
    :func:`published_name`), or neither for the embedded model of ``lang``."""
    name = published_name(options_file, weight_file)
    if name is not None:
        if not (model_dir(name) / MANIFEST).is_file():
            raise NotDownloadedError(
                f"{weight_file} is the published model {name!r}, which is not downloaded (spacy-elmo reads models "
                f"from its cache, never from the web on the fly): run python -m spacy_elmo download {name}"
            )
        return verify(name)
    check_model_files(options_file, weight_file, names)
    if is_name(options_file, weight_file):
        return verify(str(options_file))
    if options_file is None or weight_file is None:
        return embedded_model_files(lang)
    return Path(options_file), Path(weight_file)


def embedded_model_files(lang: str = DEFAULT_LANG) -> Tuple[Path, Path]:
    """Paths of the embedded model's ``options.json`` and ``weights.hdf5`` for ``lang``; the English one, with a
    warning, for other languages."""
    name = EMBEDDED_MODELS.get(lang)
    if name is None:
        warnings.warn(
            f"spacy-elmo embeds no ELMo model for language {lang!r} (it has: {', '.join(sorted(EMBEDDED_MODELS))}), "
            f"so the English one is used. Its byte-level character CNN reads any script, but its language model "
            f"learned English. For your language, pretrain a model (python -m spacy_elmo pretrain) or use a "
            f"published one, and give its options_file and weight_file.",
            UserWarning,
            stacklevel=2,
        )
        name = EMBEDDED_MODELS[DEFAULT_LANG]
    folder = DATA_DIR / name
    options, weights = folder / "options.json", folder / "weights.hdf5"
    if not (options.exists() and weights.exists()):
        raise ElmoWeightsError(
            f"The embedded ELMo model is missing from {folder}; reinstall spacy-elmo, or pass "
            f"options_file and weight_file explicitly."
        )
    return options, weights
