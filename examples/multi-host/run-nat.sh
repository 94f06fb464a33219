#!/usr/bin/env bash
# A cluster across a NAT on one Linux machine, with real addresses: two public hosts and a home
# network behind a NAT router, each a network namespace. The public hosts, pub1 (203.0.113.1) and
# pub2 (203.0.113.2), share an "internet" bridge with the router's WAN side (203.0.113.11); the
# home hosts, home1 (192.168.1.2) and home2 (192.168.1.3), sit on the router's LAN bridge, and the
# router masquerades them (nftables): they can dial out and cannot be dialed. Every host's egress
# is capped with tc tbf. Every peer listens on 0.0.0.0:7000 and advertises its own address; all
# join through the public ones (seeds pub1:7000,pub2:7000, by name). The seed a home peer joins
# through dials it back, fails, and every view marks it dial-out only; the public peers then
# reach it on links it opens at their request (connection reversal); the two home peers reach
# each other on their LAN. Links are TLS (the cluster secret). Midway one home peer is killed
# (SIGKILL): the others must detect it, finish and report an accuracy in range.
#
#   sudo examples/multi-host/run-nat.sh [options] [-- extra gossamer-peer flags]
#     --peer PATH          gossamer-peer binary (default: build/engine/gossamer-peer of this tree)
#     --algorithm NAME     decentralized optimizer (default gosgd)
#     --steps N            training steps per peer (default 300)
#     --step-time MS       emulated compute per step, which paces training (default 40)
#     --rate RATE          egress cap of every host and of the router, tc syntax (default 200mbit)
#     --kill I             the peer to kill (1, 2 public; 3, 4 home), 0 for none (default 4)
#     --kill-at STEP       kill it once it reports this step (default a third of --steps)
#     --min-accuracy PCT   the least test accuracy a survivor may report (default 70)
#     --expect-reversal    require a link a home peer opened at a public peer's request (sure
#                          for a ring all-reduce such as diloco's: some public peer's successor
#                          on the ring is a home peer; a gossip may find the home peer's own
#                          links open already)
#     --logs DIR           keep the peers' logs in DIR (default: a temporary directory, removed)
#
# Exit status: 0 every surviving peer finished, with every check passed; 1 something failed (logs
# shown); 2 bad arguments; 77 this machine cannot make the namespaces or the NAT (not root, no
# `ip netns`, veth, bridge, tbf or nftables NAT support): nothing was run.
#
# Names are unique per run (gsn<pid><random>-*); everything made is removed on exit, Ctrl-C or
# SIGTERM. Nothing is sent outside the namespaces: the "internet" is a bridge with no way out.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
script=run-nat.sh
# shellcheck source=examples/multi-host/netns-lib.sh
. "$here/netns-lib.sh"
peer_binary="$here/../../build/engine/gossamer-peer"
algorithm=gosgd
steps=300
step_time=40
rate=200mbit
kill_peer=4
kill_at=""
min_accuracy=70
expect_reversal=0

while [ $# -gt 0 ]; do
  case "$1" in
    --min-accuracy) needs_value "$@"; min_accuracy=$2; shift 2 ;;
    --expect-reversal) expect_reversal=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    *) common_option "$@" || bad_argument "$1"; shift 2 ;;
  esac
done
case "$steps$kill_peer$min_accuracy" in *[!0-9]*) echo "$script: --steps, --kill and --min-accuracy take numbers" >&2; exit 2 ;; esac
[ "$kill_peer" -le 4 ] || { echo "$script: --kill takes 0 to 4" >&2; exit 2; }
[ -n "$kill_at" ] || kill_at=$(( steps / 3 ))
[ -x "$peer_binary" ] || { echo "$script: no gossamer-peer at $peer_binary (build it, or pass --peer PATH)" >&2; exit 2; }

netns_init
command -v nft >/dev/null || skip "no 'nft' command (Debian: nftables)"
tag="gsn$(printf '%x%02x' "$$" $(( RANDOM % 256 )))"
internet="$tag-i"
router="$tag-r"
names=(pub1 pub2 home1 home2)
addresses=(203.0.113.1 203.0.113.2 192.168.1.2 192.168.1.3)

