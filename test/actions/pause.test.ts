import { mkdirSync, renameSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { CLI } from '../../src/actions/actor.js'
import { pauseTask } from '../../src/actions/pause.js'
import { createCommandEnv } from '../../src/command-env.js'
import { CtxError } from '../../src/errors.js'
import { resolveTask } from '../../src/storage/fs/layout.js'
import { makeTree, uuidN } from '../fixtures/tree.js'

describe('pauseTask: the pause the CLI and the page both take', () => {
  it('a task that left running/ for completed/ after it was found (its lock gone with it) is finished, for either actor: exit 4, the same words', async () => {
    for (const actor of [CLI, { via: 'serve' as const, operator: 'gina' }]) {
      const tree = makeTree()
      const uuid = uuidN(0x35)
      tree.write({ uuid, location: 'running', messages: 3 })
      const ctx = await createCommandEnv({ home: tree.base, config: 'none' }, { CTXAGENT_NOW: '2024-06-01T00:00:00Z' })
      const ref = resolveTask(tree.layout, uuid)
      // What a finishing owner leaves between the look and the pause: the task in completed/, no lock.
      mkdirSync(join(tree.base, 'completed'), { recursive: true })
      renameSync(ref.dir, tree.layout.taskDir('completed', uuid))
      const err = await pauseTask(ctx, ref, actor, 5_000).catch((e: unknown) => e)
      expect(err).toBeInstanceOf(CtxError)
      expect(err).toMatchObject({ exitCode: 4, message: `task ${uuid} is finished (in completed/); there is nothing to pause`, hint: 'check the uuid' })
    }
  })

  it('a paused task is already paused; a running task without a live agent is refused with how to recover it', async () => {
    const tree = makeTree()
    tree.write({ uuid: uuidN(1), location: 'paused' })
    tree.write({ uuid: uuidN(2), location: 'running' })
    const ctx = await createCommandEnv({ home: tree.base, config: 'none' }, {})
    expect(await pauseTask(ctx, resolveTask(tree.layout, uuidN(1)), CLI, 1_000)).toEqual({ kind: 'already_paused', uuid: uuidN(1) })
    await expect(pauseTask(ctx, resolveTask(tree.layout, uuidN(2)), CLI, 1_000)).rejects.toThrow(/has no live agent/)
  })
})
