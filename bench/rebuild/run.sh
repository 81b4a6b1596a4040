#!/usr/bin/env bash
# Rebuild rate vs the read rate of one member, on members in memory (/dev/shm).
# For each level: create an array of MEMBERS members of SIZE each, fill it, lose member 1,
# and time `xraid add` rebuilding a blank replacement; in the same run, time reading one
# member file straight (dd, 1 MiB blocks, from the page cache = memory). Runs alternate,
# RUNS times; raw CSV in bench/runs/<date>-<hostname>/rebuild.csv; prints medians.
#   RUNS=5 SIZE=1G LEVELS="5 6 1 10" [XRAID=path/to/xraid] bench/rebuild/run.sh
# TARGETS="sparse fallocated" also rebuilds onto a replacement whose blocks exist
# before the rebuild writes them (fallocate), as a disk's do; a new tmpfs file's
# blocks are allocated and zeroed as they are first written [sparse].
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
RUNS=${RUNS:-5}
SIZE=${SIZE:-1G}
LEVELS=${LEVELS:-"5 6 1 10"}
MEMBERS=${MEMBERS:-4}

cd "$root"
# XRAID: a binary to measure instead of this tree's release build (an A/B).
if [ -n "${XRAID:-}" ]; then
    xraid=$XRAID
else
    cargo build --release -q -p xraid
    xraid="$root/target/release/xraid"
fi
out="$root/bench/runs/$(date +%Y-%m-%d)-$(hostname)"
mkdir -p "$out"
csv="$out/rebuild.csv"
[ -f "$csv" ] && mv "$csv" "$out/rebuild.$(date -r "$csv" +%H%M%S).csv"
work=$(mktemp -d /dev/shm/xraid-rebuild.XXXXXX)
trap 'rm -rf "$work"' EXIT

bytes=$(numfmt --from=iec "$SIZE")
echo "run,level,what,seconds,member_bytes,mb_per_s" > "$csv"
now() { date +%s.%N; }
for run in $(seq 1 "$RUNS"); do
    for level in $LEVELS; do
        d="$work/l$level"
        rm -rf "$d"; mkdir -p "$d"
        members=()
        for i in $(seq 0 $((MEMBERS - 1))); do members+=("$d/d$i"); done
        "$xraid" create -l "$level" -c 512K --size "$SIZE" "${members[@]}" >/dev/null
        head -c "$((bytes * 2))" /dev/urandom | "$xraid" write "$d" >/dev/null 2>&1 || true
        # The read rate of one member: its data area, straight from memory.
        t0=$(now); dd if="$d/d0" of=/dev/null bs=1M status=none; t1=$(now)
        read_s=$(echo "$t1 - $t0" | bc -l)
        rows=("read_one_member,$read_s")
        for target in ${TARGETS:-sparse}; do
            [ -e "$d/d1" ] && { "$xraid" fail "$d" "$d/d1" >/dev/null 2>&1 || true; rm "$d/d1"; }
            [ "$target" = fallocated ] && fallocate -l "$bytes" "$d/d1"
            t0=$(now); "$xraid" add --size "$SIZE" "$d" "$d/d1" >/dev/null; t1=$(now)
            what=rebuild; [ "$target" = sparse ] || what=rebuild_$target
            rows+=("$what,$(echo "$t1 - $t0" | bc -l)")
        done
        for row in "${rows[@]}"; do
            what=${row%,*}; s=${row#*,}
            mbps=$(echo "$bytes / $s / 1000000" | bc -l)
            printf '%s,%s,%s,%.4f,%s,%.1f\n' "$run" "$level" "$what" "$s" "$bytes" "$mbps" >> "$csv"
        done
    done
done

echo "| level | replacement | read one member MB/s | rebuild MB/s | rebuild / read |"
echo "|---|---|---|---|---|"
for level in $LEVELS; do
    med() { grep ",$level,$1," "$csv" | cut -d, -f6 | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
    r=$(med read_one_member)
    for target in ${TARGETS:-sparse}; do
        what=rebuild; [ "$target" = sparse ] || what=rebuild_$target
        b=$(med "$what")
        printf '| raid%s | %s | %s | %s | %.2fx |\n' "$level" "$target" "$r" "$b" \
            "$(echo "$b / $r" | bc -l)"
    done
done
echo "raw: $csv"
