//! The documentation in docs/ that is generated from the binary stays
//! current: docs/cli-reference.md is exactly `sandlog help-markdown`, and
//! docs/json.md is exactly the fields and JSON types that each command's
//! `--json` prints in a real run (all snake_case). A mismatch fails and
//! says how to regenerate: `SANDLOG_UPDATE_DOCS=1 cargo test -p
//! sandlog-cli --test docs`.

#![cfg(test)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::Value;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Compares `generated` with the checked-in `relative` file, or writes it
/// with `SANDLOG_UPDATE_DOCS=1`.
fn check_doc(relative: &str, generated: &str) -> TestResult {
    let path = repo().join(relative);
    if std::env::var_os("SANDLOG_UPDATE_DOCS").is_some() {
        std::fs::write(&path, generated)?;
        return Ok(());
    }
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    if current != generated {
        let first_difference = current
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| current.lines().count().min(generated.lines().count()));
        panic!(
            "{relative} is out of date (first difference at line {}): regenerate it with \
             `SANDLOG_UPDATE_DOCS=1 cargo test -p sandlog-cli --test docs` and commit it",
            first_difference + 1
        );
    }
    Ok(())
}

/// docs/cli-reference.md is what the clap definitions generate.
#[test]
fn cli_reference_is_current() -> TestResult {
    let output = Command::cargo_bin("sandlog")?
        .arg("help-markdown")
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(output)?;
    assert!(text.contains("## `sandlog session create`"), "{text}");
    assert!(text.contains("`--root DIR`"), "{text}");
    check_doc("docs/cli-reference.md", &text)
}

fn sandlog(root: &Path) -> Command {
    let mut command = Command::from_std(sandlog_tests::cli::command(
        Path::new(env!("CARGO_BIN_EXE_sandlog")),
        root,
    ));
    command.arg("--json");
    command
}

/// Runs a `--json` command (exit `code`) and parses its stdout: one
/// document, or JSON Lines as an array.
fn run(root: &Path, args: &[&str], code: i32) -> Value {
    let output = sandlog(root)
        .args(args)
        .assert()
        .code(code)
        .get_output()
        .clone();
    let text = String::from_utf8(output.stdout).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|_| {
        Value::Array(
            text.lines()
                .map(|line| serde_json::from_str(line).unwrap())
                .collect(),
        )
    })
}

/// The JSON type names of a value.
fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Every field path of `value` (objects' keys, `[]` for array elements)
/// with the types seen there; asserts each key is snake_case.
fn fields(value: &Value, prefix: &str, out: &mut BTreeMap<String, Vec<&'static str>>, free: bool) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                if !free {
                    assert!(
                        key.chars()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
                        "{prefix}{key} is not snake_case"
                    );
                }
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                let types = out.entry(path.clone()).or_default();
                if !types.contains(&type_name(inner)) {
                    types.push(type_name(inner));
                }
                // Keys chosen by users or guests (labels, payloads, maps
                // keyed by id or path) are data, not field names.
                let inner_free = free
                    || matches!(
                        key.as_str(),
                        "labels"
                            | "payload"
                            | "errors"
                            | "skipped_reasons"
                            | "sessions"
                            | "cleanup"
                    ) && inner.is_object();
                if !inner_free {
                    fields(inner, &path, out, false);
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                fields(item, &format!("{prefix}[]"), out, free);
            }
        }
        _ => {}
    }
}

