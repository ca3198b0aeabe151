//! Heap per in-flight YAML document: peak heap while decoding a YAML stream, minus what the
//! decoded `Batch` itself holds, for growing numbers and sizes of documents. A measurement
//! (`--ignored --nocapture`), reported in docs/BENCHMARKS.md:
//!
//! `cargo test --release -p vx-proto --test yaml_heap -- --ignored --nocapture`

#![allow(unsafe_code, clippy::unwrap_used, clippy::expect_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use vx_proto::Batch;
use vx_proto::decode::{Decoder, Format, decode_yaml};

struct Counting;
static CUR: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator and only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            let now = CUR.fetch_add(l.size(), Ordering::Relaxed) + l.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) };
        CUR.fetch_sub(l.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static A: Counting = Counting;

fn stream(docs: usize, pad: usize) -> Vec<u8> {
    let mut out = String::new();
    let text = "x".repeat(pad);
    for i in 0..docs {
        out.push_str(&format!(
            "---\nstream: s{}\ntype: t\nentity: p{i}\nkind: gauge\nvalue: 1.5\ndata:\n  text: {text}\n  n: [1, 2, {{a: b}}]\n",
            i % 10
        ));
    }
    out.into_bytes()
}

fn ndjson(docs: usize, pad: usize) -> Vec<u8> {
    let text = "x".repeat(pad);
    let mut out = String::new();
    for i in 0..docs {
        out.push_str(&format!(
            "{{\"stream\":\"s{}\",\"type\":\"t\",\"entity\":\"p{i}\",\"kind\":\"gauge\",\"value\":1.5,\"data\":{{\"text\":\"{text}\",\"n\":[1,2,{{\"a\":\"b\"}}]}}}}\n",
            i % 10
        ));
    }
    out.into_bytes()
}

/// Peak heap during a decode beyond what the decoded batch holds at the end. That includes the
/// output arena's growth (a `Vec` briefly holds old and new buffer when it doubles), which is
/// the same for every format: compare against NDJSON to get the decoder's own share.
fn overhead(body: &[u8], yaml: bool) -> (usize, usize) {
    let mut batch = Batch::new();
    let base = CUR.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    if yaml {
        // A reader that hands out 64 KiB at a time, like the HTTP body bridge.
        let reader = std::io::BufReader::with_capacity(64 << 10, body);
        decode_yaml(reader, 1 << 20, u64::MAX, 0, &mut batch).unwrap();
    } else {
        let mut d = Decoder::new(Format::Ndjson, 1 << 20, 0).unwrap();
        for chunk in body.chunks(64 << 10) {
            d.feed(chunk, &mut batch).unwrap();
        }
        d.finish(&mut batch).unwrap();
    }
    let peak = PEAK.load(Ordering::Relaxed) - base;
    let held = CUR.load(Ordering::Relaxed) - base;
    (peak.saturating_sub(held), batch.len())
}

#[test]
#[ignore = "measurement; run with --release -- --ignored --nocapture"]
fn heap_per_yaml_document() {
    println!(
        "docs  doc_bytes  body_bytes  events  yaml_peak_beyond_output  ndjson_same_events  yaml_minus_ndjson"
    );
    for &pad in &[16usize, 4096, 262_144] {
        for &docs in &[10usize, 100, 1000] {
            if pad * docs > 64 << 20 {
                continue;
            }
            let body = stream(docs, pad);
            let (extra, events) = overhead(&body, true);
            let (nd, nd_events) = overhead(&ndjson(docs, pad), false);
            assert_eq!(events, nd_events);
            println!(
                "{docs:>5}  {:>9}  {:>10}  {events:>6}  {extra:>23}  {nd:>18}  {:>17}",
                body.len() / docs,
                body.len(),
                extra as i64 - nd as i64
            );
        }
    }
}
