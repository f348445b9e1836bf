"""The pretraining loop: one process, or one per device under ``torchrun`` (DistributedDataParallel).

What ``OUTPUT_DIR`` holds (its ``options.json`` + ``weights.hdf5`` rewritten at every checkpoint, so that it always
holds a usable model) and how a rerun resumes: docs/pretraining.md, "Output" and "Loop".
"""
import json
import math
import os
import re
import shutil
import time
import warnings
from contextlib import contextmanager, nullcontext
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

import torch
import torch.distributed as dist
from confection import Config
from tqdm import tqdm

from ..errors import ElmoError, ElmoSettingsError, InitializeError, PeerLostError, PretrainConfigError, ResumeError
from ..model.devices import check_device
from ..util.files import atomic_write
from ..util.interrupts import stop_on_signal
from ..serving.scheduler import lone_batches
from ..util.threads import hold_threads
from ..model.batch_cost import row_tokens
from ..model.options import ElmoOptions
from ..util.text import make_tokenizer
from ..formats.weights import load_files, save_files
from .config import ModelSection, PretrainConfig, bf16_support
from .data import SentenceStream, file_sentences, read_sentences, resolve_files
from .language_model import BiLanguageModel
from .vocab import Vocab

CHECKPOINT = "checkpoint.pt"
# [training] bf16 = "auto": timed passes of each precision, and how much faster bf16 must be to be chosen.
TIMED_PASSES = 3
BF16_MARGIN = 1.05
SOFTMAX = "softmax.pt"  # a run kept without its checkpoint: the softmax, fp16 (scripts/export_softmax.py)
BEST = "best"


def _distributed() -> Tuple[int, int, bool]:
    """``(rank, world_size, started)``; starts the process group when launched by ``torchrun`` (``started``: here).

    ``torch.distributed.nn`` is imported first because DDP imports it, and on import its functions take the default
    group as a default argument: imported after the group exists, they would hold it for the life of the process,
    and :meth:`Trainer.close` could not free the group and join its threads.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    started = world > 1 and not dist.is_initialized()
    if started:
        import torch.distributed.nn  # noqa: F401

        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank = dist.get_rank() if dist.is_initialized() else 0
    return rank, world, started


def _device(local_rank: int) -> torch.device:
    """The process's device: its own GPU (``cuda:<local_rank>``) where torch sees CUDA, else the CPU; a process
    started beyond this machine's GPUs (``torchrun --nproc_per_node`` above their count) is a one-line error."""
    if not torch.cuda.is_available():
        return torch.device("cpu")
    try:
        device = check_device(f"cuda:{local_rank}")
    except ElmoSettingsError as err:
        raise ElmoSettingsError(
            f"process {local_rank} of this machine has no GPU: {err}; start at most {torch.cuda.device_count()} "
            "(torchrun --nproc_per_node)"
        ) from None
    torch.cuda.set_device(device)
    return device


