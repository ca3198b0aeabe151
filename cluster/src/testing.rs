//! Test support, compiled only with the `testing` feature: a real Apache Kafka broker for the
//! cluster tests — one KRaft node (broker and controller) on free loopback ports, started with
//! the JVM from the Maven Central jars `scripts/kafka-jars` fetched (the folder in
//! `VX_KAFKA_LIBS`; `scripts/test` sets it), its data in a temporary directory, killed when
//! dropped.
//!
//! There is no fallback: without Java or the jars, [`Broker::start`] panics saying what is
//! missing and how to get it, so a test that needs Kafka fails loudly rather than skips.

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Kafka's version, as `scripts/kafka-jars` fetches it.
pub const KAFKA_VERSION: &str = "3.9.1";

/// A running single-node Kafka. Dropping it kills the JVM and removes its data.
pub struct Broker {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
}

/// Where the jars are: `VX_KAFKA_LIBS`, else `scripts/kafka-jars`' default folder.
pub fn kafka_libs() -> PathBuf {
    if let Some(p) = std::env::var_os("VX_KAFKA_LIBS") {
        return PathBuf::from(p);
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    cache.join("veltrix").join(format!("kafka-{KAFKA_VERSION}"))
}

fn free_port() -> u16 {
    #[allow(clippy::unwrap_used)]
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}

impl Broker {
    /// Start a broker and wait until it takes connections; panics (with what to do) if it
    /// cannot. About 3–6 s here, most of it the JVM.
    #[allow(clippy::unwrap_used, clippy::expect_used)]
    pub fn start() -> Broker {
        let libs = kafka_libs();
        let jar = libs.join(format!("kafka_2.13-{KAFKA_VERSION}.jar"));
        assert!(
            jar.exists(),
            "Kafka's jars are not in {} (VX_KAFKA_LIBS): run scripts/test, or scripts/kafka-jars \
             once, which fetch them from Maven Central",
            libs.display()
        );
        let java = Command::new("java")
            .arg("-version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        assert!(
            java.is_ok_and(|s| s.success()),
            "no `java` on PATH: the cluster tests run Apache Kafka; scripts/test installs \
             default-jre-headless"
        );
        let dir = tempfile::tempdir().expect("temp dir for the broker");
        let (port, cport) = (free_port(), free_port());
        let props = dir.path().join("server.properties");
        std::fs::write(&props, properties(dir.path(), port, cport)).expect("server.properties");
        let log4j = dir.path().join("log4j.properties");
        std::fs::write(&log4j, LOG4J).expect("log4j.properties");
        let cp = format!("{}/*", libs.display());
        let java = |main: &str| {
            let mut c = Command::new("java");
            c.arg("-Djava.awt.headless=true")
                .arg(format!("-Dlog4j.configuration=file:{}", log4j.display()))
                .args([
                    "-Xms256m",
                    "-Xmx512m",
                    "-XX:+UseSerialGC",
                    "-XX:TieredStopAtLevel=1",
                ])
                .arg("-cp")
                .arg(&cp)
                .arg(main);
            c
        };
        // A fixed cluster id is enough: every broker has a data dir of its own.
        let out = java("kafka.tools.StorageTool")
            .args(["format", "-t", "vxTestClusterId0000001", "-c"])
            .arg(&props)
            .output()
            .expect("run kafka.tools.StorageTool");
        assert!(
            out.status.success(),
            "formatting the broker's storage failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let log = std::fs::File::create(dir.path().join("broker.log")).expect("broker.log");
        let child = java("kafka.Kafka")
            .arg(&props)
            .stdout(log.try_clone().expect("log fd"))
            .stderr(log)
            .spawn()
            .expect("start kafka.Kafka");
        let mut broker = Broker {
            child: Some(child),
            port,
            dir,
        };
        broker.wait_up(Duration::from_secs(90));
        broker
    }

    /// `host:port` for `bootstrap.servers`.
    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The broker's log so far (for a failing test's message).
    pub fn log(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(self.dir.path().join("broker.log")) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }

    #[allow(clippy::panic)]
    fn wait_up(&mut self, limit: Duration) {
        let addr: SocketAddr = ([127, 0, 0, 1], self.port).into();
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(c) = self.child.as_mut()
                && let Ok(Some(status)) = c.try_wait()
            {
                panic!("the Kafka broker exited ({status}):\n{}", tail(&self.log()));
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
                && self.log().contains("Kafka Server started")
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!(
            "the Kafka broker did not start within {limit:?}:\n{}",
            tail(&self.log())
        );
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// One KRaft node. Replication factors 1 (there is one broker); a short minimum session so
/// that tests can lose a consumer quickly; automatic topic creation left on, as brokers ship
/// it, so that a client that would create the cluster's topics by asking for them shows.
fn properties(dir: &Path, port: u16, cport: u16) -> String {
    format!(
        "process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{cport}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs={}
num.partitions=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000
",
        dir.join("data").display()
    )
}

const LOG4J: &str = "log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.server.KafkaRaftServer=INFO
log4j.logger.kafka.server.KafkaServer=INFO
log4j.logger.kafka.server.BrokerServer=INFO
";
