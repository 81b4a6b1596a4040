#!/usr/bin/env bash
# NBD servers: xraid against nbdkit (file plugin), qemu-nbd and nbd-server, with fio's nbd
# engine as the client over loopback TCP (127.0.0.1 only).
#
# Every server serves the same pre-filled file, once on /dev/shm and once on the local
# disk (/var/tmp); xraid also serves a 4-member RAID-5 (64 KiB chunk, members on the same
# fs, filled through xraid first). Workloads: 4 KiB random read and write at QD32 (IOPS),
# 1 MiB sequential read and write at QD8 (MB/s), each with the server's CPU time per I/O
# (/proc/<pid>/stat utime+stime of the server, its threads and children); and the
# two-lane test (xraid only by default): p99 of 4 KiB random reads at QD1 on one
# connection, alone and while another connection streams 1 MiB writes at QD8.
# Servers are restarted for every run and their order rotates from run to run; the
# medians over RUNS runs are compared. Raw rows go to bench/runs/<date>-<hostname>/nbd.csv
# (an older file of that name is kept under its modification time); a markdown report
# goes to stdout, progress to stderr.
#
#   bench/nbd/run.sh                                   # RUNS=5 RUNTIME=10 SIZE=1G, all
#   RUNS=1 RUNTIME=2 SIZE=256M bench/nbd/run.sh        # smoke run, a few minutes
#   SERVERS="nbdkit qemu-nbd nbd-server" FS=shm WORKLOADS="randread4k twolane" \
#       TWOLANE_SERVERS="xraid nbdkit" bench/nbd/run.sh
#
# Environment (defaults in brackets):
#   SERVERS     servers to compare [xraid nbdkit qemu-nbd nbd-server]
#   XRAID_EXPORTS  xraid exports to measure: file, raid5, raid6 (5 members, 64 KiB chunk,
#                  the same data disks as the RAID-5) [file raid5]
#   XRAID_SERVE_ARGS  more flags for xraid serve, e.g. "--consistency resync" []
#   XRAID_CREATE_ARGS more flags for xraid create of the RAID-5 and RAID-6, e.g. "--bitmap none" []
#   WORKLOADS   [randread4k randwrite4k seqread1m seqwrite1m twolane]; also randread4k2j,
#               randwrite4k2j, seqread1m2j, seqwrite1m2j (the same queue depth from two
#               fio jobs, two connections: one job's own core is the limit otherwise),
#               seqwrite4k (4 KiB sequential writes at QD32: a RAID-5's small writes
#               in a row, which its stripe log meets stripe after stripe), syncwrite4k
#               (4 KiB random writes at QD1, each followed by a flush: a database's
#               commits, where a flush's latency is the client's)
#   TWOLANE_SERVERS  servers the two-lane test runs against [xraid]
#   FS          [shm disk]; SHM_DIR [/dev/shm], DISK_DIR [/var/tmp]
#   SIZE        bytes of the export that fio uses, K/M/G suffixes (binary) [1G]
#   RUNS [5]  RUNTIME seconds per measurement [10]  RAMP seconds [2, or 1 if RUNTIME < 10]
#   XRAID       xraid binary; if unset, `cargo build --release -p xraid` is run and
#               ${CARGO_TARGET_DIR:-target}/release/xraid is used
#   READY_TIMEOUT seconds to wait for a server to answer [30]; KEEP=1 keeps the data files
#   CSV         where the raw rows go [bench/runs/<date>-<hostname>/nbd.csv]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
RUNS=${RUNS:-5}
RUNTIME=${RUNTIME:-10}
RAMP=${RAMP:-$([ "$RUNTIME" -ge 10 ] && echo 2 || echo 1)}
SIZE=${SIZE:-1G}
SERVERS=${SERVERS:-"xraid nbdkit qemu-nbd nbd-server"}
XRAID_EXPORTS=${XRAID_EXPORTS:-"file raid5"}
XRAID_SERVE_ARGS=${XRAID_SERVE_ARGS:-}
XRAID_CREATE_ARGS=${XRAID_CREATE_ARGS:-}
WORKLOADS=${WORKLOADS:-"randread4k randwrite4k seqread1m seqwrite1m twolane"}
TWOLANE_SERVERS=${TWOLANE_SERVERS:-xraid}
FS=${FS:-"shm disk"}
SHM_DIR=${SHM_DIR:-/dev/shm}
DISK_DIR=${DISK_DIR:-/var/tmp}
READY_TIMEOUT=${READY_TIMEOUT:-30}
KEEP=${KEEP:-0}

