"""Pictures of what was learned: each listener's layer mix (Peters et al. 2018, Figure 2) and pretraining curves.

Reading the numbers (:func:`learned_mixes`, :func:`pretrain_curves`) needs only numpy (and the pipeline's thinc,
imported by :func:`learned_mixes` alone, so that the pretraining curves start without spaCy); drawing them needs
matplotlib, an optional extra (``pip install "spacy-elmo[plot]"``), imported on first use.
"""
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Sequence

import numpy as np

from ..errors import PlotError
from ..util.files import PathLike

if TYPE_CHECKING:
    from spacy.language import Language

MIX_NODE = "elmo_scalar_mix"  # name of the thinc layer built by spacy_elmo.pipeline.listener_mix.build_listener_mix
TRAIN_KEYS = ("tokens_seen", "loss", "train_ppl")
EVAL_KEYS = ("tokens_seen", "forward_ppl", "backward_ppl", "average_ppl")


@dataclass(frozen=True)
class LearnedMix:
    """One trainable scalar mix: its component, softmax-normalised layer weights and scale gamma."""

    component: str
    weights: np.ndarray
    gamma: float


def learned_mixes(nlp: "Language") -> List[LearnedMix]:
    """The mix of every ``ElmoListener.v1`` / ``ElmoEmbedding`` in the pipeline, in pipeline order.

    A component with several mixes gets them as ``name``, ``name#2``, ...
    """
    from thinc.api import Model

    mixes = []
    for name, pipe in nlp.components:
        model = getattr(pipe, "model", None)
        nodes = [n for n in model.walk() if n.name == MIX_NODE] if isinstance(model, Model) else []
        for i, node in enumerate(nodes):
            if not (node.has_param("scalars") and node.has_param("gamma")):
                raise PlotError(f"The ELMo mix of {name!r} is not initialized: train the pipeline (or nlp.initialize()) first")
            scalars = node.ops.to_numpy(node.get_param("scalars")).astype(np.float64)
            weights = np.exp(scalars - scalars.max())
            gamma = float(node.ops.to_numpy(node.get_param("gamma"))[0])
            mixes.append(LearnedMix(name if i == 0 else f"{name}#{i + 1}", weights / weights.sum(), gamma))
    if not mixes:
        raise PlotError(
            "No ELMo listener in this pipeline: only components whose tok2vec is spacy_elmo.ElmoListener.v1 (or "
            "ElmoEmbedding) learn a layer mix"
        )
    return mixes


@dataclass(frozen=True)
class PretrainCurves:
    """Columns of a pretraining log, sorted by step: ``train`` (TRAIN_KEYS) and ``held_out`` (EVAL_KEYS)."""

    train: Dict[str, np.ndarray]
    held_out: Dict[str, np.ndarray]


def pretrain_curves(path: PathLike) -> PretrainCurves:
    """Training and held-out curves from a run directory or its ``log.jsonl``.

    A resumed run logs again the steps between its last checkpoint and the interruption; the
    later record of a step wins. A last line cut short by a kill is ignored.
    """
    log = Path(path) / "log.jsonl" if Path(path).is_dir() else Path(path)
    if not log.is_file():
        raise PlotError(f"No pretraining log at {log}: give the output directory of 'spacy_elmo pretrain' or its log.jsonl")
    lines = log.read_text(encoding="utf-8").split("\n")
    train: Dict[int, Dict[str, Any]] = {}
    held_out: Dict[int, Dict[str, Any]] = {}
    for number, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines) - 1:  # no newline after it: a write cut short
                continue
            raise PlotError(f"{log}, line {number + 1}: not valid JSON; fix or remove that line") from None
        target, keys = (held_out, EVAL_KEYS) if record.get("event") == "eval" else (train, TRAIN_KEYS)
        if "step" not in record or any(key not in record for key in keys):
            raise PlotError(f"{log}, line {number + 1}: expected 'step' and {', '.join(keys)}")
        target[record["step"]] = record
    if not train and not held_out:
        raise PlotError(f"{log} has no records yet: wait for the first log_every steps")
    return PretrainCurves(_columns(train, TRAIN_KEYS), _columns(held_out, EVAL_KEYS))


