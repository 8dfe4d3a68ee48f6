//! `CappedOutput`: the guest's stdout or stderr, captured in host memory up
//! to a cap and silently truncated past it.
//!
//! Why not wasmtime-wasi's `MemoryOutputPipe`: past its capacity it reports
//! an error (a closed stream, or a trap on an oversized write), so a guest
//! printing too much would see `EPIPE`/`EIO` or die, and its behaviour would
//! depend on our cap. Here every write succeeds from the guest's point of
//! view; bytes past the cap are dropped and `truncated` is set, so the run's
//! outcome is the guest's own and the report says what was cut.

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

use super::signals::{OutputSink, OutputStream as Stream};

/// How many bytes the guest may hand over per write call.
///
/// Why 64 KiB: wasmtime-wasi allocates a host buffer of this size per write,
/// so it bounds host allocation per call; it matches wasmtime-wasi's own
/// stream permits.
const WRITE_PERMIT_BYTES: usize = 64 * 1024;

/// A capped, shared capture buffer. Clones share the buffer: the WASI
/// context holds one clone, the run keeps another to read the result.
#[derive(Clone, Debug)]
pub(crate) struct CappedOutput {
    shared: Arc<Mutex<Captured>>,
}

struct Captured {
    bytes: Vec<u8>,
    cap_bytes: usize,
    truncated: bool,
    /// Gets each kept chunk as it is appended (live output).
    sink: Option<(Stream, OutputSink)>,
}

impl std::fmt::Debug for Captured {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Captured")
            .field("bytes", &self.bytes.len())
            .field("cap_bytes", &self.cap_bytes)
            .field("truncated", &self.truncated)
            .field("sink", &self.sink.as_ref().map(|(stream, _)| *stream))
            .finish()
    }
}

impl CappedOutput {
    /// An empty capture that keeps at most `cap_bytes`.
    pub(crate) fn new(cap_bytes: usize) -> Self {
        CappedOutput {
            shared: Arc::new(Mutex::new(Captured {
                // Not preallocated: most runs print a few bytes, and the cap
                // may be megabytes.
                bytes: Vec::new(),
                cap_bytes,
                truncated: false,
                sink: None,
            })),
        }
    }

    /// Appends what fits under the cap; remembers if anything did not.
    fn append(&self, data: &[u8]) {
        // A poisoned lock only means another clone panicked mid-append; the
        // buffer is still a valid prefix of the output, so keep using it.
        let mut captured = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        let room_bytes = captured.cap_bytes.saturating_sub(captured.bytes.len());
        let (kept, dropped) = data.split_at(data.len().min(room_bytes));
        captured.bytes.extend_from_slice(kept);
        if !dropped.is_empty() {
            captured.truncated = true;
        }
        debug_assert!(captured.bytes.len() <= captured.cap_bytes);
        let sink = captured.sink.clone();
        drop(captured);
        // Only kept bytes are streamed, so the stream is the record. Called
        // outside the lock, on the guest's own thread: chunks arrive in the
        // order the guest wrote them.
        if let Some((stream, sink)) = sink
            && !kept.is_empty()
        {
            sink(stream, kept);
        }
    }

    /// Streams every kept chunk from now on to `sink` (`None`: stop).
    pub(crate) fn set_sink(&self, sink: Option<(Stream, OutputSink)>) {
        let mut captured = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        captured.sink = sink;
    }

    /// Takes the captured bytes and whether any were dropped, leaving the
    /// buffer empty.
    pub(crate) fn take(&self) -> (Vec<u8>, bool) {
        let mut captured = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        let bytes = std::mem::take(&mut captured.bytes);
        (bytes, captured.truncated)
    }
}

impl CappedOutput {
    /// Empties the capture and sets a new cap: a warm kernel's next
    /// execution starts with nothing captured and nothing truncated.
    pub(crate) fn reset(&self, cap_bytes: usize) {
        let mut captured = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        captured.bytes = Vec::new();
        captured.cap_bytes = cap_bytes;
        captured.truncated = false;
    }
}

impl IsTerminal for CappedOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CappedOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for CappedOutput {
    async fn ready(&mut self) {
        // Always writable: writes never block.
    }
}

impl OutputStream for CappedOutput {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.append(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        // Never 0 and never `Closed`, even when full: a full capture keeps
        // accepting (and dropping) bytes so the guest sees no error.
        Ok(WRITE_PERMIT_BYTES)
    }
}

impl tokio::io::AsyncWrite for CappedOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _context: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.append(data);
        Poll::Ready(Ok(data.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _context: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: Pin<&mut Self>,
        _context: &mut Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: writes past the cap succeed, keep exactly `cap` bytes, and set
    /// the flag. Method: write 3 + 4 bytes into a 5-byte capture.
    #[test]
    fn output_truncates_silently_at_cap() {
        let mut output = CappedOutput::new(5);
        assert!(output.write(Bytes::from_static(b"abc")).is_ok());
        assert!(output.write(Bytes::from_static(b"defg")).is_ok());
        assert!(output.write(Bytes::from_static(b"hij")).is_ok());
        assert_eq!(output.check_write().unwrap(), WRITE_PERMIT_BYTES);
        assert_eq!(output.take(), (b"abcde".to_vec(), true));

        let untouched = CappedOutput::new(5);
        untouched.append(b"12345");
        assert_eq!(untouched.take(), (b"12345".to_vec(), false));
    }
}
