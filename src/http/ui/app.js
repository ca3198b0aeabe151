// The Veltrix status page: polls GET /v1/status once a second and derives rates and interval
// means and quantiles from two consecutive readings (the server sends totals since start, as /metrics does);
// the replay browser pages through GET /v1/streams/{s}/events and follows a stream live with
// an EventSource. Same-origin requests only: with tokens configured, the browser's Basic
// credentials (the token as the password) go along on all of them.
//
// Rules kept here: event content and stream names reach the DOM only through textContent
// (never innerHTML); every list is bounded (HISTORY, LIVE_MAX, MAX_OPTIONS, PAGE_MAX).
"use strict";

const POLL_MS = 1000;
const HISTORY = 120; // sparkline points: two minutes
const TOP_WINDOW = 6; // readings kept to compute per-stream rates
const LIVE_MAX = 500; // rows kept in the replay table while following
const MAX_OPTIONS = 2000; // streams listed in the picker
const PAGE_MAX = 200;
const STREAMS_PAGE = 200;

const $ = (id) => document.getElementById(id);
const intFmt = new Intl.NumberFormat("en-US");

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const c of cells) {
    const td = el("td", c.text, c.cls);
    if (c.title) td.title = c.title;
    tr.appendChild(td);
  }
  return tr;
}

function num(n) {
  return Number.isFinite(n) ? intFmt.format(n) : "–";
}

function rate(n) {
  if (!Number.isFinite(n)) return "–";
  if (n >= 1e6) return (n / 1e6).toFixed(2) + "M";
  if (n >= 1e4) return (n / 1e3).toFixed(1) + "k";
  if (n >= 100) return n.toFixed(0);
  return n.toFixed(n === 0 ? 0 : 1);
}

function bytes(n) {
  if (!Number.isFinite(n)) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return (i === 0 ? n.toFixed(0) : n.toFixed(1)) + " " + units[i];
}

function secs(s) {
  if (!Number.isFinite(s)) return "–";
  if (s < 1e-3) return (s * 1e6).toFixed(0) + " µs";
  if (s < 1) return (s * 1e3).toFixed(s < 0.01 ? 2 : 1) + " ms";
  return s.toFixed(2) + " s";
}

function setBadge(id, text, cls) {
  const b = $(id);
  b.textContent = text;
  b.className = "badge" + (cls ? " " + cls : "");
}

function kv(dl, pairs) {
  dl.replaceChildren();
  for (const [k, v] of pairs) {
    const d = document.createElement("div");
    d.appendChild(el("dt", k));
    d.appendChild(el("dd", v));
    dl.appendChild(d);
  }
}

// ---------------------------------------------------------------------------------------------
// Status polling
// ---------------------------------------------------------------------------------------------

const poll = {
  prev: null,
  paused: false,
  timer: null,
  spark: [],
  tops: [], // [{t, events: Map(name -> events)}], at most TOP_WINDOW
  topBy: "events",
  last: null,
};

async function tick() {
  poll.timer = null;
  try {
    const r = await fetch("/v1/status", { cache: "no-store", headers: { Accept: "application/json" } });
    if (!r.ok) {
      setBadge("phase", "status " + r.status, "bad");
    } else {
      render(await r.json());
    }
  } catch (e) {
    setBadge("phase", "unreachable", "bad");
  }
  if (!poll.paused) poll.timer = setTimeout(tick, POLL_MS);
}

