import { mkdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { chromium } from 'playwright-core'
import type { Browser, Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { makeTree, uuidN } from '../fixtures/tree.js'
import { helperWithStdin, ROOT } from '../helpers/run.js'
import { lineFrom } from '../helpers/wait.js'
import { configWith, reindex, startServe, TOKEN, writeMessages } from './helpers.js'

const ARTIFACTS = join(ROOT, 'test/serve/.artifacts')
let browser: Browser

// No skip: a browser that cannot start fails these tests loudly.
beforeAll(async () => {
  mkdirSync(ARTIFACTS, { recursive: true })
  browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox'] })
})
afterAll(async () => {
  await browser?.close()
})

async function open(url: string): Promise<{ page: Page; dialogs: string[]; errors: string[] }> {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } })
  const page = await context.newPage()
  const dialogs: string[] = []
  const errors: string[] = []
  page.on('dialog', (d) => {
    dialogs.push(d.message())
    void d.dismiss()
  })
  page.on('pageerror', (e) => errors.push(e.message))
  page.on('console', (m) => {
    if (m.type() === 'error') errors.push(m.text())
  })
  await page.goto(url)
  return { page, dialogs, errors }
}

function tree() {
  const t = makeTree()
  for (let i = 1; i <= 12; i++) {
    t.write({
      uuid: uuidN(i),
      user: i % 3 === 0 ? 'bob' : 'alice',
      location: i === 4 ? 'paused' : 'completed',
      status: i === 5 ? 'failed' : undefined,
      createdAt: `2024-01-${String(i + 10).padStart(2, '0')}T10:00:00.000Z`,
    })
  }
  return t
}

