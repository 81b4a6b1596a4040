# Shared by the rebuild scripts that compare builds in alternating runs; sourced
# after `root` (the checkout) is set.

# XRAIDS, the builds to run: this checkout's release build unless given.
choose_builds() {
    if [ -z "${XRAIDS:-}" ]; then
        (cd "$root" && cargo build --release -q -p xraid)
        XRAIDS="$root/target/release/xraid"
    fi
}

# The path of CSV file $1 in today's folder of raw rows, its header $2 written when
# the file is new.
csv_file() {
    local out
    out="$root/bench/runs/$(date +%Y-%m-%d)-$(hostname)"
    mkdir -p "$out"
    [ -f "$out/$1" ] || echo "$2" > "$out/$1"
    echo "$out/$1"
}
