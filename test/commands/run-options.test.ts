import { describe, expect, it } from 'vitest'
import { runOptionsProblem } from '../../src/commands/run/run-options.js'
import type { RunOptions } from '../../src/commands/run/run-options.js'
import { UsageError } from '../../src/errors.js'

// run's checks of its flags alone, as a table (test/e2e/cli-validation.test.ts drives a few of
// them through the built binary): each row's options, and the refusal's message or null.
const UUID = '0000abcd-0000-4000-8000-00000000abcd'

const rows: { name: string; opts: Omit<RunOptions, 'inherit'>; refused: string | null }[] = [
  { name: 'a task', opts: { task: 'fix it' }, refused: null },
  { name: 'a task file', opts: { taskFile: '-' }, refused: null },
  { name: 'a GitHub issue', opts: { github: 'o/r#1' }, refused: null },
  { name: 'a resume', opts: { resume: UUID }, refused: null },
  { name: 'a chat alone', opts: { chat: true }, refused: null },
  { name: 'a chat with a first message', opts: { chat: true, task: 'hi' }, refused: null },
  { name: 'nothing', opts: {}, refused: 'no task given' },
  { name: 'two sources', opts: { task: 'a', github: 'o/r#1' }, refused: '--task, --task-file, --github, --gitlab and --resume exclude each other' },
  { name: 'a task and a resume', opts: { taskFile: 'f', resume: UUID }, refused: '--task, --task-file, --github, --gitlab and --resume exclude each other' },
  { name: 'a chat on GitLab', opts: { chat: true, gitlab: 'g/p#2' }, refused: '--chat starts a local session; it excludes --github and --gitlab' },
  { name: 'a resumed chat', opts: { chat: true, resume: UUID }, refused: '--chat starts a new session; a resumed chat task stays a chat' },
  {
    name: 'a delivery on resume',
    opts: { resume: UUID, deliver: 'pr' },
    refused: '--deliver is chosen when a task starts; a resumed task delivers as it was started to',
  },
  { name: 'a delivery on a new task', opts: { task: 'a', deliver: 'branch' }, refused: null },
  { name: 'a follow-up without a forge', opts: { task: 'a', followUpFile: 'f' }, refused: '--follow-up-file follows up a pull or merge request' },
  { name: 'a follow-up on a GitLab merge request', opts: { gitlab: 'g/p!3', followUpFile: 'f' }, refused: null },
  { name: 'a uuid for a new task', opts: { task: 'a', uuid: UUID }, refused: null },
  { name: 'a uuid in upper case', opts: { task: 'a', uuid: UUID.toUpperCase() }, refused: '--uuid names a new task and must be a uuid' },
  { name: 'a uuid that is not one', opts: { task: 'a', uuid: 'abc' }, refused: '--uuid names a new task and must be a uuid' },
  { name: 'a uuid on resume', opts: { resume: UUID, uuid: UUID }, refused: '--uuid names a new task and must be a uuid' },
]

describe('runOptionsProblem', () => {
  it.each(rows)('$name: $refused', ({ opts, refused }) => {
    const problem = runOptionsProblem({ inherit: true, ...opts })
    if (refused === null) return expect(problem).toBeNull()
    expect(problem).toBeInstanceOf(UsageError)
    expect(problem?.message).toBe(refused)
    expect(problem?.exitCode).toBe(2)
    expect(problem?.hint).toBeTruthy()
  })
})
