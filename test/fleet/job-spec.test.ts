import { describe, expect, it } from 'vitest'
import { evalTrialArgs, JOB_SPEC_KEYS, jobProblem, resumeArgs, runArgs, specProblem } from '../../src/fleet/queue/job-spec.js'
import type { JobSpec } from '../../src/fleet/queue/job-spec.js'

const uuid = '00000000-0000-4000-8000-000000000001'
const row = (spec: unknown, kind = 'new') => ({ task_uuid: uuid, kind, priority: 0, attempts: 0, spec })

describe("the job spec: one schema for its type, keys, checks and the child's run", () => {
  it('allows exactly the keys of run that a job may ask for, and refuses any other', () => {
    expect(JOB_SPEC_KEYS).toEqual([
      'task',
      'github',
      'gitlab',
      'user',
      'workspace',
      'repo',
      'ref',
      'task_id',
      'max_turns',
      'max_tokens',
      'max_cost_usd',
      'timeout',
      'model',
      'allow_shell',
      'deliver',
      'eval',
    ])
    expect(specProblem({ task: 'x', cmd: 'rm -rf /' })).toBe('spec has an unknown key "cmd"')
    expect(specProblem({ task: 'x', __proto__x: 1 })).toBe('spec has an unknown key "__proto__x"')
    expect(specProblem([])).toBe('spec is not an object')
    expect(specProblem(null)).toBe('spec is not an object')
  })

  it('checks each field with one rule, naming the key and what it should be', () => {
    const cases: [Record<string, unknown>, string | null][] = [
      [
        {
          task: 'fix it',
          user: 'alice',
          task_id: 'nightly',
          model: 'm-1',
          max_turns: 5,
          max_tokens: 1000,
          timeout: '60s',
          allow_shell: true,
          workspace: '/srv/ws',
        },
        null,
      ],
      [{ task: 7 }, 'spec.task is not text'],
      [{ github: 'owner/repo#12' }, null],
      [{ github: '--help' }, 'spec.github is not owner/repo#N'],
      [{ gitlab: 'group/sub/project!3' }, null],
      [{ gitlab: 'project#3' }, 'spec.gitlab is not group/project#N or !N'],
      [{ task: 'x', user: '-x\n' }, 'spec.user is not 1 to 200 printable characters'],
      [{ task: 'x', user: ' alice' }, 'spec.user is not 1 to 200 printable characters'],
      [{ task: 'x', task_id: 'x'.repeat(201) }, 'spec.task_id is not 1 to 200 printable characters'],
      [{ task: 'x', model: '' }, 'spec.model is not 1 to 200 printable characters'],
      [{ task: 'x', max_turns: 0 }, 'spec.max_turns is not a positive whole number'],
      [{ task: 'x', max_tokens: 1.5 }, 'spec.max_tokens is not a positive whole number'],
      [{ task: 'x', max_turns: '5' }, 'spec.max_turns is not a positive whole number'],
      [{ task: 'x', max_cost_usd: 2.5 }, null],
      [{ task: 'x', max_cost_usd: 0 }, 'spec.max_cost_usd is not an amount in USD above 0'],
      [{ task: 'x', max_cost_usd: '2' }, 'spec.max_cost_usd is not an amount in USD above 0'],
      [{ task: 'x', timeout: '5m' }, 'spec.timeout is not a number of seconds (Ns)'],
      [{ task: 'x', allow_shell: 'yes' }, 'spec.allow_shell is not true or false'],
      [{ task: 'x', workspace: 'relative/dir' }, 'spec.workspace is not an absolute path'],
      [{ task: 'x', repo: 'https://github.com/o/r.git', ref: 'main' }, null],
      [{ task: 'x', repo: '--upload-pack=touch /tmp/pwned' }, "spec.repo: '--upload-pack=touch /tmp/pwned' is not a git URL"],
      [{ task: 'x', repo: 'https://u:p@github.com/o/r.git' }, 'spec.repo: the URL of https://…@github.com/o/r.git holds a user name or password'],
      [{ task: 'x', repo: 'https://github.com/o/r.git', ref: '-f' }, 'spec.ref "-f" is not a branch, tag or commit name of a repo'],
      [{ task: 'x', ref: 'main' }, 'spec.ref "main" is not a branch, tag or commit name of a repo'],
      [{ task: 'x', repo: '/srv/repo', workspace: '/srv/ws' }, 'spec has both repo and workspace'],
    ]
    for (const [spec, problem] of cases) expect([spec, specProblem(spec)]).toEqual([spec, problem])
  })

  it("a job row: its uuid, kind and numbers, and a new task's one source", () => {
    expect(jobProblem(row({ task: 'x' }))).toBeNull()
    expect(jobProblem(row({}, 'resume'))).toBeNull()
    expect(jobProblem(row({ max_cost_usd: 10 }, 'resume'))).toBeNull()
    expect(jobProblem(row({}))).toBe('spec names not exactly one of task, github, gitlab, eval')
    expect(jobProblem(row({ github: 'o/r#1', gitlab: 'g/p#1' }))).toBe('spec names not exactly one of task, github, gitlab, eval')
    // A review loop's follow-up: the pull request, and a statement of its own (docs/delivery.md#the-review-loop).
    expect(jobProblem(row({ task: 'x', github: 'o/r#1' }))).toBeNull()
    expect(runArgs('00000000-0000-4000-8000-000000000001', { task: 'x', github: 'o/r#1' }, undefined)).toEqual([
      'run',
      '--uuid',
      '00000000-0000-4000-8000-000000000001',
      '--follow-up-file',
      '-',
      '--github',
      'o/r#1',
    ])
    expect(jobProblem({ ...row({ task: 'x' }), task_uuid: '../../x' })).toBe('task_uuid "../../x" is not a UUID')
    expect(jobProblem(row({ task: 'x' }, 'bogus'))).toBe('kind "bogus" is neither new nor resume')
    expect(jobProblem({ ...row({ task: 'x' }), attempts: -1 })).toBe('priority and attempts must be whole numbers')
  })

  it("gives the child run's arguments: each field's flag, the workspace the worker chose, the task text on standard input", () => {
    const spec: JobSpec = {
      task: 'fix it',
      user: 'alice',
      workspace: '/srv/ws',
      task_id: 'n',
      max_turns: 3,
      max_tokens: 900,
      max_cost_usd: 2.5,
      timeout: '60s',
      model: 'm',
      allow_shell: true,
    }
    expect(runArgs(uuid, spec, spec.workspace)).toEqual([
      'run',
      '--uuid',
      uuid,
      '--task-file',
      '-',
      '--user',
      'alice',
      '--workspace',
      '/srv/ws',
      '--task-id',
      'n',
      '--max-turns',
      '3',
      '--max-tokens',
      '900',
      '--max-cost',
      '2.5',
      '--timeout',
      '60s',
      '--model',
      'm',
      '--allow-shell',
    ])
    // A --repo job runs in the clone made for it; repo and ref are the worker's, not run's.
    expect(runArgs(uuid, { github: 'o/r#4', repo: 'https://h/o/r.git', ref: 'main' }, '/clones/x')).toEqual([
      'run',
      '--uuid',
      uuid,
      '--github',
      'o/r#4',
      '--workspace',
      '/clones/x',
    ])
    expect(runArgs(uuid, { gitlab: 'g/p!2', allow_shell: false }, undefined)).toEqual(['run', '--uuid', uuid, '--gitlab', 'g/p!2'])
  })

  it("an eval's trial (docs/eval.md#in-the-fleet): its eval and trial only, checked; its child is eval trial, new or resumed alike", () => {
    const trial = { id: '0123456789ab', task: 'add', variant: 'good', run: 2 }
    expect(jobProblem(row({ eval: trial, user: 'alice' }))).toBeNull()
    expect(jobProblem(row({ eval: trial }, 'resume'))).toBeNull()
    const cases: [unknown, string][] = [
      [{ eval: trial, model: 'x' }, 'spec.eval goes with no other key than user'],
      [{ eval: trial, task: 'x' }, 'spec.eval goes with no other key than user'],
      [{ eval: { ...trial, id: '../../etc' } }, 'spec.eval.id is not an eval id'],
      [{ eval: { ...trial, task: '--help' } }, 'spec.eval.task is not a task name of a suite'],
      [{ eval: { ...trial, task: '../x' } }, 'spec.eval.task is not a task name of a suite'],
      [{ eval: { ...trial, variant: 'a b' } }, 'spec.eval.variant is not a variant name'],
      [{ eval: { ...trial, run: 0 } }, 'spec.eval.run is not a positive whole number'],
      [{ eval: { ...trial, flags: ['--allow-shell'] } }, 'spec.eval has an unknown key "flags"'],
    ]
    for (const [spec, problem] of cases) expect([spec, specProblem(spec)]).toEqual([spec, problem])
    expect(evalTrialArgs(uuid, { eval: trial, user: 'alice' })).toEqual([
      'eval',
      'trial',
      '0123456789ab',
      '--task',
      'add',
      '--variant',
      'good',
      '--run',
      '2',
      '--uuid',
      uuid,
      '--user',
      'alice',
    ])
  })

  it("gives a resume's child run --resume, and the raised cost cap the job carries", () => {
    expect(resumeArgs(uuid, {})).toEqual(['run', '--resume', uuid])
    expect(resumeArgs(uuid, { max_cost_usd: 10 })).toEqual(['run', '--resume', uuid, '--max-cost', '10'])
  })
})
