"""What every benchmark shares: the text it reads, its timers, seeded models and the machine it ran on.

The scripts beside this file (``speed.py``, ``quality.py``, ``pretrain.py``) import it; they use the package's
public names only (``ElmoEmbedder``, the ``elmo`` factory, the ``spacy_elmo.model`` classes), so that they measure
any checkout of it, old or new, the same way.
"""
import argparse
import os
import platform
import resource
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple, TypeVar, Union

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
UD = SHARED / "ud_english_ewt"
UD_SAMPLE = ROOT / "assets" / "sample" / "ud_english_ewt"
CONLL = SHARED / "conll2003"
PRESETS = ("small", "medium", "original")  # the published architectures, for seeded random weights
CPU_FLAGS = {"avx2": "AVX2", "avx512f": "AVX-512", "avx512_vnni": "VNNI", "avx512_bf16": "bf16", "amx_tile": "AMX"}
# Other processes' CPU use, in cores on average, above which the machine is too busy for a table: a shell and an
# idle desktop take a few hundredths of a core, a test run or a second benchmark a whole one.
BUSY_CORES = 0.2
# Set for the measuring processes a benchmark starts: the benchmark that started them watches the machine.
WATCHED = "SPACY_ELMO_BENCHMARK_WATCHED"

T = TypeVar("T")
Sentence = List[str]
Tagged = Tuple[List[str], List[str]]


def load_sentences(
    corpus: str = "ud",
    split: str = "dev",
    min_len: int = 1,
    max_len: int = 10**9,
    limit: Optional[int] = None,
    tags: bool = False,
) -> Union[List[Sentence], List[Tagged]]:
    """Sentences of ``min_len``..``max_len`` tokens, in file order, the first ``limit`` of them.

    ``corpus``: ``"ud"`` (UD English-EWT under ../shared; ``split`` train, dev or test), ``"ud-sample"`` (the UD
    sample bundled in assets/, so a plain checkout runs; ``split`` also ``"all"``) or ``"conll"`` (CoNLL-2003 under
    ../shared). Each sentence is its words (UD's FORM column; multi-word token lines are skipped), or with ``tags``
    its words and their tags (UD: UPOS; CoNLL: the NER tag).
    """
    if corpus == "conll":
        return _read_conll(CONLL / f"{split}.txt", min_len, max_len, limit, tags)
    if corpus == "ud":
        paths = [UD / f"en_ewt-ud-{split}.conllu"]
    elif corpus == "ud-sample":
        paths = [UD_SAMPLE / f"{name}.conllu" for name in (("train", "dev", "test") if split == "all" else (split,))]
    else:
        raise ValueError(f"unknown corpus {corpus!r}: ud, ud-sample or conll")
    sentences: List[Tagged] = []
    for path in paths:
        sentences += _read_conllu(path, min_len, max_len, None if limit is None else limit - len(sentences))
    return sentences if tags else [words for words, _ in sentences]


def _read_conllu(path: Path, min_len: int, max_len: int, limit: Optional[int]) -> List[Tagged]:
    _require(path)
    sentences: List[Tagged] = []
    words: List[str] = []
    tags: List[str] = []
    with path.open(encoding="utf-8") as f:
        for line in [*f, ""]:  # the blank line that ends the last sentence, if the file lacks it
            line = line.rstrip("\n")
            if not line:
                if words and min_len <= len(words) <= max_len:
                    if limit is not None and len(sentences) == limit:
                        break
                    sentences.append((words, tags))
                words, tags = [], []
            elif not line.startswith("#"):
                cols = line.split("\t")
                if cols[0].isdigit():
                    words.append(cols[1])
                    tags.append(cols[3])
    return sentences


def _read_conll(path: Path, min_len: int, max_len: int, limit: Optional[int], tags: bool):
    _require(path)
    sentences: List[Tagged] = []
    words: List[str] = []
    labels: List[str] = []
    with path.open(encoding="utf-8") as f:
        for line in [*f, "\n"]:
            fields = line.split()
            if fields and fields[0] != "-DOCSTART-":
                words.append(fields[0])
                labels.append(fields[-1])
            elif words:
                if min_len <= len(words) <= max_len and (limit is None or len(sentences) < limit):
                    sentences.append((words, labels))
                words, labels = [], []
    return sentences if tags else [w for w, _ in sentences]


def _require(path: Path) -> None:
    if not path.is_file():
        sys.exit(f"{path} not found: this benchmark reads the shared data sets in ../shared/data beside the checkout")


def best_time(run: Callable[[], T], passes: int = 3, warm_up: bool = True) -> Tuple[float, float, T]:
    """Best wall-clock and best process CPU seconds of ``passes`` runs (after one untimed run), and the last result.

    CPU time (all threads of this process) is the steadier figure at one thread on a shared machine.
    """
    result = run() if warm_up else None
    wall = cpu = float("inf")
    for _ in range(passes):
        start_wall, start_cpu = time.perf_counter(), time.process_time()
        result = run()
        wall = min(wall, time.perf_counter() - start_wall)
        cpu = min(cpu, time.process_time() - start_cpu)
    return wall, cpu, result  # type: ignore[return-value]


