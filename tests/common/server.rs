//! Running the real `veltrix` binary: start it on a data dir, find its address in the log,
//! wait for `/readyz`, stop it with SIGTERM or SIGKILL, and kill it on drop. Every wait is
//! bounded, so a hung server fails a test instead of hanging the suite.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::client::Api;

/// How long a server may take to log its address and to answer `/readyz` with 200.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a server may take to exit after SIGTERM (its shutdown timeout is 30 s).
pub const STOP_TIMEOUT: Duration = Duration::from_secs(60);

/// Lines the child wrote to stdout and stderr, in arrival order per pipe.
#[derive(Clone, Default)]
pub struct Logs(Arc<(Mutex<Vec<String>>, Condvar)>);

impl Logs {
    fn push(&self, line: String) {
        let (lines, cv) = &*self.0;
        lines.lock().unwrap().push(line);
        cv.notify_all();
    }

    pub fn lines(&self) -> Vec<String> {
        self.0.0.lock().unwrap().clone()
    }

    pub fn text(&self) -> String {
        self.lines().join("\n")
    }

    /// Wait (bounded) until some line satisfies `f`; returns its result.
    fn wait_for<T>(
        &self,
        timeout: Duration,
        child: &mut Child,
        mut f: impl FnMut(&str) -> Option<T>,
    ) -> Result<T, String> {
        let deadline = Instant::now() + timeout;
        let (lines, cv) = &*self.0;
        let mut seen = 0;
        loop {
            {
                let guard = lines.lock().unwrap();
                for line in &guard[seen..] {
                    if let Some(v) = f(line) {
                        return Ok(v);
                    }
                }
                seen = guard.len();
                let (_guard, _) = cv.wait_timeout(guard, Duration::from_millis(100)).unwrap();
            }
            if let Ok(Some(status)) = child.try_wait() {
                // Give the pipe readers a moment to deliver the last lines.
                std::thread::sleep(Duration::from_millis(200));
                let guard = lines.lock().unwrap();
                for line in &guard[seen..] {
                    if let Some(v) = f(line) {
                        return Ok(v);
                    }
                }
                return Err(format!("server exited early with {status}"));
            }
            if Instant::now() > deadline {
                return Err(format!("nothing expected logged within {timeout:?}"));
            }
        }
    }
}

/// Remove ANSI colour sequences, so that log lines can be matched as plain text.
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// The TCP address in a `listening on <addr>` line, if this line has one.
fn parse_listening(line: &str) -> Option<SocketAddr> {
    let line = strip_ansi(line);
    let mut rest = line.as_str();
    while let Some(i) = rest.find("listening on ") {
        let after = &rest[i + "listening on ".len()..];
        let after = after.strip_prefix("http://").unwrap_or(after);
        let token: String = after
            .chars()
            .take_while(|c| c.is_ascii_hexdigit() || matches!(c, '.' | ':' | '[' | ']'))
            .collect();
        if let Ok(addr) = token.parse::<SocketAddr>() {
            return Some(addr);
        }
        rest = after;
    }
    None
}

/// The tokens of [`ServerConfig::with_scoped_tokens`], one per scope.
pub const INGEST_TOKEN: &str = "ingest-secret";
pub const READ_TOKEN: &str = "read-secret";
pub const ADMIN_TOKEN: &str = "admin-secret";

/// How to start one server; `Clone` so that the same configuration can be restarted.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub data_dir: PathBuf,
    /// `--listen` (default `127.0.0.1:0`); a fixed address restarts a server on the same port.
    pub listen: Option<String>,
    pub uds: Option<PathBuf>,
    pub args: Vec<String>,
    pub envs: Vec<(String, String)>,
    /// A program the binary runs under (`prlimit --nofile=…`), with its arguments.
    pub wrapper: Vec<String>,
}

