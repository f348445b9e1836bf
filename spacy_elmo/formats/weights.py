"""Read and write biLM weights in the AllenNLP / bilm-tf ``.hdf5`` layout (TensorFlow conventions, ``y = x @ W``).

Every load goes through :func:`_read_datasets`, which checks the file against the options in two
steps. First its metadata only (dataset names and shapes, no data read): a missing or unexpected
key or a wrong shape raises :class:`~spacy_elmo.errors.ElmoWeightsError` naming the file, the
settings that differ (the options' value and the one the weights hold) and the first dataset that
shows it. This costs the same whatever sizes the options state, and the options themselves are
bounded by :data:`~spacy_elmo.model.options.SIZE_LIMITS` when they are made. Then each dataset is
read: a non-float, non-finite or implausibly large array is refused, naming the key; then the built
biLM is run once on a probe and must give finite, bounded vectors. Files are read with h5py only, so
loading never runs code from the file.

Why bounds: the AllenNLP files have no checksums, and random bytes over a dataset mostly decode
to finite floats (about half of all bit patterns are finite numbers above 1e3 in magnitude), so
a damaged file passed the NaN check and gave vectors of 6.5e37. The largest magnitude of any
dataset measured in weights that are known to be real, in the Nov 2026 tree:

- AllenNLP's and bilm-tf's test models (tests/fixtures/elmo, = shared/data/elmo_fixture): 2.03 and 2.00;
- the embedded en_gutenberg_tiny and zh_classics_tiny (trained here): 2.22 and 2.06;
- ELMoForManyLangs' own random initialisation (tests/data/manylangs_tiny), converted: 1.96;
- a fresh :class:`BiLm` of every preset: 2.00 (the highway carry bias starts at 2).

The largest are highway carry biases and character embeddings; no published full-size file was
available to measure. :data:`MAX_ABS_WEIGHT` allows some 450 times the largest seen. The probe
(:func:`check_outputs`) catches weights that are each plausible but together give absurd vectors;
on it (rare bytes included) the vectors of the models above stay below 51 (en_gutenberg_tiny's token
layer; the others below 12), and :data:`MAX_ABS_OUTPUT` allows some 2000 times that.
"""
import io
from itertools import count
from pathlib import Path
from typing import BinaryIO, Callable, Dict, NamedTuple, Optional, Tuple, Union

import h5py
import numpy as np
import torch

from ..errors import ElmoWeightsError
from ..util.files import PathLike, atomic_write
from ..model.bilm import BiLm
from ..model.token_ids import TokenIds
from ..model.options import ElmoOptions
from ..util.threads import torch_threads

Source = Union[PathLike, BinaryIO]

MAX_ABS_WEIGHT = 1e3  # real ELMo weights measured stay below 2.3 (module docstring)
MAX_ABS_OUTPUT = 1e5  # real ELMo vectors measured on the probe stay below 51 (module docstring)
DAMAGED = "the file is damaged (or was written by a training run that diverged): download or export it again"


class _Entry(NamedTuple):
    """One dataset of the file: its shape, and the model's parameters it holds, as views in the file's layout (two
    for an LSTM's ``W_0``: joined along the first axis)."""

    shape: Tuple[int, ...]
    views: Callable[[BiLm], Tuple[torch.Tensor, ...]]

    def get(self, m: BiLm) -> torch.Tensor:
        """The file's array from the model."""
        views = [v.detach() for v in self.views(m)]
        return views[0] if len(views) == 1 else torch.cat(views)

    def put(self, m: BiLm, value: torch.Tensor) -> None:
        """The model's parameters from the file's array (under ``torch.no_grad``)."""
        views = self.views(m)
        for view, part in zip(views, value.split([v.shape[0] for v in views])):
            view.copy_(part)


