// The dashboard in a real browser: Debian's chromium driven by playwright-core against a real
// `intendant serve --web` with the scripted model, each session in a throwaway project.
// Run by .ci/run: `npm ci && node --test` in this directory, after `cargo build`. The tests run
// in order against one daemon (the later ones use the sessions of the earlier ones). Each test
// saves a screenshot to WEB_TEST_OUTPUT (default: target/web-tests); harness.mjs says which
// binary and browser run.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { appendFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Daemon, doneTurn, launchChromium, repo, sleep, usage, waitUntil as wait } from './harness.mjs';

const shots = process.env.WEB_TEST_OUTPUT || path.join(repo, 'target/web-tests');

let tmp, daemon, context, page;
// The sessions the tests share: alpha and beta wait for approval at first.
let alpha, beta;

const waitUntil = (what, fn) => wait(what, fn, () => daemon.log);
const api = (pathname, body) => daemon.api(pathname, body);
const sessionOf = (id) => daemon.session(id);
const start = (name, turns, extra) => daemon.startSession(name, turns, extra);
let base = '';

async function shot(p, name) {
  mkdirSync(shots, { recursive: true });
  await p.screenshot({ path: path.join(shots, name + '.png'), fullPage: true });
}

const writeTurn = (file) => ({
  text: 'Writing ' + file + '.',
  tool_calls: [{ name: 'edit_file', arguments: { file_path: file, operation: 'write', content: 'from ' + file + '\n' } }],
  usage,
});

// Starts the daemon and logs `page` in through the printed URL.
async function login() {
  const url = await daemon.start();
  base = daemon.base;
  await page.goto(url);
  assert.equal(page.url(), base + '/', 'the login drops the token from the address bar');
}

// The page's routes come off once their handlers in flight have answered: Playwright sends on a
// request whose handler is still running when its route is removed, and that handler's own answer
// then fails after its test has ended ("Route is already handled!").
const unrouteAll = () => page.unrouteAll({ behavior: 'wait' });

before(async () => {
  tmp = mkdtempSync(path.join(tmpdir(), 'intendant-web-'));
  daemon = new Daemon(tmp);
  context = await launchChromium(tmp);
  page = context.pages()[0] || await context.newPage();
  await login();
});

