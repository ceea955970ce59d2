import { chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { exitOf } from '../helpers/wait.js'
import { readTask, runSetup, waitFor } from '../run/harness.js'
import { makeOrigin } from './repo.js'

/*
 * One setup per key, however many tasks need it at once (docs/environments.md#the-cache):
 * two real `ctxagent run` processes on a changed lockfile. The setup holds on a barrier
 * (a directory shown read-only to sandboxed commands, tools.sandbox_read_only) until
 * both tasks exist and one holds the key's lock, so the other is waiting for certain.
 */

describe('one setup per key', () => {
  it('a changed lockfile runs setup again exactly once while two tasks wait for it at the same time', { timeout: 240_000 }, async () => {
    const barrier = mkdtempSync(join(tmpdir(), 'ctxagent-barrier-'))
    onTestFinished(() => rmSync(barrier, { recursive: true, force: true }))
    chmodSync(barrier, 0o755)
    const s = await runSetup(`tools:\n  shell: true\n  sandbox_read_only: [${barrier}]\n`)
    const setup = `echo SETUP-RAN\nwhile [ ! -e ${barrier}/go ]; do sleep 0.1; done\nmkdir -p deps\ncat deps.lock > deps/marker`
    const env = `setup: |\n  ${setup.split('\n').join('\n  ')}\ncache:\n  paths: [deps]\n  key: [deps.lock]\ntest: cat deps/marker\n`
    const origin = makeOrigin({ 'deps.lock': 'v1\n', '.ctxagent/environment.yml': env })
    writeFileSync(join(barrier, 'go'), '')
    const finish = { calls: [{ name: 'finish', arguments: { summary: 'done', status: 'done' } }] }
    s.fake.queue.push(finish)
    const warm = await s.run(['run', '--task', 'first', '--workspace', origin.clone(), '--json'])
    expect(warm.code, warm.stderr).toBe(0)

    // The lockfile changes on the default branch; two tasks start on it at once.
    origin.commit({ 'deps.lock': 'v2\n' })
    rmSync(join(barrier, 'go'))
    s.fake.queue.push(finish, finish)
    const a = s.start(['run', '--task', 'second', '--workspace', origin.clone(), '--json'])
    const b = s.start(['run', '--task', 'third', '--workspace', origin.clone(), '--json'])
    const store = join(s.tree.base, 'environments')
    // Both tasks exist and one holds the new key's lock: the other can only be waiting.
    await waitFor('two tasks in running/ and a held lock', () => {
      const running = readdirSync(join(s.tree.base, 'running')).length === 2
      const locks = readdirSync(store, { recursive: true }).filter((p) => String(p).endsWith('.lock'))
      return running && locks.length === 1
    })
    writeFileSync(join(barrier, 'go'), '')
    const [ea, eb] = await Promise.all([exitOf(a.child), exitOf(b.child)])
    expect([ea.code, eb.code], a.err() + b.err()).toEqual([0, 0])
    const tasks = [a, b].map((t) => readTask(s.tree, (JSON.parse(t.out()) as { uuid: string }).uuid))
    const caches = tasks.map((t) => (t.state.environment as { cache: string }).cache).sort()
    expect(caches).toEqual(['hit', 'miss'])
    const logs = tasks.map((t) => (existsSync(join(t.dir, 'setup.log')) ? readFileSync(join(t.dir, 'setup.log'), 'utf8') : ''))
    expect(logs.filter((l) => l.includes('SETUP-RAN'))).toHaveLength(1)
    for (const t of tasks) expect((t.state.test_run as { tail: string }).tail).toContain('v2')
    // Two entries now: v1's and v2's, and no lock left behind.
    const entries = readdirSync(store, { recursive: true }).map(String)
    expect(entries.filter((p) => p.endsWith('entry.json'))).toHaveLength(2)
    expect(entries.filter((p) => p.endsWith('.lock'))).toEqual([])
  })
})
