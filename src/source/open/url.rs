//! Sources in object storage (`s3://…`, `gs://…`, `az://…`, `http(s)://…`): what
//! [`Source::from_url_with`](super::Source::from_url_with) opens at a URL, images, a file list
//! or tar shards (with their sidecar indexes).

use std::path::{Path, PathBuf};

use super::classify::{classify, may_be_record, set_of, Kind, Listed as Where};
use crate::error::Error;
use crate::source::index::FileIndex;
#[cfg(feature = "remote")]
use crate::source::storage::remote::join_key;
#[cfg(feature = "remote")]
use crate::source::storage::remote::Listed;
use crate::source::storage::Located;
use crate::source::{Backing, Source};

/// Opens a source in object storage (see [`Source::from_url_with`]): through a manifest where
/// there is one, else the object the URL names, else what its prefix lists.
#[cfg(feature = "remote")]
pub(crate) fn open_remote(url: &str, options: crate::source::OpenOptions) -> Result<Source, Error> {
    use std::sync::Arc;

    use crate::source::storage::remote::Store;

    let (store, key) = Store::connect(url, options.limits())?;
    let store = Remote {
        store: Arc::new(store),
        options,
    };
    if let Some(source) = open_manifest(&store, &key)? {
        return Ok(source);
    }
    if let Some(source) = open_named_object(&store, url, &key)? {
        return Ok(source);
    }
    let (listed, key) = list_prefix(&store, key)?;
    open_listed(&store, url, key, &listed)
}

/// The store a URL names, and the options it was opened with (the formats' among them).
#[cfg(feature = "remote")]
struct Remote {
    store: std::sync::Arc<crate::source::storage::remote::Store>,
    options: crate::source::OpenOptions,
}

#[cfg(feature = "remote")]
impl std::ops::Deref for Remote {
    type Target = std::sync::Arc<crate::source::storage::remote::Store>;
    fn deref(&self) -> &Self::Target {
        &self.store
    }
}

#[cfg(feature = "remote")]
type StoreRef = Remote;

/// A manifest, named by the URL or in the prefix: one GET opens the dataset. `None` where
/// the prefix has none.
#[cfg(feature = "remote")]
fn open_manifest(store: &StoreRef, key: &str) -> Result<Option<Source>, Error> {
    use crate::source::format::manifest::{Manifest, MANIFEST_NAME};
    let named = key.ends_with(MANIFEST_NAME);
    let looks_like_a_file = key.rsplit('/').next().is_some_and(|n| n.contains('.'));
    if named || !looks_like_a_file {
        let manifest_key = if named {
            key.to_string()
        } else {
            join_key(key, MANIFEST_NAME)
        };
        match store.get(&manifest_key, 1 << 30) {
            Ok(bytes) => {
                let url_of = PathBuf::from(store.url_of(&manifest_key));
                let text = String::from_utf8_lossy(&bytes);
                let parsed = Manifest::parse(&text, &url_of)?;
                let prefix = parent_key(&manifest_key);
                let options = &store.options;
                return super::manifest::open(
                    parsed,
                    &url_of,
                    super::manifest::Base::Remote {
                        store: &store.store,
                        prefix: &prefix,
                    },
                    &options.tfrecord,
                    #[cfg(feature = "parquet")]
                    &options.parquet,
                )
                .map(Some);
            }
            Err(e) if named => return Err(e),
            Err(_) => {}
        }
    }
    Ok(None)
}

/// The source of the one object the URL names: a tar shard, a parquet or TFRecord file, or
/// a file list (`.txt`). `None` for a prefix.
#[cfg(feature = "remote")]
fn open_named_object(store: &StoreRef, url: &str, key: &str) -> Result<Option<Source>, Error> {
    use std::sync::Arc;

    use crate::source::format::objects::ObjectIndex;

    if let Some(kind) = Kind::of_name(key) {
        let (size, mtime) = store.head(key)?;
        let file = Located::object(store, key.to_string(), size, mtime);
        let base = PathBuf::from(store.url_of(&parent_key(key)));
        return open_kind(store, kind, vec![file], url, base).map(Some);
    }
    if key.to_ascii_lowercase().ends_with(".txt") {
        let parent = parent_key(key);
        let (list, base) = (Path::new(url), PathBuf::from(store.url_of(&parent)));
        // Streamed and parsed a line at a time, as a local list is.
        let (size, _) = store.head(key)?;
        let index = if size == 0 {
            crate::source::format::list::parse_list(list, base, &[])?
        } else {
            let reader = store.range_reader(key, 0, size)?;
            let reader = std::io::BufReader::with_capacity(64 << 10, reader);
            crate::source::format::list::parse_list_from(list, base, reader, size)?
        };
        let stamps = vec![(0, 0); index.len()];
        return Ok(Some(Source {
            index,
            backing: Backing::Objects(Arc::new(ObjectIndex {
                store: store.store.clone(),
                prefix: parent,
                stamps,
            })),
        }));
    }
    Ok(None)
}

/// The objects under `key`, or under its parent whose names start with its last part
/// (`data/train-`), with the prefix they are listed under.
#[cfg(feature = "remote")]
fn list_prefix(
    store: &crate::source::storage::remote::Store,
    key: String,
) -> Result<(Vec<Listed>, String), Error> {
    let mut listed = store.list(&key)?;
    let mut key = key;
    if listed.is_empty() && !key.is_empty() {
        // `data/train-`: the objects of `data/` whose names start with `train-`.
        let (parent, stem) = match key.rsplit_once('/') {
            Some((p, s)) => (p.to_string(), s.to_string()),
            None => (String::new(), key.clone()),
        };
        listed = store
            .list(&parent)?
            .into_iter()
            .filter(|o| !o.key.contains('/') && o.key.starts_with(&stem))
            .collect();
        if !listed.is_empty() {
            key = parent;
        }
    }
    Ok((listed, key))
}

