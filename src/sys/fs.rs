//! Files a command writes, and the kinds of files it reads.
//!
//! [`AtomicFile`] writes through a temporary sibling that is renamed over the destination only
//! once it is complete and on disk, so an interrupted write leaves the old file or the new one,
//! never half of one. What the rename may replace is decided first:
//! - nothing, or a regular file (its permission bits are kept);
//! - a symbolic link is written *through*: the chain is followed to its end, and that file is
//!   replaced atomically (or created, for a dangling link), so the link stays a link;
//! - anything else (a directory, a device such as `/dev/null`, a FIFO, a socket) is refused
//!   with an error that names the kind: renaming over it would replace a device node with a
//!   regular file.
//!
//! The destination is checked again just before the rename. The temporary's name is registered
//! with [`super::signal`], so a second Ctrl-C (which exits at once), SIGTERM, SIGHUP and SIGBUS
//! unlink it on the way out; dropping an uncommitted `AtomicFile` removes it too.
//!
//! Like `mv`, the rename gives the name a new file: a read-only file is replaced (the
//! directory's permissions decide, not the file's), and another hard link to the old file keeps
//! the old content.

use std::ffi::CString;
use std::fmt;
use std::fs::{File, Metadata, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// How many symbolic links a destination may go through (the kernel's own limit, `MAXSYMLINKS`).
const MAX_LINK_HOPS: usize = 40;
/// Mode of a new file (before the umask), as `creat(2)` callers use.
const NEW_FILE_MODE: u32 = 0o666;
/// Names tried for the temporary file before giving up.
const MAX_TEMP_TRIES: usize = 100;
/// Bytes buffered before a write reaches the kernel.
const WRITE_BUFFER: usize = 1 << 20;

/// What a path names, in words for messages ("is a FIFO").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    Regular,
    Directory,
    Symlink,
    CharDevice,
    BlockDevice,
    Fifo,
    Socket,
}

impl FileKind {
    /// The kind of `meta` (from `symlink_metadata` for links, `metadata` through them).
    pub fn of(meta: &Metadata) -> FileKind {
        let t = meta.file_type();
        if t.is_symlink() {
            FileKind::Symlink
        } else if t.is_dir() {
            FileKind::Directory
        } else if t.is_char_device() {
            FileKind::CharDevice
        } else if t.is_block_device() {
            FileKind::BlockDevice
        } else if t.is_fifo() {
            FileKind::Fifo
        } else if t.is_socket() {
            FileKind::Socket
        } else {
            FileKind::Regular
        }
    }

    /// "a directory", "a character device", …
    pub fn describe(self) -> &'static str {
        match self {
            FileKind::Regular => "a regular file",
            FileKind::Directory => "a directory",
            FileKind::Symlink => "a symbolic link",
            FileKind::CharDevice => "a character device",
            FileKind::BlockDevice => "a block device",
            FileKind::Fifo => "a FIFO (named pipe)",
            FileKind::Socket => "a socket",
        }
    }
}

/// Why a file could not be written.
#[derive(Debug)]
pub enum WriteError {
    /// The destination (or the end of its symlink chain, `target`) is not a regular file.
    NotRegular {
        path: PathBuf,
        target: PathBuf,
        kind: FileKind,
    },
    /// A symlink chain longer than the kernel follows, or one that loops.
    LinkLoop(PathBuf),
    /// A step failed: `what` says which ("cannot create a temporary file in …").
    Io {
        path: PathBuf,
        what: &'static str,
        err: io::Error,
    },
    /// The write was interrupted (Ctrl-C); the temporary file was removed.
    Interrupted,
}

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WriteError::NotRegular { path, target, kind } => {
                write!(f, "{}: ", path.display())?;
                if target != path {
                    write!(f, "links to {}, which ", target.display())?;
                }
                write!(
                    f,
                    "is {}; locus writes only regular files and will not replace it (give a \
                     path to a file)",
                    kind.describe()
                )
            }
            WriteError::LinkLoop(p) => write!(
                f,
                "{}: too many levels of symbolic links (a loop?); give a path to a file",
                p.display()
            ),
            WriteError::Io { path, what, err } => write!(f, "{}: {what}: {err}", path.display()),
            WriteError::Interrupted => write!(f, "interrupted; nothing was written"),
        }
    }
}

impl std::error::Error for WriteError {}

