//! Unit tests of the parent module.

#![allow(clippy::unwrap_used)]

use super::*;

fn all(n: u64) -> u64 {
    n - 1
}

#[test]
fn unsynced_bytes_and_names_are_lost_synced_ones_kept() {
    let fs = SimFs::new();
    let dir = Path::new("/d");
    fs.create_dir_all(dir).unwrap();
    let f = fs.open(&dir.join("a"), OpenMode::CreateNew).unwrap();
    f.write_all_at(b"hello", 0).unwrap();
    f.sync_data().unwrap();
    fs.sync_dir(dir).unwrap();
    f.write_all_at(b" world", 5).unwrap();
    let g = fs.open(&dir.join("b"), OpenMode::CreateNew).unwrap();
    g.write_all_at(b"x", 0).unwrap();
    g.sync_data().unwrap(); // data synced, but its name never was
    // Keep nothing pending.
    fs.power_cut(&mut |_| 0);
    assert!(f.len().is_err(), "handles of the last boot are dead");
    let f = fs.open(&dir.join("a"), OpenMode::Read).unwrap();
    assert_eq!(f.read_all().unwrap(), b"hello");
    assert!(!fs.exists(&dir.join("b")).unwrap());
}

#[test]
fn a_power_cut_may_keep_everything_pending() {
    let fs = SimFs::new();
    let dir = Path::new("/d");
    fs.create_dir_all(dir).unwrap();
    let f = fs.open(&dir.join("a"), OpenMode::CreateNew).unwrap();
    f.write_all_at(b"hello", 0).unwrap();
    fs.rename(&dir.join("a"), &dir.join("b")).unwrap();
    fs.power_cut(&mut all);
    let f = fs.open(&dir.join("b"), OpenMode::Read).unwrap();
    assert_eq!(f.read_all().unwrap(), b"hello");
}

#[test]
fn faults_and_freezing() {
    let fs = SimFs::new();
    let dir = Path::new("/d");
    fs.create_dir_all(dir).unwrap();
    let f = fs.open(&dir.join("a"), OpenMode::CreateNew).unwrap();
    fs.fail_next(Fault::NoSpace, 1);
    assert_eq!(
        f.write_all_at(b"abcd", 0).unwrap_err().raw_os_error(),
        Some(28)
    );
    assert_eq!(f.read_all().unwrap(), b"ab", "a full disk writes a part");
    fs.fail_next(Fault::Fsync, 1);
    assert!(f.sync_data().is_err());
    f.sync_data().unwrap();
    fs.freeze_after(1);
    f.write_all_at(b"x", 9).unwrap();
    assert!(f.sync_data().is_err());
    assert!(fs.is_frozen());
    assert!(f.read_all().is_err());
}
