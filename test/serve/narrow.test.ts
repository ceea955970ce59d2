import { mkdirSync } from 'node:fs'
import { join } from 'node:path'
import { chromium } from 'playwright-core'
import type { Browser } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { makeTree, uuidN } from '../fixtures/tree.js'
import { ROOT } from '../helpers/run.js'
import { configWith, reindex, startServe } from './helpers.js'
import { expectFits } from './page-check.js'

const ARTIFACTS = join(ROOT, 'test/serve/.artifacts')
let browser: Browser

beforeAll(async () => {
  mkdirSync(ARTIFACTS, { recursive: true })
  browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox'] })
})
afterAll(async () => {
  await browser?.close()
})

const delivered = {
  mode: 'pr',
  branch: 'ctxagent/42-00000001',
  commit: 'a'.repeat(40),
  pushed: true,
  pr: { number: 57, url: 'https://github.example/acme/shop/pull/57' },
  refused: null,
}
const refused = {
  mode: 'pr',
  branch: null,
  commit: null,
  pushed: false,
  pr: null,
  refused: 'not delivered: deploy.cfg holds DEPLOY_TOKEN. The workspace keeps the files.',
}

describe('the page on a narrow screen, and the delivered column', () => {
  it('at 390 px the task list and the caps table are cards of labelled lines, nothing clipped and no word broken; at 1280 px tables; the list has a delivered column', {
    timeout: 120_000,
  }, async () => {
    const tree = makeTree()
    tree.write({ uuid: uuidN(1), user: 'a-user-with-a-rather-long-name', location: 'completed', state: { delivery: delivered } })
    tree.write({ uuid: uuidN(2), user: 'alice', location: 'completed', state: { delivery: refused } })
    tree.write({ uuid: uuidN(3), user: 'alice', location: 'paused' })
    reindex(tree)
    const config = configWith(tree, 'budgets:\n  user_daily_usd: 1\n  fleet_daily_usd: 10\npricing:\n  fake-model:\n    prompt: 1\n    completion: 1\n')
    const s = await startServe(tree.base, { config })
    for (const width of [390, 1280]) {
      const context = await browser.newContext({ viewport: { width, height: 900 } })
      const page = await context.newPage()
      await page.goto(`${s.url}/`)
      await page.screenshot({ path: join(ARTIFACTS, `narrow-tasks-${width}.png`), fullPage: true })
      // The delivered column: the PR linked, a refusal said.
      const row = (n: number) => page.locator(`table.tasks tbody tr:has(a[href="/tasks/${uuidN(n)}"])`)
      await expect.poll(() => row(1).locator('td[data-label=delivered] a').getAttribute('href')).toBe(delivered.pr.url)
      expect(await row(2).locator('td[data-label=delivered]').textContent()).toBe('refused')
      expect(await row(3).locator('td[data-label=delivered]').textContent()).toBe('-')
      await page.goto(`${s.url}/stats`)
      await page.screenshot({ path: join(ARTIFACTS, `narrow-stats-${width}.png`), fullPage: true })
      expect(await page.locator('table.stack td[data-label=user]').count()).toBeGreaterThan(0)
      // Its charts read at a phone's width too: text not shrunk below 10 px, nothing past an edge.
      await expectFits(page, `/stats at ${width}`)
      for (const path of ['/', '/stats']) {
        await page.goto(`${s.url}${path}`)
        // Nothing wider than its box (clipped or scrolled inside its card), no page scrolling sideways.
        const clipped = await page.evaluate(
          `[...document.querySelectorAll('table.stack td, table.stack')].filter((e) => e.scrollWidth > e.clientWidth + 1).length`,
        )
        expect(clipped, `${path} at ${width}`).toBe(0)
        expect(await page.evaluate('document.documentElement.scrollWidth - window.innerWidth')).toBeLessThanOrEqual(0)
        // No cell's label is broken inside a word (the caps table showed "US ER").
        const labels = await page.evaluate(
          `[...document.querySelectorAll('table.stack th, table.stack td')].filter((e) => e.offsetParent !== null && (e.textContent || '').trim().length <= 8).filter((e) => { const cs = getComputedStyle(e); return e.clientHeight - parseFloat(cs.paddingTop) - parseFloat(cs.paddingBottom) > 1.6 * parseFloat(cs.lineHeight) }).map((e) => e.textContent)`,
        )
        expect(labels, `${path} at ${width}`).toEqual([])
        const cards = await page.evaluate(`getComputedStyle(document.querySelector('table.stack tbody tr')).display`)
        expect(cards).toBe(width === 390 ? 'block' : 'table-row')
      }
      await context.close()
    }
  })
})
