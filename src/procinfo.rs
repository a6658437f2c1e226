//! Process memory and thread counts from `/proc` (Linux), to measure rather than guess.
//! On other systems every function returns `None`.

fn status_field(name: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = text.lines().find(|l| l.starts_with(name))?;
    let value: u64 = line[name.len()..].split_whitespace().next()?.parse().ok()?;
    Some(if line.ends_with("kB") {
        value * 1024
    } else {
        value
    })
}

/// The peak resident set size of this process (`VmHWM`), in bytes.
pub fn peak_rss_bytes() -> Option<u64> {
    status_field("VmHWM:")
}

/// The current resident set size (`VmRSS`), in bytes.
pub fn rss_bytes() -> Option<u64> {
    status_field("VmRSS:")
}

/// The current anonymous resident memory (`RssAnon`: heap and stacks, not mapped files), in
/// bytes.
pub fn anon_rss_bytes() -> Option<u64> {
    status_field("RssAnon:")
}

/// The number of threads of this process.
pub fn thread_count() -> Option<u64> {
    status_field("Threads:")
}

/// Resets the peak RSS to the current RSS (Linux 4.0+), so that the next
/// [`peak_rss_bytes`] measures from now. Returns whether it worked.
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// The memory this process may use: the machine's `MemTotal`, or the container's cgroup
/// limit (v2 `memory.max`, v1 `memory.limit_in_bytes`) where that is lower. `None` if none
/// can be read.
pub fn memory_limit_bytes() -> Option<u64> {
    let total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|t| {
        let line = t.lines().find(|l| l.starts_with("MemTotal:"))?;
        let kb: u64 = line["MemTotal:".len()..]
            .split_whitespace()
            .next()?
            .parse()
            .ok()?;
        kb.checked_mul(1024)
    });
    let cgroup = [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .iter()
    .filter_map(|p| std::fs::read_to_string(p).ok()?.trim().parse::<u64>().ok())
    // cgroup v1 reports "no limit" as a huge number.
    .find(|&b| b < 1 << 60);
    match (total, cgroup) {
        (Some(t), Some(c)) => Some(t.min(c)),
        (t, c) => t.or(c),
    }
}
