//! How the image is built, checked where no container builder runs (none does on these
//! machines):
//! - the dependency layer: the Dockerfile's own cargo-chef steps run on a copy of the build
//!   context (`prepare` in the planner stage's place, `cook --no-build` in the build stage's:
//!   everything but compiling), and cargo must load the skeleton they leave with the
//!   repository's lock file, finding every workspace member with its targets and the same
//!   dependency graph for `-p veltrix`. A member, a target or the lock file missing from the
//!   layer fails here, as `docker build` would fail at that layer;
//! - the final build: every repository file the build of the binary reads (its dep-info) is in
//!   the build context, not kept out by `.dockerignore`;
//! - the runtime image: the binary needs no shared library that distroless's `cc` image lacks.
//!
//! What is not checked: the compiling itself in the image's Rust toolchain, the base images'
//! tags and the download of crates (docs: README "In a container").

use crate::context::Ignore;
use crate::dockerfile::{Stage, copy_from, stage, stages};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The release build of the image, which the dependency layer is cooked for.
pub const BUILD: &str = "cargo build --release --locked -p veltrix";

/// The shared libraries `gcr.io/distroless/cc-debian12` holds: its packages (distroless's
/// `base` and `cc` lists for debian12) libc6, libssl3, libgcc-s1, libstdc++6 and libgomp1.
const RUNTIME_LIBS: [&str; 12] = [
    "libc.so.6",
    "libm.so.6",
    "libdl.so.2",
    "libpthread.so.0",
    "librt.so.1",
    "libresolv.so.2",
    "libgcc_s.so.1",
    "libstdc++.so.6",
    "libgomp.so.1",
    "libssl.so.3",
    "libcrypto.so.3",
    "libutil.so.1",
];