impl ServerConfig {
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        ServerConfig {
            data_dir: data_dir.into(),
            listen: None,
            uds: None,
            args: Vec::new(),
            envs: Vec::new(),
            wrapper: Vec::new(),
        }
    }

    /// Run the binary under `program args…` (which must exec the rest of its command line).
    pub fn wrapped<S: Into<String>>(mut self, program: impl IntoIterator<Item = S>) -> Self {
        self.wrapper = program.into_iter().map(Into::into).collect();
        self
    }

    pub fn arg(mut self, a: impl Into<String>) -> Self {
        self.args.push(a.into());
        self
    }

    pub fn args<S: Into<String>>(mut self, a: impl IntoIterator<Item = S>) -> Self {
        self.args.extend(a.into_iter().map(Into::into));
        self
    }

    pub fn env(mut self, k: impl Into<String>, v: impl Into<String>) -> Self {
        self.envs.push((k.into(), v.into()));
        self
    }

    /// With `yaml` as its config file, written into `dir` as `veltrix.yaml`.
    pub fn with_config(self, dir: &Path, yaml: &str) -> Self {
        let file = dir.join("veltrix.yaml");
        std::fs::write(&file, yaml).expect("write the config file");
        self.arg("--config")
            .arg(file.to_string_lossy().into_owned())
    }

    /// With three bearer tokens, one per scope: [`INGEST_TOKEN`], [`READ_TOKEN`] and
    /// [`ADMIN_TOKEN`], in a config file written into `dir`.
    pub fn with_scoped_tokens(self, dir: &Path) -> Self {
        self.with_config(
            dir,
            &format!(
                "auth:\n  tokens:\n    - token: {INGEST_TOKEN}\n      scopes: [ingest]\n    \
                 - token: {READ_TOKEN}\n      scopes: [read]\n    - token: {ADMIN_TOKEN}\n      \
                 scopes: [admin]\n"
            ),
        )
    }

    /// Listen on this address instead of a free port.
    pub fn listen(mut self, addr: impl Into<String>) -> Self {
        self.listen = Some(addr.into());
        self
    }

    pub fn uds(mut self, path: impl Into<PathBuf>) -> Self {
        self.uds = Some(path.into());
        self
    }

    fn command(&self) -> Command {
        let bin = env!("CARGO_BIN_EXE_veltrix");
        let mut cmd = match self.wrapper.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        cmd.arg("serve")
            .arg("--listen")
            .arg(self.listen.as_deref().unwrap_or("127.0.0.1:0"))
            .arg("--data-dir")
            .arg(&self.data_dir);
        if let Some(uds) = &self.uds {
            cmd.arg("--uds").arg(uds);
        }
        cmd.args(&self.args);
        // Hermetic: no configuration leaks in from the environment running the tests.
        for (k, _) in std::env::vars() {
            if k.starts_with("VX_") {
                cmd.env_remove(k);
            }
        }
        cmd.env_remove("RUST_LOG").env("NO_COLOR", "1");
        for (k, v) in &self.envs {
            cmd.env(k, v);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    /// Start the process without waiting for anything.
    pub fn spawn(&self) -> Process {
        let mut child = self.command().spawn().expect("spawn the veltrix binary");
        let logs = Logs::default();
        let mut readers = Vec::new();
        let out = child.stdout.take().expect("stdout piped");
        let err = child.stderr.take().expect("stderr piped");
        readers.push(drain(out, logs.clone()));
        readers.push(drain(err, logs.clone()));
        Process {
            child: Some(child),
            logs,
            readers,
        }
    }

    /// Start the server and wait until it listens and `/readyz` answers 200.
    pub fn start(&self) -> Server {
        let mut proc = self.spawn();
        let child = proc.child.as_mut().expect("child present");
        let addr = match proc.logs.wait_for(START_TIMEOUT, child, parse_listening) {
            Ok(addr) => addr,
            Err(e) => {
                let logs = proc.logs.text();
                panic!("veltrix did not log `listening on <addr>`: {e}\n--- log ---\n{logs}");
            }
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(200) = raw_get_status(addr, "/readyz") {
                break;
            }
            if let Ok(Some(status)) = proc.child.as_mut().expect("child").try_wait() {
                panic!(
                    "veltrix exited with {status} before /readyz answered 200\n--- log ---\n{}",
                    proc.logs.text()
                );
            }
            assert!(
                Instant::now() < deadline,
                "/readyz did not answer 200 within {START_TIMEOUT:?}\n--- log ---\n{}",
                proc.logs.text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let tcp = Api::tcp(addr);
        let uds = self.uds.as_ref().map(|p| Api::unix(p));
        Server {
            proc,
            addr,
            cfg: self.clone(),
            api: tcp,
            uds_api: uds,
        }
    }

    /// Run a process that is expected to exit on its own (a start-up error): its exit status
    /// (`None` if it was still running after `timeout` and had to be killed) and its output.
    pub fn run_to_exit(&self, timeout: Duration) -> (Option<ExitStatus>, String) {
        let mut proc = self.spawn();
        let status = proc.wait_exit(timeout);
        if status.is_none() {
            proc.kill();
        }
        proc.join_readers();
        (status, proc.logs.text())
    }
}

fn drain(pipe: impl Read + Send + 'static, logs: Logs) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut r = BufReader::new(pipe);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match r.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let line = String::from_utf8_lossy(&buf);
                    logs.push(line.trim_end_matches(['\n', '\r']).to_string());
                }
            }
        }
    })
}

