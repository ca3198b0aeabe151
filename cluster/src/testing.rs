//! Test support, compiled only with the `testing` feature: real Apache Kafka for the cluster
//! tests, started with the JVM from the Maven Central jars `scripts/kafka-jars` fetched (the
//! folder in `VX_KAFKA_LIBS`; `scripts/test` sets it), on free loopback ports, its data in a
//! temporary directory, killed when dropped.
//!
//! - [`Broker`]: one KRaft node (broker and controller in one JVM), replication factor 1.
//! - [`Brokers`]: several such nodes forming one KRaft quorum, replication factor 3 and
//!   `min.insync.replicas` 2, any of which a test can `kill -9` and restart, and ask which
//!   broker leads a topic's partitions: a broker's loss under load.
//!
//! Both run the same JVM command, the same `server.properties` (but for what the number of
//! brokers changes) and the same wait for "Kafka Server started".
//!
//! There is no fallback: without Java or the jars, [`Broker::start`] and [`Brokers::start`]
//! panic saying what is missing and how to get it, so a test that needs Kafka fails loudly
//! rather than skips.

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::metadata::Metadata;
use std::fs::File;
use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Kafka's version, as `scripts/kafka-jars` fetches it.
pub const KAFKA_VERSION: &str = "3.9.1";

/// A fixed cluster id is enough: each test's brokers have data dirs of their own, and the
/// brokers of one quorum must share it.
const CLUSTER_ID: &str = "vxTestClusterId0000001";

/// The single broker's heap.
const HEAP_ONE: [&str; 2] = ["-Xms256m", "-Xmx512m"];
/// Each of [`Brokers`]' heaps: smaller, so that three JVMs beside the nodes under test fit
/// a small machine; a test's topics hold a few megabytes.
const HEAP_EACH: [&str; 2] = ["-Xms128m", "-Xmx384m"];

/// Partitions of `__consumer_offsets` (and of `__transaction_state`): few, for a quick start.
const OFFSETS_PARTITIONS: i32 = 4;

/// How long a broker may take to start: a JVM on a busy two-core machine, three at once.
const START_LIMIT: Duration = Duration::from_secs(90);

/// A running single-node Kafka. Dropping it kills the JVM and removes its data.
pub struct Broker {
    // Declared before the directory: the JVM is killed before its data is removed.
    kraft: Kraft,
    _dir: tempfile::TempDir,
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

/// `n` distinct free loopback ports: every listener is held until all are chosen, so that
/// the system cannot hand out one port twice.
fn free_ports(n: usize) -> Vec<u16> {
    #[allow(clippy::unwrap_used)]
    let held: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    #[allow(clippy::unwrap_used)]
    let ports = held
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()).unwrap())
        .collect();
    ports
}

impl Broker {
    /// Start a broker and wait until it takes connections; panics (with what to do) if it
    /// cannot. About 3–6 s here, most of it the JVM.
    pub fn start() -> Broker {
        let libs = prerequisites();
        #[allow(clippy::expect_used)]
        let dir = tempfile::tempdir().expect("temp dir for the broker");
        let ports = free_ports(2);
        let (port, cport) = (ports[0], ports[1]);
        let props = properties(&Props {
            node_id: 1,
            port,
            cport,
            voters: &format!("1@127.0.0.1:{cport}"),
            data: &dir.path().join("data"),
            replicas: 1,
        });
        let mut kraft = Kraft::new(
            "the Kafka broker".into(),
            dir.path().to_path_buf(),
            port,
            &props,
            HEAP_ONE,
        );
        kraft.format(&libs);
        kraft.spawn(&libs);
        kraft.wait_up(START_LIMIT);
        Broker { kraft, _dir: dir }
    }

    /// `host:port` for `bootstrap.servers`.
    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.kraft.port)
    }

    /// The broker's log so far (for a failing test's message).
    pub fn log(&self) -> String {
        self.kraft.log()
    }
}

/// A running Kafka cluster of several KRaft nodes, each broker and controller in one JVM
/// (`node.id` 1 to N, all of them voters of one quorum). Topics are replicated to 3 brokers
/// (or N, if fewer) with `min.insync.replicas` 2 (1 for a single broker), the offsets and
/// transaction-state topics as well: with three brokers, one may be lost and writes with
/// `acks=all` go on. Dropping it kills every JVM and removes the data.
///
/// Brokers are named by their `node.id`, as Kafka's metadata names them ([`Brokers::leaders`]).
pub struct Brokers {
    // Declared before the directory: the JVMs are killed before their data is removed.
    nodes: Vec<Kraft>,
    libs: PathBuf,
    _dir: tempfile::TempDir,
}

