//! Correlation ids from the outside world.
//!
//! Every event carries an optional `correlation_id` (a UUID) tying together
//! the events of one task. Callers name their tasks in their own terms
//! (`task-42`, a ticket number), so [`correlation_id`] accepts either a
//! UUID, used as is, or any other short text, mapped to a name-based
//! UUIDv5 in the fixed namespace [`CORRELATION_NAMESPACE`]. The mapping is
//! stable across versions and machines: `log --correlation task-42` finds
//! what `--correlation-id task-42` recorded, and anyone can compute the
//! same UUID (`uuid5(f2aedca4-b590-5fd0-8ac0-f89f6a851145, "task-42")`).

use uuid::Uuid;

use crate::error::CoreError;

const _: () = assert!(
    CORRELATION_TEXT_BYTES_MAX == 256,
    "the messages name the limit"
);

/// The namespace of name-based correlation ids: itself the UUIDv5 of
/// `urn:sandlog:correlation-id` in the URL namespace of RFC 9562.
pub const CORRELATION_NAMESPACE: Uuid = Uuid::from_u128(0xf2ae_dca4_b590_5fd0_8ac0_f89f_6a85_1145);

pub use crate::limits::CORRELATION_TEXT_BYTES_MAX;

/// The correlation id for `text`: a UUID in any form the `uuid` crate
/// parses (hyphenated, 32 hex digits, braced, `urn:uuid:`) is that UUID;
/// any other non-empty text of at most [`CORRELATION_TEXT_BYTES_MAX`]
/// bytes without control characters is the UUIDv5 of its UTF-8 bytes in
/// [`CORRELATION_NAMESPACE`].
///
/// # Errors
///
/// [`CoreError::InvalidCorrelationId`] for empty text, text longer than
/// the limit, or text with control characters.
pub fn correlation_id(text: &str) -> Result<Uuid, CoreError> {
    let refuse = |reason: &'static str| CoreError::InvalidCorrelationId {
        input: text.chars().take(64).collect(),
        reason,
    };
    if text.is_empty() {
        return Err(refuse(
            "it is empty; give a task id such as task-42, or a UUID",
        ));
    }
    if text.len() > CORRELATION_TEXT_BYTES_MAX {
        return Err(refuse(
            "it is longer than CORRELATION_TEXT_BYTES_MAX = 256 bytes; give a short task id, or a UUID",
        ));
    }
    if text.chars().any(char::is_control) {
        return Err(refuse(
            "it contains control characters (newline, tab, escape); give printable text",
        ));
    }
    Ok(Uuid::try_parse(text)
        .unwrap_or_else(|_| Uuid::new_v5(&CORRELATION_NAMESPACE, text.as_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_namespace_is_the_documented_name_based_uuid() {
        assert_eq!(
            Uuid::new_v5(&Uuid::NAMESPACE_URL, b"urn:sandlog:correlation-id"),
            CORRELATION_NAMESPACE
        );
    }

    #[test]
    fn text_maps_to_a_stable_uuid_v5() {
        let id = correlation_id("task-42").unwrap();
        // Computed independently (Python's uuid.uuid5), so the mapping can
        // never change without this test failing.
        assert_eq!(id.to_string(), "b6cccc7c-a54d-533a-92ab-8b20dd869780");
        assert_eq!(id.get_version_num(), 5);
        assert_ne!(correlation_id("task-43").unwrap(), id);
        assert_ne!(correlation_id("Task-42").unwrap(), id);
    }

    #[test]
    fn a_uuid_is_taken_as_is_in_any_form() {
        let uuid = Uuid::new_v4();
        for form in [
            uuid.hyphenated().to_string(),
            uuid.simple().to_string(),
            uuid.braced().to_string(),
            uuid.urn().to_string(),
            uuid.hyphenated().to_string().to_uppercase(),
        ] {
            assert_eq!(correlation_id(&form).unwrap(), uuid, "{form}");
        }
    }

    #[test]
    fn hostile_text_is_refused_with_the_reason() {
        for (text, reason) in [
            (String::new(), "empty"),
            ("x".repeat(CORRELATION_TEXT_BYTES_MAX + 1), "256 bytes"),
            ("task\n42".to_owned(), "control"),
            ("\u{1b}[31mred".to_owned(), "control"),
            ("nul\0".to_owned(), "control"),
        ] {
            let error = correlation_id(&text).unwrap_err();
            assert_eq!(error.kind(), "invalid_correlation_id");
            assert!(error.to_string().contains(reason), "{error}");
        }
        assert!(correlation_id(&"é".repeat(CORRELATION_TEXT_BYTES_MAX / 2)).is_ok());
    }
}
