//! The engine's metrics, in the Prometheus (OpenMetrics) text format:
//! what every front end shares (executions, appends, prunes, verify runs)
//! is recorded here by the engine; what only a server knows (HTTP
//! requests, errors answered, warm kernels) is recorded by it through the
//! same [`Metrics`], so one scrape shows both. Names and labels are listed
//! in docs/operations.md.
//!
//! Recording is a few atomic operations (a labelled series is found under
//! a read lock once it exists); nothing here does I/O except
//! `Engine::metrics_text` (in `telemetry.rs`), which reads the head and the log's size when
//! scraped.

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

/// The content type of `Engine::metrics_text`.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

type Labels<const N: usize> = [(&'static str, String); N];
type HistogramFamily<const N: usize> = Family<Labels<N>, Histogram, fn() -> Histogram>;

/// Guest wall time: 5 ms to about 40 s.
fn execution_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 14))
}

/// Waits and HTTP requests: 0.5 ms to about 8 min.
fn wait_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 4.0, 11))
}

/// A commit, fsync included: 0.1 ms to about 6 s.
fn commit_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.5, 13))
}

/// Every metric one engine keeps.
pub struct Metrics {
    pub(super) registry: Registry,
    pub(super) executions: Family<Labels<2>, Counter>,
    pub(super) execution_duration: HistogramFamily<1>,
    queue_wait: Histogram,
    appends: Counter,
    append_duration: Histogram,
    pub(super) log_bytes: Gauge,
    pub(super) head_position: Gauge,
    prune_runs: Family<Labels<1>, Counter>,
    sessions_pruned: Counter,
    verify_runs: Family<Labels<1>, Counter>,
    errors: Family<Labels<2>, Counter>,
    http_requests: Family<Labels<3>, Counter>,
    http_duration: HistogramFamily<1>,
    pub(super) kernels_live: Gauge,
    pub(super) kernels_started: Counter,
    pub(super) kernels_restarted: Counter,
    pub(super) kernels_evicted: Counter,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Every metric at zero, registered under the `sandlog_` prefix.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("sandlog");
        let metrics = Metrics {
            executions: Family::default(),
            execution_duration: Family::new_with_constructor(execution_buckets),
            queue_wait: wait_buckets(),
            appends: Counter::default(),
            append_duration: commit_buckets(),
            log_bytes: Gauge::default(),
            head_position: Gauge::default(),
            prune_runs: Family::default(),
            sessions_pruned: Counter::default(),
            verify_runs: Family::default(),
            errors: Family::default(),
            http_requests: Family::default(),
            http_duration: Family::new_with_constructor(wait_buckets),
            kernels_live: Gauge::default(),
            kernels_started: Counter::default(),
            kernels_restarted: Counter::default(),
            kernels_evicted: Counter::default(),
            registry: Registry::default(),
        };
        registry.register(
            "executions",
            "Executions recorded, by runtime and outcome",
            metrics.executions.clone(),
        );
        registry.register_with_unit(
            "execution_duration",
            "Guest wall time of recorded executions, by runtime",
            Unit::Seconds,
            metrics.execution_duration.clone(),
        );
        registry.register_with_unit(
            "execution_queue_wait",
            "Time an execution waited for its session's lock and lease before running",
            Unit::Seconds,
            metrics.queue_wait.clone(),
        );
        registry.register(
            "appends",
            "Write transactions committed to the log",
            metrics.appends.clone(),
        );
        registry.register_with_unit(
            "append_duration",
            "Time to commit a write transaction, fsync included",
            Unit::Seconds,
            metrics.append_duration.clone(),
        );
        registry.register_with_unit(
            "log_size",
            "Bytes of the root's database file and its write-ahead log",
            Unit::Bytes,
            metrics.log_bytes.clone(),
        );
        registry.register(
            "log_head_position",
            "Position of the newest event in the log",
            metrics.head_position.clone(),
        );
        registry.register(
            "prune_runs",
            "Prune runs, by dry_run",
            metrics.prune_runs.clone(),
        );
        registry.register(
            "prune_sessions_removed",
            "Sessions removed by prune runs",
            metrics.sessions_pruned.clone(),
        );
        registry.register(
            "verify_runs",
            "Verify runs, by result (ok, mismatch, broken)",
            metrics.verify_runs.clone(),
        );
        registry.register(
            "errors",
            "Errors answered to callers, by class and kind (the stable kind of the JSON error)",
            metrics.errors.clone(),
        );
        registry.register(
            "http_requests",
            "HTTP requests answered, by route, method and status",
            metrics.http_requests.clone(),
        );
        registry.register_with_unit(
            "http_request_duration",
            "Time to answer an HTTP request (to the start of the body), by route",
            Unit::Seconds,
            metrics.http_duration.clone(),
        );
        registry.register(
            "kernels_live",
            "Warm kernels alive",
            metrics.kernels_live.clone(),
        );
        registry.register(
            "kernels_started",
            "Warm kernels started",
            metrics.kernels_started.clone(),
        );
        registry.register(
            "kernels_restarted",
            "Warm kernels dropped after an execution ended them",
            metrics.kernels_restarted.clone(),
        );
        registry.register(
            "kernels_evicted",
            "Idle warm kernels dropped by the host",
            metrics.kernels_evicted.clone(),
        );
        Metrics {
            registry,
            ..metrics
        }
    }

    pub(crate) fn queue_wait(&self, waited: Duration) {
        self.queue_wait.observe(waited.as_secs_f64());
    }

    pub(crate) fn append(&self, took: Duration) {
        self.appends.inc();
        self.append_duration.observe(took.as_secs_f64());
    }

    pub(crate) fn prune_run(&self, dry_run: bool, sessions_removed: usize) {
        self.prune_runs
            .get_or_create(&[("dry_run", dry_run.to_string())])
            .inc();
        self.sessions_pruned.inc_by(sessions_removed as u64);
    }

    pub(crate) fn verify_run(&self, result: &'static str) {
        self.verify_runs
            .get_or_create(&[("result", result.to_owned())])
            .inc();
    }

    /// An error answered to a caller, by its class and stable kind (both
    /// from fixed sets, so the series stay bounded).
    pub fn error(&self, class: &str, kind: &str) {
        self.errors
            .get_or_create(&[("class", class.to_owned()), ("kind", kind.to_owned())])
            .inc();
    }

    /// An HTTP request answered. `route` is the route's template
    /// (`/v1/sessions/{id}`), never the path asked for, so the series stay
    /// bounded.
    pub fn http_request(&self, route: &str, method: &str, status: u16, took: Duration) {
        self.http_requests
            .get_or_create(&[
                ("route", route.to_owned()),
                ("method", method.to_owned()),
                ("status", status.to_string()),
            ])
            .inc();
        self.http_duration
            .get_or_create(&[("route", route.to_owned())])
            .observe(took.as_secs_f64());
    }
}
