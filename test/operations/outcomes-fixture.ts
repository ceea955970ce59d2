import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { uuidN } from '../fixtures/tree.js'
import type { Tree } from '../fixtures/tree.js'
import { githubUser } from '../helpers/fake-github.js'
import type { FakeGithub } from '../helpers/fake-github.js'
import { gitlabUser } from '../helpers/fake-gitlab.js'
import type { FakeGitlab } from '../helpers/fake-gitlab.js'

export const GH = 'https://github.example/acme/shop/pull'
export const GL = 'https://gitlab.example/acme/backend/api/-/merge_requests'

/** A task of the tree on a pull request: its model and user, the tokens it spent, what its delivery pushed. */
export function prTask(
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
export function forgeFacts(gh: FakeGithub, gl: FakeGitlab): void {
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

/** The tree of the tests: #100 opened by task 1 with task 2's follow-up, #101 by task 3, #102 by task 4, !20 by task 5; task 6 opened none. */
export function outcomeTasks(tree: Tree): { opener: string; followUp: string } {
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
  return { opener, followUp }
}

/** The config: both forges' stand-ins, and the prices. */
export function outcomeConfig(tree: Tree, gh: FakeGithub, gl: FakeGitlab): string {
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
  return config
}

/** The figures over all four: #100 and !20 merged, #101 closed, #102 open. */
export const EXPECTED_TOTAL = {
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
