//! The build context as Docker sends it: the repository less what `.dockerignore` excludes,
//! matched as Docker matches it (patterns relative to the context's root, `*` and `?` within
//! one path component, `**` for any number of components, a pattern that matches a directory
//! excluding everything under it, `!` exceptions, the last matching line deciding). Only that
//! syntax: a file using more (character classes, escapes) fails the test rather than be
//! misread.

use std::path::Path;

pub const DOCKERIGNORE: &str = include_str!("../../.dockerignore");

/// One `.dockerignore` line.
struct Rule {
    /// The pattern's path components.
    parts: Vec<String>,
    /// A `!` exception: what it matches is kept.
    keep: bool,
}

pub struct Ignore(Vec<Rule>);

impl Ignore {
    pub fn parse(text: &str) -> Ignore {
        let mut rules = Vec::new();
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            assert!(
                !line.contains(['[', '\\']),
                ".dockerignore line {line:?}: character classes and escapes are not read here"
            );
            let (keep, pattern) = match line.strip_prefix('!') {
                Some(p) => (true, p.trim()),
                None => (false, line),
            };
            let parts: Vec<String> = pattern
                .split('/')
                .filter(|c| !c.is_empty() && *c != ".")
                .map(str::to_string)
                .collect();
            if !parts.is_empty() {
                rules.push(Rule { parts, keep });
            }
        }
        Ignore(rules)
    }

    pub fn read() -> Ignore {
        Ignore::parse(DOCKERIGNORE)
    }

    /// Whether `rel` (a path relative to the context's root, `/`-separated) stays out.
    pub fn excludes(&self, rel: &str) -> bool {
        let path: Vec<&str> = rel.split('/').filter(|c| !c.is_empty()).collect();
        let mut out = false;
        for rule in &self.0 {
            // A pattern matching the path or one of the directories it is in.
            if (1..=path.len()).any(|n| components(&rule.parts, &path[..n])) {
                out = !rule.keep;
            }
        }
        out
    }

    fn has_exceptions(&self) -> bool {
        self.0.iter().any(|r| r.keep)
    }

    /// Copy the context rooted at `root` into `dest`: what `COPY . .` would put there.
    pub fn copy_context(&self, root: &Path, dest: &Path) {
        self.copy_dir(root, dest, "");
    }

    fn copy_dir(&self, from: &Path, to: &Path, rel: &str) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().into_string().expect("a UTF-8 file name");
            let rel = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            let kind = entry.file_type().unwrap();
            let excluded = self.excludes(&rel);
            if kind.is_dir() {
                // Without exceptions nothing under an excluded directory comes back.
                if !excluded || self.has_exceptions() {
                    self.copy_dir(&entry.path(), &to.join(&name), &rel);
                }
            } else if !excluded {
                if kind.is_symlink() {
                    let target = std::fs::read_link(entry.path()).unwrap();
                    std::os::unix::fs::symlink(target, to.join(&name)).unwrap();
                } else {
                    std::fs::copy(entry.path(), to.join(&name)).unwrap();
                }
            }
        }
    }
}

/// Whether pattern components match path components (`**` matching any number of them).
fn components(pattern: &[String], path: &[&str]) -> bool {
    match pattern.split_first() {
        None => path.is_empty(),
        Some((p, rest)) if p == "**" => (0..=path.len()).any(|i| components(rest, &path[i..])),
        Some((p, rest)) => match path.split_first() {
            Some((c, tail)) => {
                let (p, c): (Vec<char>, Vec<char>) = (p.chars().collect(), c.chars().collect());
                glob(&p, &c) && components(rest, tail)
            }
            None => false,
        },
    }
}

/// One component against a pattern of literal characters, `*` and `?`.
fn glob(p: &[char], s: &[char]) -> bool {
    match p.split_first() {
        None => s.is_empty(),
        Some(('*', rest)) => (0..=s.len()).any(|i| glob(rest, &s[i..])),
        Some(('?', rest)) => !s.is_empty() && glob(rest, &s[1..]),
        Some((c, rest)) => s.first() == Some(c) && glob(rest, &s[1..]),
    }
}

#[test]
fn the_matcher_reads_patterns_as_docker_does() {
    let ig = Ignore::parse("target/\n**/target/\n/docs/bench\n*.svg\nfuzz/c?rpus\n# a comment\n");
    for out in [
        "target",
        "target/debug/veltrix",
        "fuzz/target/x",
        "a/b/target",
        "docs/bench/x.txt",
        "plot.svg",
        "fuzz/corpus/ndjson/1",
    ] {
        assert!(ig.excludes(out), "{out} is excluded");
    }
    // `*.svg` is anchored at the root, as in Docker (not in .gitignore).
    for kept in [
        "src/main.rs",
        "docs/plot.svg",
        "targets",
        "docs/benchmarks.md",
        "# a comment",
    ] {
        assert!(!ig.excludes(kept), "{kept} is kept");
    }
    let ig = Ignore::parse("docs\n!docs/README.md\n");
    assert!(ig.excludes("docs/API.md"));
    assert!(!ig.excludes("docs/README.md"));
}

#[test]
fn dockerignore_keeps_build_output_and_data_out_of_the_context() {
    let ig = Ignore::read();
    for out in [
        "target/release/veltrix",
        "fuzz/target/x",
        ".git",
        ".git/HEAD",
        "veltrix-data/LOCK",
        "fuzz/corpus/ndjson/1",
    ] {
        assert!(ig.excludes(out), "{out} is sent to the Docker daemon");
    }
}
