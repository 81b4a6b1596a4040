#!/usr/bin/env python3
"""Client writes while a RAID-5 (or, with LEVEL, another level) is rebuilt: what a
rebuild costs the clients, and how fast it goes under their load.

One 4-member RAID-5 (64K chunk; LEVEL=1 a four-way mirror, LEVEL=6 or 10 those) on DIR, filled with random data and served over a Unix
socket with --rebuild-min MIN (the pace while clients are busy). Each run measures fio's
nbd engine doing 4 KiB random writes at QD32 for RUNTIME seconds, three times:

  whole       every member active;
  degraded    member 1 failed, nothing rebuilding;
  rebuilding  a blank member added in its place (`xraid add --no-rebuild`), the
              recover running under the writes; its progress before and after gives the
              rebuild's rate under load.

FAULTS, space-separated `--fault` options for the server, makes members slow: with
FAULTS="role=0,latency=20ms role=2,latency=20ms role=3,latency=20ms" the members the
rebuild reads answer like disks, and its checkpoints (each a flush and a superblock
update the clients wait for) take 150 ms and more.

While a member is rebuilt, writes over stripes the recover has rebuilt since its last
recorded checkpoint (every 2 s, more where checkpoints are slow) keep the rebuilt member's rows in their stripe-log entry
and use reconstruct-write (docs/RELIABILITY.md): the share of writes that pays for it
grows with the rebuild's pace, so MIN is swept.

  RUNS=3 RUNTIME=8 MINS="10 50" SIZE=512M bench/rebuild/under-load.py
  LEVEL=1 RUNS=2 RUNTIME=5 MINS=300 SIZE=2G XRAID=path/to/xraid bench/rebuild/under-load.py
  FAULTS="role=0,latency=20ms role=2,latency=20ms role=3,latency=20ms" RUNS=1 RUNTIME=20 \
    MINS=50 SIZE=256M bench/rebuild/under-load.py

Raw rows: bench/runs/<date>-<hostname>/rebuild-under-load.csv; prints medians.
"""

import datetime
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def env(name, default):
    return os.environ.get(name, default)


RUNS = int(env("RUNS", "3"))
RUNTIME = int(env("RUNTIME", "8"))
MINS = env("MINS", "10 50").split()
SIZE = env("SIZE", "512M")
LEVEL = env("LEVEL", "5")
DIR = env("DIR", "/dev/shm")
XRAID = env("XRAID", "")
FAULTS = env("FAULTS", "").split()


def log(msg):
    print(f"rebuild-under-load: {msg}", file=sys.stderr, flush=True)


def xraid_binary():
    if XRAID:
        return XRAID
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "xraid"], cwd=TOP, check=True)
    return os.path.join(TOP, "target", "release", "xraid")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fio(sock, rw, bs, depth, out, runtime, size):
    args = ["fio", "--name=c", "--ioengine=nbd", f"--uri=nbd+unix:///?socket={sock}",
            f"--rw={rw}", f"--bs={bs}", f"--iodepth={depth}", f"--size={size}",
            "--output-format=json", f"--output={out}", "--norandommap", "--randrepeat=0"]
    if runtime:
        args += ["--time_based", f"--runtime={runtime}"]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    with open(out) as f:
        write = json.load(f)["jobs"][0]["write"]
    # Completion latency in ms: the 99.9th percentile and the worst, where a pause of
    # the server (a superblock update it waits for) shows.
    clat = write["clat_ns"]
    pct = clat.get("percentile", {})
    p999 = pct.get("99.900000", 0) / 1e6
    return write["iops"], p999, clat["max"] / 1e6


