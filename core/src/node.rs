//! Node names: which host a session's workspace lives on.
//!
//! Several hosts may write one shared log; each keeps its sessions'
//! workspaces on its own disk. `session.created` records the creating
//! node's name, and commands that touch a workspace (run, write, delete,
//! prune, reconcile) act only on their own node's sessions.
//!
//! A name is 1 to [`NODE_NAME_BYTES_MAX`] bytes of ASCII letters, digits,
//! `.`, `_` and `-`, not starting with `.` or `-`: it is shown in tables,
//! kept in a file, and compared byte for byte.

use crate::error::CoreError;
pub use crate::limits::NODE_NAME_BYTES_MAX;

const _: () = assert!(NODE_NAME_BYTES_MAX == 64, "the messages name the limit");

/// Checks a node name; returns it.
///
/// # Errors
///
/// [`CoreError::InvalidNodeName`] naming the rule it breaks.
pub fn check_node_name(name: &str) -> Result<&str, CoreError> {
    let refuse = |reason: &'static str| CoreError::InvalidNodeName {
        input: name.chars().take(80).collect(),
        reason,
    };
    if name.is_empty() {
        return Err(refuse("it is empty; give a host name such as worker-1"));
    }
    if name.len() > NODE_NAME_BYTES_MAX {
        return Err(refuse("it is longer than NODE_NAME_BYTES_MAX = 64 bytes"));
    }
    if !name
        .bytes()
        .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-'))
    {
        return Err(refuse(
            "only ASCII letters, digits, `.`, `_` and `-` are allowed",
        ));
    }
    if name.starts_with(['.', '-']) {
        return Err(refuse("it must not start with `.` or `-`"));
    }
    Ok(name)
}

/// A node name made from any text (a host name): characters outside the
/// allowed set become `-`, a leading `.` or `-` becomes `n`, and the result
/// is cut to the limit; empty text gives `localhost`.
pub fn node_name_from(text: &str) -> String {
    let mut name: String = text
        .chars()
        .map(|character| {
            if character.is_ascii_alphanumeric() || matches!(character, '.' | '_' | '-') {
                character
            } else {
                '-'
            }
        })
        .take(NODE_NAME_BYTES_MAX)
        .collect();
    if name.is_empty() {
        return "localhost".to_owned();
    }
    if name.starts_with(['.', '-']) {
        name.replace_range(..1, "n");
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_by_rule() {
        for good in ["a", "worker-1", "host.example.com", "N_2"] {
            assert_eq!(check_node_name(good).ok(), Some(good));
        }
        for bad in ["", ".a", "-a", "a b", "é", "a/b", &"x".repeat(65)] {
            assert!(check_node_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn any_text_makes_a_valid_name() {
        for text in ["", "-x", ".", "héllo wörld", "a/b\n", &"y".repeat(300)] {
            let name = node_name_from(text);
            assert!(check_node_name(&name).is_ok(), "{text:?} -> {name:?}");
        }
        assert_eq!(node_name_from("worker-1"), "worker-1");
    }
}
