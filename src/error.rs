//! One error type for the whole crate: every data error names the file (or list line, or cache
//! record) and the cause, and keeps the underlying error as its `source()`.

use std::fmt;
use std::path::{Path, PathBuf};

/// A boxed error from a decoder or another library, kept as the `source()` of an [`Error`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The error type of imagefeed.
///
/// One pointer wide, so it is cheap to carry through the pipeline's channels. Use
/// [`Error::kind`] to inspect it, [`Error::path`] to get the file it is about, and
/// [`Error::is_data_error`] to tell a bad sample (which [`OnError::Skip`] may skip) from a
/// configuration, cache or device problem (which always fails).
///
/// # Display and `source()`
///
/// `Display` names the file and what failed, and `source()` returns only what `Display` has
/// not written, so that a reporter walking the chain (anyhow's `{:#}` and `{:?}`, the command
/// line's `imagefeed: error: …`) prints every cause once:
///
/// - a cause from outside imagefeed (the operating system's, the decoder's, the object store's,
///   the driver's message) is part of the text (`a.jpg: cannot decode image: truncated`), and
///   `source()` goes on from that cause's own `source()`, as `std::io::Error` does with the
///   error it wraps. The cause itself stays in [`Error::kind`] (`ErrorKind::Io { source, .. }`);
/// - [`ErrorKind::TooManyFailures`] says that the limit was passed, and its `source()` is the
///   failure that passed it.
pub struct Error(Box<ErrorKind>);

/// What went wrong. Each variant that concerns a file carries its path.
#[derive(Debug)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Reading a file failed: missing, permission denied, a directory, a read error.
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// A file could be read but is not a usable image: empty, truncated, corrupt, of an
    /// unsupported format, or larger than `max_pixels`.
    Decode {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        source: BoxError,
    },
    /// Object storage failed after its retries: the store is unreachable, stopped answering or
    /// keeps failing. Not a bad sample (the next ones would fail the same way), so the epoch
    /// ends even under [`OnError::Skip`]. A missing object or denied access is an
    /// [`ErrorKind::Io`] naming the object instead.
    Remote {
        /// The object (`s3://bucket/key`, or `…/shard.tar[member]`).
        path: PathBuf,
        /// What the client reported.
        source: std::io::Error,
    },
    /// A sample's field ([`Field`](crate::Field)) is missing where it is required, over its
    /// byte limit, or not of a kind the loader delivers. A fault of that sample:
    /// [`OnError::Skip`] may skip it.
    Field {
        /// The sample (`shard.tar[KEY.jpg]`, a file, `file.parquet[row 12]`).
        path: PathBuf,
        /// The field's name.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// A line of a file list could not be parsed.
    List {
        /// The list file.
        path: PathBuf,
        /// The 1-based line number.
        line: usize,
        /// What is wrong with the line.
        reason: String,
    },
    /// A source (a list, a folder) holds nothing usable, or cannot be listed.
    Source {
        /// The list file or folder.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The on-disk cache is corrupt or unusable.
    CorruptCache {
        /// The cache file (delete it to rebuild the cache).
        path: PathBuf,
        /// What is wrong, e.g. which record failed its checksum.
        detail: String,
    },
    /// A setting is invalid, or the settings need more memory than allowed.
    InvalidConfig {
        /// The builder setting concerned.
        setting: &'static str,
        /// Why it is rejected and what to do.
        reason: String,
    },
    /// The GPU could not be used.
    Device(BoxError),
    /// A training framework (candle, burn, tch) could not make a tensor of a batch.
    Tensor(BoxError),
    /// A setting needs a cargo feature that this build does not have.
    FeatureDisabled {
        /// The cargo feature to enable.
        feature: &'static str,
    },
    /// More samples failed than `OnError::Skip { max }` allows.
    TooManyFailures {
        /// How many samples were skipped.
        skipped: u64,
        /// The failure that went over the limit.
        last: Error,
    },
    /// A pipeline thread panicked. The panic was caught; the pipeline is stopped.
    WorkerPanicked {
        /// The stage whose thread panicked, e.g. `"decode"`.
        stage: &'static str,
        /// The sample it was working on, when known.
        path: Option<PathBuf>,
        /// The panic message, when it was a string.
        message: String,
    },
    /// A thread could not be started.
    Spawn(std::io::Error),
}

/// What the loader does when one sample cannot be loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnError {
    /// The epoch yields the error (naming the file) and stops. The default: training on fewer
    /// images without knowing it is a correctness bug.
    #[default]
    Fail,
    /// Skip the sample, log it once with `log::warn!`, count it in
    /// [`Stats::skipped`](crate::Stats::skipped) and go on. More than `max` skipped samples in one
    /// epoch end the epoch with [`ErrorKind::TooManyFailures`]. Labels never shift: every
    /// delivered image carries its own label and dataset index.
    Skip {
        /// The most samples an epoch may skip (`u64::MAX` for no limit).
        max: u64,
    },
}

