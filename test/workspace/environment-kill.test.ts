import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { exitOf } from '../helpers/wait.js'
import { runSetup, waitFor } from '../run/harness.js'
import { makeOrigin } from './repo.js'

/*
 * `run` killed outright (SIGKILL: no exit hook runs) while bwrap is still making setup's
 * sandbox: the sandbox must not outlive it (docs/security.md#what-a-command-cannot-do).
 * bwrap's init arms --die-with-parent only once its mounts are made; a thousand read-only
 * mounts hold it there, so the kill comes while its parent, the monitor, dies with `run`
 * and the init would be left to arm towards a parent already gone and run setup for ever.
 */

/** Processes whose command line holds `needle`, with their parent's pid (proc(5): /proc/<pid>/stat, field 4). */
function processesWith(needle: string): { pid: number; ppid: number }[] {
  return readdirSync('/proc')
    .filter((p) => /^\d+$/.test(p))
    .flatMap((p) => {
      try {
        if (!readFileSync(`/proc/${p}/cmdline`, 'utf8').includes(needle)) return []
        const stat = readFileSync(`/proc/${p}/stat`, 'utf8')
        return [{ pid: Number(p), ppid: Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) }]
      } catch {
        return []
      }
    })
}

describe('run killed with SIGKILL while setup is being sandboxed', () => {
  it('leaves nothing of setup running', { timeout: 240_000 }, async () => {
    const many = mkdtempSync(join(tmpdir(), 'ctxagent-many-'))
    onTestFinished(() => rmSync(many, { recursive: true, force: true }))
    chmodSync(many, 0o755)
    const dirs = Array.from({ length: 1000 }, (_, i) => join(many, String(i)))
    for (const d of dirs) mkdirSync(d)
    const s = await runSetup(`tools:\n  shell: true\n  sandbox_read_only: [${dirs.join(', ')}]\n`)
    for (let round = 0; round < 2; round++) {
      const marker = `${5000 + Math.floor(Math.random() * 1000)}.${process.pid}${round}`
      // A failed round must not leave its sandbox behind for the machine.
      onTestFinished(() => {
        for (const p of processesWith(`sleep ${marker}`)) process.kill(p.pid, 'SIGKILL')
      })
      const origin = makeOrigin({ 'deps.lock': 'v1\n', '.ctxagent/environment.yml': `setup: sleep ${marker}\ncache:\n  paths: [deps]\n  key: [deps.lock]\n` })
      const started = s.start(['run', '--task', 'look', '--workspace', origin.clone(), '--json'])
      // The monitor has a child (bwrap's init, both showing setup's command line): the sandbox is being made.
      await waitFor('the sandbox being made', () => {
        const procs = processesWith(`sleep ${marker}`)
        return procs.some((p) => procs.some((q) => q.pid === p.ppid))
      })
      started.child.kill('SIGKILL')
      expect((await exitOf(started.child)).signal).toBe('SIGKILL')
      // Before the fix the init went on to run `sleep` for ever: this waited in vain.
      await waitFor('setup gone with run', () => processesWith(`sleep ${marker}`).length === 0, 120_000)
      expect(s.fake.requests).toHaveLength(0)
    }
  })
})
