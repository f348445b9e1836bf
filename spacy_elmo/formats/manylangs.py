"""Convert an ELMoForManyLangs model (HIT-SCIR) once into this package's AllenNLP-style files (why convert, and
why their pickles are safe to read: docs/models.md, "ELMoForManyLangs models").

Their folder holds ``config.json`` (whose ``config_path`` names the architecture JSON; the
published zips sometimes lack it, and their README says to use ``cnn_50_100_512_4096_sample.json``
then, reproduced in :data:`PUBLISHED_ARCHITECTURE`), ``char.dic`` and ``word.dic`` (``entry<TAB>id``
per line) and two PyTorch pickles of ``state_dict``s, ``token_embedder.pkl`` and ``encoder.pkl``.

How their model maps onto this one (their code: ``elmoformanylangs/modules``):

- characters come from a table, not bytes; a token starts with the table's ``<eow>`` id and ends
  with ``<bow>`` (their batching code swaps the two, in training and use alike, and the
  conversion keeps what the weights learned); see :class:`~spacy_elmo.model.token_ids.TokenIds`;
- the convolutions (``Conv1d``, ``(out, in, width)``) have the layout of this package's char CNN;
  their bias is added before the max, which gives the same maximum;
- their highway is ``g * x + (1 - g) * relu(A x)`` with ``[A; B]`` in one ``Linear``; here the
  carry gate ``c`` multiplies ``relu``, so ``c = 1 - g``: the gate's weights and bias are negated;
- the projection reads ``[word vector, char features]`` (a ``Linear``, transposed here);
- their LSTM cells order the gates ``i, f, g, o`` with the whole bias stored (no +1 added at run
  time); this package uses TensorFlow's ``i, j, f, o`` and adds 1 to the forget gate at run time,
  so the blocks are reordered and 1 is taken off the stored forget bias;
- both layers are residual after the first, as here with ``use_skip_connections``.
"""
import copy
import json
import shutil
import zipfile
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch

from ..errors import ManyLangsError
from ..util.files import PathLike, atomic_write
from ..model.bilm import BiLm
from ..model.options import ElmoOptions
from .weights import save_files

# configs/cnn_50_100_512_4096_sample.json of ELMoForManyLangs: the architecture of every published model.
PUBLISHED_ARCHITECTURE: Dict[str, Any] = {
    "encoder": {"name": "elmo", "projection_dim": 512, "cell_clip": 3, "proj_clip": 3, "dim": 4096, "n_layers": 2},
    "token_embedder": {
        "name": "cnn",
        "activation": "relu",
        "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
        "n_highway": 2,
        "word_dim": 100,
        "char_dim": 50,
        "max_characters_per_token": 50,
    },
    "classifier": {"name": "sampled_softmax", "n_samples": 8192},
    "dropout": 0.1,
}
FILES = ("config.json", "char.dic", "word.dic", "token_embedder.pkl", "encoder.pkl")


def read_lexicon(path: Path) -> List[Optional[str]]:
    """A ``.dic`` file as a list indexed by id (None for ids no line names).

    Parsed as their loader does: each line is stripped and split on tabs, and a line left with
    one field (its entry was whitespace that strip removed) is the ideographic space U+3000.
    """
    index: Dict[str, int] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        fields = line.strip().split("\t")
        if fields == [""]:
            continue
        if len(fields) == 1:
            fields.insert(0, "\u3000")
        if len(fields) != 2 or not fields[1].lstrip("-").isdigit():
            raise ManyLangsError(f"{path}: expected 'entry<TAB>id' lines, found {line!r}")
        index[fields[0]] = int(fields[1])
    entries: List[Optional[str]] = [None] * (max(index.values()) + 1 if index else 0)
    for entry, i in index.items():
        entries[i] = entry
    return entries


