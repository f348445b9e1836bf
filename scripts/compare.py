"""Baseline vs ELMo: a markdown table (and, if matplotlib is installed, a bar chart) from `spacy evaluate` metrics.

    python scripts/compare.py METRICS_DIR OUTPUT_MD [--json OUT.json] [--plot OUT.png] [--note TEXT]
                              [--mix RUN=PIPELINE_DIR ...] [--mix-plot OUT.png]

Pairs every ``NAME-elmo.json`` in METRICS_DIR with ``NAME-baseline.json`` and reports, for each run NAME, the
scores present in its files (x 100): NER P/R/F1, UD UPOS/XPOS/morph accuracy and UAS/LAS, textcat accuracy and
macro F1. For single-label textcat spaCy's micro F1 equals accuracy (one gold and one predicted label per text).
Each ``--mix RUN=PIPELINE_DIR`` (a trained ELMo pipeline) adds a table of the layer weights and gamma that each of
its ELMo listeners learned, and ``--mix-plot`` draws them (``python -m spacy_elmo plot-mix`` for one pipeline).
Without matplotlib the plots are skipped with a note; the tables are always written.
"""
import json
from pathlib import Path
from typing import List, Optional

import typer

# (key in spacy evaluate's JSON, label); the first one present is the run's main score (plotted).
METRICS = [
    ("ents_f", "NER F1"),
    ("ents_p", "NER precision"),
    ("ents_r", "NER recall"),
    ("pos_acc", "UPOS accuracy"),
    ("tag_acc", "XPOS accuracy"),
    ("morph_acc", "morph accuracy"),
    ("dep_uas", "UAS"),
    ("dep_las", "LAS"),
    ("cats_micro_f", "accuracy"),
    ("cats_macro_f", "macro F1"),
]
PLOTTED = ("ents_f", "pos_acc", "dep_las", "cats_micro_f")


def load(path: Path) -> Optional[dict]:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def collect(metrics_dir: Path) -> List[dict]:
    """One row per (run, metric): ``{"run", "key", "metric", "baseline", "elmo", "delta"}``; scores x 100."""
    rows = []
    for elmo_path in sorted(metrics_dir.glob("*-elmo.json")):
        run = elmo_path.name[: -len("-elmo.json")]
        elmo = load(elmo_path) or {}
        base = load(metrics_dir / f"{run}-baseline.json") or {}
        for key, label in METRICS:
            values = [m.get(key) for m in (base, elmo)]
            if all(v is None for v in values):
                continue
            b, e = (None if v is None else 100.0 * float(v) for v in values)
            delta = None if b is None or e is None else e - b
            rows.append({"run": run, "key": key, "metric": label, "baseline": b, "elmo": e, "delta": delta})
    return rows


def fmt(value: Optional[float], signed: bool = False) -> str:
    if value is None:
        return "—"
    return f"{value:+.2f}" if signed else f"{value:.2f}"


def markdown(rows: List[dict], note: str = "") -> str:
    lines = ["# Baseline (spaCy CNN tok2vec) vs ELMo", ""]
    if note:
        lines += [note, ""]
    if not rows:
        return "\n".join(lines + ["No metrics found.", ""])
    lines += ["| run | metric | baseline | ELMo | Δ |", "| --- | --- | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['run']} | {r['metric']} | {fmt(r['baseline'])} | {fmt(r['elmo'])} | {fmt(r['delta'], True)} |")
    return "\n".join(lines) + "\n"


def load_mixes(specs: List[str]) -> list:
    """The learned mixes of each ``RUN=PIPELINE_DIR``, their components named ``RUN/component``."""
    import spacy

    from spacy_elmo.commands.plots import LearnedMix, learned_mixes

    mixes = []
    for spec in specs:
        run, sep, path = spec.partition("=")
        if not sep:
            raise typer.BadParameter(f"--mix takes RUN=PIPELINE_DIR, found {spec!r}")
        for mix in learned_mixes(spacy.load(path)):
            mixes.append(LearnedMix(f"{run}/{mix.component}", mix.weights, mix.gamma))
    return mixes


def mix_markdown(mixes: list) -> str:
    """A table of each listener's softmax layer weights and gamma."""
    n_layers = max(len(m.weights) for m in mixes)
    header = " | ".join(f"layer {j}" for j in range(n_layers))
    lines = ["## Learned ELMo layer weights (softmax) and gamma", "", f"| component | {header} | gamma |",
             "| --- |" + " ---: |" * (n_layers + 1)]
    for m in mixes:
        lines.append(f"| {m.component} | {' | '.join(f'{w:.3f}' for w in m.weights)} | {m.gamma:.3f} |")
    return "\n".join(lines) + "\n"


def plot(rows: List[dict], path: Path) -> bool:
    """A grouped bar chart of the main scores; False (and nothing written) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    shown = [r for r in rows if r["key"] in PLOTTED]
    labels = [f"{r['run']}\n{r['metric']}" for r in shown]
    xs = range(len(shown))
    fig, ax = plt.subplots(figsize=(max(4.0, 1.6 * len(shown)), 3.5))
    ax.bar([x - 0.2 for x in xs], [r["baseline"] or 0.0 for r in shown], width=0.4, label="baseline (CNN)")
    ax.bar([x + 0.2 for x in xs], [r["elmo"] or 0.0 for r in shown], width=0.4, label="ELMo")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel("score (%)")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def main(
    metrics_dir: Path = typer.Argument(..., exists=True, file_okay=False, help="folder of NAME-{elmo,baseline}.json"),
    output: Path = typer.Argument(..., dir_okay=False, help="markdown table to write"),
    json_path: Optional[Path] = typer.Option(None, "--json", help="also write the rows as JSON"),
    plot_path: Optional[Path] = typer.Option(None, "--plot", help="bar chart (.png), if matplotlib is installed"),
    note: str = typer.Option("", "--note", help="a line under the title (e.g. which ELMo weights)"),
    mix: List[str] = typer.Option([], "--mix", help="RUN=PIPELINE_DIR: tabulate (and plot) its learned layer mixes"),
    mix_plot: Optional[Path] = typer.Option(None, "--mix-plot", help="bar chart of the mixes (.png), with matplotlib"),
) -> None:
    rows = collect(metrics_dir)
    if not rows:
        typer.echo(f"✘ no NAME-elmo.json metrics in {metrics_dir}", err=True)
        raise typer.Exit(1)
    mixes = load_mixes(mix)
    output.parent.mkdir(parents=True, exist_ok=True)
    text = markdown(rows, note) + ("\n" + mix_markdown(mixes) if mixes else "")
    output.write_text(text, encoding="utf-8")
    typer.echo(text)
    typer.echo(f"✔ {output}")
    if json_path is not None:
        json_path.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
        typer.echo(f"✔ {json_path}")
    if plot_path is not None:
        if plot(rows, plot_path):
            typer.echo(f"✔ {plot_path}")
        else:
            typer.echo("ℹ matplotlib is not installed: no plot (pip install matplotlib, or spacy-elmo[plot])")
    if mix_plot is not None and mixes:
        from spacy_elmo.commands.plots import PlotError, plot_mixes

        try:
            plot_mixes(mixes, mix_plot)
            typer.echo(f"✔ {mix_plot}")
        except PlotError as err:
            typer.echo(f"ℹ no mix plot: {err}")


if __name__ == "__main__":
    typer.run(main)
