//! Before a run of Redis stream commands over RESP: which server the endpoint is (asked once),
//! that it serves streams at all, and for replay the streams `stream_prefix` + 0…`streams`−1
//! filled to `preload_events` with pipelined `XADD`s and listed with their first and last seq.
//!
//! Replay reads `XRANGE s N-0 N-0`, so a stream's entry ids must be its seqs: `1-0`, `2-0`, …
//! without holes. Veltrix assigns exactly these (its `XADD` takes only `*`); Redis, given `*`,
//! assigns `<ms>-<n>`, so a Redis stream is filled with explicit ids `N-0`, continuing after its
//! last. The events are the same on both (one generator per stream, seeded by the workload);
//! only who names the id differs.

use super::*;
use crate::resp::{Value, parse_id};
use crate::resp_conn::{RespConn, RespServer};

/// Streams filled (or read) at once, each task on its own connection: a fill over Veltrix's
/// listener waits for durable writes, so one connection would fill slowly.
const PARALLEL: u64 = 16;
/// `XADD`s sent before their answers are read.
const FILL_CHUNK: u64 = 1000;
/// The generator lane of stream `s`'s fill: `u32::MAX − 1 − s` (the HTTP fill uses
/// `u32::MAX`), so each stream's events do not depend on the order streams are filled in.
fn fill_lane(s: u64) -> u32 {
    u32::MAX - 1 - u32::try_from(s).unwrap_or(u32::MAX - 1)
}

fn prep(e: impl std::fmt::Display) -> RunError {
    RunError::Prepare(e.to_string())
}

async fn connect(w: &Workload, ep: &Endpoint) -> Result<RespConn, RunError> {
    let Endpoint::Resp(addr) = ep else {
        return Err(prep(format!("{ep} is no RESP endpoint")));
    };
    RespConn::connect(addr, w.token.as_deref())
        .await
        .map_err(|e| RunError::Connect(format!("cannot connect to {ep}: {e}")))
}

/// Ingest over RESP: which server it is, and that it serves streams (`XLEN` of the first
/// stream answers a number): a server without stream commands fails the run here rather than
/// running one error per operation.
pub(super) async fn prepare_xadd(
    w: &Workload,
    ep: &Endpoint,
    say: &impl Fn(&str),
) -> Result<(), RunError> {
    let mut c = connect(w, ep).await?;
    let server = c.server().await.map_err(|e| prep(format!("{ep}: {e}")))?;
    let name = format!("{}0", w.stream_prefix);
    ends(&mut c, &name, ep, &server).await?;
    say(&format!(
        "ingest: {ep} is {}: one XADD <stream> * per operation",
        server.name()
    ));
    Ok(())
}

/// Replay over RESP: fill the streams if asked, then list them (the streams 0…`streams`−1
/// under the prefix that hold entries: RESP has no stream listing Veltrix serves).
pub(super) async fn prepare_replay_resp(
    w: &Workload,
    ep: &Endpoint,
    say: &impl Fn(&str),
) -> Result<Vec<StreamInfo>, RunError> {
    let server = connect(w, ep)
        .await?
        .server()
        .await
        .map_err(|e| prep(format!("{ep}: {e}")))?;
    let ids = match server {
        RespServer::Veltrix => "XADD * (the server assigns <seq>-0)",
        RespServer::Other(_) => "XADD with explicit ids <seq>-0",
    };
    say(&format!(
        "replay: {ep} is {}; streams filled with {ids}",
        server.name()
    ));
    let w = Arc::new(w.clone());
    let tasks_n = PARALLEL.min(w.streams);
    let mut tasks = JoinSet::new();
    for t in 0..tasks_n {
        let (w, ep, server) = (w.clone(), ep.clone(), server.clone());
        tasks.spawn(async move {
            let mut c = connect(&w, &ep).await?;
            let mut got = Vec::new();
            let mut s = t;
            while s < w.streams {
                got.push((s, fill(&mut c, &w, &ep, &server, s).await?));
                s += tasks_n;
            }
            Ok::<_, RunError>(got)
        });
    }
    let mut all = Vec::with_capacity(w.streams as usize);
    while let Some(joined) = tasks.join_next().await {
        let got = joined.map_err(|e| prep(format!("filling streams at {ep}: {e}")))??;
        all.extend(got);
    }
    all.sort_by_key(|(s, _)| *s);
    let written: u64 = all.iter().map(|(_, (_, n))| n).sum();
    if written > 0 {
        say(&format!("replay: preloaded {written} events"));
    }
    let streams: Vec<StreamInfo> = all.into_iter().filter_map(|(_, (s, _))| s).collect();
    if streams.is_empty() {
        return Err(prep(format!(
            "no stream with entries among {p}0…{p}{} at {ep}; set preload_events",
            w.streams - 1,
            p = w.stream_prefix
        )));
    }
    Ok(streams)
}

/// A stream's length and the seqs of its first and last entries.
struct Ends {
    len: u64,
    /// `(first, last)` when it holds entries.
    seqs: Option<(u64, u64)>,
}

/// The id of the one entry an `XRANGE … COUNT 1` answered.
fn only_id(v: &Value) -> Option<(u64, u64)> {
    v.items()?
        .first()?
        .items()?
        .first()?
        .bytes()
        .and_then(parse_id)
}