die() { echo "bench/nbd: error: $*" >&2; exit 1; }
log() { echo "bench/nbd: $*" >&2; }

# ---- arguments -----------------------------------------------------------------------
for v in RUNS RUNTIME RAMP READY_TIMEOUT; do
    [[ ${!v} =~ ^[0-9]+$ ]] && [ "${!v}" -gt 0 ] || die "$v must be a positive integer (got '${!v}')"
done
size_bytes=$(numfmt --from=iec "$SIZE" 2>/dev/null) || die "SIZE '$SIZE' is not a size (e.g. 256M, 1G)"
[ $((size_bytes % (1 << 20))) -eq 0 ] && [ "$size_bytes" -gt 0 ] || die "SIZE must be a whole number of MiB"
size_mib=$((size_bytes >> 20))
targets=()
for s in $SERVERS; do
    case $s in
        xraid)
            for e in $XRAID_EXPORTS; do
                case $e in file|raid5|raid6) targets+=("xraid:$e") ;; *) die "unknown xraid export '$e' (file raid5 raid6)" ;; esac
            done ;;
        nbdkit|qemu-nbd|nbd-server) targets+=("$s:file") ;;
        *) die "unknown server '$s' (xraid nbdkit qemu-nbd nbd-server)" ;;
    esac
done
[ ${#targets[@]} -gt 0 ] || die "SERVERS is empty"
for w in $WORKLOADS; do
    case $w in randread4k|randread4k2j|randwrite4k|randwrite4k2j|seqread1m|seqread1m2j|seqwrite1m|seqwrite1m2j|seqwrite4k|syncwrite4k|twolane) ;; *)
        die "unknown workload '$w' (randread4k randread4k2j randwrite4k randwrite4k2j seqread1m seqread1m2j seqwrite1m seqwrite1m2j seqwrite4k syncwrite4k twolane)" ;; esac
done
for f in $FS; do
    case $f in shm|disk) ;; *) die "unknown FS '$f' (shm disk)" ;; esac
done
fs_dir() { if [ "$1" = shm ]; then echo "$SHM_DIR"; else echo "$DISK_DIR"; fi; }

# ---- tools ---------------------------------------------------------------------------
need_install=0
for c in fio nbdkit qemu-nbd nbd-server nbdinfo; do command -v "$c" >/dev/null || need_install=1; done
if [ "$need_install" = 1 ]; then
    log "installing fio nbdkit nbd-server qemu-utils libnbd-bin"
    sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
    $sudo_cmd apt-get update >&2
    $sudo_cmd apt-get install -y --no-install-recommends fio nbdkit nbd-server qemu-utils libnbd-bin >&2
fi
fio --enghelp 2>/dev/null | grep -qx '[[:space:]]*nbd' || die "this fio has no nbd engine (needs fio built with libnbd)"
nbdkit file --dump-plugin >/dev/null 2>&1 || die "nbdkit's file plugin is missing"

xraid=""
if [[ " $SERVERS " == *" xraid "* ]]; then
    if [ -n "${XRAID:-}" ]; then
        xraid=$XRAID
    else
        log "building xraid: cargo build --release -p xraid"
        (cd "$root" && cargo build --release -p xraid >&2) || die "cargo build --release -p xraid failed"
        xraid="${CARGO_TARGET_DIR:-$root/target}/release/xraid"
    fi
    [ -x "$xraid" ] || die "no xraid binary at $xraid"
    "$xraid" serve --help >/dev/null 2>&1 || die "$xraid has no working 'serve' command"
fi

# ---- output --------------------------------------------------------------------------
csv=${CSV:-"$root/bench/runs/$(date +%Y-%m-%d)-$(hostname)/nbd.csv"}
mkdir -p "$(dirname "$csv")"
# Never clobber an earlier run's raw data: keep it under its modification time.
[ -f "$csv" ] && mv "$csv" "${csv%.csv}.$(date -r "$csv" +%H%M%S).csv"
echo "run,fs,server,target,workload,iops,mb_s,ios,runtime_s,server_cpu_s,cpu_us_per_io,clat_p99_us,lat_p50_us,lat_p99_us,stream_mb_s,client_cpu_pct" > "$csv"

# ---- servers -------------------------------------------------------------------------
work=$(mktemp -d "${TMPDIR:-/tmp}/xraid-nbd.XXXXXX")
data_dirs=""
running=""     # pids of servers we started and have not stopped yet
srv_pid="" srv_port="" srv_uri="" srv_log="" n_log=0 cur_fs="" cur_dir=""

