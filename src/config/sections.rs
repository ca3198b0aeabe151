//! Every scalar config key, declared once (see [`super::declare`]): its field and type, its
//! default, how it is written as text, its flag, its `--help` line and its docs/CONFIG.md
//! row. The section structs, their defaults and [`KEYS`] are generated from this; list-valued
//! keys, file only, are in [`FILE_ONLY`].

use super::codec::{Cluster, Dur, Fsync, Log, Millis, Num, Octal, Opt, Path, Size, Text};
use super::declare::{FileOnly, sections};
use super::{ClusterMode, FsyncSetting, LogFormat};
use std::path::PathBuf;
use std::time::Duration;

const MIB: u64 = 1 << 20;

sections! {
    server: ServerConfig {
        /// `host:port`; resolved when binding, so `localhost:7100` works too.
        listen: String = "127.0.0.1:7100".into(), via Text,
        flag("--listen", "ADDR", clap::value_parser!(String)),
        help "HTTP address (host:port); port 0 picks a free one",
        doc "\
            HTTP address, `host:port`. Port `0` picks a free port; the log line `listening on \
            <addr>` gives the real one. A non-loopback address without `auth.tokens` logs a \
            warning.";
        uds: Option<PathBuf> = None, via Opt<Path>,
        flag("--uds", "PATH", clap::value_parser!(PathBuf)),
        help "also serve HTTP on this Unix socket path",
        doc "\
            Also serve the HTTP API on this Unix socket. A leftover socket file that nobody \
            listens on is removed at start-up; any other file there is an error. Removed at \
            shutdown.";
        /// Octal permission bits of the Unix socket, written as a string (`"0660"`) because YAML
        /// 1.2 reads an unquoted `0660` as the decimal 660.
        uds_mode: u32 = 0o660, via Octal,
        de "super::codec::octal_mode",
        shown "`\"0660\"`",
        help "permission bits of the Unix socket (octal string)",
        doc "Permission bits of the Unix sockets, HTTP and frames (octal string).";
        frames_listen: Option<String> = None, via Opt<Text>,
        flag("--frames-listen", "ADDR", clap::value_parser!(String)),
        help "binary frames address, host:port (docs/PROTOCOL.md)",
        doc "\
            Binary frames listener (persistent producer connections, docs/PROTOCOL.md), \
            `host:port`. Port `0` picks a free port; the log line `frames: accepting on <addr>` \
            gives the real one. A frame is at most `ingest.max_body_bytes`. A non-loopback address \
            without `auth.tokens` logs a warning.";
        frames_uds: Option<PathBuf> = None, via Opt<Path>,
        flag("--frames-uds", "PATH", clap::value_parser!(PathBuf)),
        help "binary frames Unix socket (mode server.uds_mode)",
        doc "\
            Binary frames on a Unix socket, created with `server.uds_mode`. A leftover socket file \
            that nobody listens on is removed at start-up; any other file there is an error. \
            Removed at shutdown.";
        resp_listen: Option<String> = None, via Opt<Text>,
        flag("--resp-listen", "ADDR", clap::value_parser!(String)),
        help "Redis-protocol feature listener, host:port (docs/RESP.md)",
        doc "\
            Redis-protocol listener of the feature store (RESP2 and RESP3: `HGET`, `HSET`, … \
            docs/RESP.md), `host:port`; off by default. Port `0` picks a free port; the log line \
            `resp: accepting on <addr>` gives the real one. A non-loopback address without \
            `auth.tokens` logs a warning. In cluster mode it serves every entity, reading from \
            its owner (docs/RESP.md, \"Cluster mode\").";
        resp_uds: Option<PathBuf> = None, via Opt<Path>,
        flag("--resp-uds", "PATH", clap::value_parser!(PathBuf)),
        help "Redis-protocol feature listener on a Unix socket (mode server.uds_mode)",
        doc "\
            The Redis-protocol listener on a Unix socket, created with `server.uds_mode`. A \
            leftover socket file that nobody listens on is removed at start-up; any other file \
            there is an error. Removed at shutdown.";
        /// A RESP connection that sends nothing between commands for this long is closed.
        resp_idle_timeout: Duration = Duration::from_secs(600), via Dur,
        de "super::units::duration",
        help "close a Redis-protocol connection idle between commands this long",
        doc "\
            A Redis-protocol connection that sends no byte between commands for this long gets \
            `-ERR timeout` and is closed. Inside a command, `ingest.body_timeout` applies.";
        /// Bound on draining in-flight requests at shutdown.
        shutdown_timeout: Duration = Duration::from_secs(30), via Dur,
        de "super::units::duration",
        help "bound on draining requests at shutdown",
        doc "\
            After SIGTERM/SIGINT, how long in-flight requests may take to finish before their \
            connections are closed. The store then drains its queue and fsyncs.";
        /// A frames connection that sends nothing between frames for this long is closed.
        frames_idle_timeout: Duration = Duration::from_secs(600), via Dur,
        de "super::units::duration",
        help "close a frames connection idle between frames this long",
        doc "\
            A frames connection that sends no byte between frames for this long, with no batch of \
            it in flight, gets ERROR `timeout` (request id 0) and is closed. Inside a frame, \
            `ingest.body_timeout` applies.";
        /// Live followers (SSE, NDJSON and WebSocket) and blocked Redis `XREAD`s at once; past
        /// it a new one gets 503 (an `XREAD`: an error).
        max_followers: usize = 10_000, via Num<usize>,
        help "live followers (SSE, NDJSON, WebSocket) and blocked XREADs at once; 503 past it",
        doc "\
            Live followers at once (`follow=true` over SSE or NDJSON, and WebSocket), with the \
            Redis protocol's `XREAD … BLOCK`s waiting (docs/RESP.md); past it a new follower \
            gets `503` `not_ready` with `\"limit\": \"server.max_followers\"` and \
            `Retry-After`, a blocked `XREAD` an error. Bounded replays (`pace=original` or SSE \
            without `follow`) are not counted. Each follower costs memory (docs/LIVE.md); at \
            least 1.";
        /// How long a request head may take from its first byte (or from the accept) to its end;
        /// also bounds each write to a frames client that stopped reading.
        header_timeout: Duration = Duration::from_secs(30), via Dur,
        de "super::units::duration",
        help "close a connection whose request head takes longer (frames: a stalled write)",
        doc "\
            An HTTP connection with no request in flight whose next request head does not arrive \
            whole within this long — counted from the accept on a new connection, from the first \
            byte of the head on a kept-alive one — is closed without an answer (as nginx's \
            `client_header_timeout`). Also bounds writes to a binary-frames client: one that takes \
            no byte of its acks for this long is closed. Bodies are bounded by \
            `ingest.body_timeout`, not this. More than 0.";
        /// An HTTP connection with no request in flight and no byte received for this long
        /// after its last answer is closed.
        keepalive_timeout: Duration = Duration::from_secs(300), via Dur,
        de "super::units::duration",
        help "close an HTTP connection idle after its last answer this long",
        doc "\
            An HTTP connection that has been answered and then has no request in flight and \
            receives no byte for this long is closed (idle keep-alive); an HTTP/2 one once no \
            stream has been open for this long (its own frames do not count). Followers (SSE, \
            NDJSON, WebSocket) and slow answers are in flight, not idle. More than 0.";
        /// Open connections of all listeners together; past it new ones are refused.
        max_connections: u64 = 16_384, via Num<u64>,
        help "open connections of all listeners; new ones refused past it",
        doc "\
            Open connections of all listeners together (HTTP, binary frames and the Redis \
            protocol, each over TCP and the Unix socket; followers count). Past it a new \
            connection is accepted and closed at once: HTTP ones first get `503` `not_ready` \
            (`\"limit\": \"server.max_connections\"`, `Retry-After: 1`, `Connection: close`), \
            frames and Redis-protocol ones nothing. Counted in `vx_connections_refused_total{listener}`. Keep it below the \
            process's descriptor limit minus what the store needs. At least 1.";
    }
    storage: StorageSection {
        data_dir: PathBuf = PathBuf::from("./veltrix-data"), via Path,
        flag("--data-dir", "DIR", clap::value_parser!(PathBuf)),
        help "data directory (created if missing; locked)",
        doc "Data directory; created if missing, locked (`flock` on `LOCK`) while in use.";
        /// `None`: the count recorded in the data dir, or 128 for a new one. Only an explicit
        /// value can conflict with the recorded count.
        shards: Option<u32> = None, via Opt<Num<u32>>,
        flag("--shards", "N", clap::value_parser!(u32).range(1..=65536)),
        shown "unset (the count recorded in the data dir, or 128 for a new one)",
        help "shard count; unset: the recorded count, or 128 for a new data dir",
        doc "\
            Shard count, 1–65536. Recorded when the data dir is created; an explicit different \
            count is a start-up error.";
        fsync: FsyncSetting = FsyncSetting::Always, via Fsync,
        flag(
            "--fsync",
            "FSYNC",
            clap::builder::EnumValueParser::<FsyncSetting>::new()
        ),
        help "when to fsync: always | interval | never",
        doc "\
            `always`: acknowledge after an fdatasync (group commit; default durability `fsync`). \
            `interval`: acknowledge after the write, fsync at least every \
            `storage.fsync_interval_ms` (durability `write`). `never`: leave syncing to the OS \
            (durability `write`).";
        /// Upper bound on the time between fsyncs under `fsync: interval`.
        fsync_interval_ms: u64 = 100, via Millis,
        de "super::units::millis",
        help "max ms between fsyncs under fsync: interval",
        doc "\
            Under `fsync: interval`, the longest time between fsyncs, in milliseconds (a duration \
            such as `250ms` is accepted too). 100 ms bounds what an OS crash can lose to a tenth \
            of a second of acknowledged writes at a small fraction of the cost of `always`.";
        segment_bytes: u64 = 128 * MIB, via Size,
        de "super::units::size",
        help "log segment size before rolling",
        doc "\
            A log segment is rolled (sealed: its index file written) once it reaches this size; \
            64KiB–2GiB (the index files hold 32-bit offsets). Retention deletes whole segments, so \
            this is also the granularity of retention. A segment is also rolled early when its \
            in-memory index reaches 16MiB, which bounds memory whatever the request shapes.";
        max_streams: u64 = 1_000_000, via Num<u64>,
        help "max distinct streams (507 past it)",
        doc "\
            Most distinct streams; a request creating more gets 507 naming the limit. Streams \
            whose events were all retained away still count (they stay listed with `events: 0`) \
            until they are deleted; deleted streams do not count. Memory per stream is bounded \
            (docs/ARCHITECTURE.md), so this key bounds the metadata memory.";
        /// Bytes of index pages kept in memory for readers (0: none).
        index_cache_bytes: u64 = 64 * MIB, via Size,
        de "super::units::size",
        help "memory for sealed index files' pages that reads touch (0: none)",
        doc "\
            Memory for the pages (4KiB) of sealed segments' index files that reads touch, so \
            that a small read looks its event up without reading the index file again: with \
            the pages it needs cached, a 1-event read costs one read of the log. Bounded \
            (S3-FIFO eviction, each page counted with 64 bytes of overhead; \
            `vx_index_cache_bytes`): 64MiB holds about 16,000 pages, and a 1-event read \
            touches a few pages per sealed segment its stream's chain visits. `0` turns it \
            off.";
        /// Budget of the feature tables: past it, writes creating entities or features get 507.
        max_feature_bytes: u64 = 1024 * MIB, via Size,
        de "super::units::size",
        help "feature table budget (507 for new entities/features past it)",
        doc "\
            Budget of the feature tables' memory, as they measure it (their slot arenas and \
            index tables from their capacity, what entities keep outside their slots, names; \
            `vx_feature_bytes`, docs/FEATURES.md). A request whose apply could take them past it \
            gets 507 `storage_full` naming this limit, and nothing of it is stored. What an \
            entity with the built-ins and a counter counts is measured in docs/BENCHMARKS.md, \
            \"Feature memory per entity\"; a new declared aggregate is reserved at its largest (a \
            window 1.5KiB, a windowed `distinct` 1KiB) while the request is checked.";
        /// How often the feature tables are snapshotted (also at shutdown).
        snapshot_interval: Duration = Duration::from_secs(300), via Dur,
        de "super::units::duration",
        help "how often the feature tables are snapshotted (and at shutdown)",
        doc "\
            How often the feature tables are snapshotted (also at shutdown; at least `1s`). A \
            restart loads the newest valid snapshot and replays the log after it, so this bounds \
            the replay. The two newest snapshots are kept in `DATA_DIR/snapshots/`, and retention \
            keeps the log after the older one (when retention would delete a segment no snapshot \
            covers yet, it takes one first).";
    }
    ingest: IngestConfig {
        /// Reservation counter per shard, in events.
        queue_capacity: u32 = 8192, via Num<u32>,
        help "reservation capacity per shard, in events",
        doc "Reservation capacity per shard, in events.";
        high_water: f64 = 0.9, via Num<f64>,
        help "fill of a shard (0..1] at which ingest gets 429",
        doc "\
            Fill of a shard at which new requests touching it get 429 `backpressure`. `0 < \
            low_water < high_water ≤ 1`.";
        low_water: f64 = 0.75, via Num<f64>,
        help "fill below which paused streaming connections resume",
        doc "\
            Fill a shard must drain below before `Retry-After` expects room again (and paused \
            streaming connections resume).";
        max_queued_bytes: u64 = 512 * MIB, via Size,
        de "super::units::size",
        help "bytes admitted but not yet written, all shards",
        doc "Bytes of admitted but not yet written events, all shards; past it, 429.";
        max_inflight_bytes: u64 = 512 * MIB, via Size,
        de "super::units::size",
        help "bytes of request bodies being decoded",
        doc "\
            Bytes of request bodies being decoded; when spent, the server stops reading bodies \
            (TCP flow control) instead of refusing them. At least `ingest.max_body_bytes`.";
        max_body_bytes: u64 = 64 * MIB, via Size,
        de "super::units::size",
        help "max request body (decompressed)",
        doc "\
            Largest request body (decompressed); past it, 413 `too_large`. At most 1023MiB: a \
            request is one log record, whose length is capped at 1GiB (checked at start-up). The \
            decoded request is held to it too: a YAML body whose aliases expand its events past \
            this size is refused with 413 naming this limit (alias expansion also counts against \
            `ingest.max_event_bytes` per event).";
        max_event_bytes: u64 = MIB, via Size,
        de "super::units::size",
        help "max size of one event",
        doc "Largest single event; past it, 413. At most `ingest.max_body_bytes`.";
        dedup_window: Duration = Duration::from_secs(600), via Dur,
        de "super::units::duration",
        help "how long an (stream, id) pair is remembered",
        doc "How long (on append time) a `(stream, id)` pair is remembered for idempotency.";
        dedup_memory: u64 = 64 * MIB, via Size,
        de "super::units::size",
        help "memory budget of remembered ids, all shards",
        doc "\
            Memory for remembered ids, split across shards; past it the oldest are forgotten \
            (`vx_dedup_horizon_seconds`).";
        /// A request body (or a frame mid-way) that receives nothing for this long is dropped.
        body_timeout: Duration = Duration::from_secs(30), via Dur,
        de "super::units::duration",
        help "drop a request body (or a frame) that sends nothing this long (408)",
        doc "\
            A request body that receives no byte for this long (per wait, not per body: a slow \
            body that keeps arriving is not cut) is dropped: 408 `timeout` with `Connection: \
            close` if the client still reads, and its share of `ingest.max_inflight_bytes` goes \
            back at once. Waits for budget are the server's and are not timed. A frames connection \
            that stalls inside a frame gets ERROR `timeout` for the cut-off batch and for the \
            connection, and is closed.";
    }
    retention: RetentionConfig {
        /// Age (on append time) past which whole segments are deleted; `None`: keep forever.
        max_age: Option<Duration> = None, via Opt<Dur>,
        de "super::units::opt_duration",
        shown "unset (keep)",
        help "delete segments older than this (unset: keep)",
        doc "\
            Delete whole sealed segments whose newest record was appended longer ago than this \
            (server append time, not event `ts`). Checked every second and at each roll. The \
            active segment is never deleted, so the data actually kept can reach back `max_age` \
            plus the time to fill one segment.";
        /// Total log size past which the oldest segments are deleted; `None`: no bound.
        max_bytes: Option<u64> = None, via Opt<Size>,
        de "super::units::opt_size",
        shown "unset (keep)",
        help "delete oldest segments past this size (unset: keep)",
        doc "\
            Delete the oldest sealed segments (with their index files) while the log on disk is \
            larger than this. The log can exceed it by up to one segment (the active one is never \
            deleted). Replay then starts at each stream's first retained `seq` (`X-Vx-First-Seq`).";
    }
    /// The feature store's keys besides its declarations; the struct, whose file form is
    /// also the list of declarations, is [`super::FeaturesSection`].
    @custom features: FeaturesSection {
        /// Threads that apply the feature tables; `None`: half the cores the process may use.
        apply_threads: Option<usize> = None, via Opt<Num<usize>>,
        flag("--apply-threads", "N", clap::value_parser!(usize)),
        shown "half the cores the process may use, at least 1",
        help "threads applying the feature tables (default: half the usable cores)",
        doc "\
            Threads that apply ingest to the feature tables, each owning a fixed share of the \
            shards and applying its shards' events in log order (docs/FEATURES.md, \
            \"Apply threads\"); a request is answered once every thread has applied it. Unset: \
            half the cores this process may run on (its CPU affinity, as `taskset` sets it, and \
            its cgroup quota), at least 1. `1` is one applier. At most one per shard (more are \
            not started). More threads help a machine with idle cores; on two cores shared with \
            the request decoding, `1` is the default. In the file, `features` is then a mapping: \
            `features: {apply_threads: N, declare: [...]}`, the declarations under `declare`.";
    }
    /// OTLP in (`POST /v1/traces`, `/v1/logs`).
    otlp: OtlpConfig {
        /// The resource attribute whose value names an OTLP item's stream (`service.name`:
        /// one stream per service). Resources without it go to `unknown_service`, as in OTel.
        stream_attribute: String = "service.name".to_string(), via Text,
        help "OTLP in: resource attribute naming the stream of spans and logs",
        doc "\
            OTLP in (`POST /v1/traces`, `/v1/logs`): the resource attribute whose value names the \
            stream of each span and log record. A resource without it (or with an empty value) \
            goes to `unknown_service`, OTel's default; a non-string value names the stream by its \
            JSON text; a value that is not a valid stream name rejects that resource's items (OTLP \
            partial success). Must not be empty.";
    }
    telemetry: TelemetryConfig {
        otlp_endpoint: Option<String> = None, via Opt<Text>,
        help "OTLP/HTTP trace export: a collector base URL (http://host:4318)",
        doc "\
            OTLP/HTTP (protobuf) trace export: a collector's base URL like \
            `OTEL_EXPORTER_OTLP_ENDPOINT` (`http://collector:4318`; `/v1/traces` is appended \
            unless the URL ends with it). Unset: no export. Not an `http(s)://` URL with a host: \
            start-up error. The standard `OTEL_TRACES_SAMPLER`/`OTEL_TRACES_SAMPLER_ARG`, \
            `OTEL_BSP_*` and `OTEL_EXPORTER_OTLP_HEADERS` variables apply. See docs/OPERATIONS.md \
            \"Traces\".";
    }
    /// Cluster mode on Kafka (docs/CLUSTER.md).
    cluster: ClusterConfig {
        mode: ClusterMode = ClusterMode::Single, via Cluster,
        flag(
            "--cluster",
            "MODE",
            clap::builder::EnumValueParser::<ClusterMode>::new()
        ),
        help "single (default) | kafka: shards are partitions of cluster.topic",
        doc "\
            `single`: one node, its own log (the default; nothing below is read). `kafka`: \
            cluster mode (docs/CLUSTER.md): the shards are the partitions of `cluster.topic`, \
            any node takes writes and answers reads, each node applies the partitions the \
            consumer group gives it. Needs `cluster.kafka_brokers`, `cluster.topic`, \
            `cluster.node_id` and `cluster.advertise`.";
        kafka_brokers: Option<String> = None, via Opt<Text>,
        flag("--kafka-brokers", "H:P,...", clap::value_parser!(String)),
        help "cluster: Kafka bootstrap brokers, host:port[,host:port...]",
        doc "\
            Kafka's bootstrap brokers, `host:port[,host:port…]` (librdkafka's \
            `bootstrap.servers`). Required with `cluster.mode: kafka`.";
        topic: Option<String> = None, via Opt<Text>,
        flag("--kafka-topic", "T", clap::value_parser!(String)),
        help "cluster: the topic whose partitions are the shards",
        doc "\
            The topic whose partitions are the shards, created with `storage.shards` partitions \
            if absent (a different count is a start-up error). The cluster also uses \
            `T.entities` (the feature path, keyed by entity) and `T.members` (compacted: who \
            owns which partition at which URL); the consumer group is `T.group`. 1–240 bytes \
            of `[A-Za-z0-9._-]`. Required with `cluster.mode: kafka`.";
        node_id: Option<String> = None, via Opt<Text>,
        flag("--node-id", "N", clap::value_parser!(String)),
        help "cluster: this node's name, unique in the cluster",
        doc "\
            This node's name, unique in the cluster and stable across its restarts (its Kafka \
            transactional ids are derived from it, so a restarted node fences its old self): \
            1–64 bytes of `[A-Za-z0-9._-]`. Reported as `X-Vx-Node`. Required with \
            `cluster.mode: kafka`.";
        advertise: Option<String> = None, via Opt<Text>,
        flag("--advertise", "URL", clap::value_parser!(String)),
        help "cluster: the URL other nodes reach this node's HTTP API at",
        doc "\
            The base URL at which the other nodes (and clients told by `X-Vx-Node`) reach this \
            node's HTTP API, `http://host:port`. Required with `cluster.mode: kafka`.";
        /// The consumer group's session timeout (and the producers' transaction timeout).
        session_timeout: Duration = Duration::from_secs(6), via Dur,
        de "super::units::duration",
        help "cluster: a node silent this long loses its partitions to the others",
        doc "\
            The consumer group's `session.timeout.ms`: a node that is silent for this long \
            (killed, frozen, cut off) loses its partitions, which move to the other nodes; \
            the new owners fence the dead node's open transactions at once (docs/CLUSTER.md, \
            \"Failure modes\", which also says how soon a dead node's shards are served again \
            with the defaults). Also the producers' `transaction.timeout.ms` (at least 5s). \
            1s–5m; the broker's `group.min.session.timeout.ms` (default 6s) and \
            `group.max.session.timeout.ms` bound it too.";
        /// A partition whose local copy lags the topic by more than this much replay time is
        /// discarded and rebuilt.
        max_catchup: Duration = Duration::from_secs(300), via Dur,
        de "super::units::duration",
        help "cluster: replay at most this long to catch a shard up, else rebuild it",
        doc "\
            When this node is given a partition, it loads its local copy and replays the topic \
            from the offset that copy had applied. If that replay would take longer than this \
            (estimated from the gap and the measured apply rate), or the copy is missing or \
            older than what the topic still holds, the local copy of that shard is discarded \
            and rebuilt from the start of the topic (docs/CLUSTER.md, \"Restart and \
            rebalance\").";
    }
    log: LogConfig {
        format: LogFormat = LogFormat::Pretty, via Log,
        flag(
            "--log-format",
            "LOG_FORMAT",
            clap::builder::EnumValueParser::<LogFormat>::new()
        ),
        help "log format: pretty | json",
        doc "\
            `pretty`: human-readable, one line per event. `json`: one JSON object per line, the \
            text in `message`.";
    }
}

