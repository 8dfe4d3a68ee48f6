//! [`WorkspacePath`]: the only way to hold a path inside a workspace.
//!
//! Validation is lexical and happens once, in [`WorkspacePath::parse`]; later
//! code takes `&WorkspacePath` and never re-checks a `&str`. What a lexical
//! check cannot see — a symlink on disk that points outside — is refused
//! where the disk is, by the runtime's capability-based file access.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::CoreError;
use crate::limits::{PATH_BYTES_MAX, PATH_COMPONENT_BYTES_MAX, PATH_DEPTH_MAX};

/// Why a workspace path was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PathError {
    /// The path was empty (or only `/` and `.`).
    #[error("the path is empty")]
    Empty,
    /// The path starts with `/`: workspace paths are relative.
    #[error("absolute paths are not allowed; give a path relative to the workspace")]
    Absolute,
    /// A component is `..`.
    #[error("`..` components are not allowed: the path would leave the workspace")]
    ParentComponent,
    /// The path holds a NUL byte.
    #[error("the path contains a NUL byte")]
    NulByte,
    /// The path is longer than [`PATH_BYTES_MAX`].
    #[error("the path is longer than {PATH_BYTES_MAX} bytes")]
    TooLong,
    /// A component is longer than [`PATH_COMPONENT_BYTES_MAX`].
    #[error("a path component is longer than {PATH_COMPONENT_BYTES_MAX} bytes")]
    ComponentTooLong,
    /// The path is nested deeper than [`PATH_DEPTH_MAX`].
    #[error("the path is nested deeper than {PATH_DEPTH_MAX} components")]
    TooDeep,
    /// The path contains a backslash, which some hosts read as a separator.
    #[error("backslashes are not allowed in workspace paths")]
    Backslash,
    /// Resolution on disk (a symlink) would leave the workspace.
    #[error("the path resolves outside the workspace (through a symlink)")]
    EscapesWorkspace,
}

/// A validated, normalised, workspace-relative path: `/`-separated, no
/// empty, `.` or `..` components, no NUL, at most [`PATH_BYTES_MAX`] bytes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorkspacePath(String);

impl WorkspacePath {
    /// Validates and normalises `input`: repeated `/` and `.` components
    /// are dropped (`a//./b` → `a/b`), a trailing `/` is ignored. Absolute
    /// paths, `..`, NUL bytes, backslashes and over-long paths are refused.
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
        if input.len() > PATH_BYTES_MAX {
            return Err(PathError::TooLong);
        }
        if input.starts_with('/') {
            return Err(PathError::Absolute);
        }
        if input.contains('\\') {
            return Err(PathError::Backslash);
        }
        let mut depth = 0usize;
        let mut already_normal = true;
        for component in input.split('/') {
            match component {
                "" | "." => already_normal = false,
                ".." => return Err(PathError::ParentComponent),
                _ if component.len() > PATH_COMPONENT_BYTES_MAX => {
                    return Err(PathError::ComponentTooLong);
                }
                _ => depth += 1,
            }
        }
        if depth == 0 {
            return Err(PathError::Empty);
        }
        if depth > PATH_DEPTH_MAX {
            return Err(PathError::TooDeep);
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

    /// The normalised path, `/`-separated.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The components, in order; never empty.
    pub fn components(&self) -> impl Iterator<Item = &str> {
        self.0.split('/')
    }

    /// The last component.
    pub fn file_name(&self) -> &str {
        self.0.rsplit('/').next().unwrap_or(&self.0)
    }

    /// The parent path, or `None` for a top-level entry.
    pub fn parent(&self) -> Option<WorkspacePath> {
        self.0
            .rsplit_once('/')
            .map(|(parent, _)| WorkspacePath(parent.to_owned()))
    }

    /// `self/name`, validated.
    pub fn join(&self, name: &str) -> Result<WorkspacePath, CoreError> {
        WorkspacePath::parse(&format!("{}/{}", self.0, name))
    }

    /// Whether `self` is `ancestor` or lies below it.
    pub fn starts_with(&self, ancestor: &WorkspacePath) -> bool {
        self.0 == ancestor.0
            || (self.0.starts_with(&ancestor.0)
                && self.0.as_bytes().get(ancestor.0.len()) == Some(&b'/'))
    }

    /// The path as a relative `std::path::Path`.
    pub fn as_std_path(&self) -> &std::path::Path {
        std::path::Path::new(&self.0)
    }
}

impl fmt::Display for WorkspacePath {
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

    fn reason(input: &str) -> PathError {
        match WorkspacePath::parse(input) {
            Err(CoreError::InvalidPath { reason, .. }) => reason,
            other => panic!("{input:?} was not refused: {other:?}"),
        }
    }

    #[test]
    fn normalises_separators_and_dots() {
        assert_eq!(WorkspacePath::parse("a//./b/").unwrap().as_str(), "a/b");
        assert_eq!(WorkspacePath::parse("./x.txt").unwrap().as_str(), "x.txt");
    }

    #[test]
    fn refuses_each_bad_form_with_its_reason() {
        assert_eq!(reason(""), PathError::Empty);
        assert_eq!(reason("./"), PathError::Empty);
        assert_eq!(reason("/etc/passwd"), PathError::Absolute);
        assert_eq!(reason("../x"), PathError::ParentComponent);
        assert_eq!(reason("a/../../x"), PathError::ParentComponent);
        assert_eq!(reason("a\0b"), PathError::NulByte);
        assert_eq!(reason("a\\b"), PathError::Backslash);
        assert_eq!(reason(&"a".repeat(PATH_BYTES_MAX + 1)), PathError::TooLong);
        assert_eq!(
            reason(&"a".repeat(PATH_COMPONENT_BYTES_MAX + 1)),
            PathError::ComponentTooLong
        );
    }

    #[test]
    fn starts_with_respects_component_boundaries() {
        let dir = WorkspacePath::parse("data").unwrap();
        assert!(WorkspacePath::parse("data/x").unwrap().starts_with(&dir));
        assert!(WorkspacePath::parse("data").unwrap().starts_with(&dir));
        assert!(!WorkspacePath::parse("database").unwrap().starts_with(&dir));
    }

    proptest! {
        /// S5: no accepted path can name anything outside the workspace:
        /// it is relative, has no `..`, no NUL, and re-parses to itself.
        #[test]
        fn accepted_paths_never_escape(input in "[a-z./\\\\\0]{0,40}") {
            if let Ok(path) = WorkspacePath::parse(&input) {
                prop_assert!(!path.as_str().starts_with('/'));
                prop_assert!(path.components().all(|c| c != ".." && c != "." && !c.is_empty()));
                prop_assert!(!path.as_str().contains('\0'));
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
    }
}
