//! `xraid examine`: a member's superblock in mdadm --examine's words.

use anyhow::{bail, Result};
use xraid_array::read_superblock;
use xraid_member::{DirectMode, FileMember, OpenOptions};

use crate::cli::ExamineArgs;

pub fn run(args: ExamineArgs) -> Result<()> {
    let options = OpenOptions {
        write: false,
        direct: DirectMode::Off,
        lock: false,
    };
    for path in &args.members {
        let member = FileMember::open(path, &options)?;
        let Some(sb) = read_superblock(&member, path)? else {
            bail!(
                "{}: not an md member (no md superblock at 4 KiB)",
                path.display()
            );
        };
        print!(
            "{}",
            xraid_format::examine_text(&sb, &path.display().to_string())
        );
    }
    Ok(())
}
