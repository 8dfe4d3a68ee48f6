//! Session ids as callers give them: a full UUID, or a prefix of one (as
//! `git` takes commit ids), answered from the `session_id` index so the
//! cost is the matches, not the sessions. Every front end that takes
//! prefixes resolves them here and only words the answer.

use sandlog_core::SessionId;
use sandlog_sqlite::query;

use crate::engine::Engine;
use sandlog_host::error::Result;

/// Characters of a hyphenated UUID: text this long is a full id, never a
/// prefix.
pub const SESSION_ID_CHARS: usize = 36;

/// Sessions an ambiguous id prefix's answer names (the rest are counted).
pub const SESSION_PREFIX_SHOWN_MAX: usize = 10;

/// What a session id or prefix names ([`Engine::resolve_session`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionMatch {
    /// One session: the full id given, or the only session the prefix
    /// begins.
    One(SessionId),
    /// The text cannot begin a session id (empty, too long, or not hex
    /// digits and hyphens).
    NotAPrefix,
    /// No session id begins with it.
    None,
    /// Several do: how many, and the first
    /// [`SESSION_PREFIX_SHOWN_MAX`] of them, oldest first.
    Several {
        /// How many sessions it begins.
        count: u64,
        /// The oldest of them.
        first: Vec<SessionId>,
    },
}

impl Engine {
    /// What `text` names as a session id: a full UUID as is (whether or
    /// not the session exists, so the caller's lookup reports it), else a
    /// prefix of one (as `git` takes commit ids), looked up on the
    /// `session_id` index among sessions of every status. Every front end
    /// that takes prefixes resolves them here and only words the answer.
    pub fn resolve_session(&self, text: &str) -> Result<SessionMatch> {
        if let Ok(session_id) = SessionId::parse(text) {
            return Ok(SessionMatch::One(session_id));
        }
        let prefix = text.to_ascii_lowercase();
        let could_be_prefix = !prefix.is_empty()
            && prefix.len() < SESSION_ID_CHARS
            && prefix
                .chars()
                .all(|character| character.is_ascii_hexdigit() || character == '-');
        if !could_be_prefix {
            return Ok(SessionMatch::NotAPrefix);
        }
        self.refresh()?;
        let (count, first) =
            query::sessions_by_prefix(&self.store, &prefix, SESSION_PREFIX_SHOWN_MAX)?;
        Ok(match (count, first.as_slice()) {
            (0, _) => SessionMatch::None,
            (1, [session_id]) => SessionMatch::One(*session_id),
            _ => SessionMatch::Several { count, first },
        })
    }
}
