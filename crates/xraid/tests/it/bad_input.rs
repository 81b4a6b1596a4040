//! Bad input gets a clear one-line error and changes nothing on disk.

use std::path::PathBuf;
use std::process::Command;

use crate::require_tool;
use crate::util::{fails, hashes, ok, p, tempdir};

fn raid5(dir: &std::path::Path) -> Vec<PathBuf> {
    let members: Vec<PathBuf> = (0..3).map(|i| dir.join(format!("m{i}.img"))).collect();
    let mut args = vec!["create", "-l", "5", "-c", "16K", "--size", "4M"];
    args.extend(members.iter().map(|m| p(m)));
    ok(&args);
    members
}

#[test]
fn member_too_small() {
    let dir = tempdir();
    let a = dir.path().join("a.img");
    let b = dir.path().join("b.img");
    let err = fails(&["create", "-l", "1", "--size", "100K", p(&a), p(&b)]);
    assert!(err.contains("needs at least"), "{err}");
    assert!(!a.exists() && !b.exists(), "nothing is created");
    // An existing file that is too small is left as it was.
    std::fs::write(&a, vec![7u8; 8192]).expect("small file");
    let err = fails(&["create", "-l", "1", "--size", "4M", p(&a), p(&b)]);
    assert!(err.contains("needs at least"), "{err}");
    assert_eq!(std::fs::read(&a).expect("a"), vec![7u8; 8192]);
    assert!(!b.exists());
}

#[test]
fn same_file_twice() {
    let dir = tempdir();
    let a = dir.path().join("a.img");
    let err = fails(&["create", "-l", "1", "--size", "4M", p(&a), p(&a)]);
    assert!(err.contains("same file"), "{err}");
    assert!(!a.exists());
    let members = raid5(dir.path());
    let other = dir.path().join(".").join("m0.img");
    let err = fails(&["status", p(&members[0]), p(&members[1]), p(&other)]);
    assert!(err.contains("same file"), "{err}");
}

#[test]
fn members_of_two_arrays() {
    let dir = tempdir();
    let one = dir.path().join("one");
    let two = dir.path().join("two");
    std::fs::create_dir_all(&one).expect("dir");
    std::fs::create_dir_all(&two).expect("dir");
    let a = raid5(&one);
    let b = raid5(&two);
    let before = hashes(&[a.clone(), b.clone()].concat());
    let err = fails(&["read", "-o", "/dev/null", p(&a[0]), p(&a[1]), p(&b[2])]);
    assert!(err.contains("two different arrays"), "{err}");
    assert_eq!(hashes(&[a, b].concat()), before);
}

#[test]
fn too_few_or_too_many_members() {
    let dir = tempdir();
    let m = |i: usize| dir.path().join(format!("m{i}.img"));
    let err = fails(&["create", "-l", "5", "--size", "4M", p(&m(0)), p(&m(1))]);
    assert!(err.contains("raid5 needs 3 to"), "{err}");
    let err = fails(&[
        "create",
        "-l",
        "6",
        "--size",
        "4M",
        p(&m(0)),
        p(&m(1)),
        p(&m(2)),
    ]);
    assert!(err.contains("raid6 needs 4 to"), "{err}");
    let many: Vec<PathBuf> = (0..70).map(m).collect();
    let mut args = vec!["create", "-l", "0", "--size", "4M"];
    args.extend(many.iter().map(|x| p(x)));
    let err = fails(&args);
    assert!(err.contains("needs 2 to 64"), "{err}");
    assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0);
}

#[test]
fn chunk_not_a_power_of_two() {
    let dir = tempdir();
    let m: Vec<PathBuf> = (0..3)
        .map(|i| dir.path().join(format!("m{i}.img")))
        .collect();
    let err = fails(&[
        "create",
        "-l",
        "5",
        "-c",
        "48K",
        "--size",
        "4M",
        p(&m[0]),
        p(&m[1]),
        p(&m[2]),
    ]);
    assert!(err.contains("power of two"), "{err}");
    assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0);
}

#[test]
fn member_already_in_use() {
    require_tool!("flock");
    let dir = tempdir();
    let members = raid5(dir.path());
    // Another process holds the member's lock, as a running xraid would.
    let mut holder = Command::new("flock")
        .args(["--exclusive", p(&members[1]), "sleep", "30"])
        .spawn()
        .expect("flock runs");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let before = hashes(&members);
    let err = fails(&["write", "-i", "/dev/null", p(dir.path())]);
    holder.kill().ok();
    holder.wait().ok();
    assert!(err.contains("in use"), "{err}");
    assert_eq!(hashes(&members), before);
}

