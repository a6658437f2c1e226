//! The memory this process may use, for the loader's memory guard
//! ([`host_memory_limit`](crate::LoaderBuilder::host_memory_limit)'s default): the machine's,
//! or the limit of the process's own cgroup chain (Linux; `None` elsewhere).

/// The memory this process may use: the machine's `MemTotal`, or the smallest memory limit of
/// the process's own cgroup and its ancestors where that is lower (cgroup v2 `memory.max`, v1
/// `memory.limit_in_bytes`): the limits Slurm, Kubernetes, systemd and containers set on a
/// job. `None` if none can be read.
#[cfg_attr(not(feature = "unstable-tools"), allow(unreachable_pub))]
pub fn memory_limit_bytes() -> Option<u64> {
    memory_limit_under(std::path::Path::new("/"))
}

/// [`memory_limit_bytes`] with `/proc` and `/sys` read under `root` (a fixture tree in tests).
pub(crate) fn memory_limit_under(root: &std::path::Path) -> Option<u64> {
    let total = std::fs::read_to_string(root.join("proc/meminfo"))
        .ok()
        .and_then(|t| {
            let line = t.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kb: u64 = line["MemTotal:".len()..]
                .split_whitespace()
                .next()?
                .parse()
                .ok()?;
            kb.checked_mul(1024)
        });
    let cgroup = cgroup_memory_limit(root);
    match (total, cgroup) {
        (Some(t), Some(c)) => Some(t.min(c)),
        (t, c) => t.or(c),
    }
}

/// The smallest memory limit along this process's cgroup chain, v2 or v1, if any is set.
fn cgroup_memory_limit(root: &std::path::Path) -> Option<u64> {
    let cgroups = std::fs::read_to_string(root.join("proc/self/cgroup")).ok()?;
    let mountinfo = std::fs::read_to_string(root.join("proc/self/mountinfo")).unwrap_or_default();
    let mut limits = Vec::new();
    for line in cgroups.lines() {
        // `ID:CONTROLLERS:PATH`; v2's line is `0::PATH`.
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let (v2, file) = if controllers.is_empty() {
            (true, "memory.max")
        } else if controllers.split(',').any(|c| c == "memory") {
            (false, "memory.limit_in_bytes")
        } else {
            continue;
        };
        let Some((mount_root, mount_point)) = cgroup_mount(&mountinfo, v2) else {
            continue;
        };
        let mount_point = root.join(mount_point.trim_start_matches('/'));
        // The process's cgroup as a folder under the mount: its path with the mount's own
        // root taken off (a container sees its cgroup namespace's root as `/`).
        let rel = path
            .strip_prefix(mount_root.as_str())
            .unwrap_or(path)
            .trim_start_matches('/');
        let mut dir = mount_point.join(rel);
        if !dir.is_dir() {
            // The path is not visible here (another namespace): the mount's root is the
            // nearest cgroup we can read.
            dir = mount_point.clone();
        }
        loop {
            if let Some(limit) = read_limit(&dir.join(file)) {
                limits.push(limit);
            }
            if dir == mount_point || !dir.pop() || !dir.starts_with(&mount_point) {
                break;
            }
        }
    }
    limits.into_iter().min()
}

/// A limit file's value: a number of bytes, or `None` for `max` (v2) and v1's huge "no limit".
fn read_limit(file: &std::path::Path) -> Option<u64> {
    let v: u64 = std::fs::read_to_string(file).ok()?.trim().parse().ok()?;
    (v < 1 << 60).then_some(v)
}

/// The root (in the hierarchy) and mount point of the cgroup v2 mount (`v2`) or of the v1
/// mount of the memory controller, from `/proc/self/mountinfo`.
fn cgroup_mount(mountinfo: &str, v2: bool) -> Option<(String, String)> {
    mountinfo.lines().find_map(|line| {
        // ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS
        let (left, right) = line.split_once(" - ")?;
        let mut l = left.split(' ');
        let root = l.nth(3)?;
        let point = l.next()?;
        let mut r = right.split(' ');
        let fstype = r.next()?;
        let super_options = r.nth(1).unwrap_or("");
        let ours = if v2 {
            fstype == "cgroup2"
        } else {
            fstype == "cgroup" && super_options.split(',').any(|o| o == "memory")
        };
        ours.then(|| (unescape(root), unescape(point)))
    })
}

