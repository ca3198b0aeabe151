//! A headless browser for tests of the status page: Debian's Chromium driven by
//! `playwright-core` (pinned, from npm, installed once under Cargo's test scratch dir; it
//! downloads no browser of its own). `.ci/run` installs `chromium` and `nodejs`/`npm` where
//! they are missing. `VX_CHROMIUM` may name another Chromium binary.
//!
//! Missing pieces fail the test with what to install: a skipped browser test would hide a
//! broken page.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The driver, pinned: its protocol must match the Chromium it drives (Debian's follows
/// upstream's stable releases; playwright-core supports the current stable).
// 1.61 is the newest release whose `engines` accept Node 18, the `nodejs` of Debian 12: CI's
// fresh machine gets Node from apt. It drives the current Chromium over CDP all the same.
pub const PLAYWRIGHT_CORE: &str = "playwright-core@1.61.1";

/// The Chromium binary: `VX_CHROMIUM`, else Debian's `/usr/bin/chromium`.
pub fn chromium() -> PathBuf {
    let path = std::env::var_os("VX_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    assert!(
        path.exists(),
        "no Chromium at {} (on Debian: apt-get install chromium; or set VX_CHROMIUM)",
        path.display()
    );
    path
}

/// A `node_modules` directory holding [`PLAYWRIGHT_CORE`], installed with npm on first use.
pub fn playwright_modules() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("node-playwright");
    let modules = dir.join("node_modules");
    let marker = modules.join("playwright-core/package.json");
    let pinned = PLAYWRIGHT_CORE.rsplit('@').next().unwrap_or_default();
    let installed = std::fs::read_to_string(&marker)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .is_some_and(|v| v["version"] == pinned);
    if installed {
        return modules;
    }
    std::fs::create_dir_all(&dir).expect("create the npm install dir");
    node_version_ok();
    let out = Command::new("npm")
        .args([
            "install",
            "--no-audit",
            "--no-fund",
            "--no-save",
            "--loglevel=error",
            "--prefix",
        ])
        .arg(&dir)
        .arg(PLAYWRIGHT_CORE)
        .env("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
        .output()
        .expect("npm is needed for the status page test (on Debian: apt-get install npm)");
    assert!(
        out.status.success() && marker.exists(),
        "npm install {PLAYWRIGHT_CORE} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    modules
}

/// playwright-core 1.61 needs Node 18 or later (its `engines`).
fn node_version_ok() {
    let out = Command::new("node")
        .arg("--version")
        .output()
        .expect("node is needed for the status page test (on Debian: apt-get install nodejs)");
    let v = String::from_utf8_lossy(&out.stdout);
    let major: u32 = v
        .trim()
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    assert!(major >= 18, "node {v} is too old for {PLAYWRIGHT_CORE}");
}

/// Run `node script arg` with `node_modules` on its path; kill it after `timeout`. Returns the
/// exit success and stdout, stderr.
pub fn run_node(
    script: &str,
    arg: &str,
    modules: &std::path::Path,
    timeout: Duration,
) -> (bool, String, String) {
    let mut child = Command::new("node")
        .arg(script)
        .arg(arg)
        .env("NODE_PATH", modules)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run node");
    let (mut out, mut err) = (
        child.stdout.take().expect("stdout piped"),
        child.stderr.take().expect("stderr piped"),
    );
    let readers = (
        std::thread::spawn(move || {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut out, &mut s).ok();
            s
        }),
        std::thread::spawn(move || {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut err, &mut s).ok();
            s
        }),
    );
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for node") {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let stdout = readers.0.join().unwrap_or_default();
    let mut stderr = readers.1.join().unwrap_or_default();
    if status.is_none() {
        stderr.push_str(&format!("\n(killed after {timeout:?})"));
    }
    (status.is_some_and(|s| s.success()), stdout, stderr)
}
