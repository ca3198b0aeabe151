// Jedis (pinned in pom.xml) against Veltrix's Redis-protocol listener: the scenario of
// tests/redis_clients.rs, in RESP2 and RESP3.
//
// Usage: java -cp <jars> Client.java HOST PORT PREFIX ADMIN_TOKEN READ_TOKEN INGEST_TOKEN
//
// Every check compares what Jedis returns with what docs/RESP.md says the server answers; the
// first mismatch exits 1 with what was seen (a reply of the wrong type surfaces as Jedis's own
// exception, e.g. the ClassCastException a numeric hash value once caused). On success one JSON
// line on stdout names the key prefixes written, for the Rust side to check over HTTP.

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import redis.clients.jedis.DefaultJedisClientConfig;
import redis.clients.jedis.Jedis;
import redis.clients.jedis.Pipeline;
import redis.clients.jedis.Protocol;
import redis.clients.jedis.RedisProtocol;
import redis.clients.jedis.Response;
import redis.clients.jedis.StreamEntryID;
import redis.clients.jedis.commands.ProtocolCommand;
import redis.clients.jedis.exceptions.JedisAccessControlException;
import redis.clients.jedis.exceptions.JedisDataException;
import redis.clients.jedis.params.XAddParams;
import redis.clients.jedis.params.XReadGroupParams;
import redis.clients.jedis.params.XReadParams;
import redis.clients.jedis.resps.StreamEntry;
import redis.clients.jedis.resps.StreamInfo;

public class Client {
    final String host;
    final int port;
    final String p;
    final RedisProtocol proto;
    final String admin, read, ingest;
    final String name;
    Jedis c;

    Client(String[] args, RedisProtocol proto) {
        host = args[0];
        port = Integer.parseInt(args[1]);
        this.proto = proto;
        p = args[2] + (proto == RedisProtocol.RESP2 ? "r2-" : "r3-");
        admin = args[3];
        read = args[4];
        ingest = args[5];
        name = "vx-jedis-" + (proto == RedisProtocol.RESP2 ? "2" : "3");
    }

    static void fail(String msg) {
        System.err.println("jedis: " + msg);
        System.exit(1);
    }

    static void eq(String what, Object got, Object want) {
        if (!Objects.equals(got, want)) {
            fail(what + ": got " + got + ", want " + want);
        }
    }

    /** `call` throws a JedisDataException (or a subclass) whose message holds every word. */
    static void refused(String what, Runnable call, String... words) {
        refusedAs(what, JedisDataException.class, call, words);
    }

    static void refusedAs(String what, Class<? extends Exception> type, Runnable call, String... words) {
        try {
            call.run();
        } catch (Exception e) {
            if (!type.isInstance(e)) {
                fail(what + ": want " + type.getSimpleName() + ", got " + e);
            }
            for (String w : words) {
                if (e.getMessage() == null || !e.getMessage().contains(w)) {
                    fail(what + ": error " + e.getMessage() + " lacks " + w);
                }
            }
            return;
        }
        fail(what + ": answered, and an error was expected");
    }

    Jedis connect(String password, String clientName) {
        var cfg = DefaultJedisClientConfig.builder().protocol(proto).database(0).timeoutMillis(20000);
        if (password != null) {
            cfg.password(password);
        }
        if (clientName != null) {
            cfg.clientName(clientName);
        }
        return new Jedis(host, port, cfg.build());
    }

    void connecting() {
        eq("CLIENT GETNAME", c.clientGetname(), name);
        if (c.clientId() <= 0) {
            fail("CLIENT ID not positive");
        }
        eq("SELECT 0", c.select(0), "OK");
        refused("SELECT 1", () -> c.select(1), "DB index is out of range");
        eq("PING", c.ping(), "PONG");
        eq("ECHO", c.echo("héllo ☕"), "héllo ☕");
    }

    void hashes() {
        String e = p + "player";
        Map<String, String> first = new LinkedHashMap<>();
        first.put("zip", "02134");
        first.put("name", "zed");
        first.put("damage", "42");
        first.put("ratio", "0.25");
        eq("HSET", c.hset(e, first), 4L);
        eq("HSET again", c.hset(e, Map.of("damage", "43", "level", "9")), 1L);
        eq("HGET zip", c.hget(e, "zip"), "02134");
        eq("HGET damage", c.hget(e, "damage"), "43");
        eq("HGET absent", c.hget(e, "nope"), null);
        eq("HMGET", c.hmget(e, "name", "nope", "level"), Arrays.asList("zed", null, "9"));
        eq("HGETALL", c.hgetAll(e), Map.of("zip", "02134", "name", "zed", "damage", "43",
                "ratio", "0.25", "level", "9"));
        eq("HGETALL unknown", c.hgetAll(p + "nobody"), Map.of());
        eq("HEXISTS", c.hexists(e, "level"), true);
        eq("HEXISTS absent", c.hexists(e, "nope"), false);
        eq("EXISTS", c.exists(e, p + "nobody"), 1L);
        eq("HDEL", c.hdel(e, "level", "nope"), 1L);
        eq("HSET gone", c.hset(p + "gone", "x", "1"), 1L);
        eq("DEL", c.del(p + "gone", p + "never"), 1L);
        eq("EXISTS deleted", c.exists(p + "gone"), false);
        String k = p + "counter";
        eq("HINCRBY", c.hincrBy(k, "hits", 5), 5L);
        eq("HINCRBY -2", c.hincrBy(k, "hits", -2), 3L);
        eq("HINCRBYFLOAT", c.hincrByFloat(k, "score", 0.5), 0.5);
        eq("HINCRBYFLOAT 2", c.hincrByFloat(k, "score", 2), 2.5);
        eq("HGET score", c.hget(k, "score"), "2.5");
        refused("HINCRBY of a string", () -> c.hincrBy(e, "name", 1), "hash value is not an integer");
    }

