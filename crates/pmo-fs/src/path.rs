//! Paths of the file store and the PMO names they map to.
//!
//! A path is absolute (`/a/b/c`), its components are non-empty, not `.` or `..`, hold no NUL
//! and no control character, and are at most [`NAME_MAX`] bytes. PMO names may not contain
//! `/` (nor control characters), so a path is stored with [`SEP`] (U+2215 DIVISION SLASH, `∕`,
//! printable, three bytes in UTF-8, refused inside a component) in place of each `/`, after a
//! one-letter kind: `F` a file's first segment, `D` a directory, `X<i>` a file's segment `i`.
//! The whole PMO name is at most 255 bytes, which bounds a path to [`PATH_MAX`] bytes, each `/`
//! counted as the three bytes of its separator.

use crate::error::{FsError, Result};

/// Separator inside PMO names (a path's `/`).
pub const SEP: char = '\u{2215}';
/// Longest component.
pub const NAME_MAX: usize = 255;
/// Longest path (the PMO name adds a kind of up to 3 bytes and needs at most 255 in all).
pub const PATH_MAX: usize = 240;

/// What a PMO of the file store is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A file's first segment (its header and first bytes).
    File,
    /// A directory marker.
    Dir,
    /// Segment `i >= 1` of a file.
    Segment(u32),
}

/// A checked, normalised absolute path (`/` for the root; no trailing `/`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FsPath(String);

impl FsPath {
    /// Check and normalise `path`.
    pub fn parse(path: &str) -> Result<FsPath> {
        let bad = |reason: &str| {
            Err(FsError::BadPath {
                path: path.into(),
                reason: reason.into(),
            })
        };
        if !path.starts_with('/') {
            return bad("not absolute (must start with '/')");
        }
        let mut out = String::with_capacity(path.len());
        for comp in path.split('/').filter(|c| !c.is_empty()) {
            if comp == "." || comp == ".." {
                return bad("'.' and '..' are not allowed");
            }
            if comp.len() > NAME_MAX {
                return bad(&format!("a component is longer than {NAME_MAX} bytes"));
            }
            if comp.chars().any(|c| c.is_control()) {
                return bad("a component contains a control character");
            }
            if comp.contains(SEP) {
                return bad("a component contains '\u{2215}' (the store's separator)");
            }
            out.push('/');
            out.push_str(comp);
        }
        if out.is_empty() {
            out.push('/');
        }
        // Each '/' becomes the three bytes of SEP in the PMO name.
        let stored = out.len() + (SEP.len_utf8() - 1) * out.matches('/').count();
        if stored > PATH_MAX {
            return bad(&format!(
                "longer than {PATH_MAX} bytes (each '/' counts {} bytes)",
                SEP.len_utf8()
            ));
        }
        Ok(FsPath(out))
    }

    /// Check one directory-entry name (no separator).
    pub fn check_name(name: &str) -> Result<()> {
        if name.contains('/') {
            return Err(FsError::BadPath {
                path: name.into(),
                reason: "a name may not contain '/'".into(),
            });
        }
        FsPath::parse(&format!("/{name}")).map(|_| ())
    }

    /// The path as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Is this the root?
    pub fn is_root(&self) -> bool {
        self.0 == "/"
    }

    /// The parent directory (the root's parent is the root).
    pub fn parent(&self) -> FsPath {
        match self.0.rfind('/') {
            Some(0) | None => FsPath("/".into()),
            Some(i) => FsPath(self.0[..i].into()),
        }
    }

    /// The last component (empty for the root).
    pub fn file_name(&self) -> &str {
        self.0.rsplit('/').next().unwrap_or("")
    }

    /// `self/name`.
    pub fn join(&self, name: &str) -> Result<FsPath> {
        FsPath::check_name(name)?;
        FsPath::parse(&format!("{}/{name}", self.0.trim_end_matches('/')))
    }

    /// The PMO name of this path as `kind`.
    pub fn pmo_name(&self, kind: Kind) -> String {
        let body = self.0.replace('/', &SEP.to_string());
        match kind {
            Kind::File => format!("F{body}"),
            Kind::Dir => format!("D{body}"),
            Kind::Segment(i) => format!("X{i}{body}"),
        }
    }

    /// The path and kind a PMO name stands for (`None`: not a file-store name).
    pub fn from_pmo_name(name: &str) -> Option<(FsPath, Kind)> {
        let sep = name.find(SEP)?;
        let (kind, body) = name.split_at(sep);
        let kind = match kind {
            "F" => Kind::File,
            "D" => Kind::Dir,
            k if k.starts_with('X') => Kind::Segment(k[1..].parse().ok().filter(|&i| i >= 1)?),
            _ => return None,
        };
        let path = body.replace(SEP, "/");
        let p = FsPath::parse(&path).ok()?;
        (p.0 == path).then_some((p, kind))
    }
}

impl std::fmt::Display for FsPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_and_refuses() {
        assert_eq!(FsPath::parse("/a//b/").unwrap().as_str(), "/a/b");
        assert_eq!(FsPath::parse("/").unwrap().as_str(), "/");
        assert!(FsPath::parse("a/b").is_err());
        assert!(FsPath::parse("/a/../b").is_err());
        assert!(FsPath::parse("/a\u{1f}b").is_err());
        assert!(FsPath::parse(&format!("/a{SEP}b")).is_err());
        assert!(FsPath::parse(&format!("/{}", "x".repeat(256))).is_err());
        assert!(FsPath::parse(&format!("/{}/{}", "x".repeat(200), "y".repeat(60))).is_err());
        assert!(FsPath::check_name("a/b").is_err());
        let p = FsPath::parse("/a/b").unwrap();
        assert_eq!(p.parent().as_str(), "/a");
        assert_eq!(p.parent().parent().as_str(), "/");
        assert_eq!(p.file_name(), "b");
        assert_eq!(p.join("c").unwrap().as_str(), "/a/b/c");
    }

    #[test]
    fn pmo_names_round_trip() {
        let p = FsPath::parse("/dir/file.txt").unwrap();
        for k in [Kind::File, Kind::Dir, Kind::Segment(3)] {
            let n = p.pmo_name(k);
            assert!(!n.contains('/') && n.len() <= 255);
            assert_eq!(FsPath::from_pmo_name(&n), Some((p.clone(), k)));
        }
        assert_eq!(FsPath::from_pmo_name("plain-pmo"), None);
        assert_eq!(FsPath::from_pmo_name(&format!("X0{SEP}a")), None);
        let long = FsPath::parse(&format!("/{}", "z".repeat(PATH_MAX - 3))).unwrap();
        assert!(long.pmo_name(Kind::Segment(99)).len() <= 255);
    }
}
