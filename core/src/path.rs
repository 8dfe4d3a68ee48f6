//! [`WorkspacePath`]: the only way to hold a path inside a workspace, in a
//! lossless text form that can name every file a directory can hold.
//!
//! Validation is lexical and happens once, in [`WorkspacePath::parse`] (or
//! [`WorkspacePath::from_os_name`] / [`WorkspacePath::join_os`] for names
//! read from disk); later code takes `&WorkspacePath` and never re-checks a
//! `&str`. What a lexical check cannot see — a symlink on disk that points
//! outside — is refused where the disk is, by the runtime's capability-based
//! file access.
//!
//! # The text form
//!
//! A name on disk is a byte string; events, the read model and every
//! interface hold text. The text form is the name's UTF-8 text, except:
//!
//! - a backslash is written `\\`;
//! - each byte that is not part of valid UTF-8 is written `\xHH`, two
//!   lowercase hex digits.
//!
//! Nothing else is escaped, and an escape is only allowed where it is
//! needed (`\x41` is refused: `A` is written `A`), so every name has exactly
//! one text form and the events that record it hash the same on every host.
//! A name without backslashes and in valid UTF-8 is its own text form.
//! The limits ([`PATH_BYTES_MAX`], [`PATH_COMPONENT_BYTES_MAX`]) apply to the
//! decoded bytes, the name on disk. `docs/names.md` describes the form for
//! users.

use std::borrow::Cow;
use std::ffi::OsStr;
use std::fmt::{self, Write as _};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::CoreError;
use crate::limits::{
    PATH_BYTES_MAX, PATH_COMPONENT_BYTES_MAX, PATH_DEPTH_MAX, PATH_TEXT_BYTES_MAX,
};
pub use crate::path_error::PathError;

/// A validated, normalised, workspace-relative path, held in its text form
/// (see the module documentation): `/`-separated, no empty, `.` or `..`
/// components, no NUL, at most [`PATH_BYTES_MAX`] bytes on disk.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorkspacePath(String);

impl WorkspacePath {
    /// Validates and normalises `input`, a path in the text form: repeated
    /// `/` and `.` components are dropped (`a//./b` → `a/b`), a trailing
    /// `/` is ignored. Absolute paths, `..`, NUL bytes, malformed or
    /// needless escapes and over-long paths are refused.
    pub fn parse(input: &str) -> Result<Self, CoreError> {
        Self::validate(input).map_err(|reason| CoreError::InvalidPath {
            path: input.to_owned(),
            reason,
        })
    }

    fn validate(input: &str) -> Result<Self, PathError> {
        if input.as_bytes().contains(&0) {
            return Err(PathError::NulByte);
        }
        if input.len() > PATH_TEXT_BYTES_MAX {
            return Err(PathError::TooLong);
        }
        if input.starts_with('/') {
            return Err(PathError::Absolute);
        }
        let mut depth = 0usize;
        let mut disk_bytes = 0usize;
        let mut already_normal = true;
        for component in input.split('/') {
            match component {
                "" | "." => already_normal = false,
                ".." => return Err(PathError::ParentComponent),
                _ => {
                    let length = component_disk_bytes(component)?;
                    if length > PATH_COMPONENT_BYTES_MAX {
                        return Err(PathError::ComponentTooLong);
                    }
                    depth += 1;
                    disk_bytes += length;
                }
            }
        }
        if depth == 0 {
            return Err(PathError::Empty);
        }
        if depth > PATH_DEPTH_MAX {
            return Err(PathError::TooDeep);
        }
        // The separators between the components count too.
        if disk_bytes + (depth - 1) > PATH_BYTES_MAX {
            return Err(PathError::TooLong);
        }
        // Stored paths are normal already (they were parsed before being
        // written): keep the input as it is rather than split and re-join
        // it, which matters when a rebuild decodes every `file.written`.
        if already_normal {
            return Ok(WorkspacePath(input.to_owned()));
        }
        let components: Vec<&str> = input
            .split('/')
            .filter(|component| !matches!(*component, "" | "."))
            .collect();
        Ok(WorkspacePath(components.join("/")))
    }

    /// The top-level entry named `name`, as a directory listing gives it:
    /// any bytes, kept exactly (see the module documentation).
    ///
    /// Fails only on names no listing yields (empty, `.`, `..`, holding NUL
    /// or `/`) and on names longer than [`PATH_COMPONENT_BYTES_MAX`]. A
    /// caller walking a directory must report such a failure (it names an
    /// entry sandlog cannot record), never skip the entry silently.
    pub fn from_os_name(name: &OsStr) -> Result<WorkspacePath, CoreError> {
        Self::from_name_bytes(None, os_str_bytes(name))
    }

