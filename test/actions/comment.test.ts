import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { CLI } from '../../src/actions/actor.js'
import { commentTask } from '../../src/actions/comment.js'
import { createCommandEnv } from '../../src/command-env.js'
import { CtxError, UsageError } from '../../src/errors.js'
import { resolveTask } from '../../src/storage/fs/layout.js'
import { makeTree, uuidN } from '../fixtures/tree.js'

const NOW = '2024-06-01T00:00:00Z'

function lines(file: string): Record<string, unknown>[] {
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as Record<string, unknown>)
}

describe('commentTask: the comment the CLI and the page both add', () => {
  it("goes to a paused task's inbox under the actor's name, and is audited as the actor's", async () => {
    const tree = makeTree()
    const uuid = uuidN(0x41)
    tree.write({ uuid, location: 'paused', messages: 2 })
    const ctx = await createCommandEnv({ home: tree.base, config: 'none' }, { CTXAGENT_NOW: NOW })
    const outcome = commentTask(ctx, resolveTask(tree.layout, uuid), 'look at the tests first', { via: 'serve', operator: 'gina' })
    expect(outcome).toMatchObject({ kind: 'added', uuid, location: 'paused', record: { kind: 'message', sender: 'gina', content: 'look at the tests first' } })
    expect(lines(join(tree.layout.taskDir('paused', uuid), 'inbox.jsonl'))).toMatchObject([
      { kind: 'message', sender: 'gina', content: 'look at the tests first' },
    ])
    expect(lines(tree.layout.audit)).toMatchObject([{ command: 'comment', uuid, via: 'serve', operator: 'gina', ts: '2024-06-01T00:00:00.000Z' }])
  })

  it('follows a task that was paused after it was found, once', async () => {
    const tree = makeTree()
    const uuid = uuidN(0x42)
    tree.write({ uuid, location: 'paused' })
    const ctx = await createCommandEnv({ home: tree.base, config: 'none' }, { CTXAGENT_NOW: NOW })
    // Found while running; now in paused/.
    const stale = { uuid, location: 'running' as const, dir: tree.layout.taskDir('running', uuid) }
    expect(commentTask(ctx, stale, 'hello', CLI)).toMatchObject({ kind: 'added', location: 'paused', record: { sender: ctx.osUser } })
  })

  it('refuses an empty or finished task before writing anything, and audits nothing', async () => {
    const tree = makeTree()
    tree.write({ uuid: uuidN(0x43), location: 'paused' })
    tree.write({ uuid: uuidN(0x44), location: 'completed' })
    const ctx = await createCommandEnv({ home: tree.base, config: 'none' }, { CTXAGENT_NOW: NOW })
    expect(() => commentTask(ctx, resolveTask(tree.layout, uuidN(0x43)), '  \n', CLI)).toThrow(UsageError)
    const finished = (() => {
      try {
        return commentTask(ctx, resolveTask(tree.layout, uuidN(0x44)), 'too late', CLI)
      } catch (err) {
        return err
      }
    })()
    expect(finished).toBeInstanceOf(CtxError)
    expect(finished).toMatchObject({ exitCode: 4, message: `task ${uuidN(0x44)} is finished (in completed/); no agent will read the comment` })
    expect(() => readFileSync(join(tree.layout.taskDir('paused', uuidN(0x43)), 'inbox.jsonl'))).toThrow(/ENOENT/)
    expect(() => readFileSync(tree.layout.audit)).toThrow(/ENOENT/)
  })
})
