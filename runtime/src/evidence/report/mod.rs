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

mod content;
mod events;
mod html;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;

use sandlog_core::event::{Drift, WrittenBy};
use sandlog_core::human::format_size;
use sandlog_core::{Envelope, Event, Hash, Position, SessionId, StreamId, WorkspacePath};
use sandlog_eventstore::LogFilter;
use serde::Serialize;

use crate::engine::Engine;
use sandlog_host::error::Result;

pub use self::html::escape_html;
use self::html::*;

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
    use super::content::{Op, is_text, line_diff};
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
