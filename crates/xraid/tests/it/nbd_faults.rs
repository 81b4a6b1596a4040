//! Members failing under connected clients (`xraid serve --fault`): the array goes
//! degraded, the clients see no error and every byte stays right; a server killed while
//! the array was written leaves it dirty, and the next one resyncs it.

use crate::nbd_clients::run;
use crate::require_tool;
use crate::server::{create_array, raid5, Server};
use crate::util::{ok, p, random_bytes, scrub, sha256_file, sha256_of_read, tempdir};

const ARRAY_BYTES: usize = 45 << 20;

/// qemu-img writes the raw `image` into the NBD export at `uri`.
fn convert_into(image: &std::path::Path, uri: &str) {
    run(
        "qemu-img",
        &["convert", "-n", "-f", "raw", "-O", "raw", p(image), uri],
    );
}

#[test]
fn a_member_dying_mid_write_goes_unnoticed_by_the_client() {
    require_tool!("qemu-img");
    require_tool!("nbdcopy");
    let dir = tempdir();
    let disks = raid5(dir.path(), "16M");
    // Member 2 dies after 200 I/Os: early in the image's copy.
    let server = Server::unix(dir.path(), &["--fault", "role=2,fail-after=200", p(&disks)]);
    let uri = server.uri("xraid");
    let image = dir.path().join("image.raw");
    std::fs::write(&image, random_bytes(ARRAY_BYTES, 21)).expect("image");
    convert_into(&image, &uri);
    let copy = dir.path().join("copy.raw");
    run("nbdcopy", &[&uri, p(&copy)]);
    assert_eq!(
        sha256_file(&copy),
        sha256_file(&image),
        "read back through NBD"
    );
    let log = server.wait_for_log(0, &["failed"]);
    assert!(log.contains("d2"), "the log names the member: {log}");
    server.stop();
    // Reassembled, the dead member is left out and the array reads right without it.
    let status = crate::util::ok(&["status", "--json", p(&disks)]);
    let json: serde_json::Value = serde_json::from_str(&status).expect("status json");
    assert_eq!(json["degraded"], true, "{status}");
    assert_eq!(json["members"][2]["state"], "missing", "{status}");
    assert_eq!(sha256_of_read(&[p(&disks)]), sha256_file(&image));
}

#[test]
fn a_member_failing_every_read_is_rebuilt_around() {
    require_tool!("qemu-img");
    require_tool!("nbdcopy");
    let dir = tempdir();
    let disks = raid5(dir.path(), "16M");
    let image = dir.path().join("image.raw");
    std::fs::write(&image, random_bytes(ARRAY_BYTES, 22)).expect("image");
    let healthy = Server::unix(dir.path(), &[p(&disks)]);
    let uri = healthy.uri("xraid");
    convert_into(&image, &uri);
    healthy.stop();
    // Every I/O touching member 1's data fails: reads are rebuilt from parity.
    let server = Server::unix(dir.path(), &["--fault", "role=1,errors=0..64M", p(&disks)]);
    let copy = dir.path().join("copy.raw");
    run("nbdcopy", &[&server.uri("xraid"), p(&copy)]);
    assert_eq!(
        sha256_file(&copy),
        sha256_file(&image),
        "rebuilt reads are right"
    );
    server.wait_for_log(0, &["failed"]);
    server.stop();
}

