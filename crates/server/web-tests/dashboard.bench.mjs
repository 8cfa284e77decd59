// The dashboard benchmark's browser side, run by the `dashboard` bench binary (bench/src/bin/
// dashboard.rs), which computes and records the figures: this prints one JSON line of raw
// samples on stdout. Against a real `intendant serve --web` with the scripted model:
//
// - latency: 20 sessions stream at once (each turn's text in small timed deltas, then one
//   `true`); WATCHED of them are open in their own tab. For every transcript line those tabs
//   add, the time from the envelope's `ts` (stamped where the daemon numbers the event, on its
//   bus) to the moment the line is in the DOM (a MutationObserver); beside it, the same
//   envelopes read by a bare SSE client (fetch of /api/events) of each watched session, from
//   `ts` to the message's arrival.
// - first render: a session of about 1,000 transcript events, opened in a fresh navigation,
//   until its last line is in the DOM (from navigation start: the page, its script, the
//   stream's replay); beside it, a bare SSE client reading the same events from after=0.
// - first load: the bytes of everything the page fetched on load but the API (its HTML,
//   script, styles), beside the embedded assets' sizes.
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Daemon, doneTurn, launchChromium, repo, usage, waitUntil } from './harness.mjs';

const SESSIONS = 20;
const WATCHED = 4;
const TURNS = 12;
const RENDER_ROUNDS = 5;
// Calls per turn and turns of the long session: 5 x (2 x 98 + 5) + 4 = 1,009 events.
const BIG_CALLS = 98;
const BIG_TURNS = 5;

const wallNow = () => performance.timeOrigin + performance.now();

// Reads `GET /api/events?query` as a bare SSE client: calls `onMessage(seq, arrivalMs)` for
// each event message until `done()` is true; resolves when it stops.
async function bareSse(daemon, query, onMessage, done, opened = () => {}) {
  const controller = new AbortController();
  const r = await fetch(daemon.base + '/api/events?' + query, {
    headers: { Authorization: 'Bearer ' + daemon.token, Accept: 'text/event-stream' },
    signal: controller.signal,
  });
  opened();
  const decoder = new TextDecoder();
  let buffered = '';
  try {
    for await (const chunk of r.body) {
      const now = wallNow();
      buffered += decoder.decode(chunk, { stream: true });
      let end;
      while ((end = buffered.indexOf('\n\n')) >= 0) {
        const message = buffered.slice(0, end);
        buffered = buffered.slice(end + 2);
        const id = message.match(/^id: ?(\d+)$/m);
        if (id) onMessage(Number(id[1]), now);
      }
      if (done()) break;
    }
  } finally {
    controller.abort();
  }
}

// Records, in every page of the context, when each transcript line enters the DOM.
const OBSERVE = () => {
  window.__lines = [];
  new MutationObserver((records) => {
    const t = performance.timeOrigin + performance.now();
    for (const r of records) {
      for (const n of r.addedNodes) {
        if (n.nodeType === 1 && n.matches('li[data-seq]')) window.__lines.push([Number(n.dataset.seq), t]);
      }
    }
  }).observe(document, { childList: true, subtree: true });
};

async function firstRender(daemon, context, id, lines, lastSeq) {
  const page = await context.newPage();
  const pageMs = [];
  const sseMs = [];
  for (let round = 0; round < RENDER_ROUNDS; round++) {
    await page.goto('about:blank');
    await page.goto(daemon.base + '/#/s/' + encodeURIComponent(id));
    await page.waitForFunction((n) => window.__lines && window.__lines.length >= n, lines, { polling: 50, timeout: 60_000 });
    pageMs.push(await page.evaluate(() => window.__lines[window.__lines.length - 1][1] - performance.timeOrigin));

    const t0 = wallNow();
    let last = 0;
    await bareSse(daemon, 'session=' + encodeURIComponent(id) + '&after=0', (seq, t) => { if (seq >= lastSeq) last = t; },
      () => last > 0);
    sseMs.push(last - t0);
  }
  const entries = await page.evaluate(() => [
    ...performance.getEntriesByType('navigation'), ...performance.getEntriesByType('resource'),
  ].map((e) => ({ name: e.name, bytes: e.decodedBodySize })));
  await page.close();
  return { pageMs, sseMs, entries };
}