# The internet: a bridge with the public hosts and the router's WAN side.
netns_add "$internet"
netns_bridge "$internet"
hosts=$'203.0.113.1 pub1\n203.0.113.2 pub2\n'
for i in 1 2; do
  netns_host "$tag-$i" "$internet" "p$i" "${addresses[$((i - 1))]}/24" "$rate"
  netns_names "$tag-$i" "$hosts"
done
# The router: WAN 203.0.113.11 on the internet, LAN 192.168.1.1 on a bridge of its own.
netns_add "$router"
net ip link add wan netns "$router" type veth peer name wan-r netns "$internet"
net ip -n "$internet" link set wan-r master br0 up
net ip -n "$router" addr add 203.0.113.11/24 dev wan
net ip -n "$router" link set wan up
net ip -n "$router" link set lo up
net ip netns exec "$router" tc qdisc add dev wan root tbf rate "$rate" burst 64kb latency 50ms
netns_bridge "$router"
net ip -n "$router" addr add 192.168.1.1/24 dev br0
net ip netns exec "$router" sysctl -qw net.ipv4.ip_forward=1
printf 'table ip nat {\n  chain postrouting {\n    type nat hook postrouting priority srcnat; policy accept;\n    oifname "wan" masquerade\n  }\n}\n' \
  | ip netns exec "$router" nft -f - 2>&1 || skip "cannot set up NAT with nftables in a namespace"
for i in 3 4; do
  netns_host "$tag-$i" "$router" "h$i" "${addresses[$((i - 1))]}/24" "$rate" 192.168.1.1
  netns_names "$tag-$i" "$hosts"
done
netns_workdir

export GOSSAMER_SEEDS=pub1:7000,pub2:7000
export GOSSAMER_SECRET_FILE=$work/secret
export GOSSAMER_ALGORITHM=$algorithm
export GOSSAMER_MIN_PEERS=4
export GOSSAMER_STEPS=$steps
export GOSSAMER_STEP_TIME=$step_time
export GOSSAMER_MEMBERSHIP=local
export GOSSAMER_JOIN_TIMEOUT=30
export GOSSAMER_START_TIMEOUT=60

echo "$script: pub1, pub2 public; home1, home2 behind a NAT router (namespaces $tag-*, egress $rate" \
     "each); $algorithm for $steps steps over TLS; peer $kill_peer is killed at step $kill_at; logs in $work"
start=$SECONDS
for i in 1 2 3 4; do start_peer "$i" "${addresses[$((i - 1))]}"; done
[ "$kill_peer" -eq 0 ] || kill_at_step "$kill_peer" "$kill_at"

failed=0
fail() { echo "$script: $*" >&2; failed=1; }
for i in 1 2 3 4; do
  wait_peer "$i" "$kill_peer" || { failed=1; continue; }
  [ "$i" -ne "$kill_peer" ] || continue
  name=${names[$((i - 1))]}
  echo "$name (${addresses[$((i - 1))]}): $peer_done"
  log="$work/peer$i.log"
  grep -q "; 4 members; shard" "$log" || fail "$name did not start training with all 4 peers"
  if [ "$kill_peer" -gt 0 ] && ! grep -q "(${addresses[$((kill_peer - 1))]}:7000) failed" "$log"; then
    fail "$name never saw ${names[$((kill_peer - 1))]} fail"
  fi
  accuracy=$(grep -o '[0-9.]*%' <<< "$peer_done" | head -n 1 | tr -d '%')
  awk -v a="${accuracy:-0}" -v m="$min_accuracy" 'BEGIN { exit !(a >= m) }' \
    || fail "$name reports ${accuracy:-no}% accuracy, below $min_accuracy%"
  if [ "$i" -ge 3 ]; then
    # Learned, not configured: the seed could not dial it back.
    grep -q "marked dial-out only" "$log" || fail "$name was never marked dial-out only"
  fi
done
# Links the home peers opened because a public peer asked (connection reversal).
reversed=$(cat "$work/peer3.log" "$work/peer4.log" | grep -c "asked for at 203.0.113" || true)
echo "$script: the home peers opened $reversed links at a public peer's request"
if [ "$expect_reversal" -eq 1 ] && [ "$reversed" -eq 0 ]; then
  fail "no home peer opened a link a public peer asked for"
fi
pids=()
if [ "$failed" -ne 0 ]; then show_logs 4; exit 1; fi
echo "$script: every surviving peer finished in $((SECONDS - start)) s"