function render(s) {
  const p = poll.prev;
  const dt = p ? (s.time_ms - p.time_ms) / 1000 : 0;
  const per = (a, b) => (p && dt > 0 ? Math.max(0, a - b) / dt : NaN);
  const mean = (a, b) => (a && b && a.count > b.count ? (a.sum_seconds - b.sum_seconds) / (a.count - b.count) : NaN);

  $("version").textContent = "v" + s.version;
  setBadge("phase", s.phase + (s.ready ? "" : " (not ready)"), s.ready ? "ok" : "warn");
  const q = s.queues;
  if (q) {
    setBadge("bp", q.backpressure ? "backpressure ON" : "no backpressure", q.backpressure ? "bad" : "ok");
    setBadge("storage", q.storage_poisoned ? "storage refusing writes" : "storage ok", q.storage_poisoned ? "bad" : "ok");
  }
  const c = s.cluster;
  if (c) {
    const catching = c.streams.concat(c.entities).filter((x) => x.state !== "live").length;
    $("cluster").hidden = false;
    setBadge(
      "cluster",
      "node " + c.node + " of " + c.members.length + ": partitions " +
        (c.streams.map((x) => x.partition).join(",") || "none") +
        (catching ? " (" + catching + " catching up)" : ""),
      c.ready ? "ok" : "warn",
    );
  }
  $("updated").textContent = "updated " + new Date(s.time_ms).toLocaleTimeString();

  // Tiles.
  const evRate = per(s.ingest.events, p && p.ingest.events);
  $("k-rate").textContent = rate(evRate);
  $("k-bytes").textContent = p ? bytes(per(s.ingest.stored_bytes, p.ingest.stored_bytes)) + "/s" : "–";
  $("k-events").textContent = num(s.ingest.events);
  $("k-dups").textContent = "duplicates " + num(s.ingest.duplicates);
  const rejTotal = (x) => x.rejections.reduce((a, r) => a + r.requests, 0);
  $("k-rej").textContent = rate(per(rejTotal(s), p && rejTotal(p)));
  const ing = s.requests["/v1/events"];
  const reqLe = s.latency_bounds.requests;
  const ingPrev = p && p.requests["/v1/events"];
  $("k-lat").textContent = secs(quantile(0.5, ing, ingPrev, reqLe));
  $("k-lat-n").textContent =
    "p99 " + secs(quantile(0.99, ing, ingPrev, reqLe)) + " · mean " + secs(mean(ing, ingPrev));
  const fsLe = s.latency_bounds.fsync;
  $("k-fsync").textContent = secs(quantile(0.5, s.fsync, p && p.fsync, fsLe));
  $("k-fsync-n").textContent =
    "p99 " + secs(quantile(0.99, s.fsync, p && p.fsync, fsLe)) + " · " + num(s.fsync.count) + " fsyncs";
  const fol = s.followers.by_transport;
  const folTotal = Object.values(fol).reduce((a, b) => a + b, 0);
  $("k-fol").textContent = num(folTotal);
  $("k-fol-s").textContent = "on " + num(s.followers.streams) + " streams";
  $("k-streams").textContent = s.streams ? num(s.streams.count) : "–";
  $("k-log").textContent = s.log ? "log " + bytes(s.log.bytes) + " in " + num(s.log.segments) + " segments" : "log –";

  if (p) {
    poll.spark.push(evRate);
    if (poll.spark.length > HISTORY) poll.spark.shift();
    drawSpark();
  }
  if (q) renderQueues(s, q);
  renderRejections(s, per);
  renderLatency(s, p, dt, mean);
  renderFollowers(s);
  if (s.streams) renderTop(s);
  poll.prev = s;
}

function drawSpark() {
  const v = poll.spark;
  const max = Math.max(1, ...v.filter(Number.isFinite));
  // Spread over the width until the history is full, then one point per reading.
  const step = 120 / Math.max(1, v.length - 1);
  const pts = v.map((y, i) => {
    const x = i * step;
    const yy = 23 - (Number.isFinite(y) ? y / max : 0) * 22;
    return x.toFixed(1) + "," + yy.toFixed(1);
  });
  $("spark-line").setAttribute("points", pts.join(" "));
}

