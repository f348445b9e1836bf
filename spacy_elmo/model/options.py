"""The biLM's hyper-parameters, read from and written to AllenNLP/bilm-tf ``options.json`` files.

The JSON layout is the one the published ELMo models use::

    {"lstm": {"dim", "projection_dim", "n_layers", "cell_clip", "proj_clip", "use_skip_connections"},
     "char_cnn": {"embedding": {"dim"}, "filters", "n_highway", "n_characters",
                  "max_characters_per_token", "activation"}}

Keys this package does not use (bilm-tf writes training settings such as ``n_tokens_vocab`` or
``dropout`` into the same file) are kept, so that a file read and written back loses nothing.

Models converted from ELMoForManyLangs (see :mod:`spacy_elmo.formats.manylangs`) add two optional parts:
``char_cnn.vocabulary`` (a character table instead of UTF-8 bytes, see
:class:`spacy_elmo.model.token_ids.TokenIds`) and a top-level ``word_embedding`` whose vectors
are joined to the char CNN's features before the projection.
"""
import copy
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from ..errors import ElmoOptionsError
from ..util.files import PathLike
from ..util.numbers import is_number

ACTIVATIONS = ("relu", "tanh")

# The char CNN of every published English ELMo (2048 channels).
PUBLISHED_FILTERS: Tuple[Tuple[int, int], ...] = ((1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024))

# Ceilings on the sizes options may state, with the largest a published model has (AllenNLP's original: 2 layers
# of 4096 cells projected to 512, 2 highways, 7 filters with 2048 channels in all, 16-dim characters, 50 per
# token; ELMoForManyLangs': the same with 50-dim characters and 100-dim word vectors). Each allows 4 to 20 times
# the published size; a larger value is a damaged or foreign file, refused before anything is allocated for it
# (``n_layers = 1000000`` once ran for two minutes into a MemoryError).
SIZE_LIMITS: Dict[str, Tuple[int, str]] = {
    "lstm.n_layers": (16, "2"),
    "lstm.dim": (16384, "4096"),
    "lstm.projection_dim": (4096, "512"),
    "char_cnn.n_highway": (16, "2"),
    "char_cnn.filters (how many)": (64, "7"),
    "char_cnn.filters (channels in all)": (16384, "2048"),
    "char_cnn.embedding.dim": (1024, "50"),
    "char_cnn.max_characters_per_token": (1024, "50"),
    "char_cnn.n_characters": (1_200_000, "262, or one more than a table of Unicode's 1,114,112 characters at most"),
    "word_embedding.dim": (4096, "100"),
    "word_embedding.words": (10_000_000, "one word per entry of their training vocabulary"),
}


