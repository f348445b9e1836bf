"""Serving measurements: requests from several threads to one model, as in a web app.

``long``: how long short requests wait when a long one is among them. ``--threads`` threads call ``nlp(text)`` on
one shared pipeline with one UD English-EWT dev sentence per call; first alone (their p50/p95 latency and words/s),
then while one more thread calls it on a text of ``--long-words`` words (UD-EWT train sentences, one Doc). One
pipeline per mode: requests merged with each ``shared_batch_tokens`` (``--budgets``), merged with shared batches
unbounded (every queued request in one batch, as before they were bounded), and not merged (``batch_requests``
off); the modes alternate, so that they are compared in one run on the same load.

    python benchmarks/serving.py long

``http``: the example web app (examples/serve.py: FastAPI + uvicorn, one shared ``nlp``) over HTTP on 127.0.0.1:
``--clients`` threads post UD-EWT dev sentences to ``/embed``; requests/s, p50/p95 latency and words/s against
``nlp.pipe`` on the same texts in this process; then the same with one ``--long-words`` request among them.
Needs the ``serve`` extra (``pip install -e ".[serve]"``).

    python benchmarks/serving.py http

``traffic``: the example web app with a long request in flight, under light and heavy traffic: one client posting a
UD-EWT dev sentence every ``--interval`` s (open loop, its first request at a random point of the first interval:
arrivals that do not know when the long request began), then ``--clients`` clients posting one after the other
(closed loop); for each, the short requests' p50/p95 alone and while one ``--long-words`` request runs, and their
ratio (target: p95 within 3x in both), ``--rounds`` times. ``--against DIR``: the same, in the same rounds, on a
second server running the example and package of the checkout in ``DIR`` (old against new in one run).

    python benchmarks/serving.py traffic

``abandon``: a ``--long-words`` request whose client gives up after ``--timeout`` s (it closes the connection): how
many biLM runs the server still made for it after the client left, and how long until the biLM was idle (``/stats``).

    python benchmarks/serving.py abandon

The model is the English one embedded in the package, on one torch thread (the default). Results print as Markdown.
"""
import argparse
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import add_allow_load, header, load_sentences, quiet_machine  # noqa: E402


ROOT = Path(__file__).resolve().parents[1]
PHASES = random.Random(0)  # where in its first interval an open-loop client starts


def short_requests() -> List[str]:
    """The short requests: UD-EWT dev sentences, one per request."""
    return [" ".join(words) for words in load_sentences("ud", "dev")]


def long_request(words: int) -> str:
    """UD-EWT train sentences from the start, until they hold ``words`` words, as one text."""
    sentences, total = [], 0
    for sentence in load_sentences("ud", "train"):
        if total >= words:
            break
        sentences.append(" ".join(sentence))
        total += len(sentence)
    return " ".join(sentences)


