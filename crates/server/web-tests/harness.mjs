// What the browser tests and the dashboard benchmark share: a real `intendant serve --web` on a
// throwaway state root, its HTTP API with the bearer token, sessions on the scripted model, and
// Debian's chromium. INTENDANT_BIN overrides the binary (default: target/debug/intendant of
// this checkout), CHROMIUM the browser (default /usr/bin/chromium).
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const here = path.dirname(fileURLToPath(import.meta.url));
export const repo = path.resolve(here, '../../..');

// How long a wait for the daemon or the page may take before it fails (a bound, not a
// measurement).
export const WAIT_MS = 60_000;

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Polls `fn` until it returns something truthy; fails after WAIT_MS naming `what`.
export async function waitUntil(what, fn, log = () => '') {
  const end = Date.now() + WAIT_MS;
  for (;;) {
    const value = await fn();
    if (value) return value;
    if (Date.now() > end) throw new Error('gave up waiting for ' + what + '\n--- daemon output ---\n' + log().slice(-4000));
    await sleep(100);
  }
}

// One daemon serving its dashboard, on the state root `tmp/home`; projects go under `tmp`.
export class Daemon {
  constructor(tmp, bin = process.env.INTENDANT_BIN || path.join(repo, 'target/debug/intendant')) {
    this.tmp = tmp;
    this.home = path.join(tmp, 'home');
    this.bin = bin;
    this.log = '';
    this.child = null;
  }

  // Starts `serve --web` and resolves to its login URL (also sets `base` and `token`).
  start() {
    this.log = '';
    this.child = spawn(this.bin, ['serve', '--web', '127.0.0.1:0'], {
      env: { PATH: process.env.PATH, HOME: this.tmp, INTENDANT_HOME: this.home },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    return new Promise((resolve, reject) => {
      const seen = (chunk) => {
        this.log += chunk;
        const m = this.log.match(/http:\/\/127\.0\.0\.1:\d+\/login\?token=[0-9a-f]{64}/);
        if (m) {
          const u = new URL(m[0]);
          this.base = u.origin;
          this.token = u.searchParams.get('token');
          resolve(m[0]);
        }
      };
      this.child.stdout.on('data', seen);
      this.child.stderr.on('data', seen);
      this.child.on('exit', (code) => reject(new Error('daemon exited ' + code + ':\n' + this.log)));
    });
  }

  async stop() {
    const child = this.child;
    if (child && child.exitCode === null) {
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      await exited;
    }
  }

  // GET `pathname`, or POST `body` to it, with the bearer token; the JSON answer.
  async api(pathname, body) {
    const r = await fetch(this.base + pathname, {
      method: body ? 'POST' : 'GET',
      headers: { Authorization: 'Bearer ' + this.token, 'Content-Type': 'application/json' },
      body: body ? JSON.stringify(body) : undefined,
    });
    const json = await r.json();
    if (!r.ok) throw new Error(pathname + ': ' + r.status + ' ' + JSON.stringify(json));
    return json;
  }

  session(id) {
    return this.api('/api/sessions/' + encodeURIComponent(id));
  }

  // Every envelope of session `id` but the streamed deltas (what the transcript shows).
  async recorded(id) {
    const envelopes = [];
    for (let after = 0, more = true; more;) {
      const page = await this.api('/api/sessions/' + encodeURIComponent(id) + '/events?after=' + after);
      for (const env of page.events) if (env.event.type !== 'model_response_delta') envelopes.push(env);
      more = page.more;
      if (page.events.length) after = page.events[page.events.length - 1].seq;
    }
    return envelopes;
  }

  // Starts session `name` in its own project under `tmp` on the scripted model playing `turns`.
  async startSession(name, turns, extra = {}) {
    const project = path.join(this.tmp, name);
    mkdirSync(project, { recursive: true });
    const scenario = path.join(this.tmp, name + '.scenario.json');
    writeFileSync(scenario, JSON.stringify({ model: 'fake-model', turns }));
    const s = await this.api('/api/intents', {
      intent: 'start', task: 'task ' + name, project, autonomy: 'medium', provider: 'mock', scenario, ...extra,
    });
    return { id: s.id, project };
  }
}

export const usage = { input: 100, cached: 0, output: 10, reasoning: 0 };
export const doneTurn = (message) => ({ text: message, tool_calls: [{ name: 'signal_done', arguments: { message } }], usage });

// Headless chromium with a fresh profile under `tmp`, at phone width.
export function launchChromium(tmp) {
  return chromium.launchPersistentContext(mkdtempSync(path.join(tmp, 'profile-')), {
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
      '--disable-sync', '--no-first-run'],
    viewport: { width: 420, height: 860 },
  });
}
