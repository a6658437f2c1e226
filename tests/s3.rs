//! Object storage against a real S3 protocol server on loopback: `moto` in server
//! mode (`pip install 'moto[server]'`), started by these tests, never a mock of the client.
//!
//! A small TCP proxy sits between the client and the server. It adds `Connection: close` to
//! every request (one request a connection, so it sees each one) and can, on demand, answer the
//! next requests with `503 Slow Down` (the client must retry), deny them with `403`, or stop
//! answering at all (the server is gone: the client must fail with a clear error, not hang).
//!
//! Without moto the tests print why (a `SKIPPED:` line) and pass, unless
//! `IMAGEFEED_REQUIRE_S3_TESTS=1` (set by `.ci/run`, which fails when it cannot install moto),
//! where a missing server is a failure.
#![cfg(feature = "remote")]
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use imagefeed::{
    write_shards, Batch, Dtype, ErrorKind, Loader, OnError, OpenOptions, Source, SourceKind,
};

/// The proxy's behaviour for the next requests.
#[derive(Default)]
struct Faults {
    /// Answer this many requests with 503.
    fail_next: AtomicUsize,
    /// Answer every request with 403.
    deny: AtomicBool,
    /// Close every connection without an answer, and cut the open ones.
    stopped: AtomicBool,
    /// Requests seen (including failed ones).
    requests: AtomicU64,
}

struct Server {
    _moto: ChildGuard,
    port: u16,
    faults: Arc<Faults>,
}

struct ChildGuard(Child);
impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Tests share one server and one set of environment variables; they run one at a time
/// because the proxy's faults are global.
fn server() -> Option<(&'static Server, MutexGuard<'static, ()>)> {
    static SERVER: OnceLock<Option<Server>> = OnceLock::new();
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let guard = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let server = SERVER.get_or_init(start).as_ref();
    match server {
        Some(s) => {
            s.faults.fail_next.store(0, Ordering::SeqCst);
            s.faults.deny.store(false, Ordering::SeqCst);
            s.faults.stopped.store(false, Ordering::SeqCst);
            Some((s, guard))
        }
        None => {
            let why = "no `moto_server` to serve S3 (pip install 'moto[server]')";
            if std::env::var_os("IMAGEFEED_REQUIRE_S3_TESTS").is_some() {
                panic!("the S3 tests cannot run: {why}, and IMAGEFEED_REQUIRE_S3_TESTS is set");
            }
            skipped(why);
            None
        }
    }
}

/// Says that the running test skips (part of) what it checks, and why: `SKIPPED: <test>: <why>`
/// on stdout, and appended as a line to the file `IMAGEFEED_SKIP_LOG` names, where it is set
/// (CI counts the lines and prints them in one line at the end of its log).
fn skipped(why: &str) {
    let test = std::thread::current().name().unwrap_or("?").to_owned();
    let line = format!("SKIPPED: {test}: {why}");
    println!("{line}");
    if let Some(log) = std::env::var_os("IMAGEFEED_SKIP_LOG") {
        use std::io::Write;
        // One short write with O_APPEND: lines from parallel tests and processes do not mix.
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
        {
            let _ = f.write_all(format!("{line}\n").as_bytes());
        }
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start() -> Option<Server> {
    let moto_port = free_port();
    // The server lives as long as this test process: a shell starts it and kills it when its
    // stdin (a pipe from this process) closes, which happens however this process exits.
    let program = if Command::new("moto_server")
        .arg("--help")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
    {
        "moto_server"
    } else if Command::new("python3")
        .args(["-c", "import moto.server"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
    {
        "python3 -m moto.server"
    } else {
        return None;
    };
    let script = format!(
        "{program} -H 127.0.0.1 -p {moto_port} >/dev/null 2>&1 & pid=$!; cat >/dev/null; kill $pid"
    );
    let child = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .ok()?;
    let moto = ChildGuard(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", moto_port)).is_err() {
        if Instant::now() > deadline {
            panic!("moto_server did not start listening within 30 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let faults = Arc::new(Faults::default());
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let f = faults.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let f = f.clone();
            std::thread::spawn(move || proxy(conn, moto_port, &f));
        }
    });
    // The environment the client reads, as a user would set it.
    std::env::set_var("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}"));
    std::env::set_var("AWS_ACCESS_KEY_ID", "testing");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "testing");
    std::env::set_var("AWS_REGION", "us-east-1");
    std::env::set_var("AWS_ALLOW_HTTP", "true");
    let server = Server {
        _moto: moto,
        port,
        faults,
    };
    upload_fixtures(&server);
    Some(server)
}

fn read_head(conn: &mut TcpStream) -> Option<Vec<u8>> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if conn.read(&mut byte).ok()? == 0 || head.len() > 64 << 10 {
            return None;
        }
        head.push(byte[0]);
    }
    Some(head)
}

