#!/usr/bin/env python3
"""Run one fio invocation against an NBD server and measure the server's CPU time.

    fiorun.py --pid PID --port PORT --ramp SECS --json OUT [--settle SECS] -- fio ARGS...

fio must be given --output-format=json and --lat_percentiles=1 (this script adds
--output=OUT). The server's CPU
time is utime+stime+cutime+cstime summed over PID and all its descendants, read from
/proc/<pid>/stat: threads are included in a process's own counters, and children that
exited (nbd-server forks one per connection) are in their parent's cutime/cstime once
reaped. fio leaves its ramp-time I/Os out of the counts it reports, so the first sample
is taken RAMP seconds after fio's first connection to 127.0.0.1:PORT is established (fio
connects when its job starts, just before the ramp begins; fio's own start-up takes a
few hundred milliseconds, too much to ignore), the second once fio has exited and SETTLE
seconds have passed (so forked connection handlers have been reaped).

Prints one CSV fragment (no header):
    iops,mb_s,ios,runtime_s,server_cpu_s,cpu_us_per_io,clat_p99_us,lat_p50_us,lat_p99_us,stream_mb_s,client_cpu_pct
for jobs[0] (the measured job); stream_mb_s is the throughput of the other jobs (empty if
there are none); client_cpu_pct is fio's own CPU use (usr+sys, % of one core, summed over
jobs: near 100 per job means the client, not the server, sets the pace); cpu_us_per_io divides the server CPU by the I/Os of all jobs. lat is
fio's total latency (submission to completion); clat leaves out the submission, which
with the nbd engine already includes sending the request (and, on a fast server, part
of the round trip), so lat is the one to compare.
"""
import argparse
import json
import os
import subprocess
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")


def proc_table():
    """{pid: (ppid, utime+stime+cutime+cstime)} for every process."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        rest = stat[stat.rindex(")") + 2:].split()  # rest[0] is field 3 (state)
        table[int(name)] = (int(rest[1]), sum(int(x) for x in rest[11:15]))
    return table


def tree_ticks(root):
    table = proc_table()
    if root not in table:
        sys.exit(f"fiorun: server process {root} is gone")
    children = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += table[pid][1]
        todo.extend(children.get(pid, []))
    return total


def established(port):
    """Whether a TCP connection to local port PORT is established."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if fields[3] == "01" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        return True
        except OSError:
            pass
    return False


def io_of(side):
    return side["total_ios"], side["bw_bytes"], side["iops"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--ramp", type=float, required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--settle", type=float, default=0.3)
    ap.add_argument("fio", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.fio[1:] if a.fio and a.fio[0] == "--" else a.fio
    if not cmd:
        sys.exit("fiorun: no fio command")
    cmd = cmd + [f"--output={a.json}"]

    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    before = connected = None
    while proc.poll() is None:
        now = time.monotonic()
        if connected is None:
            if established(a.port):
                connected = now
            elif now - start > 10:
                print("fiorun: warning: no connection seen; timing the ramp from fio's start",
                      file=sys.stderr)
                connected = start
            else:
                time.sleep(0.002)
                continue
        if before is None and now - connected >= a.ramp:
            before = tree_ticks(a.pid)
        time.sleep(0.01)
    if proc.returncode != 0:
        sys.exit(f"fiorun: fio exited with status {proc.returncode}: {' '.join(cmd)}")
    if before is None:
        sys.exit("fiorun: fio finished before its ramp time was over")
    time.sleep(a.settle)
    after = tree_ticks(a.pid)
    cpu_s = (after - before) / TICK

    with open(a.json) as f:
        text = f.read()
    # fio may print notices before the JSON document.
    doc = json.loads(text[text.index("{"):])
    jobs = doc["jobs"]
    for j in jobs:
        if j.get("error"):
            sys.exit(f"fiorun: fio job {j['jobname']} failed with error {j['error']}")
    main_job = jobs[0]
    side = "read" if main_job["read"]["total_ios"] else "write"
    ios, bw, iops = io_of(main_job[side])
    if ios == 0:
        sys.exit(f"fiorun: fio job {main_job['jobname']} did no I/O")
    all_ios = ios
    stream_bw = None
    for j in jobs[1:]:
        for s in ("read", "write"):
            all_ios += j[s]["total_ios"]
            stream_bw = (stream_bw or 0) + j[s]["bw_bytes"]
    runtime_s = main_job[side]["runtime"] / 1000.0
    clat = main_job[side]["clat_ns"].get("percentile", {})
    lat = main_job[side]["lat_ns"].get("percentile")
    if lat is None:
        sys.exit("fiorun: fio reported no total-latency percentiles (--lat_percentiles=1)")
    print(",".join([
        f"{iops:.1f}", f"{bw / 1e6:.2f}", str(ios), f"{runtime_s:.3f}", f"{cpu_s:.2f}",
        f"{cpu_s * 1e6 / all_ios:.3f}", f"{clat.get('99.000000', 0) / 1000:.1f}",
        f"{lat['50.000000'] / 1000:.1f}", f"{lat['99.000000'] / 1000:.1f}",
        "" if stream_bw is None else f"{stream_bw / 1e6:.2f}",
        f"{sum(j['usr_cpu'] + j['sys_cpu'] for j in jobs):.1f}",
    ]))


if __name__ == "__main__":
    main()