/// The source a listing holds: one kind of data files (`classify.rs`), or images.
#[cfg(feature = "remote")]
fn open_listed(
    store: &StoreRef,
    url: &str,
    key: String,
    listed: &[Listed],
) -> Result<Source, Error> {
    let names: Vec<&str> = listed.iter().map(|o| o.key.as_str()).collect();
    let records = unnamed_records(store, &key, listed)?;
    // An image in a class "folder" (a key with a `/`), as a local folder's class folders.
    let class_image = listed
        .iter()
        .find(|o| {
            o.key.contains('/')
                && crate::source::format::dir::has_image_extension(Path::new(&o.key))
                && !o.key.split('/').any(|c| c.starts_with('.'))
        })
        .map(|o| o.key.as_str());
    match classify(Path::new(url), &names, &records, class_image, Where::Store)? {
        Some((kind, chosen)) => {
            let files = chosen
                .into_iter()
                .map(|i| &listed[i])
                .map(|o| Located::object(store, join_key(&key, &o.key), o.size, o.mtime))
                .collect();
            open_kind(store, kind, files, url, PathBuf::from(store.url_of(&key)))
        }
        None => open_images(store, url, key, listed),
    }
}

/// Opens objects of one kind, with the store's options and limits.
#[cfg(feature = "remote")]
fn open_kind(
    store: &StoreRef,
    kind: Kind,
    files: Vec<Located>,
    url: &str,
    base: PathBuf,
) -> Result<Source, Error> {
    let bound = store.limits.max_bytes_in_flight;
    kind.open(files, PathBuf::from(url), base, &store.options, bound)
}

/// The images of a listing: in class "folders" (first key component) when there are any.
#[cfg(feature = "remote")]
fn open_images(
    store: &StoreRef,
    url: &str,
    key: String,
    listed: &[Listed],
) -> Result<Source, Error> {
    use std::sync::Arc;

    use crate::source::format::objects::ObjectIndex;

    let images: Vec<_> = listed
        .iter()
        .filter(|o| crate::source::format::dir::has_image_extension(Path::new(&o.key)))
        .filter(|o| !o.key.split('/').any(|c| c.starts_with('.')))
        .collect();
    if images.is_empty() {
        return Err(Error::source(
            url,
            format!(
                "no .tar, .parquet, TFRecord, .jpg, .jpeg, .png or .webp object under this prefix ({} objects listed)",
                listed.len()
            ),
        ));
    }
    let in_classes = images.iter().filter(|o| o.key.contains('/')).count();
    let mut classes: Vec<&str> = images
        .iter()
        .filter_map(|o| o.key.split_once('/').map(|(c, _)| c))
        .collect();
    classes.sort_unstable();
    classes.dedup();
    let mut index = FileIndex::with_origin(PathBuf::from(url), PathBuf::from(store.url_of(&key)));
    let mut stamps = Vec::with_capacity(images.len());
    if in_classes > 0 {
        if in_classes < images.len() {
            log::warn!(
                "{url}: {} image(s) directly under the prefix are ignored: the others are in class folders",
                images.len() - in_classes
            );
        }
        for o in images.iter().filter(|o| o.key.contains('/')) {
            let class = o.key.split('/').next().unwrap_or_default();
            let label = classes.binary_search(&class).unwrap_or(0) as u32;
            index.push(o.key.as_bytes(), label);
            stamps.push((o.size, o.mtime));
        }
        index.class_names = Some(classes.iter().map(|c| c.to_string()).collect());
    } else {
        for o in &images {
            index.push(o.key.as_bytes(), 0);
            stamps.push((o.size, o.mtime));
        }
    }
    crate::source::index::check_count(&index)?;
    index.shrink();
    Ok(Source {
        index,
        backing: Backing::Objects(Arc::new(ObjectIndex {
            store: store.store.clone(),
            prefix: key,
            stamps,
        })),
    })
}

#[cfg(feature = "remote")]
fn parent_key(key: &str) -> String {
    key.rsplit_once('/')
        .map(|(p, _)| p.to_string())
        .unwrap_or_default()
}

/// For each listed object, whether it is a TFRecord file told by its framing alone: one named
/// as a shard of a set (`train-00000-of-01024`, without an extension) whose first record's
/// framing checks (its first 4 KiB asked for, in parallel).
#[cfg(feature = "remote")]
fn unnamed_records(
    store: &std::sync::Arc<crate::source::storage::remote::Store>,
    key: &str,
    listed: &[Listed],
) -> Result<Vec<bool>, Error> {
    use crate::source::format::tfrecord::{sniff_head, SNIFF_BYTES};
    let candidates: Vec<usize> = (0..listed.len())
        .filter(|&i| {
            let o = &listed[i];
            let name = o.key.rsplit('/').next().unwrap_or(&o.key);
            o.size >= 12
                && !o.key.split('/').any(|c| c.starts_with('.'))
                && !name.contains('.')
                && may_be_record(name)
                && set_of(name).is_some()
        })
        .collect();
    let sniffed =
        crate::source::format::units::in_parallel(candidates.len(), Path::new(key), |k| {
            let o = &listed[candidates[k]];
            let file = Located::object(store, join_key(key, &o.key), o.size, o.mtime);
            Ok(sniff_head(&file.head(SNIFF_BYTES)?).is_some())
        })?;
    let mut out = vec![false; listed.len()];
    for (&i, found) in candidates.iter().zip(sniffed) {
        out[i] = found;
    }
    Ok(out)
}
