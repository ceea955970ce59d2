import { execFileSync } from 'node:child_process'
import { chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir, userInfo } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { prHeadTarget } from '../../src/sources/pr-head.js'
import { normalizeMetadata } from '../../src/storage/task/metadata.js'
import { uuidN } from '../fixtures/tree.js'
import { startFakeGithub } from '../helpers/fake-github.js'
import { agentRequests, readTask, runSetup } from '../run/harness.js'

/** git as a person runs it in a test (as root, over directories owned by nobody). */
function git(dir: string, ...args: string[]): string {
  return execFileSync(
    'git',
    ['-c', 'safe.directory=*', '-c', 'user.name=Tester', '-c', 'user.email=t@example.invalid', '-c', 'init.defaultBranch=main', '-C', dir, ...args],
    { encoding: 'utf8' },
  ).trim()
}

/** A bare origin with main and the pull request's branch fix-csv (one commit more), and the workspace a clone of it on main. */
function repository(ws: string): { origin: string; branchCommit: string } {
  const origin = mkdtempSync(join(tmpdir(), 'ctxagent-origin-'))
  onTestFinished(() => rmSync(origin, { recursive: true, force: true }))
  git(origin, 'init', '--quiet', '--bare')
  git(ws, 'init', '--quiet')
  git(ws, 'add', '-A')
  git(ws, 'commit', '--quiet', '-m', 'start')
  git(ws, 'remote', 'add', 'origin', origin)
  git(ws, 'push', '--quiet', 'origin', 'main')
  git(ws, 'checkout', '--quiet', '-b', 'fix-csv')
  writeFileSync(join(ws, 'export.js'), 'export const rows = (list) => list\n')
  writeFileSync(join(ws, '.gitattributes'), '*.js filter=evil\n')
  git(ws, 'add', 'export.js', '.gitattributes')
  git(ws, 'commit', '--quiet', '-m', 'the export keeps every row')
  const branchCommit = git(ws, 'rev-parse', 'HEAD')
  git(ws, 'push', '--quiet', 'origin', 'fix-csv')
  git(ws, 'checkout', '--quiet', 'main')
  git(ws, 'branch', '--quiet', '-D', 'fix-csv')
  return { origin, branchCommit }
}

/**
 * What an agent could have written into the repository's config and hooks, each leaving a
 * file in `proof` when git runs it: a post-checkout hook, a smudge filter, an fsmonitor.
 */
function plantPrograms(ws: string, proof: string): void {
  const hook = join(ws, '.git', 'hooks', 'post-checkout')
  writeFileSync(hook, `#!/bin/sh\ntouch ${join(proof, 'hook')}\n`)
  chmodSync(hook, 0o755)
  git(ws, 'config', 'filter.evil.smudge', `sh -c 'touch ${join(proof, 'filter')}; cat'`)
  git(ws, 'config', 'filter.evil.required', 'true')
  git(ws, 'config', 'core.fsmonitor', `sh -c 'touch ${join(proof, 'fsmonitor')}'`)
}

