#!/usr/bin/env bash
# Integrity mode's share of the server's CPU time, by sampling: a RAID-5 made with
# `--integrity` is served and driven by fio's nbd engine, while `perf record` samples the
# server (software cpu-clock, which works where hardware counters do not); the share of
# samples in the checksum code (crc_fast, xraid's block_crc kernel and its integrity
# functions) is what the checks cost, measured inside one run rather than as the ratio
# of two noisy runs.
#
#   bench/integrity/profile.sh            # the workloads below, 8 s each
#
# Environment:
#   WORKLOADS  fio rw:bs:jobs [randread:4k:4 read:1m:2 randwrite:4k:4 write:1m:2]
#   RUNTIME [8]  IODEPTH [8]  DIR [/dev/shm]  XRAID (binary; built if unset)
#   CSV [bench/runs/<date>-<hostname>/integrity-profile.csv]
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
WORKLOADS=${WORKLOADS:-"randread:4k:4 read:1m:2 randwrite:4k:4 write:1m:2"}
RUNTIME=${RUNTIME:-8}
IODEPTH=${IODEPTH:-8}
DIR=${DIR:-/dev/shm}
command -v perf >/dev/null || { apt-get update -qq && apt-get install -y -qq linux-perf >/dev/null; }
xraid=${XRAID:-}
if [ -z "$xraid" ]; then
    (cd "$top" && cargo build --release -q -p xraid)
    xraid=${CARGO_TARGET_DIR:-$top/target}/release/xraid
fi
out_dir="$top/bench/runs/$(date +%F)-$(hostname)"
mkdir -p "$out_dir"
csv=${CSV:-"$out_dir/integrity-profile.csv"}
[ -f "$csv" ] || echo "date,rw,bs,jobs,samples,checksum_samples,checksum_pct,mb_s" > "$csv"
work=$(mktemp -d "$DIR/xraid-integrity-profile.XXXXXX")
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

"$xraid" create -l 5 -c 64K --size 345M --integrity "$work"/m{0,1,2,3} >/dev/null
"$xraid" serve --socket "$work/s.sock" "$work" >"$work/serve.log" 2>&1 &
pid=$!
for _ in $(seq 100); do [ -S "$work/s.sock" ] && break; sleep 0.1; done
uri="nbd+unix:///?socket=$work/s.sock"
fio --name=fill --ioengine=nbd "--uri=$uri" --rw=write --bs=1m --size=1G --iodepth=8 \
    --output=/dev/null >/dev/null 2>&1

printf '%-10s %4s %4s %9s %9s %8s\n' rw bs jobs samples checksum "share"
for wl in $WORKLOADS; do
    IFS=: read -r rw bs jobs <<<"$wl"
    perf record -q -e cpu-clock -F 2000 -p "$pid" -o "$work/p.data" -- sleep "$RUNTIME" \
        >/dev/null 2>&1 &
    perf_pid=$!
    fio --name=p --ioengine=nbd "--uri=$uri" --rw="$rw" --bs="$bs" --numjobs="$jobs" \
        --size=$((1024 / jobs))M --offset_increment=$((1024 / jobs))M --iodepth="$IODEPTH" \
        --group_reporting --time_based --runtime="$RUNTIME" --output-format=json \
        --output="$work/o.json" >/dev/null 2>&1
    wait "$perf_pid" || true
    mb=$(python3 -c 'import json,sys
j=json.load(open(sys.argv[1]))["jobs"][0]
print(round((j["write"] if "write" in sys.argv[2] else j["read"])["bw_bytes"]/1e6))' "$work/o.json" "$rw")
    perf report -i "$work/p.data" --no-children --sort sym --stdio -g none 2>/dev/null \
        | grep -E '^ +[0-9.]+%' >"$work/syms.txt" || true
    total=$(perf report -i "$work/p.data" --stdio --sort sym -g none 2>/dev/null \
        | sed -n 's/^# Samples: \([0-9.]*[KM]*\).*/\1/p' | head -1)
    share=$(grep -E 'crc_fast|xraid_format::integrity|xraid_format::block_crc|xraid_engine::integrity|ChecksumTable' \
        "$work/syms.txt" | awk '{gsub("%","",$1); s+=$1} END {printf "%.2f", s}')
    echo "$(date -Is),$rw,$bs,$jobs,$total,,${share},$mb" >> "$csv"
    printf '%-10s %4s %4s %9s %8s%% %6s MB/s\n' "$rw" "$bs" "$jobs" "$total" "$share" "$mb"
done
echo "rows appended to $csv" >&2
