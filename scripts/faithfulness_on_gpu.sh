#!/usr/bin/env bash
# The faithfulness study's heavy run (issue 16), as it was run on a lent GPU: retrain the C3LT maps and the
# ExplainGANs at the reference budgets (scoring snapshots along the way), run every method at the kit's and
# the reference settings on the study subset, and pack it all into $OUT/faithfulness.tgz.
# Usage: OUT=/tmp/out DEVICE=cuda bash scripts/faithfulness_on_gpu.sh   (SMOKE=1: a few steps, 2 queries, CPU)
set -uo pipefail
OUT=${OUT:-runs/faithfulness_out}; DEVICE=${DEVICE:-cuda}; N=${N:-100}; LIMIT=${LIMIT:-300}  # seconds a job may run
T=runs/faithfulness; mkdir -p "$T/logs" "$OUT"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} PYTHONUNBUFFERED=1
PYTHON=${PYTHON:-python3}; CFKIT="$PYTHON -m cfkit.running.cli"
C3LT_CURVE=225,1000,2000,4000,6000,8400; EXPGAN_CURVE=455,1000,1500,2000,2500; EXTRA=""
if [ "${SMOKE:-0}" = 1 ]; then N=2; C3LT_CURVE=2,3; EXPGAN_CURVE=2,3; EXTRA="--max-steps 3"; fi
for pair in 4,9 3,8 5,6; do
  q=${pair%,*}; t=${pair#*,}
  for family in c3lt expgan; do
    curve=$C3LT_CURVE; [ $family = expgan ] && curve=$EXPGAN_CURVE
    timeout "$LIMIT" $CFKIT faithfulness --train $family --pairs "$q->$t" --device "$DEVICE" -n "$N" --no-gate $EXTRA \
      --train-dir "$T/train_${family}_$q$t" --curve-steps "$curve" --csv "$T/curve_${family}_$q$t.csv" \
      > "$T/logs/train_${family}_$q$t.log" 2>&1 &
  done
done
# CEM's reference (9 x 1000 iterations) in a process of its own, beside the others
CEM=cem; [ "${SMOKE:-0}" = 1 ] && CEM=cve
timeout "$LIMIT" $CFKIT faithfulness --methods $CEM --device "$DEVICE" -n "$N" --csv "$T/study_cem.csv" \
  > "$T/logs/study_cem.log" 2>&1 &
METHODS=ldce,cve,adv_attack; [ "${SMOKE:-0}" = 1 ] && METHODS=adv_attack
timeout "$LIMIT" $CFKIT faithfulness --methods $METHODS --device "$DEVICE" -n "$N" --csv "$T/study.csv" \
  > "$T/logs/study.log" 2>&1
wait
# the retrained models become the shipped ones: checkpoints and manifest entries
"$PYTHON" - "$T" <<'PY'
import json, shutil, sys
from pathlib import Path
runs, ship = Path(sys.argv[1]), Path("data/checkpoints")
manifest = json.loads((ship / "manifest.json").read_text())
for folder in sorted(runs.glob("train_*")):
    for name, entry in json.loads((folder / "manifest.json").read_text()).items():
        shutil.copy(folder / entry["file"], ship / entry["file"])
        manifest[name] = entry
(ship / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
PY
$CFKIT faithfulness --methods c3lt,expgan --device "$DEVICE" -n "$N" --csv "$T/study_pairs.csv" > "$T/logs/study_pairs.log" 2>&1
tail -n 3 "$T"/logs/*.log
tar czf "$OUT/faithfulness.tgz" "$T" data/checkpoints/manifest.json data/checkpoints/c3lt_*.pt data/checkpoints/expgan_*.pt
