import { chmodSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs'
import { pidsHolding } from '../helpers/processes.js'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { exitOf, sleep } from '../helpers/wait.js'
import { readTask, runSetup, waitFor } from '../run/harness.js'
import { makeOrigin } from './repo.js'

/*
 * A stop during setup (docs/environments.md#a-stop-during-setup): SIGTERM to a real `run`
 * whose setup waits on a barrier ends setup's processes at once (none is left), pauses the
 * task before any LLM request (exit 143), caches nothing; its resume prepares again, with
 * the operator's entry the task started with (an eval's trial names its repository, docs/eval.md#a-trial).
 */

describe('a stop during setup', () => {
  it('ends setup at once, leaves no process, pauses the task without an LLM request; the resume prepares the environment again', {
    timeout: 240_000,
  }, async () => {
    const barrier = mkdtempSync(join(tmpdir(), 'ctxagent-barrier-'))
    onTestFinished(() => rmSync(barrier, { recursive: true, force: true }))
    chmodSync(barrier, 0o755)
    const s = await runSetup(`tools:\n  shell: true\n  sandbox_read_only: [${barrier}]\nenvironments:\n  acme/shop:\n    test: cat deps/marker\n`)
    // Sleeps until killed unless the barrier is open; its sleep's argument marks it among the host's processes.
    const marker = `${4000 + Math.floor(Math.random() * 1000)}.${process.pid}`
    const setup = `if [ -e ${barrier}/go ]; then mkdir -p deps; cat deps.lock > deps/marker; else echo SETUP-WAITING; sleep ${marker}; fi`
    const env = `setup: |\n  ${setup}\ncache:\n  paths: [deps]\n  key: [deps.lock]\n`
    const origin = makeOrigin({ 'deps.lock': 'v1\n', '.ctxagent/environment.yml': env })
    // As an eval's trial starts its task: the repository its workspace was made from names the operator's entry.
    const started = s.start(['run', '--task', 'look', '--workspace', origin.clone(), '--environment-of', 'acme/shop', '--json'])
    // Setup's output is masked in pieces, so its log may hold it back: its process is what shows it waits.
    await waitFor("setup's sleep running", () => pidsHolding(`sleep ${marker}`).length > 0)
    const uuid = s.tree.layout.list('running')[0] as string
    // Whatever happens below, no setup is left running for the rest of the suite.
    onTestFinished(() => {
      for (const pid of pidsHolding(`sleep ${marker}`)) process.kill(pid, 'SIGKILL')
    })
    started.child.kill('SIGTERM')
    // A run that does not end is a failure of its own, said at once, not the test's timeout (its setup held the pipes open).
    const ended = await Promise.race([exitOf(started.child), sleep(120_000).then(() => null)])
    if (ended === null) started.child.kill('SIGKILL')
    expect(ended, `run did not end on SIGTERM; setup's processes: ${pidsHolding(`sleep ${marker}`).join(' ')}\n${started.err()}`).not.toBeNull()
    expect(ended?.code, started.err()).toBe(143)
    expect(pidsHolding(`sleep ${marker}`)).toEqual([])
    expect(s.fake.requests).toHaveLength(0)
    const paused = readTask(s.tree, uuid)
    expect(paused.location).toBe('paused')
    expect(paused.state.environment).toMatchObject({ status: 'stopped', cache: 'none', error: 'stopped during setup', operator: 'acme/shop' })
    // Nothing was cached: no entry, no lock left behind.
    const store = join(s.tree.base, 'environments')
    expect(readdirSync(store, { recursive: true }).filter((p) => String(p).endsWith('entry.json') || String(p).endsWith('.lock'))).toEqual([])
    expect((await s.run(['view', uuid])).stdout).toContain('Environment: not ready: stopped during setup')

    writeFileSync(join(barrier, 'go'), '')
    s.fake.queue.push({ calls: [{ name: 'finish', arguments: { summary: 'done', status: 'done' } }] })
    const resumed = await s.run(['run', '--resume', uuid, '--json'])
    expect(resumed.code, resumed.stderr).toBe(0)
    const done = readTask(s.tree, uuid)
    // The resume (no flag) matches the entry the task started with: metadata.json's run.environment_of.
    expect(done.state.environment).toMatchObject({ status: 'ready', cache: 'miss', restored: ['deps'], operator: 'acme/shop', test: 'cat deps/marker' })
    // The note that the environment is ready reaches the first request, once.
    const sent = JSON.stringify(s.fake.requests[0]?.body.messages)
    expect(sent.split("The repository's environment is ready").length - 1).toBe(1)
  })
})
