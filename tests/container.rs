//! The container image without a Docker engine (none runs on these machines): the Dockerfile is
//! read, and the binary is run exactly as the image would run it — its `ENTRYPOINT` and `CMD`,
//! its `ENV`, its `HEALTHCHECK` command, its `STOPSIGNAL` — so that the image and the binary
//! cannot drift apart. Only what a container maps differently is changed: the data volume's path
//! (`VX_STORAGE_DATA_DIR`, to a temp dir) and the listen address (`VX_SERVER_LISTEN`, to
//! `127.0.0.1:0`, as `docker run -p` would map the port), and the health check is pointed at
//! that address (`VX_SERVER`).
//!
//! The test runs the dev build of the same package the Dockerfile builds in release
//! (`cargo build --release --locked -p veltrix`, checked below), with the same features.
//! How the image is built, where no container builder runs, is checked in [`layers`]: the
//! dependency layer's steps run on a copy of the build context, and the binary's shared
//! libraries against the runtime image's.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "container/context.rs"]
mod context;
#[path = "container/dockerfile.rs"]
mod dockerfile;
#[path = "container/layers.rs"]
mod layers;

use dockerfile::stages;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const IMAGE_BINARY: &str = "/usr/local/bin/veltrix";

fn exec_form(s: &str) -> Vec<String> {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not the exec (JSON) form: {s:?}: {e}"))
}

struct Image {
    entrypoint: Vec<String>,
    cmd: Vec<String>,
    env: BTreeMap<String, String>,
    healthcheck: Vec<String>,
}

fn image() -> Image {
    let stages = stages();
    assert!(stages.len() >= 2, "a multi-stage build");
    let build = dockerfile::stage(&stages, "build");
    assert!(
        build
            .last("RUN")
            .starts_with(&format!("{} ", layers::BUILD)),
        "the build stage ends with the release build of the veltrix package"
    );
    let runtime = stages.last().unwrap();
    assert!(
        runtime
            .all("COPY")
            .into_iter()
            .filter_map(dockerfile::copy_from)
            .any(|(from, paths)| from == "build" && paths.last() == Some(&IMAGE_BINARY)),
        "the runtime stage takes the binary from the build stage"
    );
    let one = |name: &str| runtime.last(name).to_string();
    let user = one("USER");
    let uid = user.split(':').next().unwrap();
    assert!(
        uid != "0" && uid != "root",
        "runs as a non-root user: {user}"
    );
    assert_eq!(one("EXPOSE"), "7100");
    assert_eq!(exec_form(&one("VOLUME")), ["/data"]);
    assert_eq!(one("STOPSIGNAL"), "SIGTERM");
    let hc = one("HEALTHCHECK");
    let (_, hc) = hc.split_once("CMD ").expect("HEALTHCHECK … CMD [...]");
    let mut env = BTreeMap::new();
    for rest in runtime.all("ENV") {
        for pair in rest.split_whitespace() {
            let (k, v) = pair.split_once('=').expect("ENV KEY=VALUE");
            env.insert(k.to_string(), v.to_string());
        }
    }
    Image {
        entrypoint: exec_form(&one("ENTRYPOINT")),
        cmd: exec_form(&one("CMD")),
        env,
        healthcheck: exec_form(hc),
    }
}

/// The image's command line, with the image's binary path mapped to the test's build.
fn command(argv: &[String], env: &BTreeMap<String, String>) -> Command {
    assert_eq!(argv[0], IMAGE_BINARY, "the image's binary");
    let mut c = Command::new(env!("CARGO_BIN_EXE_veltrix"));
    c.args(&argv[1..]);
    for (k, _) in std::env::vars() {
        if k.starts_with("VX_") {
            c.env_remove(k);
        }
    }
    c.env_remove("RUST_LOG").env("NO_COLOR", "1").envs(env);
    c
}

fn health(img: &Image, env: &BTreeMap<String, String>) -> std::process::Output {
    command(&img.healthcheck, env)
        .stdin(Stdio::null())
        .output()
        .expect("run the health check")
}

#[test]
fn the_binary_runs_as_the_image_runs_it() {
    let img = image();
    assert_eq!(img.entrypoint, [IMAGE_BINARY]);
    assert_eq!(img.cmd, ["serve"]);
    assert_eq!(
        img.env.get("VX_STORAGE_DATA_DIR").map(String::as_str),
        Some("/data")
    );
    let tmp = tempfile::tempdir().unwrap();
    let mut env = img.env.clone();
    env.insert(
        "VX_STORAGE_DATA_DIR".into(),
        tmp.path().join("data").to_string_lossy().into_owned(),
    );
    env.insert("VX_SERVER_LISTEN".into(), "127.0.0.1:0".into());

    let argv: Vec<String> = img.entrypoint.iter().chain(&img.cmd).cloned().collect();
    let mut child = command(&argv, &env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the server");
    let (tx, rx) = mpsc::channel::<String>();
    for pipe in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
    }
    drop(tx);
    let mut logs = Vec::new();
    let addr = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("no `listening on` line:\n{}", logs.join("\n")));
        logs.push(line.clone());
        if let Some(i) = line.find("listening on ") {
            let token: String = line[i + 13..]
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ':')
                .collect();
            if let Ok(a) = token.parse::<std::net::SocketAddr>() {
                break a;
            }
        }
    };
    let mut probe = env.clone();
    probe.insert("VX_SERVER".into(), format!("http://{addr}"));
    // The HEALTHCHECK turns healthy once the store is open.
    let deadline = Instant::now() + Duration::from_secs(20);
    let out = loop {
        let out = health(&img, &probe);
        if out.status.success() || Instant::now() > deadline {
            break out;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        out.status.success(),
        "healthy: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        tmp.path().join("data").join("LOCK").exists(),
        "data on the volume path"
    );

    // STOPSIGNAL: a clean drain and exit 0.
    let status = Command::new("kill")
        .arg(format!("-{}", "TERM"))
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(40);
    let exit = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "no exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    logs.extend(rx.try_iter());
    assert_eq!(exit.code(), Some(0), "{}", logs.join("\n"));
    assert!(
        !logs.iter().any(|l| l.contains("WARN")),
        "the image's environment gives no warning:\n{}",
        logs.join("\n")
    );
    // Unhealthy once it is gone: non-zero, one line saying why.
    let out = health(&img, &probe);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains(&addr.to_string()), "{err}");
}
