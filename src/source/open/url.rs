//! Sources in object storage (`s3://…`, `gs://…`, `az://…`, `http(s)://…`): what
//! [`Source::from_url_with`](super::Source::from_url_with) opens at a URL, images, a file list
//! or tar shards (with their sidecar indexes).

use std::path::{Path, PathBuf};

use super::format::tar::is_tar_name;
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
pub(crate) fn open_remote(
    url: &str,
    options: crate::source::RemoteOptions,
) -> Result<Source, Error> {
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
    options: crate::source::RemoteOptions,
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

/// Tar shards in object storage, as one source.
#[cfg(feature = "remote")]
fn remote_shards(
    store: &StoreRef,
    url: &str,
    shards: Vec<Located>,
    base: &str,
) -> Result<Source, Error> {
    crate::source::format::tar::open_shards(
        shards.into_iter().map(std::sync::Arc::new).collect(),
        PathBuf::from(url),
        PathBuf::from(store.url_of(base)),
        None,
        store.limits.max_bytes_in_flight,
    )
    .map(Source::from)
}

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

    if is_tar_name(key) {
        let (size, mtime) = store.head(key)?;
        let shard = Located::object(store, key.to_string(), size, mtime);
        return remote_shards(store, url, vec![shard], &parent_key(key)).map(Some);
    }
    if let Some(kind) = container_name(key) {
        let (size, mtime) = store.head(key)?;
        let file = Located::object(store, key.to_string(), size, mtime);
        let base = PathBuf::from(store.url_of(&parent_key(key)));
        return open_containers(store, kind, vec![file], PathBuf::from(url), base).map(Some);
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

/// The source a listing holds: one kind of container files, tar shards, or images; two kinds
/// side by side are an error naming both.
#[cfg(feature = "remote")]
fn open_listed(
    store: &StoreRef,
    url: &str,
    key: String,
    listed: &[Listed],
) -> Result<Source, Error> {
    let visible = |o: &&Listed| !o.key.split('/').any(|c| c.starts_with('.'));
    let tars: Vec<_> = listed.iter().filter(|o| is_tar_name(&o.key)).collect();
    let mut parquet: Vec<&Listed> = listed
        .iter()
        .filter(visible)
        .filter(|o| container_name(&o.key) == Some(Container::Parquet))
        .collect();
    let keys = |v: &[&Listed]| v.iter().map(|o| PathBuf::from(&o.key)).collect::<Vec<_>>();
    if !parquet.is_empty() && super::containers::beside_their_tars(&keys(&parquet), &keys(&tars)) {
        // img2dataset's layout: the tar shards are the dataset.
        log::info!(
            "{url}: reading the tar shards; the parquet files beside them ({}, ...) are their \
             metadata, as img2dataset writes it",
            parquet[0].key
        );
        parquet.clear();
    }
    let records = tfrecord_objects(store, &key, listed)?;
    let kinds = [
        ("tar shards", tars.first().copied()),
        ("parquet files", parquet.first().copied()),
        ("TFRecord files", records.first().copied()),
    ];
    let mut present = kinds.iter().filter_map(|(what, o)| o.map(|o| (*what, o)));
    if let (Some(a), Some(b)) = (present.next(), present.next()) {
        return Err(Error::source(
            url,
            format!(
                "holds both {} ({}) and {} ({}): move one kind to another prefix",
                a.0, a.1.key, b.0, b.1.key
            ),
        ));
    }
    for (kind, found) in [
        (Container::Parquet, &parquet),
        (Container::TfRecord, &records),
    ] {
        if found.is_empty() {
            continue;
        }
        let what = if kind == Container::Parquet {
            "parquet files"
        } else {
            "TFRecord files"
        };
        if let Some(image) = listed.iter().filter(visible).find(|o| {
            o.key.contains('/')
                && crate::source::format::dir::has_image_extension(Path::new(&o.key))
        }) {
            return Err(Error::source(
                url,
                format!(
                    "holds both {what} ({}) and class folders of images ({}): move one kind to \
                     another prefix",
                    found[0].key, image.key
                ),
            ));
        }
        let names: Vec<PathBuf> = found.iter().map(|o| PathBuf::from(&o.key)).collect();
        super::containers::one_set(Path::new(url), &names)?;
        let files = found
            .iter()
            .map(|o| Located::object(store, join_key(&key, &o.key), o.size, o.mtime))
            .collect();
        let base = PathBuf::from(store.url_of(&key));
        return open_containers(store, kind, files, PathBuf::from(url), base);
    }
    // Shards beside class "folders" of images, as for a local folder: reading either would
    // drop the other's samples or labels without a word.
    let class_image = listed.iter().find(|o| {
        o.key.contains('/')
            && crate::source::format::dir::has_image_extension(Path::new(&o.key))
            && !o.key.split('/').any(|c| c.starts_with('.'))
    });
    if let (Some(tar), Some(image)) = (tars.first(), class_image) {
        return Err(Error::source(
            url,
            format!(
                "holds both tar shards ({}{}) and class folders of images ({}): move one kind to \
                 another prefix",
                tar.key,
                if tars.len() > 1 { ", ..." } else { "" },
                image.key
            ),
        ));
    }
    if !tars.is_empty() {
        let shards = tars
            .into_iter()
            .map(|o| Located::object(store, join_key(&key, &o.key), o.size, o.mtime))
            .collect();
        return remote_shards(store, url, shards, &key);
    }
    open_images(store, url, key, listed)
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

/// The container formats an object can be one file of.
#[cfg(feature = "remote")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Container {
    Parquet,
    TfRecord,
}

/// The container an object is a file of, by its name alone.
#[cfg(feature = "remote")]
fn container_name(key: &str) -> Option<Container> {
    let name = key.rsplit('/').next().unwrap_or(key);
    if crate::source::format::dir::is_parquet_name(name) {
        Some(Container::Parquet)
    } else if crate::source::format::tfrecord::is_tfrecord_name(name) {
        Some(Container::TfRecord)
    } else {
        None
    }
}

/// The TFRecord shards among `listed`: named as such, or named as a shard of a set
/// (`train-00000-of-01024`, without an extension of another kind) with a first record whose
/// framing checks (its first 4 KiB asked for).
#[cfg(feature = "remote")]
fn tfrecord_objects<'a>(
    store: &std::sync::Arc<crate::source::storage::remote::Store>,
    key: &str,
    listed: &'a [crate::source::storage::remote::Listed],
) -> Result<Vec<&'a crate::source::storage::remote::Listed>, Error> {
    use crate::source::format::tfrecord::{sniff_head, SNIFF_BYTES};
    let visible =
        |o: &&crate::source::storage::remote::Listed| !o.key.split('/').any(|c| c.starts_with('.'));
    let candidates: Vec<&crate::source::storage::remote::Listed> = listed
        .iter()
        .filter(visible)
        .filter(|o| match container_name(&o.key) {
            Some(kind) => kind == Container::TfRecord,
            None => {
                let name = o.key.rsplit('/').next().unwrap_or(&o.key);
                o.size >= 12 && !name.contains('.') && super::containers::set_of(name).is_some()
            }
        })
        .collect();
    let keep = crate::source::format::units::in_parallel(candidates.len(), Path::new(key), |k| {
        let o = candidates[k];
        if container_name(&o.key).is_some() {
            return Ok(true);
        }
        let file = Located::object(store, join_key(key, &o.key), o.size, o.mtime);
        Ok(sniff_head(&file.head(SNIFF_BYTES)?).is_some())
    })?;
    Ok(candidates
        .into_iter()
        .zip(keep)
        .filter_map(|(o, k)| k.then_some(o))
        .collect())
}

/// Indexes parquet files or TFRecord shards in object storage, with the store's options.
#[cfg(feature = "remote")]
fn open_containers(
    store: &StoreRef,
    kind: Container,
    files: Vec<Located>,
    origin: PathBuf,
    base: PathBuf,
) -> Result<Source, Error> {
    match kind {
        Container::TfRecord => crate::source::format::tfrecord::index_files(
            files,
            origin,
            base,
            &store.options.tfrecord,
            None,
        )
        .map(Source::from),
        #[cfg(feature = "parquet")]
        Container::Parquet => {
            crate::source::format::parquet::index_files(files, origin, base, &store.options.parquet)
                .map(Source::from)
        }
        #[cfg(not(feature = "parquet"))]
        Container::Parquet => {
            let _ = (files, origin, base);
            Err(Error::feature_disabled("parquet"))
        }
    }
}
