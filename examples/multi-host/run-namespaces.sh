#!/usr/bin/env bash
# A cluster of gossamer-peer processes on separate "hosts" on one Linux machine: each peer runs in
# a network namespace of its own with its own address (10.77.0.1, .2, ...), the namespaces joined
# by veth pairs to a bridge (in one more namespace, so the machine's own network is not touched),
# each peer's outgoing bandwidth capped with tc tbf. Every peer listens on 0.0.0.0, advertises its
# own address, and finds the others by host name (peer1, peer2, ...) through the namespace's
# /etc/hosts. The common flags come from GOSSAMER_* environment variables, as a container or a
# batch job would set them. Midway one peer is killed (SIGKILL, as a crashed machine); the others
# must finish and report.
#
#   sudo examples/multi-host/run-namespaces.sh [options] [-- extra gossamer-peer flags]
#     --peer PATH        gossamer-peer binary (default: build/engine/gossamer-peer of this tree)
#     --peers N          peers, one namespace each (default 4, at most 250)
#     --algorithm NAME   decentralized optimizer (default gosgd)
#     --steps N          training steps per peer (default 300)
#     --step-time MS     emulated compute per step, which paces training (default 40)
#     --rate RATE        egress cap of each peer, tc syntax (default 100mbit)
#     --kill I           the peer to kill, 0 for none (default 3, or the last if fewer)
#     --kill-at STEP     kill it once it reports this step (default a third of --steps)
#     --logs DIR         keep the peers' logs in DIR (default: a temporary directory, removed)
#
# Exit status: 0 every surviving peer finished and reported; 1 something failed (logs shown);
# 2 bad arguments; 77 this machine cannot make the namespaces (not root, no `ip netns`, no veth,
# bridge or tbf support): nothing was run.
#
# Names are unique per run (gsm<pid><random>-*), so runs can overlap; everything this script made
# (namespaces, and with them their interfaces; /etc/netns/<name>/) is removed on exit, Ctrl-C or
# SIGTERM. Nothing is sent outside the namespaces: they have no route off the bridge.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
script=run-namespaces.sh
# shellcheck source=examples/multi-host/netns-lib.sh
. "$here/netns-lib.sh"
peer_binary="$here/../../build/engine/gossamer-peer"
peers=4
algorithm=gosgd
steps=300
step_time=40
rate=100mbit
kill_peer=""
kill_at=""

while [ $# -gt 0 ]; do
  case "$1" in
    --peers) needs_value "$@"; peers=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    *) common_option "$@" || bad_argument "$1"; shift 2 ;;
  esac
done
case "$peers$steps" in *[!0-9]*) echo "run-namespaces.sh: --peers and --steps take numbers" >&2; exit 2 ;; esac
if [ "$peers" -lt 2 ] || [ "$peers" -gt 250 ]; then
  echo "run-namespaces.sh: --peers must be 2 to 250" >&2; exit 2
fi
[ -n "$kill_peer" ] || kill_peer=$(( peers < 3 ? peers : 3 ))
[ -n "$kill_at" ] || kill_at=$(( steps / 3 ))
[ -x "$peer_binary" ] || { echo "run-namespaces.sh: no gossamer-peer at $peer_binary (build it, or pass --peer PATH)" >&2; exit 2; }

netns_init
tag="gsm$(printf '%x%02x' "$$" $(( RANDOM % 256 )))"
switch="$tag-s"

# The namespaces: the bridge's, then one per peer.
netns_add "$switch"
netns_bridge "$switch"
hosts=""
for i in $(seq 1 "$peers"); do hosts+="10.77.0.$i peer$i"$'\n'; done
for i in $(seq 1 "$peers"); do
  # Inside the peer's namespace the interface is eth0; its other end, p<i>, is a bridge port.
  netns_host "$tag-$i" "$switch" "p$i" "10.77.0.$i/24" "$rate"
  netns_names "$tag-$i" "$hosts"
done
netns_workdir

# What every peer shares, by environment (GOSSAMER_<FLAG> is --flag); per-peer flags below.
seeds=""
for i in $(seq 1 "$peers"); do seeds+="${seeds:+,}peer$i:7000"; done
export GOSSAMER_SEEDS=$seeds
export GOSSAMER_SECRET_FILE=$work/secret
export GOSSAMER_ALGORITHM=$algorithm
export GOSSAMER_MIN_PEERS=$peers
export GOSSAMER_STEPS=$steps
export GOSSAMER_STEP_TIME=$step_time
export GOSSAMER_MEMBERSHIP=local   # failures detected in about 2 s (T = 200 ms)
export GOSSAMER_JOIN_TIMEOUT=30
export GOSSAMER_START_TIMEOUT=60

echo "run-namespaces.sh: $peers peers in namespaces $tag-1..$peers (10.77.0.1-$peers, egress $rate each)," \
     "$algorithm for $steps steps; peer $kill_peer is killed at step $kill_at; logs in $work"
start=$SECONDS
for i in $(seq 1 "$peers"); do start_peer "$i" "10.77.0.$i"; done

[ "$kill_peer" -eq 0 ] || kill_at_step "$kill_peer" "$kill_at"

failed=0
for i in $(seq 1 "$peers"); do
  wait_peer "$i" "$kill_peer" || { failed=1; continue; }
  [ "$i" -ne "$kill_peer" ] || continue
  echo "peer$i (10.77.0.$i): $peer_done"
  log="$work/peer$i.log"
  # It trained with every peer (all found by name), and saw the killed one fail (by its address).
  if ! grep -q "; $peers members; shard" "$log"; then
    echo "run-namespaces.sh: peer $i did not start training with all $peers peers" >&2; failed=1
  fi
  if [ "$kill_peer" -gt 0 ] && ! grep -q "(10.77.0.$kill_peer:7000) failed" "$log"; then
    echo "run-namespaces.sh: peer $i never saw peer $kill_peer fail" >&2; failed=1
  fi
done
pids=()
if [ "$failed" -ne 0 ]; then show_logs "$peers"; exit 1; fi
echo "run-namespaces.sh: every surviving peer finished in $((SECONDS - start)) s"
