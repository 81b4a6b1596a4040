#!/usr/bin/env python3
"""Membership churn under load: while fio writes through NBD (with verify headers),
fail, add back, replace, remove, add spares and scrub at random through the control
socket; then wait for the array to settle, verify every block fio wrote, and scrub.

    bench/chaos/membership.py [SEED...]        (default: seeds 1-8)

Environment: XRAID (the binary; default target/release/xraid), LEVELS (default
"5 6 10 1"; each seed takes the next level in turn), INTEGRITY=1 (arrays in
integrity mode), RATE (fio's write rate per job, default 6m), DIR (work folder,
default a new one under /tmp), VERBOSE=1 (print each refusal). Needs fio with its
nbd engine. Exits non-zero at the first seed whose verify or scrub fails, printing
its folder (the server's log is serve.log there). One line per seed on stdout.
"""
import json
import os
import random
import shutil
import signal
import subprocess
import time

from seeds import run_seeds

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
XRAID = os.environ.get("XRAID", os.path.join(REPO, "target", "release", "xraid"))
LEVELS = os.environ.get("LEVELS", "5 6 10 1").split()
INTEGRITY = os.environ.get("INTEGRITY") == "1"
RATE = os.environ.get("RATE", "6m")
# Members per level, and how many may be out at once.
SHAPE = {"5": (5, 1), "6": (6, 2), "1": (3, 2), "10": (4, 1)}


def xraid(*args):
    return subprocess.run([XRAID, *args], capture_output=True, text=True)


def status():
    r = xraid("status", "--json", "disks")
    try:
        return json.loads(r.stdout)
    except json.JSONDecodeError:
        return {}


def one_op(rng, st, tolerance, fresh):
    """Picks and runs one membership operation; returns (name, result) or None."""
    members = st.get("members", [])
    active = [m["path"] for m in members if m.get("state") == "active" and m.get("path")]
    faulty = [m["path"] for m in members if m.get("state") == "faulty" and m.get("path")]
    out = sum(1 for m in members if m.get("state") != "active")
    op = rng.choice(["fail", "fail", "add", "add", "replace", "remove", "spare", "scrub"])
    if op == "fail" and out < tolerance and active:
        return op, xraid("fail", "disks", rng.choice(active))
    if op == "add":
        if faulty:
            return op, xraid("add", "--no-rebuild", "disks", rng.choice(faulty))
        return op, xraid("add", "--no-rebuild", "--size", "64M", "disks", fresh())
    if op == "replace" and active:
        return op, xraid("replace", "--no-rebuild", "--size", "64M", "disks", rng.choice(active), fresh())
    if op == "remove" and faulty:
        return op, xraid("remove", "disks", rng.choice(faulty))
    if op == "spare":
        return op, xraid("add", "--spare", "--size", "64M", "disks", fresh())
    if op == "scrub":
        return op, xraid("scrub", "check", "disks")
    return None


def run_seed(seed, level, root):
    rng = random.Random(seed)
    work = os.path.join(root, f"seed{seed}")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(work, "disks"))
    os.chdir(work)
    members, tolerance = SHAPE[level]
    create = ["create", "-l", level, "-c", "64K", "--size", "64M"]
    create += ["--integrity"] if INTEGRITY else []
    r = xraid(*create, *[f"disks/d{i}" for i in range(members)])
    if r.returncode != 0:
        return False, f"create failed: {r.stderr.strip()}"
    socket = os.path.join(work, "s.sock")
    log = open("serve.log", "w")
    server = subprocess.Popen(
        [XRAID, "serve", "--socket", socket, "--rebuild-min", "20", "--rebuild-max", "200", "disks"],
        stdout=log, stderr=log)
    for _ in range(100):
        if os.path.exists(socket):
            break
        time.sleep(0.05)
    size = status().get("array_size_bytes", 0)
    per_job = size // 2 // (1 << 20) * (1 << 20)
    fio = ["fio", "--name=churn", "--ioengine=nbd", f"--uri=nbd+unix:///xraid?socket={socket}",
           "--rw=randwrite", "--bsrange=4k-64k", "--blockalign=4k", f"--size={per_job}",
           "--numjobs=2", "--iodepth=8", "--verify=crc32c", f"--offset_increment={per_job}",
           "--group_reporting", f"--randseed={seed}"]
    writer = subprocess.Popen(fio + [f"--rate={RATE}", "--do_verify=0", "--fsync=32",
                                     "--output=fio-write.txt"])
    count = [0]

    def fresh():
        count[0] += 1
        return f"disks/n{count[0]}"

    ops, refused = 0, 0
    while writer.poll() is None:
        time.sleep(rng.uniform(0.1, 0.6))
        done = one_op(rng, status(), tolerance, fresh)
        if done:
            ops += 1
            refused += done[1].returncode != 0
            if done[1].returncode != 0 and os.environ.get("VERBOSE") == "1":
                print(f"  refused {done[0]}: {done[1].stderr.strip()}", flush=True)
    # Settled: no sync running (a recover, the resync after it, or a scrub).
    for _ in range(240):
        st = status()
        if not st.get("sync"):
            break
        time.sleep(0.5)
    states = [m.get("state") for m in st.get("members", [])]
    verify = subprocess.run(fio + ["--verify_only=1", "--output=fio-verify.txt"])
    check = xraid("scrub", "check", "--json", "disks")
    try:
        mismatched = json.loads(check.stdout)["mismatched_units"]
    except (json.JSONDecodeError, KeyError):
        mismatched = None
    server.send_signal(signal.SIGTERM)
    stopped = server.wait()
    ok = writer.returncode == 0 and verify.returncode == 0 and mismatched == 0 and stopped == 0
    line = (f"seed {seed} raid{level}{' integrity' if INTEGRITY else ''}: {ops} operations "
            f"({refused} refused), members {states}, fio write rc {writer.returncode}, "
            f"verify rc {verify.returncode}, scrub mismatches {mismatched}, server exit {stopped}")
    return ok, line


if __name__ == "__main__":
    run_seeds(run_seed, LEVELS, "xraid-chaos-")
