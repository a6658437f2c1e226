//! The file-system helpers of the cache: paths beside the cache (`.partial`, `.lock`, per-host
//! names), symbolic links, what a path may hold before it is replaced, which file systems are
//! shared between hosts, the host's name, allocated sizes and the lock guard.

use std::fs::File;
use std::path::{Path, PathBuf};

use super::format;
use crate::error::Error;

pub(super) fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// `path`, or where it points if it is a symbolic link (so that writing replaces the target,
/// not the link).
pub(super) fn resolve_link(path: &Path) -> Result<PathBuf, Error> {
    let mut at = path.to_path_buf();
    // A link to a cache not written yet does not canonicalize: follow it by hand (a few
    // levels, like the kernel's loop limit).
    for _ in 0..8 {
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => {
                let target = std::fs::read_link(&at).map_err(|e| Error::io(&at, e))?;
                at = match at.parent() {
                    Some(dir) if target.is_relative() => dir.join(target),
                    _ => target,
                };
            }
            _ => return Ok(at),
        }
    }
    Err(Error::config(
        "cache",
        format!("{}: too many levels of symbolic links", path.display()),
    ))
}

/// Refuses to use `path` (the cache or its `.partial` file) if it holds anything but an
/// imagefeed cache: writing the cache replaces that file, and the loader never replaces what
/// the user keeps there. Missing and empty files are fine.
pub(super) fn check_replaceable(path: &Path) -> Result<(), Error> {
    let refuse = |found: String| {
        Err(Error::config(
            "cache",
            format!(
                "{} {found}, not an imagefeed cache: the loader will not replace it (choose another cache path, or move it away)",
                path.display()
            ),
        ))
    };
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(path, e)),
    };
    if meta.is_dir() {
        return refuse("is a directory".into());
    }
    if !meta.is_file() {
        return refuse("is a device, FIFO or socket".into());
    }
    if meta.len() == 0 {
        return Ok(());
    }
    let mut head = Vec::with_capacity(8);
    File::open(path)
        .and_then(|f| std::io::Read::read_to_end(&mut std::io::Read::take(f, 8), &mut head))
        .map_err(|e| Error::io(path, e))?;
    // A stopped writer leaves an empty `.partial` or one that starts with the header (it is
    // written before the file is sized), so a file of zeros is somebody else's (a disk image).
    if head == format::MAGIC {
        return Ok(());
    }
    refuse(format!(
        "holds {} bytes that do not start with imagefeed's cache header",
        meta.len()
    ))
}

/// Whether `dir` is on a file system whose `flock` and page cache do not coordinate hosts
/// (Linux `statfs`): its name, or `None` (local, or not known). FUSE file systems are taken as
/// shared: the cluster ones (GlusterFS, JuiceFS, ceph-fuse, s3fs, gcsfuse) are mounted
/// through it, and a per-host file costs a local FUSE mount nothing but a longer name.
pub(super) fn network_file_system(dir: &Path) -> Option<&'static str> {
    #[cfg(target_os = "linux")]
    {
        let magic = rustix::fs::statfs(dir).ok()?.f_type as i64 as u64 & 0xffff_ffff;
        let name = match magic {
            0x6969 => "NFS",
            0x517b | 0xff53_4d42 | 0xfe53_4d42 => "SMB/CIFS",
            0x0bd0_0bd0 => "Lustre",
            0x4750_4653 => "GPFS",
            0x00c3_6400 => "CephFS",
            0x1983_0326 => "BeeGFS",
            0x5346_414f => "AFS",
            0x0102_1997 => "9p",
            0x6573_5546 => "FUSE (GlusterFS, JuiceFS, ceph-fuse or another)",
            _ => return None,
        };
        Some(name)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = dir;
        None
    }
}

/// This host's name, for per-host cache files: `/proc/sys/kernel/hostname`, else `HOSTNAME`,
/// else `host`; characters other than letters, digits, `-`, `_` and `.` become `_`.
pub(super) fn host_name() -> String {
    let raw = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".into());
    raw.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Bytes a file takes on disk (its allocated blocks on Unix; a sparse file being filled takes
/// less than its length).
pub(super) fn allocated(meta: &std::fs::Metadata) -> u64 {
    #[cfg(unix)]
    {
        std::os::unix::fs::MetadataExt::blocks(meta).saturating_mul(512)
    }
    #[cfg(not(unix))]
    {
        meta.len()
    }
}

/// The exclusive lock on `PATH.lock`, held while a file is created, replaced or committed.
pub(super) struct LockGuard(pub(super) File);

impl Drop for LockGuard {
    fn drop(&mut self) {
        let _ = fs4::FileExt::unlock(&self.0);
    }
}
