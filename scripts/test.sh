#!/usr/bin/env bash
# scripts/test.sh — vet and test every Go module in the repo (what `make test` runs).
#
# For each directory holding a go.mod (sorted; .git, vendor and testdata skipped):
#   GOWORK=off go vet ./...
#   GOWORK=off go test -race -count=1 -timeout $TEST_TIMEOUT ./...
# Failures are recorded and the loop keeps going; exit status is non-zero when
# any module failed. The last line of output is always "N passed, M failed"
# (module counts) for CI to read.
#
# Redis: when redis-server and redis-cli are on PATH, scripts/redis.sh starts a
# standalone server and a 3-master Cluster on free loopback ports and exports
#   QUOTAGATE_REDIS_URL, QUOTAGATE_REDIS_CLUSTER, QUOTAGATE_REDIS_SERVER_BIN
# for the tests; when redis-sentinel is on PATH too, also a primary, a replica
# and three sentinels, exported as
#   QUOTAGATE_REDIS_SENTINEL (the sentinels), QUOTAGATE_REDIS_SENTINEL_MASTER
#   (the master set name), QUOTAGATE_REDIS_SENTINEL_STATE (pid/port/args files)
# for the failover test in tests/sentinel. All are stopped on exit, by the
# pids redis.sh recorded. Otherwise (or with QUOTAGATE_NO_REDIS=1) those
# variables are unset and the Redis tests run against miniredis only.
#
# Consumers: then scripts/consumers.sh checks what an application's module
# graph gets from each published module (README's replace block, offline
# go mod tidy; see the script); it counts as one more entry, "consumers".
#
# Conformance matrix: QUOTAGATE_MATRIX_DIR is a fresh temp dir; the conformance
# suite writes *.tsv lines "adapter<TAB>store<TAB>passed<TAB>failed<TAB>skipped"
# there, and this script prints them summed as a table at the end.
#
# Env knobs:
#   QUOTAGATE_NO_REDIS=1   force the miniredis-only path even if redis-server exists
#   TEST_TIMEOUT=20m       go test -timeout per module
#   MODULES="engine ..."   only these module dirs (relative to the repo root); no consumers check
set -uo pipefail   # no -e: we keep going after failures and count them

ROOT=$(cd "$(dirname "$0")/.." && pwd -P)
cd "$ROOT"
TEST_TIMEOUT=${TEST_TIMEOUT:-20m}

hr() { echo "=================================================================="; }

