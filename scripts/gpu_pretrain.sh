#!/usr/bin/env bash
# Continue the embedded English biLM's pretraining on a GPU for a fixed time with large batches, then check the
# biLM on CUDA (benchmarks/gpu_check.py). One command for a lent GPU machine (torch, numpy, h5py, tqdm; no spaCy):
#
#   python scripts/gpu_bundle.py --wheels           # here, once: gpu_bundle/ (corpus sample, 2.6 MiB of wheels)
#   bash scripts/gpu_pretrain.sh SECONDS OUT_DIR [BATCH_TOKENS] [LEARN_RATE] [MAX_STEPS]   # there, carry gpu_bundle
#
# The run starts from what the repository ships (pretrain_runs/en_gutenberg_tiny's vocabulary and fp16 softmax,
# the package's biLM; a fresh Adam) and trains on gpu_bundle/corpus (pre-tokenized Gutenberg training text,
# evaluated on its held-out text) with BATCH_TOKENS (default 32768) and LEARN_RATE (default 0.004: Adam's 0.001
# scaled by the square root of the batch ratio to the CPU run's 1280 tokens). After SECONDS (or MAX_STEPS) it
# stops with a checkpoint; OUT_DIR gets 7 files of at most ~12 MB: options.json, weights.hdf5, best_weights.hdf5,
# best_scores.json, log.jsonl, config.cfg, gpu_check.txt (the checkpoint stays behind: ~50 MB). Without CUDA (to
# test this script, with a tiny bundle and budget) it runs on the CPU.
set -uo pipefail
seconds=${1:?usage: bash scripts/gpu_pretrain.sh SECONDS OUT_DIR [BATCH_TOKENS] [LEARN_RATE] [MAX_STEPS]}
out=${2:?usage: bash scripts/gpu_pretrain.sh SECONDS OUT_DIR [BATCH_TOKENS] [LEARN_RATE] [MAX_STEPS]}
batch=${3:-32768} lr=${4:-0.004} steps=${5:-100000000}
here=$(cd "$(dirname "$0")/.." && pwd)
bundle=${GPU_BUNDLE:-$here/gpu_bundle}
if [ ! -e "$bundle/corpus/heldout.txt.gz" ]; then
  echo "no $bundle/corpus: run 'python scripts/gpu_bundle.py --wheels' first (and carry gpu_bundle)" >&2
  exit 2
fi
if ls "$bundle"/wheels/*.whl >/dev/null 2>&1 && ! python -c "import pydantic, confection" 2>/dev/null; then
  python -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/gpu_site "$bundle"/wheels/*.whl || exit 1
  export PYTHONPATH=/tmp/gpu_site${PYTHONPATH:+:$PYTHONPATH}
fi
run=$(mktemp -d)/run
shipped=$here/spacy_elmo/data/en_gutenberg_tiny
timeout -s TERM "$seconds" python "$here/scripts/gpu_pretrain.py" "$here/configs/adapt_en_gutenberg_tiny.cfg" "$run" \
  --paths.train "$bundle/corpus/train-*.txt.gz" --paths.dev "$bundle/corpus/heldout.txt.gz" --corpus.pretokenized true \
  --initialize.run "$here/pretrain_runs/en_gutenberg_tiny" --initialize.options_file "$shipped/options.json" \
  --initialize.weight_file "$shipped/weights.hdf5" --training.batch_tokens "$batch" --training.learn_rate "$lr" \
  --training.max_steps "$steps" --training.threads 0 --training.checkpoint_every 200 --training.eval_every 500 --training.log_every 50
status=$?
# 124: stopped by the time limit (the wanted end); 130: the same, seen by the trainer as SIGTERM.
if [ "$status" -ne 0 ] && [ "$status" -ne 124 ] && [ "$status" -ne 130 ]; then
  echo "pretraining failed with status $status" >&2
  exit "$status"
fi
mkdir -p "$out"
cp "$run"/options.json "$run"/weights.hdf5 "$run"/log.jsonl "$run"/config.cfg "$out"/
cp "$run"/best/weights.hdf5 "$out"/best_weights.hdf5
cp "$run"/best/scores.json "$out"/best_scores.json
tail -n 3 "$run/log.jsonl"
cpu=$(python -c "import torch; print('' if torch.cuda.is_available() else '--cpu')")
python "$here/benchmarks/gpu_check.py" --options "$run/options.json" --weights "$run/weights.hdf5" $cpu 2>&1 | tee "$out/gpu_check.txt"