function renderQueues(s, q) {
  const heat = $("heat");
  if (heat.childElementCount !== q.depth.length) {
    heat.replaceChildren(...q.depth.map(() => document.createElement("div")));
    // Full rows: 128 shards as 4 × 32.
    heat.style.gridTemplateColumns = "repeat(" + Math.max(1, Math.min(32, q.depth.length)) + ", 1fr)";
  }
  const mark = Math.max(1, q.high_water);
  let max = 0;
  let busy = 0;
  q.depth.forEach((d, i) => {
    const f = d / mark;
    const c = heat.children[i];
    c.className = d === 0 ? "" : f < 0.25 ? "f1" : f < 0.5 ? "f2" : f < 0.75 ? "f3" : "f4";
    c.title = "shard " + i + ": " + d + " / " + q.high_water + " events";
    max = Math.max(max, f);
    if (d > 0) busy++;
  });
  $("q-summary").textContent =
    q.shards + " shards · " + busy + " busy · fullest " + (max * 100).toFixed(0) + "% of the mark";
  kv($("q-kv"), [
    ["queued bytes", bytes(q.queued_bytes)],
    ["writer queue", num(q.writer_queue_requests) + " requests"],
    ["in-flight", bytes(s.inflight.bytes) + " / " + bytes(s.inflight.capacity)],
    ["capacity / mark", num(q.capacity) + " / " + num(q.high_water)],
    ["frames connections", num(s.frames_connections)],
    ["stored records", num(s.ingest.stored_records)],
  ]);
}

function renderRejections(s, per) {
  const prev = new Map((poll.prev ? poll.prev.rejections : []).map((r) => [r.reason, r]));
  const body = $("rej");
  body.replaceChildren(
    ...s.rejections.map((r) => {
      const before = prev.get(r.reason);
      return row([
        { text: r.reason },
        { text: num(r.requests), cls: "n" },
        { text: num(r.events), cls: "n" },
        { text: rate(per(r.requests, before ? before.requests : poll.prev ? 0 : NaN)), cls: "n" },
      ]);
    }),
  );
  $("rej-empty").hidden = s.rejections.length > 0;
}

// The q-quantile of the observations between two readings of a histogram, as Prometheus'
// histogram_quantile computes it: from the bucket counts' differences, linear within the bucket
// that holds the rank. Above the last bound it answers the last bound (a floor).
function quantile(q, cur, prev, bounds) {
  if (!cur || !prev || !cur.buckets || !prev.buckets) return NaN;
  const d = cur.buckets.map((c, i) => Math.max(0, c - (prev.buckets[i] || 0)));
  const total = d.reduce((a, b) => a + b, 0);
  if (total === 0) return NaN;
  const rank = q * total;
  let below = 0;
  for (let i = 0; i < d.length; i++) {
    if (d[i] > 0 && below + d[i] >= rank) {
      if (i >= bounds.length) return bounds[bounds.length - 1];
      const lo = i === 0 ? 0 : bounds[i - 1];
      return lo + (bounds[i] - lo) * ((rank - below) / d[i]);
    }
    below += d[i];
  }
  return NaN;
}

function renderLatency(s, p, dt, mean) {
  const body = $("lat");
  const rows = [];
  const all = Object.entries(s.requests).map(([r, h]) => [r, h, p && p.requests[r], s.latency_bounds.requests]);
  all.push(["fsync (log writer)", s.fsync, p && p.fsync, s.latency_bounds.fsync]);
  for (const [route, h, before, le] of all) {
    if (h.count === 0) continue;
    const n = before && dt > 0 ? (h.count - before.count) / dt : NaN;
    rows.push(
      row([
        { text: route, title: route },
        { text: rate(n), cls: "n" },
        { text: secs(quantile(0.5, h, before, le)), cls: "n" },
        { text: secs(quantile(0.99, h, before, le)), cls: "n" },
        { text: secs(mean(h, before)), cls: "n" },
        { text: secs(h.sum_seconds / h.count), cls: "n" },
      ]),
    );
  }
  body.replaceChildren(...rows);
}

