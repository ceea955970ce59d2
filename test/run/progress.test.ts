import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { exitOf } from '../helpers/wait.js'
import { readTask, runSetup, waitFor } from './harness.js'

describe('watch-locks sees a wedged owner', () => {
  it('alive, heartbeat going, no turn done for longer than alerts.no_progress_minutes: an alert with progress_at, never a reap', async () => {
    const s = await runSetup('locks:\n  heartbeat_seconds: 0.5\n  stale_after_seconds: 2\nalerts:\n  no_progress_minutes: 30\n')
    // One turn done, then an LLM request that does not come back: the owner waits, alive.
    s.fake.queue.push({ calls: [{ name: 'read_file', arguments: { path: 'calc.js' } }] }, { delayMs: 120_000, content: 'never' })
    const started = s.start(['run', '--task', 't', '--workspace', s.ws])
    await waitFor('the second request', () => s.fake.requests.length >= 2)
    const uuid = s.tree.layout.list('running')[0] as string
    const lockPath = join(s.tree.layout.taskDir('running', uuid), '.lock')
    const lock = () => JSON.parse(readFileSync(lockPath, 'utf8')) as { heartbeat_at: string; progress_at?: string; acquired_at: string }
    // A heartbeat after the turn carries the turn's progress.
    const progressAt = await waitFor('progress in the lock', () => {
      const l = lock()
      return l.progress_at && l.progress_at > l.acquired_at && l.heartbeat_at > l.progress_at ? l.progress_at : null
    })
    // Now: no alert.
    const now = await s.run(['watch-locks', '--once', '--json'])
    expect(now.code, now.stderr).toBe(0)
    expect(now.stdout).not.toContain('no progress')
    // An hour later by the monitor's clock: the owner is alive, so it is not reaped, but the alert says it is stuck.
    const later = new Date(Date.parse(progressAt) + 3_600_000).toISOString()
    const res = await s.run(['watch-locks', '--once', '--json'], { CTXAGENT_NOW: later })
    expect(res.code, res.stderr).toBe(0)
    const findings = res.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .filter((f) => f.uuid === uuid)
    expect(findings).toContainEqual(
      expect.objectContaining({
        action: 'alert',
        reason: expect.stringMatching(/^no progress for 1h.* \(limit 30m.*\) though pid \d+ is alive/),
        progress_at: progressAt,
        pid: started.child.pid,
      }),
    )
    expect(findings.some((f) => f.action === 'reaped')).toBe(false)
    expect(readTask(s.tree, uuid).location).toBe('running')
    started.child.kill('SIGKILL')
    await exitOf(started.child)
  })
})
