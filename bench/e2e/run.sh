#!/bin/sh
# End to end: wrk against the chi example (memory store, RateLimit fields on
# every response, 10 000 clients by X-Forwarded-For) and against the bare
# server (the same route and handler, no limiter), on loopback, alternating
# for ROUNDS rounds; prints each run's requests/s and the medians' ratio.
#
#   cd bench && sh e2e/run.sh            (ROUNDS=5 DUR=5s CONNS=32 by default)
set -eu
ROUNDS=${ROUNDS:-5} DUR=${DUR:-5s} CONNS=${CONNS:-32}
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
GOWORK=off go build -o "$tmp/bare" ./e2e
(cd ../examples && GOWORK=off go build -o "$tmp/chi" ./chi)
"$tmp/bare" -addr 127.0.0.1:8091 & bare=$!
"$tmp/chi" -addr 127.0.0.1:8092 -disclosure always -trusted-header X-Forwarded-For -trusted-hops 1 >"$tmp/chi.log" 2>&1 & ex=$!
trap 'kill $bare $ex 2>/dev/null; rm -rf "$tmp"' EXIT
sleep 1
curl -si -H 'X-Forwarded-For: 10.0.0.1' http://127.0.0.1:8092/v1/notes/1 | grep -i '^ratelimit' >&2
rps() { wrk -t1 -c"$CONNS" -d"$DUR" -s e2e/clients.lua "http://127.0.0.1:$1/v1/notes/1" | awk '/Requests\/sec/ {print $2} /Non-2xx/ {print > "/dev/stderr"}'; }
: >"$tmp/bare.txt"; : >"$tmp/chi.txt"
for r in $(seq "$ROUNDS"); do
	if [ $((r % 2)) = 1 ]; then
		rps 8091 >>"$tmp/bare.txt"; rps 8092 >>"$tmp/chi.txt"
	else
		rps 8092 >>"$tmp/chi.txt"; rps 8091 >>"$tmp/bare.txt"
	fi
done
med() { sort -n "$1" | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
echo "bare:    $(tr '\n' ' ' <"$tmp/bare.txt")median $(med "$tmp/bare.txt") requests/s"
echo "example: $(tr '\n' ' ' <"$tmp/chi.txt")median $(med "$tmp/chi.txt") requests/s"
echo "ratio example/bare: $(echo "$(med "$tmp/chi.txt") $(med "$tmp/bare.txt")" | awk '{printf "%.3f", $1/$2}')"