function renderFollowers(s) {
  const f = s.followers;
  $("fol").replaceChildren(
    ...Object.entries(f.by_transport).map(([t, n]) => row([{ text: t }, { text: num(n), cls: "n" }])),
  );
  kv($("fol-kv"), [
    ["followed streams", num(f.streams)],
    ["largest lag", num(f.lag_max_events) + " events"],
    ["reading storage", num(f.reading_storage)],
  ]);
}

function renderTop(s) {
  const t = s.time_ms / 1000;
  const counts = new Map();
  for (const x of s.streams.top.by_events.concat(s.streams.top.by_bytes)) counts.set(x.stream, x.events);
  poll.tops.push({ t, counts });
  if (poll.tops.length > TOP_WINDOW) poll.tops.shift();
  const streamRate = (name, events) => {
    for (const old of poll.tops) {
      if (old.t < t && old.counts.has(name)) return Math.max(0, events - old.counts.get(name)) / (t - old.t);
    }
    return NaN;
  };
  const list = poll.topBy === "bytes" ? s.streams.top.by_bytes : s.streams.top.by_events;
  const body = $("top");
  body.replaceChildren(
    ...list.map((x) => {
      const tr = row([
        { text: x.stream, title: x.stream },
        { text: num(x.events), cls: "n" },
        { text: bytes(x.bytes), cls: "n" },
        { text: rate(streamRate(x.stream, x.events)), cls: "n" },
        { text: x.shard, cls: "n" },
      ]);
      tr.addEventListener("click", () => browser.open(x.stream));
      return tr;
    }),
  );
  $("top-empty").hidden = list.length > 0;
}

function setTopBy(by) {
  poll.topBy = by;
  $("top-events").classList.toggle("on", by === "events");
  $("top-bytes").classList.toggle("on", by === "bytes");
  if (poll.prev && poll.prev.streams) {
    poll.tops.pop(); // renderTop pushes this reading again
    renderTop(poll.prev);
  }
}

// ---------------------------------------------------------------------------------------------
// Replay browser
// ---------------------------------------------------------------------------------------------