fn proxy(mut client: TcpStream, upstream_port: u16, faults: &Faults) {
    let Some(head) = read_head(&mut client) else {
        return;
    };
    faults.requests.fetch_add(1, Ordering::SeqCst);
    if faults.stopped.load(Ordering::SeqCst) {
        let _ = client.shutdown(Shutdown::Both);
        return;
    }
    let answer = |client: &mut TcpStream, status: &str, code: &str| {
        let body = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{code}</Code><Message>injected by the test proxy</Message></Error>"
        );
        let _ = write!(
            client,
            "HTTP/1.1 {status}\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
    };
    if faults.deny.load(Ordering::SeqCst) {
        return answer(&mut client, "403 Forbidden", "AccessDenied");
    }
    if faults
        .fail_next
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
    {
        return answer(&mut client, "503 Slow Down", "SlowDown");
    }
    // One request a connection: replace any Connection header with `close`.
    let text = String::from_utf8_lossy(&head).into_owned();
    let mut rewritten = String::new();
    for line in text.split("\r\n").filter(|l| !l.is_empty()) {
        if !line.to_ascii_lowercase().starts_with("connection:") {
            rewritten.push_str(line);
            rewritten.push_str("\r\n");
        }
    }
    rewritten.push_str("Connection: close\r\n\r\n");
    let Ok(mut upstream) = TcpStream::connect(("127.0.0.1", upstream_port)) else {
        return;
    };
    if upstream.write_all(rewritten.as_bytes()).is_err() {
        return;
    }
    // Pipe both ways until either side closes, or the server is "stopped".
    let pipe = |mut from: TcpStream, mut to: TcpStream, stopped: &AtomicBool| {
        from.set_read_timeout(Some(Duration::from_millis(50))).ok();
        let mut buf = vec![0u8; 64 << 10];
        loop {
            if stopped.load(Ordering::SeqCst) {
                break;
            }
            match from.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => break,
            }
        }
        let _ = to.shutdown(Shutdown::Both);
        let _ = from.shutdown(Shutdown::Both);
    };
    let (c2, u2) = (client.try_clone().unwrap(), upstream.try_clone().unwrap());
    std::thread::scope(|s| {
        s.spawn(|| pipe(c2, u2, &faults.stopped));
        pipe(upstream, client, &faults.stopped);
    });
}

/// A plain HTTP request to the server (bypassing the proxy's faults only by timing: tests set
/// none while uploading). Returns the status code.
fn http(port: u16, method: &str, path: &str, body: &[u8]) -> u16 {
    // Percent-encoded as a URL path: keys with `%`, `[`, non-ASCII.
    let path: String = path
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"/-_.".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        c,
        // A dummy signature: moto refuses an unsigned request to replace or delete a key.
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/octet-stream\r\nAuthorization: AWS4-HMAC-SHA256 Credential=x/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    c.write_all(body).unwrap();
    let mut answer = String::new();
    let _ = c.read_to_string(&mut answer);
    answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn classes_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/classes")
}

