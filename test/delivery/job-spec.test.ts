import { describe, expect, it } from 'vitest'
import { jobProblem, runArgs } from '../../src/fleet/queue/job-spec.js'
import type { Job } from '../../src/fleet/queue/job.js'
import type { JobSpec } from '../../src/fleet/queue/job-spec.js'
import { placement } from '../../src/actions/job-placement.js'
import { branchName } from '../../src/delivery/deliver.js'

const job = (spec: Record<string, unknown>): Job => ({
  id: 1,
  task_uuid: '0b6f6c55-1d55-4f59-9d8e-6f1a2c3b4d5e',
  kind: 'new',
  spec: spec as JobSpec,
  state: 'waiting',
  priority: 0,
  attempts: 0,
  claimed_by: null,
  user: null,
})

describe('deliver in a job', () => {
  it('enqueue and poll put --deliver in the spec; the worker gives it to run; a row asking anything else is refused', () => {
    expect(placement({ deliver: 'pr', workspace: '/tmp' }, null, '/nonexistent-tree')).toMatchObject({ deliver: 'pr' })
    expect(runArgs(job({}).task_uuid, { github: 'acme/shop#42', workspace: '/w', deliver: 'pr' }, '/w')).toEqual(expect.arrayContaining(['--deliver', 'pr']))
    expect(runArgs(job({}).task_uuid, { github: 'acme/shop#42', workspace: '/w' }, '/w')).not.toContain('--deliver')
    expect(jobProblem(job({ github: 'acme/shop#42', deliver: 'branch' }))).toBeNull()
    expect(jobProblem(job({ github: 'acme/shop#42', deliver: '--force' }))).toBe('spec.deliver is not none, branch or pr')
    expect(jobProblem(job({ github: 'acme/shop#42', deliver: 1 }))).toBe('spec.deliver is not none, branch or pr')
  })

  it('the branch name: <key>, <uuid8> and <uuid> filled in; a key git would not take made safe', () => {
    const uuid = '0b6f6c55-1d55-4f59-9d8e-6f1a2c3b4d5e'
    expect(branchName('ctxagent/<key>-<uuid8>', { task_source: 'github', owner: 'acme', repo: 'shop', task_type: 'issue', task_id: '42' }, uuid)).toBe(
      'ctxagent/42-0b6f6c55',
    )
    expect(branchName('bot/<uuid>', { task_source: 'local', owner: null, repo: '', task_type: 'task', task_id: '' }, uuid)).toBe(`bot/${uuid}`)
    expect(branchName('ctxagent/<key>-<uuid8>', { task_source: 'local', owner: null, repo: '', task_type: 'task', task_id: '../x y~1' }, uuid)).toBe(
      'ctxagent/x-y-1-0b6f6c55',
    )
  })
})
