#!/usr/bin/env python3
"""Integrity mode's cost: the same 4-member RAID-5 (64K chunk) made with and without
`--integrity`, filled with random data, each served by its own `xraid serve` on a Unix
socket, and driven by fio's nbd engine across request sizes and numbers of parallel
clients (fio jobs, one NBD connection each). In every cell the two arrays are measured
alternately, run after run (these machines are shared and noisy), and the medians are
compared: throughput (MB/s, IOPS) and the server's CPU (% of one core, and µs per I/O)
with integrity over without, as the readX_check study reported its with/without
ratios.

    bench/integrity/run.py                                  # the full sweep
    RUNS=1 RUNTIME=2 BS="4k 1m" JOBS="1 4" bench/integrity/run.py   # smoke run

Environment:
  RW       fio --rw values [randread read randwrite]
  BS       request sizes [4k 64k 1m]
  JOBS     parallel clients [1 2 4 8]
  IODEPTH  requests in flight per client [8]
  SIZE     array bytes the clients spread over [1G]
  RUNS [3]  RUNTIME seconds per measurement [5]  RAMP seconds [1]
  DIR      where the members live [/dev/shm]
  CSV      raw rows [bench/runs/<date>-<hostname>/integrity.csv]
  XRAID    xraid binary; if unset, `cargo build --release -p xraid` is run
"""
import datetime
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TICK = os.sysconf("SC_CLK_TCK")
env = os.environ.get
RW = env("RW", "randread read randwrite").split()
BS = env("BS", "4k 64k 1m").split()
JOBS = [int(j) for j in env("JOBS", "1 2 4 8").split()]
IODEPTH = int(env("IODEPTH", "8"))
SIZE = env("SIZE", "1G")
RUNS = int(env("RUNS", "3"))
RUNTIME = int(env("RUNTIME", "5"))
RAMP = int(env("RAMP", "1"))
DIR = env("DIR", "/dev/shm")


def log(msg):
    print(f"integrity-bench: {msg}", file=sys.stderr, flush=True)


def size_bytes(text):
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    t = text.strip().lower()
    return int(t[:-1]) * units[t[-1]] if t[-1] in units else int(t)


def xraid_binary():
    if env("XRAID"):
        return env("XRAID")
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "xraid"], cwd=TOP, check=True)
    target = env("CARGO_TARGET_DIR", os.path.join(TOP, "target"))
    return os.path.join(target, "release", "xraid")


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return int(rest[11]) + int(rest[12])  # utime + stime (threads included)


def serve(xraid, folder, sock, logfile):
    proc = subprocess.Popen([xraid, "serve", "--socket", sock, folder],
                            stdout=logfile, stderr=logfile)
    for _ in range(200):
        if os.path.exists(sock):
            return proc
        time.sleep(0.05)
    proc.kill()
    sys.exit(f"integrity-bench: server for {folder} did not start")


def fio(sock, rw, bs, jobs, out, runtime, ramp, size):
    args = ["fio", "--name=c", "--ioengine=nbd", f"--uri=nbd+unix:///?socket={sock}",
            f"--rw={rw}", f"--bs={bs}", f"--iodepth={IODEPTH}", f"--numjobs={jobs}",
            "--group_reporting", f"--size={size // jobs}", f"--offset_increment={size // jobs}",
            "--output-format=json", f"--output={out}", "--norandommap", "--randrepeat=0"]
    if runtime:
        args += ["--time_based", f"--runtime={runtime}", f"--ramp_time={ramp}"]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    with open(out) as f:
        job = json.load(f)["jobs"][0]
    side = job["write"] if "write" in rw else job["read"]
    return side["iops"], side["bw_bytes"] / 1e6, side["total_ios"], (job["usr_cpu"] + job["sys_cpu"]) * jobs


