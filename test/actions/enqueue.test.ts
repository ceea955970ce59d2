import { describe, expect, it } from 'vitest'
import { CLI } from '../../src/actions/actor.js'
import { enqueueJob, queueResume, resumeRequest } from '../../src/actions/enqueue.js'
import { createCommandEnv } from '../../src/command-env.js'
import { CtxError } from '../../src/errors.js'
import { resolveTask } from '../../src/storage/fs/layout.js'
import { makeTree, uuidN } from '../fixtures/tree.js'

// The checks enqueueJob and queueResume make before any database is reached; the queue
// itself is tested on PostgreSQL in test/fleet/.

async function refusal(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => 'no refusal',
    (err: unknown) => err,
  )
}

describe('resumeRequest: the resume job of a paused task', () => {
  it("is a resume of the task for the user its metadata names, with the caller's priority, key and cap", () => {
    const tree = makeTree()
    tree.write({ uuid: uuidN(1), location: 'paused', user: 'ana' })
    const ref = resolveTask(tree.layout, uuidN(1))
    expect(resumeRequest(ref)).toEqual({ uuid: uuidN(1), kind: 'resume', spec: {}, priority: 0, user: 'ana', key: null })
    expect(resumeRequest(ref, { priority: 5, key: 'k1', maxCostUsd: 2.5 })).toEqual({
      uuid: uuidN(1),
      kind: 'resume',
      spec: { max_cost_usd: 2.5 },
      priority: 5,
      user: 'ana',
      key: 'k1',
    })
  })

  it('refuses a running task (pause it first) and a finished one (enqueue a new task), exit 4', () => {
    const tree = makeTree()
    tree.write({ uuid: uuidN(2), location: 'running' })
    tree.write({ uuid: uuidN(3), location: 'completed' })
    const running = resolveTask(tree.layout, uuidN(2))
    const finished = resolveTask(tree.layout, uuidN(3))
    expect(() => resumeRequest(running)).toThrow(
      expect.objectContaining({ exitCode: 4, message: `task ${uuidN(2)} is running (in running/), not paused`, hint: 'pause it first with ctxagent pause' }),
    )
    expect(() => resumeRequest(finished)).toThrow(expect.objectContaining({ exitCode: 4, message: `task ${uuidN(3)} is finished (in completed/), not paused` }))
  })
})

describe('enqueueJob and queueResume: refusals before the database', () => {
  it('refuse a job a worker would refuse (exit 2), without reaching a database', async () => {
    const tree = makeTree()
    // No database at all: a refusal that reached for one would say so instead.
    const ctx = await createCommandEnv({ home: tree.base, config: 'none' }, {})
    const bad = await refusal(enqueueJob(ctx, { uuid: 'not-a-uuid', kind: 'new', spec: {}, priority: 0, user: null, key: null }, CLI))
    expect(bad).toBeInstanceOf(CtxError)
    expect(bad).toMatchObject({ exitCode: 2, hint: 'check the flags' })
    expect((bad as Error).message).toMatch(/^the job is not valid: /)
  })

  it('refuse to queue a resume where there is no fleet, naming the command to run on a host (exit 4)', async () => {
    const tree = makeTree()
    tree.write({ uuid: uuidN(4), location: 'paused' })
    const ctx = await createCommandEnv({ home: tree.base, config: 'none' }, {})
    const err = await refusal(queueResume(ctx, resolveTask(tree.layout, uuidN(4)), { via: 'serve', operator: 'gina' }))
    expect(err).toMatchObject({
      exitCode: 4,
      message: `task ${uuidN(4)} is paused, and there is no fleet to queue its resume in`,
      hint: `run ctxagent run --resume ${uuidN(4)} on a host, or set fleet.database_url`,
    })
  })
})
