package main

import (
	"strings"

	"github.com/redis/go-redis/v9"
)

// errors: refusals reach the caller as go-redis's redis.Error, and the connection stays usable.
func (r *run) errors() {
	ctx, c := r.ctx, r.c
	conn := c.Conn()
	defer conn.Close()
	refused("unknown command", conn.Do(ctx, "FROBNICATE", "x").Err(), "unknown command")
	refused("wrong arity", conn.Do(ctx, "HGET", r.p+"player").Err(), "wrong number of arguments")
	want("PING after errors", conn.Ping(ctx), "PONG")
	refused("XGROUP CREATE", c.XGroupCreate(ctx, r.p+"match", "g", "$").Err(),
		"consumer groups are not offered")
	refused("XREADGROUP", c.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: "g", Consumer: "c", Streams: []string{r.p + "match", ">"}, Block: -1}).Err(),
		"consumer groups are not offered")
}

// auth: the client's own password option (AUTH, or HELLO AUTH, on connect), the AUTH command,
// and the scopes of the tokens.
func (r *run) auth() {
	ctx, e, s := r.ctx, r.p+"player", r.p+"match"
	// No name: as with Redis, CLIENT SETNAME on connect would be refused before AUTH.
	anon := r.client("", "")
	defer anon.Close()
	refused("HGET without a token", anon.HGet(ctx, e, "zip").Err(), "NOAUTH")
	refused("XADD without a token", anon.XAdd(ctx, &redis.XAddArgs{Stream: s, Values: []any{"a", "1"}}).Err(), "NOAUTH")
	// The AUTH command on a connection that has none.
	conn := anon.Conn()
	want("AUTH", conn.Auth(ctx, r.tokens.read), "OK")
	want("HGET after AUTH", conn.HGet(ctx, e, "zip"), "02134")
	must("close", conn.Close())

	wrong := r.client("not-a-token", "vx-go-wrong")
	defer wrong.Close()
	err := wrong.Ping(ctx).Err()
	if err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		fail("a wrong token: %v, want WRONGPASS", err)
	}

	read := r.client(r.tokens.read, "vx-go-reader")
	defer read.Close()
	want("HGET with the read token", read.HGet(ctx, e, "zip"), "02134")
	want("XLEN with the read token", read.XLen(ctx, s), int64(2))
	refused("HSET with the read token", read.HSet(ctx, e, "x", "1").Err(), "NOPERM")
	refused("HINCRBY with the read token", read.HIncrBy(ctx, e, "x", 1).Err(), "NOPERM")
	refused("XADD with the read token", read.XAdd(ctx, &redis.XAddArgs{Stream: s, Values: []any{"a", "1"}}).Err(), "NOPERM")

	ingest := r.client(r.tokens.ingest, "vx-go-ingest")
	defer ingest.Close()
	want("HSET with the ingest token", ingest.HSet(ctx, r.p+"secured", "x", "1"), int64(1))
	refused("HGET with the ingest token", ingest.HGet(ctx, r.p+"secured", "x").Err(), "NOPERM")
	want("HGET secured", r.c.HGet(ctx, r.p+"secured", "x"), "1")
}
