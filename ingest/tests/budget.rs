//! The in-flight budget: readers wait for budget instead of failing, and never deadlock.
//! Futures are polled by hand so that "still waiting" is observed without timing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Poll;

use bytes::Bytes;
use futures_util::{Stream, StreamExt, poll, stream};
use tokio::sync::mpsc;
use vx_ingest::{Format, InflightBudget, Limits, decode_body};

type Body = Pin<Box<dyn Stream<Item = Result<Bytes, Infallible>> + Send>>;

/// A body whose chunks the test sends one at a time; dropping the sender ends it.
fn channel_body() -> (mpsc::UnboundedSender<Bytes>, Body) {
    let (tx, rx) = mpsc::unbounded_channel::<Bytes>();
    let body = stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|c| (Ok::<_, Infallible>(c), rx))
    });
    (tx, Box::pin(body))
}

/// An NDJSON event of exactly `n` (≥ 36) bytes, newline included.
fn line(n: usize) -> Bytes {
    let head = r#"{"stream":"s","type":"t","data":""#;
    let pad = n - head.len() - 3;
    Bytes::from(format!("{head}{}\"}}\n", "x".repeat(pad)))
}

#[tokio::test]
async fn a_reader_waits_for_budget_and_leaves_its_body_unread() {
    let budget = InflightBudget::new(1000);
    let limits = Limits::default();
    // The first request takes the whole budget and keeps it (its batch is not admitted yet).
    let first = stream::iter(vec![Ok::<_, Infallible>(line(600)), Ok(line(600))]);
    let (batch, held) = decode_body(first, Format::Ndjson, &limits, &budget, 0)
        .await
        .unwrap();
    assert_eq!(batch.len(), 2);
    assert_eq!((held.bytes(), budget.available()), (1000, 0));

    let pulled = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&pulled);
    let second = stream::iter(vec![Ok::<_, Infallible>(line(500)); 3]).inspect(move |_| {
        counter.fetch_add(1, Ordering::SeqCst);
    });
    let mut waiting = Box::pin(decode_body(second, Format::Ndjson, &limits, &budget, 0));
    assert!(poll!(&mut waiting).is_pending());
    assert!(poll!(&mut waiting).is_pending());
    // It read one chunk and waits for budget for it: the rest of its body stays unread.
    assert_eq!(pulled.load(Ordering::SeqCst), 1);

    drop(held);
    let (batch, permit) = waiting.await.unwrap();
    assert_eq!(batch.len(), 3);
    assert_eq!(pulled.load(Ordering::SeqCst), 3);
    assert_eq!(permit.bytes(), 1000, "clamped to the whole budget");
    drop(permit);
    assert_eq!(budget.available(), 1000);
}

#[tokio::test]
async fn two_readers_holding_part_each_do_not_deadlock() {
    let budget = InflightBudget::new(1000);
    let limits = Limits::default();
    let (tx_a, body_a) = channel_body();
    let (tx_b, body_b) = channel_body();
    let mut a = Box::pin(decode_body(body_a, Format::Ndjson, &limits, &budget, 0));
    let mut b = Box::pin(decode_body(body_b, Format::Ndjson, &limits, &budget, 0));

    tx_a.send(line(600)).unwrap();
    assert!(poll!(&mut a).is_pending());
    tx_b.send(line(400)).unwrap();
    assert!(poll!(&mut b).is_pending());
    assert_eq!(budget.available(), 0);

    // Both need more and the budget is spent. B (younger) waits; A (oldest) goes on beyond
    // the budget rather than wait for B, which would wait for A.
    tx_b.send(line(300)).unwrap();
    assert!(poll!(&mut b).is_pending());
    tx_a.send(line(500)).unwrap();
    drop(tx_a);
    // The timeout only turns a deadlock into a failure instead of a hang.
    let (batch_a, permit_a) = tokio::time::timeout(std::time::Duration::from_secs(60), a)
        .await
        .expect("the oldest reader waited")
        .unwrap();
    assert_eq!(batch_a.len(), 2);
    // Accounted up to the whole budget, 400 of it beyond what the semaphore had.
    assert_eq!((permit_a.bytes(), budget.available()), (1000, 0));
    drop(tx_b);
    assert!(poll!(&mut b).is_pending());

    // A's batch is done with: B gets the budget and finishes.
    drop(permit_a);
    let (batch_b, permit_b) = b.await.unwrap();
    assert_eq!(batch_b.len(), 2);
    assert_eq!(permit_b.bytes(), 700);
    assert_eq!(budget.available(), 300);
    drop(permit_b);
    assert_eq!(budget.available(), 1000);
}