/// docs/json.md lists, for each command, every field its `--json`
/// prints with its JSON types, as measured on a real run; all field names
/// are snake_case and the same thing has the same name everywhere
/// (`session_id`, `path`, `size`, `blake3`, `position`).
#[test]
fn json_fields_are_documented_and_snake_case() -> TestResult {
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("root");
    let mut documents: Vec<(&str, Value)> = Vec::new();
    documents.push(("init", run(&root, &["init"], 0)));
    let created = run(
        &root,
        &[
            "session",
            "create",
            "--label",
            "team=qa",
            "--group",
            "task-1",
            "--max-size",
            "10MiB",
        ],
        0,
    );
    let id = created["session_id"].as_str().unwrap().to_owned();
    documents.push(("session create", created));
    let input = dir.path().join("input.txt");
    std::fs::write(&input, "hello")?;
    let input = input.to_str().unwrap().to_owned();
    documents.push((
        "files put",
        run(
            &root,
            &["files", "put", &id, "a/b.txt", "--from", &input],
            0,
        ),
    ));
    documents.push((
        "exec",
        run(
            &root,
            &[
                "--correlation-id",
                "task-1",
                "exec",
                &id,
                "--code",
                "open('/app/out.txt','w').write('x'); print(1)",
            ],
            0,
        ),
    ));
    documents.push(("session list", run(&root, &["session", "list"], 0)));
    documents.push(("session show", run(&root, &["session", "show", &id], 0)));
    documents.push(("session path", run(&root, &["session", "path", &id], 0)));
    documents.push((
        "session timeline",
        run(&root, &["session", "timeline", &id], 0),
    ));
    documents.push(("files ls", run(&root, &["files", "ls", &id], 0)));
    documents.push(("log", run(&root, &["log", "--tail", "3"], 0)));
    documents.push((
        "replay",
        run(&root, &["replay", "--at", "3", "--session", &id], 0),
    ));
    documents.push(("verify", run(&root, &["verify"], 0)));
    documents.push(("digest", run(&root, &["digest"], 0)));
    let copy = dir.path().join("copy.db");
    let copy = copy.to_str().ok_or("temporary path is not UTF-8")?;
    documents.push(("migrate", run(&root, &["migrate", "--to", copy], 0)));
    documents.push(("stats", run(&root, &["stats"], 0)));
    // One check failing: `fix` is shown with both its types.
    documents.push((
        "doctor",
        run(&root, &["doctor", "--min-free", "1000000TiB"], 1),
    ));
    documents.push((
        "files rm",
        run(&root, &["files", "rm", &id, "a", "--recursive"], 0),
    ));
    documents.push((
        "prune",
        run(&root, &["prune", "--older-than", "1d", "--dry-run"], 0),
    ));
    documents.push(("reconcile", run(&root, &["reconcile"], 0)));
    let export = dir.path().join("export");
    documents.push((
        "export-metadata",
        run(&root, &["export-metadata", export.to_str().unwrap()], 0),
    ));
    let seeds = dir.path().join("seeds");
    std::fs::create_dir_all(seeds.join("6f1c1d3e-8b9a-4c2d-9e8f-0a1b2c3d4e5f"))?;
    documents.push(("adopt", run(&root, &["adopt", seeds.to_str().unwrap()], 0)));
    documents.push(("exec show", run(&root, &["exec", "show", &id, "1"], 0)));
    documents.push((
        "session fork",
        run(&root, &["session", "fork", &id, "--at", "4"], 0),
    ));
    let restored = dir.path().join("restored");
    documents.push((
        "files restore",
        run(
            &root,
            &[
                "files",
                "restore",
                &id,
                "--at",
                "4",
                "--to",
                restored.to_str().unwrap(),
            ],
            0,
        ),
    ));
    documents.push((
        "session hold",
        run(&root, &["session", "hold", &id, "--reason", "case 1"], 0),
    ));
    documents.push((
        "session release",
        run(&root, &["session", "release", &id], 0),
    ));
    documents.push(("config list", run(&root, &["config", "list"], 0)));
    documents.push((
        "erase",
        run(&root, &["erase", &id, "--reason", "request 7"], 0),
    ));
    documents.push(("gc", run(&root, &["gc"], 0)));
    documents.push((
        "run",
        run(
            &root,
            &["run", &id, "--", "sh", "-c", "printf x > native.txt"],
            0,
        ),
    ));
    std::fs::write(root.join("workspaces").join(&id).join("outside.txt"), "y")?;
    documents.push(("session sync", run(&root, &["session", "sync", &id], 0)));
    documents.push(("session delete", run(&root, &["session", "delete", &id], 0)));
    run(&root, &["session", "create", "--group", "task-2"], 0);
    documents.push((
        "session delete --group",
        run(&root, &["session", "delete", "--group", "task-2"], 0),
    ));

    let mut text = String::from(
        "# JSON output of each command\n\n\
         What `sandlog --json COMMAND` prints on stdout: every field, with its JSON \
         types, measured by `cargo test -p sandlog-cli --test docs` on a real run \
         and compared with this page (regenerate with `SANDLOG_UPDATE_DOCS=1`). \
         `log` prints JSON Lines, shown here as an array. Field names are \
         snake_case; the same thing has the same name in every command \
         (`session_id`, `path`, `size`, `blake3`, `position`, `recorded_at`, \
         `*_bytes`, `*_ms`). `a.b` is field `b` of object `a`; `a[]` is an element \
         of array `a`. Maps keyed by data (labels, payloads, errors by session) are \
         listed as objects without their keys. Errors (any command) are \
         `{\"error\": {\"kind\": string, \"class\": string, \"message\": string}}` \
         on stderr.\n\n\
         The event envelope (each line of `log`) and each event's payload are \
         described in [events.md](events.md).\n",
    );
    for (command, document) in &documents {
        let mut found = BTreeMap::new();
        fields(document, "", &mut found, false);
        text.push_str(&format!(
            "\n## `{command}`\n\nA JSON {}.\n\n| field | type |\n|---|---|\n",
            type_name(document)
        ));
        for (path, types) in &found {
            let mut types = types.clone();
            types.sort_unstable();
            text.push_str(&format!("| `{path}` | {} |\n", types.join(" \\| ")));
        }
    }
    check_doc("docs/json.md", &text)
}