/// `s3://imagefeed/classes/…` (class folders), `s3://imagefeed/classes/files.txt` (a list
/// with one missing object), `s3://imagefeed/shards/shard-*.tar`, and a larger set for the
/// stopping-server test: `many/` (six copies of the classes) and `many-shards/`.
fn upload_fixtures(s: &Server) {
    assert_eq!(http(s.port, "PUT", "/imagefeed", b""), 200, "create bucket");
    let put = |key: &str, body: &[u8]| {
        assert_eq!(
            http(s.port, "PUT", &format!("/imagefeed/{key}"), body),
            200,
            "upload {key}"
        );
    };
    let local = Source::from_dir(classes_dir()).unwrap();
    let mut list = String::new();
    let mut many = Vec::new();
    for i in 0..local.len() {
        let p = local.path(i).unwrap();
        let rel = p
            .strip_prefix(classes_dir())
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let bytes = std::fs::read(&p).unwrap();
        put(&format!("classes/{rel}"), &bytes);
        list.push_str(&format!("{rel}\t{}\n", local.label(i).unwrap()));
        for copy in 0..6 {
            put(&format!("many/{rel}.{copy}.jpg"), &bytes);
            many.push((p.clone(), local.label(i).unwrap()));
        }
    }
    // Keys object_store's `Path::from` would percent-encode into other keys, and a prefix
    // holding both shards and class folders.
    let photo = std::fs::read(local.path(0).unwrap()).unwrap();
    for key in [
        "odd/猫/1.jpg",
        "odd/cat/100%.jpg",
        "odd/cat/[1].jpg",
        "odd/cat/café.jpg",
    ] {
        put(key, &photo);
    }
    put("mixed/cat/a.jpg", &photo);
    list.push_str("cat/missing.jpg\t0\n");
    put("classes/files.txt", list.as_bytes());
    // Lists read as streams: one whose second line is 1 MB long, and an empty one.
    let mut long = b"cat/a.jpg 0\n".to_vec();
    long.extend(std::iter::repeat_n(b'y', 1 << 20));
    long.extend_from_slice(b" 1\n");
    put("lists/long.txt", &long);
    put("lists/empty.txt", b"");
    let dir = tempfile::tempdir().unwrap();
    let written = write_shards(&local, dir.path().join("a"), 4, Some(1)).unwrap();
    for shard in &written.shards {
        let name = shard.file_name().unwrap().to_string_lossy().into_owned();
        let bytes = std::fs::read(shard).unwrap();
        put(&format!("shards/{name}"), &bytes);
        // With the sidecar indexes `imagefeed shards` writes, and (another prefix) with
        // sidecars that do not match their shards.
        let idx = std::fs::read(format!("{}.idx", shard.display())).unwrap();
        put(&format!("shards/{name}.idx"), &idx);
        put(&format!("bad-idx/{name}"), &bytes);
        // A shard of the right size but not a tar, with a good sidecar: opening must not
        // read the shard.
        put(&format!("idx-only/{name}"), &vec![0x5a; bytes.len()]);
        put(&format!("idx-only/{name}.idx"), &idx);
        // The shard relabeled (its first label member's digit changed: same size, same image
        // members) and re-uploaded beside its old sidecar.
        put(&format!("relabeled/{name}"), &relabel_first(&bytes));
        put(&format!("relabeled/{name}.idx"), &idx);
        put(
            &format!("bad-idx/{name}.idx"),
            b"imagefeed-tar-index-v1 size=1 samples=0\n",
        );
    }
    // Parquet files and TFRecord shards (testdata/formats): as written, under a Hub-like
    // `data/` with two splits, beside each other, and a parquet file cut short.
    let formats = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/formats");
    for (dir, to) in [
        ("parquet", "formats/parquet"),
        ("tfrecord", "formats/tfrecord"),
        ("gzip", "formats/gzip"),
        ("parquet", "formats/hub/data"),
        ("parquet", "formats/mixed"),
        ("tfrecord", "formats/mixed"),
    ] {
        for entry in std::fs::read_dir(formats.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            put(&format!("{to}/{name}"), &std::fs::read(&path).unwrap());
        }
    }
    let first = std::fs::read(formats.join("parquet/train-00000-of-00002.parquet")).unwrap();
    put("formats/hub/data/test-00000-of-00001.parquet", &first);
    put("formats/cut/cut.parquet", &first[..first.len() - 100]);
    let many = Source::from_entries(many).unwrap();
    let written = write_shards(&many, dir.path().join("b"), 4, Some(1)).unwrap();
    for shard in &written.shards {
        let name = shard.file_name().unwrap().to_string_lossy().into_owned();
        put(
            &format!("many-shards/{name}"),
            &std::fs::read(shard).unwrap(),
        );
    }
}

