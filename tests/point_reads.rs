//! Small pages (docs/API.md §5; docs/ARCHITECTURE.md, "Reader index and replay"): a page of
//! a few events is read on the async worker from the page cache, and on the blocking pool
//! when its bytes are not cached. Either way it holds exactly the events a full replay has
//! at those seqs, from the start of a request's run, its middle (found through the index's
//! samples), and across runs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use std::fs::File;

const STREAM: &str = "points";
const REQUESTS: usize = 4;
const PER_REQUEST: usize = 500;

/// Every log segment's pages written back and dropped from the page cache.
fn drop_cached_log(server: &Server) {
    let dir = server.cfg.data_dir.join("log");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let f = File::open(entry.unwrap().path()).unwrap();
        f.sync_all().unwrap();
        rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed).unwrap();
    }
}

#[tokio::test]
async fn small_pages_equal_the_full_replay_cached_or_not() {
    // Under the build's target dir, not /tmp: a tmpfs /tmp keeps its pages whatever
    // `posix_fadvise` says, and the first round would not be read cold.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let server = ServerConfig::new(dir.path().join("data")).start();
    let api = &server.api;
    let pad = "x".repeat(300);
    for r in 0..REQUESTS {
        let body: String = (0..PER_REQUEST)
            .map(|i| {
                let n = r * PER_REQUEST + i;
                format!(
                    "{{\"stream\":\"{STREAM}\",\"type\":\"t\",\"ts\":{n},\"data\":{{\"n\":{n},\"pad\":\"{pad}\"}}}}\n"
                )
            })
            .collect();
        let resp = api
            .send(
                reqwest::Method::POST,
                "/v1/events",
                &[("content-type", "application/x-ndjson")],
                Some(reqwest::Body::from(body)),
            )
            .await;
        assert_eq!(resp.status, 200, "{}", resp.text());
    }
    let total = (REQUESTS * PER_REQUEST) as u64;
    let all = api
        .get(&format!("/v1/streams/{STREAM}/events?limit=100000"))
        .await;
    let all: Vec<String> = parse_ndjson(&all).into_iter().map(|l| l.raw).collect();
    assert_eq!(all.len() as u64, total);

    let seqs = [
        1,
        2,
        33,
        250,
        499,
        500,
        501,
        777,
        1000,
        1001,
        1999,
        total - 1,
        total,
    ];
    for round in ["not cached", "cached"] {
        if round == "not cached" {
            drop_cached_log(&server);
        }
        for &from in &seqs {
            for limit in [1u64, 10, 64, 65] {
                let r = api
                    .get(&format!(
                        "/v1/streams/{STREAM}/events?from={from}&limit={limit}"
                    ))
                    .await;
                assert_eq!(r.status, 200, "{}", r.text());
                let got: Vec<String> = parse_ndjson(&r).into_iter().map(|l| l.raw).collect();
                let end = (from - 1 + limit).min(total) as usize;
                assert_eq!(
                    got,
                    all[from as usize - 1..end],
                    "{round}: from={from} limit={limit}"
                );
                let next = r.header("x-vx-next-seq").unwrap().parse::<u64>().unwrap();
                assert_eq!(next, end as u64 + 1);
            }
        }
    }
}
