"""What the biLM earns downstream: each task trained with no ELMo, the embedded biLM, the biLM adapted to the task's
training text, and an untrained biLM of the same architecture, over several seeds, everything else equal.

    python benchmarks/downstream.py OUT_DIR [--tasks ner tagger] [--train-pct 10] [--seeds 0 1] [--jobs 2]
    python benchmarks/downstream.py OUT_DIR --variants trained --precision int8   # the biLM's products in int8

Variants (same config, cap, evaluation; one torch/BLAS thread per run, ``--jobs`` runs at a time):

- ``baseline``: ``configs/TASK_baseline.cfg`` (spaCy's CNN ``tok2vec``, no ELMo);
- ``trained``: ``configs/TASK.cfg`` with the embedded English biLM;
- ``adapted``: the same with the embedded biLM's pretraining run continued on the task's training text
  (``configs/adapt_en_gutenberg_tiny.cfg``, ``--adapt-steps``; the weights of the lowest dev perplexity), once per task;
  ``--adapt-pct 100`` reads the text of the whole training set (its labels unused) while the task trains on
  ``--train-pct`` of it: more unlabelled in-domain text than labelled;
- ``candidate``: the same with the biLM of ``--candidate DIR`` (its ``options.json`` + ``weights.hdf5``, e.g. a
  pretraining run's folder or its ``best/``): a biLM that may replace the embedded one, in the same runs as it;
- ``untrained``: the same with seeded random weights of the embedded architecture (``untrained_bilm.py``, the run's
  seed), the control for "did language-model pretraining earn the difference?".

The data are converted by the project (``corpus/full/TASK-pPCT``, research-only sets read from ``../shared``) when
missing. A run whose metrics file exists is not run again, so an interrupted benchmark continues where it stopped.
Writes ``OUT_DIR/results.json`` and ``OUT_DIR/results.md`` (test scores per seed, mean, and the difference of each
variant's mean from the baseline's).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Sequence

from untrained_bilm import write_untrained
from spacy_elmo.sources.resolve import default_model_files

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = ("baseline", "trained", "adapted", "candidate", "untrained")
ONE_THREAD = {name: "1" for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}


class Task(NamedTuple):
    """A downstream task: its project conversion command, training cap and the test metrics reported."""

    convert: str
    max_steps: int
    eval_frequency: int
    metrics: Sequence[str]


TASKS: Dict[str, Task] = {
    "ner": Task("convert-ner", 1500, 100, ("ents_f", "ents_p", "ents_r")),
    "tagger": Task("convert-tagger", 1500, 250, ("pos_acc", "tag_acc", "morph_acc", "dep_uas", "dep_las")),
}


def run(command: List[str], log: Path) -> float:
    """Run ``command`` from the repository root on one thread, its output in ``log``; return its wall time."""
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with log.open("w", encoding="utf8") as out:
        done = subprocess.run(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **ONE_THREAD})
    if done.returncode:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}); see {log}")
    return time.perf_counter() - start


def corpus_dir(task: str, train_pct: int) -> Path:
    """The task's converted data, converted by the project's command when missing."""
    folder = ROOT / "corpus" / "full" / f"{task}-p{train_pct}"
    if not (folder / "test.spacy").exists():
        command = [sys.executable, "-m", "spacy", "project", "run", TASKS[task].convert, ".", "--vars.train_pct"]
        run(command + [str(train_pct)], folder.parent / f"{task}-p{train_pct}.convert.log")
    return folder


def adapt(task: str, data: Path, out: Path, steps: int) -> Path:
    """Continue the embedded biLM's pretraining run on the task's training text; return the folder of the adapted
    biLM at its lowest dev perplexity (the run's ``best/``)."""
    bilm = out / task / "bilm"
    if (bilm / "best" / "weights.hdf5").exists():
        return bilm / "best"
    for split in ("train", "dev"):
        text = out / task / f"{split}.txt"
        command = [sys.executable, "scripts/corpus.py", "text", str(data / f"{split}.spacy"), str(text)]
        run(command, text.with_suffix(".log"))
    command = [
        sys.executable, "-m", "spacy_elmo", "pretrain", "configs/adapt_en_gutenberg_tiny.cfg", str(bilm),
        "--paths.train", str(out / task / "train.txt"), "--paths.dev", str(out / task / "dev.txt"),
        "--training.max_steps", str(steps), "--quiet",  # [initialize]: the embedded run and the shipped biLM
    ]  # fmt: skip
    seconds = run(command, out / task / "adapt.log")
    print(f"adapted the biLM to {task} in {seconds:.0f} s", flush=True)
    return bilm / "best"


def untrained(out: Path, seed: int) -> Path:
    """Seeded random weights of the embedded English architecture (written once per seed)."""
    folder = out / f"untrained-s{seed}"
    if not (folder / "weights.hdf5").exists():
        folder.mkdir(parents=True, exist_ok=True)
        write_untrained(default_model_files("en")[0], folder, seed)
    return folder


def train_and_evaluate(
    task: str,
    variant: str,
    seed: int,
    data: Path,
    bilm: Optional[Path],
    out: Path,
    max_steps: Optional[int],
    precision: str = "fp32",
) -> Dict:
    """Train one pipeline, evaluate its best model on the test set; return the test metrics and the wall time."""
    run_dir = out / task / f"{variant}-s{seed}"
    metrics_file = run_dir / "test.json"
    if metrics_file.exists():
        return json.loads(metrics_file.read_text(encoding="utf8"))
    spec = TASKS[task]
    steps = max_steps or spec.max_steps
    config = f"configs/{task}_baseline.cfg" if variant == "baseline" else f"configs/{task}.cfg"
    command = [
        sys.executable, "-m", "spacy", "train", config, "--output", str(run_dir / "training"),
        "--paths.train", str(data / "train.spacy"), "--paths.dev", str(data / "dev.spacy"),
        "--training.max_steps", str(steps), "--training.eval_frequency", str(min(steps, spec.eval_frequency)),
        "--system.seed", str(seed),
    ]  # fmt: skip
    if bilm is not None:
        command += ["--paths.elmo_options", str(bilm / "options.json")]
        command += ["--paths.elmo_weights", str(bilm / "weights.hdf5")]
    if variant != "baseline":
        command += ["--components.elmo.model.precision", precision]
    seconds = run(command, run_dir / "train.log")
    scores_file = run_dir / "scores.json"
    best = run_dir / "training" / "model-best"
    evaluate = [sys.executable, "-m", "spacy", "evaluate", str(best), str(data / "test.spacy")]
    run(evaluate + ["--output", str(scores_file)], run_dir / "evaluate.log")
    scores = json.loads(scores_file.read_text(encoding="utf8"))
    result = {name: scores[name] for name in spec.metrics} | {"train_seconds": round(seconds)}
    metrics_file.write_text(json.dumps(result, indent=2), encoding="utf8")
    print(f"{task} {variant} seed {seed}: {result}", flush=True)
    return result


def when_adapted(
    adapting: Future, task: str, seed: int, data: Path, out: Path, max_steps: Optional[int], precision: str
) -> Dict:
    """``train_and_evaluate`` on the adapted biLM that ``adapting`` (an :func:`adapt` submitted earlier) writes."""
    return train_and_evaluate(task, "adapted", seed, data, adapting.result(), out, max_steps, precision)


def table(results: Dict[str, Dict[str, Dict[int, Dict]]]) -> str:
    """Markdown: one row per task, variant and metric; test scores x100 per seed, their mean and Δ to baseline."""
    lines = ["| task | variant | metric | per seed | mean | Δ vs baseline |"]
    lines.append("| --- | --- | --- | --- | ---: | ---: |")
    for task, by_variant in results.items():
        base = by_variant.get("baseline")
        for variant, by_seed in by_variant.items():
            for metric in TASKS[task].metrics:
                values = [100 * by_seed[seed][metric] for seed in sorted(by_seed)]
                mean = statistics.fmean(values)
                diff = ""
                if base and variant != "baseline":
                    diff = f"{mean - statistics.fmean(100 * runs[metric] for runs in base.values()):+.2f}"
                shown = " / ".join(f"{v:.2f}" for v in values)
                lines.append(f"| {task} | {variant} | {metric} | {shown} | {mean:.2f} | {diff} |")
    return "\n".join(lines) + "\n"


def main(argv: Optional[list] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--tasks", nargs="+", choices=sorted(TASKS), default=["tagger", "ner"])
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--train-pct", type=int, default=10)
    parser.add_argument("--adapt-steps", type=int, default=300)
    parser.add_argument("--adapt-pct", type=int, help="percent of the training set whose text adapts (default: --train-pct)")
    parser.add_argument("--max-steps", type=int, help="training steps of every run (default: each task's cap)")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time (one thread each)")
    parser.add_argument("--precision", default="fp32", help="the biLM's precision in the ELMo variants (fp32, int8, bf16)")
    parser.add_argument("--candidate", type=Path, help="folder with options.json + weights.hdf5 (the candidate variant)")
    args = parser.parse_args(argv)
    if ("candidate" in args.variants) != (args.candidate is not None):
        parser.error("the candidate variant and --candidate DIR go together")
    if args.candidate is not None and not (args.candidate / "weights.hdf5").exists():
        parser.error(f"{args.candidate} holds no weights.hdf5")
    candidate = args.candidate.resolve() if args.candidate else None
    out = args.out_dir.resolve()
    data = {task: corpus_dir(task, args.train_pct) for task in args.tasks}
    with ThreadPoolExecutor(args.jobs) as pool:
        # The pool starts jobs in the order submitted: adaptations first and the runs on adapted biLMs last, so the
        # other runs use the cores while a biLM adapts and no run waits for an adaptation that has not started.
        adapt_tasks = args.tasks if "adapted" in args.variants else []
        adapt_pct = args.adapt_pct or args.train_pct
        adapt_data = {task: corpus_dir(task, adapt_pct) for task in adapt_tasks}
        adapting = {task: pool.submit(adapt, task, adapt_data[task], out, args.adapt_steps) for task in adapt_tasks}
        jobs: Dict[str, Dict[str, Dict[int, Future]]] = {t: {v: {} for v in args.variants} for t in args.tasks}
        for variant in sorted(args.variants, key=lambda v: v == "adapted"):
            for task in args.tasks:
                for seed in args.seeds:
                    if variant == "adapted":
                        job = pool.submit(
                            when_adapted, adapting[task], task, seed, data[task], out, args.max_steps, args.precision
                        )
                    else:
                        if variant == "untrained":
                            bilm = untrained(out, seed)
                        elif variant == "candidate":
                            bilm = candidate
                        else:
                            bilm = None  # baseline: no biLM; trained: the embedded one
                        job = pool.submit(
                            train_and_evaluate, task, variant, seed, data[task], bilm, out, args.max_steps, args.precision
                        )
                    jobs[task][variant][seed] = job
        results = {
            task: {variant: {seed: job.result() for seed, job in runs.items()} for variant, runs in by_variant.items()}
            for task, by_variant in jobs.items()
        }
    (out / "results.json").write_text(json.dumps(results, indent=2), encoding="utf8")
    summary = table(results)
    (out / "results.md").write_text(summary, encoding="utf8")
    print(summary)


if __name__ == "__main__":
    main()
