//! [`OpenOptions`]: what a source's parquet and TFRecord files hold (their columns and
//! features), and how a source in object storage is read (the store's limits and retries).

use std::time::Duration;

#[cfg(feature = "parquet")]
use super::format::parquet::ParquetOptions;
use super::format::tfrecord::TfRecordOptions;
#[cfg(feature = "remote")]
use super::storage::remote::Limits;

/// How [`Source::open_with`](crate::Source::open_with) (and
/// [`Source::open_split_with`](crate::Source::open_split_with),
/// [`Source::from_url_with`](crate::Source::from_url_with)) opens a source: the columns of its
/// parquet files and the features of its TFRecord files, and for a source in object storage,
/// the limits and retries of its requests.
///
/// ```
/// use std::time::Duration;
/// let options = imagefeed::OpenOptions::default()
///     .max_requests(32)
///     .max_bytes_in_flight(128 << 20)
///     .retry_timeout(Duration::from_secs(60));
/// assert_eq!(options.max_requests, 32);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct OpenOptions {
    /// The most requests in flight at once (default 16).
    pub max_requests: usize,
    /// The most fetched bytes held at once, fetched and waiting to be decoded (default 64 MiB;
    /// one sample larger than this is still fetched, alone).
    pub max_bytes_in_flight: u64,
    /// How many times a request failing with a transient error (a 5xx answer, throttling, a
    /// dropped connection) is retried, with exponential backoff (default 5).
    pub retries: usize,
    /// No retry starts later than this after a request's first try (default 30 s): a store
    /// that stops answering ends the epoch with an error instead of a hang.
    pub retry_timeout: Duration,
    /// The columns of parquet files under the URL (default: the `datasets` layout).
    #[cfg(feature = "parquet")]
    #[cfg_attr(docsrs, doc(cfg(feature = "parquet")))]
    pub parquet: ParquetOptions,
    /// The feature keys of TFRecord shards under the URL (default: the ImageNet script's).
    pub tfrecord: TfRecordOptions,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            max_requests: 16,
            max_bytes_in_flight: 64 << 20,
            retries: 5,
            retry_timeout: Duration::from_secs(30),
            #[cfg(feature = "parquet")]
            parquet: ParquetOptions::default(),
            tfrecord: TfRecordOptions::default(),
        }
    }
}

impl OpenOptions {
    /// Sets [`OpenOptions::max_requests`] (at least 1).
    pub fn max_requests(mut self, n: usize) -> Self {
        self.max_requests = n.max(1);
        self
    }
    /// Sets [`OpenOptions::max_bytes_in_flight`].
    pub fn max_bytes_in_flight(mut self, bytes: u64) -> Self {
        self.max_bytes_in_flight = bytes;
        self
    }
    /// Sets [`OpenOptions::retries`].
    pub fn retries(mut self, n: usize) -> Self {
        self.retries = n;
        self
    }
    /// Sets [`OpenOptions::retry_timeout`].
    pub fn retry_timeout(mut self, t: Duration) -> Self {
        self.retry_timeout = t;
        self
    }
    /// Sets [`OpenOptions::parquet`].
    #[cfg(feature = "parquet")]
    #[cfg_attr(docsrs, doc(cfg(feature = "parquet")))]
    pub fn parquet(mut self, options: ParquetOptions) -> Self {
        self.parquet = options;
        self
    }
    /// Sets [`OpenOptions::tfrecord`].
    pub fn tfrecord(mut self, options: TfRecordOptions) -> Self {
        self.tfrecord = options;
        self
    }
}

impl OpenOptions {
    /// The store's share: its limits and retries.
    #[cfg(feature = "remote")]
    pub(crate) fn limits(&self) -> Limits {
        Limits {
            max_requests: self.max_requests.max(1),
            max_bytes_in_flight: self.max_bytes_in_flight,
            retries: self.retries,
            retry_timeout: self.retry_timeout,
        }
    }
}

/// The former name of [`OpenOptions`], from when it held the object store's settings alone.
#[deprecated(
    since = "0.1.0",
    note = "renamed `OpenOptions`: it holds the formats' options too"
)]
pub type RemoteOptions = OpenOptions;