#[test]
fn superblock_with_a_wrong_checksum() {
    let dir = tempdir();
    let members = raid5(dir.path());
    // Flip one byte of the array name inside member 1's superblock.
    let mut bytes = std::fs::read(&members[1]).expect("member");
    bytes[4096 + 32] ^= 0x20;
    std::fs::write(&members[1], &bytes).expect("corrupt");
    let before = hashes(&members);
    // examine shows what it says, as mdadm does, with both checksums, and warns.
    let out = crate::util::xraid()
        .args(["examine", p(&members[1])])
        .output()
        .expect("xraid runs");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("Checksum : ") && stdout.contains(" - expected "),
        "{stdout}"
    );
    assert!(stdout.contains("Array UUID"), "{stdout}");
    assert!(stderr.contains("checksum is wrong"), "{stderr}");
    // The array starts without it (degraded), saying why; nothing is written.
    let out = crate::util::xraid()
        .args(["read", "-o", "/dev/null", p(dir.path())])
        .output()
        .expect("xraid runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("damaged") && stderr.contains("checksum"),
        "{stderr}"
    );
    assert_eq!(hashes(&members), before);
}

#[test]
fn not_an_md_member() {
    let dir = tempdir();
    let plain = dir.path().join("plain.img");
    std::fs::write(&plain, vec![0u8; 1 << 20]).expect("plain");
    let err = fails(&["examine", p(&plain)]);
    assert!(err.contains("not an md member"), "{err}");
    // A missing path: no hint of --size, which examine does not take.
    let err = fails(&["examine", p(&dir.path().join("absent.img"))]);
    assert!(
        err.contains("absent.img: no such file") && !err.contains("--size"),
        "{err}"
    );
    let err = fails(&["status", p(&plain)]);
    assert!(err.contains("not an md member"), "{err}");
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).expect("dir");
    let err = fails(&["status", p(&empty)]);
    assert!(err.contains("no md members"), "{err}");
}

#[test]
fn truncated_member_file() {
    let dir = tempdir();
    let members = raid5(dir.path());
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&members[2])
        .expect("open");
    f.set_len(2 << 20).expect("truncate");
    drop(f);
    let before = hashes(&members);
    let err = fails(&["read", "-o", "/dev/null", p(dir.path())]);
    assert!(err.contains("truncated"), "{err}");
    assert_eq!(hashes(&members), before);
}

#[test]
fn bad_sizes_levels_and_layouts() {
    let dir = tempdir();
    let m: Vec<PathBuf> = (0..3)
        .map(|i| dir.path().join(format!("m{i}.img")))
        .collect();
    let err = fails(&[
        "create",
        "-l",
        "7",
        "--size",
        "4M",
        p(&m[0]),
        p(&m[1]),
        p(&m[2]),
    ]);
    assert!(err.contains("level"), "{err}");
    let err = fails(&[
        "create",
        "-l",
        "5",
        "--layout",
        "f2",
        "--size",
        "4M",
        p(&m[0]),
        p(&m[1]),
        p(&m[2]),
    ]);
    assert!(err.contains("layout"), "{err}");
    let out = crate::util::xraid()
        .args(["create", "-l", "5", "--size", "4Q", p(&m[0])])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown size suffix"));
    let err = fails(&["create", "-l", "5", p(&m[0]), p(&m[1]), p(&m[2])]);
    assert!(err.contains("give --size"), "{err}");
    assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0);
}

#[test]
fn offsets_past_the_end_or_unaligned() {
    let dir = tempdir();
    raid5(dir.path());
    let err = fails(&["read", "--offset", "100", p(dir.path())]);
    assert!(err.contains("multiple of 512"), "{err}");
    let err = fails(&["read", "--offset", "1G", p(dir.path())]);
    assert!(err.contains("past the array's end"), "{err}");
    let big = dir.path().join("big.bin");
    std::fs::write(&big, vec![1u8; 9 << 20]).expect("big");
    let err = fails(&["write", "-i", p(&big), p(dir.path())]);
    assert!(err.contains("do not fit"), "{err}");
}

