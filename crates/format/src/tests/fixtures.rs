//! Members of arrays made by Linux md and mdadm 4.2 (`/work/shared/fixtures/md`):
//! parse each superblock, write it back byte for byte, and print it as mdadm did.
//! Skipped, with a message, when the fixtures or `xz` are missing.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::comparable;
use crate::{examine_text, Superblock, SUPERBLOCK_OFFSET_BYTES};

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/md")
}

/// The first 8 KiB of a compressed member image, or `None` when `xz` cannot run.
fn head_of(image: &Path) -> Option<Vec<u8>> {
    let mut child = Command::new("xz")
        .arg("-dc")
        .arg(image)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut buf = vec![0u8; 8192];
    let read = child.stdout.take()?.read_exact(&mut buf);
    // The rest of the image is not needed; stop xz rather than decompress it all.
    let _ = child.kill();
    let _ = child.wait();
    read.ok()?;
    Some(buf)
}

/// The value of `"key": value` in the member's entry of a manifest, found by text
/// search: enough for the flat numbers and strings compared here.
fn manifest_value(manifest: &str, member_file: &str, key: &str) -> Option<String> {
    let start = manifest.find(&format!("\"file\": \"{member_file}\""))?;
    let entry = &manifest[start..];
    let entry = &entry[..entry.find('}').unwrap_or(entry.len())];
    let at = entry.find(&format!("\"{key}\": "))? + key.len() + 4;
    let value = &entry[at..];
    let end = value.find([',', '\n']).unwrap_or(value.len());
    Some(value[..end].trim().trim_matches('"').to_owned())
}

#[test]
fn md_made_members_parse_round_trip_and_examine_like_mdadm() {
    let dir = fixtures_dir();
    let Ok(entries) = std::fs::read_dir(&dir) else {
        eprintln!("skipped: no fixtures at {}", dir.display());
        return;
    };
    let mut arrays: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.join("manifest.json").exists())
        .collect();
    arrays.sort();
    assert!(!arrays.is_empty(), "no arrays in {}", dir.display());
    let mut checked = 0;
    for array in arrays {
        let manifest = std::fs::read_to_string(array.join("manifest.json")).unwrap();
        for n in 0.. {
            let image = array.join(format!("member{n}.img.xz"));
            if !image.exists() {
                break;
            }
            let what = format!("{} member {n}", array.display());
            let Some(head) = head_of(&image) else {
                eprintln!("skipped: cannot run xz -dc on {}", image.display());
                return;
            };
            let raw = &head[SUPERBLOCK_OFFSET_BYTES as usize..];
            let sb = Superblock::parse(raw).unwrap_or_else(|e| panic!("{what}: {e}"));

            assert_eq!(sb.to_bytes(), raw, "{what}: to_bytes is not the original");
            assert_eq!(sb.compute_checksum(), sb.sb_csum, "{what}");
            assert_eq!(sb.role(), Some(n), "{what}");
            let file = format!("member{n}.img.xz");
            let field = |key: &str| manifest_value(&manifest, &file, key);
            assert_eq!(field("role"), Some(n.to_string()), "{what}");
            assert_eq!(field("events"), Some(sb.events.to_string()), "{what}");
            assert_eq!(
                field("data_offset_sectors"),
                Some(sb.data_offset.to_string()),
                "{what}"
            );
            assert_eq!(
                field("super_offset_sectors"),
                Some(sb.super_offset.to_string()),
                "{what}"
            );
            assert_eq!(
                field("avail_dev_size_sectors"),
                Some(sb.data_size.to_string()),
                "{what}"
            );
            assert_eq!(
                field("device_uuid"),
                Some(Superblock::uuid_string(&sb.device_uuid)),
                "{what}"
            );
            let state = if sb.is_clean() { "clean" } else { "active" };
            assert_eq!(field("state").as_deref(), Some(state), "{what}");

            let theirs = std::fs::read_to_string(array.join(format!("examine-{n}.txt"))).unwrap();
            let device = theirs.lines().next().unwrap_or("").trim_end_matches(':');
            let ours = examine_text(&sb, device);
            assert_eq!(ours.lines().next(), theirs.lines().next(), "{what}");
            assert_eq!(
                comparable(&ours),
                comparable(&theirs),
                "{what}\nours:\n{ours}"
            );
            assert!(
                theirs.contains(&format!("Name : {}  (local", sb.name())),
                "{what}: name {}",
                sb.name()
            );
            checked += 1;
        }
    }
    assert!(checked >= 18, "only {checked} members checked");
}
