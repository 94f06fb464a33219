#!/usr/bin/env bash
# A cluster across NATs on one Linux machine, with real addresses: two public hosts and two home
# networks, each behind its own NAT router, each host a network namespace. The public hosts, pub1
# (203.0.113.1) and pub2 (203.0.113.2), share an "internet" bridge with the routers' WAN sides
# (203.0.113.11 and .12); home1 (192.168.1.2) sits behind the first router, home2 (192.168.2.2)
# behind the second, which masquerade them (nftables): they can dial out and cannot be dialed.
# Every host's egress is capped with tc tbf. Every peer listens on 0.0.0.0:7000 and advertises its
# own address; all join through the public ones (seeds pub1:7000,pub2:7000, by name). The seed a
# home peer joins through dials it back, fails, and every view marks it dial-out only; the public
# peers then reach it on links it opens at their request (connection reversal), and the two home
# peers reach each other by hole punching: introduced by a public peer, both connect at once from
# their listen ports, which a port-preserving NAT maps to port 7000 of its own address. Behind a
# NAT that picks ports at random punching fails, and a public peer relays the pair (TLS between the
# two home peers' identity keys inside). Links are TLS (the cluster secret). Midway one peer is
# killed (SIGKILL): the others must detect it, finish and report an accuracy in range.
#
#   sudo examples/multi-host/run-nat.sh [options] [-- extra gossamer-peer flags]
#     --peer PATH          gossamer-peer binary (default: build/engine/gossamer-peer of this tree)
#     --algorithm NAME     decentralized optimizer (default gosgd)
#     --steps N            training steps per peer (default 300)
#     --step-time MS       emulated compute per step, which paces training (default 40)
#     --rate RATE          egress cap of every host and of the routers, tc syntax (default 200mbit)
#     --kill I             the peer to kill (1, 2 public; 3, 4 home), 0 for none (default 4);
#                          `relay`: the public peer that relays the home pair (the pair must
#                          then re-route through the other)
#     --kill-at STEP       kill it once it reports this step (default a third of --steps)
#     --min-accuracy PCT   the least test accuracy a survivor may report (default 70)
#     --nat MODE           preserve: both routers keep source ports (punching works; default);
#                          random: the second router picks ports at random (masquerade
#                          random,fully-random: punching fails, and the home pair has no direct
#                          link); shared: both home hosts behind the first router, on one LAN
#                          (192.168.1.2, .3), where the pair connects directly
#     --expect-punch       require a direct link between the two home peers opened by punching
#                          (or, with --nat shared, on their LAN)
#     --expect-relay       require a link between the two home peers relayed by a public peer
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
expect_punch=0
expect_relay=0
nat=preserve

while [ $# -gt 0 ]; do
  case "$1" in
    --min-accuracy) needs_value "$@"; min_accuracy=$2; shift 2 ;;
    --expect-reversal) expect_reversal=1; shift ;;
    --expect-punch) expect_punch=1; shift ;;
    --expect-relay) expect_relay=1; shift ;;
    --nat) needs_value "$@"; nat=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    *) common_option "$@" || bad_argument "$1"; shift 2 ;;
  esac
done
kill_relay=0
if [ "$kill_peer" = relay ]; then kill_relay=1; kill_peer=0; fi
case "$steps$kill_peer$min_accuracy" in *[!0-9]*) echo "$script: --steps, --kill and --min-accuracy take numbers" >&2; exit 2 ;; esac
case "$nat" in preserve|random|shared) ;; *) echo "$script: --nat takes preserve, random or shared" >&2; exit 2 ;; esac
[ "$kill_peer" -le 4 ] || { echo "$script: --kill takes 0 to 4" >&2; exit 2; }
[ -n "$kill_at" ] || kill_at=$(( steps / 3 ))
[ -x "$peer_binary" ] || { echo "$script: no gossamer-peer at $peer_binary (build it, or pass --peer PATH)" >&2; exit 2; }

netns_init
command -v nft >/dev/null || skip "no 'nft' command (Debian: nftables)"
tag="gsn$(printf '%x%02x' "$$" $(( RANDOM % 256 )))"
internet="$tag-i"
names=(pub1 pub2 home1 home2)
addresses=(203.0.113.1 203.0.113.2 192.168.1.2 192.168.2.2)
[ "$nat" != shared ] || addresses[3]=192.168.1.3

# The internet: a bridge with the public hosts and the routers' WAN sides.
netns_add "$internet"
netns_bridge "$internet"
hosts=$'203.0.113.1 pub1\n203.0.113.2 pub2\n'
for i in 1 2; do
  netns_host "$tag-$i" "$internet" "p$i" "${addresses[$((i - 1))]}/24" "$rate"
  netns_names "$tag-$i" "$hosts"
