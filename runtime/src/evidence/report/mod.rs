//! The forensic report: one session as a single self-contained HTML file
//! for people (`sandlog report ID -o FILE.html`).
//!
//! The file needs nothing but a browser: no external asset, no network, no
//! script (a Content-Security-Policy forbids all three, so even a mistake in
//! escaping could not make a guest's output run). Every piece of text that
//! comes from the log or a guest is HTML-escaped here, after a lossy UTF-8
//! decode; control characters are shown as visible symbols.
//!
//! What the report holds is bounded whatever the session did: each piece of
//! content shown (code, stdout, stderr, a file) is an excerpt of at most
//! [`REPORT_CONTENT_BYTES_MAX`], all content shown together stops at
//! [`REPORT_CONTENT_TOTAL_BYTES_MAX`], at most [`REPORT_EVENTS_MAX`] events
//! are shown, and a diff is computed only within [`REPORT_DIFF_CELLS_MAX`].
//! Every cut is said where it happens.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::time::Duration;

use sandlog_core::event::{Drift, FileWritten, NotKept, SessionExecuted, WrittenBy};
use sandlog_core::human::{format_duration, format_size};
use sandlog_core::{Envelope, Event, Hash, Position, SessionId, StreamId, WorkspacePath};
use sandlog_eventstore::{BlobState, EventStoreError, LogFilter};
use serde::Serialize;

use crate::engine::Engine;
use sandlog_host::error::{Result, RuntimeError};

/// Most bytes of one piece of content (code, stdout, stderr, a file)
/// shown: enough to read what ran and what it printed; the rest is one
/// `sandlog exec show` or `files cat` away.
pub const REPORT_CONTENT_BYTES_MAX: usize = 64 * 1024;

/// Most bytes of content shown in one report, all pieces together: keeps
/// the file openable in a browser whatever the session did.
pub const REPORT_CONTENT_TOTAL_BYTES_MAX: u64 = 16 * 1024 * 1024;

/// Most events shown (of the session's stream, then of the system
/// stream's erasures naming its content); the rest are counted.
pub const REPORT_EVENTS_MAX: u64 = 10_000;

/// Largest line-diff table (old lines × new lines after the common start
/// and end are set aside, 4 bytes a cell). Past it the new version is
/// shown whole instead of a diff.
pub const REPORT_DIFF_CELLS_MAX: usize = 1 << 21;

/// Unchanged lines shown around each change of a diff.
const DIFF_CONTEXT_LINES: usize = 3;

/// Bytes of HTML gathered before they are written out.
const FLUSH_BYTES: usize = 64 * 1024;

const _: () = assert!(REPORT_CONTENT_BYTES_MAX as u64 <= REPORT_CONTENT_TOTAL_BYTES_MAX);

/// What a report holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReportSummary {
    /// The session.
    pub session_id: SessionId,
    /// The last position of the log the report covers.
    pub position: u64,
    /// The session's events up to that position.
    pub events: u64,
    /// Events shown (at most [`REPORT_EVENTS_MAX`]).
    pub events_shown: u64,
    /// Executions shown.
    pub executions: u64,
    /// File writes and deletions shown.
    pub file_changes: u64,
    /// Bytes of content (code, output, files, diffs' inputs) shown.
    pub content_bytes: u64,
    /// Whether some content or some events were left out by a bound.
    pub cut: bool,
    /// Whether the log verified when the report was made.
    pub verify_ok: bool,
    /// Bytes of HTML written.
    pub html_bytes: u64,
}

/// The HTML being written: gathered in a buffer, flushed in pieces.
struct Page<'a> {
    out: &'a mut dyn Write,
    buffer: String,
    written: u64,
}

