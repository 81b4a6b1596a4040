#!/usr/bin/env bash
# Parity kernels: xraid vs Intel ISA-L (xor_gen, pq_gen, two-data-erasure RAID-6 rebuild).
# Runs both drivers pinned to one core, interleaved, RUNS times each, for data counts
# 4, 8, 16 and chunks 64 KiB, 256 KiB, 1 MiB; writes raw CSV to
# bench/runs/<date>-<hostname>/parity.csv and prints a markdown table of medians.
#   RUNS=5 SECS=0.5 bench/parity/run.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
RUNS=${RUNS:-5}
SECS=${SECS:-0.5}
NS=${NS:-"4 8 16"}
CHUNKS=${CHUNKS:-"65536 262144 1048576"}

if [ ! -f /usr/include/isa-l/raid.h ]; then
    echo "installing libisal-dev" >&2
    sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
    $sudo_cmd apt-get install -y --no-install-recommends libisal-dev >&2
fi

out="$root/bench/runs/$(date +%Y-%m-%d)-$(hostname)"
mkdir -p "$out"
csv="$out/parity.csv"
# Never clobber an earlier run's raw data: keep it under its modification time.
[ -f "$csv" ] && mv "$csv" "$out/parity.$(date -r "$csv" +%H%M%S).csv"

isal_bin="${TMPDIR:-/tmp}/xraid_isal_bench.$$"
trap 'rm -f "$isal_bin"' EXIT
gcc -O2 -Wall -o "$isal_bin" "$here/isal_bench.c" -lisal
cd "$root"
xraid_bin=$(cargo bench -p xraid-parity --bench parity --no-run 2>&1 |
    sed -n 's/.*Executable .*(\(.*\)).*/\1/p' | tail -1)
[ -x "$xraid_bin" ] || { echo "could not find the bench binary" >&2; exit 1; }

pin=()
command -v taskset >/dev/null && pin=(taskset -c 0)

echo "run,impl,kernel,op,n,chunk_bytes,gib_per_s" > "$csv"
for run in $(seq 1 "$RUNS"); do
    for n in $NS; do
        for c in $CHUNKS; do
            echo "run $run/$RUNS: n=$n chunk=$c" >&2
            "${pin[@]}" "$isal_bin" "$n" "$c" "$SECS" | sed "s/^/$run,/" >> "$csv"
            "${pin[@]}" "$xraid_bin" "$n" "$c" "$SECS" | sed "s/^/$run,/" >> "$csv"
        done
    done
done

python3 - "$csv" <<'PY'
import csv, statistics, sys
from collections import defaultdict
rows = list(csv.DictReader(open(sys.argv[1])))
med = defaultdict(list)
for r in rows:
    med[(r["impl"], r["kernel"], r["op"], int(r["n"]), int(r["chunk_bytes"]))].append(float(r["gib_per_s"]))
m = {k: statistics.median(v) for k, v in med.items()}
runs = max(len(v) for v in med.values())
xk = [k for k in ["gfni", "avx512", "avx2", "scalar"] if any(key[1] == k and key[0] == "xraid" for key in m)]
configs = sorted({(k[2], k[3], k[4]) for k in m}, key=lambda c: (["xor_gen", "pq_gen", "recov_2data"].index(c[0]), c[1], c[2]))
print(f"Medians of {runs} runs, GiB/s of data blocks processed (n x chunk per call); ratio = xraid / ISA-L (dispatched).\n")
print("| op | n | chunk | ISA-L | " + " | ".join(f"xraid {k}" for k in xk) + " | best/ISA-L | avx2/ISA-L |")
print("|---|---|---|---|" + "---|" * len(xk) + "---|---|")
def size(c): return f"{c >> 20} MiB" if c >= 1 << 20 else f"{c >> 10} KiB"
for op, n, c in configs:
    isal = m.get(("isal", "auto", op, n, c))
    vals = [m.get(("xraid", k, op, n, c)) for k in xk]
    best = max(v for v in vals if v is not None)
    a2 = m.get(("xraid", "avx2", op, n, c))
    f = lambda v: "-" if v is None else f"{v:.1f}"
    r = lambda v: "-" if (v is None or not isal) else f"{v / isal:.2f}"
    print(f"| {op} | {n} | {size(c)} | {f(isal)} | " + " | ".join(f(v) for v in vals) + f" | {r(best)} | {r(a2)} |")
arch = sorted({(k[1], k[2]) for k in m if k[0] == "isal" and k[1] != "auto"})
if arch:
    print("\nISA-L's arch-specific entry points (context for the per-kernel columns):\n")
    print("| op | n | chunk | " + " | ".join(f"ISA-L {k} {o}" for k, o in arch) + " |")
    print("|---|---|---|" + "---|" * len(arch))
    for n, c in sorted({(k[3], k[4]) for k in m}):
        print(f"| | {n} | {size(c)} | " + " | ".join(f"{m.get(('isal', k, o, n, c), 0):.1f}" for k, o in arch) + " |")
PY
echo "raw: $csv" >&2
