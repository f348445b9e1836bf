"""One loaded biLM with its settings, behind every entry point.

``ElmoEmbedder``, the ``elmo`` component (through its thinc model), the ``embed`` command and the AllenNLP classes
each hold an :class:`ElmoRuntime`: the biLM, its :class:`BiLmSettings`, the token cache, the state carried between
calls, the request batcher and the thread setting. It is built once per model and changed only by
:meth:`ElmoRuntime.configure` (a new settings value: only what differs is applied) or by loading other weights;
nothing that depends only on the settings is decided per call.
"""
import dataclasses
import warnings
from typing import Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch.utils.checkpoint import checkpoint

from ..errors import ElmoThreadsWarning
from ..model.batch_cost import row_tokens
from ..model.bilm import BiLmState
from ..model.carried_state import CarriedState
from ..model.segment_encoder import SegmentEncoder
from ..model.encoder import ElmoEncoder
from ..model.options import ElmoOptions
from ..sources.load import SavedBiLm, load_encoder
from ..util.threads import KEEP_HINT, hold_threads, keep_held_threads
from ..util.windows import token_views
from ..serving import Policy, RequestBatcher, ServingCounts
from ..serving.scheduler import lone_batches, longest_first
from .settings import BiLmSettings

# What a mix is given as: one weight per layer (a tuple, so that its device copy is made once and kept).
MixWeights = Tuple[float, ...]
# What a call gets back: host (numpy) arrays, or tensors on the biLM's device (``on_device``).
Rows = Union[np.ndarray, torch.Tensor]


class Segment(NamedTuple):
    """One biLM input of a call (a sentence, or a window of a Doc), the mix wanted for it (None: all layers),
    where its result goes (its rows of an array the caller receives) and whether it carries the stateful mode's
    state (False: it starts from the initial state and leaves the carried state as it is)."""

    words: Sequence[str]
    mix: Optional[MixWeights]
    out: "Rows"
    carry: bool


