//! The largest streams of the status snapshot: the [`TopLists`] of one index scan, and the
//! [`TopCache`] (kept in the shared state) that serves them to every request until they are
//! [`TOP_MAX_AGE`] old.

use serde::Serialize;
use std::sync::Arc;
use std::time::{Duration, Instant};
use vx_storage::TopStream;

/// How many streams each top list holds.
pub const TOP_STREAMS: usize = 10;
/// How long a computed pair of top lists is served before the index is scanned again.
pub const TOP_MAX_AGE: Duration = Duration::from_secs(1);

/// The top lists of the last scan, shared by every request until they are [`TOP_MAX_AGE`] old.
/// An async mutex: concurrent requests for stale lists wait for one scan instead of each
/// running their own.
#[derive(Default)]
pub struct TopCache(tokio::sync::Mutex<Option<(Instant, Arc<TopLists>)>>);

#[derive(Debug, Default, Serialize, utoipa::ToSchema)]
pub struct TopLists {
    #[schema(value_type = Vec<crate::http::openapi::schemas::TopStream>)]
    pub by_events: Vec<TopStream>,
    #[schema(value_type = Vec<crate::http::openapi::schemas::TopStream>)]
    pub by_bytes: Vec<TopStream>,
}

impl TopCache {
    pub(super) async fn get(&self, store: &vx_storage::Store) -> Arc<TopLists> {
        let mut slot = self.0.lock().await;
        if let Some((at, lists)) = slot.as_ref()
            && at.elapsed() < TOP_MAX_AGE
        {
            return Arc::clone(lists);
        }
        let store = store.clone();
        let scanned = tokio::task::spawn_blocking(move || store.top_streams(TOP_STREAMS)).await;
        let lists = Arc::new(match scanned {
            Ok((by_events, by_bytes)) => TopLists {
                by_events,
                by_bytes,
            },
            // The scan only reads memory; should its task die anyway, show no streams rather
            // than fail the whole page.
            Err(_) => TopLists::default(),
        });
        *slot = Some((Instant::now(), Arc::clone(&lists)));
        lists
    }
}