    /// `self/name`, with `name` as a directory listing gives it: any bytes,
    /// kept exactly (see the module documentation).
    ///
    /// Fails as [`WorkspacePath::from_os_name`] does, and when the result
    /// would be longer than [`PATH_BYTES_MAX`] or deeper than
    /// [`PATH_DEPTH_MAX`]. A caller walking a directory must report such a
    /// failure, never skip the entry silently.
    pub fn join_os(&self, name: &OsStr) -> Result<WorkspacePath, CoreError> {
        Self::from_name_bytes(Some(self), os_str_bytes(name))
    }

    fn from_name_bytes(
        parent: Option<&WorkspacePath>,
        name: &[u8],
    ) -> Result<WorkspacePath, CoreError> {
        let mut text =
            String::with_capacity(parent.map_or(0, |parent| parent.0.len() + 1) + name.len() + 8);
        if let Some(parent) = parent {
            text.push_str(&parent.0);
            text.push('/');
        }
        push_escaped(&mut text, name);
        let (parent_depth, parent_bytes) = parent.map_or((0, 0), |parent| {
            (parent.components().count(), parent.disk_bytes() + 1)
        });
        let refusal = if name.is_empty() || name == b"." {
            Some(PathError::Empty)
        } else if name == b".." {
            Some(PathError::ParentComponent)
        } else if name.contains(&0) {
            Some(PathError::NulByte)
        } else if name.contains(&b'/') {
            Some(PathError::SeparatorInName)
        } else if name.len() > PATH_COMPONENT_BYTES_MAX {
            Some(PathError::ComponentTooLong)
        } else if parent_depth + 1 > PATH_DEPTH_MAX {
            Some(PathError::TooDeep)
        } else if parent_bytes + name.len() > PATH_BYTES_MAX {
            Some(PathError::TooLong)
        } else {
            None
        };
        match refusal {
            Some(reason) => Err(CoreError::InvalidPath { path: text, reason }),
            None => Ok(WorkspacePath(text)),
        }
    }

    /// The normalised path in its text form, `/`-separated.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The components in their text form, in order; never empty.
    pub fn components(&self) -> impl Iterator<Item = &str> {
        self.0.split('/')
    }

    /// The last component, in its text form.
    pub fn file_name(&self) -> &str {
        self.0.rsplit('/').next().unwrap_or(&self.0)
    }

    /// The parent path, or `None` for a top-level entry.
    pub fn parent(&self) -> Option<WorkspacePath> {
        self.0
            .rsplit_once('/')
            .map(|(parent, _)| WorkspacePath(parent.to_owned()))
    }

    /// `self/name`, with `name` in the text form, validated.
    pub fn join(&self, name: &str) -> Result<WorkspacePath, CoreError> {
        WorkspacePath::parse(&format!("{}/{}", self.0, name))
    }

    /// Whether `self` is `ancestor` or lies below it.
    pub fn starts_with(&self, ancestor: &WorkspacePath) -> bool {
        self.0 == ancestor.0
            || (self.0.starts_with(&ancestor.0)
                && self.0.as_bytes().get(ancestor.0.len()) == Some(&b'/'))
    }

    /// The path on disk, as a relative `std::path::Path`: the text form
    /// decoded, so a name with escapes gets its exact bytes back. Borrowed
    /// unless the text holds an escape.
    ///
    /// On hosts whose file names are not byte strings (not Unix), a name
    /// that is not valid UTF-8 cannot be represented; its text form is used
    /// as the name there. sandlog targets Unix hosts.
    pub fn as_std_path(&self) -> Cow<'_, Path> {
        if !self.0.contains('\\') {
            return Cow::Borrowed(Path::new(&self.0));
        }
        Cow::Owned(path_from_bytes(unescape(&self.0), &self.0))
    }

    /// The path as bytes on disk (the text form decoded).
    pub fn to_bytes(&self) -> Cow<'_, [u8]> {
        if !self.0.contains('\\') {
            return Cow::Borrowed(self.0.as_bytes());
        }
        Cow::Owned(unescape(&self.0))
    }

    /// The text form made safe to print to a terminal: control characters
    /// (newline, ESC, ...) and bidirectional overrides escaped too, see
    /// [`crate::escape::for_terminal`]. For people, not for parsing back.
    pub fn for_terminal(&self) -> Cow<'_, str> {
        crate::escape::for_terminal(&self.0)
    }

    /// Length of the path on disk, in bytes.
    fn disk_bytes(&self) -> usize {
        self.to_bytes().len()
    }
}