describe('serve in a browser', () => {
  it('the task list, and a hostile statement shown as text with nothing run', async () => {
    const t = tree()
    writeMessages(t.dir({ uuid: uuidN(7) }), [
      { role: 'system', content: 'sys' },
      { role: 'user', content: 'Fix it <img src=x onerror="window.__xss=1;alert(1)"><script>window.__xss=2;alert(2)</script>' },
      {
        role: 'assistant',
        content: 'Reading <b onmouseover=alert(3)>the file</b>',
        tool_calls: [{ id: 'c1', type: 'function', function: { name: 'read_file', arguments: '{"path":"<svg onload=alert(4)>"}' } }],
      },
      { role: 'tool', tool_name: 'read_file', tool_call_id: 'c1', content: '<script>alert(5)</script>' },
    ])
    reindex(t)
    const s = await startServe(t.base)
    const { page, dialogs, errors } = await open(`${s.url}/`)
    await expect.poll(() => page.locator('table.tasks tbody tr').count()).toBe(12)
    await page.screenshot({ path: join(ARTIFACTS, 'tasks.png'), fullPage: true })
    await page.selectOption('select[name=user]', 'bob')
    await page.click('form.filters button')
    await expect.poll(() => page.locator('table.tasks tbody tr').count()).toBe(4)
    await page.goto(`${s.url}/tasks/${uuidN(7)}`)
    await expect
      .poll(() => page.locator('pre.statement').textContent())
      .toBe('Fix it <img src=x onerror="window.__xss=1;alert(1)"><script>window.__xss=2;alert(2)</script>')
    // Tool calls and results are collapsed, and open without script.
    await page.locator('details.call summary').first().click()
    await expect.poll(() => page.locator('details.call pre').first().textContent()).toContain('<svg onload=alert(4)>')
    await page.locator('.m-tool details summary').click()
    await page.screenshot({ path: join(ARTIFACTS, 'hostile-task.png'), fullPage: true })
    expect(await page.evaluate('window.__xss')).toBeUndefined()
    expect(await page.locator('main img, main script, main svg[onload], main iframe').count()).toBe(0)
    expect(dialogs).toEqual([])
    expect(errors).toEqual([])
  })

  it('stats: charts drawn on the server, no script', async () => {
    const t = tree()
    reindex(t)
    const s = await startServe(t.base, { config: configWith(t, 'pricing:\n  gpt-4o:\n    prompt: 2.5\n    completion: 10\n') })
    const { page, errors } = await open(`${s.url}/stats`)
    await expect.poll(() => page.locator('svg[role=img]').count()).toBeGreaterThanOrEqual(4)
    expect(await page.locator('script').count()).toBe(0)
    expect(await page.locator('svg[aria-label="Tasks by status"] text', { hasText: 'completed' }).count()).toBe(1)
    await page.screenshot({ path: join(ARTIFACTS, 'stats.png'), fullPage: true })
    expect(errors).toEqual([])
  })

  it('a running task: new messages appear without a reload, and the end is told', async () => {
    const t = tree()
    const owner = helperWithStdin('live-owner.mjs', [t.base, 'Add a CSV export'])
    const uuid = (await lineFrom(owner, /^[0-9a-f-]{36}$/)).trim()
    reindex(t)
    const s = await startServe(t.base)
    const { page, errors } = await open(`${s.url}/tasks/${uuid}`)
    await expect.poll(() => page.locator('#live').count()).toBe(1)
    const step = async (line: string) => {
      const ack = lineFrom(owner, /^ok /)
      owner.stdin?.write(`${line}\n`)
      await ack
    }
    await step('say LIVE-MARKER-ONE: looking at the exporter')
    await page.getByText('LIVE-MARKER-ONE: looking at the exporter').waitFor()
    await step('tool src/export.ts')
    await page.locator('#transcript details.call summary', { hasText: 'read_file' }).waitFor()
    await page.locator('#transcript .m-tool', { hasText: 'tool' }).last().waitFor()
    await page.screenshot({ path: join(ARTIFACTS, 'live-task.png'), fullPage: true })
    const done = lineFrom(owner, /^ok done/)
    owner.stdin?.write('done\n')
    await done
    await page.locator('#live.ended', { hasText: 'now completed' }).waitFor()
    // Each message once: the page's own and the stream's do not overlap.
    expect(await page.getByText('LIVE-MARKER-ONE').count()).toBe(1)
    expect(errors).toEqual([])
  })

  it("a live message is the server's: the stream's view placed by the script renders as the page renders it after a reload", async () => {
    const t = tree()
    const owner = helperWithStdin('live-owner.mjs', [t.base, 'Compare the renderings'])
    const uuid = (await lineFrom(owner, /^[0-9a-f-]{36}$/)).trim()
    reindex(t)
    const s = await startServe(t.base)
    const { page, errors } = await open(`${s.url}/tasks/${uuid}`)
    await expect.poll(() => page.locator('#live').count()).toBe(1)
    const before = await page.locator('#transcript li.msg').count()
    const messages = [
      {
        role: 'assistant',
        content: 'Looking at <b>it</b>\nline two',
        tool_calls: [
          { id: 'a', type: 'function', function: { name: 'grep', arguments: '{"pattern":"TODO  now","path":"src"}' } },
          { id: 'b', type: 'function', function: { name: 'run_command', arguments: '{"command":"npm test"}' } },
        ],
      },
      { role: 'tool', tool_name: 'grep', tool_call_id: 'a', content: `src/a.ts:1: TODO now\n${'x'.repeat(300)}` },
      {
        role: 'assistant',
        content: '',
        tool_calls: [
          { id: 'c', type: 'function', function: { name: 'mcp_docs_search', arguments: '{"limit":3,"query":"csv export"}' } },
          { id: 'd', type: 'function', function: { name: 'read_file', arguments: '{not json' } },
        ],
      },
      { role: 'assistant', content: 'colour \u001b[31mred\u001b[0m and a bell \u0007', is_summarized: true },
      { role: 'user', content: 'a note the model is not shown', visible: false },
    ]
    for (const m of messages) {
      const ack = lineFrom(owner, /^ok /)
      owner.stdin?.write(`raw ${JSON.stringify(m)}\n`)
      await ack
    }
    // Each but the hidden one, which the page leaves out too.
    await expect.poll(() => page.locator('#transcript li.msg').count()).toBe(before + messages.length - 1)
    const items = () => page.locator('#transcript li.msg').evaluateAll((els) => els.map((e) => e.outerHTML))
    const live = (await items()).slice(before)
    await page.reload()
    const served = (await items()).slice(before)
    expect(live).toHaveLength(4)
    expect(live).toEqual(served)
    // What the two used to disagree on: the result's preview, each tool's main argument (an MCP tool's too), escapes.
    expect(served.join('\n')).toContain('colour red and a bell </pre>')
    expect(served.join('\n')).toMatch(/result · 3\d\d chars: src\/a\.ts:1: TODO now x+…/)
    expect(served.join('\n')).toContain('→ <code>grep</code> TODO now</summary>')
    expect(served.join('\n')).toContain('→ <code>mcp_docs_search</code> csv export</summary>')
    const done = lineFrom(owner, /^ok done/)
    owner.stdin?.write('done\n')
    await done
    expect(errors).toEqual([])
  })

  it('actions: refused without the token, done after signing in, audited with the name', async () => {
    const t = tree()
    reindex(t)
    const paused = uuidN(4)
    const s = await startServe(t.base, { config: configWith(t, `serve:\n  token: ${TOKEN}\n`) })
    // A token is configured: the task page itself needs it, on loopback too (docs/serve.md#security).
    const { page } = await open(`${s.url}/tasks/${paused}`)
    expect(new URL(page.url()).pathname).toBe('/login')
    expect(await page.locator('form.action').count()).toBe(0)
    await page.getByText('Sign in').first().waitFor()
    const status = await page.evaluate(
      async (u) =>
        (await fetch(`/api/tasks/${u}/comment`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"text":"sneaky"}' })).status,
      paused,
    )
    expect(status).toBe(401)
    await page.goto(`${s.url}/login`)
    await page.fill('input[name=name]', 'erin')
    await page.fill('input[name=token]', 'wrong-token-wrong-token')
    await page.click('form.login button')
    await page.getByRole('alert').waitFor()
    expect(await page.getByRole('alert').textContent()).toContain('that token is not the one')
    await page.fill('input[name=name]', 'erin')
    await page.fill('input[name=token]', TOKEN)
    await page.click('form.login button')
    await page.locator('header .who', { hasText: 'erin' }).waitFor()
    await page.goto(`${s.url}/tasks/${paused}`)
    await page.fill('form.action textarea[name=text]', 'please also update the README')
    await page.locator('form.action', { hasText: 'Comment' }).locator('button').click()
    await page.locator('.notice', { hasText: 'comment: comment' }).waitFor()
    await page.screenshot({ path: join(ARTIFACTS, 'action-done.png'), fullPage: true })
    const inbox = readFileSync(join(t.dir({ uuid: paused, location: 'paused' }), 'inbox.jsonl'), 'utf8')
    expect(inbox).toContain('please also update the README')
    expect(inbox).not.toContain('sneaky')
    const audit = readFileSync(join(t.base, 'audit.jsonl'), 'utf8')
    expect(audit).toMatch(/"command":"comment","uuid":"[0-9a-f-]+","via":"serve","operator":"erin"/)
    // The cookie is not readable by script.
    expect(await page.evaluate('document.cookie')).toBe('')
  })

  it('the task list refreshes itself quietly: a task indexed meanwhile appears without a reload, and not while a filter has the focus', async () => {
    const t = tree()
    reindex(t)
    const s = await startServe(t.base, { config: configWith(t, 'serve:\n  refresh_seconds: 1\n') })
    const { page, errors } = await open(`${s.url}/`)
    await expect.poll(() => page.locator('table.tasks tbody tr').count()).toBe(12)
    await page.evaluate('window.__sameDocument = true')
    t.write({ uuid: uuidN(13), user: 'carol', location: 'completed', createdAt: '2024-01-30T10:00:00.000Z' })
    reindex(t)
    await expect.poll(() => page.locator('table.tasks tbody tr').count(), { timeout: 30_000 }).toBe(13)
    // The same document (no reload): what the page's script set is still there.
    expect(await page.evaluate('window.__sameDocument')).toBe(true)
    // Typing in a filter holds the refresh back.
    await page.focus('select[name=user]')
    t.write({ uuid: uuidN(14), user: 'carol', location: 'completed', createdAt: '2024-01-31T10:00:00.000Z' })
    reindex(t)
    await new Promise((resolve) => setTimeout(resolve, 2500))
    expect(await page.locator('table.tasks tbody tr').count()).toBe(13)
    await page.locator('body').click({ position: { x: 5, y: 5 } })
    await expect.poll(() => page.locator('table.tasks tbody tr').count(), { timeout: 30_000 }).toBe(14)
    expect(errors).toEqual([])
  })
})
