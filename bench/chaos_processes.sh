#!/usr/bin/env bash
# The chaos targets with every peer a process: `gossamer-bench chaos --processes`, 8 peers, every
# fault kind a process run has (kill, restart, restart-fresh, join, join-finishing, kill-join),
# for each algorithm named (default: every built-in decentralized one), three seeds: the first
# from 1 up whose schedule has each of the three moments (restart-fresh after a kill,
# join-finishing, kill-join; --plan-only shows a schedule without running it), or $SEEDS.
#
#   bench/chaos_processes.sh OUT_DIR [ALGORITHM ...]
#
# Writes OUT_DIR/command.txt (this command), OUT_DIR/summary.csv (one row per run: its faults,
# invariant violations, hangs, the latest exit after the cluster's last step, accuracy),
# OUT_DIR/report.md, and each run's whole output as OUT_DIR/ALGORITHM-seedS.txt. Exits 1 when any
# run had a violation or a hang. $BENCH names the gossamer-bench (default build/bench/).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $# -lt 1 ]]; then
  echo "usage: bench/chaos_processes.sh OUT_DIR [ALGORITHM ...]" >&2
  exit 2
fi
out=$1
shift
algorithms=("$@")
if [[ ${#algorithms[@]} -eq 0 ]]; then
  algorithms=(gosgd dpsgd allreduce-sgd sparknet local-sgd easgd eamsgd tree-easgd dts ad-psgd
              diloco streaming-diloco)
fi
bench=${BENCH:-build/bench/gossamer-bench}
[[ -x $bench ]] || { echo "chaos_processes.sh: no $bench (build first: ./run.sh --build-only)" >&2; exit 2; }
mkdir -p "$out"
echo "bench/chaos_processes.sh $out ${algorithms[*]}" > "$out/command.txt"
flags="--processes --peers 8 --kinds kill,restart,restart-fresh,join,join-finishing,kill-join"
flags+=" --faults 6 --minutes 0.5 --step-ms 50 --hidden 32 --train-samples 6000 --no-baseline --json"
if [[ -z ${SEEDS:-} ]]; then
  SEEDS=""
  for seed in $(seq 1 200); do
    # shellcheck disable=SC2086  # $flags is a list of flags
    plan=$("$bench" chaos $flags --seed "$seed" --plan-only)
    # A restart without resume after a kill (before any, it is skipped), a join during the
    # finish, a kill with a join.
    if awk '/kill -9/ { killed = 1 } /restart without resume/ && killed { found = 1 }
            END { exit !found }' <<< "$plan" &&
       grep -q "join during the finish" <<< "$plan" && grep -q "kill -9 and a join" <<< "$plan"; then
      SEEDS+="$seed "
      [[ $(wc -w <<< "$SEEDS") -eq 3 ]] && break
    fi
  done
fi
seeds=$SEEDS
echo "seeds (each schedule has every moment): $seeds" | tee "$out/seeds.txt"
echo "algorithm,seed,faults,kills,survivors,invariant_violations,hangs,max_exit_after_last_step_s,accuracy_with_faults" \
  > "$out/summary.csv"
failed=0
for algorithm in "${algorithms[@]}"; do
  for seed in $seeds; do
    log="$out/$algorithm-seed$seed.txt"
    # shellcheck disable=SC2086  # $flags is a list of flags
    "$bench" chaos $flags --algorithm "$algorithm" --seed "$seed" > "$log" 2>&1 || true
    row=$(python3 - "$log" "$algorithm" "$seed" <<'PY'
import json, sys
log, algorithm, seed = sys.argv[1:]
result = None
for line in open(log):
    line = line.strip()
    if line.startswith("{") and '"benchmark":"chaos"' in line:
        result = json.loads(line)
if result is None:
    print("%s,%s,-,-,-,no result,-,-,-" % (algorithm, seed))
else:
    exit_after, accuracy = result["max_exit_after_last_step_s"], result["accuracy_with_faults"]
    print("%s,%s,%d,%d,%d,%d,%d,%s,%s" % (
        algorithm, seed, result["faults"], result["kills"], result["survivors"],
        result["invariant_violations"], result["hangs"],
        "-" if exit_after is None else "%.2f" % exit_after,
        "-" if accuracy is None else "%.4f" % accuracy))
PY
)
    echo "$row" | tee -a "$out/summary.csv"
    IFS=, read -r _ _ _ _ _ violations hangs _ _ <<< "$row"
    [[ $violations == 0 && $hangs == 0 ]] || failed=1
  done
done
{
  echo "# Chaos with peers as processes"
  echo
  echo "Produced by \`$(cat "$out/command.txt")\`: \`gossamer-bench chaos $flags\` for each"
  echo "algorithm and seed (seeds $seeds); each run's output is ALGORITHM-seedS.txt beside this"
  echo "file."
} > "$out/report.md"
exit $failed
