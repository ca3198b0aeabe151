// ioredis (pinned in package.json and package-lock.json) against Veltrix's Redis-protocol
// listener: the scenario of tests/redis_clients.rs, in RESP2 (ioredis speaks no RESP3).
//
// Usage: node client.js HOST PORT PREFIX ADMIN_TOKEN READ_TOKEN INGEST_TOKEN
// (with NODE_PATH naming the node_modules that `npm ci` filled).
//
// Every check compares what ioredis returns with what docs/RESP.md says the server answers; the
// first mismatch exits 1 with what was seen. On success one JSON line on stdout names the key
// prefixes written, for the Rust side to check over HTTP.
"use strict";

const assert = require("node:assert/strict");
const Redis = require("ioredis");

const [host, portText, prefix, admin, read, ingest] = process.argv.slice(2);
const port = Number(portText);
const p = prefix + "r2-";
const name = "vx-ioredis";

/** A client that connects once (no reconnects, no retries), with the password option (AUTH on
 *  connect) and a client name (CLIENT SETNAME on connect) when given. */
function client(password, connectionName, extra = {}) {
  return new Redis({
    host, port, password, connectionName, db: 0, lazyConnect: true,
    retryStrategy: () => null, maxRetriesPerRequest: 0, ...extra,
  });
}

/** `call()` rejects with an ioredis ReplyError whose message holds every one of `words`. */
async function refused(what, call, ...words) {
  let err;
  try {
    await call();
  } catch (e) {
    err = e;
  }
  assert.ok(err instanceof Redis.ReplyError, `${what}: want a ReplyError, got ${err}`);
  for (const w of words) {
    assert.ok(err.message.includes(w), `${what}: error ${err.message} lacks ${w}`);
  }
}

async function connecting(c) {
  assert.equal(await c.client("GETNAME"), name, "CLIENT GETNAME");
  const id = await c.client("ID");
  assert.ok(Number.isInteger(id) && id > 0, `CLIENT ID ${id}`);
  assert.equal(await c.select(0), "OK", "SELECT 0");
  await refused("SELECT 1", () => c.select(1), "DB index is out of range");
  assert.equal(await c.ping(), "PONG", "PING");
  assert.equal(await c.echo("héllo ☕"), "héllo ☕", "ECHO");
}

async function hashes(c) {
  const e = p + "player";
  assert.equal(await c.hset(e, { zip: "02134", name: "zed", damage: "42", ratio: "0.25" }), 4);
  assert.equal(await c.hset(e, "damage", "43", "level", "9"), 1, "HSET again");
  assert.equal(await c.hget(e, "zip"), "02134", "HGET zip");
  assert.equal(await c.hget(e, "damage"), "43", "HGET damage");
  assert.equal(await c.hget(e, "nope"), null, "HGET absent");
  assert.deepEqual(await c.hmget(e, "name", "nope", "level"), ["zed", null, "9"], "HMGET");
  assert.deepEqual(await c.hgetall(e),
    { zip: "02134", name: "zed", damage: "43", ratio: "0.25", level: "9" }, "HGETALL");
  assert.deepEqual(await c.hgetall(p + "nobody"), {}, "HGETALL unknown");
  assert.equal(await c.hexists(e, "level"), 1, "HEXISTS");
  assert.equal(await c.hexists(e, "nope"), 0, "HEXISTS absent");
  assert.equal(await c.exists(e, p + "nobody"), 1, "EXISTS");
  assert.equal(await c.hdel(e, "level", "nope"), 1, "HDEL");
  assert.equal(await c.hset(p + "gone", "x", "1"), 1, "HSET gone");
  assert.equal(await c.del(p + "gone", p + "never"), 1, "DEL");
  assert.equal(await c.exists(p + "gone"), 0, "EXISTS deleted");
  const k = p + "counter";
  assert.equal(await c.hincrby(k, "hits", 5), 5, "HINCRBY");
  assert.equal(await c.hincrby(k, "hits", -2), 3, "HINCRBY -2");
  assert.equal(await c.hincrbyfloat(k, "score", "0.5"), "0.5", "HINCRBYFLOAT");
  assert.equal(await c.hincrbyfloat(k, "score", 2), "2.5", "HINCRBYFLOAT 2");
  assert.equal(await c.hget(k, "score"), "2.5", "HGET score");
  await refused("HINCRBY of a string", () => c.hincrby(e, "name", 1), "hash value is not an integer");
}

