"""The published ELMo models this package can download by name, as their publishers describe them.

Sources (read 2026-11): AllenNLP's model page https://allennlp.org/elmo (table of the four
English models: parameters, sizes, SRL/constituency F1; training data), the paper (Peters et
al. 2018), the file locations used by AllenNLP's own tutorial and by Flair for the contributed
PubMed model, and ELMoForManyLangs' README (download table, training data, citation). Where a
publisher states nothing (file sizes in bytes, checksums, licences of the weights), the entry
says so instead of guessing; ``python -m spacy_elmo download`` records the SHA-256 of what it
fetched.
"""
import re
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

from ..errors import UnknownModelError

NOT_STATED = "not stated by the publisher"

ALLENNLP_BASE = "https://allennlp.s3.amazonaws.com/models/elmo"
ALLENNLP_CITATION = (
    "Peters, Neumann, Iyyer, Gardner, Clark, Lee, Zettlemoyer. Deep contextualized word representations. "
    "NAACL 2018. https://www.aclweb.org/anthology/N18-1202"
)
MANYLANGS_CITATION = (
    "Che, Liu, Wang, Zheng, Liu. Towards Better UD Parsing: Deep Contextualized Word Embeddings, Ensemble, and "
    "Treebank Concatenation. CoNLL 2018 Shared Task, pages 55-64. http://www.aclweb.org/anthology/K18-2005 "
    "(and, for the hosting, Fares, Kutuzov, Oepen, Velldal. Word vectors, reuse, and replicability. NoDaLiDa 2017)"
)
MANYLANGS_DATA = (
    "about 20 million words sampled at random from the raw text of the CoNLL 2018 shared task (Wikipedia dump + "
    "Common Crawl)"
)


@dataclass(frozen=True)
class ModelEntry:
    """One downloadable model.

    ``kind``: ``"allennlp"`` (an options.json and a weights .hdf5, used as they are) or
    ``"manylangs"`` (an ELMoForManyLangs .zip, converted once after download).
    ``urls``: file role (``options``, ``weights`` or ``archive``) -> URL. ``sha256``: published
    checksums by role (none are published today). ``parameters_m``: millions of parameters as
    published; ``size``: the download's size as far as it is known. ``architecture``: sizes the
    model's options must have (:class:`~spacy_elmo.model.options.ElmoOptions` attributes), so that files
    of another model, fetched by hand by mistake, are not registered under this name.
    """

    name: str
    kind: str
    urls: Dict[str, str]
    description: str
    training_data: str
    size: str
    license: str
    citation: str
    language: str = "en"
    parameters_m: Optional[float] = None
    sha256: Dict[str, str] = field(default_factory=dict)
    architecture: Dict[str, int] = field(default_factory=dict)


def allennlp_architecture(file_name: str) -> Dict[str, int]:
    """The sizes AllenNLP's file names state: ``elmo_2x1024_128_2048cnn_1xhighway_options.json`` is 2 layers of
    1024 LSTM cells projected to 128, 2048 CNN filters and 1 highway layer."""
    found = re.search(r"(\d+)x(\d+)_(\d+)_(\d+)cnn_(\d+)xhighway", file_name)
    if found is None:
        raise ValueError(f"{file_name!r} does not state an architecture as AllenNLP's file names do")
    keys = ("n_layers", "lstm_dim", "projection_dim", "n_filters", "n_highway")
    return dict(zip(keys, map(int, found.groups())))


def _allennlp(name: str, folder: str, params: float, description: str, data: str,
              files: Optional[Tuple[str, str]] = None) -> ModelEntry:
    """An AllenNLP model in ``folder``; ``files``: its options and weights file names when not ``elmo_<folder>_*``."""
    options, weights = files or (f"elmo_{folder}_options.json", f"elmo_{folder}_weights.hdf5")
    return ModelEntry(
        name=name,
        kind="allennlp",
        urls={"options": f"{ALLENNLP_BASE}/{folder}/{options}", "weights": f"{ALLENNLP_BASE}/{folder}/{weights}"},
        description=description,
        training_data=data,
        # The weights are float32: 4 bytes per published parameter (derived; byte counts are not published).
        size=f"about {params * 4:.0f} MB (derived: 4 bytes x {params}M parameters)",
        license=f"{NOT_STATED} for the weights (AllenNLP's and bilm-tf's code is Apache-2.0)",
        citation=ALLENNLP_CITATION,
        parameters_m=params,
        architecture=allennlp_architecture(options),
    )


ONE_BILLION = "1 Billion Word Benchmark (about 800M tokens of WMT 2011 news crawl)"

