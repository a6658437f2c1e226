//! Object storage: `s3://`, `gs://`, `az://` and `http(s)://` sources through the
//! `object_store` crate.
//!
//! The client is asynchronous; a [`Store`] owns a small tokio runtime (one worker thread that
//! drives the connections) and the rest of imagefeed calls it with `block_on` from its own
//! threads. Credentials, region and endpoint come from the environment, as every other tool
//! reads them (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`,
//! `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`, `GOOGLE_SERVICE_ACCOUNT`, `AZURE_STORAGE_ACCOUNT_NAME`
//! …), never from code. Transient failures (5xx, throttling, dropped connections) are retried
//! with exponential backoff by `object_store`, within [`OpenOptions::retries`] and
//! [`OpenOptions::retry_timeout`].

use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{StreamExt, TryStreamExt};
use object_store::path::Path as ObjectPath;
use object_store::{BackoffConfig, GetOptions, GetRange, ObjectStore, RetryConfig};

use crate::error::Error;

/// A connected object store and the prefix a source lives under.
pub(crate) struct Store {
    store: Arc<dyn ObjectStore>,
    rt: tokio::runtime::Runtime,
    /// The URL up to the prefix, without a trailing slash (`s3://bucket/data`): names objects
    /// in messages.
    pub(crate) url: String,
    pub(crate) limits: Limits,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("url", &self.url).finish()
    }
}

/// A store's limits and retries (the store's part of
/// [`OpenOptions`](crate::OpenOptions)).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// The most requests in flight at once (at least 1).
    pub(crate) max_requests: usize,
    /// The most fetched bytes held at once.
    pub(crate) max_bytes_in_flight: u64,
    /// Retries of a request failing with a transient error.
    pub(crate) retries: usize,
    /// No retry starts later than this after a request's first try.
    pub(crate) retry_timeout: Duration,
}

/// The key of `rel` under `prefix` (`""` for the bucket root).
pub(crate) fn join_key(prefix: &str, rel: &str) -> String {
    if prefix.is_empty() {
        rel.to_string()
    } else {
        format!("{prefix}/{rel}")
    }
}

/// One listed object.
pub(crate) struct Listed {
    /// The key relative to the listed prefix.
    pub(crate) key: String,
    pub(crate) size: u64,
    /// Modification time (nanoseconds since the Unix epoch), for the cache fingerprint.
    pub(crate) mtime: i64,
}

/// Splits `scheme://authority/key` into the store URL (`scheme://authority`) and the key.
fn split_url(url: &str) -> Option<(&str, &str)> {
    let (scheme, rest) = url.split_once("://")?;
    if scheme.is_empty()
        || !scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '+')
    {
        return None;
    }
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let root = &url[..scheme.len() + 3 + authority_end];
    let key = rest[authority_end..].trim_matches('/');
    Some((root, key))
}

