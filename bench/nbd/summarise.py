#!/usr/bin/env python3
"""Markdown tables of medians from bench/nbd/run.sh's nbd.csv (standard library only).

    python3 bench/nbd/summarise.py bench/runs/<date>-<host>/nbd.csv
"""
import csv
import statistics
import sys
from collections import defaultdict

FS_LABEL = {"shm": "/dev/shm (tmpfs)", "disk": "local disk (/var/tmp)"}
FS_ORDER = ["shm", "disk"]
PEERS = ["nbdkit", "qemu-nbd", "nbd-server"]
# (workload, title, metric column, unit)
MAIN = [
    ("randread4k", "4K rand read QD32", "iops", "IOPS"),
    ("randread4k2j", "4K rand read, 2 jobs x QD16", "iops", "IOPS"),
    ("randwrite4k", "4K rand write QD32", "iops", "IOPS"),
    ("randwrite4k2j", "4K rand write, 2 jobs x QD16", "iops", "IOPS"),
    ("seqread1m", "1M seq read QD8", "mb_s", "MB/s"),
    ("seqread1m2j", "1M seq read, 2 jobs x QD4", "mb_s", "MB/s"),
    ("seqwrite1m", "1M seq write QD8", "mb_s", "MB/s"),
    ("seqwrite1m2j", "1M seq write, 2 jobs x QD4", "mb_s", "MB/s"),
    ("seqwrite4k", "4K seq write QD32", "iops", "IOPS"),
    ("syncwrite4k", "4K rand write QD1 + flush each", "iops", "IOPS"),
]
# workload -> (factor over nbdkit or None, factor over the best peer)
TARGETS = {
    "randread4k": (1.5, 1.2),
    "randread4k2j": (1.5, 1.2),
    "randwrite4k": (None, 1.2),
    "randwrite4k2j": (None, 1.2),
    "seqread1m": (None, 1.2),
    "seqread1m2j": (None, 1.2),
    "seqwrite1m": (None, 1.2),
    "seqwrite1m2j": (None, 1.2),
    # No target: how a RAID-5's stripe log fares with small writes in a row.
    "seqwrite4k": (None, None),
    # No target: a flush's latency after each small write (a database's commits).
    "syncwrite4k": (None, None),
}
TWOLANE_MAX = 3.0


def fnum(v):
    return float(v) if v not in (None, "") else None


def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt_metric(v, unit):
    if v is None:
        return "-"
    if unit == "IOPS":
        return f"{v / 1000:.1f}k"
    return f"{v:.0f}"


def fmt_ratio(a, b):
    return "-" if a is None or not b else f"{a / b:.2f}"


