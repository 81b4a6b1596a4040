"""What both churn scripts share: running seeds in turn, each at the next level."""
import os
import shutil
import sys
import tempfile


def run_seeds(run_seed, levels, prefix):
    """Runs `run_seed(seed, level, root)` for the seeds on the command line (1-8 by
    default), each at the next of `levels`, in a work folder under $DIR or a new
    temporary one; stops at the first failure, leaving its folder, else removes it."""
    seeds = [int(s) for s in sys.argv[1:]] or list(range(1, 9))
    root = os.environ.get("DIR") or tempfile.mkdtemp(prefix=prefix)
    for i, seed in enumerate(seeds):
        ok, line = run_seed(seed, levels[i % len(levels)], root)
        print(line, flush=True)
        if not ok:
            print(f"FAILED: see {root}/seed{seed}", flush=True)
            sys.exit(1)
    shutil.rmtree(root, ignore_errors=True)
