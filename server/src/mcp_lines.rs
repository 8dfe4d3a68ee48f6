//! The MCP stdio stream between the client and the protocol library:
//! every line is bounded and checked before the library sees it, so no
//! input leaves a client waiting for an answer that never comes.
//!
//! JSON-RPC wants an answer to every request; a transport that silently
//! drops a line it cannot read leaves the client hanging. Here a line
//! longer than [`MCP_LINE_BYTES_MAX`] is answered with an error naming
//! the limit (and skipped to its end without being held), one that is not
//! JSON with `-32700` (parse error), and JSON that is not a JSON-RPC 2.0
//! message with `-32600` (invalid request) keeping its `id` when it has a
//! usable one. Everything else goes to the library unchanged. The
//! library's answers and these errors are written whole lines at a time
//! by one writer, so they never interleave.

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use crate::limits::MCP_LINE_BYTES_MAX;

/// JSON-RPC's "parse error".
const PARSE_ERROR: i64 = -32700;
/// JSON-RPC's "invalid request".
const INVALID_REQUEST: i64 = -32600;

/// Lines waiting for the writer, at most; the library and the checker
/// wait when it is full, so a client that stops reading bounds memory.
const OUTPUT_LINES_QUEUED_MAX: usize = 64;

/// Connects `input`/`output` (stdin/stdout) to the protocol library,
/// which gets the returned pair as its transport. Runs until `input`
/// ends; the library then sees its input end too.
pub fn guard<R, W>(
    input: R,
    output: W,
) -> (
    tokio::io::ReadHalf<tokio::io::SimplexStream>,
    tokio::io::WriteHalf<tokio::io::SimplexStream>,
)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    // What the checker passes on, for the library to read.
    let (library_in, mut to_library) = tokio::io::simplex(MCP_LINE_BYTES_MAX + 1);
    // What the library answers, for the writer to copy out.
    let (from_library, library_out) = tokio::io::simplex(MCP_LINE_BYTES_MAX + 1);
    let (lines, mut queued) = mpsc::channel::<Vec<u8>>(OUTPUT_LINES_QUEUED_MAX);

    let library_lines = lines.clone();
    tokio::spawn(async move {
        let mut reader = BufReader::new(from_library);
        loop {
            let mut line = Vec::new();
            match reader.read_until(b'\n', &mut line).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if library_lines.send(line).await.is_err() {
                        break;
                    }
                }
            }
        }
    });
    tokio::spawn(async move {
        let mut output = output;
        while let Some(mut line) = queued.recv().await {
            if line.last() != Some(&b'\n') {
                line.push(b'\n');
            }
            if output.write_all(&line).await.is_err() || output.flush().await.is_err() {
                break;
            }
        }
    });
    tokio::spawn(async move {
        let mut reader = BufReader::new(input);
        loop {
            match read_line(&mut reader).await {
                Ok(Line::End) | Err(_) => break,
                Ok(Line::TooLong(length)) => {
                    let answer = error(
                        Value::Null,
                        INVALID_REQUEST,
                        format!(
                            "the message is longer than MCP_LINE_BYTES_MAX = {MCP_LINE_BYTES_MAX} bytes ({length} read before it was skipped); send less (large files go through `sandlog files put`)"
                        ),
                    );
                    if lines.send(answer).await.is_err() {
                        break;
                    }
                }
                Ok(Line::Text(line)) => match check(&line) {
                    Ok(()) => {
                        let mut line = line;
                        line.push(b'\n');
                        if to_library.write_all(&line).await.is_err() {
                            break;
                        }
                    }
                    Err(Some(answer)) => {
                        if lines.send(answer).await.is_err() {
                            break;
                        }
                    }
                    Err(None) => {}
                },
            }
        }
        // The library sees its input end and finishes.
        let _ = to_library.shutdown().await;
    });
    (library_in, library_out)
}

enum Line {
    Text(Vec<u8>),
    TooLong(u64),
    End,
}

