#!/usr/bin/env bash
# Restore the full training state of an embedded model's pretraining run from git history, to continue its
# training exactly where it stopped (the repository keeps only the run's vocab, config, log, options and fp16
# softmax; checkpoint.pt, ~50 MB of float32 model, optimizer and random states, left the tracked tree):
#
#   bash scripts/restore_checkpoint.sh NAME DEST_DIR     # NAME: en_gutenberg_tiny or zh_classics_tiny
#
# The English checkpoint is the state of the release before the shipped one (step 18,809, 40.2 M tokens); the
# shipped model continued it to 70.0 M tokens, and that state was not kept (MODEL_CARD.md).
# DEST_DIR (e.g. runs/NAME) gets the run's config.cfg, log.jsonl, options.json, vocab.txt and checkpoint.pt as they
# were at that commit;
# then `python -m spacy_elmo pretrain configs/pretrain_NAME.cfg DEST_DIR` resumes it. Needs the clone's full
# history (`git fetch --unshallow` in a shallow clone). Nothing is written on failure.
set -euo pipefail
case "${1:-}" in
  en_gutenberg_tiny) commit=006598fbd892d841110dd2c9a19caeb0fd5e1c79 ;;  # step 18,809: the release before the shipped one
  zh_classics_tiny) commit=16c01651225cec58c9342b22b282ab2a254241a7 ;;
  *) echo "usage: bash scripts/restore_checkpoint.sh en_gutenberg_tiny|zh_classics_tiny DEST_DIR" >&2; exit 2 ;;
esac
name=$1 dest=${2:?usage: bash scripts/restore_checkpoint.sh NAME DEST_DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
blob="$commit:pretrain_runs/$name/checkpoint.pt"
if [ -e "$dest/checkpoint.pt" ]; then
  echo "$dest/checkpoint.pt exists: nothing was changed; give another DEST_DIR or move it away" >&2
  exit 1
fi
if ! git -C "$root" cat-file -e "$blob" 2>/dev/null; then
  echo "commit ${commit:0:12} (with $name's checkpoint) is not in this clone's history: run 'git fetch --unshallow' and retry" >&2
  exit 1
fi
mkdir -p "$dest"
trap 'rm -f "$dest/checkpoint.pt.tmp"' EXIT
git -C "$root" show "$blob" > "$dest/checkpoint.pt.tmp"
for file in config.cfg log.jsonl options.json vocab.txt; do git -C "$root" show "$commit:pretrain_runs/$name/$file" > "$dest/$file"; done
mv "$dest/checkpoint.pt.tmp" "$dest/checkpoint.pt"
echo "restored $dest/checkpoint.pt ($name at commit ${commit:0:12})"