def architecture(model_dir: Path) -> Dict[str, Any]:
    """The architecture JSON named by ``config.json`` (looked up as their loader does, then the published one)."""
    try:
        config_path = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))["config_path"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ManyLangsError(f"{model_dir}/config.json is missing or has no 'config_path' ({err})") from None
    for candidate in (model_dir / config_path, model_dir / Path(config_path).name):
        if candidate.is_file():
            return json.loads(candidate.read_text(encoding="utf-8"))
    return copy.deepcopy(PUBLISHED_ARCHITECTURE)


def _table(entries: List[Optional[str]], rows: int, names: Dict[str, str], path: Path) -> Dict[str, Any]:
    """A vocabulary of ``options.json``: the entries padded to the weight matrix's rows, and the specials."""
    if len(entries) > rows:
        raise ManyLangsError(f"{path} has ids up to {len(entries) - 1}, but its embedding has {rows} rows")
    missing = [e for e in names.values() if e not in entries]
    if missing:
        raise ManyLangsError(f"{path} lacks the entries {missing} that ELMoForManyLangs models need")
    return {"entries": entries + [None] * (rows - len(entries)), **names}


def convert_options(arch: Dict[str, Any], chars: Dict[str, Any], words: Optional[Dict[str, Any]]) -> ElmoOptions:
    """This package's options for an ELMoForManyLangs architecture and its vocabularies."""
    embedder, encoder = arch["token_embedder"], arch["encoder"]
    char_table = {"characters": chars["entries"], **{k: v for k, v in chars.items() if k != "entries"}}
    if embedder.get("name", "").lower() != "cnn" or encoder.get("name", "").lower() != "elmo":
        raise ManyLangsError(
            f"Only ELMoForManyLangs models with a 'cnn' token embedder and an 'elmo' encoder can be converted "
            f"(the published ones); found {embedder.get('name')!r} and {encoder.get('name')!r}"
        )
    if not embedder.get("char_dim"):
        raise ManyLangsError("ELMoForManyLangs models without characters (char_dim 0) cannot be converted")
    data: Dict[str, Any] = {
        "lstm": {
            "dim": encoder["dim"],
            "projection_dim": encoder["projection_dim"],
            "n_layers": encoder["n_layers"],
            "cell_clip": encoder.get("cell_clip"),
            "proj_clip": encoder.get("proj_clip"),
            "use_skip_connections": True,
        },
        "char_cnn": {
            "embedding": {"dim": embedder["char_dim"]},
            "filters": embedder["filters"],
            "n_highway": embedder["n_highway"],
            "n_characters": len(char_table["characters"]) + 1,
            "max_characters_per_token": embedder["max_characters_per_token"],
            "activation": embedder["activation"],
            "vocabulary": char_table,
        },
        # Their Embedder starts every model from zero states, so "auto" reproduces its numbers.
        "training_initial_state": "zeros",
        "converted_from": "ELMoForManyLangs",
    }
    if words is not None:
        names = {k: v for k, v in words.items() if k != "entries"}
        data["word_embedding"] = {"dim": embedder["word_dim"], "words": words["entries"], **names}
    return ElmoOptions.from_dict(data, source="converted ELMoForManyLangs options")


def _load_state(path: Path) -> Dict[str, torch.Tensor]:
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise ManyLangsError(f"{path} is missing") from None
    except Exception as err:  # torch raises several kinds for damaged or code-carrying pickles
        raise ManyLangsError(f"{path} is not a plain PyTorch state_dict (refused or damaged: {err})") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ManyLangsError(f"{path} is not a state_dict of tensors")
    return state


def _gates_to_tf(matrix: torch.Tensor) -> torch.Tensor:
    """Blocks along dim 0 from their (i, f, g, o) to TensorFlow's (i, j=g, f, o)."""
    i, f, g, o = matrix.chunk(4, dim=0)
    return torch.cat((i, g, f, o))


def build_bilm(options: ElmoOptions, token: Dict[str, torch.Tensor], encoder: Dict[str, torch.Tensor]) -> BiLm:
    """A :class:`BiLm` holding the weights of their two state_dicts."""
    model = BiLm(options)
    f = options.n_filters
    try:
        with torch.no_grad():
            model.char_cnn.embedding.weight[1:].copy_(token["char_emb_layer.embedding.weight"])
            model.char_cnn.embedding.weight[0].zero_()
            for i in range(len(options.filters)):
                model.char_cnn.weights[i].copy_(token[f"convolutions.{i}.weight"])
                model.char_cnn.biases[i].copy_(token[f"convolutions.{i}.bias"])
            for k in range(options.n_highway):
                weight, bias = token[f"highways._layers.{k}.weight"], token[f"highways._layers.{k}.bias"]
                model.highway.w_transform[k].copy_(weight[:f].t())
                model.highway.b_transform[k].copy_(bias[:f])
                model.highway.w_carry[k].copy_(-weight[f:].t())
                model.highway.b_carry[k].copy_(-bias[f:])
            if model.word_embedding is not None:
                model.word_embedding.weight.copy_(token["word_emb_layer.embedding.weight"])
            model.w_proj.copy_(token["projection.weight"].t())
            model.b_proj.copy_(token["projection.bias"])
            h = options.lstm_dim
            for stack, prefix in ((model.forward_lstms, "forward_layer"), (model.backward_lstms, "backward_layer")):
                for k, lstm in enumerate(stack):
                    cell = f"{prefix}_{k}"
                    lstm.w_input.copy_(_gates_to_tf(encoder[f"{cell}.input_linearity.weight"]).t())
                    lstm.w_hidden.copy_(_gates_to_tf(encoder[f"{cell}.state_linearity.weight"]).t())
                    bias = _gates_to_tf(encoder[f"{cell}.state_linearity.bias"]).clone()
                    bias[2 * h : 3 * h] -= 1.0  # the +1 this package adds to the forget gate at run time
                    lstm.bias.copy_(bias)
                    lstm.w_proj.copy_(encoder[f"{cell}.state_projection.weight"].t())
    except KeyError as err:
        raise ManyLangsError(f"The ELMoForManyLangs weights lack {err}; is this a model with a CNN token embedder?") from None
    except RuntimeError as err:
        raise ManyLangsError(f"The ELMoForManyLangs weights do not match their architecture JSON ({err})") from None
    return model.eval()


def convert(model_dir: PathLike, options_file: PathLike, weight_file: PathLike) -> ElmoOptions:
    """Read the ELMoForManyLangs folder ``model_dir`` and write ``options_file`` and ``weight_file`` (atomically)."""
    folder = Path(model_dir)
    arch = architecture(folder)
    token = _load_state(folder / "token_embedder.pkl")
    encoder = _load_state(folder / "encoder.pkl")
    char_rows = token.get("char_emb_layer.embedding.weight")
    if char_rows is None:
        raise ManyLangsError(f"{folder}/token_embedder.pkl has no character embedding")
    char_names = {
        "begin_of_word": "<eow>",  # sic: see the module docstring
        "end_of_word": "<bow>",
        "padding": "<pad>",
        "unknown": "<oov>",
        "begin_of_sentence": "<bos>",
        "end_of_sentence": "<eos>",
    }
    chars = _table(read_lexicon(folder / "char.dic"), char_rows.shape[0], char_names, folder / "char.dic")
    words = None
    if arch["token_embedder"].get("word_dim", 0) > 0:
        word_rows = token["word_emb_layer.embedding.weight"].shape[0]
        word_names = {"unknown": "<oov>", "begin_of_sentence": "<bos>", "end_of_sentence": "<eos>"}
        words = _table(read_lexicon(folder / "word.dic"), word_rows, word_names, folder / "word.dic")
    options = convert_options(arch, chars, words)
    save_files(build_bilm(options, token, encoder), options_file, weight_file)
    return options


def needed_files(names: List[str], where: PathLike) -> Dict[str, str]:
    """Which member of an archive's ``names`` holds each file the converter reads (by base name).

    The architecture JSON is any other ``.json`` beside ``config.json``. Raises, naming ``where`` (the archive
    or folder), if a required file is missing.
    """
    found: Dict[str, str] = {}
    for name in names:
        base = Path(name).name
        if base in FILES or (base.endswith(".json") and base != "config.json"):
            found.setdefault(base, name)
    missing = [f for f in ("config.json", "char.dic", "token_embedder.pkl", "encoder.pkl") if f not in found]
    if missing:
        raise ManyLangsError(f"{where} lacks {missing}; it is not an ELMoForManyLangs model")
    return found


def extract(source: PathLike, folder: PathLike) -> None:
    """Copy the files the converter reads out of a model ``.zip``, or out of the folder it unpacks to, into
    ``folder`` (flat; nothing else is written)."""
    source, folder = Path(source), Path(folder)
    if source.is_dir():
        members = [str(p.relative_to(source)) for p in sorted(source.rglob("*")) if p.is_file()]
        for base, member in needed_files(members, source).items():
            atomic_write(folder / base, lambda p, m=member: shutil.copyfile(source / m, p))
        return
    try:
        with zipfile.ZipFile(source) as zf:
            for base, member in needed_files(zf.namelist(), source).items():
                atomic_write(folder / base, lambda p, m=member: p.write_bytes(zf.read(m)))
    except (zipfile.BadZipFile, OSError) as err:
        raise ManyLangsError(f"{source} is not a readable zip archive ({err})") from None


def convert_archive(source: PathLike, work_dir: PathLike, options_file: PathLike, weight_file: PathLike) -> ElmoOptions:
    """:func:`extract` (from a ``.zip`` or a folder) then :func:`convert`; ``work_dir`` holds the extracted files
    and is removed afterwards."""
    work = Path(work_dir)
    try:
        extract(source, work)
        return convert(work, options_file, weight_file)
    finally:
        shutil.rmtree(work, ignore_errors=True)