REDIS_STATE=""
MATRIX_DIR=""
cleanup() {
  if [ -n "$REDIS_STATE" ]; then
    "$ROOT/scripts/redis.sh" down "$REDIS_STATE" || true
    REDIS_STATE=""
  fi
  [ -n "$MATRIX_DIR" ] && rm -rf -- "$MATRIX_DIR"
  MATRIX_DIR=""
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- Redis -------------------------------------------------------------------
unset QUOTAGATE_REDIS_URL QUOTAGATE_REDIS_CLUSTER QUOTAGATE_REDIS_SERVER_BIN \
  QUOTAGATE_REDIS_SENTINEL QUOTAGATE_REDIS_SENTINEL_MASTER QUOTAGATE_REDIS_SENTINEL_STATE
infra_failed=""
if [ "${QUOTAGATE_NO_REDIS:-}" != 1 ] && command -v redis-server >/dev/null 2>&1 \
    && command -v redis-cli >/dev/null 2>&1; then
  REDIS_STATE=$(mktemp -d "${TMPDIR:-/tmp}/quotagate-redis.XXXXXX")
  echo "test.sh: starting throwaway Redis (standalone + 3-node Cluster + Sentinel set if redis-sentinel exists) in $REDIS_STATE"
  if "$ROOT/scripts/redis.sh" up "$REDIS_STATE"; then
    # shellcheck disable=SC1091
    . "$REDIS_STATE/env"
    echo "test.sh: QUOTAGATE_REDIS_URL=$QUOTAGATE_REDIS_URL"
    echo "test.sh: QUOTAGATE_REDIS_CLUSTER=$QUOTAGATE_REDIS_CLUSTER"
    echo "test.sh: QUOTAGATE_REDIS_SERVER_BIN=$QUOTAGATE_REDIS_SERVER_BIN"
    if [ -n "${QUOTAGATE_REDIS_SENTINEL:-}" ]; then
      echo "test.sh: QUOTAGATE_REDIS_SENTINEL=$QUOTAGATE_REDIS_SENTINEL (master set $QUOTAGATE_REDIS_SENTINEL_MASTER)"
    else
      hr
      echo "!!!  NO SENTINEL: redis-sentinel is not on PATH; the Sentinel failover test will be SKIPPED."
      echo "!!!  To run it:  apt-get install -y redis-sentinel   (Debian/Ubuntu)"
      hr
    fi
  else
    infra_failed="scripts/redis.sh up failed"
    hr; echo "!!! test.sh: COULD NOT START REDIS — the real-server tests will NOT run."; hr
  fi
else
  why="redis-server (or redis-cli) is not on PATH"
  fix="apt-get install -y redis-server   (Debian/Ubuntu)"
  if [ "${QUOTAGATE_NO_REDIS:-}" = 1 ]; then
    why="QUOTAGATE_NO_REDIS=1 is set"
    fix="unset QUOTAGATE_NO_REDIS"
  fi
  hr
  echo "!!!"
  echo "!!!  NO REAL REDIS: $why."
  echo "!!!  Redis store tests run against miniredis ONLY."
  echo "!!!  The real-server half (standalone, Cluster, outage tests) did NOT run."
  echo "!!!  To run it:  $fix"
  echo "!!!"
  hr
fi

# ---- Conformance matrix dir -------------------------------------------------
MATRIX_DIR=$(mktemp -d "${TMPDIR:-/tmp}/quotagate-matrix.XXXXXX")
export QUOTAGATE_MATRIX_DIR="$MATRIX_DIR"

# ---- Modules -------------------------------------------------------------------
if [ -n "${MODULES:-}" ]; then
  read -r -a mods <<<"$MODULES"
else
  mapfile -t mods < <(find . -name go.mod -not -path './.git/*' \
    -not -path '*/vendor/*' -not -path '*/testdata/*' -printf '%h\n' | sed 's|^\./||' | sort)
fi

passed=0
failed=0
failed_mods=()
results=()
export GOWORK=off
for m in "${mods[@]}"; do
  hr
  echo "module $m"
  hr
  t0=$(date +%s)
  vet=ok; tst=ok
  if (cd "$m" && go list ./... 2>/dev/null) | grep -q .  \
      || ! (cd "$m" && go list ./... >/dev/null 2>&1); then
    echo "+ (cd $m && GOWORK=off go vet ./...)"
    (cd "$m" && go vet ./...) || vet=FAIL
    echo "+ (cd $m && GOWORK=off go test -race -count=1 -timeout $TEST_TIMEOUT ./...)"
    (cd "$m" && go test -race -count=1 -timeout "$TEST_TIMEOUT" ./...) || tst=FAIL
  else
    # A go.mod with no packages yet (being scaffolded): nothing to vet or test.
    echo "(no packages in $m yet: nothing to vet or test)"
    vet=none; tst=none
  fi
  secs=$(( $(date +%s) - t0 ))
  if [ "$vet" != FAIL ] && [ "$tst" != FAIL ]; then
    passed=$(( passed + 1 )); status=PASS
  else
    failed=$(( failed + 1 )); status=FAIL; failed_mods+=("$m")
  fi
  line=$(printf '%-4s %-28s vet %-4s test %-4s %4ss' "$status" "$m" "$vet" "$tst" "$secs")
  results+=("$line")
  echo "result: $line"
done

# ---- Allocation and stack guards without -race ------------------------------
# The race detector allocates on its own and enlarges frames, so every
# allocation guard and stack guard skips itself under -race (loudly); the
# pass above runs only -race. This pass runs the guards again without it, in
# every module that has one.
ALLOC_RUN='Alloc|DoesNotAllocate|AllocatesNothing|AllocationFree|KeepsItsStack'
hr
echo "allocation guards (go test -run '$ALLOC_RUN', without -race)"
hr
t0=$(date +%s)
alloc=ok
for m in "${mods[@]}"; do
  grep -rlqE "^func Test[A-Za-z0-9_]*($ALLOC_RUN)" --include='*_test.go' "$m" 2>/dev/null || continue
  echo "+ (cd $m && GOWORK=off go test -count=1 -run '$ALLOC_RUN' ./...)"
  (cd "$m" && go test -count=1 -run "$ALLOC_RUN" ./...) || alloc=FAIL
done
if [ $alloc = ok ]; then passed=$(( passed + 1 )); status=PASS; else failed=$(( failed + 1 )); status=FAIL; failed_mods+=("alloc-guards"); fi
line=$(printf '%-4s %-28s check %-4s %4ss' "$status" "alloc-guards (no -race)" "$alloc" "$(( $(date +%s) - t0 ))")
results+=("$line")
echo "result: $line"

# ---- Consumers' module graphs ----------------------------------------------
# After every module's tests (they fill the module cache the offline tidy
# reads); skipped with MODULES=..., which may leave the cache short.
if [ -z "${MODULES:-}" ]; then
  hr
  echo "consumers (scripts/consumers.sh): an application's module graph"
  hr
  t0=$(date +%s)
  if "$ROOT/scripts/consumers.sh"; then
    passed=$(( passed + 1 )); status=PASS; cons=ok
  else
    failed=$(( failed + 1 )); status=FAIL; cons=FAIL; failed_mods+=("consumers")
  fi
  line=$(printf '%-4s %-28s check %-4s %4ss' "$status" "consumers" "$cons" "$(( $(date +%s) - t0 ))")
  results+=("$line")
  echo "result: $line"
fi

# ---- Conformance matrix ------------------------------------------------------
shopt -s nullglob
tsvs=("$MATRIX_DIR"/*.tsv)
shopt -u nullglob
if [ ${#tsvs[@]} -gt 0 ]; then
  hr
  echo "conformance matrix"
  hr
  # Sum rows per (adapter, store); skip blanks, comments and non-numeric (header) lines.
  awk -F'\t' '
    NF >= 5 && $1 !~ /^#/ && $3 ~ /^[0-9]+$/ && $4 ~ /^[0-9]+$/ && $5 ~ /^[0-9]+$/ {
      k = $1 "\t" $2; p[k] += $3; f[k] += $4; s[k] += $5
    }
    END { for (k in p) print k "\t" p[k] "\t" f[k] "\t" s[k] }
  ' "${tsvs[@]}" | sort | awk -F'\t' '
    { a[NR] = $1; st[NR] = $2; p[NR] = $3; f[NR] = $4; s[NR] = $5
      if (length($1) > wa) wa = length($1); if (length($2) > ws) ws = length($2)
      tp += $3; tf += $4; ts += $5 }
    END {
      if (wa < 7) wa = 7; if (ws < 5) ws = 5
      fmt = "%-" wa "s  %-" ws "s  %7s  %7s  %7s%s\n"
      printf fmt, "ADAPTER", "STORE", "PASSED", "FAILED", "SKIPPED", ""
      for (i = 1; i <= NR; i++) printf fmt, a[i], st[i], p[i], f[i], s[i], (f[i] > 0 ? "  <-- FAIL" : "")
      printf fmt, "total", "", tp, tf, ts, ""
    }'
fi

# ---- Summary -------------------------------------------------------------------
cleanup   # stop Redis now, so nothing prints after the summary
hr
echo "summary"
hr
for r in "${results[@]}"; do echo "$r"; done
if [ ${#mods[@]} -eq 0 ]; then
  echo "test.sh: no go.mod found under $ROOT — nothing was tested"
  infra_failed="${infra_failed:+$infra_failed; }no Go modules found"
fi
[ ${#failed_mods[@]} -gt 0 ] && echo "failed modules: ${failed_mods[*]}"
[ -z "${QUOTAGATE_REDIS_URL:-}" ] && echo "redis: miniredis only (real-server tests did NOT run)"
[ -n "${QUOTAGATE_REDIS_URL:-}" ] && echo "redis: real redis-server $(redis-server --version | awk '{print $3}') + miniredis"
[ -n "${QUOTAGATE_REDIS_URL:-}" ] && [ -z "${QUOTAGATE_REDIS_SENTINEL:-}" ] && echo "redis: no Sentinel set (redis-sentinel not on PATH): the failover test did NOT run"
[ -n "${QUOTAGATE_REDIS_SENTINEL:-}" ] && echo "redis: Sentinel set (primary, replica, 3 sentinels) at $QUOTAGATE_REDIS_SENTINEL"
[ -n "$infra_failed" ] && echo "INFRASTRUCTURE FAILURE: $infra_failed"
nmods="${#mods[@]} modules"
[ "${#mods[@]}" = 1 ] && nmods="1 module"
echo "entries: $nmods and the checks after them; $passed passed, $failed failed"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ -z "$infra_failed" ]