after(async () => {
  if (context) await context.close();
  if (daemon) await daemon.stop();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

test('two sessions waiting for approval both show in the queue', async () => {
  alpha = await start('alpha', [writeTurn('a.txt'), doneTurn('alpha wrote a.txt'), doneTurn('SECOND ROUND OK')]);
  beta = await start('beta', [writeTurn('b.txt'), doneTurn('beta wrote b.txt')]);
  await page.goto(base + '/#/approvals');
  const cards = page.locator('#approvals .approval');
  await waitUntil('two approvals in the queue', async () => (await cards.count()) === 2);
  const previews = await cards.locator('.preview').allTextContents();
  assert.ok(previews.some((p) => p.includes('a.txt')) && previews.some((p) => p.includes('b.txt')), previews.join(' | '));
  const projects = await cards.locator('.project').allTextContents();
  assert.deepEqual(projects.sort(), [alpha.project, beta.project].sort());
  assert.equal(await page.locator('#approval-count').textContent(), '2');
  await shot(page, 'approvals-queue');
});

test('approving one in the page writes its file, and a second page sees it at once', async () => {
  const second = await context.newPage();
  try {
    await second.goto(base + '/#/approvals');
    const theirs = second.locator('#approvals .approval');
    await waitUntil('the second page shows both', async () => (await theirs.count()) === 2);
    await page.locator('#approvals .approval').filter({ hasText: 'a.txt' })
      .getByRole('button', { name: 'Approve', exact: true }).click();
    await waitUntil('a.txt written', () => existsSync(path.join(alpha.project, 'a.txt')));
    await waitUntil('the second page drops the answered approval', async () => (await theirs.count()) === 1);
    assert.match(await theirs.locator('.preview').textContent(), /b\.txt/);
    await shot(second, 'second-page-after-approve');
  } finally {
    await second.close();
  }
});

test('denying the other in the page: its file never appears', async () => {
  const cards = page.locator('#approvals .approval');
  await cards.filter({ hasText: 'b.txt' }).getByRole('button', { name: 'Deny', exact: true }).click();
  await waitUntil('beta no longer waits', async () => (await sessionOf(beta.id)).pending_approvals === 0
    && (await api('/api/approvals')).length === 0);
  await waitUntil('the queue is empty', async () => (await cards.count()) === 0);
  await waitUntil('beta is past the denial', async () => (await sessionOf(beta.id)).status !== 'waiting_for_human');
  // Beta is no longer running (its round ended after the denial): the write is not merely late.
  let last;
  await waitUntil('beta ended its round', async () => {
    last = await sessionOf(beta.id);
    return ['idle', 'done'].includes(last.status);
  }).catch((e) => { throw new Error(e.message + '\nbeta: ' + JSON.stringify(last)); });
  assert.equal(existsSync(path.join(beta.project, 'b.txt')), false, 'a denied write never happens');
  await page.goto(base + '/#/s/' + encodeURIComponent(beta.id));
  await waitUntil('the denial in the transcript',
    async () => (await page.locator('#transcript li[data-type="approval_resolved"]').textContent() || '').includes('deny'));
  await shot(page, 'session-denied');
});

test('a follow-up typed in the page starts the next round', async () => {
  await page.goto(base + '/#/s/' + encodeURIComponent(alpha.id));
  const rounds = page.locator('#transcript li[data-type="round_complete"]');
  await waitUntil('alpha finished its first round', async () => (await rounds.count()) === 1);
  await page.fill('.follow-up textarea', 'one more thing');
  await page.click('.follow-up button[type="submit"]');
  await waitUntil('the second round answers', async () => (await page.locator('#transcript').textContent()).includes('SECOND ROUND OK'));
  await waitUntil('the second round completes', async () => (await rounds.count()) === 2);
  const you = await page.locator('#transcript li[data-type="control_command"]').allTextContents();
  assert.ok(you.some((t) => t.includes('one more thing')), you.join(' | '));
  await shot(page, 'session-follow-up');
});

test('reloading mid-stream shows every transcript line once, in order', async () => {
  const turns = [];
  for (let i = 1; i <= 12; i++) {
    turns.push({
      text: 'Step ' + i + ' of twelve, streamed slowly so the page reloads in the middle.',
      tool_calls: [{ name: 'exec_command', arguments: { command: 'echo step ' + i } }],
      usage,
      delivery: { delta_chars: 4, chunk_delay_ms: 15 },
    });
  }
  turns.push(doneTurn('all steps printed'));
  const c = await start('gamma', turns, { autonomy: 'full' });
  await page.goto(base + '/#/s/' + encodeURIComponent(c.id));
  const lines = page.locator('#transcript li[data-seq]');
  const rounds = page.locator('#transcript li[data-type="round_complete"]');
  await waitUntil('some of the transcript', async () => (await lines.count()) >= 15);
  assert.equal(await rounds.count(), 0, 'the reload comes mid-stream');
  await page.reload();
  await waitUntil('the round to end', async () => (await rounds.count()) === 1);
  // The round is over: nothing more comes, the transcript is complete.
  const shown = await lines.evaluateAll((els) => els.map((e) => Number(e.dataset.seq)));
  const recorded = (await daemon.recorded(c.id)).map((env) => env.seq);
  assert.equal(new Set(shown).size, shown.length, 'no line shown twice');
  assert.deepEqual(shown, recorded, 'every line shown once, in order');
  assert.equal(await page.locator('#transcript li[data-type="tool_call"]').filter({ hasText: 'echo step' }).count(), 12);
  await shot(page, 'session-after-reload');
});

test('a <script> in tool output is shown as text', async () => {
  const hostile = '<script>window.__pwned=1</script><b id=bold>bold</b><img src=x onerror=window.__pwned=2>';
  const turns = [{
    text: 'Printing ' + hostile,
    tool_calls: [{ name: 'exec_command', arguments: { command: "printf '%s\\n' '" + hostile + "'" } }],
    usage,
  }, doneTurn('printed ' + hostile)];
  const d = await start('delta', turns, { autonomy: 'full' });
  await page.goto(base + '/#/s/' + encodeURIComponent(d.id));
  await waitUntil('the round to end',
    async () => (await page.locator('#transcript li[data-type="round_complete"]').count()) === 1);
  const outputs = await page.locator('#transcript li[data-type="agent_output"] pre').allTextContents();
  assert.ok(outputs.some((t) => t.includes(hostile)), 'the output is shown as text: ' + outputs.join(' | '));
  const model = await page.locator('#transcript li[data-type="model_response"]').allTextContents();
  assert.ok(model.some((t) => t.includes(hostile)), 'the model text is shown as text: ' + model.join(' | '));
  assert.equal(await page.evaluate(() => window.__pwned), undefined, 'no script ran');
  assert.equal(await page.locator('#transcript #bold, #transcript img').count(), 0, 'no element was made from output');
  await page.locator('#transcript li[data-type="agent_output"]').first().scrollIntoViewIfNeeded();
  await shot(page, 'session-markup-as-text');
});

test('the sessions page nests a sub-agent under its parent and filters by status and project', async () => {
  const child = await start('alpha-child', [doneTurn('child done')], { parent: alpha.id, project: alpha.project });
  await waitUntil('the child finished', async () => (await sessionOf(child.id)).status === 'idle');
  await page.goto(base + '/#/');
  const rows = page.locator('table.sessions tbody tr[data-session]');
  await waitUntil('every session listed', async () => (await rows.count()) === 5);
  const order = await rows.evaluateAll((els) => els.map((e) => e.dataset.session));
  assert.equal(order[order.indexOf(alpha.id) + 1], child.id, 'the child right under its parent: ' + order);
  const childRow = page.locator('tr[data-session="' + child.id + '"]');
  assert.match(await childRow.locator('td.id').textContent(), /^↳/);
  assert.equal(await childRow.locator('td.project').textContent(), alpha.project);

  await page.fill('.bar input[type="search"]', 'beta');
  await waitUntil('only beta', async () => (await rows.count()) === 1);
  assert.equal(await rows.first().getAttribute('data-session'), beta.id);
  await page.fill('.bar input[type="search"]', '');
  await page.selectOption('.bar select', 'idle');
  await waitUntil('the idle ones', async () => (await rows.count()) >= 1);
  const statuses = await rows.evaluateAll((els) => els.map((e) => e.dataset.status));
  assert.ok(statuses.every((s) => s === 'idle'), statuses.join());
  await page.selectOption('.bar select', 'waiting_for_human');
  await waitUntil('nothing waits', async () => (await rows.count()) === 0);
  await page.selectOption('.bar select', '');
  await shot(page, 'sessions');
});

test('four tabs at once all stay live (one stream per tab: a browser opens six connections per server)', async () => {
  const tabs = [];
  try {
    for (const s of [alpha, beta, alpha]) {
      const tab = await context.newPage();
      await tab.goto(base + '/#/s/' + encodeURIComponent(s.id));
      tabs.push(tab);
    }
    for (const tab of tabs) {
      await waitUntil('the transcript in every tab',
        async () => (await tab.locator('#transcript li[data-type="session_started"]').count()) === 1);
    }
    // A new session's events reach the last tab live, and the first page's lists.
    await page.goto(base + '/#/');
    const late = await start('zeta', [doneTurn('zeta done')]);
    await tabs[2].goto(base + '/#/s/' + encodeURIComponent(late.id));
    await waitUntil('zeta done in the last tab',
      async () => (await tabs[2].locator('#transcript li[data-type="round_complete"]').count()) === 1);
    await waitUntil('zeta listed in the first page',
      async () => (await page.locator('tr[data-session="' + late.id + '"]').count()) === 1);
    await shot(tabs[2], 'fourth-tab-live');
  } finally {
    for (const tab of tabs) await tab.close();
  }
});

test('an approval answered elsewhere: the page is told (409) and drops it', async () => {
  const eta = await start('eta', [writeTurn('e.txt'), doneTurn('eta wrote e.txt')]);
  const stale = await context.newPage();
  try {
    // No live stream in this tab, so only the refusal can tell it the approval is gone.
    await stale.route('**/api/events*', (route) => route.abort());
    await stale.goto(base + '/#/approvals');
    const card = stale.locator('#approvals .approval').filter({ hasText: 'e.txt' });
    await waitUntil('the approval in the stale tab', async () => (await card.count()) === 1);
    const [pending] = (await api('/api/approvals')).filter((a) => a.session_id === eta.id);
    await api('/api/intents', { intent: 'session', session_id: eta.id, action: 'approve', id: pending.id });
    await card.getByRole('button', { name: 'Deny', exact: true }).click();
    await waitUntil('the refusal shown', async () => (await stale.locator('#toast').isVisible())
      && /answered|no pending|already/i.test(await stale.locator('#toast').textContent()));
    await waitUntil('the card gone', async () => (await card.count()) === 0);
    await waitUntil('e.txt written (the first answer won)', () => existsSync(path.join(eta.project, 'e.txt')));
    await shot(stale, 'approval-answered-elsewhere');
  } finally {
    await stale.close();
  }
});

test('a turn rewound from the page: the preview lists the file and its diff, then the rewind removes it', async () => {
  const gamma = await start('gamma', [writeTurn('g.txt'), doneTurn('gamma wrote g.txt')], { autonomy: 'full' });
  await waitUntil('gamma wrote g.txt and waits for a follow-up', async () => existsSync(path.join(gamma.project, 'g.txt'))
    && (await sessionOf(gamma.id)).status === 'idle');
  await page.goto(base + '/#/s/' + encodeURIComponent(gamma.id));
  const rewind = page.locator('#transcript li[data-turn="1"] button.rewind');
  await waitUntil('turn 1 offers a rewind', async () => (await rewind.count()) === 1);
  await rewind.click();
  const panel = page.locator('#rewind-panel');
  const file = panel.locator('li[data-path="g.txt"]');
  await waitUntil('the preview lists g.txt', async () => (await file.count()) === 1);
  assert.match(await file.textContent(), /D g\.txt/);
  assert.match(await panel.locator('pre.diff').textContent(), /-from g\.txt/);
  assert.match(await panel.locator('.summary').textContent(), /1 file would change/);
  assert.doesNotMatch((await panel.textContent()).replaceAll('/dev/null', ''), /null|undefined/,
    'no absent part shows as text');
  assert.ok(existsSync(path.join(gamma.project, 'g.txt')), 'a preview changes nothing');
  // Sub-agents' worktrees are left alone unless asked; asking previews again (gamma has none).
  const children = panel.locator('input[name="with_children"]');
  assert.equal(await children.isChecked(), false);
  await children.check();
  await waitUntil('the preview with children lists g.txt again', async () => (await file.count()) === 1);
  assert.equal(await panel.locator('.rewind-child').count(), 0);
  await children.uncheck();
  await waitUntil('the preview without children lists g.txt', async () => (await file.count()) === 1);
  await shot(page, 'rewind-preview');
  await panel.locator('#rewind-confirm').click();
  await waitUntil('g.txt removed', () => !existsSync(path.join(gamma.project, 'g.txt')));
  await waitUntil('the rewind in the transcript', async () => {
    const notes = await page.locator('#transcript li[data-type="context_management"]').allTextContents();
    return notes.some((t) => t.includes('rewound to before turn 1'));
  });
  assert.equal(await panel.count(), 0, 'the panel closed');
  // A session whose turn waits for a human is not rewound: the page says why.
  const delta = await start('delta', [writeTurn('d.txt'), doneTurn('delta wrote d.txt')]);
  await waitUntil('delta waits for approval', async () => (await sessionOf(delta.id)).status === 'waiting_for_human');
  const refused = await fetch(base + '/api/intents', {
    method: 'POST',
    headers: { Authorization: 'Bearer ' + daemon.token, 'Content-Type': 'application/json' },
    body: JSON.stringify({ intent: 'rewind', session_id: delta.id, to_turn: 1, preview: true }),
  });
  assert.equal(refused.status, 400);
  assert.match((await refused.json()).message, /waiting for human/);
  await shot(page, 'rewind-done');
});

test('the Settings page changes the settings through the control plane, and they persist', async () => {
  await page.goto(base + '/#/settings');
  const form = page.locator('#view form');
  await form.locator('select[name="default_autonomy"]').waitFor();
  await form.locator('select[name="default_autonomy"]').selectOption('high');
  await form.locator('input[name="max_running"]').fill('3');
  await form.getByRole('button', { name: 'Save' }).click();
  await waitUntil('the control plane took it', async () => {
    const s = await api('/api/settings');
    return s.default_autonomy === 'high' && s.max_running === 3;
  });
  const file = readFileSync(path.join(daemon.home, 'intendant.toml'), 'utf8');
  assert.match(file, /default_autonomy\s*=\s*"high"/, file);
  // A session started without an autonomy gets the new default.
  const e = await start('epsilon', [doneTurn('epsilon done')], { autonomy: undefined });
  assert.equal((await sessionOf(e.id)).autonomy, 'high');

  // A new daemon on the same state root starts with them; the page shows them after a new login.
  await daemon.stop();
  await login();
  await page.goto(base + '/#/settings');
  const autonomy = form.locator('select[name="default_autonomy"]');
  await waitUntil('the settings form', async () => (await autonomy.count()) === 1);
  assert.equal(await autonomy.inputValue(), 'high');
  assert.equal(await form.locator('input[name="max_running"]').inputValue(), '3');
  await shot(page, 'settings-after-restart');
});

test('a session page names the skills the session invoked', async () => {
  const project = path.join(daemon.tmp, 'skilled');
  mkdirSync(path.join(project, '.intendant/skills/lint'), { recursive: true });
  writeFileSync(path.join(project, '.intendant/skills/lint/SKILL.md'),
    '---\nname: lint\ndescription: run the linters\n---\nRun the linters.\n');
  const turns = [
    { text: 'Reading the skill.', tool_calls: [{ name: 'invoke_skill', arguments: { name: 'lint' } }], usage },
    doneTurn('linted'),
  ];
  const s = await start('skilled', turns, { autonomy: 'full' });
  await page.goto(base + '/#/s/' + encodeURIComponent(s.id));
  await waitUntil('the skill is named in the head',
    async () => ((await page.locator('#session-skills').textContent().catch(() => '')) || '').includes('lint'));
  assert.equal((await page.locator('#session-skills').textContent()).trim(), 'Skills: lint');
  await shot(page, 'session-skills');
});

test('the Memory page adds, searches, edits and removes memories, and a proposal is remembered from the approvals', async () => {
  await page.goto(base + '/#/memory');
  const add = page.locator('form.add-memory');
  await add.locator('textarea[name="text"]').waitFor();
  await add.locator('textarea[name="text"]').fill('the user prefers tabs <b>always</b>');
  await add.locator('input[name="new-scope"]').fill('user');
  await add.getByRole('button', { name: 'Add' }).click();
  const rows = page.locator('table.memories tr[data-memory]');
  await waitUntil('the new memory listed', async () => (await rows.count()) === 1);
  assert.equal(await rows.first().locator('td.memory-text').textContent(), 'the user prefers tabs <b>always</b>',
    'a memory is shown as text, never markup');
  // A refusal is said and stores nothing.
  await add.locator('textarea[name="text"]').fill('x');
  await add.locator('input[name="new-scope"]').fill('everyone');
  await add.getByRole('button', { name: 'Add' }).click();
  await waitUntil('the refusal shown', async () => (await page.locator('#toast').isVisible())
    && /scope/.test(await page.locator('#toast').textContent()));
  assert.equal((await api('/api/memories')).memories.length, 1);

  // A session proposes a memory while its edit waits: the queue shows both, the memory one
  // with its own two answers.
  const zeta = await start('zeta', [{
    text: 'Noting, then writing.',
    tool_calls: [
      { name: 'memory_propose', arguments: { text: 'zeta builds with make' } },
      { name: 'edit_file', arguments: { file_path: 'z.txt', operation: 'write', content: 'z\n' } },
    ],
    usage,
  }, doneTurn('zeta done')]);
  await page.goto(base + '/#/approvals');
  const proposal = page.locator('#approvals .approval').filter({ hasText: 'zeta builds with make' });
  await waitUntil('the proposal in the queue', async () => (await proposal.count()) === 1);
  assert.equal((await proposal.locator('.cat').textContent()).trim(), 'memory');
  assert.deepEqual(await proposal.locator('button').allTextContents(), ['Remember', 'Drop']);
  await shot(page, 'memory-proposal');
  await proposal.getByRole('button', { name: 'Remember' }).click();
  await waitUntil('the proposal stored', async () => (await api('/api/memories?q=make')).memories.length === 1);
  const [stored] = (await api('/api/memories?q=make')).memories;
  assert.equal(stored.source, 'session:' + zeta.id);

  // Search, then edit and remove from the page.
  await page.goto(base + '/#/memory');
  await page.locator('input[name="q"]').fill('make');
  await page.getByRole('button', { name: 'Search' }).click();
  await waitUntil('only the match listed', async () => (await rows.count()) === 1
    && (await rows.first().textContent()).includes('zeta builds with make'));
  assert.match(await rows.first().locator('a').textContent(), /session/);
  await rows.first().getByRole('button', { name: 'Edit' }).click();
  await rows.first().locator('textarea').fill('zeta builds with ninja');
  await rows.first().getByRole('button', { name: 'Save' }).click();
  await waitUntil('the edit stored', async () => {
    const [m] = (await api('/api/memories/' + stored.id)).memories;
    return m.text === 'zeta builds with ninja' && m.source === 'human';
  });
  await page.locator('input[name="q"]').fill('');
  await page.getByRole('button', { name: 'Search' }).click();
  const mine = rows.filter({ hasText: 'ninja' });
  await waitUntil('both memories listed', async () => (await rows.count()) === 2);
  await mine.getByRole('button', { name: 'Remove' }).click();
  assert.equal((await api('/api/memories')).memories.length, 2, 'the first click only arms it');
  await mine.getByRole('button', { name: 'Really remove?' }).click();
  await waitUntil('removed', async () => (await api('/api/memories')).memories.length === 1);
  await waitUntil('the row gone', async () => (await rows.count()) === 1);
  await shot(page, 'memory-page');
  const [edit] = (await api('/api/approvals')).filter((a) => a.session_id === zeta.id);
  await api('/api/intents', { intent: 'session', session_id: zeta.id, action: 'deny', id: edit.id });
});

test('a session page has a Network panel of its connections, live and after a reload', async () => {
  // In a proxy session (the default) the proxy refuses private and metadata addresses before
  // anything is asked, whatever the autonomy: three refused connections to two hosts.
  const turns = [{
    text: 'Trying a private address and the metadata service.',
    tool_calls: [{ name: 'exec_command', arguments: { command:
      'curl -sS -m 5 http://10.0.0.1:9/a; curl -sS -m 5 http://10.0.0.1:9/b; curl -sS -m 5 http://169.254.169.254/c; true' } }],
    usage,
  }, doneTurn('tried')];
  const n = await start('netpanel', turns, { autonomy: 'full' });
  await page.goto(base + '/#/s/' + encodeURIComponent(n.id));
  const panel = page.locator('#network-panel');
  const rows = panel.locator('tbody tr');
  const check = async (when) => {
    await waitUntil('three connections in the panel ' + when,
      async () => ((await panel.locator('summary').textContent().catch(() => '')) || '').includes('3 connections'));
    assert.equal(await panel.isVisible(), true, when);
    assert.equal((await panel.locator('summary').textContent()).trim(),
      'Network: 3 connections (3 not allowed) to 2 host(s)', when);
    assert.equal(await rows.count(), 2, when);
    const cells = async (host) => (await rows.filter({ has: page.locator('td.host', { hasText: host }) })
      .locator('td').allTextContents()).map((t) => t.trim());
    const private10 = await cells('10.0.0.1');
    assert.deepEqual(private10.slice(0, 6), ['10.0.0.1', '9', 'refused', '2', '0 B', '0 B'], when);
    assert.match(private10[6], /^\d+ ms$/, when);
    assert.deepEqual((await cells('169.254.169.254')).slice(0, 4), ['169.254.169.254', '80', 'refused', '1'], when);
    assert.match(await rows.first().locator('td.verdict').getAttribute('title'), /private/, when);
  };
  await check('live');
  await panel.locator('summary').click();
  await shot(page, 'session-network-panel');
  await page.reload();
  await check('after a reload');
  // A session that made no connection shows no panel.
  const quiet = await start('netquiet', [doneTurn('quiet')], { autonomy: 'full' });
  await page.goto(base + '/#/s/' + encodeURIComponent(quiet.id));
  await waitUntil('the quiet session ended its round',
    async () => (await page.locator('#transcript li[data-type="round_complete"]').count()) === 1);
  assert.equal(await page.locator('#network-panel').isVisible(), false);
});

test('a network approval answered "Allow host for good" in the page: the connection goes through and the host joins the project\'s allow list', async () => {
  // The test's own origin on 127.0.0.1, named `pkg.example.test` by the project's trusted
  // `hosts` map and opened by `allow_addresses` (no lookup leaves the machine); the name is in
  // neither allow list, so at `medium` the proxy asks.
  const origin = createServer((req, res) => res.end('served ' + req.url + '\n'));
  await new Promise((r) => origin.listen(0, '127.0.0.1', r));
  const port = origin.address().port;
  try {
    const project = path.join(tmp, 'nethost');
    mkdirSync(project, { recursive: true });
    writeFileSync(path.join(project, 'intendant.toml'), '[approval]\ncommand_exec = "auto"\n\n[sandbox.network]\n'
      + 'mode = "proxy"\nallow_addresses = ["127.0.0.1/32"]\nhosts = { "pkg.example.test" = "127.0.0.1" }\n');
    const trusted = spawnSync(daemon.bin, ['trust'], {
      cwd: project, env: { PATH: process.env.PATH, HOME: tmp, INTENDANT_HOME: daemon.home }, stdio: ['ignore', 'pipe', 'pipe'],
    });
    assert.equal(trusted.status, 0, String(trusted.stderr));
    const fetchTurn = (file) => ({
      text: 'Fetching ' + file + '.',
      tool_calls: [{ name: 'exec_command', arguments: { command: 'curl -sS -m 30 http://pkg.example.test:' + port + '/' + file } }],
      usage,
    });
    const n = await start('nethost', [fetchTurn('one'), fetchTurn('two'), doneTurn('fetched')]);
    await page.goto(base + '/#/approvals');
    const card = page.locator('#approvals .approval').filter({ hasText: 'connect to pkg.example.test:' + port });
    await waitUntil('the network approval in the queue', async () => (await card.count()) === 1);
    const allowHost = card.getByRole('button', { name: 'Allow host for good', exact: true });
    assert.match(await allowHost.getAttribute('title'), /\[sandbox\.network\] allow/);
    await shot(page, 'network-approval');
    await allowHost.click();
    await waitUntil('the card gone', async () => (await card.count()) === 0);
    let last;
    await waitUntil('the session ended its round', async () => {
      last = await sessionOf(n.id);
      return ['idle', 'done'].includes(last.status);
    }).catch((e) => { throw new Error(e.message + '\nsession: ' + JSON.stringify(last)); });
    const events = (await daemon.recorded(n.id)).map((env) => env.event);
    const of = (type) => events.filter((e) => e.type === type);
    assert.equal(of('approval_required').length, 1, 'the second connection is not asked: ' + JSON.stringify(of('approval_required')));
    assert.equal(of('approval_resolved')[0].verdict, 'approve');
    const outputs = of('agent_output').map((e) => JSON.stringify(e)).join('\n');
    assert.ok(outputs.includes('served /one') && outputs.includes('served /two'), 'both fetches got the origin\'s answer: ' + outputs);
    const egress = of('egress').filter((e) => e.host === 'pkg.example.test');
    assert.deepEqual(egress.map((e) => e.verdict), ['allowed', 'allowed'], JSON.stringify(egress));
    assert.match(egress[0].rule, /for good/, JSON.stringify(egress[0]));
    const config = readFileSync(path.join(project, 'intendant.toml'), 'utf8');
    assert.ok(config.split('\n').some((l) => l.startsWith('allow =') && l.includes('"pkg.example.test"')), config);
    assert.ok(config.includes('hosts = { "pkg.example.test" = "127.0.0.1" }'), 'the rest of the file is kept: ' + config);
    // The file stayed trusted: a new session on the project reaches the host unasked.
    const again = await start('nethost', [fetchTurn('three'), doneTurn('fetched again')]);
    await waitUntil('the second session ended its round', async () => ['idle', 'done'].includes((await sessionOf(again.id)).status));
    const next = (await daemon.recorded(again.id)).map((env) => env.event);
    assert.equal(next.filter((e) => e.type === 'approval_required').length, 0, JSON.stringify(next));
    assert.ok(next.some((e) => e.type === 'egress' && e.host === 'pkg.example.test' && e.verdict === 'allowed'
      && /allow/.test(e.rule)), JSON.stringify(next.filter((e) => e.type === 'egress')));
  } finally {
    origin.close();
  }
});

test('the new-task form starts a session with the network it names: "none" gives its commands no proxy', async () => {
  // The form has no field for the scripted model: the test adds it to the form's own request
  // on its way out, and keeps every field the page sent.
  const project = path.join(tmp, 'netform');
  mkdirSync(project, { recursive: true });
  const scenario = path.join(tmp, 'netform.scenario.json');
  writeFileSync(scenario, JSON.stringify({ model: 'fake-model', turns: [{
    text: 'Looking at the network.',
    tool_calls: [{ name: 'exec_command', arguments: { command: 'echo "proxy=${HTTPS_PROXY:-unset}"' } }],
    usage,
  }, doneTurn('looked')] }));
  let sent;
  await page.route('**/api/intents', async (route) => {
    const body = JSON.parse(route.request().postData() || '{}');
    if (body.intent !== 'start') return route.continue();
    sent = body;
    await route.continue({ postData: JSON.stringify({ ...body, provider: 'mock', scenario }) });
  });
  try {
    await page.goto(base + '/#/new');
    await page.locator('input[name="project"]').fill(project);
    await page.locator('textarea[name="task"]').fill('show the proxy');
    await page.locator('select[name="autonomy"]').selectOption('full');
    await page.locator('select[name="network"]').selectOption('none');
    await page.locator('button[type="submit"]').click();
    await waitUntil('the session page', async () => page.url().includes('#/s/'));
  } finally {
    await unrouteAll();
  }
  assert.equal(sent.network, 'none', 'the form sent the network chosen');
  assert.equal(sent.project, project);
  await waitUntil('the round to end',
    async () => (await page.locator('#transcript li[data-type="round_complete"]').count()) === 1);
  const outputs = await page.locator('#transcript li[data-type="agent_output"] pre').allTextContents();
  assert.ok(outputs.some((t) => t.includes('proxy=unset')), 'no proxy in a "none" session: ' + outputs.join(' | '));
  await shot(page, 'new-task-network-none');
  // The same command in a session of the project's default network (proxy) has one.
  const def = await start('netdefault', [{
    text: 'Looking at the network.',
    tool_calls: [{ name: 'exec_command', arguments: { command: 'echo "proxy=${HTTPS_PROXY:-unset}"' } }],
    usage,
  }, doneTurn('looked')], { autonomy: 'full' });
  await page.goto(base + '/#/s/' + encodeURIComponent(def.id));
  await waitUntil('the default session\'s round to end',
    async () => (await page.locator('#transcript li[data-type="round_complete"]').count()) === 1);
  const defaults = await page.locator('#transcript li[data-type="agent_output"] pre').allTextContents();
  assert.ok(defaults.some((t) => /proxy=http:\/\//.test(t)), 'a proxy in a default session: ' + defaults.join(' | '));
});

test('a due agenda reminder is said on whatever page is open', async () => {
  await page.goto(base + '/#/settings');
  await page.locator('#view form').waitFor();
  const at = new Date(Date.now() + 2000).toISOString();
  await api('/api/intents', { intent: 'agenda', action: 'add', text: 'water the <i>plants</i>', remind_at: at });
  await waitUntil('the reminder toast', async () => (await page.locator('#toast').isVisible())
    && /Agenda #\d+ reminder: water the <i>plants<\/i>/.test(await page.locator('#toast').textContent()));
  assert.equal(await page.locator('#toast i').count(), 0, 'the text is shown as text');
  await shot(page, 'agenda-reminder');
});

test('a schedule made and refused elsewhere comes and goes in the open page\'s approval count', async () => {
  await page.goto(base + '/#/settings');
  await page.locator('#view form').waitFor();
  const badge = page.locator('#approval-count');
  const count = async () => ((await badge.isHidden()) ? 0 : Number(await badge.textContent()));
  const before = (await api('/api/approvals')).length;
  await waitUntil('the count read', async () => (await count()) === before);
  const at = new Date(Date.now() + 3600_000).toISOString();
  const [made] = await api('/api/intents', {
    intent: 'agenda', action: 'schedule', at, request: { task: 'nightly review', project: tmp },
  });
  await waitUntil('the schedule counted', async () => (await count()) === before + 1);
  await api('/api/intents', { intent: 'agenda', action: 'reject', id: made.id });
  await waitUntil('the refused schedule gone', async () => (await count()) === before);
});

test('a session\'s events read its row again, not the whole list', async () => {
  // Opening the page reads the whole list: once that is read, only events come.
  const whole = page.waitForResponse((r) => new URL(r.url()).pathname === '/api/sessions');
  await page.goto(base + '/#/');
  await whole;
  const rows = page.locator('table.sessions tbody tr[data-session]');
  await waitUntil('the list', async () => (await rows.count()) > 0);
  const listed = await rows.count();
  const asked = [];
  let queueReads = 0;
  const note = (r) => {
    const u = new URL(r.url());
    if (u.pathname.startsWith('/api/sessions')) asked.push(u.pathname + u.search);
    if (u.pathname === '/api/approvals') queueReads++;
  };
  page.on('request', note);
  try {
    const late = await start('eta', [doneTurn('eta done')]);
    await waitUntil('eta listed, its round over', async () =>
      (await page.locator('tr[data-session="' + late.id + '"][data-status="idle"]').count()) === 1);
    assert.equal(await rows.count(), listed + 1, 'the others still listed');
    assert.ok(asked.some((p) => p.startsWith('/api/sessions?ids=') && p.includes(late.id)),
      asked.join(' '));
    assert.ok(!asked.some((p) => p === '/api/sessions' || (p.startsWith('/api/sessions?') && !p.startsWith('/api/sessions?ids='))),
      'the whole list was read again: ' + asked.join(' '));
    // Nothing of eta's changed the approval queue: it was not read again.
    assert.equal(queueReads, 0, 'the approval queue was read again for events that leave it as it is');
    // Stopped: its page says why it ended.
    await page.goto(base + '/#/s/' + encodeURIComponent(late.id));
    await api('/api/intents', { intent: 'stop', session_id: late.id });
    await waitUntil('why it ended, in its head', async () =>
      /stopped/.test(await page.locator('#session-reason').textContent({ timeout: 100 }).catch(() => '')));
  } finally {
    page.off('request', note);
  }
});

test('forty sessions busy at once are read again by their rows, never as the whole list', async () => {
  const whole = page.waitForResponse((r) => new URL(r.url()).pathname === '/api/sessions');
  await page.goto(base + '/#/');
  await whole;
  const asked = [];
  const note = (r) => {
    const u = new URL(r.url());
    if (u.pathname === '/api/sessions') asked.push(u.search);
  };
  page.on('request', note);
  // A slow daemon: rows answered late, so the sessions' events pile up between reads (the page
  // read the whole list once more than 32 sessions had changed).
  const slowRows = (url) => url.pathname === '/api/sessions' && url.search.startsWith('?ids=');
  const late = async (route) => { await sleep(400); await route.continue(); };
  await page.route(slowRows, late);
  try {
    const started = await Promise.all(Array.from({ length: 40 }, (_, i) =>
      start('busy' + i, [doneTurn('busy ' + i + ' done')])));
    await waitUntil('all forty listed, their rounds over', async () => {
      for (const s of started) {
        if ((await page.locator('tr[data-session="' + s.id + '"][data-status="idle"]').count()) !== 1) return false;
      }
      return true;
    });
    const wholeReads = asked.filter((q) => !q.startsWith('?ids='));
    assert.deepEqual(wholeReads, [], 'the whole list was read again');
    const rows = asked.reduce((n, q) => n + q.slice(5).split(',').length, 0);
    assert.ok(asked.length < rows, 'rows were read together: ' + asked.length + ' requests for ' + rows + ' rows');
  } finally {
    page.off('request', note);
    await unrouteAll();
  }
});

test('a prune drops the sessions it removed from an open page, which stays open', async () => {
  const gone = await start('theta', [doneTurn('theta done')]);
  await api('/api/intents', { intent: 'stop', session_id: gone.id });
  await waitUntil('theta ended', async () => ['done', 'failed', 'interrupted'].includes((await sessionOf(gone.id)).status));
  // One tab on the list, this one on theta's own page.
  const list = await context.newPage();
  try {
    await list.goto(base + '/#/');
    const row = list.locator('tr[data-session="' + gone.id + '"]');
    await waitUntil('theta listed', async () => (await row.count()) === 1);
    await page.goto(base + '/#/s/' + encodeURIComponent(gone.id));
    await page.locator('#transcript li').first().waitFor();
    await list.evaluate(() => { window.notReloaded = true; });
    const rows = list.locator('table.sessions tbody tr[data-session]');
    const before = await rows.count();
    const run = spawnSync(daemon.bin, ['sessions', 'prune', '--older-than', '0s', '--json'], {
      env: { PATH: process.env.PATH, HOME: tmp, INTENDANT_HOME: daemon.home }, encoding: 'utf8',
    });
    assert.equal(run.status, 0, run.stderr);
    const removed = JSON.parse(run.stdout).removed.map((s) => s.id);
    assert.ok(removed.includes(gone.id), run.stdout);
    await waitUntil('theta gone from the list', async () => (await row.count()) === 0);
    const listedBefore = await Promise.all(removed.map(async (id) =>
      (await list.locator('tr[data-session="' + id + '"]').count()) > 0));
    assert.ok(listedBefore.every((listed) => !listed), 'every removed row is gone');
    assert.ok(await rows.count() > 0 && await rows.count() < before, 'what runs is still listed');
    assert.equal(await list.evaluate(() => window.notReloaded), true, 'the page was not reloaded');
    await waitUntil('theta\'s page says its records are gone', async () =>
      (await page.locator('#session-pruned').count()) === 1);
    assert.equal(await page.locator('form.follow-up').isHidden(), true);
    await shot(page, 'session-pruned');
  } finally {
    await list.close();
  }
});

// A one-shot `intendant [ARGS] TASK` beside the daemon: the model's `turns` in a project of its
// own, `tmp/NAME`, recorded in state root `home` (the daemon's unless told). The process, its
// exit, and what it said on stderr.
function oneShot(name, turns, task, home = daemon.home, args = []) {
  const project = path.join(tmp, name);
  mkdirSync(project, { recursive: true });
  const scenario = path.join(tmp, name + '.scenario.json');
  writeFileSync(scenario, JSON.stringify({ model: 'fake-model', turns }));
  const run = spawn(daemon.bin, ['--provider', 'mock', '--scenario', scenario, '--autonomy', 'full', ...args, task], {
    cwd: project,
    env: { PATH: process.env.PATH, HOME: tmp, INTENDANT_HOME: home },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let said = '';
  run.stderr.on('data', (chunk) => { said += chunk; });
  const exited = new Promise((r) => run.once('exit', r));
  return { project, run, exited, said: () => said };
}

// A turn whose command waits for a file `go` in its project.
const waitForGo = { text: 'Waiting.', tool_calls: [{ name: 'exec_command', arguments: { command: 'while [ ! -e go ]; do sleep 0.1; done' } }], usage };

// A one-shot run of `task` in project `tmp/NAME` that answers `answer`, once it has ended and
// the dashboard's list shows it done: its session's id.
async function oneShotListedDone(name, answer, task) {
  const run = oneShot(name, [doneTurn(answer)], task);
  assert.equal(await run.exited, 0, run.said());
  await page.goto(base + '/#/');
  const row = page.locator('table.sessions tbody tr[data-session]', { hasText: task });
  await waitUntil('the one-shot run listed done', async () =>
    (await row.count()) === 1 && (await row.getAttribute('data-status')) === 'done');
  return row.getAttribute('data-session');
}

test('a one-shot run beside the daemon comes into the open list as it starts and as it ends, followed live on its page, without a reload', async () => {
  await page.goto(base + '/#/');
  await page.evaluate(() => { window.notReloaded = true; });
  // The run writes the daemon's state root but is not the daemon's: another process.
  const { project, run, exited, said } = oneShot('one-shot', [
    waitForGo,
    doneTurn('one-shot done'),
  ], 'a one-shot task');
  const gate = path.join(project, 'go');
  try {
    const row = page.locator('table.sessions tbody tr[data-session]', { hasText: 'a one-shot task' });
    await waitUntil('the run listed running', async () =>
      (await row.count()) === 1 && (await row.getAttribute('data-status')) === 'running');
    const id = await row.getAttribute('data-session');
    // Its page follows it live: the daemon relays what the run's record gains as it runs.
    const transcript = (type) => page.locator('#transcript li[data-type="' + type + '"]');
    await page.goto(base + '/#/s/' + encodeURIComponent(id));
    await waitUntil('the running run\'s batch shows while its command waits', async () =>
      (await transcript('tool_batch').count()) === 1);
    assert.equal(run.exitCode, null, 'the run goes on');
    assert.equal(await page.locator('#session-unpublished').count(), 0);
    // Its head names the process that runs it, which asks its own human: nothing to send here.
    const runBy = page.locator('#session-run-by');
    await waitUntil('its head names the process that runs it', async () =>
      (await runBy.count()) === 1 && (await runBy.textContent()).includes('pid ' + run.pid));
    assert.equal(await page.locator('form.follow-up').isHidden(), true);
    assert.equal(await page.locator('.session-head button', { hasText: 'Interrupt' }).isDisabled(), true);
    // Its record is that process's while it runs: nothing offers to rewind it.
    assert.equal(await page.locator('#transcript button.rewind').first().isVisible(), false);
    assert.equal(await page.locator('.session-head button', { hasText: 'Undo rewind' }).isDisabled(), true);
    await shot(page, 'one-shot-followed');
    writeFileSync(gate, '');
    assert.equal(await exited, 0, said());
    await waitUntil('its answer and end show on the same page', async () =>
      (await transcript('done').count()) === 1 && (await transcript('session_ended').count()) === 1);
    assert.match(await transcript('done').textContent(), /one-shot done/);
    await waitUntil('once it ended, no process runs it', async () => (await runBy.count()) === 0);
    assert.equal(await page.locator('#transcript button.rewind').first().isVisible(), true, 'ended, it can be rewound');
    await page.goto(base + '/#/');
    await waitUntil('the run listed done', async () => (await row.getAttribute('data-status')) === 'done');
    assert.equal(await page.evaluate(() => window.notReloaded), true, 'the page was not reloaded');
    await shot(page, 'one-shot-listed');
    // Read again later, its page shows what was relayed.
    await page.goto(base + '/#/s/' + encodeURIComponent(id));
    await waitUntil('the ended run\'s page shows what was relayed', async () =>
      (await transcript('done').count()) === 1);
    await shot(page, 'one-shot-page');
  } finally {
    if (run.exitCode === null) run.kill('SIGKILL');
  }
});

test('a session a one-shot run recorded before the daemon saw it is shown from its record', async () => {
  // Run in a state root of its own, then moved into the daemon's: the daemon lists it ended,
  // having relayed none of it (what a run that ended between two of its looks leaves).
  const elsewhere = mkdtempSync(path.join(tmp, 'elsewhere-'));
  const { exited, said } = oneShot('recorded', [
    { text: 'Listing.', tool_calls: [{ name: 'exec_command', arguments: { command: 'echo recorded-output' } }], usage },
    doneTurn('recorded done'),
  ], 'a recorded task', elsewhere);
  assert.equal(await exited, 0, said());
  const [id] = readdirSync(path.join(elsewhere, 'logs'));
  renameSync(path.join(elsewhere, 'logs', id), path.join(daemon.home, 'logs', id));
  await page.goto(base + '/#/');
  const row = page.locator('tr[data-session="' + id + '"]');
  await waitUntil('the moved session listed done', async () =>
    (await row.count()) === 1 && (await row.getAttribute('data-status')) === 'done');
  await page.goto(base + '/#/s/' + encodeURIComponent(id));
  const transcript = (type) => page.locator('#transcript li[data-type="' + type + '"]');
  await waitUntil('its record shows on its page', async () =>
    (await transcript('done').count()) === 1);
  assert.match(await transcript('done').textContent(), /recorded done/);
  assert.match(await page.locator('#transcript').textContent(), /recorded-output/);
  assert.equal(await page.locator('#session-from-record').count(), 1, 'the page says where it reads from');
  assert.equal(await page.locator('#session-unpublished').count(), 0);
  assert.equal(await page.locator('#session-record-passed-over').count(), 0);
  await shot(page, 'one-shot-from-record');
});

test('a session a one-shot run resumed beside the daemon is shown with the run before, from its record', async () => {
  const id = await oneShotListedDone('resumed', 'first run done', 'a task run twice');
  const row = page.locator('tr[data-session="' + id + '"]');
  const second = oneShot('resumed', [
    waitForGo,
    doneTurn('second run done'),
  ], 'go on', daemon.home, ['--resume', id]);
  try {
    await waitUntil('the second run listed running', async () => (await row.getAttribute('data-status')) === 'running');
    // The daemon relays the second run from its start; the first is in the record alone.
    await page.goto(base + '/#/s/' + encodeURIComponent(id));
    const transcript = (type) => page.locator('#transcript li[data-type="' + type + '"]');
    await waitUntil('the second run\'s batch shows while its command waits', async () =>
      (await transcript('tool_batch').count()) === 1);
    assert.equal(await page.locator('#session-from-record').count(), 1, 'the page says it reads the record');
    assert.equal(await transcript('session_started').count(), 2, 'both runs');
    assert.match(await transcript('done').first().textContent(), /first run done/);
    writeFileSync(path.join(second.project, 'go'), '');
    assert.equal(await second.exited, 0, second.said());
    await waitUntil('the second run\'s answer and end show', async () =>
      (await transcript('done').count()) === 2 && (await transcript('session_ended').count()) === 2);
    assert.match(await transcript('done').nth(1).textContent(), /second run done/);
    assert.equal(await transcript('tool_batch').count(), 1, 'nothing twice');
  } finally {
    if (second.run.exitCode === null) second.run.kill('SIGKILL');
  }
});

test('a session a one-shot run recorded, resumed through the daemon, is shown with the run before, each line once', async () => {
  const id = await oneShotListedDone('via-daemon', 'one-shot run done', 'a task resumed through the daemon');
  // The daemon numbers the resumed run from its start; the run before is in the record alone.
  await start('via-daemon', [
    waitForGo,
    doneTurn('daemon run done'),
  ], { resume: id, autonomy: 'full' });
  const events = async () => (await daemon.recorded(id)).map((env) => env.event.type);
  await waitUntil('the daemon run\'s command waiting', async () => (await events()).includes('tool_batch'));
  // The page's stream is open when it asks for the record: the run ends before the record is
  // read, so its last events come both on the stream and in the record, each shown once.
  const record = '**/api/sessions/' + encodeURIComponent(id) + '/record*';
  let released = false;
  await page.route(record, async (route) => {
    if (!released) {
      released = true;
      writeFileSync(path.join(tmp, 'via-daemon', 'go'), '');
      await waitUntil('the daemon run\'s answer recorded', async () => (await events()).includes('done'));
    }
    await route.continue();
  });
  try {
    await page.goto(base + '/#/s/' + encodeURIComponent(id));
    const transcript = (type) => page.locator('#transcript li[data-type="' + type + '"]');
    await waitUntil('both runs\' answers show', async () => (await transcript('done').count()) >= 2);
    assert.ok(released, 'the record was read');
    assert.match(await page.locator('#session-from-record').textContent(), /Resumed through the daemon/);
    assert.match(await transcript('done').first().textContent(), /one-shot run done/);
    assert.match(await transcript('done').nth(1).textContent(), /daemon run done/);
    await sleep(500);
    assert.equal(await transcript('done').count(), 2, 'nothing twice');
    assert.equal(await transcript('tool_batch').count(), 1, 'nothing twice');
    assert.equal(await transcript('session_started').count(), 2, 'both runs, once each');
    assert.equal(await transcript('session_ended').count(), 1, 'the one-shot run\'s end alone');
  } finally {
    await unrouteAll();
  }
});

test('a one-shot run whose start the daemon no longer holds is shown whole from its record, nothing twice', async () => {
  // Twenty replies of 900 KiB: relayed, they pass the daemon's 16 MiB ring, which then no
  // longer holds the run's start. The first command waits to be listed; the last waits while
  // the page is opened on the run going on.
  const big = (n) => 'reply ' + n + ' ' + 'x'.repeat(900 * 1024);
  const waitFor = (file) => 'while [ ! -e ' + file + ' ]; do sleep 0.1; done';
  const turns = [];
  for (let n = 1; n <= 20; n++) {
    const command = n === 1 ? waitFor('go') : n === 20 ? 'touch waiting; ' + waitFor('end') : 'true';
    turns.push({ text: big(n), tool_calls: [{ name: 'exec_command', arguments: { command } }], usage });
  }
  turns.push(doneTurn('long run done'));
  const { project, run, exited, said } = oneShot('long-relayed', turns, 'a long relayed task');
  try {
    await page.goto(base + '/#/');
    const row = page.locator('table.sessions tbody tr[data-session]', { hasText: 'a long relayed task' });
    // Listed (and so relayed) while its first command waits, then let go.
    await waitUntil('the run listed running', async () =>
      (await row.count()) === 1 && (await row.getAttribute('data-status')) === 'running');
    const id = await row.getAttribute('data-session');
    writeFileSync(path.join(project, 'go'), '');
    await waitUntil('its last command waits', async () => existsSync(path.join(project, 'waiting')));
    // Two records alike (the same event at the same millisecond), written as the run writes
    // its own, one relayed before the page reads the record and one after: both are shown.
    const log = path.join(daemon.home, 'logs', id, 'session.jsonl');
    const alike = JSON.stringify({ ts: '2026-12-07T03:00:00.000Z', event: 'warning', message: 'said twice alike' }) + '\n';
    appendFileSync(log, alike);
    await waitUntil('the first relayed', async () =>
      (await daemon.recorded(id)).some((env) => env.event.type === 'warning'));
    await page.goto(base + '/#/s/' + encodeURIComponent(id));
    const transcript = (type) => page.locator('#transcript li[data-type="' + type + '"]');
    await waitUntil('the record shown', async () => (await transcript('warning').count()) === 1);
    appendFileSync(log, alike);
    await waitUntil('the second shown', async () => (await transcript('warning').count()) === 2);
    writeFileSync(path.join(project, 'end'), '');
    assert.equal(await exited, 0, said());
    await waitUntil('its end shows', async () => (await transcript('session_ended').count()) === 1);
    assert.equal(await page.locator('#session-from-record').count(), 1, 'the page says it reads the record');
    assert.equal(await transcript('session_started').count(), 1, 'its start, which the ring lost');
    assert.equal(await transcript('turn_started').count(), 21);
    assert.equal(await transcript('warning').count(), 2, 'each record alike once');
    assert.equal(await transcript('done').count(), 1);
    assert.match(await transcript('done').textContent(), /long run done/);
    assert.equal(await page.locator('#session-unpublished').count(), 0);
  } finally {
    if (run.exitCode === null) run.kill('SIGKILL');
  }
});

test('a live session\'s head says what its processes use, from its groups, and an ended one\'s says nothing', async () => {
  const turns = [{
    text: 'Leaving a sleeper for the next batch.',
    tool_calls: [{ name: 'exec_command', arguments: { command: 'sleep 300 </dev/null >/dev/null 2>&1 & echo started' } }],
    usage,
  }, doneTurn('left one')];
  const s = await start('sleeper', turns, { autonomy: 'full' });
  await page.goto(base + '/#/s/' + encodeURIComponent(s.id));
  await waitUntil('the round ended',
    async () => (await page.locator('#transcript li[data-type="round_complete"]').count()) === 1);
  const listed = await sessionOf(s.id);
  if (!listed.usage) {
    // Only a controller that can make cgroups (root here, and in CI) reads them.
    assert.ok(!process.env.CI, 'no usage listed in CI: ' + JSON.stringify(listed));
    return;
  }
  assert.ok(listed.usage.processes >= 1, JSON.stringify(listed.usage));
  const head = page.locator('#session-usage');
  await waitUntil('the head says what its processes use',
    async () => /^\d+ process(es)?( · [\d.]+ [KM]?i?B)?( · [\d.]+ s CPU)?$/.test(((await head.textContent().catch(() => '')) || '').trim()));
  await shot(page, 'session-usage');
  await api('/api/intents', { intent: 'stop', session_id: s.id });
  await waitUntil('the session ended', async () => (await sessionOf(s.id)).status === 'interrupted');
  await waitUntil('the head no longer says it', async () => (await head.count()) === 0);
  assert.equal((await sessionOf(s.id)).usage, undefined);
});

test('a follow-up typed while the round waits for an approval is shown held, then taken after the answer', async () => {
  const gamma = await start('gamma', [writeTurn('g.txt'), doneTurn('gamma wrote g.txt'), doneTurn('HELD ONE TAKEN'),
    doneTurn('IDLE ONE TAKEN')]);
  await page.goto(base + '/#/s/' + encodeURIComponent(gamma.id));
  await waitUntil('gamma waits for its approval', async () => (await sessionOf(gamma.id)).status === 'waiting_for_human');
  await page.fill('.follow-up textarea', 'and after that, this');
  await page.click('.follow-up button[type="submit"]');
  const held = page.locator('#transcript li[data-type="follow_up_held"]');
  await waitUntil('the follow-up shown held', async () => (await held.count()) === 1);
  assert.match(await held.textContent(), /held until the session can take it.*and after that, this/);
  const [pending] = (await api('/api/approvals')).filter((a) => a.session_id === gamma.id);
  await api('/api/intents', { intent: 'session', session_id: gamma.id, action: 'approve', id: pending.id });
  await waitUntil('the held follow-up\'s round answers',
    async () => (await page.locator('#transcript').textContent()).includes('HELD ONE TAKEN'));
  // Given to the session once answered, while its round still worked: taken when it ended.
  const sent = page.locator('#transcript li[data-type="control_command"]');
  const you = await sent.allTextContents();
  assert.ok(you.some((t) => /taken when this round ends.*and after that, this/.test(t)), you.join(' | '));
  // One sent to the session waiting between rounds starts the next at once.
  await waitUntil('gamma idle', async () => (await sessionOf(gamma.id)).status === 'idle');
  await page.fill('.follow-up textarea', 'one more, now');
  await page.click('.follow-up button[type="submit"]');
  await waitUntil('the idle one\'s round answers',
    async () => (await page.locator('#transcript').textContent()).includes('IDLE ONE TAKEN'));
  const now = (await sent.allTextContents()).find((t) => t.includes('one more, now'));
  assert.match(now, /^You: follow up: one more, now/);
  await page.reload();
  await waitUntil('after a reload, held once', async () => (await held.count()) === 1
    && (await page.locator('#transcript').textContent()).includes('IDLE ONE TAKEN'));
  const reloaded = await sent.allTextContents();
  assert.ok(reloaded.some((t) => /taken when this round ends.*and after that, this/.test(t)), reloaded.join(' | '));
  assert.ok(reloaded.some((t) => /^You: follow up: one more, now/.test(t)), reloaded.join(' | '));
});

test('a follow-up typed at a session waiting for a slot for its first round is said to wait for that round', async () => {
  const was = (await api('/api/settings')).max_running;
  await api('/api/intents', { intent: 'settings', max_running: 1 });
  const holder = await start('holder', [{
    text: 'Holding the slot.',
    tool_calls: [{ name: 'exec_command', arguments: { command: 'while [ ! -e release ]; do sleep 0.1; done' } }],
    usage,
  }, doneTurn('released')], { autonomy: 'full' });
  try {
    await waitUntil('the holder works', async () => (await sessionOf(holder.id)).status === 'running');
    const delta = await start('delta', [doneTurn('DELTA FIRST'), doneTurn('DELTA FOLLOWED')]);
    assert.equal((await sessionOf(delta.id)).status, 'queued');
    await page.goto(base + '/#/s/' + encodeURIComponent(delta.id));
    // Its head says what network its commands get (the default: the egress proxy).
    await waitUntil('the head says its network',
      async () => ((await page.locator('#session-network').textContent().catch(() => '')) || '').trim() === 'network proxy');
    await page.fill('.follow-up textarea', 'after your first round');
    await page.click('.follow-up button[type="submit"]');
    const sent = page.locator('#transcript li[data-type="control_command"]');
    await waitUntil('the follow-up shown', async () => (await sent.count()) === 1);
    // The run's first round takes its task; the follow-up is the next.
    assert.match(await sent.textContent(), /^You \(taken when this round ends\): follow up: after your first round/);
    writeFileSync(path.join(holder.project, 'release'), '');
    await waitUntil('the follow-up\'s round answers',
      async () => (await page.locator('#transcript').textContent()).includes('DELTA FOLLOWED'));
    const text = await page.locator('#transcript').textContent();
    assert.ok(text.indexOf('DELTA FIRST') < text.indexOf('DELTA FOLLOWED'), text);
  } finally {
    await api('/api/intents', { intent: 'settings', max_running: was });
  }
});

test('an ended session is resumed from its page: the box that sends follow-ups resumes it', async () => {
  // Its resumed run plays the script its instruction names (a run's script restarts with it).
  const scenario = path.join(tmp, 'epsilon-resumed.scenario.json');
  writeFileSync(scenario, JSON.stringify({
    model: 'fake-model',
    turns: [doneTurn('EPSILON FIRST')],
    scripts: [{ when_task_contains: 'pick it up again', turns: [doneTurn('EPSILON RESUMED')] }],
  }));
  const epsilon = await start('resumable', [], { scenario });
  await page.goto(base + '/#/s/' + encodeURIComponent(epsilon.id));
  await waitUntil('epsilon idle', async () => (await sessionOf(epsilon.id)).status === 'idle');
  assert.equal(await page.locator('#follow-up-send').textContent(), 'Send');
  await api('/api/intents', { intent: 'stop', session_id: epsilon.id });
  await waitUntil('the box resumes the ended session',
    async () => (await page.locator('#follow-up-send').textContent()) === 'Resume');
  assert.equal(await page.locator('form.follow-up').isHidden(), false);
  await page.fill('.follow-up textarea', 'pick it up again');
  await page.click('#follow-up-send');
  await waitUntil('the resumed run answers',
    async () => (await page.locator('#transcript').textContent()).includes('EPSILON RESUMED'));
  const text = await page.locator('#transcript').textContent();
  assert.ok(text.indexOf('EPSILON FIRST') < text.indexOf('EPSILON RESUMED'), text);
  await waitUntil('epsilon idle again, the box sending follow-ups',
    async () => (await sessionOf(epsilon.id)).status === 'idle'
      && (await page.locator('#follow-up-send').textContent()) === 'Send');
  assert.equal((await sessionOf(epsilon.id)).project, epsilon.project);
  await shot(page, 'session-resumed');
});

test('a sub-agent\'s head names its worktree\'s branch and what became of it', async () => {
  const project = path.join(tmp, 'worktree-parent');
  mkdirSync(project);
  const git = (...args) => assert.equal(spawnSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@example.invalid', ...args],
    { cwd: project }).status, 0, args.join(' '));
  git('init', '-q', '-b', 'main');
  writeFileSync(path.join(project, 'README'), 'zeta\n');
  git('add', 'README');
  git('commit', '-qm', 'base');
  const scenario = path.join(tmp, 'worktree-parent.scenario.json');
  writeFileSync(scenario, JSON.stringify({
    model: 'fake-model',
    turns: [{ tool_calls: [{ name: 'spawn_sub_agent', arguments: { task: 'zeta child part', isolation: 'worktree' } }], usage },
      doneTurn('ZETA SPAWNED')],
    scripts: [{ when_task_contains: 'zeta child part',
      turns: [{ tool_calls: [{ name: 'submit_result', arguments: { summary: 'nothing to change' } }], usage }] }],
  }));
  const parent = await api('/api/intents', {
    intent: 'start', task: 'task zeta', project, autonomy: 'full', provider: 'mock', scenario,
  });
  let child;
  await waitUntil('the child ended and its worktree was removed', async () => {
    child = (await api('/api/sessions')).find((s) => s.parent === parent.id);
    return child && child.worktree && child.worktree.outcome;
  });
  await page.goto(base + '/#/s/' + encodeURIComponent(child.id));
  const shown = page.locator('#session-worktree');
  await waitUntil('the head names the worktree', async () => (await shown.count()) === 1);
  assert.equal(await shown.textContent(), 'worktree ' + child.worktree.branch + ' (removed)');
  assert.equal(await shown.getAttribute('title'), child.worktree.path);
});
