"""redis-py (pinned by tests/resp.rs) against Veltrix's Redis-protocol listener.

Usage: resp_client.py HOST PORT SCENARIO
  open    every command in RESP2 and RESP3, pipelining (10,000 deep), errors; values as
          given (bulk strings), binary keys, names and values, HINCRBY/HINCRBYFLOAT (also
          from four connections at once), the connect-time commands (CLIENT, SELECT, ECHO,
          INFO)
  loading PING and INFO answer while the server is starting (INFO: loading:1); the data
          commands are refused with LOADING
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
        # HSET: values kept as the bytes given; the reply counts the new fields.
        assert r.hset(e, mapping={"damage": "42", "ratio": "0.25", "name": "zed"}) == 3
        assert r.hset(e, mapping={"damage": "43", "level": "9"}) == 1
        # Every value comes back as a bulk string, as Redis answers a hash.
        assert r.hget(e, "damage") == b"43", r.hget(e, "damage")
        assert r.hget(e, "ratio") == b"0.25"
        assert r.hget(e, "name") == b"zed"
        assert r.hget(e, "nope") is None
        assert r.hget(p + "nobody", "damage") is None
        assert r.hmget(e, ["name", "nope", "level", "damage"]) == [b"zed", None, b"9", b"43"]
        all_ = r.hgetall(e)
        assert all_ == {b"damage": b"43", b"ratio": b"0.25", b"name": b"zed", b"level": b"9"}, all_
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
            assert res[2 * i + 1] == str(i).encode(), (i, res[2 * i + 1])
        assert r.hget(p + "bulk-99", "f49") == b"4999"
        hash_values(r, p)
        binary(r, p)
        out[p + "incr"] = increments(r, p)
        connecting(host, port, proto, p)
        info = r.info()
        assert info["redis_version"], info
        assert r.command_count() >= 15
        cmds = r.command()
        assert "hget" in cmds and cmds["hget"]["arity"] == 3, cmds.get("hget")
        out[p + "done"] = True
        r.close()
    return out


def hash_values(r, p):
    """What HSET is given reads back as given: strings stay strings, whatever they look like."""
    e = p + "values"
    given = {"zip": "02134", "plus": "+5", "exp": "1e3", "int": "42", "neg": "-7",
             "float": "2.50", "space": " 1", "empty": "", "text": "café ☕"}
    assert r.hset(e, mapping=given) == len(given)
    got = r.hmget(e, list(given))
    assert got == [v.encode() for v in given.values()], got
    assert r.hgetall(e) == {k.encode(): v.encode() for k, v in given.items()}
    # The built-ins hold integers: given in Redis's form, anything else refused.
    assert r.hset(e, "events", "12") == 1
    assert r.hget(e, "events") == b"12"
    refused(lambda: r.hset(e, "events", "012"), "invalid_event", "built in")


def binary(r, p):
    """Binary keys, names and values: kept where the feature model allows (values are UTF-8
    text, NUL included), refused with a clear error where it does not; nothing written then."""
    e = p + "bin"
    assert r.hset(e, "nul", b"a\x00b") == 1
    assert r.hget(e, "nul") == b"a\x00b"
    refused(lambda: r.hset(e, "raw", b"\xff\x00\x01"), "invalid_event", "UTF-8")
    refused(lambda: r.hset(b"k\x00\xff", "f", "1"), "bad_request", "not an entity")
    refused(lambda: r.hset(b"k\x00", "f", "1"), "bad_request", "not an entity")
    refused(lambda: r.hset(e, b"\xff\x01", "1"), "invalid_event", "not a feature name")
    refused(lambda: r.hset(e, b"n\x00", "1"), "invalid_event", "feature name")
    refused(lambda: r.hincrby(b"\xff", "n", 1), "bad_request", "not an entity")
    # A key that cannot be an entity holds nothing.
    assert r.hget(b"k\x00\xff", "f") is None
    assert r.exists(b"k\x00\xff") == 0
    assert r.hexists(e, b"\xff") is False
    assert r.hgetall(e) == {b"nul": b"a\x00b"}


def increments(r, p):
    """HINCRBY and HINCRBYFLOAT, as Redis answers them; concurrent increments from several
    connections all count. Returns the entity and the sums for the Rust side to check after a
    restart."""
    e = p + "incr"
    assert r.hincrby(e, "n", 5) == 5
    assert r.hincrby(e, "n", -2) == 3
    assert r.hget(e, "n") == b"3"
    assert r.hincrbyfloat(e, "f", "0.5") == 0.5
    assert r.hincrbyfloat(e, "f", "2") == 2.5
    assert r.hget(e, "f") == b"2.5"
    # A float with no fraction reads (and counts) as an integer.
    assert r.hincrbyfloat(e, "g", "1.5") == 1.5
    assert r.hincrbyfloat(e, "g", "1.5") == 3.0
    assert r.hget(e, "g") == b"3"
    assert r.hincrby(e, "g", 1) == 4
    # Strings that read as numbers count; others are refused and kept.
    assert r.hset(e, mapping={"s": "5", "zip": "02134", "word": "zed",
                              "big": str(2 ** 63 - 1), "e3": "1e3"}) == 5
    assert r.hincrby(e, "s", 1) == 6
    assert r.hget(e, "s") == b"6"
    refused(lambda: r.hincrby(e, "zip", 1), "hash value is not an integer")
    refused(lambda: r.hincrby(e, "e3", 1), "hash value is not an integer")
    assert r.hget(e, "zip") == b"02134"
    assert r.hincrbyfloat(e, "zip", "0.5") == 2134.5
    assert r.hincrbyfloat(e, "e3", "-0.25") == 999.75
    refused(lambda: r.hincrbyfloat(e, "word", 1), "hash value is not a float")
    assert r.hget(e, "word") == b"zed"
    refused(lambda: r.hincrby(e, "big", 1), "increment or decrement would overflow")
    assert r.hget(e, "big") == str(2 ** 63 - 1).encode()
    refused(lambda: r.hincrby(e, "n", "1.5"), "value is not an integer or out of range")
    refused(lambda: r.hincrbyfloat(e, "n", "nan"), "value is not a valid float")
    refused(lambda: r.hincrbyfloat(e, "events", 1), "invalid_event", "built in")
    refused(lambda: r.execute_command("HINCRBY", e, "n"), "wrong number of arguments")
    assert r.hget(e, "n") == b"3"
    # Concurrent increments of one field from four connections: every one counts, and the
    # replies are every value from 1 to the total exactly once.
    host = r.connection_pool.connection_kwargs["host"]
    port = r.connection_pool.connection_kwargs["port"]
    c = p + "race"
    per, threads = 150, 4
    replies = [None] * threads

    def bump(k):
        client = redis.Redis(host=host, port=port)
        pipe = client.pipeline(transaction=False)
        for _ in range(per):
            pipe.hincrby(c, "hits", 1)
            pipe.hincrbyfloat(c, "score", "0.5")
        replies[k] = pipe.execute()
        client.close()

    workers = [threading.Thread(target=bump, args=(k,)) for k in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    hits = sorted(x for got in replies for x in got[0::2])
    assert hits == list(range(1, per * threads + 1)), hits
    assert r.hget(c, "hits") == str(per * threads).encode()
    assert r.hget(c, "score") == str(per * threads // 2).encode()
    return {"entity": c, "hits": per * threads}


def connecting(host, port, proto, p):
    """What clients send when they connect: CLIENT SETNAME (redis-py's client_name), CLIENT
    SETINFO (redis-py sends its name and version), SELECT (redis-py's db), ECHO, INFO."""
    name = f"{p}feeder"
    r = redis.Redis(host=host, port=port, protocol=proto, client_name=name)
    assert str_of(r.client_getname()) == name
    other = redis.Redis(host=host, port=port, protocol=proto)
    assert other.client_getname() is None
    ids = {r.client_id(), other.client_id()}
    assert len(ids) == 2 and all(isinstance(i, int) and i > 0 for i in ids), ids
    other.close()
    assert r.client_setname("worker_2") is True
    assert str_of(r.client_getname()) == "worker_2"
    refused(lambda: r.client_setname("a b"), "cannot contain spaces")
    assert str_of(r.client_getname()) == "worker_2"
    assert r.client_setinfo("lib-name", "mylib") is True
    assert r.client_setinfo("LIB-VER", "1.0") is True
    refused(lambda: r.client_setinfo("lib-name", "my lib"), "cannot contain spaces")
    refused(lambda: r.client_setinfo("lib-color", "x"), "Unrecognized option")
    refused(lambda: r.execute_command("CLIENT", "KILL", "x"), "unknown subcommand")
    refused(lambda: r.execute_command("CLIENT"), "wrong number of arguments")
    refused(lambda: r.execute_command("CLIENT", "GETNAME", "x"), "wrong number of arguments")
    assert r.execute_command("SELECT", 0) in (True, b"OK", "OK")
    refused(lambda: r.execute_command("SELECT", 1), "DB index is out of range")
    refused(lambda: r.execute_command("SELECT", "x"), "not an integer")
    assert redis.Redis(host=host, port=port, protocol=proto, db=0).ping() is True
    try:
        redis.Redis(host=host, port=port, protocol=proto, db=1).ping()
        raise AssertionError("SELECT 1 answered")
    except (redis.ResponseError, redis.ConnectionError) as err:
        assert "DB index is out of range" in str(err), err
    assert r.echo("hi") == b"hi"
    info = r.info()
    assert info["loading"] == 0 and info["role"] == "master", info
    assert info["connected_clients"] >= 1, info
    assert r.info("persistence") == {"loading": 0}
    r.close()


def str_of(x):
    return x.decode() if isinstance(x, bytes) else x


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
    assert a.hget("secured", "x") == b"1"
    a.close()
    return {"done": True}


def loading(host, port):
    for proto in (2, 3):
        r = redis.Redis(host=host, port=port, protocol=proto, client_name="early")
        assert r.ping() is True
        assert r.info()["loading"] == 1
        assert r.info("persistence") == {"loading": 1}
        try:
            r.hget("a", "b")
            raise AssertionError("HGET answered while loading")
        except redis.exceptions.BusyLoadingError as err:
            assert "not_ready" in str(err), err
        try:
            r.hincrby("a", "b", 1)
            raise AssertionError("HINCRBY answered while loading")
        except redis.exceptions.BusyLoadingError:
            pass
        r.close()
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
    # Increments through one node: the sums are the owner's.
    assert w.hincrby("rp-1", "n", 5) == 5
    assert w.hincrbyfloat("rp-1", "n", "1") == 6.0
    refused(lambda: w.hincrby("rp-1", "damage", 1.5), "value is not an integer")
    assert w.hset("rp-1", "word", "zed") == 1
    refused(lambda: w.hincrby("rp-1", "word", 1), "hash value is not an integer")
    assert w.hdel("rp-1", "word") == 1
    for k in range(20):
        assert w.hset(f"rp-many-{k}", "n", str(k)) == 1
    assert w.delete("rp-many-0", "rp-many-1", "rp-nobody") == 2
    assert w.delete("rp-nobody") == 0
    # Reads through every other node, whichever owns each entity.
    for r in readers:
        assert r.hget("rp-1", "damage") == b"43", r.hget("rp-1", "damage")
        assert r.hget("rp-1", "ratio") == b"0.25"
        assert r.hget("rp-1", "name") is None
        assert r.hmget("rp-1", ["level", "nope", "damage"]) == [b"9", None, b"43"]
        assert r.hgetall("rp-1") == {b"damage": b"43", b"ratio": b"0.25", b"level": b"9",
                                     b"n": b"6"}
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
        assert got == [x for k in range(20) for x in (1, str(k).encode())], got
    # Increments of one field through every node at once: all of them count.
    host_port = [(n.connection_pool.connection_kwargs["host"],
                  n.connection_pool.connection_kwargs["port"]) for n in nodes]

    def bump(hp):
        c = redis.Redis(host=hp[0], port=hp[1])
        pipe = c.pipeline(transaction=False)
        for _ in range(20):
            pipe.hincrby("rp-race", "hits", 1)
        pipe.execute()
        c.close()

    workers = [threading.Thread(target=bump, args=(hp,)) for hp in host_port]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    # Each increment was answered once its owner applied it: every node reads the total.
    for r in nodes:
        assert r.hget("rp-race", "hits") == str(20 * len(nodes)).encode()
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
    assert r.hget(p + "p1", "damage") == b"12", r.hget(p + "p1", "damage")
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
        out = {"open": both_protocols, "auth": auth, "budget": budget, "loading": loading,
               "streams-auth": streams_auth}[scenario](host, port)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
