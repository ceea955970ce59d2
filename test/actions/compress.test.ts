import { readFileSync, rmSync, symlinkSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { CLI } from '../../src/actions/actor.js'
import { compressAction } from '../../src/actions/compress.js'
import { createCommandEnv } from '../../src/command-env.js'
import type { CommandEnv } from '../../src/command-env.js'
import { resolveTask } from '../../src/storage/fs/layout.js'
import { makeTree, uuidN } from '../fixtures/tree.js'

// A task no agent runs is compressed by the action itself; a running task's live agent is
// asked instead (test/e2e/ drives that with a real owner).

function withWarnings(ctx: CommandEnv): { ctx: CommandEnv; warnings: string[] } {
  const warnings: string[] = []
  return { ctx: { ...ctx, io: { ...ctx.io, warn: (text: string) => void warnings.push(text) } }, warnings }
}

describe('compressAction on a task no agent runs', () => {
  it('plans without writing on a dry run, warning that no API key is set; then compresses with --extractive and audits it', async () => {
    const tree = makeTree()
    const uuid = uuidN(0x51)
    const dir = tree.write({ uuid, location: 'paused', messages: 30, summaries: 0 })
    const { ctx, warnings } = withWarnings(await createCommandEnv({ home: tree.base, config: 'none' }, { CTXAGENT_NOW: '2024-06-01T00:00:00Z' }))
    const before = readFileSync(join(dir, 'messages.jsonl'), 'utf8')

    const plan = await compressAction(ctx, resolveTask(tree.layout, uuid), { dryRun: true, keepRecent: 4, waitMs: 1_000 }, CLI)
    expect(plan).toMatchObject({ kind: 'plan', uuid, method: 'llm', left: null })
    expect(plan.kind === 'plan' && plan.kept >= 4 && plan.kept < 30).toBe(true)
    expect(warnings).toEqual([expect.stringMatching(/^no OpenAI API key is set: this plan assumes an LLM summary/)])
    expect(readFileSync(join(dir, 'messages.jsonl'), 'utf8')).toBe(before)
    expect(readFileSync(join(dir, 'summaries.jsonl'), 'utf8')).toBe('')

    const done = await compressAction(ctx, resolveTask(tree.layout, uuid), { extractive: true, keepRecent: 4, waitMs: 1_000 }, CLI)
    expect(done).toMatchObject({ kind: 'done', uuid, left: null, record: { method: 'extractive' } })
    expect(readFileSync(join(dir, 'summaries.jsonl'), 'utf8').trim().split('\n')).toHaveLength(1)
    expect(readFileSync(tree.layout.audit, 'utf8')).toContain('"command":"compress"')
  })

  it('refuses a task one of whose files is a link, before reading or writing anything', async () => {
    const tree = makeTree()
    const uuid = uuidN(0x52)
    const dir = tree.write({ uuid, location: 'paused', messages: 30, summaries: 0 })
    rmSync(join(dir, 'messages.jsonl'))
    symlinkSync('/etc/passwd', join(dir, 'messages.jsonl'))
    const ctx = await createCommandEnv({ home: tree.base, config: 'none' }, {})
    await expect(compressAction(ctx, resolveTask(tree.layout, uuid), { extractive: true, waitMs: 1_000 }, CLI)).rejects.toThrow(/messages\.jsonl/)
    expect(readFileSync(join(dir, 'summaries.jsonl'), 'utf8')).toBe('')
    expect(() => readFileSync(tree.layout.audit, 'utf8')).toThrow(/ENOENT/)
  })

  it('without an LLM and without --extractive, refuses before touching the task', async () => {
    const tree = makeTree()
    const uuid = uuidN(0x53)
    const dir = tree.write({ uuid, location: 'paused', messages: 30, summaries: 0 })
    const ctx = await createCommandEnv({ home: tree.base, config: 'none' }, {})
    await expect(compressAction(ctx, resolveTask(tree.layout, uuid), { keepRecent: 4, waitMs: 1_000 }, CLI)).rejects.toThrow(/API key/i)
    expect(readFileSync(join(dir, 'summaries.jsonl'), 'utf8')).toBe('')
  })
})