impl Store {
    /// Connects to the store holding `url` (for `s3://bucket/prefix`: the bucket); returns it
    /// and the key `url` names (`prefix`).
    pub(crate) fn connect(url: &str, limits: Limits) -> Result<(Store, String), Error> {
        let bad = |why: String| Error::source(url, why);
        let (root, key) = split_url(url).ok_or_else(|| bad("not a URL".into()))?;
        let scheme = root.split("://").next().unwrap_or_default();
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(5),
                base: 2.0,
            },
            max_retries: limits.retries,
            retry_timeout: limits.retry_timeout,
        };
        if matches!(scheme, "s3" | "s3a") {
            check_plain_http(|name| std::env::var(name).ok()).map_err(bad)?;
        }
        let store: Arc<dyn ObjectStore> = match scheme {
            "s3" | "s3a" => Arc::new(
                object_store::aws::AmazonS3Builder::from_env()
                    .with_url(root)
                    .with_retry(retry)
                    .build()
                    .map_err(|e| bad(e.to_string()))?,
            ),
            "gs" => Arc::new(
                object_store::gcp::GoogleCloudStorageBuilder::from_env()
                    .with_url(root)
                    .with_retry(retry)
                    .build()
                    .map_err(|e| bad(e.to_string()))?,
            ),
            "az" | "abfs" | "abfss" | "azure" => Arc::new(
                object_store::azure::MicrosoftAzureBuilder::from_env()
                    .with_url(root)
                    .with_retry(retry)
                    .build()
                    .map_err(|e| bad(e.to_string()))?,
            ),
            "http" | "https" => Arc::new(
                object_store::http::HttpBuilder::new()
                    .with_url(root)
                    .with_retry(retry)
                    .build()
                    .map_err(|e| bad(e.to_string()))?,
            ),
            other => {
                return Err(bad(format!(
                    "unsupported scheme `{other}://` (supported: s3://, gs://, az://, http://, https://)"
                )))
            }
        };
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("imagefeed-io")
            .enable_all()
            .build()
            .map_err(Error::spawn)?;
        let store = Store {
            store,
            rt,
            url: root.to_string(),
            limits,
        };
        Ok((store, key.to_string()))
    }

    /// The URL of `key`, for messages.
    pub(crate) fn url_of(&self, key: &str) -> String {
        if key.is_empty() {
            self.url.clone()
        } else {
            format!("{}/{key}", self.url)
        }
    }

    fn error(&self, key: &str, e: object_store::Error) -> Error {
        if let object_store::Error::InvalidPath { .. } = &e {
            // A listed key object_store refuses (a control character in it): not a failure of
            // the store, and no retry would help.
            return Error::source(
                self.url_of(key),
                format!("the store holds an object key imagefeed cannot use: {e}; rename or remove that object"),
            );
        }
        let kind = match &e {
            object_store::Error::NotFound { .. } => std::io::ErrorKind::NotFound,
            object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. } => std::io::ErrorKind::PermissionDenied,
            // Listing wraps the HTTP answer in a generic error; its status is in the message.
            other => {
                let text = other.to_string();
                if text.contains("403 Forbidden") || text.contains("401 Unauthorized") {
                    std::io::ErrorKind::PermissionDenied
                } else if text.contains("404 Not Found") {
                    std::io::ErrorKind::NotFound
                } else {
                    std::io::ErrorKind::Other
                }
            }
        };
        let url = self.url_of(key);
        // Without credentials in the environment, object_store asks the cloud's instance
        // metadata service, which is not there off the cloud: say what to set instead.
        if e.to_string().contains("169.254.169.254") {
            return Error::io(
                url,
                std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    format!(
                        "no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_SKIP_SIGNATURE=true for a public bucket); the instance metadata service did not give any ({e})"
                    ),
                ),
            );
        }
        // The client's message repeats each layer of its error chain, an XML body in each:
        // once, in short, and without the chain, so it is printed once.
        let text = concise(&e);
        match kind {
            std::io::ErrorKind::Other => Error::remote(url, std::io::Error::new(kind, text)),
            _ => Error::io(url, std::io::Error::new(kind, text)),
        }
    }

    /// Every object under `prefix` (recursively), sorted by key; keys relative to `prefix`.
    pub(crate) fn list(&self, prefix: &str) -> Result<Vec<Listed>, Error> {
        let path = object_path(prefix);
        let base = path.as_ref().len();
        let mut out: Vec<Listed> = self
            .rt
            .block_on(self.store.list(Some(&path)).try_collect::<Vec<_>>())
            .map_err(|e| self.error(prefix, e))?
            .into_iter()
            .map(|m| {
                let full: &str = m.location.as_ref();
                let key = full[base.min(full.len())..].trim_start_matches('/');
                Listed {
                    key: key.to_string(),
                    size: m.size,
                    mtime: m.last_modified.timestamp_nanos_opt().unwrap_or(0),
                }
            })
            .collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    /// Size and modification time of object `key`.
    pub(crate) fn head(&self, key: &str) -> Result<(u64, i64), Error> {
        let options = GetOptions {
            head: true,
            ..Default::default()
        };
        let result = self
            .rt
            .block_on(self.store.get_opts(&object_path(key), options))
            .map_err(|e| self.error(key, e))?;
        let m = result.meta;
        Ok((m.size, m.last_modified.timestamp_nanos_opt().unwrap_or(0)))
    }

    /// Size and modification time of each of `keys`, up to 32 requests in flight; `None` for
    /// an object the store could not describe (missing, denied).
    pub(crate) fn head_many(&self, keys: Vec<String>) -> Vec<Option<(u64, i64)>> {
        self.rt.block_on(
            futures_util::stream::iter(keys)
                .map(|key| async move {
                    let options = GetOptions {
                        head: true,
                        ..Default::default()
                    };
                    let m = self
                        .store
                        .get_opts(&object_path(&key), options)
                        .await
                        .ok()?
                        .meta;
                    Some((m.size, m.last_modified.timestamp_nanos_opt().unwrap_or(0)))
                })
                .buffered(32)
                .collect(),
        )
    }

    /// Writes `bytes` as object `key` (replacing it).
    pub(crate) fn put(&self, key: &str, bytes: Vec<u8>) -> Result<(), Error> {
        self.rt
            .block_on(object_store::ObjectStoreExt::put(
                &*self.store,
                &object_path(key),
                bytes.into(),
            ))
            .map(|_| ())
            .map_err(|e| self.error(key, e))
    }

    /// The whole object `key`, refused if larger than `limit` bytes.
    pub(crate) fn get(&self, key: &str, limit: u64) -> Result<Vec<u8>, Error> {
        self.rt.block_on(self.get_async(key, limit))
    }

    pub(crate) async fn get_async(&self, key: &str, limit: u64) -> Result<Vec<u8>, Error> {
        let path = object_path(key);
        let result = self
            .store
            .get_opts(&path, GetOptions::default())
            .await
            .map_err(|e| self.error(key, e))?;
        let size = result.meta.size;
        if size > limit {
            return Err(Error::decode(
                self.url_of(key),
                crate::error::DecodeFailure(format!(
                    "object is {size} bytes, over the {limit}-byte limit"
                )),
            ));
        }
        let mut out = Vec::with_capacity(size as usize);
        let mut stream = result.into_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| self.error(key, e))?;
            if (out.len() + chunk.len()) as u64 > limit {
                return Err(Error::decode(
                    self.url_of(key),
                    crate::error::DecodeFailure("object grew past the size limit".into()),
                ));
            }
            out.extend_from_slice(&chunk);
        }
        Ok(out)
    }

    /// Runs a future on this store's runtime.
    pub(crate) fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// Bytes `start..end` of `key`, in one request; an error if the object ends before `end`.
    #[cfg_attr(not(feature = "parquet"), allow(dead_code))] // the parquet reader's
    pub(crate) fn get_range(&self, key: &str, start: u64, end: u64) -> Result<Bytes, Error> {
        self.rt.block_on(self.get_range_async(key, start, end))
    }

    /// Bytes `start..end` of `key`, in one request, awaited: an error if the object ends
    /// before `end`.
    pub(crate) async fn get_range_async(
        &self,
        key: &str,
        start: u64,
        end: u64,
    ) -> Result<Bytes, Error> {
        if start >= end {
            return Ok(Bytes::new());
        }
        let options = GetOptions {
            range: Some(GetRange::Bounded(start..end)),
            ..Default::default()
        };
        let got = async {
            self.store
                .get_opts(&object_path(key), options)
                .await?
                .bytes()
                .await
        };
        let bytes = got.await.map_err(|e| self.error(key, e))?;
        if (bytes.len() as u64) < end - start {
            return Err(Error::io(
                self.url_of(key),
                std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!(
                        "asked for bytes {start}..{end}, the store gave {} (the object is shorter than when it was listed?)",
                        bytes.len()
                    ),
                ),
            ));
        }
        Ok(bytes)
    }

    /// A blocking reader over bytes `start..end` of `key` that asks for `window` bytes at a
    /// time, only as far as it is read: for a reader that reads a few bytes at an offset (a
    /// parquet page header) and stops.
    #[cfg_attr(not(feature = "parquet"), allow(dead_code))] // the parquet reader's
    pub(crate) fn windows(
        self: &Arc<Self>,
        key: &str,
        start: u64,
        end: u64,
        window: u64,
    ) -> Windows {
        Windows {
            store: self.clone(),
            key: key.to_string(),
            pos: start,
            end,
            window: window.max(1),
            chunk: Bytes::new(),
        }
    }

    /// A blocking reader over bytes `start..end` of `key`, streamed (one request).
    pub(crate) fn range_reader(
        self: &Arc<Self>,
        key: &str,
        start: u64,
        end: u64,
    ) -> Result<RangeReader, Error> {
        let path = object_path(key);
        let options = GetOptions {
            range: Some(GetRange::Bounded(start..end)),
            ..Default::default()
        };
        let result = self
            .rt
            .block_on(self.store.get_opts(&path, options))
            .map_err(|e| self.error(key, e))?;
        Ok(RangeReader {
            store: self.clone(),
            stream: result.into_stream(),
            chunk: Bytes::new(),
        })
    }
}

