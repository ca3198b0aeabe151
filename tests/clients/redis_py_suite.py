"""redis-py (pinned by tests/common/python.rs) against Veltrix's Redis-protocol listener: the
scenario of tests/redis_clients.rs that go-redis, Jedis and ioredis run too, in RESP2 and RESP3.
(tests/clients/resp_client.py holds redis-py's deeper scenarios of tests/resp.rs.)

Usage: redis_py_suite.py HOST PORT PREFIX ADMIN_TOKEN READ_TOKEN INGEST_TOKEN

Every check compares what redis-py returns with what docs/RESP.md says the server answers; the
first mismatch exits 1 with the traceback. On success one JSON line on stdout names the key
prefixes written, for the Rust side to check over HTTP.
"""

import json
import sys
import threading
import time

import redis

from resp_client import refused, xread_entries


class Run:
    def __init__(self, host, port, prefix, tokens, proto):
        self.host, self.port, self.proto = host, port, proto
        self.p = f"{prefix}r{proto}-"
        self.admin, self.read, self.ingest = tokens
        self.name = f"vx-redis-py-{proto}"
        self.c = self.client(self.admin, self.name)

    def client(self, password=None, name=None, proto=None, **extra):
        """A client with the password option (AUTH, or HELLO AUTH, on connect) and a client
        name (CLIENT SETNAME on connect) when given."""
        return redis.Redis(host=self.host, port=self.port, db=0, password=password,
                           client_name=name, protocol=proto or self.proto,
                           decode_responses=True, **extra)

    def connecting(self):
        c = self.c
        assert c.client_getname() == self.name, c.client_getname()
        assert isinstance(c.client_id(), int) and c.client_id() > 0
        assert c.execute_command("SELECT", 0) in (True, "OK")
        refused(lambda: c.execute_command("SELECT", 1), "DB index is out of range")
        assert c.ping() is True
        assert c.echo("héllo ☕") == "héllo ☕"

    def hashes(self):
        c, e, p = self.c, self.p + "player", self.p
        assert c.hset(e, mapping={"zip": "02134", "name": "zed", "damage": "42",
                                  "ratio": "0.25"}) == 4
        assert c.hset(e, mapping={"damage": "43", "level": "9"}) == 1
        assert c.hget(e, "zip") == "02134"
        assert c.hget(e, "damage") == "43"
        assert c.hget(e, "nope") is None
        assert c.hmget(e, ["name", "nope", "level"]) == ["zed", None, "9"]
        assert c.hgetall(e) == {"zip": "02134", "name": "zed", "damage": "43", "ratio": "0.25",
                                "level": "9"}, c.hgetall(e)
        assert c.hgetall(p + "nobody") == {}
        assert c.hexists(e, "level") is True and c.hexists(e, "nope") is False
        assert c.exists(e, p + "nobody") == 1
        assert c.hdel(e, "level", "nope") == 1
        assert c.hset(p + "gone", "x", "1") == 1
        assert c.delete(p + "gone", p + "never") == 1
        assert c.exists(p + "gone") == 0
        k = p + "counter"
        assert c.hincrby(k, "hits", 5) == 5 and c.hincrby(k, "hits", -2) == 3
        assert c.hincrbyfloat(k, "score", 0.5) == 0.5 and c.hincrbyfloat(k, "score", 2) == 2.5
        assert c.hget(k, "score") == "2.5"
        refused(lambda: c.hincrby(e, "name", 1), "hash value is not an integer")

    def fed_over_http(self, hero):
        """The entity tests/redis_clients.rs fed with events over HTTP: bulk strings."""
        assert self.c.hget(hero, "kills") == "42"
        assert self.c.hgetall(hero) == {"kills": "42", "speed": "2.5", "events": "3",
                                        "last_ts": "1700000000002"}, self.c.hgetall(hero)

    def pipeline(self):
        pipe = self.c.pipeline(transaction=False)
        for i in range(500):
            pipe.hset(f"{self.p}bulk-{i % 50}", f"f{i // 50}", str(i))
            pipe.hget(f"{self.p}bulk-{i % 50}", f"f{i // 50}")
        got = pipe.execute()
        assert got == [x for i in range(500) for x in (1, str(i))], got

    def streams(self):
        c, s, p1 = self.c, self.p + "match", self.p + "p1"
        first = {"type": "damage", "entity": p1, "weapon": "bow"}
        assert c.xadd(s, first) == "1-0"
        second = {"type": "hits", "entity": p1, "kind": "counter", "value": "7"}
        assert c.xadd(s, second) == "2-0"
        assert c.hget(p1, "hits") == "7"
        assert c.xlen(s) == 2
        entries = c.xrange(s, "-", "+")
        assert [i for i, _ in entries] == ["1-0", "2-0"], entries
        fields = [dict(f) for _, f in entries]
        assert int(fields[0].pop("ts")) > 1_600_000_000_000
        assert fields[0] == first, fields
        assert list(entries[1][1]) == ["type", "entity", "ts", "kind", "value"], entries
        fields[1].pop("ts")
        assert fields[1] == second, fields
        assert [i for i, _ in c.xrange(s, "(1-0", "+")] == ["2-0"]
        assert [i for i, _ in c.xrevrange(s, "+", "-", count=1)] == ["2-0"]
        got = xread_entries(c.xread({s: "0"}, count=10))
        assert [i for i, _ in got[s]] == ["1-0", "2-0"], got
        info = c.xinfo_stream(s)
        assert info["length"] == 2 and info["groups"] == 0, info
        assert info["first-entry"][0] == "1-0" and info["last-entry"][0] == "2-0", info
        assert info["last-generated-id"] == "2-0", info
        self.blocked_read()

    def blocked_read(self):
        """XREAD BLOCK on a stream that does not exist yet, woken by another connection's XADD."""
        live = self.p + "live"
        other = self.client(self.ingest, "vx-redis-py-writer")
        t = threading.Timer(0.3, lambda: other.xadd(live, {"k": "v"}))
        t.start()
        started = time.monotonic()
        got = xread_entries(self.c.xread({live: "$"}, block=10000))
        t.join()
        other.close()
        assert time.monotonic() - started < 5
        [(i, f)] = got[live]
        assert i == "1-0" and f["k"] == "v", got
        assert xread_entries(self.c.xread({live: "$"}, block=200)) == {}

    def errors(self):
        c = self.c
        refused(lambda: c.execute_command("FROBNICATE", "x"), "unknown command")
        refused(lambda: c.execute_command("HGET", self.p + "player"), "wrong number of arguments")
        refused(lambda: c.xgroup_create(self.p + "match", "g"), "consumer groups are not offered")
        refused(lambda: c.xreadgroup("g", "c", {self.p + "match": ">"}),
                "consumer groups are not offered")
        assert c.ping() is True

    def auth(self):
        e, s = self.p + "player", self.p + "match"
        # No token; no name and no library name (as with Redis, CLIENT SETNAME and SETINFO
        # would be refused before AUTH, and redis-py would give up the connection); RESP2
        # (HELLO 3 without AUTH is refused too).
        anon = self.client(proto=2, lib_name=None, lib_version=None)
        for call in (lambda: anon.hget(e, "zip"), lambda: anon.xadd(s, {"a": "1"})):
            try:
                call()
                raise AssertionError("answered without a token")
            except redis.AuthenticationError as err:
                assert "NOAUTH" in str(err) or "Authentication required" in str(err), err
        assert anon.auth(self.read) is True
        assert anon.hget(e, "zip") == "02134"
        anon.close()
        try:
            self.client("not-a-token", "vx-redis-py-wrong").ping()
            raise AssertionError("a wrong token was accepted")
        except redis.AuthenticationError as err:
            assert "WRONGPASS" in str(err) or "invalid username-password" in str(err), err
        read = self.client(self.read, "vx-redis-py-reader")
        assert read.hget(e, "zip") == "02134" and read.xlen(s) == 2
        for call in (lambda: read.hset(e, "x", "1"), lambda: read.hincrby(e, "x", 1),
                     lambda: read.xadd(s, {"a": "1"})):
            try:
                call()
                raise AssertionError("the read token wrote")
            except redis.exceptions.NoPermissionError:
                pass
        read.close()
        w = self.client(self.ingest, "vx-redis-py-ingest")
        assert w.hset(self.p + "secured", "x", "1") == 1
        try:
            w.hget(self.p + "secured", "x")
            raise AssertionError("the ingest token read")
        except redis.exceptions.NoPermissionError:
            pass
        w.close()
        assert self.c.hget(self.p + "secured", "x") == "1"


def main():
    host, port, prefix = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    tokens = sys.argv[4:7]
    prefixes = []
    for proto in (2, 3):
        r = Run(host, port, prefix, tokens, proto)
        r.connecting()
        r.hashes()
        r.fed_over_http(prefix + "hero")
        r.pipeline()
        r.streams()
        r.errors()
        r.auth()
        r.c.close()
        prefixes.append(r.p)
    print(json.dumps({"client": "redis-py", "prefixes": prefixes}))


if __name__ == "__main__":
    main()