/// A shell command of a `RUN` line in `dir`; fails the test with its output unless it succeeds.
fn sh(cmd: &str, dir: &Path) {
    let out = Command::new("sh")
        .args(["-c", cmd])
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("sh -c {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "`{cmd}` in {}: {}\n{}{}",
        dir.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Cargo in `dir`, offline and with the lock file as it is; its standard output.
fn cargo(dir: &Path, args: &[&str]) -> String {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args(args)
        .args(["--locked", "--offline"])
        .current_dir(dir)
        .output()
        .expect("run cargo");
    assert!(
        out.status.success(),
        "cargo {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The workspace members cargo finds in `dir`: each member's name, and `member: kind target`
/// for each of its targets.
fn members(dir: &Path) -> BTreeSet<String> {
    let meta = cargo(dir, &["metadata", "--no-deps", "--format-version", "1"]);
    let meta: serde_json::Value = serde_json::from_str(&meta).unwrap();
    let ids: Vec<&serde_json::Value> = meta["workspace_members"]
        .as_array()
        .unwrap()
        .iter()
        .collect();
    let mut out = BTreeSet::new();
    for p in meta["packages"].as_array().unwrap() {
        if !ids.contains(&&p["id"]) {
            continue;
        }
        let name = p["name"].as_str().unwrap();
        for t in p["targets"].as_array().unwrap() {
            let kinds: Vec<&str> = t["kind"]
                .as_array()
                .unwrap()
                .iter()
                .map(|k| k.as_str().unwrap())
                .collect();
            let target = t["name"].as_str().unwrap();
            out.insert(format!("{name}: {} {target}", kinds.join(",")));
        }
        out.insert(name.to_string());
    }
    out
}

/// Fails the test unless the dependency layer's `what` equals the repository's, naming what
/// one has and the other lacks.
fn same(what: &str, layer: &BTreeSet<String>, repo: &BTreeSet<String>) {
    let missing: Vec<&String> = repo.difference(layer).collect();
    let extra: Vec<&String> = layer.difference(repo).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{what}: the dependency layer lacks {missing:?} and has {extra:?} the repository lacks"
    );
}

/// The packages `-p veltrix` builds (normal and build dependencies), as `name version`, the
/// workspace's own under their name alone (cargo-chef masks their versions).
fn graph(dir: &Path, ours: &BTreeSet<String>) -> BTreeSet<String> {
    let tree = cargo(
        dir,
        &[
            "tree",
            "-p",
            "veltrix",
            "-e",
            "normal,build",
            "--prefix",
            "none",
            "-f",
            "{p}",
        ],
    );
    tree.lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let (name, version) = (words.next()?, words.next()?);
            Some(if ours.contains(name) {
                name.to_string()
            } else {
                format!("{name} {version}")
            })
        })
        .collect()
}

/// The cargo-chef version the chef stage installs, which must be the one installed here.
fn chef_here(chef: &Stage) -> String {
    let install = chef.last("RUN");
    let version = install
        .strip_prefix("cargo install cargo-chef --locked --version ")
        .unwrap_or_else(|| panic!("the chef stage installs a pinned cargo-chef: {install}"))
        .trim()
        .to_string();
    let out = Command::new("cargo").args(["chef", "--version"]).output();
    let got = out
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    assert!(
        got.as_deref()
            .is_some_and(|v| v.ends_with(&format!(" {version}"))),
        "cargo-chef {version} checks the Dockerfile's dependency layer; found {got:?}. \
         Install it: cargo install cargo-chef --locked --version {version} (scripts/test does)"
    );
    version
}

/// The build stage's steps: the recipe from the planner, the cook, the sources, the build.
/// Returns the recipe's path in the planner and in the build stage, and the cook command.
fn build_steps<'a>(build: &'a Stage, workdir: &str) -> (String, &'a str, &'a str) {
    let steps = build.steps();
    let [
        ("COPY", recipe),
        ("RUN", cook),
        ("COPY", ". ."),
        ("RUN", release),
    ] = steps[..]
    else {
        panic!("the build stage: recipe, cook, sources, build: {steps:?}");
    };
    assert!(release.starts_with(&format!("{BUILD} ")), "{release}");
    let (from, paths) = copy_from(recipe).expect("COPY --from=planner");
    assert_eq!(from, "planner");
    let [src, dst] = paths[..] else {
        panic!("COPY --from=planner SRC DST: {recipe}")
    };
    let src = src
        .strip_prefix(&format!("{workdir}/"))
        .unwrap_or_else(|| panic!("the recipe is taken from the planner's {workdir}: {src}"));
    assert!(
        cook.starts_with("cargo chef cook ") && !cook.contains(['&', ';', '|']),
        "one cook command: {cook}"
    );
    // Cooked for the build that follows: the same profile, lock file and package.
    let words: Vec<&str> = cook.split_whitespace().collect();
    for flag in ["--release", "--locked"] {
        assert!(words.contains(&flag), "the cook has {flag}: {cook}");
    }
    assert!(
        words.windows(2).any(|w| w == ["-p", "veltrix"]),
        "the cook is for -p veltrix: {cook}"
    );
    assert!(
        words.contains(&"--recipe-path") && words.contains(&dst),
        "{cook}"
    );
    (src.to_string(), dst, cook)
}

#[test]
fn the_dependency_layer_covers_the_workspace() {
    let stages = stages();
    let chef = stage(&stages, "chef");
    let planner = stage(&stages, "planner");
    let build = stage(&stages, "build");
    assert_eq!((planner.base(), build.base()), ("chef", "chef"));
    let workdir = chef.last("WORKDIR");
    let planned = planner.steps();
    let [("COPY", ". ."), ("RUN", prepare)] = planned[..] else {
        panic!("the planner stage: the context, then `cargo chef prepare`: {planned:?}");
    };
    assert!(prepare.starts_with("cargo chef prepare "), "{prepare}");
    let (recipe, recipe_dst, cook) = build_steps(build, workdir);
    chef_here(chef);

    let tmp = tempfile::tempdir().unwrap();
    let context = tmp.path().join("context");
    Ignore::read().copy_context(Path::new(ROOT), &context);
    sh(prepare, &context);
    let layer = tmp.path().join("build");
    std::fs::create_dir_all(&layer).unwrap();
    std::fs::copy(context.join(&recipe), layer.join(recipe_dst)).unwrap();
    sh(&format!("{cook} --no-build"), &layer);

    let root = Path::new(ROOT);
    let repo_members = members(root);
    same(
        "workspace members and targets",
        &members(&layer),
        &repo_members,
    );
    let ours: BTreeSet<String> = repo_members
        .into_iter()
        .filter(|m| !m.contains(':'))
        .collect();
    same(
        "the packages of -p veltrix",
        &graph(&layer, &ours),
        &graph(root, &ours),
    );
}

