#!/usr/bin/env bash
# scripts/consumers.sh — what an application's module graph gets from quotagate
# (scripts/test.sh runs it after the modules' tests).
#
# For every published module, for three applications (chi + memory store,
# gin + memory store + Prometheus, net/http + Redis store) and for the README's
# whole programs (the Quick start, the OpenTelemetry program, the client
# program and the gRPC program, each of which must also build), it writes a scratch
# module in a temp dir whose main package imports those packages, with exactly
# the replace block of README.md ("Using the modules from your own module",
# the fenced block after the `consumer-replace` marker, copied verbatim; the
# checkout it points at, ../quotagate, is a symlink to this repository), runs
#   GOWORK=off GOFLAGS=-mod=mod GOPROXY=off go mod tidy     (offline: module cache only)
# and fails when `go list -m -e all` holds
#   - a quotagate module the scratch module does not import, other than the
#     engine (so: tests, bench, docs/plots, examples, conformance unless
#     imported, an adapter or store the application does not use);
#   - miniredis, gopher-lua or goleak (test server and leak-check libraries)
#     required by a quotagate module or by the scratch module itself (one that
#     only third-party modules require is printed as a note: client_golang
#     v1.25.0's go.mod requires goleak, so every Prometheus user has it);
#   - the router of an adapter that is not imported (go-chi, echo, gin, fiber),
#     rueidis without the Redis store, client_golang without promlimit;
# or when the README block misses a published module, or tidy fails; and when
# README.md's Requirements section does not name the Go version of every
# published module's `go` line and the version of what each one brings.
# The graph of each case is printed. Last line: "consumers: N passed, M failed".
#
# Each case first runs the same tidy through GOPROXY as configured, to fill the
# module cache (a no-op when it is warm), then starts again from the same files
# and runs the checked tidy offline. The scratch go.sum starts from the
# repository's go.sum files, so the offline tidy needs no checksum lookup.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd -P)
Q=github.com/quotagate/quotagate

# Published modules (directory = module path suffix).
published=(engine stores/memory stores/redis adapters/chi adapters/echo adapters/echov5
  adapters/fiber adapters/fiberv3 adapters/gin adapters/grpc adapters/nethttp metrics/prometheus
  metrics/otel client conformance)

# Third-party modules a published module brings, allowed only when it is imported.
brings() {
  case "$1" in
    adapters/chi) echo github.com/go-chi/chi/v5 ;;
    adapters/echo) echo github.com/labstack/echo/v4 ;;
    adapters/echov5) echo github.com/labstack/echo/v5 ;;
    adapters/gin) echo github.com/gin-gonic/gin ;;
    adapters/fiber) echo github.com/gofiber/fiber/v2 ;;
    adapters/fiberv3) echo github.com/gofiber/fiber/v3 ;;
    adapters/grpc) echo google.golang.org/grpc ;;
    stores/redis) echo github.com/redis/rueidis ;;
    metrics/prometheus) echo github.com/prometheus/client_golang ;;
    metrics/otel) echo go.opentelemetry.io/otel ;;
  esac
}
# quotagate modules a published module imports itself (allowed with it):
# chilimit uses httplimit.StatusWriter (counting by status).
needs() {
  case "$1" in
    adapters/chi) echo adapters/nethttp ;;
  esac
}
# Never in an application's graph.
never=(github.com/alicebob/miniredis/v2 github.com/yuin/gopher-lua go.uber.org/goleak)