#[test]
fn a_piped_input_longer_than_the_array_fills_it_to_the_end_and_says_so_in_bytes() {
    use std::io::Write;
    use std::process::Stdio;
    let dir = tempdir();
    raid5(dir.path());
    let size: usize = ok(&["read", p(dir.path())]).len();
    let data = crate::util::random_bytes(size + 3 * 512 + 7, 61);
    let mut child = crate::util::xraid()
        .args(["write", "--offset", "512", p(dir.path())])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    // The writer may stop reading once the array is full: a broken pipe is fine.
    let _ = stdin.write_all(&data);
    drop(stdin);
    let out = child.wait_with_output().expect("wait");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "{} bytes were written from --offset 512 up to the array's end at {size} bytes",
            size - 512
        )),
        "{err}"
    );
    assert!(!err.contains("sector"), "bytes, not sectors: {err}");
    // What fitted is there, and the array was left clean.
    let back = crate::util::ok_bytes(&["read", "--offset", "512", p(dir.path())]);
    assert!(
        back[..] == data[..size - 512],
        "the array holds the input up to its end"
    );
    assert!(ok(&["status", p(dir.path())]).contains("clean"));
}

#[test]
fn an_os_error_is_named_once() {
    let dir = tempdir();
    let missing = dir.path().join("no-such-folder").join("d0");
    let m = p(&missing);
    let err = fails(&["create", "-l", "1", "--size", "16M", m, m]);
    let err = if err.contains("same file") {
        // Two equal paths are refused first; name two members in the missing folder.
        let other = dir.path().join("no-such-folder").join("d1");
        fails(&["create", "-l", "1", "--size", "16M", m, p(&other)])
    } else {
        err
    };
    assert_eq!(
        err.matches("No such file or directory").count(),
        1,
        "one line, the cause once: {err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn a_closed_pipe_ends_quietly() {
    let dir = tempdir();
    let members = raid5(dir.path());
    let exe = env!("CARGO_BIN_EXE_xraid");
    let mut args: Vec<&str> = vec!["status"];
    args.extend(members.iter().map(|m| p(m)));
    // The reader goes away at once; xraid must not panic on the closed pipe.
    let script = format!(
        "'{exe}' {} | head -c 1 >/dev/null",
        args.iter()
            .map(|a| format!("'{a}'"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let out = Command::new("bash")
        .args(["-c", &script])
        .output()
        .expect("bash runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// A RAID-0 can never use a hot spare: refused at create and at add, with no file made.
#[test]
fn spares_for_raid0_are_refused() {
    let dir = tempdir();
    let m: Vec<PathBuf> = (0..3).map(|i| dir.path().join(format!("z{i}"))).collect();
    let err = fails(&[
        "create",
        "-l",
        "0",
        "--size",
        "4M",
        "--spares",
        "1",
        p(&m[0]),
        p(&m[1]),
        p(&m[2]),
    ]);
    assert!(err.contains("no redundancy"), "{err}");
    assert!(m.iter().all(|m| !m.exists()), "nothing is created");
    ok(&["create", "-l", "0", "--size", "4M", p(&m[0]), p(&m[1])]);
    let before = hashes(&m[..2]);
    for spare in [&["--spare"][..], &[][..]] {
        let mut args = vec!["add", "--size", "4M"];
        args.extend_from_slice(spare);
        args.extend([p(dir.path()), p(&m[2])]);
        let err = fails(&args);
        assert!(err.contains("RAID-0"), "{err}");
        assert!(!m[2].exists(), "no file made");
    }
    assert_eq!(hashes(&m[..2]), before, "the array is as it was");
}

/// A create that cannot make one of its files takes away those it made: a retry (say
/// with another size) must not pick up leftovers of the first try.
#[test]
fn a_failed_create_leaves_no_files_behind() {
    let dir = tempdir();
    let (a, b) = (dir.path().join("a.img"), dir.path().join("b.img"));
    let c = dir.path().join("no-such-folder").join("c.img");
    let err = fails(&["create", "-l", "5", "--size", "4M", p(&a), p(&b), p(&c)]);
    assert!(err.contains("cannot create"), "{err}");
    assert!(!a.exists() && !b.exists(), "the files it made are gone");
}

/// A member whose md superblock is damaged (a bad checksum) is left out with a
/// warning, as mdadm leaves it out, and the array starts degraded from the others —
/// before, the whole folder was refused. Nothing is written to it.
#[test]
fn a_member_with_a_damaged_superblock_is_left_out_not_the_array() {
    let dir = tempdir();
    let members = raid5(dir.path());
    let image = crate::util::ok_bytes(&["read", p(dir.path())]);
    let mut bytes = std::fs::read(&members[1]).expect("member");
    bytes[4096 + 104] ^= 0xff;
    std::fs::write(&members[1], &bytes).expect("damage the superblock");
    let out = crate::util::xraid()
        .args(["read", p(dir.path())])
        .output()
        .expect("xraid runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout == image, "the array reads the same, degraded");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("m1.img left out: its md superblock is damaged"),
        "{stderr}"
    );
    let s: serde_json::Value =
        serde_json::from_str(&ok(&["status", "--json", p(dir.path())])).expect("JSON");
    assert_eq!(s["degraded"], true, "{s}");
    assert!(
        s["left_out"][0]["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("damaged md superblock")),
        "{s}"
    );
    assert_eq!(
        std::fs::read(&members[1]).expect("member"),
        bytes,
        "untouched"
    );
}

/// md keeps 32 bytes of array name: a longer one is refused, not cut short silently.
#[test]
fn an_array_name_longer_than_md_keeps_is_refused() {
    let dir = tempdir();
    let (a, b) = (dir.path().join("a.img"), dir.path().join("b.img"));
    let long = "n".repeat(33);
    let err = fails(&[
        "create",
        "-l",
        "1",
        "-N",
        &long,
        "--size",
        "4M",
        p(&a),
        p(&b),
    ]);
    assert!(err.contains("longer than the 32 bytes"), "{err}");
    assert!(!a.exists() && !b.exists());
    let fits = "n".repeat(32);
    ok(&[
        "create",
        "-l",
        "1",
        "-N",
        &fits,
        "--size",
        "4M",
        p(&a),
        p(&b),
    ]);
}

#[test]
fn writing_a_directory_into_the_array_is_refused_with_its_name() {
    let dir = tempdir();
    let members = raid5(dir.path());
    let before = hashes(&members);
    let err = fails(&["write", p(dir.path()), "-i", p(dir.path())]);
    assert!(err.contains("is a directory, not a file to write"), "{err}");
    assert_eq!(hashes(&members), before, "nothing written");
}

/// `examine` keeps mdadm's output (whose arithmetic wraps for a short device) and
/// says plainly that the device is shorter than its superblock.
#[test]
fn examine_says_when_a_member_is_shorter_than_its_superblock() {
    let dir = tempdir();
    let members = raid5(dir.path());
    let short = dir.path().join("short.img");
    std::fs::copy(&members[0], &short).expect("copy");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&short)
        .expect("open");
    f.set_len(2 << 20).expect("truncate");
    let out = crate::util::xraid()
        .args(["examine", p(&short)])
        .output()
        .expect("xraid runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("is shorter than its superblock says"),
        "{stderr}"
    );
}

/// Adding a hot spare as a spare again is refused, offline as served (it used to say
/// "added as a hot spare" a second time and rewrite its superblock).
#[test]
fn a_spare_added_again_is_refused() {
    let dir = tempdir();
    let members = raid5(dir.path());
    let spare = dir.path().join("s0.img");
    ok(&["add", "--spare", "--size", "4M", p(dir.path()), p(&spare)]);
    let mut all = members.clone();
    all.push(spare.clone());
    let before = hashes(&all);
    for args in [
        &["add", "--spare", p(dir.path()), p(&spare)][..],
        &["add", p(dir.path()), p(&spare)][..],
    ] {
        let err = fails(args);
        assert!(err.contains("is already a hot spare"), "{err}");
    }
    assert_eq!(hashes(&all), before, "nothing written");
}

/// `--spares` that leave too few members for the level say so in those words.
#[test]
fn spares_that_leave_too_few_members_are_refused_in_their_words() {
    let dir = tempdir();
    let m: Vec<PathBuf> = (0..4).map(|i| dir.path().join(format!("m{i}"))).collect();
    let mut args = vec!["create", "-l", "5", "--size", "4M", "--spares", "3"];
    args.extend(m.iter().map(|m| p(m)));
    let err = fails(&args);
    assert!(
        err.contains("--spares 3 leaves 1 member(s) for the array, and raid5 needs at least 3"),
        "{err}"
    );
    assert!(m.iter().all(|m| !m.exists()), "nothing is created");
}
