import { chmodSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { exitOf } from '../helpers/wait.js'
import { readTask, runSetup, waitFor } from '../run/harness.js'
import { makeOrigin } from './repo.js'

/*
 * A setup whose process died is run again, not waited on forever (docs/environments.md#the-cache):
 * a run is killed (SIGKILL) while its setup holds the key's lock; `env prepare` then waits for
 * that lock to go stale, takes it over and runs setup itself; the next task finds the result.
 */

describe('a setup that died', () => {
  it('is run again by the next one needing its key once its lock is stale; env prepare warms the cache for the task after', { timeout: 300_000 }, async () => {
    const barrier = mkdtempSync(join(tmpdir(), 'ctxagent-barrier-'))
    onTestFinished(() => rmSync(barrier, { recursive: true, force: true }))
    chmodSync(barrier, 0o755)
    const s = await runSetup(`tools:\n  shell: true\n  sandbox_read_only: [${barrier}]\n`)
    const setup = `echo SETUP-RAN\nwhile [ ! -e ${barrier}/go ]; do sleep 0.1; done\nmkdir -p deps\ncat deps.lock > deps/marker`
    const env = `setup: |\n  ${setup.split('\n').join('\n  ')}\ncache:\n  paths: [deps]\n  key: [deps.lock]\ntest: cat deps/marker\n`
    const origin = makeOrigin({ 'deps.lock': 'v1\n', '.ctxagent/environment.yml': env })
    const store = join(s.tree.base, 'environments')
    const dying = s.start(['run', '--task', 'first', '--workspace', origin.clone(), '--json'])
    await waitFor('the setup holding its lock', () => readdirSync(store, { recursive: true }).some((p) => String(p).endsWith('.lock')))
    // Its setup's checkout, named after it (docs/contract.md §16.2): the killed run cannot remove it.
    const leftBy = (pid: number | undefined) => readdirSync(tmpdir()).filter((n) => new RegExp(`^ctxagent-setup-[0-9a-f]{8}-${pid}-`).test(n))
    await waitFor('its setup checkout', () => leftBy(dying.child.pid).length === 1)
    dying.child.kill('SIGKILL')
    await exitOf(dying.child)
    writeFileSync(join(barrier, 'go'), '')

    const warmed = await s.run(['env', 'prepare', '--workspace', origin.clone(), '--json'])
    expect(warmed.code, warmed.stderr).toBe(0)
    expect(JSON.parse(warmed.stdout)).toMatchObject({ status: 'ready', cache: 'miss', restored: [] })
    // The next setup on this host removed it, its maker being gone.
    expect(leftBy(dying.child.pid)).toEqual([])
    expect(s.fake.requests).toHaveLength(0)

    s.fake.queue.push({ calls: [{ name: 'finish', arguments: { summary: 'done', status: 'done' } }] })
    const r = await s.run(['run', '--task', 'second', '--workspace', origin.clone(), '--json'])
    expect(r.code, r.stderr).toBe(0)
    const t = readTask(s.tree, (JSON.parse(r.stdout) as { uuid: string }).uuid)
    expect(t.state.environment).toMatchObject({ status: 'ready', cache: 'hit', restored: ['deps'] })
    expect((t.state.test_run as { tail: string }).tail).toContain('v1')
  })
})
