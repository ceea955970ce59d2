import { existsSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { hostname, processStart } from '../../src/storage/fs/process-info.js'
import { makeTree, uuidN } from '../fixtures/tree.js'
import type { Tree } from '../fixtures/tree.js'
import { startFakeLlm } from '../helpers/fake-llm.js'
import type { FakeLlm } from '../helpers/fake-llm.js'
import { cli, cliAsync, deadPid } from '../helpers/run.js'
import { snapshotTree } from '../helpers/tree-snapshot.js'

const ID = uuidN(0x51)

async function setup(
  location: 'paused' | 'running' | 'completed' = 'paused',
  lock?: Record<string, unknown>,
): Promise<{ tree: Tree; fake: FakeLlm; config: string }> {
  const tree = makeTree()
  tree.write({ uuid: ID, location, messages: 40, summaries: 0, tools: 0, ...(lock ? { lock } : {}) })
  const fake = await startFakeLlm()
  const config = join(tree.base, 'config.yaml')
  writeFileSync(config, fake.configYaml())
  return { tree, fake, config }
}

describe('compress', () => {
  it('summarizes with the LLM, appends the record, rewrites current.jsonl and counts the compression', async () => {
    const { tree, fake, config } = await setup()
    fake.queue.push({ content: '## Original Task\nFix it\n## Completed Work\n- read src/app.ts' })
    const res = await cliAsync(['compress', ID, '--json', '--config', config, '--home', tree.base])
    expect(res.stderr).toBe('')
    expect(res.code).toBe(0)
    const record = JSON.parse(res.stdout) as Record<string, unknown>
    expect(record).toMatchObject({
      summary_id: 1,
      method: 'llm',
      model: 'fake-model',
      summary: '## Original Task\nFix it\n## Completed Work\n- read src/app.ts',
    })
    const dir = tree.layout.taskDir('paused', ID)
    expect(JSON.parse(readFileSync(join(dir, 'summaries.jsonl'), 'utf8'))).toEqual(record)
    const window = readFileSync(join(dir, 'current.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { content: string })
    expect(window[2]?.content).toContain('- read src/app.ts')
    expect(JSON.parse(readFileSync(join(dir, 'state.json'), 'utf8'))).toMatchObject({ compression_count: 1 })
    expect(fake.requests[0]?.body.messages[0]?.content).toContain('## Original Task')
    expect(readFileSync(join(tree.base, 'audit.jsonl'), 'utf8')).toContain('"command":"compress"')
  })

  it('--dry-run shows the plan and writes nothing', async () => {
    const { tree, fake, config } = await setup()
    const before = snapshotTree(tree.base)
    const res = cli(['compress', ID, '--dry-run', '--json', '--config', config, '--home', tree.base])
    expect(res.code).toBe(0)
    expect(JSON.parse(res.stdout)).toMatchObject({
      kind: 'plan',
      start_seq: 2,
      messages: expect.any(Number),
      kept: expect.any(Number),
      tokens_before: expect.any(Number),
    })
    expect(snapshotTree(tree.base)).toEqual(before)
    expect(fake.requests).toHaveLength(0)
  })

  it('exits 1 with one clear line and leaves every file byte-identical when the LLM fails', async () => {
    const { tree, fake, config } = await setup()
    fake.fallback = () => ({ status: 500, headers: { 'retry-after-ms': '1' }, content: 'model crashed' })
    const before = snapshotTree(tree.base)
    const res = await cliAsync(['compress', ID, '--config', config, '--home', tree.base])
    expect(res.code).toBe(1)
    expect(res.stderr).toMatch(
      /^ctxagent: LLM server http:\/\/127\.0\.0\.1:\d+\/v1 \(openai, model fake-model\) answered 500 after 2 retries: .*\(check the server logs\)\n$/,
    )
    expect(snapshotTree(tree.base)).toEqual(before)
  })

  it('works without an LLM with --extractive, and says how to configure one otherwise', async () => {
    const { tree } = await setup()
    const none = join(tree.base, 'none.yaml')
    writeFileSync(none, 'llm:\n  provider: none\n')
    const refused = cli(['compress', ID, '--config', none, '--home', tree.base])
    expect(refused.code).toBe(2)
    expect(refused.stderr).toContain('use --extractive')
    const res = cli(['compress', ID, '--extractive', '--keep-recent', '4', '--json', '--config', none, '--home', tree.base])
    expect(res.code).toBe(0)
    expect(JSON.parse(res.stdout)).toMatchObject({ method: 'extractive', model: null, summary: expect.stringContaining('## Original Task') })
  })

  it('asks a live owner (only its inbox is written; exit 1 when it does not answer), and reaps a dead owner first', async () => {
    const live = {
      process_id: process.pid,
      process_start: processStart(process.pid),
      hostname: hostname(),
      acquired_at: new Date().toISOString(),
      heartbeat_at: new Date().toISOString(),
    }
    const a = await setup('running', live)
    const before = snapshotTree(a.tree.base)
    const unanswered = cli(['compress', ID, '--wait', '1s', '--config', a.config, '--home', a.tree.base])
    expect(unanswered.code).toBe(1)
    expect(unanswered.stderr).toMatch(/^ctxagent: the agent of task .* did not answer within 1s/)
    const after = snapshotTree(a.tree.base)
    const inbox = Object.keys(after).filter((path) => after[path] !== before[path] && !path.endsWith('audit.jsonl'))
    expect(inbox).toEqual([expect.stringMatching(/inbox\.jsonl$/)])
    const request = JSON.parse(readFileSync(join(a.tree.layout.taskDir('running', ID), 'inbox.jsonl'), 'utf8')) as Record<string, unknown>
    expect(request).toMatchObject({ kind: 'control', action: 'compress' })

    const old = new Date(Date.now() - 600_000).toISOString()
    const b = await setup('running', { process_id: deadPid(), hostname: hostname(), acquired_at: old, heartbeat_at: old })
    const res = await cliAsync(['compress', ID, '--config', b.config, '--home', b.tree.base])
    expect(res.code).toBe(0)
    expect(res.stdout).toContain('its agent was dead')
    const state = JSON.parse(readFileSync(join(b.tree.layout.taskDir('completed', ID), 'state.json'), 'utf8')) as { status: string; compression_count: number }
    expect(state).toMatchObject({ status: 'failed', compression_count: 1 })
  })

  it('a task that finishes while compress --wait waits for its owner ends the wait then, and is compressed here', async () => {
    const live = {
      process_id: process.pid,
      process_start: processStart(process.pid),
      hostname: hostname(),
      acquired_at: new Date().toISOString(),
      heartbeat_at: new Date().toISOString(),
    }
    const a = await setup('running', live)
    const running = a.tree.layout.taskDir('running', ID)
    const asked = cliAsync(['compress', ID, '--wait', '50s', '--extractive', '--config', a.config, '--home', a.tree.base])
    // The owner finishes without reading its inbox: its directory moves to completed/, its lock goes.
    for (let i = 0; i < 600 && !existsSync(join(running, 'inbox.jsonl')); i++) await new Promise((r) => setTimeout(r, 50))
    rmSync(join(running, '.lock'), { force: true })
    renameSync(running, a.tree.layout.taskDir('completed', ID))
    const res = await asked
    expect(res.code, res.stderr).toBe(0)
    expect(res.stderr).toMatch(/left running\/ before its agent answered \(now in completed\/\); compressing it here/)
    expect(res.stdout).toMatch(/summar|nothing to compress/)
  })
})
