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
peer_binary="$here/../../build/engine/gossamer-peer"
peers=4
algorithm=gosgd
steps=300
step_time=40
rate=100mbit
kill_peer=""
kill_at=""
logs=""
extra=()

usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --peer) peer_binary=$2; shift 2 ;;
    --peers) peers=$2; shift 2 ;;
    --algorithm) algorithm=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --step-time) step_time=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --kill) kill_peer=$2; shift 2 ;;
    --kill-at) kill_at=$2; shift 2 ;;
    --logs) logs=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "run-namespaces.sh: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
  esac
done
case "$peers$steps" in *[!0-9]*) echo "run-namespaces.sh: --peers and --steps take numbers" >&2; exit 2 ;; esac
if [ "$peers" -lt 2 ] || [ "$peers" -gt 250 ]; then
  echo "run-namespaces.sh: --peers must be 2 to 250" >&2; exit 2
fi
[ -n "$kill_peer" ] || kill_peer=$(( peers < 3 ? peers : 3 ))
[ -n "$kill_at" ] || kill_at=$(( steps / 3 ))
[ -x "$peer_binary" ] || { echo "run-namespaces.sh: no gossamer-peer at $peer_binary (build it, or pass --peer PATH)" >&2; exit 2; }

skip() { echo "run-namespaces.sh: skipped: $*" >&2; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "network namespaces need root (run it with sudo)"
for tool in ip tc; do command -v "$tool" >/dev/null || skip "no '$tool' command (Debian: iproute2)"; done

tag="gsm$(printf '%x%02x' "$$" $(( RANDOM % 256 )))"
switch="$tag-s"
made=()   # namespaces made so far, removed by cleanup
pids=()   # peer processes started so far
work=""

cleanup() {
  local status=$?
  trap - EXIT INT TERM
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  for ns in "${made[@]}"; do
    ip netns del "$ns" 2>/dev/null || true
    rm -rf "/etc/netns/$ns"
  done
  if [ -n "$work" ] && [ -z "$logs" ]; then rm -rf "$work"; fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The namespaces: the bridge's, then one per peer.
ip netns add "$switch" 2>/dev/null || skip "cannot create a network namespace ('ip netns add' failed)"
made+=("$switch")
net() { "$@" 2>&1 || skip "cannot build the namespace network: '$*' failed"; }
net ip -n "$switch" link add br0 type bridge
net ip -n "$switch" link set br0 up
hosts=""
for i in $(seq 1 "$peers"); do hosts+="10.77.0.$i peer$i"$'\n'; done
for i in $(seq 1 "$peers"); do
  ns="$tag-$i"
  net ip netns add "$ns"
  made+=("$ns")
  # Inside the peer's namespace the interface is eth0; its other end, p<i>, is a bridge port.
  net ip link add eth0 netns "$ns" type veth peer name "p$i" netns "$switch"
  net ip -n "$switch" link set "p$i" master br0 up
  net ip -n "$ns" link set lo up
  net ip -n "$ns" addr add "10.77.0.$i/24" dev eth0
  net ip -n "$ns" link set eth0 up
  net ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst 64kb latency 50ms
  # `ip netns exec` mounts /etc/netns/<ns>/* over /etc/*: the peers' names, and no DNS server.
  mkdir -p "/etc/netns/$ns"
  printf '127.0.0.1 localhost\n%s' "$hosts" > "/etc/netns/$ns/hosts"
  echo "# no DNS inside the emulated hosts: names come from /etc/hosts" > "/etc/netns/$ns/resolv.conf"
done

if [ -n "$logs" ]; then mkdir -p "$logs"; work=$(cd "$logs" && pwd); else work=$(mktemp -d); fi
head -c 32 /dev/urandom | base64 > "$work/secret"
chmod 600 "$work/secret"

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
for i in $(seq 1 "$peers"); do
  ip netns exec "$tag-$i" "$peer_binary" --listen 0.0.0.0:7000 --advertise "10.77.0.$i" \
    ${extra[@]+"${extra[@]}"} > "$work/peer$i.log" 2>&1 &
  pids+=($!)
done

# The last step a peer's progress view reported (lines "... step 120/300 ...").
step_of() { grep -o 'step [0-9]*/' "$work/peer$1.log" 2>/dev/null | tail -n 1 | tr -dc '0-9'; }
show_logs() {
  for i in $(seq 1 "$peers"); do echo "----- peer$i.log (last 25 lines)"; tail -n 25 "$work/peer$i.log"; done
}

if [ "$kill_peer" -gt 0 ]; then
  victim=${pids[$((kill_peer - 1))]}
  until [ "$(step_of "$kill_peer")" -ge "$kill_at" ] 2>/dev/null; do
    if ! kill -0 "$victim" 2>/dev/null; then
      echo "run-namespaces.sh: peer $kill_peer ended before step $kill_at" >&2; show_logs; exit 1
    fi
    sleep 0.2
  done
  kill -KILL "$victim"
  echo "run-namespaces.sh: killed peer $kill_peer at step $(step_of "$kill_peer") ($((SECONDS - start)) s in)"
fi

failed=0
for i in $(seq 1 "$peers"); do
  status=0
  { wait "${pids[$((i - 1))]}"; } 2>/dev/null || status=$?  # (no "Killed" notice from bash)
  if [ "$i" -eq "$kill_peer" ]; then
    [ "$status" -eq 137 ] || { echo "run-namespaces.sh: killed peer $i exited with $status, not 137" >&2; failed=1; }
    continue
  fi
  log="$work/peer$i.log"
  done_line=$(grep -m 1 '\[engine\] \[info\] done:' "$log" || true)
  if [ "$status" -ne 0 ] || [ -z "$done_line" ]; then
    echo "run-namespaces.sh: peer $i exited with status $status$([ -z "$done_line" ] && echo ', without its done line')" >&2
    failed=1
    continue
  fi
  # It trained with every peer (all found by name), and saw the killed one fail (by its address).
  if ! grep -q "; $peers members; shard" "$log"; then
    echo "run-namespaces.sh: peer $i did not start training with all $peers peers" >&2; failed=1
  fi
  if [ "$kill_peer" -gt 0 ] && ! grep -q "(10.77.0.$kill_peer:7000) failed" "$log"; then
    echo "run-namespaces.sh: peer $i never saw peer $kill_peer fail" >&2; failed=1
  fi
  echo "peer$i (10.77.0.$i): ${done_line#*done: }"
done
pids=()
if [ "$failed" -ne 0 ]; then show_logs; exit 1; fi
echo "run-namespaces.sh: every surviving peer finished in $((SECONDS - start)) s"
