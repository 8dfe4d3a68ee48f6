//! Human rendering: tables, sizes, durations, and one-line descriptions of
//! events for timelines.

use sandlog_runtime::core::human::{format_duration, format_size};
use sandlog_runtime::core::{Envelope, SessionId, Timestamp};
use sandlog_runtime::projections::SessionSummary;

use crate::output::Output;

pub use sandlog_runtime::projections::describe::{describe_drift, short_hash};

/// Hex digits of a session id shown in human tables: the first group of
/// the UUID, unique in any root a person reads by eye, and accepted back
/// as a prefix wherever an id is taken.
pub const SHORT_ID_CHARS: usize = 8;

/// Columns of text: aligned with two spaces and no borders (like
/// `docker ps`), or tab-separated with `--format tsv`. Cells are never
/// wrapped; the last column is not padded.
#[derive(Debug, Clone)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    tsv: bool,
    /// The column cut to make the table fit, and the width to fit
    /// ([`Table::fit`]).
    fit: Option<(usize, usize)>,
}

/// What a table shows for a missing value; `--format tsv` prints an empty
/// field instead.
pub const MISSING: &str = "—";

/// The narrowest a column cut to fit the terminal becomes.
const FIT_COLUMN_MIN: usize = 16;

impl Table {
    /// Cuts the cells of `column` with `…` so that each line fits the
    /// output's width (a terminal's, without `--wide`; see
    /// [`Output::width`]); the column keeps at least [`FIT_COLUMN_MIN`]
    /// characters.
    pub fn fit(&mut self, output: &Output, column: usize) -> &mut Table {
        self.fit = output.width.map(|width| (column, width));
        self
    }

    /// Adds a row (missing cells are empty).
    pub fn add_row(&mut self, row: Vec<String>) -> &mut Table {
        self.rows.push(row);
        self
    }

    fn has_header(&self) -> bool {
        self.header.iter().any(|name| !name.is_empty())
    }
}

impl std::fmt::Display for Table {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let header = self.has_header().then_some(&self.header);
        let lines: Vec<&Vec<String>> = header.into_iter().chain(self.rows.iter()).collect();
        let columns = lines.iter().map(|line| line.len()).max().unwrap_or(0);
        let mut text = String::new();
        if self.tsv {
            for line in &lines {
                let cells: Vec<String> = line.iter().map(|cell| tsv_cell(cell)).collect();
                text.push_str(&cells.join("\t"));
                text.push('\n');
            }
        } else {
            let mut widths = vec![0usize; columns];
            for line in &lines {
                for (width, cell) in widths.iter_mut().zip(line.iter()) {
                    *width = (*width).max(visible_width(cell));
                }
            }
            let cut = self.fit.and_then(|(column, limit)| {
                let total = widths.iter().sum::<usize>() + 2 * columns.saturating_sub(1);
                let excess = total.checked_sub(limit).filter(|excess| *excess > 0)?;
                let width = widths.get_mut(column)?;
                let fitted = width.saturating_sub(excess).max(FIT_COLUMN_MIN);
                (fitted < *width).then(|| {
                    *width = fitted;
                    (column, fitted)
                })
            });
            for line in &lines {
                let mut row = String::new();
                for (index, cell) in line.iter().enumerate() {
                    let cell = match cut {
                        Some((column, width)) if column == index => cut_to(cell, width),
                        _ => std::borrow::Cow::Borrowed(cell.as_str()),
                    };
                    let cell = cell.as_ref();
                    row.push_str(cell);
                    if index + 1 < line.len() {
                        let width = widths.get(index).copied().unwrap_or(0);
                        let pad = width.saturating_sub(visible_width(cell)) + 2;
                        row.extend(std::iter::repeat_n(' ', pad));
                    }
                }
                text.push_str(row.trim_end());
                text.push('\n');
            }
        }
        formatter.write_str(text.trim_end_matches('\n'))
    }
}

