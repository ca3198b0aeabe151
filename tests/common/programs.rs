//! Third-party client programs in Go, Java and JavaScript (tests/clients/go, jedis, ioredis),
//! built or installed from their pinned versions (go.sum, pom.xml, package-lock.json) under
//! Cargo's test scratch dir, where the Go module cache, Maven repository and npm cache stay
//! between runs (Go's build cache is its own, ~/.cache/go-build, shared with any Go work). The toolchains must be on the PATH (`VX_GO` may name the `go` binary): `scripts/test`
//! installs them; a missing or too old one fails the test with what to install.
//!
//! Each `*_command` builds what it needs and answers the command that runs the program. Blocking
//! (the builds run `go`, `mvn` and `npm`): call them from `spawn_blocking`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The scratch dir of the builds.
fn scratch(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// A program's source dir under tests/clients/.
fn source(dir: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/clients")
        .join(dir)
}

/// Run `cmd` (a build step); its output if it succeeded, else the test fails with its stderr.
/// `hint` says how to get the tool when it cannot be started.
fn build_step(cmd: &mut Command, what: &str, hint: &str) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run it ({e}); {hint}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

const GO_HINT: &str = "Go is needed for the go-redis client (scripts/test installs it into \
                       ~/.cache/veltrix/go and puts it on the PATH; VX_GO may name the binary)";

/// The `go` to build with: `VX_GO`, else `go` on the PATH; at least the version tests/clients/go's
/// go.mod names (its `go` line), since go-redis's releases follow Go's.
fn go() -> String {
    let go = std::env::var("VX_GO").unwrap_or_else(|_| "go".to_string());
    let out = build_step(
        Command::new(&go).args(["env", "GOVERSION"]),
        "go env GOVERSION",
        GO_HINT,
    );
    let have = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let go_mod = std::fs::read_to_string(source("go").join("go.mod")).unwrap();
    let need = go_mod
        .lines()
        .find_map(|l| l.strip_prefix("go "))
        .expect("a go line in tests/clients/go/go.mod")
        .trim()
        .to_string();
    assert!(
        version_at_least(have.trim_start_matches("go"), &need),
        "{go} is {have}; tests/clients/go needs go{need} or later: {GO_HINT}"
    );
    go
}

/// Whether the dotted version `have` is at least `need` (numerically, part by part; a
/// pre-release such as `1.26rc1` counts as `1.26`).
pub fn version_at_least(have: &str, need: &str) -> bool {
    let parts = |v: &str| -> Vec<u64> {
        v.split(|c: char| !c.is_ascii_digit())
            .map_while(|p| p.parse().ok())
            .collect()
    };
    parts(have) >= parts(need)
}

/// tests/clients/go built with its pinned modules (go.sum; `-mod=readonly`, Go's default, so a
/// module not pinned there fails the build); the command that runs it.
pub fn go_redis_command() -> Command {
    let go = go();
    let dir = scratch("go-redis");
    let bin = dir.join("redisclient");
    build_step(
        Command::new(go)
            .args(["build", "-o"])
            .arg(&bin)
            .arg(".")
            .current_dir(source("go"))
            .env("GOMODCACHE", dir.join("mod"))
            .env("GOFLAGS", "-buildvcs=false -modcacherw")
            .env("GOTOOLCHAIN", "local")
            .env("CGO_ENABLED", "0"),
        "go build (tests/clients/go)",
        GO_HINT,
    );
    Command::new(bin)
}

/// The jars of tests/clients/jedis/pom.xml (Jedis and what it needs), fetched from Maven Central
/// once per pom (a copy of the pom marks a complete fetch); the class path that holds them.
fn jedis_classpath() -> String {
    let dir = scratch("jedis");
    let libs = dir.join("libs");
    let pom = source("jedis").join("pom.xml");
    let marker = libs.join("pom.xml");
    let wanted = std::fs::read(&pom).unwrap();
    if std::fs::read(&marker).ok().as_ref() != Some(&wanted) {
        let _ = std::fs::remove_dir_all(&libs);
        build_step(
            Command::new("mvn")
                .args(["-q", "-B", "-f"])
                .arg(&pom)
                .arg(format!("-Dmaven.repo.local={}", dir.join("m2").display()))
                .arg(format!("-DoutputDirectory={}", libs.display()))
                .args(["-DincludeScope=runtime", "dependency:copy-dependencies"]),
            "mvn dependency:copy-dependencies (tests/clients/jedis)",
            "Maven is needed for the Jedis client (Debian: apt-get install maven; scripts/test does)",
        );
        std::fs::write(&marker, &wanted).unwrap();
    }
    format!("{}/*", libs.display())
}

/// The Jedis program: `java -cp <jedis_classpath()> tests/clients/jedis/Client.java` (the JDK's
/// source launcher: one file, compiled as it starts; a JRE alone cannot).
pub fn jedis_command() -> Command {
    let classpath = jedis_classpath();
    build_step(
        Command::new("javac").arg("-version"),
        "javac -version",
        "a JDK is needed for the Jedis client (Debian: apt-get install default-jdk-headless; \
         scripts/test does)",
    );
    let mut c = Command::new("java");
    c.args(["-cp", &classpath])
        .arg(source("jedis").join("Client.java"));
    c
}

/// tests/clients/ioredis's package-lock.json installed with `npm ci` (once per lock file; a copy
/// of the lock marks a complete install); the `node_modules` dir, for `NODE_PATH`.
fn ioredis_modules() -> PathBuf {
    let dir = scratch("ioredis");
    let modules = dir.join("node_modules");
    let lock = std::fs::read(source("ioredis").join("package-lock.json")).unwrap();
    let marker = dir.join("installed-lock.json");
    if std::fs::read(&marker).ok().as_ref() != Some(&lock) {
        std::fs::create_dir_all(&dir).unwrap();
        for f in ["package.json", "package-lock.json"] {
            std::fs::copy(source("ioredis").join(f), dir.join(f)).unwrap();
        }
        build_step(
            Command::new("npm")
                .args([
                    "ci",
                    "--no-audit",
                    "--no-fund",
                    "--loglevel=error",
                    "--cache",
                ])
                .arg(dir.join("npm-cache"))
                .current_dir(&dir),
            "npm ci (tests/clients/ioredis)",
            "npm is needed for the ioredis client (Debian: apt-get install npm; scripts/test does)",
        );
        std::fs::write(&marker, &lock).unwrap();
    }
    modules
}

/// The ioredis program: `node tests/clients/ioredis/client.js` with `NODE_PATH` =
/// [`ioredis_modules`].
pub fn ioredis_command() -> Command {
    let modules = ioredis_modules();
    let mut c = Command::new("node");
    c.env("NODE_PATH", modules)
        .arg(source("ioredis").join("client.js"));
    c
}
