package main

import (
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// ids are the entry ids of msgs, in order.
func ids(msgs []redis.XMessage) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

func (r *run) streams() {
	ctx, c, s := r.ctx, r.c, r.p+"match"
	first := []any{"type", "damage", "entity", r.p + "p1", "weapon", "bow"}
	want("XADD", c.XAdd(ctx, &redis.XAddArgs{Stream: s, ID: "*", Values: first}), "1-0")
	second := []any{"type", "hits", "entity", r.p + "p1", "kind", "counter", "value", "7"}
	want("XADD counter", c.XAdd(ctx, &redis.XAddArgs{Stream: s, Values: second}), "2-0")
	// The counter went through the one write path: its entity's feature counts it.
	want("HGET after XADD", c.HGet(ctx, r.p+"p1", "hits"), "7")
	want("XLEN", c.XLen(ctx, s), int64(2))
	all := got("XRANGE", c.XRange(ctx, s, "-", "+"))
	eq("XRANGE ids", ids(all), []string{"1-0", "2-0"})
	tsText, _ := all[0].Values["ts"].(string)
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil || ts < 1_600_000_000_000 {
		fail("XRANGE: ts %v is not the receive time in ms", all[0].Values["ts"])
	}
	delete(all[0].Values, "ts")
	eq("XRANGE first entry", all[0].Values, map[string]any{
		"type": "damage", "entity": r.p + "p1", "weapon": "bow"})
	delete(all[1].Values, "ts")
	eq("XRANGE second entry", all[1].Values, map[string]any{
		"type": "hits", "entity": r.p + "p1", "kind": "counter", "value": "7"})
	eq("XRANGE exclusive", ids(got("XRANGE (", c.XRange(ctx, s, "(1-0", "+"))), []string{"2-0"})
	eq("XREVRANGE", ids(got("XREVRANGE", c.XRevRangeN(ctx, s, "+", "-", 1))), []string{"2-0"})
	read := got("XREAD", c.XRead(ctx, &redis.XReadArgs{Streams: []string{s, "0"}, Count: 10, Block: -1}))
	eq("XREAD streams", len(read), 1)
	eq("XREAD ids", ids(read[0].Messages), []string{"1-0", "2-0"})
	info := got("XINFO STREAM", c.XInfoStream(ctx, s))
	eq("XINFO length", info.Length, int64(2))
	eq("XINFO first", info.FirstEntry.ID, "1-0")
	eq("XINFO last", info.LastEntry.ID, "2-0")
	eq("XINFO last-generated-id", info.LastGeneratedID, "2-0")
	eq("XINFO groups", info.Groups, int64(0))
	r.blockedRead()
}

// blockedRead: XREAD BLOCK on a stream that does not exist yet, woken by another connection's
// XADD.
func (r *run) blockedRead() {
	ctx, live := r.ctx, r.p+"live"
	other := r.client(r.tokens.ingest, "vx-go-writer")
	defer other.Close()
	done := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		done <- other.XAdd(ctx, &redis.XAddArgs{Stream: live, Values: []any{"k", "v"}}).Err()
	}()
	started := time.Now()
	woke := got("XREAD BLOCK", r.c.XRead(ctx, &redis.XReadArgs{
		Streams: []string{live, "$"}, Block: 10 * time.Second}))
	must("XADD from the other connection", <-done)
	if took := time.Since(started); took > 5*time.Second {
		fail("XREAD BLOCK took %v to wake", took)
	}
	eq("XREAD BLOCK stream", woke[0].Stream, live)
	eq("XREAD BLOCK ids", ids(woke[0].Messages), []string{"1-0"})
	eq("XREAD BLOCK fields", woke[0].Messages[0].Values["k"], "v")
	// Nothing comes: the time is up, an empty answer (redis.Nil).
	err := r.c.XRead(ctx, &redis.XReadArgs{Streams: []string{live, "$"}, Block: 200 * time.Millisecond}).Err()
	if err != redis.Nil {
		fail("XREAD BLOCK that times out: %v, want redis.Nil", err)
	}
}