/// `cell` cut to `width` visible characters, its last one `…`, when it is
/// wider (a cell with colour is left whole: cutting could leave its
/// colour on).
fn cut_to(cell: &str, width: usize) -> std::borrow::Cow<'_, str> {
    if visible_width(cell) <= width || cell.contains('\x1b') {
        return std::borrow::Cow::Borrowed(cell);
    }
    let mut text: String = cell.chars().take(width.saturating_sub(1)).collect();
    text.push('…');
    std::borrow::Cow::Owned(text)
}

/// A cell for `--format tsv`: tabs, newlines and backslashes escaped so a
/// row stays one line of fields.
fn tsv_cell(cell: &str) -> String {
    let plain = strip_ansi(cell);
    // A missing value is an empty field, not a dash to parse around.
    if plain == MISSING {
        return String::new();
    }
    let mut text = String::with_capacity(plain.len());
    for character in plain.chars() {
        match character {
            '\t' => text.push_str("\\t"),
            '\n' => text.push_str("\\n"),
            '\r' => text.push_str("\\r"),
            '\\' => text.push_str("\\\\"),
            other => text.push(other),
        }
    }
    text
}

/// `text` without ANSI colour sequences (`ESC [ ... m`).
fn strip_ansi(text: &str) -> String {
    let mut plain = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(character) = chars.next() {
        if character == '\x1b' && chars.peek() == Some(&'[') {
            for inner in chars.by_ref() {
                if inner == 'm' {
                    break;
                }
            }
        } else {
            plain.push(character);
        }
    }
    plain
}

/// Columns a cell takes on a terminal (characters, colour sequences not
/// counted).
fn visible_width(cell: &str) -> usize {
    strip_ansi(cell).chars().count()
}

/// A table with a header (an all-empty header prints no header line).
pub fn table(output: &Output, header: &[&str]) -> Table {
    Table {
        header: header
            .iter()
            .map(|name| {
                if output.tsv {
                    (*name).to_owned()
                } else {
                    output.bold(&name.to_uppercase())
                }
            })
            .collect(),
        rows: Vec::new(),
        tsv: output.tsv,
        fit: None,
    }
}

/// A session id as tables show it: its first [`SHORT_ID_CHARS`] hex
/// digits, or whole with `--wide` and `--format tsv`.
pub fn id(output: &Output, session_id: &SessionId) -> String {
    let text = session_id.to_string();
    if output.wide || output.tsv {
        text
    } else {
        text.get(..SHORT_ID_CHARS).unwrap_or(&text).to_owned()
    }
}

/// A blake3 or event hash as tables show it: its first 12 hex digits, or
/// whole with `--wide` and `--format tsv`.
pub fn hash(output: &Output, hex: &str) -> String {
    if output.wide || output.tsv {
        hex.to_owned()
    } else {
        short_hash(hex).to_owned()
    }
}

/// A size in a table: in binary units for people, the exact byte count
/// with `--format tsv`.
pub fn size(output: &Output, bytes: u64) -> String {
    if output.tsv {
        bytes.to_string()
    } else {
        format_size(bytes)
    }
}

/// A duration in a table: for people, or whole microseconds with
/// `--format tsv`.
pub fn duration(output: &Output, duration: std::time::Duration) -> String {
    if output.tsv {
        duration.as_micros().to_string()
    } else {
        format_duration(duration)
    }
}

/// A timestamp, or `—` (an empty field with `--format tsv`).
pub fn time(timestamp: Option<Timestamp>) -> String {
    timestamp.map_or_else(|| MISSING.to_owned(), |t| t.to_string())
}