impl Brokers {
    /// Start `n` brokers at once and wait until every one of them is up; panics (with what
    /// to do, or the log of the one that did not start) if they cannot. They are started
    /// together because none finishes starting before a majority of the quorum is up.
    pub fn start(n: usize) -> Brokers {
        assert!(n >= 1, "a Kafka cluster has at least one broker");
        let libs = prerequisites();
        #[allow(clippy::expect_used)]
        let dir = tempfile::tempdir().expect("temp dir for the brokers");
        let ports = free_ports(2 * n);
        let (plain, control) = ports.split_at(n);
        let voters = control
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{}@127.0.0.1:{c}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let mut nodes: Vec<Kraft> = (0..n)
            .map(|i| {
                let id = i + 1;
                let home = dir.path().join(format!("broker-{id}"));
                #[allow(clippy::expect_used)]
                std::fs::create_dir_all(&home).expect("a broker's folder");
                let props = properties(&Props {
                    node_id: id,
                    port: plain[i],
                    cport: control[i],
                    voters: &voters,
                    data: &home.join("data"),
                    replicas: n.min(3),
                });
                Kraft::new(
                    format!("Kafka broker {id}"),
                    home,
                    plain[i],
                    &props,
                    HEAP_EACH,
                )
            })
            .collect();
        // Formatting is a JVM start too: all at once.
        let formatting: Vec<Child> = nodes.iter().map(|k| k.start_format(&libs)).collect();
        for (k, f) in nodes.iter().zip(formatting) {
            k.formatted(f);
        }
        for k in &mut nodes {
            k.spawn(&libs);
        }
        for k in &mut nodes {
            k.wait_up(START_LIMIT);
        }
        Brokers {
            nodes,
            libs,
            _dir: dir,
        }
    }

    /// Every broker's `host:port`, comma-separated, for `bootstrap.servers` (a client finds
    /// the live ones).
    pub fn bootstrap(&self) -> String {
        self.nodes
            .iter()
            .map(|k| format!("127.0.0.1:{}", k.port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The brokers' `node.id`s, 1 to N.
    pub fn ids(&self) -> std::ops::RangeInclusive<i32> {
        1..=i32::try_from(self.nodes.len()).unwrap_or(i32::MAX)
    }

    /// `kill -9` broker `id` (`Child::kill` is SIGKILL on Unix): no clean shutdown, no
    /// leadership handed over; the controllers notice when its heartbeats stop.
    pub fn kill9(&mut self, id: i32) {
        self.node(id).kill();
    }

    /// Start broker `id` again, killed before, on its data dir and with its properties, and
    /// wait until it is up (it then catches up with the partitions' leaders by itself; see
    /// [`Brokers::wait_in_sync`]).
    pub fn restart(&mut self, id: i32) {
        let libs = self.libs.clone();
        let k = self.node(id);
        assert!(k.child.is_none(), "{} is running", k.name);
        k.spawn(&libs);
        k.wait_up(START_LIMIT);
    }

    /// Broker `id`'s log so far, across restarts (for a failing test's message).
    pub fn log(&self, id: i32) -> String {
        self.nodes
            .get(index(id))
            .map(Kraft::log)
            .unwrap_or_default()
    }

    /// `(partition, node.id of its leader)` for each partition of `topic`, as the brokers'
    /// metadata says now (-1 where a partition has no leader). A broker killed a moment ago
    /// still leads its partitions here until the controllers have fenced it.
    pub fn leaders(&self, topic: &str) -> Vec<(i32, i32)> {
        let md = self.metadata(Some(topic));
        md.topics()
            .iter()
            .filter(|t| t.name() == topic)
            .flat_map(|t| t.partitions().iter().map(|p| (p.id(), p.leader())))
            .collect()
    }

    /// The broker that leads the most partitions of `topic` (the lowest `node.id` of a tie);
    /// panics if the topic has no partitions or no leaders.
    pub fn leader_of_most(&self, topic: &str) -> i32 {
        let leaders = self.leaders(topic);
        let count = |id: i32| leaders.iter().filter(|&&(_, l)| l == id).count();
        let most = self.ids().max_by_key(|&id| (count(id), -id));
        match most {
            Some(id) if count(id) > 0 => id,
            _ => panic!("no broker leads a partition of {topic}: {leaders:?}"),
        }
    }

    /// The broker coordinating consumer group `group` — its members' heartbeats and the
    /// offsets a transaction commits for it go there: the leader of the group's partition
    /// of `__consumer_offsets`, which Kafka picks as `abs(group.hashCode()) % partitions`
    /// (Java's `String.hashCode`). -1 while that partition has no leader, or before any
    /// group exists.
    pub fn coordinator(&self, group: &str) -> i32 {
        let hash = group
            .encode_utf16()
            .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)));
        // Kafka's `Utils.abs`: the smallest int maps to 0.
        let partition = hash.checked_abs().unwrap_or(0) % OFFSETS_PARTITIONS;
        self.leaders("__consumer_offsets")
            .into_iter()
            .find(|&(p, _)| p == partition)
            .map_or(-1, |(_, leader)| leader)
    }

