import { describe, expect, it } from 'vitest'
import { findingsText } from '../helpers/run.js'
import { exitOf } from '../helpers/wait.js'
import { onlyTask, waitFor } from '../run/harness.js'
import { branches, deliverySetup, FIXED, git, write } from './setup.js'

/**
 * docs/delivery.md#a-crash-during-delivery: an agent SIGKILLed while its PR is being opened
 * (the forge has made it; the agent never heard) leaves its task, answer recorded and
 * delivery not, for the reaper; `watch-locks` pauses it to be resumed (fleet.recovery's
 * default, resume), and the resume delivers once: one branch, one commit, one PR.
 */
describe('an agent that died delivering, found by the reaper', () => {
  it('is paused to be resumed; the resume finds the PR the forge opened and opens no other', { timeout: 180_000 }, async () => {
    const s = await deliverySetup('github')
    const gh = s.gh as NonNullable<typeof s.gh>
    s.fake.queue.push(write('calc.js', FIXED), { content: 'Fixed add.' })
    let answer = (): void => undefined
    gh.holdOpened = new Promise<void>((resolve) => (answer = resolve))
    const child = s.spawn(['run', '--github', 'acme/shop#42', '--workspace', s.ws, '--deliver', 'pr'])
    await waitFor('the PR opened on the forge', () => gh.pulls.length === 1)
    const pid = child.pid
    child.kill('SIGKILL')
    await exitOf(child)
    gh.holdOpened = null
    answer()
    const dead = onlyTask(s.tree)
    expect(dead.location).toBe('running')
    expect(typeof dead.state.final_answer).toBe('string')
    expect(dead.state.delivery).toBeUndefined()
    const branch = `ctxagent/42-${dead.uuid.slice(0, 8)}`
    const committed = git(['--git-dir', s.bare, 'rev-parse', `refs/heads/${branch}`], '/')

    // The clock the test controls (CTXAGENT_NOW): an hour on, the dead agent's heartbeat is past stale_after.
    const later = { CTXAGENT_NOW: new Date(Date.now() + 3_600_000).toISOString() }
    const reaped = await s.cli(['watch-locks', '--once', '--json'], later)
    expect(reaped.code, reaped.stderr).toBe(0)
    const findings = findingsText(reaped.stdout)
      .trim()
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l) as { uuid: string; action: string; pid: number | null })
    expect(findings, reaped.stdout + reaped.stderr).toEqual([expect.objectContaining({ uuid: dead.uuid, action: 'reaped', pid })])
    const paused = onlyTask(s.tree)
    expect(paused.location).toBe('paused')
    expect(paused.state).toMatchObject({ status: 'paused', paused_by: 'reaper', final_answer: dead.state.final_answer })
    expect(paused.state.error).toMatch(new RegExp(`^agent died: pid ${pid} on .*; paused to be resumed$`))
    expect(paused.state.delivery).toBeUndefined()
    // A second pass finds nothing left to do.
    const again = await s.cli(['watch-locks', '--once', '--json'], later)
    expect(findingsText(again.stdout).trim()).toBe('')

    const turns = s.fake.requests.length
    const res = await s.cli(['run', '--resume', dead.uuid, '--json'])
    expect(res.code, res.stderr).toBe(0)
    // The resume finishes the ending: no other turn (a request offering tools); only the final summary.
    expect(s.fake.requests.slice(turns).filter((r) => Array.isArray(r.body.tools))).toEqual([])
    const done = onlyTask(s.tree)
    expect(done.location).toBe('completed')
    expect(done.state.status).toBe('completed')
    expect(done.state.delivery).toEqual({ mode: 'pr', branch, commit: committed, pushed: true, pr: { number: 100, url: gh.pulls[0]?.html_url }, refused: null })
    expect(gh.pulls).toHaveLength(1)
    expect(gh.requests.filter((r) => r.method === 'POST' && r.path === '/repos/acme/shop/pulls')).toHaveLength(1)
    expect(branches(s.bare).sort()).toEqual([branch, 'main'].sort())
    expect(git(['--git-dir', s.bare, 'rev-parse', `refs/heads/${branch}`], '/')).toBe(committed)
    expect(git(['rev-list', '--count', `main..${branch}`], s.ws)).toBe('1')
  })
})
