import { mkdirSync } from 'node:fs'
import { join } from 'node:path'
import { chromium } from 'playwright-core'
import type { Browser } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { makeTree } from '../fixtures/tree.js'
import { startFakeGithub } from '../helpers/fake-github.js'
import { startFakeGitlab } from '../helpers/fake-gitlab.js'
import { cliAsync, ROOT } from '../helpers/run.js'
import { EXPECTED_TOTAL, forgeFacts, outcomeConfig, outcomeTasks } from '../operations/outcomes-fixture.js'
import { startServe } from './helpers.js'
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

interface Figures {
  key?: string | null
  opened: number
  merged: number
  closed: number
  open: number
  merge_rate: number | null
  usd_per_merged: number | null
  median_hours_to_merge: number | null
  rounds_per_merged: number | null
}

const pct = (r: number | null) => (r === null ? '-' : `${(r * 100).toFixed(1)}%`)
const usd = (c: number | null) => (c === null ? '-' : `$${c.toFixed(c < 1 ? 4 : 2)}`)

describe('the pull requests ctxagent opened, on the page', () => {
  it("shows stats --outcomes' figures by every group, with a chart that fits and reads at 1280 and 390 px", { timeout: 240_000 }, async () => {
    const tree = makeTree()
    const gh = await startFakeGithub()
    const gl = await startFakeGitlab()
    forgeFacts(gh, gl)
    outcomeTasks(tree)
    const config = outcomeConfig(tree, gh, gl)
    const ctx = (...args: string[]) => cliAsync(['--home', tree.base, '--config', config, ...args])
    expect((await ctx('reindex')).code).toBe(0)
    expect((await ctx('stats', '--outcomes', '--refresh', '--json')).code).toBe(0)
    const s = await startServe(tree.base, { config })

    // /api/outcomes is the command's JSON for the same tree, group by group, and with --since.
    const reports: Record<string, { total: Figures; groups: Figures[] }> = {}
    for (const by of ['model', 'repository', 'user', 'label']) {
      const command = await ctx('stats', '--outcomes', '--by', by, '--json')
      expect(command.code, command.stderr).toBe(0)
      const fromPage = (await (await s.get(`/api/outcomes?by=${by}`)).json()) as { total: Figures; groups: Figures[] }
      expect(fromPage).toEqual(JSON.parse(command.stdout))
      reports[by] = fromPage
    }
    expect(reports.model?.total).toMatchObject(EXPECTED_TOTAL)
    const since = await ctx('stats', '--outcomes', '--since', '2026-11-03', '--json')
    expect(await (await s.get('/api/outcomes?since=2026-11-03')).json()).toEqual(JSON.parse(since.stdout))
    const bad = await s.get('/api/outcomes?by=colour')
    expect(bad.status).toBe(400)
    expect(await bad.json()).toEqual({ error: 'by must be one of model, repository, user, label' })

    for (const width of [1280, 390]) {
      const context = await browser.newContext({ viewport: { width, height: 900 } })
      const page = await context.newPage()
      for (const by of ['model', 'repository']) {
        await page.goto(`${s.url}/outcomes?by=${by}`)
        await page.screenshot({ path: join(ARTIFACTS, `outcomes-${by}-${width}.png`), fullPage: true })
        const report = reports[by] as { total: Figures; groups: Figures[] }
        // The same figures as the command: each group's row and the totals.
        for (const g of [...report.groups.map((x) => [x.key ?? '(unknown)', x] as const), ['all', report.total] as const]) {
          const row = page.locator(`table.outcomes tr[data-group="${g[0]}"]`)
          const cell = (label: string) => row.locator(`td[data-label="${label}"]`).textContent()
          expect(await cell('opened')).toBe(String(g[1].opened))
          expect(await cell('merged')).toBe(String(g[1].merged))
          expect(await cell('closed')).toBe(String(g[1].closed))
          expect(await cell('open')).toBe(String(g[1].open))
          expect(await cell('merge rate')).toBe(pct(g[1].merge_rate))
          expect(await cell('$/merged')).toBe(usd(g[1].usd_per_merged))
          expect(await cell('rounds')).toBe(g[1].rounds_per_merged === null ? '-' : g[1].rounds_per_merged.toFixed(2))
        }
        const total = (f: string) => page.locator(`dl.outcome-totals dd[data-figure="${f}"]`).textContent()
        expect(await total('merge_rate')).toBe(pct(report.total.merge_rate))
        expect(await total('usd_per_merged')).toBe(usd(report.total.usd_per_merged))
        expect(await total('median_hours_to_merge')).toBe(`${(report.total.median_hours_to_merge as number).toFixed(1)}h`)
        // The denominator said, the still open apart.
        expect(await page.locator('p.denominator').textContent()).toBe(
          `Merge rate is merged ÷ (merged + closed): of the ${report.total.merged + report.total.closed} that reached an end. The ${report.total.open} still open are counted apart, not as failures.`,
        )
        // The chart: one row per group and the total, each with its merged, closed and (apart) still open parts.
        const chart = page.locator('svg[aria-label^="Pull requests by"]')
        expect(await chart.isVisible()).toBe(true)
        expect(await chart.locator('rect title').allTextContents()).toEqual(
          expect.arrayContaining([`all: merged ${report.total.merged}`, `all: closed ${report.total.closed}`, `all: still open ${report.total.open}`]),
        )
        await expectFits(page, `/outcomes?by=${by} at ${width}`)
      }
      // The opener's task is linked from its request's row.
      await page.locator('table.pulls a[href^="/tasks/"]').first().click()
      await page.locator('h1').first().waitFor()
      expect(page.url()).toMatch(/\/tasks\/[0-9a-f-]{36}$/)
      await context.close()
    }
  })
})