impl OnError {
    /// `Skip` with no limit on the number of skipped samples.
    pub const SKIP_ALL: OnError = OnError::Skip { max: u64::MAX };
}

impl Error {
    pub(crate) fn new(kind: ErrorKind) -> Self {
        Error(Box::new(kind))
    }
    /// What went wrong.
    pub fn kind(&self) -> &ErrorKind {
        &self.0
    }
    /// Consumes the error and returns what went wrong.
    pub fn into_kind(self) -> ErrorKind {
        *self.0
    }
    /// The file (image, list, folder or cache) the error is about, if any.
    pub fn path(&self) -> Option<&Path> {
        match &*self.0 {
            ErrorKind::Io { path, .. }
            | ErrorKind::Decode { path, .. }
            | ErrorKind::List { path, .. }
            | ErrorKind::Source { path, .. }
            | ErrorKind::CorruptCache { path, .. }
            | ErrorKind::Field { path, .. }
            | ErrorKind::Remote { path, .. } => Some(path),
            ErrorKind::TooManyFailures { last, .. } => last.path(),
            ErrorKind::WorkerPanicked { path, .. } => path.as_deref(),
            _ => None,
        }
    }
    /// True for an error about one sample (unreadable or undecodable file), which
    /// [`OnError::Skip`] may skip. Configuration, list, cache and device errors are not.
    pub fn is_data_error(&self) -> bool {
        matches!(
            &*self.0,
            ErrorKind::Io { .. } | ErrorKind::Decode { .. } | ErrorKind::Field { .. }
        )
    }

    /// Whether the error is a property of the sample's bytes, the same every time they are
    /// read: undecodable data, an unknown format, a size over the limits
    /// ([`ErrorKind::Decode`]). An on-disk cache records only these; any I/O error (a
    /// permission, a full table of open files, a network file system's stale handle, a store
    /// that did not answer) fails or skips the sample in this epoch only, and the next epoch
    /// reads it again.
    pub fn is_permanent(&self) -> bool {
        matches!(&*self.0, ErrorKind::Decode { .. })
    }

    /// The same failure again, for a reader that remembers one (a shard whose table could not
    /// be read fails each of its samples the same way): the same kind and path, the cause as
    /// text.
    pub(crate) fn again(&self) -> Error {
        let text = |e: &dyn std::fmt::Display| e.to_string();
        match &*self.0 {
            ErrorKind::Io { path, source } => Error::io(
                path.clone(),
                std::io::Error::new(source.kind(), text(source)),
            ),
            ErrorKind::Remote { path, source } => Error::remote(
                path.clone(),
                std::io::Error::new(source.kind(), text(source)),
            ),
            ErrorKind::Decode { path, source } => {
                Error::decode(path.clone(), DecodeFailure(text(source)))
            }
            ErrorKind::Source { path, reason } => Error::source(path.clone(), reason.clone()),
            ErrorKind::Field {
                path,
                field,
                reason,
            } => Error::field(path.clone(), field, reason.clone()),
            _ => Error::source(self.path().unwrap_or(Path::new("")), self.to_string()),
        }
    }