/// The paths of a dep-info rule's right side (`target: dep dep …`, spaces escaped).
fn rule_deps(deps: &str) -> Vec<String> {
    let mut files = vec![String::new()];
    let mut chars = deps.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => files.last_mut().unwrap().extend(chars.next()),
            ' ' => files.push(String::new()),
            c => files.last_mut().unwrap().push(c),
        }
    }
    files.retain(|f| !f.is_empty());
    files
}

/// Whether a dep-info rule's target is part of the binary's build: a compiled workspace
/// library (`.rlib`; a `.rmeta` alone is a `cargo check`/clippy pass, which also covers test
/// targets) or the binary itself (`deps/veltrix-<hash>`, which cargo hard-links to
/// `CARGO_BIN_EXE_veltrix`).
fn builds_the_binary(target: &Path, bin_ino: u64) -> bool {
    use std::os::unix::fs::MetadataExt;
    match target.extension() {
        Some(ext) => ext == "rlib",
        None => std::fs::metadata(target).is_ok_and(|m| m.ino() == bin_ino),
    }
}

/// Every repository file the binary is built from, relative to the repository: the inputs
/// rustc's dep-info (`deps/*.d`) lists for the binary's crate and for every library compiled
/// here. `cargo build` also writes them combined beside the binary (`veltrix.d`), but
/// `cargo test`, which builds the binary only for the integration tests, does not. A library
/// left by an earlier build of the same checkout can only add files, never hide one.
fn build_inputs(root: &Path) -> BTreeSet<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let bin = Path::new(env!("CARGO_BIN_EXE_veltrix"));
    let bin_ino = std::fs::metadata(bin).unwrap().ino();
    let deps = bin.parent().unwrap().join("deps");
    // The binary lies in `<target dir>/<profile>/`.
    let target_dir = bin.parent().and_then(Path::parent).unwrap();
    let mut files = BTreeSet::new();
    for entry in std::fs::read_dir(&deps).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "d") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for (target, deps) in text.lines().filter_map(|l| l.split_once(": ")) {
            if !builds_the_binary(Path::new(target), bin_ino) {
                continue;
            }
            // rustc runs in the workspace's root: a member's files are relative to it. Files
            // under the target directory are build output (a dependency's `OUT_DIR`), which the
            // image's build makes itself.
            files.extend(rule_deps(deps).iter().filter_map(|f| {
                let f = Path::new(f);
                match f.is_absolute() {
                    true => f.strip_prefix(root).ok().map(Path::to_path_buf),
                    false => Some(f.to_path_buf()),
                }
                .filter(|f| !root.join(f).starts_with(target_dir))
            }));
        }
    }
    files
}

#[test]
fn the_build_context_holds_every_file_the_binary_is_built_from() {
    let files = build_inputs(Path::new(ROOT));
    // The binary's crate, a member library, and a file only an `include_str!` reads.
    for expected in [
        "src/main.rs",
        "storage/src/lib.rs",
        "src/http/ui/index.html",
    ] {
        assert!(
            files.contains(Path::new(expected)),
            "the dep-info of this build lists {expected}: {files:?}"
        );
    }
    let ignore = Ignore::read();
    let out: Vec<&PathBuf> = files
        .iter()
        .filter(|f| ignore.excludes(f.to_str().unwrap()))
        .collect();
    assert!(
        out.is_empty(),
        "the build reads files .dockerignore keeps out of the build context: {out:?}"
    );
}

#[test]
fn the_binary_needs_no_library_the_runtime_image_lacks() {
    let stages = stages();
    let runtime = stages.last().unwrap();
    assert!(
        runtime.base().starts_with("gcr.io/distroless/cc-debian12"),
        "RUNTIME_LIBS lists distroless cc-debian12's libraries, not {}'s",
        runtime.base()
    );
    let out = Command::new("ldd")
        .arg(env!("CARGO_BIN_EXE_veltrix"))
        .output()
        .expect("ldd (Debian's libc-bin)");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    for line in text.lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        // The kernel's vDSO and the dynamic loader (glibc's) are there in any glibc image.
        if name.is_empty() || name.starts_with("linux-vdso") || name.contains("/ld-linux") {
            continue;
        }
        assert!(
            RUNTIME_LIBS.contains(&name),
            "the binary needs {name}, which the runtime image lacks:\n{text}"
        );
    }
}
