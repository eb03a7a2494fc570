#!/bin/sh
# The farm as separate processes against single-process localize, on one
# dataset with the heuristic policy: a NATS server, a learner, W workers
# (no shared --cache folder: each host for itself) and the coordinator,
# against `a2farm localize` (no cache either). Prints both wall times,
# peak memory, and the index builds and shared fetches the workers report
# in their metrics: builds per snapshot is the number to watch.
#
# Usage: scripts/bench-farm-processes.sh DATASET REPOS [SAMPLES] [WORKERS] [BIN]
#   e.g. scripts/bench-farm-processes.sh .run/xarray/dataset.jsonl .repos 8 2
set -eu
dataset=$1
repos=$2
samples=${3:-8}
workers=${4:-2}
bin=${5:-bin/a2farm}
port=${A2FARM_BENCH_PORT:-4334}
metrics=${A2FARM_BENCH_METRICS_PORT:-9560}
dir=$(mktemp -d)
pids=
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null || true; done
	for p in $pids; do wait "$p" 2>/dev/null || true; done
	rm -rf "$dir"
}
trap cleanup EXIT INT TERM
now() { date +%s.%N; }
snapshots=$(grep -o '"base_commit": *"[0-9a-f]*"' "$dataset" | sort -u | wc -l)
echo "dataset $dataset: $(wc -l <"$dataset") instances, $snapshots snapshots, $samples samples, $workers workers, $(nproc) CPUs"

start=$(now)
/usr/bin/time -f "%M" -o "$dir/localize.rss" "$bin" localize --log-level warn --dataset "$dataset" --repos "$repos" \
	--policy heuristic --samples "$samples" --out "$dir/localize" >/dev/null 2>"$dir/localize.log"
localize=$(echo "$(now) - $start" | bc)
echo "localize: ${localize}s wall, $(($(cat "$dir/localize.rss") / 1024)) MiB peak RSS"

"$bin" nats --store "$dir/nats" --port "$port" --log-level warn >"$dir/nats.log" 2>&1 &
pids="$pids $!"
i=0
until grep -q "listening" "$dir/nats.log"; do
	i=$((i + 1))
	[ "$i" -lt 100 ] || { echo "the server did not start:" >&2; cat "$dir/nats.log" >&2; exit 1; }
	sleep 0.1
done
url="nats://127.0.0.1:$port"
"$bin" learner --nats "$url" --out "$dir/learner" --log-level warn >"$dir/learner.log" 2>&1 &
pids="$pids $!"
w=0
while [ "$w" -lt "$workers" ]; do
	"$bin" worker --nats "$url" --repos "$repos" --concurrency 8 \
		--id "w$w" --metrics-addr "127.0.0.1:$((metrics + w))" --log-level warn >"$dir/worker$w.log" 2>&1 &
	pids="$pids $!"
	workerpids="${workerpids:-} $!"
	w=$((w + 1))
done
sleep 1
start=$(now)
"$bin" coordinator --nats "$url" --dataset "$dataset" --repos "$repos" --samples "$samples" --run bench \
	--policy heuristic --log-level warn >"$dir/coordinator.log" 2>&1
farm=$(echo "$(now) - $start" | bc)
echo "farm: ${farm}s wall (coordinator start to every trajectory in)"
rss=0
for p in $workerpids; do
	[ -r "/proc/$p/status" ] || { echo "worker $p is gone:" >&2; tail -n 5 "$dir"/worker*.log >&2; exit 1; }
	rss=$((rss + $(awk '/^VmHWM/ {print $2}' "/proc/$p/status")))
done
echo "workers' peak RSS summed: $((rss / 1024)) MiB"
built=0
fetched=0
w=0
while [ "$w" -lt "$workers" ]; do
	m=$(curl -s "http://127.0.0.1:$((metrics + w))/metrics")
	b=$(echo "$m" | awk '/^a2farm_index_build_seconds_count\{outcome="ok"\}/ {print $2}')
	f=$(echo "$m" | awk '/^a2farm_index_load_seconds_count\{from="shared"\}/ {print $2}')
	echo "worker w$w: ${b:-0} indexes built, ${f:-0} fetched from the farm"
	built=$((built + ${b:-0}))
	fetched=$((fetched + ${f:-0}))
	w=$((w + 1))
done
echo "builds per snapshot: $(echo "scale=2; $built / $snapshots" | bc) ($built builds, $fetched fetches, $snapshots snapshots)"
echo "farm throughput against localize: $(echo "scale=3; $localize / $farm" | bc)"
