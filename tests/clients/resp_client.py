"""redis-py (pinned by tests/resp.rs) against Veltrix's Redis-protocol listener.

Usage: resp_client.py HOST PORT SCENARIO
  open    every command in RESP2 and RESP3, pipelining (10,000 deep), errors
  auth    AUTH and HELLO AUTH with the scoped tokens of tests/common (ingest, read, admin)
  budget  HSET until the feature budget refuses one
  cluster PORT2 PORT3 …: nodes of one cluster; writes through one, reads through the others,
          read-your-writes on one connection (docs/RESP.md, "Cluster mode")
  streams HTTP_PORT: every stream command in RESP2 and RESP3 (docs/RESP.md, "Streams"): XADD's
          mapping and errors, ranges, XREAD with and without BLOCK (woken by an HTTP write to
          HTTP_PORT and by another connection's XADD), consumer groups refused, a pipeline of
          XADDs; tests/resp_streams.rs has written the streams `from-http` and `from-http-array`
  streams-auth: the stream commands with the scoped tokens of tests/common
  cluster-streams PORT2 PORT3 …: the stream commands on the nodes of one cluster: XADD through
          one, reads through every node, XREAD BLOCK only on a stream's owner

Each scenario asserts what it sees (a failed assert exits non-zero with the traceback) and
prints one JSON object on stdout for the Rust side to check against HTTP.
"""

import json
import sys
import threading
import time
import urllib.request

import redis


def both_protocols(host, port):
    out = {}
    for proto in (2, 3):
        r = redis.Redis(host=host, port=port, protocol=proto)
        p = f"resp{proto}-"
        assert r.ping() is True
        if proto == 3:
            assert r.connection_pool.get_connection("x").handshake_metadata is not None
        e = p + "player-7"
        # HSET: values typed from their text; the reply counts the new fields.
        assert r.hset(e, mapping={"damage": "42", "ratio": "0.25", "name": "zed"}) == 3
        assert r.hset(e, mapping={"damage": "43", "level": "9"}) == 1
        # Integers come back as integers, other numbers and strings as bulk strings.
        assert r.hget(e, "damage") == 43, r.hget(e, "damage")
        assert r.hget(e, "ratio") == b"0.25"
        assert r.hget(e, "name") == b"zed"
        assert r.hget(e, "nope") is None
        assert r.hget(p + "nobody", "damage") is None
        assert r.hmget(e, ["name", "nope", "level", "damage"]) == [b"zed", None, 9, 43]
        all_ = r.hgetall(e)
        assert all_ == {b"damage": 43, b"ratio": b"0.25", b"name": b"zed", b"level": 9}, all_
        assert r.hgetall(p + "nobody") == {}
        assert r.hexists(e, "level") is True
        assert r.hexists(e, "nope") is False
        assert r.exists(e, p + "nobody", e) == 2
        assert r.hdel(e, "level", "nope", "level") == 1
        assert r.hexists(e, "level") is False
        assert r.hdel(e, "nope") == 0
        # A counter set over RESP keeps counting when events add to it (checked over HTTP).
        assert r.hset(p + "counter", "hits", "5") == 1
        # DEL: entities that existed.
        assert r.hset(p + "gone", "x", "1") == 1
        assert r.delete(p + "gone", p + "never") == 1
        assert r.exists(p + "gone") == 0
        # Errors in RESP's error form, the connection still usable after them.
        try:
            r.execute_command("SET", "k", "v")
            raise AssertionError("SET answered")
        except redis.ResponseError as err:
            assert "unknown command" in str(err), err
        try:
            r.execute_command("HGET", e)
            raise AssertionError("HGET with one argument answered")
        except redis.ResponseError as err:
            assert "wrong number of arguments" in str(err), err
        try:
            r.hset(e, "events", "many")
            raise AssertionError("a string into a built-in answered")
        except redis.ResponseError as err:
            assert "invalid_event" in str(err), err
        try:
            r.hset(e, "bad name!", "1")
            raise AssertionError("a bad feature name answered")
        except redis.ResponseError as err:
            assert "invalid_event" in str(err), err
        assert r.ping() is True
        # Pipelining: 10,000 commands in one write, answers in order.
        pipe = r.pipeline(transaction=False)
        for i in range(5000):
            pipe.hset(p + f"bulk-{i % 100}", f"f{i // 100}", str(i))
            pipe.hget(p + f"bulk-{i % 100}", f"f{i // 100}")
        res = pipe.execute()
        assert len(res) == 10000
        for i in range(5000):
            assert res[2 * i] == 1, (i, res[2 * i])
            assert res[2 * i + 1] == i, (i, res[2 * i + 1])
        assert r.hget(p + "bulk-99", "f49") == 4999
        info = r.info()
        assert info["redis_version"], info
        assert r.command_count() >= 15
        cmds = r.command()
        assert "hget" in cmds and cmds["hget"]["arity"] == 3, cmds.get("hget")
        out[p + "done"] = True
        r.close()
    return out


