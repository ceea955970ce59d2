import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { makeTree, uuidN } from '../fixtures/tree.js'
import type { Tree } from '../fixtures/tree.js'
import { githubUser, startFakeGithub } from '../helpers/fake-github.js'
import type { FakeGithub } from '../helpers/fake-github.js'
import { gitlabUser, startFakeGitlab } from '../helpers/fake-gitlab.js'
import type { FakeGitlab } from '../helpers/fake-gitlab.js'
import { cliAsync } from '../helpers/run.js'

const GH = 'https://github.example/acme/shop/pull'
const GL = 'https://gitlab.example/acme/backend/api/-/merge_requests'

/** A task of the tree on a pull request: its model and user, the tokens it spent, what its delivery pushed. */
function prTask(
  tree: Tree,
  n: number,
  t: { user: string; model: string; prompt: number; completion: number; url?: string; number?: number; commit?: string; followUp?: boolean },
): string {
  const uuid = uuidN(n)
  const delivery = t.url
    ? { mode: 'pr', branch: `ctxagent/${n}`, commit: t.commit ?? null, pushed: t.commit !== undefined, pr: { number: t.number, url: t.url }, refused: null }
    : undefined
  const dir = tree.write({
    uuid,
    user: t.user,
    createdAt: `2026-11-0${Math.min(9, n)}T08:00:00.000Z`,
    state: {
      total_tokens_used: t.prompt + t.completion,
      prompt_tokens: t.prompt,
      completion_tokens: t.completion,
      cached_tokens: 0,
      ...(delivery ? { delivery } : {}),
    },
  })
  const meta = JSON.parse(readFileSync(join(dir, 'metadata.json'), 'utf8')) as Record<string, unknown>
  meta.config = { llm_provider: 'openai', model: t.model, context_length: 128000, compression_threshold: 0.7 }
  if (t.followUp)
    meta.run = {
      workspace: '/w',
      allow_shell: false,
      max_turns: 10,
      max_tokens: null,
      timeout_ms: null,
      system_prompt_file: null,
      replay_from: null,
      pr_head: { branch: 'ctxagent/1', number: t.number, url: t.url },
    }
  writeFileSync(join(dir, 'metadata.json'), JSON.stringify(meta))
  return uuid
}

const commit = (sha: string, login: string) => ({
  sha,
  commit: { message: sha, author: { name: login, email: `${login}@x`, date: '2026-11-02T10:00:00Z' } },
  author: githubUser(login, 9),
})

/** GitHub: #100 merged after a follow-up and a person's commit, #101 closed unmerged, #102 open. GitLab: !20 merged. */
function forgeFacts(gh: FakeGithub, gl: FakeGitlab): void {
  const pull = (number: number, over: Record<string, unknown>) => ({
    id: 5000 + number,
    number,
    state: 'open',
    title: `PR ${number}`,
    body: `<!-- ctxagent:x -->`,
    user: githubUser('ctxagent-bot', 7),
    labels: [],
    head: { ref: `ctxagent/${number}`, sha: 'c' },
    base: { ref: 'main', sha: 'b' },
    html_url: `${GH}/${number}`,
    url: `${gh.url}/repos/acme/shop/pulls/${number}`,
    merged_at: null,
    merged_by: null,
    closed_at: null,
    closed_by: null,
    ...over,
  })
  gh.pulls.push(
    pull(100, {
      state: 'closed',
      created_at: '2026-11-02T10:00:00Z',
      merged_at: '2026-11-02T14:00:00Z',
      closed_at: '2026-11-02T14:00:00Z',
      merged_by: githubUser('maria', 11),
    }),
    pull(101, { state: 'closed', created_at: '2026-11-03T10:00:00Z', closed_at: '2026-11-03T12:00:00Z', closed_by: githubUser('bob', 12) }),
    pull(102, { created_at: '2026-11-04T10:00:00Z' }),
  )
  gh.pullCommits[100] = [commit('c1', 'ctxagent-bot'), commit('h1', 'maria'), commit('c2', 'ctxagent-bot')]
  gh.pullCommits[101] = [commit('c3', 'ctxagent-bot')]
  gh.pullCommits[102] = [commit('c4', 'ctxagent-bot')]
  // The bot's own comment is no response; maria's review an hour in is the first.
  gh.pullComments[100] = [{ id: 1, body: 'done', user: githubUser('ctxagent-bot', 7), created_at: '2026-11-02T10:30:00Z', author_association: 'NONE' }]
  gh.pullReviews[100] = [{ id: 2, state: 'CHANGES_REQUESTED', body: 'x', user: githubUser('maria', 11), submitted_at: '2026-11-02T11:00:00Z' }]
  gl.mergeRequests.push({
    id: 7020,
    iid: 20,
    project_id: 3,
    title: 'MR 20',
    description: '<!-- ctxagent:x -->',
    state: 'merged',
    source_branch: 'ctxagent/20',
    target_branch: 'main',
    labels: [],
    author: gitlabUser('ctxagent-bot'),
    created_at: '2026-11-04T09:00:00.000Z',
    merged_at: '2026-11-04T11:00:00.000Z',
    merge_user: gitlabUser('dave'),
    merged_by: gitlabUser('dave'),
    closed_at: null,
    closed_by: null,
    web_url: `${GL}/20`,
  })
  gl.mrCommits[20] = [{ id: 'g1', short_id: 'g1', title: 'fix', author_name: 'ctxagent', created_at: '2026-11-04T09:00:00.000Z' }]
  const note = (id: number, who: string, at: string, system = false) => ({ id, body: 'n', author: gitlabUser(who), created_at: at, system, noteable_iid: 20 })
  gl.mrNotes[20] = [
    note(3, 'carol', '2026-11-04T09:30:00.000Z'),
    note(2, 'ctxagent-bot', '2026-11-04T09:20:00.000Z'),
    note(1, 'carol', '2026-11-04T09:10:00.000Z', true),
  ]
}