def percentile(values: List[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def closed_loop(send: Callable[[object], object], shares: List[list], stop: Optional[threading.Event] = None) -> dict:
    """One thread per share sending its requests one after the other (all starting together); with ``stop``, each
    cycles through its share until ``stop`` is set. Returns each request's latency (s) and the wall time (s)."""
    latencies: List[float] = []
    barrier = threading.Barrier(len(shares) + 1)

    def client(share: list) -> None:
        barrier.wait()
        n = 0
        while (stop is None and n < len(share)) or (stop is not None and not stop.is_set()):
            start = time.perf_counter()
            send(share[n % len(share)])
            latencies.append(time.perf_counter() - start)
            n += 1

    threads = [threading.Thread(target=client, args=(share,)) for share in shares]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    if stop is None:
        for thread in threads:
            thread.join()
    return {"latencies": latencies, "threads": threads, "start": start}


def long_modes(budgets: List[int]) -> Dict[str, Callable[[str], object]]:
    """One pipeline per mode, each called as ``nlp(text)``: merged requests with each ``shared_batch_tokens``, with
    shared batches unbounded (every queued request in one batch, as before they were bounded), and not merged."""
    import spacy

    def pipeline(**config) -> Callable[[str], object]:
        nlp = spacy.blank("en")
        nlp.add_pipe("elmo", config=config)
        return nlp

    modes = {f"merged, shared_batch_tokens {b}": pipeline(shared_batch_tokens=b) for b in budgets}
    return {"merged, unbounded (before)": pipeline(shared_batch_tokens=10**9), **modes,
            "not merged": pipeline(batch_requests=False)}


def long_rounds(args: argparse.Namespace) -> Dict[str, Dict[str, list]]:
    """Per mode and round: the short calls' latencies alone and while the long call runs, short words/s alone, and
    the long call's seconds. The modes alternate within each round."""
    shorts, long = short_requests(), long_request(args.long_words)
    shares = [shorts[i :: args.threads][: args.requests] for i in range(args.threads)]
    words = sum(len(s.split()) for share in shares for s in share)
    modes = long_modes([int(b) for b in args.budgets.split(",")])
    for call in modes.values():
        list(call.pipe(shorts[:200]))  # warm-up: the token cache as in a running service
    results: Dict[str, Dict[str, list]] = {mode: {"alone": [], "with long": [], "words/s": [], "long s": []}
                                           for mode in modes}
    for _ in range(args.rounds):
        for mode, call in modes.items():
            alone = closed_loop(call, shares)
            results[mode]["words/s"].append(words / (time.perf_counter() - alone["start"]))
            results[mode]["alone"] += alone["latencies"]
            stop = threading.Event()
            mixed = closed_loop(call, shares, stop)
            start = time.perf_counter()
            call(long)
            results[mode]["long s"].append(time.perf_counter() - start)
            stop.set()
            for thread in mixed["threads"]:
                thread.join()
            results[mode]["with long"] += mixed["latencies"]
    return results


def long_report(args: argparse.Namespace) -> None:
    results = long_rounds(args)
    header(sys.argv)
    print(f"{args.threads} threads, one UD-EWT dev sentence per nlp(text) call (embedded model), {args.requests} calls each "
          f"alone; then cycling while one more call of {args.long_words:,} words (UD-EWT train) runs; {args.rounds} "
          "rounds, the modes alternating; latencies pooled over the rounds, words/s their median\n")
    print("| mode | short p50 alone | short p95 alone | short words/s alone | short p50 with long | short p95 with long "
          "| p95 with / alone | long call s |")
    print("| --- |" + " ---: |" * 7)
    for mode, r in results.items():
        p95, p95_mixed = percentile(r["alone"], 0.95), percentile(r["with long"], 0.95)
        print(f"| {mode} | {percentile(r['alone'], .5) * 1000:.0f} ms | {p95 * 1000:.0f} ms | "
              f"{statistics.median(r['words/s']):,.0f} | {percentile(r['with long'], .5) * 1000:.0f} ms | "
              f"{p95_mixed * 1000:.0f} ms | {p95_mixed / p95:.1f} | {statistics.median(r['long s']):.1f} |")


@contextmanager
def example_server(startup_s: float = 120, checkout: Path = ROOT) -> Iterator[str]:
    """examples/serve.py under uvicorn on a free port of 127.0.0.1, with ``checkout``'s example and package (first on
    the path; default: this checkout's); its base URL once ``/health`` answers. Stopped after."""
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(checkout), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "uvicorn", "serve:app", "--app-dir", str(checkout / "examples"), "--host",
               "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    server = subprocess.Popen(command, env=env, cwd=checkout)  # the working directory is first on uvicorn's path
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_s
        while True:
            if server.poll() is not None:
                raise SystemExit("the example server exited; is the serve extra installed (pip install -e \".[serve]\")?")
            try:
                httpx.get(f"{url}/health", timeout=5).raise_for_status()
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise SystemExit(f"the example server did not answer within {startup_s} s") from None
                time.sleep(0.2)
        yield url
    finally:
        server.terminate()
        server.wait(30)


def http_report(args: argparse.Namespace) -> None:
    """Requests/s, latency and words/s of the example app against ``nlp.pipe``; then with a long request among them."""
    import httpx
    import spacy

    texts = short_requests()[: args.requests]
    long_text = long_request(args.long_words)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    words = sum(len(doc) for doc in nlp.pipe(texts))  # also fills the token cache, as the server's fills below
    start = time.perf_counter()
    list(nlp.pipe(texts))
    pipe_rate = words / (time.perf_counter() - start)
    shares = [texts[i :: args.clients] for i in range(args.clients)]
    limits = httpx.Limits(max_connections=args.clients + 1)
    with example_server() as url, httpx.Client(base_url=url, timeout=600, limits=limits) as client:
        def send(text: str) -> None:
            client.post("/embed", json={"text": text}).raise_for_status()

        closed_loop(send, shares)  # warm-up: the server's token cache fills on the texts
        alone = closed_loop(send, shares)
        wall = time.perf_counter() - alone["start"]
        stop = threading.Event()
        mixed = closed_loop(send, shares, stop)
        start = time.perf_counter()
        send(long_text)
        long_s = time.perf_counter() - start
        stop.set()
        for thread in mixed["threads"]:
            thread.join()
    header(sys.argv)
    print(f"examples/serve.py (uvicorn, one process) on 127.0.0.1; {args.clients} client threads in the benchmark's "
          f"process post {len(texts)} UD-EWT dev sentences ({words:,} words) to /embed, one per request; nlp.pipe: "
          "the same texts, same pipeline, in the benchmark's process while the server idles; then the clients cycle "
          f"while one more request of {args.long_words:,} words runs\n")
    print("| requests/s | p50 | p95 | words/s | x nlp.pipe | p50 with long | p95 with long | long request s |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    lat, mix = alone["latencies"], mixed["latencies"]
    print(f"| {len(texts) / wall:.1f} | {percentile(lat, .5) * 1000:.0f} ms | {percentile(lat, .95) * 1000:.0f} ms | "
          f"{words / wall:,.0f} | {words / wall / pipe_rate:.2f} | {percentile(mix, .5) * 1000:.0f} ms | "
          f"{percentile(mix, .95) * 1000:.0f} ms | {long_s:.1f} |")


def open_loop(send: Callable[[object], object], texts: List[str], interval: float, stop: threading.Event) -> List[float]:
    """One client sending ``texts`` in turn, one every ``interval`` s (at once when the one before took longer), the
    first at a random point of the first interval, until ``stop`` is set; each request's latency (s)."""
    latencies: List[float] = []
    due = time.perf_counter() + PHASES.uniform(0, interval)
    n = 0
    while not stop.is_set():
        time.sleep(max(0.0, due - time.perf_counter()))
        start = time.perf_counter()
        send(texts[n % len(texts)])
        latencies.append(time.perf_counter() - start)
        due, n = due + interval, n + 1
    return latencies


def with_long(send: Callable[[str], object], long_text: str, traffic: Callable[[threading.Event], List[float]]) -> tuple:
    """The short requests' latencies while the long request runs, and its seconds."""
    stop, latencies = threading.Event(), []
    thread = threading.Thread(target=lambda: latencies.extend(traffic(stop)))
    thread.start()
    start = time.perf_counter()
    send(long_text)
    long_s = time.perf_counter() - start
    stop.set()
    thread.join()
    return latencies, long_s


def traffic_report(args: argparse.Namespace) -> None:
    """Short requests' latency alone and with a long request in flight, light traffic and heavy; with ``--against``,
    on both checkouts' servers in the same rounds."""

    texts = short_requests()
    long_text = long_request(args.long_words)
    checkouts = {"": ROOT}
    if args.against is not None:
        checkouts = {" (this checkout)": ROOT, f" ({args.against})": Path(args.against)}
    results: Dict[str, Dict[str, list]] = {}
    with ExitStack() as stack:
        rounds = [traffic_modes(args, texts, stack.enter_context(example_server(checkout=path)), stack)
                  for path in checkouts.values()]
        for _ in range(args.rounds):
            for label, modes in zip(checkouts, rounds):
                for mode, (alone, mixed, send) in modes.items():
                    r = results.setdefault(mode + label, {"alone": [], "with long": [], "long s": []})
                    r["alone"] += alone()
                    latencies, long_s = with_long(send, long_text, mixed)
                    r["with long"] += latencies
                    r["long s"].append(long_s)
    header(sys.argv)
    print(f"examples/serve.py (uvicorn, one process) on 127.0.0.1; UD-EWT dev sentences posted to /embed, one per "
          f"request: one client every {args.interval} s (open loop), or {args.clients} clients one request after the "
          f"other; alone, then while one more request of {args.long_words:,} words (UD-EWT train) runs; {args.rounds} "
          "rounds, latencies pooled\n")
    print("| traffic | requests alone / with long | p50 alone | p95 alone | p50 with long | p95 with long "
          "| p95 with / alone | long request s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for mode, r in results.items():
        p95, p95_mixed = percentile(r["alone"], 0.95), percentile(r["with long"], 0.95)
        print(f"| {mode} | {len(r['alone'])} / {len(r['with long'])} | {percentile(r['alone'], .5) * 1000:.0f} ms | "
              f"{p95 * 1000:.0f} ms | {percentile(r['with long'], .5) * 1000:.0f} ms | {p95_mixed * 1000:.0f} ms | "
              f"{p95_mixed / p95:.1f} | {statistics.median(r['long s']):.1f} |")


def traffic_modes(args: argparse.Namespace, texts: List[str], url: str, stack: ExitStack) -> Dict[str, tuple]:
    """For the server at ``url`` (its token cache warmed on ``texts``): each kind of traffic's run alone, its run
    while a long request is sent, and the request sender."""
    import httpx

    light_alone = int(args.light_seconds / args.interval)
    limits = httpx.Limits(max_connections=args.clients + 2)
    client = stack.enter_context(httpx.Client(base_url=url, timeout=600, limits=limits))

    def send(text: str) -> None:
        client.post("/embed", json={"text": text}).raise_for_status()

    closed_loop(send, [texts[i :: args.clients][:50] for i in range(args.clients)])  # warm-up: the token cache

    def light(stop: threading.Event) -> List[float]:
        return open_loop(send, texts, args.interval, stop)

    def heavy(stop: threading.Event) -> List[float]:
        shares = [texts[i :: args.clients] for i in range(args.clients)]
        run = closed_loop(send, shares, stop)
        stop.wait()
        for thread in run["threads"]:
            thread.join()
        return run["latencies"]

    def light_alone_run() -> List[float]:
        stop = threading.Event()
        timer = threading.Timer(light_alone * args.interval, stop.set)
        timer.start()
        return open_loop(send, texts, args.interval, stop)

    def heavy_alone_run() -> List[float]:
        return closed_loop(send, [texts[i :: args.clients][: args.requests] for i in range(args.clients)])["latencies"]

    return {f"1 client every {args.interval} s": (light_alone_run, light, send),
            f"{args.clients} clients": (heavy_alone_run, heavy, send)}


def abandon_report(args: argparse.Namespace) -> None:
    """What a long request whose client left still costs the server."""
    import httpx

    rows = []
    with example_server() as url:
        def stats() -> dict:
            return httpx.get(f"{url}/stats", timeout=60).json()

        for _ in range(args.rounds):
            full = stats()
            start = time.perf_counter()
            httpx.post(f"{url}/embed", json={"text": long_request(args.long_words)}, timeout=600)
            full_s, full_runs = time.perf_counter() - start, stats()["batches_run"] - full["batches_run"]
            before = stats()
            try:
                httpx.post(f"{url}/embed", json={"text": long_request(args.long_words)}, timeout=args.timeout)
            except httpx.TimeoutException:
                pass
            left, at_leaving = time.perf_counter(), stats()
            while (now := stats())["waiting_calls"] or now["running"]:
                time.sleep(0.01)
            dropped_s = time.perf_counter() - left
            rows.append((full_runs, full_s, at_leaving["batches_run"] - before["batches_run"],
                         now["batches_run"] - at_leaving["batches_run"], dropped_s,
                         now["calls_cancelled"] - before["calls_cancelled"]))
    header(sys.argv)
    print(f"examples/serve.py (uvicorn, one process) on 127.0.0.1: a request of {args.long_words:,} words (UD-EWT train) "
          f"answered in full, then the same posted by a client that gives up after {args.timeout} s; biLM runs from "
          "/stats\n")
    print("| runs of the whole request | its seconds | runs before the client left | runs after | seconds until idle "
          "| cancelled |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for full_runs, full_s, before_runs, after_runs, dropped_s, cancelled in rows:
        print(f"| {full_runs} | {full_s:.1f} | {before_runs} | {after_runs} | {dropped_s:.2f} | {cancelled} |")


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_allow_load(parser)
    commands = parser.add_subparsers(dest="command", required=True)
    long = commands.add_parser("long", help="short requests' latency with and without a long one (nlp(text))")
    long.add_argument("--threads", type=int, default=7, help="threads sending short requests")
    long.add_argument("--requests", type=int, default=40, help="short requests per thread, alone")
    long.add_argument("--long-words", type=int, default=30000, help="words of the long request")
    long.add_argument("--budgets", default="4096,512", help="comma-separated shared_batch_tokens to compare")
    long.add_argument("--rounds", type=int, default=2, help="rounds of all modes")
    http = commands.add_parser("http", help="the example web app over HTTP (needs the serve extra)")
    http.add_argument("--clients", type=int, default=8, help="client threads")
    http.add_argument("--requests", type=int, default=400, help="short requests (UD-EWT dev sentences)")
    http.add_argument("--long-words", type=int, default=30000, help="words of the long request")
    traffic = commands.add_parser("traffic", help="light and heavy traffic with a long request in flight (serve extra)")
    traffic.add_argument("--interval", type=float, default=0.5, help="seconds between the light client's requests")
    traffic.add_argument("--light-seconds", type=float, default=20, help="seconds of light traffic alone per round")
    traffic.add_argument("--clients", type=int, default=8, help="heavy traffic's client threads")
    traffic.add_argument("--requests", type=int, default=40, help="requests per heavy client, alone")
    traffic.add_argument("--long-words", type=int, default=30000, help="words of the long request")
    traffic.add_argument("--rounds", type=int, default=2, help="rounds of both kinds of traffic")
    traffic.add_argument("--against", help="another checkout whose example and package to measure in the same rounds")
    abandon = commands.add_parser("abandon", help="a long request whose client gives up (serve extra)")
    abandon.add_argument("--long-words", type=int, default=30000, help="words of the long request")
    abandon.add_argument("--timeout", type=float, default=1.0, help="seconds the client waits")
    abandon.add_argument("--rounds", type=int, default=2, help="times to measure")
    args = parser.parse_args(argv)
    with quiet_machine(args.allow_load):
        {"long": long_report, "http": http_report, "traffic": traffic_report, "abandon": abandon_report}[args.command](args)


if __name__ == "__main__":
    main()
