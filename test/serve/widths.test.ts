import { mkdirSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { chromium } from 'playwright-core'
import type { Browser, Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest'
import { makeTree, uuidN } from '../fixtures/tree.js'
import { ROOT } from '../helpers/run.js'
import { cliAuto } from '../helpers/in-process.js'
import { usePostgres } from '../helpers/use-postgres.js'
import { configWith, startServe, TOKEN, writeMessages } from './helpers.js'

const ARTIFACTS = join(ROOT, 'test/serve/.artifacts')
const db = usePostgres()
let browser: Browser

beforeAll(async () => {
  mkdirSync(ARTIFACTS, { recursive: true })
  browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox'] })
})
afterAll(async () => {
  await browser?.close()
})

const LONG =
  'The CSV export of the invoicing module drops the last row of every invoice whose customer has a very long legal name; find out why and fix it, with a regression test in tests/export_test.py'

/** How far the page scrolls sideways: 0 when nothing is wider than the window. */
async function sideways(page: Page): Promise<number> {
  return page.evaluate('document.documentElement.scrollWidth - window.innerWidth')
}

describe("serve at a phone's width and a laptop's", () => {
  it('no page scrolls sideways at 390 or 1280 px, signed in or not, with a full jobs table', { timeout: 240_000 }, async () => {
    const tree = makeTree()
    for (let i = 1; i <= 6; i++)
      tree.write({
        uuid: uuidN(i),
        user: i % 2 ? 'alice' : 'a-user-with-a-rather-long-name',
        location: i === 2 ? 'paused' : 'completed',
        status: i === 3 ? 'failed' : undefined,
      })
    writeMessages(tree.dir({ uuid: uuidN(1) }), [
      { role: 'system', content: 'sys' },
      { role: 'user', content: `${LONG}\n${'x'.repeat(300)}` },
      {
        role: 'assistant',
        content: 'Reading',
        tool_calls: [
          { id: 'c1', type: 'function', function: { name: 'read_file', arguments: JSON.stringify({ path: `src/${'deeply/nested/'.repeat(12)}export.py` }) } },
        ],
      },
      { role: 'tool', tool_name: 'read_file', tool_call_id: 'c1', content: 'a'.repeat(2000) },
    ])
    const config = configWith(tree, `serve:\n  token: ${TOKEN}\n`)
    const env = db.env()
    const run = (args: string[]) => cliAuto([...args, '--home', tree.base, '--config', config], env)
    expect((await run(['reindex'])).code).toBe(0)
    const ws = mkdtempSync(join(tmpdir(), 'ctxagent-widths-ws-'))
    onTestFinished(() => rmSync(ws, { recursive: true, force: true }))
    for (let i = 0; i < 20; i++) {
      const queued = await run(['enqueue', '--task', `${LONG} (${i})`, '--workspace', ws, '--user', 'a-user-with-a-rather-long-name', '--priority', String(i)])
      expect(queued.code, queued.stderr).toBe(0)
    }
    // Jobs with long errors: failed, as an outage would leave them.
    await db.query(
      `UPDATE fleet_jobs SET state = 'failed', finished_at = now(), outcome = 'failed', error = $1 WHERE id IN (SELECT id FROM fleet_jobs ORDER BY id LIMIT 8)`,
      [
        `cannot reach LLM server http://llm.internal.example.com:8000/v1 (openai, model Qwen/Qwen2.5-Coder-32B-Instruct): connection refused ${'(retried) '.repeat(10)}`,
      ],
    )
    const s = await startServe(tree.base, { config, env })
    const pages = ['/', `/tasks/${uuidN(1)}`, `/tasks/${uuidN(2)}`, '/stats', '/fleet', '/outcomes', '/evals', '/login']
    for (const signedIn of [false, true]) {
      for (const width of [390, 1280]) {
        const context = await browser.newContext({ viewport: { width, height: 900 } })
        const page = await context.newPage()
        if (signedIn) {
          await page.goto(`${s.url}/login`)
          await page.fill('input[name=name]', 'erin')
          await page.fill('input[name=token]', TOKEN)
          await page.click('form.login button')
          await page.locator('header .who', { hasText: 'erin' }).waitFor()
        }
        for (const path of pages) {
          await page.goto(`${s.url}${path}`)
          const name = `${signedIn ? 'in' : 'out'}-${width}-${path.replace(/[^a-z0-9]+/gi, '_').replace(/^_|_$/g, '') || 'tasks'}`
          await page.screenshot({ path: join(ARTIFACTS, `width-${name}.png`), fullPage: true })
          expect(await sideways(page), name).toBeLessThanOrEqual(0)
        }
        // Every Retry button of the jobs table is inside the window (it stood at x=1387 at 1280 px).
        if (signedIn) {
          await page.goto(`${s.url}/fleet`)
          const buttons = page.locator('form button', { hasText: /Retry|Cancel/ })
          expect(await buttons.count()).toBeGreaterThan(0)
          for (const box of await buttons.evaluateAll((els) => els.map((e) => e.getBoundingClientRect().toJSON() as { right: number }))) {
            const card = await page.locator('section.card.wide').evaluate((e) => e.getBoundingClientRect().right)
            if (width === 1280) expect(box.right).toBeLessThanOrEqual(card)
          }
        }
        await context.close()
      }
    }
  })
})
