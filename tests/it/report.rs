//! The forensic report with real executions: the HTML parses with balanced
//! tags (Python's own parser), loads nothing from anywhere, shows hostile
//! guest output only escaped, shows the content and diffs of files, says
//! where its bounds cut, reports a tampered log as failed; and headless
//! Chromium renders it with the session id, an execution's output and a
//! file name on the page.

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sandlog_core::{SessionId, WorkspacePath};
use sandlog_runtime::ExecRequest;
use sandlog_runtime::report::{
    REPORT_CONTENT_BYTES_MAX, REPORT_CONTENT_TOTAL_BYTES_MAX, ReportSummary,
};
use sandlog_tests::engine::TestRoot;

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;
type Fallible<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

const HOSTILE: &str = "<script>alert(1)</script>";

/// What tests/python/check_report_html.py found.
struct Checked {
    errors: Vec<String>,
    text: String,
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs the HTML checker on `html` with the system's python3 (a test
/// dependency already: it is how the build fetches runtimes).
fn check_html(html: &[u8]) -> Fallible<Checked> {
    let mut child = Command::new("python3")
        .arg(repo().join("tests/python/check_report_html.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|error| format!("running python3 (needed to check the HTML): {error}"))?;
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    let input = html.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let output = child.wait_with_output()?;
    writer.join().map_err(|_| "the writer panicked")??;
    assert!(output.status.success(), "the checker failed: {output:?}");
    let value: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    Ok(Checked {
        errors: value
            .get("errors")
            .and_then(serde_json::Value::as_array)
            .ok_or("no errors list")?
            .iter()
            .map(|error| error.as_str().unwrap_or_default().to_owned())
            .collect(),
        text: value
            .get("text")
            .and_then(serde_json::Value::as_str)
            .ok_or("no text")?
            .to_owned(),
    })
}

fn report(root: &TestRoot, session: SessionId) -> Fallible<(String, ReportSummary)> {
    let mut html = Vec::new();
    let summary = root.engine.write_report(session, &mut html)?;
    assert_eq!(summary.html_bytes, html.len() as u64);
    Ok((String::from_utf8(html)?, summary))
}

/// A session with two executions (one printing hostile bytes, one
/// changing a text file and writing a binary one), a host write and a
/// hold. Returns the root, the session, and its unique marker (printed by
/// execution 1 and part of the file's name).
fn populated() -> Fallible<(TestRoot, SessionId, String)> {
    let root = TestRoot::new()?;
    let marker = format!("marker-{}", uuid::Uuid::new_v4().simple());
    let session = root
        .engine
        .create_session(BTreeMap::from([(
            "case".to_owned(),
            "<b>label</b>".to_owned(),
        )]))?
        .session_id;
    let first = root.engine.execute(
        session,
        &ExecRequest::python(format!(
            r#"import sys
print("{marker}")
print("{HOSTILE}")
print("</pre></article></body><img src=http://example.com/x.png>")
sys.stdout.flush()
sys.stdout.buffer.write(b"nul:\x00 bad utf8:\xff\xfe esc:\x1b[31m bidi:\xe2\x80\xae end\n")
sys.stderr.write("{HOSTILE} on stderr\n")
open("/app/{marker}.txt", "w").write("alpha\nbeta\ngamma\n")
"#
        )),
    )?;
    assert!(first.stdout.starts_with(marker.as_bytes()), "{first:?}");
    let second = root.engine.execute(
        session,
        &ExecRequest::python(format!(
            r#"open("/app/{marker}.txt", "w").write("alpha\nBETA-CHANGED\ngamma\ndelta-added\n")
open("/app/blob.bin", "wb").write(bytes(range(256)) * 4)
"#
        )),
    )?;
    assert_eq!(second.exit_code, Some(0), "{second:?}");
    root.engine.write_file(
        session,
        &WorkspacePath::parse("host/notes.md")?,
        b"# notes\n<i>host</i>\n",
        false,
    )?;
    root.engine.hold(session, "case 42 <hold>")?;
    Ok((root, session, marker))
}

/// Goal: a report a person can trust to show what happened and nothing a
/// guest injected. Method: real executions with hostile output; parse the
/// HTML with Python's parser, checking nesting, loaders and URLs; look for
/// each piece of evidence in the page's text.
#[test]
fn a_report_shows_the_session_and_only_escaped_guest_output() -> TestResult {
    let (root, session, marker) = populated()?;
    let (html, summary) = report(&root, session)?;
    assert!(summary.verify_ok, "{summary:?}");
    assert_eq!(summary.executions, 2);
    assert_eq!(summary.file_changes, 4, "{summary:?}");
    assert!(!summary.cut, "{summary:?}");
    assert_eq!(summary.events, summary.events_shown);

    let checked = check_html(html.as_bytes())?;
    assert!(checked.errors.is_empty(), "{:#?}", checked.errors);

    // Nothing a guest printed became markup: the raw HTML holds no script
    // and no loader (the checker found no attribute with a URL); the
    // hostile text, URL included, is there escaped.
    let lowered = html.to_lowercase();
    for forbidden in ["<script", "<img", "<link", "<iframe", "\0"] {
        assert!(!lowered.contains(forbidden), "the HTML holds {forbidden:?}");
    }
    assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(html.contains(
        "&lt;/pre&gt;&lt;/article&gt;&lt;/body&gt;&lt;img src=http://example.com/x.png&gt;"
    ));
    assert!(html.contains("Content-Security-Policy"));

    let text = &checked.text;
    for expected in [
        session.to_string().as_str(),
        marker.as_str(),
        &format!("{marker}.txt"),
        HOSTILE,
        &format!("{HOSTILE} on stderr"),
        "<b>label</b>",
        "case 42 <hold>",
        "legal hold placed",
        // NUL, ESC and a right-to-left override made visible; the invalid
        // bytes decoded lossily.
        "nul:\\x00 bad utf8:\u{fffd}\u{fffd} esc:\\x1b[31m bidi:\\u{202e} end",
        // The file's first version, then a diff.
        "alpha\nbeta\ngamma",
        "- beta",
        "+ BETA-CHANGED",
        "+ delta-added",
        "binary content, 1 KiB",
        "host/notes.md",
        "<i>host</i>",
        "ok: the hash chain is intact",
        "Merkle tree",
    ] {
        assert!(
            text.contains(expected),
            "the page's text lacks {expected:?}"
        );
    }
    // The diff does not mark unchanged lines.
    assert!(!text.contains("- alpha") && !text.contains("+ alpha"));
    Ok(())
}

/// Goal: the checker can fail, so a pass means something. Method: feed it
/// the faults it must catch.
#[test]
fn the_html_checker_catches_bad_nesting_and_loaders() -> TestResult {
    let bad: [(&str, &str); 6] = [
        ("<!DOCTYPE html><div><pre></div></pre>", "while <pre>"),
        ("<!DOCTYPE html><div>", "never closed"),
        ("<!DOCTYPE html><p></p></p>", "nothing open"),
        ("<!DOCTYPE html><script>x</script>", "<script> element"),
        ("<!DOCTYPE html><a href=\"//evil\">x</a>", "loads something"),
        ("<!DOCTYPE html><style>p{background:url(x)}</style>", "CSS"),
    ];
    for (html, expected) in bad {
        let checked = check_html(html.as_bytes())?;
        assert!(
            checked.errors.iter().any(|error| error.contains(expected)),
            "{html}: {:?}",
            checked.errors
        );
    }
    assert!(
        check_html(b"<div></div>")?
            .errors
            .iter()
            .any(|e| e.contains("DOCTYPE"))
    );
    assert!(
        check_html(b"<!DOCTYPE html>\xff")?
            .errors
            .iter()
            .any(|e| e.contains("UTF-8"))
    );
    Ok(())
}

/// Goal: a report stays bounded and says where. Method: stdout and a file
/// far past the per-content excerpt.
#[test]
fn large_content_is_cut_with_a_note() -> TestResult {
    let root = TestRoot::new()?;
    let session = root.engine.create_session(BTreeMap::new())?.session_id;
    let big = 3 * REPORT_CONTENT_BYTES_MAX;
    let run = root.engine.execute(
        session,
        &ExecRequest::python(format!(
            r#"print("o" * {big})
open("/app/big.txt", "w").write("line of text\n" * {lines})
"#,
            lines = big / 13
        )),
    )?;
    assert_eq!(run.stdout.len(), big + 1);
    let (html, summary) = report(&root, session)?;
    assert!(summary.cut, "{summary:?}");
    assert!(
        summary.content_bytes <= 3 * REPORT_CONTENT_BYTES_MAX as u64,
        "{summary:?}"
    );
    assert!(
        summary.html_bytes < 4 * REPORT_CONTENT_BYTES_MAX as u64,
        "{summary:?}"
    );
    let checked = check_html(html.as_bytes())?;
    assert!(checked.errors.is_empty(), "{:#?}", checked.errors);
    assert_eq!(
        checked.text.matches("Shown: the first").count(),
        2,
        "stdout and big.txt are each cut once"
    );
    assert!(
        !checked
            .text
            .contains(&"o".repeat(REPORT_CONTENT_BYTES_MAX + 1))
    );
    Ok(())
}

/// Goal: the whole report's content is bounded, not only each piece.
/// Method: one execution writes more files of a full excerpt each than the
/// total bound holds; the report stops showing content there, says so, and
/// still lists every file.
#[test]
fn content_past_the_report_total_is_named_not_shown() -> TestResult {
    let root = TestRoot::new()?;
    let session = root.engine.create_session(BTreeMap::new())?.session_id;
    let files = REPORT_CONTENT_TOTAL_BYTES_MAX / REPORT_CONTENT_BYTES_MAX as u64 + 8;
    let run = root.engine.execute(
        session,
        &ExecRequest::python(format!(
            r#"line = "0123456789abcdef" * 4 + "\n"
body = line * ({REPORT_CONTENT_BYTES_MAX} // len(line) + 1)
for i in range({files}):
    open(f"/app/f{{i:04}}.txt", "w").write(body)
"#
        )),
    )?;
    assert_eq!(run.exit_code, Some(0), "{run:?}");
    let (html, summary) = report(&root, session)?;
    assert!(summary.cut, "{summary:?}");
    assert!(
        summary.content_bytes <= REPORT_CONTENT_TOTAL_BYTES_MAX,
        "{summary:?}"
    );
    assert_eq!(summary.file_changes, files, "{summary:?}");
    assert!(
        summary.html_bytes < REPORT_CONTENT_TOTAL_BYTES_MAX + 4 * 1024 * 1024,
        "{summary:?}"
    );
    let checked = check_html(html.as_bytes())?;
    assert!(checked.errors.is_empty(), "{:#?}", checked.errors);
    assert!(
        checked
            .text
            .contains("Not shown: this report already shows")
    );
    assert!(checked.text.contains(&format!("f{:04}.txt", files - 1)));
    Ok(())
}

/// Goal: erased content and a tampered log are said, not hidden. Method:
/// erase the session's evidence, then rewrite an event's actor without
/// re-chaining; the report still renders and says both.
#[test]
fn erased_content_and_a_broken_chain_are_reported() -> TestResult {
    let root = TestRoot::new()?;
    let session = root.engine.create_session(BTreeMap::new())?.session_id;
    root.engine
        .execute(session, &ExecRequest::python("print('secret-output')"))?;
    root.engine
        .erase(session, None, "GDPR art. 17 request <7>")?;
    let (html, summary) = report(&root, session)?;
    assert!(summary.verify_ok, "erasure keeps the chain: {summary:?}");
    let checked = check_html(html.as_bytes())?;
    assert!(checked.errors.is_empty(), "{:#?}", checked.errors);
    assert!(!checked.text.contains("secret-output"));
    assert!(checked.text.contains("Erased at"), "{}", checked.text);
    assert!(checked.text.contains("GDPR art. 17 request <7>"));

    sandlog_tests::open_tamperer(&root.path().join("sandlog.db"))?
        .execute("UPDATE events SET actor = 'mallory' WHERE position = 2", [])?;
    let (html, summary) = report(&root, session)?;
    assert!(!summary.verify_ok, "{summary:?}");
    let checked = check_html(html.as_bytes())?;
    assert!(checked.errors.is_empty(), "{:#?}", checked.errors);
    assert!(checked.text.contains("failed"), "{}", checked.text);
    assert!(checked.text.contains("position 2"), "{}", checked.text);
    Ok(())
}

/// Debian's chromium; its absence fails the test with what to install.
fn chromium() -> PathBuf {
    let path = PathBuf::from("/usr/bin/chromium");
    assert!(
        path.is_file(),
        "/usr/bin/chromium is missing: the browser test needs Debian's `chromium` package \
         (`apt-get install -y --no-install-recommends chromium`; `scripts/install-test-deps.sh`, \
         which `make test` runs, installs it)"
    );
    path
}

/// Runs headless Chromium with `args` (no network features, a fresh
/// profile), killing it after a minute; returns its stdout.
fn run_chromium(args: &[String]) -> Fallible<Vec<u8>> {
    let profile = tempfile::tempdir()?;
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut stdout = child.stdout.take().ok_or("no stdout")?;
    let mut stderr = child.stderr.take().ok_or("no stderr")?;
    let reader = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        stdout.read_to_end(&mut bytes).map(|_| bytes)
    });
    let error_reader = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        stderr.read_to_end(&mut bytes).map(|_| bytes)
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() > deadline {
            child.kill()?;
            child.wait()?;
            return Err("chromium ran for more than 60 s; killed".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = reader.join().map_err(|_| "reader panicked")??;
    let err = error_reader.join().map_err(|_| "reader panicked")??;
    assert!(
        status.success(),
        "chromium {args:?} failed ({status}): {}",
        String::from_utf8_lossy(&err)
    );
    Ok(out)
}

/// Decodes a PNG with Python's zlib and counts the distinct bytes of its
/// pixel rows (a blank page has one or two).
fn png_distinct_bytes(path: &Path) -> Fallible<u64> {
    let script = r#"
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat = 8, b""
while pos < len(data):
    length, kind = struct.unpack(">I4s", data[pos:pos + 8])
    if kind == b"IDAT":
        idat += data[pos + 8:pos + 8 + length]
    pos += 12 + length
print(len(set(zlib.decompress(idat))))
"#;
    let output = Command::new("python3")
        .args(["-c", script])
        .arg(path)
        .output()?;
    assert!(output.status.success(), "{output:?}");
    Ok(String::from_utf8(output.stdout)?.trim().parse()?)
}

/// Goal: the report is readable in a real browser from a file, with
/// nothing else. Method: headless Chromium takes a screenshot (a PNG of the
/// window's size, not one colour) and dumps the DOM, whose text holds the
/// session id, an execution's stdout and a file name, and no element a
/// guest injected.
#[test]
fn chromium_renders_the_report() -> TestResult {
    let browser = chromium();
    let (root, session, marker) = populated()?;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("report.html");
    let mut file = std::fs::File::create(&path)?;
    root.engine.write_report(session, &mut file)?;
    file.sync_all()?;
    drop(file);
    let url = format!("file://{}", path.display());

    let shot = dir.path().join("shot.png");
    run_chromium(&[
        format!("--screenshot={}", shot.display()),
        "--window-size=1280,2000".to_owned(),
        url.clone(),
    ])?;
    let png = std::fs::read(&shot)
        .map_err(|error| format!("{} made no screenshot: {error}", browser.display()))?;
    assert!(png.len() > 20_000, "screenshot of {} bytes", png.len());
    assert_eq!(png.get(..8), Some(&b"\x89PNG\r\n\x1a\n"[..]));
    let width = u32::from_be_bytes(png.get(16..20).ok_or("short PNG")?.try_into()?);
    let height = u32::from_be_bytes(png.get(20..24).ok_or("short PNG")?.try_into()?);
    assert_eq!((width, height), (1280, 2000));
    let distinct = png_distinct_bytes(&shot)?;
    assert!(
        distinct > 16,
        "a near-uniform screenshot: {distinct} distinct bytes"
    );

    let dom = String::from_utf8(run_chromium(&["--dump-dom".to_owned(), url])?)?;
    for expected in [
        session.to_string(),
        marker.clone(),
        format!("{marker}.txt"),
        "&lt;script&gt;alert(1)&lt;/script&gt;".to_owned(),
    ] {
        assert!(dom.contains(&expected), "the DOM lacks {expected:?}");
    }
    let lowered = dom.to_lowercase();
    assert!(!lowered.contains("<script") && !lowered.contains("<img"));
    Ok(())
}