/// The store path of the object whose key is `key`, as it is: `Path::from` would
/// percent-encode it (`说明`, `a%b`, `x[1].jpg` became other keys, so listed objects were "not
/// found"). A key `Path::parse` refuses (an empty segment, `.` or `..`) is encoded instead.
fn object_path(key: &str) -> ObjectPath {
    ObjectPath::parse(key).unwrap_or_else(|_| ObjectPath::from(key))
}

/// A streamed byte range of one object, read with blocking calls. Errors name the object.
pub(crate) struct RangeReader {
    store: Arc<Store>,
    stream: futures_util::stream::BoxStream<'static, object_store::Result<Bytes>>,
    chunk: Bytes,
}

impl Read for RangeReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.chunk.is_empty() {
            match self.store.rt.block_on(self.stream.next()) {
                None => return Ok(0),
                Some(Ok(chunk)) => self.chunk = chunk,
                Some(Err(e)) => return Err(std::io::Error::other(e)),
            }
        }
        let n = buf.len().min(self.chunk.len());
        buf[..n].copy_from_slice(&self.chunk[..n]);
        let _ = self.chunk.split_to(n);
        Ok(n)
    }
}

/// Bytes of one object read a window at a time ([`Store::windows`]).
#[cfg_attr(not(feature = "parquet"), allow(dead_code))] // the parquet reader's
pub(crate) struct Windows {
    store: Arc<Store>,
    key: String,
    pos: u64,
    end: u64,
    window: u64,
    chunk: Bytes,
}

