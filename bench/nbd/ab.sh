#!/usr/bin/env bash
# A/B of two xraid binaries (a change's before and after) on the same workload: each
# serves its own 4-member RAID-5 (64K chunk, members on $DIR) over a Unix socket, both
# are filled, then fio's nbd engine runs every workload against A and B in turn, round
# after round (these machines are shared and noisy), and the medians are compared.
#
#   bench/nbd/ab.sh OLD_XRAID NEW_XRAID
#   ROUNDS=3 WORKLOADS="read:1m" bench/nbd/ab.sh a b        # smoke run
#
# Environment:
#   WORKLOADS  fio rw:bs pairs [read:1m write:1m randread:4k randwrite:4k]
#   ROUNDS [5]  RUNTIME seconds [3]  JOBS fio jobs [2]  IODEPTH per job [8]
#   CREATE     extra `xraid create` arguments for both arrays (e.g. --integrity) []
#   DIR [/dev/shm]  CSV [bench/runs/<date>-<hostname>/nbd-ab.csv]
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 XRAID_A XRAID_B" >&2; exit 2; }
A=$1 B=$2
top=$(cd "$(dirname "$0")/../.." && pwd)
WORKLOADS=${WORKLOADS:-"read:1m write:1m randread:4k randwrite:4k"}
ROUNDS=${ROUNDS:-5}
RUNTIME=${RUNTIME:-3}
JOBS=${JOBS:-2}
IODEPTH=${IODEPTH:-8}
CREATE=${CREATE:-}
DIR=${DIR:-/dev/shm}
out_dir="$top/bench/runs/$(date +%F)-$(hostname)"
mkdir -p "$out_dir"
csv=${CSV:-"$out_dir/nbd-ab.csv"}
[ -f "$csv" ] || echo "date,round,side,binary,rw,bs,jobs,iodepth,mb_s,iops" > "$csv"

work=$(mktemp -d "$DIR/xraid-ab.XXXXXX")
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

for side in a b; do
    bin=$A; [ $side = b ] && bin=$B
    mkdir "$work/$side"
    # shellcheck disable=SC2086
    "$A" create -l 5 -c 64K --size 345M $CREATE "$work/$side"/m{0,1,2,3} >/dev/null
    "$bin" serve --socket "$work/$side.sock" "$work/$side" >"$work/$side.log" 2>&1 &
    pids+=($!)
done
for side in a b; do
    for _ in $(seq 100); do [ -S "$work/$side.sock" ] && break; sleep 0.1; done
    fio --name=fill --ioengine=nbd "--uri=nbd+unix:///?socket=$work/$side.sock" --rw=write \
        --bs=1m --size=1G --iodepth=8 --output=/dev/null >/dev/null 2>&1
done

declare -A all
for round in $(seq "$ROUNDS"); do
    for wl in $WORKLOADS; do
        rw=${wl%%:*} bs=${wl##*:}
        for side in a b; do
            bin=$A; [ $side = b ] && bin=$B
            fio --name=ab --ioengine=nbd "--uri=nbd+unix:///?socket=$work/$side.sock" \
                --rw="$rw" --bs="$bs" --numjobs="$JOBS" --size=$((1024 / JOBS))M \
                --offset_increment=$((1024 / JOBS))M --iodepth="$IODEPTH" --group_reporting \
                --time_based --runtime="$RUNTIME" --output-format=json --output="$work/o.json" \
                >/dev/null 2>&1
            read -r mb iops < <(python3 -c 'import json,sys
j=json.load(open(sys.argv[1]))["jobs"][0]
s=j["write"] if "write" in sys.argv[2] else j["read"]
print(round(s["bw_bytes"]/1e6), round(s["iops"]))' "$work/o.json" "$rw")
            echo "$(date -Is),$round,$side,$bin,$rw,$bs,$JOBS,$IODEPTH,$mb,$iops" >> "$csv"
            all[$side $wl]="${all[$side $wl]:-} $mb"
        done
    done
done
median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
printf '%-14s %10s %10s %7s\n' workload "A MB/s" "B MB/s" "B/A"
for wl in $WORKLOADS; do
    a=$(echo "${all[a $wl]}" | median) b=$(echo "${all[b $wl]}" | median)
    printf '%-14s %10s %10s %7s\n' "$wl" "$a" "$b" "$(echo "scale=2; $b / $a" | bc)"
done
echo "rows appended to $csv" >&2
