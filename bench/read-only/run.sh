#!/usr/bin/env bash
# What `xraid read` pays for reading the stripe log first (the read-only open runs
# its recovery in memory; see docs/RELIABILITY.md), A/B against another build.
# A RAID-5 of 4 members of SIZE on local disk (O_DIRECT), filled; reads of the whole
# array to /dev/null, caches dropped before each (COLD=0 keeps them), alternating
# the two builds, RUNS times: first on the array stopped cleanly (the recovery finds
# nothing and the array is opened again reading the devices directly), then after a
# server that wrote to it was killed (left dirty: the reads keep the in-memory
# recovery). Raw CSV in bench/runs/<date>-<hostname>/read-only.csv; prints medians.
#   BASE=/path/to/old/xraid [XRAID=path/to/new/xraid] RUNS=5 SIZE=256M bench/read-only/run.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
RUNS=${RUNS:-5}
SIZE=${SIZE:-256M}
COLD=${COLD:-1}
: "${BASE:?BASE=path to the xraid build to compare with}"
cd "$root"
if [ -n "${XRAID:-}" ]; then
    xraid=$XRAID
else
    cargo build --release -q -p xraid
    xraid="$root/target/release/xraid"
fi
out="$root/bench/runs/$(date +%Y-%m-%d)-$(hostname)"
mkdir -p "$out"
csv="$out/read-only.csv"
[ -f "$csv" ] && mv "$csv" "$out/read-only.$(date -r "$csv" +%H%M%S).csv"
work=$(mktemp -d /var/tmp/xraid-read-only.XXXXXX)
server=""
trap '[ -n "$server" ] && kill -9 "$server" 2>/dev/null; rm -rf "$work"' EXIT
now() { date +%s.%N; }

"$xraid" create -l 5 -z "$SIZE" "$work"/d0 "$work"/d1 "$work"/d2 "$work"/d3 > /dev/null
bytes=$(( $("$xraid" status --json "$work" | sed -n 's/.*"array_size_bytes": *\([0-9]*\).*/\1/p') ))
head -c "$bytes" /dev/urandom > "$work/image"
"$xraid" write -i "$work/image" "$work" > /dev/null
rm -f "$work/image"

echo "run,state,build,seconds,array_bytes,mb_per_s" > "$csv"
measure() {
    local state=$1 run=$2
    for build in base new; do
        local bin=$BASE
        [ "$build" = new ] && bin=$xraid
        if [ "$COLD" = 1 ]; then sync; echo 3 > /proc/sys/vm/drop_caches; fi
        local s e
        s=$(now)
        "$bin" read "$work" > /dev/null 2>&1
        e=$(now)
        awk -v r="$run" -v st="$state" -v b="$build" -v s="$s" -v e="$e" -v n="$bytes" \
            'BEGIN { t = e - s; printf "%s,%s,%s,%.3f,%d,%.0f\n", r, st, b, t, n, n / t / 1e6 }' >> "$csv"
    done
}
for run in $(seq 1 "$RUNS"); do measure clean "$run"; done
# Left dirty: a server writes, and is killed.
"$xraid" serve --socket "$work/s.sock" "$work" > "$work/serve.log" 2>&1 &
server=$!
for _ in $(seq 50); do [ -S "$work/s.sock" ] && break; sleep 0.1; done
head -c 64M /dev/urandom | nbdcopy - "nbd+unix:///?socket=$work/s.sock"
kill -9 "$server"; wait "$server" 2>/dev/null || true; server=""
for run in $(seq 1 "$RUNS"); do measure dirty "$run"; done

echo "medians (MB/s), $csv:"
for state in clean dirty; do
    for build in base new; do
        m=$(awk -F, -v st="$state" -v b="$build" '$2 == st && $3 == b { print $6 }' "$csv" | sort -n |
            awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
        echo "  $state $build: $m"
    done
done
