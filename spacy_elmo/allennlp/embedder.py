"""AllenNLP 0.9's ``ElmoEmbedder`` (``allennlp.commands.elmo``, removed in 1.0) on this package's biLM, so that tools
built on it (SeqVec, flair's ELMo embeddings) port by changing the import; not ``spacy_elmo.ElmoEmbedder`` (docs/api.md,
"Two classes called ElmoEmbedder")."""
import json
from contextlib import nullcontext
from pathlib import Path
from typing import IO, Any, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import h5py
import numpy as np
import numpy.typing as npt
import torch

from ..errors import NotDownloadedError
from ..model.fixed_mix import fixed_mix_weights, mix_layers
from ..sources.download import MANIFEST, model_dir
from ..util.chunks import chunked
from ..util.files import PathLike
from .elmo import ConfigurationError, ElmoBiLm, batch_to_ids

# The model 0.9 used when given no files: the published "original" (2x4096_512_2048cnn_2xhighway).
DEFAULT_MODEL = "original"
DEFAULT_BATCH_SIZE = 64
OUTPUT_FORMATS = ("all", "top", "average")

# One sentence's layers, float32 ``(n_layers + 1, n_tokens, 2 * projection_dim)``.
Vectors = npt.NDArray[np.float32]


def default_model() -> str:
    """The name of 0.9's default model where it is downloaded; else a one-line error saying how to get it."""
    if not (model_dir(DEFAULT_MODEL) / MANIFEST).is_file():
        raise NotDownloadedError(
            f"spacy_elmo.allennlp.ElmoEmbedder() uses the published '{DEFAULT_MODEL}' model, which is not downloaded: run python -m "
            f"spacy_elmo download {DEFAULT_MODEL}, or pass options_file and weight_file"
        )
    return DEFAULT_MODEL


class ElmoEmbedder:
    """AllenNLP 0.9's embedder, stateful as 0.9's (not ``spacy_elmo.ElmoEmbedder``, stateless by default): tokenised
    sentences as ``(3, n_tokens, 2 * projection_dim)`` float32 arrays.

    ``options_file``, ``weight_file``: the biLM (``options_file`` alone may be a downloaded model's name, and a
    published model's URLs, such as 0.9's ``DEFAULT_OPTIONS_FILE`` and ``DEFAULT_WEIGHT_FILE``, stand for it once it
    is downloaded); neither means the published ``original`` model, as in 0.9, which must be downloaded first
    (``python -m spacy_elmo download original``). ``cuda_device``: a GPU index, or -1 for the CPU.

    LSTM state is carried from batch to batch as in 0.9 (:meth:`reset_states` starts over); ``stateful``,
    ``initial_state`` and ``precision`` (not in 0.9) as :class:`~spacy_elmo.allennlp.ElmoBiLm` takes them.
    """

    def __init__(
        self,
        options_file: Optional[PathLike] = None,
        weight_file: Optional[PathLike] = None,
        cuda_device: int = -1,
        **settings: Any,
    ):
        if options_file is None and weight_file is None:
            options_file = default_model()
        device = torch.device("cpu" if cuda_device < 0 else f"cuda:{cuda_device}")
        self.elmo_bilm = ElmoBiLm(options_file, weight_file, device=device, **settings)
        self.elmo_bilm.eval()
        self.cuda_device = cuda_device

    def __repr__(self) -> str:
        return f"spacy_elmo.allennlp.ElmoEmbedder({self.elmo_bilm.runtime.describe()})"

    def reset_states(self) -> None:
        """Forget the carried LSTM state."""
        self.elmo_bilm.reset_states()

    def _empty(self) -> np.ndarray:
        return np.zeros((self.elmo_bilm.num_layers, 0, self.elmo_bilm.get_output_dim()), dtype=np.float32)

    def batch_to_embeddings(self, batch: Sequence[Sequence[str]]) -> Tuple[torch.Tensor, torch.Tensor]:
        """The layers of a batch, ``(batch, 3, timesteps, dim)`` without ``<S>``/``</S>``, and its mask."""
        char_ids = batch_to_ids(batch).to(self.elmo_bilm.encoder.device)
        with torch.no_grad():
            output = self.elmo_bilm(char_ids)
        mask = output["mask"][:, 2:]
        layers = torch.stack([layer[:, 1:-1].masked_fill(~mask.unsqueeze(-1), 0.0) for layer in output["activations"]], 1)
        return layers, mask

    def embed_sentence(self, sentence: Sequence[str]) -> Vectors:
        """The layers of one sentence, ``(3, len(sentence), dim)``."""
        return self.embed_batch([sentence])[0]

    def embed_batch(self, batch: Sequence[Sequence[str]]) -> List[Vectors]:
        """The layers of each sentence of one biLM batch. A batch of one empty sentence runs nothing (as in 0.9)."""
        if len(batch) == 1 and len(batch[0]) == 0:
            return [self._empty()]
        if not batch:
            return []
        layers, mask = self.batch_to_embeddings(batch)
        layers, lengths = layers.float().cpu().numpy(), mask.sum(dim=1).tolist()
        return [layers[i, :, :n].copy() if n else self._empty() for i, n in enumerate(lengths)]

    def embed_sentences(self, sentences: Iterable[Sequence[str]], batch_size: int = DEFAULT_BATCH_SIZE) -> Iterator[Vectors]:
        """The layers of each sentence of a stream, ``batch_size`` sentences per biLM batch."""
        for batch in chunked(sentences, batch_size):
            yield from self.embed_batch(batch)

    def embed_file(
        self,
        input_file: Union[IO, PathLike],
        output_file_path: PathLike,
        output_format: str = "all",
        batch_size: int = DEFAULT_BATCH_SIZE,
        forget_sentences: bool = False,
        use_sentence_keys: bool = False,
    ) -> None:
        """Embed a file of one whitespace-tokenised sentence per line into HDF5, in 0.9's layout (docs/migrating.md,
        "ElmoEmbedder of AllenNLP 0.9"). ``input_file``: an open text file or a path. Empty lines, repeated lines as
        keys and an unknown format are a ``ConfigurationError``, as in 0.9.
        """
        if output_format not in OUTPUT_FORMATS:
            raise ConfigurationError(f"output_format must be one of {', '.join(OUTPUT_FORMATS)}, found {output_format!r}")
        with open(input_file, encoding="utf-8") if isinstance(input_file, (str, Path)) else nullcontext(input_file) as lines:
            sentences = [line.strip() for line in lines]
        blank = [i for i, line in enumerate(sentences) if not line]
        if blank:
            raise ConfigurationError(f"input_file has empty lines (0-based: {blank[:10]}); remove them, one sentence per line")
        if use_sentence_keys and len(set(sentences)) < len(sentences):
            raise ConfigurationError("use_sentence_keys needs distinct lines, and input_file repeats one; leave it off to key by line number")
        from tqdm import tqdm

        vectors = self.embed_sentences((line.split() for line in sentences), batch_size)
        mix = None if output_format == "all" else fixed_mix_weights(output_format, self.elmo_bilm.num_layers)
        with h5py.File(output_file_path, "w") as out:
            for i, layers in tqdm(enumerate(vectors), total=len(sentences), unit="sentence"):
                output = layers if mix is None else mix_layers(mix, layers)
                out.create_dataset(sentences[i] if use_sentence_keys else str(i), data=output.astype(np.float32))
            if not forget_sentences and not use_sentence_keys:
                index = {line: str(i) for i, line in enumerate(sentences)}
                out.create_dataset("sentence_to_index", data=[json.dumps(index)], dtype=h5py.string_dtype())