ALLENNLP_MODELS = (
    _allennlp("small", "2x1024_128_2048cnn_1xhighway", 13.6,
              "LSTM 1024 / output 128, 1 highway; SRL F1 83.62, constituency F1 93.12", ONE_BILLION),
    _allennlp("medium", "2x2048_256_2048cnn_1xhighway", 28.0,
              "LSTM 2048 / output 256, 1 highway; SRL F1 84.04, constituency F1 93.60", ONE_BILLION),
    _allennlp("original", "2x4096_512_2048cnn_2xhighway", 93.6,
              "the paper's model: LSTM 4096 / output 512, 2 highways; SRL F1 84.63, constituency F1 93.85",
              ONE_BILLION),
    _allennlp("original-5.5b", "2x4096_512_2048cnn_2xhighway_5.5B", 93.6,
              "as original, trained on 5.5B tokens; SRL F1 84.93, constituency F1 94.01",
              "5.5B tokens: Wikipedia (1.9B) and the WMT 2008-2012 monolingual news crawl (3.6B)"),
    _allennlp("pubmed", "contributed/pubmed", 93.6,
              "contributed model with the original's architecture, for biomedical text",
              f"PubMed ({NOT_STATED} in the sources read here beyond the file name 'PubMed_only')",
              files=("elmo_2x4096_512_2048cnn_2xhighway_options.json",
                     "elmo_2x4096_512_2048cnn_2xhighway_weights_PubMed_only.hdf5")),
)

# ELMoForManyLangs' download table: (language code, language, NLPL repository id).
MANYLANGS_TABLE: Tuple[Tuple[str, str, int], ...] = (
    ("ar", "Arabic", 136), ("bg", "Bulgarian", 137), ("ca", "Catalan", 138), ("cs", "Czech", 139),
    ("cu", "Old Church Slavonic", 140), ("da", "Danish", 141), ("de", "German", 142), ("el", "Greek", 143),
    ("en", "English", 144), ("es", "Spanish", 145), ("et", "Estonian", 146), ("eu", "Basque", 147),
    ("fa", "Persian", 148), ("fi", "Finnish", 149), ("fr", "French", 150), ("ga", "Irish", 151),
    ("gl", "Galician", 152), ("grc", "Ancient Greek", 153), ("he", "Hebrew", 154), ("hi", "Hindi", 155),
    ("hr", "Croatian", 156), ("hu", "Hungarian", 157), ("id", "Indonesian", 158), ("it", "Italian", 159),
    ("ja", "Japanese", 160), ("ko", "Korean", 161), ("la", "Latin", 162), ("lv", "Latvian", 163),
    ("nb", "Norwegian Bokmål", 165), ("nl", "Dutch", 164), ("nn", "Norwegian Nynorsk", 166), ("pl", "Polish", 167),
    ("pt", "Portuguese", 168), ("ro", "Romanian", 169), ("ru", "Russian", 170), ("sk", "Slovak", 171),
    ("sl", "Slovene", 172), ("sv", "Swedish", 173), ("tr", "Turkish", 174), ("ug", "Uyghur", 175),
    ("uk", "Ukrainian", 176), ("ur", "Urdu", 177), ("vi", "Vietnamese", 178), ("zh", "Chinese (traditional)", 179),
)


# Every published ELMoForManyLangs model has the architecture of their cnn_50_100_512_4096_sample.json
# (spacy_elmo.formats.manylangs.PUBLISHED_ARCHITECTURE): 2 layers of 4096 cells projected to 512, filters summing to
# 2048, 2 highway layers, 100-dim word vectors.
MANYLANGS_ARCHITECTURE = {"n_layers": 2, "lstm_dim": 4096, "projection_dim": 512, "n_filters": 2048, "n_highway": 2,
                          "word_dim": 100}


def _manylangs(code: str, language: str, nlpl_id: int) -> ModelEntry:
    data = MANYLANGS_DATA + ("; the README says the Chinese model was trained on Wikipedia" if code == "zh" else "")
    return ModelEntry(
        name=f"manylangs-{code}",
        kind="manylangs",
        urls={"archive": f"http://vectors.nlpl.eu/repository/11/{nlpl_id}.zip"},
        description=f"ELMoForManyLangs {language}: LSTM 4096 / output 512, 2 highways, character table and word vectors",
        training_data=data,
        size=f"{NOT_STATED} (the architecture is the original's plus 100-dim word vectors)",
        license=f"{NOT_STATED} in the README; see the NLPL repository entry {nlpl_id}",
        citation=MANYLANGS_CITATION,
        language=code,
        architecture=MANYLANGS_ARCHITECTURE,
    )


CATALOG: Dict[str, ModelEntry] = {
    entry.name: entry for entry in (*ALLENNLP_MODELS, *(_manylangs(*row) for row in MANYLANGS_TABLE))
}


def get_entry(name: str, catalog: Optional[Dict[str, ModelEntry]] = None) -> ModelEntry:
    """The catalogue entry called ``name``; an error listing the names otherwise."""
    catalog = CATALOG if catalog is None else catalog
    if name not in catalog:
        english = ", ".join(n for n, e in catalog.items() if e.kind == "allennlp")
        raise UnknownModelError(
            f"Unknown ELMo model {name!r}. Known: {english}, and manylangs-<code> for ELMoForManyLangs' languages. "
            f"See: python -m spacy_elmo list"
        )
    return catalog[name]