impl Read for Windows {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.chunk.is_empty() {
            if self.pos >= self.end {
                return Ok(0);
            }
            let to = self.end.min(self.pos.saturating_add(self.window));
            self.chunk = self
                .store
                .get_range(&self.key, self.pos, to)
                .map_err(std::io::Error::other)?;
            self.pos = to;
        }
        let n = buf.len().min(self.chunk.len());
        buf[..n].copy_from_slice(&self.chunk[..n]);
        let _ = self.chunk.split_to(n);
        Ok(n)
    }
}

/// An object store's error in one line: the outer error's kind (`Generic S3 error`) and the
/// innermost cause, whose XML body (`<Code>NoSuchBucket</Code><Message>…`) is cut to its code and
/// message.
fn concise(e: &object_store::Error) -> String {
    let outer = e.to_string();
    let kind = outer
        .split(':')
        .next()
        .unwrap_or_default()
        .trim()
        .to_string();
    let mut inner: &dyn std::error::Error = e;
    while let Some(next) = inner.source() {
        inner = next;
    }
    let mut cause = inner.to_string();
    if let Some(at) = cause.find("<?xml").or_else(|| cause.find("<Error>")) {
        let tag = |t: &str| {
            let open = format!("<{t}>");
            let start = cause.find(&open)? + open.len();
            let len = cause[start..].find(&format!("</{t}>"))?;
            Some(cause[start..start + len].to_string())
        };
        let body = match (tag("Code"), tag("Message")) {
            (Some(code), Some(message)) => format!("{code}: {message}"),
            (Some(code), None) => code,
            _ => String::from("(an XML error body)"),
        };
        cause = format!("{}{body}", &cause[..at]);
    }
    if kind.is_empty() || cause.starts_with(&kind) {
        cause
    } else {
        format!("{kind}: {cause}")
    }
}

