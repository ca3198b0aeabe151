//! `veltrix check DATA_DIR`: print `vx_storage::check`'s report of a data dir, one line per
//! file and a summary, and fail (exit 1) when anything is corrupt, naming file and offset.

use std::path::Path;
use vx_storage::check::{self, Kind, Status};

pub fn run(data_dir: &Path) -> anyhow::Result<()> {
    let report = check::check(data_dir)?;
    for f in &report.files {
        let kind = match f.kind {
            Kind::Meta => "meta",
            Kind::Segment => "segment",
            Kind::ActiveSegment => "segment (active)",
            Kind::Index => "index",
            Kind::Snapshot => "snapshot",
            Kind::Carry => "carry",
        };
        let verdict = match &f.status {
            Status::Ok => "ok".to_string(),
            Status::Tail { offset, reason } => format!(
                "ok, incomplete tail at offset {offset} ({reason}): a write in progress, or a \
                 torn tail start-up truncates"
            ),
            Status::Note(n) => format!("note: {n}"),
            Status::Corrupt { offset, reason } => {
                format!("CORRUPT at offset {offset}: {reason}")
            }
        };
        let summary = if f.summary.is_empty() {
            String::new()
        } else {
            format!(" [{}]", f.summary)
        };
        println!("{kind:<16} {}: {verdict}{summary}", f.path.display());
    }
    let corrupt: Vec<_> = report.corrupt().collect();
    println!(
        "{} files checked, {} records, {} events: {}",
        report.files.len(),
        report.records,
        report.events,
        if corrupt.is_empty() {
            "no corruption found".to_string()
        } else {
            format!("{} corrupt", corrupt.len())
        }
    );
    match corrupt.first() {
        None => Ok(()),
        Some(f) => {
            let (offset, reason) = match &f.status {
                Status::Corrupt { offset, reason } => (*offset, reason.as_str()),
                _ => (0, ""),
            };
            anyhow::bail!(
                "{} is corrupt at offset {offset}: {reason}{}",
                f.path.display(),
                if corrupt.len() > 1 {
                    format!(" (and {} more files)", corrupt.len() - 1)
                } else {
                    String::new()
                }
            )
        }
    }
}