/// One documented field of a struct in the source.
struct SourceField {
    name: String,
    ty: String,
    doc: String,
}

/// The `///` doc and fields of `pub struct NAME` in `source` (serde
/// `rename` applied; `skip` fields left out).
fn source_struct(source: &str, name: &str) -> Option<(String, Vec<SourceField>)> {
    let lines: Vec<&str> = source.lines().collect();
    let start = lines.iter().position(|line| {
        line.trim_start()
            .starts_with(&format!("pub struct {name} "))
    })?;
    let mut doc_lines = Vec::new();
    for line in lines[..start].iter().rev() {
        let line = line.trim();
        if let Some(text) = line.strip_prefix("///") {
            doc_lines.push(text.trim().to_owned());
        } else if !line.starts_with("#[") {
            break;
        }
    }
    doc_lines.reverse();
    let mut fields = Vec::new();
    let mut doc = Vec::new();
    let mut rename: Option<String> = None;
    let mut skip = false;
    for line in &lines[start + 1..] {
        let trimmed = line.trim();
        if trimmed == "}" {
            break;
        }
        if let Some(text) = trimmed.strip_prefix("///") {
            doc.push(text.trim().to_owned());
        } else if trimmed.starts_with("#[serde(") {
            if let Some(at) = trimmed.find("rename = \"") {
                let rest = &trimmed[at + 10..];
                rename = rest.split('"').next().map(str::to_owned);
            }
            if trimmed.contains("skip)") || trimmed.contains("skip,") {
                skip = true;
            }
        } else if let Some(rest) = trimmed.strip_prefix("pub ") {
            if let Some((field, ty)) = rest.split_once(':')
                && !skip
            {
                fields.push(SourceField {
                    name: rename.take().unwrap_or_else(|| field.trim().to_owned()),
                    ty: ty.trim().trim_end_matches(',').to_owned(),
                    doc: doc.join(" "),
                });
            }
            doc.clear();
            rename = None;
            skip = false;
        }
    }
    Some((doc_lines.join(" "), fields))
}

fn field_table(fields: &[SourceField]) -> String {
    let mut text = String::from("| field | type | meaning |\n|---|---|---|\n");
    for field in fields {
        text.push_str(&format!(
            "| `{}` | `{}` | {} |\n",
            field.name,
            field.ty.replace('|', "\\|"),
            field.doc.replace('|', "\\|")
        ));
    }
    text
}