alive() { # pid: running and not a zombie
    local st
    st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
    [ -n "$st" ] && [ "$st" != Z ]
}
stop_pid() {
    local p=$1 i rc=0
    running=$(echo " $running " | sed "s/ $p / /; s/^ *//; s/ *$//")
    kill -TERM "$p" 2>/dev/null || return 0
    for i in $(seq 300); do alive "$p" || break; sleep 0.1; done
    if alive "$p"; then
        log "warning: server $p did not stop within 30 s of SIGTERM; killing it"
        kill -KILL "$p" 2>/dev/null || true
    fi
    wait "$p" 2>/dev/null || rc=$?
    # 143 = killed by the SIGTERM we sent (servers that do not catch it).
    [ "$rc" = 0 ] || [ "$rc" = 143 ] || [ "$rc" = 127 ] || log "warning: server $p exited with status $rc"
}
cleanup() {
    local rc=$? p
    set +e
    for p in $running; do stop_pid "$p"; done
    if [ "$KEEP" = 1 ]; then
        log "kept data in:$data_dirs and logs in $work"
    else
        for p in $data_dirs; do rm -rf "$p"; done
        [ "$rc" = 0 ] && rm -rf "$work" || log "server and fio logs kept in $work"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start_server SERVER TARGET DIR: sets srv_pid, srv_uri; returns once nbdinfo gets an answer.
start_server() {
    local server=$1 target=$2 dir=$3 port name="" i
    port=$(free_port)
    n_log=$((n_log + 1))
    srv_log="$work/$(printf %03d "$n_log")-$cur_fs-$server-$target.log"
    case $server in
        nbdkit)
            # -t 16 is nbdkit's default thread count, spelled out; default page-cache I/O.
            nbdkit --foreground --exit-with-parent --ipaddr 127.0.0.1 --port "$port" \
                --threads 16 file file="$dir/plain.img" >"$srv_log" 2>&1 &
            srv_pid=$! ;;
        qemu-nbd)
            # writeback cache (page cache, like the other servers) and the thread pool:
            # qemu-nbd's defaults, spelled out. --shared=8 lets several clients connect.
            qemu-nbd --persistent --shared=8 --format=raw --bind 127.0.0.1 --port "$port" \
                --cache=writeback --aio=threads "$dir/plain.img" >"$srv_log" 2>&1 &
            srv_pid=$! ;;
        nbd-server)
            # nbd-server forks one process per connection, which only happens when it
            # daemonizes (-d also stops the per-client fork); its pid comes from -p.
            name=bench
            cat > "$work/nbd-server.conf" <<EOF
[generic]
listenaddr = 127.0.0.1
port = $port
[$name]
exportname = $dir/plain.img
flush = true
fua = true
EOF
            rm -f "$work/nbd-server.pid"
            nbd-server -C "$work/nbd-server.conf" -p "$work/nbd-server.pid" >"$srv_log" 2>&1 ||
                { cat "$srv_log" >&2; die "nbd-server did not start"; }
            for i in $(seq 100); do [ -s "$work/nbd-server.pid" ] && break; sleep 0.05; done
            [ -s "$work/nbd-server.pid" ] || { cat "$srv_log" >&2; die "nbd-server wrote no pid file"; }
            srv_pid=$(cat "$work/nbd-server.pid") ;;
        xraid)
            name=bench
            local paths=("$dir/plain.img")
            [ "$target" = raid5 ] && paths=("$dir"/raid/m{0,1,2,3}.img)
            [ "$target" = raid6 ] && paths=("$dir"/raid6/m{0,1,2,3,4}.img)
            # shellcheck disable=SC2086 # XRAID_SERVE_ARGS is a list of flags
            "$xraid" serve --listen "127.0.0.1:$port" --name "$name" $XRAID_SERVE_ARGS "${paths[@]}" >"$srv_log" 2>&1 &
            srv_pid=$! ;;
    esac
    running="$running $srv_pid"
    srv_port=$port
    srv_uri="nbd://127.0.0.1:$port/$name"
    local deadline=$((SECONDS + READY_TIMEOUT)) size
    until size=$(nbdinfo --size "$srv_uri" 2>/dev/null); do
        if ! alive "$srv_pid"; then
            cat "$srv_log" >&2; die "$server ($target on $dir) exited before it answered on $srv_uri"
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            cat "$srv_log" >&2; die "$server ($target on $dir) did not answer on $srv_uri within ${READY_TIMEOUT} s"
        fi
        sleep 0.1
    done
    [ "$size" -ge "$size_bytes" ] || die "$server ($target) exports $size bytes, less than SIZE=$size_bytes"
}
stop_server() { stop_pid "$srv_pid"; srv_pid=""; }

