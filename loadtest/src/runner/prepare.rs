//! Before a run: what the scenario reads made ready on the server. Replay's streams filled to
//! `preload_events` and listed; kv's keys SET over RESP; the features scenario's entities PUT
//! (after checking the server has the feature API).

use super::*;

/// Fill the replay streams if asked, then list them.
pub(super) async fn prepare_replay(
    w: &Workload,
    ep: &Endpoint,
    say: &impl Fn(&str),
) -> Result<Vec<StreamInfo>, RunError> {
    let prep = |e: String| RunError::Prepare(e);
    let mut conn = HttpConn::connect(ep, w.token.as_deref()).await?;
    if w.preload_events > 0 {
        let mut g = IngestGen::new(w, u32::MAX, "preload")?;
        let mut written = 0u64;
        for s in 0..w.streams {
            let name = format!("{}{s}", w.stream_prefix);
            let have = stream_events(&mut conn, &name).await?;
            let mut need = w.preload_events.saturating_sub(have);
            while need > 0 {
                let n = need.min(1000) as u32;
                let body = g.ndjson_for(&name, n);
                let reply = conn
                    .call(
                        "POST",
                        "/v1/events",
                        &[("content-type", "application/x-ndjson")],
                        Bytes::from(body),
                        false,
                    )
                    .await
                    .map_err(|e| prep(e.to_string()))?;
                match reply.status {
                    200 => {
                        need -= u64::from(n);
                        written += u64::from(n);
                    }
                    429 => {
                        tokio::time::sleep(retry_pause(reply.retry_after())).await;
                    }
                    _ => return Err(prep(format!("preloading {name}: {}", reply.failure()))),
                }
            }
        }
        if written > 0 {
            say(&format!("replay: preloaded {written} events"));
        }
    }
    let mut streams = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let mut path = format!(
            // 200 entries stay well inside the 64 KiB a kept body may have.
            "/v1/streams?limit=200&prefix={}",
            segment(&w.stream_prefix)
        );
        if let Some(a) = &after {
            path.push_str(&format!("&after={}", segment(a)));
        }
        let reply = conn
            .call("GET", &path, &[], Bytes::new(), true)
            .await
            .map_err(|e| prep(e.to_string()))?;
        if !reply.is_success() {
            return Err(prep(format!("listing streams: {}", reply.failure())));
        }
        let v: serde_json::Value = reply
            .body
            .as_ref()
            .and_then(|b| serde_json::from_slice(b).ok())
            .ok_or_else(|| prep("the stream list is not the JSON of docs/API.md §5".into()))?;
        for s in v["streams"].as_array().into_iter().flatten() {
            let (Some(name), Some(first), Some(last), Some(events)) = (
                s["stream"].as_str(),
                s["first_seq"].as_u64(),
                s["last_seq"].as_u64(),
                s["events"].as_u64(),
            ) else {
                continue;
            };
            let wanted = w.preload_events == 0
                || name
                    .strip_prefix(w.stream_prefix.as_str())
                    .and_then(|i| i.parse::<u64>().ok())
                    .is_some_and(|i| i < w.streams);
            if events > 0 && last >= first && wanted {
                streams.push(StreamInfo {
                    name: name.to_string(),
                    first_seq: first,
                    last_seq: last,
                });
            }
        }
        match v["next"].as_str() {
            Some(n) if streams.len() < 1_000_000 => after = Some(n.to_string()),
            _ => break,
        }
    }
    if streams.is_empty() {
        return Err(prep(format!(
            "no stream with events under the prefix {:?} at {ep}; set preload_events, or run an ingest workload first",
            w.stream_prefix
        )));
    }
    Ok(streams)
}

/// Retained events of a stream (0 if unknown).
async fn stream_events(conn: &mut HttpConn, name: &str) -> Result<u64, RunError> {
    let reply = conn
        .call(
            "GET",
            &format!("/v1/streams/{}", segment(name)),
            &[],
            Bytes::new(),
            true,
        )
        .await?;
    match reply.status {
        404 => Ok(0),
        200 => reply
            .body
            .as_ref()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok())
            .and_then(|v| v["events"].as_u64())
            .ok_or_else(|| {
                RunError::Prepare(format!(
                    "the metadata of {name} is not what docs/API.md §5 says"
                ))
            }),
        _ => Err(RunError::Prepare(format!(
            "reading {name}: {}",
            reply.failure()
        ))),
    }
}

