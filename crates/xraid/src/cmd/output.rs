//! The file `xraid read -o PATH` writes. A regular file (or a new one) is written
//! unnamed — a file the kernel forgets if the process dies (O_TMPFILE), where the file
//! system has them, else under a hidden name beside PATH — and takes PATH's name only
//! once the whole read succeeded: a read that fails or is killed part way neither leaves
//! a truncated file nor spoils the file that was there. Anything else (a device, a
//! pipe), and a file in a folder that takes no new file, is written in place.

use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// Where the bytes go until the read is done.
#[derive(Debug)]
enum Staging {
    /// An unnamed file in PATH's folder (O_TMPFILE).
    Unnamed,
    /// A hidden file beside PATH.
    Named(PathBuf),
    /// PATH itself.
    InPlace,
}

#[derive(Debug)]
pub(crate) struct Output {
    pub(crate) file: File,
    /// The file the bytes end up in (a symbolic link's target).
    path: PathBuf,
    /// The name the user gave, for messages.
    pub(crate) shown: PathBuf,
    staging: Staging,
    existed: bool,
}

impl Output {
    pub(crate) fn create(path: &Path) -> Result<Output> {
        let shown = path.to_owned();
        // Through a symbolic link, the file it names is the one to replace.
        let resolved;
        let path = match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.file_type().is_symlink() => {
                resolved = match std::fs::canonicalize(path) {
                    Ok(target) => target,
                    // A link to a file yet to be made.
                    Err(_) => {
                        let target = std::fs::read_link(path)
                            .with_context(|| format!("{}", path.display()))?;
                        path.parent().unwrap_or(Path::new("")).join(target)
                    }
                };
                resolved.as_path()
            }
            _ => path,
        };
        let existing = match std::fs::metadata(path) {
            Ok(meta) => Some(meta),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e).context(format!("{}", path.display())),
        };
        let existed = existing.is_some();
        let output = |file, staging| Output {
            file,
            path: path.to_owned(),
            shown: shown.clone(),
            staging,
            existed,
        };
        if let Some(meta) = existing.as_ref().filter(|m| m.is_file()) {
            // Only where the user may write the file (else the error a plain create
            // would give), and where a new file under its name would be the same file
            // to others: ours, and no other name links to it.
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(path)
                .with_context(|| format!("{}", shown.display()))?;
            use std::os::unix::fs::MetadataExt;
            // SAFETY: geteuid takes no arguments and cannot fail.
            let ours = meta.uid() == unsafe { libc::geteuid() };
            if meta.nlink() > 1 || !ours {
                file.set_len(0)
                    .with_context(|| format!("{}", shown.display()))?;
                return Ok(output(file, Staging::InPlace));
            }
        }
        if existing.as_ref().is_none_or(std::fs::Metadata::is_file) {
            let staged = unnamed_beside(path)
                .map(|file| (file, Staging::Unnamed))
                .or_else(|| named_beside(path).map(|(name, file)| (file, Staging::Named(name))));
            if let Some((file, staging)) = staged {
                if let Some(meta) = &existing {
                    file.set_permissions(meta.permissions())
                        .with_context(|| format!("{}", shown.display()))?;
                }
                return Ok(output(file, staging));
            }
        }
        // A device or a pipe, or a folder where no new file can be made: in place.
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .with_context(|| format!("{}", shown.display()))?;
        Ok(output(file, Staging::InPlace))
    }

    /// The read succeeded: its bytes are on disk under the output's name.
    pub(crate) fn keep(self) -> Result<()> {
        let name = match &self.staging {
            Staging::InPlace => return Ok(()),
            Staging::Named(name) => name.clone(),
            Staging::Unnamed => {
                let name = hidden_name(&self.path)
                    .with_context(|| format!("{}: not a file name", self.path.display()))?;
                give_name(&self.file, &name).with_context(|| format!("{}", name.display()))?;
                name
            }
        };
        // On disk before it takes the name, so a crash cannot leave a short file there.
        let done = self
            .file
            .sync_all()
            .and_then(|()| std::fs::rename(&name, &self.path));
        if done.is_err() {
            let _ = std::fs::remove_file(&name);
        }
        done.with_context(|| format!("{}", self.path.display()))
    }

    /// The read failed: the bytes read go (what PATH held before stays). Says what the
    /// output holds now.
    pub(crate) fn discard(self) -> String {
        match &self.staging {
            Staging::InPlace => format!("{} holds the bytes before them", self.shown.display()),
            Staging::Named(_) | Staging::Unnamed => {
                if let Staging::Named(name) = &self.staging {
                    let _ = std::fs::remove_file(name);
                }
                if self.existed {
                    format!("{} is left as it was", self.shown.display())
                } else {
                    format!("{} was not made", self.shown.display())
                }
            }
        }
    }
}

