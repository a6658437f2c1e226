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