    /// The error of a sample listed at `line` of file list `list`, saying so (an I/O or
    /// decode error; any other comes back as it is).
    pub(crate) fn listed_at(self, list: &Path, line: u64) -> Error {
        let at = format!(" (listed at {}:{line})", list.display());
        match *self.0 {
            ErrorKind::Io { path, source } => Error::io(
                path,
                std::io::Error::new(source.kind(), format!("{source}{at}")),
            ),
            ErrorKind::Decode { path, source } => {
                Error::decode(path, DecodeFailure(format!("{source}{at}")))
            }
            kind => Error::new(kind),
        }
    }

    /// The cause without the path, for recording a failed sample.
    pub(crate) fn reason(&self) -> String {
        match &*self.0 {
            ErrorKind::Io { source, .. } => source.to_string(),
            ErrorKind::Decode { source, .. } => source.to_string(),
            _ => self.to_string(),
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::new(ErrorKind::Io {
            path: path.into(),
            source,
        })
    }
    #[cfg_attr(not(feature = "remote"), allow(dead_code))]
    pub(crate) fn remote(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::new(ErrorKind::Remote {
            path: path.into(),
            source,
        })
    }
    pub(crate) fn decode(path: impl Into<PathBuf>, source: impl Into<BoxError>) -> Self {
        Self::new(ErrorKind::Decode {
            path: path.into(),
            source: source.into(),
        })
    }
    pub(crate) fn list(path: impl Into<PathBuf>, line: usize, reason: impl Into<String>) -> Self {
        Self::new(ErrorKind::List {
            path: path.into(),
            line,
            reason: reason.into(),
        })
    }
    pub(crate) fn source(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        Self::new(ErrorKind::Source {
            path: path.into(),
            reason: reason.into(),
        })
    }
    pub(crate) fn field(path: impl Into<PathBuf>, field: &str, reason: impl Into<String>) -> Self {
        Self::new(ErrorKind::Field {
            path: path.into(),
            field: field.to_string(),
            reason: reason.into(),
        })
    }
    pub(crate) fn corrupt_cache(path: impl Into<PathBuf>, detail: impl Into<String>) -> Self {
        Self::new(ErrorKind::CorruptCache {
            path: path.into(),
            detail: detail.into(),
        })
    }
    /// Refuses a count setting over its cap (the caps keep channels and thread pools sized by
    /// these settings bounded even under a memory limit of `u64::MAX`).
    pub(crate) fn at_most(setting: &'static str, value: usize, max: usize) -> Result<(), Error> {
        if value > max {
            return Err(Error::config(
                setting,
                format!("{value} is over the most allowed, {max}"),
            ));
        }
        Ok(())
    }

    pub(crate) fn config(setting: &'static str, reason: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidConfig {
            setting,
            reason: reason.into(),
        })
    }
    pub(crate) fn device(source: impl Into<BoxError>) -> Self {
        Self::new(ErrorKind::Device(source.into()))
    }
    /// A framework's error while making a tensor of a batch (for adapter crates such as
    /// `imagefeed-burn`).
    pub fn tensor(source: impl Into<BoxError>) -> Self {
        Self::new(ErrorKind::Tensor(source.into()))
    }
    pub(crate) fn feature_disabled(feature: &'static str) -> Self {
        Self::new(ErrorKind::FeatureDisabled { feature })
    }
    pub(crate) fn spawn(source: std::io::Error) -> Self {
        Self::new(ErrorKind::Spawn(source))
    }
    pub(crate) fn worker_panicked(
        stage: &'static str,
        path: Option<PathBuf>,
        payload: &(dyn std::any::Any + Send),
    ) -> Self {
        Self::new(ErrorKind::WorkerPanicked {
            stage,
            path,
            message: panic_message(payload),
        })
    }
}

/// The text of a caught panic: its message when it was a string.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        String::from("non-string panic payload")
    }
}

