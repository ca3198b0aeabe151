// go-redis (pinned in go.mod) against Veltrix's Redis-protocol listener: the scenario of
// tests/redis_clients.rs, in RESP2 and RESP3.
//
// Usage: redisclient HOST PORT PREFIX ADMIN_TOKEN READ_TOKEN INGEST_TOKEN
//
// Every check compares what the client library returns with what docs/RESP.md says the server
// answers; the first mismatch exits 1 with what was seen. On success one JSON line on stdout
// names the key prefixes written, for the Rust side to check over HTTP.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

type run struct {
	ctx    context.Context
	addr   string
	p      string // key prefix of this run
	proto  int
	tokens tokens
	c      *redis.Client // authenticated with the admin token, named
	name   string
}

type tokens struct{ admin, read, ingest string }

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "go-redis: "+format+"\n", args...)
	os.Exit(1)
}

// must fails with what on err.
func must(what string, err error) {
	if err != nil {
		fail("%s: %v", what, err)
	}
}

// got is the value of a command that must succeed.
func got[T any](what string, cmd interface{ Result() (T, error) }) T {
	v, err := cmd.Result()
	must(what, err)
	return v
}

// want fails unless the command succeeds with the value expected.
func want[T any](what string, cmd interface{ Result() (T, error) }, expected T) {
	eq(what, got(what, cmd), expected)
}

// eq fails unless got equals want (deeply).
func eq(what string, got, want any) {
	if !reflect.DeepEqual(got, want) {
		fail("%s: got %#v, want %#v", what, got, want)
	}
}

// refused fails unless err is a Redis error reply holding every one of words.
func refused(what string, err error, words ...string) {
	var re redis.Error
	if err == nil || !errors.As(err, &re) {
		fail("%s: want a Redis error reply, got %v", what, err)
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			fail("%s: error %q lacks %q", what, err.Error(), w)
		}
	}
}

func (r *run) client(password string, name string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:       r.addr,
		Password:   password,
		ClientName: name,
		DB:         0,
		Protocol:   r.proto,
		MaxRetries: -1,
	})
}

func (r *run) connecting() {
	ctx, c := r.ctx, r.c
	want("CLIENT GETNAME", c.ClientGetName(ctx), r.name)
	id := got("CLIENT ID", c.ClientID(ctx))
	if id <= 0 {
		fail("CLIENT ID: %d", id)
	}
	conn := c.Conn()
	defer conn.Close()
	want("SELECT 0", conn.Select(ctx, 0), "OK")
	refused("SELECT 1", conn.Select(ctx, 1).Err(), "DB index is out of range")
	want("PING", c.Ping(ctx), "PONG")
	want("ECHO", c.Echo(ctx, "héllo ☕"), "héllo ☕")
}

func (r *run) hashes() {
	ctx, c, e := r.ctx, r.c, r.p+"player"
	want("HSET", c.HSet(ctx, e, "zip", "02134", "name", "zed", "damage", "42", "ratio", "0.25"),
		int64(4))
	want("HSET again", c.HSet(ctx, e, "damage", "43", "level", "9"), int64(1))
	want("HGET zip", c.HGet(ctx, e, "zip"), "02134")
	want("HGET damage", c.HGet(ctx, e, "damage"), "43")
	if err := c.HGet(ctx, e, "nope").Err(); err != redis.Nil {
		fail("HGET of an absent field: %v, want redis.Nil", err)
	}
	eq("HMGET", got("HMGET", c.HMGet(ctx, e, "name", "nope", "level")),
		[]any{"zed", nil, "9"})
	want("HGETALL", c.HGetAll(ctx, e), map[string]string{
		"zip": "02134", "name": "zed", "damage": "43", "ratio": "0.25", "level": "9"})
	eq("HGETALL unknown", got("HGETALL unknown", c.HGetAll(ctx, r.p+"nobody")),
		map[string]string{})
	want("HEXISTS", c.HExists(ctx, e, "level"), true)
	want("HEXISTS absent", c.HExists(ctx, e, "nope"), false)
	want("EXISTS", c.Exists(ctx, e, r.p+"nobody"), int64(1))
	want("HDEL", c.HDel(ctx, e, "level", "nope"), int64(1))
	want("HSET gone", c.HSet(ctx, r.p+"gone", "x", "1"), int64(1))
	want("DEL", c.Del(ctx, r.p+"gone", r.p+"never"), int64(1))
	want("EXISTS deleted", c.Exists(ctx, r.p+"gone"), int64(0))
	k := r.p + "counter"
	want("HINCRBY", c.HIncrBy(ctx, k, "hits", 5), int64(5))
	want("HINCRBY -2", c.HIncrBy(ctx, k, "hits", -2), int64(3))
	want("HINCRBYFLOAT", c.HIncrByFloat(ctx, k, "score", 0.5), 0.5)
	want("HINCRBYFLOAT 2", c.HIncrByFloat(ctx, k, "score", 2), 2.5)
	want("HGET score", c.HGet(ctx, k, "score"), "2.5")
	refused("HINCRBY of a string", c.HIncrBy(ctx, e, "name", 1).Err(), "hash value is not an integer")
}

// fedOverHTTP reads the entity tests/redis_clients.rs fed with events over HTTP: counters and
// gauges read back as bulk strings.
func (r *run) fedOverHTTP(hero string) {
	ctx, c := r.ctx, r.c
	want("HGET kills", c.HGet(ctx, hero, "kills"), "42")
	want("HGETALL hero", c.HGetAll(ctx, hero), map[string]string{
		"kills": "42", "speed": "2.5", "events": "3", "last_ts": "1700000000002"})
}

func (r *run) pipeline() {
	ctx := r.ctx
	pipe := r.c.Pipeline()
	hsets := make([]*redis.IntCmd, 500)
	hgets := make([]*redis.StringCmd, 500)
	for i := range 500 {
		k, f := fmt.Sprintf("%sbulk-%d", r.p, i%50), fmt.Sprintf("f%d", i/50)
		hsets[i] = pipe.HSet(ctx, k, f, strconv.Itoa(i))
		hgets[i] = pipe.HGet(ctx, k, f)
	}
	cmds, err := pipe.Exec(ctx)
	must("pipeline of 1000", err)
	eq("pipeline replies", len(cmds), 1000)
	for i := range 500 {
		want("pipelined HSET", hsets[i], int64(1))
		want("pipelined HGET", hgets[i], strconv.Itoa(i))
	}
}

func main() {
	if len(os.Args) != 7 {
		fail("usage: %s HOST PORT PREFIX ADMIN_TOKEN READ_TOKEN INGEST_TOKEN", os.Args[0])
	}
	addr := os.Args[1] + ":" + os.Args[2]
	tk := tokens{admin: os.Args[4], read: os.Args[5], ingest: os.Args[6]}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var prefixes []string
	for _, proto := range []int{2, 3} {
		p := fmt.Sprintf("%sr%d-", os.Args[3], proto)
		r := &run{ctx: ctx, addr: addr, p: p, proto: proto, tokens: tk,
			name: fmt.Sprintf("vx-go-redis-%d", proto)}
		r.c = r.client(tk.admin, r.name)
		r.connecting()
		r.hashes()
		r.fedOverHTTP(os.Args[3] + "hero")
		r.pipeline()
		r.streams()
		r.errors()
		r.auth()
		must("close", r.c.Close())
		prefixes = append(prefixes, p)
	}
	out, err := json.Marshal(map[string]any{"client": "go-redis", "prefixes": prefixes})
	must("report", err)
	fmt.Println(string(out))
}