def main(path):
    rows = list(csv.DictReader(open(path)))
    if not rows:
        sys.exit(f"{path}: no rows")
    groups = defaultdict(list)
    for r in rows:
        groups[(r["fs"], r["server"], r["target"], r["workload"])].append(r)

    def m(fs, server, target, workload, col):
        return med(fnum(r.get(col)) for r in groups.get((fs, server, target, workload), []))

    runs = sorted({len(v) for v in groups.values()})
    runs_text = str(runs[0]) if len(runs) == 1 else f"{runs[0]}-{runs[-1]}"
    fss = [f for f in FS_ORDER if any(k[0] == f for k in groups)]
    fss += sorted({k[0] for k in groups} - set(fss))
    servers = {k[1] for k in groups}
    cols = []
    if ("xraid", "file") in {(k[1], k[2]) for k in groups}:
        cols.append(("xraid", "file", "xraid file"))
    if ("xraid", "raid5") in {(k[1], k[2]) for k in groups}:
        cols.append(("xraid", "raid5", "xraid RAID-5"))
    peers = [p for p in PEERS if p in servers]
    cols += [(p, "file", p) for p in peers]
    have_xraid = any(c[0] == "xraid" for c in cols)

    print(f"Medians of {runs_text} runs per cell. Cell: IOPS or MB/s (10^6 B/s); in brackets "
          "the server's CPU time per I/O (utime+stime of the server process, its threads and "
          "children, over fio's measured I/Os) and fio's own CPU use in % of one core (near 100: "
          "the single-threaded client, not the server, sets the pace).")
    if have_xraid and peers:
        print("Ratios are xraid / peer on medians; \"best\" is the best of "
              + ", ".join(peers) + " for that row.")
    workloads = {k[3] for k in groups}
    for fs in fss:
        rows_here = [w for w in MAIN if w[0] in workloads and any(k[0] == fs and k[3] == w[0] for k in groups)]
        if not rows_here:
            continue
        print(f"\n#### {FS_LABEL.get(fs, fs)}\n")
        head = ["workload"] + [c[2] for c in cols]
        if have_xraid and peers:
            head += ["file / nbdkit", "file / best", "RAID-5 / best", "target", "met (file, RAID-5)"]
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for wl, title, col, unit in rows_here:
            cells = [f"{title} ({unit})"]
            vals = {}
            for server, target, _ in cols:
                v = m(fs, server, target, wl, col)
                cpu = m(fs, server, target, wl, "cpu_us_per_io")
                client = m(fs, server, target, wl, "client_cpu_pct")
                vals[(server, target)] = v
                extra = [] if cpu is None else [f"{cpu:.1f} µs"]
                extra += [] if client is None else [f"fio {client:.0f}%"]
                cells.append(fmt_metric(v, unit) + (f" ({', '.join(extra)})" if extra else ""))
            if have_xraid and peers:
                peer_vals = [vals[(p, "file")] for p in peers if vals.get((p, "file"))]
                best = max(peer_vals) if peer_vals else None
                nbdkit = vals.get(("nbdkit", "file"))
                xf, xr = vals.get(("xraid", "file")), vals.get(("xraid", "raid5"))
                f_nbdkit, f_best = TARGETS[wl]
                cells += [fmt_ratio(xf, nbdkit), fmt_ratio(xf, best), fmt_ratio(xr, best)]
                goal = []
                if f_nbdkit:
                    goal.append(f"≥ {f_nbdkit}× nbdkit")
                if f_best:
                    goal.append(f"≥ {f_best}× best")
                cells.append(", ".join(goal) or "-")

                def met(x):
                    if not f_best or x is None or best is None or (f_nbdkit and nbdkit is None):
                        return "-"
                    ok = x >= f_best * best and (not f_nbdkit or x >= f_nbdkit * nbdkit)
                    return "yes" if ok else "no"
                cells.append(f"{met(xf)}, {met(xr)}")
            print("| " + " | ".join(cells) + " |")

    lanes = sorted({(k[0], k[1], k[2]) for k in groups if k[3] == "twolane_alone"},
                   key=lambda k: (fss.index(k[0]) if k[0] in fss else 99,
                                  (["xraid"] + PEERS).index(k[1]) if k[1] in ["xraid"] + PEERS else 99,
                                  k[2]))
    if lanes:
        print("\n#### Two lanes: 4K random read QD1 on one connection, alone and beside a 1M "
              "sequential write stream (QD8) on another\n")
        print("p99 latency of the 4K reads in µs, submission to completion (fio's total "
              f"latency, lat); ratio = with stream / alone, target ≤ {TWOLANE_MAX:g}. "
              "clat ratio: the same from fio's clat, which with the nbd engine leaves out "
              "sending the request (context only).\n")
        print("| fs | server | export | p99 alone | p99 with stream | ratio | met | clat ratio | 4K IOPS alone / with stream | stream MB/s |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for fs, server, target in lanes:
            a = m(fs, server, target, "twolane_alone", "lat_p99_us")
            b = m(fs, server, target, "twolane_loaded", "lat_p99_us")
            ca = m(fs, server, target, "twolane_alone", "clat_p99_us")
            cb = m(fs, server, target, "twolane_loaded", "clat_p99_us")
            ia = m(fs, server, target, "twolane_alone", "iops")
            ib = m(fs, server, target, "twolane_loaded", "iops")
            st = m(fs, server, target, "twolane_loaded", "stream_mb_s")
            ratio = None if a is None or b is None or not a else b / a
            met = "-" if ratio is None else ("yes" if ratio <= TWOLANE_MAX else "no")
            f = lambda v, d=0: "-" if v is None else f"{v:.{d}f}"
            export = "RAID-5" if target == "raid5" else target
            print(f"| {fs} | {server} | {export} | {f(a)} | {f(b)} | {f(ratio, 2)} | {met} | "
                  f"{fmt_ratio(cb, ca)} | {f(ia)} / {f(ib)} | {f(st)} |")

if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip())
    main(sys.argv[1])