/// A running (or exited) child with its captured output; killed on drop.
pub struct Process {
    child: Option<Child>,
    pub logs: Logs,
    readers: Vec<JoinHandle<()>>,
}

impl Process {
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("child").id()
    }

    /// Wait for the child to exit, bounded.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        let _ = child.kill();
        child.wait().ok()
    }

    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid().to_string())
            .status()
            .expect("run kill(1)");
        assert!(status.success(), "kill -{sig} failed: {status}");
    }

    /// Collect the last output once the child has exited.
    pub fn join_readers(&mut self) {
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            if matches!(child.try_wait(), Ok(None)) {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
        if std::thread::panicking() {
            let lines = self.logs.lines();
            let from = lines.len().saturating_sub(80);
            eprintln!("--- last server log lines ---");
            for l in &lines[from..] {
                eprintln!("{l}");
            }
        }
    }
}

/// A ready server.
pub struct Server {
    pub proc: Process,
    pub addr: SocketAddr,
    pub cfg: ServerConfig,
    pub api: Api,
    pub uds_api: Option<Api>,
}

impl Server {
    /// SIGTERM, then wait (bounded) for the exit; returns the exit status.
    pub fn stop(mut self) -> ExitStatus {
        self.proc.signal("TERM");
        let status = self.proc.wait_exit(STOP_TIMEOUT);
        let status = status.unwrap_or_else(|| {
            panic!(
                "veltrix did not exit within {STOP_TIMEOUT:?} of SIGTERM\n--- log ---\n{}",
                self.proc.logs.text()
            )
        });
        self.proc.join_readers();
        status
    }

    /// SIGTERM and require a clean exit (code 0).
    pub fn stop_clean(self) -> String {
        let logs = self.proc.logs.clone();
        let status = self.stop();
        assert_eq!(
            status.code(),
            Some(0),
            "SIGTERM must end the server with exit code 0, got {status}\n--- log ---\n{}",
            logs.text()
        );
        logs.text()
    }

    /// `kill -9`.
    pub fn kill9(mut self) {
        self.proc.kill();
        self.proc.join_readers();
    }

    pub fn logs(&self) -> String {
        self.proc.logs.text()
    }

    pub fn uds(&self) -> &Api {
        self.uds_api.as_ref().expect("server started with --uds")
    }
}

/// A minimal blocking `GET`, used before any client exists (readiness).
pub fn raw_get_status(addr: SocketAddr, path: &str) -> std::io::Result<u16> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.set_write_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line)?;
    line.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line {line:?}")))
}

/// Names of the segment files, sorted (their names sort by first LSN).
pub fn segments(data_dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(data_dir.join("log"))
        .expect("read <data-dir>/log")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    v.sort();
    v
}