/// `shard` with the first `.cls` member's first digit changed (same size).
fn relabel_first(shard: &[u8]) -> Vec<u8> {
    let mut archive = tar::Archive::new(shard);
    let at = archive
        .entries()
        .unwrap()
        .map(Result::unwrap)
        .find(|e| e.path().unwrap().to_string_lossy().ends_with(".cls"))
        .map(|e| e.raw_file_position() as usize)
        .expect("a label member");
    let mut out = shard.to_vec();
    out[at] = if out[at] == b'7' { b'8' } else { b'7' };
    out
}

fn quick() -> OpenOptions {
    OpenOptions::default()
        .retries(3)
        .retry_timeout(Duration::from_secs(3))
}

fn load_u8(source: Source) -> Vec<Batch> {
    Loader::builder(source)
        .image_size(32)
        .batch_size(4)
        .shuffle(false)
        .dtype(Dtype::U8)
        .build()
        .unwrap()
        .epoch(0)
        .map(|b| b.unwrap())
        .collect()
}

fn pixels(batches: &[Batch]) -> Vec<u8> {
    batches
        .iter()
        .flat_map(|b| b.as_u8().unwrap().to_vec())
        .collect()
}

#[test]
fn s3_lists_class_folders_and_reads_the_same_pixels_as_local_files() {
    let Some((_s, _guard)) = server() else { return };
    let remote = Source::from_url_with("s3://imagefeed/classes", quick()).unwrap();
    let local = Source::from_dir(classes_dir()).unwrap();
    assert_eq!(remote.kind(), SourceKind::Objects);
    assert_eq!(remote.len(), local.len());
    assert_eq!(remote.class_names(), local.class_names());
    for i in 0..local.len() {
        assert_eq!(remote.label(i), local.label(i));
    }
    let first = remote.path(0).unwrap().to_string_lossy().into_owned();
    assert!(first.starts_with("s3://imagefeed/classes/cat/"), "{first}");
    assert_eq!(pixels(&load_u8(remote)), pixels(&load_u8(local)));
}

#[test]
fn s3_keys_that_need_encoding_are_read_as_listed() {
    // `100%.jpg`, `[1].jpg`, `café.jpg`, `猫/1.jpg`: listed, then asked for under other
    // (percent-encoded) keys and "not found".
    let Some((_s, _guard)) = server() else { return };
    let remote = Source::from_url_with("s3://imagefeed/odd", quick()).unwrap();
    assert_eq!(remote.len(), 4);
    assert_eq!(remote.class_names().unwrap(), ["cat", "猫"]);
    let batches = load_u8(remote);
    assert_eq!(batches.iter().map(Batch::len).sum::<usize>(), 4);
}

#[test]
fn s3_shards_beside_class_folders_are_an_error_naming_both() {
    let Some((s, _guard)) = server() else { return };
    // Not even a tar: the mix is refused before any shard is read.
    assert_eq!(
        http(s.port, "PUT", "/imagefeed/mixed/data.tar", &[0u8; 1024]),
        200
    );
    let e = Source::from_url_with("s3://imagefeed/mixed", quick())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("holds both tar shards (data.tar)") && e.contains("cat/a.jpg"),
        "{e}"
    );
}

