//! The docs cite files that exist: every repository path in README.md and docs/*.md — in code
//! spans, code blocks and prose alike, with or without an `::item` or `:line` after it — and
//! every relative Markdown link.
//!
//! A word is taken for a repository path when it starts with one of the repository's top-level
//! directories (`src/`, `storage/`, `tests/`, `bench/` …) and looks like a file or directory:
//! its last component has an extension, or it ends with `/`, or it is a whole code span (so
//! `` `fuzz/target` `` counts, and "ingest/replay throughput" does not). Paths under what
//! `.gitignore` keeps out of the repository (build output, the fuzzers' corpus) are generated,
//! not cited files, and a pattern (`fuzz/corpus/<target>/`, `src/{a,b}.rs`) only needs its
//! directory. URL paths (`/v1/streams/…`) start with `/` and are not repository paths.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// What `.gitignore` keeps out of the repository: anchored paths, each with what is under it.
struct Generated(Vec<String>);

impl Generated {
    fn read() -> Generated {
        let text = std::fs::read_to_string(Path::new(ROOT).join(".gitignore")).unwrap();
        let mut paths = Vec::new();
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            assert!(
                !line.contains(['*', '?', '[', '!']),
                ".gitignore line {line:?}: only plain paths are read here"
            );
            paths.push(line.trim_matches('/').to_string());
        }
        Generated(paths)
    }

    fn contains(&self, path: &str) -> bool {
        self.0
            .iter()
            .any(|g| path == g || path.starts_with(&format!("{g}/")))
    }
}

/// The repository's top-level directories, less generated ones.
fn top_dirs(generated: &Generated) -> Vec<String> {
    std::fs::read_dir(ROOT)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_dir())
        .map(|e| e.file_name().into_string().unwrap())
        .filter(|n| n != ".git" && !generated.contains(n))
        .collect()
}

fn docs() -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = std::fs::read_dir(Path::new(ROOT).join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    docs.insert(0, Path::new(ROOT).join("README.md"));
    docs
}

fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '/' | '*')
}

/// What a citation must find.
#[derive(Debug)]
enum Cite {
    /// A file or directory, relative to the repository's root.
    Path(String),
    /// A pattern's directory (up to its last `/`).
    Dir(String),
    /// A Markdown link's target, relative to the document.
    Link(String),
}

/// The byte offsets where a line's code spans start (just after their opening backtick).
fn span_starts(line: &str) -> Vec<usize> {
    let ticks: Vec<usize> = line.match_indices('`').map(|(i, _)| i + 1).collect();
    ticks
        .chunks(2)
        .filter(|p| p.len() == 2)
        .map(|p| p[0])
        .collect()
}

/// The targets of a line's relative Markdown links (`[text](target)`), anchors included.
fn links(line: &str) -> impl Iterator<Item = &str> {
    line.match_indices("](").filter_map(|(i, _)| {
        let target = line[i + 2..].split([')', ' ']).next()?;
        let external = target.contains("://") || target.starts_with(['#', '<']);
        (!target.is_empty() && !external && !target.starts_with("mailto:")).then_some(target)
    })
}

/// The citations of one line.
fn cites(line: &str, tops: &[String], generated: &Generated) -> Vec<Cite> {
    let spans = span_starts(line);
    let mut out: Vec<Cite> = links(line).map(|l| Cite::Link(l.to_string())).collect();
    let mut rest = line.char_indices().peekable();
    while let Some((start, c)) = rest.next() {
        if !is_path_char(c) || (start > 0 && line[..start].ends_with(is_path_char)) {
            continue;
        }
        let mut end = start + c.len_utf8();
        while let Some(&(i, c)) = rest.peek() {
            if !is_path_char(c) {
                break;
            }
            end = i + c.len_utf8();
            rest.next();
        }
        let word = line[start..end].trim_end_matches(['.', ',']);
        let after = line[end..].chars().next();
        if !word.contains('/') || line[..start].ends_with("](") {
            continue;
        }
        let first = word.split('/').next().unwrap();
        if !tops.iter().any(|t| t == first) || generated.contains(word.trim_end_matches('/')) {
            continue;
        }
        let last = word.trim_end_matches('/').rsplit('/').next().unwrap();
        let whole_span = spans.contains(&start);
        let pattern = word.contains('*') || matches!(after, Some('{' | '<' | '…' | '['));
        if pattern {
            out.push(Cite::Dir(word[..=word.rfind('/').unwrap()].to_string()));
        } else if word.ends_with('/') || last.contains('.') || whole_span {
            out.push(Cite::Path(word.to_string()));
        }
    }
    out
}

#[test]
fn every_repository_path_the_docs_cite_exists() {
    let root = Path::new(ROOT);
    let generated = Generated::read();
    let tops = top_dirs(&generated);
    assert!(tops.iter().any(|t| t == "src"), "{tops:?}");
    let mut missing = Vec::new();
    let mut checked = 0;
    for doc in docs() {
        let text = std::fs::read_to_string(&doc).unwrap();
        let name = doc.strip_prefix(root).unwrap().display().to_string();
        for (n, line) in text.lines().enumerate() {
            for cite in cites(line, &tops, &generated) {
                checked += 1;
                let found = match &cite {
                    Cite::Path(p) => root.join(p).exists(),
                    Cite::Dir(d) => root.join(d).is_dir(),
                    Cite::Link(l) => {
                        let target = l.split('#').next().unwrap();
                        doc.parent().unwrap().join(target).exists()
                    }
                };
                if !found {
                    missing.push(format!("{name}:{}: {cite:?}", n + 1));
                }
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} citations found: is the scan broken?"
    );
    assert!(
        missing.is_empty(),
        "cited paths that do not exist:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_scan_takes_paths_and_leaves_other_words() {
    let generated = Generated(vec!["fuzz/corpus".into()]);
    let tops: Vec<String> = ["src", "ingest", "fuzz", "docs"].map(String::from).into();
    let got = |line: &str| format!("{:?}", cites(line, &tops, &generated));
    assert_eq!(
        got("see `src/http/replay.rs::open` and src/main.rs:12."),
        r#"[Path("src/http/replay.rs"), Path("src/main.rs")]"#
    );
    assert_eq!(got("bench/run.sh  # ingest/replay throughput"), "[]");
    assert_eq!(
        got("code in `src/http/` and `src/otlp`"),
        r#"[Path("src/http/"), Path("src/otlp")]"#
    );
    assert_eq!(
        got("GET /v1/features/{entity} on localhost:7100/v1/x"),
        "[]"
    );
    assert_eq!(
        got("`fuzz/corpus/ndjson/` and fuzz/artifacts/<target>/"),
        r#"[Dir("fuzz/artifacts/")]"#
    );
    assert_eq!(
        got("![plot](bench/a.svg) [API](API.md#x)"),
        r#"[Link("bench/a.svg"), Link("API.md#x")]"#
    );
}