class ElmoRuntime:
    """A loaded biLM run with one :class:`BiLmSettings`.

    :meth:`layers` and :meth:`mixed` give host (numpy) float32 arrays, each of its own: they are allocated per call
    (one per segment, or one per group of consecutive segments laid end to end, such as a Doc's windows) and each
    biLM run copies its rows straight into them (one host transfer per run), so nothing is stitched afterwards and
    no result keeps a run's buffers alive.
    Calls from several threads share runs (``batch_requests``), each getting exactly its own vectors, through a
    :class:`~spacy_elmo.serving.RequestBatcher` (merging, pausing between LSTM steps and cancelling as it says); a
    stateful biLM runs one call at a time, in order, each call one biLM batch
    (:class:`~spacy_elmo.model.carried_state.CarriedState`).

    Safe to call from several threads in the stateless mode; :meth:`configure` and :meth:`reset_states` are for
    one thread while no call runs. The thread setting goes to the process's one owner of torch's thread count
    (``util/threads.py``) when it changes and once in each process; nothing is decided per call.
    """

    def __init__(self, encoder: ElmoEncoder, settings: BiLmSettings):
        self.encoder = encoder.eval()
        self.segment_encoder = SegmentEncoder(encoder)
        self.carried = CarriedState()  # the stateful mode's, between calls
        self.batcher = RequestBatcher(self._run, Policy(padded=True))
        self.settings = settings
        self._mixes: Dict[MixWeights, torch.Tensor] = {}
        self._threads_due = False  # the thread setting is still to hold in this process, at the next run
        self._threads_told = False  # a warning said that the biLM runs under another count than its setting
        self._apply(settings, None)

    @classmethod
    def load(
        cls, settings: BiLmSettings, device: Union[str, torch.device, None] = None, saved: Optional[SavedBiLm] = None
    ) -> "ElmoRuntime":
        """A runtime of the biLM :func:`~spacy_elmo.sources.load.load_encoder` reads for ``settings`` or ``saved``."""
        return cls(load_encoder(settings.options_file, settings.weight_file, settings.lang, device, saved), settings)

    @property
    def options(self) -> ElmoOptions:
        return self.encoder.options

    @property
    def device(self) -> torch.device:
        return self.encoder.device

    def describe(self) -> str:
        """What tells this biLM and its running apart, for the reprs of the classes that hold one."""
        options, settings = self.options, self.settings
        return (f"stateful={settings.stateful}, layers={options.n_output_layers}, dim={options.output_dim}, "
                f"precision={settings.precision!r}, device='{self.device}'")

    def counts(self) -> ServingCounts:
        """What the request batcher shared by this runtime's calls has done and is doing (``batch_requests``)."""
        return self.batcher.counts()

    # --- settings ---

    def configure(self, settings: BiLmSettings) -> None:
        """Run with ``settings`` from now on, applying only what differs from the settings in force.

        The files ``settings`` names are not read again: other weights are another runtime (:meth:`load`).
        """
        self._apply(settings, self.settings)
        self.settings = settings

    def _apply(self, new: BiLmSettings, old: Optional[BiLmSettings]) -> None:
        """Give the biLM, cache, batcher and threads the settings of ``new`` that differ from ``old`` (None: all)."""
        encoder = self.encoder
        if old is None or new.initial_state != old.initial_state:
            encoder.initial_state = new.initial_state
            encoder.weights_changed()
        if old is None or new.stateful != old.stateful:
            self.carried.reset()
        if old is None or new.cache_size != old.cache_size:
            encoder.set_cache_size(new.cache_size)
        if old is None or new.precision != old.precision:
            encoder.set_precision(new.precision)
        if old is None or new.frozen != old.frozen:
            for param in encoder.parameters():
                param.requires_grad_(not new.frozen)
        self.batcher.policy = dataclasses.replace(
            self.batcher.policy,
            max_batch_tokens=new.max_batch_tokens,
            shared_batch_tokens=new.shared_batch_tokens,
            batch_wait_ms=new.batch_wait_ms,
        )
        if old is None or new.threads != old.threads:
            self._threads_due = new.threads is not None

    def weights_changed(self) -> None:
        """Forget what was derived from the weights (token cache, warm state, converted weights): call after they
        changed (training, loading, averaged parameters)."""
        self.encoder.weights_changed()

    # --- inference ---

    def layers(
        self,
        segments: Sequence[Sequence[str]],
        joined: Optional[Sequence[int]] = None,
        fresh: bool = False,
        on_device: bool = False,
    ) -> List[Rows]:
        """Each segment's layers, ``(n_layers + 1, len(segment), dim)`` float32 on the host (``on_device``: torch
        tensors on the biLM's device, for a consumer there, such as a listener on GPU); with ``joined``, one array per
        group of ``joined[k]`` consecutive segments, their tokens end to end (a group of 0: no tokens). ``fresh``: a
        stateful biLM runs the call from its initial state and leaves its carried state as it is (a listener asking
        again for layers the ``elmo`` component computed before)."""
        return self._submit(segments, None, joined, fresh, on_device)

    def mixed(
        self,
        segments: Sequence[Sequence[str]],
        weights: MixWeights,
        joined: Optional[Sequence[int]] = None,
        spare_columns: int = 0,
    ) -> List[np.ndarray]:
        """Each segment's ``sum_j weights[j] * layer_j``, ``(len(segment), dim)`` float32 on the host; ``joined`` as
        in :meth:`layers`. With ``spare_columns``, each array is the first ``dim`` columns of one that many columns
        wider (its ``base``; the rest unwritten), so that a caller adds columns of its own without a copy."""
        return self._submit(segments, tuple(weights), joined, False, False, spare_columns)

    def _submit(
        self,
        segments: Sequence[Sequence[str]],
        mix: Optional[MixWeights],
        joined: Optional[Sequence[int]],
        fresh: bool,
        on_device: bool,
        spare_columns: int = 0,
    ) -> List[Rows]:
        """The arrays of a call, filled by biLM runs that a request batcher plans: the runtime's, or without
        ``batch_requests`` one of the call's own, which plans the same runs but merges nothing (a stateful call: one
        run, in its turn). A stateless call's segments go longest first, so that the runs cut from it hold segments
        of similar lengths (little padding)."""
        lengths = [len(words) for words in segments]
        outputs, places = self._outputs(lengths, mix, joined, on_device, spare_columns)
        stateful = self.settings.stateful and not fresh
        items = [Segment(words, mix, out, stateful) for words, out in zip(segments, places)]
        shared = stateful or (self.settings.batch_requests and not self.settings.stateful)
        batcher = self.batcher if shared else RequestBatcher(self._run, self.batcher.policy)
        batcher(items if stateful else [items[i] for i in longest_first(lengths)], merge=not stateful, tokens=_segment_tokens)
        return outputs

    def _outputs(
        self,
        lengths: List[int],
        mix: Optional[MixWeights],
        joined: Optional[Sequence[int]],
        on_device: bool,
        spare_columns: int,
    ) -> Tuple[List[Rows], List[Rows]]:
        """The arrays a call returns (uninitialised: every row is written; on the host, the first columns of arrays
        ``spare_columns`` wider), on the host or the biLM's device, and each segment's rows of them."""
        options = self.options
        lead = () if mix is not None else (options.n_output_layers,)
        groups = joined if joined is not None else [1] * len(lengths)
        if sum(groups) != len(lengths):
            raise ValueError(f"joined counts {sum(groups)} segments, the call has {len(lengths)}")
        outputs, places, first = [], [], 0
        for count in groups:
            sizes = lengths[first : first + count]
            shape = (*lead, sum(sizes), options.output_dim)
            if on_device:
                output = torch.empty(shape, device=self.device)
            elif spare_columns:
                output = np.empty((*shape[:-1], shape[-1] + spare_columns), dtype=np.float32)[..., : shape[-1]]
            else:
                output = np.empty(shape, dtype=np.float32)
            outputs.append(output)
            places.extend(token_views(output, sizes))
            first += count
        return outputs, places

    def _run(self, items: List[Segment]) -> List[Rows]:
        """Computes ``items``, one planned batch, into their arrays (one biLM run per distinct mix, each within the
        batch's budget; one host transfer per run for the items wanted on the host) and gives those rows back. Each
        run may pause between its LSTM steps for calls that arrived while it runs (the batcher's
        :meth:`~spacy_elmo.serving.request_batcher.RequestBatcher.pause_point`)."""
        self._threads_in_force()
        groups: Dict[Tuple[Optional[MixWeights], bool], List[Segment]] = {}
        for item in items:
            groups.setdefault((item.mix, item.carry), []).append(item)
        for (mix, carry), members in groups.items():
            words = [item.words for item in members]
            with torch.inference_mode():
                mix_tensor = None if mix is None else self._mix_tensor(mix)
                initial = self.carried.start(self.encoder, len(words)) if carry else None
                out, final = self.segment_encoder(words, initial, mix_tensor, self.batcher.pause_point)
                if carry:  # once the run is done: an interrupted one leaves the carried state as it was
                    self.carried.update(final)
                out = out.float()
                lengths, outs = [len(w) for w in words], [item.out for item in members]
                wanted = {type(o) for o in outs}
                host = token_views(out.cpu().numpy(), lengths) if np.ndarray in wanted else None  # one host transfer
                device = token_views(out, lengths) if torch.Tensor in wanted else None
                for k, target in enumerate(outs):
                    if isinstance(target, np.ndarray):
                        target[...] = host[k]
                    else:
                        target.copy_(device[k])
        return [item.out for item in items]

    # --- runs with autograd (fine-tuning, the AllenNLP modules) ---

    def trained_layers(self, segments: Sequence[Sequence[str]]) -> torch.Tensor:
        """The segments' layers with autograd through the biLM (fine-tuning), ``(n_layers + 1, total_tokens, dim)``,
        segment after segment, on the biLM's device (:meth:`_in_pieces`)."""
        lengths = [len(words) for words in segments]

        def run(rows: List[int], start: BiLmState) -> Tuple[Sequence[torch.Tensor], BiLmState]:
            layers, final = self.segment_encoder([segments[row] for row in rows], start)
            return (layers,), final

        return self._in_pieces([row_tokens(n) for n in lengths], run, 1, lengths)[0]

    def padded_layers(self, tokens: torch.Tensor, lengths: np.ndarray) -> List[torch.Tensor]:
        """:meth:`~spacy_elmo.model.bilm.BiLm.forward` through the runtime's settings (:meth:`_in_pieces`): token
        vectors ``(batch, steps, projection_dim)`` with their boundaries in place, each row's ``lengths`` counting
        them; the layers ``(batch, steps, dim)``."""

        def run(rows: List[int], start: BiLmState) -> Tuple[Sequence[torch.Tensor], BiLmState]:
            return self.encoder.bilm(tokens.index_select(0, self._index(rows)), lengths[rows], start)

        return self._in_pieces([int(n) for n in lengths], run, 0)

    def _in_pieces(
        self,
        costs: Sequence[int],
        run: Callable[[List[int], BiLmState], Tuple[Sequence[torch.Tensor], BiLmState]],
        axis: int,
        sizes: Optional[Sequence[int]] = None,
    ) -> List[torch.Tensor]:
        """The outputs of ``run(rows, start)`` over the batch rows of these padded ``costs``, each row starting from
        the state carried from the call before (the stateful mode, which keeps each row's final state for the next
        call, as at prediction) or from the initial state.

        The rows run all at once, in their order, where they fit ``max_batch_tokens``; else in pieces within it,
        longest rows first (:func:`~spacy_elmo.serving.scheduler.lone_batches`: rows of like lengths, few LSTM
        steps), each output joined along ``axis`` and put back in the rows' order (each row ``sizes[row]`` long there;
        None: 1). Where autograd records, each piece is run again in the backward pass (torch's checkpoint), so that
        one piece's activations are held at a time, not the batch's: the same gradients, for more time
        (BENCHMARKS.md, "Fine-tuning within the batch budget")."""
        self._threads_in_force()
        batch = len(costs)
        start = self.carried.start(self.encoder, batch) if self.settings.stateful else self.encoder.start_state(batch)

        def piece(rows: List[int]) -> Tuple[torch.Tensor, ...]:
            outputs, final = run(rows, start.select(self._index(rows)))
            return (*outputs, final.h, final.c)

        pieces = lone_batches(costs, self.settings.max_batch_tokens)
        if len(pieces) <= 1:
            *outputs, h, c = piece(list(range(len(costs))))
        else:
            recompute = torch.is_grad_enabled()
            done = [checkpoint(piece, rows, use_reentrant=False) if recompute else piece(rows) for rows in pieces]
            *parts, h_parts, c_parts = zip(*done)
            order = [row for rows in pieces for row in rows]
            outputs = [_in_rows_order(joined, axis, order, sizes) for joined in parts]
            h, c = (_in_rows_order(joined, 2, order, None) for joined in (h_parts, c_parts))
        if self.settings.stateful:
            self.carried.update(BiLmState(h, c))
        return outputs

    def _index(self, rows: List[int]) -> torch.Tensor:
        return torch.tensor(rows, dtype=torch.int64, device=self.device)

    def _threads_in_force(self) -> None:
        """Before a biLM run: the thread setting, due since it changed or since this copy came to this process, or
        held again in this thread or after a fork; running under another count (applied since by another holder or
        by the application) is said once."""
        threads = self.settings.threads
        if self._threads_due:
            self._threads_due = self._threads_told = False
            hold_threads(threads)
        elif threads is not None:
            keep_held_threads()
            if torch.get_num_threads() != threads and not self._threads_told:
                self._threads_told = True
                warnings.warn(
                    f"this biLM runs on {torch.get_num_threads()} torch threads, not its threads={threads}: torch has "
                    f"one count per process, and the count applied last (by another biLM, pretraining or "
                    f"torch.set_num_threads) holds; {KEEP_HINT}",
                    ElmoThreadsWarning, stacklevel=3,
                )

    def _mix_tensor(self, weights: MixWeights) -> torch.Tensor:
        """The mix weights on the biLM's device, made once per mix."""
        if weights not in self._mixes:
            self._mixes[weights] = torch.tensor(weights, dtype=torch.float32, device=self.device)
        return self._mixes[weights]

    # --- state and cache ---

    def reset_states(self) -> None:
        """Forget the LSTM state carried between calls (stateful mode): the next call starts afresh."""
        self.carried.reset()

    def fill_cache(self, words: Iterable[str]) -> None:
        """Pre-fill the token cache (``cache_size`` > 0) from ``words``, most frequent first, until it is full."""
        self.encoder.fill_cache(words)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_threads_due"] = self.settings.threads is not None  # a copy in another process applies it there
        return state


def _segment_tokens(segment: Segment) -> int:
    """A segment's tokens in a biLM batch: its row, boundaries included (a batch costs its rows times the longest)."""
    return row_tokens(len(segment.words))


def _in_rows_order(parts: Sequence[torch.Tensor], dim: int, order: List[int], sizes: Optional[Sequence[int]]) -> torch.Tensor:
    """``parts``, the parts of the rows in ``order`` (``sizes[row]`` long each along ``dim``; None: 1), joined in the
    rows' own order."""
    sizes = [1] * len(order) if sizes is None else sizes
    ends = np.cumsum([sizes[row] for row in order])
    start = {row: end - sizes[row] for row, end in zip(order, ends)}
    index = np.concatenate([np.arange(start[row], start[row] + sizes[row]) for row in range(len(sizes))])
    return torch.cat(parts, dim).index_select(dim, torch.from_numpy(index).to(parts[0].device))
