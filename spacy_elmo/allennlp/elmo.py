"""AllenNLP's ``Elmo`` module, ``batch_to_ids`` and the biLM module under them, on this package's biLM.

The biLM is :class:`~spacy_elmo.model.encoder.ElmoEncoder`'s (the char CNN, highways and LSTMs that reproduce the
reference fixtures); this module only adds AllenNLP's interface: character-id tensors in, the layers with their
``<S>``/``</S>`` positions out, state carried from call to call, trainable scalar mixes.
"""
import warnings
from typing import Any, Dict, List, Optional, Sequence, TypedDict, Union

import numpy as np
import torch
from torch import nn

from ..errors import ElmoSettingsError
from ..model.bilm import BiLmState
from ..model.chars import BOS_TOKEN, EOS_TOKEN, tokens_to_ids
from ..model.encoder import ElmoEncoder
from .scalar_mix import ScalarMix
from ..util.files import PathLike
from ..runtime import BiLmSettings, ElmoRuntime
from ..runtime.settings import ALLENNLP, settings_in

# AllenNLP's fixed token width: every token is 50 character ids (its bytes cut to 48, framed, padded).
MAX_CHARACTERS = 50
# AllenNLP's behaviour: each batch row continues the LSTM state of the same row of the call before, and torch's
# thread count is left as it is.
ALLENNLP_SETTINGS = BiLmSettings(stateful=True, threads=None)
# The settings ``ElmoBiLm``, ``Elmo`` and ``ElmoEmbedder`` take beyond AllenNLP's arguments (see BiLmSettings).
EXTRA_SETTINGS = settings_in(ALLENNLP)

# AllenNLP's name for a setting that cannot work; ``except ConfigurationError`` catches this package's.
ConfigurationError = ElmoSettingsError


class BiLmOutput(TypedDict):
    """What :meth:`ElmoBiLm.forward` returns (a dict, as in AllenNLP), each key with its own type."""

    activations: List[torch.Tensor]
    mask: torch.Tensor


class ElmoOutput(TypedDict):
    """What :meth:`Elmo.forward` returns (a dict, as in AllenNLP), each key with its own type."""

    elmo_representations: List[torch.Tensor]
    mask: torch.Tensor


def batch_to_ids(batch: Sequence[Sequence[str]]) -> torch.Tensor:
    """Character ids of tokenised sentences, ``(len(batch), longest sentence, 50)`` int64, as AllenNLP makes them.

    Each token is its UTF-8 bytes (the first 48) + 1, framed by begin/end-of-word ids and padded; the literal
    tokens ``<S>`` and ``</S>`` become the sentence-boundary patterns. Positions past a sentence's end are 0.
    """
    sentences = [] if isinstance(batch, str) else list(batch)
    if isinstance(batch, str) or any(isinstance(sentence, str) for sentence in sentences):
        found = "a str" if isinstance(batch, str) else "a str as a sentence"
        raise ElmoSettingsError(
            f"batch must be a list of tokenised sentences (lists of str), e.g. [text.split()]; found {found}"
        )
    sentences = [list(sentence) for sentence in sentences]
    width = max((len(sentence) for sentence in sentences), default=0)
    ids = np.zeros((len(sentences), width, MAX_CHARACTERS), dtype=np.int64)
    for row, sentence in enumerate(sentences):
        ids[row, : len(sentence)] = tokens_to_ids(sentence, MAX_CHARACTERS)
    return torch.from_numpy(ids)