/// Sessions as a table.
pub fn sessions_table(output: &Output, sessions: &[SessionSummary]) -> Table {
    let mut table = table(
        output,
        &[
            "session", "status", "created", "updated", "execs", "files", "size", "legacy", "held",
            "group",
        ],
    );
    for session in sessions {
        table.add_row(vec![
            id(output, &session.session_id),
            session.status.as_str().to_owned(),
            time(session.created_at),
            time(session.updated_at),
            session.exec_count.to_string(),
            session.file_count.to_string(),
            size(output, session.bytes),
            if session.legacy {
                "yes".to_owned()
            } else {
                "-".to_owned()
            },
            if session.held.is_some() {
                "HELD".to_owned()
            } else {
                "-".to_owned()
            },
            // No group: `-` for people, an empty field in TSV.
            session.group.as_deref().map_or_else(
                || {
                    if output.tsv {
                        String::new()
                    } else {
                        "-".to_owned()
                    }
                },
                escaped,
            ),
        ]);
    }
    table
}

/// One line saying what an event means, for a person, with guest-chosen
/// names escaped for the terminal.
pub fn describe(envelope: &Envelope) -> String {
    escape_for_terminal(&describe_exact(envelope)).into_owned()
}

/// [`describe`] with names exactly as recorded (for `--json`).
pub fn describe_exact(envelope: &Envelope) -> String {
    if envelope.kind == sandlog_runtime::anchor::ROOT_INITIALIZED_KIND {
        return format!(
            "root initialized ({})",
            String::from_utf8_lossy(&envelope.payload)
        );
    }
    let event = match envelope.event() {
        Ok(Some(event)) => event,
        Ok(None) => return format!("{} (unknown kind)", envelope.kind),
        Err(error) => return format!("{} (undecodable: {error})", envelope.kind),
    };
    sandlog_runtime::projections::describe::describe(&event)
}

/// Why a file's bytes are not available, for a person, from the reason
/// code of a restore's or fork's missing file.
pub fn missing_reason(code: &str) -> String {
    use sandlog_runtime::core::event::NotKept;
    let not_kept = [
        NotKept::Budget,
        NotKept::TooLarge,
        NotKept::Off,
        NotKept::Changed,
        NotKept::Unreadable,
        NotKept::Adopted,
    ];
    let text = match not_kept.iter().find(|reason| reason.as_str() == code) {
        Some(reason) => format!("not kept ({code}): {}", reason.describe()),
        None => match code {
            "erased" => {
                "erased (`sandlog log --kind evidence.erased` says by whom and why)".to_owned()
            }
            "not_stored" => "not kept: no bytes are stored under its hash".to_owned(),
            other => format!("not available: {other}"),
        },
    };
    escape_for_terminal(&text).into_owned()
}

/// At most `lines` lines of `text`, each cut at `width` characters and
/// escaped for the terminal; `…` marks what was left out.
pub fn excerpt_lines(text: &str, more: bool, lines: usize, width: usize) -> Vec<String> {
    let all: Vec<&str> = text.trim_end_matches('\n').split('\n').collect();
    let mut shown = Vec::new();
    for (index, line) in all.iter().take(lines).enumerate() {
        let mut line_text: String = line.chars().take(width).collect();
        let cut = line.chars().count() > width;
        let last = index + 1 == lines.min(all.len());
        if cut || (last && (all.len() > lines || more)) {
            line_text.push('…');
        }
        shown.push(escape_for_terminal(&line_text).into_owned());
    }
    shown
}

/// A guest-controlled string made safe for a terminal: the engine's one
/// rule (`sandlog_core::escape::for_terminal`), so every command shows a
/// name the same way. Human output only: `--json` stays exact.
pub use sandlog_runtime::core::escape::for_terminal as escape_for_terminal;

/// A host path for people: each byte that is not UTF-8 as `\xHH` (where
/// `Path::display` would show U+FFFD and hide which byte it was) and
/// control characters escaped as in [`escape_for_terminal`]. For messages,
/// not for parsing back.
pub fn host_path(path: &std::path::Path) -> String {
    path_text(path, true)
}

/// A host path for `--json`: exact when it is UTF-8; otherwise each byte
/// that is not UTF-8 as `\xHH`, since a JSON string holds only Unicode
/// (serialising the path itself would fail).
pub fn host_path_json(path: &std::path::Path) -> String {
    path_text(path, false)
}

