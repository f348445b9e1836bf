#!/usr/bin/env bash
# Run a command (a timed benchmark) with any running `python -m spacy_elmo pretrain` job paused (SIGSTOP),
# and resume the job (SIGCONT) when the command ends, whether it succeeds, fails or is interrupted.
#   benchmarks/paused.sh python benchmarks/bench_embed.py
set -u
pids=$( { pgrep -f "spacy_elmo pretrain" || true; cat "$(dirname "$0")"/../runs/*.pid 2>/dev/null || true; } | sort -u)
resume() { for pid in $pids; do kill -CONT "$pid" 2>/dev/null && echo "resumed pretraining pid $pid" >&2; done; }
trap resume EXIT INT TERM
for pid in $pids; do
  if kill -STOP "$pid" 2>/dev/null; then echo "paused pretraining pid $pid: $(tr '\0' ' ' < /proc/$pid/cmdline | cut -c1-120)" >&2; fi
done
echo "load before the run: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"$@"