/// SET keys 0..kv_preload, pipelined 1000 at a time.
pub(super) async fn preload_kv(
    w: &Workload,
    ep: &Endpoint,
    say: &impl Fn(&str),
) -> Result<(), RunError> {
    let n = w.kv_preload();
    if n == 0 {
        return Ok(());
    }
    let Endpoint::Resp(addr) = ep else {
        return Err(RunError::Prepare(format!("{ep} is no RESP endpoint")));
    };
    let fail = |e: std::io::Error| RunError::Prepare(format!("preloading keys at {ep}: {e}"));
    let mut tcp = tokio::net::TcpStream::connect(addr.as_str())
        .await
        .map_err(fail)?;
    let value = vec![b'x'; w.value_size_b];
    let mut out = Vec::new();
    let mut buf = bytes::BytesMut::with_capacity(64 << 10);
    let started = Instant::now();
    let mut k = 0u64;
    while k < n {
        let chunk = (n - k).min(1000);
        out.clear();
        for j in k..k + chunk {
            let key = kv_key(j, w.key_size_b);
            if w.kv_type == crate::workload::KvType::Hash {
                resp::encode(
                    &[b"HSET", &key, crate::ops::FEATURE.as_bytes(), &value],
                    &mut out,
                );
            } else {
                resp::encode(&[b"SET", &key, &value], &mut out);
            }
        }
        tcp.write_all(&out).await.map_err(fail)?;
        let mut answered = 0;
        while answered < chunk {
            match resp::parse(&buf).map_err(|e| RunError::Prepare(e.to_string()))? {
                Some((resp::Reply::Error(e), _)) => {
                    return Err(RunError::Prepare(format!("preloading keys at {ep}: {e}")));
                }
                Some((_, used)) => {
                    let _ = buf.split_to(used);
                    answered += 1;
                }
                None => {
                    buf.reserve(64 << 10);
                    if tcp.read_buf(&mut buf).await.map_err(fail)? == 0 {
                        return Err(RunError::Prepare(format!(
                            "preloading keys at {ep}: the server closed the connection"
                        )));
                    }
                }
            }
        }
        k += chunk;
    }
    say(&format!(
        "kv: preloaded {n} keys in {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// Connections the features preload PUTs over at once (at most `connections`): each PUT waits
/// for its durable write, so the preload needs many in flight to fill the server's group
/// commits, and a bound so that a preload never opens more than a load lane would.
const PRELOAD_PARALLEL: u32 = 64;

/// Check that the server has the feature API, then PUT the entities 0..kv_preload once each,
/// over up to [`PRELOAD_PARALLEL`] connections carrying one request at a time.
pub(super) async fn prepare_features(
    w: &Workload,
    ep: &Endpoint,
    say: &impl Fn(&str),
) -> Result<(), RunError> {
    let prep = RunError::Prepare;
    let timeout = Duration::from_secs_f64(w.timeout_s);
    let g = Arc::new(KvGen::new(w, u32::MAX)?);
    let mut first = HttpConn::connect(ep, w.token.as_deref()).await?;
    // A server without the feature API answers every path under /v1/features with 404
    // not_found, which the lanes would count as GET misses: a run of "successes" that
    // measured nothing. Refuse it here instead.
    let probe = g.feature_request(&KvOp::Query(vec![0]));
    let reply = tokio::time::timeout(
        timeout,
        first.call(
            probe.method,
            &probe.path,
            &[("content-type", "application/json")],
            probe.body,
            false,
        ),
    )
    .await
    .map_err(|_| {
        prep(format!(
            "{ep}: no answer to POST /v1/features/query within {} s",
            w.timeout_s
        ))
    })?
    .map_err(|e| prep(format!("{ep}: POST /v1/features/query: {e}")))?;
    if reply.status == 404 {
        return Err(prep(format!(
            "{ep} has no feature API (POST /v1/features/query answered {}); the features scenario needs a server with docs/API.md §6's routes",
            reply.failure()
        )));
    }
    let n = w.kv_preload();
    if n == 0 {
        return Ok(());
    }
    let parallel = u64::from(w.connections.min(PRELOAD_PARALLEL)).min(n);
    let mut conns = vec![first];
    for _ in 1..parallel {
        conns.push(HttpConn::connect(ep, w.token.as_deref()).await?);
    }
    let started = Instant::now();
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = JoinSet::new();
    for conn in conns {
        tasks.spawn(put_entities(
            conn,
            g.clone(),
            next.clone(),
            n,
            w.durability,
            timeout,
        ));
    }
    // The first failure ends the preload; dropping the set aborts the other connections.
    while let Some(joined) = tasks.join_next().await {
        let done = joined.map_err(PutError::from).and_then(|r| r);
        if let Err(e) = done {
            return Err(prep(format!("preloading entities at {ep}: {e}")));
        }
    }
    say(&format!(
        "features: preloaded {n} entities in {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// Why preloading entities stopped.
#[derive(Debug, thiserror::Error)]
enum PutError {
    #[error("PUT {entity}: no answer within {secs} s")]
    Timeout { entity: String, secs: f64 },
    #[error("PUT {entity}: {failure}")]
    Refused { entity: String, failure: String },
    #[error(transparent)]
    Http(#[from] HttpError),
    #[error(transparent)]
    Join(#[from] tokio::task::JoinError),
}

/// PUT entities on one connection, taking the next index from `next` until `n`; a 429 waits
/// the pause the server asks and sends the same PUT again.
async fn put_entities(
    mut conn: HttpConn,
    g: Arc<KvGen>,
    next: Arc<AtomicU64>,
    n: u64,
    durability: Option<Durability>,
    timeout: Duration,
) -> Result<(), PutError> {
    let mut headers = vec![("content-type", "application/json")];
    if let Some(d) = durability {
        headers.push(("x-vx-durability", d.as_str()));
    }
    let headers = headers.as_slice();
    loop {
        let k = next.fetch_add(1, Ordering::Relaxed);
        if k >= n {
            return Ok(());
        }
        let req = g.feature_request(&KvOp::Set(k));
        loop {
            let reply = tokio::time::timeout(
                timeout,
                conn.call(req.method, &req.path, headers, req.body.clone(), false),
            )
            .await
            .map_err(|_| PutError::Timeout {
                entity: g.entity(k),
                secs: timeout.as_secs_f64(),
            })??;
            match reply.status {
                200 => break,
                429 => tokio::time::sleep(retry_pause(reply.retry_after())).await,
                _ => {
                    return Err(PutError::Refused {
                        entity: g.entity(k),
                        failure: reply.failure(),
                    });
                }
            }
        }
    }
}