class ElmoBiLm(nn.Module):
    """The biLM as AllenNLP's ``_ElmoBiLm``: ``forward(inputs, word_inputs=None)`` returns ``{"activations": [...],
    "mask": ...}``, ``num_layers`` layers ``(batch, timesteps + 2, 2 * projection_dim)`` with ``<S>`` at position 0
    and ``</S>`` after each sentence's last token, zero past it; the mask (bool) covers both markers.

    By default each batch row starts from the LSTM state that the same row of the previous call ended in (zeros at
    first and for new rows), as AllenNLP does; that is how the published models were trained and evaluated, so it
    reproduces their numbers, but a sentence's vectors then depend on what came before. :meth:`reset_states`
    forgets the state. ``stateful=False`` (not in AllenNLP) starts every sentence from ``initial_state`` instead:
    ``"auto"`` (default: the start the model was trained from), ``"zeros"`` or ``"warm"``; see
    :class:`~spacy_elmo.model.encoder.ElmoEncoder`.

    ``requires_grad``: the biLM's parameters learn (fine-tuning). ``vocab_to_cache``: words whose token vectors are
    computed once, here, so that ``forward`` can take word ids (positions in that list; 0 is padding) instead of
    running the char CNN; with ``requires_grad`` those cached vectors learn too, as in AllenNLP.
    ``precision`` (not in AllenNLP): the matrix products at ``"int8"``/``"bf16"`` (``"fp16"`` on a GPU) for
    inference; only ``"fp32"`` can be fine-tuned. These settings make one
    :class:`~spacy_elmo.runtime.BiLmSettings` (``self.settings``), which checks them. ``device`` (not in AllenNLP,
    as torch modules take it): where the biLM is loaded, so that ``"fp16"`` can be asked for at once.
    """

    def __init__(
        self,
        options_file: Optional[PathLike] = None,
        weight_file: Optional[PathLike] = None,
        requires_grad: bool = False,
        vocab_to_cache: Optional[Sequence[str]] = None,
        *,
        device: Union[str, torch.device, None] = None,
        **settings: Any,
    ):
        super().__init__()
        unknown = sorted(set(settings) - set(EXTRA_SETTINGS))
        if unknown:
            raise ElmoSettingsError(
                f"unknown ELMo setting(s) {unknown}: beyond AllenNLP's arguments, these classes take "
                f"{', '.join(EXTRA_SETTINGS)}"
            )
        self.settings = ALLENNLP_SETTINGS.replace(  # checked once, by BiLmSettings
            options_file=options_file, weight_file=weight_file, frozen=not requires_grad, **settings
        )
        self.runtime = ElmoRuntime.load(self.settings, device)  # the settings applied as for every entry point
        self.encoder = self.runtime.encoder
        _check_byte_model(self.encoder, options_file)
        self.num_layers = self.encoder.options.n_output_layers
        self.word_vectors: Optional[nn.Parameter] = None
        self.register_buffer("boundary_vectors", None)
        if vocab_to_cache is not None:
            self.cache_words(vocab_to_cache, requires_grad)

    @property
    def _elmo_lstm(self) -> "ElmoBiLm":
        """AllenNLP's LSTM stack under its biLM, which holds the carried state: programs reset it between documents
        with ``elmo._elmo_lstm._elmo_lstm.reset_states()``. Here the biLM module (its runtime) holds that state."""
        return self

    def get_output_dim(self) -> int:
        return self.encoder.options.output_dim

    def set_precision(self, precision: str) -> None:
        """Run the biLM's products at ``precision`` from now on (``"fp16"``: after moving the module to a GPU)."""
        frozen = not self.encoder.bilm.w_proj.requires_grad  # the parameters may have been unfrozen since
        self.settings = self.settings.replace(precision=precision, frozen=frozen)
        self.runtime.configure(self.settings)

    def reset_states(self) -> None:
        """Forget the carried LSTM state: the next call starts from zeros, as the first one did."""
        self.runtime.reset_states()

    def cache_words(self, words: Sequence[str], trainable: bool = False) -> None:
        """Compute the token vectors of ``words`` (and of ``<S>``, ``</S>``) now; ``forward``'s ``word_inputs`` then
        index ``words``. They are computed from the weights as they are now and kept (in ``state_dict`` too)."""
        if isinstance(words, str) or not all(isinstance(word, str) for word in words):
            raise ElmoSettingsError("vocab_to_cache must be a list of str words (index 0 is padding)")
        with torch.no_grad():
            vectors = self._token_vectors(self._char_ids([BOS_TOKEN, EOS_TOKEN, *words]))
        self.word_vectors = nn.Parameter(vectors[2:].clone(), requires_grad=trainable)
        self.boundary_vectors = vectors[:2].clone()

    def _apply(self, fn, *args, **kwargs):  # the carried state moves with the module
        result = super()._apply(fn, *args, **kwargs)
        carried = self.runtime.carried
        if carried.state is not None:
            carried.state = BiLmState(fn(carried.state.h), fn(carried.state.c))
        return result

    def _char_ids(self, tokens: Sequence[str]) -> torch.Tensor:
        return torch.from_numpy(tokens_to_ids(tokens, MAX_CHARACTERS)).to(self.encoder.device)

    def _token_vectors(self, char_ids: torch.Tensor) -> torch.Tensor:
        """Token vectors of ``(n, 50)`` char ids, each distinct token run once."""
        if char_ids.shape[0] == 0:
            return self.encoder.bilm.w_proj.new_zeros(0, self.encoder.options.projection_dim)
        distinct, inverse = torch.unique(char_ids, dim=0, return_inverse=True)
        return self.encoder.bilm.token_layer(distinct).index_select(0, inverse)

    def token_embedding(self, inputs: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """The char CNN's vectors of char ids ``(batch, steps, 50)`` whose rows hold ``lengths`` tokens, with ``<S>``
        and ``</S>`` around each row's tokens, zeros past them: ``(batch, steps + 2, projection_dim)``."""
        present = torch.arange(inputs.shape[1], device=inputs.device)[None, :] < lengths[:, None]
        vectors = self._token_vectors(torch.cat((self._char_ids([BOS_TOKEN, EOS_TOKEN]), inputs[present])))
        return _with_boundaries(vectors[2:], vectors[:2], lengths, present)

    def forward(self, inputs: torch.Tensor, word_inputs: Optional[torch.Tensor] = None) -> BiLmOutput:
        """``inputs``: char ids ``(batch, timesteps, 50)`` (from :func:`batch_to_ids`); ``word_inputs``: word ids
        ``(batch, timesteps)`` into ``vocab_to_cache``, used instead of the char ids' tokens when given and all
        inside it (else the char CNN runs on ``inputs``, as in AllenNLP)."""
        lengths = _char_lengths(inputs)
        batch, steps = inputs.shape[:2]
        if batch == 0:  # nothing runs, and the carried state stays
            empty = self.encoder.bilm.w_proj.new_zeros(0, steps + 2, self.get_output_dim())
            return {"activations": [empty] * self.num_layers, "mask": inputs.new_zeros(0, steps + 2, dtype=torch.bool)}
        if word_inputs is not None and self.word_vectors is not None and _in_cache(word_inputs, inputs, self.word_vectors):
            lengths = (word_inputs > 0).sum(dim=1)
            present = torch.arange(steps, device=inputs.device)[None, :] < lengths[:, None]
            tokens = self.word_vectors.index_select(0, word_inputs[present])
            padded = _with_boundaries(tokens, self.boundary_vectors, lengths, present)
        else:
            padded = self.token_embedding(inputs, lengths)
        if self.encoder.bilm.w_proj.requires_grad:
            # the weights learn, and the caller's optimizer steps tell the biLM nothing: nothing derived is kept
            self.encoder.weights_changed()
        rows = np.asarray(lengths.cpu()) + 2
        return {"activations": self.runtime.padded_layers(padded, rows), "mask": _boundary_mask(lengths, steps)}


class _ElmoCharacterEncoder(nn.Module):
    """AllenNLP's character encoder (a private name its programs and tests import): char ids ``(batch, timesteps,
    50)`` to ``{"token_embedding": (batch, timesteps + 2, projection_dim), "mask": ...}``, the token layer with
    ``<S>``/``</S>`` as :class:`ElmoBiLm` gives it to its LSTMs. It holds a whole :class:`ElmoBiLm` (one loading
    path); its LSTMs do not run."""

    def __init__(self, options_file: PathLike, weight_file: PathLike, requires_grad: bool = False):
        super().__init__()
        self._bilm = ElmoBiLm(options_file, weight_file, requires_grad)

    def get_output_dim(self) -> int:
        return self._bilm.encoder.options.projection_dim

    def forward(self, inputs: torch.Tensor) -> Dict[str, torch.Tensor]:
        lengths = _char_lengths(inputs)
        return {"mask": _boundary_mask(lengths, inputs.shape[1]), "token_embedding": self._bilm.token_embedding(inputs, lengths)}


def _boundary_mask(lengths: torch.Tensor, steps: int) -> torch.Tensor:
    """``(batch, steps + 2)`` bool: each row's tokens and its ``<S>``/``</S>``."""
    return torch.arange(steps + 2, device=lengths.device)[None, :] < (lengths + 2)[:, None]


def _with_boundaries(tokens: torch.Tensor, boundaries: torch.Tensor, lengths: torch.Tensor, present: torch.Tensor) -> torch.Tensor:
    """``(batch, steps + 2, dim)``: ``<S>``, each row's ``tokens`` (consecutive in ``tokens``) where ``present``
    ``(batch, steps)`` is, ``</S>``, zeros."""
    out = tokens.new_zeros(present.shape[0], present.shape[1] + 2, tokens.shape[1])
    out[:, 1:-1][present] = tokens
    out[:, 0] = boundaries[0]
    out[torch.arange(len(lengths), device=out.device), lengths + 1] = boundaries[1]
    return out


def _check_byte_model(encoder: ElmoEncoder, options_file: Optional[PathLike]) -> None:
    """Refuse a model that does not read AllenNLP's byte ids (an ELMoForManyLangs conversion), naming the
    ``options_file`` the user gave."""
    options = encoder.options
    if options.char_vocabulary is not None or options.word_embedding is not None or options.max_characters_per_token != MAX_CHARACTERS:
        raise ElmoSettingsError(
            f"options_file {str(options_file)!r} is a model that reads its own character table or word vectors (an "
            f"ELMoForManyLangs conversion), not AllenNLP's byte ids from batch_to_ids; use spacy_elmo.ElmoEmbedder for it"
        )


def _char_lengths(inputs: torch.Tensor) -> torch.Tensor:
    """Each row's number of tokens, after checking that ``inputs`` are ``(batch, timesteps, 50)`` char ids."""
    if not isinstance(inputs, torch.Tensor) or inputs.dim() != 3 or inputs.shape[-1] != MAX_CHARACTERS:
        found = tuple(inputs.shape) if isinstance(inputs, torch.Tensor) else type(inputs).__name__
        raise ElmoSettingsError(
            f"inputs must be character ids of shape (batch, timesteps, 50) from batch_to_ids, found {found}"
        )
    return (inputs > 0).any(dim=-1).sum(dim=1)


def _in_cache(word_inputs: torch.Tensor, inputs: torch.Tensor, word_vectors: torch.Tensor) -> bool:
    """Whether every word id indexes the cached words. AllenNLP runs the char CNN on the whole batch otherwise,
    so that words missing from ``vocab_to_cache`` still get their vectors."""
    if tuple(word_inputs.shape) != tuple(inputs.shape[:2]):
        raise ElmoSettingsError(
            f"word_inputs has shape {tuple(word_inputs.shape)}, but the character ids are for "
            f"{tuple(inputs.shape[:2])} tokens; give one word id per token, (batch, timesteps)"
        )
    return bool(((word_inputs >= 0) & (word_inputs < word_vectors.shape[0])).all())


class Elmo(nn.Module):
    """ELMo representations as AllenNLP's ``Elmo``: the biLM run once, ``num_output_representations`` scalar mixes
    of its layers.

    ``forward(inputs, word_inputs=None)`` returns ``{"elmo_representations": [...], "mask": ...}``: each
    representation ``(batch, timesteps, 2 * projection_dim)`` (``timesteps + 2`` with
    ``keep_sentence_boundaries``), zero past each sentence's end before dropout; the mask is bool. Inputs of more
    dimensions, ``(..., timesteps, 50)``, give outputs of the same leading shape.

    LSTM state is carried from batch to batch as :class:`ElmoBiLm` says (:meth:`reset_states`, ``stateful=False``).
    Each scalar mix learns its softmax weights and ``gamma``, unless ``scalar_mix_parameters`` fixes the weights
    (before the softmax) and gamma at 1. ``do_layer_norm`` normalises each layer over the batch's unmasked
    positions, ``<S>``/``</S>`` included; ``dropout`` applies to the outputs in training mode. ``requires_grad=True``
    fine-tunes the biLM. ``vocab_to_cache`` precomputes token vectors for a word list, so ``word_inputs`` (ids into
    it) replace the char CNN. ``module``: a biLM module of your own, with ``num_layers``, ``get_output_dim()`` and
    ``forward`` returning activations and mask, instead of the files.

    ``options_file`` alone may be the name of a downloaded model (``Elmo("original", None, 1)``; see
    ``python -m spacy_elmo list``), and a published model's URLs stand for it once it is downloaded; neither file
    (``Elmo(None, None, 1)``) is the English model embedded in spacy-elmo, as for :class:`ElmoBiLm`. Not in
    AllenNLP: ``stateful``, ``initial_state``, ``precision`` and ``device``, as :class:`ElmoBiLm` takes them.
    """

    def __init__(
        self,
        options_file: Optional[PathLike],
        weight_file: Optional[PathLike],
        num_output_representations: int,
        requires_grad: bool = False,
        do_layer_norm: bool = False,
        dropout: float = 0.5,
        vocab_to_cache: Optional[Sequence[str]] = None,
        keep_sentence_boundaries: bool = False,
        scalar_mix_parameters: Optional[Sequence[float]] = None,
        module: Optional[nn.Module] = None,
        **settings: Any,
    ):
        super().__init__()
        if module is not None:
            if options_file is not None or weight_file is not None:
                raise ElmoSettingsError("give either module or options_file and weight_file, not both; pass None for the files")
            if settings:
                raise ElmoSettingsError(
                    f"{', '.join(sorted(settings))} are settings of the biLM that Elmo loads; with module, give them "
                    f"to that module"
                )
            self._elmo_lstm = module
        else:
            self._elmo_lstm = ElmoBiLm(options_file, weight_file, requires_grad, vocab_to_cache, **settings)
        self._has_cached_vocab = vocab_to_cache is not None
        self._keep_sentence_boundaries = keep_sentence_boundaries
        self._dropout = nn.Dropout(p=dropout)
        self._scalar_mixes: List[ScalarMix] = []
        num_layers = self._elmo_lstm.num_layers
        if scalar_mix_parameters is not None and len(scalar_mix_parameters) != num_layers:
            raise ElmoSettingsError(  # naming Elmo's argument (ScalarMix would name its own)
                f"scalar_mix_parameters gives {len(scalar_mix_parameters)} weights, but the biLM has {num_layers} "
                f"layers; give one weight per layer"
            )
        for k in range(num_output_representations):
            mix = ScalarMix(
                num_layers,
                do_layer_norm=do_layer_norm,
                initial_scalar_parameters=scalar_mix_parameters,
                trainable=scalar_mix_parameters is None,
            )
            self.add_module(f"scalar_mix_{k}", mix)
            self._scalar_mixes.append(mix)

    def get_output_dim(self) -> int:
        return self._elmo_lstm.get_output_dim()

    def reset_states(self) -> None:
        """Forget the LSTM state carried from batch to batch."""
        self._elmo_lstm.reset_states()

    def set_precision(self, precision: str) -> None:
        """Run the biLM's products at ``precision`` from now on; ``"fp16"`` after ``.to("cuda")``."""
        self._elmo_lstm.set_precision(precision)

    def forward(self, inputs: torch.Tensor, word_inputs: Optional[torch.Tensor] = None) -> ElmoOutput:
        """``inputs``: char ids ``(batch, timesteps, 50)`` or ``(..., timesteps, 50)``; ``word_inputs``: word ids of
        the same leading shape, with ``vocab_to_cache``."""
        leading = tuple(inputs.shape[:-1])
        if inputs.dim() > 3:
            inputs = inputs.reshape(-1, *inputs.shape[-2:])
        if word_inputs is not None:
            if not self._has_cached_vocab:
                warnings.warn("word_inputs were given to Elmo, but it has no vocab_to_cache: they are ignored", stacklevel=2)
                word_inputs = None
            elif tuple(word_inputs.shape) != leading:
                raise ElmoSettingsError(
                    f"word_inputs has shape {tuple(word_inputs.shape)}, but the character ids are for {leading} "
                    f"tokens; give one word id per token"
                )
            else:
                word_inputs = word_inputs.reshape(inputs.shape[:2])
        output = self._elmo_lstm(inputs, word_inputs)
        layers, mask = output["activations"], output["mask"]
        # Position t of the output without markers is token t, inside its sentence while t + 2 is inside the mask.
        kept = mask if self._keep_sentence_boundaries else mask[:, 2:]
        shape = leading[:-1] + (kept.shape[-1],)
        representations = []
        for mix in self._scalar_mixes:
            mixed = mix(layers, mask)
            if not self._keep_sentence_boundaries:
                mixed = mixed[:, 1:-1].masked_fill(~kept.unsqueeze(-1), 0.0)
            representations.append(self._dropout(mixed).reshape(shape + (mixed.shape[-1],)))
        return {"elmo_representations": representations, "mask": kept.reshape(shape)}


# AllenNLP's private name, which some programs import.
_ElmoBiLm = ElmoBiLm
