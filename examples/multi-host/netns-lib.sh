# Shared by run-namespaces.sh and run-nat.sh (sourced, not run): making emulated hosts out of
# network namespaces, removing them again, and checking what the peers printed. The caller sets
# `script` (its name, for messages) and `tag` (unique per run) and then calls netns_init.
# shellcheck shell=bash
# shellcheck disable=SC2034  # the options and peer_done: set here, read by the scripts that source this one

script=${script:-netns-lib.sh}
tag=${tag:-}       # the run's namespace prefix: the caller sets it
extra=()           # gossamer-peer flags after `--`: the caller's option parsing fills it
made=()   # namespaces made so far, removed by netns_cleanup
pids=()   # peer processes started so far
work=""   # the run's directory (secret, logs)
logs=""   # --logs: keep `work` (else it is removed)

skip() { echo "$script: skipped: $*" >&2; exit 77; }
# The script's own header comment, from its second line to `set -euo`.
usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }

# The options both scripts take: `common_option NAME VALUE` sets its variable and returns 0, or
# returns 1 for another name (the caller's, or a wrong one).
common_option() {
  case "$1" in
    --peer|--algorithm|--steps|--step-time|--rate|--kill|--kill-at|--logs) needs_value "$@" ;;
    *) return 1 ;;
  esac
  case "$1" in
    --peer) peer_binary=$2 ;;
    --algorithm) algorithm=$2 ;;
    --steps) steps=$2 ;;
    --step-time) step_time=$2 ;;
    --rate) rate=$2 ;;
    --kill) kill_peer=$2 ;;
    --kill-at) kill_at=$2 ;;
    --logs) logs=$2 ;;
    *) return 1 ;;
  esac
}
# needs_value "$@": the option in $1 has a value.
needs_value() { [ $# -ge 2 ] || { echo "$script: $1 needs a value" >&2; exit 2; }; }
bad_argument() { echo "$script: unknown argument '$1' (--help lists them)" >&2; exit 2; }
# Runs a command that builds the network; a failure means this machine cannot: a skip.
net() { "$@" 2>&1 || skip "cannot build the namespace network: '$*' failed"; }

netns_cleanup() {
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

# Checks root and the tools, and removes everything made on exit, Ctrl-C or SIGTERM.
netns_init() {
  [ "$(id -u)" -eq 0 ] || skip "network namespaces need root (run it with sudo)"
  local tool
  for tool in ip tc; do command -v "$tool" >/dev/null || skip "no '$tool' command (Debian: iproute2)"; done
  trap netns_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

# netns_add NAME: a namespace, removed at exit.
netns_add() {
  ip netns add "$1" 2>/dev/null || skip "cannot create a network namespace ('ip netns add' failed)"
  made+=("$1")
}

# netns_bridge NS: a bridge br0 in namespace NS.
netns_bridge() {
  net ip -n "$1" link add br0 type bridge
  net ip -n "$1" link set br0 up
}

# netns_host NS SWITCH PORT ADDR/PREFIX RATE [GATEWAY]: host namespace NS whose eth0 (ADDR) is a
# veth pair with PORT, a port of SWITCH's br0; egress capped at RATE with tc tbf.
netns_host() {
  local ns=$1 switch=$2 port=$3 address=$4 rate=$5 gateway=${6:-}
  netns_add "$ns"
  net ip link add eth0 netns "$ns" type veth peer name "$port" netns "$switch"
  net ip -n "$switch" link set "$port" master br0 up
  net ip -n "$ns" link set lo up
  net ip -n "$ns" addr add "$address" dev eth0
  net ip -n "$ns" link set eth0 up
  [ -z "$gateway" ] || net ip -n "$ns" route add default via "$gateway"
  net ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst 64kb latency 50ms
}

# netns_names NS HOSTS: `ip netns exec NS` mounts /etc/netns/NS/* over /etc/*: the hosts' names
# (HOSTS, /etc/hosts lines), and no DNS server.
netns_names() {
  mkdir -p "/etc/netns/$1"
  printf '127.0.0.1 localhost\n%s' "$2" > "/etc/netns/$1/hosts"
  echo "# no DNS inside the emulated hosts: names come from /etc/hosts" > "/etc/netns/$1/resolv.conf"
}

# The run's directory (kept with --logs) and its cluster secret.
netns_workdir() {
  if [ -n "$logs" ]; then mkdir -p "$logs"; work=$(cd "$logs" && pwd); else work=$(mktemp -d); fi
  head -c 32 /dev/urandom | base64 > "$work/secret"
  chmod 600 "$work/secret"
}

# start_peer I ADDRESS: gossamer-peer I in namespace $tag-I, listening on 0.0.0.0:7000 and
# advertising ADDRESS, with the flags after `--` (extra); its log is $work/peerI.log.
start_peer() {
  ip netns exec "$tag-$1" "$peer_binary" --listen 0.0.0.0:7000 --advertise "$2" \
    ${extra[@]+"${extra[@]}"} > "$work/peer$1.log" 2>&1 &
  pids+=($!)
}

# The last step peer N's progress view reported (lines "... step 120/300 ...").
step_of() { grep -o 'step [0-9]*/' "$work/peer$1.log" 2>/dev/null | tail -n 1 | tr -dc '0-9'; }

show_logs() {
  local i
  for i in $(seq 1 "$1"); do echo "----- peer$i.log (last 25 lines)"; tail -n 25 "$work/peer$i.log"; done
}

# kill_at_step I STEP: kills peer I (SIGKILL, as a crashed machine) once it reports STEP.
kill_at_step() {
  local victim=${pids[$(($1 - 1))]}
  until [ "$(step_of "$1")" -ge "$2" ] 2>/dev/null; do
    if ! kill -0 "$victim" 2>/dev/null; then
      echo "$script: peer $1 ended before step $2" >&2; show_logs "${#pids[@]}"; exit 1
    fi
    sleep 0.2
  done
  kill -KILL "$victim"
  echo "$script: killed peer $1 at step $(step_of "$1")"
}

# wait_peer I KILLED: waits for peer I (not in a subshell: it must be this shell's child). Returns
# 0 when it finished (exit 0 and its `done:` line, whose text it leaves in `peer_done`), or when
# KILLED is I and it died of SIGKILL; else says why and returns 1.
peer_done=""
wait_peer() {
  local i=$1 status=0 line
  peer_done=""
  { wait "${pids[$((i - 1))]}"; } 2>/dev/null || status=$?  # (no "Killed" notice from bash)
  if [ "$i" -eq "$2" ]; then
    [ "$status" -eq 137 ] && return 0
    echo "$script: killed peer $i exited with $status, not 137" >&2; return 1
  fi
  line=$(grep -m 1 '\[engine\] \[info\] done:' "$work/peer$i.log" || true)
  if [ "$status" -ne 0 ] || [ -z "$line" ]; then
    echo "$script: peer $i exited with status $status$([ -z "$line" ] && echo ', without its done line')" >&2
    return 1
  fi
  peer_done=${line#*done: }
}
