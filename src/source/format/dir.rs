//! Class folders: the walk behind [`Source::from_dir`](crate::Source::from_dir), and the
//! names it picks up (image extensions, hidden files).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use super::list::shown;
use crate::error::Error;
use crate::source::index::bytes_to_os;
use crate::source::index::{check_count, os_to_bytes, FileIndex};

/// The index of a folder with one sub-folder per class (the walk of [`Source::from_dir`](crate::Source::from_dir)):
/// sorted class names give the labels, and the images below each class folder, sorted by
/// path, its samples.
pub(crate) fn class_folders(dir: &Path) -> Result<FileIndex, Error> {
    let mut classes: Vec<(String, PathBuf)> = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let p = entry.path();
        let name = entry.file_name();
        if is_hidden(&name) || !p.is_dir() {
            continue;
        }
        classes.push((name.to_string_lossy().into_owned(), p));
    }
    if classes.is_empty() {
        let compressed = compressed_tar_in(dir);
        return Err(Error::source(
            dir,
            match compressed {
                Some(name) => format!(
                    "no class folders and no .tar shards, but compressed tar files \
                     (`{}`): decompress them to .tar shards, which are read a member at a \
                     time",
                    shown(name.as_encoded_bytes())
                ),
                None if has_loose_images(dir) => "no class folders, only images directly \
                     in it: a folder source needs one sub-folder per class (its name gives \
                     the label); for unlabeled images, write a file list with a label for \
                     each, e.g. `for f in DIR/*.jpg; do printf '%s\\t0\\n' \"$f\"; done > \
                     files.txt`"
                    .into(),
                None => "no class folders: expected one sub-folder per class, each holding \
                         images"
                    .into(),
            },
        ));
    }
    classes.sort();
    let loose = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .flatten()
        .filter(|e| {
            !is_hidden(&e.file_name()) && has_image_extension(&e.path()) && e.path().is_file()
        })
        .count();
    if loose > 0 {
        log::warn!(
            "{}: {loose} image(s) directly in the source folder are not read: only images \
             inside class folders have a label",
            dir.display()
        );
    }
    let mut index = FileIndex::with_origin(dir.to_path_buf(), dir.to_path_buf());
    let mut files = Walked {
        root: dir,
        bytes: Vec::new(),
        spans: Vec::new(),
    };
    let mut visited = Visited {
        ancestors: vec![std::fs::canonicalize(dir).map_err(|e| Error::io(dir, e))?],
        seen: Default::default(),
        classes: classes.iter().map(|(n, _)| n.into()).collect(),
    };
    for (label, (_, class_dir)) in classes.iter().enumerate() {
        files.bytes.clear();
        files.spans.clear();
        collect_images(class_dir, &mut files, &mut visited)?;
        if files.spans.is_empty() {
            // Its label stays (labels are the sorted folder names), with no sample.
            log::warn!(
                "{}: a class folder with no .jpg, .jpeg or .png file: label {label} has no sample",
                class_dir.display()
            );
        }
        files.sort();
        for &span in &files.spans {
            index.push(files.get(span), label as u32);
        }
    }
    if index.len() == 0 {
        return Err(Error::source(
            dir,
            "the class folders hold no .jpg, .jpeg or .png file",
        ));
    }
    check_count(&index)?;
    index.class_names = Some(classes.into_iter().map(|(n, _)| n).collect());
    index.shrink();
    Ok(index)
}

/// Image file extensions (compared case-insensitively): the files a class-folder source picks
/// up and the members of a tar shard that are a sample's image.
pub(crate) const IMAGE_EXTENSIONS: &[&str] = &["jpg", "jpeg", "png", "webp"];

/// Whether `dir` holds an image file directly (not in a sub-folder); stops at the first.
fn has_loose_images(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            !is_hidden(&e.file_name()) && has_image_extension(&e.path()) && e.path().is_file()
        })
    })
}

pub(crate) fn is_hidden(name: &OsStr) -> bool {
    name.to_string_lossy().starts_with('.')
}

/// Image paths found by a folder walk, relative to the source's folder and packed in one
/// buffer (a `PathBuf` each took about twice the memory).
struct Walked<'a> {
    root: &'a Path,
    bytes: Vec<u8>,
    /// (start, length) in `bytes`, one per path.
    spans: Vec<(usize, usize)>,
}

