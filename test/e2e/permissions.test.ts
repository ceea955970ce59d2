import { spawnSync } from 'node:child_process'
import { chmodSync, existsSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { makeTree, uuidN } from '../fixtures/tree.js'
import { BIN, ROOT } from '../helpers/run.js'
import { cliIn } from '../helpers/in-process.js'
import { snapshotTree } from '../helpers/tree-snapshot.js'

/** Another user's task tree (0700 directories): one line that says permission denied, never "no such task", nothing changed. */
const NOBODY = 65534
// Root, and a checkout that user nobody can run (a clone inside a 0700 directory cannot be).
const ROOT_USER = process.getuid?.() === 0 && spawnSync(process.execPath, [BIN, '--version'], { uid: NOBODY, gid: NOBODY }).status === 0

describe.skipIf(!ROOT_USER)('a task tree this user may not read', () => {
  it('every command says permission denied in one line, with the path, and changes nothing', async () => {
    const tree = makeTree()
    chmodSync(tree.base, 0o755) // the top is visible; running/, paused/, completed/ stay 0700 and root's
    for (const location of ['running', 'paused', 'completed'] as const) chmodSync(tree.layout.dir(location), 0o700)
    tree.write({ uuid: uuidN(0x51), location: 'completed', messages: 4 })
    expect((await cliIn(['reindex', '--home', tree.base])).code).toBe(0)
    const before = snapshotTree(tree.base)
    const cases = [
      ['stats'],
      ['view', uuidN(0x51)],
      ['cleanup'],
      ['watch-locks', '--once'],
      ['reindex'],
      ['unlock', uuidN(0x51)],
      ['compress', uuidN(0x51), '--extractive'],
    ]
    for (const args of cases) {
      const res = spawnSync(process.execPath, [BIN, ...args, '--home', tree.base], {
        cwd: ROOT,
        uid: NOBODY,
        gid: NOBODY,
        encoding: 'utf8',
        env: { PATH: process.env.PATH, NO_COLOR: '1' },
      })
      expect(res.status, `${args[0]}: ${res.stderr}`).toBe(1)
      expect(res.stderr.trimEnd().split('\n'), args[0]).toEqual([
        expect.stringMatching(new RegExp(`^ctxagent: permission denied: ${tree.base}/\\S+ \\(run ctxagent as the user that owns the task tree`)),
      ])
    }
    expect(snapshotTree(tree.base)).toEqual(before)
  })

  it('cleanup goes on past one task it cannot read: the others are cleaned, that one is named, exit 1', async () => {
    const tree = makeTree()
    const old = '2020-01-01T00:00:00.000Z'
    for (const n of [0x61, 0x62, 0x63]) tree.write({ uuid: uuidN(n), location: 'completed', completedAt: old, messages: 4 })
    const own = spawnSync('chown', ['-R', `${NOBODY}:${NOBODY}`, tree.base])
    expect(own.status).toBe(0)
    chmodSync(join(tree.layout.taskDir('completed', uuidN(0x62)), 'state.json'), 0o000)
    const run = (args: string[]) =>
      spawnSync(process.execPath, [BIN, ...args, '--home', tree.base], {
        cwd: ROOT,
        uid: NOBODY,
        gid: NOBODY,
        encoding: 'utf8',
        env: { PATH: process.env.PATH, NO_COLOR: '1' },
      })
    const res = run(['cleanup', '--compress-after', '1d', '--delete-after', '10000d', '--json'])
    expect(res.status, res.stderr).toBe(1)
    expect(res.stderr.trimEnd().split('\n')).toEqual([
      expect.stringMatching(/^ctxagent: 1 task\(s\) in completed\/ could not be cleaned up.*permission denied: .*state\.json/),
    ])
    const report = JSON.parse(res.stdout) as { compressed: { uuid: string }[]; failed: { uuid: string }[] }
    expect(report.compressed.map((t) => t.uuid).sort()).toEqual([uuidN(0x61), uuidN(0x63)])
    expect(report.failed.map((t) => t.uuid)).toEqual([uuidN(0x62)])
    expect(existsSync(join(tree.layout.taskDir('completed', uuidN(0x62)), 'messages.jsonl'))).toBe(true)
  })
})

if (!ROOT_USER) {
  describe('a task tree this user may not read', () => {
    it.skip('needs root, and a checkout user nobody can read, to run the commands as another user', () => undefined)
  })
}
