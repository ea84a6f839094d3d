#!/usr/bin/env bash
# C3LT's reference backbone (issue 29) in one go on a lent GPU: the C3LT code's DCGAN until its curve converges
# (skipped when data/checkpoints already ships it), then each protocol pair's encoder and C3LT's maps on them at
# the reference schedule, in float32 as the C3LT code trains; packed into $OUT/backbones.tgz to copy back.
# Usage: OUT=/tmp/out DEVICE=cuda bash scripts/backbones_on_gpu.sh   (each step is a documented command that the
# tests smoke-train: tests/test_backbone_curve.py, tests/test_training_pieces.py)
set -euo pipefail
OUT=${OUT:-runs/backbones_out}; DEVICE=${DEVICE:-cuda}; LOGS=runs/backbones/logs; mkdir -p "$OUT" "$LOGS"
export PYTHONUNBUFFERED=1
PYTHON=${PYTHON:-python3}; CFKIT="$PYTHON -m cfkit.running.cli"
if [ ! -f data/checkpoints/dcgan_reference.pt ]; then
  $CFKIT backbone dcgan_reference --device "$DEVICE" --register-into data/checkpoints > "$LOGS/dcgan_reference.log" 2>&1
fi
for pair in "4 9" "3 8" "5 6"; do
  for family in encoder_reference c3lt_reference; do
    # shellcheck disable=SC2086  # the pair is two words
    $CFKIT train "$family" --pair $pair --device "$DEVICE" > "$LOGS/${family}_${pair/ /_}.log" 2>&1
  done
done
tail -n 2 "$LOGS"/*.log
tar czf "$OUT/backbones.tgz" data/checkpoints/manifest.json data/checkpoints/*reference*.pt results/backbones
