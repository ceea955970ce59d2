import { mkdirSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { endedElsewhere, settle, taskSnapshot } from '../../src/fleet/queue/task-outcome.js'
import type { Job } from '../../src/fleet/queue/job.js'
import { makeTree, uuidN } from '../fixtures/tree.js'

const job = (uuid: string): Job => ({
  id: 1,
  task_uuid: uuid,
  kind: 'resume',
  spec: {},
  state: 'running',
  priority: 0,
  attempts: 1,
  claimed_by: 'w',
  user: null,
})

describe('endedElsewhere: a job whose task another process took', () => {
  it('waits while the task is in running/, and ends in state failed once the task is gone (not done)', () => {
    const tree = makeTree()
    const uuid = '0b5c4a52-6a4e-4b8e-9d51-0a4a2c1f3e77'
    mkdirSync(tree.layout.taskDir('running', uuid), { recursive: true })
    expect(endedElsewhere(tree.layout, job(uuid))).toBeNull()
    expect(endedElsewhere(tree.layout, job('1f0e4d2c-3b4a-4c5d-8e6f-7a8b9c0d1e2f'))).toEqual({ outcome: 'failed', failed: true, error: 'its task is gone' })
  })
})

describe("a job whose agent died between its task's move to completed/ and its last state write", () => {
  it('ends completed, not with the word of that instant (completing)', () => {
    const tree = makeTree()
    const uuid = uuidN(7)
    tree.write({ uuid, location: 'completed', status: 'completing' })
    const died = { stopped: false, lastLine: '' }
    expect(settle({ task: taskSnapshot(tree.layout, uuid, null), code: 137, child: died, retry: undefined })).toEqual({ outcome: 'completed', error: null })
    expect(endedElsewhere(tree.layout, job(uuid))).toEqual({ outcome: 'completed', error: null })
    const failed = uuidN(8)
    tree.write({ uuid: failed, location: 'completed', status: 'failed' })
    expect(settle({ task: taskSnapshot(tree.layout, failed, null), code: 1, child: died, retry: undefined })).toEqual({ outcome: 'failed', error: 'boom' })
  })
})

describe('a usage limit has one form (docs/fleet-operations.md#waits): paused_by rate-limit with resume_at', () => {
  const RETRY = { base_seconds: 30, max_seconds: 1800, max_attempts: 8, max_wait_hours: 24 }
  const alive = { stopped: false, lastLine: '' }
  const until = '2030-01-01T00:00:00.000Z'

  it('waits until resume_at; a pause by the LLM side (paused_by llm) is an outage retried with backoff, whatever else its state says', () => {
    const tree = makeTree()
    tree.write({ uuid: uuidN(11), location: 'paused', status: 'paused', state: { paused_by: 'rate-limit', llm_failure: 'rate_limited', resume_at: until } })
    expect(settle({ task: taskSnapshot(tree.layout, uuidN(11), null), code: 1, child: alive, retry: RETRY })).toMatchObject({
      wait: { reason: 'rate-limit', until, cap: null },
    })
    tree.write({ uuid: uuidN(12), location: 'paused', status: 'paused', state: { paused_by: 'llm', llm_failure: 'rate_limited', resume_at: until } })
    const outage = settle({ task: taskSnapshot(tree.layout, uuidN(12), null), code: 1, child: alive, retry: RETRY })
    expect(outage).toMatchObject({ outcome: 'paused', retry: RETRY })
    expect(outage?.wait).toBeUndefined()
  })
})
