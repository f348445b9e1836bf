"""`spacy evaluate` for several pipelines in one process (the sample workflow: one Python start-up, not six).

    python scripts/evaluate.py MODEL DATA OUTPUT [MODEL DATA OUTPUT ...] [--gpu-id N]

Each triple runs spaCy's own ``spacy.cli.evaluate.evaluate`` (what ``python -m spacy evaluate MODEL DATA
--output OUTPUT`` runs) and writes the same metrics JSON.
"""
from pathlib import Path
from typing import List

import typer


def main(
    triples: List[str] = typer.Argument(..., help="MODEL DATA OUTPUT, repeated"),
    gpu_id: int = typer.Option(-1, "--gpu-id", "-g", help="GPU id, or -1 for CPU"),
) -> None:
    from spacy.cli.evaluate import evaluate

    if len(triples) % 3:
        typer.echo("✘ arguments must come in MODEL DATA OUTPUT triples", err=True)
        raise typer.Exit(1)
    for i in range(0, len(triples), 3):
        model, data, output = triples[i], Path(triples[i + 1]), Path(triples[i + 2])
        output.parent.mkdir(parents=True, exist_ok=True)
        typer.echo(f"=== {model} on {data} -> {output}")
        evaluate(model, data, output=output, use_gpu=gpu_id, silent=False)


if __name__ == "__main__":
    typer.run(main)