#[test]
fn s3_a_cache_over_a_list_file_sees_an_object_replaced_under_its_key() {
    // Objects named by a list file are not listed, so their size and time were unknown (0) to
    // the cache's fingerprint, and a replaced object's old pixels were replayed.
    let Some((s, _guard)) = server() else { return };
    let local = Source::from_dir(classes_dir()).unwrap();
    let first = std::fs::read(local.path(0).unwrap()).unwrap();
    let other = (1..local.len())
        .map(|i| local.path(i).unwrap())
        .find(|p| p.extension().is_some_and(|e| e == "jpg"))
        .map(|p| std::fs::read(p).unwrap())
        .unwrap();
    assert_ne!(first, other);
    let put = |key: &str, body: &[u8]| {
        assert_eq!(http(s.port, "PUT", &format!("/imagefeed/{key}"), body), 200);
    };
    put("stale/a.jpg", &first);
    put("stale/list.txt", b"a.jpg\t0\n");
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("c.cache");
    let run = || {
        let loader = Loader::builder(
            Source::from_url_with("s3://imagefeed/stale/list.txt", quick()).unwrap(),
        )
        .image_size(32)
        .batch_size(1)
        .dtype(Dtype::U8)
        .cache(&cache)
        .build()
        .unwrap();
        let px = pixels(&loader.epoch(0).map(|b| b.unwrap()).collect::<Vec<_>>());
        (px, loader.stats().from_cache)
    };
    let (a, cached) = run();
    assert!(!cached);
    assert_eq!(run(), (a.clone(), true), "the second run reads the cache");
    put("stale/a.jpg", &other);
    let (b, cached) = run();
    assert!(!cached, "the replaced object must not come from the cache");
    assert_ne!(a, b);
}

#[test]
fn s3_tar_shards_read_as_streams_match_local_shards() {
    let Some((_s, _guard)) = server() else { return };
    let remote = Source::open("s3://imagefeed/shards").unwrap();
    assert_eq!(remote.kind(), SourceKind::TarShards);
    let local_dir = tempfile::tempdir().unwrap();
    let local = Source::from_dir(classes_dir()).unwrap();
    write_shards(&local, local_dir.path(), 4, Some(1)).unwrap();
    let local = Source::open(local_dir.path()).unwrap();
    assert_eq!(remote.len(), local.len());
    for i in 0..local.len() {
        assert_eq!(remote.label(i), local.label(i));
    }
    assert!(remote
        .path(0)
        .unwrap()
        .to_string_lossy()
        .starts_with("s3://imagefeed/shards/shard-000000.tar["));
    assert_eq!(pixels(&load_u8(remote.clone())), pixels(&load_u8(local)));
    // Shuffled, sharded over 3 ranks: disjoint, complete, equal batch counts.
    let mut seen = Vec::new();
    let mut counts = BTreeSet::new();
    for rank in 0..3 {
        let l = Loader::builder(remote.clone())
            .image_size(16)
            .batch_size(2)
            .shuffle_buffer(4)
            .shard(rank, 3)
            .build()
            .unwrap();
        let b: Vec<Batch> = l.epoch(1).map(|b| b.unwrap()).collect();
        counts.insert(b.len());
        seen.extend(b.iter().flat_map(|b| b.indices().to_vec()));
    }
    assert_eq!(counts.len(), 1);
    let union: BTreeSet<u64> = seen.iter().copied().collect();
    assert_eq!(union, (0..local_len() as u64).collect());
}

