import { existsSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { parseConfig } from '../../../src/config/load.js'
import { LockedError } from '../../../src/errors.js'
import { Layout, resolveTask } from '../../../src/storage/fs/layout.js'
import { TaskLock } from '../../../src/storage/lock/lock.js'
import { readState } from '../../../src/storage/task/state.js'
import { createTask, resumeTask } from '../../../src/storage/task/lifecycle.js'
import type { TaskEnv } from '../../../src/storage/task/env.js'
import { SqliteStore } from '../../../src/storage/index/store.js'
import { makeTree } from '../../fixtures/tree.js'

const KEY = { task_source: 'github', owner: 'acme', repo: 'shop', task_type: 'issue', task_id: '42' }

function env(base: string): TaskEnv & { warnings: string[] } {
  const warnings: string[] = []
  return {
    layout: new Layout(base),
    config: parseConfig(''),
    index: SqliteStore.open(join(base, 'tasks.db')),
    now: () => new Date(),
    warn: (m) => warnings.push(m),
    warnings,
  }
}

describe('task lifecycle', () => {
  it("refuses a given uuid (a fleet job's) whose task has left running/ already: exit 4, no second directory", async () => {
    const tree = makeTree()
    const e = env(tree.base)
    const uuid = '5d0f7c1e-8a2b-4c3d-9e4f-0a1b2c3d4e5f'
    for (const location of ['completed', 'paused'] as const) {
      tree.write({ uuid, location })
      await expect(createTask(e, { task_key: KEY, user: 'alice' }, { uuid })).rejects.toMatchObject({ exitCode: 4, message: `task ${uuid} already exists` })
      expect(existsSync(e.layout.taskDir('running', uuid))).toBe(false)
      rmSync(e.layout.taskDir(location, uuid), { recursive: true })
    }
    const made = await createTask(e, { task_key: KEY, user: 'alice' }, { uuid })
    expect(made.dir).toBe(e.layout.taskDir('running', uuid))
    await made.fail('done with the test')
  })

  it('creates running/<uuid> with metadata, state, lock and an index row', async () => {
    const base = makeTree().base
    const e = env(base)
    const task = await createTask(e, { task_key: KEY, user: 'alice' })
    const dir = join(base, 'running', task.uuid)
    expect(readdirSync(dir).sort()).toEqual([
      '.lock',
      'current.jsonl',
      'messages.jsonl',
      'metadata.json',
      'planning.jsonl',
      'state.json',
      'summaries.jsonl',
      'tools.jsonl',
    ])
    expect(statSync(dir).mode & 0o777).toBe(0o700)
    const meta = JSON.parse(readFileSync(join(dir, 'metadata.json'), 'utf8')) as Record<string, unknown>
    expect(meta).toMatchObject({
      uuid: task.uuid,
      task_type: 'github_issue',
      task_identifier: '42',
      repository: 'acme/shop',
      user: 'alice',
      process_id: process.pid,
    })
    expect(readState(dir)?.status).toBe('initializing')
    expect(await e.index?.get(task.uuid)).toMatchObject({ status: 'initializing', location: 'running', user: 'alice' })
    await task.fail('test over')
    await e.index?.close()
  })

  it('completes: final summary, counters, lock removed, moved to completed/ with status completed', async () => {
    const base = makeTree().base
    const e = env(base)
    const task = await createTask(e, { task_key: KEY, user: 'alice' })
    await task.setStatus('processing')
    task.addMessage({ role: 'user', content: 'do it' })
    task.addMessage({ role: 'assistant', content: 'done' })
    task.addTool({ tool_name: 'read', arguments: {}, result: 'x', status: 'success', error: null, duration_ms: 1 })
    const hooks: string[] = []
    task.onCompletion(() => void hooks.push('completion'))
    await task.complete('All done; mail me at a@b.example.com')
    const dir = join(base, 'completed', task.uuid)
    expect(hooks).toEqual(['completion'])
    expect(existsSync(join(base, 'running', task.uuid))).toBe(false)
    expect(existsSync(join(dir, '.lock'))).toBe(false)
    expect(readFileSync(join(dir, 'final_summary.txt'), 'utf8')).toBe('All done; mail me at [EMAIL]')
    expect(readState(dir)).toMatchObject({ status: 'completed', message_count: 2, tool_call_count: 1, completed_at: expect.any(String) })
    expect(await e.index?.get(task.uuid)).toMatchObject({
      status: 'completed',
      location: 'completed',
      total_messages: 2,
      total_tool_calls: 1,
      final_message_count: 2,
    })
    expect(() => task.addMessage({ role: 'user', content: 'late' })).toThrow(/no longer open/)
    await e.index?.close()
  })

  it('pauses to paused/ and resumes to running/, continuing seq', async () => {
    const base = makeTree().base
    const e = env(base)
    const task = await createTask(e, { task_key: KEY, user: null })
    task.addMessage({ role: 'user', content: 'one' })
    const stops: string[] = []
    task.onStop(() => void stops.push('stop'))
    await task.pause()
    expect(stops).toEqual(['stop'])
    expect(readState(join(base, 'paused', task.uuid))?.status).toBe('paused')
    const ref = resolveTask(e.layout, task.uuid)
    expect(ref.location).toBe('paused')
    const resumed = await resumeTask(e, ref)
    expect(resumed.dir).toBe(join(base, 'running', task.uuid))
    expect(resumed.state.status).toBe('processing')
    expect(resumed.addMessage({ role: 'user', content: 'two' }).seq).toBe(2)
    await expect(resumeTask(e, resolveTask(e.layout, task.uuid))).rejects.toThrow(/is locked by pid/)
    await resumed.fail('boom', 'timeout')
    const final = readState(join(base, 'completed', task.uuid))
    expect(final).toMatchObject({ status: 'timeout', error: 'boom' })
    await e.index?.close()
  })

  it('refuses to resume a paused task whose lock a live process holds', async () => {
    const base = makeTree().base
    const e = env(base)
    const task = await createTask(e, { task_key: KEY, user: null })
    await task.pause()
    const ref = resolveTask(e.layout, task.uuid)
    const first = await resumeTask(e, ref)
    await expect(TaskLock.acquire(first.dir, { staleAfterMs: 60_000 })).rejects.toThrow(LockedError)
    await first.fail('done')
    await e.index?.close()
  })

  it('works without tasks.db', async () => {
    const base = makeTree().base
    const e = { ...env(base), index: null }
    const task = await createTask(e, { task_key: KEY, user: null })
    await task.complete()
    expect(readState(join(base, 'completed', task.uuid))?.status).toBe('completed')
  })
})
