#!/usr/bin/env bash
# How long `xraid create` takes over members that hold old contents: with
# --sync-now (the initial resync run before create returns, as every create did
# before 2026-11-28) and without it (the resync left to the background, as md
# does), on the same random member files, against `dd` reading one member in the
# same run. One CSV row per run and way on stdout.
#
#   RUNS=3 SIZE=512M LEVEL=5 MEMBERS=4 DIR=/var/tmp/xraid-create bench/create/initial-sync.sh
set -euo pipefail

XRAID=${XRAID:-target/release/xraid}
RUNS=${RUNS:-3}
SIZE=${SIZE:-512M}
LEVEL=${LEVEL:-5}
MEMBERS=${MEMBERS:-4}
DIR=${DIR:-/var/tmp/xraid-create-bench}

rm -rf "$DIR"
mkdir -p "$DIR/template" "$DIR/array"
trap 'rm -rf "$DIR"' EXIT
for i in $(seq 0 $((MEMBERS - 1))); do
    head -c "$SIZE" /dev/urandom > "$DIR/template/d$i"
done

seconds() { local t0 t1; t0=$(date +%s.%N); "$@" > /dev/null; t1=$(date +%s.%N); echo "$t1 - $t0" | bc; }

echo "run,way,level,members,member_bytes,create_s,dd_one_member_s"
for run in $(seq 1 "$RUNS"); do
    for way in sync-now background; do
        rm -f "$DIR"/array/*
        cp "$DIR"/template/* "$DIR/array/"
        sync
        echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
        dd_s=$(seconds dd if="$DIR/array/d0" of=/dev/null bs=1M iflag=direct status=none)
        echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
        flags=()
        [ "$way" = sync-now ] && flags=(--sync-now)
        members=()
        for i in $(seq 0 $((MEMBERS - 1))); do members+=("$DIR/array/d$i"); done
        create_s=$(seconds "$XRAID" create -l "$LEVEL" "${flags[@]}" "${members[@]}")
        echo "$run,$way,$LEVEL,$MEMBERS,$(stat -c %s "$DIR/array/d0"),$create_s,$dd_s"
    done
done