fn path_text(path: &std::path::Path, for_terminal: bool) -> String {
    use std::fmt::Write as _;
    use std::os::unix::ffi::OsStrExt;
    let mut text = String::new();
    for chunk in path.as_os_str().as_bytes().utf8_chunks() {
        if for_terminal {
            text.push_str(&escape_for_terminal(chunk.valid()));
        } else {
            text.push_str(chunk.valid());
        }
        for byte in chunk.invalid() {
            // Writing to a `String` cannot fail.
            let _ = write!(text, "\\x{byte:02x}");
        }
    }
    text
}

/// [`escape_for_terminal`] of anything displayable, owned.
pub fn escaped(value: impl std::fmt::Display) -> String {
    escape_for_terminal(&value.to_string()).into_owned()
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;

    fn table(tsv: bool, header: &[&str], rows: &[&[&str]]) -> super::Table {
        let mut table = super::Table {
            header: header.iter().map(|name| (*name).to_owned()).collect(),
            rows: Vec::new(),
            tsv,
            fit: None,
        };
        for row in rows {
            table.add_row(row.iter().map(|cell| (*cell).to_owned()).collect());
        }
        table
    }

    /// A table wider than the output is cut in its fitted column, with
    /// `…`, and no line is wider than the limit; narrower ones are whole.
    #[test]
    fn a_fitted_column_is_cut_to_the_width() {
        let long = "x".repeat(200);
        let mut wide = table(false, &["pos", "what", "hash"], &[&["1", &long, "abcdef"]]);
        wide.fit = Some((1, 60));
        let text = wide.to_string();
        for line in text.lines() {
            assert!(line.chars().count() <= 60, "{line:?}");
        }
        assert!(text.contains("x…  abcdef"), "{text}");
        let mut narrow = table(false, &["pos", "what"], &[&["1", "short"]]);
        narrow.fit = Some((1, 60));
        assert_eq!(narrow.to_string(), "pos  what\n1    short");
    }

    /// `--format tsv` prints a missing value as an empty field.
    #[test]
    fn tsv_prints_a_missing_value_as_an_empty_field() {
        let tsv = table(true, &["a", "b", "c"], &[&["1", super::MISSING, "3"]]);
        assert_eq!(tsv.to_string(), "a\tb\tc\n1\t\t3");
    }

    /// Columns align on visible width (colour sequences and multi-byte
    /// characters count as what the terminal shows), two spaces apart, with
    /// no trailing blanks.
    #[test]
    fn columns_align_on_visible_width() {
        let shown = table(
            false,
            &["A", "BB", "C"],
            &[&["\x1b[32mok\x1b[0m", "é", "x"], &["long cell", "", "y"]],
        )
        .to_string();
        assert_eq!(
            shown,
            "A          BB  C\n\x1b[32mok\x1b[0m         é   x\nlong cell      y"
        );
    }

    /// TSV keeps one row a line: tabs, newlines and backslashes in cells
    /// are escaped, colour removed; an all-empty header prints no line.
    #[test]
    fn tsv_escapes_cells_and_skips_an_empty_header() {
        let shown = table(
            true,
            &["", ""],
            &[&["a\tb", "c\nd\\e"], &["\x1b[31mred\x1b[0m", ""]],
        )
        .to_string();
        assert_eq!(shown, "a\\tb\tc\\nd\\\\e\nred\t");
    }

    /// Invalid bytes keep their value and control characters cannot reach
    /// the terminal.
    #[test]
    fn host_paths_show_invalid_bytes_and_escape_controls() {
        let path = Path::new(OsStr::from_bytes(b"/tmp/r\xff\xfe/a\nb\x1b[2J"));
        assert_eq!(super::host_path(path), "/tmp/r\\xff\\xfe/a\\nb\\x1b[2J");
        assert_eq!(super::host_path(Path::new("/plain/é")), "/plain/é");
        assert_eq!(super::host_path_json(path), "/tmp/r\\xff\\xfe/a\nb\x1b[2J");
    }
}
