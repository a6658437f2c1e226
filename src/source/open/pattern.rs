//! The files a path names when it is not one file or folder: a pattern as WebDataset users
//! write them (`shards/train-{000000..000099}.tar`, `data/*.parquet`, `{a,b}.tar`), or a name
//! prefix (`data/train-`: the files of `data/` whose names start with `train-`). Only the last
//! component is a pattern; the files are those of its folder, sorted by name.

use std::path::{Path, PathBuf};

use crate::error::Error;

/// The most names one pattern may expand to (a range `{0..4000000000}` is refused, not
/// allocated).
const MAX_EXPANSIONS: usize = 1 << 20;

/// Whether `name` holds pattern characters (`*`, `?`, `[`, or a `{…}` group).
pub(crate) fn is_pattern(name: &str) -> bool {
    name.contains(['*', '?', '['])
        || name
            .find('{')
            .is_some_and(|open| name[open..].contains('}'))
}

/// The files of `path`'s folder that its last component names, as a pattern: each `{…}` group
/// expanded (`{a,b}`, `{000..099}` with its zero padding), then `*`, `?` and `[…]` matched
/// against the folder's entries (hidden ones left out). A name without wildcards must exist.
pub(crate) fn expand(path: &Path) -> Result<Vec<PathBuf>, Error> {
    let dir = folder_of(path);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if dir.to_string_lossy().contains(['*', '?', '{']) {
        return Err(Error::source(
            path,
            "only the last component of a path may be a pattern (`shards/*.tar`, not `*/x.tar`)",
        ));
    }
    let names = braces(&name).map_err(|why| Error::source(path, why))?;
    let entries = entries_of(&dir)?;
    let mut out = Vec::new();
    for n in &names {
        if n.contains(['*', '?', '[']) {
            out.extend(
                entries
                    .iter()
                    .filter(|e| wildcard(n, e))
                    .map(|e| dir.join(e)),
            );
        } else {
            let file = dir.join(n);
            if !file.is_file() {
                return Err(Error::io(
                    &file,
                    std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        format!("named by the pattern `{}`, but not there", path.display()),
                    ),
                ));
            }
            out.push(file);
        }
    }
    out.sort();
    out.dedup();
    if out.is_empty() {
        return Err(Error::source(path, "the pattern names no file"));
    }
    Ok(out)
}

/// The files of `path`'s folder whose names start with its last component (`data/train-`),
/// sorted; empty where there are none (or no such folder).
pub(crate) fn with_prefix(path: &Path) -> Vec<PathBuf> {
    let Some(stem) = path.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return Vec::new();
    };
    let dir = folder_of(path);
    let mut out: Vec<PathBuf> = entries_of(&dir)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.starts_with(&stem) && e.len() > stem.len())
        .map(|e| dir.join(e))
        .filter(|p| p.is_file())
        .collect();
    out.sort();
    out
}

fn folder_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// The names of a folder's entries, hidden ones left out.
fn entries_of(dir: &Path) -> Result<Vec<String>, Error> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let name = entry.file_name();
        if !super::format::dir::is_hidden(&name) {
            out.push(name.to_string_lossy().into_owned());
        }
    }
    Ok(out)
}

/// `name` with its `{…}` groups expanded, left to right: `{a,b}` gives each alternative,
/// `{000..099}` each number, zero-padded to the width written.
fn braces(name: &str) -> Result<Vec<String>, String> {
    let Some(open) = name.find('{') else {
        return Ok(vec![name.to_string()]);
    };
    let Some(len) = name[open..].find('}') else {
        return Ok(vec![name.to_string()]);
    };
    let (head, group, tail) = (
        &name[..open],
        &name[open + 1..open + len],
        &name[open + len + 1..],
    );
    let options: Vec<String> = match group.split_once("..") {
        Some((a, b)) if is_number(a) && is_number(b) => {
            let (x, y): (u64, u64) = (
                a.parse()
                    .map_err(|_| format!("`{{{group}}}`: not a range"))?,
                b.parse()
                    .map_err(|_| format!("`{{{group}}}`: not a range"))?,
            );
            if y < x {
                return Err(format!("`{{{group}}}`: the range runs backwards"));
            }
            if y - x >= MAX_EXPANSIONS as u64 {
                return Err(format!(
                    "`{{{group}}}` names more than {MAX_EXPANSIONS} files"
                ));
            }
            let width = if a.starts_with('0') { a.len() } else { 0 };
            (x..=y).map(|v| format!("{v:0width$}")).collect()
        }
        _ => group.split(',').map(str::to_string).collect(),
    };
    let mut out = Vec::new();
    for rest in braces(tail)? {
        for o in &options {
            out.push(format!("{head}{o}{rest}"));
            if out.len() > MAX_EXPANSIONS {
                return Err(format!("`{name}` names more than {MAX_EXPANSIONS} files"));
            }
        }
    }
    out.sort();
    Ok(out)
}

