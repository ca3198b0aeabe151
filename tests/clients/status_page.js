// Drives the status page in headless Chromium for tests/status_page.rs (playwright-core, with
// Debian's /usr/bin/chromium; no browser download).
//
// Usage: node status_page.js CONFIG_JSON
// CONFIG_JSON: {base, chromium, userDataDir, screenshot, readToken, ingestToken, stream,
//               marker, timeoutMs}
//
// Logs in the way an operator's browser does: no credentials up front, the page's 401 carries
// a Basic challenge, the browser answers it with (any user, the read token), and the page's
// own fetches and EventSource go with the same credentials. Then it checks that the numbers
// move while the test ingests, follows `stream` live, posts an event carrying `marker` (with
// the ingest token, over plain HTTP) and waits for it in the DOM. Every wait polls up to a
// generous deadline. Prints one JSON report on stdout; exits non-zero on any failure, console
// error, failed request or HTTP error answer.
"use strict";

const { chromium } = require("playwright-core");

const cfg = JSON.parse(process.argv[2]);
const deadline = (ms) => Date.now() + (ms || cfg.timeoutMs);

async function waitFor(what, f, ms) {
  const end = deadline(ms);
  let last;
  for (;;) {
    try {
      last = await f();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    if (Date.now() > end) throw new Error("timed out waiting for " + what + " (last: " + last + ")");
    await new Promise((r) => setTimeout(r, 200));
  }
}

const problems = [];
const report = { problems, steps: [] };

async function main() {
  const step = (s) => report.steps.push(s);
  const context = await chromium.launchPersistentContext(cfg.userDataDir, {
    executablePath: cfg.chromium,
    headless: true,
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
    viewport: { width: 1440, height: 1000 },
    colorScheme: "dark",
    httpCredentials: { username: "operator", password: cfg.readToken },
  });
  try {
    const page = context.pages()[0] || (await context.newPage());
    const origin = new URL(cfg.base).origin;
    page.on("console", (m) => {
      if (m.type() === "error" || m.type() === "warning") problems.push("console " + m.type() + ": " + m.text());
    });
    page.on("pageerror", (e) => problems.push("page error: " + e.message));
    page.on("requestfailed", (r) => {
      // An EventSource the page closed on purpose, or one cut when the page goes away.
      const aborted = (r.failure() || {}).errorText === "net::ERR_ABORTED" && r.resourceType() === "eventsource";
      if (!aborted) problems.push("request failed: " + r.url() + " " + (r.failure() || {}).errorText);
    });
    page.on("request", (r) => {
      if (!r.url().startsWith(origin + "/") && !r.url().startsWith("data:")) problems.push("external request: " + r.url());
    });
    // Playwright answers the page's Basic challenge (httpCredentials) below the page's view;
    // the API's own requests then carry the cached credentials up front, as in a real browser
    // (their 401 would say Bearer, which no browser answers with Basic credentials).
    page.on("response", (r) => {
      // A Basic challenge is answered by the browser; anything else ≥ 400 is a bug.
      const challenge = r.status() === 401 && /^Basic /.test(r.headers()["www-authenticate"] || "");
      if (r.status() >= 400 && !challenge) {
        problems.push("HTTP " + r.status() + " for " + r.url());
      }
    });

    const resp = await page.goto(cfg.base + "/", { waitUntil: "load" });
    if (!resp || resp.status() !== 200) throw new Error("GET / answered " + (resp && resp.status()));
    step("loaded");

    const count = async () => {
      const t = (await page.textContent("#k-events")) || "";
      const n = parseInt(t.replace(/,/g, ""), 10);
      return Number.isFinite(n) ? n : null;
    };
    const first = await waitFor("an event count", count);
    const moved = await waitFor("the event count to change", async () => {
      const n = await count();
      return n !== null && n !== first ? n : null;
    });
    const rate = await waitFor("a non-zero ingest rate", async () => {
      const t = (await page.textContent("#k-rate")) || "";
      return /^[0-9.]+[kM]?$/.test(t) && parseFloat(t) > 0 ? t : null;
    });
    const heat = await page.locator("#heat > div").count();
    report.counts = { first, moved, rate, heatCells: heat };
    step("numbers move");

    await waitFor("the stream in the picker", async () =>
      (await page.locator("#rb-stream option").evaluateAll((os) => os.map((o) => o.value))).includes(cfg.stream),
    );
    await page.selectOption("#rb-stream", cfg.stream);
    await waitFor("replayed rows", async () => (await page.locator("#rb-rows tr").count()) > 0);
    step("replayed");
    await page.click("#rb-follow");
    await waitFor("the follow to be live", async () => (await page.textContent("#rb-live")) === "live");
    step("following");

    const body = JSON.stringify({ stream: cfg.stream, type: "marker", entity: "<i>op</i>", data: { marker: cfg.marker, html: "<b>bold?</b>" } }) + "\n";
    const posted = await fetch(cfg.base + "/v1/events", {
      method: "POST",
      headers: { "content-type": "application/x-ndjson", authorization: "Bearer " + cfg.ingestToken },
      body,
    });
    if (posted.status !== 200) throw new Error("posting the marker answered " + posted.status);
    await waitFor("the marker in the followed rows", async () =>
      ((await page.textContent("#rb-rows")) || "").includes(cfg.marker),
    );
    // Event content is text, never markup.
    report.injected = await page.locator("#rb-rows b, #rb-rows i").count();
    if (report.injected !== 0) problems.push("event content became markup");
    if (!((await page.textContent("#rb-rows")) || "").includes("<b>bold?</b>")) problems.push("markup not shown as text");
    step("marker shown live");
    // Show the marker event as stored in the detail pane, for the screenshot.
    await page.locator("#rb-rows tr", { hasText: cfg.marker }).last().click();

    // Let a few more polls land so the screenshot shows a rate history and the live row.
    await page.waitForTimeout(5000);
    await page.evaluate(() => window.scrollTo(0, 0));
    await page.screenshot({ path: cfg.screenshot, fullPage: true });
    step("screenshot");
    await page.click("#rb-follow"); // stop following: closes the EventSource cleanly
  } finally {
    await context.close();
  }
  process.stdout.write(JSON.stringify(report) + "\n");
  process.exit(problems.length === 0 ? 0 : 1);
}

main().catch((e) => {
  report.error = String(e && e.stack ? e.stack : e);
  process.stdout.write(JSON.stringify(report) + "\n");
  process.exit(2);
});
