//! [`PathError`]: why a workspace path was refused. Below both the path
//! rules (`path.rs`) and the crate's error, which carries it.

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
    /// The path is longer than [`PATH_BYTES_MAX`] bytes on disk, or its
    /// text longer than
    /// [`PATH_TEXT_BYTES_MAX`](crate::limits::PATH_TEXT_BYTES_MAX).
    #[error("the path is longer than {PATH_BYTES_MAX} bytes")]
    TooLong,
    /// A component is longer than [`PATH_COMPONENT_BYTES_MAX`] bytes on disk.
    #[error("a path component is longer than {PATH_COMPONENT_BYTES_MAX} bytes")]
    ComponentTooLong,
    /// The path is nested deeper than [`PATH_DEPTH_MAX`].
    #[error("the path is nested deeper than {PATH_DEPTH_MAX} components")]
    TooDeep,
    /// Resolution on disk (a symlink) would leave the workspace.
    #[error("the path resolves outside the workspace (through a symlink)")]
    EscapesWorkspace,
    /// A backslash that starts neither `\\` nor `\xHH` (lowercase hex).
    #[error(
        "a backslash must start an escape: write `\\\\` for a backslash, and `\\xHH` (two lowercase hex digits) for a byte that is not UTF-8"
    )]
    BadEscape,
    /// An escape stands for bytes that have a plain form (`\x41` for `A`,
    /// or `\xc3\xa9` for `é`): each name has exactly one text form.
    #[error(
        "`\\xHH` may only stand for a byte that is not valid UTF-8 where it is; write other characters as themselves (`A`, not `\\x41`)"
    )]
    NonCanonicalEscape,
    /// A single file name holds a `/` (no directory listing yields one).
    #[error("a file name contains `/`")]
    SeparatorInName,
}
