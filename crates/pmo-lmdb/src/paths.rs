//! Which LMDB environments live in PMOs, and the PMO an environment path names
//! (`docs/lmdb.md`, "Which environments are PMOs").
//!
//! - `pmo:NAME` is PMO `NAME`, always.
//! - `PMO_LMDB=1`: every other path too; `PMO_LMDB_PATHS=ENTRY:ENTRY...`: the paths an entry
//!   matches. An entry is a directory or file path (it matches itself and everything under
//!   it) or a glob (`*`, `?`, `[..]`, not crossing `/`; `**` crosses), which matches a path or
//!   any of its ancestors. Relative entries are taken from the working directory.
//! - Any other path is an environment on files, as LMDB opens it.
//!
//! The rule from a path to a PMO name (PMO names are 1-255 bytes without `/` or NUL): the
//! environment's data file, made absolute from the working directory and normalised lexically
//! (`.`, `..` and repeated `/` removed; symbolic links are not followed, as the directory may
//! not exist), with its leading `/` dropped, then every `%` written `%25` and every `/`
//! written `%2F`. The data file is `PATH/data.mdb`, or with `MDB_NOSUBDIR` `PATH` itself, so
//! both ways of opening one environment name one PMO. [`path_of_name`] reverses it. The
//! same path from any process and any working directory names the same PMO.

use std::path::{Component, Path, PathBuf};

use crate::LmdbError;

/// The longest PMO name (`pmo_format::NAME_MAX`, docs/format.md).
pub const NAME_MAX: usize = 255;

/// LMDB's data file in an environment's directory.
pub const DATA_FILE: &str = "data.mdb";

/// The PMO named by the environment path `path` opened with `nosubdir` (`MDB_NOSUBDIR`), or
/// `None` for an environment on files. Reads `PMO_LMDB` and `PMO_LMDB_PATHS`; `all` makes
/// every path a PMO (as `PMO_LMDB=1`).
pub fn pmo_name(path: &str, nosubdir: bool, all: bool) -> Result<Option<String>, LmdbError> {
    if let Some(name) = path.strip_prefix("pmo:") {
        return Ok(Some(name.to_string()));
    }
    let all = all
        || std::env::var("PMO_LMDB")
            .map(|v| !v.is_empty() && v != "0")
            .unwrap_or(false);
    let chosen = std::env::var_os("PMO_LMDB_PATHS").filter(|v| !v.is_empty());
    if !all && chosen.is_none() {
        return Ok(None);
    }
    let abs = absolute(path)?;
    if !all {
        let list = chosen.unwrap_or_default();
        let list = list
            .to_str()
            .ok_or_else(|| LmdbError::Usage("PMO_LMDB_PATHS is not UTF-8".into()))?;
        if !matches_any(list, &abs)? {
            return Ok(None);
        }
    }
    let file = if nosubdir { abs } else { abs.join(DATA_FILE) };
    name_of_path(&file).map(Some)
}

/// `path` made absolute from the working directory, normalised lexically.
pub fn absolute(path: &str) -> Result<PathBuf, LmdbError> {
    if path.is_empty() {
        return Err(LmdbError::Usage("an empty environment path".into()));
    }
    let p = Path::new(path);
    let joined = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| LmdbError::Usage(format!("the working directory: {e}")))?
            .join(p)
    };
    Ok(normalise(&joined))
}

