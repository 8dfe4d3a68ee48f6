//! [`AppState`]: what every handler shares (the engine, the executor,
//! the slots of blocking engine calls, the token), and [`blocking`], the
//! one way a handler calls the engine.

use std::sync::Arc;

use sandlog_runtime::{Engine, RegisteredModules};
use tokio::sync::{Semaphore, watch};

use crate::auth::Token;
use crate::error::ApiError;
use crate::executor::Executor;
use crate::guard::RequestPolicy;
use crate::limits::BLOCKING_CALLS_MAX;

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    pub(crate) engine: Arc<Engine>,
    pub(crate) executor: Arc<dyn Executor>,
    pub(crate) slots: Arc<Semaphore>,
    pub(crate) token: Option<Arc<Token>>,
    /// Becomes true at shutdown: following log streams end.
    pub(crate) stopping: watch::Receiver<bool>,
    pub(crate) policy: Arc<RequestPolicy>,
    pub(crate) modules: Arc<RegisteredModules>,
}

impl AppState {
    /// State over an engine. `stopping` ends following log streams when it
    /// turns true.
    pub fn new(
        engine: Arc<Engine>,
        executor: Arc<dyn Executor>,
        token: Option<Token>,
        stopping: watch::Receiver<bool>,
        policy: RequestPolicy,
        modules: RegisteredModules,
    ) -> AppState {
        AppState {
            engine,
            executor,
            slots: Arc::new(Semaphore::new(BLOCKING_CALLS_MAX)),
            token: token.map(Arc::new),
            stopping,
            policy: Arc::new(policy),
            modules: Arc::new(modules),
        }
    }

    pub(crate) fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    pub(crate) fn executor(&self) -> &Arc<dyn Executor> {
        &self.executor
    }
}

/// Runs `work` on a blocking thread once a slot is free.
pub(crate) async fn blocking<T, F>(state: &AppState, work: F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&Engine) -> Result<T, ApiError> + Send + 'static,
{
    let permit = state
        .slots
        .clone()
        .acquire_owned()
        .await
        .map_err(|_| ApiError::internal("the server is shutting down"))?;
    let engine = state.engine.clone();
    // The engine's spans (an execution's) belong to the request's.
    let span = tracing::Span::current();
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        let _entered = span.enter();
        work(&engine)
    })
    .await
    .map_err(|error| ApiError::internal(format!("the engine call failed: {error}")))?
}