/// PATH's folder.
fn folder_of(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// `.NAME.xraid-read-PID` beside PATH.
fn hidden_name(path: &Path) -> Option<PathBuf> {
    let mut name = std::ffi::OsString::from(".");
    name.push(path.file_name()?);
    name.push(format!(".xraid-read-{}", std::process::id()));
    Some(path.with_file_name(name))
}

/// An unnamed file in PATH's folder, where the file system makes them and this process
/// can name one later (through /proc).
fn unnamed_beside(path: &Path) -> Option<File> {
    if !Path::new("/proc/self/fd").is_dir() {
        return None;
    }
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_TMPFILE)
        .mode(0o666)
        .open(folder_of(path))
        .ok()
}

/// A new hidden file beside PATH.
fn named_beside(path: &Path) -> Option<(PathBuf, File)> {
    let name = hidden_name(path)?;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&name)
        .ok()?;
    Some((name, file))
}

/// Gives the unnamed `file` the name `name` (linkat through /proc, which needs no
/// privilege, where AT_EMPTY_PATH would).
fn give_name(file: &File, name: &Path) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    let from = std::ffi::CString::new(format!("/proc/self/fd/{}", file.as_raw_fd()))?;
    let to = std::ffi::CString::new(name.as_os_str().as_bytes())?;
    // SAFETY: both arguments are NUL-terminated strings that outlive the call, and
    // AT_FDCWD with AT_SYMLINK_FOLLOW makes linkat follow /proc's link to the open file.
    let done = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if done == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .expect("dir")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn the_output_takes_its_name_only_when_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("out.raw");
        std::fs::write(&path, b"before").expect("before");
        let mut output = Output::create(&path).expect("create");
        output.file.write_all(b"after").expect("write");
        assert_eq!(std::fs::read(&path).expect("read"), b"before");
        assert_eq!(
            output.discard(),
            format!("{} is left as it was", path.display())
        );
        assert_eq!(entries(dir.path()), ["out.raw"], "nothing left behind");

        let mut output = Output::create(&path).expect("create");
        output.file.write_all(b"after").expect("write");
        output.keep().expect("keep");
        assert_eq!(std::fs::read(&path).expect("read"), b"after");
        assert_eq!(entries(dir.path()), ["out.raw"], "nothing left behind");
    }

    #[test]
    fn a_dying_reader_leaves_no_file_where_unnamed_files_are_made() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("new.raw");
        let output = Output::create(&path).expect("create");
        if !matches!(output.staging, Staging::Unnamed) {
            eprintln!("skipped: the temporary folder's file system makes no unnamed files");
            return;
        }
        // Dropped without keep or discard, as when the process dies.
        drop(output);
        assert!(entries(dir.path()).is_empty());
    }

    #[test]
    fn a_file_with_other_names_is_written_in_place() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("out.raw");
        std::fs::write(&path, b"before").expect("before");
        std::fs::hard_link(&path, dir.path().join("other-name")).expect("hard link");
        let mut output = Output::create(&path).expect("create");
        assert!(matches!(output.staging, Staging::InPlace));
        output.file.write_all(b"after").expect("write");
        output.keep().expect("keep");
        assert_eq!(
            std::fs::read(dir.path().join("other-name")).expect("read"),
            b"after",
            "both names still name one file"
        );
    }
}
