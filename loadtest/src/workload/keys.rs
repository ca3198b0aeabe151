//! Every key of the workload file with its default as written in TOML and what it means: the
//! table `--help` prints and `--set` checks names against.

/// A key of the workload file: its name, its default as written in TOML, and what it means.
pub struct Key {
    pub name: &'static str,
    pub default: &'static str,
    pub help: &'static str,
}

/// Every key, in the order `--help` lists them. A unit test checks this against [`Workload`].
pub const KEYS: &[Key] = &[
    Key {
        name: "scenario",
        default: "\"ingest\"",
        help: "ingest (over resp://: one XADD of one event per operation) | replay (over resp://: XRANGE pages; a 1-event page is XRANGE s N-0 N-0) | kv (a key-value mix against Redis, over RESP) | features (the same mix against Veltrix's feature API, over HTTP) | fanout (followers of one stream over SSE while producers ingest it at rate; delivery latency and an ordering check)",
    },
    Key {
        name: "endpoints",
        default: "[\"http://127.0.0.1:7100\"]",
        help: "one or more of http://HOST:PORT, unix:/PATH, frames://HOST:PORT, frames+unix:/PATH, resp://HOST:PORT; connections are spread over them in turn",
    },
    Key {
        name: "connections",
        default: "4",
        help: "connections opened (per endpoint list, round-robin), 1 to 10000; with HTTP endpoints connections × pipeline_depth is at most 100000; fanout: the producers' connections (followers have their own, one each)",
    },
    Key {
        name: "pipeline_depth",
        default: "1",
        help: "requests in flight per connection; frames and RESP pipeline on one connection, HTTP/1.1 has no pipelining, so an http or unix endpoint opens this many connections per connection (features refuses more than 1: set connections to the concurrency instead)",
    },
    Key {
        name: "rate",
        default: "absent",
        help: "operations (requests) per second over all connections, open loop: sends are scheduled at this rate whatever the server does and latency is measured from the scheduled time; absent: closed loop, each slot sends when its previous answer arrives; at most 10000000; fanout needs it (ingest requests/s, so events/s = rate × batch)",
    },
    Key {
        name: "warmup_s",
        default: "2",
        help: "seconds of load before measuring (not in the histograms; fanout: nor are the deliveries of events written during it, though the ordering check covers them)",
    },
    Key {
        name: "measure_s",
        default: "10",
        help: "seconds measured",
    },
    Key {
        name: "sample_hz",
        default: "1",
        help: "time-series samples per second (the JSON report's intervals and the plot)",
    },
    Key {
        name: "seed",
        default: "1",
        help: "seed of every random choice (keys, streams, positions); the same seed replays the same operations",
    },
    Key {
        name: "timeout_s",
        default: "10",
        help: "an operation without an answer after this long is an error (the connection is reopened); fanout: also the limit for a follower's connection and response headers",
    },
    Key {
        name: "token",
        default: "absent",
        help: "bearer token for a server with auth.tokens (ingest or read scope as the scenario needs; over resp:// sent as AUTH <token> on every connection; features: read for GET and queries, ingest for PUT and DELETE; fanout: both, ingest for the producers and read for the followers)",
    },
    Key {
        name: "key_space",
        default: "100000",
        help: "distinct keys: kv keys, features entities, ingest entities",
    },
    Key {
        name: "key_size_b",
        default: "16",
        help: "bytes of a kv key or features entity (\"key:\" and zero-padded digits, as redis-benchmark writes them)",
    },
    Key {
        name: "value_size_b",
        default: "128",
        help: "kv: bytes of a SET value; features: bytes of the string feature v a PUT writes (the same bytes); ingest and fanout: bytes of each event's JSON (padded with a data string); over resp:// (XADD): bytes of the event's fields and values (type, entity, …, data padded)",
    },
    Key {
        name: "distribution",
        default: "\"uniform\"",
        help: "uniform | zipfian | sequential: how keys (kv, features), entities and streams (ingest, replay) are picked; sequential: ingest entities in order across all connections (a fill of key_space new entities), everything else uniform",
    },
    Key {
        name: "zipf_alpha",
        default: "0.99",
        help: "the Zipfian exponent (rank 1, key 0, is the most frequent)",
    },
    Key {
        name: "read_pct",
        default: "70",
        help: "kv and features: percent of GETs",
    },
    Key {
        name: "write_pct",
        default: "25",
        help: "kv and features: percent of SETs (features: PUT)",
    },
    Key {
        name: "delete_pct",
        default: "5",
        help: "kv and features: percent of DELs (features: DELETE)",
    },
    Key {
        name: "query_pct",
        default: "0",
        help: "kv and features: percent of batch reads of batch_size keys (kv: MGET; features: POST /v1/features/query); read_pct + write_pct + delete_pct + query_pct add up to 100",
    },
    Key {
        name: "kv_type",
        default: "\"string\"",
        help: "kv: how a key holds its value: string (GET, SET, DEL, MGET) or hash (HGET key v, HSET key v value, DEL; no batch reads), the form Veltrix's Redis-protocol listener serves features in, so one file runs unchanged against Redis and Veltrix",
    },
    Key {
        name: "batch_size",
        default: "100",
        help: "kv and features: keys per batch read, 1 to 10000 (the feature query's maximum)",
    },
    Key {
        name: "preload_keys",
        default: "key_space",
        help: "kv and features: keys 0..N SET (features: PUT) before the warm-up, so GETs hit (0: none)",
    },
    Key {
        name: "batch",
        default: "1",
        help: "ingest and fanout: events per request (HTTP body or frames BATCH); over resp:// 1 (an XADD is one event)",
    },
    Key {
        name: "streams",
        default: "1",
        help: "ingest and replay: streams written or read, named stream_prefix + 0..streams-1; each request picks one (fanout follows one stream: 1)",
    },
    Key {
        name: "stream_prefix",
        default: "\"lt-\"",
        help: "ingest and replay: prefix of the stream names; fanout follows and writes the stream stream_prefix + \"0\"",
    },
    Key {
        name: "format",
        default: "\"ndjson\"",
        help: "ingest over HTTP: ndjson | json (an array)",
    },
    Key {
        name: "durability",
        default: "absent",
        help: "ingest, fanout and features writes (PUT, DELETE): none | write | fsync, sent as X-Vx-Durability (frames: in the BATCH); absent: the server's mode (over resp:// it cannot be sent: leave it out)",
    },
    Key {
        name: "ids",
        default: "false",
        help: "ingest and fanout: give every event a unique id (exercises dedup)",
    },
    Key {
        name: "entities",
        default: "true",
        help: "ingest and fanout: give every event an entity drawn from key_space (the feature store's path); false: no entity, ingest without features",
    },
    Key {
        name: "entity_names",
        default: "\"short\"",
        help: "ingest and fanout: short (k and the index) | keys (the features and kv key of the index, key_size_b bytes: what the features and kv scenarios read)",
    },
    Key {
        name: "counter",
        default: "false",
        help: "ingest and fanout: every event a counter of 1 (kind counter, value 1: the entity gets a counter feature `lt`) instead of a plain event",
    },
    Key {
        name: "page_events",
        default: "256",
        help: "replay: events per page read (HTTP: limit=; RESP: XRANGE s N-0 M-0 COUNT page_events), from a uniformly random position",
    },
    Key {
        name: "scan_pct",
        default: "0",
        help: "replay: percent of operations that read a whole stream (HTTP: pages of 100000, one after another; RESP: XRANGEs of 10000, all sent at once) instead of one page",
    },
    Key {
        name: "preload_events",
        default: "0",
        help: "replay: before the warm-up, fill each of the streams to at least this many events (HTTP: NDJSON bodies of 1000; RESP: pipelined XADDs, with explicit ids <seq>-0 on servers other than Veltrix) (0: read the streams that exist)",
    },
    Key {
        name: "followers",
        default: "100",
        help: "fanout: SSE followers of the stream (GET /v1/streams/{stream}/events?follow=true), each on its own connection, all connected before the producers start; 1 to 100000",
    },
    Key {
        name: "drain_s",
        default: "2",
        help: "fanout: after the producers stop, seconds the followers have to receive the tail (through the last acked seq) before the ordering check; 0 to 3600",
    },
];

/// The `--help` text of the workload keys.
pub fn keys_help() -> String {
    let mut out = String::from(
        "WORKLOAD KEYS (TOML; any key can be given or overridden with --set key=value):\n",
    );
    for k in KEYS {
        out.push_str(&format!("  {:<15} default {}\n", k.name, k.default));
        for line in wrap(k.help, 76) {
            out.push_str(&format!("      {line}\n"));
        }
    }
    out
}

fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.len() + 1 + word.len() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}
