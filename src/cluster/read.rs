//! Cluster mode's one read path (docs/CLUSTER.md, "Reads"): whether a shard is served here
//! (this node owns it, has caught up with it, and has applied the reader's minimum
//! position), and one entity's features read from its owner, here or over HTTP. The HTTP
//! routes (through `crate::http::cluster::forward`) and the Redis-protocol listener both
//! decide with [`Cluster::here`]; the listener reads entities with [`Cluster::entity`].
//! Every request a reader on this node sends to a shard's owner (an entity here, a stream's
//! metadata and events in [`super::streams`]) goes through [`Cluster::ask_owner`].

use super::{Cluster, FORWARDED, MIN_POSITION, WAIT};
use crate::failure::Failure;
use axum::http::HeaderValue;
use std::time::Duration;
use vx_cluster::Route;
use vx_cluster::position::Position;
use vx_cluster::txn::Topic;
use vx_proto::ErrorCode;
use vx_router::Router;
use vx_storage::features::{FeatureValue, ReadAt, Reading};

/// One feature value as read, owned: what the Redis protocol answers (docs/RESP.md
/// "Values"), whichever node it was read on.
#[derive(Clone, Debug, PartialEq)]
pub enum Val {
    Int(i64),
    Float(f64),
    Str(String),
    Bool(bool),
}

impl Val {
    /// A value of the local tables. Integral aggregates are integers, as over HTTP.
    pub fn of(v: Reading<'_>) -> Val {
        match v {
            Reading::Int(i) | Reading::Value(&FeatureValue::Int(i)) => Val::Int(i),
            Reading::Value(FeatureValue::Float(f)) => Val::Float(*f),
            Reading::Value(FeatureValue::Bool(b)) => Val::Bool(*b),
            Reading::Value(FeatureValue::Str(s)) => Val::Str(s.to_string()),
            Reading::Num(f) if f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 => {
                Val::Int(f as i64)
            }
            Reading::Num(f) => Val::Float(f),
        }
    }

    /// A value of an owner's JSON answer (docs/API.md §6), which prints them as [`Val::of`]
    /// reads them.
    fn of_json(v: serde_json::Value) -> Option<Val> {
        Some(match v {
            serde_json::Value::Number(n) => match n.as_i64() {
                Some(i) => Val::Int(i),
                None => Val::Float(n.as_f64()?),
            },
            serde_json::Value::String(s) => Val::Str(s),
            serde_json::Value::Bool(b) => Val::Bool(b),
            _ => return None,
        })
    }
}

/// An entity's features, in the order the tables give them.
pub type Entity = Vec<(String, Val)>;

/// Where a reader's request to a shard's owner goes and what it carries.
pub struct Owner<'a> {
    pub url: &'a str,
    /// The reader's minimum position (empty: none).
    pub min: &'a Position,
    pub auth: Option<&'a HeaderValue>,
}