# ---- measurements --------------------------------------------------------------------
# one RUN FS SERVER TARGET LABEL FIO-JOB-ARGS...: one fio invocation, one CSV row.
one() {
    local run=$1 fs=$2 server=$3 target=$4 label=$5 line
    shift 5
    local common=(--ioengine=nbd "--uri=$srv_uri" --size="$size_bytes" --time_based
        --runtime="$RUNTIME" --ramp_time="$RAMP" --norandommap --randrepeat=0
        --lat_percentiles=1 --output-format=json)
    line=$(python3 "$here/fiorun.py" --pid "$srv_pid" --port "$srv_port" --ramp "$RAMP" --json "$work/fio.json" \
        -- fio "${common[@]}" "$@" 2>"$work/fio.err") ||
        { cat "$work/fio.err" "$srv_log" >&2; die "fio failed: $label against $server ($target, $fs)"; }
    echo "$run,$fs,$server,$target,$label,$line" >> "$csv"
    local iops mbs cpu cpu_io p99 stream client
    IFS=, read -r iops mbs _ _ cpu cpu_io _ _ p99 stream client <<< "$line"
    log "  $label: $iops IOPS, $mbs MB/s, p99 latency $p99 us, server cpu $cpu s = $cpu_io us/IO, fio cpu $client%${stream:+, stream $stream MB/s}"
    # The write-back of what this run dirtied must not land in the next measurement
    # (fsync of the bench files only: others may be writing to the same disk).
    sync -- "$cur_dir"/plain.img "$cur_dir"/raid/m*.img "$cur_dir"/raid6/m*.img 2>/dev/null || true
}
workload() { # RUN FS SERVER TARGET WORKLOAD
    local a=("$1" "$2" "$3" "$4")
    case $5 in
        randread4k)  one "${a[@]}" "$5" --name="$5" --rw=randread --bs=4k --iodepth=32 ;;
        # The same queue depth from two client threads (two connections): one fio job
        # runs at ~95% of a core on 4 KiB requests, so it, not the server, sets the
        # pace of randread4k.
        randread4k2j) one "${a[@]}" "$5" --name="$5" --rw=randread --bs=4k --iodepth=16 \
                          --numjobs=2 --group_reporting ;;
        randwrite4k) one "${a[@]}" "$5" --name="$5" --rw=randwrite --bs=4k --iodepth=32 ;;
        randwrite4k2j) one "${a[@]}" "$5" --name="$5" --rw=randwrite --bs=4k --iodepth=16 \
                          --numjobs=2 --group_reporting ;;
        seqread1m)   one "${a[@]}" "$5" --name="$5" --rw=read --bs=1M --iodepth=8 ;;
        # Two sequential streams, each over its own half of the export.
        seqread1m2j) one "${a[@]}" "$5" --name="$5" --rw=read --bs=1M --iodepth=4 \
                          --numjobs=2 --offset_increment=$((size_bytes / 2)) --size=$((size_bytes / 2)) \
                          --group_reporting ;;
        seqwrite1m)  one "${a[@]}" "$5" --name="$5" --rw=write --bs=1M --iodepth=8 ;;
        seqwrite4k)  one "${a[@]}" "$5" --name="$5" --rw=write --bs=4k --iodepth=32 ;;
        syncwrite4k) one "${a[@]}" "$5" --name="$5" --rw=randwrite --bs=4k --iodepth=1 --fsync=1 ;;
        seqwrite1m2j) one "${a[@]}" "$5" --name="$5" --rw=write --bs=1M --iodepth=4 \
                          --numjobs=2 --offset_increment=$((size_bytes / 2)) --size=$((size_bytes / 2)) \
                          --group_reporting ;;
        twolane)
            [[ " $TWOLANE_SERVERS " == *" $3 "* ]] || return 0
            # Each fio job opens its own NBD connection.
            one "${a[@]}" twolane_alone --name=small --rw=randread --bs=4k --iodepth=1
            one "${a[@]}" twolane_loaded --name=small --rw=randread --bs=4k --iodepth=1 \
                --name=stream --rw=write --bs=1M --iodepth=8 ;;
    esac
}