def main():
    xraid = xraid_binary()
    size = size_bytes(SIZE)
    member_mib = size // 3 // (1 << 20) + 4
    work = tempfile.mkdtemp(prefix="xraid-integrity-bench.", dir=DIR)
    out_dir = os.path.join(TOP, "bench", "runs", f"{datetime.date.today()}-{socket.gethostname()}")
    os.makedirs(out_dir, exist_ok=True)
    csv = env("CSV", os.path.join(out_dir, "integrity.csv"))
    new = not os.path.exists(csv)
    rows = open(csv, "a")
    if new:
        rows.write("date,run,config,rw,bs,jobs,iodepth,iops,mb_s,ios,server_cpu_s,server_cpu_pct,cpu_us_per_io,client_cpu_pct\n")
    servers = {}
    try:
        for config in ("plain", "integrity"):
            folder = os.path.join(work, config)
            os.mkdir(folder)
            members = [os.path.join(folder, f"m{i}") for i in range(4)]
            extra = ["--integrity"] if config == "integrity" else []
            subprocess.run([xraid, "create", "-l", "5", "-c", "64K", "--size", f"{member_mib}M",
                            *extra, *members], check=True, stdout=subprocess.DEVNULL)
            sock = os.path.join(work, f"{config}.sock")
            logf = open(os.path.join(work, f"{config}.log"), "w")
            servers[config] = (serve(xraid, folder, sock, logf), sock)
            # Filled with random data first, so every read is of real blocks.
            fio(sock, "write", "1m", 1, os.path.join(work, "fill.json"), 0, 0, size)
            log(f"{config}: {member_mib} MiB members, filled")
        results = {}
        for rw in RW:
            for bs in BS:
                for jobs in JOBS:
                    for run in range(1, RUNS + 1):
                        # Alternate which array goes first.
                        order = ("plain", "integrity") if run % 2 else ("integrity", "plain")
                        for config in order:
                            proc, sock = servers[config]
                            t0 = cpu_ticks(proc.pid)
                            w0 = time.monotonic()
                            iops, mb_s, ios, client = fio(sock, rw, bs, jobs,
                                                          os.path.join(work, "fio.json"),
                                                          RUNTIME, RAMP, size)
                            wall = time.monotonic() - w0
                            cpu_s = (cpu_ticks(proc.pid) - t0) / TICK
                            # The ramp's CPU is in cpu_s but not its I/Os: scale to the
                            # measured part.
                            cpu_s_measured = cpu_s * RUNTIME / max(wall, RUNTIME)
                            cpu_pct = 100 * cpu_s_measured / RUNTIME
                            per_io = 1e6 * cpu_s_measured / max(ios, 1)
                            rows.write(f"{datetime.datetime.now().isoformat(timespec='seconds')},{run},{config},{rw},{bs},{jobs},{IODEPTH},"
                                       f"{iops:.1f},{mb_s:.2f},{ios},{cpu_s:.2f},{cpu_pct:.1f},{per_io:.2f},{client:.1f}\n")
                            rows.flush()
                            results.setdefault((rw, bs, jobs, config), []).append((iops, mb_s, cpu_pct, per_io))
                    p = [statistics.median(v[0] for v in results[(rw, bs, jobs, "plain")]), None]
                    i = statistics.median(v[0] for v in results[(rw, bs, jobs, "integrity")])
                    log(f"{rw} {bs} x{jobs}: integrity/plain IOPS {i / p[0]:.3f}")
        print(f"{'rw':<10}{'bs':>5}{'jobs':>5}  {'plain MB/s':>10}{'integ MB/s':>11}{'ratio':>7}"
              f"  {'plain IOPS':>10}{'integ IOPS':>11}  {'CPU% p/i':>11}  {'us/IO p/i':>12}")
        for rw in RW:
            for bs in BS:
                for jobs in JOBS:
                    med = {c: [statistics.median(v[k] for v in results[(rw, bs, jobs, c)]) for k in range(4)]
                           for c in ("plain", "integrity")}
                    pl, it = med["plain"], med["integrity"]
                    print(f"{rw:<10}{bs:>5}{jobs:>5}  {pl[1]:>10.0f}{it[1]:>11.0f}{it[1] / pl[1]:>7.3f}"
                          f"  {pl[0]:>10.0f}{it[0]:>11.0f}  {pl[2]:>5.0f}/{it[2]:<5.0f}  {pl[3]:>6.1f}/{it[3]:<5.1f}")
        log(f"rows appended to {csv}")
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait()
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
