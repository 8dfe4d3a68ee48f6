//! Text made safe to show on a terminal: control characters escaped.
//!
//! File names come from guests, and a name can hold a newline (forging a
//! line of a table), ESC (driving the terminal) or a bidirectional override
//! (showing text in another order than it is stored). Human output passes
//! such text through [`for_terminal`]; machine output (JSON) does not need
//! to, because JSON escapes control characters itself.

use std::borrow::Cow;
use std::fmt::Write as _;

/// `text` with every character a terminal would act on rather than show
/// escaped: `\n`, `\r`, `\t`; other C0 controls and DEL as `\xHH`; C1
/// controls, the line and paragraph separators and the bidirectional
/// controls as `\u{HHHH}`. Borrowed when nothing needed escaping.
///
/// Backslashes are left as they are, so the result is unambiguous only for
/// text whose backslashes are already escaped, as in a
/// [`WorkspacePath`](crate::WorkspacePath)'s text form (whose `\xHH` means
/// the same byte). The result is for people: it is not parsed back.
pub fn for_terminal(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for character in text.chars() {
        // Writing to a `String` cannot fail.
        let _ = match character {
            '\n' => out.write_str("\\n"),
            '\r' => out.write_str("\\r"),
            '\t' => out.write_str("\\t"),
            _ if needs_escape(character) && character.is_ascii() => {
                write!(out, "\\x{:02x}", u32::from(character))
            }
            _ if needs_escape(character) => write!(out, "\\u{{{:04x}}}", u32::from(character)),
            _ => out.write_char(character),
        };
    }
    Cow::Owned(out)
}

/// Whether a terminal would act on `character` rather than show it.
fn needs_escape(character: char) -> bool {
    character.is_control()
        || matches!(
            character,
            '\u{2028}'
                | '\u{2029}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plain text, including non-ASCII and backslashes, is borrowed as is.
    #[test]
    fn plain_text_is_borrowed_unchanged() {
        let text = "données/a\\\\b/\\xff.txt";
        assert!(matches!(for_terminal(text), Cow::Borrowed(t) if t == text));
    }

    /// Each class of control character is escaped in its documented form,
    /// and no control character survives.
    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(
            for_terminal("a\nb\tc\rd\u{1b}[31me\u{7f}f\u{85}g\u{202e}h\u{2028}"),
            "a\\nb\\tc\\rd\\x1b[31me\\x7ff\\u{0085}g\\u{202e}h\\u{2028}"
        );
        for code in (0u32..0x100).chain(0x2000..0x2100) {
            let Some(character) = char::from_u32(code) else {
                continue;
            };
            let shown = for_terminal(&character.to_string()).into_owned();
            assert!(
                !shown.chars().any(needs_escape),
                "{code:#x} shown as {shown:?}"
            );
        }
    }
}
