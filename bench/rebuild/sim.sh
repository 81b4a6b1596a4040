#!/usr/bin/env bash
# Rebuild rate vs one member's own rate, on simulated drives: `xraid sim --rebuild` runs
# the real engine's recover in simulated time, each member a separate drive (what a
# rebuild on real disks is, and what /dev/shm members on two cores are not). For each
# case: fail member 1 of a 4-member array (or the case's), rebuild a blank drive alone,
# and compare its rate with the member drive reading and writing its data area alone,
# simulated in the same run. Deterministic: no runs to repeat. Raw CSV in
# bench/runs/<date>-<hostname>/rebuild-sim.csv; prints a table.
#   [CASES="ibm:raid5:64 st:raid6:512 ..."] [XRAID=path/to/xraid] bench/rebuild/sim.sh
# A case is DRIVE:LEVEL:CHUNK_KIB[:MEMBERS]; DRIVE is ibm (IBM 0661-467, 400 MB), st
# (Seagate ST118273, 18 GB) or x25m (Intel X25-M, 80 GB; a minute of host time each).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
CASES=${CASES:-"ibm:raid5:64 ibm:raid5:512 ibm:raid6:512 ibm:raid1:512 ibm:raid10:512 \
st:raid5:64 st:raid5:512 st:raid6:512 st:raid1:512 st:raid10:512 st:raid6:512:8 \
x25m:raid5:512 x25m:raid1:512"}

cd "$root"
if [ -n "${XRAID:-}" ]; then
    xraid=$XRAID
else
    cargo build --release -q -p xraid
    xraid="$root/target/release/xraid"
fi
out="$root/bench/runs/$(date +%Y-%m-%d)-$(hostname)"
mkdir -p "$out"
csv="$out/rebuild-sim.csv"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "drive,level,chunk_kib,members,member_bytes,rebuild_mb_s,member_read_mb_s,member_write_mb_s,vs_read,vs_slower,limit,host_s" > "$csv"
for case in $CASES; do
    IFS=: read -r drive level chunk members <<< "$case"
    members=${members:-4}
    case $drive in
        ibm) preset=ibm_0661_467 ;;
        st) preset=seagate_st118273 ;;
        x25m) preset=intel_x25m_80gb ;;
        *) echo "unknown drive $drive (ibm, st, x25m)" >&2; exit 2 ;;
    esac
    list=$(for _ in $(seq "$members"); do printf '"%s", ' "$preset"; done)
    cat > "$tmp/c.toml" <<TOML
[array]
level = "$level"
chunk_kib = $chunk
members = [${list%, }]
TOML
    start=$(date +%s.%N)
    "$xraid" sim "$tmp/c.toml" --rebuild 1 --json > "$tmp/r.json"
    end=$(date +%s.%N)
    python3 - "$tmp/r.json" "$drive" "$level" "$chunk" "$members" "$start" "$end" >> "$csv" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
r = d["rebuild"]
host = float(sys.argv[7]) - float(sys.argv[6])
print(",".join(str(v) for v in [sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5],
      r["member_bytes"], r["mb_s"], r["member_read_mb_s"], r["member_write_mb_s"],
      r["vs_member_read"], r["vs_member_slower"], d["limit"]["busiest"], f"{host:.1f}"]))
PY
done
python3 - "$csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
print("| drive | level | chunk | members | rebuild MB/s | member read / write MB/s | vs read | vs slower | busiest |")
print("|---|---|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['drive']} | {r['level']} | {r['chunk_kib']} KiB | {r['members']} | {float(r['rebuild_mb_s']):.3f} "
          f"| {float(r['member_read_mb_s']):.3f} / {float(r['member_write_mb_s']):.3f} "
          f"| {float(r['vs_read']):.2f}x | {float(r['vs_slower']):.2f}x | {r['limit']} |")
PY
echo "raw rows: $csv"
