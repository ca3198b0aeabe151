//! The HTTP lane: one request at a time on its connection (ingest, replay pages and scans,
//! features), each outcome recorded against its intended start.

use super::*;
use crate::http::HttpError;

/// Why an HTTP operation has no outcome from the server.
#[derive(Debug, thiserror::Error)]
enum OpError {
    #[error(transparent)]
    Http(#[from] HttpError),
    #[error("no answer within {0} s")]
    Timeout(f64),
    #[error("the kv scenario runs over RESP, not HTTP")]
    KvOverHttp,
}

/// Run one HTTP lane to the end of the run.
pub async fn http_lane(ctx: LaneCtx, mut conn: Option<HttpConn>, mut generator: LaneGen) {
    let mut i = 0u64;
    while let Some(start) = ctx.next_start(i).await {
        i += 1;
        let live = match conn.as_mut() {
            Some(c) => c,
            None => match HttpConn::connect(&ctx.endpoint, ctx.workload.token.as_deref()).await {
                Ok(c) => conn.insert(c),
                Err(e) => {
                    ctx.record(op_of(&generator), &Outcome::Error(e.to_string()), start);
                    sleep(RECONNECT_PAUSE).await;
                    continue;
                }
            },
        };
        ctx.sent(start);
        let (op, result) =
            match timeout(ctx.timeout, http_op(&ctx, live, &mut generator, start)).await {
                Ok(r) => r,
                Err(_) => (
                    op_of(&generator),
                    Err(OpError::Timeout(ctx.timeout.as_secs_f64())),
                ),
            };
        let outcome = match result {
            Ok(o) => o,
            Err(e) => {
                // The connection is in an unknown state: open a new one.
                conn = None;
                Outcome::Error(e.to_string())
            }
        };
        ctx.record(op, &outcome, start);
        if let Outcome::Refused { retry_after } = outcome {
            ctx.pause(retry_after).await;
        }
    }
}

/// One operation over HTTP, meant to start at `start`. `Err`: the connection failed.
async fn http_op(
    ctx: &LaneCtx,
    conn: &mut HttpConn,
    generator: &mut LaneGen,
    start: Instant,
) -> (Op, Result<Outcome, OpError>) {
    match generator {
        LaneGen::Fanout(g, acks) => {
            let (events, bytes, body, headers) = ctx.ingest_request(g);
            // A delivery counts in the window its ingest request counts in.
            let measured = ctx.rec.lock().measured(start);
            let r = conn
                .call("POST", "/v1/events", &headers, Bytes::from(body), true)
                .await
                .map(|reply| {
                    // The ack instant: the answer is in (before parsing it).
                    let at = Instant::now();
                    match reply.status {
                        200 => match reply
                            .body
                            .as_deref()
                            .and_then(|b| parse_ack(b, acks.stream()))
                        {
                            Some((accepted, last)) => {
                                acks.ack(last + 1 - accepted, last, at, measured);
                                Outcome::Ok { events, bytes }
                            }
                            None => Outcome::Error(
                                "an ingest answer without the stream's last_seq".into(),
                            ),
                        },
                        429 => Outcome::Refused {
                            retry_after: reply.retry_after(),
                        },
                        _ => Outcome::Error(reply.failure()),
                    }
                });
            (Op::Ingest, r.map_err(OpError::from))
        }
        LaneGen::Ingest(g) => {
            let (events, bytes, body, headers) = ctx.ingest_request(g);
            let r = conn
                .call("POST", "/v1/events", &headers, Bytes::from(body), false)
                .await
                .map(|reply| match reply.status {
                    200 => Outcome::Ok { events, bytes },
                    429 => Outcome::Refused {
                        retry_after: reply.retry_after(),
                    },
                    _ => Outcome::Error(reply.failure()),
                });
            (Op::Ingest, r.map_err(OpError::from))
        }
        LaneGen::Replay(g, streams) => match g.next(streams) {
            ReplayOp::Page {
                stream,
                from,
                limit,
            } => {
                let s = &streams[stream];
                (
                    Op::Page,
                    page(conn, &s.name, from, limit)
                        .await
                        .map(|(o, _)| o)
                        .map_err(OpError::from),
                )
            }
            ReplayOp::Scan { stream } => (
                Op::Scan,
                scan(conn, &streams[stream]).await.map_err(OpError::from),
            ),
        },
        LaneGen::Features(g) => {
            let op = g.next_op();
            let req = g.feature_request(&op);
            let (events, bytes) = (op.events(), g.bytes_of(&op));
            let mut headers = Vec::with_capacity(2);
            if let Some(ty) = req.content_type {
                headers.push(("content-type", ty));
            }
            // Writes are admitted like events: the workload's durability, as ingest sends it.
            if let (KvOp::Set(_) | KvOp::Del(_), Some(d)) = (&op, ctx.durability_header()) {
                headers.push(("x-vx-durability", d));
            }
            let r = conn
                .call(req.method, &req.path, &headers, req.body, false)
                .await
                .map(|reply| feature_outcome(&op, &reply, events, bytes));
            (op.op(), r.map_err(OpError::from))
        }
        LaneGen::Kv(_) => (Op::Get, Err(OpError::KvOverHttp)),
    }
}

/// The outcome of a features request. A 404 `not_found` to a GET or DELETE is a miss, a
/// success as Redis's nil (GET) and 0 (DEL) are: an unknown entity, which a Zipfian mix with
/// deletes meets all the time. A 404 of any other code (or to a PUT or a query, which never
/// answer it) is an error. 429 is backpressure, 507 (the feature budget is full) an error.
pub fn feature_outcome(op: &KvOp, reply: &Reply, events: u64, bytes: u64) -> Outcome {
    match reply.status {
        200 => Outcome::Ok { events, bytes },
        404 if matches!(op, KvOp::Get(_) | KvOp::Del(_)) && is_not_found(reply) => {
            Outcome::Ok { events, bytes }
        }
        429 => Outcome::Refused {
            retry_after: reply.retry_after(),
        },
        _ => Outcome::Error(reply.failure()),
    }
}

/// Whether a reply carries the `not_found` error code (docs/API.md §10) (error bodies are always kept).
fn is_not_found(reply: &Reply) -> bool {
    reply
        .body
        .as_ref()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok())
        .is_some_and(|v| v["error"]["code"] == "not_found")
}