const browser = {
  stream: "",
  after: null, // `next` of the stream listing
  view: null, // {first, last, from, next, count}
  es: null,
  loading: 0, // generation: a stale response is dropped

  eventsUrl(query) {
    return "/v1/streams/" + encodeURIComponent(this.stream) + "/events?" + query;
  },

  async listStreams(reset) {
    const sel = $("rb-stream");
    if (reset) {
      this.after = null;
      while (sel.options.length > 1) sel.remove(1);
    }
    const params = new URLSearchParams({ limit: String(STREAMS_PAGE) });
    const prefix = $("rb-prefix").value;
    if (prefix) params.set("prefix", prefix);
    if (this.after) params.set("after", this.after);
    try {
      const r = await fetch("/v1/streams?" + params, { cache: "no-store" });
      if (!r.ok) return this.info("listing streams: HTTP " + r.status);
      const page = await r.json();
      for (const s of page.streams) {
        if (sel.options.length > MAX_OPTIONS) break;
        const o = el("option", s.stream);
        o.value = s.stream;
        sel.appendChild(o);
      }
      this.after = page.next;
      $("rb-more").disabled = !page.next || sel.options.length > MAX_OPTIONS;
      if (this.stream) sel.value = this.stream;
    } catch (e) {
      this.info("listing streams failed");
    }
  },

  info(text) {
    $("rb-info").textContent = text;
  },

  limit() {
    return Math.min(PAGE_MAX, Math.max(1, parseInt($("rb-limit").value, 10) || 50));
  },

  open(name) {
    const sel = $("rb-stream");
    if (![...sel.options].some((o) => o.value === name)) {
      const o = el("option", name);
      o.value = name;
      sel.appendChild(o);
    }
    sel.value = name;
    this.select(name);
    $("replay").scrollIntoView({ block: "start" });
  },

  select(name) {
    this.stopFollow();
    this.stream = name;
    this.view = null;
    $("rb-rows").replaceChildren();
    $("rb-detail").textContent = "Select a row to see the event as stored (canonical JSON).";
    if (name) this.load(null);
    else this.info("pick a stream");
  },

  // One page from `from` (null: the first retained); resolves when shown.
  async load(from) {
    if (!this.stream) return;
    const gen = ++this.loading;
    const limit = this.limit();
    const q = new URLSearchParams({ limit: String(limit) });
    if (from !== null && from !== undefined) q.set("from", String(from));
    try {
      const r = await fetch(this.eventsUrl(q), { cache: "no-store", headers: { Accept: "application/x-ndjson" } });
      if (gen !== this.loading) return;
      if (!r.ok) {
        this.info(r.status === 404 ? "unknown stream (deleted?)" : "replay: HTTP " + r.status);
        return;
      }
      const text = await r.text();
      if (gen !== this.loading) return;
      const lines = text.split("\n").filter((l) => l.length > 0);
      const h = (n) => parseInt(r.headers.get(n) || "0", 10);
      const first = h("x-vx-first-seq");
      const last = h("x-vx-last-seq");
      const next = r.headers.has("x-vx-next-seq") ? h("x-vx-next-seq") : null;
      const start = from === null || from === undefined ? first : Math.max(from, first);
      this.view = { first, last, from: start, next, count: lines.length };
      const body = $("rb-rows");
      body.replaceChildren(...lines.map((l) => this.eventRow(l, false)));
      $("rb-from").value = String(start);
      this.showInfo();
    } catch (e) {
      if (gen === this.loading) this.info("replay failed");
    }
  },

  showInfo() {
    const v = this.view;
    if (!v) return;
    const shown = $("rb-rows").childElementCount;
    if (v.last < v.first) {
      this.info(this.stream + ": no retained events (last seq " + v.last + ")");
    } else if (this.es) {
      this.info(this.stream + ": " + shown + " rows (newest " + LIVE_MAX + " kept) · retained seqs " + v.first + "–" + v.last);
    } else {
      const to = v.from + v.count - 1;
      this.info(this.stream + ": seq " + (v.count ? v.from + "–" + to : "none") + " of " + v.first + "–" + v.last);
    }
    $("rb-prev").disabled = !!this.es || v.from <= v.first;
    $("rb-next").disabled = !!this.es || v.next === null || v.next > v.last;
  },

  eventRow(line, fresh) {
    let e;
    try {
      e = JSON.parse(line);
    } catch (err) {
      e = {};
    }
    let ts = "";
    if (Number.isFinite(e.ts)) {
      const d = new Date(e.ts);
      ts = Number.isNaN(d.getTime()) ? String(e.ts) : d.toISOString().replace("T", " ").replace("Z", "");
    }
    let data = "";
    if (e.data !== undefined) {
      data = JSON.stringify(e.data);
      if (data.length > 200) data = data.slice(0, 200) + "…";
    }
    const tr = row([
      { text: e.seq, cls: "n" },
      { text: ts, title: String(e.ts) },
      { text: e.type },
      { text: e.entity || "" },
      { text: e.kind || "" },
      { text: e.value === undefined ? "" : e.value, cls: "n" },
      { text: data },
    ]);
    if (fresh) tr.className = "new";
    tr.addEventListener("click", () => {
      for (const s of $("rb-rows").querySelectorAll("tr.sel")) s.classList.remove("sel");
      tr.classList.add("sel");
      $("rb-detail").textContent = line;
    });
    return tr;
  },

  async latest() {
    // Load a page to learn the last seq, then the page that ends there.
    await this.load(null);
    const v = this.view;
    if (v && v.last >= v.first) await this.load(Math.max(v.first, v.last - this.limit() + 1));
  },

  async follow() {
    if (this.es) return this.stopFollow();
    if (!this.stream) return;
    await this.latest();
    const v = this.view;
    if (!v) return;
    const box = $("rb-rows").closest(".rb-table");
    box.scrollTop = box.scrollHeight; // newest at the bottom, in view; new rows keep it there
    // Live from right after what the table shows (X-Vx-Next-Seq: the stream may have grown
    // past the page meanwhile): no gap, no duplicate (docs/API.md §5).
    const from = v.next !== null ? v.next : v.last + 1;
    const es = new EventSource(this.eventsUrl("follow=true&from=" + from));
    this.es = es;
    $("rb-follow").setAttribute("aria-pressed", "true");
    setBadge("rb-live", "connecting", "warn");
    es.onopen = () => {
      if (this.es === es) setBadge("rb-live", "live", "ok");
    };
    es.onmessage = (m) => {
      if (this.es !== es) return;
      const body = $("rb-rows");
      const atBottom = box.scrollTop + box.clientHeight >= box.scrollHeight - 8;
      body.appendChild(this.eventRow(m.data, true));
      while (body.childElementCount > LIVE_MAX) body.firstElementChild.remove();
      const seq = parseInt(m.lastEventId, 10);
      if (Number.isFinite(seq)) this.view.last = Math.max(this.view.last, seq);
      if (atBottom) box.scrollTop = box.scrollHeight;
      this.showInfo();
    };
    es.addEventListener("deleted", () => {
      this.stopFollow();
      this.info(this.stream + " was deleted");
    });
    es.addEventListener("retained", (m) => {
      this.info("retention removed events before they were sent: " + m.data);
    });
    es.onerror = () => {
      if (this.es !== es) return;
      // The browser reconnects by itself (with Last-Event-ID) unless the answer was an error.
      if (es.readyState === EventSource.CLOSED) {
        this.stopFollow();
        setBadge("rb-live", "disconnected", "bad");
      } else {
        setBadge("rb-live", "reconnecting", "warn");
      }
    };
    this.showInfo();
  },

  stopFollow() {
    if (this.es) {
      this.es.close();
      this.es = null;
    }
    $("rb-follow").setAttribute("aria-pressed", "false");
    setBadge("rb-live", "not following");
    this.showInfo();
  },
};