def _columns(records: Dict[int, Dict[str, Any]], keys: Sequence[str]) -> Dict[str, np.ndarray]:
    ordered = [records[step] for step in sorted(records)]
    return {key: np.array([r[key] for r in ordered], dtype=np.float64) for key in keys}


def _pyplot():
    """matplotlib's pyplot on the file-only Agg backend, or an error saying how to install it."""
    try:
        import matplotlib
    except ImportError:
        raise PlotError('Plotting needs matplotlib: pip install "spacy-elmo[plot]" (or pip install matplotlib)') from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_mixes(mixes: Sequence[LearnedMix], output: PathLike) -> None:
    """Bars of each component's softmax layer weights (one group per component) and of its gamma, as a PNG."""
    plt = _pyplot()
    n_layers = max(len(m.weights) for m in mixes)
    fig, (ax_w, ax_g) = plt.subplots(
        1, 2, figsize=(2.0 + 1.2 * len(mixes) * (n_layers + 1) / 3, 3.6), gridspec_kw={"width_ratios": [3, 1]}
    )
    x = np.arange(len(mixes))
    width = 0.8 / n_layers
    for layer in range(n_layers):
        label = "layer 0 (token)" if layer == 0 else f"layer {layer} (biLSTM {layer})"
        values = [m.weights[layer] if layer < len(m.weights) else 0.0 for m in mixes]
        bars = ax_w.bar(x + (layer - (n_layers - 1) / 2) * width, values, width, label=label)
        ax_w.bar_label(bars, fmt="%.2f", fontsize=6)
    ax_w.axhline(1.0 / n_layers, color="grey", linestyle="--", linewidth=1, label="equal weights")
    ax_w.set(ylabel="softmax layer weight", ylim=(0, 1), title="Learned ELMo layer weights")
    ax_w.legend(fontsize=7)
    ax_g.bar_label(ax_g.bar(x, [m.gamma for m in mixes], 0.6, color="grey"), fmt="%.2f", fontsize=7)
    ax_g.set_title("gamma")
    rotation = 30 if len(mixes) > 3 else 0  # many components: slanted names do not overlap
    for ax in (ax_w, ax_g):
        ax.set_xticks(x, [m.component for m in mixes], rotation=rotation, ha="right" if rotation else "center")
    _save(plt, fig, output)


def plot_pretrain(curves: PretrainCurves, output: PathLike) -> None:
    """Training loss, and training and held-out perplexities, against tokens seen, as a PNG."""
    plt = _pyplot()
    from matplotlib.ticker import EngFormatter

    fig, (ax_loss, ax_ppl) = plt.subplots(1, 2, figsize=(10, 3.8))
    train, held_out = curves.train, curves.held_out
    ax_loss.plot(train["tokens_seen"], train["loss"], color="C0")
    ax_loss.set(ylabel="training loss (nats per token)", title="Training loss")
    ax_ppl.plot(train["tokens_seen"], train["train_ppl"], color="C0", alpha=0.5, label="training")
    for key, color, style in (("forward_ppl", "C1", "--"), ("backward_ppl", "C2", ":"), ("average_ppl", "C3", "-")):
        ax_ppl.plot(
            held_out["tokens_seen"], held_out[key], marker="o", linestyle=style, color=color, markersize=3,
            label=f"held-out {key[:-4]}",
        )
    ax_ppl.set(yscale="log", ylabel="perplexity", title="Perplexity")
    ax_ppl.legend(fontsize=8)
    for ax in (ax_loss, ax_ppl):
        ax.set_xlabel("tokens seen")
        ax.xaxis.set_major_formatter(EngFormatter())
        ax.grid(alpha=0.3)
    _save(plt, fig, output)


def _save(plt, fig, output: PathLike) -> None:
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(output, dpi=120)
    plt.close(fig)
