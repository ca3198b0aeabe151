//! docs/DEPENDENCIES.md is true to the Cargo.toml files: every external crate a manifest of the
//! workspace (or the fuzz crate) names is explained there, and every crate a table row explains
//! is named by some manifest. Read as text: the manifests' dependency sections, and the first
//! cell of the document's table rows (feature lists in parentheses left out).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Every manifest: the root, its members (the `members` line), and the fuzz crate.
fn manifests() -> Vec<PathBuf> {
    let root = Path::new(ROOT);
    let text = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let members = text
        .lines()
        .find(|l| l.starts_with("members"))
        .expect("a members line");
    let mut out = vec![root.join("Cargo.toml"), root.join("fuzz/Cargo.toml")];
    for m in members.split('"').skip(1).step_by(2) {
        out.push(root.join(m).join("Cargo.toml"));
    }
    out
}

/// The dependency names a manifest declares, in any dependency section.
fn declared(manifest: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(manifest).unwrap();
    let mut names = BTreeSet::new();
    let mut in_deps = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line.ends_with("dependencies]");
            continue;
        }
        if !in_deps || line.is_empty() || line.starts_with('#') {
            continue;
        }
        let name = line
            .split(['=', '.', ' '])
            .next()
            .unwrap()
            .trim_matches('"');
        names.insert(name.to_string());
    }
    names
}

/// Our own crates: explained by docs/ARCHITECTURE.md, not here.
fn ours(name: &str) -> bool {
    name.starts_with("vx-") || name == "veltrix"
}

/// The crate names the document's tables explain (up to its "Not used" section).
fn documented() -> BTreeSet<String> {
    let text = std::fs::read_to_string(Path::new(ROOT).join("docs/DEPENDENCIES.md")).unwrap();
    let mut names = BTreeSet::new();
    for line in text.lines().take_while(|l| !l.starts_with("## Not used")) {
        let Some(cell) = line.strip_prefix("| ").and_then(|l| l.split(" |").next()) else {
            continue;
        };
        if cell.contains("not a Rust crate") || cell.contains("not Rust crates") {
            continue;
        }
        // Drop parenthesized feature lists and notes.
        let mut plain = String::new();
        let mut depth = 0u32;
        for c in cell.chars() {
            match c {
                '(' => depth += 1,
                ')' => depth = depth.saturating_sub(1),
                _ if depth == 0 => plain.push(c),
                _ => {}
            }
        }
        for name in plain.split('`').skip(1).step_by(2) {
            if !name.contains("::") && !name.contains(' ') {
                names.insert(name.to_string());
            }
        }
    }
    names
}

#[test]
fn every_dependency_is_explained_and_every_explanation_is_a_dependency() {
    let mut declared_all = BTreeSet::new();
    for m in manifests() {
        declared_all.extend(declared(&m).into_iter().filter(|n| !ours(n)));
    }
    let documented = documented();
    let unexplained: Vec<_> = declared_all.difference(&documented).collect();
    assert!(
        unexplained.is_empty(),
        "crates in a Cargo.toml that docs/DEPENDENCIES.md does not explain: {unexplained:?}"
    );
    let stale: Vec<_> = documented
        .iter()
        .filter(|n| !ours(n) && !declared_all.contains(*n))
        .collect();
    assert!(
        stale.is_empty(),
        "crates docs/DEPENDENCIES.md explains that no Cargo.toml names: {stale:?}"
    );
}