impl Page<'_> {
    /// Markup made here (never text from the log).
    fn raw(&mut self, markup: &str) {
        self.buffer.push_str(markup);
    }

    /// Text from anywhere, escaped, control characters marked.
    fn text(&mut self, text: &str) {
        escape_into(&mut self.buffer, text, true);
    }

    /// Text from anywhere, escaped, where no markup may go (`<title>`).
    fn plain(&mut self, text: &str) {
        escape_into(&mut self.buffer, text, false);
    }

    /// `<tag>text</tag>`, the text escaped.
    fn element(&mut self, tag: &str, text: &str) {
        self.raw(&format!("<{tag}>"));
        self.text(text);
        self.raw(&format!("</{tag}>"));
    }

    /// A row of a key/value table.
    fn row(&mut self, key: &str, value: &str) {
        self.raw("<tr><th>");
        self.text(key);
        self.raw("</th><td>");
        self.text(value);
        self.raw("</td></tr>\n");
    }

    fn flush_if_full(&mut self) -> Result<()> {
        if self.buffer.len() >= FLUSH_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
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
fn escape_into(buffer: &mut String, text: &str, marked: bool) {
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

/// Keeps the first `cap` bytes written, then fails the write so a blob
/// read stops there instead of decompressing the rest.
struct Excerpt {
    bytes: Vec<u8>,
    cap: usize,
    full: bool,
}

impl Write for Excerpt {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let room = self.cap.saturating_sub(self.bytes.len());
        self.bytes
            .extend_from_slice(buf.get(..room.min(buf.len())).unwrap_or_default());
        if buf.len() > room {
            self.full = true;
            return Err(std::io::Error::other("the report's excerpt is full"));
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Content read for the report.
enum Read {
    /// Its first bytes; `whole` when nothing was left out.
    Kept { bytes: Vec<u8>, whole: bool },
    /// Its bytes were erased.
    Erased { erased_at: String },
    /// No bytes are stored under its hash.
    Missing,
    /// The stored bytes do not match the hash.
    Corrupt(String),
    /// The report's content budget is used up.
    OverBudget,
}

/// Whether `bytes` (possibly cut short at `whole == false`) read as text:
/// UTF-8 without NUL.
fn is_text(bytes: &[u8], whole: bool) -> bool {
    if bytes.contains(&0) {
        return false;
    }
    match std::str::from_utf8(bytes) {
        Ok(_) => true,
        // Only a character cut by the excerpt's end.
        Err(error) => !whole && error.error_len().is_none(),
    }
}

/// One line-diff operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op<'a> {
    Same(&'a str),
    Removed(&'a str),
    Added(&'a str),
}

/// A line diff of `old` and `new` (lines keep their `\n`, so a missing
/// final newline is a change): the common start and end are set aside, the
/// middle is a longest-common-subsequence table. `None` when the table
/// would pass [`REPORT_DIFF_CELLS_MAX`].
fn line_diff<'a>(old: &'a str, new: &'a str) -> Option<Vec<Op<'a>>> {
    let old: Vec<&str> = old.split_inclusive('\n').collect();
    let new: Vec<&str> = new.split_inclusive('\n').collect();
    let prefix = old.iter().zip(&new).take_while(|(a, b)| a == b).count();
    let old_rest = old.get(prefix..).unwrap_or_default();
    let new_rest = new.get(prefix..).unwrap_or_default();
    let suffix = old_rest
        .iter()
        .rev()
        .zip(new_rest.iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let a = old_rest.get(..old_rest.len() - suffix).unwrap_or_default();
    let b = new_rest.get(..new_rest.len() - suffix).unwrap_or_default();
    let common_end = old_rest.get(old_rest.len() - suffix..).unwrap_or_default();
    let cells = (a.len() + 1).checked_mul(b.len() + 1)?;
    if cells > REPORT_DIFF_CELLS_MAX {
        return None;
    }
    // Cell (i, j): the LCS length of a[i..] and b[j..]; out of the table
    // (the empty suffixes) it is 0.
    let width = b.len() + 1;
    let mut lcs = vec![0u32; cells];
    let at = |lcs: &[u32], i: usize, j: usize| lcs.get(i * width + j).copied().unwrap_or(0);
    for (i, line_a) in a.iter().enumerate().rev() {
        for (j, line_b) in b.iter().enumerate().rev() {
            let value = if line_a == line_b {
                at(&lcs, i + 1, j + 1) + 1
            } else {
                at(&lcs, i + 1, j).max(at(&lcs, i, j + 1))
            };
            if let Some(cell) = lcs.get_mut(i * width + j) {
                *cell = value;
            }
        }
    }
    let mut ops: Vec<Op<'a>> = old
        .get(..prefix)
        .unwrap_or_default()
        .iter()
        .map(|line| Op::Same(line))
        .collect();
    let (mut i, mut j) = (0, 0);
    loop {
        match (a.get(i), b.get(j)) {
            (Some(line_a), Some(line_b)) if line_a == line_b => {
                ops.push(Op::Same(line_a));
                i += 1;
                j += 1;
            }
            (Some(line_a), line_b)
                if line_b.is_none() || at(&lcs, i + 1, j) >= at(&lcs, i, j + 1) =>
            {
                ops.push(Op::Removed(line_a));
                i += 1;
            }
            (_, Some(line_b)) => {
                ops.push(Op::Added(line_b));
                j += 1;
            }
            (_, None) => break,
        }
    }
    ops.extend(common_end.iter().map(|line| Op::Same(line)));
    Some(ops)
}

const STYLE: &str = r#"
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

/// Renders the report, keeping the state of the walk over the events.
struct Report<'e, 'o> {
    engine: &'e Engine,
    session_id: SessionId,
    page: Page<'o>,
    summary: ReportSummary,
    /// The hash of each path's last write, for diffs.
    last_write: BTreeMap<WorkspacePath, Hash>,
    /// Executions by event id, for the file events they caused.
    executions: BTreeMap<uuid::Uuid, u64>,
    /// Every hash the session's events name, to find erasures on the
    /// system stream.
    hashes: BTreeSet<Hash>,
    /// [`REPORT_EVENTS_MAX`] (smaller in tests).
    events_max: u64,
}

impl Engine {
    /// Writes the forensic report of `session_id` to `out` (see the module
    /// documentation): the session's header, the verification of the log at
    /// this moment, then every event of its stream in order, with
    /// executions' code and output and files' content or diffs, within the
    /// report's bounds.
    pub fn write_report(
        &self,
        session_id: SessionId,
        out: &mut dyn Write,
    ) -> Result<ReportSummary> {
        write_report(self, session_id, out)
    }
}

/// [`Engine::write_report`].
pub fn write_report(
    engine: &Engine,
    session_id: SessionId,
    out: &mut dyn Write,
) -> Result<ReportSummary> {
    write_report_showing(engine, session_id, out, REPORT_EVENTS_MAX)
}

fn write_report_showing(
    engine: &Engine,
    session_id: SessionId,
    out: &mut dyn Write,
    events_max: u64,
) -> Result<ReportSummary> {
    let session = engine.session(session_id)?;
    // The report covers the log up to the head as it is now, whatever is
    // appended while it is written.
    let head = engine.store.digest()?;
    let mut report = Report {
        engine,
        session_id,
        page: Page {
            out,
            buffer: String::with_capacity(2 * FLUSH_BYTES),
            written: 0,
        },
        summary: ReportSummary {
            session_id,
            position: head.position.0,
            events: 0,
            events_shown: 0,
            executions: 0,
            file_changes: 0,
            content_bytes: 0,
            cut: false,
            verify_ok: false,
            html_bytes: 0,
        },
        last_write: BTreeMap::new(),
        executions: BTreeMap::new(),
        hashes: BTreeSet::new(),
        events_max,
    };
    report.head(&session)?;
    report.verification(head.position)?;
    report.timeline(head.position)?;
    report.system_erasures(head.position)?;
    report.footer();
    report.page.flush()?;
    report.summary.html_bytes = report.page.written;
    Ok(report.summary)
}

impl Report<'_, '_> {
    fn head(&mut self, session: &sandlog_projections::query::SessionSummary) -> Result<()> {
        let id = self.session_id.to_string();
        let page = &mut self.page;
        page.raw(concat!(
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n",
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\n",
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n",
            "<meta name=\"generator\" content=\"sandlog\">\n<title>"
        ));
        page.plain(&format!("sandlog report: session {id}"));
        page.raw("</title>\n<style>");
        page.raw(STYLE);
        page.raw("</style>\n</head>\n<body>\n<header>\n");
        page.element("h1", &format!("Session {id}"));
        page.raw("<p class=\"meta\">");
        page.text(&format!(
            "Forensic report made by sandlog {} at {}, covering the log up to position {}.",
            env!("CARGO_PKG_VERSION"),
            self.engine.clock().now(),
            self.summary.position
        ));
        page.raw("</p>\n<table class=\"kv\">\n");
        page.row("session", &id);
        page.row("status", session.status.as_str());
        page.row(
            "created",
            &session
                .created_at
                .map_or("unknown (legacy)".to_owned(), |at| at.to_string()),
        );
        page.row(
            "updated",
            &session
                .updated_at
                .map_or("unknown (legacy)".to_owned(), |at| at.to_string()),
        );
        page.row(
            "legal hold",
            &session
                .held
                .as_ref()
                .map_or("no".to_owned(), |reason| format!("held: {reason}")),
        );
        page.row("executions", &session.exec_count.to_string());
        page.row(
            "files now",
            &format!("{} ({})", session.file_count, format_size(session.bytes)),
        );
        if session.legacy {
            page.row(
                "legacy",
                "yes: adopted without valid metadata, never pruned",
            );
        }
        if session.labels.is_empty() {
            page.row("labels", "none");
        }
        for (key, value) in &session.labels {
            page.row(&format!("label {key}"), value);
        }
        page.raw("</table>\n</header>\n");
        Ok(())
    }

    fn verification(&mut self, position: Position) -> Result<()> {
        self.page
            .raw("<section id=\"verify\">\n<h2>Verification of the log</h2>\n");
        let outcome = self.engine.verify(None, &|_| {});
        let merkle = self.engine.store.merkle_head();
        let page = &mut self.page;
        page.raw("<table class=\"kv\">\n");
        match outcome {
            Ok(outcome) => {
                self.summary.verify_ok = outcome.ok;
                page.raw("<tr><th>result</th><td>");
                if outcome.ok {
                    page.raw("<span class=\"ok\">ok</span>: the hash chain is intact and the read models match the log");
                } else {
                    page.raw("<span class=\"bad\">failed</span>: the hash chain is intact but the read models differ from the log");
                }
                page.raw("</td></tr>\n");
                page.row("events checked", &outcome.events.to_string());
                page.row(
                    "head",
                    &format!("position {}, hash {}", outcome.position, outcome.head),
                );
                for mismatch in &outcome.read_model_mismatches {
                    page.row("mismatch", mismatch);
                }
            }
            Err(error) if error.is_integrity() => {
                page.raw("<tr><th>result</th><td><span class=\"bad\">failed</span>: ");
                page.text(&error.to_string());
                page.raw("</td></tr>\n");
            }
            Err(error) => return Err(error),
        }
        match merkle {
            Ok((size, root)) => page.row("Merkle tree", &format!("size {size}, root {root}")),
            Err(error) => page.row("Merkle tree", &format!("unavailable: {error}")),
        }
        page.raw("</table>\n<p class=\"meta\">");
        page.text(&format!(
            "Checked when the report was made. The timeline below shows the session's events up to position {}; \
             `sandlog verify` and `sandlog evidence export` prove them again later.",
            position.0
        ));
        page.raw("</p>\n</section>\n");
        Ok(())
    }

    fn timeline(&mut self, position: Position) -> Result<()> {
        self.page
            .raw("<section id=\"timeline\">\n<h2>Timeline</h2>\n");
        let filter = LogFilter {
            stream: Some(StreamId::Session(self.session_id)),
            to: Some(position),
            ..LogFilter::default()
        };
        let mut executions = 0u64;
        for envelope in self.engine.store.query(filter) {
            let envelope = envelope?;
            self.summary.events += 1;
            let event = envelope.event();
            if let Ok(Some(Event::SessionExecuted(_))) = &event {
                executions += 1;
                self.executions.insert(envelope.event_id.0, executions);
            }
            if self.summary.events_shown >= self.events_max {
                continue;
            }
            self.summary.events_shown += 1;
            self.event(&envelope, event, executions)?;
            self.page.flush_if_full()?;
        }
        if self.summary.events > self.summary.events_shown {
            self.summary.cut = true;
            self.note(&format!(
                "{} more events of this session are not shown: a report shows at most {}. \
                 `sandlog session timeline` and `sandlog log --session` list them all.",
                self.summary.events - self.summary.events_shown,
                self.events_max
            ));
        }
        if self.summary.events == 0 {
            self.note("The session has no events up to this position.");
        }
        self.page.raw("</section>\n");
        Ok(())
    }

    /// `evidence.erased` events of the system stream (retention) that name
    /// content of this session.
    fn system_erasures(&mut self, position: Position) -> Result<()> {
        let filter = LogFilter {
            stream: Some(StreamId::System),
            kinds: vec!["evidence.erased".to_owned()],
            to: Some(position),
            ..LogFilter::default()
        };
        let mut shown = 0u64;
        let mut left = 0u64;
        for envelope in self.engine.store.query(filter) {
            let envelope = envelope?;
            let Ok(Some(Event::EvidenceErased(erased))) = envelope.event() else {
                continue;
            };
            let named = erased
                .blobs
                .iter()
                .filter(|hash| self.hashes.contains(hash))
                .count();
            if named == 0 {
                continue;
            }
            if self.summary.events_shown >= self.events_max {
                left += 1;
                continue;
            }
            if shown == 0 {
                self.page.raw("<section id=\"retention\">\n<h2>Erasures by retention</h2>\n<p class=\"meta\">Events of the system stream that erased content this session's events name.</p>\n");
            }
            shown += 1;
            self.summary.events_shown += 1;
            self.open_event(&envelope, "gone", "evidence erased by retention");
            let page = &mut self.page;
            page.raw("<table class=\"kv\">\n");
            page.row("reason", &erased.reason);
            page.row(
                "blobs",
                &format!(
                    "{} erased in all ({}), {named} of them named by this session",
                    erased.blobs.len(),
                    format_size(erased.bytes)
                ),
            );
            page.raw("</table>\n</article>\n");
            self.page.flush_if_full()?;
        }
        if left > 0 {
            self.summary.cut = true;
            self.note(&format!(
                "{left} more erasures by retention name this session's content; not shown (at most {} events).",
                self.events_max
            ));
        }
        if shown > 0 {
            self.page.raw("</section>\n");
        }
        Ok(())
    }

    fn footer(&mut self) {
        let events_max = self.events_max;
        let page = &mut self.page;
        page.raw("<footer>\n<h2>About this report</h2>\n<p class=\"meta\">");
        page.text(&format!(
            "Each piece of content is shown up to {}; the report shows at most {} of content in all and at most \
             {events_max} events. Text from the log and from guests is escaped; control characters are shown \
             marked, as \\x1b or \\u{{202e}}. Content shown: {}. The full bytes are available with `sandlog exec show`, \
             `sandlog files cat --at` and `sandlog blob cat` while they are kept.",
            format_size(REPORT_CONTENT_BYTES_MAX as u64),
            format_size(REPORT_CONTENT_TOTAL_BYTES_MAX),
            format_size(self.summary.content_bytes),
        ));
        page.raw("</p>\n</footer>\n</body>\n</html>\n");
    }

    fn note(&mut self, text: &str) {
        self.page.raw("<p class=\"note\">");
        self.page.text(text);
        self.page.raw("</p>\n");
    }

    /// Opens an event's `<article>` with its heading line.
    fn open_event(&mut self, envelope: &Envelope, class: &str, title: &str) {
        let page = &mut self.page;
        page.raw(&format!(
            "<article class=\"event {class}\" id=\"e{}\">\n<h3>",
            envelope.position.0
        ));
        page.text(&format!("#{} {title}", envelope.position.0));
        page.raw("</h3>\n<div class=\"meta\">");
        page.text(&format!(
            "{} · {} · by {} · event hash {}",
            envelope.recorded_at,
            envelope.kind,
            envelope.actor,
            envelope.hash.to_hex()
        ));
        page.raw("</div>\n");
    }

    fn event(
        &mut self,
        envelope: &Envelope,
        event: std::result::Result<Option<Event>, sandlog_core::CoreError>,
        execution: u64,
    ) -> Result<()> {
        let event = match event {
            Ok(Some(event)) => event,
            Ok(None) => {
                self.open_event(
                    envelope,
                    "warn",
                    "event of a kind this version does not know",
                );
                self.payload(envelope);
                self.page.raw("</article>\n");
                return Ok(());
            }
            Err(error) => {
                self.open_event(envelope, "gone", "undecodable event");
                self.note(&format!("Its payload does not decode: {error}"));
                self.payload(envelope);
                self.page.raw("</article>\n");
                return Ok(());
            }
        };
        match event {
            Event::SessionExecuted(executed) => self.execution(envelope, &executed, execution)?,
            Event::FileWritten(written) => self.file_written(envelope, &written)?,
            Event::FileDeleted(deleted) => {
                self.summary.file_changes += 1;
                self.last_write
                    .retain(|path, _| !path.starts_with(&deleted.path));
                let title = format!("{} deleted {}", by_name(deleted.by), deleted.path);
                self.open_event(envelope, "file", &title);
                self.caused_by(envelope);
                self.page.raw("</article>\n");
            }
            Event::SessionCreated(created) => {
                self.open_event(envelope, "", "session created");
                self.page.raw("<table class=\"kv\">\n");
                if created.labels.is_empty() {
                    self.page.row("labels", "none");
                }
                for (key, value) in &created.labels {
                    self.page.row(&format!("label {key}"), value);
                }
                self.page.raw("</table>\n</article>\n");
            }
            Event::SessionAdopted(adopted) => {
                self.open_event(envelope, "", "workspace adopted");
                let page = &mut self.page;
                page.raw("<table class=\"kv\">\n");
                page.row("from", &adopted.source);
                page.row(
                    "metadata",
                    &format!("{:?}", adopted.metadata).to_lowercase(),
                );
                page.row(
                    "created",
                    &adopted
                        .created_at
                        .map_or("unknown".into(), |at| at.to_string()),
                );
                page.row(
                    "updated",
                    &adopted
                        .updated_at
                        .map_or("unknown".into(), |at| at.to_string()),
                );
                if let Some(evidence) = &adopted.evidence {
                    page.row("metadata kept at", evidence);
                }
                for refused in &adopted.refused {
                    page.row(
                        "refused",
                        &format!("{} ({}): {}", refused.path, refused.kind, refused.reason),
                    );
                }
                for copied in &adopted.copied_links {
                    page.row("hard link copied", copied);
                }
                if adopted.unrecorded > 0 {
                    page.row("unrecorded entries", &adopted.unrecorded.to_string());
                }
                page.raw("</table>\n</article>\n");
            }
            Event::SessionPruneRequested(intent) => {
                self.open_event(envelope, "warn", "prune requested");
                let page = &mut self.page;
                page.raw("<table class=\"kv\">\n");
                page.row(
                    "idle",
                    &format_duration(Duration::from_micros(intent.age_us)),
                );
                page.row(
                    "policy threshold",
                    &format_duration(Duration::from_micros(intent.threshold_us)),
                );
                page.row("size", &format_size(intent.size_bytes));
                page.row("prune run", &intent.run_id.to_string());
                page.raw("</table>\n</article>\n");
            }
            Event::SessionPruned(pruned) => {
                self.last_write.clear();
                let title = format!("pruned: {} reclaimed", format_size(pruned.reclaimed_bytes));
                self.open_event(envelope, "gone", &title);
                self.page.raw("</article>\n");
            }
            Event::SessionPruneFailed(failed) => {
                self.open_event(
                    envelope,
                    "warn",
                    "prune failed; the session is active again",
                );
                self.page.element("p", &failed.error);
                self.page.raw("</article>\n");
            }
            Event::SessionDeleteRequested(intent) => {
                self.open_event(envelope, "warn", "delete requested");
                self.page
                    .element("p", &format!("reason: {}", intent.reason));
                self.page.raw("</article>\n");
            }
            Event::SessionDeleted(deleted) => {
                self.last_write.clear();
                let title = format!(
                    "deleted: {} reclaimed",
                    format_size(deleted.reclaimed_bytes)
                );
                self.open_event(envelope, "gone", &title);
                self.page
                    .element("p", &format!("reason: {}", deleted.reason));
                self.page.raw("</article>\n");
            }
            Event::SessionIntentFailed(failed) => {
                let title = format!(
                    "finishing the {} intent failed (still pending)",
                    failed.intent
                );
                self.open_event(envelope, "warn", &title);
                self.page.element("p", &failed.error);
                self.page.raw("</article>\n");
            }
            Event::WorkspaceDriftDetected(detected) => {
                self.open_event(envelope, "warn", "drift: the disk differs from the log");
                self.page.raw("<ul>\n");
                for drift in &detected.drift {
                    self.page.element("li", &describe_drift(drift));
                }
                self.page.raw("</ul>\n");
                if let Some(split) = &detected.split {
                    self.note(&format!(
                        "Part {} of {} of one detection of {} items (digest {}).",
                        split.part + 1,
                        split.parts,
                        split.items_total,
                        split.items_digest
                    ));
                }
                self.page.raw("</article>\n");
            }
            Event::SessionHeld(held) => {
                self.open_event(envelope, "warn", "legal hold placed");
                self.page.element("p", &format!("reason: {}", held.reason));
                self.page.raw("</article>\n");
            }
            Event::SessionReleased(released) => {
                self.open_event(envelope, "warn", "legal hold released");
                if let Some(reason) = &released.reason {
                    self.page.element("p", &format!("reason: {reason}"));
                }
                self.page.raw("</article>\n");
            }
            Event::SessionForked(forked) => {
                self.open_event(envelope, "", "forked from another session");
                let page = &mut self.page;
                page.raw("<table class=\"kv\">\n");
                page.row("origin", &forked.from.to_string());
                page.row("as of position", &forked.at.to_string());
                page.row("files copied", &forked.files.to_string());
                for missing in &forked.missing {
                    page.row("missing (bytes not kept)", &missing.to_string());
                }
                page.raw("</table>\n</article>\n");
            }
            Event::EvidenceErased(erased) => {
                self.open_event(envelope, "gone", "evidence erased");
                let page = &mut self.page;
                page.raw("<table class=\"kv\">\n");
                page.row("reason", &erased.reason);
                if let Some(path) = &erased.path {
                    page.row("path", &path.to_string());
                }
                page.row(
                    "blobs erased",
                    &format!("{} ({})", erased.blobs.len(), format_size(erased.bytes)),
                );
                if !erased.kept_for_hold.is_empty() {
                    page.row("kept for a hold", &erased.kept_for_hold.len().to_string());
                }
                page.raw("</table>\n</article>\n");
            }
            Event::NativeStarted(started) => {
                self.open_event(envelope, "warn", "native command started (not sandboxed)");
                self.page.raw("<pre>");
                self.page.text(&started.argv.join(" "));
                self.page.raw("</pre>\n</article>\n");
            }
            Event::NativeCompleted(completed) => {
                let failed = completed.exit_code != Some(0);
                self.open_event(
                    envelope,
                    if failed { "warn" } else { "" },
                    "native command completed",
                );
                let page = &mut self.page;
                page.raw("<table class=\"kv\">\n");
                let ended = match (completed.exit_code, completed.signal) {
                    _ if completed.timed_out => "killed at its timeout".to_owned(),
                    (Some(code), _) => format!("exit {code}"),
                    (None, Some(signal)) => format!("killed by signal {signal}"),
                    (None, None) => "did not run".to_owned(),
                };
                page.row("ended", &ended);
                page.row(
                    "duration",
                    &format_duration(std::time::Duration::from_micros(completed.duration_us)),
                );
                page.row(
                    "output",
                    &format!(
                        "stdout {}{}, stderr {}{}",
                        format_size(completed.stdout_bytes),
                        if completed.stdout_truncated {
                            " (cut)"
                        } else {
                            ""
                        },
                        format_size(completed.stderr_bytes),
                        if completed.stderr_truncated {
                            " (cut)"
                        } else {
                            ""
                        },
                    ),
                );
                if let Some(scan) = &completed.scan {
                    page.row("files changed", &scan.files_recorded.to_string());
                }
                if let Some(exceeded) = completed.size_exceeded {
                    page.row(
                        "size limit passed",
                        &format!(
                            "{} of {}",
                            format_size(exceeded.bytes),
                            format_size(exceeded.max_size)
                        ),
                    );
                }
                if let Some(message) = &completed.message {
                    page.row("message", message);
                }
                page.raw("</table>\n</article>\n");
            }
            Event::SessionSynced(synced) => {
                self.open_event(envelope, "", "changes made outside sandlog synced");
                let page = &mut self.page;
                page.raw("<table class=\"kv\">\n");
                if let Some(scan) = &synced.scan {
                    page.row("files changed", &scan.files_recorded.to_string());
                }
                if let Some(exceeded) = synced.size_exceeded {
                    page.row(
                        "size limit passed",
                        &format!(
                            "{} of {}",
                            format_size(exceeded.bytes),
                            format_size(exceeded.max_size)
                        ),
                    );
                }
                page.raw("</table>\n</article>\n");
            }
            other => {
                let title = other.kind().to_owned();
                self.open_event(envelope, "", &title);
                self.payload(envelope);
                self.page.raw("</article>\n");
            }
        }
        Ok(())
    }

    /// An event's payload as text, bounded.
    fn payload(&mut self, envelope: &Envelope) {
        let shown = envelope
            .payload
            .get(..REPORT_CONTENT_BYTES_MAX)
            .unwrap_or(&envelope.payload);
        self.page.raw("<pre>");
        self.page.text(&String::from_utf8_lossy(shown));
        self.page.raw("</pre>\n");
        if shown.len() < envelope.payload.len() {
            self.summary.cut = true;
            self.note(&format!(
                "Payload cut at {} of {}.",
                format_size(shown.len() as u64),
                format_size(envelope.payload.len() as u64)
            ));
        }
    }

    fn caused_by(&mut self, envelope: &Envelope) {
        if let Some(number) = envelope
            .causation_id
            .and_then(|cause| self.executions.get(&cause))
        {
            self.page.raw("<div class=\"meta\">");
            self.page.text(&format!("changed by execution {number}"));
            self.page.raw("</div>\n");
        }
    }

    fn execution(
        &mut self,
        envelope: &Envelope,
        executed: &SessionExecuted,
        number: u64,
    ) -> Result<()> {
        self.summary.executions += 1;
        self.hashes.insert(executed.code_blake3);
        self.hashes.insert(executed.stdout_blake3);
        self.hashes.insert(executed.stderr_blake3);
        let title = format!(
            "execution {number}: {} → {}",
            executed.runtime,
            executed.outcome.as_str()
        );
        self.open_event(envelope, "exec", &title);
        let page = &mut self.page;
        page.raw("<table class=\"kv\">\n<tr><th>outcome</th><td>");
        let class = if executed.outcome == sandlog_core::Outcome::Ok
            && executed.exit_code.unwrap_or(0) == 0
        {
            "ok"
        } else {
            "bad"
        };
        page.raw(&format!("<span class=\"{class}\">"));
        page.text(executed.outcome.as_str());
        page.raw("</span></td></tr>\n");
        page.row(
            "exit code",
            &executed
                .exit_code
                .map_or("none (did not exit)".to_owned(), |code| code.to_string()),
        );
        page.row(
            "duration",
            &format!(
                "{} ({} µs)",
                format_duration(Duration::from_micros(executed.duration_us)),
                executed.duration_us
            ),
        );
        page.row(
            "fuel",
            &match (executed.fuel_consumed, executed.limits.fuel) {
                (Some(used), Some(limit)) => format!("{used} of {limit}"),
                (Some(used), None) => used.to_string(),
                (None, Some(limit)) => format!("limit {limit}"),
                (None, None) => "not metered".to_owned(),
            },
        );
        page.row(
            "limits",
            &format!(
                "timeout {}, memory {}, workspace {}",
                format_duration(Duration::from_millis(executed.limits.timeout_ms)),
                format_size(executed.limits.memory_bytes),
                format_size(executed.limits.workspace_bytes)
            ),
        );
        page.row("runtime module", &executed.runtime_blake3.to_hex());
        match &executed.evidence {
            Some(evidence) => page.row(
                "evidence kept",
                &format!(
                    "budget {}{}; {} files kept ({}), {} not kept; output {}",
                    format_size(evidence.budget_bytes),
                    if evidence.budget_bytes == 0 {
                        " (off)"
                    } else {
                        ""
                    },
                    evidence.kept_files,
                    format_size(evidence.kept_bytes),
                    evidence.not_kept_files,
                    if evidence.output_kept {
                        "kept"
                    } else {
                        "not kept"
                    }
                ),
            ),
            None => page.row(
                "evidence kept",
                "code only (recorded before sandlog kept output and files)",
            ),
        }
        if let Some(scan) = &executed.scan {
            page.row(
                "scan after the run",
                &format!(
                    "{} changes found, {} recorded, {} ms{}",
                    scan.files_changed_total,
                    scan.files_recorded,
                    scan.scan_ms,
                    scan.limit.map_or(String::new(), |limit| format!(
                        ", bound hit: {}",
                        limit.as_str()
                    ))
                ),
            );
        }
        page.raw("</table>\n");
        let output_kept = executed
            .evidence
            .is_some_and(|evidence| evidence.output_kept);
        self.content_block(
            "code",
            &executed.code_blake3,
            executed.code_bytes,
            true,
            false,
        )?;
        self.content_block(
            "stdout",
            &executed.stdout_blake3,
            executed.stdout_bytes,
            output_kept,
            executed.stdout_truncated,
        )?;
        self.content_block(
            "stderr",
            &executed.stderr_blake3,
            executed.stderr_bytes,
            output_kept,
            executed.stderr_truncated,
        )?;
        self.page.raw("</article>\n");
        Ok(())
    }

    /// Code or output: a heading and the text, or why it is not shown.
    fn content_block(
        &mut self,
        name: &str,
        hash: &Hash,
        bytes: u64,
        stored: bool,
        truncated: bool,
    ) -> Result<()> {
        self.page.element(
            "h4",
            &format!(
                "{name} ({}{})",
                format_size(bytes),
                if truncated {
                    ", cut by the output limit during the run"
                } else {
                    ""
                }
            ),
        );
        if bytes == 0 {
            self.page.raw("<p class=\"meta\">(empty)</p>\n");
            return Ok(());
        }
        if !stored {
            self.note(&format!(
                "Not kept (evidence off, or recorded before output was kept); blake3 {hash}."
            ));
            return Ok(());
        }
        let read = self.read(hash)?;
        self.show(read, bytes, hash, true);
        Ok(())
    }

    /// Shows read content: text escaped in a `<pre>` (with `lossy`, any
    /// bytes as lossy UTF-8; without, as for files, binary content as its
    /// size and hash).
    fn show(&mut self, read: Read, size: u64, hash: &Hash, lossy: bool) {
        match read {
            Read::Kept { bytes, whole } => {
                if !lossy && !is_text(&bytes, whole) {
                    self.page.element(
                        "p",
                        &format!("binary content, {}, blake3 {hash}", format_size(size)),
                    );
                    return;
                }
                self.page.raw("<pre>");
                self.page.text(&String::from_utf8_lossy(&bytes));
                self.page.raw("</pre>\n");
                if !whole {
                    self.summary.cut = true;
                    self.note(&format!(
                        "Shown: the first {} of {}.",
                        format_size(bytes.len() as u64),
                        format_size(size)
                    ));
                }
            }
            other => self.unavailable(other, hash),
        }
    }

    fn unavailable(&mut self, read: Read, hash: &Hash) {
        let text = match read {
            Read::Kept { .. } => return,
            Read::Erased { erased_at } => {
                format!("Erased at {erased_at} (see the evidence.erased events); blake3 {hash}.")
            }
            Read::Missing => format!("No bytes are stored under blake3 {hash}."),
            Read::Corrupt(error) => {
                format!("The stored bytes do not match their hash: {error}")
            }
            Read::OverBudget => {
                self.summary.cut = true;
                format!(
                    "Not shown: this report already shows {} of content, its bound; blake3 {hash}.",
                    format_size(REPORT_CONTENT_TOTAL_BYTES_MAX)
                )
            }
        };
        self.note(&text);
    }

    /// Reads the first bytes of a blob, within the report's budget.
    fn read(&mut self, hash: &Hash) -> Result<Read> {
        let left = REPORT_CONTENT_TOTAL_BYTES_MAX.saturating_sub(self.summary.content_bytes);
        if left == 0 {
            return Ok(Read::OverBudget);
        }
        let mut excerpt = Excerpt {
            bytes: Vec::new(),
            cap: REPORT_CONTENT_BYTES_MAX.min(usize::try_from(left).unwrap_or(usize::MAX)),
            full: false,
        };
        // Whether the whole blob was read, when its bytes were read at all.
        let whole = match self.engine.backend().read_blob(hash, &mut excerpt) {
            Ok(BlobState::Kept { .. }) => true,
            // The excerpt's own refusal: the bytes so far are the excerpt.
            Err(EventStoreError::Io { .. }) if excerpt.full => false,
            Ok(BlobState::Erased { erased_at, .. }) => {
                return Ok(Read::Erased {
                    erased_at: erased_at.to_string(),
                });
            }
            Ok(BlobState::Missing) => return Ok(Read::Missing),
            Err(error) if error.is_integrity() => return Ok(Read::Corrupt(error.to_string())),
            Err(error) => return Err(error.into()),
        };
        self.summary.content_bytes += excerpt.bytes.len() as u64;
        Ok(Read::Kept {
            bytes: excerpt.bytes,
            whole,
        })
    }

    fn file_written(&mut self, envelope: &Envelope, written: &FileWritten) -> Result<()> {
        self.summary.file_changes += 1;
        self.hashes.insert(written.blake3);
        let previous = self.last_write.insert(written.path.clone(), written.blake3);
        let title = format!("{} {}", by_name(written.by), written.path);
        self.open_event(envelope, "file", &title);
        self.caused_by(envelope);
        let page = &mut self.page;
        page.raw("<table class=\"kv\">\n");
        page.row("path", &written.path.to_string());
        page.row(
            "size",
            &format!("{} ({} bytes)", format_size(written.size), written.size),
        );
        page.row("blake3", &written.blake3.to_hex());
        page.raw("</table>\n");
        if !written.content_stored() {
            let reason = match written.content_kept {
                None => "written by the guest before sandlog kept evidence".to_owned(),
                Some(_) => written
                    .not_kept
                    .unwrap_or(NotKept::Off)
                    .describe()
                    .to_owned(),
            };
            self.note(&format!("Content not kept: {reason}."));
            self.page.raw("</article>\n");
            return Ok(());
        }
        if written.size == 0 {
            self.page.raw("<p class=\"meta\">(empty file)</p>\n");
            self.page.raw("</article>\n");
            return Ok(());
        }
        if previous == Some(written.blake3) {
            self.page
                .raw("<p class=\"meta\">Same content as the previous version of this path.</p>\n");
            self.page.raw("</article>\n");
            return Ok(());
        }
        let read = self.read(&written.blake3)?;
        let diffed = match (&read, previous) {
            (Read::Kept { bytes, whole: true }, Some(previous)) if is_text(bytes, true) => {
                self.diff_against(&previous, bytes)?
            }
            _ => false,
        };
        if !diffed {
            self.page.element(
                "h4",
                if previous.is_some() {
                    "content (new version)"
                } else {
                    "content"
                },
            );
            self.show(read, written.size, &written.blake3, false);
        }
        self.page.raw("</article>\n");
        Ok(())
    }

    /// Shows a line diff of the previous version (by hash) against `new`;
    /// `false` (nothing written) when the previous version is not whole
    /// text or the diff would be too large.
    fn diff_against(&mut self, previous: &Hash, new: &[u8]) -> Result<bool> {
        let Read::Kept {
            bytes: old,
            whole: true,
        } = self.read(previous)?
        else {
            return Ok(false);
        };
        let (Ok(old), Ok(new)) = (std::str::from_utf8(&old), std::str::from_utf8(new)) else {
            return Ok(false);
        };
        if old.contains('\0') {
            return Ok(false);
        }
        let Some(ops) = line_diff(old, new) else {
            return Ok(false);
        };
        let added = ops.iter().filter(|op| matches!(op, Op::Added(_))).count();
        let removed = ops.iter().filter(|op| matches!(op, Op::Removed(_))).count();
        self.page.element(
            "h4",
            &format!(
                "diff against the previous version ({}): {added} lines added, {removed} removed",
                short(previous)
            ),
        );
        self.page.raw("<pre class=\"diff\">");
        let changed: Vec<bool> = ops.iter().map(|op| !matches!(op, Op::Same(_))).collect();
        let near_change = |index: usize| {
            let from = index.saturating_sub(DIFF_CONTEXT_LINES);
            let to = (index + DIFF_CONTEXT_LINES + 1).min(changed.len());
            changed.get(from..to).unwrap_or_default().iter().any(|c| *c)
        };
        let mut skipped = 0usize;
        for (index, op) in ops.iter().enumerate() {
            let (class, sign, line) = match op {
                Op::Same(line) => {
                    if !near_change(index) {
                        skipped += 1;
                        continue;
                    }
                    ("", ' ', line)
                }
                Op::Added(line) => ("add", '+', line),
                Op::Removed(line) => ("del", '-', line),
            };
            if skipped > 0 {
                self.page.raw(&format!(
                    "<span class=\"skip\">⋯ {skipped} unchanged lines</span>"
                ));
                skipped = 0;
            }
            let line = line.strip_suffix('\n').unwrap_or(line);
            if class.is_empty() {
                self.page.text(&format!("{sign} {line}"));
                self.page.raw("\n");
            } else {
                self.page.raw(&format!("<span class=\"{class}\">"));
                self.page.text(&format!("{sign} {line}"));
                self.page.raw("</span>");
            }
        }
        if skipped > 0 {
            self.page.raw(&format!(
                "<span class=\"skip\">⋯ {skipped} unchanged lines</span>"
            ));
        }
        self.page.raw("</pre>\n");
        Ok(true)
    }
}

fn by_name(by: WrittenBy) -> &'static str {
    match by {
        WrittenBy::Host => "host wrote",
        WrittenBy::Guest => "guest wrote",
        WrittenBy::Adoption => "adoption found",
        WrittenBy::Native => "native work wrote",
    }
}

fn short(hash: &Hash) -> String {
    let hex = hash.to_hex();
    hex.get(..12).unwrap_or(&hex).to_owned()
}

fn describe_drift(drift: &Drift) -> String {
    match drift {
        Drift::MissingDirectory => "the workspace directory is missing".to_owned(),
        Drift::FileMissing { path, expected } => {
            format!("{path} is missing (the log has blake3 {expected})")
        }
        Drift::FileChanged {
            path,
            expected,
            actual,
        } => format!("{path} changed (the log has {expected}, the disk {actual})"),
        Drift::FileUnexpected { path, actual } => {
            format!("{path} is not in the log (blake3 {actual})")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_leaves_no_markup_and_shows_controls() {
        let escaped = escape_html("<script>alert('x')</script>&\"\0\x1b\u{202e}a\r\nb\rc");
        assert_eq!(
            escaped,
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;\\x00\\x1b\\u{202e}a\nb\\rc"
        );
        let mut marked = String::new();
        escape_into(&mut marked, "a\x07b", true);
        assert_eq!(marked, "a<span class=\"ctl\">\\x07</span>b");
    }

    #[test]
    fn a_line_diff_finds_the_changed_lines() -> std::result::Result<(), String> {
        let ops = line_diff("a\nb\nc\nd\n", "a\nB\nc\nd\ne\n").ok_or("no diff")?;
        assert_eq!(
            ops,
            vec![
                Op::Same("a\n"),
                Op::Removed("b\n"),
                Op::Added("B\n"),
                Op::Same("c\n"),
                Op::Same("d\n"),
                Op::Added("e\n"),
            ]
        );
        let ops = line_diff("x\ny", "x\ny\n").ok_or("no diff")?;
        assert_eq!(
            ops,
            vec![Op::Same("x\n"), Op::Removed("y"), Op::Added("y\n")]
        );
        Ok(())
    }

    #[test]
    fn events_past_the_bound_are_counted_with_a_note()
    -> std::result::Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let root = Engine::init(&dir.path().join("root"))?;
        let engine = Engine::open(&root, crate::EngineOptions::default())?;
        let session = engine.create_session(BTreeMap::new())?.session_id;
        for index in 0..5 {
            let path = WorkspacePath::parse(&format!("file-{index}.txt"))?;
            engine.write_file(session, &path, format!("text {index}\n").as_bytes(), false)?;
        }
        let mut html = Vec::new();
        let summary = write_report_showing(&engine, session, &mut html, 3)?;
        let html = String::from_utf8(html)?;
        assert_eq!(
            (summary.events, summary.events_shown),
            (6, 3),
            "{summary:?}"
        );
        assert!(summary.cut);
        assert!(html.contains("3 more events of this session are not shown"));
        assert!(html.contains("file-1.txt") && !html.contains("file-2.txt"));
        assert!(html.ends_with("</html>\n"));
        Ok(())
    }

    #[test]
    fn a_diff_past_its_table_bound_is_refused() {
        let old = "a\n".repeat(2_000);
        let new = "b\n".repeat(2_000);
        assert!(line_diff(&old, &new).is_none());
    }

    #[test]
    fn text_is_utf8_without_nul_and_a_cut_character_is_text() {
        assert!(is_text(b"hello\n", true));
        assert!(!is_text(b"a\0b", true));
        assert!(!is_text(&[0xff, 0xfe], true));
        assert!(is_text("é".as_bytes().get(..1).unwrap_or_default(), false));
        assert!(!is_text("é".as_bytes().get(..1).unwrap_or_default(), true));
    }
}