describe('stats --outcomes: the fate of the pull requests ctxagent opened', () => {
  it('counts merged, closed and open ones, the follow-up, the rework and the money, with the forge stand-ins, before and after a reindex', async () => {
    const tree = makeTree()
    const gh = await startFakeGithub()
    const gl = await startFakeGitlab()
    forgeFacts(gh, gl)
    const opener = prTask(tree, 1, { user: 'alice', model: 'gpt-4o', prompt: 100_000, completion: 10_000, url: `${GH}/100`, number: 100, commit: 'c1' })
    const followUp = prTask(tree, 2, {
      user: 'alice',
      model: 'gpt-4o',
      prompt: 40_000,
      completion: 2_000,
      url: `${GH}/100`,
      number: 100,
      commit: 'c2',
      followUp: true,
    })
    prTask(tree, 3, { user: 'bob', model: 'gpt-4o', prompt: 200_000, completion: 20_000, url: `${GH}/101`, number: 101, commit: 'c3' })
    prTask(tree, 4, { user: 'alice', model: 'gpt-4o', prompt: 100_000, completion: 10_000, url: `${GH}/102`, number: 102, commit: 'c4' })
    prTask(tree, 5, { user: 'carol', model: 'claude-x', prompt: 100_000, completion: 10_000, url: `${GL}/20`, number: 20, commit: 'g1' })
    prTask(tree, 6, { user: 'carol', model: 'gpt-4o', prompt: 999_000, completion: 1_000 })
    const config = join(tree.base, 'config.yaml')
    writeFileSync(
      config,
      [
        `github: { api_url: '${gh.url}', token: ${gh.token}, bot_name: ctxagent-bot }`,
        `gitlab: { url: '${gl.url}', token: ${gl.token}, bot_name: ctxagent-bot }`,
        'pricing:',
        '  gpt-4o: { prompt: 2.5, completion: 10 }',
        '  claude-x: { prompt: 3, completion: 15 }',
        '',
      ].join('\n'),
    )
    const ctx = (...args: string[]) => cliAsync(['--home', tree.base, '--config', config, ...args])
    expect((await ctx('reindex')).code).toBe(0)

    const first = await ctx('stats', '--outcomes', '--refresh', '--json')
    expect(first.stderr).toBe('')
    expect(first.code).toBe(0)
    const refreshed = JSON.parse(first.stdout)
    expect(refreshed.refresh).toMatchObject({ ended: 0, errors: [] })
    expect(refreshed.refresh.refreshed).toHaveLength(4)
    const expected = {
      opened: 4,
      merged: 2,
      closed: 1,
      open: 1,
      merge_rate: 0.6667,
      // Merged: #100 ($0.35 + the follow-up's $0.12) and !20 ($0.45); closed: #101 ($0.70); over the 2 merged.
      usd_per_merged: 0.81,
      usd: { merged: 0.92, closed: 0.7, open: 0.35 },
      median_hours_to_merge: 3,
      rounds_per_merged: 0.5,
      reworked: 1,
    }
    expect(refreshed.total).toMatchObject(expected)
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
