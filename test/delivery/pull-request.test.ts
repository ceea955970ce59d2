import { existsSync, readFileSync, realpathSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { onlyTask } from '../run/harness.js'
import { branches, deliverySetup, filesHolding, FIXED, git, runOf, write } from './setup.js'

const MARKER = /<!-- ctxagent:[0-9a-f-]{36} -->/

describe('delivery as a pull request (GitHub) or merge request (GitLab)', () => {
  it('a GitHub issue: one commit on the base pushed over smart HTTP with the token, a PR with the right fields, the checkout unmoved, no host identity, the token nowhere it must not be', {
    timeout: 180_000,
  }, async () => {
    const s = await deliverySetup('github', 'deliver:\n  labels: [ctxagent]\n')
    s.fake.queue.push(write('calc.js', FIXED), { content: 'add() subtracted; it adds now.\n\nThe test in README still holds.' })
    const res = await s.cli(['run', '--github', 'acme/shop#42', '--workspace', s.ws, '--deliver', 'pr', '--json'])
    expect(res.code, res.stderr).toBe(0)
    const task = onlyTask(s.tree)
    const branch = `ctxagent/42-${task.uuid.slice(0, 8)}`
    const outcome = JSON.parse(res.stdout) as { delivery: { commit: string } }
    expect(outcome.delivery).toEqual({
      mode: 'pr',
      branch,
      commit: expect.stringMatching(/^[0-9a-f]{40}$/),
      pushed: true,
      pr: { number: 100, url: 'https://github.example/acme/shop/pull/100' },
      refused: null,
    })
    expect(task.state.delivery).toEqual(outcome.delivery)
    expect(task.metadata.run).toMatchObject({ deliver: 'pr', base_commit: s.first, base_branch: 'main', base_remote: s.origin })
    const commit = outcome.delivery.commit
    // On the remote: the branch, one commit over the base, the agent's file, the bot's identity.
    expect(branches(s.bare).sort()).toEqual([branch, 'main'].sort())
    expect(git(['--git-dir', s.bare, 'rev-parse', `refs/heads/${branch}`], '/')).toBe(commit)
    expect(git(['--git-dir', s.bare, 'rev-list', `main..${branch}`], '/')).toBe(commit)
    expect(git(['--git-dir', s.bare, 'rev-parse', `${commit}^`], '/')).toBe(s.first)
    expect(git(['--git-dir', s.bare, 'show', `${commit}:calc.js`], '/')).toBe(FIXED.trim())
    expect(git(['--git-dir', s.bare, 'show', '-s', '--format=%an <%ae>|%cn <%ce>', commit], '/')).toBe(
      'ctxagent-bot <ctxagent-bot@users.noreply.ctxagent.invalid>|ctxagent-bot <ctxagent-bot@users.noreply.ctxagent.invalid>',
    )
    expect(git(['--git-dir', s.bare, 'diff', '--name-only', s.first, commit], '/')).toBe('calc.js')
    // The operator's checkout: still main at the start, its files untouched (the agent worked in a worktree of its own, removed once delivered).
    expect(git(['symbolic-ref', 'HEAD'], s.ws)).toBe('refs/heads/main')
    expect(git(['rev-parse', 'HEAD'], s.ws)).toBe(s.first)
    expect(git(['status', '--porcelain'], s.ws)).toBe('')
    expect(readFileSync(join(s.ws, 'calc.js'), 'utf8')).not.toBe(FIXED)
    expect(git(['rev-parse', `refs/heads/${branch}`], s.ws)).toBe(commit)
    const run = runOf(task)
    const worktree = String(run.starts_from?.worktree)
    expect(run.starts_from).toMatchObject({
      kind: 'worktree',
      workspace: s.ws,
      commit: s.first,
      worktree: expect.stringContaining('/.git/ctxagent/worktrees/task-'),
    })
    expect(run.workspace).toBe(worktree)
    // The repository delivery worked through is the worktree's, recorded at start: its gitfile, its own git directory, the checkout's as the common one.
    const gitDir = realpathSync(join(s.ws, '.git'))
    expect(task.metadata.run).toMatchObject({
      base_git: { top: worktree, dotgit: 'gitfile', git_dir: { path: expect.stringMatching(/\/worktrees\/task-[^/]+$/) }, common_dir: { path: gitDir } },
    })
    expect(existsSync(worktree)).toBe(false)
    expect(git(['worktree', 'list', '--porcelain'], s.ws)).not.toContain(worktree)
    expect(res.stderr).toContain(`starts from commit ${s.first.slice(0, 12)} of ${s.ws}, in a worktree of its own`)
    // The PR.
    const gh = s.gh as NonNullable<typeof s.gh>
    expect(gh.pulls).toHaveLength(1)
    const pull = gh.pulls[0] as { title: string; body: string; draft: boolean; head: { ref: string }; base: { ref: string }; labels: { name: string }[] }
    expect(pull).toMatchObject({ title: 'CSV export drops the last row', draft: false, head: { ref: branch }, base: { ref: 'main' } })
    expect(pull.labels.map((l) => l.name)).toEqual(['ctxagent'])
    expect(pull.body).toContain('add() subtracted; it adds now.')
    expect(pull.body).toContain('Closes #42')
    expect(pull.body).toContain(task.uuid)
    expect(pull.body).toMatch(MARKER)
    // The outcome comment links it.
    expect(String(gh.comments.at(-1)?.body)).toContain('Pull request: https://github.example/acme/shop/pull/100')
    // The credential path was real: the server refused git until it gave the token.
    expect(s.auth).toContain(null)
    expect(s.auth).toContain(`Basic ${Buffer.from(`x-access-token:${gh.token}`).toString('base64')}`)
    // The token is in none of the workspace's .git, the remote, the task tree, or the LLM's requests.
    expect(filesHolding(join(s.ws, '.git'), gh.token)).toEqual([])
    expect(filesHolding(s.bare, gh.token)).toEqual([])
    expect(filesHolding(task.dir, gh.token)).toEqual([])
    expect(JSON.stringify(s.fake.requests)).not.toContain(gh.token)
    expect(git(['config', '--list', '--local'], s.ws)).not.toContain(gh.token)
    // view (and --json), list (and --json) and export show it.
    const short = task.uuid.slice(0, 8)
    expect((await s.cli(['view', short])).stdout).toContain(
      `Delivered: PR/MR #100 https://github.example/acme/shop/pull/100 (branch ${branch} (${commit.slice(0, 12)}), pushed)`,
    )
    expect(JSON.parse((await s.cli(['view', short, '--json'])).stdout).state.delivery).toEqual(outcome.delivery)
    const listed = await s.cli(['list'])
    expect(listed.stdout.split('\n')[0]).toMatch(/\bdelivered\b/)
    expect(listed.stdout).toContain('#100')
    expect(JSON.parse((await s.cli(['list', '--json'])).stdout.trim()).delivery).toEqual(outcome.delivery)
    expect((await s.cli(['export', short])).stdout).toContain('| delivery | PR/MR #100 https://github.example/acme/shop/pull/100')
  })

  it('a GitLab issue: a merge request from the pushed branch, draft by the title, labels, Closes #N', async () => {
    const s = await deliverySetup('gitlab', 'deliver:\n  draft: true\n  labels: [bot, review]\n  branch: agent/<key>-<uuid8>\n')
    s.fake.queue.push(write('calc.js', FIXED), { content: 'Pagination fixed.' })
    const res = await s.cli(['run', '--gitlab', 'acme/backend/api#7', '--workspace', s.ws, '--deliver', 'pr', '--json'])
    expect(res.code, res.stderr).toBe(0)
    const task = onlyTask(s.tree)
    const branch = `agent/7-${task.uuid.slice(0, 8)}`
    const gl = s.gl as NonNullable<typeof s.gl>
    expect(gl.mergeRequests).toHaveLength(1)
    const mr = gl.mergeRequests[0] as {
      title: string
      description: string
      source_branch: string
      target_branch: string
      labels: string[]
      iid: number
      web_url: string
    }
    expect(mr).toMatchObject({ title: 'Draft: Pagination of /orders skips a page', source_branch: branch, target_branch: 'main', labels: ['bot', 'review'] })
    expect(mr.description).toContain('Closes #7')
    expect(mr.description).toMatch(MARKER)
    expect(task.state.delivery).toEqual({
      mode: 'pr',
      branch,
      commit: expect.stringMatching(/^[0-9a-f]{40}$/),
      pushed: true,
      pr: { number: mr.iid, url: mr.web_url },
      refused: null,
    })
    expect(branches(s.bare).sort()).toEqual([branch, 'main'].sort())
    expect(s.auth).toContain(`Basic ${Buffer.from(`oauth2:${gl.token}`).toString('base64')}`)
    expect(filesHolding(join(s.ws, '.git'), gl.token)).toEqual([])
    expect(filesHolding(s.bare, gl.token)).toEqual([])
    expect(filesHolding(task.dir, gl.token)).toEqual([])
    expect(JSON.stringify(s.fake.requests)).not.toContain(gl.token)
  })
})