def layout(options: ElmoOptions) -> Dict[str, _Entry]:
    """The datasets an hdf5 file for ``options`` must hold, with their shapes."""
    d, p, h, f = options.char_embedding_dim, options.projection_dim, options.lstm_dim, options.n_filters
    rows = options.n_characters - 1 if options.char_vocabulary else 261
    entries = {"char_embed": _Entry((rows, d), lambda m: (m.char_cnn.embedding.weight[1:],))}  # row 0: padding
    if options.word_dim:
        entries["word_embed"] = _Entry((len(options.word_embedding["words"]), options.word_dim), lambda m: (m.word_embedding.weight,))
    for i, (w, n) in enumerate(options.filters):
        entries[f"CNN/W_cnn_{i}"] = _Entry((1, w, d, n), lambda m, i=i: (m.char_cnn.weights[i].permute(2, 1, 0)[None],))
        entries[f"CNN/b_cnn_{i}"] = _Entry((n,), lambda m, i=i: (m.char_cnn.biases[i],))
    for k in range(options.n_highway):
        for gate in ("carry", "transform"):
            entries[f"CNN_high_{k}/W_{gate}"] = _Entry((f, f), lambda m, a=f"w_{gate}", k=k: (getattr(m.highway, a)[k],))
            entries[f"CNN_high_{k}/b_{gate}"] = _Entry((f,), lambda m, a=f"b_{gate}", k=k: (getattr(m.highway, a)[k],))
    entries["CNN_proj/W_proj"] = _Entry((options.word_dim + f, p), lambda m: (m.w_proj,))
    entries["CNN_proj/b_proj"] = _Entry((p,), lambda m: (m.b_proj,))
    for direction, stack in ((0, "forward_lstms"), (1, "backward_lstms")):
        for layer in range(options.n_layers):
            prefix = f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"

            def cell(m: BiLm, s: str = stack, i: int = layer):
                return getattr(m, s)[i]

            entries[f"{prefix}/W_0"] = _Entry((2 * p, 4 * h), lambda m, cell=cell: (cell(m).w_input, cell(m).w_hidden))
            entries[f"{prefix}/B"] = _Entry((4 * h,), lambda m, cell=cell: (cell(m).bias,))
            entries[f"{prefix}/W_P_0"] = _Entry((h, p), lambda m, cell=cell: (cell(m).w_proj,))
    return entries


def _shapes(f: h5py.File) -> Dict[str, Tuple[int, ...]]:
    """Every dataset's name and shape: the file's metadata, no data read."""
    shapes: Dict[str, Tuple[int, ...]] = {}
    f.visititems(lambda key, obj: shapes.__setitem__(key, tuple(obj.shape)) if isinstance(obj, h5py.Dataset) else None)
    return shapes


def _count(shapes: Dict[str, Tuple[int, ...]], pattern: str) -> int:
    """How many of ``pattern.format(0)``, ``pattern.format(1)``, ... are datasets, in a row from 0."""
    return next(n for n in count() if pattern.format(n) not in shapes)


def _settings(shapes: Dict[str, Tuple[int, ...]]) -> Dict[str, object]:
    """The options' settings that datasets of these names and shapes hold, by their ``options.json`` names.

    Applied to a file's shapes and to :func:`layout`'s for the options, it turns a mismatch into the settings
    that differ. A setting the shapes do not show (its dataset is missing or not of the expected rank) is left
    out. ``char_cnn.n_characters`` is the character embedding's rows plus one (262 for byte models).
    """
    def axis(key: str, i: int, rank: int) -> Optional[int]:
        shape = shapes.get(key)
        return shape[i] if shape is not None and len(shape) == rank else None

    cell = "RNN_0/RNN/MultiRNNCell/Cell{}/LSTMCell/"
    filters = [shapes[f"CNN/W_cnn_{i}"] for i in range(_count(shapes, "CNN/W_cnn_{}"))]
    rows = axis("char_embed", 0, 2)
    found = {
        "lstm.n_layers": _count(shapes, cell + "B"),
        "lstm.dim": axis(cell.format(0) + "W_P_0", 0, 2),
        "lstm.projection_dim": axis("CNN_proj/b_proj", 0, 1),
        "char_cnn.n_highway": _count(shapes, "CNN_high_{}/W_carry"),
        "char_cnn.filters": [[s[1], s[3]] for s in filters] if all(len(s) == 4 for s in filters) else None,
        "char_cnn.embedding.dim": axis("char_embed", 1, 2),
        "char_cnn.n_characters": None if rows is None else rows + 1,
        "word_embedding.dim": axis("word_embed", 1, 2) if "word_embed" in shapes else 0,
        "word_embedding.words": axis("word_embed", 0, 2),
    }
    return {key: value for key, value in found.items() if value is not None}


