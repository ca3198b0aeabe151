"""redis-py (pinned by tests/resp.rs) against Veltrix's Redis-protocol listener.

Usage: resp_client.py HOST PORT SCENARIO
  open    every command in RESP2 and RESP3, pipelining (10,000 deep), errors
  auth    AUTH and HELLO AUTH with the scoped tokens of tests/common (ingest, read, admin)
  budget  HSET until the feature budget refuses one
  cluster PORT2 PORT3 …: nodes of one cluster; writes through one, reads through the others,
          read-your-writes on one connection (docs/RESP.md, "Cluster mode")

Each scenario asserts what it sees (a failed assert exits non-zero with the traceback) and
prints one JSON object on stdout for the Rust side to check against HTTP.
"""

import json
import sys

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


def main():
    host, port, scenario = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if scenario == "cluster":
        out = cluster(host, port, [int(p) for p in sys.argv[4:]])
    else:
        out = {"open": both_protocols, "auth": auth, "budget": budget}[scenario](host, port)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
