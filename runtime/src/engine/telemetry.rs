//! What the engine reports of itself: its [`Metrics`] and their text as
//! scraped (with the head and the log's size read then), executions
//! counted by runtime, and a kernel pool's figures. Apart from
//! `metrics.rs`, which holds only the counters, so the [`Engine`] can own
//! them without a loop between the two files.

use std::sync::atomic::Ordering;
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use sandlog_core::Outcome;

use crate::engine::Engine;
use crate::engine::exec::Runtime;
use crate::engine::metrics::Metrics;
use crate::kernel::KernelStats;

/// A runtime as a label: its name for the built-in ones, `module` for any
/// other module, so a caller's paths cannot grow the series without bound.
fn runtime_label(runtime: &Runtime) -> &'static str {
    match runtime {
        Runtime::Python => "python",
        Runtime::JavaScript => "javascript",
        Runtime::Module(_) => "module",
    }
}

impl Metrics {
    pub(crate) fn execution(&self, runtime: &Runtime, outcome: Outcome, duration: Duration) {
        let runtime = runtime_label(runtime);
        self.executions
            .get_or_create(&[
                ("runtime", runtime.to_owned()),
                ("outcome", outcome.as_str().to_owned()),
            ])
            .inc();
        self.execution_duration
            .get_or_create(&[("runtime", runtime.to_owned())])
            .observe(duration.as_secs_f64());
    }

    /// A kernel pool's figures, as of now (its counters only grow, so
    /// they are taken as they are).
    pub fn kernels(&self, stats: &KernelStats) {
        self.kernels_live
            .set(i64::try_from(stats.kernels).unwrap_or(i64::MAX));
        self.kernels_started
            .inner()
            .store(stats.kernel_starts, Ordering::Relaxed);
        self.kernels_restarted
            .inner()
            .store(stats.restarts, Ordering::Relaxed);
        self.kernels_evicted
            .inner()
            .store(stats.evictions, Ordering::Relaxed);
    }
}

impl Engine {
    /// This engine's metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Every metric in the OpenMetrics text format
    /// ([`CONTENT_TYPE`](crate::engine::metrics::CONTENT_TYPE)),
    /// with the head's position and the log's size read now. A head that
    /// cannot be read leaves its gauge as it was (the readiness checks
    /// report why).
    pub fn metrics_text(&self) -> String {
        let metrics = &self.metrics;
        if let Ok(head) = self.store.head() {
            metrics
                .head_position
                .set(i64::try_from(head.position.0).unwrap_or(i64::MAX));
        }
        let database = &self.layout.database;
        let mut wal = database.as_os_str().to_owned();
        wal.push("-wal");
        let size = |path: &std::path::Path| std::fs::metadata(path).map_or(0, |meta| meta.len());
        let bytes = size(database).saturating_add(size(std::path::Path::new(&wal)));
        metrics
            .log_bytes
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
        let mut text = String::new();
        // Writing to a String cannot fail; an encoder error would leave a
        // partial text, which a scraper rejects as a whole.
        let _ = encode(&mut text, &metrics.registry);
        text
    }
}
