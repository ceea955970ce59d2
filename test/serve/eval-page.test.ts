import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { chromium } from 'playwright-core'
import type { Browser } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest'
import { makeTree } from '../fixtures/tree.js'
import { cliAsync, ROOT } from '../helpers/run.js'
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

interface VariantJson {
  name: string
  pass_at_1: number
  solved: number
  count: number
  usd_per_task: number
  usd_per_solved: number | null
  tokens_per_task: number
  turns_per_task: number
  seconds_per_task: number
  endings: Record<string, number>
  trials: { task: string; uuid: string; passed: boolean; status: string }[]
}
interface EvalJson {
  id: string
  remaining: number
  variants: VariantJson[]
  paired: { a: string; b: string; pass_diff: number; ci95: [number, number] }[]
}

const pct = (x: number) => `${(x * 100).toFixed(1)}%`
const points = (x: number) => `${x >= 0 ? '+' : '−'}${Math.abs(x * 100).toFixed(1)}`

describe('an eval on the page', () => {
  it('lists the evals of the tree and shows one with the figures of eval run --json, each trial linked to its task, at 1280 and 390 px', {
    timeout: 480_000,
  }, async () => {
    const tree = makeTree()
    const work = mkdtempSync(join(tmpdir(), 'ctxagent-eval-page-work-'))
    onTestFinished(() => rmSync(work, { recursive: true, force: true }))
    const run = await cliAsync(['--home', tree.base, '--config', 'none', '--json', 'eval', 'run', '--demo', '--work-dir', work])
    expect(run.code, run.stderr).toBe(0)
    const made = JSON.parse(run.stdout) as EvalJson
    expect(made.remaining).toBe(0)
    const s = await startServe(tree.base)

    // The page's data is the command's report, read from the tree by the same code.
    expect(await (await s.get(`/api/evals/${made.id}`)).json()).toEqual(made)
    expect(await (await s.get('/api/evals')).json()).toEqual([made])
    expect((await s.get('/api/evals/0123456789ab')).status).toBe(404)
    expect((await s.get('/api/evals/..%2F..%2Fetc')).status).toBe(404)

    for (const width of [1280, 390]) {
      const context = await browser.newContext({ viewport: { width, height: 900 } })
      const page = await context.newPage()
      await page.goto(`${s.url}/evals`)
      await page.screenshot({ path: join(ARTIFACTS, `evals-${width}.png`), fullPage: true })
      await page.locator(`table.evals a[href="/evals/${made.id}"]`).click()
      await page.locator('h1', { hasText: made.id }).waitFor()
      await page.screenshot({ path: join(ARTIFACTS, `eval-${width}.png`), fullPage: true })
      for (const v of made.variants) {
        const cell = (label: string) => page.locator(`table.variants tr[data-variant="${v.name}"] td[data-label="${label}"]`).textContent()
        expect(await cell('pass@1')).toBe(pct(v.pass_at_1))
        expect(await cell('solved')).toBe(`${v.solved}/${v.count}`)
        expect(await cell('$/task')).toBe(`$${v.usd_per_task.toFixed(4)}`)
        expect(await cell('$/solved')).toBe(v.usd_per_solved === null ? '-' : `$${v.usd_per_solved.toFixed(4)}`)
        expect(await cell('tokens')).toBe(Math.round(v.tokens_per_task).toLocaleString('en-US'))
        expect(await cell('turns')).toBe(v.turns_per_task.toFixed(1))
        expect(await cell('time')).toBe(`${v.seconds_per_task.toFixed(1)}s`)
        expect(await cell('ended')).toBe(
          Object.entries(v.endings)
            .map(([status, n]) => `${status} ${n}`)
            .join(', '),
        )
      }
      const [pair] = made.paired
      if (pair === undefined) throw new Error('the demo compares two variants')
      const said = page.locator(`p.pair[data-pair="${pair.a}-${pair.b}"]`)
      expect(await said.locator('[data-figure="pass_diff"]').textContent()).toBe(points(pair.pass_diff))
      expect(await said.locator('[data-figure="ci95"]').textContent()).toBe(`${points(pair.ci95[0])} to ${points(pair.ci95[1])}`)
      await expectFits(page, `/evals/${made.id} at ${width}`)
      // Every trial links to its task's page.
      const links = await page.locator('table.trials a').evaluateAll((as) => as.map((a) => a.getAttribute('href')))
      expect(links.sort()).toEqual(made.variants.flatMap((v) => v.trials.map((t) => `/tasks/${t.uuid}`)).sort())
      const first = made.variants[0]?.trials[0]
      await page.locator(`table.trials a[href="/tasks/${first?.uuid}"]`).click()
      await page.waitForURL(`**/tasks/${first?.uuid}`)
      expect(await page.locator('h1').first().textContent()).toContain(first?.uuid.slice(0, 8))
      await context.close()
    }

    // A stopped eval (its last verdict not recorded) says how many trials are not run; an eval that cannot be read is listed with why.
    const trials = join(tree.base, 'evals', made.id, 'trials.jsonl')
    const lines = readFileSync(trials, 'utf8').trimEnd().split('\n')
    writeFileSync(trials, `${lines.slice(0, -1).join('\n')}\n`)
    const stopped = (await (await s.get(`/api/evals/${made.id}`)).json()) as EvalJson
    expect(stopped.remaining).toBe(1)
    expect(stopped.variants.reduce((n, v) => n + v.trials.length, 0)).toBe(lines.length - 1)
    mkdirSync(join(tree.base, 'evals', 'aaaaaaaaaaaa'))
    writeFileSync(join(tree.base, 'evals', 'aaaaaaaaaaaa', 'eval.json'), '{ not json')
    const listed = (await (await s.get('/api/evals')).json()) as { id: string; error?: string; remaining?: number }[]
    expect(listed.map((e) => [e.id, e.error === undefined ? e.remaining : 'error'])).toEqual([
      [made.id, 1],
      ['aaaaaaaaaaaa', 'error'],
    ])
    const list = await (await s.get('/evals')).text()
    expect(list).toContain('(1 not run)')
    expect(list).toMatch(/aaaaaaaaaaaa<\/code><\/td><td data-label="suite" class="error" colspan="5">cannot be read: /)
    expect(await (await s.get(`/evals/${made.id}`)).text()).toContain('1 not run yet')
  })
})