done
# nat_router R MASQUERADE: router R (1 or 2), WAN 203.0.113.1R on the internet, LAN 192.168.R.1 on
# a bridge of its own, masquerading the LAN (MASQUERADE: the nftables statement's options), and
# dropping what comes in from the WAN for nobody behind it, as home routers do.
nat_router() {
  local ns="$tag-r$1"
  netns_add "$ns"
  net ip link add wan netns "$ns" type veth peer name "wan$1" netns "$internet"
  net ip -n "$internet" link set "wan$1" master br0 up
  net ip -n "$ns" addr add "203.0.113.1$1/24" dev wan
  net ip -n "$ns" link set wan up
  net ip -n "$ns" link set lo up
  net ip netns exec "$ns" tc qdisc add dev wan root tbf rate "$rate" burst 64kb latency 50ms
  netns_bridge "$ns"
  net ip -n "$ns" addr add "192.168.$1.1/24" dev br0
  net ip netns exec "$ns" sysctl -qw net.ipv4.ip_forward=1
  printf 'table ip nat {\n  chain postrouting {\n    type nat hook postrouting priority srcnat; policy accept;\n    oifname "wan" %s\n  }\n}\ntable ip filter {\n  chain input {\n    type filter hook input priority filter; policy accept;\n    iifname "wan" ct state new drop\n  }\n}\n' \
    "$2" | ip netns exec "$ns" nft -f - 2>&1 || skip "cannot set up NAT with nftables in a namespace"
}
nat_router 1 masquerade
if [ "$nat" = random ]; then nat_router 2 "masquerade random,fully-random"; fi
if [ "$nat" = preserve ]; then nat_router 2 masquerade; fi
netns_host "$tag-3" "$tag-r1" h3 "${addresses[2]}/24" "$rate" 192.168.1.1
if [ "$nat" = shared ]; then
  netns_host "$tag-4" "$tag-r1" h4 "${addresses[3]}/24" "$rate" 192.168.1.1
else
  netns_host "$tag-4" "$tag-r2" h4 "${addresses[3]}/24" "$rate" 192.168.2.1
fi
netns_names "$tag-3" "$hosts"
netns_names "$tag-4" "$hosts"
netns_workdir

export GOSSAMER_SEEDS=pub1:7000,pub2:7000
export GOSSAMER_SECRET_FILE=$work/secret
export GOSSAMER_ALGORITHM=$algorithm
export GOSSAMER_MIN_PEERS=4
export GOSSAMER_STEPS=$steps
export GOSSAMER_STEP_TIME=$step_time
export GOSSAMER_MEMBERSHIP=lan  # links capped and saturated: probes need lan's timeouts
export GOSSAMER_JOIN_TIMEOUT=30
export GOSSAMER_START_TIMEOUT=60

victim="peer $kill_peer"
[ "$kill_relay" -eq 0 ] || victim="the relay"
echo "$script: pub1, pub2 public; home1, home2 behind NAT routers ($nat; namespaces $tag-*, egress" \
     "$rate each); $algorithm for $steps steps over TLS; $victim is killed at step $kill_at; logs in $work"
start=$SECONDS
for i in 1 2 3 4; do start_peer "$i" "${addresses[$((i - 1))]}"; done
if [ "$kill_relay" -eq 1 ]; then
  # The public peer that relays the home pair (the first to say so), once it is known.
  for _ in $(seq 600); do
    for i in 1 2; do
      if grep -q "relaying a stream from" "$work/peer$i.log"; then kill_peer=$i; break 2; fi
    done
    sleep 0.1
  done
  if [ "$kill_peer" -eq 0 ]; then
    echo "$script: no public peer relayed the home pair within 60 s" >&2; show_logs 4; exit 1
  fi
  echo "$script: ${names[$((kill_peer - 1))]} relays the home pair: it is the one killed"
fi
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
# Links between the two home peers: punched through both NATs (or made on their shared LAN), or
# not made at all.
direct=$(cat "$work/peer3.log" "$work/peer4.log" | grep -c "opened a direct .* link with" || true)
missed=$(cat "$work/peer3.log" "$work/peer4.log" | grep -c "no direct .* link with" || true)
echo "$script: the home peers opened $direct direct links to each other; $missed attempts failed"
if [ "$expect_punch" -eq 1 ] && [ "$direct" -eq 0 ]; then
  fail "the home peers never opened a direct link to each other"
fi
# Links between the two home peers that a public peer relayed, and the public peers that did.
relayed=$(cat "$work/peer3.log" "$work/peer4.log" | grep -c "relaying the .* link with" || true)
relays=""
for i in 1 2; do
  ! grep -q "relaying a stream from" "$work/peer$i.log" || relays="$relays ${names[$((i - 1))]}"
done
echo "$script: the home peers opened $relayed links through a relay (relayed by:${relays:- nobody})"
if [ "$expect_relay" -eq 1 ] && [ "$relayed" -eq 0 ]; then
  fail "no public peer relayed a link between the home peers"
fi
if [ "$kill_relay" -eq 1 ]; then
  survivor=$(( 3 - kill_peer ))
  grep -q "relaying a stream from" "$work/peer$survivor.log" \
    || fail "the home pair never re-routed through ${names[$((survivor - 1))]} after its relay was killed"
fi
pids=()
if [ "$failed" -ne 0 ]; then show_logs 4; exit 1; fi
echo "$script: every surviving peer finished in $((SECONDS - start)) s"