/// docs/events.md is the catalogue of every event kind with its payload
/// fields, generated from core/src/event.rs (the `events!` list and each
/// payload struct's documented fields) and the envelope from
/// core/src/envelope.rs.
#[test]
fn event_catalogue_is_current() -> TestResult {
    let events = std::fs::read_to_string(repo().join("core/src/event.rs"))?;
    let envelope = std::fs::read_to_string(repo().join("core/src/envelope.rs"))?;
    let list_start = events.find("events! {").ok_or("no events! list")?;
    let list = &events[list_start..];
    let list = &list[..list.find("\n}").ok_or("events! list not closed")?];
    let mut text = String::from(
        "# Event catalogue\n\n\
         Every event in a sandlog log: its kind, payload schema version, and \
         payload fields. Generated from `core/src/event.rs` by `cargo test -p \
         sandlog-cli --test docs` (regenerate with `SANDLOG_UPDATE_DOCS=1`); the \
         types named here are defined there. Kinds are past tense; a payload holds \
         what the projections and forensics need, and contents (file bytes, code, \
         output) are blobs referenced by blake3, never inlined. `sandlog log \
         --kind KIND` reads them; `session timeline` describes them for people.\n\n\
         ## The envelope\n\n\
         Each line of `sandlog --json log` is an envelope; the payload is its \
         `payload` field.\n\n",
    );
    let (_, envelope_fields) = source_struct(&envelope, "Envelope").ok_or("no Envelope")?;
    text.push_str(&field_table(&envelope_fields));
    text.push_str("\nThe first event of every log is `root.initialized` (the root's id and creation; see [root-anchor.md](root-anchor.md)).\n");
    let mut count = 0;
    for line in list.lines().skip(1) {
        let line = line.trim();
        let Some((left, right)) = line.split_once(" = \"") else {
            continue;
        };
        let Some(type_name) = left
            .split_once('(')
            .map(|(_, rest)| rest.trim_end_matches(')'))
        else {
            continue;
        };
        let (kind, schema) = right.split_once("\", schema ").ok_or(line.to_owned())?;
        let schema = schema.trim_end_matches(';');
        let (doc, fields) =
            source_struct(&events, type_name).ok_or(format!("no struct {type_name}"))?;
        let doc = doc
            .trim_start_matches(&format!("`{kind}`"))
            .trim_start_matches([':', ' '])
            .trim()
            .to_owned();
        let doc: String = doc
            .chars()
            .take(1)
            .flat_map(char::to_uppercase)
            .chain(doc.chars().skip(1))
            .collect();
        text.push_str(&format!(
            "\n## `{kind}`\n\nSchema {schema}. Payload type `{type_name}`."
        ));
        if !doc.is_empty() {
            text.push_str(&format!(" {doc}"));
        }
        text.push_str("\n\n");
        if fields.is_empty() {
            text.push_str("No fields.\n");
        } else {
            text.push_str(&field_table(&fields));
        }
        count += 1;
    }
    assert!(count >= 20, "only {count} kinds found");
    check_doc("docs/events.md", &text)
}

/// Every source file under `dir` with extension `rs`.
fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|name| name == "target") {
                continue;
            }
            rust_files(&path, found)?;
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            found.push(path);
        }
    }
    Ok(())
}

/// Every requirement id (S1, P3, …) a comment in the code or tests cites
/// is defined in docs/requirements.md, so a reader never needs a document
/// outside the repository.
#[test]
fn cited_requirement_ids_are_defined_in_docs() -> TestResult {
    let defined = std::fs::read_to_string(repo().join("docs/requirements.md"))?;
    let mut files = Vec::new();
    for crate_dir in [
        "core",
        "eventstore",
        "projections",
        "sandbox",
        "host",
        "runtime",
        "cli",
        "tests",
        "python/src",
    ] {
        let dir = repo().join(crate_dir);
        if dir.is_dir() {
            rust_files(&dir, &mut files)?;
        }
    }
    assert!(files.len() > 20, "found only {} source files", files.len());
    let mut undefined = Vec::new();
    let mut cited = 0;
    for file in &files {
        let text = std::fs::read_to_string(file)?;
        for (number, line) in text.lines().enumerate() {
            let Some(comment) = line.trim_start().strip_prefix("//") else {
                continue;
            };
            for word in comment.split(|c: char| !c.is_ascii_alphanumeric()) {
                let mut chars = word.chars();
                let is_id = matches!(chars.next(), Some('S' | 'M' | 'P' | 'C' | 'X' | 'A'))
                    && (2..=3).contains(&word.len())
                    && chars.all(|c| c.is_ascii_digit());
                // "C0" is the name of the ASCII control characters.
                if !is_id || word == "C0" {
                    continue;
                }
                cited += 1;
                if !defined.contains(&format!("**{word}**")) {
                    undefined.push(format!("{}:{}: {word}", file.display(), number + 1));
                }
            }
        }
    }
    assert!(
        cited > 20,
        "only {cited} citations found: is the scan broken?"
    );
    assert!(
        undefined.is_empty(),
        "ids cited but not defined in docs/requirements.md: {undefined:#?}"
    );
    Ok(())
}