def _barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def _ranks_not_seeing(path: Path) -> List[int]:
    """The ranks of the run to which ``path``, written by rank 0, does not exist (on several machines, those whose
    disk is not rank 0's)."""
    if not dist.is_initialized():
        return []
    seen: List[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(seen, path.exists())
    return [rank for rank, found in enumerate(seen) if not found]


def _build_vocab(config: PretrainConfig, output_dir: Path, tokenize, rank: int) -> Vocab:
    """The run's vocabulary: kept from the run it starts from (``[initialize] run``), else the training text's."""
    path = output_dir / "vocab.txt"
    if rank == 0 and not path.exists():
        if config.initialize.run is not None:
            shutil.copyfile(Path(config.initialize.run) / "vocab.txt", path)
        else:
            files = resolve_files(config.corpus.train)
            sentences = file_sentences(files, tokenize, config.corpus.max_sentence_tokens, config.vocab.max_lines)
            Vocab.build(sentences, config.vocab.size).to_file(path)
    _barrier()
    return Vocab.from_file(path)


class InitialWeights(NamedTuple):
    """Weights a new run starts from: the whole language model (biLM and softmax), or the biLM and/or the softmax."""

    model: Optional[Dict[str, torch.Tensor]] = None
    bilm: Optional[Dict[str, torch.Tensor]] = None
    softmax: Optional[Dict[str, torch.Tensor]] = None


def _read_run(run: Path, with_bilm: bool) -> InitialWeights:
    """A pretraining output directory's language model: its checkpoint's, else (softmax only) its ``softmax.pt``."""
    checkpoint = run / CHECKPOINT
    missing = [name for name in ("options.json", "vocab.txt") if not (run / name).exists()]
    if not checkpoint.exists() and not (run / SOFTMAX).exists():
        missing.append(f"{CHECKPOINT} or {SOFTMAX}")
    if missing:
        raise InitializeError(f"[initialize] run = {run} is not a pretraining output directory: no {', '.join(missing)}")
    if checkpoint.exists():
        model = torch.load(checkpoint, map_location="cpu", weights_only=True)["model"]
        if with_bilm:
            return InitialWeights(model=model)
        return InitialWeights(softmax={k[len("softmax."):]: v for k, v in model.items() if k.startswith("softmax.")})
    if with_bilm:
        raise InitializeError(
            f"[initialize] run = {run} keeps no {CHECKPOINT} (only its fp16 softmax): give its biLM as [initialize] "
            "options_file and weight_file (for pretrain_runs/<name>: spacy_elmo/data/<name>/options.json and "
            "weights.hdf5), or restore the checkpoint first (scripts/restore_checkpoint.sh)"
        )
    softmax = torch.load(run / SOFTMAX, map_location="cpu", weights_only=True)
    return InitialWeights(softmax={k: v.float() for k, v in softmax.items()})


def read_initial_weights(config: PretrainConfig) -> InitialWeights:
    """Read what ``[initialize]`` names, checking that its architecture is the config's ``[model]``."""
    init = config.initialize
    sources = []  # (options, where they were read) of each source, all checked against [model]
    try:
        weights = InitialWeights()
        if init.run is not None:
            run = Path(init.run)
            weights = _read_run(run, with_bilm=init.options_file is None)
            sources.append((ElmoOptions.from_file(run / "options.json"), str(run)))
        if init.options_file is not None:
            bilm = load_files(init.options_file, init.weight_file)
            sources.append((bilm.options, str(init.options_file)))
            weights = weights._replace(bilm=bilm.state_dict())
    except (OSError, ElmoError) as err:
        raise InitializeError(f"Cannot start from the [initialize] biLM: {err}") from None
    wanted = config.options()
    for options, source in sources:
        differ = [name for name in ModelSection.model_fields if getattr(options, name) != getattr(wanted, name)]
        if differ:
            details = "; ".join(f"{k}: {getattr(options, k)!r} there, {getattr(wanted, k)!r} in [model]" for k in differ)
            raise InitializeError(f"The biLM in {source} has another architecture than [model] ({details}): make [model] match it")
    return weights


def evaluate(model: BiLanguageModel, sentences: Sequence[Sequence[str]], batch_tokens: int) -> Dict[str, float]:
    """Held-out perplexity of each direction and their average (the geometric mean, as bilm-tf reports)."""
    was_training = model.training
    model.eval()
    fw = bw = 0.0
    count = 0
    with torch.no_grad():
        for batch in lone_batches([row_tokens(len(s)) for s in sentences], batch_tokens * 2):
            loss = model([sentences[i] for i in batch])
            fw += loss.forward_nll.item()
            bw += loss.backward_nll.item()
            count += loss.n_targets
    model.train(was_training)
    fw_ppl, bw_ppl = math.exp(fw / count), math.exp(bw / count)
    return {"forward_ppl": fw_ppl, "backward_ppl": bw_ppl, "average_ppl": math.exp((fw + bw) / (2 * count))}


# Settings a resumed run may change: how long it runs, how it reports, where its files are (the stream checks
# that the training text is the same) and how large its steps are (continuing on a GPU with larger batches).
RESUMABLE_CHANGES = frozenset(
    {
        "training.max_steps", "training.max_tokens", "training.threads", "training.log_every", "training.eval_every",
        "training.checkpoint_every", "training.batch_tokens", "training.learn_rate", "training.bf16",
        "paths.train", "paths.dev", "corpus.train", "corpus.dev",
    }
)


def _flatten(section: Dict[str, Any], prefix: str = "") -> Dict[str, Any]:
    flat: Dict[str, Any] = {}
    for key, value in section.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def check_resumable(saved_path: Path, config: Config) -> Dict[str, Any]:
    """Refuse to resume a run whose saved config differs from ``config`` in anything but RESUMABLE_CHANGES; return
    the saved settings, flattened (``{"training.bf16": False, ...}``; empty when the run saved none)."""
    if not saved_path.exists():
        return {}
    saved = _flatten(Config().from_disk(saved_path).interpolate())
    new = _flatten(config)
    differ = sorted(k for k in saved.keys() | new.keys() if saved.get(k) != new.get(k) and k not in RESUMABLE_CHANGES)
    if differ:
        details = "; ".join(f"{k}: {saved.get(k)!r} in the run, {new.get(k)!r} now" for k in differ)
        raise ResumeError(
            f"{saved_path.parent} holds a run made with other settings ({details}). Nothing was changed: resume with "
            f"the run's own settings, or give a new output directory. Only {', '.join(sorted(RESUMABLE_CHANGES))} "
            "may change on resume."
        )
    return saved


# What torch's process group says when another process stopped answering (gloo's words; NCCL's end in a timeout).
PEER_LOSS = re.compile(r"Connection (?:closed|reset) by peer|Broken pipe|[Tt]imed out|timeout", re.ASCII)


class StoppedTogether(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped :meth:`Trainer.run`: every rank saved the checkpoint and stopped at the same step."""


class Trainer:
    """Holds everything of one pretraining run; :meth:`run` trains until ``max_steps`` or ``max_tokens``.

    Under ``torchrun``, use it as a context manager (``with Trainer(...) as trainer: trainer.run()``): leaving the
    block ends the process group the trainer started (:meth:`close`).
    """

    def __init__(self, config: PretrainConfig, raw_config: Config, output_dir: Path):
        self.config = config
        self.output_dir = Path(output_dir)
        # The device before the process group: a missing one then leaves no group to end.
        self.device = _device(int(os.environ.get("LOCAL_RANK", os.environ.get("RANK", "0"))))
        self.rank, self.world, self._owns_group = _distributed()
        if config.training.threads > 0:
            hold_threads(config.training.threads)
        # "auto" until the checkpoint or a measurement (below) decides it.
        self.precision, self.precision_reason = _precision(config.training.bf16, self.device)
        resuming = (self.output_dir / CHECKPOINT).exists()
        saved = check_resumable(self.output_dir / "config.cfg", raw_config) if resuming else {}
        # A checkpoint from before checkpoints recorded their precision: the run's saved config tells it.
        self._saved_precision = {True: "bf16", False: "fp32"}.get(saved.get("training.bf16"))
        # Everything that can fail on the user's input fails here, before anything is written.
        tokenize = str.split if config.corpus.pretokenized else make_tokenizer(config.nlp.lang)
        training = config.training
        self.stream = SentenceStream(
            resolve_files(config.corpus.train),
            tokenize,
            batch_tokens=training.batch_tokens,
            max_sentence_tokens=config.corpus.max_sentence_tokens,
            seed=training.seed + 1,
            rank=self.rank,
            world_size=self.world,
        )
        self.dev: List[List[str]] = []
        if config.corpus.dev and self.rank == 0:
            self.dev = read_sentences(
                config.corpus.dev, tokenize, config.corpus.max_sentence_tokens, config.corpus.dev_max_sentences
            )
        initial = InitialWeights() if resuming else read_initial_weights(config)
        if self.rank == 0:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            atomic_write(self.output_dir / "config.cfg", raw_config.to_disk)
        _barrier()
        blind = _ranks_not_seeing(self.output_dir / "config.cfg")
        if blind:  # every rank knows, and stops here: the group can end at once (Trainer.close says why it must)
            if self._owns_group:
                dist.destroy_process_group()
            raise PretrainConfigError(
                f"rank(s) {', '.join(map(str, blind))} do not see {self.output_dir / 'config.cfg'}, which rank 0 "
                "wrote: the processes of a run read its vocabulary and checkpoints there, so on several machines give "
                "them all one output directory on a disk they share (docs/pretraining.md, \"Several machines\")"
            )
        self.vocab = _build_vocab(config, self.output_dir, tokenize, self.rank)
        torch.manual_seed(training.seed)
        self.model = BiLanguageModel(
            config.options(), self.vocab, config.objective.cutoffs, config.objective.div_value, training.dropout
        ).to(self.device)
        modules = (self.model, self.model.bilm, self.model.softmax)
        for module, state in zip(modules, (initial.model, initial.bilm, initial.softmax)):
            if state is not None:
                module.load_state_dict(state)
        self.ddp: torch.nn.Module = self.model
        if self.world > 1:
            self.ddp = torch.nn.parallel.DistributedDataParallel(self.model)
        self.optimizer = _optimizer(self.model, training)
        self.step, self.tokens_seen, self.elapsed = 0, 0, 0.0
        self.saved_step: Optional[int] = None  # the step of the last checkpoint this rank knows written
        if resuming:
            self._load_checkpoint()
            self.saved_step = self.step
        if self.precision == "auto":
            self.precision, self.precision_reason = self._measured_precision()

    def __enter__(self) -> "Trainer":
        return self

    def __exit__(self, exc_type: Optional[type], exc: Optional[BaseException], traceback: Any) -> None:
        """Close when the ranks ended together: the run finished, or a signal stopped all of them at one step.

        After any other error the ranks may be at different points, and freeing a group whose peers are still
        inside a collective can hang; the process is ending with that error anyway.
        """
        if exc_type is None or issubclass(exc_type, StoppedTogether):
            self.close()

    def close(self) -> None:
        """End the process group this trainer started, and join its threads, while the interpreter is alive.

        Why: left to the interpreter's exit, a gloo worker thread that still holds the tensors of the last
        collective can free them, which takes the GIL, after the interpreter has begun to finalize: the thread
        is ended mid-destructor and the process aborts ("terminate called without an active exception",
        SIGABRT) after a run that succeeded. The DDP wrapper
        holds the group, so it goes first; the group's last reference then goes with ``destroy_process_group``,
        whose destructor joins the threads. Every rank must have passed its last collective (``run`` ends with a
        barrier). A group the caller started is the caller's to end; this trainer's wrapper lets go of it all the same.
        """
        self.ddp = self.model
        if self._owns_group:
            dist.destroy_process_group()
            self._owns_group = False

    # -- checkpoints -------------------------------------------------------------------------

    def save_checkpoint(self) -> None:
        """Write the weights export and then the training state, each atomically."""
        stream = self.stream.state_dict()
        streams: List[Any] = [stream]
        if dist.is_initialized():
            streams = [None] * self.world
            dist.all_gather_object(streams, stream)
        if self.rank == 0:
            save_files(self.model.bilm, self.output_dir / "options.json", self.output_dir / "weights.hdf5")
            state = {
                "step": self.step,
                "tokens_seen": self.tokens_seen,
                "elapsed": self.elapsed,
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "torch_rng": torch.get_rng_state(),
                "cuda_rng": torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None,
                "streams": json.dumps(streams),
                "world_size": self.world,
                "precision": self.precision,
            }
            atomic_write(self.output_dir / CHECKPOINT, lambda p: torch.save(state, p))
            self.saved_step = self.step
        _barrier()
        self.saved_step = self.step  # the other ranks know it written once rank 0 passed the barrier

    def _load_checkpoint(self) -> None:
        path = self.output_dir / CHECKPOINT
        try:
            state = torch.load(path, map_location=self.device, weights_only=True)
        except Exception as err:
            raise ResumeError(
                f"Cannot read the checkpoint {path} ({err}). Move it away to start over, or restore a good copy."
            ) from None
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        for group in self.optimizer.param_groups:
            group["lr"] = self.config.training.learn_rate  # a resumed run may change it
        torch.set_rng_state(state["torch_rng"].cpu())
        if self.device.type == "cuda" and state.get("cuda_rng") is not None:
            torch.cuda.set_rng_state(state["cuda_rng"].cpu(), self.device)
        streams = json.loads(state["streams"])
        if streams[0].get("version") != SentenceStream.STATE_VERSION:
            warnings.warn(
                f"{path} holds its data position in an older spacy-elmo's form: the model and optimizer resume, "
                "the training text starts a new shuffled epoch",
                stacklevel=2,
            )
        elif len(streams) == self.world:
            self.stream.load_state_dict(streams[self.rank])
        else:
            warnings.warn(
                f"{path} was written by {len(streams)} processes and {self.world} are running: the model and "
                "optimizer resume exactly, the training text continues at the same point of its epoch, shared anew",
                stacklevel=2,
            )
            self.stream.continue_epoch(streams)
        self.step, self.tokens_seen, self.elapsed = state["step"], state["tokens_seen"], state["elapsed"]
        made_in = state.get("precision", self._saved_precision)
        if self.precision == "auto" and made_in is not None:
            self.precision = made_in
            self.precision_reason = f'[training] bf16 = "auto": {made_in}, as measured when the run started'
        elif made_in is not None and made_in != self.precision:
            warnings.warn(
                f"The precision changed (checkpoint {made_in}, now {self.precision}): training continues from {path}, "
                f"but will not equal a run that kept {made_in}",
                stacklevel=2,
            )

    # -- training ----------------------------------------------------------------------------

    def _log(self, record: Dict[str, Any]) -> None:
        if self.rank == 0:
            with open(self.output_dir / "log.jsonl", "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")

    def _evaluate(self) -> Optional[Dict[str, float]]:
        result = None
        if self.rank == 0 and self.dev:
            result = evaluate(self.model, self.dev, self.config.training.batch_tokens)
            self._log({"step": self.step, "tokens_seen": self.tokens_seen, "event": "eval", **result})
            self._keep_if_best(result)
        _barrier()
        return result

    def _keep_if_best(self, result: Dict[str, float]) -> None:
        """Export the biLM to ``best/`` when its held-out perplexity is the lowest of the run so far.

        Adapting to a small text over-fits within a few hundred steps; ``best/`` keeps the weights of the best
        evaluation, as spaCy's ``model-best`` does. ``scores.json`` is written last and read on resume; a run
        that starts at step 0 replaces whatever ``best/`` an earlier run left.
        """
        scores = self.output_dir / BEST / "scores.json"
        if self.step > 0 and scores.exists():
            if json.loads(scores.read_text(encoding="utf-8"))["average_ppl"] <= result["average_ppl"]:
                return
        save_files(self.model.bilm, scores.parent / "options.json", scores.parent / "weights.hdf5")
        record = json.dumps({"step": self.step, "tokens_seen": self.tokens_seen, **result})
        atomic_write(scores, lambda p: p.write_text(record, encoding="utf-8"))

    @contextmanager
    def _peer_loss_said(self) -> Iterator[None]:
        """A collective that failed because another process of the run stopped answering (its connection closed,
        or a timeout) becomes a :class:`PeerLostError` saying which, as far as the error tells, the last checkpoint
        and how to resume."""
        try:
            yield
        except RuntimeError as err:
            found = PEER_LOSS.search(str(err))
            if self.world == 1 or found is None:
                raise
            peer = re.search(r"\[([^\]]+)\]:\d+", str(err))
            who = f"rank {1 - self.rank}" if self.world == 2 else "another process of the run"
            at = f" (at {peer.group(1)})" if peer else ""
            known = "is" if self.rank == 0 else "known here is"  # rank 0 writes them: the others learn it at a barrier
            kept = (f"the last checkpoint {known} step {self.saved_step}, {self.output_dir / CHECKPOINT}"
                    if self.saved_step is not None else "no checkpoint was written yet")
            self.close()  # quick with a peer gone; left to the interpreter's exit, the process would abort
            raise PeerLostError(
                f"lost contact with {who}{at} at step {self.step} ({found.group(0)}); {kept}; run the same command "
                "on every machine to resume"
            ) from None

    def train_step(self) -> Tuple[float, int]:
        """One optimizer step on this process's next batch; the batch's mean loss and the tokens it read."""
        training = self.config.training
        batch = self.stream.next_batch()
        with self._autocast(self.precision):
            loss = self.ddp(batch)
        loss.mean.backward()
        self._drop_idle_clusters(loss.tail_targets)
        if training.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), training.grad_clip)
        self.optimizer.step()
        self.model.bilm.weights_changed()  # what evaluation derived from the weights before the step
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        return loss.mean.item(), sum(len(s) + 1 for s in batch)

    def _autocast(self, precision: str) -> Any:
        return torch.autocast(self.device.type, dtype=torch.bfloat16) if precision == "bf16" else nullcontext()

    def _measured_precision(self) -> Tuple[str, str]:
        """``[training] bf16 = "auto"``: fp32 or bf16, whichever trains this run's first batch faster here.

        Each process times a forward and backward pass of its first batch in each precision, alternating, after an
        untimed pair; the times summed over the processes decide for all of them. bf16 must win by
        :data:`BF16_MARGIN`, since it rounds every product. The model (its gradients cleared), optimizer, data
        stream and random state are left as they were, so the run then equals one given the chosen precision.
        """
        stream = self.stream.state_dict()
        batch = self.stream.next_batch()
        self.stream.load_state_dict(stream)
        seconds = torch.zeros(2, dtype=torch.float64, device=self.device)
        with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
            for timed in [False] + [True] * TIMED_PASSES:
                for i, precision in enumerate(("fp32", "bf16")):
                    start = time.perf_counter()
                    with self._autocast(precision):
                        loss = self.model(batch)
                    loss.mean.backward()
                    if self.device.type == "cuda":
                        torch.cuda.synchronize(self.device)
                    seconds[i] += (time.perf_counter() - start) if timed else 0.0
        self.optimizer.zero_grad(set_to_none=True)
        if dist.is_initialized():
            dist.all_reduce(seconds)
        speedup = float(seconds[0] / seconds[1])
        chosen = "bf16" if speedup >= BF16_MARGIN else "fp32"
        return chosen, (
            f'[training] bf16 = "auto": a step of this run\'s first batch ran {speedup:.2f}x as fast in bf16 as in fp32 '
            f"here ({TIMED_PASSES} timed passes each), and bf16 is chosen from {BF16_MARGIN}x"
        )

    def _drop_idle_clusters(self, tail_targets: torch.Tensor) -> None:
        """Forget the gradients of the softmax's tail clusters that no process's targets reached this step (zeros:
        every cluster runs in every step, see :class:`BiLanguageModel`), so that the optimizer leaves them and their
        moments as they are, as for any parameter a step does not use."""
        if dist.is_initialized():
            dist.all_reduce(tail_targets)
        for cluster, count in zip(self.model.softmax.tail, tail_targets.tolist()):
            if count == 0:
                for param in cluster.parameters():
                    param.grad = None

    def _count_and_agree(self, tokens: int, stop_requested: bool) -> bool:
        """Add every rank's tokens of this step to ``tokens_seen``; whether any rank was asked to stop.

        One all-reduce gives every rank the same count and the same answer at the same step, so that all
        stop together (on a signal or at ``max_tokens``) and none waits for the others forever.
        """
        if dist.is_initialized():
            summed = torch.tensor([tokens, int(stop_requested)], dtype=torch.long, device=self.device)
            dist.all_reduce(summed)
            tokens, stop_requested = int(summed[0].item()), bool(summed[1].item())
        self.tokens_seen += tokens
        return stop_requested

    def _tokens_reached(self) -> bool:
        limit = self.config.training.max_tokens
        return limit is not None and self.tokens_seen >= limit

    def run(self, progress: bool = True) -> Dict[str, Any]:
        """Train to ``max_steps`` or ``max_tokens``, whichever comes first, evaluating, logging and
        checkpointing on the way; resumable.

        Ctrl-C or SIGTERM (on any one rank) stops every rank after the current step with a
        checkpoint written, then raises StoppedTogether (a KeyboardInterrupt). A process of the run that stops
        answering, at any collective of the run, ends it with a :class:`PeerLostError` (:meth:`_peer_loss_said`).
        """
        with self._peer_loss_said():
            return self._train(progress)

    def _train(self, progress: bool) -> Dict[str, Any]:
        """:meth:`run`'s evaluations, steps, logs and checkpoints."""
        training = self.config.training
        self.model.train()
        evaluated_at = None  # the step whose weights this call last evaluated
        if self.step == 0:
            self._evaluate()
            evaluated_at = 0
        bar = tqdm(total=training.max_steps, initial=self.step, disable=not progress or self.rank != 0, unit="step")
        window = _Window(self.tokens_seen)
        pace: Optional[_Window] = _Window(self.tokens_seen)  # this call's steps, until the first evaluation tells the pace
        last_eval: Optional[Dict[str, float]] = None
        with stop_on_signal() as stop:
            while self.step < training.max_steps and not self._tokens_reached():
                start = time.perf_counter()
                loss, tokens = self.train_step()
                interrupted = self._count_and_agree(tokens, stop.requested)
                window.add(loss)
                if pace is not None:
                    pace.add(loss)
                self.elapsed += time.perf_counter() - start
                bar.update(1)
                if self.step % training.log_every == 0:
                    record = self._log_window(window)
                    bar.set_postfix(loss=f"{record['loss']:.3f}", ppl=f"{record['train_ppl']:.1f}", tok_s=f"{record['tokens_per_s']:.0f}")
                    window = _Window(self.tokens_seen)
                if self.step % training.eval_every == 0:
                    last_eval = self._evaluate() or last_eval
                    evaluated_at = self.step
                    if pace is not None and self.rank == 0 and self.step < training.max_steps and not self._tokens_reached():
                        tqdm.write(self._pace(pace))
                    pace = None
                if interrupted:
                    bar.close()
                    self._log_window(window)
                    self.save_checkpoint()
                    raise StoppedTogether
                if self.step % training.checkpoint_every == 0:
                    self.save_checkpoint()
        bar.close()
        self._log_window(window)
        if evaluated_at != self.step:  # also a finished run resumed: its result and best/ are of its final weights
            last_eval = self._evaluate() or last_eval
        self.save_checkpoint()
        return {"step": self.step, "tokens_seen": self.tokens_seen, "eval": last_eval}

    def _pace(self, since: "_Window") -> str:
        """The speed of this call's steps so far (evaluations included) and when the run will end at that speed."""
        training = self.config.training
        seconds = time.perf_counter() - since.start
        steps_left = estimated_steps_left(
            self.step, training.max_steps, self.tokens_seen, training.max_tokens, since.steps, self.tokens_seen - since.tokens_at_start
        )
        return pace_line(since.steps / seconds, steps_left, datetime.now())

    def _log_window(self, window: "_Window") -> Dict[str, Any]:
        """Log the steps since the last record (none if there are none) and return the record."""
        record = {**window.record(self.step, self.tokens_seen, self.elapsed), "precision": self.precision}
        if window.steps:
            self._log(record)
        return record


def estimated_steps_left(
    step: int, max_steps: int, tokens_seen: int, max_tokens: Optional[int], steps_done: int, tokens_done: int
) -> int:
    """Steps until ``max_steps`` or, at the ``tokens_done / steps_done`` tokens per step seen so far, ``max_tokens``."""
    left = max_steps - step
    if max_tokens is not None and tokens_done > 0:
        left = min(left, math.ceil(max(max_tokens - tokens_seen, 0) * steps_done / tokens_done))
    return left


def pace_line(steps_per_s: float, steps_left: int, now: datetime) -> str:
    """``"1.10 steps/s; 98,000 steps to go: about 24 h 45 min, ending around 2026-12-03 17:10"``."""
    seconds = steps_left / steps_per_s
    end = now + timedelta(seconds=seconds)
    return f"{steps_per_s:.2f} steps/s; {steps_left:,} steps to go: about {_duration(seconds)}, ending around {end:%Y-%m-%d %H:%M}"


def _duration(seconds: float) -> str:
    """``90061`` → ``"25 h 1 min"``; ``125`` → ``"2 min"``; ``40`` → ``"40 s"``."""
    if seconds < 60:
        return f"{round(seconds)} s"
    hours, minutes = divmod(round(seconds / 60), 60)
    return f"{hours} h {minutes} min" if hours else f"{minutes} min"


class _Window:
    """Training loss and speed over the steps since the last log record."""

    def __init__(self, tokens_seen: int):
        self.loss, self.steps, self.start, self.tokens_at_start = 0.0, 0, time.perf_counter(), tokens_seen

    def add(self, loss: float) -> None:
        self.loss += loss
        self.steps += 1

    def record(self, step: int, tokens_seen: int, elapsed: float) -> Dict[str, Any]:
        mean = self.loss / max(self.steps, 1)
        return {
            "step": step,
            "tokens_seen": tokens_seen,
            "loss": mean,
            "train_ppl": math.exp(min(50.0, mean)),
            "tokens_per_s": (tokens_seen - self.tokens_at_start) / max(time.perf_counter() - self.start, 1e-9),
            "elapsed_s": elapsed,
        }


def _precision(bf16: Union[bool, str], device: torch.device) -> Tuple[str, str]:
    """The run's precision (``"bf16"``: autocast, ``"fp32"``) and why; ``"auto"`` where the setting is ``"auto"`` and
    ``device`` has native bf16 (:meth:`Trainer._measured_precision` decides). Refuses bf16 where ``device`` would
    emulate it, which trains far slower than fp32, before anything is written."""
    native, why = bf16_support(device)
    if bf16 == "auto":
        return ("auto", why) if native else ("fp32", f'[training] bf16 = "auto"; {why}')
    if not bf16:
        return "fp32", f"[training] bf16 = false; {why}"
    if not native:
        raise PretrainConfigError(
            f"[training] bf16 = true, but {why}. Set --training.bf16 false, or train on a machine with native bf16"
        )
    return "bf16", f"[training] bf16 = true; {why}"


def _optimizer(model: torch.nn.Module, training) -> torch.optim.Optimizer:
    params = model.parameters()
    if training.optimizer == "adagrad":
        return torch.optim.Adagrad(params, lr=training.learn_rate, initial_accumulator_value=training.initial_accumulator)
    if training.optimizer == "adam":
        return torch.optim.Adam(params, lr=training.learn_rate)
    return torch.optim.SGD(params, lr=training.learn_rate)
