//! The report's HTML: the page written in pieces, escaping of every text
//! from the log or a guest, and the style sheet.

use std::io::Write;

use sandlog_host::error::{Result, RuntimeError};

use super::*;

/// The HTML being written: gathered in a buffer, flushed in pieces.
pub(super) struct Page<'a> {
    pub(super) out: &'a mut dyn Write,
    pub(super) buffer: String,
    pub(super) written: u64,
}

impl Page<'_> {
    /// Markup made here (never text from the log).
    pub(super) fn raw(&mut self, markup: &str) {
        self.buffer.push_str(markup);
    }

    /// Text from anywhere, escaped, control characters marked.
    pub(super) fn text(&mut self, text: &str) {
        escape_into(&mut self.buffer, text, true);
    }

    /// Text from anywhere, escaped, where no markup may go (`<title>`).
    pub(super) fn plain(&mut self, text: &str) {
        escape_into(&mut self.buffer, text, false);
    }

    /// `<tag>text</tag>`, the text escaped.
    pub(super) fn element(&mut self, tag: &str, text: &str) {
        self.raw(&format!("<{tag}>"));
        self.text(text);
        self.raw(&format!("</{tag}>"));
    }

    /// A row of a key/value table.
    pub(super) fn row(&mut self, key: &str, value: &str) {
        self.raw("<tr><th>");
        self.text(key);
        self.raw("</th><td>");
        self.text(value);
        self.raw("</td></tr>\n");
    }

    pub(super) fn flush_if_full(&mut self) -> Result<()> {
        if self.buffer.len() >= FLUSH_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    pub(super) fn flush(&mut self) -> Result<()> {
        self.out
            .write_all(self.buffer.as_bytes())
            .map_err(RuntimeError::io("writing the report"))?;
        self.written += self.buffer.len() as u64;
        self.buffer.clear();
        Ok(())
    }
}

/// Escapes `text` for HTML text (and, unmarked, attribute values).
/// Control characters (which HTML forbids or a browser would swallow or
/// act on) become visible in the CLI's terminal form: C0 and DEL as
/// `\x1b`, a lone CR as `\r`, C1 controls, bidirectional overrides and the
/// byte-order mark as `\u{202e}`, so the page shows what was there and
/// reordered text cannot disguise it. `marked` wraps each such escape in a
/// `<span class="ctl">`, which tells it apart from a guest printing a
/// backslash.
pub(super) fn escape_into(buffer: &mut String, text: &str, marked: bool) {
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let shown = match c {
            '&' => {
                buffer.push_str("&amp;");
                continue;
            }
            '<' => {
                buffer.push_str("&lt;");
                continue;
            }
            '>' => {
                buffer.push_str("&gt;");
                continue;
            }
            '"' => {
                buffer.push_str("&quot;");
                continue;
            }
            '\'' => {
                buffer.push_str("&#39;");
                continue;
            }
            // CRLF is a line end.
            '\r' if chars.peek() == Some(&'\n') => continue,
            '\r' => "\\r".to_owned(),
            '\n' | '\t' => {
                buffer.push(c);
                continue;
            }
            '\u{0}'..='\u{1f}' | '\u{7f}' => format!("\\x{:02x}", c as u32),
            '\u{80}'..='\u{9f}'
            | '\u{200e}'
            | '\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2066}'..='\u{2069}'
            | '\u{feff}' => format!("\\u{{{:04x}}}", c as u32),
            _ => {
                buffer.push(c);
                continue;
            }
        };
        if marked {
            buffer.push_str("<span class=\"ctl\">");
            buffer.push_str(&shown);
            buffer.push_str("</span>");
        } else {
            buffer.push_str(&shown);
        }
    }
}

/// The HTML-escaped form of `text`, safe in text and in quoted attribute
/// values (see [`escape_into`]; control characters unmarked).
pub fn escape_html(text: &str) -> String {
    let mut buffer = String::with_capacity(text.len());
    escape_into(&mut buffer, text, false);
    buffer
}

pub(super) const STYLE: &str = r#"
:root { color-scheme: light; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1b1f24; background: #fff; margin: 0 auto; padding: 1.5rem 2rem 3rem; max-width: 72rem; }
h1 { font-size: 1.6rem; margin: 0 0 .3rem; }
h2 { font-size: 1.25rem; border-bottom: 2px solid #d0d7de; padding-bottom: .2rem; margin-top: 2rem; }
h3 { font-size: 1.02rem; margin: 0 0 .4rem; }
h4 { font-size: .9rem; margin: .8rem 0 .25rem; color: #424a53; }
code, pre, .mono { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: .85rem; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; background: #f6f8fa; border: 1px solid #d0d7de; border-radius: 4px; padding: .5rem .7rem; margin: .2rem 0 .5rem; max-height: 40rem; overflow: auto; }
table.kv { border-collapse: collapse; margin: .3rem 0 .6rem; }
table.kv th { text-align: left; font-weight: 600; padding: .1rem 1rem .1rem 0; vertical-align: top; color: #424a53; white-space: nowrap; }
table.kv td { padding: .1rem 0; overflow-wrap: anywhere; }
.event { border-left: 4px solid #d0d7de; padding: .5rem 0 .5rem 1rem; margin: 1rem 0; }
.event.exec { border-left-color: #0969da; }
.event.file { border-left-color: #8250df; margin-left: 1.5rem; }
.event.warn { border-left-color: #bf8700; }
.event.gone { border-left-color: #cf222e; }
.ctl { color: #8250df; background: #fbefff; border-radius: 2px; }
.meta { color: #57606a; font-size: .85rem; }
.note { color: #6e4b00; background: #fff8c5; border: 1px solid #eac54f; border-radius: 4px; padding: .2rem .5rem; display: inline-block; margin: .2rem 0; }
.ok { color: #1a7f37; font-weight: 700; }
.bad { color: #cf222e; font-weight: 700; }
.diff .add { color: #116329; background: #dafbe1; display: block; }
.diff .del { color: #82071e; background: #ffebe9; display: block; }
.diff .skip { color: #57606a; font-style: italic; display: block; }
ul { margin: .2rem 0 .5rem; }
@media print {
  body { max-width: none; padding: 0; font-size: 11pt; }
  pre { max-height: none; overflow: visible; background: none; }
  .event { break-inside: avoid-page; }
  .event.exec { break-before: page; break-inside: auto; }
  .note, .diff .add, .diff .del { background: none; }
}
"#;
