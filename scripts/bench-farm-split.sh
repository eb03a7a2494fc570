#!/bin/sh
# Farm vs localize as a worker host sees it: the JetStream server runs as
# its own process pinned to CPU 1 (on a cluster it, and the learner that
# reads the trajectory log, live on other hosts), and both the worker and
# the single-process `localize` loop get CPU 0 alone (GOMAXPROCS 1).
# Usage: scripts/bench-farm-split.sh [benchtime]   (default 5x)
set -eu
command -v taskset >/dev/null || { echo "bench-farm-split: needs taskset (util-linux)" >&2; exit 1; }
[ "$(nproc)" -ge 2 ] || { echo "bench-farm-split: needs two CPUs" >&2; exit 1; }
benchtime=${1:-5x}
port=${A2FARM_BENCH_PORT:-4333}
dir=$(mktemp -d)
server=
cleanup() {
	[ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
	rm -rf "$dir"
}
trap cleanup EXIT INT TERM
go build -o "$dir/a2farm" ./cmd/a2farm
go test -c -o "$dir/worker.test" ./worker
taskset -c 1 "$dir/a2farm" nats --store "$dir/nats" --port "$port" --log-level warn >"$dir/nats.log" 2>&1 &
server=$!
i=0
until grep -q "listening" "$dir/nats.log"; do
	i=$((i + 1))
	[ "$i" -lt 100 ] || { echo "bench-farm-split: the server did not start:" >&2; cat "$dir/nats.log" >&2; exit 1; }
	sleep 0.1
done
cd worker
A2FARM_BENCH_NATS="nats://127.0.0.1:$port" taskset -c 0 "$dir/worker.test" \
	-test.run '^$' -test.bench 'FarmVsLocalize' -test.benchtime "$benchtime" -test.cpu 1