@dataclass(frozen=True)
class ElmoOptions:
    """Architecture of an ELMo biLM: char CNN → highways → projection → L-layer forward and backward LSTMs."""

    lstm_dim: int
    projection_dim: int
    n_layers: int = 2
    cell_clip: float = 3.0
    proj_clip: float = 3.0
    use_skip_connections: bool = True
    char_embedding_dim: int = 16
    filters: Tuple[Tuple[int, int], ...] = PUBLISHED_FILTERS
    n_highway: int = 1
    n_characters: int = 262
    max_characters_per_token: int = 50
    activation: str = "relu"
    extra: Dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        """Refuse sizes beyond :data:`SIZE_LIMITS`, however the options were made (a file, a config, code)."""
        for key, value in self.sizes().items():
            limit, published = SIZE_LIMITS[key]
            if value > limit:
                raise ElmoOptionsError(
                    f"{key} is {value}, above the {limit} this package accepts (the largest published ELMo model has "
                    f"{published}); these options are damaged or not an ELMo options.json"
                )

    def sizes(self) -> Dict[str, int]:
        """The sizes :data:`SIZE_LIMITS` bounds, by the same names."""
        return {
            "lstm.n_layers": self.n_layers,
            "lstm.dim": self.lstm_dim,
            "lstm.projection_dim": self.projection_dim,
            "char_cnn.n_highway": self.n_highway,
            "char_cnn.filters (how many)": len(self.filters),
            "char_cnn.filters (channels in all)": self.n_filters,
            "char_cnn.embedding.dim": self.char_embedding_dim,
            "char_cnn.max_characters_per_token": self.max_characters_per_token,
            "char_cnn.n_characters": self.n_characters,
            "word_embedding.dim": self.word_dim,
            "word_embedding.words": len(self.word_embedding["words"]) if self.word_embedding else 0,
        }

    @property
    def n_filters(self) -> int:
        """Width of the char CNN's output (all filters' channels concatenated)."""
        return sum(n for _, n in self.filters)

    @property
    def char_vocabulary(self) -> Optional[Dict[str, Any]]:
        """The character table (``characters`` in id order, and the names of the special entries), if any."""
        return self.extra.get("char_cnn", {}).get("vocabulary")

    @property
    def max_token_units(self) -> int:
        """What the model reads of a token: its first this many UTF-8 bytes (characters, with a character table);
        two of ``max_characters_per_token`` mark the token's start and end."""
        return self.max_characters_per_token - 2

    @property
    def word_embedding(self) -> Optional[Dict[str, Any]]:
        """The word table (``dim``, ``words`` in id order, names of the special entries), if any."""
        return self.extra.get("word_embedding")

    @property
    def word_dim(self) -> int:
        """Width of the word vectors joined to the char CNN's features (0: none, as in AllenNLP's models)."""
        return int(self.word_embedding["dim"]) if self.word_embedding else 0

    @property
    def output_dim(self) -> int:
        """Width of every ELMo layer: forward and backward halves side by side."""
        return 2 * self.projection_dim

    @property
    def n_output_layers(self) -> int:
        """Number of layers the biLM returns: the token layer plus one per LSTM layer."""
        return self.n_layers + 1

    def to_dict(self) -> Dict[str, Any]:
        """The ``options.json`` content, including any extra keys read from a file."""
        data = copy.deepcopy(self.extra)
        data.setdefault("lstm", {}).update(
            dim=self.lstm_dim,
            projection_dim=self.projection_dim,
            n_layers=self.n_layers,
            cell_clip=self.cell_clip,
            proj_clip=self.proj_clip,
            use_skip_connections=self.use_skip_connections,
        )
        cnn = data.setdefault("char_cnn", {})
        cnn.setdefault("embedding", {})["dim"] = self.char_embedding_dim
        cnn.update(
            filters=[list(f) for f in self.filters],
            n_highway=self.n_highway,
            n_characters=self.n_characters,
            max_characters_per_token=self.max_characters_per_token,
            activation=self.activation,
        )
        return data

    @classmethod
    def from_dict(cls, data: Dict[str, Any], source: str = "options") -> "ElmoOptions":
        """Validate an ``options.json`` dict; errors name ``source`` and the offending key."""
        if not isinstance(data, dict):
            raise ElmoOptionsError(f"{source}: expected a JSON object, found {type(data).__name__}")
        lstm = _section(data, "lstm", source)
        cnn = _section(data, "char_cnn", source)
        embedding = _section(cnn, "embedding", f"{source} [char_cnn]")
        filters = _get(cnn, "filters", list, f"{source} [char_cnn]")
        if not filters or not all(
            isinstance(f, (list, tuple)) and len(f) == 2 and all(_is_int(v) and v > 0 for v in f) for f in filters
        ):
            raise ElmoOptionsError(
                f"{source}: char_cnn.filters must be a non-empty list of [width, n_channels] pairs of positive "
                f"integers, found {filters!r}"
            )
        activation = _get(cnn, "activation", str, f"{source} [char_cnn]", default="relu")
        if activation not in ACTIVATIONS:
            raise ElmoOptionsError(f"{source}: char_cnn.activation must be one of {ACTIVATIONS}, found {activation!r}")
        n_characters = _get(cnn, "n_characters", int, f"{source} [char_cnn]", default=262)
        vocabulary = cnn.get("vocabulary")
        if vocabulary is not None:
            _check_table(vocabulary, "characters", CHAR_SPECIALS, f"{source} [char_cnn.vocabulary]")
            if n_characters != len(vocabulary["characters"]) + 1:
                raise ElmoOptionsError(
                    f"{source}: char_cnn.n_characters must be the size of char_cnn.vocabulary plus one "
                    f"({len(vocabulary['characters']) + 1}), found {n_characters}"
                )
        words = data.get("word_embedding")
        if words is not None:
            _check_table(words, "words", WORD_SPECIALS, f"{source} [word_embedding]")
            _positive(words, "dim", f"{source} [word_embedding]")
        if vocabulary is None and n_characters not in (261, 262):
            raise ElmoOptionsError(
                f"{source}: char_cnn.n_characters must be 262 (or 261, bilm-tf's training value), found {n_characters}"
            )
        max_chars = _get(cnn, "max_characters_per_token", int, f"{source} [char_cnn]", default=50)
        if max_chars < 3:
            raise ElmoOptionsError(f"{source}: char_cnn.max_characters_per_token must be at least 3, found {max_chars}")
        if max(w for w, _ in filters) > max_chars:
            raise ElmoOptionsError(
                f"{source}: a char_cnn filter is wider ({max(w for w, _ in filters)}) than "
                f"max_characters_per_token ({max_chars})"
            )
        clips = {}
        for key in ("cell_clip", "proj_clip"):
            value = lstm.get(key)
            if value is not None and (not is_number(value) or not 0 <= value < math.inf):
                raise ElmoOptionsError(
                    f"{source}: lstm.{key} must be a non-negative finite number or null, found {value!r}"
                )
            clips[key] = float(value or 0.0)  # 0 and null both mean "no clip"
        settings = dict(
            lstm_dim=_positive(lstm, "dim", f"{source} [lstm]"),
            projection_dim=_positive(lstm, "projection_dim", f"{source} [lstm]"),
            n_layers=_positive(lstm, "n_layers", f"{source} [lstm]"),
            **clips,
            use_skip_connections=_get(lstm, "use_skip_connections", bool, f"{source} [lstm]", default=True),
            char_embedding_dim=_positive(embedding, "dim", f"{source} [char_cnn.embedding]"),
            filters=tuple((int(w), int(n)) for w, n in filters),
            n_highway=_get(cnn, "n_highway", int, f"{source} [char_cnn]", default=0),
            n_characters=n_characters,
            max_characters_per_token=max_chars,
            activation=activation,
        )
        try:
            options = cls(**settings, extra=copy.deepcopy(data))
        except ElmoOptionsError as err:  # a size beyond SIZE_LIMITS
            raise ElmoOptionsError(f"{source}: {err}") from None
        if options.n_highway < 0:
            raise ElmoOptionsError(f"{source}: char_cnn.n_highway must be >= 0, found {options.n_highway}")
        return options

    @classmethod
    def from_file(cls, path: PathLike) -> "ElmoOptions":
        """Read and validate an ``options.json`` file."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ElmoOptionsError(f"ELMo options file not found: {path}") from None
        except OSError as err:
            raise ElmoOptionsError(f"Cannot read ELMo options file {path}: {err}") from None
        except UnicodeDecodeError:
            raise ElmoOptionsError(
                f"ELMo options file {path} is not UTF-8 text (a weights .hdf5 file?); the options file is the "
                f"model's options.json, the weights file its .hdf5"
            ) from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ElmoOptionsError(
                f"ELMo options file {path} is not valid JSON ({err}); expected an AllenNLP/bilm-tf options.json"
            ) from None
        return cls.from_dict(data, source=str(path))

    def to_file(self, path: PathLike) -> None:
        """Write ``options.json``."""
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")


# Entries a character or word table must name: what marks a word's start and end, padding, unknown
# symbols and the sentence boundaries (which stand for ``<S>`` and ``</S>``).
CHAR_SPECIALS = ("begin_of_word", "end_of_word", "padding", "unknown", "begin_of_sentence", "end_of_sentence")
WORD_SPECIALS = ("unknown", "begin_of_sentence", "end_of_sentence")


def _check_table(table: Any, key: str, specials: Tuple[str, ...], source: str) -> None:
    """A vocabulary: a list of entries (null for unused ids) and the specials, each naming an entry."""
    if not isinstance(table, dict) or not isinstance(table.get(key), list) or not table[key]:
        raise ElmoOptionsError(f"{source}: expected an object with a non-empty list {key!r}")
    entries = set(table[key])
    for special in specials:
        if table.get(special) not in entries or table.get(special) is None:
            raise ElmoOptionsError(f"{source}: {special!r} must name an entry of {key!r}, found {table.get(special)!r}")


def _section(data: Dict[str, Any], key: str, source: str) -> Dict[str, Any]:
    value = data.get(key)
    if not isinstance(value, dict):
        raise ElmoOptionsError(f"{source}: missing section {key!r} (an object); found {value!r}")
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _get(data: Dict[str, Any], key: str, kind: type, source: str, default: Any = ...) -> Any:
    if key not in data:
        if default is ...:
            raise ElmoOptionsError(f"{source}: missing required key {key!r}")
        return default
    value = data[key]
    if not (_is_int(value) if kind is int else isinstance(value, kind)):
        raise ElmoOptionsError(f"{source}: {key!r} must be {kind.__name__}, found {value!r}")
    return value


def _positive(data: Dict[str, Any], key: str, source: str) -> int:
    value = _get(data, key, int, source)
    if value <= 0:
        raise ElmoOptionsError(f"{source}: {key!r} must be a positive integer, found {value}")
    return value


def preset(name: str) -> ElmoOptions:
    """Architectures by name: the three published English models and ``tiny``, this project's CPU-sized one."""
    presets: Dict[str, ElmoOptions] = {
        "small": ElmoOptions(lstm_dim=1024, projection_dim=128, n_highway=1),
        "medium": ElmoOptions(lstm_dim=2048, projection_dim=256, n_highway=1),
        "original": ElmoOptions(lstm_dim=4096, projection_dim=512, n_highway=2),
        "tiny": ElmoOptions(lstm_dim=512, projection_dim=128, n_highway=1, filters=PUBLISHED_FILTERS[:5]),
    }
    if name not in presets:
        raise ElmoOptionsError(f"Unknown ELMo preset {name!r}; choose one of {sorted(presets)}")
    return presets[name]


PRESET_NAMES: List[str] = ["tiny", "small", "medium", "original"]
