import { mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { basename, join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { prepareNew } from '../../src/commands/run/run-prepare.js'
import type { CommandEnv } from '../../src/command-env.js'
import { createCommandEnv } from '../../src/command-env.js'
import { UsageError } from '../../src/errors.js'
import type { RunFlags } from '../../src/run/settings.js'
import { makeTree } from '../fixtures/tree.js'
import { snapshotTree } from '../helpers/tree-snapshot.js'

/**
 * `run`'s checks of a new local task, called as the command calls them (gh's pattern: the command builds the
 * options, prepareNew takes them), without starting the binary: what it refuses with a usage error, and that
 * it writes nothing, refused or not (docs/contract.md §9).
 */
async function setup(): Promise<{ ctx: CommandEnv; base: string; ws: string }> {
  const tree = makeTree()
  const config = join(tree.base, 'config.yaml')
  writeFileSync(config, 'llm:\n  provider: openai\n  openai:\n    base_url: http://127.0.0.1:9/v1\n    model: m\n')
  const ws = mkdtempSync(join(tmpdir(), 'ctxagent-ws-'))
  onTestFinished(() => rmSync(ws, { recursive: true, force: true }))
  return { ctx: await createCommandEnv({ home: tree.base, config }, {}), base: tree.base, ws }
}

async function refusal(p: Promise<unknown>): Promise<UsageError> {
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  )
  expect(err).toBeInstanceOf(UsageError)
  return err as UsageError
}

describe('prepareNew: a new local task checked before anything is written', () => {
  it('a task in a workspace: its text, its key, its settings; nothing written', async () => {
    const { ctx, base, ws } = await setup()
    const before = snapshotTree(base)
    const flags: RunFlags = { task: 'add a test', workspace: ws, taskId: 'T-1', maxTurns: 7, inherit: true }
    const prepared = await prepareNew(ctx, flags, undefined)
    expect(prepared.start).toMatchObject({
      kind: 'new',
      user: ctx.osUser,
      source: { text: 'add a test', key: { task_source: 'local', repo: basename(ws), task_type: 'task', task_id: 'T-1' } },
    })
    expect(prepared.settings).toMatchObject({ workspace: realpathSync(ws), maxTurns: 7 })
    expect(snapshotTree(base)).toEqual(before)
  })

  it.each<[string, (ws: string, base: string) => RunFlags, RegExp]>([
    ['an empty task', (ws) => ({ task: '  \n', workspace: ws, inherit: true }), /^the task is empty$/],
    ['a user name with a control character', (ws) => ({ task: 'x', workspace: ws, user: 'bob\nroot', inherit: true }), /^--user must be /],
    ['a provider that is none', (ws) => ({ task: 'x', workspace: ws, provider: 'nope', inherit: true }), /--provider nope is not a provider/],
    ['a workspace holding the task tree', (_ws, base) => ({ task: 'x', workspace: base, inherit: true }), /contains the task tree/],
    ['a workspace inside the task tree', (_ws, base) => ({ task: 'x', workspace: join(base, 'inside'), inherit: true }), /is inside the task tree/],
  ])('refuses %s with a usage error, writing nothing', async (_what, flagsOf, message) => {
    const { ctx, base, ws } = await setup()
    mkdirSync(join(base, 'inside'), { recursive: true })
    const before = snapshotTree(base)
    const err = await refusal(prepareNew(ctx, flagsOf(ws, base), undefined))
    expect(err.message).toMatch(message)
    expect(err.hint).not.toBe('')
    expect(snapshotTree(base)).toEqual(before)
  })
})