    /** The entity tests/redis_clients.rs fed with events over HTTP: bulk strings. */
    void fedOverHttp(String hero) {
        eq("HGET kills", c.hget(hero, "kills"), "42");
        eq("HGETALL hero", c.hgetAll(hero), Map.of("kills", "42", "speed", "2.5", "events", "3",
                "last_ts", "1700000000002"));
        // The bytes API, where a reply of another type would fail Jedis's cast.
        byte[] key = hero.getBytes(StandardCharsets.UTF_8);
        Map<byte[], byte[]> raw = c.hgetAll(key);
        eq("HGETALL bytes size", raw.size(), 4);
        eq("HGET bytes", new String(c.hget(key, "kills".getBytes(StandardCharsets.UTF_8)),
                StandardCharsets.UTF_8), "42");
    }

    void pipeline() {
        Pipeline pipe = c.pipelined();
        List<Response<Long>> sets = new ArrayList<>();
        List<Response<String>> gets = new ArrayList<>();
        for (int i = 0; i < 500; i++) {
            String k = p + "bulk-" + (i % 50), f = "f" + (i / 50);
            sets.add(pipe.hset(k, f, Integer.toString(i)));
            gets.add(pipe.hget(k, f));
        }
        pipe.sync();
        for (int i = 0; i < 500; i++) {
            eq("pipelined HSET " + i, sets.get(i).get(), 1L);
            eq("pipelined HGET " + i, gets.get(i).get(), Integer.toString(i));
        }
    }

    static List<String> ids(List<StreamEntry> entries) {
        List<String> out = new ArrayList<>();
        for (StreamEntry e : entries) {
            out.add(e.getID().toString());
        }
        return out;
    }

    void streams() {
        String s = p + "match";
        Map<String, String> first = new LinkedHashMap<>();
        first.put("type", "damage");
        first.put("entity", p + "p1");
        first.put("weapon", "bow");
        eq("XADD", c.xadd(s, XAddParams.xAddParams(), first).toString(), "1-0");
        Map<String, String> second = new LinkedHashMap<>();
        second.put("type", "hits");
        second.put("entity", p + "p1");
        second.put("kind", "counter");
        second.put("value", "7");
        eq("XADD counter", c.xadd(s, StreamEntryID.NEW_ENTRY, second).toString(), "2-0");
        eq("HGET after XADD", c.hget(p + "p1", "hits"), "7");
        eq("XLEN", c.xlen(s), 2L);
        List<StreamEntry> all = c.xrange(s, "-", "+");
        eq("XRANGE ids", ids(all), List.of("1-0", "2-0"));
        Map<String, String> got = new LinkedHashMap<>(all.get(0).getFields());
        String ts = got.remove("ts");
        if (ts == null || Long.parseLong(ts) < 1_600_000_000_000L) {
            fail("XRANGE: ts " + ts + " is not the receive time in ms");
        }
        eq("XRANGE first entry", got, first);
        // Fields in the order docs/RESP.md gives: type, entity, ts, kind, value.
        eq("XRANGE second entry's order", new ArrayList<>(all.get(1).getFields().keySet()),
                List.of("type", "entity", "ts", "kind", "value"));
        eq("XRANGE exclusive", ids(c.xrange(s, "(1-0", "+")), List.of("2-0"));
        eq("XREVRANGE", ids(c.xrevrange(s, "+", "-", 1)), List.of("2-0"));
        var read = c.xread(XReadParams.xReadParams().count(10), Map.of(s, new StreamEntryID("0-0")));
        eq("XREAD streams", read.size(), 1);
        eq("XREAD stream", read.get(0).getKey(), s);
        eq("XREAD ids", ids(read.get(0).getValue()), List.of("1-0", "2-0"));
        StreamInfo info = c.xinfoStream(s);
        eq("XINFO length", info.getLength(), 2L);
        eq("XINFO first", info.getFirstEntry().getID().toString(), "1-0");
        eq("XINFO last", info.getLastEntry().getID().toString(), "2-0");
        eq("XINFO last-generated-id", info.getLastGeneratedId().toString(), "2-0");
        eq("XINFO groups", info.getGroups(), 0L);
        blockedRead();
    }

