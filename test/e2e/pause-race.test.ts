import { existsSync, mkdirSync, renameSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { askOwner } from '../../src/run/control.js'
import { FILES, resolveTask } from '../../src/storage/fs/layout.js'
import { makeTree, uuidN } from '../fixtures/tree.js'
import { cliAsync, helper } from '../helpers/run.js'
import { exitOf, lineFrom, sleep } from '../helpers/wait.js'

/*
 * Issue #27 item 16: pause (and compress) racing a task's finish printed a raw
 * "ENOENT … mkdir …/.inbox.lock" about 1 in 20 times: the request was appended under
 * running/<uuid> just after the task had moved to completed/.
 */
describe('pause racing a task that finishes', () => {
  it('askOwner, when the task left running/ before its request was written, asks no one and says where the task is', async () => {
    const tree = makeTree()
    const uuid = uuidN(0x16)
    tree.write({ uuid, location: 'running', messages: 3 })
    const ref = resolveTask(tree.layout, uuid)
    // What the race leaves: the task resolved in running/, then moved by its finishing owner.
    mkdirSync(join(tree.base, 'completed'), { recursive: true })
    renameSync(ref.dir, tree.layout.taskDir('completed', uuid))
    const asked = await askOwner(tree.layout, ref, 'pause', 'tester', 5_000, () => new Date())
    expect(asked).toEqual({ reply: null, location: 'completed', sent: false })
    expect(existsSync(ref.dir)).toBe(false)
  })

  it('ctxagent pause while its task finishes: exit 0 or 4 with one line saying so, never a raw error (looped)', { timeout: 600_000 }, async () => {
    const seen: Record<string, number> = {}
    for (let i = 0; i < 16; i++) {
      const tree = makeTree()
      const owner = helper('finisher.mjs', [tree.base, '0'])
      const uuid = (await lineFrom(owner, /^[0-9a-f-]{36}$/)).trim()
      const inbox = join(tree.layout.taskDir('running', uuid), FILES.inbox)
      const pausing = cliAsync(['pause', uuid, '--home', tree.base, '--wait', '60s'])
      // The finish is let go at a later moment of pause's run each time (0 to 4.5 s), sweeping the window
      // from "finished before pause looked" to "pause waiting for the owner". Once pause's request is in
      // the inbox it is waiting (this owner never reads it): any later moment is that same case, so the
      // finish goes then rather than at the rest of the try's delay.
      const letGo = Date.now() + i * 300
      while (Date.now() < letGo && !requested(inbox)) await sleep(20)
      writeFileSync(join(tree.base, 'go'), '')
      const [res] = await Promise.all([pausing, exitOf(owner)])
      const line = res.code === 0 ? res.stdout.trim() : res.stderr.trim()
      expect(line, `try ${i}: ${res.stderr}`).toMatch(
        /^(task \S+ finished before it could pause \(in completed\/\)|task \S+ paused .*|ctxagent: task \S+ is finished \(in completed\/\); there is nothing to pause \(check the uuid\))$/,
      )
      expect([0, 4], `try ${i}: ${res.stderr}`).toContain(res.code)
      const kind = line.replace(/[0-9a-f-]{36}/, '<uuid>')
      seen[kind] = (seen[kind] ?? 0) + 1
    }
    // Both sides of the race were reached: the pause came first, or the finish did.
    expect(Object.keys(seen).length, JSON.stringify(seen)).toBeGreaterThan(1)
  })
})

/** Whether a control request has been appended to a task's inbox.jsonl. */
function requested(inbox: string): boolean {
  try {
    return statSync(inbox).size > 0
  } catch {
    return false
  }
}
