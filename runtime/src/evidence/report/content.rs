//! Content in the report: blobs read within the content budget, shown as
//! text or said to be unavailable, files with line diffs against their last
//! write.

use std::io::Write;

use sandlog_core::event::{FileWritten, NotKept};
use sandlog_core::human::format_size;
use sandlog_core::{Envelope, Hash};
use sandlog_eventstore::{BlobState, EventStoreError};

use sandlog_host::error::Result;

use super::*;

/// Keeps the first `cap` bytes written, then fails the write so a blob
/// read stops there instead of decompressing the rest.
pub(super) struct Excerpt {
    pub(super) bytes: Vec<u8>,
    pub(super) cap: usize,
    pub(super) full: bool,
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
pub(super) enum Read {
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
pub(super) fn is_text(bytes: &[u8], whole: bool) -> bool {
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
pub(super) enum Op<'a> {
    Same(&'a str),
    Removed(&'a str),
    Added(&'a str),
}

/// A line diff of `old` and `new` (lines keep their `\n`, so a missing
/// final newline is a change): the common start and end are set aside, the
/// middle is a longest-common-subsequence table. `None` when the table
/// would pass [`REPORT_DIFF_CELLS_MAX`].
pub(super) fn line_diff<'a>(old: &'a str, new: &'a str) -> Option<Vec<Op<'a>>> {
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

impl Report<'_, '_> {
    /// Code or output: a heading and the text, or why it is not shown.
    pub(super) fn content_block(
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
    pub(super) fn show(&mut self, read: Read, size: u64, hash: &Hash, lossy: bool) {
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

    pub(super) fn unavailable(&mut self, read: Read, hash: &Hash) {
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
    pub(super) fn read(&mut self, hash: &Hash) -> Result<Read> {
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

    pub(super) fn file_written(
        &mut self,
        envelope: &Envelope,
        written: &FileWritten,
    ) -> Result<()> {
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
    pub(super) fn diff_against(&mut self, previous: &Hash, new: &[u8]) -> Result<bool> {
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
