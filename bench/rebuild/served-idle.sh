#!/usr/bin/env bash
# A served array's rebuild with no client I/O: how long `xraid add` (which follows the
# server's background rebuild to its end) takes to rebuild a blank member of a 4-member
# RAID-5 (512K chunk) on /dev/shm, capped at MAX MB/s (--rebuild-max; 0: no cap), in
# alternating runs of the builds named in XRAIDS (an A/B). The cap makes the rebuild
# last long enough for the server's checkpoints (every 2 s or sixteenth of the array);
# so does FAULT, a `--fault` for the server (`role=2,latency=20ms`: member 2 answers
# like a disk, 20 ms an I/O, with the rebuild's 16 units in flight).
#   XRAIDS="/tmp/xraid-a /tmp/xraid-b" RUNS=3 SIZE=1G MAX=200 bench/rebuild/served-idle.sh
# Raw CSV in bench/runs/<date>-<hostname>/rebuild-served-idle.csv; prints each run.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
RUNS=${RUNS:-3}
SIZE=${SIZE:-1G}
MAX=${MAX:-200}
# shellcheck source=common.sh
. "$here/common.sh"
choose_builds
csv=$(csv_file rebuild-served-idle.csv "date,xraid,run,size,max_mb_s,fault,seconds,mb_per_s")
work=$(mktemp -d /dev/shm/xraid-served-idle.XXXXXX)
server=
cleanup() { [ -n "$server" ] && kill "$server" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
bytes=$(numfmt --from=iec "$SIZE")
now() { date +%s.%N; }
for run in $(seq 1 "$RUNS"); do
    for xraid in $XRAIDS; do
        d="$work/a"; rm -rf "$d"; mkdir -p "$d"
        "$xraid" create -l 5 -c 512K --size "$SIZE" "$d"/d{0,1,2,3} >/dev/null
        "$xraid" fail "$d" "$d/d1" >/dev/null 2>&1
        rm "$d/d1"; fallocate -l "$bytes" "$d/d1.new"
        "$xraid" serve --socket "$work/s.sock" --rebuild-max "$MAX" \
            ${FAULT:+--fault "$FAULT"} "$d" \
            >"$work/serve.log" 2>&1 &
        server=$!
        for _ in $(seq 100); do [ -S "$work/s.sock" ] && break; sleep 0.1; done
        mv "$d/d1.new" "$d/d1"
        t0=$(now); "$xraid" add --size "$SIZE" "$d" "$d/d1" >/dev/null 2>&1; t1=$(now)
        kill "$server"; wait "$server" 2>/dev/null || true; server=
        s=$(echo "$t1 - $t0" | bc -l)
        mbps=$(echo "$bytes / $s / 1000000" | bc -l)
        printf '%s,%s,%s,%s,%s,"%s",%.3f,%.1f\n' "$(date -Is)" "$xraid" "$run" "$SIZE" \
            "$MAX" "${FAULT:-}" "$s" "$mbps" | tee -a "$csv"
    done
done
echo "raw: $csv"