/// One replay page; also returns `X-Vx-Next-Seq` and `X-Vx-Last-Seq`.
async fn page(
    conn: &mut HttpConn,
    stream: &str,
    from: u64,
    limit: u32,
) -> Result<(Outcome, Option<(u64, u64)>), HttpError> {
    let path = format!(
        "/v1/streams/{}/events?from={from}&limit={limit}",
        segment(stream)
    );
    let reply = conn
        .call(
            "GET",
            &path,
            &[("accept", "application/x-ndjson")],
            Bytes::new(),
            false,
        )
        .await?;
    Ok(match reply.status {
        200 => {
            let next = reply
                .header_u64("x-vx-next-seq")
                .zip(reply.header_u64("x-vx-last-seq"));
            (
                Outcome::Ok {
                    events: reply.lines,
                    bytes: reply.bytes,
                },
                next,
            )
        }
        429 => (
            Outcome::Refused {
                retry_after: reply.retry_after(),
            },
            None,
        ),
        _ => (Outcome::Error(reply.failure()), None),
    })
}

/// A whole stream, page after page, up to its last seq when the scan began.
async fn scan(conn: &mut HttpConn, s: &StreamInfo) -> Result<Outcome, HttpError> {
    let (mut events, mut bytes) = (0u64, 0u64);
    let mut from = s.first_seq;
    let mut last = None;
    loop {
        let (outcome, next) = page(conn, &s.name, from, SCAN_PAGE).await?;
        match outcome {
            Outcome::Ok {
                events: e,
                bytes: b,
            } => {
                events += e;
                bytes += b;
            }
            other => return Ok(other),
        }
        let Some((next, last_seq)) = next else {
            return Ok(Outcome::Error("a replay page without X-Vx-Next-Seq".into()));
        };
        let last = *last.get_or_insert(last_seq);
        if next > last || next <= from {
            return Ok(Outcome::Ok { events, bytes });
        }
        from = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(status: u16, body: &str, headers: &[(&'static str, &'static str)]) -> Reply {
        Reply::for_test(status, headers, body)
    }

    #[test]
    fn feature_misses_are_successes_and_the_rest_is_as_in_ingest() {
        let ok = Outcome::Ok {
            events: 1,
            bytes: 0,
        };
        let not_found = r#"{"error":{"code":"not_found","message":"unknown entity"}}"#;
        let get = KvOp::Get(1);
        assert_eq!(feature_outcome(&get, &reply(200, "{}", &[]), 1, 0), ok);
        // An unknown entity is a miss, like Redis's nil and DEL's 0.
        assert_eq!(feature_outcome(&get, &reply(404, not_found, &[]), 1, 0), ok);
        assert_eq!(
            feature_outcome(&KvOp::Del(1), &reply(404, not_found, &[]), 1, 0),
            ok
        );
        // A 404 that is not the API's not_found, or to a PUT or a query, is an error.
        assert!(matches!(
            feature_outcome(&get, &reply(404, "gone", &[]), 1, 0),
            Outcome::Error(_)
        ));
        assert_eq!(
            feature_outcome(&KvOp::Set(1), &reply(404, not_found, &[]), 1, 128),
            Outcome::Error("HTTP 404 not_found".into())
        );
        assert!(matches!(
            feature_outcome(&KvOp::Query(vec![1]), &reply(404, not_found, &[]), 1, 0),
            Outcome::Error(_)
        ));
        assert_eq!(
            feature_outcome(
                &KvOp::Set(1),
                &reply(
                    429,
                    "",
                    &[("x-vx-retry-after-ms", "25"), ("retry-after", "1")]
                ),
                1,
                128
            ),
            Outcome::Refused {
                retry_after: Some(Duration::from_millis(25))
            }
        );
        let full = r#"{"error":{"code":"storage_full","message":"feature budget"}}"#;
        assert_eq!(
            feature_outcome(&KvOp::Set(1), &reply(507, full, &[]), 1, 128),
            Outcome::Error("HTTP 507 storage_full".into())
        );
        assert_eq!(
            feature_outcome(&KvOp::Query(vec![1, 2]), &reply(200, "{}", &[]), 2, 0),
            Outcome::Ok {
                events: 2,
                bytes: 0
            }
        );
    }
}
