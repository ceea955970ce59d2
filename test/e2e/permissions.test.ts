import { spawnSync } from 'node:child_process'
import { chmodSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { makeTree, uuidN } from '../fixtures/tree.js'
import { BIN, cli, ROOT } from '../helpers/run.js'
import { snapshotTree } from '../helpers/tree-snapshot.js'

/** Another user's task tree (0700 directories): one line that says permission denied, never "no such task", nothing changed. */
const NOBODY = 65534
// Root, and a checkout that user nobody can run (a clone inside a 0700 directory cannot be).
const ROOT_USER = process.getuid?.() === 0 && spawnSync(process.execPath, [BIN, '--version'], { uid: NOBODY, gid: NOBODY }).status === 0

describe.skipIf(!ROOT_USER)('a task tree this user may not read', () => {
  it('every command says permission denied in one line, with the path, and changes nothing', () => {
    const tree = makeTree()
    chmodSync(tree.base, 0o755) // the top is visible; running/, paused/, completed/ stay 0700 and root's
    for (const location of ['running', 'paused', 'completed'] as const) chmodSync(tree.layout.dir(location), 0o700)
    tree.write({ uuid: uuidN(0x51), location: 'completed', messages: 4 })
    expect(cli(['reindex', '--home', tree.base]).code).toBe(0)
    const before = snapshotTree(tree.base)
    const cases = [['stats'], ['view', uuidN(0x51)], ['cleanup'], ['watch-locks', '--once'], ['reindex'], ['unlock', uuidN(0x51)], ['compress', uuidN(0x51), '--extractive']]
    for (const args of cases) {
      const res = spawnSync(process.execPath, [BIN, ...args, '--home', tree.base], { cwd: ROOT, uid: NOBODY, gid: NOBODY, encoding: 'utf8', env: { PATH: process.env.PATH, NO_COLOR: '1' } })
      expect(res.status, `${args[0]}: ${res.stderr}`).toBe(1)
      expect(res.stderr.trimEnd().split('\n'), args[0]).toEqual([expect.stringMatching(new RegExp(`^ctxagent: permission denied: ${tree.base}/\\S+ \\(run ctxagent as the user that owns the task tree`))])
    }
    expect(snapshotTree(tree.base)).toEqual(before)
  })
})

if (!ROOT_USER) {
  describe('a task tree this user may not read', () => {
    it.skip('needs root, and a checkout user nobody can read, to run the commands as another user', () => undefined)
  })
}