#[tokio::test]
async fn released_budget_wakes_a_younger_reader() {
    let budget = InflightBudget::new(1000);
    let limits = Limits::default();
    // The oldest request holds a little and is idle (its client is slow).
    let (_tx_old, body_old) = channel_body();
    let mut old = Box::pin(decode_body(body_old, Format::Ndjson, &limits, &budget, 0));
    _tx_old.send(line(100)).unwrap();
    assert!(poll!(&mut old).is_pending());
    // A younger one took the rest and finished decoding.
    let full = stream::iter(vec![Ok::<_, Infallible>(line(900))]);
    let (_, held) = decode_body(full, Format::Ndjson, &limits, &budget, 0)
        .await
        .unwrap();
    // A third waits: it is not the oldest.
    let third = stream::iter(vec![Ok::<_, Infallible>(line(200))]);
    let mut third = Box::pin(decode_body(third, Format::Ndjson, &limits, &budget, 0));
    assert!(poll!(&mut third).is_pending());
    drop(held);
    let (batch, permit) = third.await.unwrap();
    assert_eq!((batch.len(), permit.bytes()), (1, 200));
    assert!(matches!(poll!(&mut old), Poll::Pending));
}

#[tokio::test]
async fn a_chunk_larger_than_the_whole_budget_does_not_deadlock() {
    let budget = InflightBudget::new(100);
    let body = stream::iter(vec![Ok::<_, Infallible>(line(10000))]);
    let (batch, permit) = decode_body(body, Format::Ndjson, &Limits::default(), &budget, 0)
        .await
        .unwrap();
    assert_eq!(batch.len(), 1);
    // A request never holds more than the whole budget.
    assert_eq!((permit.bytes(), budget.available()), (100, 0));
    drop(permit);
    assert_eq!(budget.available(), 100);
}

#[tokio::test]
async fn budgets_beyond_4_gib() {
    let budget = InflightBudget::new(8 << 30);
    assert_eq!(budget.available(), 8 << 30);
    let mut p = budget.begin();
    p.grow(5 << 30).await;
    assert_eq!((p.bytes(), budget.available()), (5 << 30, 3 << 30));
    p.grow(4 << 30).await;
    assert_eq!((p.bytes(), budget.available()), (8 << 30, 0));
    drop(p);
    assert_eq!(budget.available(), 8 << 30);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_concurrent_readers_all_finish() {
    let budget = InflightBudget::new(1000);
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let budget = budget.clone();
        tasks.push(tokio::spawn(async move {
            let chunks: Vec<Result<Bytes, Infallible>> = (0..10).map(|_| Ok(line(300))).collect();
            // Yield between chunks so that the readers interleave.
            let body = stream::iter(chunks).then(|c| async move {
                tokio::task::yield_now().await;
                c
            });
            let (batch, permit) = decode_body(
                Box::pin(body),
                Format::Ndjson,
                &Limits::default(),
                &budget,
                0,
            )
            .await
            .unwrap();
            tokio::task::yield_now().await;
            drop(permit);
            batch.len()
        }));
    }
    // A deadlock would hang here; the timeout only turns a hang into a failure.
    let all = tokio::time::timeout(std::time::Duration::from_secs(60), async {
        let mut n = 0;
        for t in tasks {
            n += t.await.unwrap();
        }
        n
    })
    .await
    .expect("readers deadlocked");
    assert_eq!(all, 640);
    assert_eq!(budget.available(), 1000);
}