fn is_number(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// Whether `name` matches `pattern`: `*` any run of characters, `?` one, `[abc]` or `[a-z]`
/// one of a set (`[!…]` or `[^…]`: one not in it).
fn wildcard(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    // Iterative matching with one backtrack point for the last `*`.
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while j < n.len() {
        if i < p.len() {
            match p[i] {
                '*' => {
                    star = Some((i, j));
                    i += 1;
                    continue;
                }
                '?' => {
                    i += 1;
                    j += 1;
                    continue;
                }
                '[' => {
                    if let Some((matched, next)) = class(&p, i, n[j]) {
                        if matched {
                            i = next;
                            j += 1;
                            continue;
                        }
                    } else if n[j] == '[' {
                        i += 1;
                        j += 1;
                        continue;
                    }
                }
                c if c == n[j] => {
                    i += 1;
                    j += 1;
                    continue;
                }
                _ => {}
            }
        }
        match star {
            Some((si, sj)) => {
                i = si + 1;
                j = sj + 1;
                star = Some((si, sj + 1));
            }
            None => return false,
        }
    }
    p[i..].iter().all(|&c| c == '*')
}

/// A `[…]` set starting at `p[i]`: whether `c` is in it, and where the pattern goes on;
/// `None` for a `[` without its `]` (matched as itself).
fn class(p: &[char], i: usize, c: char) -> Option<(bool, usize)> {
    let mut k = i + 1;
    let negate = matches!(p.get(k), Some('!' | '^'));
    if negate {
        k += 1;
    }
    let start = k;
    let mut hit = false;
    while k < p.len() && (p[k] != ']' || k == start) {
        if k + 2 < p.len() && p[k + 1] == '-' && p[k + 2] != ']' {
            hit |= (p[k]..=p[k + 2]).contains(&c);
            k += 3;
        } else {
            hit |= p[k] == c;
            k += 1;
        }
    }
    (k < p.len()).then_some((hit != negate, k + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn braces_expand_lists_and_zero_padded_ranges() {
        assert_eq!(
            braces("s-{000..002}.tar").unwrap(),
            ["s-000.tar", "s-001.tar", "s-002.tar"]
        );
        assert_eq!(
            braces("{a,b}-{1..2}").unwrap(),
            ["a-1", "a-2", "b-1", "b-2"]
        );
        assert_eq!(braces("plain.tar").unwrap(), ["plain.tar"]);
        assert!(braces("{9..1}").is_err());
        assert!(braces("{0..99999999999}").is_err());
    }

    #[test]
    fn wildcards_match_as_a_shell_does() {
        assert!(wildcard("*.tar", "shard-0.tar"));
        assert!(!wildcard("*.tar", "shard-0.tar.idx"));
        assert!(wildcard(
            "train-*-of-*.parquet",
            "train-00001-of-00004.parquet"
        ));
        assert!(wildcard("s-?.tar", "s-1.tar") && !wildcard("s-?.tar", "s-10.tar"));
        assert!(wildcard("s-[0-2].tar", "s-1.tar") && !wildcard("s-[0-2].tar", "s-3.tar"));
        assert!(wildcard("s-[!0].tar", "s-1.tar") && !wildcard("s-[!0].tar", "s-0.tar"));
        assert!(wildcard("*", "") && !wildcard("?", ""));
    }

    #[test]
    fn patterns_and_prefixes_name_the_files_of_a_folder() {
        let dir = tempfile::tempdir().unwrap();
        for n in ["train-0.tar", "train-1.tar", "test-0.tar", ".hidden.tar"] {
            std::fs::write(dir.path().join(n), b"").unwrap();
        }
        let names = |v: Vec<PathBuf>| -> Vec<String> {
            v.iter()
                .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
                .collect()
        };
        assert_eq!(
            names(expand(&dir.path().join("*.tar")).unwrap()),
            ["test-0.tar", "train-0.tar", "train-1.tar"]
        );
        assert_eq!(
            names(expand(&dir.path().join("train-{0..1}.tar")).unwrap()),
            ["train-0.tar", "train-1.tar"]
        );
        let e = expand(&dir.path().join("train-{0..2}.tar")).unwrap_err();
        assert!(e.to_string().contains("train-2.tar"), "{e}");
        assert!(expand(&dir.path().join("*.parquet")).is_err());
        assert_eq!(
            names(with_prefix(&dir.path().join("train-"))),
            ["train-0.tar", "train-1.tar"]
        );
        assert!(with_prefix(&dir.path().join("val-")).is_empty());
        assert!(is_pattern("a-{0..9}.tar") && is_pattern("*.tar") && !is_pattern("a.tar"));
    }
}
