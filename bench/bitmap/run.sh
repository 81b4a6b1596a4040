#!/usr/bin/env bash
# The write-intent bitmap's cost on random writes: 4-member RAID-5 exports (64K chunk)
# made with and without a bitmap (and with bitmap chunks from mdadm's 64M down to the
# smallest that fits), served by xraid serve, written by fio's nbd engine with 4 KiB
# random writes. The arrays are measured in turn, run after run (the machines are
# shared and noisy), and the median IOPS of each is compared with the median without a
# bitmap. Raw rows go to bench/runs/<date>-<hostname>/bitmap.csv.
#
#   bench/bitmap/run.sh                         # RUNS=5 RUNTIME=10 SIZE=1G
#   RUNS=1 RUNTIME=3 SIZE=256M bench/bitmap/run.sh   # smoke run
#
# Environment:
#   CONFIGS   bitmap choices: none, or a bitmap chunk size [none 64M 1M 64K 16K]
#   RW        fio's --rw: randwrite (bits set once, then stay set while written), or
#             write (sequential 4 KiB writes: a new chunk every chunk/4K writes, the
#             worst case for small bitmap chunks) [randwrite]
#   SIZE      array bytes fio writes over, K/M/G [1G]
#   RUNS [5]  RUNTIME seconds per measurement [10]  IODEPTH [32]  JOBS fio jobs [1]
#   DIR       where the members live [/dev/shm]
#   CSV       where the rows are appended [bench/runs/<date>-<hostname>/bitmap.csv]
#   XRAID     xraid binary; if unset, `cargo build --release -p xraid` is run
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)

CONFIGS=${CONFIGS:-"none 64M 1M 64K 16K"}
RW=${RW:-randwrite}
SIZE=${SIZE:-1G}
RUNS=${RUNS:-5}
RUNTIME=${RUNTIME:-10}
IODEPTH=${IODEPTH:-32}
JOBS=${JOBS:-1}
DIR=${DIR:-/dev/shm}

log() { echo "bitmap-bench: $*" >&2; }
die() { log "$*"; exit 1; }

command -v fio >/dev/null || {
    log "installing fio"
    apt-get update >&2 && apt-get install -y --no-install-recommends fio libnbd-bin >&2
}
fio --enghelp 2>/dev/null | grep -qx '[[:space:]]*nbd' || die "this fio has no nbd engine"

xraid=${XRAID:-}
if [ -z "$xraid" ]; then
    (cd "$top" && cargo build --release -q -p xraid) || die "cargo build failed"
    xraid=${CARGO_TARGET_DIR:-$top/target}/release/xraid
fi

bytes() { numfmt --from=iec "$1"; }
size_bytes=$(bytes "$SIZE")
member_mib=$(( size_bytes / 3 / 1048576 + 2 ))
work=$(mktemp -d "$DIR/xraid-bitmap-bench.XXXXXX")
srv_pid=""
cleanup() {
    [ -n "$srv_pid" ] && kill "$srv_pid" 2>/dev/null && wait "$srv_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

out_dir="$top/bench/runs/$(date +%F)-$(hostname)"
mkdir -p "$out_dir"
csv=${CSV:-"$out_dir/bitmap.csv"}
[ -f "$csv" ] || echo "date,run,config,rw,size,iodepth,jobs,iops,server_cpu_s" > "$csv"

for c in $CONFIGS; do
    mkdir -p "$work/$c"
    if [ "$c" = none ]; then args=(--bitmap none); else args=(--bitmap-chunk "$c"); fi
    "$xraid" create --level 5 --chunk 64K --size "${member_mib}M" --name "bm$c" "${args[@]}" \
        "$work/$c"/m{0,1,2,3}.img >"$work/create-$c.log" 2>&1 ||
        { cat "$work/create-$c.log" >&2; die "xraid create ($c) failed"; }
    log "$c: $("$xraid" examine --bitmap "$work/$c/m0.img" 2>/dev/null | grep -E 'Bitmap :' || echo 'no bitmap')"
done

measure() { # RUN CONFIG
    local run=$1 c=$2 sock="$work/$2.sock"
    "$xraid" serve --socket "$sock" "$work/$c" >"$work/serve-$c.log" 2>&1 &
    srv_pid=$!
    for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
    [ -S "$sock" ] || { cat "$work/serve-$c.log" >&2; die "server ($c) did not start"; }
    local cpu0 cpu1 iops
    cpu0=$(awk '{print $14 + $15}' "/proc/$srv_pid/stat")
    # fio's nbd engine prints a line of its own on stdout: the report goes to a file.
    fio --name=w --ioengine=nbd "--uri=nbd+unix:///?socket=$sock" --rw="$RW" \
        --bs=4k --iodepth="$IODEPTH" --numjobs="$JOBS" --group_reporting --size="$size_bytes" \
        --time_based --runtime="$RUNTIME" --ramp_time=1 --norandommap --randrepeat=0 \
        --output-format=json --output="$work/fio.json" >"$work/fio.err" 2>&1 ||
        { cat "$work/fio.err" >&2; die "fio failed ($c)"; }
    iops=$(python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["jobs"][0]["write"]["iops"]))' "$work/fio.json")
    cpu1=$(awk '{print $14 + $15}' "/proc/$srv_pid/stat")
    kill "$srv_pid"; wait "$srv_pid" 2>/dev/null || true; srv_pid=""
    local cpu_s
    cpu_s=$(echo "scale=2; ($cpu1 - $cpu0) / $(getconf CLK_TCK)" | bc)
    echo "$(date -Is),$run,$c,$RW,$SIZE,$IODEPTH,$JOBS,$iops,$cpu_s" >> "$csv"
    log "run $run $c: $iops IOPS, server cpu ${cpu_s}s"
    echo "$iops"
}

declare -A all
for run in $(seq "$RUNS"); do
    for c in $CONFIGS; do
        all[$c]="${all[$c]:-} $(measure "$run" "$c")"
    done
done

median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
base=$(echo "${all[none]:-}" | median)
printf '%-8s %10s %8s\n' config "median IOPS" "vs none"
for c in $CONFIGS; do
    m=$(echo "${all[$c]}" | median)
    ratio=$( [ -n "$base" ] && [ "$base" != 0 ] && echo "scale=3; $m / $base" | bc || echo "-")
    printf '%-8s %10s %8s\n' "$c" "$m" "$ratio"
done
log "rows appended to $csv"
