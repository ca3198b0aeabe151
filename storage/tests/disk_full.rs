//! A full disk: the write that does not fit is refused with `StorageFull` and its partial bytes
//! are cut off; everything acknowledged before stays readable (also after a restart); writes
//! resume once space returns. Runs on a 1 MiB tmpfs, so it needs root (CI and `scripts/test` on
//! a fresh machine run as root); where mounting is not allowed it fails saying so, rather than
//! passing without checking.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use vx_proto::{Batch, EventView, Kind};
use vx_storage::*;

struct Mount(std::path::PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

fn batch(n: usize, tag: usize) -> WriteRequest {
    let data = format!("{{\"pad\":\"{}\"}}", "x".repeat(900));
    let mut b = Batch::new();
    for i in 0..n {
        let id = format!("{tag}-{i}");
        b.push(&EventView {
            stream: "s",
            entity: None,
            ty: "t",
            ts: 1,
            kind: Kind::Event,
            value: None,
            id: Some(&id),
            data: Some(&data),
        })
        .unwrap();
    }
    WriteRequest {
        batch: b,
        durability: None,
        expected_last_seq: None,
        guard: None,
        origin: None,
        append_ms: None,
    }
}

#[test]
fn full_disk_refuses_then_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(&mnt)
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "disk_full needs to mount a 1 MiB tmpfs (run the tests as root, as CI does)"
    );
    let _guard = Mount(mnt.clone());
    let filler = mnt.join("filler");
    std::fs::write(&filler, vec![0u8; 256 << 10]).unwrap();
    let mut cfg = StorageConfig::new(mnt.join("data"));
    cfg.shards = Some(2);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let (store, _) = Store::open(cfg.clone()).unwrap();
    let mut acked = 0u64;
    let mut full = None;
    for tag in 0..200 {
        match rt.block_on(store.write(batch(20, tag))) {
            Ok(out) => acked += out.accepted,
            Err(e) => {
                full = Some((tag, e));
                break;
            }
        }
    }
    let (tag, err) = full.expect("the tmpfs never filled up");
    assert!(matches!(err, WriteError::StorageFull(_)), "{err}");
    assert!(acked > 0);
    assert_eq!(store.stream("s").unwrap().last_seq, acked);
    // Space returns: the same request now succeeds, with the next seq and no duplicates.
    std::fs::remove_file(&filler).unwrap();
    let out = rt.block_on(store.write(batch(20, tag))).unwrap();
    assert_eq!((out.accepted, out.duplicates), (20, 0));
    assert_eq!(out.last_seq, vec![("s".to_string(), acked + 20)]);
    store.shutdown();
    drop(store);
    let (store, report) = Store::open(cfg).unwrap();
    assert_eq!(
        report.truncated_bytes, 0,
        "a refused write left bytes behind"
    );
    assert_eq!(store.stream("s").unwrap().last_seq, acked + 20);
}