/// mountinfo writes spaces, tabs, newlines and backslashes in paths as octal escapes.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    const MEMINFO: &str = "MemTotal:       16384000 kB\nMemFree: 1 kB\n";

    #[test]
    fn cgroup_v2_takes_the_smallest_limit_along_the_process_chain() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        write(root, "proc/meminfo", MEMINFO);
        write(
            root,
            "proc/self/cgroup",
            "0::/system.slice/slurmstepd.scope/job_42/step_0\n",
        );
        write(
            root,
            "proc/self/mountinfo",
            "24 1 0:21 / /proc rw - proc proc rw\n30 24 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n",
        );
        // The root cgroup's own file (the only one the old guard read) says nothing.
        write(root, "sys/fs/cgroup/memory.max", "max\n");
        write(root, "sys/fs/cgroup/system.slice/memory.max", "max\n");
        write(
            root,
            "sys/fs/cgroup/system.slice/slurmstepd.scope/job_42/memory.max",
            "8589934592\n",
        );
        write(
            root,
            "sys/fs/cgroup/system.slice/slurmstepd.scope/job_42/step_0/memory.max",
            "max\n",
        );
        assert_eq!(memory_limit_under(root), Some(8 << 30));
        // A tighter limit further down wins.
        write(
            root,
            "sys/fs/cgroup/system.slice/slurmstepd.scope/job_42/step_0/memory.max",
            "2147483648\n",
        );
        assert_eq!(memory_limit_under(root), Some(2 << 30));
        // A limit above the machine's memory: the machine's.
        write(
            root,
            "sys/fs/cgroup/system.slice/slurmstepd.scope/job_42/step_0/memory.max",
            "99999999999999\n",
        );
        write(
            root,
            "sys/fs/cgroup/system.slice/slurmstepd.scope/job_42/memory.max",
            "max\n",
        );
        assert_eq!(memory_limit_under(root), Some(16_384_000 * 1024));
    }

    #[test]
    fn cgroup_v1_reads_the_memory_controllers_chain() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        write(root, "proc/meminfo", MEMINFO);
        write(
            root,
            "proc/self/cgroup",
            "12:cpu,cpuacct:/slurm/uid_1/job_7\n4:memory:/slurm/uid_1/job_7/step_batch\n",
        );
        write(
            root,
            "proc/self/mountinfo",
            "40 30 0:35 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n41 30 0:36 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n",
        );
        write(
            root,
            "sys/fs/cgroup/memory/memory.limit_in_bytes",
            "9223372036854771712\n",
        );
        write(
            root,
            "sys/fs/cgroup/memory/slurm/uid_1/job_7/memory.limit_in_bytes",
            "4294967296\n",
        );
        write(
            root,
            "sys/fs/cgroup/memory/slurm/uid_1/job_7/step_batch/memory.limit_in_bytes",
            "9223372036854771712\n",
        );
        assert_eq!(memory_limit_under(root), Some(4 << 30));
    }

    #[test]
    fn a_cgroup_path_from_another_namespace_falls_back_to_the_mount_root() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        write(root, "proc/meminfo", MEMINFO);
        // A container: the host's path, a cgroup namespace whose root is mounted at the mount.
        write(root, "proc/self/cgroup", "0::/kubepods/pod1/abc\n");
        write(
            root,
            "proc/self/mountinfo",
            "30 24 0:26 / /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n",
        );
        write(root, "sys/fs/cgroup/memory.max", "1073741824\n");
        assert_eq!(memory_limit_under(root), Some(1 << 30));
        // No cgroup at all: the machine's memory.
        std::fs::remove_file(root.join("proc/self/cgroup")).unwrap();
        assert_eq!(memory_limit_under(root), Some(16_384_000 * 1024));
    }
}