    /** XREAD BLOCK on a stream that does not exist yet, woken by another connection's XADD. */
    void blockedRead() {
        String live = p + "live";
        var writer = CompletableFuture.runAsync(() -> {
            try (Jedis other = connect(ingest, "vx-jedis-writer")) {
                TimeUnit.MILLISECONDS.sleep(300);
                other.xadd(live, XAddParams.xAddParams(), Map.of("k", "v"));
            } catch (InterruptedException e) {
                throw new IllegalStateException(e);
            }
        });
        long started = System.nanoTime();
        var got = c.xreadAsMap(XReadParams.xReadParams().block(10000),
                Map.of(live, StreamEntryID.XREAD_NEW_ENTRY));
        writer.join();
        if (System.nanoTime() - started > 5_000_000_000L) {
            fail("XREAD BLOCK took more than 5 s to wake");
        }
        eq("XREAD BLOCK streams", got.keySet(), Set.of(live));
        eq("XREAD BLOCK ids", ids(got.get(live)), List.of("1-0"));
        eq("XREAD BLOCK fields", got.get(live).get(0).getFields().get("k"), "v");
        // Nothing comes: the time is up, an empty answer (Jedis: null).
        eq("XREAD BLOCK timeout", c.xread(XReadParams.xReadParams().block(200),
                Map.of(live, StreamEntryID.XREAD_NEW_ENTRY)), null);
    }

    void errors() {
        ProtocolCommand frob = () -> "FROBNICATE".getBytes(StandardCharsets.UTF_8);
        refused("unknown command", () -> c.sendCommand(frob, "x"), "unknown command");
        refused("wrong arity", () -> c.sendCommand(Protocol.Command.HGET, p + "player"),
                "wrong number of arguments");
        refused("XGROUP CREATE", () -> c.xgroupCreate(p + "match", "g", StreamEntryID.XGROUP_LAST_ENTRY, false),
                "consumer groups are not offered");
        refused("XREADGROUP", () -> c.xreadGroup("g", "c", XReadGroupParams.xReadGroupParams(),
                Map.of(p + "match", StreamEntryID.XREADGROUP_UNDELIVERED_ENTRY)),
                "consumer groups are not offered");
        eq("PING after errors", c.ping(), "PONG");
    }

    /** The client's own password option (AUTH, or HELLO AUTH, on connect), the AUTH command,
     *  and the scopes of the tokens. */
    void auth() {
        String e = p + "player", s = p + "match";
        var denied = JedisAccessControlException.class;
        if (proto == RedisProtocol.RESP3) {
            // As Redis answers it: HELLO 3 without AUTH is refused before a token is given.
            refusedAs("HELLO 3 without a token", denied, () -> connect(null, null), "NOAUTH");
        }
        // No name, RESP2: as with Redis, CLIENT SETNAME or HELLO would be refused before AUTH.
        try (Jedis anon = new Jedis(host, port)) {
            refused("HGET without a token", () -> anon.hget(e, "zip"), "NOAUTH");
            refused("XADD without a token", () -> anon.xadd(s, XAddParams.xAddParams(), Map.of("a", "1")), "NOAUTH");
            eq("AUTH", anon.auth(read), "OK");
            eq("HGET after AUTH", anon.hget(e, "zip"), "02134");
        }
        refusedAs("a wrong token", denied, () -> connect("not-a-token", "vx-jedis-wrong").ping(), "WRONGPASS");
        try (Jedis r = connect(read, "vx-jedis-reader")) {
            eq("HGET with the read token", r.hget(e, "zip"), "02134");
            eq("XLEN with the read token", r.xlen(s), 2L);
            refused("HSET with the read token", () -> r.hset(e, "x", "1"), "NOPERM");
            refused("HINCRBY with the read token", () -> r.hincrBy(e, "x", 1), "NOPERM");
            refused("XADD with the read token", () -> r.xadd(s, XAddParams.xAddParams(), Map.of("a", "1")), "NOPERM");
        }
        try (Jedis w = connect(ingest, "vx-jedis-ingest")) {
            eq("HSET with the ingest token", w.hset(p + "secured", "x", "1"), 1L);
            refused("HGET with the ingest token", () -> w.hget(p + "secured", "x"), "NOPERM");
        }
        eq("HGET secured", c.hget(p + "secured", "x"), "1");
    }

    public static void main(String[] args) {
        if (args.length != 6) {
            fail("usage: Client HOST PORT PREFIX ADMIN_TOKEN READ_TOKEN INGEST_TOKEN");
        }
        List<String> prefixes = new ArrayList<>();
        for (RedisProtocol proto : List.of(RedisProtocol.RESP2, RedisProtocol.RESP3)) {
            Client r = new Client(args, proto);
            try (Jedis c = r.connect(r.admin, r.name)) {
                r.c = c;
                r.connecting();
                r.hashes();
                r.fedOverHttp(args[2] + "hero");
                r.pipeline();
                r.streams();
                r.errors();
                r.auth();
            }
            prefixes.add("\"" + r.p + "\"");
        }
        System.out.println("{\"client\": \"jedis\", \"prefixes\": [" + String.join(", ", prefixes) + "]}");
    }
}