    /// Wait until every partition of every topic has a leader and every one of its
    /// replicas in sync (a restarted broker has caught up): losing another broker then
    /// leaves each partition `min.insync.replicas`. Panics after `limit`, saying which
    /// partitions lag.
    pub fn wait_in_sync(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let md = self.metadata(None);
            let lagging: Vec<String> = md
                .topics()
                .iter()
                .flat_map(|t| {
                    t.partitions()
                        .iter()
                        .filter(|p| p.leader() < 0 || p.isr().len() < p.replicas().len())
                        .map(|p| {
                            format!(
                                "{}/{} leader {} isr {:?} of {:?}",
                                t.name(),
                                p.id(),
                                p.leader(),
                                p.isr(),
                                p.replicas()
                            )
                        })
                        .collect::<Vec<_>>()
                })
                .collect();
            if lagging.is_empty() && !md.topics().is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "replicas still out of sync after {limit:?}: {lagging:?}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// The brokers' metadata of `topic`, or of every topic (a fresh client each time: it
    /// asks a live broker).
    #[allow(clippy::expect_used)]
    fn metadata(&self, topic: Option<&str>) -> Metadata {
        let client: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", self.bootstrap())
            // Asking for a topic must not create it.
            .set("allow.auto.create.topics", "false")
            .create()
            .expect("a Kafka client for metadata");
        client
            .fetch_metadata(topic, Duration::from_secs(10))
            .expect("the brokers' metadata")
    }

    fn node(&mut self, id: i32) -> &mut Kraft {
        let n = self.nodes.len();
        self.nodes
            .get_mut(index(id))
            .unwrap_or_else(|| panic!("no broker {id}: node ids are 1 to {n}"))
    }
}

/// The index of broker `id` in [`Brokers`]' nodes (`usize::MAX`, no broker, for an id < 1).
fn index(id: i32) -> usize {
    usize::try_from(id - 1).unwrap_or(usize::MAX)
}

/// Panics, saying how to get them, unless the jars and `java` are there; the jars' folder.
fn prerequisites() -> PathBuf {
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
    libs
}

/// One KRaft node, broker and controller in one JVM: its folder (`server.properties`,
/// `log4j.properties`, `broker.log`, `data/`), its client port, and its JVM while it runs.
/// Dropping it kills the JVM.
struct Kraft {
    /// For messages: "the Kafka broker", "Kafka broker 2".
    name: String,
    home: PathBuf,
    port: u16,
    heap: [&'static str; 2],
    child: Option<Child>,
    /// The length of `broker.log` when the JVM last started: a restarted broker is up when
    /// its log says so after that point, not before it.
    log_from: usize,
}

impl Kraft {
    /// Write the node's `server.properties` and `log4j.properties` into `home`.
    #[allow(clippy::expect_used)]
    fn new(name: String, home: PathBuf, port: u16, props: &str, heap: [&'static str; 2]) -> Kraft {
        std::fs::write(home.join("server.properties"), props).expect("server.properties");
        std::fs::write(home.join("log4j.properties"), LOG4J).expect("log4j.properties");
        Kraft {
            name,
            home,
            port,
            heap,
            child: None,
            log_from: 0,
        }
    }

    /// `java` with this node's heap, log4j configuration and classpath, to run `main`.
    fn java(&self, libs: &Path, main: &str) -> Command {
        let mut c = Command::new("java");
        c.arg("-Djava.awt.headless=true")
            .arg(format!(
                "-Dlog4j.configuration=file:{}",
                self.home.join("log4j.properties").display()
            ))
            .args(self.heap)
            // Start-up time matters more here than peak throughput.
            .args(["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"])
            .arg("-cp")
            .arg(format!("{}/*", libs.display()))
            .arg(main);
        c
    }

    /// Format the node's storage with the shared cluster id (blocking).
    fn format(&self, libs: &Path) {
        let f = self.start_format(libs);
        self.formatted(f);
    }

    /// Start formatting the node's storage; [`Kraft::formatted`] waits for it.
    #[allow(clippy::expect_used)]
    fn start_format(&self, libs: &Path) -> Child {
        self.java(libs, "kafka.tools.StorageTool")
            .args(["format", "-t", CLUSTER_ID, "-c"])
            .arg(self.home.join("server.properties"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run kafka.tools.StorageTool")
    }

    /// Wait for the formatting [`Kraft::start_format`] started; panics if it failed.
    #[allow(clippy::expect_used)]
    fn formatted(&self, f: Child) {
        let out = f.wait_with_output().expect("run kafka.tools.StorageTool");
        assert!(
            out.status.success(),
            "formatting the storage of {} failed: {}",
            self.name,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Start the JVM, its output appended to `broker.log` (a restart keeps the earlier log).
    #[allow(clippy::expect_used)]
    fn spawn(&mut self, libs: &Path) {
        let path = self.home.join("broker.log");
        let log = File::options()
            .create(true)
            .append(true)
            .open(&path)
            .expect("broker.log");
        self.log_from = std::fs::metadata(&path).map_or(0, |m| m.len() as usize);
        let child = self
            .java(libs, "kafka.Kafka")
            .arg(self.home.join("server.properties"))
            .stdout(log.try_clone().expect("log fd"))
            .stderr(log)
            .spawn()
            .expect("start kafka.Kafka");
        self.child = Some(child);
    }

    /// Wait until the broker takes connections and its log (since it last started) says
    /// it started; panics with the log's tail if it exits or takes longer than `limit`.
    #[allow(clippy::panic)]
    fn wait_up(&mut self, limit: Duration) {
        let addr: SocketAddr = ([127, 0, 0, 1], self.port).into();
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(c) = self.child.as_mut()
                && let Ok(Some(status)) = c.try_wait()
            {
                panic!("{} exited ({status}):\n{}", self.name, tail(&self.log()));
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
                && self
                    .log()
                    .get(self.log_from..)
                    .is_some_and(|l| l.contains("Kafka Server started"))
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!(
            "{} did not start within {limit:?}:\n{}",
            self.name,
            tail(&self.log())
        );
    }

    fn log(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = File::open(self.home.join("broker.log")) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }

    /// SIGKILL the JVM, if it runs, and reap it.
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Kraft {
    fn drop(&mut self) {
        self.kill();
    }
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// What differs between the KRaft nodes' `server.properties`.
struct Props<'a> {
    node_id: usize,
    port: u16,
    cport: u16,
    /// `controller.quorum.voters`: `id@host:port` of every node, comma-separated.
    voters: &'a str,
    data: &'a Path,
    /// The replication factor of every topic, the internal ones included; with more than
    /// one, `min.insync.replicas` is 2.
    replicas: usize,
}

/// One KRaft node. A short minimum session so that tests can lose a consumer quickly;
/// automatic topic creation left on, as brokers ship it, so that a client that would create
/// the cluster's topics by asking for them shows.
///
/// With replicas, `min.insync.replicas` 2: an acknowledged write (`acks=all`) is on two
/// brokers at least, so losing one loses nothing; and a shorter broker session than the
/// default 9 s, so that the controllers fence a killed broker, and move its leaderships,
/// within a test's patience (heartbeats every second keep a busy but live broker in).
fn properties(p: &Props) -> String {
    let Props {
        node_id,
        port,
        cport,
        voters,
        data,
        replicas,
    } = *p;
    let (min_isr, fencing) = if replicas > 1 {
        (
            2,
            "broker.session.timeout.ms=4000\nbroker.heartbeat.interval.ms=1000\n",
        )
    } else {
        (1, "")
    };
    format!(
        "process.roles=broker,controller
node.id={node_id}
controller.quorum.voters={voters}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs={data}
num.partitions=1
default.replication.factor={replicas}
min.insync.replicas={min_isr}
offsets.topic.replication.factor={replicas}
offsets.topic.num.partitions={OFFSETS_PARTITIONS}
transaction.state.log.replication.factor={replicas}
transaction.state.log.min.isr={min_isr}
transaction.state.log.num.partitions={OFFSETS_PARTITIONS}
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000
{fencing}",
        data = data.display()
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