def _check_fit(found: Dict[str, Tuple[int, ...]], expected: Dict[str, Tuple[int, ...]], name: str) -> None:
    """Refuse a file whose dataset names or shapes (``found``) are not the options' (``expected``), saying which
    settings differ."""
    missing = sorted(set(expected) - set(found))
    unexpected = sorted(set(found) - set(expected))
    if missing or unexpected:
        problem = "; ".join(
            f"{what} datasets {keys[:5]}{f' and {len(keys) - 5} more' if len(keys) > 5 else ''}"
            for what, keys in (("missing", missing), ("unexpected", unexpected))
            if keys
        )
    else:
        wrong = next((key for key, shape in expected.items() if found[key] != shape), None)
        if wrong is None:
            return
        problem = f"dataset {wrong!r} has shape {found[wrong]}, but the options expect {expected[wrong]}"
    held, stated = _settings(found), _settings(expected)
    differ = [
        f"{key} is {stated[key]} in the options but {held[key]} in the weights"
        for key in stated
        if key in held and held[key] != stated[key]
    ]
    raise ElmoWeightsError(
        f"ELMo weight file {name} does not fit its options: {'; '.join(differ + [problem])}. Check that "
        f"options.json belongs to these weights."
    )


def _name(source: Source) -> str:
    return str(source) if isinstance(source, (str, Path)) else getattr(source, "name", "<in-memory weights>")


def read_weights(source: Source, options: ElmoOptions) -> Dict[str, np.ndarray]:
    """All datasets of a weights file as float32 arrays, validated against ``options``."""
    return {key: array.astype(np.float32) for key, array in _read_datasets(source, options).items()}


def _read_datasets(source: Source, options: ElmoOptions) -> Dict[str, np.ndarray]:
    """All datasets of a weights file in their stored float dtype, validated against ``options``."""
    name = _name(source)
    if isinstance(source, (str, Path)) and not Path(source).exists():
        raise ElmoWeightsError(f"ELMo weight file not found: {name}")
    expected = layout(options)
    reading = "its structure"  # what failed, for the error message
    try:
        with h5py.File(source, "r") as f:
            _check_fit(_shapes(f), {key: entry.shape for key, entry in expected.items()}, name)
            arrays = {}
            for key in expected:
                reading = f"dataset {key!r}"
                dataset = f[key]
                if dataset.dtype.kind != "f":
                    raise ElmoWeightsError(
                        f"ELMo weight file {name}: dataset {key!r} has dtype {dataset.dtype}, expected floating point"
                    )
                arrays[key] = _plausible(np.asarray(dataset[()]), name, key)
    except ElmoWeightsError:
        raise
    except (OSError, RuntimeError, KeyError, ValueError) as err:  # what h5py raises for damaged files
        raise ElmoWeightsError(
            f"ELMo weight file {name} cannot be read as HDF5: reading {reading} failed ({err}). It is truncated or "
            f"damaged: download or export it again."
        ) from None
    return arrays


def _plausible(array: np.ndarray, name: str, key: str) -> np.ndarray:
    """``array`` if every value is finite and at most :data:`MAX_ABS_WEIGHT` in magnitude; else an error naming it."""
    if not np.isfinite(array).all():
        raise ElmoWeightsError(f"ELMo weight file {name}: dataset {key!r} holds NaN or infinite values; {DAMAGED}")
    largest = float(np.abs(array).max()) if array.size else 0.0
    if largest > MAX_ABS_WEIGHT:
        raise ElmoWeightsError(
            f"ELMo weight file {name}: dataset {key!r} holds values up to {largest:.3g} in magnitude, where ELMo "
            f"weights stay below {MAX_ABS_WEIGHT:g} (real ones below 3); {DAMAGED}"
        )
    return array


