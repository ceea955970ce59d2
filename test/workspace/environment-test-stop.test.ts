import { pidsHolding } from '../helpers/processes.js'
import { describe, expect, it } from 'vitest'
import { exitOf } from '../helpers/wait.js'
import { readTask, runSetup, waitFor } from '../run/harness.js'
import { makeOrigin } from './repo.js'

/*
 * A stop during the test command ctxagent runs after a completed agent
 * (docs/environments.md#the-test-command): the command is ended at once (killed:
 * exit_code null), nothing of it is left, and the completed task's ending goes on; `run`
 * does not wait out the command's 10 minutes.
 */

describe('a stop during the test command', () => {
  it('ends it, leaves nothing running, and the completed task ends', { timeout: 240_000 }, async () => {
    const s = await runSetup('tools:\n  shell: true\n')
    const marker = `${6000 + Math.floor(Math.random() * 1000)}.${process.pid}`
    const env = `setup: mkdir -p deps\ncache:\n  paths: [deps]\ntest: sleep ${marker}\n`
    const origin = makeOrigin({ '.ctxagent/environment.yml': env })
    s.fake.queue.push({ calls: [{ name: 'finish', arguments: { summary: 'done', status: 'done' } }] })
    const started = s.start(['run', '--task', 'look', '--workspace', origin.clone(), '--json'])
    await waitFor('the test command running', () => pidsHolding(`sleep ${marker}`).length > 0, 120_000)
    started.child.kill('SIGTERM')
    // Before the fix this waited for the test command's 10 minutes.
    const ended = await exitOf(started.child)
    expect(ended.code, started.err()).toBe(0)
    expect(pidsHolding(`sleep ${marker}`)).toEqual([])
    const uuid = (JSON.parse(started.out()) as { uuid: string }).uuid
    const task = readTask(s.tree, uuid)
    expect(task.location).toBe('completed')
    expect(task.state.test_run).toMatchObject({ command: `sleep ${marker}`, exit_code: null, timed_out: false })
  })
})
