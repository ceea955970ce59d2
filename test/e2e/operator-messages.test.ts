import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { hostname, processStart } from '../../src/storage/fs/process-info.js'
import { makeTree, uuidN } from '../fixtures/tree.js'
import { cli, deadPid } from '../helpers/run.js'
import { cliIn } from '../helpers/in-process.js'

describe('what operators are told', () => {
  it('view of a task whose agent died says its pid is gone, and how to recover it; a live owner is only its heartbeat', async () => {
    const tree = makeTree()
    const now = new Date().toISOString()
    tree.write({
      uuid: uuidN(0x61),
      location: 'running',
      status: 'processing',
      completedAt: null,
      lock: { process_id: deadPid(), hostname: hostname(), acquired_at: now, heartbeat_at: now },
    })
    tree.write({
      uuid: uuidN(0x62),
      location: 'running',
      status: 'processing',
      completedAt: null,
      lock: { process_id: process.pid, process_start: processStart(process.pid), hostname: hostname(), acquired_at: now, heartbeat_at: now },
    })
    const dead = await cliIn(['view', uuidN(0x61), '--home', tree.base, '--no-color'])
    expect(dead.code, dead.stderr).toBe(0)
    expect(dead.stdout).toMatch(
      new RegExp(
        `Owner: pid \\d+ on .*, heartbeat .* ago — pid \\d+ is gone: its agent is dead \\(watch-locks recovers it, or ctxagent unlock ${uuidN(0x61).slice(0, 8)}\\)`,
      ),
    )
    expect((JSON.parse((await cliIn(['view', uuidN(0x61), '--home', tree.base, '--json'])).stdout) as { owner_state: string }).owner_state).toBe('gone')
    const live = await cliIn(['view', uuidN(0x62), '--home', tree.base, '--no-color'])
    expect(live.stdout).toMatch(/Owner: pid \d+ on .*, heartbeat .* ago\n/)
    expect((JSON.parse((await cliIn(['view', uuidN(0x62), '--home', tree.base, '--json'])).stdout) as { owner_state: string }).owner_state).toBe('alive')
  })

  it('a forced unlock records a takeover by an operator, not a dead agent', async () => {
    const tree = makeTree()
    const now = new Date().toISOString()
    const dir = tree.write({
      uuid: uuidN(0x51),
      location: 'running',
      status: 'processing',
      completedAt: null,
      lock: { process_id: process.pid, process_start: processStart(process.pid), hostname: hostname(), acquired_at: now, heartbeat_at: now },
    })
    const res = cli(['unlock', uuidN(0x51), '--force', '--home', tree.base])
    expect(res.code, res.stderr).toBe(0)
    const state = JSON.parse(readFileSync(join(tree.layout.taskDir('completed', uuidN(0x51)), 'state.json'), 'utf8')) as { error: string }
    expect(state.error).toMatch(new RegExp(`^taken over by an operator \\(unlock --force\\) from pid ${process.pid}`))
    expect(state.error).not.toMatch(/agent died/)
    void dir
  })

  it('a summary in docs/contract.md §7 form (id, count, saving) renders with what it has', async () => {
    const tree = makeTree()
    const dir = tree.write({ uuid: uuidN(0x52), location: 'completed', messages: 5 })
    writeFileSync(
      join(dir, 'summaries.jsonl'),
      `${JSON.stringify({ id: 1, summary: 'did the thing', created_at: '2024-01-01T00:00:00.000Z', compressed_message_count: 14, tokens_saved: 900 })}\n`,
    )
    const res = await cliIn(['view', uuidN(0x52), '--summaries', '--home', tree.base])
    expect(res.code, res.stderr).toBe(0)
    expect(res.stdout).toContain('[1] 14 messages 900 tokens saved, llm, 2024-01-01T00:00:00.000Z')
    expect(res.stdout).not.toMatch(/seq -/)
  })
})
