#!/usr/bin/env bash
# How long a served rebuild's checkpoints hold the clients: a 4-member RAID-5 (512K
# chunk) on /dev/shm whose member 1 is rebuilt while the three others answer in
# LATENCY (a `--fault latency=`, like disks), no client I/O; `xraid status --json` is
# read every 0.3 s for the last checkpoint's time (`sync.last_checkpoint_ms`) and the
# interval it set (`checkpoint_every_ms`). Alternating runs of the builds in XRAIDS.
#   XRAIDS="/tmp/xraid-a /tmp/xraid-b" RUNS=4 SIZE=2G LATENCY=20ms bench/rebuild/checkpoints.sh
# Raw CSV in bench/runs/<date>-<hostname>/rebuild-checkpoints.csv; prints each checkpoint.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
RUNS=${RUNS:-3}
SIZE=${SIZE:-2G}
LATENCY=${LATENCY:-20ms}
# shellcheck source=common.sh
. "$here/common.sh"
choose_builds
csv=$(csv_file rebuild-checkpoints.csv "date,xraid,run,size,latency,at_percent,checkpoint_ms,every_ms,rebuild_s")
work=$(mktemp -d /dev/shm/xraid-checkpoints.XXXXXX)
server=
cleanup() { [ -n "$server" ] && kill "$server" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
# "last every percent" of the running sync, or "none" once it has ended.
sync_of() {
    python3 -c 'import json, sys
y = json.load(sys.stdin).get("sync")
print("none" if not y else "%s %s %s" % (y.get("last_checkpoint_ms"), y.get("checkpoint_every_ms"), y["done_percent"]))'
}
for run in $(seq 1 "$RUNS"); do
    for xraid in $XRAIDS; do
        d="$work/a"; rm -rf "$d"; mkdir -p "$d"
        "$xraid" create -l 5 -c 512K --size "$SIZE" "$d"/d{0,1,2,3} >/dev/null
        "$xraid" fail "$d" "$d/d1" >/dev/null 2>&1
        rm "$d/d1"
        "$xraid" serve --socket "$work/s.sock" --fault "role=0,latency=$LATENCY" \
            --fault "role=2,latency=$LATENCY" --fault "role=3,latency=$LATENCY" "$d" \
            >"$work/serve.log" 2>&1 &
        server=$!
        for _ in $(seq 100); do [ -S "$work/s.sock" ] && break; sleep 0.1; done
        t0=$(date +%s.%N)
        "$xraid" add --no-rebuild --size "$SIZE" "$d" "$d/d1" >/dev/null
        seen=None
        rows=()
        while :; do
            s=$("$xraid" status --json "$d" | sync_of)
            [ "$s" = none ] && break
            read -r last every percent <<<"$s"
            if [ "$last" != "$seen" ]; then
                rows+=("$percent,$last,$every")
                seen=$last
            fi
            sleep 0.3
        done
        secs=$(echo "$(date +%s.%N) - $t0" | bc -l)
        kill "$server"; wait "$server" 2>/dev/null || true; server=
        for row in "${rows[@]}"; do
            case $row in *,None,*) continue ;; esac
            printf '%s,%s,%s,%s,%s,%s,%.2f\n' "$(date -Is)" "$xraid" "$run" "$SIZE" \
                "$LATENCY" "$row" "$secs" | tee -a "$csv"
        done
    done
done