/// Where a write to `dest` must land: `dest` itself, or the end of its symlink chain; with the
/// permission bits of the file it replaces, if any.
fn resolve(dest: &Path) -> Result<(PathBuf, Option<u32>), WriteError> {
    let mut target = dest.to_path_buf();
    for _ in 0..MAX_LINK_HOPS {
        let meta = match std::fs::symlink_metadata(&target) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((target, None)),
            Err(err) => {
                return Err(WriteError::Io {
                    path: target,
                    what: "cannot look at the destination",
                    err,
                })
            }
        };
        match FileKind::of(&meta) {
            FileKind::Regular => return Ok((target, Some(meta.permissions().mode() & 0o7777))),
            FileKind::Symlink => {
                let link = std::fs::read_link(&target).map_err(|err| WriteError::Io {
                    path: target.clone(),
                    what: "cannot read the symbolic link",
                    err,
                })?;
                target = match target.parent() {
                    Some(dir) if link.is_relative() => dir.join(link),
                    _ => link,
                };
            }
            kind => {
                return Err(WriteError::NotRegular {
                    path: dest.to_path_buf(),
                    target,
                    kind,
                })
            }
        }
    }
    Err(WriteError::LinkLoop(dest.to_path_buf()))
}

/// Opens the FIFO `path` for reading without waiting for a writer, then waits until one has
/// sent something or come and gone, polling `stop` every fifth of a second (a blocking `open`
/// would wait through Ctrl-C: std retries it). Returns the file in blocking mode, or `None` if
/// `stop` was set first.
pub fn open_fifo_for_reading(path: &Path, stop: &AtomicBool) -> io::Result<Option<File>> {
    use std::os::fd::AsRawFd;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let fd = file.as_raw_fd();
    loop {
        if stop.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd that outlives the call.
        let r = unsafe { libc::poll(&mut pfd, 1, FIFO_POLL_MS) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if pfd.revents & (libc::POLLIN | libc::POLLHUP) != 0 {
            break;
        }
    }
    // SAFETY: fcntl on our own open descriptor; F_GETFL/F_SETFL touch no memory.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Some(file))
}

/// How long one wait for a FIFO's writer lasts before the stop flag is looked at again.
const FIFO_POLL_MS: libc::c_int = 200;

/// Bytes an unprivileged user may still write on the filesystem holding `dir`
/// (`statvfs(2)`: `f_bavail × f_frsize`), if it can be asked.
pub fn free_bytes(dir: &Path) -> Option<u64> {
    let c = CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: an all-zero statvfs is a valid value to be overwritten.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` a writable statvfs, both outliving the call.
    let r = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    (r == 0).then(|| (st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

/// Checks that `dest` is a destination [`AtomicFile`] would write (nothing there, a regular
/// file, or a symlink chain ending in one, in a directory where a file can be created), so a
/// command can refuse it before long work. Creates the temporary file and removes it again.
pub fn check_destination(dest: &Path) -> Result<(), WriteError> {
    AtomicFile::create(dest).map(drop)
}

/// A file being written atomically (see the module). Write to it, then [`AtomicFile::commit`].
pub struct AtomicFile {
    /// The file the rename replaces (the end of the destination's symlink chain).
    target: PathBuf,
    /// What the user named, for messages.
    dest: PathBuf,
    tmp: PathBuf,
    out: Option<BufWriter<File>>,
}

impl AtomicFile {
    /// Checks the destination and creates the temporary file beside the file it will replace.
    pub fn create(dest: &Path) -> Result<AtomicFile, WriteError> {
        let (target, mode) = resolve(dest)?;
        let dir = target
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let name = target.file_name().ok_or_else(|| WriteError::Io {
            path: dest.to_path_buf(),
            what: "has no file name",
            err: io::Error::from(io::ErrorKind::InvalidInput),
        })?;
        // `.NAME.tmp-PID`, or `.NAME.tmp-PID-N` where a killed run (in a container, often with
        // the same PID) left one behind: never reuse a file that might be another's.
        let mut attempt = 0;
        let (tmp, file) = loop {
            let mut tmp_name = std::ffi::OsString::from(".");
            tmp_name.push(name);
            tmp_name.push(format!(".tmp-{}", std::process::id()));
            if attempt > 0 {
                tmp_name.push(format!("-{attempt}"));
            }
            let tmp = dir.join(tmp_name);
            let opened = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(mode.unwrap_or(NEW_FILE_MODE))
                .open(&tmp);
            match opened {
                Ok(f) => break (tmp, f),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < MAX_TEMP_TRIES => {
                    attempt += 1
                }
                Err(err) => {
                    return Err(WriteError::Io {
                        path: dest.to_path_buf(),
                        what: "cannot create a temporary file beside it",
                        err,
                    })
                }
            }
        };
        if let Some(m) = mode {
            // The umask applied at creation; the replaced file's bits are what the user had.
            let _ = file.set_permissions(std::fs::Permissions::from_mode(m));
        }
        if let Ok(c) = CString::new(tmp.as_os_str().as_bytes()) {
            super::signal::register_temp(&c);
        }
        Ok(AtomicFile {
            target,
            dest: dest.to_path_buf(),
            tmp,
            out: Some(BufWriter::with_capacity(WRITE_BUFFER, file)),
        })
    }

    /// The path the user gave.
    pub fn dest(&self) -> &Path {
        &self.dest
    }

    fn io(&self, what: &'static str, err: io::Error) -> WriteError {
        WriteError::Io {
            path: self.dest.clone(),
            what,
            err,
        }
    }

    /// Writes all of `bytes`.
    pub fn write_all(&mut self, bytes: &[u8]) -> Result<(), WriteError> {
        let out = self.out.as_mut().expect("written after commit");
        out.write_all(bytes).map_err(|e| WriteError::Io {
            path: self.dest.clone(),
            what: "cannot write",
            err: e,
        })
    }

    /// Flushes, syncs, checks the destination once more and renames the file into place.
    pub fn commit(mut self) -> Result<(), WriteError> {
        let out = self.out.take().expect("committed twice");
        let file = out
            .into_inner()
            .map_err(|e| self.io("cannot write", e.into_error()))?;
        file.sync_all().map_err(|e| self.io("cannot write", e))?;
        drop(file);
        // Whatever took the destination's place since `create` gets the same scrutiny.
        let (target, _) = resolve(&self.dest)?;
        if target != self.target {
            return Err(self.io(
                "changed while it was being written",
                io::Error::from(io::ErrorKind::Other),
            ));
        }
        std::fs::rename(&self.tmp, &self.target)
            .map_err(|e| self.io("cannot rename the finished file into place", e))?;
        super::signal::unregister_temp();
        // The rename is durable once the directory is synced (best effort: some filesystems
        // refuse fsync on a directory).
        if let Some(dir) = self.target.parent().filter(|p| !p.as_os_str().is_empty()) {
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    }
}

impl Drop for AtomicFile {
    /// An uncommitted file (an error, a panic, Ctrl-C) leaves no temporary behind.
    fn drop(&mut self) {
        if self.out.take().is_some() || self.tmp.exists() {
            let _ = std::fs::remove_file(&self.tmp);
            super::signal::unregister_temp();
        }
    }
}

/// Writes `bytes` to `dest` atomically (see the module).
pub fn write_atomic(dest: &Path, bytes: &[u8]) -> Result<(), WriteError> {
    let mut f = AtomicFile::create(dest)?;
    f.write_all(bytes)?;
    f.commit()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("locus-fs-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn temporaries(d: &Path) -> Vec<String> {
        std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".tmp-"))
            .collect()
    }

    #[test]
    fn replaces_a_regular_file_keeping_its_mode() {
        let d = dir("regular");
        let p = d.join("out.bin");
        std::fs::write(&p, b"old").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
        write_atomic(&p, b"new").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o640);
        assert!(temporaries(&d).is_empty());
    }

    #[test]
    fn writes_through_a_symlink_chain_and_keeps_the_links() {
        let d = dir("links");
        let real = d.join("real.bin");
        std::fs::write(&real, b"old").unwrap();
        std::os::unix::fs::symlink("real.bin", d.join("a")).unwrap();
        std::os::unix::fs::symlink(d.join("a"), d.join("b")).unwrap();
        write_atomic(&d.join("b"), b"new").unwrap();
        assert_eq!(std::fs::read(&real).unwrap(), b"new");
        for l in ["a", "b"] {
            let m = std::fs::symlink_metadata(d.join(l)).unwrap();
            assert!(m.file_type().is_symlink(), "{l} is still a link");
        }
        // A dangling link gets its target created.
        std::os::unix::fs::symlink("fresh.bin", d.join("dangling")).unwrap();
        write_atomic(&d.join("dangling"), b"x").unwrap();
        assert_eq!(std::fs::read(d.join("fresh.bin")).unwrap(), b"x");
        assert!(temporaries(&d).is_empty());
    }

    #[test]
    fn refuses_what_is_not_a_regular_file() {
        let d = dir("refuse");
        let fifo = d.join("fifo");
        let c = CString::new(fifo.as_os_str().as_bytes()).unwrap();
        // SAFETY: `c` is a NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        std::os::unix::fs::symlink(&fifo, d.join("to-fifo")).unwrap();
        std::os::unix::fs::symlink("loop2", d.join("loop1")).unwrap();
        std::os::unix::fs::symlink("loop1", d.join("loop2")).unwrap();
        for (p, kind) in [
            (fifo.clone(), "FIFO"),
            (d.join("to-fifo"), "FIFO"),
            (d.clone(), "directory"),
            (PathBuf::from("/dev/null"), "character device"),
            (d.join("loop1"), "symbolic links"),
        ] {
            let e = write_atomic(&p, b"x").unwrap_err().to_string();
            assert!(e.contains(kind), "{}: {e}", p.display());
        }
        assert!(std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo());
        assert!(temporaries(&d).is_empty());
    }

    #[test]
    fn an_uncommitted_file_leaves_nothing() {
        let d = dir("drop");
        let p = d.join("out.bin");
        let mut f = AtomicFile::create(&p).unwrap();
        f.write_all(b"half").unwrap();
        drop(f);
        assert!(!p.exists());
        assert!(temporaries(&d).is_empty());
    }
}