fn normalise(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::Normal(s) => out.push(s),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// The PMO name of an absolute, normalised data-file path (the rule above).
pub fn name_of_path(file: &Path) -> Result<String, LmdbError> {
    let s = file.to_str().ok_or_else(|| {
        LmdbError::Usage(format!(
            "environment path {} is not UTF-8: name its PMO with pmo:NAME",
            file.display()
        ))
    })?;
    let mut name = String::with_capacity(s.len() + 8);
    for ch in s.strip_prefix('/').unwrap_or(s).chars() {
        match ch {
            '%' => name.push_str("%25"),
            '/' => name.push_str("%2F"),
            c => name.push(c),
        }
    }
    if name.len() > NAME_MAX {
        return Err(LmdbError::Name(format!(
            "environment path {s} makes a PMO name of {} bytes (at most {}): name its PMO with pmo:NAME",
            name.len(),
            NAME_MAX
        )));
    }
    Ok(name)
}

/// The data file a PMO name made by [`name_of_path`] stands for (`None` for a name the rule
/// cannot have made: a `%` not followed by `25` or `2F`).
pub fn path_of_name(name: &str) -> Option<PathBuf> {
    let mut out = String::from("/");
    let mut rest = name;
    while let Some(i) = rest.find('%') {
        out.push_str(&rest[..i]);
        let code = rest.get(i + 1..i + 3)?;
        out.push(match code {
            "25" => '%',
            "2F" => '/',
            _ => return None,
        });
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Some(PathBuf::from(out))
}

/// Whether an entry of the `:`-separated `list` matches `abs` or one of its ancestors.
fn matches_any(list: &str, abs: &Path) -> Result<bool, LmdbError> {
    let opts = glob::MatchOptions {
        case_sensitive: true,
        require_literal_separator: true,
        require_literal_leading_dot: false,
    };
    for entry in list.split(':').filter(|e| !e.is_empty()) {
        let is_glob = entry.contains(['*', '?', '[']);
        if is_glob {
            let entry = if entry.starts_with('/') {
                entry.to_string()
            } else {
                let cwd = std::env::current_dir()
                    .map_err(|e| LmdbError::Usage(format!("the working directory: {e}")))?;
                format!("{}/{entry}", cwd.display())
            };
            let pat = glob::Pattern::new(&entry)
                .map_err(|e| LmdbError::Usage(format!("PMO_LMDB_PATHS entry {entry:?}: {e}")))?;
            if abs.ancestors().any(|a| pat.matches_path_with(a, opts)) {
                return Ok(true);
            }
        } else if abs.starts_with(absolute(entry)?) {
            return Ok(true);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_never_hold_a_slash() {
        for p in [
            "/srv/db/data.mdb",
            "/a%b/c%2Fd/data.mdb",
            "/x",
            "/with space/é/data.mdb",
        ] {
            let n = name_of_path(Path::new(p)).unwrap();
            assert!(!n.contains('/') && !n.is_empty(), "{n}");
            assert_eq!(path_of_name(&n).unwrap(), PathBuf::from(p), "{n}");
        }
        assert_eq!(
            name_of_path(Path::new("/srv/db/data.mdb")).unwrap(),
            "srv%2Fdb%2Fdata.mdb"
        );
        assert_eq!(path_of_name("bad%41"), None);
        assert_eq!(path_of_name("cut%2"), None);
    }

    #[test]
    fn a_path_too_long_for_a_name_is_a_clear_error() {
        let long = format!("/{}/data.mdb", "d".repeat(300));
        let e = name_of_path(Path::new(&long)).unwrap_err();
        assert!(e.to_string().contains("pmo:NAME"), "{e}");
        assert_eq!(e.errno(), libc::ENAMETOOLONG);
    }

    #[test]
    fn normalising_is_lexical_and_absolute() {
        assert_eq!(
            normalise(Path::new("/a/./b//c/../d/")),
            PathBuf::from("/a/b/d")
        );
        assert_eq!(normalise(Path::new("/../x")), PathBuf::from("/x"));
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(absolute("./db").unwrap(), normalise(&cwd.join("db")));
        assert!(absolute("").is_err());
    }

    #[test]
    fn entries_match_a_path_or_its_ancestors() {
        let p = Path::new("/srv/knot/db/data.mdb");
        assert!(matches_any("/srv/knot", p).unwrap());
        assert!(matches_any("/nope:/srv/knot/db", p).unwrap());
        assert!(!matches_any("/srv/kn", p).unwrap());
        assert!(matches_any("/srv/*/db", p).unwrap());
        assert!(!matches_any("/*/db", p).unwrap());
        assert!(matches_any("/srv/**/data.mdb", p).unwrap());
        assert!(!matches_any("", p).unwrap());
        assert!(matches_any("/srv/[", p).is_err());
    }
}
