//! `files ls|cat|put|rm`.

use std::collections::BTreeMap;
use std::io::Write;

use sandlog_runtime::Engine;
use sandlog_runtime::core::human::format_size;
use sandlog_runtime::projections::query::{TreeNode, file_tree};
use serde_json::json;

use crate::args::FilesCommand;
use crate::exit::CliError;
use crate::output::{Output, RawStdout};
use crate::render;

pub fn run(engine: &Engine, command: FilesCommand, output: &Output) -> Result<u8, CliError> {
    match command {
        FilesCommand::Ls { id, pattern, tree } => {
            let files = engine.list_files(super::session_id(engine, &id)?, pattern.as_deref())?;
            if tree {
                let tree = file_tree(&files);
                if output.json {
                    output.json(&tree)?;
                } else {
                    let mut lines = vec![".".to_owned()];
                    tree_lines(&tree, "", &mut lines);
                    output.line(&lines.join("\n"))?;
                }
            } else if output.json {
                let documents: Vec<_> =
                    files.iter().map(|f| json!({"path": f.path, "size": f.size, "blake3": f.blake3, "updated_at": f.updated_at})).collect();
                output.json(&documents)?;
            } else {
                let mut table = render::table(output, &["path", "size", "blake3", "updated"]);
                for file in &files {
                    table.add_row(vec![
                        render::escaped(&file.path),
                        render::size(output, file.size),
                        render::hash(output, &file.blake3.to_hex()),
                        file.updated_at.to_string(),
                    ]);
                }
                output.line(&table.to_string())?;
            }
        }
        FilesCommand::Cat { id, path, at: None } => {
            let bytes = engine.read_file(
                super::session_id(engine, &id)?,
                &super::workspace_path(&path)?,
            )?;
            let mut stdout = std::io::stdout().lock();
            match stdout.write_all(&bytes) {
                Err(error) if error.kind() != std::io::ErrorKind::BrokenPipe => {
                    return Err(CliError::Io {
                        context: "writing to stdout".into(),
                        source: error,
                    });
                }
                _ => {}
            }
        }
        FilesCommand::Cat {
            id,
            path,
            at: Some(at),
        } => {
            let session_id = super::session_id(engine, &id)?;
            let path = super::workspace_path(&path)?;
            let cut = super::parse_cut(engine, &at)?;
            // Streamed a chunk at a time: a past file is never loaded whole.
            let mut stdout = RawStdout::new();
            engine.read_file_at(session_id, &path, cut, &mut stdout)?;
            stdout.finish()?;
        }
        FilesCommand::Restore { id, at, to } => {
            let session_id = super::session_id(engine, &id)?;
            let cut = super::parse_cut(engine, &at)?;
            let report = engine.restore(session_id, cut, &to)?;
            if output.json {
                output.json(&report)?;
            } else {
                output.line(&format!(
                    "restored {} files ({}) of session {session_id} as of position {} into {}{}",
                    report.files,
                    format_size(report.bytes),
                    report.position,
                    render::host_path(&to),
                    if report.missing.is_empty() {
                        String::new()
                    } else {
                        format!("; {} missing:", report.missing.len())
                    }
                ))?;
                for missing in &report.missing {
                    output.line(&format!(
                        "  {}: {}",
                        render::escaped(&missing.path),
                        render::missing_reason(&missing.reason)
                    ))?;
                }
            }
        }
        FilesCommand::Put {
            id,
            path,
            from,
            stdin,
            overwrite,
        } => {
            let session_id = super::session_id(engine, &id)?;
            let path = super::workspace_path(&path)?;
            // Streamed: the engine copies the input in bounded chunks and
            // stops at the workspace quota. `--from` must name a regular
            // file: a FIFO or a device (`/dev/zero`) is refused unread;
            // stdin (`-`) is the caller's stream, bounded by the quota.
            let file = match (from, stdin.as_deref()) {
                (Some(file), _) => {
                    let (mut reader, _) =
                        sandlog_runtime::input::open_regular(&file, "input file")?;
                    engine.write_file_from(session_id, &path, &mut reader, overwrite)?
                }
                (None, Some("-")) => {
                    let mut reader = std::io::stdin().lock();
                    engine.write_file_from(session_id, &path, &mut reader, overwrite)?
                }
                _ => {
                    return Err(CliError::Usage {
                        kind: "usage",
                        message: "give the contents with --from FILE or `-` (stdin)".into(),
                    });
                }
            };
            if output.json {
                output
                    .json(&json!({"path": file.path, "size": file.size, "blake3": file.blake3}))?;
            } else {
                output.line(&format!(
                    "wrote {} ({}, blake3 {})",
                    render::escaped(&file.path),
                    format_size(file.size),
                    file.blake3
                ))?;
            }
        }
        FilesCommand::Rm {
            id,
            path,
            recursive,
        } => {
            let deleted = engine.delete_file(
                super::session_id(engine, &id)?,
                &super::workspace_path(&path)?,
                recursive,
            )?;
            if output.json {
                output.json(&json!({"deleted": deleted}))?;
            } else {
                for path in &deleted {
                    output.line(&format!("deleted {}", render::escaped(path)))?;
                }
            }
        }
    }
    Ok(0)
}

/// `files ls --tree` for people, as `tree` draws it: directories end in
/// `/` and come in name order with the files; each file shows its size.
fn tree_lines(level: &BTreeMap<String, TreeNode>, prefix: &str, lines: &mut Vec<String>) {
    let count = level.len();
    for (index, (name, node)) in level.iter().enumerate() {
        let last = index + 1 == count;
        let (branch, indent) = if last {
            ("└── ", "    ")
        } else {
            ("├── ", "│   ")
        };
        let name = render::escape_for_terminal(name);
        match node {
            TreeNode::File { size, .. } => {
                lines.push(format!("{prefix}{branch}{name}  {}", format_size(*size)));
            }
            TreeNode::Dir(children) => {
                lines.push(format!("{prefix}{branch}{name}/"));
                tree_lines(children, &format!("{prefix}{indent}"), lines);
            }
        }
    }
}