/// `XLEN`, then the first and last entries (`XRANGE s - + COUNT 1`, `XREVRANGE s + - COUNT
/// 1`: the commands the run reads with, where `XINFO STREAM`'s answer differs between Redis
/// versions). Refuses a stream whose ids are not its seqs: on Redis, one written with `XADD *`.
async fn ends(
    c: &mut RespConn,
    name: &str,
    ep: &Endpoint,
    server: &RespServer,
) -> Result<Ends, RunError> {
    let n = name.as_bytes();
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        prep(format!(
            "{ep} ({}) does not serve Redis streams as the run needs: {what} {name}: {e}",
            server.name()
        ))
    };
    let len = match c.call(&[b"XLEN", n]).await.map_err(|e| fail("XLEN", &e))? {
        Value::Int(len) => u64::try_from(len).unwrap_or(0),
        // Redis answers 0 for a missing key; a server that says "not found" means the same.
        Value::Error(e) if e.contains("not_found") || e.contains("no such key") => 0,
        Value::Error(e) => return Err(fail("XLEN", &e)),
        other => return Err(fail("XLEN", &format!("{other:?}"))),
    };
    if len == 0 {
        return Ok(Ends { len, seqs: None });
    }
    let first = c
        .call(&[b"XRANGE", n, b"-", b"+", b"COUNT", b"1"])
        .await
        .map_err(|e| fail("XRANGE", &e))?;
    let last = c
        .call(&[b"XREVRANGE", n, b"+", b"-", b"COUNT", b"1"])
        .await
        .map_err(|e| fail("XREVRANGE", &e))?;
    let (Some(first), Some(last)) = (only_id(&first), only_id(&last)) else {
        return Err(fail(
            "XRANGE and XREVRANGE",
            &format!("no entry id in {first:?} and {last:?}"),
        ));
    };
    let holes = *server != RespServer::Veltrix
        && last.0.checked_sub(first.0).and_then(|d| d.checked_add(1)) != Some(len);
    if first.1 != 0 || last.1 != 0 || holes {
        return Err(prep(format!(
            "{ep} ({}): stream {name} holds {len} entries from {}-{} to {}-{}, not the ids <seq>-0 without holes (1-0, 2-0, …) that replay's XRANGE N-0 N-0 reads (a Redis stream written with XADD * has time-based ids): delete it (DEL {name}) or choose another stream_prefix",
            server.name(),
            first.0,
            first.1,
            last.0,
            last.1
        )));
    }
    Ok(Ends {
        len,
        seqs: Some((first.0, last.0)),
    })
}

/// Fill stream `s` to `preload_events` and return it (`None` when it holds no entry) and the
/// events written.
async fn fill(
    c: &mut RespConn,
    w: &Workload,
    ep: &Endpoint,
    server: &RespServer,
    s: u64,
) -> Result<(Option<StreamInfo>, u64), RunError> {
    let name = format!("{}{s}", w.stream_prefix);
    let mut have = ends(c, &name, ep, server).await?;
    let mut written = 0u64;
    if w.preload_events > have.len {
        let explicit = *server != RespServer::Veltrix;
        let mut g = IngestGen::new(w, fill_lane(s), "preload")?;
        let mut next = have.seqs.map_or(1, |(_, last)| last + 1);
        let mut need = w.preload_events - have.len;
        let mut out = Vec::new();
        while need > 0 {
            let chunk = need.min(FILL_CHUNK);
            out.clear();
            let mut id = Vec::with_capacity(24);
            for k in 0..chunk {
                id.clear();
                if explicit {
                    id.extend_from_slice(itoa::Buffer::new().format(next + k).as_bytes());
                    id.extend_from_slice(b"-0");
                } else {
                    id.push(b'*');
                }
                g.encode_xadd(name.as_bytes(), &id, &mut out);
            }
            c.tcp
                .write_all(&out)
                .await
                .map_err(|e| prep(format!("filling {name} at {ep}: {e}")))?;
            let (mut ok, mut pause) = (0u64, None);
            for k in 0..chunk {
                let reply = c
                    .read()
                    .await
                    .map_err(|e| prep(format!("filling {name} at {ep}: {e}")))?;
                match reply {
                    Value::Bulk(Some(got)) => {
                        if explicit && parse_id(&got) != Some((next + k, 0)) {
                            return Err(prep(format!(
                                "filling {name} at {ep}: XADD {}-0 answered {}",
                                next + k,
                                String::from_utf8_lossy(&got)
                            )));
                        }
                        ok += 1;
                    }
                    // Backpressure (Veltrix): the events refused are written again after the
                    // pause. Only with `*`, where the ids need no order.
                    Value::Error(e) if !explicit && e.starts_with("TRYAGAIN") => {
                        pause = Some(retry_pause(resp::retry_after(&e)));
                    }
                    other => {
                        return Err(prep(format!(
                            "filling {name} at {ep}: XADD answered {other:?}"
                        )));
                    }
                }
            }
            need -= ok;
            written += ok;
            next += ok;
            if let Some(p) = pause {
                tokio::time::sleep(p).await;
            }
        }
        have = ends(c, &name, ep, server).await?;
    }
    Ok((
        have.seqs.map(|(first_seq, last_seq)| StreamInfo {
            name,
            first_seq,
            last_seq,
        }),
        written,
    ))
}