/// An S3 endpoint over plain HTTP (a local MinIO or moto) without `AWS_ALLOW_HTTP=true`: the
/// client would refuse every request ("builder error", retried to no end) without naming the
/// variable, so it is named here, once, before any request.
fn check_plain_http(var: impl Fn(&str) -> Option<String>) -> Result<(), String> {
    let Some((name, endpoint)) = ["AWS_ENDPOINT_URL", "AWS_ENDPOINT"]
        .into_iter()
        .find_map(|n| var(n).map(|v| (n, v)))
    else {
        return Ok(());
    };
    let allowed = var("AWS_ALLOW_HTTP").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    if endpoint.trim().to_ascii_lowercase().starts_with("http://") && !allowed {
        return Err(format!(
            "the endpoint {name}={endpoint} is plain HTTP, which the S3 client refuses unless \
             AWS_ALLOW_HTTP=true: set it (a local server), or use an https:// endpoint"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_store_error_is_one_short_line() {
        let body = "Server returned non-2xx status code: 404 Not Found: <?xml version=\"1.0\"?>\n<Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message></Error>";
        let e = object_store::Error::Generic {
            store: "S3",
            source: Box::new(std::io::Error::other(body)),
        };
        let text = super::concise(&e);
        assert_eq!(
            text,
            "Generic S3 error: Server returned non-2xx status code: 404 Not Found: NoSuchBucket: The specified bucket does not exist"
        );
    }

    #[test]
    fn a_plain_http_endpoint_needs_allow_http_and_says_so() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |n: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == n)
                    .map(|(_, v)| v.to_string())
            }
        };
        let e = super::check_plain_http(env(&[("AWS_ENDPOINT_URL", "http://127.0.0.1:9000")]))
            .unwrap_err();
        assert!(e.contains("AWS_ALLOW_HTTP=true"), "{e}");
        assert!(super::check_plain_http(env(&[
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:9000"),
            ("AWS_ALLOW_HTTP", "true")
        ]))
        .is_ok());
        assert!(
            super::check_plain_http(env(&[("AWS_ENDPOINT_URL", "https://s3.example")])).is_ok()
        );
        assert!(super::check_plain_http(env(&[])).is_ok());
    }
    use super::*;

    #[test]
    fn splits_urls() {
        assert_eq!(split_url("s3://bucket/a/b/"), Some(("s3://bucket", "a/b")));
        assert_eq!(split_url("s3://bucket"), Some(("s3://bucket", "")));
        assert_eq!(
            split_url("https://host:9000/x.tar"),
            Some(("https://host:9000", "x.tar"))
        );
        assert_eq!(split_url("data/train.txt"), None);
        assert_eq!(split_url("C:/data"), None);
    }

    #[test]
    fn unsupported_scheme_is_a_clear_error() {
        let e = Store::connect("ftp://host/x", crate::OpenOptions::default().limits()).unwrap_err();
        assert!(e.to_string().contains("unsupported scheme `ftp://`"), "{e}");
    }
}