# ---- report header -------------------------------------------------------------------
ver() { "$@" 2>&1 | head -1 || true; }
xraid_rev=$(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)
echo "## NBD servers: xraid vs nbdkit, qemu-nbd, nbd-server"
echo
echo "- Command: \`RUNS=$RUNS RUNTIME=$RUNTIME RAMP=$RAMP SIZE=$SIZE FS=\"$FS\" SERVERS=\"$SERVERS\" WORKLOADS=\"$WORKLOADS\" bench/nbd/run.sh\`"
echo "- Machine: \`nproc\` = $(nproc), \`$(grep -m1 'model name' /proc/cpuinfo | sed 's/[[:space:]]*:[[:space:]]*/: /')\`, kernel $(uname -r), $(hostname)"
echo "- Date: $(date +%Y-%m-%d); raw data: \`${csv#"$root"/}\`"
echo "- Client: $(ver fio --version) nbd engine, $(nbdinfo --version 2>&1 | grep -m1 '^libnbd' || true), loopback TCP, unpinned; $RAMP s ramp + $RUNTIME s per measurement; fio uses the first $SIZE of each export"
echo "- Servers: $(ver nbdkit --version) (file plugin, -t 16), $(ver qemu-nbd --version | sed 's/ (.*//') (--cache=writeback --aio=threads --shared=8), $(ver nbd-server -V | sed 's/This is //; s/ version//') (defaults, forks per connection), xraid $xraid_rev"
for f in $FS; do
    d=$(fs_dir "$f")
    echo "- $f: $d ($(df --output=fstype,source "$d" | tail -1 | tr -s ' ' | sed 's/^ //; s/ / on /'))"
done
echo

# ---- data ----------------------------------------------------------------------------
peer_or_xfile=0
for t in "${targets[@]}"; do [ "${t#*:}" = file ] && peer_or_xfile=1; done
for f in $FS; do
    cur_fs=$f
    d="$(fs_dir "$f")/xraid-nbd.$$" cur_dir="$(fs_dir "$f")/xraid-nbd.$$"
    mkdir -p "$d"
    data_dirs="$data_dirs $d"
    if [ "$peer_or_xfile" = 1 ]; then
        log "$f: writing $SIZE to $d/plain.img"
        fio --name=fill --ioengine=psync --rw=write --bs=1M --size="$size_bytes" \
            --filename="$d/plain.img" --end_fsync=1 --output=/dev/null ||
            die "could not write $d/plain.img"
    fi
    for level in 5 6; do
        [[ " ${targets[*]} " == *" xraid:raid$level "* ]] || continue
        # 4 (RAID-5) or 5 (RAID-6) members whose data area (after xraid's 1 MiB data
        # offset) holds at least SIZE/3 each.
        member_mib=$(( (size_mib + 2) / 3 + 2 ))
        raid_dir=$d/raid; members=("$raid_dir"/m{0,1,2,3}.img)
        if [ "$level" = 6 ]; then raid_dir=$d/raid6; members=("$raid_dir"/m{0,1,2,3,4}.img); fi
        mkdir -p "$raid_dir"
        log "$f: creating a ${#members[@]} x ${member_mib}M RAID-$level (64K chunk) in $raid_dir"
        # shellcheck disable=SC2086 # XRAID_CREATE_ARGS is a list of flags
        "$xraid" create --level "$level" --chunk 64K --size "${member_mib}M" --name bench $XRAID_CREATE_ARGS \
            "${members[@]}" >"$work/create-$f.log" 2>&1 ||
            { cat "$work/create-$f.log" >&2; die "xraid create failed"; }
        start_server xraid "raid$level" "$d"
        log "$f: filling the RAID-$level through xraid serve"
        fio --name=fill --ioengine=nbd --uri="$srv_uri" --rw=write --bs=1M --iodepth=8 \
            --output=/dev/null 2>"$work/fio.err" ||
            { cat "$work/fio.err" "$srv_log" >&2; die "filling the RAID-$level failed"; }
        stop_server
    done
    sync -- "$d"/plain.img "$d"/raid/m*.img "$d"/raid6/m*.img 2>/dev/null || true
done

# ---- runs ----------------------------------------------------------------------------
n=${#targets[@]}
for run in $(seq 1 "$RUNS"); do
    for f in $FS; do
        cur_fs=$f
        d="$(fs_dir "$f")/xraid-nbd.$$" cur_dir="$(fs_dir "$f")/xraid-nbd.$$"
        for i in $(seq 0 $((n - 1))); do
            t=${targets[$(( (i + run - 1) % n ))]}
            server=${t%%:*} target=${t#*:}
            log "run $run/$RUNS, $f: $server ($target)"
            start_server "$server" "$target" "$d"
            for w in $WORKLOADS; do workload "$run" "$f" "$server" "$target" "$w"; done
            stop_server
        done
    done
done

python3 "$here/summarise.py" "$csv"
log "raw: $csv"