/// A name's bytes as the host's file system holds them.
#[cfg(unix)]
fn os_str_bytes(name: &OsStr) -> &[u8] {
    std::os::unix::ffi::OsStrExt::as_bytes(name)
}

/// A name's bytes as the standard library encodes them (WTF-8 on Windows).
#[cfg(not(unix))]
fn os_str_bytes(name: &OsStr) -> &[u8] {
    name.as_encoded_bytes()
}

#[cfg(unix)]
fn path_from_bytes(bytes: Vec<u8>, _text: &str) -> PathBuf {
    PathBuf::from(<std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(bytes))
}

#[cfg(not(unix))]
fn path_from_bytes(bytes: Vec<u8>, text: &str) -> PathBuf {
    match String::from_utf8(bytes) {
        Ok(name) => PathBuf::from(name),
        Err(_) => PathBuf::from(text),
    }
}

/// The text form of any OS string (a command-line argument, say), as
/// `docs/names.md` writes a name: UTF-8 text as itself, a backslash as
/// `\\`, each byte that is not part of valid UTF-8 as `\xHH`. Lossless:
/// distinct byte strings have distinct texts.
pub fn os_text_form(text: &OsStr) -> String {
    let bytes = os_str_bytes(text);
    let mut out = String::with_capacity(bytes.len());
    push_escaped(&mut out, bytes);
    out
}

/// Appends the text form of `bytes` to `out`: UTF-8 text as itself, a
/// backslash as `\\`, each byte that is not part of valid UTF-8 as `\xHH`.
fn push_escaped(out: &mut String, bytes: &[u8]) {
    for chunk in bytes.utf8_chunks() {
        for character in chunk.valid().chars() {
            if character == '\\' {
                out.push_str("\\\\");
            } else {
                out.push(character);
            }
        }
        for byte in chunk.invalid() {
            // Writing to a `String` cannot fail.
            let _ = write!(out, "\\x{byte:02x}");
        }
    }
}

fn hex_digit(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        _ => None,
    }
}

/// The bytes `text` stands for: `\\` is a backslash, `\xHH` (lowercase
/// hex) the byte `HH`. Any other backslash stands for itself, so decoding
/// never fails; validation refuses such text by re-encoding and comparing.
fn unescape(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&first, tail)) = rest.split_first() {
        if first == b'\\' {
            if let [b'\\', after @ ..] = tail {
                out.push(b'\\');
                rest = after;
                continue;
            }
            if let [b'x', high, low, after @ ..] = tail
                && let (Some(high), Some(low)) = (hex_digit(*high), hex_digit(*low))
            {
                out.push(high << 4 | low);
                rest = after;
                continue;
            }
        }
        out.push(first);
        rest = tail;
    }
    out
}

/// Whether `text` holds a backslash that starts neither `\\` nor `\xHH`.
fn has_malformed_escape(text: &str) -> bool {
    let mut rest = text.as_bytes();
    while let Some((&first, tail)) = rest.split_first() {
        rest = tail;
        if first != b'\\' {
            continue;
        }
        match tail {
            [b'\\', after @ ..] => rest = after,
            [b'x', high, low, after @ ..]
                if hex_digit(*high).is_some() && hex_digit(*low).is_some() =>
            {
                rest = after;
            }
            _ => return true,
        }
    }
    false
}

/// Length on disk of one component given in the text form (not empty, `.`
/// or `..`), after checking its escapes are well formed and canonical.
fn component_disk_bytes(component: &str) -> Result<usize, PathError> {
    if !component.contains('\\') {
        return Ok(component.len());
    }
    let bytes = unescape(component);
    if bytes.contains(&0) {
        return Err(PathError::NulByte);
    }
    let mut canonical = String::with_capacity(component.len());
    push_escaped(&mut canonical, &bytes);
    if canonical != component {
        return Err(if has_malformed_escape(component) {
            PathError::BadEscape
        } else {
            PathError::NonCanonicalEscape
        });
    }
    Ok(bytes.len())
}