#[test]
fn s3_tar_sidecar_indexes_spare_reading_the_shards_at_open() {
    let Some((_s, _guard)) = server() else { return };
    let local = Source::from_dir(classes_dir()).unwrap();
    // The sidecar alone indexes the shards: their bytes are never read at open.
    let indexed = Source::open("s3://imagefeed/idx-only").unwrap();
    assert_eq!(indexed.len(), local.len());
    // Those shards are not tar files: reading finds no tar header before a member, and says
    // so (a data error naming the member, not a failing store), instead of decoding whatever
    // bytes lie at the indexed offsets.
    let err = Loader::builder(indexed)
        .image_size(16)
        .batch_size(1)
        .shuffle(false)
        .build()
        .unwrap()
        .epoch(0)
        .find_map(Result::err)
        .expect("an error");
    assert!(
        err.to_string().contains("not what was indexed") && err.is_data_error(),
        "{err}"
    );
    assert!(!matches!(err.kind(), ErrorKind::Remote { .. }), "{err}");
    // Sidecars that do not match are ignored: the shards are read instead, same result.
    let with = Source::open("s3://imagefeed/shards").unwrap();
    let without = Source::open("s3://imagefeed/bad-idx").unwrap();
    assert_eq!(with.len(), without.len());
    for i in 0..with.len() {
        assert_eq!(with.label(i), without.label(i));
    }
    assert_eq!(pixels(&load_u8(with)), pixels(&load_u8(without)));
}

#[test]
fn s3_a_relabeled_shard_beside_its_old_sidecar_is_an_error_not_old_labels() {
    let Some((_s, _guard)) = server() else { return };
    // The sidecar still matches the shard's size and image members, so it indexes the shard;
    // the label members, read as the stream passes them, tell that it changed.
    let source = Source::open("s3://imagefeed/relabeled").unwrap();
    assert_eq!(source.len(), local_len());
    let results: Vec<_> = Loader::builder(source)
        .image_size(16)
        .batch_size(1)
        .shuffle(false)
        .on_error(OnError::Fail)
        .build()
        .unwrap()
        .epoch(0)
        .collect();
    let errors: Vec<_> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(!errors.is_empty(), "a relabeled sample was delivered");
    let message = errors[0].to_string();
    assert!(
        message.contains("the label member holds") && message.contains("stale .tar.idx"),
        "{message}"
    );
    assert!(errors[0].is_data_error(), "{message}");
}

fn local_len() -> usize {
    Source::from_dir(classes_dir()).unwrap().len()
}

#[test]
fn s3_list_file_and_a_missing_object_named_in_the_error() {
    let Some((_s, _guard)) = server() else { return };
    let source = Source::from_url_with("s3://imagefeed/classes/files.txt", quick()).unwrap();
    assert_eq!(source.len(), local_len() + 1);
    let fail = Loader::builder(source.clone())
        .image_size(16)
        .batch_size(1)
        .shuffle(false)
        .build()
        .unwrap();
    let errors: Vec<_> = fail.epoch(0).filter_map(Result::err).collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    let e = &errors[0];
    assert!(e.to_string().contains("missing.jpg"), "{e}");
    match e.kind() {
        ErrorKind::Io { source, .. } => {
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound, "{e}")
        }
        other => panic!("{other:?}"),
    }
    let skip = Loader::builder(source)
        .image_size(16)
        .batch_size(4)
        .on_error(OnError::SKIP_ALL)
        .build()
        .unwrap();
    let n: usize = skip.epoch(0).map(|b| b.unwrap().len()).sum();
    assert_eq!(n, local_len());
    assert_eq!(skip.stats().skipped, 1);
    // A prefix with nothing under it, and a bucket that does not exist.
    assert!(Source::from_url_with("s3://imagefeed/nothing-here", quick()).is_err());
    let e = Source::from_url_with("s3://no-such-bucket/x", quick()).unwrap_err();
    assert!(e.to_string().contains("s3://no-such-bucket"), "{e}");
    // Lists are parsed as they stream in: a line too long names the object and the line.
    let e = Source::from_url_with("s3://imagefeed/lists/long.txt", quick()).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("s3://imagefeed/lists/long.txt:2: the line is 1048578 bytes long"),
        "{e}"
    );
    let e = Source::from_url_with("s3://imagefeed/lists/empty.txt", quick()).unwrap_err();
    assert!(e.to_string().contains("the list has no entries"), "{e}");
}