impl Walked<'_> {
    fn push(&mut self, path: &Path) {
        let rel = path.strip_prefix(self.root).unwrap_or(path);
        let start = self.bytes.len();
        self.bytes.extend_from_slice(&os_to_bytes(rel.as_os_str()));
        self.spans.push((start, self.bytes.len() - start));
    }

    fn get(&self, (start, len): (usize, usize)) -> &[u8] {
        &self.bytes[start..start + len]
    }

    /// Puts the paths in `Path` order (component by component), as sorting `PathBuf`s did.
    fn sort(&mut self) {
        let bytes = &self.bytes;
        let path =
            |(start, len): (usize, usize)| Path::new(bytes_to_os(&bytes[start..start + len]));
        self.spans.sort_by(|&a, &b| path(a).cmp(path(b)));
    }
}

/// The folders of a class-folder walk.
struct Visited {
    /// Canonical paths of the folders being walked, the source's own folder first: a link
    /// back to one of them (a loop) is skipped with a warning.
    ancestors: Vec<PathBuf>,
    /// Every folder walked so far (canonical path → the path it was reached by): a folder
    /// reached twice through links would count its images twice, under two labels if in two
    /// class folders, and links reaching one folder many ways made the walk exponential.
    seen: std::collections::HashMap<PathBuf, PathBuf>,
    /// The class folders' names (a link to an image in one of them names a sample).
    classes: Vec<std::ffi::OsString>,
}

/// Adds the images under `dir` (recursively, following links to folders) to `out`.
fn collect_images(dir: &Path, out: &mut Walked<'_>, visited: &mut Visited) -> Result<(), Error> {
    let canonical = std::fs::canonicalize(dir).map_err(|e| Error::io(dir, e))?;
    if visited.ancestors.contains(&canonical) {
        log::warn!(
            "{}: skipped, a link back to a folder it is inside ({})",
            dir.display(),
            canonical.display()
        );
        return Ok(());
    }
    if let Some(first) = visited.seen.get(&canonical) {
        return Err(Error::source(
            dir,
            format!(
                "the folder {} is reached twice, as {} and as {} (through a link): its images \
                 would be read twice, under two labels if in two class folders; remove one link",
                canonical.display(),
                first.display(),
                dir.display()
            ),
        ));
    }
    visited.seen.insert(canonical.clone(), dir.to_path_buf());
    visited.ancestors.push(canonical);
    let walked = collect_entries(dir, out, visited);
    visited.ancestors.pop();
    walked
}

fn collect_entries(dir: &Path, out: &mut Walked<'_>, visited: &mut Visited) -> Result<(), Error> {
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let name = entry.file_name();
        if is_hidden(&name) {
            continue;
        }
        let p = entry.path();
        let ft = entry.file_type().map_err(|e| Error::io(&p, e))?;
        if ft.is_dir() || (ft.is_symlink() && p.is_dir()) {
            collect_images(&p, out, visited)?;
        } else if has_image_extension(&p) {
            if ft.is_symlink() {
                check_file_link(&p, visited)?;
            }
            out.push(&p);
        }
    }
    Ok(())
}

/// Refuses a link to an image that is a sample of the walk itself (in a class folder of the
/// same source): the image would be read twice, under two labels if the link is in another
/// class folder, as with a folder reached twice. A link to an image outside the source
/// folder is that image's one sample. (Only links are checked: a hard link would need a
/// `stat` of every file.)
fn check_file_link(link: &Path, visited: &Visited) -> Result<(), Error> {
    let (Ok(target), Some(root)) = (std::fs::canonicalize(link), visited.ancestors.first()) else {
        return Ok(()); // a dangling link: reading it names it
    };
    let Ok(rel) = target.strip_prefix(root) else {
        return Ok(());
    };
    let parts: Vec<&OsStr> = rel.iter().collect();
    let walked = parts.len() >= 2
        && visited.classes.iter().any(|c| c.as_os_str() == parts[0])
        && !parts.iter().any(|c| is_hidden(c))
        && has_image_extension(&target);
    if !walked {
        return Ok(());
    }
    Err(Error::source(
        link,
        format!(
            "a link to {}, which is a sample of class `{}` itself: the image would be read \
             twice, under two labels if in two class folders; remove the link (or copy the file)",
            target.display(),
            parts[0].to_string_lossy()
        ),
    ))
}

