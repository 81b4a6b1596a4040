//! Review of 457fd56 / 2582783: the stripe log's rule for rings with no marker of the
//! array, seen from `xraid serve`.

use crate::nbd_raw::Client;
use crate::server::Server;
use crate::util::{ok, p, random_bytes, tempdir};

fn status(disks: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&ok(&["status", "--json", p(disks)])).expect("status JSON")
}

/// A RAID-5 of four 16 MiB members of `seed`'s random bytes in `dir`/disks: its
/// initial resync owed. Returns the folder and the members' paths.
fn raid5_over_old_contents(dir: &std::path::Path, seed: u64) -> (std::path::PathBuf, Vec<String>) {
    let disks = dir.join("disks");
    std::fs::create_dir(&disks).expect("disks");
    let names: Vec<String> = (0..4)
        .map(|i| {
            let m = disks.join(format!("d{i}"));
            std::fs::write(&m, random_bytes(16 << 20, seed + i)).expect("member");
            p(&m).to_owned()
        })
        .collect();
    let mut args = vec!["create", "-l", "5", "-c", "64K"];
    args.extend(names.iter().map(String::as_str));
    let out = ok(&args);
    assert!(out.contains("in the background"), "{out}");
    (disks, names)
}

/// A degraded RAID-5 made on zeros (nothing owed), served, written, and killed
/// before its first flush: the restart's replay reads every entry and puts parity
/// right ("the stripe log put parity right"), and a clean stop then marks the array
/// clean — as before 457fd56. Now the rings' lack of a marker counts as a skipped
/// entry: the server says the log could not replay all it held (a ring or rows
/// failed to read: none did), and the array stays dirty after a clean stop, which md
/// refuses to start (a dirty degraded array).
#[test]
fn a_kill_before_the_first_flush_of_a_degraded_array_is_not_reported_as_a_lost_replay() {
    let dir = tempdir();
    let disks = dir.path().join("disks");
    std::fs::create_dir(&disks).expect("disks");
    let names: Vec<String> = (0..3)
        .map(|i| p(&disks.join(format!("d{i}"))).to_owned())
        .chain(std::iter::once("missing".to_owned()))
        .collect();
    let mut args = vec!["create", "-l", "5", "-c", "64K", "--size", "16M"];
    args.extend(names.iter().map(String::as_str));
    ok(&args);

    let server = Server::tcp(dir.path(), &[p(&disks)]);
    let mut client = Client::open(server.tcp_addr(), "xraid", false);
    assert_eq!(client.write(1 << 20, &random_bytes(64 << 10, 5)), 0);
    server.kill();

    let server = Server::tcp(dir.path(), &[p(&disks)]);
    let log = server.wait_for_log(0, &["stripe log read"]);
    let all = server.stderr();
    let stopped = server.stop();
    let said = format!("{all}\n{}", stopped.stderr);
    let after = status(&disks);
    let md = std::process::Command::new("mdadm")
        .args(["--examine", &names[0]])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let md_state = md
        .lines()
        .find_map(|l| l.trim().strip_prefix("State : ").map(str::to_owned))
        .unwrap_or_default();
    assert!(
        !said.contains("could not replay all it held") && md_state != "active",
        "nothing failed to read, the stop was clean; md state after the stop: {md_state:?}, status: {after}\nserver said:\n{said}\n{log}"
    );
}

/// A whole RAID-5 made over old contents and first served read-only: the server must
/// not call it degraded, nor wait for "a member to take the missing one's place" —
/// none is missing; the resync runs at the next open to write.
#[test]
fn a_whole_array_made_over_old_contents_served_read_only_is_not_called_degraded() {
    let dir = tempdir();
    let (disks, _) = raid5_over_old_contents(dir.path(), 40);
    let server = Server::tcp(dir.path(), &["--read-only", p(&disks)]);
    // Its view of the array is logged before it listens.
    let said = server.stderr();
    server.stop();
    assert_eq!(status(&disks)["degraded"], false);
    assert!(
        !said.contains("degraded") && !said.contains("missing one"),
        "a whole array, served read-only:\n{said}"
    );
}

/// A RAID-5 made over old contents whose member is failed offline (`xraid fail`)
/// before any serve: the next server says it "was not stopped cleanly" and that "the
/// stripe log could not replay all it held (a ring or rows failed to read)" — neither
/// is so. The array was stopped cleanly and owes its initial resync (what
/// `made_unsynced` is for; it is keyed on events 0, which `fail` moved on).
#[test]
fn an_array_failed_offline_before_its_initial_resync_is_not_reported_as_a_crash() {
    let dir = tempdir();
    let (disks, names) = raid5_over_old_contents(dir.path(), 50);
    ok(&["fail", p(&disks), &names[3]]);
    let server = Server::tcp(dir.path(), &[p(&disks)]);
    // Its view of the array is logged before it listens.
    let said = server.stderr();
    server.stop();
    assert!(
        !said.contains("not stopped cleanly") && !said.contains("failed to read"),
        "stopped cleanly, nothing failed to read:\n{said}"
    );
}