def auth(host, port):
    # No token: every data command is refused, PING included.
    r = redis.Redis(host=host, port=port)
    try:
        r.hget("a", "b")
        raise AssertionError("HGET without a token answered")
    except redis.AuthenticationError as err:
        assert "NOAUTH" in str(err) or "Authentication required" in str(err), err
    r.close()
    # A wrong token.
    try:
        redis.Redis(host=host, port=port, password="wrong").ping()
        raise AssertionError("a wrong token was accepted")
    except redis.AuthenticationError:
        pass
    # The read token reads, and cannot write.
    r = redis.Redis(host=host, port=port, password="read-secret")
    assert r.hget("secured", "x") is None
    try:
        r.hset("secured", "x", "1")
        raise AssertionError("the read token wrote")
    except redis.exceptions.NoPermissionError:
        pass
    r.close()
    # The ingest token writes (RESP3, authenticated by HELLO 3 AUTH default TOKEN) and cannot read.
    w = redis.Redis(host=host, port=port, password="ingest-secret", protocol=3)
    assert w.hset("secured", "x", "1") == 1
    try:
        w.hget("secured", "x")
        raise AssertionError("the ingest token read")
    except redis.exceptions.NoPermissionError:
        pass
    w.close()
    # The admin token does both, with a user name (ignored).
    a = redis.Redis(host=host, port=port, username="ops", password="admin-secret")
    assert a.hget("secured", "x") == 1
    a.close()
    return {"done": True}


def budget(host, port):
    r = redis.Redis(host=host, port=port)
    stored = 0
    refused = None
    for i in range(200000):
        try:
            r.hset(f"budget-{i}", "payload", "x" * 200)
            stored += 1
        except redis.exceptions.OutOfMemoryError as err:
            refused = f"budget-{i}"
            assert "max_feature_bytes" in str(err), err
            break
    assert refused is not None, "the budget never refused"
    assert r.exists(refused) == 0
    return {"stored": stored, "refused": refused}


def cluster(host, port, others):
    nodes = [redis.Redis(host=host, port=p, protocol=proto)
             for p, proto in zip([port] + others, [2, 3, 2, 3])]
    w, readers = nodes[0], nodes[1:]
    # Writes through one node: their counts are the owners'.
    assert w.hset("rp-1", mapping={"damage": "42", "ratio": "0.25", "name": "zed"}) == 3
    assert w.hset("rp-1", mapping={"damage": "43", "level": "9"}) == 1
    assert w.hdel("rp-1", "name", "nope", "name") == 1
    assert w.hdel("rp-1", "nope") == 0
    for k in range(20):
        assert w.hset(f"rp-many-{k}", "n", str(k)) == 1
    assert w.delete("rp-many-0", "rp-many-1", "rp-nobody") == 2
    assert w.delete("rp-nobody") == 0
    # Reads through every other node, whichever owns each entity.
    for r in readers:
        assert r.hget("rp-1", "damage") == 43, r.hget("rp-1", "damage")
        assert r.hget("rp-1", "ratio") == b"0.25"
        assert r.hget("rp-1", "name") is None
        assert r.hmget("rp-1", ["level", "nope", "damage"]) == [9, None, 43]
        assert r.hgetall("rp-1") == {b"damage": 43, b"ratio": b"0.25", b"level": 9}
        assert r.hexists("rp-1", "level") is True
        assert r.hexists("rp-1", "name") is False
        assert r.exists(*[f"rp-many-{k}" for k in range(20)], "rp-nobody") == 18
        assert r.hgetall("rp-nobody") == {}
    # Read-your-writes on one connection, whichever node owns the entity: a pipeline of
    # writes and reads, on every node.
    for i, r in enumerate(nodes):
        p = r.pipeline(transaction=False)
        for k in range(20):
            e = f"ryw-{i}-{k}"
            p.hset(e, "v", str(k))
            p.hget(e, "v")
        got = p.execute()
        assert got == [x for k in range(20) for x in (1, k)], got
    return {"ok": True}


