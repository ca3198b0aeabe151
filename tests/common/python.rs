//! Third-party Python clients (tests/clients/*.py) in a virtualenv under Cargo's test scratch
//! dir, created on first use with pinned versions from PyPI (`python3` with its `venv` module
//! is needed: `.ci/run` installs Debian's `python3-venv` where it is missing).

use std::path::PathBuf;
use std::process::Command;

fn imports(python: &str, modules: &str) -> bool {
    Command::new(python)
        .args(["-c", &format!("import {modules}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// An interpreter that can `import {modules}`: `$override_var` if set (it must have them),
/// else the virtualenv `venv` under the scratch dir, with `pinned` installed if needed.
/// Blocking (pip may run): call it from `spawn_blocking` in async tests.
pub fn python_with(override_var: &str, venv: &str, pinned: &[&str], modules: &str) -> String {
    if let Ok(p) = std::env::var(override_var) {
        assert!(
            imports(&p, modules),
            "{override_var}={p} cannot import {modules}"
        );
        return p;
    }
    // The tests of one binary run at once and may ask for the same virtualenv on a fresh
    // machine: one creates it while the others wait (two `venv` runs in one directory fail
    // with "File exists"). Binaries run one after another.
    static CREATING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = CREATING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let venv = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(venv);
    let python = venv.join("bin/python").to_string_lossy().into_owned();
    if imports(&python, modules) {
        return python;
    }
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .output()
        .expect("python3 is needed for the third-party client tests");
    assert!(
        made.status.success(),
        "python3 -m venv failed (on Debian: apt-get install python3-venv): {}",
        String::from_utf8_lossy(&made.stderr)
    );
    let pip = Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(pinned)
        .output()
        .expect("run pip");
    assert!(
        pip.status.success(),
        "pip install {pinned:?} failed: {}",
        String::from_utf8_lossy(&pip.stderr)
    );
    assert!(imports(&python, modules), "{modules} after pip install");
    python
}

/// tests/clients/resp_client.py with these arguments (host, port, scenario, …), under
/// redis-py pinned as tests/resp.rs pins it; its JSON report. Fails with the client's
/// stderr if the script exits non-zero.
pub async fn redis_py(args: Vec<String>) -> serde_json::Value {
    let python = tokio::task::spawn_blocking(|| {
        python_with("VX_PYTHON_REDIS", "py-redis", &REDIS_PY, "redis")
    })
    .await
    .unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/resp_client.py");
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(python)
            .arg(script)
            .args(&args)
            .output()
            .expect("run the redis-py client")
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "the redis-py client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The redis-py the Redis-protocol tests run.
pub const REDIS_PY: [&str; 1] = ["redis==5.2.1"];