def interleaved(runs: Dict[str, Callable[[], object]], rounds: int) -> Tuple[Dict[str, List[float]], Dict[str, List[float]]]:
    """Wall-clock and process CPU seconds of each run in each of ``rounds`` rounds, the runs one after the other
    within a round, so that neighbouring runs share the machine's state."""
    wall: Dict[str, List[float]] = {name: [] for name in runs}
    cpu: Dict[str, List[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            start_wall, start_cpu = time.perf_counter(), time.process_time()
            run()
            wall[name].append(time.perf_counter() - start_wall)
            cpu[name].append(time.process_time() - start_cpu)
    return wall, cpu


def seeded_model(directory: Path, architecture: str = "small", seed: int = 0) -> Tuple[Path, Path]:
    """``options.json`` + ``weights.hdf5`` of a preset architecture (``small``, ``medium``, ``original``, ``tiny``)
    with seeded random weights: speed does not depend on the weights, and the files need no download."""
    import torch

    from spacy_elmo.model.bilm import BiLm
    from spacy_elmo.formats.weights import save_files
    from spacy_elmo.model.options import preset

    torch.manual_seed(seed)
    files = directory / "options.json", directory / "weights.hdf5"
    save_files(BiLm(preset(architecture)), *files)
    return files


def cpu_flags() -> List[str]:
    """The CPU features that decide the biLM's speed (AVX2, AVX-512, VNNI, bf16, AMX) this CPU reports."""
    from spacy_elmo.model.cpu import cpu_flags as listed

    flags = listed() or frozenset()
    return [name for flag, name in CPU_FLAGS.items() if flag in flags]


def machine() -> str:
    """One line: CPU model, its flags, cores, torch's CPU capability, torch version, load average."""
    import torch

    name = platform.processor() or "unknown CPU"
    if Path("/proc/cpuinfo").exists():
        names = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("model name")]
        name = names[0] if names else name
    return (f"{name} ({', '.join(cpu_flags()) or 'no AVX2'}), {os.cpu_count()} CPUs, torch {torch.__version__} "
            f"(capability {torch.backends.cpu.get_cpu_capability()}), python {platform.python_version()}, "
            f"load average {load()}")


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


class OtherProcesses:
    """The CPU time the rest of the machine takes from the moment this is made: the machine's busy time in
    /proc/stat (the hypervisor's steal included: a shared VM's neighbours) less this process's and its children's.
    Steadier than the load average, which counts the benchmark itself and lags by a minute."""

    def __init__(self) -> None:
        self.start = time.monotonic(), *self._seconds()

    @staticmethod
    def _seconds() -> Tuple[float, float, float]:
        """(busy, stolen, own) CPU seconds so far: the machine's, the hypervisor's steal, this process tree's."""
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
        user, nice, system, _idle, _iowait, irq, softirq, steal = fields
        tick = os.sysconf("SC_CLK_TCK")
        own = sum(getattr(resource.getrusage(who), field) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
                  for field in ("ru_utime", "ru_stime"))
        return (user + nice + system + irq + softirq + steal) / tick, steal / tick, own

    def cores(self) -> Tuple[float, float]:
        """Cores the other processes used on average since then, and of those the hypervisor's steal."""
        start, busy, stolen, own = self.start
        now_busy, now_stolen, now_own = self._seconds()
        elapsed = max(time.monotonic() - start, 1e-9)
        return max(now_busy - busy - (now_own - own), 0.0) / elapsed, (now_stolen - stolen) / elapsed


def add_allow_load(parser: argparse.ArgumentParser) -> None:
    """The ``--allow-load`` flag, which :func:`quiet_machine` reads."""
    parser.add_argument("--allow-load", action="store_true", help="keep the figures even if other processes load the machine")


def _said(cores: Tuple[float, float]) -> str:
    return f"{cores[0]:.2f} cores (steal {cores[1]:.2f})"


@contextmanager
def quiet_machine(allow_load: bool = False) -> Iterator[None]:
    """Time the block only on a quiet machine: other processes must use under :data:`BUSY_CORES` in the second
    before it and on average while it runs. Prints what they used (and the load average) after the block's report;
    exits with a message, so that its figures do not go into a table, where they used more, unless ``allow_load``.
    Processes the block starts (each round's measuring child) inherit :data:`WATCHED` and leave the watch to it."""
    if os.environ.get(WATCHED) or not Path("/proc/stat").exists():
        yield
        return
    probe = OtherProcesses()
    time.sleep(1.0)
    before = probe.cores()
    advice = "run it on a quiet machine, or pass --allow-load to keep figures from a loaded one (and say so)"
    if before[0] > BUSY_CORES and not allow_load:
        sys.exit(f"other processes use {_said(before)} of this machine's {os.cpu_count()}: timings would not "
                 f"reproduce; {advice}")
    watch = OtherProcesses()
    os.environ[WATCHED] = "1"
    try:
        yield
    finally:
        del os.environ[WATCHED]
    during = watch.cores()
    print(f"\nother processes: {_said(before)} before, {_said(during)} on average during the run, of "
          f"{os.cpu_count()} CPUs ({', '.join(cpu_flags()) or 'no AVX2'}); load average {load()}")
    if during[0] > BUSY_CORES and not allow_load:
        sys.exit(f"the machine was loaded during the run: these figures are not for a table; {advice}")


def header(argv: Sequence[str]) -> None:
    """Print the command and the machine: the first lines of every report (:func:`quiet_machine` prints the last)."""
    print(f"command: python {' '.join(argv)}\nmachine: {machine()}\n")


@contextmanager
def pretraining_paused(active: bool = True) -> Iterator[None]:
    """Pause (SIGSTOP) every running ``spacy_elmo pretrain`` process of this user for the block, and resume it
    (SIGCONT) afterwards, however the block ends: a timed run then does not share the cores with a long training
    run on the same machine."""
    pids: List[int] = []
    if active:
        found = subprocess.run(["pgrep", "-u", str(os.getuid()), "-f", "spacy_elmo pretrain"], capture_output=True,
                               text=True).stdout.split()
        for pid in map(int, found):
            if pid != os.getpid():
                os.kill(pid, signal.SIGSTOP)
                pids.append(pid)
                print(f"paused pretraining process {pid}", file=sys.stderr)
    try:
        yield
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