def refused(call, *words):
    """`call` raises a ResponseError whose message holds every one of `words`; its text."""
    try:
        call()
    except redis.ResponseError as err:
        for w in words:
            assert w in str(err), (w, str(err))
        return str(err)
    raise AssertionError(f"answered, and {words} expected")


def xread_entries(got):
    """XREAD's reply as {stream: [(id, fields)]}, whichever protocol (RESP2: a list of pairs;
    RESP3: a map of one-element lists)."""
    if not got:
        return {}
    if isinstance(got, dict):
        return {k: v[0] for k, v in got.items()}
    return {k: v for k, v in got}


def post_event(http_port, event, delay):
    """POST one event over HTTP after `delay` seconds, on a thread of its own."""
    def run():
        time.sleep(delay)
        req = urllib.request.Request(
            f"http://127.0.0.1:{http_port}/v1/events",
            data=json.dumps(event).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 200, resp.status
    t = threading.Thread(target=run)
    t.start()
    return t


def stream_writes(r, p):
    s = p + "match"
    # XADD: type, entity, ts, id, kind, value are the event's; other fields go into data.
    first = {"type": "damage", "entity": p + "p1", "kind": "counter", "value": "12",
             "ts": "1732000000123", "id": "evt-1", "weapon": "bow", "note": 'say "hi"'}
    assert r.xadd(s, first) == b"1-0"
    # A duplicate id answers the stored event's entry id and stores nothing.
    assert r.xadd(s, first) == b"1-0"
    assert r.xadd(s, {"a": "1"}) == b"2-0"
    assert r.xadd(s, {"type": "spawn", "kind": "gauge", "value": "2.5",
                      "ts": "2024-01-01T00:00:00Z"}) == b"3-0"
    assert r.xlen(s) == 3
    # The counter went through the one write path: its entity's feature counts it.
    assert r.hget(p + "p1", "damage") == 12, r.hget(p + "p1", "damage")
    # Bad fields: the rules and words of HTTP ingest, nothing written.
    refused(lambda: r.xadd(s, {"type": "bad type!"}), "invalid_event", '"type"')
    refused(lambda: r.xadd(s, {"kind": "sometimes"}), "invalid_event", '"kind"')
    refused(lambda: r.xadd(s, {"value": "lots"}), "invalid_event", '"value"', "number")
    refused(lambda: r.xadd(s, {"kind": "counter"}), "invalid_event", '"value"')
    refused(lambda: r.xadd(s, {"kind": "counter", "value": "1.5"}), "invalid_event", "integer")
    refused(lambda: r.xadd(s, {"ts": "yesterday"}), "invalid_event", '"ts"')
    refused(lambda: r.xadd(s, {"ts": "-1"}), "invalid_event", '"ts"', "negative")
    refused(lambda: r.xadd(s, {"a": "1"}, id="9-0"), "only '*'")
    refused(lambda: r.xadd(s, {"a": "1"}, maxlen=10), "MAXLEN", "retention")
    refused(lambda: r.xadd(s, {"a": "1"}, nomkstream=True), "NOMKSTREAM")
    refused(lambda: r.execute_command("XADD", s, "*", "a"), "wrong number of arguments")
    assert r.xlen(s) == 3
    # A pipeline of 16 XADDs: every one acknowledged, in order.
    pipe = r.pipeline(transaction=False)
    for i in range(16):
        pipe.xadd(p + "piped", {"i": str(i)})
        if i == 7:
            pipe.xlen(p + "piped")
    got = pipe.execute()
    want = [f"{i + 1}-0".encode() for i in range(8)] + [8] + \
        [f"{i + 1}-0".encode() for i in range(8, 16)]
    assert got == want, got
    assert [f[b"i"] for _, f in r.xrange(p + "piped")] == [str(i).encode() for i in range(16)]
    return s


def stream_ranges(r, p, s):
    entries = r.xrange(s)
    assert [i for i, _ in entries] == [b"1-0", b"2-0", b"3-0"], entries
    one, two, three = (f for _, f in entries)
    assert one == {b"type": b"damage", b"entity": (p + "p1").encode(), b"ts": b"1732000000123",
                   b"kind": b"counter", b"value": b"12", b"weapon": b"bow",
                   b"note": b'say "hi"'}, one
    assert set(two) == {b"type", b"ts", b"a"} and two[b"type"] == b"xadd", two
    assert int(two[b"ts"]) > 1_600_000_000_000, two
    assert three == {b"type": b"spawn", b"ts": b"1704067200000", b"kind": b"gauge",
                     b"value": b"2.5"}, three
    ids = lambda got: [i for i, _ in got]  # noqa: E731
    assert ids(r.xrange(s, "-", "+", count=1)) == [b"1-0"]
    assert ids(r.xrange(s, "(1-0", "+")) == [b"2-0", b"3-0"]
    assert ids(r.xrange(s, "(1", "+")) == [b"2-0", b"3-0"]
    assert ids(r.xrange(s, "2", "2-0")) == [b"2-0"]
    assert ids(r.xrange(s, "2-1", "+")) == [b"3-0"]
    assert ids(r.xrange(s, "-", "(3-0")) == [b"1-0", b"2-0"]
    assert ids(r.xrange(s, "3", "1")) == []
    assert ids(r.xrevrange(s)) == [b"3-0", b"2-0", b"1-0"]
    assert ids(r.xrevrange(s, "+", "-", count=2)) == [b"3-0", b"2-0"]
    assert ids(r.xrevrange(s, "(3-0", "-", count=1)) == [b"2-0"]
    assert ids(r.xrevrange(s, "2", "(1")) == [b"2-0"]
    assert r.xrevrange(s, "+", "-", count=1)[0][1] == three
    refused(lambda: r.xrange(s, "x", "+"), "Invalid stream ID")
    refused(lambda: r.xrange(s, "-", "+", count=100001), "100000")
    # An unknown stream: as Redis answers a key that does not exist.
    assert r.xrange(p + "nobody") == []
    assert r.xrevrange(p + "nobody") == []
    assert r.xlen(p + "nobody") == 0
    refused(lambda: r.xinfo_stream(p + "nobody"), "no such key")
    info = r.xinfo_stream(s)
    assert info["length"] == 3, info
    assert info["first-entry"] == (b"1-0", one), info
    assert info["last-entry"] == (b"3-0", three), info
    assert info["last-generated-id"] == b"3-0" and info["groups"] == 0, info
    refused(lambda: r.execute_command("XINFO", "STREAM", s, "FULL"), "FULL")
    # Events written over HTTP read back as fields (tests/resp_streams.rs wrote them).
    got = r.xrange("from-http")
    assert got == [(b"1-0", {b"type": b"hit", b"entity": b"p9", b"ts": b"1700000000000",
                             b"kind": b"gauge", b"value": b"1.5", b"weapon": b"axe",
                             b"n": b"3", b"o": b'{"a":[1,2]}', b"data.type": b"shadow"})], got
    got = r.xrange("from-http-array")
    assert got == [(b"1-0", {b"type": b"list", b"ts": b"1700000000001",
                             b"data": b"[1,2]"})], got


def stream_xread(r, p, s, http_port):
    got = xread_entries(r.xread({s: "0"}, count=2))
    assert [i for i, _ in got[s.encode()]] == [b"1-0", b"2-0"], got
    got = xread_entries(r.xread({s: "1-0", p + "piped": "15"}))
    assert [i for i, _ in got[s.encode()]] == [b"2-0", b"3-0"], got
    assert [i for i, _ in got[(p + "piped").encode()]] == [b"16-0"], got
    assert xread_entries(r.xread({s: "3-0"})) == {}
    assert xread_entries(r.xread({s: "$"})) == {}
    refused(lambda: r.execute_command("XREAD", "STREAMS", s, "0", "x"), "Unbalanced")
    # BLOCK: nothing comes, the time is up: an empty answer, after the time.
    started = time.monotonic()
    assert xread_entries(r.xread({s: "$"}, block=300)) == {}
    assert time.monotonic() - started >= 0.29
    # BLOCK woken by an HTTP write.
    writer = post_event(http_port, {"stream": s, "type": "http", "entity": "p2",
                                    "data": {"x": {"y": 1}, "n": 2}}, 0.3)
    started = time.monotonic()
    got = xread_entries(r.xread({p + "quiet": "$", s: "$"}, block=10000))
    writer.join()
    assert time.monotonic() - started < 5
    [(i, f)] = got[s.encode()]
    assert i == b"4-0" and f[b"type"] == b"http" and f[b"x"] == b'{"y":1}' and f[b"n"] == b"2", f
    # BLOCK 0 woken by another connection's XADD, to a stream that did not exist.
    other = redis.Redis(host=r.connection_pool.connection_kwargs["host"],
                        port=r.connection_pool.connection_kwargs["port"])
    t = threading.Timer(0.3, lambda: other.xadd(p + "later", {"k": "v"}))
    t.start()
    got = xread_entries(r.xread({p + "later": "$"}, block=0))
    t.join()
    other.close()
    assert [i for i, _ in got[(p + "later").encode()]] == [b"1-0"], got


def streams(host, port, http_port):
    out = {}
    for proto in (2, 3):
        r = redis.Redis(host=host, port=port, protocol=proto)
        p = f"st{proto}-"
        s = stream_writes(r, p)
        stream_ranges(r, p, s)
        stream_xread(r, p, s, http_port)
        # Consumer groups, and removing entries one by one, are not offered: said so.
        refused(lambda: r.xgroup_create(s, "g"), "consumer groups are not offered", "XREAD")
        refused(lambda: r.xreadgroup("g", "c", {s: ">"}), "consumer groups are not offered")
        refused(lambda: r.xack(s, "g", "1-0"), "consumer groups are not offered")
        refused(lambda: r.xpending(s, "g"), "consumer groups are not offered")
        refused(lambda: r.xdel(s, "1-0"), "retention")
        refused(lambda: r.xtrim(s, maxlen=1), "retention")
        refused(lambda: r.xinfo_groups(s), "consumer groups are not offered")
        assert r.ping() is True
        cmds = r.command()
        assert cmds["xadd"]["arity"] == -5, cmds["xadd"]
        assert cmds["xrange"]["first_key_pos"] == 1, cmds["xrange"]
        assert cmds["xread"]["arity"] == -4 and cmds["xread"]["first_key_pos"] == 0
        assert "xinfo" in cmds and "xgroup" not in cmds
        out[p + "done"] = True
        r.close()
    return out


def streams_auth(host, port):
    r = redis.Redis(host=host, port=port)
    try:
        r.xadd("sa", {"a": "1"})
        raise AssertionError("XADD without a token answered")
    except redis.AuthenticationError:
        pass
    r.close()
    read = redis.Redis(host=host, port=port, password="read-secret")
    assert read.xrange("sa") == []
    try:
        read.xadd("sa", {"a": "1"})
        raise AssertionError("the read token wrote")
    except redis.exceptions.NoPermissionError:
        pass
    ingest = redis.Redis(host=host, port=port, password="ingest-secret", protocol=3)
    assert ingest.xadd("sa", {"a": "1"}) == b"1-0"
    for call in (lambda: ingest.xrange("sa"), lambda: ingest.xlen("sa"),
                 lambda: ingest.xrevrange("sa"), lambda: ingest.xinfo_stream("sa"),
                 lambda: ingest.xread({"sa": "0"}), lambda: ingest.xread({"sa": "$"}, block=10)):
        try:
            call()
            raise AssertionError("the ingest token read")
        except redis.exceptions.NoPermissionError:
            pass
    assert [i for i, _ in read.xrange("sa")] == [b"1-0"]
    assert xread_entries(read.xread({"sa": "0"}))[b"sa"][0][0] == b"1-0"
    admin = redis.Redis(host=host, port=port, username="ops", password="admin-secret")
    assert admin.xadd("sa", {"b": "2"}) == b"2-0"
    assert admin.xlen("sa") == 2
    for c in (read, ingest, admin):
        c.close()
    return {"done": True}


def cluster_streams(host, port, others):
    nodes = [redis.Redis(host=host, port=p, protocol=proto)
             for p, proto in zip([port] + others, [2, 3, 2, 3])]
    w = nodes[0]
    # XADD through one node: the entry ids are the seqs the owners assign.
    for k in range(3):
        assert w.xadd("cs-1", {"k": str(k)}) == f"{k + 1}-0".encode()
    for i in range(12):
        assert w.xadd(f"cs-many-{i}", {"i": str(i)}) == b"1-0"
    ids = lambda got: [i for i, _ in got]  # noqa: E731
    # Reads through every node, whichever owns each stream.
    owners = 0
    for r in nodes:
        assert ids(r.xrange("cs-1")) == [b"1-0", b"2-0", b"3-0"], r.xrange("cs-1")
        assert r.xrange("cs-1", "(1", "+", count=1)[0][1][b"k"] == b"1"
        assert ids(r.xrevrange("cs-1", count=2)) == [b"3-0", b"2-0"]
        assert r.xlen("cs-1") == 3
        info = r.xinfo_stream("cs-1")
        assert info["length"] == 3 and info["last-entry"][0] == b"3-0", info
        assert ids(xread_entries(r.xread({"cs-1": "1"}))[b"cs-1"]) == [b"2-0", b"3-0"]
        for i in range(12):
            assert r.xlen(f"cs-many-{i}") == 1
        assert r.xrange("cs-nobody") == [] and r.xlen("cs-nobody") == 0
        # XREAD BLOCK waits on the owner only; elsewhere an error says where to go.
        try:
            assert xread_entries(r.xread({"cs-1": "$"}, block=100)) == {}
            owners += 1
        except redis.ResponseError as err:
            assert "XREAD BLOCK waits on the node that owns the stream" in str(err), err
    assert owners == 1, owners
    # Read-your-writes on one connection, on every node.
    for i, r in enumerate(nodes):
        p = r.pipeline(transaction=False)
        for k in range(5):
            p.xadd(f"cs-ryw-{i}-{k}", {"v": str(k)})
            p.xlen(f"cs-ryw-{i}-{k}")
        got = p.execute()
        assert got == [x for k in range(5) for x in (b"1-0", 1)], got
    return {"ok": True}


def main():
    host, port, scenario = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if scenario == "cluster":
        out = cluster(host, port, [int(p) for p in sys.argv[4:]])
    elif scenario == "cluster-streams":
        out = cluster_streams(host, port, [int(p) for p in sys.argv[4:]])
    elif scenario == "streams":
        out = streams(host, port, int(sys.argv[4]))
    else:
        out = {"open": both_protocols, "auth": auth, "budget": budget,
               "streams-auth": streams_auth}[scenario](host, port)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