async function main() {
  const tmp = mkdtempSync(path.join(tmpdir(), 'intendant-web-bench-'));
  const daemon = new Daemon(tmp);
  let context;
  try {
    const login = await daemon.start();
    await daemon.api('/api/intents', { intent: 'settings', max_running: SESSIONS + 1 });
    context = await launchChromium(tmp);
    await context.addInitScript(OBSERVE);
    const first = context.pages()[0] || await context.newPage();
    await first.goto(login);

    // The long session, recorded first, on a calm daemon.
    const bigTurns = [];
    for (let t = 0; t < BIG_TURNS; t++) {
      bigTurns.push({
        text: 'Batch ' + t + '.',
        tool_calls: Array.from({ length: BIG_CALLS }, (_, i) => ({ name: 'exec_command', arguments: { command: 'echo ' + t + '.' + i } })),
        usage,
      });
    }
    bigTurns.push(doneTurn('done'));
    const big = await daemon.startSession('big', bigTurns, { autonomy: 'full' });
    await waitUntil('the long session', async () => (await daemon.session(big.id)).status === 'idle', () => daemon.log);
    const bigLines = await daemon.recorded(big.id);
    const render = await firstRender(daemon, context, big.id, bigLines.length, bigLines[bigLines.length - 1].seq);

    // Twenty sessions streaming at once.
    const text = 'Streaming a paragraph of model text in small timed pieces, as a model does, '.repeat(3);
    const turns = [];
    for (let t = 0; t < TURNS; t++) {
      turns.push({
        text: 'Turn ' + t + '. ' + text,
        tool_calls: [{ name: 'exec_command', arguments: { command: 'true' } }],
        usage,
        delivery: { delta_chars: 8, chunk_delay_ms: 20 },
      });
    }
    turns.push(doneTurn('done'));
    // Each session's first turn waits until the watchers are attached: it starts with a pause.
    const paused = [{ ...turns[0], delivery: { delta_chars: 8, chunk_delay_ms: 20, first_chunk_delay_ms: 5000 } }, ...turns.slice(1)];
    const sessions = await Promise.all(Array.from({ length: SESSIONS }, (_, i) =>
      daemon.startSession('s' + i, paused, { autonomy: 'full' })));
    const watched = sessions.slice(0, WATCHED);
    // The tabs first (each replays its session, then reads live), then the bare clients (from
    // now on): every event a bare client reads, its tab read live too.
    const pages = [];
    for (const s of watched) {
      const p = await context.newPage();
      await p.goto(daemon.base + '/#/s/' + encodeURIComponent(s.id));
      await p.waitForFunction(() => window.__lines && window.__lines.length > 0, null, { polling: 50, timeout: 60_000 })
        .catch(async (e) => {
          throw new Error(e.message + '\n' + JSON.stringify(await daemon.session(s.id)) + '\n' + (await p.content()).slice(0, 3000));
        });
      pages.push(p);
    }
    const sse = new Map(watched.map((s) => [s.id, new Map()]));
    const allDone = { value: false };
    for (const s of watched) {
      // Not awaited to the end: a reader stops at its next message after the sessions are done,
      // or when the daemon closes its stream.
      await new Promise((opened) => {
        bareSse(daemon, 'session=' + encodeURIComponent(s.id), (seq, t) => sse.get(s.id).set(seq, t),
          () => allDone.value, opened).catch(() => {});
      });
    }
    await waitUntil('every session to finish', async () => {
      const list = await daemon.api('/api/sessions');
      return sessions.every((s) => list.find((x) => x.id === s.id)?.status === 'idle');
    }, () => daemon.log);
    allDone.value = true;
    const pageMs = [];
    const sseMs = [];
    for (let i = 0; i < WATCHED; i++) {
      const s = watched[i];
      const ts = new Map((await daemon.recorded(s.id)).map((env) => [env.seq, Date.parse(env.ts)]));
      const lines = await pages[i].evaluate(() => window.__lines);
      const bare = sse.get(s.id);
      for (const [seq, t] of lines) {
        // Only events both read live: the bare client connected before the sessions streamed.
        if (!bare.has(seq) || !ts.has(seq)) continue;
        pageMs.push(t - ts.get(seq));
        sseMs.push(bare.get(seq) - ts.get(seq));
      }
    }
    const assetsDir = path.join(repo, 'crates/server/src/web/assets');
    const embedded = ['index.html', 'app.js', 'app.css'].reduce((n, f) => n + statSync(path.join(assetsDir, f)).size, 0);
    const loaded = render.entries.filter((e) => !new URL(e.name).pathname.startsWith('/api/'));
    process.stdout.write(JSON.stringify({
      latency: { sessions: SESSIONS, watched: WATCHED, page_ms: pageMs, sse_ms: sseMs },
      first_render: { events: bigLines.length, page_ms: render.pageMs, sse_ms: render.sseMs },
      first_load: { bytes: loaded.reduce((n, e) => n + e.bytes, 0), files: loaded.map((e) => new URL(e.name).pathname), embedded_bytes: embedded },
    }) + '\n');
    for (const p of pages) await p.close();
  } finally {
    if (context) await context.close();
    await daemon.stop();
    rmSync(tmp, { recursive: true, force: true });
  }
  process.exit(0);
}

main().catch((e) => {
  process.stderr.write(String(e.stack || e) + '\n');
  process.exit(1);
});