/// Keys that hold lists and can only be set in the file.
pub const FILE_ONLY: &[FileOnly] = &[
    FileOnly {
        name: "features",
        shown: "`[]`",
        help: "declared sliding-window features: [{name, from, agg, window, ttl, of}]",
        doc: "\
            Declared aggregates over events of type `from`: `[{name, from, agg, window, ttl, \
            of}]`, `agg` one of `count`, `sum`, `min`, `max`, `avg`, `last`, `distinct`; `window` \
            1s–30d or absent (all time), sliding on event `ts` in 60 buckets; `ttl` hides the \
            feature on read once not updated for that long; `of` (distinct only): `value` \
            (default), `stream` or `data`. Names are 1–128 bytes of `[A-Za-z0-9_.:-]`, unique, and \
            must not clash with the built-ins `events` and `last_ts`; a declared name owns it (a \
            counter or gauge event of that type does not write it, a PUT to it is 422). Changing \
            the list and restarting recomputes the changed ones from the retained log. The list \
            may also be written under `declare` in a mapping beside `features.apply_threads` \
            (`features: {apply_threads: 4, declare: [...]}`). See docs/FEATURES.md.",
    },
    FileOnly {
        name: "auth.tokens",
        shown: "`[]` (auth off)",
        help: "bearer tokens: [{token, scopes: [ingest, read, admin]}]",
        doc: "\
            Bearer tokens: `[{token, scopes: [ingest, read, admin]}]`. With tokens, every route \
            but `/healthz` and `/readyz` needs `Authorization: Bearer <token>`: 401 `unauthorized` \
            without a valid one, 403 `forbidden` without the route's scope (`POST /v1/events` and \
            feature writes (`PUT`/`DELETE /v1/features/…`): `ingest`; reads (the feature batch \
            query too), `/metrics`, the status page `/` and `/v1/status`: `read`; `DELETE \
            /v1/streams/{stream}`: `admin`; `admin` grants all). HTTP Basic credentials whose \
            password is the token (any user name) are accepted too, for browsers \
            (docs/OPERATIONS.md, status page). Compared in constant time.",
    },
];