/// The first visible sub-folder of `dir` that holds an image file directly, if any.
pub(crate) fn class_folder_with_images(dir: &Path) -> Result<Option<std::ffi::OsString>, Error> {
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let name = entry.file_name();
        if is_hidden(&name) || !entry.path().is_dir() {
            continue;
        }
        let Ok(inner) = std::fs::read_dir(entry.path()) else {
            continue;
        };
        for e in inner.flatten() {
            if !is_hidden(&e.file_name()) && has_image_extension(&e.path()) {
                return Ok(Some(name));
            }
        }
    }
    Ok(None)
}

pub(crate) fn has_image_extension(p: &Path) -> bool {
    p.extension()
        .and_then(OsStr::to_str)
        .is_some_and(|e| IMAGE_EXTENSIONS.iter().any(|x| x.eq_ignore_ascii_case(e)))
}

/// A compressed tar file (`x.tar.gz`, `x.tgz`, ...) directly in `dir`, if there is one.
fn compressed_tar_in(dir: &Path) -> Option<std::ffi::OsString> {
    const ENDINGS: [&str; 8] = [
        ".tar.gz",
        ".tgz",
        ".tar.zst",
        ".tar.zstd",
        ".tar.xz",
        ".txz",
        ".tar.bz2",
        ".tar.lz4",
    ];
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.file_name())
        .find(|name| {
            let lower = name.to_string_lossy().to_ascii_lowercase();
            ENDINGS.iter().any(|end| lower.ends_with(end))
        })
}

/// True for a name ending in `.parquet` (any case).
pub(crate) fn is_parquet_name(name: &str) -> bool {
    name.to_ascii_lowercase().ends_with(".parquet")
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use crate::source::Source;

    #[test]
    fn class_folders_list_their_images_in_path_order() {
        // Component order, as sorting `PathBuf`s gives (`a/b.jpg` before `a-b.jpg`, which byte
        // order would swap), nested folders included, hidden and other files left out.
        let dir = tempfile::tempdir().unwrap();
        let names = [
            "x/a-b.jpg",
            "x/a/b.jpg",
            "x/a.jpg",
            "x/B.PNG",
            "x/a/a/z.jpeg",
            "x/ab.jpg",
            "y/2.jpg",
            "y/10.jpg",
            "y/.hidden.jpg",
            "y/notes.txt",
        ];
        for n in names {
            let p = dir.path().join(n);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, b"").unwrap();
        }
        let src = Source::from_dir(dir.path()).unwrap();
        let got: Vec<(PathBuf, u32)> = (0..src.len())
            .map(|i| (src.path(i).unwrap(), src.label(i).unwrap()))
            .collect();
        let mut want: Vec<(PathBuf, u32)> = names[..6]
            .iter()
            .map(|n| (dir.path().join(n), 0))
            .chain(names[6..8].iter().map(|n| (dir.path().join(n), 1)))
            .collect();
        want.sort();
        assert_eq!(got, want);
        // `B.PNG` (upper case sorts first), then the two inside `a/`, then `a-b.jpg`.
        assert!(got[1..3]
            .iter()
            .all(|(p, _)| p.starts_with(dir.path().join("x/a"))));
        assert_eq!(got[3].0, dir.path().join("x/a-b.jpg"));
    }

    #[test]
    fn a_folder_of_images_without_class_folders_says_how_to_read_them() {
        let dir = tempfile::tempdir().unwrap();
        let e = Source::from_dir(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("no class folders: expected one sub-folder"),
            "{e}"
        );
        // Hidden images and other files do not count as images lying in the folder.
        std::fs::write(dir.path().join(".x.jpg"), b"").unwrap();
        std::fs::write(dir.path().join("notes.txt"), b"").unwrap();
        let e = Source::from_dir(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("no class folders: expected one sub-folder"),
            "{e}"
        );
        std::fs::write(dir.path().join("a.JPG"), b"").unwrap();
        let e = Source::from_dir(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("no class folders, only images directly in it")
                && e.contains("write a file list with a label for each"),
            "{e}"
        );
    }
}