/// A path as error messages show it: control characters (an escape sequence, a newline, a
/// NUL byte from a list line or a tar member name) are written escaped (`\u{1b}`, `\n`), so a
/// message never drives the terminal it is printed on.
struct Shown<'a>(&'a std::path::Path);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.as_os_str().is_empty() {
            // `Source::open("")` said ": No such file or directory".
            return f.write_str("(empty path)");
        }
        Escaped(&self.0.to_string_lossy()).fmt(f)
    }
}

/// Text with its control characters escaped, as [`Shown`] (for reasons that quote a list line
/// or a tar member name).
struct Escaped<'a>(&'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.0;
        if !text.chars().any(char::is_control) {
            return f.write_str(text);
        }
        for c in text.chars() {
            if c.is_control() {
                write!(f, "{}", c.escape_default())?;
            } else {
                write!(f, "{c}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &*self.0 {
            ErrorKind::Io { path, source } => write!(f, "{}: {}", Shown(path), Escaped(&source.to_string())),
            ErrorKind::Remote { path, source } => write!(
                f,
                "{}: object storage failed after retries: {}",
                Shown(path),
                Escaped(&source.to_string())
            ),
            ErrorKind::Decode { path, source } => {
                write!(
                    f,
                    "{}: cannot decode image: {}",
                    Shown(path),
                    Escaped(&source.to_string())
                )
            }
            ErrorKind::List { path, line, reason } => {
                write!(f, "{}:{line}: {}", Shown(path), Escaped(reason))
            }
            ErrorKind::Source { path, reason } => {
                write!(f, "{}: {}", Shown(path), Escaped(reason))
            }
            ErrorKind::Field {
                path,
                field,
                reason,
            } => write!(
                f,
                "{}: field `{}`: {}",
                Shown(path),
                Escaped(field),
                Escaped(reason)
            ),
            ErrorKind::CorruptCache { path, detail } => write!(
                f,
                "{}: corrupt cache: {} (delete the file to rebuild it)",
                Shown(path),
                Escaped(detail)
            ),
            ErrorKind::InvalidConfig { setting, reason } => {
                write!(f, "invalid setting `{setting}`: {}", Escaped(reason))
            }
            ErrorKind::Device(e) => write!(f, "device error: {}", Escaped(&e.to_string())),
            ErrorKind::Tensor(e) => write!(f, "tensor error: {}", Escaped(&e.to_string())),
            ErrorKind::FeatureDisabled { feature } => write!(
                f,
                "this build of imagefeed lacks the `{feature}` cargo feature; rebuild with `--features {feature}`"
            ),
            // The failure that went over the limit is the `source()`, not part of this text.
            ErrorKind::TooManyFailures { skipped, .. } => write!(
                f,
                "too many failed samples ({skipped} skipped, over the `OnError::Skip` maximum)"
            ),
            ErrorKind::WorkerPanicked {
                stage,
                path,
                message,
            } => match path {
                Some(p) => write!(
                    f,
                    "{}: the {stage} thread panicked on this sample: {}",
                    Shown(p),
                    Escaped(message)
                ),
                None => write!(f, "the {stage} thread panicked: {}", Escaped(message)),
            },
            ErrorKind::Spawn(e) => write!(f, "cannot start a pipeline thread: {e}"),
        }
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

// `source()` skips what `Display` wrote: see "Display and `source()`" on `Error`.
impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &*self.0 {
            ErrorKind::Io { source, .. } | ErrorKind::Remote { source, .. } => source.source(),
            ErrorKind::Decode { source, .. }
            | ErrorKind::Device(source)
            | ErrorKind::Tensor(source) => source.source(),
            ErrorKind::Spawn(source) => source.source(),
            ErrorKind::TooManyFailures { last, .. } => Some(last),
            _ => None,
        }
    }
}

/// A decode failure described in words; the `source` of an [`ErrorKind::Decode`].
#[derive(Debug, Clone)]
pub(crate) struct DecodeFailure(pub(crate) String);

