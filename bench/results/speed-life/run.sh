#!/usr/bin/env bash
# The same speed before and after one peer life (engine/life): two builds of gossamer-bench run
# the same benchmarks one after the other, twice each (old, new, old, new), into this folder:
#
#   bench/results/speed-life/run.sh OLD_BENCH NEW_BENCH
#
# models and transport (--json), the quick preset on lan evaluated by wall time
# (../speed/quick-lan.conf: the old and the new build run the same experiments), and the
# 1,024-peer simulation of engine/sim/README.md. summary.py makes the table from the files.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
declare -A bench=([old]=$(realpath "$1") [new]=$(realpath "$2"))
cd "$here"
for round in 1 2; do
  for which in old new; do
    b=${bench[$which]}
    echo "== round $round: $which ($b)"
    "$b" models --json > "models-$which-$round.txt"
    "$b" transport --json > "transport-$which-$round.txt"
    rm -rf "quick-$which-$round"
    "$b" convergence --config ../speed/quick-lan.conf --out "quick-$which-$round" --json \
      > "quick-$which-$round.txt"
    rm -rf sim-report
    "$b" simulate --peers 1024 --algorithm dpsgd --topology exponential --network geo \
      --step-time 300 --model softmax --steps 200 --out sim-report --json \
      | tail -n 1 > "simulate-$which-$round.json"
    rm -rf sim-report
  done
done
python3 "$here/summary.py" "$here" > "$here/summary.md"
cat "$here/summary.md"
