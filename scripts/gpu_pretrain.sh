#!/usr/bin/env bash
# Continue a pretraining run on a GPU for a fixed time with large batches, bring the run back, then check the
# `elmo` component on CUDA (benchmarks/gpu_check.py). One command, sized for a lent GPU machine:
#
#   bash scripts/gpu_pretrain.sh RUN_DIR "TRAIN_GLOB" DEV_FILE SECONDS OUT_DIR [BATCH_TOKENS] [LEARN_RATE]
#
# RUN_DIR is a copy of a pretraining output directory (e.g. runs/en_gutenberg_tiny copied into a carried,
# git-ignored folder); TRAIN_GLOB must name the run's own training files (same names and lines; any folder).
# The run resumes exactly where its checkpoint stopped, with BATCH_TOKENS (default 32768) and LEARN_RATE
# (default 0.004: Adam's rate scaled by the square root of the batch ratio to the CPU run's 1280 tokens).
# After SECONDS, SIGTERM stops it cleanly with a checkpoint; checkpoint, log, options and weights are copied to
# OUT_DIR. Without CUDA (to test this script) it runs on the CPU and gpu_check.py runs with --cpu.
set -uo pipefail
run=$1 train=$2 dev=$3 seconds=$4 out=$5 batch=${6:-32768} lr=${7:-0.004}
here=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
timeout -s TERM "$seconds" python -m spacy_elmo pretrain "$run/config.cfg" "$run" --quiet \
  --paths.train "$train" --paths.dev "$dev" --training.batch_tokens "$batch" --training.learn_rate "$lr" \
  --training.max_steps 100000000 --training.threads 0 --training.checkpoint_every 200
status=$?
# 124: stopped by the time limit (the wanted end); 130: the same, seen by the trainer as SIGTERM.
if [ "$status" -ne 0 ] && [ "$status" -ne 124 ] && [ "$status" -ne 130 ]; then
  echo "pretraining failed with status $status" >&2
  exit "$status"
fi
mkdir -p "$out"
cp "$run"/checkpoint.pt "$run"/log.jsonl "$run"/options.json "$run"/weights.hdf5 "$run"/config.cfg "$out"/
tail -n 3 "$run/log.jsonl"
cpu=$(python -c "import torch; print('' if torch.cuda.is_available() else '--cpu')")
python "$here/benchmarks/gpu_check.py" --options "$run/options.json" --weights "$run/weights.hdf5" $cpu
