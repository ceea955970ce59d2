import { describe, expect, it } from 'vitest'
import { makeTree } from '../fixtures/tree.js'
import { startFakeGithub } from '../helpers/fake-github.js'
import { startFakeGitlab } from '../helpers/fake-gitlab.js'
import { cliAsync } from '../helpers/run.js'
import { startServe } from '../serve/helpers.js'
import { parseExposition } from '../serve/exposition.js'
import { EXPECTED_TOTAL, forgeFacts, GH, GL, outcomeConfig, outcomeTasks } from './outcomes-fixture.js'

describe('stats --outcomes: the fate of the pull requests ctxagent opened', () => {
  it('counts merged, closed and open ones, the follow-up, the rework and the money, with the forge stand-ins, before and after a reindex', async () => {
    const tree = makeTree()
    const gh = await startFakeGithub()
    const gl = await startFakeGitlab()
    forgeFacts(gh, gl)
    const { opener, followUp } = outcomeTasks(tree)
    const config = outcomeConfig(tree, gh, gl)
    const ctx = (...args: string[]) => cliAsync(['--home', tree.base, '--config', config, ...args])
    expect((await ctx('reindex')).code).toBe(0)

    const first = await ctx('stats', '--outcomes', '--refresh', '--json')
    expect(first.stderr).toBe('')
    expect(first.code).toBe(0)
    const refreshed = JSON.parse(first.stdout)
    expect(refreshed.refresh).toMatchObject({ ended: 0, errors: [] })
    expect(refreshed.refresh.refreshed).toHaveLength(4)
    expect(refreshed.total).toMatchObject(EXPECTED_TOTAL)
    const pr100 = refreshed.pull_requests.find((p: { url: string }) => p.url === `${GH}/100`)
    expect(pr100).toMatchObject({
      forge: 'github',
      repository: 'acme/shop',
      number: 100,
      task: opener,
      tasks: [opener, followUp],
      rounds: 1,
      outcome: 'merged',
      merged_by: 'maria',
      hours_to_first_response: 1,
      hours_to_merge: 4,
      human_commits: 1,
      rework: true,
      usd: 0.47,
    })
    expect(refreshed.pull_requests.find((p: { url: string }) => p.url === `${GH}/101`)).toMatchObject({ outcome: 'closed', closed_by: 'bob', rework: false })
    expect(refreshed.pull_requests.find((p: { url: string }) => p.url === `${GL}/20`)).toMatchObject({
      forge: 'gitlab',
      repository: 'acme/backend/api',
      outcome: 'merged',
      merged_by: 'dave',
      hours_to_first_response: 0.5,
      rework: false,
      usd: 0.45,
    })

    const byModel = JSON.parse((await ctx('stats', '--outcomes', '--by', 'model', '--json')).stdout)
    expect(byModel.groups).toEqual([
      expect.objectContaining({ key: 'gpt-4o', opened: 3, merged: 1, closed: 1, open: 1, merge_rate: 0.5, usd_per_merged: 1.17 }),
      expect.objectContaining({ key: 'claude-x', opened: 1, merged: 1, closed: 0, open: 0, merge_rate: 1, usd_per_merged: 0.45 }),
    ])
    const since = JSON.parse((await ctx('stats', '--outcomes', '--since', '2026-11-03', '--json')).stdout)
    expect(since.total).toMatchObject({ opened: 3, merged: 1, closed: 1, open: 1 })

    // The directories are the truth: a rebuilt index has the same figures, the forge's facts kept.
    expect((await ctx('reindex')).code).toBe(0)
    const after = JSON.parse((await ctx('stats', '--outcomes', '--json')).stdout)
    expect(after.total).toEqual(refreshed.total)
    expect(after.pull_requests).toEqual(refreshed.pull_requests)

    // /metrics: the same counts and money by outcome, from the rebuilt index.
    const serve = await startServe(tree.base, { config })
    try {
      const families = parseExposition(await (await serve.get('/metrics')).text())
      const by = (name: string) => Object.fromEntries((families.get(name)?.samples ?? []).map((x) => [x.labels.outcome, x.value]))
      expect(by('ctxagent_pull_requests_total')).toEqual({ merged: 2, closed: 1, open: 1 })
      expect(by('ctxagent_pull_request_usd_total')).toEqual({ merged: 0.92, closed: 0.7, open: 0.35 })
    } finally {
      serve.child.kill('SIGTERM')
    }

    // A second refresh asks again only about the one still open.
    const asked = { gh: gh.requests.length, gl: gl.requests.length }
    const again = JSON.parse((await ctx('stats', '--outcomes', '--refresh', '--json')).stdout)
    expect(again.refresh).toMatchObject({ refreshed: [`${GH}/102`], ended: 3 })
    expect(gl.requests.length).toBe(asked.gl)
    const paths = gh.requests.slice(asked.gh).map((r) => r.path)
    expect(paths.length).toBeGreaterThan(0)
    expect(paths.filter((p) => !p.includes('/102'))).toEqual([])
  })

  it('refuses --refresh without --outcomes, and --outcomes with the task filters', async () => {
    const tree = makeTree()
    const refused = await cliAsync(['--home', tree.base, 'stats', '--refresh'])
    expect(refused.code).toBe(2)
    expect(refused.stderr).toMatch(/^ctxagent: --refresh goes with --outcomes \(add --outcomes\)\n$/)
    const filtered = await cliAsync(['--home', tree.base, 'stats', '--outcomes', '--user', 'alice'])
    expect(filtered.code).toBe(2)
    expect(filtered.stderr).toMatch(/--outcomes does not take --user/)
  })
})
