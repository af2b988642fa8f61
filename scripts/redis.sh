#!/usr/bin/env bash
# scripts/redis.sh — throwaway Redis servers for the quotagate test suite.
#
# Usage:
#   scripts/redis.sh up   STATE_DIR   start 1 standalone server + a 3-master Cluster
#                                     (+ a Sentinel set when redis-sentinel is on PATH)
#   scripts/redis.sh down STATE_DIR   stop exactly those servers (by pid file), rm STATE_DIR
#   scripts/redis.sh env  STATE_DIR   print the env file (use: . STATE_DIR/env)
#
# Needs redis-server and redis-cli on PATH (Debian: apt-get install -y redis-server).
# Sentinel: when redis-sentinel is on PATH (Debian: apt-get install -y redis-sentinel)
# it also starts a primary, a replica of it and three redis-sentinel processes
# monitoring them (quorum 2, down-after 1 s); REDIS_SENTINEL=0 skips them.
# All servers listen on 127.0.0.1 only, on free ports picked at random from
# 15000-22767 (cluster bus ports are +10000, so everything stays below the
# kernel's ephemeral range). Nothing is persisted (--save '' --appendonly no).
#
# STATE_DIR/env gets:
#   export QUOTAGATE_REDIS_URL=redis://127.0.0.1:PORT            standalone server
#   export QUOTAGATE_REDIS_CLUSTER=127.0.0.1:P1,127.0.0.1:P2,...  cluster seed nodes
#   export QUOTAGATE_REDIS_SERVER_BIN=/path/to/redis-server       for tests' own servers
# and, with Sentinel:
#   export QUOTAGATE_REDIS_SENTINEL=127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3  the sentinels
#   export QUOTAGATE_REDIS_SENTINEL_MASTER=quotagate                         the master set name
#   export QUOTAGATE_REDIS_SENTINEL_STATE=STATE_DIR   failover-{a,b}.{pid,port,args}: the data
#                                                     nodes' pid, port and redis-server arguments
#                                                     (NUL-separated), for a failover test that
#                                                     kills the primary by pid and restarts it
#
# Tunables (env): REDIS_CLUSTER_TIMEOUT (seconds to wait for cluster_state:ok, default 30),
# REDIS_SENTINEL_TIMEOUT (seconds to wait for the sentinels to see each other, default 30).
set -euo pipefail

MARKER=.quotagate-redis       # marks a state dir as ours; "down" only deletes marked dirs
PORT_MIN=15000
PORT_SPAN=7768                # 15000..22767
CLUSTER_TIMEOUT=${REDIS_CLUSTER_TIMEOUT:-30}
SENTINEL_TIMEOUT=${REDIS_SENTINEL_TIMEOUT:-30}
MASTER_SET=quotagate

log() { echo "redis.sh: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

usage() { die "usage: $0 up|down|env STATE_DIR"; }

# port_free PORT: true when nothing listens on 127.0.0.1:PORT (or any address).
port_free() {
  local p=$1
  if command -v ss >/dev/null 2>&1 && ss -Hltn "( sport = :$p )" 2>/dev/null | grep -q .; then
    return 1
  fi
  # Fallback / double check: a connect that succeeds means the port is taken.
  if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
    return 1
  fi
  return 0
}

# pick_port: print a random port whose cluster bus port (+10000) is free too.
pick_port() {
  local p i
  for i in $(seq 1 200); do
    p=$(( PORT_MIN + (RANDOM * 32768 + RANDOM) % PORT_SPAN ))
    if port_free "$p" && port_free $(( p + 10000 )); then
      echo "$p"
      return 0
    fi
  done
  return 1
}

# is_our_redis PID: the pid is alive and is a redis-server or redis-sentinel
# (guards against pid reuse).
is_our_redis() {
  local pid=$1
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -Eq 'redis-(server|sentinel)'
}

# stop_pidfile FILE: TERM the process in FILE, wait up to 10 s, then KILL.
stop_pidfile() {
  local f=$1 pid i
  pid=$(cat "$f" 2>/dev/null || true)
  if ! is_our_redis "$pid"; then
    rm -f "$f"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 100); do
    is_our_redis "$pid" || { rm -f "$f"; return 0; }
    sleep 0.1
  done
  log "pid $pid ($f) ignored SIGTERM, sending SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$f"
}