#[test]
fn s3_transient_errors_are_retried() {
    let Some((s, _guard)) = server() else { return };
    let source = Source::from_url_with("s3://imagefeed/classes", quick()).unwrap();
    let before = s.faults.requests.load(Ordering::SeqCst);
    s.faults.fail_next.store(3, Ordering::SeqCst);
    let batches = load_u8(source);
    assert_eq!(batches.iter().map(Batch::len).sum::<usize>(), local_len());
    assert_eq!(
        s.faults.fail_next.load(Ordering::SeqCst),
        0,
        "the failures were served"
    );
    let requests = s.faults.requests.load(Ordering::SeqCst) - before;
    assert!(requests >= local_len() as u64 + 3, "{requests} requests");
}

#[test]
fn s3_denied_access_is_a_clear_error() {
    let Some((s, _guard)) = server() else { return };
    s.faults.deny.store(true, Ordering::SeqCst);
    let e = Source::from_url_with("s3://imagefeed/classes", quick()).unwrap_err();
    s.faults.deny.store(false, Ordering::SeqCst);
    assert!(e.to_string().contains("s3://imagefeed/classes"), "{e}");
    match e.kind() {
        ErrorKind::Io { source, .. } => {
            assert_eq!(source.kind(), std::io::ErrorKind::PermissionDenied, "{e}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn s3_server_that_stops_ends_the_epoch_with_an_error_not_a_hang() {
    let Some((s, _guard)) = server() else { return };
    // 66 samples: more than the pipeline fetches ahead, so the stop is felt. Even when bad
    // samples are skipped, a store that is gone ends the epoch (every next sample would fail).
    for (url, on_error) in [
        ("s3://imagefeed/many", OnError::Fail),
        ("s3://imagefeed/many-shards", OnError::Fail),
        ("s3://imagefeed/many", OnError::SKIP_ALL),
        ("s3://imagefeed/many-shards", OnError::SKIP_ALL),
    ] {
        let source = Source::from_url_with(url, quick()).unwrap();
        let loader = Loader::builder(source)
            .image_size(16)
            .batch_size(1)
            .shuffle(false)
            .prefetch(1)
            .on_error(on_error)
            .build()
            .unwrap();
        let started = Instant::now();
        let mut it = loader.epoch(0);
        assert!(it.next().unwrap().is_ok());
        s.faults.stopped.store(true, Ordering::SeqCst);
        let mut error = None;
        for b in it.by_ref() {
            if let Err(e) = b {
                error = Some(e);
                break;
            }
        }
        drop(it);
        s.faults.stopped.store(false, Ordering::SeqCst);
        let e = error.unwrap_or_else(|| panic!("{url}: the epoch ended without an error"));
        assert!(e.to_string().contains("s3://imagefeed/"), "{e}");
        if on_error != OnError::Fail {
            assert!(matches!(e.kind(), ErrorKind::Remote { .. }), "{url}: {e:?}");
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{url}: took {:?}",
            started.elapsed()
        );
    }
}

#[test]
fn s3_parquet_and_tfrecord_objects_read_as_the_local_files_do() {
    let Some((_s, _guard)) = server() else { return };
    let formats = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/formats");
    for (url, local, kind) in [
        (
            "s3://imagefeed/formats/parquet",
            "parquet",
            SourceKind::Parquet,
        ),
        (
            "s3://imagefeed/formats/parquet/train-00001-of-00002.parquet",
            "parquet/train-00001-of-00002.parquet",
            SourceKind::Parquet,
        ),
        // Shard names without an extension: told by their first record's framing.
        (
            "s3://imagefeed/formats/tfrecord",
            "tfrecord",
            SourceKind::TfRecord,
        ),
        ("s3://imagefeed/formats/gzip", "gzip", SourceKind::TfRecord),
    ] {
        let remote = Source::from_url_with(url, quick()).unwrap();
        let local = Source::open(formats.join(local)).unwrap();
        assert_eq!(remote.kind(), kind, "{url}");
        assert_eq!(remote.len(), local.len(), "{url}");
        assert!(remote.len() > 1, "{url}");
        for i in 0..local.len() {
            assert_eq!(remote.label(i), local.label(i), "{url} sample {i}");
        }
        let name = remote.path(0).unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with("s3://imagefeed/formats/"), "{name}");
        assert_eq!(
            pixels(&load_u8(remote.clone())),
            pixels(&load_u8(local)),
            "{url}"
        );
        // Sharded over two ranks, shuffled: disjoint and complete.
        let mut seen = Vec::new();
        for rank in 0..2 {
            let l = Loader::builder(remote.clone())
                .image_size(16)
                .batch_size(2)
                .shuffle_buffer(4)
                .shard(rank, 2)
                .build()
                .unwrap();
            for b in l.epoch(1) {
                seen.extend(b.unwrap().indices().to_vec());
            }
        }
        // Complete, and disjoint but for at most one sample repeated to even the ranks.
        let union: BTreeSet<u64> = seen.iter().copied().collect();
        assert_eq!(union, (0..remote.len() as u64).collect(), "{url}");
        assert!(seen.len() - union.len() <= 1, "{url}: {seen:?}");
    }
}

#[test]
fn s3_a_name_prefix_picks_one_split_and_two_splits_or_kinds_are_refused() {
    let Some((_s, _guard)) = server() else { return };
    // `data/train-`: the Hub's two train files, not its test file.
    let train = Source::from_url_with("s3://imagefeed/formats/hub/data/train-", quick()).unwrap();
    let local =
        Source::open(Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/formats/parquet"))
            .unwrap();
    assert_eq!(train.kind(), SourceKind::Parquet);
    assert_eq!(train.len(), local.len());
    let both = Source::from_url_with("s3://imagefeed/formats/hub", quick())
        .unwrap_err()
        .to_string();
    assert!(both.contains("more than one set"), "{both}");
    assert!(both.contains("test-00000-of-00001.parquet"), "{both}");
    let mixed = Source::from_url_with("s3://imagefeed/formats/mixed", quick())
        .unwrap_err()
        .to_string();
    assert!(
        mixed.contains("parquet files") && mixed.contains("TFRecord files"),
        "{mixed}"
    );
    let cut = Source::from_url_with("s3://imagefeed/formats/cut", quick())
        .unwrap_err()
        .to_string();
    assert!(
        cut.contains("s3://imagefeed/formats/cut/cut.parquet"),
        "{cut}"
    );
    assert!(cut.contains("not a readable parquet file"), "{cut}");
}

#[test]
fn s3_a_manifest_written_to_the_store_opens_the_dataset_with_one_read() {
    let Some((s, _guard)) = server() else { return };
    // Shards under a prefix of their own, with what would make a listing refuse the prefix
    // (class folders of images beside them): opening through the manifest does not list.
    let local = Source::from_dir(classes_dir()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let written = write_shards(&local, dir.path(), 4, Some(3)).unwrap();
    for shard in &written.shards {
        let name = shard.file_name().unwrap().to_string_lossy().into_owned();
        let body = std::fs::read(shard).unwrap();
        assert_eq!(
            http(s.port, "PUT", &format!("/imagefeed/manifest/{name}"), &body),
            200
        );
    }
    let listed = Source::open("s3://imagefeed/manifest").unwrap();
    let to = listed.write_manifest("s3://imagefeed/manifest/").unwrap();
    assert_eq!(
        to.to_string_lossy(),
        "s3://imagefeed/manifest/imagefeed-manifest.tsv"
    );
    let photo = std::fs::read(local.path(0).unwrap()).unwrap();
    assert_eq!(
        http(s.port, "PUT", "/imagefeed/manifest/cat/a.jpg", &photo),
        200
    );
    let opened = Source::open("s3://imagefeed/manifest").unwrap();
    assert_eq!(opened.kind(), SourceKind::TarShards);
    assert_eq!(opened.len(), local.len());
    assert_eq!(pixels(&load_u8(opened)), pixels(&load_u8(listed)));
    // The manifest named by its URL opens too.
    let named = Source::open("s3://imagefeed/manifest/imagefeed-manifest.tsv").unwrap();
    assert_eq!(named.len(), local.len());
}