/** The entity tests/redis_clients.rs fed with events over HTTP: bulk strings. */
async function fedOverHttp(c) {
  const hero = prefix + "hero";
  assert.equal(await c.hget(hero, "kills"), "42", "HGET kills");
  assert.deepEqual(await c.hgetall(hero),
    { kills: "42", speed: "2.5", events: "3", last_ts: "1700000000002" }, "HGETALL hero");
  // The Buffer API: bulk strings, not integers.
  assert.deepEqual(await c.hgetBuffer(hero, "kills"), Buffer.from("42"), "HGET as a Buffer");
}

async function pipeline(c) {
  const cmds = [];
  for (let i = 0; i < 500; i++) {
    const k = `${p}bulk-${i % 50}`, f = `f${Math.floor(i / 50)}`;
    cmds.push(["hset", k, f, String(i)], ["hget", k, f]);
  }
  const res = await c.pipeline(cmds).exec();
  assert.equal(res.length, 1000, "pipeline replies");
  for (let i = 0; i < 500; i++) {
    assert.deepEqual(res[2 * i], [null, 1], `pipelined HSET ${i}`);
    assert.deepEqual(res[2 * i + 1], [null, String(i)], `pipelined HGET ${i}`);
  }
}

/** An entry's fields as an object (ioredis answers them as a flat array). */
function fields(flat) {
  const out = {};
  for (let i = 0; i < flat.length; i += 2) out[flat[i]] = flat[i + 1];
  return out;
}

async function streams(c) {
  const s = p + "match";
  assert.equal(await c.xadd(s, "*", "type", "damage", "entity", p + "p1", "weapon", "bow"), "1-0");
  assert.equal(await c.xadd(s, "*", "type", "hits", "entity", p + "p1", "kind", "counter",
    "value", "7"), "2-0", "XADD counter");
  assert.equal(await c.hget(p + "p1", "hits"), "7", "HGET after XADD");
  assert.equal(await c.xlen(s), 2, "XLEN");
  const all = await c.xrange(s, "-", "+");
  assert.deepEqual(all.map(([id]) => id), ["1-0", "2-0"], "XRANGE ids");
  const [type, damage, entity, who, ts, when, ...rest] = all[0][1];
  assert.deepEqual([type, damage, entity, who, ts], ["type", "damage", "entity", p + "p1", "ts"]);
  assert.ok(Number(when) > 1_600_000_000_000, `XRANGE ts ${when}`);
  assert.deepEqual(rest, ["weapon", "bow"], "XRANGE first entry's data");
  const second = fields(all[1][1]);
  delete second.ts;
  assert.deepEqual(second, { type: "hits", entity: p + "p1", kind: "counter", value: "7" });
  assert.deepEqual((await c.xrange(s, "(1-0", "+")).map(([id]) => id), ["2-0"], "XRANGE (");
  assert.deepEqual((await c.xrevrange(s, "+", "-", "COUNT", 1)).map(([id]) => id), ["2-0"]);
  const got = await c.xread("COUNT", 10, "STREAMS", s, "0");
  assert.equal(got.length, 1, "XREAD streams");
  assert.equal(got[0][0], s, "XREAD stream");
  assert.deepEqual(got[0][1].map(([id]) => id), ["1-0", "2-0"], "XREAD ids");
  const info = fields(await c.xinfo("STREAM", s));
  assert.equal(info.length, 2, "XINFO length");
  assert.equal(info["first-entry"][0], "1-0", "XINFO first");
  assert.equal(info["last-entry"][0], "2-0", "XINFO last");
  assert.equal(info["last-generated-id"], "2-0", "XINFO last-generated-id");
  assert.equal(info.groups, 0, "XINFO groups");
  await blockedRead(c);
}

