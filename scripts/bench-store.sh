#!/usr/bin/env bash
# bench-store: what each extra snapshot of a repository costs the index
# store, as RL training sets have them, one `a2farm index build --cache`
# process per snapshot into one cache on this machine:
#
#   gym    N commits of REPO, STEP first-parent commits apart, oldest first
#          (SWE-Gym's shape: instances spread over a repository's history);
#   smith  one base commit and N commits on it that each change one function
#          of one file (SWE-smith's shape: one bug per instance on one base),
#          made in a scratch copy of the repository (git plumbing only).
#
# For each: wall seconds and cache bytes per extra snapshot (median, max),
# the first snapshot's, the total, and the largest peak RSS of a process.
#
# Usage: REPOS=DIR [REPO=pydata/xarray] [N=200] [STEP=100] [BIN=bin/a2farm] scripts/bench-store.sh
# DIR holds the repository as owner__name (a bare clone is enough); nothing
# is fetched, and the repository itself is left as it was.
set -euo pipefail

: "${REPOS:?REPOS must name a folder holding the repository as owner__name}"
REPO=${REPO:-pydata/xarray}
N=${N:-200}
STEP=${STEP:-100}
BIN=$(realpath "${BIN:-bin/a2farm}")
SRC="$REPOS/${REPO/\//__}"
[ -d "$SRC" ] || { echo "bench-store: $SRC not found (REPOS=$REPOS, REPO=$REPO)" >&2; exit 2; }
[ -x "$BIN" ] || { echo "bench-store: $BIN not built (make build)" >&2; exit 2; }

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/repos"
# A scratch copy (hard-linked objects): the smith commits land here only.
git clone -q --bare --local "$SRC" "$WORK/repos/${REPO/\//__}"
GIT="git -C $WORK/repos/${REPO/\//__}"

# build CACHE COMMIT: one index build process; prints "seconds bytes-grown peak-kb".
build() {
	local cache=$1 commit=$2 before after
	before=$(du -sb "$cache" 2>/dev/null | cut -f1 || echo 0)
	if ! /usr/bin/time -f "%e %M" -o "$WORK/time" "$BIN" index build --repos "$WORK/repos" --repo "$REPO" --commit "$commit" --cache "$cache" >/dev/null 2>"$WORK/err"; then
		cat "$WORK/err" >&2
		return 1
	fi
	after=$(du -sb "$cache" | cut -f1)
	read -r secs rss <"$WORK/time"
	echo "$secs $((after - before)) $rss"
}

# run NAME COMMIT...: builds them in order into a fresh cache and reports.
run() {
	local name=$1
	shift
	local cache="$WORK/cache-$name" i=0 total=0
	mkdir -p "$cache"
	: >"$WORK/$name.rows"
	for c in "$@"; do
		build "$cache" "$c" >"$WORK/row" || exit 1
		read -r secs bytes rss <"$WORK/row"
		echo "$i $secs $bytes $rss" >>"$WORK/$name.rows"
		i=$((i + 1))
		if [ $((i % 20)) -eq 0 ]; then echo "bench-store: $name $i/$#" >&2; fi
	done
	python3 - "$name" "$WORK/$name.rows" "$(du -sb "$cache" | cut -f1)" <<'EOF'
import statistics, sys
name, path, total = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = [line.split() for line in open(path)]
first, extra = rows[0], rows[1:]
secs = [float(r[1]) for r in extra]
grown = [int(r[2]) for r in extra]
rss = max(int(r[3]) for r in rows)
mb = lambda b: b / 1e6
print(f"{name}: {len(rows)} snapshots; first {float(first[1]):.2f} s, {mb(int(first[2])):.2f} MB; "
      f"each extra: median {statistics.median(secs):.2f} s (max {max(secs):.2f}), "
      f"median {mb(statistics.median(grown)):.3f} MB (max {mb(max(grown)):.3f}); "
      f"total {mb(total):.1f} MB; peak RSS {rss / 1024:.0f} MB")
EOF
}

# gym: N first-parent commits STEP apart, oldest first.
mapfile -t gym < <($GIT rev-list --first-parent HEAD | awk -v s="$STEP" 'NR % s == 1' | head -n "$N" | tac)
[ "${#gym[@]}" -eq "$N" ] || { echo "bench-store: $REPO has ${#gym[@]} commits $STEP apart, not $N" >&2; exit 2; }

# smith: one base (the newest gym commit), N commits on it, each adding a
# statement to the body of one function of one .py file (files and
# functions taken in turn).
base=${gym[$((N - 1))]}
mapfile -t pyfiles < <($GIT ls-tree -r --name-only "$base" | grep '\.py$' | grep -v -E '(^|/)(tests?|testing)/|conftest' | head -n 50)
export GIT_INDEX_FILE="$WORK/index"
smith=("$base")
for k in $(seq 1 $((N - 1))); do
	f=${pyfiles[$((k % ${#pyfiles[@]}))]}
	$GIT read-tree "$base"
	# after the k-th "def " line of the file (cycling), one more statement at
	# the body's indentation: one function changes, nothing moves elsewhere
	# but the lines below it.
	blob=$($GIT show "$base:$f" | awk -v k="$k" -v want=$((k % 7 + 1)) '
		{ print }
		/^[ \t]*def .*:[ \t]*$/ && !done && ++d == want { match($0, /^[ \t]*/); print substr($0, 1, RLENGTH) "    _bench_store = " k; done = 1 }
		END { if (!done) print "_bench_store = " k }' |
		$GIT hash-object -w --stdin)
	$GIT update-index --cacheinfo "100644,$blob,$f"
	tree=$($GIT write-tree)
	smith+=("$(echo "bench-store: change $k in $f" | $GIT commit-tree "$tree" -p "$base")")
done
unset GIT_INDEX_FILE

echo "bench-store: $REPO, $N snapshots each; $(nproc) cores; $(date -u +%F)" >&2
run gym "${gym[@]}"
run smith "${smith[@]}"