impl fmt::Display for WorkspacePath {
    /// The text form: exact and parseable, but not safe for a terminal
    /// (see [`WorkspacePath::for_terminal`]).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for WorkspacePath {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for WorkspacePath {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Parsed from the borrowed input: no intermediate `String`.
        struct PathVisitor;
        impl serde::de::Visitor<'_> for PathVisitor {
            type Value = WorkspacePath;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a workspace-relative path")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<WorkspacePath, E> {
                WorkspacePath::parse(text).map_err(E::custom)
            }
        }
        deserializer.deserialize_str(PathVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[cfg(unix)]
    use std::os::unix::ffi::{OsStrExt, OsStringExt};

    fn reason(input: &str) -> PathError {
        match WorkspacePath::parse(input) {
            Err(CoreError::InvalidPath { reason, .. }) => reason,
            other => panic!("{input:?} was not refused: {other:?}"),
        }
    }

    #[cfg(unix)]
    fn os(bytes: &[u8]) -> &OsStr {
        OsStr::from_bytes(bytes)
    }

    #[cfg(unix)]
    fn name_reason(parent: Option<&WorkspacePath>, name: &[u8]) -> PathError {
        let result = match parent {
            None => WorkspacePath::from_os_name(os(name)),
            Some(parent) => parent.join_os(os(name)),
        };
        match result {
            Err(CoreError::InvalidPath { reason, .. }) => reason,
            other => panic!("{name:?} was not refused: {other:?}"),
        }
    }

    /// Redundant separators and `.` components are dropped.
    #[test]
    fn normalises_separators_and_dots() {
        assert_eq!(WorkspacePath::parse("a//./b/").unwrap().as_str(), "a/b");
        assert_eq!(WorkspacePath::parse("./x.txt").unwrap().as_str(), "x.txt");
        assert_eq!(
            WorkspacePath::parse("a\\\\b//.").unwrap().as_str(),
            "a\\\\b"
        );
    }

    /// Each way a text can be wrong is refused with its own reason.
    #[test]
    fn refuses_each_bad_form_with_its_reason() {
        assert_eq!(reason(""), PathError::Empty);
        assert_eq!(reason("./"), PathError::Empty);
        assert_eq!(reason("/etc/passwd"), PathError::Absolute);
        assert_eq!(reason("../x"), PathError::ParentComponent);
        assert_eq!(reason("a/../../x"), PathError::ParentComponent);
        assert_eq!(reason("a\0b"), PathError::NulByte);
        assert_eq!(
            reason(&"a".repeat(PATH_TEXT_BYTES_MAX + 1)),
            PathError::TooLong
        );
        let long = format!("{}/", "a".repeat(200)).repeat(PATH_BYTES_MAX / 200 + 1);
        assert_eq!(reason(&long), PathError::TooLong);
        assert_eq!(
            reason(&"a".repeat(PATH_COMPONENT_BYTES_MAX + 1)),
            PathError::ComponentTooLong
        );
        assert_eq!(reason(&"a/".repeat(PATH_DEPTH_MAX + 1)), PathError::TooDeep);
    }

    /// A backslash must start `\\` or `\xHH` with lowercase hex; anything
    /// else is a malformed escape, and the message says how to write one.
    #[test]
    fn a_lone_or_unknown_backslash_is_a_bad_escape() {
        for text in [
            "a\\b", "a\\", "\\", "a\\x4", "a\\xFF", "a\\xg0", "a\\u0041", "x/\\n",
        ] {
            assert_eq!(reason(text), PathError::BadEscape, "{text:?}");
        }
        let message = WorkspacePath::parse("a\\b").unwrap_err().to_string();
        assert!(
            message.contains("write `\\\\` for a backslash"),
            "{message}"
        );
    }

    /// An escape for bytes that have a plain form is refused, so a name
    /// has one text form (and one event hash): `A`, `é`, `/` and `.` must
    /// be written as themselves, and an escaped NUL is still a NUL.
    #[test]
    fn an_escape_for_a_plain_character_is_refused() {
        for text in [
            "\\x41",
            "caf\\xc3\\xa9",
            "a\\x2fb",
            "\\x2e\\x2e",
            "\\xff\\x41",
        ] {
            assert_eq!(reason(text), PathError::NonCanonicalEscape, "{text:?}");
        }
        assert_eq!(reason("a\\x00"), PathError::NulByte);
        // A lone lead byte followed by a complete character stays escaped.
        assert!(WorkspacePath::parse("\\xc3©").is_ok());
    }

    /// Paths without backslashes, as every path stored before escapes
    /// existed, keep their text exactly and map to disk without a copy.
    #[test]
    fn plain_paths_keep_their_text_and_borrow_on_disk() {
        let path = WorkspacePath::parse("données/report 1.csv").unwrap();
        assert_eq!(path.to_string(), "données/report 1.csv");
        assert!(matches!(path.as_std_path(), Cow::Borrowed(_)));
        assert_eq!(path.as_std_path(), Path::new("données/report 1.csv"));
    }

    /// A backslash and bytes that are not UTF-8 are written in the
    /// documented escapes and decode to the exact bytes on disk.
    #[cfg(unix)]
    #[test]
    fn names_from_disk_are_escaped_exactly() {
        let backslash = WorkspacePath::from_os_name(os(b"a\\b")).unwrap();
        assert_eq!(backslash.as_str(), "a\\\\b");
        assert_eq!(backslash.as_std_path().as_os_str().as_bytes(), b"a\\b");

        let dir = WorkspacePath::parse("dir").unwrap();
        let bytes = dir.join_os(os(b"\xffx\xc3\xa9\xe2\x82")).unwrap();
        assert_eq!(bytes.as_str(), "dir/\\xffxé\\xe2\\x82");
        assert_eq!(
            bytes.as_std_path().as_os_str().as_bytes(),
            b"dir/\xffx\xc3\xa9\xe2\x82"
        );
        assert_eq!(WorkspacePath::parse(bytes.as_str()).unwrap(), bytes);
        assert_eq!(
            serde_json::to_string(&bytes).unwrap(),
            r#""dir/\\xffxé\\xe2\\x82""#
        );
    }

    /// The limits count bytes on disk, not characters of text: 255 bytes
    /// that are not UTF-8 (1020 characters of text) are one valid name.
    #[cfg(unix)]
    #[test]
    fn limits_apply_to_the_bytes_on_disk() {
        let longest = vec![0xffu8; PATH_COMPONENT_BYTES_MAX];
        let path = WorkspacePath::from_os_name(os(&longest)).unwrap();
        assert_eq!(path.as_str().len(), 4 * PATH_COMPONENT_BYTES_MAX);
        assert_eq!(WorkspacePath::parse(path.as_str()).unwrap(), path);
        let too_long = vec![0xffu8; PATH_COMPONENT_BYTES_MAX + 1];
        assert_eq!(name_reason(None, &too_long), PathError::ComponentTooLong);
        let escaped: String = std::iter::repeat_n("\\xff", PATH_COMPONENT_BYTES_MAX + 1).collect();
        assert_eq!(reason(&escaped), PathError::ComponentTooLong);

        let mut deep = WorkspacePath::parse("d").unwrap();
        for _ in 1..PATH_DEPTH_MAX {
            deep = deep.join_os(os(b"d")).unwrap();
        }
        assert_eq!(name_reason(Some(&deep), b"d"), PathError::TooDeep);

        let component = vec![0xfeu8; 200];
        let mut long = WorkspacePath::from_os_name(os(&component)).unwrap();
        while long.to_bytes().len() + 1 + component.len() <= PATH_BYTES_MAX {
            long = long.join_os(os(&component)).unwrap();
        }
        assert_eq!(name_reason(Some(&long), &component), PathError::TooLong);
    }

    /// Names no directory listing yields are refused, each with its reason.
    #[cfg(unix)]
    #[test]
    fn impossible_names_are_refused_not_reinterpreted() {
        assert_eq!(name_reason(None, b""), PathError::Empty);
        assert_eq!(name_reason(None, b"."), PathError::Empty);
        assert_eq!(name_reason(None, b".."), PathError::ParentComponent);
        assert_eq!(name_reason(None, b"a\0b"), PathError::NulByte);
        assert_eq!(name_reason(None, b"a/b"), PathError::SeparatorInName);
        assert_eq!(name_reason(None, b"/etc"), PathError::SeparatorInName);
    }

    /// `starts_with` compares whole components.
    #[test]
    fn starts_with_respects_component_boundaries() {
        let dir = WorkspacePath::parse("data").unwrap();
        assert!(WorkspacePath::parse("data/x").unwrap().starts_with(&dir));
        assert!(WorkspacePath::parse("data").unwrap().starts_with(&dir));
        assert!(!WorkspacePath::parse("database").unwrap().starts_with(&dir));
    }

    /// Control characters are kept exactly in the text form and escaped
    /// only for a terminal.
    #[test]
    fn terminal_form_escapes_controls_only_there() {
        let path = WorkspacePath::parse("a\nb\u{1b}[2J").unwrap();
        assert_eq!(path.to_string(), "a\nb\u{1b}[2J");
        assert_eq!(path.for_terminal(), "a\\nb\\x1b[2J");
    }

    /// Any byte string a directory entry can be named.
    #[cfg(unix)]
    fn entry_name() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 1..=PATH_COMPONENT_BYTES_MAX),
            // Mostly the interesting bytes: backslash, `x`, hex digits,
            // lead and continuation bytes.
            proptest::collection::vec(
                prop::sample::select(vec![
                    b'\\', b'x', b'a', b'f', b'0', b'.', 0x80, 0xc3, 0xa9, 0xe2, 0xff
                ]),
                1..=40,
            ),
        ]
        .prop_filter("a name a listing can yield", |name| {
            !name.contains(&0) && !name.contains(&b'/') && name != b"." && name != b".."
        })
    }

    proptest! {
        /// No accepted path can name anything outside the workspace: it is
        /// relative, has no `..`, no NUL, and re-parses to itself.
        #[test]
        fn accepted_paths_never_escape(input in "[a-z0-9./\\\\\0]{0,40}") {
            if let Ok(path) = WorkspacePath::parse(&input) {
                prop_assert!(!path.as_str().starts_with('/'));
                prop_assert!(path.components().all(|c| c != ".." && c != "." && !c.is_empty()));
                prop_assert!(!path.to_bytes().contains(&0));
                prop_assert_eq!(WorkspacePath::parse(path.as_str()).unwrap(), path.clone());
                let mut depth = 0i64;
                for component in path.as_std_path().components() {
                    match component {
                        std::path::Component::Normal(_) => depth += 1,
                        other => prop_assert!(false, "unexpected component {:?}", other),
                    }
                }
                prop_assert!(depth >= 1);
            }
        }

        /// `parse` never panics on any text, and what it accepts is in the
        /// one canonical form: re-encoding its bytes gives its text back.
        #[cfg(unix)]
        #[test]
        fn parse_accepts_only_canonical_text(input in any::<String>()) {
            if let Ok(path) = WorkspacePath::parse(&input) {
                let bytes = path.as_std_path().as_os_str().as_bytes().to_vec();
                let mut again: Option<WorkspacePath> = None;
                for name in bytes.split(|&byte| byte == b'/') {
                    again = Some(match again {
                        None => WorkspacePath::from_os_name(os(name)).unwrap(),
                        Some(parent) => parent.join_os(os(name)).unwrap(),
                    });
                }
                prop_assert_eq!(again, Some(path));
            }
        }

        /// Texts built from escapes and plain characters: `parse` never
        /// panics, and accepts only text that re-encodes to itself.
        #[test]
        fn parse_of_escape_soup_is_canonical_or_refused(input in "(\\\\\\\\|\\\\x[0-9a-fA-F]{0,2}|\\\\|[a-z./é]){0,30}") {
            if let Ok(path) = WorkspacePath::parse(&input) {
                let mut text = String::new();
                for (index, component) in path.as_str().split('/').enumerate() {
                    if index > 0 {
                        text.push('/');
                    }
                    push_escaped(&mut text, &unescape(component));
                }
                prop_assert_eq!(text, path.as_str());
            }
        }

        /// Every name a listing can yield is accepted, decodes to its exact
        /// bytes, and its text parses back to an equal path, also through
        /// JSON (as events store it).
        #[cfg(unix)]
        #[test]
        fn every_entry_name_round_trips(name in entry_name(), parent in "[a-z]{1,8}") {
            let top = WorkspacePath::from_os_name(os(&name)).unwrap();
            prop_assert_eq!(top.to_bytes().into_owned(), name.clone());
            prop_assert_eq!(WorkspacePath::parse(&top.to_string()).unwrap(), top.clone());
            let json = serde_json::to_string(&top).unwrap();
            prop_assert_eq!(serde_json::from_str::<WorkspacePath>(&json).unwrap(), top.clone());

            let parent = WorkspacePath::parse(&parent).unwrap();
            let nested = parent.join_os(os(&name)).unwrap();
            let expected = [parent.as_str().as_bytes(), b"/", &name].concat();
            prop_assert_eq!(nested.as_std_path().into_owned().into_os_string().into_vec(), expected);
            prop_assert_eq!(nested.parent(), Some(parent));
            prop_assert_eq!(nested.file_name(), top.as_str());
            prop_assert_eq!(WorkspacePath::parse(nested.as_str()).unwrap(), nested);
        }
    }
}