/** XREAD BLOCK on a stream that does not exist yet, woken by another connection's XADD. */
async function blockedRead(c) {
  const live = p + "live";
  const other = client(ingest, "vx-ioredis-writer");
  const writer = new Promise((resolve) => setTimeout(resolve, 300))
    .then(() => other.xadd(live, "*", "k", "v"));
  const started = Date.now();
  const got = await c.xread("BLOCK", 10000, "STREAMS", live, "$");
  assert.equal(await writer, "1-0", "XADD from the other connection");
  other.disconnect();
  assert.ok(Date.now() - started < 5000, "XREAD BLOCK took more than 5 s to wake");
  assert.equal(got[0][0], live, "XREAD BLOCK stream");
  assert.deepEqual(got[0][1].map(([id]) => id), ["1-0"], "XREAD BLOCK ids");
  assert.equal(fields(got[0][1][0][1]).k, "v", "XREAD BLOCK fields");
  // Nothing comes: the time is up, an empty answer (null).
  assert.equal(await c.xread("BLOCK", 200, "STREAMS", live, "$"), null, "XREAD BLOCK timeout");
}

async function errors(c) {
  await refused("unknown command", () => c.call("FROBNICATE", "x"), "unknown command");
  await refused("wrong arity", () => c.call("HGET", p + "player"), "wrong number of arguments");
  await refused("XGROUP CREATE", () => c.xgroup("CREATE", p + "match", "g", "$"),
    "consumer groups are not offered");
  await refused("XREADGROUP", () => c.xreadgroup("GROUP", "g", "c", "STREAMS", p + "match", ">"),
    "consumer groups are not offered");
  assert.equal(await c.ping(), "PONG", "PING after errors");
}

/** The client's own password option (AUTH on connect), the AUTH command, and the scopes of the
 *  tokens. */
async function auth(c) {
  const e = p + "player", s = p + "match";
  // No token: ioredis's ready check (INFO) would be refused, as with a Redis that has a
  // password; so without it. No name: CLIENT SETNAME too would be refused before AUTH.
  const anon = client(undefined, undefined, { enableReadyCheck: false });
  await refused("HGET without a token", () => anon.hget(e, "zip"), "NOAUTH");
  await refused("XADD without a token", () => anon.xadd(s, "*", "a", "1"), "NOAUTH");
  assert.equal(await anon.auth(read), "OK", "AUTH");
  assert.equal(await anon.hget(e, "zip"), "02134", "HGET after AUTH");
  anon.disconnect();

  const wrong = client("not-a-token", "vx-ioredis-wrong");
  wrong.on("error", () => {}); // the refusal is also emitted; the command's is checked
  await refused("a wrong token", () => wrong.ping(), "WRONGPASS");
  wrong.disconnect();

  const r = client(read, "vx-ioredis-reader");
  assert.equal(await r.hget(e, "zip"), "02134", "HGET with the read token");
  assert.equal(await r.xlen(s), 2, "XLEN with the read token");
  await refused("HSET with the read token", () => r.hset(e, "x", "1"), "NOPERM");
  await refused("HINCRBY with the read token", () => r.hincrby(e, "x", 1), "NOPERM");
  await refused("XADD with the read token", () => r.xadd(s, "*", "a", "1"), "NOPERM");
  r.disconnect();

  const w = client(ingest, "vx-ioredis-ingest");
  assert.equal(await w.hset(p + "secured", "x", "1"), 1, "HSET with the ingest token");
  await refused("HGET with the ingest token", () => w.hget(p + "secured", "x"), "NOPERM");
  w.disconnect();
  assert.equal(await c.hget(p + "secured", "x"), "1", "HGET secured");
}

async function main() {
  if (process.argv.length !== 8) {
    throw new Error("usage: node client.js HOST PORT PREFIX ADMIN_TOKEN READ_TOKEN INGEST_TOKEN");
  }
  const c = client(admin, name);
  await connecting(c);
  await hashes(c);
  await fedOverHttp(c);
  await pipeline(c);
  await streams(c);
  await errors(c);
  await auth(c);
  c.disconnect();
  console.log(JSON.stringify({ client: "ioredis", prefixes: [p] }));
}

main().catch((err) => {
  console.error("ioredis:", err);
  process.exit(1);
});