function debounce(f, ms) {
  let t = null;
  return () => {
    clearTimeout(t);
    t = setTimeout(f, ms);
  };
}

function init() {
  $("pause").addEventListener("click", () => {
    poll.paused = !poll.paused;
    $("pause").textContent = poll.paused ? "Resume" : "Pause";
    $("pause").classList.toggle("on", poll.paused);
    if (poll.paused) {
      clearTimeout(poll.timer);
      poll.timer = null;
    } else if (!poll.timer) {
      tick();
    }
  });
  $("top-events").addEventListener("click", () => setTopBy("events"));
  $("top-bytes").addEventListener("click", () => setTopBy("bytes"));

  $("rb-stream").addEventListener("change", (e) => browser.select(e.target.value));
  $("rb-prefix").addEventListener("input", debounce(() => browser.listStreams(true), 300));
  $("rb-more").addEventListener("click", () => browser.listStreams(false));
  $("rb-form").addEventListener("submit", (e) => {
    e.preventDefault();
    browser.stopFollow();
    const from = parseInt($("rb-from").value, 10);
    browser.load(Number.isFinite(from) ? from : null);
  });
  $("rb-first").addEventListener("click", () => {
    browser.stopFollow();
    browser.load(null);
  });
  $("rb-prev").addEventListener("click", () => {
    const v = browser.view;
    if (v) browser.load(Math.max(v.first, v.from - browser.limit()));
  });
  $("rb-next").addEventListener("click", () => {
    const v = browser.view;
    if (v && v.next !== null) browser.load(v.next);
  });
  $("rb-latest").addEventListener("click", () => {
    browser.stopFollow();
    browser.latest();
  });
  $("rb-follow").addEventListener("click", () => browser.follow());
  $("rb-limit").addEventListener("change", () => {
    if (browser.view && !browser.es) browser.load(browser.view.from);
  });

  browser.listStreams(true);
  tick();
}

document.addEventListener("DOMContentLoaded", init);