impl fmt::Display for DecodeFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for DecodeFailure {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_escape_control_characters_of_paths_and_quoted_names() {
        let e = Error::source("data/\u{1b}[2Jx.tar", "member `a\nb.jpg`: \0 inside");
        assert_eq!(
            e.to_string(),
            "data/\\u{1b}[2Jx.tar: member `a\\nb.jpg`: \\u{0} inside"
        );
        let e = Error::list("list.txt", 3, "`x\ty.jpg` is listed again");
        assert_eq!(e.to_string(), "list.txt:3: `x\\ty.jpg` is listed again");
        // Causes that quote text from elsewhere (a server's multi-line answer, a decoder's
        // message, a setting's value) too.
        let io = std::io::Error::other("<Error>\n<Key>a\u{1b}b</Key>");
        assert_eq!(
            Error::remote("s3://b/k", io).to_string(),
            "s3://b/k: object storage failed after retries: <Error>\\n<Key>a\\u{1b}b</Key>"
        );
        assert_eq!(
            Error::decode("a.jpg", DecodeFailure("bad\rmarker".into())).to_string(),
            "a.jpg: cannot decode image: bad\\rmarker"
        );
        assert_eq!(
            Error::config("cache", "x\u{7}y").to_string(),
            "invalid setting `cache`: x\\u{7}y"
        );
        // Plain text is untouched.
        assert_eq!(Error::source("a b.tar", "ok").to_string(), "a b.tar: ok");
    }

    #[test]
    fn an_empty_path_is_named_as_one() {
        let e = Error::io("", std::io::Error::from(std::io::ErrorKind::NotFound));
        assert!(e.to_string().starts_with("(empty path): "), "{e}");
    }

    #[test]
    fn error_is_one_pointer_wide() {
        assert_eq!(std::mem::size_of::<Error>(), std::mem::size_of::<usize>());
    }

    #[test]
    fn display_names_the_file_and_the_cause() {
        let e = Error::decode("a/b.jpg", DecodeFailure("truncated".into()));
        assert_eq!(e.to_string(), "a/b.jpg: cannot decode image: truncated");
        assert_eq!(e.path(), Some(Path::new("a/b.jpg")));
        assert!(e.is_data_error());
        let e = Error::list("train.txt", 7, "label `x` is not an integer");
        assert_eq!(e.to_string(), "train.txt:7: label `x` is not an integer");
        assert!(!e.is_data_error());
    }

    /// Every cause prints once when the chain is walked (anyhow printed each twice when a cause also put its source in its text).
    #[test]
    fn display_does_not_repeat_the_source() {
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl fmt::Display for Outer {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("outer")
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let deep = || Outer(std::io::Error::other("deep"));
        let chain = |e: &Error| {
            let mut texts = vec![e.to_string()];
            let mut next = std::error::Error::source(e);
            while let Some(s) = next {
                texts.push(s.to_string());
                next = s.source();
            }
            texts
        };
        let errors = [
            Error::io("a.jpg", std::io::Error::other(deep())),
            Error::remote("s3://b/k", std::io::Error::other(deep())),
            Error::decode("a.jpg", deep()),
            Error::device(deep()),
            Error::spawn(std::io::Error::other(deep())),
            Error::new(ErrorKind::TooManyFailures {
                skipped: 2,
                last: Error::decode("b.jpg", deep()),
            }),
        ];
        for e in &errors {
            let texts = chain(e);
            for (i, later) in texts.iter().enumerate().skip(1) {
                assert!(!texts[i - 1].contains(later.as_str()), "{texts:?}");
            }
            assert!(texts.concat().contains("outer"), "{texts:?}");
            assert_eq!(texts.last().map(String::as_str), Some("deep"), "{texts:?}");
        }
        let texts = chain(&errors[5]);
        assert_eq!(texts.len(), 3, "{texts:?}");
        assert!(
            texts[1].starts_with("b.jpg: cannot decode image: outer"),
            "{texts:?}"
        );
    }

    #[test]
    fn too_many_failures_keeps_the_last_path() {
        let last = Error::io("x.jpg", std::io::Error::from(std::io::ErrorKind::NotFound));
        let e = Error::new(ErrorKind::TooManyFailures { skipped: 3, last });
        assert_eq!(e.path(), Some(Path::new("x.jpg")));
        assert!(std::error::Error::source(&e).is_some());
    }
}