describe('a task on a pull request', () => {
  it('works on its head branch in a worktree (the operator’s checkout unmoved), records pr_head, and inherits from the task that opened it', async () => {
    const gh = await startFakeGithub({ pr: true })
    const s = await runSetup()
    writeFileSync(s.config, s.fake.configYaml(`github:\n  api_url: ${gh.url}\n  token: ${gh.token}\n  bot_name: ctxagent-bot\n`))
    const { branchCommit } = repository(s.ws)
    // The operator has work of their own under way on main.
    writeFileSync(join(s.ws, 'calc.js'), 'export function add(a, b) {\n  return a + b\n}\n')
    const statusBefore = git(s.ws, 'status', '--porcelain')
    const proof = mkdtempSync(join(tmpdir(), 'ctxagent-proof-'))
    onTestFinished(() => rmSync(proof, { recursive: true, force: true }))
    plantPrograms(s.ws, proof)
    // The task that opened the pull request (from issue 41): its delivery record names the pull request.
    const opener = uuidN(41)
    const url = 'https://github.example/acme/shop/pull/42'
    s.tree.write({
      uuid: opener,
      location: 'completed',
      repository: 'acme/shop',
      // The same user's (the run's: the OS user): another user's task is not inherited from (docs/delivery.md#the-review-loop).
      user: userInfo().username,
      state: { delivery: { mode: 'pr', branch: 'fix-csv', commit: branchCommit, pushed: true, pr: { number: 42, url }, refused: null } },
    })
    // Opened by the bot's token through another account (bob): the marker counts by the delivery record.
    Object.assign(gh.pull as Record<string, unknown>, {
      html_url: url,
      body: `The export keeps every row.\n\nCloses #41\n\n<!-- ctxagent:${opener} -->`,
      head: { ref: 'fix-csv', sha: branchCommit },
    })

    s.fake.queue.push({ calls: [{ name: 'write_file', arguments: { path: 'review-note.txt', content: 'addressed\n' } }] }, { content: 'Renamed as asked.' })
    // Not delivered here (delivery from a root-owned checkout is issue 40's item 6, tested with delivery): the worktree and inheritance are the point.
    const res = await s.run(['run', '--github', 'acme/shop#42', '--workspace', s.ws, '--deliver', 'none', '--json'])
    expect(res.code, res.stderr).toBe(0)
    const outcome = JSON.parse(res.stdout) as { uuid: string; inherited_from: string | null }
    expect(outcome.inherited_from).toBe(opener)

    const task = readTask(s.tree, outcome.uuid)
    const worktree = realpathSync(join(s.ws, '.git', 'ctxagent', 'worktrees', 'github-42'))
    expect(task.metadata).toMatchObject({
      task_type: 'github_pull_request',
      inherited_from: opener,
      run: { workspace: worktree, pr_head: { branch: 'fix-csv', number: 42, url } },
    })
    expect(prHeadTarget(normalizeMetadata(task.metadata as Record<string, unknown>))).toEqual({ kind: 'pr-head', branch: 'fix-csv', pr: { number: 42, url } })
    // The worktree is on the pull request's branch, at its head, and the agent wrote there.
    expect(git(worktree, 'rev-parse', '--abbrev-ref', 'HEAD')).toBe('fix-csv')
    expect(git(worktree, 'rev-parse', 'HEAD')).toBe(branchCommit)
    expect(readFileSync(join(worktree, 'review-note.txt'), 'utf8')).toBe('addressed\n')
    expect(existsSync(join(worktree, 'export.js'))).toBe(true)
    // As root, the worktree is the user's the task's commands run as (the workspace's owner).
    if (process.getuid?.() === 0) expect(statSync(join(worktree, 'export.js')).uid).toBe(statSync(s.ws).uid)
    // Nothing the repository's config or hooks name ran.
    expect(readdirSync(proof)).toEqual([])
    // The operator's checkout: still main, the same files and the same uncommitted change.
    expect(git(s.ws, 'rev-parse', '--abbrev-ref', 'HEAD')).toBe('main')
    expect(git(s.ws, 'status', '--porcelain')).toBe(statusBefore)
    expect(existsSync(join(s.ws, 'review-note.txt'))).toBe(false)
    expect(existsSync(join(s.ws, 'export.js'))).toBe(false)
    // The model started from the opener's summary, quoted.
    const first = JSON.stringify(agentRequests(s.fake)[0]?.body.messages)
    expect(first).toContain(`Context inherited from an earlier task on the same issue: ${opener}`)
    expect(first).toContain('Fixed part 1')
  })

  it('a marker in a body the bot did not write, naming a task that delivered nothing, is not believed', async () => {
    const gh = await startFakeGithub({ pr: true })
    const s = await runSetup()
    writeFileSync(s.config, s.fake.configYaml(`github:\n  api_url: ${gh.url}\n  token: ${gh.token}\n  bot_name: ctxagent-bot\n`))
    repository(s.ws)
    const other = uuidN(7)
    s.tree.write({ uuid: other, location: 'completed', repository: 'acme/shop' })
    Object.assign(gh.pull as Record<string, unknown>, { html_url: 'https://github.example/acme/shop/pull/42', body: `<!-- ctxagent:${other} -->` })
    s.fake.queue.push({ content: 'ok' })
    const res = await s.run(['run', '--github', 'acme/shop#42', '--workspace', s.ws, '--json'])
    expect(res.code, res.stderr).toBe(0)
    expect((JSON.parse(res.stdout) as { inherited_from: string | null }).inherited_from).toBeNull()
  })

  it("the opener named by the bot's marker is inherited only when it is the same user's and delivered that very pull request (context.inheritance.across_users opens the first)", {
    timeout: 240_000,
  }, async () => {
    const gh = await startFakeGithub({ pr: true })
    const s = await runSetup()
    const yaml = (more: string) => s.fake.configYaml(`github:\n  api_url: ${gh.url}\n  token: ${gh.token}\n  bot_name: ctxagent-bot\n${more}`)
    writeFileSync(s.config, yaml(''))
    const { branchCommit } = repository(s.ws)
    const url = 'https://github.example/acme/shop/pull/42'
    const delivered = (n: number) => ({
      delivery: { mode: 'pr', branch: 'fix-csv', commit: branchCommit, pushed: true, pr: { number: n, url: url.replace('42', String(n)) }, refused: null },
    })
    // Another user's task that delivered this pull request, and the run's own user's task that delivered another one.
    const mallory = uuidN(51)
    s.tree.write({ uuid: mallory, location: 'completed', repository: 'acme/shop', user: 'mallory', state: delivered(42) })
    const mine = uuidN(52)
    s.tree.write({ uuid: mine, location: 'completed', repository: 'acme/shop', user: userInfo().username, state: delivered(43) })
    const ask = async (opener: string) => {
      // The bot's own account wrote the body: the marker is believed as ctxagent's, and the opener's record still decides.
      Object.assign(gh.pull as Record<string, unknown>, {
        html_url: url,
        user: { login: 'ctxagent-bot' },
        body: `Fixed.\n\n<!-- ctxagent:${opener} -->`,
        head: { ref: 'fix-csv', sha: branchCommit },
      })
      s.fake.queue.push({ content: 'ok' })
      const res = await s.run(['run', '--github', 'acme/shop#42', '--workspace', s.ws, '--deliver', 'none', '--json'])
      expect(res.code, res.stderr).toBe(0)
      const outcome = JSON.parse(res.stdout) as { uuid: string; inherited_from: string | null }
      // Gone again: the next run must not inherit from this one by the pull request's key.
      rmSync(readTask(s.tree, outcome.uuid).dir, { recursive: true, force: true })
      return outcome.inherited_from
    }
    expect(await ask(mallory)).toBeNull()
    expect(await ask(mine)).toBeNull()
    expect(JSON.stringify(agentRequests(s.fake))).not.toContain('Context inherited')
    writeFileSync(s.config, yaml('context:\n  inheritance:\n    across_users: true\n'))
    expect(await ask(mallory)).toBe(mallory)
  })
})
