#!/usr/bin/env python3
"""Membership churn on an array that is not served: fail, add (new, back after an
absence, hot spares), replace (recorded, copied at the next open to write), remove,
members moved away and back (stale), writes and check scrubs at random, with the
whole array read back and compared after every step.

    bench/chaos/offline.py [SEED...]      (default: seeds 1-8)

Environment: XRAID (the binary; default target/release/xraid), LEVELS (default
"5 6 1 10 4"; each seed takes the next level in turn), STEPS (per seed, default 60),
INTEGRITY=1 (arrays with per-block checksums), DIR (work folder, default a new one
under /tmp). A check scrub that finds parity or copies disagreeing, or (in integrity
mode) a block failing its checksum, fails the run too: every step ends with a clean
close, and no bit is ever flipped. Moving members away may go past the
redundancy: a read that then fails (the array cannot start) is counted, all members
come back, and the run goes on. Exits non-zero at the first wrong read, printing the
last steps and the seed's folder.
"""
import json
import os
import random
import shutil
import subprocess

from seeds import run_seeds

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
XRAID = os.environ.get("XRAID", os.path.join(REPO, "target", "release", "xraid"))
LEVELS = os.environ.get("LEVELS", "5 6 1 10 4").split()
STEPS = int(os.environ.get("STEPS", "60"))
MEMBERS = {"5": 4, "6": 5, "1": 3, "10": 4, "4": 4}
INTEGRITY = os.environ.get("INTEGRITY") == "1"


def xraid(*args):
    r = subprocess.run([XRAID, *args], capture_output=True)
    return r.returncode, (r.stdout + r.stderr).decode(errors="replace").strip()


def run_seed(seed, level, root):
    rng = random.Random(seed)
    work = os.path.join(root, f"seed{seed}")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(work, "disks"))
    os.makedirs(os.path.join(work, "away"))
    os.chdir(work)
    rc, out = xraid("create", "-l", level, "-c", "64K", "--size", "8M",
                    *(["--integrity"] if INTEGRITY else []),
                    *[f"disks/d{i}" for i in range(MEMBERS[level])])
    if rc != 0:
        return False, f"create failed: {out}"
    size = json.loads(subprocess.run([XRAID, "status", "--json", "disks"],
                                     capture_output=True).stdout)["array_size_bytes"]
    expected = bytearray(rng.randbytes(size))
    with open("image", "wb") as f:
        f.write(expected)
    xraid("write", "-i", "image", "disks")
    fresh, unreadable, log = 0, 0, []

    def new_name():
        nonlocal fresh
        fresh += 1
        return f"disks/n{fresh}"

    for step in range(STEPS):
        status = subprocess.run([XRAID, "status", "--json", "disks"], capture_output=True)
        try:
            members = json.loads(status.stdout).get("members", [])
            left_out = json.loads(status.stdout).get("left_out", [])
            spares = json.loads(status.stdout).get("spares", [])
        except json.JSONDecodeError:
            members, left_out, spares = [], [], []
        active = [m["path"] for m in members if m.get("state") == "active" and m.get("path")]
        faulty = [m["path"] for m in members if m.get("state") == "faulty" and m.get("path")]
        faulty += [l["path"] for l in left_out if isinstance(l, dict) and l.get("path")]
        faulty += [s for s in spares if isinstance(s, str)]
        op = rng.choice(["fail", "add", "spare", "replace", "remove", "away", "back",
                         "write", "scrub"])
        done = None
        if op == "fail" and active:
            done = xraid("fail", "disks", rng.choice(active))
        elif op == "add":
            done = xraid("add", "--size", "8M", "disks", new_name())
        elif op == "spare":
            done = xraid("add", "--spare", "--size", "8M", "disks", new_name())
        elif op == "replace" and active:
            done = xraid("replace", "--no-rebuild", "--size", "8M", "disks",
                         rng.choice(active), new_name())
        elif op == "remove" and faulty:
            done = xraid("remove", "disks", rng.choice(faulty))
        elif op == "away" and os.listdir("disks"):
            name = rng.choice(os.listdir("disks"))
            os.rename(f"disks/{name}", f"away/{name}")
            done = (0, f"moved {name} away")
        elif op == "back" and os.listdir("away"):
            name = rng.choice(os.listdir("away"))
            os.rename(f"away/{name}", f"disks/{name}")
            done = xraid("add", "disks", f"disks/{name}")
            done = (done[0], f"moved {name} back; {done[1]}")
        elif op == "write":
            at = rng.randrange(size // 65536) * 65536
            data = rng.randbytes(min(65536 * rng.randint(1, 8), size - at))
            with open("patch", "wb") as f:
                f.write(data)
            done = xraid("write", "--offset", str(at), "-i", "patch", "disks")
            if done[0] == 0:
                expected[at:at + len(data)] = data
        elif op == "scrub":
            r = subprocess.run([XRAID, "scrub", "check", "--json", "disks"],
                               capture_output=True)
            done = r.returncode, (r.stdout + r.stderr).decode(errors="replace").strip()
            report = json.loads(r.stdout) if r.returncode == 0 else {}
            if report.get("mismatched_units") or report.get("checksum_mismatches"):
                return False, (f"seed {seed} raid{level}: the scrub after step {step} "
                               f"found {done[1][:300]}\n" + "\n".join(log[-15:]))
        log.append(f"{step} {op}: " + (f"rc {done[0]} {done[1][:200]}" if done else "-"))
        rc, out = xraid("read", "-o", "out", "disks")
        if rc != 0:
            unreadable += 1
            log.append(f"  unreadable: {out[:200]}")
            for name in os.listdir("away"):
                os.rename(f"away/{name}", f"disks/{name}")
            continue
        with open("out", "rb") as f:
            if f.read() != bytes(expected):
                return False, (f"seed {seed} raid{level}: wrong data after step {step}\n"
                               + "\n".join(log[-15:]))
    return True, f"seed {seed} raid{level}: {STEPS} steps, {unreadable} unreadable moments"


if __name__ == "__main__":
    run_seeds(run_seed, LEVELS, "xraid-offline-")
