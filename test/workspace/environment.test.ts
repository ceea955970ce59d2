import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { giveToSandbox } from '../helpers/sandbox-owner.js'
import { readTask, runSetup } from '../run/harness.js'
import type { RunSetup } from '../run/harness.js'
import { git, makeOrigin, write } from './repo.js'

/*
 * Repository environments (docs/environments.md) through the real `ctxagent run`: bwrap,
 * git repositories with an origin, the fake LLM counting requests. Setup leaves its marks
 * in the files it makes (deps/), the only way anything of it reaches a task.
 */

const ENV_FILE = (setup: string, extra = '') =>
  `setup: |\n  ${setup.split('\n').join('\n  ')}\ncache:\n  paths: [deps]\n  key: [deps.lock]\ntest: cat deps/marker\n${extra}`

const SETUP = 'echo SETUP-OUTPUT-LINE\nmkdir -p deps\necho "installed from $(cat deps.lock)" > deps/marker'

/** Runs one task in `ws` whose agent runs `command` (when given) and finishes; its uuid, exit code and files. */
async function task(s: RunSetup, ws: string, command: string | null) {
  s.fake.queue.push(...(command === null ? [] : [{ calls: [{ name: 'run_command', arguments: { command, timeout_seconds: 60 } }] }]), {
    calls: [{ name: 'finish', arguments: { summary: 'done', status: 'done' } }],
  })
  const r = await s.run(['run', '--task', 'look at the project', '--workspace', ws, '--allow-shell', '--json'])
  const uuid = (JSON.parse(r.stdout || '{}') as { uuid?: string }).uuid
  if (uuid === undefined) throw new Error(`no outcome: ${r.stderr}`)
  return { code: r.code, stderr: r.stderr, ...readTask(s.tree, uuid) }
}

const log = (dir: string) => (existsSync(join(dir, 'setup.log')) ? readFileSync(join(dir, 'setup.log'), 'utf8') : '')
const text = (messages: unknown[]) => JSON.stringify(messages)

describe('repository environments', () => {
  it('runs setup once per key and restores its result into a second task; the output stays in the setup log, a task writing into its copy leaves the cache as it was', {
    timeout: 180_000,
  }, async () => {
    const s = await runSetup()
    const origin = makeOrigin({ 'deps.lock': 'v1\n', '.ctxagent/environment.yml': ENV_FILE(SETUP) })
    const first = await task(s, origin.clone(), 'cat deps/marker; echo tampered > deps/marker; cat deps/marker')
    expect(first.code, first.stderr).toBe(0)
    expect(first.state.environment).toMatchObject({ status: 'ready', cache: 'miss', restored: ['deps'], test: 'cat deps/marker' })
    expect(log(first.dir)).toContain('SETUP-OUTPUT-LINE')
    expect(text(first.messages)).not.toContain('SETUP-OUTPUT-LINE')
    expect(text(first.messages)).toContain('installed from v1')
    expect(text(first.messages)).toContain("The repository's test command is `cat deps/marker`")
    // ctxagent ran the test command itself once the agent finished: the agent's own change shows.
    expect(first.state.test_run).toMatchObject({ command: 'cat deps/marker', exit_code: 0, timed_out: false })
    expect((first.state.test_run as { tail: string }).tail).toContain('tampered')

    const second = await task(s, origin.clone(), 'cat deps/marker')
    expect(second.code, second.stderr).toBe(0)
    expect(second.state.environment).toMatchObject({ status: 'ready', cache: 'hit', restored: ['deps'] })
    expect(log(second.dir)).not.toContain('SETUP-OUTPUT-LINE')
    // The first task's write went to its own copy: the second gets setup's file as setup made it.
    expect(JSON.stringify(second.tools)).toContain('installed from v1')
    expect((second.state.test_run as { tail: string }).tail).toContain('installed from v1')
    expect((second.state.test_run as { tail: string }).tail).not.toContain('tampered')
    const view = await s.run(['view', second.uuid])
    expect(view.stdout).toMatch(/Environment: \.ctxagent\/environment\.yml \(origin\/HEAD at [0-9a-f]{12}\); cache hit; restored deps/)
    expect(view.stdout).toMatch(/Test command: `cat deps\/marker`: exit 0 \(\d+\.\ds\)/)
  })

  it("reads the environment from the default branch: one changed on the task's branch (a PR head) is not used", { timeout: 180_000 }, async () => {
    const s = await runSetup()
    const origin = makeOrigin({ 'deps.lock': 'v1\n', '.ctxagent/environment.yml': ENV_FILE(SETUP) })
    const ws = origin.clone()
    git(ws, 'checkout', '--quiet', '-b', 'pr-head')
    write(ws, { '.ctxagent/environment.yml': ENV_FILE('mkdir -p deps\necho HOSTILE > deps/marker\necho HOSTILE-SETUP'), 'deps.lock': 'v2\n' })
    git(ws, 'commit', '--quiet', '-am', 'a pull request changes the environment')
    giveToSandbox(ws)
    const t = await task(s, ws, 'cat deps/marker')
    expect(t.code, t.stderr).toBe(0)
    expect(t.state.environment).toMatchObject({ status: 'ready', file: expect.stringContaining('origin/HEAD') })
    expect(log(t.dir)).toContain('SETUP-OUTPUT-LINE')
    expect(log(t.dir)).not.toContain('HOSTILE')
    // Setup ran on the default branch's files (its lockfile, v1), not the head's.
    expect(JSON.stringify(t.tools)).toContain('installed from v1')
    expect(JSON.stringify(t.tools)).not.toContain('HOSTILE')
  })

  it('ends a task whose setup fails setup_failed (exit 7) before any LLM request, with the log tail', { timeout: 120_000 }, async () => {
    const s = await runSetup()
    const origin = makeOrigin({ 'deps.lock': 'v1\n', '.ctxagent/environment.yml': ENV_FILE('echo cannot-install >&2\nexit 3') })
    const t = await task(s, origin.clone(), null)
    expect(t.code).toBe(7)
    expect(t.location).toBe('completed')
    expect(t.state.status).toBe('setup_failed')
    expect(t.state.environment).toMatchObject({ status: 'setup_failed', cache: 'failed', error: 'setup exited with 3' })
    expect((t.state.environment as { tail: string }).tail).toContain('cannot-install')
    expect(log(t.dir)).toContain('cannot-install')
    expect(s.fake.requests).toHaveLength(0)
    expect(t.messages).toEqual([])
    expect(readdirSync(join(s.tree.base, 'completed')).length).toBeGreaterThan(0)
    expect((await s.run(['view', t.uuid])).stdout).toContain('Environment: setup failed: setup exited with 3')
  })
})