def status(xraid, folder):
    out = subprocess.run([xraid, "status", "--json", folder], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def rebuilt_percent(xraid, folder, role):
    member = status(xraid, folder)["members"][role]
    return member.get("rebuilt_percent") or 0


def one_run(xraid, work, minimum, member_bytes):
    folder = os.path.join(work, "array")
    shutil.rmtree(folder, ignore_errors=True)
    os.mkdir(folder)
    members = [os.path.join(folder, f"d{i}") for i in range(4)]
    # A mirror has no chunk to choose.
    chunk = [] if LEVEL == "1" else ["-c", "64K"]
    subprocess.run([xraid, "create", "-l", LEVEL, *chunk, "--size", str(member_bytes),
                    *members], check=True, stdout=subprocess.DEVNULL)
    made = status(xraid, folder)
    array_bytes, data_bytes = made["array_size_bytes"], made["member_data_bytes"]
    sock = os.path.join(work, "s.sock")
    logf = open(os.path.join(work, "serve.log"), "a")
    faults = [arg for fault in FAULTS for arg in ("--fault", fault)]
    proc = subprocess.Popen([xraid, "serve", "--socket", sock, "--rebuild-min", minimum,
                             "--rebuild-max", minimum, *faults, folder],
                            stdout=logf, stderr=logf)
    try:
        for _ in range(100):
            if os.path.exists(sock):
                break
            time.sleep(0.1)
        else:
            sys.exit("rebuild-under-load: the server did not start")
        fio(sock, "write", "1m", 8, os.path.join(work, "fill.json"), 0, array_bytes)
        rows = {}

        def measure(phase):
            cpu0 = cpu_seconds(proc.pid)
            iops, p999, worst = fio(sock, "randwrite", "4k", 32,
                                    os.path.join(work, "fio.json"), RUNTIME, array_bytes)
            cpu = cpu_seconds(proc.pid) - cpu0
            rows[phase] = (iops, cpu / (iops * RUNTIME) * 1e6, p999, worst)

        measure("whole")
        subprocess.run([xraid, "fail", folder, members[1]], check=True,
                       stdout=subprocess.DEVNULL)
        measure("degraded")
        os.remove(members[1])
        subprocess.run([xraid, "add", "--no-rebuild", "--size", str(member_bytes), folder,
                        members[1]], check=True, stdout=subprocess.DEVNULL)
        before = rebuilt_percent(xraid, folder, 1)
        t0 = time.monotonic()
        measure("rebuilding")
        seconds = time.monotonic() - t0
        after = rebuilt_percent(xraid, folder, 1)
        state = status(xraid, folder)["members"][1]["state"]
        if state != "rebuilding":
            log(f"the rebuild ended during the measurement (min {minimum} MB/s): "
                "make SIZE larger or MINS smaller")
        rate = (after - before) / 100 * data_bytes / seconds / 1e6
        return rows, rate
    finally:
        proc.terminate()
        proc.wait()


def main():
    xraid = xraid_binary()
    member_bytes = int(subprocess.run(["numfmt", "--from=iec", SIZE], check=True,
                                      capture_output=True, text=True).stdout)
    work = tempfile.mkdtemp(prefix="xraid-rebuild-load.", dir=DIR)
    out_dir = os.path.join(TOP, "bench", "runs",
                           f"{datetime.date.today()}-{socket.gethostname()}")
    os.makedirs(out_dir, exist_ok=True)
    csv = os.path.join(out_dir, "rebuild-under-load.csv")
    header = ("date,run,rebuild_min_mb_s,phase,iops,server_cpu_us_per_io,rebuild_mb_s,"
              "p99_9_ms,max_ms,dir,xraid,faults\n")
    if os.path.exists(csv):
        with open(csv) as f:
            if f.readline() != header:
                # Rows of an older form of this script: kept apart.
                os.rename(csv, csv.replace(".csv", f".{int(time.time())}.csv"))
    new = not os.path.exists(csv)
    out = open(csv, "a")
    if new:
        out.write(header)
    results = {}
    try:
        for run in range(1, RUNS + 1):
            for minimum in MINS:
                rows, rate = one_run(xraid, work, minimum, member_bytes)
                for phase, (iops, us, p999, worst) in rows.items():
                    r = f"{rate:.1f}" if phase == "rebuilding" else ""
                    out.write(f"{datetime.date.today()},{run},{minimum},{phase},{iops:.0f},"
                              f"{us:.1f},{r},{p999:.2f},{worst:.2f},{DIR},{xraid},"
                              f"\"{' '.join(FAULTS)}\"\n")
                    results.setdefault((minimum, phase), []).append(
                        (iops, us, rate, p999, worst))
                out.flush()
                log(f"run {run}, min {minimum} MB/s: " + ", ".join(
                    f"{p} {i:.0f} IOPS (p99.9 {q:.1f} ms, max {w:.1f} ms)"
                    for p, (i, _, q, w) in rows.items())
                    + f", rebuild {rate:.1f} MB/s")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("| rebuild min MB/s | phase | IOPS (median) | vs whole | server µs/IO "
          "| p99.9 ms | max ms | rebuild MB/s |")
    print("|---|---|---|---|---|---|---|---|")
    for minimum in MINS:
        whole = statistics.median(c[0] for c in results[(minimum, "whole")])
        for phase in ("whole", "degraded", "rebuilding"):
            cells = results[(minimum, phase)]
            iops = statistics.median(c[0] for c in cells)
            us = statistics.median(c[1] for c in cells)
            p999 = statistics.median(c[3] for c in cells)
            worst = statistics.median(c[4] for c in cells)
            rate = (f"{statistics.median(c[2] for c in cells):.1f}"
                    if phase == "rebuilding" else "")
            print(f"| {minimum} | {phase} | {iops:,.0f} | {iops / whole:.2f} | {us:.1f} "
                  f"| {p999:.1f} | {worst:.1f} | {rate} |")


if __name__ == "__main__":
    main()