impl Cluster {
    /// Whether to serve a read of `shard` here: this node owns it and, within [`WAIT`], has
    /// caught up with it and applied `min`. `false`: another node owns it and the request
    /// was not `forwarded` to this node (a forwarded one is never sent on: the shard is
    /// moving, and the answer is 503).
    pub async fn here(
        &self,
        min: Option<&Position>,
        forwarded: bool,
        topic: Topic,
        shard: u32,
    ) -> Result<bool, Failure> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            match self.node.route(topic, shard) {
                Route::Local => break,
                Route::Remote(_) if !forwarded => return Ok(false),
                Route::CatchingUp | Route::Remote(_) | Route::Unknown => {
                    if tokio::time::Instant::now() >= deadline {
                        return Err(moving(shard));
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        if let Some(offset) = min.and_then(|p| p.get(topic, shard)) {
            let entities = topic == Topic::Entities;
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let applied = self
                .node
                .outcomes()
                .wait_for(left, |o| o.is_applied(entities, shard, offset))
                .await;
            if !applied {
                return Err(Failure::new(
                    ErrorCode::NotReady,
                    format!(
                        "shard {shard} has not applied X-Vx-Min-Position within {} s",
                        WAIT.as_secs()
                    ),
                )
                .retry_after(1000));
            }
        }
        Ok(true)
    }

    /// One entity's features (only `names`, if given) from its owner, once it has applied
    /// `min`; `None` for an unknown entity.
    pub async fn entity(
        &self,
        router: &Router,
        entity: &str,
        names: Option<&[String]>,
        min: &Position,
        auth: Option<&HeaderValue>,
    ) -> Result<Option<Entity>, Failure> {
        let features = router.store().features();
        let shard = features.shard_of(entity);
        if self.here(Some(min), false, Topic::Entities, shard).await? {
            let names: Option<Vec<&str>> = names.map(|n| n.iter().map(String::as_str).collect());
            let mut out = Vec::new();
            let at = ReadAt {
                now_ms: vx_sys::now_ms(),
            };
            let found = features.read(entity, names.as_deref(), at, &mut |name, v| {
                out.push((name.to_string(), Val::of(v)));
            });
            return Ok(found.map(|_| out));
        }
        match self.node.route(Topic::Entities, shard) {
            Route::Remote(owner) => {
                self.remote_entity(&owner.url, entity, names, min, auth)
                    .await
            }
            _ => Err(moving(shard)),
        }
    }

    /// Whether `stream` exists at its owner (asked only at the owner's stream limit).
    pub async fn stream_exists(
        &self,
        router: &Router,
        stream: &str,
        auth: Option<&HeaderValue>,
    ) -> Result<bool, Failure> {
        let shard = router.shard_of(stream);
        if self.here(None, false, Topic::Streams, shard).await? {
            return Ok(router.store().stream(stream).is_some());
        }
        let Route::Remote(owner) = self.node.route(Topic::Streams, shard) else {
            return Err(moving(shard));
        };
        let owner = Owner {
            url: &owner.url,
            min: &Position::new(),
            auth,
        };
        Ok(self.owner_stream(&owner, stream).await?.is_some())
    }

    /// `GET target` of a shard's owner, for a reader on this node: it names this node as the
    /// forwarder (the owner never forwards it on), passes the reader's token on and asks the
    /// owner to have applied the reader's minimum position first. `None` for a 404 (unknown);
    /// another answer than 200 is the owner's refusal; no answer means the shard is moving.
    pub(super) async fn ask_owner(
        &self,
        owner: &Owner<'_>,
        target: String,
        accept: Option<&'static str>,
    ) -> Result<Option<reqwest::Response>, Failure> {
        let mut req = self
            .client()
            .get(target)
            .header(FORWARDED, self.node_header())
            .timeout(WAIT + Duration::from_secs(2));
        if !owner.min.is_empty() {
            req = req.header(MIN_POSITION, owner.min.to_string());
        }
        if let Some(a) = owner.auth {
            req = req.header(axum::http::header::AUTHORIZATION, a.clone());
        }
        if let Some(a) = accept {
            req = req.header(axum::http::header::ACCEPT, a);
        }
        self.forwarded
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let resp = req.send().await.map_err(|e| {
            tracing::debug!(url = owner.url, error = %e, "a request to a shard's owner failed");
            moving_to(owner.url)
        })?;
        match resp.status().as_u16() {
            200 => Ok(Some(resp)),
            404 => Ok(None),
            status => {
                let body = resp.text().await.unwrap_or_default();
                Err(owner_refused(status, &body))
            }
        }
    }

    async fn remote_entity(
        &self,
        url: &str,
        entity: &str,
        names: Option<&[String]>,
        min: &Position,
        auth: Option<&HeaderValue>,
    ) -> Result<Option<Entity>, Failure> {
        let mut target = format!("{url}/v1/features/{}", crate::remote::segment(entity));
        if let Some(n) = names {
            target.push_str("?names=");
            target.push_str(&n.join(","));
        }
        let owner = Owner { url, min, auth };
        let Some(resp) = self.ask_owner(&owner, target, None).await? else {
            return Ok(None);
        };
        let body = resp.bytes().await.map_err(|_| moving_to(url))?;
        parse_entity(&body).map(Some)
    }
}

/// An owner's `{"entity":…,"features":{…},…}`, its features in the order sent.
fn parse_entity(body: &[u8]) -> Result<Entity, Failure> {
    #[derive(serde::Deserialize)]
    struct Answer {
        features: Ordered,
    }
    /// A JSON object as its members in order (serde_json's map sorts them).
    struct Ordered(Vec<(String, serde_json::Value)>);
    impl<'de> serde::Deserialize<'de> for Ordered {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> serde::de::Visitor<'de> for V {
                type Value = Ordered;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("an object of features")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(
                    self,
                    mut m: A,
                ) -> Result<Ordered, A::Error> {
                    let mut out = Vec::new();
                    while let Some(kv) = m.next_entry()? {
                        out.push(kv);
                    }
                    Ok(Ordered(out))
                }
            }
            d.deserialize_map(V)
        }
    }
    let a: Answer = serde_json::from_slice(body).map_err(|e| {
        Failure::new(
            ErrorCode::Internal,
            format!("an owner's feature answer: {e}"),
        )
    })?;
    Ok(a.features
        .0
        .into_iter()
        .filter_map(|(n, v)| Val::of_json(v).map(|v| (n, v)))
        .collect())
}

/// An owner's refusal, passed on in the one error shape (its code kept when it has one).
pub(crate) fn owner_refused(status: u16, body: &str) -> Failure {
    #[derive(serde::Deserialize)]
    struct Err {
        error: Inner,
    }
    #[derive(serde::Deserialize)]
    struct Inner {
        code: String,
        message: String,
    }
    match serde_json::from_str::<Err>(body) {
        Ok(e) => Failure::new(
            ErrorCode::parse(&e.error.code).unwrap_or(ErrorCode::Internal),
            e.error.message,
        ),
        Err(_) => Failure::new(
            ErrorCode::Internal,
            format!("the entity's owner answered {status}"),
        ),
    }
}

pub(crate) fn moving(shard: u32) -> Failure {
    Failure::new(
        ErrorCode::NotReady,
        format!("shard {shard} is moving between nodes; retry after Retry-After"),
    )
    .retry_after(1000)
}

pub(crate) fn moving_to(url: &str) -> Failure {
    Failure::new(
        ErrorCode::NotReady,
        format!("the shard's owner at {url} did not answer; retry after Retry-After"),
    )
    .retry_after(1000)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn an_owners_answer_keeps_its_order_and_types() {
        let body =
            br#"{"entity":"e","features":{"z":1,"a":2.5,"m":"x","b":true,"n":2.0},"as_of":3}"#;
        assert_eq!(
            parse_entity(body).unwrap(),
            vec![
                ("z".into(), Val::Int(1)),
                ("a".into(), Val::Float(2.5)),
                ("m".into(), Val::Str("x".into())),
                ("b".into(), Val::Bool(true)),
                ("n".into(), Val::Float(2.0)),
            ]
        );
    }

    #[test]
    fn an_owners_refusal_keeps_its_code() {
        let f = owner_refused(503, r#"{"error":{"code":"not_ready","message":"m"}}"#);
        assert_eq!((f.code, f.message.as_str()), (ErrorCode::NotReady, "m"));
        assert_eq!(owner_refused(500, "junk").code, ErrorCode::Internal);
    }
}
