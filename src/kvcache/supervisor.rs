//! The pool's supervisor: the task that keeps the subscribers in step with the datastore's endpoints and,
//! with a `zmqEndpoint`, the central socket beside them.

use std::sync::Arc;

use tokio::task::JoinHandle;

use super::central;
use super::pool::{KvEventPool, Subscribers};
use crate::datastore::Datastore;

/// Aborts the supervisor (and with it every subscriber) when dropped: the plugin holding it went away.
#[derive(Debug)]
pub struct PoolTask(JoinHandle<()>);

impl PoolTask {
    /// Runs `task` on the current runtime until the returned guard is dropped.
    pub(crate) fn spawn(task: impl std::future::Future<Output = ()> + Send + 'static) -> Self {
        PoolTask(tokio::spawn(task))
    }
}

impl Drop for PoolTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts the supervisor (and the centralised socket, when configured) on the current tokio runtime; they
/// run until the returned task is dropped.
pub fn spawn_pool(pool: Arc<KvEventPool>, datastore: Arc<Datastore>) -> PoolTask {
    PoolTask(tokio::spawn(async move {
        let _central = pool
            .config()
            .central
            .clone()
            .map(|address| PoolTask(tokio::spawn(central::run(pool.clone(), address))));
        let mut versions = datastore.subscribe();
        let mut subscribers = Subscribers::new(pool);
        loop {
            subscribers.reconcile(&datastore.endpoints());
            if versions.changed().await.is_err() {
                break;
            }
        }
    }))
}
