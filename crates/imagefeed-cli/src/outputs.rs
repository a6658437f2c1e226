//! Output files: an output option may replace only a file that holds what it writes.

use crate::AnyError;
use imagefeed::LoaderState;

/// What an output option writes.
#[derive(Clone, Copy)]
pub(crate) enum Output {
    /// `--indices-out`: one sample index a line.
    Indices,
    /// `--state-out`: one loader state line.
    State,
    /// `--sweep-svg`: the sweep's plot.
    Svg,
    /// `--fields-out`: one JSON object a sample.
    Fields,
}

/// Refuses to let an output option replace a file it did not write: `path` may be missing,
/// empty, a stream (a pipe, a character device such as `/dev/null`), or a regular file holding
/// what that option writes. Anything else (an image, a shard, a list) is left alone.
pub(crate) fn replaceable(path: &std::path::Path, kind: Output) -> Result<(), AnyError> {
    use std::io::Read;
    use std::os::unix::fs::FileTypeExt;
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("{}: {e}", path.display()).into()),
    };
    let t = meta.file_type();
    if t.is_fifo() || t.is_char_device() || (t.is_file() && meta.len() == 0) {
        return Ok(());
    }
    let (option, what) = match kind {
        Output::Indices => ("--indices-out", "one sample index a line"),
        Output::Fields => ("--fields-out", "one JSON object a sample"),
        Output::State => ("--state-out", "a loader state"),
        Output::Svg => ("--sweep-svg", "a sweep plot"),
    };
    let refuse = || -> AnyError {
        format!(
            "{}: exists and does not hold what {option} writes ({what}); imagefeed does not \
             replace files it did not write: remove it or choose another file",
            path.display()
        )
        .into()
    };
    if !t.is_file() {
        return Err(refuse());
    }
    let mut file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let ours = match kind {
        Output::Indices => {
            // Read through, stopping at the first byte an index file cannot hold.
            let mut buf = vec![0u8; 64 << 10];
            loop {
                match file.read(&mut buf) {
                    Ok(0) => break true,
                    // `INDEX`, `INDEX padded`, `SOURCE INDEX` lines.
                    Ok(n)
                        if buf[..n].iter().all(|b| {
                            b.is_ascii_digit() || b.is_ascii_lowercase() || b" \n".contains(b)
                        }) => {}
                    Ok(_) => break false,
                    Err(e) => return Err(format!("{}: {e}", path.display()).into()),
                }
            }
        }
        Output::State => read_state(path).is_ok(),
        Output::Fields => {
            let want = b"{\"source\":";
            let mut head = [0u8; 10];
            file.read_exact(&mut head).is_ok() && &head == want
        }
        Output::Svg => {
            let mut head = Vec::new();
            file.take(1024)
                .read_to_end(&mut head)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            String::from_utf8_lossy(&head).contains("imagefeed bench --sweep")
        }
    };
    if ours {
        Ok(())
    } else {
        Err(refuse())
    }
}

/// Whether `a` and `b` name the same existing file.
pub(crate) fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// The loader state in a `--state-out` file: one short line (a larger file is not one).
pub(crate) fn read_state(path: &std::path::Path) -> Result<LoaderState, AnyError> {
    use std::io::Read;
    let named = |e: std::io::Error| format!("{}: {e}", path.display());
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(4096).read_to_string(&mut text))
        .map_err(named)?;
    if text.len() >= 4096 {
        return Err(format!(
            "{}: not a loader state (a state is one short line)",
            path.display()
        )
        .into());
    }
    Ok(text.trim().parse()?)
}