/// One line without its newline, held only up to [`MCP_LINE_BYTES_MAX`];
/// a longer one is read to its end and counted, not kept.
async fn read_line<R: AsyncRead + Unpin>(reader: &mut BufReader<R>) -> std::io::Result<Line> {
    let mut line = Vec::new();
    let mut skipped: u64 = 0;
    loop {
        let buffer = reader.fill_buf().await?;
        if buffer.is_empty() {
            return Ok(if skipped > 0 {
                Line::TooLong(skipped)
            } else if line.is_empty() {
                Line::End
            } else {
                Line::Text(line)
            });
        }
        let (chunk, found) = match buffer.iter().position(|byte| *byte == b'\n') {
            Some(end) => (buffer.get(..end).unwrap_or_default(), true),
            None => (buffer, false),
        };
        let taken = chunk.len() + usize::from(found);
        if skipped > 0 || line.len() + chunk.len() > MCP_LINE_BYTES_MAX {
            skipped = skipped
                .saturating_add(line.len() as u64)
                .saturating_add(chunk.len() as u64);
            line = Vec::new();
        } else {
            line.extend_from_slice(chunk);
        }
        reader.consume(taken);
        if found {
            return Ok(if skipped > 0 {
                Line::TooLong(skipped)
            } else {
                Line::Text(line)
            });
        }
    }
}

/// `Ok` for a line the library should get; else the answer to send
/// instead (`None`: nothing to answer, such as an empty line or a bad
/// notification).
fn check(line: &[u8]) -> Result<(), Option<Vec<u8>>> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Err(None);
    }
    let value: Value = match serde_json::from_slice(line) {
        Ok(value) => value,
        Err(parse) => {
            return Err(Some(error(
                Value::Null,
                PARSE_ERROR,
                format!("the message is not JSON: {parse}"),
            )));
        }
    };
    let Value::Object(message) = &value else {
        return Err(Some(error(
            Value::Null,
            INVALID_REQUEST,
            "a message must be one JSON-RPC 2.0 object (batches are not part of MCP)".to_owned(),
        )));
    };
    let id = match message.get("id") {
        Some(id @ (Value::String(_) | Value::Number(_))) => Some(id.clone()),
        _ => None,
    };
    let version_ok = message.get("jsonrpc").and_then(Value::as_str) == Some("2.0");
    let is_request = message.get("method").is_some_and(Value::is_string);
    let is_response =
        id.is_some() && (message.contains_key("result") || message.contains_key("error"));
    if version_ok && (is_request || is_response) {
        return Ok(());
    }
    // A broken notification (no id) has no one to answer.
    if !message.contains_key("id") && is_request {
        return Err(None);
    }
    let reason = if !version_ok {
        "`jsonrpc` must be \"2.0\""
    } else {
        "a request needs a string `method` (a response, an `id` and `result` or `error`)"
    };
    Err(Some(error(
        id.unwrap_or(Value::Null),
        INVALID_REQUEST,
        format!("not a JSON-RPC 2.0 message: {reason}"),
    )))
}

fn error(id: Value, code: i64, message: String) -> Vec<u8> {
    let mut line = json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": code, "message": message},
    })
    .to_string()
    .into_bytes();
    line.push(b'\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(line: &str) -> Option<Value> {
        match check(line.as_bytes()) {
            Ok(()) => None,
            Err(None) => Some(Value::Null),
            Err(Some(bytes)) => Some(serde_json::from_slice(&bytes).unwrap_or(Value::Null)),
        }
    }

    #[test]
    fn requests_pass_and_bad_lines_get_their_errors() {
        assert!(answer(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#).is_none());
        assert!(answer(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).is_none());
        assert!(answer(r#"{"jsonrpc":"2.0","id":"a","result":{}}"#).is_none());
        let parse = answer("{not json").unwrap_or_default();
        assert_eq!(parse["error"]["code"], PARSE_ERROR);
        assert_eq!(parse["id"], Value::Null);
        let invalid = answer(r#"{"jsonrpc":"2.0","id":7,"params":{}}"#).unwrap_or_default();
        assert_eq!(invalid["error"]["code"], INVALID_REQUEST);
        assert_eq!(invalid["id"], 7);
        let version = answer(r#"{"jsonrpc":"1.0","id":"x","method":"ping"}"#).unwrap_or_default();
        assert_eq!(version["id"], "x");
        let batch = answer(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#).unwrap_or_default();
        assert_eq!(batch["error"]["code"], INVALID_REQUEST);
        assert_eq!(answer("   "), Some(Value::Null));
    }
}
