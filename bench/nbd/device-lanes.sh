#!/usr/bin/env bash
# The two-lane test without any server: what the device under DIR does to 4 KiB random
# reads (QD1, O_DIRECT) on one file while a sequential write stream (QD8, O_DIRECT) runs
# to another — alone, then beside streams of each block size in STREAM_BS. It is the
# floor for `bench/nbd/run.sh`'s two-lane test when an export's members share that
# device: no server can queue less than the device itself does.
#
#   DIR=/var/tmp RUNTIME=5 STREAM_BS="1M 64k" bench/nbd/device-lanes.sh
#
# Prints one CSV row per measurement (to CSV too, if set): stream block size (none:
# alone), read IOPS, read p50 and p99 completion latency in µs, stream MB/s.
set -euo pipefail
DIR=${DIR:-/var/tmp}
RUNTIME=${RUNTIME:-5}
STREAM_BS=${STREAM_BS:-"1M 64k"}
SIZE=${SIZE:-512M}
command -v fio >/dev/null || { echo "device-lanes: fio is needed (apt-get install fio)" >&2; exit 1; }
work=$(mktemp -d "$DIR/xraid-lanes.XXXXXX")
trap 'rm -rf "$work"' EXIT
fio --name=fill --filename="$work/reads" --rw=write --bs=1M --size="$SIZE" --direct=1 \
    --ioengine=libaio --iodepth=8 --output=/dev/null
read_job=(--name=small --filename="$work/reads" --size="$SIZE" --rw=randread --bs=4k
    --iodepth=1 --direct=1 --ioengine=libaio --time_based --runtime="$RUNTIME")
summary() {
    python3 - "$1" "$2" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
small = next(j for j in d["jobs"] if j["jobname"] == "small")["read"]
stream = [j["write"] for j in d["jobs"] if j["jobname"] == "stream"]
p = small["clat_ns"]["percentile"]
mbs = f'{stream[0]["bw_bytes"] / 1e6:.0f}' if stream else ""
print(f'{sys.argv[2]},{small["iops"]:.0f},{p["50.000000"] / 1000:.0f},{p["99.000000"] / 1000:.0f},{mbs}')
EOF
}
echo "stream_bs,read_iops,read_p50_us,read_p99_us,stream_mb_s" | tee ${CSV:+"$CSV"}
fio --output-format=json "${read_job[@]}" >"$work/out.json"
summary "$work/out.json" none | tee -a ${CSV:+"$CSV"}
for bs in $STREAM_BS; do
    fio --output-format=json "${read_job[@]}" --name=stream --filename="$work/stream" \
        --size="$SIZE" --rw=write --bs="$bs" --iodepth=8 --direct=1 --ioengine=libaio \
        --time_based --runtime="$RUNTIME" >"$work/out.json"
    summary "$work/out.json" "$bs" | tee -a ${CSV:+"$CSV"}
done