# stop_all: sentinels first (so they do not start a failover while the
# data nodes go down), then every server.
stop_all() {
  local f
  for f in "$STATE"/sentinel*.pid "$STATE"/*.pid; do
    [ -e "$f" ] || continue
    stop_pidfile "$f"
  done
}

show_logs() {
  local f
  for f in "$STATE"/*/redis.log; do
    [ -e "$f" ] || continue
    log "---- tail of $f"
    tail -n 15 "$f" >&2 || true
  done
}

# wait_ours NAME PORT PIDFILE: wait up to 5 s for the process in PIDFILE to
# answer PING on PORT as itself (INFO process_id). 0: up; 1: did not come up;
# 2: someone else answers on that port.
wait_ours() {
  local name=$1 port=$2 pidfile=$3 i pid served
  for i in $(seq 1 50); do
    pid=$(cat "$pidfile" 2>/dev/null || true)
    if [ -n "$pid" ] && [ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" = PONG ]; then
      served=$(redis-cli -h 127.0.0.1 -p "$port" info server 2>/dev/null | tr -d '\r' | sed -n 's/^process_id://p')
      [ "$served" = "$pid" ] && return 0
      return 2
    fi
    sleep 0.1
  done
  return 1
}

# start_with NAME LAUNCHER [args...]: run "LAUNCHER PORT PIDFILE DIR args..." on a
# free port until the process comes up as itself, retrying with another port
# if it loses a race for the one it picked. Prints the port.
start_with() {
  local name=$1 launcher=$2; shift 2
  local dir="$STATE/$name" pidfile="$STATE/$name.pid"
  local attempt port
  mkdir -p "$dir"
  for attempt in 1 2 3 4 5; do
    port=$(pick_port) || die "no free port found in $PORT_MIN-$(( PORT_MIN + PORT_SPAN - 1 ))"
    rm -f "$pidfile"
    "$launcher" "$port" "$pidfile" "$dir" "$@"
    if wait_ours "$name" "$port" "$pidfile"; then
      echo "$port" >"$STATE/$name.port"
      echo "$port"
      return 0
    fi
    log "$name: $launcher on port $port did not come up (attempt $attempt)"
    [ -e "$pidfile" ] && stop_pidfile "$pidfile"
  done
  die "$name: could not start ($launcher)"
}

# launch_server PORT PIDFILE DIR [extra args...]: a daemonized redis-server. Its
# arguments also go to PIDFILE's .args sibling (NUL-separated), so a test can
# start it again exactly as it was.
launch_server() {
  local port=$1 pidfile=$2 dir=$3; shift 3
  local args=(--port "$port" --bind 127.0.0.1 --protected-mode no
    --daemonize yes --pidfile "$pidfile" --dir "$dir" --logfile "$dir/redis.log"
    --save '' --appendonly no "$@")
  redis-server "${args[@]}" </dev/null >/dev/null
  printf '%s\0' "${args[@]}" >"${pidfile%.pid}.args"
}

# launch_sentinel PORT PIDFILE DIR PRIMARY_PORT: a daemonized redis-sentinel
# monitoring 127.0.0.1:PRIMARY_PORT as $MASTER_SET (quorum 2, down after 1 s).
launch_sentinel() {
  local port=$1 pidfile=$2 dir=$3 pport=$4
  # Sentinel rewrites its config file (it records what it learns), so each
  # gets its own, written afresh.
  cat >"$dir/sentinel.conf" <<CONF
port $port
bind 127.0.0.1
protected-mode no
daemonize yes
pidfile $pidfile
logfile $dir/redis.log
dir $dir
sentinel monitor $MASTER_SET 127.0.0.1 $pport 2
sentinel down-after-milliseconds $MASTER_SET 1000
sentinel failover-timeout $MASTER_SET 4000
sentinel parallel-syncs $MASTER_SET 1
CONF
  redis-sentinel "$dir/sentinel.conf" </dev/null >/dev/null
}

# start_one NAME [extra redis-server args...]: start_with launch_server.
start_one() { local name=$1; shift; start_with "$name" launch_server "$@"; }

# start_sentinel NAME PRIMARY_PORT: start_with launch_sentinel.
start_sentinel() { start_with "$1" launch_sentinel "$2"; }

# sentinel_field PORT FIELD: FIELD of SENTINEL MASTER $MASTER_SET on the sentinel at PORT.
sentinel_field() {
  redis-cli -h 127.0.0.1 -p "$1" sentinel master "$MASTER_SET" 2>/dev/null | tr -d '\r' \
    | awk -v f="$2" 'prev == f { print; exit } { prev = $0 }'
}

# start_sentinel_set: a primary, its replica, three sentinels; waits until the
# replica is in sync and every sentinel sees the replica and the two others.
# Sets SENTINELS (comma-separated addresses).
start_sentinel_set() {
  local pa pb s1 s2 s3 s deadline ok
  pa=$(start_one failover-a)
  pb=$(start_one failover-b --replicaof 127.0.0.1 "$pa")
  log "sentinel set: primary 127.0.0.1:$pa, replica 127.0.0.1:$pb"
  deadline=$(( $(date +%s) + SENTINEL_TIMEOUT ))
  until redis-cli -h 127.0.0.1 -p "$pb" info replication 2>/dev/null | tr -d '\r' | grep -qx 'master_link_status:up'; do
    [ "$(date +%s)" -ge "$deadline" ] && die "replica 127.0.0.1:$pb not in sync with 127.0.0.1:$pa after ${SENTINEL_TIMEOUT}s"
    sleep 0.1
  done
  s1=$(start_sentinel sentinel1 "$pa")
  s2=$(start_sentinel sentinel2 "$pa")
  s3=$(start_sentinel sentinel3 "$pa")
  log "sentinels on 127.0.0.1:$s1 $s2 $s3 (master set $MASTER_SET); waiting until they see each other"
  while :; do
    ok=0
    for s in "$s1" "$s2" "$s3"; do
      [ "$(sentinel_field "$s" num-slaves)" = 1 ] && [ "$(sentinel_field "$s" num-other-sentinels)" = 2 ] \
        && ok=$(( ok + 1 ))
    done
    [ "$ok" -eq 3 ] && break
    if [ "$(date +%s)" -ge "$deadline" ]; then
      for s in "$s1" "$s2" "$s3"; do
        log "sentinel $s: num-slaves=$(sentinel_field "$s" num-slaves) num-other-sentinels=$(sentinel_field "$s" num-other-sentinels)"
      done
      die "sentinels did not see the replica and each other after ${SENTINEL_TIMEOUT}s"
    fi
    sleep 0.1
  done
  SENTINELS="127.0.0.1:$s1,127.0.0.1:$s2,127.0.0.1:$s3"
}

cmd_up() {
  command -v redis-server >/dev/null 2>&1 || die "redis-server not on PATH (apt-get install -y redis-server)"
  command -v redis-cli >/dev/null 2>&1 || die "redis-cli not on PATH (apt-get install -y redis-tools)"

  mkdir -p "$STATE_ARG"
  STATE=$(cd "$STATE_ARG" && pwd -P)   # absolute: redis chdir()s into --dir
  if [ -e "$STATE/$MARKER" ]; then
    for f in "$STATE"/*.pid; do
      [ -e "$f" ] && is_our_redis "$(cat "$f")" && die "$STATE is already up; run: $0 down $STATE_ARG"
    done
  elif [ -n "$(ls -A "$STATE")" ]; then
    die "$STATE exists and is not empty; refusing to use it"
  fi
  touch "$STATE/$MARKER"
  # On any failure below: stop what we started (the dir stays for its logs; "down" removes it).
  trap 'rc=$?; if [ $rc -ne 0 ]; then show_logs; stop_all; fi' EXIT

  local t0 t1 sport p1 p2 p3 n ok deadline
  t0=$(date +%s%N)
  sport=$(start_one standalone)
  log "standalone redis-server on 127.0.0.1:$sport"

  local cl=(--cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 5000)
  p1=$(start_one cluster1 "${cl[@]}")
  p2=$(start_one cluster2 "${cl[@]}")
  p3=$(start_one cluster3 "${cl[@]}")
  log "cluster nodes on 127.0.0.1:$p1 $p2 $p3; creating cluster"

  if ! timeout 60 redis-cli --cluster create "127.0.0.1:$p1" "127.0.0.1:$p2" "127.0.0.1:$p3" \
      --cluster-replicas 0 --cluster-yes </dev/null >"$STATE/cluster-create.log" 2>&1; then
    cat "$STATE/cluster-create.log" >&2
    die "redis-cli --cluster create failed"
  fi

  # Bounded wait until EVERY node reports cluster_state:ok.
  deadline=$(( $(date +%s) + CLUSTER_TIMEOUT ))
  while :; do
    ok=0
    for n in "$p1" "$p2" "$p3"; do
      redis-cli -h 127.0.0.1 -p "$n" cluster info 2>/dev/null | tr -d '\r' | grep -qx 'cluster_state:ok' && ok=$(( ok + 1 ))
    done
    [ "$ok" -eq 3 ] && break
    if [ "$(date +%s)" -ge "$deadline" ]; then
      for n in "$p1" "$p2" "$p3"; do
        log "node $n: $(redis-cli -h 127.0.0.1 -p "$n" cluster info 2>&1 | tr -d '\r' | grep -E '^cluster_(state|slots_assigned|known_nodes)' | tr '\n' ' ')"
      done
      die "cluster not ok on all 3 nodes after ${CLUSTER_TIMEOUT}s"
    fi
    sleep 0.1
  done
  SENTINELS=""
  if [ "${REDIS_SENTINEL:-1}" != 0 ] && command -v redis-sentinel >/dev/null 2>&1; then
    start_sentinel_set
  else
    log "redis-sentinel not on PATH (or REDIS_SENTINEL=0): no Sentinel set"
  fi
  t1=$(date +%s%N)

  {
    echo "# written by scripts/redis.sh up; stop with: scripts/redis.sh down $STATE"
    echo "export QUOTAGATE_REDIS_URL=redis://127.0.0.1:$sport"
    echo "export QUOTAGATE_REDIS_CLUSTER=127.0.0.1:$p1,127.0.0.1:$p2,127.0.0.1:$p3"
    echo "export QUOTAGATE_REDIS_SERVER_BIN=$(command -v redis-server)"
    if [ -n "$SENTINELS" ]; then
      echo "export QUOTAGATE_REDIS_SENTINEL=$SENTINELS"
      echo "export QUOTAGATE_REDIS_SENTINEL_MASTER=$MASTER_SET"
      echo "export QUOTAGATE_REDIS_SENTINEL_STATE=$STATE"
    fi
  } >"$STATE/env"
  trap - EXIT
  log "up in $(( (t1 - t0) / 1000000 )) ms ($(redis-server --version | awk '{print $3}')); env file: $STATE/env"
}

cmd_down() {
  if [ ! -d "$STATE_ARG" ]; then
    log "$STATE_ARG does not exist; nothing to stop"
    return 0
  fi
  STATE=$(cd "$STATE_ARG" && pwd -P)
  [ -e "$STATE/$MARKER" ] || die "$STATE is not a redis.sh state dir (no $MARKER); not touching it"
  stop_all
  rm -rf -- "$STATE"
  log "stopped servers and removed $STATE"
}

cmd_env() {
  [ -r "$STATE_ARG/env" ] || die "no env file in $STATE_ARG (run: $0 up $STATE_ARG)"
  cat "$STATE_ARG/env"
}

[ $# -eq 2 ] || usage
STATE_ARG=$2
[ -n "$STATE_ARG" ] || usage
case "$1" in
  up) cmd_up ;;
  down) cmd_down ;;
  env) cmd_env ;;
  *) usage ;;
esac
