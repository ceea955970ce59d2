import { mkdirSync, readFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { actorName, auditAction, CLI } from '../../src/actions/actor.js'
import type { CommandEnv } from '../../src/command-env.js'
import { createCommandEnv } from '../../src/command-env.js'
import { makeTree, uuidN } from '../fixtures/tree.js'

const NOW = '2024-06-01T00:00:00Z'

/** A command env on a fresh tree whose warnings are kept. */
async function envWithWarnings(): Promise<{ ctx: CommandEnv; warnings: string[]; audit: string }> {
  const tree = makeTree()
  const base = await createCommandEnv({ home: tree.base, config: 'none' }, { CTXAGENT_NOW: NOW })
  const warnings: string[] = []
  return { ctx: { ...base, io: { ...base.io, warn: (text: string) => void warnings.push(text) } }, warnings, audit: tree.layout.audit }
}

const lines = (file: string) =>
  readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as Record<string, unknown>)

describe('who takes an action (src/actions/actor.ts)', () => {
  it('is the OS user at the command line, the signed-in operator on the page', async () => {
    const { ctx } = await envWithWarnings()
    expect(actorName(ctx, CLI)).toBe(ctx.osUser)
    expect(actorName(ctx, { via: 'serve', operator: 'gina' })).toBe('gina')
  })

  it('audits the page’s action with `via: serve` and the operator, the command line’s as the OS user', async () => {
    const { ctx, audit, warnings } = await envWithWarnings()
    const uuid = uuidN(0x51)
    auditAction(ctx, { via: 'serve', operator: 'gina' }, 'pause', uuid)
    auditAction(ctx, CLI, 'resume', null)
    const [page, cli] = lines(audit)
    expect(page).toEqual({ ts: '2024-06-01T00:00:00.000Z', os_user: ctx.osUser, command: 'pause', uuid, via: 'serve', operator: 'gina' })
    expect(cli).toMatchObject({ ts: '2024-06-01T00:00:00.000Z', os_user: ctx.osUser, command: 'resume', uuid: null })
    expect(cli).not.toHaveProperty('via')
    expect(warnings).toEqual([])
  })

  it('an audit line that cannot be written is a warning, never the action’s failure, from either side', async () => {
    const { ctx, audit, warnings } = await envWithWarnings()
    // audit.jsonl a directory: every append to it fails.
    mkdirSync(audit, { recursive: true })
    expect(() => auditAction(ctx, { via: 'serve', operator: 'gina' }, 'pause', uuidN(0x52))).not.toThrow()
    expect(() => auditAction(ctx, CLI, 'pause', uuidN(0x52))).not.toThrow()
    expect(warnings).toHaveLength(2)
    for (const w of warnings) expect(w).toMatch(/^audit\.jsonl not written: /)
  })
})
