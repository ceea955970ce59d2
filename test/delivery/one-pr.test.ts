import { describe, expect, it } from 'vitest'
import { onlyTask, readTask } from '../run/harness.js'
import { branches, deliverySetup, FIXED, git, runOf, write } from './setup.js'

// docs/delivery.md#one-pull-request-per-issue

const labelNames = (issue: Record<string, unknown>) => (issue.labels as { name: string }[]).map((l) => l.name).sort()

describe('one pull request per issue', () => {
  it("two runs on one issue make one PR: the second continues the first's (one more commit on its branch); run moves the issue's labels as poll does", {
    timeout: 300_000,
  }, async () => {
    const s = await deliverySetup('github')
    const gh = s.gh as NonNullable<typeof s.gh>
    s.fake.queue.push(write('calc.js', FIXED), { content: 'add() adds now.' })
    const first = await s.cli(['run', '--github', 'acme/shop#42', '--workspace', s.ws, '--deliver', 'pr', '--json'])
    expect(first.code, first.stderr).toBe(0)
    const opened = JSON.parse(first.stdout).delivery as { branch: string; commit: string; pr: { number: number; url: string } }
    expect(opened.pr.number).toBe(100)
    // The labels poll moves: processing while it ran, done at its end (a poller then leaves the issue alone).
    const added = gh.requests.filter((r) => r.method === 'POST' && r.path === '/repos/acme/shop/issues/42/labels').map((r) => r.body)
    expect(added).toEqual([{ labels: ['ctxagent:processing'] }, { labels: ['ctxagent:done'] }])
    expect(labelNames(gh.issue)).toEqual(['bug', 'ctxagent:done'])
    // The second run on the same issue: no second PR, one more commit on the first's branch, its change on top of the first's.
    s.fake.queue.push(write('README.md', '# calc\n\nadd(a, b) adds two numbers, as tested.\n'), { content: 'Documented add().' })
    const second = await s.cli(['run', '--github', 'acme/shop#42', '--workspace', s.ws, '--deliver', 'pr', '--json'])
    expect(second.code, second.stderr).toBe(0)
    expect(second.stderr).toContain(`the issue already has ctxagent's open pull request ${opened.pr.url}: this task continues it`)
    const continued = JSON.parse(second.stdout) as { uuid: string; delivery: { branch: string; commit: string; pr: unknown; refused: null } }
    expect(continued.delivery).toMatchObject({ branch: opened.branch, pr: opened.pr, refused: null })
    expect(gh.pulls).toHaveLength(1)
    expect(branches(s.bare).sort()).toEqual([opened.branch, 'main'].sort())
    const head = git(['--git-dir', s.bare, 'rev-parse', `refs/heads/${opened.branch}`], '/')
    expect(head).toBe(continued.delivery.commit)
    expect(git(['--git-dir', s.bare, 'rev-parse', `${head}^`], '/')).toBe(opened.commit)
    expect(git(['--git-dir', s.bare, 'show', `${head}:calc.js`], '/')).toBe(FIXED.trim())
    expect(git(['--git-dir', s.bare, 'diff', '--name-only', opened.commit, head], '/')).toBe('README.md')
    const task = readTask(s.tree, continued.uuid)
    expect((task.metadata.run as { pr_head: unknown }).pr_head).toMatchObject({ branch: opened.branch, number: 100 })
    expect(runOf(task).starts_from).toMatchObject({ kind: 'pr-head' })
    expect(labelNames(gh.issue)).toEqual(['bug', 'ctxagent:done'])
    // The operator's checkout did not move.
    expect(git(['rev-parse', 'HEAD'], s.ws)).toBe(s.first)
    expect(git(['status', '--porcelain'], s.ws)).toBe('')
  })

  it("GitLab: two runs on one issue make one MR: the second continues ctxagent's open MR (one more commit on its source branch)", {
    timeout: 300_000,
  }, async () => {
    const s = await deliverySetup('gitlab')
    const gl = s.gl as NonNullable<typeof s.gl>
    s.fake.queue.push(write('calc.js', FIXED), { content: 'add() adds now.' })
    const first = await s.cli(['run', '--gitlab', 'acme/backend/api#7', '--workspace', s.ws, '--deliver', 'pr', '--json'])
    expect(first.code, first.stderr).toBe(0)
    const opened = JSON.parse(first.stdout).delivery as { branch: string; commit: string; pr: { number: number; url: string } }
    expect(gl.mergeRequests).toHaveLength(1)
    expect(opened.pr.url).toBe(gl.mergeRequests[0]?.web_url)
    s.fake.queue.push(write('README.md', '# calc\n\nadd(a, b) adds two numbers, as the MR tests.\n'), { content: 'Documented add().' })
    const second = await s.cli(['run', '--gitlab', 'acme/backend/api#7', '--workspace', s.ws, '--deliver', 'pr', '--json'])
    expect(second.code, second.stderr).toBe(0)
    expect(second.stderr).toContain(`the issue already has ctxagent's open pull request ${opened.pr.url}: this task continues it`)
    const continued = JSON.parse(second.stdout) as { uuid: string; delivery: { branch: string; commit: string; pr: unknown; refused: null } }
    expect(continued.delivery).toMatchObject({ branch: opened.branch, pr: opened.pr, refused: null })
    // No second merge request, no second branch: one commit more on the first's, over it, with only this task's change.
    expect(gl.mergeRequests).toHaveLength(1)
    expect(gl.requests.filter((r) => r.method === 'POST' && r.path.endsWith('/merge_requests'))).toHaveLength(1)
    expect(branches(s.bare).sort()).toEqual([opened.branch, 'main'].sort())
    const head = git(['--git-dir', s.bare, 'rev-parse', `refs/heads/${opened.branch}`], '/')
    expect(head).toBe(continued.delivery.commit)
    expect(git(['--git-dir', s.bare, 'rev-parse', `${head}^`], '/')).toBe(opened.commit)
    expect(git(['--git-dir', s.bare, 'diff', '--name-only', opened.commit, head], '/')).toBe('README.md')
    expect(runOf(readTask(s.tree, continued.uuid)).starts_from).toMatchObject({ kind: 'pr-head' })
  })

  it('a PR another account wrote with the marker of a task that never delivered it is not continued', {
    timeout: 240_000,
  }, async () => {
    const s = await deliverySetup('github')
    const gh = s.gh as NonNullable<typeof s.gh>
    s.fake.queue.push(write('calc.js', FIXED), { content: 'add() adds now.' })
    expect((await s.cli(['run', '--github', 'acme/shop#42', '--workspace', s.ws, '--deliver', 'pr'])).code).toBe(0)
    const uuid = onlyTask(s.tree).uuid
    // Someone else's PR with the task's marker pasted in (not the bot's, not the PR the task recorded).
    const pasted = { ...(gh.pulls[0] as Record<string, unknown>) }
    gh.pulls[0] = { ...pasted, state: 'closed' }
    gh.pulls.push({
      ...pasted,
      number: 7,
      html_url: 'https://github.example/acme/shop/pull/7',
      user: { login: 'mallory', id: 66 },
      head: { ref: 'evil', sha: 'x' },
    })
    s.fake.queue.push(write('README.md', '# calc\n'), { content: 'Docs.' })
    const again = await s.cli(['run', '--github', 'acme/shop#42', '--workspace', s.ws, '--deliver', 'pr', '--json'])
    expect(again.code, again.stderr).toBe(0)
    expect(again.stderr).not.toContain('continues it')
    const delivery = JSON.parse(again.stdout).delivery as { branch: string; pr: { number: number } }
    expect(delivery.branch).not.toBe('evil')
    expect(delivery.pr.number).not.toBe(7)
    expect(delivery.branch).not.toContain(uuid.slice(0, 8))
  })

  it("a forge reply that is not GitHub's documented shape: one line naming the forge and the missing field, nothing opened", { timeout: 240_000 }, async () => {
    const s = await deliverySetup('github')
    const gh = s.gh as NonNullable<typeof s.gh>
    // The listings at start and before opening answer as GitHub does; the one that looks for the branch's PR does not.
    const pulls = (body: unknown) => ({ method: 'GET', path: '/repos/acme/shop/pulls', status: 200, body })
    gh.replies.push(pulls([]), pulls([]), pulls([{ number: 3 }]))
    s.fake.queue.push(write('calc.js', FIXED), { content: 'add() adds now.' })
    const res = await s.cli(['run', '--github', 'acme/shop#42', '--workspace', s.ws, '--deliver', 'pr', '--json'])
    const refused = String((JSON.parse(res.stdout).delivery as { refused: string }).refused)
    expect(refused).not.toContain('Cannot read properties')
    expect(refused).toMatch(
      /^delivery failed: GitHub's reply to acme\/shop's pull requests of ctxagent\/42-[0-9a-f]{8} is not what its API documents: \[0\]\.html_url is missing$/,
    )
    expect(gh.pulls).toHaveLength(0)
  })
})
