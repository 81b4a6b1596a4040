#!/usr/bin/env bash
# A/B of two xraid binaries (a change's before and after) serving a plain file (or, with
# EXPORTS=raid5, run.sh's RAID-5 of four members), through
# run.sh: round after round, one run.sh run of each binary in turn (these machines are
# shared and noisy; alternating spreads the noise over both), rows tagged with the side
# that served them, then the medians of each side and their ratio.
#
#   bench/nbd/ab-file.sh OLD_XRAID NEW_XRAID
#   ROUNDS=2 RUNTIME=2 WORKLOADS=seqwrite1m FS=shm bench/nbd/ab-file.sh a b   # smoke run
#
# Environment (defaults in brackets):
#   WORKLOADS  run.sh workloads [seqread1m seqwrite1m randread4k]
#   EXPORTS    run.sh's XRAID_EXPORTS: file, raid5, raid6, or several [file]
#   ROUNDS [5]  RUNTIME seconds per measurement [5]  SIZE [512M]  FS [shm disk]
#   CSV        where the tagged rows go [bench/runs/<date>-<hostname>/nbd-file-ab.csv]
#              (an older file of that name is kept under its modification time)
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 XRAID_BEFORE XRAID_AFTER" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
before=$(realpath "$1") after=$(realpath "$2")
for bin in "$before" "$after"; do
    "$bin" serve --help >/dev/null 2>&1 || { echo "$0: $bin has no working 'serve'" >&2; exit 1; }
done
ROUNDS=${ROUNDS:-5}
csv=${CSV:-"$root/bench/runs/$(date +%Y-%m-%d)-$(hostname)/nbd-file-ab.csv"}
mkdir -p "$(dirname "$csv")"
[ -f "$csv" ] && mv "$csv" "${csv%.csv}.$(date -r "$csv" +%H%M%S).csv"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/xraid-ab-file.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
round_csv=$tmp/round.csv

header_written=0
for round in $(seq 1 "$ROUNDS"); do
    for side in before after; do
        bin=$before; [ $side = after ] && bin=$after
        echo "bench/nbd/ab-file: round $round/$ROUNDS, $side" >&2
        RUNS=1 SERVERS=xraid XRAID_EXPORTS="${EXPORTS:-file}" XRAID="$bin" CSV="$round_csv" \
            RUNTIME="${RUNTIME:-5}" SIZE="${SIZE:-512M}" FS="${FS:-shm disk}" \
            WORKLOADS="${WORKLOADS:-seqread1m seqwrite1m randread4k}" \
            "$here/run.sh" >/dev/null
        if [ $header_written = 0 ]; then
            echo "binary,$(head -1 "$round_csv")" > "$csv"
            header_written=1
        fi
        tail -n +2 "$round_csv" | sed "s/^[0-9]*,/$side,$round,/" >> "$csv"
        rm -f "$round_csv"
    done
done

python3 - "$csv" <<'EOF'
import collections, csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
cells = collections.defaultdict(list)
for r in rows:
    cells[(r["fs"], r["target"], r["workload"], r["binary"])].append(r)
print(f"raw rows: {sys.argv[1]}\n")
print("| fs | export | workload | before | after | after / before | server CPU per I/O before -> after (us) | fio CPU % before -> after |")
print("|---|---|---|---|---|---|---|---|")
def med(rs, key):
    return statistics.median(float(r[key]) for r in rs)
for fs, target, workload in sorted({k[:3] for k in cells}):
    b, a = cells[(fs, target, workload, "before")], cells[(fs, target, workload, "after")]
    if not b or not a:
        continue
    key = "iops" if "4k" in workload else "mb_s"
    unit = "IOPS" if key == "iops" else "MB/s"
    vb, va = med(b, key), med(a, key)
    print(f"| {fs} | {target} | {workload} | {vb:,.0f} {unit} | {va:,.0f} {unit} | {va / vb:.2f} "
          f"| {med(b, 'cpu_us_per_io'):.1f} -> {med(a, 'cpu_us_per_io'):.1f} "
          f"| {med(b, 'client_cpu_pct'):.0f} -> {med(a, 'client_cpu_pct'):.0f} |")
EOF