# ---- the README block ----------------------------------------------------------
block=$(awk '
  /<!-- consumer-replace/ { armed = 1; next }
  armed && /^```/ { if (inblock) exit; inblock = 1; next }
  inblock { print }
' "$ROOT/README.md")
if [ -z "$block" ]; then
  echo "consumers: FAIL: no replace block after the consumer-replace marker in README.md"
  echo "consumers: 0 passed, 1 failed"
  exit 1
fi

passed=0
failed=0
main_src=  # a check's main.go when set (a README program); else blank imports
requires=() # "module version" lines a README program's go.mod adds (its third-party modules)
fail() { echo "FAIL: $*"; ok=0; }

ok=1
for m in "${published[@]}"; do
  grep -Eq "^[[:space:]]*$Q/$m[[:space:]]+=>[[:space:]]+\.\./quotagate/$m[[:space:]]*\$" <<<"$block" \
    || fail "README.md's replace block has no line for $Q/$m => ../quotagate/$m"
done
if [ $ok = 1 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi

# ---- README's Requirements -------------------------------------------------------
# The versions its Requirements section names are what the published modules
# require: every module's `go` line, and the version of what each one brings.
reqs=$(awk '/^## Requirements/ { on = 1; next } on && /^## / { exit } on' "$ROOT/README.md")
ok=1
for m in "${published[@]}"; do
  gover=$(awk '$1 == "go" { print $2; exit }' "$ROOT/$m/go.mod" | cut -d. -f1,2)
  grep -Fq "Go $gover" <<<"$reqs" || fail "README.md's Requirements does not say Go $gover ($m/go.mod)"
  dep=$(brings "$m")
  [ -n "$dep" ] || continue
  ver=$(awk -v d="$dep" '{ p = $1; v = $2; if (p == "require") { p = $2; v = $3 } } p == d { print v; exit }' "$ROOT/$m/go.mod")
  [ -n "$ver" ] || { fail "$m/go.mod does not require $dep"; continue; }
  grep -Fq "$ver" <<<"$reqs" || fail "README.md's Requirements does not name $dep $ver ($m/go.mod)"
done
echo "consumer readme-requirements: $([ $ok = 1 ] && echo ok || echo FAILED)"
if [ $ok = 1 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/quotagate-consumers.XXXXXX")
trap 'rm -rf -- "$TMP"' EXIT
ln -s "$ROOT" "$TMP/quotagate"
sums=$(cat "$ROOT"/*/go.sum "$ROOT"/*/*/go.sum 2>/dev/null | sort -u)

# check NAME MODULE... : a scratch module importing each MODULE's package.
check() {
  local name=$1; shift
  local dir="$TMP/$name" mods=("$@") m p
  ok=1
  echo "------------------------------------------------------------------"
  echo "consumer $name: imports ${mods[*]}"
  mkdir -p "$dir"
  if [ -n "$main_src" ]; then
    printf '%s\n' "$main_src" >"$dir/main.go"
  else
    { echo "package main"; echo; echo "import ("
      for m in "${mods[@]}"; do echo "	_ \"$Q/$m\""; done
      echo ")"; echo; echo "func main() {}"; } >"$dir/main.go"
  fi
  # Warm-up, through GOPROXY as configured: fills the module cache with what
  # this module's tidy needs (after the modules' tests nothing, on a cold
  # cache the modules only a consumer's tidy reads: tests' imports of
  # dependencies, other build tags, the versions this combination selects).
  { echo "module example.com/$name"; echo; echo "go 1.26"; echo; echo "$block"
    [ ${#requires[@]} -gt 0 ] && printf 'require %s\n' "${requires[@]}"; } >"$dir/go.mod"
  echo "$sums" >"$dir/go.sum"
  (cd "$dir" && GOWORK=off GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1)
  # The check: the same files again, tidy offline.
  { echo "module example.com/$name"; echo; echo "go 1.26"; echo; echo "$block"
    [ ${#requires[@]} -gt 0 ] && printf 'require %s\n' "${requires[@]}"; } >"$dir/go.mod"
  echo "$sums" >"$dir/go.sum"
  if ! (cd "$dir" && GOWORK=off GOFLAGS=-mod=mod GOPROXY=off go mod tidy); then
    fail "go mod tidy (offline, with README.md's replace block) failed"
    failed=$((failed + 1)); return
  fi
  local graph
  # -e: offline, the cache may hold only the go.mod (not the .info) of a
  # module the graph names without building it; the list is complete anyway.
  if ! graph=$(cd "$dir" && GOWORK=off GOFLAGS=-mod=mod GOPROXY=off go list -m -e all); then
    fail "go list -m all failed"
    failed=$((failed + 1)); return
  fi
  sed 's/^/    /' <<<"$graph"
  # Module paths only (first field), without the scratch module itself.
  local paths
  paths=$(awk 'NR > 1 { print $1 }' <<<"$graph")
  local allowed=" $Q/engine "
  for m in "${mods[@]}"; do
    allowed+="$Q/$m "
    for p in $(needs "$m"); do allowed+="$Q/$p "; done
  done
  while read -r p; do
    case "$p" in
      "$Q"/*) [[ "$allowed" == *" $p "* ]] || fail "$p is in the graph but not imported" ;;
    esac
  done <<<"$paths"
  # A test library in the graph fails unless only third-party modules require
  # it (client_golang's own go.mod requires goleak: any Prometheus user's
  # graph has it, with or without quotagate).
  local edges by
  edges=$(cd "$dir" && GOWORK=off GOFLAGS=-mod=mod GOPROXY=off go mod graph) || fail "go mod graph failed"
  for p in "${never[@]}"; do
    grep -qxF "$p" <<<"$paths" || continue
    by=$(awk -v p="$p" '{ split($2, t, "@") } t[1] == p { print $1 }' <<<"$edges" | sort -u | tr '\n' ' ')
    if grep -Eq "(^| )(example\.com/|$Q/)" <<<"$by"; then
      fail "$p is in the graph, required by: $by"
    else
      echo "note: $p is in the graph, required only by third-party modules: $by"
    fi
  done
  for m in "${published[@]}"; do
    [[ "$allowed" == *" $Q/$m "* ]] && continue
    p=$(brings "$m")
    [ -n "$p" ] && grep -qxF "$p" <<<"$paths" || continue
    # As for test libraries: a module that only third-party modules require
    # is theirs (grpc's go.mod requires the OTel API: every gRPC user's
    # graph has it).
    by=$(awk -v p="$p" '{ split($2, t, "@") } t[1] == p { print $1 }' <<<"$edges" | sort -u | tr '\n' ' ')
    if grep -Eq "(^| )(example\.com/|$Q/)" <<<"$by"; then
      fail "$p is in the graph without $Q/$m, required by: $by"
    else
      echo "note: $p is in the graph without $Q/$m, required only by third-party modules: $by"
    fi
  done
  if [ -n "$main_src" ] && ! (cd "$dir" && GOWORK=off GOFLAGS=-mod=mod GOPROXY=off go build -o /dev/null .); then
    fail "the program does not build"
  fi
  if [ $ok = 1 ]; then echo "ok: $name"; passed=$((passed + 1)); else failed=$((failed + 1)); fi
}

for m in "${published[@]}"; do
  check "$(tr / - <<<"$m")" "$m"
done
check chi-memory-app adapters/chi stores/memory engine
check gin-prometheus-app adapters/gin stores/memory metrics/prometheus engine
check redis-app adapters/nethttp stores/redis engine

# The README's whole programs, each a program of its own: it must build with
# the replace block alone, plus the third-party modules the README names
# beside it (the OTel SDK's exporter, which an application chooses). Each is
# the Go block after its marker: marker|quotagate modules|requires.
programs=(
  "quickstart|adapters/chi stores/memory engine|"
  "otel-program|adapters/nethttp stores/memory metrics/otel engine|go.opentelemetry.io/otel/exporters/stdout/stdoutmetric v1.47.0"
  "client-program|client|"
  "grpc-program|adapters/grpc stores/memory engine|"
)
for entry in "${programs[@]}"; do
  IFS='|' read -r marker modlist req <<<"$entry"
  read -r -a mods <<<"$modlist"
  requires=()
  [ -n "$req" ] && requires=("$req")
  main_src=$(awk -v m="<!-- $marker" '
    index($0, m) == 1 { armed = 1; next }
    armed && /^```/ { if (inblock) exit; inblock = 1; next }
    inblock { print }
  ' "$ROOT/README.md")
  if [ -z "$main_src" ]; then
    echo "FAIL: no Go block after the $marker marker in README.md"; failed=$((failed + 1))
  else
    check "readme-$marker" "${mods[@]}"
  fi
done
main_src=
requires=()

echo "------------------------------------------------------------------"
echo "consumers: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