/// Runs a Python `script` in nbdsh (`h` is its handle); returns what it printed.
fn run_script(nbdsh: &mut std::process::Command, script: &str) -> String {
    let out = nbdsh.args(["-c", script]).output().expect("nbdsh runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn read_errors_on_a_raid0_member_lose_their_range_not_the_array() {
    let Some(mut nbdsh) = crate::nbd_clients::nbdsh() else {
        eprintln!("skipped: nbdsh cannot load its Python module");
        return;
    };
    let dir = tempdir();
    let disks = create_array(dir.path(), "0", 2, "16M", &[]);
    let image = dir.path().join("image.raw");
    let bytes = random_bytes(4 << 20, 23);
    std::fs::write(&image, &bytes).expect("image");
    ok(&["write", "-i", p(&image), p(&disks)]);
    // Member 1's first 4 KiB of data (md's data offset is 1 MiB here) hold array bytes
    // 64K..68K; reads there fail, far more often than the member's error limit (20).
    let server = Server::unix(
        dir.path(),
        &["--fault", "role=1,errors=1M..1028K", p(&disks)],
    );
    let uri = server.uri("xraid");
    let good = dir.path().join("good.raw");
    let script = format!(
        "h.connect_uri('{uri}')\n\
         failed = 0\n\
         for _ in range(40):\n    \
             try:\n        h.pread(4096, 65536)\n    \
             except nbd.Error:\n        failed += 1\n\
         print('failed', failed)\n\
         open('{}', 'wb').write(h.pread(1 << 20, 2 << 20))\n",
        p(&good)
    );
    let stdout = run_script(&mut nbdsh, &script);
    assert!(
        stdout.contains("failed 40"),
        "every read of the bad range fails: {stdout}"
    );
    assert!(
        std::fs::read(&good).expect("good") == bytes[2 << 20..3 << 20],
        "the rest of member 1 still serves, right"
    );
    let status: serde_json::Value =
        serde_json::from_str(&ok(&["status", "--json", p(&disks)])).expect("status json");
    assert_eq!(status["members"][1]["state"], "active", "{status}");
    assert_eq!(status["lost_requests"], 40, "{status}");
    let text = ok(&["status", p(&disks)]);
    assert!(text.contains("Lost : 40 requests answered EIO"), "{text}");
    let log = server.stop().stderr;
    assert!(!log.contains("failed ("), "no member is failed: {log}");
    // Each loss is logged, in the engine's words, with what the client got.
    assert!(
        log.contains("sectors 128..136 are unreadable")
            && log.contains("the client was answered EIO"),
        "{log}"
    );
}

/// A two-member array of `level`, written with 4 MiB, served with the member in
/// `role` refusing writes to its first 4 KiB of data (array bytes `refused..+4K`;
/// with `degraded`, the other member is gone first): a client's write there gets EIO,
/// one beside it (64 KiB at `beside`) lands, nothing is failed, the loss is logged,
/// and every other byte stays as it was.
fn a_refused_write_costs_only_itself(
    level: &str,
    role: u16,
    degraded: bool,
    refused: u64,
    beside: u64,
) {
    let Some(mut nbdsh) = crate::nbd_clients::nbdsh() else {
        eprintln!("skipped: nbdsh cannot load its Python module");
        return;
    };
    let dir = tempdir();
    let disks = create_array(dir.path(), level, 2, "16M", &[]);
    let image = dir.path().join("image.raw");
    let mut bytes = random_bytes(4 << 20, 24);
    std::fs::write(&image, &bytes).expect("image");
    ok(&["write", "-i", p(&image), p(&disks)]);
    if degraded {
        std::fs::remove_file(disks.join(format!("d{}", 1 - role))).expect("one copy gone");
    }
    // md's data offset is 1 MiB here.
    let fault = format!("role={role},write-errors=1M..1028K");
    let server = Server::unix(dir.path(), &["--fault", &fault, p(&disks)]);
    let uri = server.uri("xraid");
    let script = format!(
        "h.connect_uri('{uri}')\n\
         try:\n    h.pwrite(b'x' * 4096, {refused})\n    print('written')\n\
         except nbd.Error as e:\n    print('refused', e.errno)\n\
         h.pwrite(b'y' * 65536, {beside})\n\
         h.flush()\n"
    );
    let stdout = run_script(&mut nbdsh, &script);
    assert!(
        stdout.contains("refused"),
        "the bad write gets an error: {stdout}"
    );
    let status: serde_json::Value =
        serde_json::from_str(&ok(&["status", "--json", p(&disks)])).expect("status json");
    assert_eq!(
        status["members"][usize::from(role)]["state"],
        "active",
        "{status}"
    );
    assert_eq!(status["lost_requests"], 1, "{status}");
    let log = server.stop().stderr;
    assert!(!log.contains("failed ("), "no member is failed: {log}");
    let sector = refused / 512;
    assert!(
        log.contains(&format!(
            "sectors {sector}..{} could not be written",
            sector + 8
        )),
        "the loss is logged: {log}"
    );
    let (refused, beside) = (refused as usize, beside as usize);
    bytes[beside..beside + 65536].fill(b'y');
    let read = crate::util::ok_bytes(&["read", "--length", "4M", p(&disks)]);
    assert!(
        read[..refused] == bytes[..refused]
            && read[refused + 4096..] == bytes[refused + 4096..4 << 20],
        "all but the refused 4 KiB as it should be"
    );
}

#[test]
fn a_write_error_on_a_raid0_member_fails_that_write_not_the_array() {
    // Member 1's first chunk holds array bytes 64K..128K; its second, 192K..256K.
    a_refused_write_costs_only_itself("0", 1, false, 65536, 196608);
}

#[test]
fn a_write_error_on_a_degraded_mirrors_last_copy_fails_that_write_not_the_array() {
    a_refused_write_costs_only_itself("1", 0, true, 0, 131072);
}

/// Offline, the same refused write (`xraid write --fault`): the command stops at it,
/// names the array bytes it could not write, and fails no member; what came before it
/// is written.
#[test]
fn an_offline_write_a_raid0_member_refuses_names_its_bytes_and_fails_nothing() {
    let dir = tempdir();
    let disks = create_array(dir.path(), "0", 2, "16M", &[]);
    let image = dir.path().join("image.raw");
    let bytes = random_bytes(1 << 20, 31);
    std::fs::write(&image, &bytes).expect("image");
    // md's data offset is 1 MiB: member 1's first 4 KiB of data, array bytes 64K..68K;
    // the member write refused is that of the whole chunk, 64K..128K.
    let fault = "role=1,write-errors=1M..1028K";
    let err = crate::util::fails(&["write", "--fault", fault, "-i", p(&image), p(&disks)]);
    assert!(
        err.contains("xraid: injecting faults into role 1")
            && err.contains("array bytes 65536..131072 could not be written"),
        "{err}"
    );
    let status: serde_json::Value =
        serde_json::from_str(&ok(&["status", "--json", p(&disks)])).expect("status json");
    assert_eq!(status["members"][1]["state"], "active", "{status}");
    let read = crate::util::ok_bytes(&["read", "--length", "64K", p(&disks)]);
    assert!(
        read == bytes[..65536],
        "the input before the refused bytes is written"
    );
}

/// Offline reads through a member with read errors (`xraid read --fault`): on RAID-0
/// the bytes it holds there are named and, with --keep-going, the rest is read.
#[test]
fn an_offline_read_of_a_raid0_member_with_read_errors_names_the_lost_bytes() {
    let dir = tempdir();
    let disks = create_array(dir.path(), "0", 2, "16M", &[]);
    let image = dir.path().join("image.raw");
    let mut bytes = random_bytes(1 << 20, 32);
    std::fs::write(&image, &bytes).expect("image");
    ok(&["write", "-i", p(&image), p(&disks)]);
    let fault = "role=1,errors=1M..1028K";
    let out = dir.path().join("out.raw");
    let err = crate::util::fails(&[
        "read",
        "--keep-going",
        "--fault",
        fault,
        "--length",
        "1M",
        "-o",
        p(&out),
        p(&disks),
    ]);
    assert!(
        err.contains("4096 bytes in 1 range of the array could not be read")
            && err.contains("array bytes 65536..69632"),
        "{err}"
    );
    bytes[65536..69632].fill(0);
    assert!(
        std::fs::read(&out).expect("the output") == bytes,
        "all else is read"
    );
    // Bad --fault arguments are refused before anything is opened for writing.
    for (spec, needle) in [
        (
            "role=2,errors=0..4K",
            "role 2, but the array has roles 0 to 1",
        ),
        ("role=0,power-cut-on-signal", "is for `xraid serve`"),
    ] {
        let err = crate::util::fails(&["read", "--fault", spec, p(&disks)]);
        assert!(err.contains(needle), "{spec}: {err}");
    }
}

#[test]
fn an_unknown_consistency_is_refused_in_one_line() {
    let dir = tempdir();
    let disks = raid5(dir.path(), "8M");
    let before = crate::util::ok(&["status", "--json", p(&disks)]);
    let out = crate::util::xraid()
        .args([
            "serve",
            "--socket",
            "/nonexistent/x.sock",
            "--consistency",
            "journal",
            p(&disks),
        ])
        .output()
        .expect("xraid runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "accepted");
    assert!(
        err.contains("consistency 'journal' is not known: use log or resync"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert_eq!(crate::util::ok(&["status", "--json", p(&disks)]), before);
}

#[test]
fn a_bad_fault_spec_is_refused_in_one_line() {
    let dir = tempdir();
    let disks = raid5(dir.path(), "8M");
    for (spec, needle) in [
        ("role=9,fail-now", "role 9"),
        ("fail-now", "role=N"),
        ("role=1,explode", "unknown"),
    ] {
        let out = crate::util::xraid()
            .args([
                "serve",
                "--socket",
                "/nonexistent/x.sock",
                "--fault",
                spec,
                p(&disks),
            ])
            .output()
            .expect("xraid runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{spec} was accepted");
        assert!(err.contains(needle), "{spec}: {err}");
    }
}

#[test]
fn an_array_killed_while_written_resyncs_when_served_again() {
    require_tool!("qemu-img");
    let dir = tempdir();
    let disks = raid5(dir.path(), "16M");
    let image = dir.path().join("image.raw");
    std::fs::write(&image, random_bytes(ARRAY_BYTES, 23)).expect("image");
    let server = Server::unix(dir.path(), &[p(&disks)]);
    let uri = server.uri("xraid");
    convert_into(&image, &uri);
    server.kill();
    let status = crate::util::ok(&["status", "--json", p(&disks)]);
    let json: serde_json::Value = serde_json::from_str(&status).expect("status json");
    assert_eq!(json["state"], "active", "killed while written: {status}");
    assert_eq!(json["health"], "resync", "{status}");
    // Parity the crash left wrong: stripe 0's parity lives on the last member
    // (left-symmetric), whose data area starts at 1 MiB.
    flip_byte(&disks.join("d3"), (1 << 20) + 1000);

    let server = Server::unix(dir.path(), &[p(&disks)]);
    let log = server.wait_for_log(0, &["resync done"]);
    let all = server.stderr();
    assert!(all.contains("not stopped cleanly"), "{all}");
    assert!(log.contains("resync done (1 mismatched units"), "{log}");
    server.stop();
    let status = crate::util::ok(&["status", "--json", p(&disks)]);
    let json: serde_json::Value = serde_json::from_str(&status).expect("status json");
    assert_eq!(json["state"], "clean", "{status}");
    let check = crate::util::ok(&["scrub", "check", "--json", p(&disks)]);
    let check: serde_json::Value = serde_json::from_str(&check).expect("scrub json");
    assert_eq!(check["mismatched_units"], 0, "{check}");
    assert_eq!(sha256_of_read(&[p(&disks)]), sha256_file(&image));
}

fn flip_byte(path: &std::path::Path, at: u64) {
    use std::io::{Read, Seek, SeekFrom, Write};
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("open member");
    let mut byte = [0u8; 1];
    f.seek(SeekFrom::Start(at)).expect("seek");
    f.read_exact(&mut byte).expect("read");
    f.seek(SeekFrom::Start(at)).expect("seek");
    f.write_all(&[byte[0] ^ 0x20]).expect("write");
}

#[test]
fn a_hot_spare_steps_in_when_a_member_dies_under_clients() {
    require_tool!("qemu-img");
    require_tool!("nbdcopy");
    let dir = tempdir();
    let disks = raid5(dir.path(), "16M");
    crate::util::ok(&["add", "--size", "16M", p(&disks), p(&disks.join("s0"))]);
    // Member 1 dies early in the image's copy; the spare takes its role at once.
    let server = Server::unix(dir.path(), &["--fault", "role=1,fail-after=100", p(&disks)]);
    let uri = server.uri("xraid");
    let image = dir.path().join("image.raw");
    std::fs::write(&image, random_bytes(ARRAY_BYTES, 24)).expect("image");
    convert_into(&image, &uri);
    server.wait_for_log(0, &["recover done (0 mismatched units, 0 unrecoverable)"]);
    let log = server.stderr();
    assert!(
        log.contains("spare") && log.contains("takes role 1"),
        "{log}"
    );
    let copy = dir.path().join("copy.raw");
    run("nbdcopy", &[&uri, p(&copy)]);
    assert_eq!(
        sha256_file(&copy),
        sha256_file(&image),
        "read back through NBD"
    );
    server.stop();
    let status = crate::util::ok(&["status", "--json", p(&disks)]);
    let json: serde_json::Value = serde_json::from_str(&status).expect("status json");
    assert_eq!(json["degraded"], false, "{status}");
    assert_eq!(json["state"], "clean", "{status}");
    assert!(
        json["members"][1]["path"]
            .as_str()
            .unwrap_or("")
            .ends_with("s0"),
        "{status}"
    );
    // The rebuilt spare carries its share without another member.
    std::fs::remove_file(disks.join("d0")).expect("lose d0");
    assert_eq!(sha256_of_read(&[p(&disks)]), sha256_file(&image));
}

#[test]
fn silent_faults_go_unseen_by_clients_and_scrub_finds_them() {
    require_tool!("qemu-img");
    // Member 1 stores writes to two of its data chunks with a flipped bit, and drops
    // writes to a third, all without a word: only redundancy can tell.
    for spec in ["role=1,flips=2M..2176K", "role=1,lose=3M..3136K"] {
        let dir = tempdir();
        let disks = raid5(dir.path(), "16M");
        let image = dir.path().join("image.raw");
        std::fs::write(&image, random_bytes(ARRAY_BYTES, 24)).expect("image");
        let server = Server::unix(dir.path(), &["--fault", spec, p(&disks)]);
        convert_into(&image, &server.uri("xraid"));
        server.stop();
        let status = crate::util::ok(&["status", "--json", p(&disks)]);
        assert!(status.contains("\"degraded\": false"), "{spec}: {status}");
        let check = scrub("check", &disks);
        assert!(
            check["mismatched_units"].as_u64().is_some_and(|n| n > 0),
            "{spec}: {check}"
        );
        // md's repair makes parity agree with the data as stored (which copy is right
        // is for integrity mode to know); a second check is clean.
        scrub("repair", &disks);
        assert_eq!(scrub("check", &disks)["mismatched_units"], 0, "{spec}");
    }
}

#[test]
fn a_member_failed_without_a_spare_stays_out_after_a_crash() {
    require_tool!("qemu-img");
    let dir = tempdir();
    let disks = raid5(dir.path(), "16M");
    let image = dir.path().join("image.raw");
    std::fs::write(&image, random_bytes(ARRAY_BYTES, 25)).expect("image");
    let server = Server::unix(dir.path(), &["--fault", "role=2,fail-after=200", p(&disks)]);
    convert_into(&image, &server.uri("xraid"));
    server.wait_for_log(0, &["failed"]);
    // SIGKILL: only what the server recorded when the member failed remains.
    server.kill();
    let status = crate::util::ok(&["status", "--json", p(&disks)]);
    let json: serde_json::Value = serde_json::from_str(&status).expect("status json");
    assert_ne!(json["members"][2]["state"], "active", "{status}");
    assert_eq!(sha256_of_read(&[p(&disks)]), sha256_file(&image));
}

#[test]
fn a_member_failed_while_its_spare_is_gone_stays_out_after_a_crash() {
    require_tool!("qemu-img");
    let dir = tempdir();
    let disks = raid5(dir.path(), "16M");
    crate::util::ok(&["add", "--size", "16M", p(&disks), p(&disks.join("s0"))]);
    let image = dir.path().join("image.raw");
    std::fs::write(&image, random_bytes(ARRAY_BYTES, 26)).expect("image");
    let server = Server::unix(dir.path(), &["--fault", "role=2,fail-after=200", p(&disks)]);
    // The spare vanishes while served: when member 2 dies there is none to open.
    std::fs::remove_file(disks.join("s0")).expect("lose the spare");
    convert_into(&image, &server.uri("xraid"));
    let log = server.wait_for_log(0, &["could not put a spare"]);
    assert!(log.contains("failed"), "{log}");
    // SIGKILL: the failure was recorded all the same, before any later write's reply.
    server.kill();
    let status = crate::util::ok(&["status", "--json", p(&disks)]);
    let json: serde_json::Value = serde_json::from_str(&status).expect("status json");
    assert_ne!(json["members"][2]["state"], "active", "{status}");
    assert_eq!(sha256_of_read(&[p(&disks)]), sha256_file(&image));
}

/// A member whose superblock cannot be written (here from the start: the first write
/// marks the array active) is failed, as md fails it, and the other members record it
/// as faulty: clients see no error, and the array reads right without it.
#[test]
fn a_member_that_cannot_take_its_superblock_is_failed_and_recorded() {
    require_tool!("qemu-img");
    let dir = tempdir();
    let disks = raid5(dir.path(), "16M");
    let image = dir.path().join("image.raw");
    std::fs::write(&image, random_bytes(ARRAY_BYTES, 28)).expect("image");
    let server = Server::unix(
        dir.path(),
        &["--fault", "role=1,write-errors=4K..8K", p(&disks)],
    );
    convert_into(&image, &server.uri("xraid"));
    let log = server.wait_for_log(0, &["failed"]);
    assert!(log.contains("d1"), "the log names the member: {log}");
    server.stop();
    let status = crate::util::ok(&["status", "--json", p(&disks)]);
    let json: serde_json::Value = serde_json::from_str(&status).expect("status json");
    assert_eq!(json["degraded"], true, "{status}");
    assert_ne!(json["members"][1]["state"], "active", "{status}");
    assert_eq!(sha256_of_read(&[p(&disks)]), sha256_file(&image));
}

/// A member dies while served, and the superblock writes that should record it fail on
/// every other member (`write-errors` over md's superblock at 4 KiB, after the array
/// was marked active). md would hold the writes until the superblocks say it; xraid
/// fails the members that cannot take their superblock (the array is then lost) and
/// answers the writes with errors. None is acknowledged that member 2 missed: after a
/// SIGKILL the superblocks still call it current, and every acknowledged write reads
/// back. (Acknowledging the write member 2 died under, as before, fails here: every
/// write goes to one of member 2's data chunks.)
#[test]
fn writes_fail_rather_than_be_acknowledged_when_a_failure_cannot_be_recorded() {
    let Some(mut nbdsh) = crate::nbd_clients::nbdsh() else {
        eprintln!("skipped: nbdsh cannot load its Python module");
        return;
    };
    const CHUNK: usize = 64 << 10;
    const BLOCKS: usize = 150;
    let dir = tempdir();
    let disks = raid5(dir.path(), "16M");
    // md's left-symmetric RAID-5 of four: stripe s has its parity on member 3 - s % 4
    // and data chunk i on the member after it, plus i. The chunks member 2 holds:
    let offsets: Vec<usize> = (0..)
        .filter_map(|s: usize| {
            let parity = 3 - s % 4;
            (parity != 2).then(|| (s * 3 + (2 + 4 - parity - 1) % 4) * CHUNK)
        })
        .take(BLOCKS)
        .collect();
    let image = dir.path().join("image.raw");
    let data = random_bytes(CHUNK * BLOCKS, 27);
    std::fs::write(&image, &data).expect("image");
    let no_superblock = "write-errors=4K..8K,errors-after=20";
    let faults = [
        "role=2,fail-after=120".to_owned(),
        format!("role=0,{no_superblock}"),
        format!("role=1,{no_superblock}"),
        format!("role=3,{no_superblock}"),
    ];
    let mut args: Vec<&str> = Vec::new();
    for f in &faults {
        args.extend(["--fault", f.as_str()]);
    }
    args.push(p(&disks));
    let server = Server::unix(dir.path(), &args);
    // One write at a time; the count acknowledged is printed, the first error ends it.
    let script = format!(
        "data = open('{image}', 'rb').read()\n\
         acked = 0\n\
         for i, at in enumerate({offsets:?}):\n\
         \x20   try:\n\
         \x20       h.pwrite(data[i*{CHUNK}:(i+1)*{CHUNK}], at)\n\
         \x20   except nbd.Error:\n\
         \x20       break\n\
         \x20   acked = i + 1\n\
         print(acked)",
        image = p(&image)
    );
    let out = nbdsh
        .args(["-c", &format!("h.connect_uri('{}')", server.uri("xraid"))])
        .args(["-c", &script])
        .output()
        .expect("nbdsh runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let acked: usize = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("a count");
    assert!(
        acked > 0 && acked < BLOCKS,
        "some writes acknowledged, then errors: {acked}"
    );
    let log = server.wait_for_log(0, &["could not record the failed member"]);
    assert!(log.contains("writes fail until it is recorded"), "{log}");
    server.kill();
    let back = dir.path().join("back.raw");
    crate::util::ok(&["read", "-o", p(&back), p(&disks)]);
    let got = std::fs::read(&back).expect("read back");
    for (i, &at) in offsets.iter().enumerate().take(acked) {
        assert!(
            got[at..at + CHUNK] == data[i * CHUNK..(i + 1) * CHUNK],
            "acknowledged block {i} of {acked} (array byte {at}) reads back"
        );
    }
}

/// An array killed while written and degraded cannot resync when served again (there
/// is nothing to check parity against); once a member added in the missing role is
/// rebuilt, the resync follows by itself, as md's does after its recovery, and the
/// array stops clean.
#[test]
fn the_resync_follows_the_rebuild_of_an_array_killed_while_degraded() {
    require_tool!("qemu-img");
    let dir = tempdir();
    let disks = raid5(dir.path(), "16M");
    std::fs::remove_file(disks.join("d3")).expect("take a member away");
    let image = dir.path().join("image.raw");
    std::fs::write(&image, random_bytes(ARRAY_BYTES, 29)).expect("image");
    // Without the stripe log, only a resync makes parity trustworthy after a kill.
    let args = ["--consistency", "resync", p(&disks)];
    let server = Server::unix(dir.path(), &args);
    convert_into(&image, &server.uri("xraid"));
    server.kill();
    let server = Server::unix(dir.path(), &args);
    server.wait_for_log(0, &["was not stopped cleanly and is degraded"]);
    let out = crate::util::ok(&["add", "--size", "16M", p(&disks), p(&disks.join("n3"))]);
    assert!(out.contains("role 3"), "{out}");
    let start = std::time::Instant::now();
    while !server.stderr().contains("resync done") {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "no resync after the rebuild:\n{}",
            server.stderr()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    server.stop();
    let status = crate::util::ok(&["status", "--json", p(&disks)]);
    let json: serde_json::Value = serde_json::from_str(&status).expect("status json");
    assert_eq!(json["state"], "clean", "{status}");
    assert_eq!(sha256_of_read(&[p(&disks)]), sha256_file(&image));
}

/// A member joining a running rebuild starts its walk over, and a member rebuilt
/// before it keeps what was done for it, as md keeps a recovery offset per device:
/// writes reach it there from then on, its recorded progress stays, and after a crash
/// it serves those units as written.
#[test]
fn a_member_joining_a_rebuild_keeps_the_others_progress() {
    require_tool!("qemu-img");
    let dir = tempdir();
    let disks = create_array(dir.path(), "6", 5, "16M", &[]);
    const IMAGE_BYTES: usize = 40 << 20;
    let first = dir.path().join("first.raw");
    std::fs::write(&first, random_bytes(IMAGE_BYTES, 30)).expect("image");
    crate::util::ok(&["write", "-i", p(&first), p(&disks)]);
    let serve = ["--rebuild-min", "1", "--rebuild-max", "4", p(&disks)];
    let rebuilt = |disks: &std::path::Path, role: usize| {
        let status = crate::util::ok(&["status", "--json", p(disks)]);
        let json: serde_json::Value = serde_json::from_str(&status).expect("status json");
        json["members"][role]["rebuilt_percent"]
            .as_u64()
            .unwrap_or(0)
    };
    let add = |name: &str| {
        crate::util::ok(&[
            "add",
            "--no-rebuild",
            "--size",
            "16M",
            p(&disks),
            p(&disks.join(name)),
        ]);
    };
    let server = Server::unix(dir.path(), &serve);
    crate::util::ok(&["fail", p(&disks), p(&disks.join("d1"))]);
    add("n1");
    // A checkpoint (every 2 s) records part of n1's rebuild.
    std::thread::sleep(std::time::Duration::from_secs(3));
    server.kill();
    let recorded = rebuilt(&disks, 1);
    assert!(recorded > 0, "part of n1's rebuild is recorded");
    let server = Server::unix(dir.path(), &serve);
    crate::util::ok(&["fail", p(&disks), p(&disks.join("d2"))]);
    add("n2");
    // The server says so too, while the walk starts over for n2.
    assert!(
        rebuilt(&disks, 1) >= recorded,
        "served, n1 shows what it kept: {} below {recorded}",
        rebuilt(&disks, 1)
    );
    // New contents everywhere while both are rebuilt (qemu-img flushes at its end).
    let second = dir.path().join("second.raw");
    std::fs::write(&second, random_bytes(IMAGE_BYTES, 32)).expect("image");
    convert_into(&second, &server.uri("xraid"));
    server.kill();
    assert!(
        rebuilt(&disks, 1) >= recorded,
        "n1 keeps its recorded progress: {} below {recorded}",
        rebuilt(&disks, 1)
    );
    // Not served: n1 is read where it is recorded as rebuilt, the rest from parity.
    assert_eq!(
        sha256_of_read(&[p(&disks), "--length", "40M"]),
        sha256_file(&second),
        "n1 took the writes below its recorded progress"
    );
    let server = Server::unix(dir.path(), &serve);
    let start = std::time::Instant::now();
    while !server.stderr().contains("recover done") {
        assert!(start.elapsed() < std::time::Duration::from_secs(60));
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    server.stop();
    assert_eq!(
        sha256_of_read(&[p(&disks), "--length", "40M"]),
        sha256_file(&second)
    );
}

/// A member whose power fails under a client (`--fault power-cut-after`): the writes
/// it had not flushed are undone on its disk, and it answers nothing more. The client
/// sees no error and reads back every write it was acknowledged; the member, added
/// back, is rebuilt — the chunks whose writes its disk lost with the rest — so that a
/// check then finds parity agreeing everywhere and the array reads the same without
/// another member.
#[test]
fn a_member_that_loses_power_under_a_client_is_rebuilt_when_added_back() {
    let dir = tempdir();
    let disks = create_array(dir.path(), "5", 4, "16M", &["--bitmap-chunk", "1M"]);
    let server = Server::tcp(
        dir.path(),
        &["--fault", "role=1,power-cut-after=150", p(&disks)],
    );
    let mut expected = vec![0u8; ARRAY_BYTES];
    let mut client = crate::nbd_raw::Client::open(server.tcp_addr(), "xraid", false);
    const PIECE: usize = 64 << 10;
    for i in 0..240u64 {
        let at = (i.wrapping_mul(0x9e37_79b9) as usize % (ARRAY_BYTES / PIECE)) * PIECE;
        let data = random_bytes(PIECE, 1000 + i);
        assert_eq!(client.write(at as u64, &data), 0, "write {i}");
        expected[at..at + PIECE].copy_from_slice(&data);
        if i % 10 == 9 {
            assert_eq!(client.flush(), 0, "flush after write {i}");
        }
    }
    let log = server.wait_for_log(0, &["failed"]);
    assert!(log.contains("d1"), "the log names the member: {log}");
    for at in (0..ARRAY_BYTES).step_by(1 << 20) {
        let got = client.read(at as u64, 1 << 20).expect("read");
        assert!(got == expected[at..at + (1 << 20)], "degraded read at {at}");
    }
    client.disconnect();
    let added = crate::util::ok(&["add", p(&disks), p(&disks.join("d1"))]);
    assert!(added.contains("role 1"), "{added}");
    server.wait_for_log(0, &["recover done (0 mismatched units, 0 unrecoverable)"]);
    let check = scrub("check", &disks);
    assert_eq!(check["mismatched_units"], 0, "{check}");
    server.stop();
    let image = dir.path().join("expected.raw");
    std::fs::write(&image, &expected).expect("expected image");
    std::fs::remove_file(disks.join("d0")).expect("lose d0");
    assert_eq!(sha256_of_read(&[p(&disks)]), sha256_file(&image));
}

/// A server whose output nobody reads any more (`xraid serve ... | head`: the pipe
/// closes) goes on serving and still stops cleanly on SIGTERM. Before, the first log
/// line after the close panicked — in the signal thread, so SIGTERM was lost and only
/// `kill -9` stopped the server.
#[test]
fn a_server_whose_log_pipe_closed_still_serves_and_stops_cleanly() {
    use std::io::BufRead;
    use std::process::Stdio;
    let dir = tempdir();
    let disks = crate::server::raid5(dir.path(), "8M");
    let socket = dir.path().join("s.sock");
    let mut child = crate::util::xraid()
        .args(["serve", "--socket", p(&socket), p(&disks)])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("xraid serve starts");
    // Read until it listens, then close both pipes.
    let mut out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    while !line.starts_with("listening on ") {
        line.clear();
        assert!(
            out.read_line(&mut line).expect("read") > 0,
            "no listening line"
        );
    }
    drop(out);
    drop(child.stderr.take());
    // Logged (to the closed pipe): a member failed through the control socket.
    ok(&["fail", p(&disks), p(&disks.join("d1"))]);
    let uri = format!("nbd+unix:///xraid?socket={}", p(&socket));
    if crate::util::has_tool("qemu-io") {
        let io = std::process::Command::new("qemu-io")
            .args(["-f", "raw", &uri, "-c", "write -P 9 0 64k"])
            .output()
            .expect("qemu-io runs");
        assert!(io.status.success(), "still served");
    }
    let pid = libc::pid_t::try_from(child.id()).expect("pid fits");
    // SAFETY: kill takes no pointers; the pid is our own child, not yet reaped.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if start.elapsed() > std::time::Duration::from_secs(10) {
            let _ = child.kill();
            panic!("SIGTERM did not stop a server whose log pipe had closed");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
    let s: serde_json::Value =
        serde_json::from_str(&ok(&["status", "--json", p(&disks)])).expect("status JSON");
    assert_eq!(s["state"], "clean", "{s}");
}

/// A RAID-1 copy that refuses writes under a connected client (`--fault
/// write-errors=`): the client's writes succeed, the copy stays active, the range goes
/// into its bad block log before the replies (the server says so, and md's
/// `--examine-badblocks` lists it after the server is killed), and the data reads
/// back right; a repair scrub then rewrites the range and empties the log.
#[test]
fn a_mirror_copy_refusing_writes_under_a_client_is_recorded_not_failed() {
    require_tool!("qemu-img");
    require_tool!("mdadm");
    let dir = tempdir();
    let disks = create_array(dir.path(), "1", 2, "16M", &[]);
    // Member 1's device bytes 2M..3M: array bytes 1M..2M (md's data offset is 1 MiB).
    let server = Server::unix(
        dir.path(),
        &["--fault", "role=1,write-errors=2M..3M", p(&disks)],
    );
    let image = dir.path().join("image.raw");
    std::fs::write(&image, random_bytes(4 << 20, 23)).expect("image");
    convert_into(&image, &server.uri("xraid"));
    server.wait_for_log(0, &["refused a write", "bad block log"]);
    let log = server.stderr();
    assert!(!log.contains("runs degraded"), "no member is failed: {log}");
    let status = ok(&["status", "--json", p(&disks)]);
    let json: serde_json::Value = serde_json::from_str(&status).expect("status json");
    assert_eq!(json["members"][1]["state"], "active", "{status}");
    let listed = json["members"][1]["bad_block_sectors"]
        .as_u64()
        .unwrap_or(0);
    assert!(listed >= 8, "status counts the listed sectors: {status}");
    // Killed: what the log lists was recorded before the client had its replies.
    server.kill();
    let listed = crate::badblocks::mdadm_badblocks(&disks.join("d1"));
    assert!(
        listed.lines().skip(1).any(|l| l.contains(" for ")),
        "the refused range is in the log: {listed}"
    );
    let read = crate::util::ok_bytes(&["read", "--length", "4M", p(&disks)]);
    assert!(
        read == std::fs::read(&image).expect("image"),
        "reads back right"
    );
    ok(&["scrub", "repair", p(&disks)]);
    let listed = crate::badblocks::mdadm_badblocks(&disks.join("d1"));
    assert!(listed.contains("Bad-blocks list is empty"), "{listed}");
}

/// A served array that fails outright (two RAID-5 members gone) cannot be marked
/// clean at the stop: the server says so instead of its usual "flushed and marked
/// clean", which it printed after the error before.
#[test]
fn a_stop_says_when_an_array_could_not_be_marked_clean() {
    let dir = tempdir();
    let disks = raid5(dir.path(), "16M");
    let server = Server::tcp(
        dir.path(),
        &[
            "--fault",
            "role=1,fail-after=20",
            "--fault",
            "role=2,fail-after=20",
            p(&disks),
        ],
    );
    let mut c = crate::nbd_raw::Client::open(server.tcp_addr(), "xraid", false);
    let block = random_bytes(64 << 10, 31);
    let failed = (0..64u64).any(|i| c.write(i * (64 << 10), &block) != 0);
    assert!(failed, "writes fail once two members are gone");
    c.disconnect();
    let stopped = server.stop();
    assert!(
        stopped
            .stdout
            .contains("not every array could be marked clean"),
        "{}{}",
        stopped.stdout,
        stopped.stderr
    );
    assert!(
        !stopped.stdout.contains("flushed and marked clean"),
        "{}",
        stopped.stdout
    );
}