def _probe(options: ElmoOptions) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Token ids that together read every character embedding but the padding ones (and one word row per token)."""
    rows = options.n_characters if options.char_vocabulary else 262
    pad = TokenIds(options).pad_char
    chars = np.array([i for i in range(1, rows) if i != pad], dtype=np.int64)
    n_tokens = -(-len(chars) // options.max_characters_per_token)
    char_ids = torch.from_numpy(np.resize(chars, (n_tokens, options.max_characters_per_token)))
    word_ids = torch.arange(n_tokens) % len(options.word_embedding["words"]) if options.word_dim else None
    return char_ids, word_ids


def check_outputs(model: BiLm, name: str) -> None:
    """Refuse a biLM whose vectors on :func:`_probe` are not finite or exceed :data:`MAX_ABS_OUTPUT`.

    Each weight may be plausible and the vectors still absurd; one short forward pass shows it. The
    probe's tokens go through the LSTMs as rows of two steps: the second step reads the hidden-state
    weights, and fewer steps keep the check cheap for the large models (a step costs the same for
    one row or a few).
    """
    char_ids, word_ids = _probe(model.options)
    with torch.no_grad(), torch_threads(1):  # one thread is never slow on a busy machine
        tokens = model.token_layer(char_ids, word_ids)
        if tokens.shape[0] % 2:
            tokens = torch.cat((tokens, tokens[:1]))
        layers, _ = model(tokens.view(-1, 2, tokens.shape[1]), [2] * (tokens.shape[0] // 2))
    for k, layer in enumerate(layers):
        largest = float(layer.abs().max())
        if not largest <= MAX_ABS_OUTPUT:  # also true for NaN
            raise ElmoWeightsError(
                f"ELMo weight file {name}: layer {k} of the biLM gives values of {largest:.3g} on a probe of every "
                f"character, where ELMo vectors stay below {MAX_ABS_OUTPUT:g} (real ones below 60); {DAMAGED}"
            )


def load_bilm(options: ElmoOptions, weights: Source) -> BiLm:
    """A :class:`BiLm` with the weights of ``weights``, in eval mode. Nothing is returned if the file is bad.

    The parameters are float32; ``weights_dtype`` records whether the file stored them all as float16, so
    that :func:`storage_dtype` can write them back at the size they came in.
    """
    arrays = _read_datasets(weights, options)
    model = BiLm(options)
    with torch.no_grad():
        for key, entry in layout(options).items():
            entry.put(model, torch.from_numpy(arrays[key].astype(np.float32)))
    model.weights_dtype = "float16" if all(array.dtype == np.float16 for array in arrays.values()) else "float32"
    model.eval()
    check_outputs(model, _name(weights))
    return model


def write_weights(model: BiLm, target: Source, dtype: str = "float32") -> None:
    """Write ``model``'s weights in the AllenNLP layout; ``dtype="float16"`` halves the file (loads as float32).

    The file has HDF5's checksums on its metadata (the HDF5 1.10 format) and on every dataset
    (Fletcher-32), so damage anywhere in it fails the read instead of giving other weights.
    """
    if dtype not in ("float32", "float16"):
        raise ElmoWeightsError(f"Weights are written as 'float32' or 'float16', not {dtype!r}: pass one of the two")
    with h5py.File(target, "w", libver="v110") as f:
        for key, entry in layout(model.options).items():
            f.create_dataset(key, data=entry.get(model).cpu().numpy().astype(dtype), fletcher32=True)


def storage_dtype(model: BiLm) -> str:
    """The dtype to save ``model``'s weights in: float16 if they came from a float16 file and are still float16
    values (not fine-tuned since), so a saved pipeline is no larger than its weight file; else float32 (exact)."""
    if model.weights_dtype == "float16":
        weights = (entry.get(model) for entry in layout(model.options).values())
        if all(torch.equal(w.to(torch.float16).to(w.dtype), w) for w in weights):
            return "float16"
    return "float32"


def weights_to_bytes(model: BiLm, dtype: str = "float32") -> bytes:
    buffer = io.BytesIO()
    write_weights(model, buffer, dtype=dtype)
    return buffer.getvalue()


def bilm_from_bytes(options: ElmoOptions, data: bytes) -> BiLm:
    return load_bilm(options, io.BytesIO(data))


def load_files(options_file: PathLike, weight_file: PathLike) -> BiLm:
    """Build a biLM from an ``options.json`` and a weights ``.hdf5``."""
    return load_bilm(ElmoOptions.from_file(options_file), weight_file)


def save_files(model: BiLm, options_file: PathLike, weight_file: PathLike, dtype: str = "float32") -> None:
    """Write ``options.json`` and the weights ``.hdf5``, each atomically (a crash leaves no half-written file).

    Missing folders on the way are created.
    """
    atomic_write(options_file, model.options.to_file)
    atomic_write(weight_file, lambda p: write_weights(model, p, dtype=dtype))
