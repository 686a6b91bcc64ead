#!/usr/bin/env bash
# Issue #2 evidence: configs/mnist.yaml on the real MNIST, then `lit-gpu test` on the best checkpoint.
# Usage: bash benchmarks/mnist_accuracy.sh [DATA_DIR [extra fit args, e.g. --seed_everything 1]]
#   (DATA_DIR defaults to ./data, which holds MNIST/raw/ (README); run from the repo root.)
set -euo pipefail
DATA_DIR=$(realpath "${1:-data}")
shift || true
REPO=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d)
cd "$WORK"
start=$(date +%s)
lit-gpu fit --config "$REPO/configs/mnist.yaml" --data.data_dir "$DATA_DIR" --data.download false \
  --trainer.enable_progress_bar false "$@"
fit_end=$(date +%s)
lit-gpu test --config "$REPO/configs/mnist.yaml" --data.data_dir "$DATA_DIR" --data.download false \
  --ckpt_path best --trainer.logger false --trainer.enable_progress_bar false
echo "fit wall time: $((fit_end - start)) s; run dir: $WORK/runs/lit_gpu/version_0"
