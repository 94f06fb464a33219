#!/usr/bin/env bash
# Runs examples/slurm/gossamer.sbatch without Slurm: stand-in `scontrol` and `srun` commands give
# it an allocation of two "nodes", node1 and node2, each task a gossamer-peer on a loopback address
# of its own (127.0.0.1 and 127.0.0.2, the names in a private /etc/hosts), all in a network and
# mount namespace of this test's own. Checks that the script derives the seeds and --min-peers from
# the node list and that both peers train together to the end. Exit 77 (a skip) where the
# namespaces cannot be made (not root, no unshare).
#   tests/slurm_stub_test.sh SOURCE_DIR GOSSAMER_PEER
set -euo pipefail
source_dir=$1
peer=$2

if [ "$(id -u)" -ne 0 ] || ! unshare -n -m true 2>/dev/null; then
  echo "slurm_stub_test.sh: skipped: needs root and unshare for private network and mount namespaces" >&2
  exit 77
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/bin"
# scontrol show hostnames LIST: one name a line.
cat > "$work/bin/scontrol" <<'EOF'
#!/bin/sh
echo "$3" | tr ',' '\n'
EOF
# srun [options] COMMAND...: COMMAND once per node, in the background, as Slurm's tasks; each node
# listens on its own loopback address (a real node has its own 0.0.0.0).
cat > "$work/bin/srun" <<'EOF'
#!/bin/sh
while [ $# -gt 0 ]; do case "$1" in --*) shift ;; *) break ;; esac; done
status=0
i=0
pids=""
for node in $(scontrol show hostnames "$SLURM_JOB_NODELIST"); do
  i=$((i + 1))
  SLURMD_NODENAME=$node GOSSAMER_LISTEN=127.0.0.$i:7000 "$@" > "$STUB_LOGS/$node.log" 2>&1 &
  pids="$pids $!"
done
for pid in $pids; do wait "$pid" || status=1; done
exit $status
EOF
chmod +x "$work/bin/scontrol" "$work/bin/srun"
printf '127.0.0.1 localhost node1\n127.0.0.2 node2\n' > "$work/hosts"
head -c 32 /dev/urandom | base64 > "$work/secret"
chmod 600 "$work/secret"

status=0
# (The single-quoted script is expanded by the inner shell: $0 is the hosts file.)
# shellcheck disable=SC2016
STUB_LOGS=$work PATH="$work/bin:$PATH" SLURM_JOB_NODELIST=node1,node2 PEER=$peer \
  SECRET="$work/secret" SLURM_SUBMIT_DIR=$work \
  unshare -n -m sh -c 'ip link set lo up && mount --bind "$0" /etc/hosts && exec bash "$@"' \
  "$work/hosts" "$source_dir/examples/slurm/gossamer.sbatch" \
  --membership local --dataset synthetic --train-samples 2000 --test-samples 200 --hidden 16 \
  --steps 50 --json > "$work/job.log" 2>&1 || status=$?

failed=0
grep -q "seeds node1:7000,node2:7000" "$work/job.log" || { echo "no seed list from the node list" >&2; failed=1; }
for node in node1 node2; do
  if ! grep -q '"peers":2' "$work/$node.log"; then
    echo "$node did not finish in a cluster of 2" >&2; failed=1
  fi
done
if [ "$status" -ne 0 ] || [ "$failed" -ne 0 ]; then
  echo "slurm_stub_test.sh: failed (job status $status)" >&2
  for log in "$work"/job.log "$work"/node*.log; do echo "----- $log"; tail -n 20 "$log"; done
  exit 1
fi
echo "slurm_stub_test.sh: the batch script ran two peers on node1 and node2, which trained together"
