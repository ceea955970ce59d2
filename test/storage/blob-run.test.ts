import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import type { RecordedRequest } from '../helpers/fake-llm.js'
import { exitOf } from '../helpers/wait.js'
import { agentRequests, expectWellFormed, onlyTask, readTask, runSetup, waitFor } from '../run/harness.js'

type Sent = { role: string; content: string | null; tool_call_id?: string }
const sent = (r: RecordedRequest) => r.body.messages as unknown as Sent[]
const SECRET = 'AKIAIOSFODNN7EXAMPLE'

describe('blobs in a run (docs/contract.md §5)', () => {
  it('three identical reads: one blob, three references; sent whole while fresh, [pruned] [blob:<id>] once old; inspect reads it; no secret in blobs/', async () => {
    const s = await runSetup()
    writeFileSync(
      s.config,
      s.fake.configYaml('context:\n  prune:\n    protected_tool_rounds: 2\n    step_rounds: 1\n').replace('context_length: 8000', 'context_length: 1000000'),
    )
    const big = Array.from({ length: 400 }, (_, i) => (i === 200 ? `key ${SECRET} here` : `row ${i + 1} of the big file`)).join('\n')
    writeFileSync(join(s.ws, 'big.txt'), `${big}\n`)
    const read = { calls: [{ name: 'read_file', arguments: { path: 'big.txt' } }] }
    s.fake.queue = [
      read,
      read,
      read,
      { calls: [{ name: 'list_dir', arguments: { path: '.' } }] },
      { calls: [{ name: 'list_dir', arguments: { path: '.', depth: 2 } }] },
    ]
    // The blob id is learnt from the request that carries the first result, as the model would.
    let id = ''
    s.fake.fallback = (req) => {
      if (!Array.isArray(req.body.tools)) return { content: '## Original Task\nread big.txt' }
      const messages = sent(req)
      if (id === '') id = /\[blob:([0-9a-f]{64})\]/.exec(messages.map((m) => m.content ?? '').join('\n'))?.[1] ?? 'none'
      const inspects = messages.filter((m) => m.role === 'tool').length - 5
      if (inspects === 0) return { calls: [{ name: 'inspect', arguments: { blob: id, offset: 10, limit: 2 } }] }
      if (inspects === 1) return { calls: [{ name: 'inspect', arguments: { blob: id, grep: 'row 39[0-9] ' } }] }
      if (inspects === 2) return { calls: [{ name: 'inspect', arguments: { blob: '../../metadata.json' } }] }
      return { content: 'done' }
    }
    const res = await s.run(['run', '--task', 'read big.txt', '--workspace', s.ws])
    expect(res.code, res.stderr).toBe(0)
    const task = onlyTask(s.tree)
    expect(id).toMatch(/^[0-9a-f]{64}$/)
    // One file in blobs/, three references to it in each of messages, current and tools.
    expect(readdirSync(join(task.dir, 'blobs'))).toEqual([id])
    const reads = task.messages.filter((m) => m.tool_name === 'read_file')
    expect(reads).toHaveLength(3)
    for (const m of reads) expect(String(m.content)).toMatch(new RegExp(`^\\[blob:${id}\\] \\([0-9,]+ bytes`))
    expect(task.current.filter((m) => String(m.content).startsWith(`[blob:${id}]`))).toHaveLength(3)
    expect(task.tools.filter((t) => String(t.result).startsWith(`[blob:${id}]`))).toHaveLength(3)
    // The blob is the masked output: the secret is nowhere in blobs/ (nor in the messages).
    const blob = readFileSync(join(task.dir, 'blobs', id), 'utf8')
    expect(blob).toContain('row 400 of the big file')
    expect(blob).not.toContain(SECRET)
    expect(readFileSync(join(task.dir, 'messages.jsonl'), 'utf8')).not.toContain(SECRET)
    const requests = agentRequests(s.fake)
    for (const r of requests) expectWellFormed(r)
    // Fresh: the reference, then the whole output (the model loses nothing).
    const second = sent(requests[1] as RecordedRequest).filter((m) => m.role === 'tool')
    expect(second[0]?.content).toBe(`[blob:${id}] ${blob}`)
    // Old: [pruned] [blob:<id>].
    const last = sent(requests.at(-1) as RecordedRequest).filter((m) => m.role === 'tool')
    expect(last.slice(0, 3).map((m) => m.content)).toEqual([0, 1, 2].map(() => `[pruned] [blob:${id}]`))
    // inspect read it back in parts, by grep, and refused a path (read_file's output is numbered lines itself).
    const inspected = task.messages.filter((m) => m.tool_name === 'inspect').map((m) => String(m.content))
    expect(inspected[0]).toMatch(/^10: 10: row 10 of the big file\n11: 11: row 11 of the big file\n\(lines up to 11 shown/)
    expect(inspected[1]?.split('\n').slice(0, 2)).toEqual(['390: 390: row 390 of the big file', '391: 391: row 391 of the big file'])
    expect(inspected[2]).toContain('is not a blob id')
    // Between prune steps each request is the previous one plus its new messages, byte for byte.
    for (let i = 1; i < 3; i++) {
      const before = JSON.stringify(sent(requests[i - 1] as RecordedRequest))
      expect(JSON.stringify(sent(requests[i] as RecordedRequest)).startsWith(before.slice(0, -1))).toBe(true)
    }
  })

  it('view --full and export show a blob whole; cleanup gzips blobs/ with the task (view still reads them) and deletes them with it', async () => {
    const s = await runSetup()
    const big = Array.from({ length: 600 }, (_, i) => `entry ${i + 1} of the log`).join('\n')
    writeFileSync(join(s.ws, 'log.txt'), `${big}\n`)
    s.fake.queue = [{ calls: [{ name: 'read_file', arguments: { path: 'log.txt' } }] }, { content: 'read' }]
    s.fake.fallback = () => ({ content: '## Original Task\nread log.txt' })
    const res = await s.run(['run', '--task', 'read log.txt', '--workspace', s.ws])
    expect(res.code, res.stderr).toBe(0)
    const task = onlyTask(s.tree)
    const [name] = readdirSync(join(task.dir, 'blobs'))
    const id = name as string
    // view: the stored message shows the reference, its size and head; --full the whole text.
    const preview = await s.run(['view', task.uuid, '--messages', '--role', 'tool'])
    expect(preview.stdout).toContain(`[blob:${id.slice(0, 8)}`)
    expect(preview.stdout).not.toContain('entry 600 of the log')
    const json = await s.run(['view', task.uuid, '--messages', '--role', 'tool', '--json'])
    expect(JSON.parse(json.stdout.trim()).content).toMatch(
      new RegExp(`^\\[blob:${id}\\] \\([0-9,]+ bytes; the inspect tool reads it all\\)\\n1: entry 1 of the log`),
    )
    const full = await s.run(['view', task.uuid, '--messages', '--role', 'tool', '--full'])
    expect(full.code, full.stderr).toBe(0)
    expect(full.stdout).toContain(`[blob:${id}]`)
    expect(full.stdout).toContain('entry 600 of the log')
    const exported = await s.run(['export', task.uuid])
    expect(exported.stdout).toContain('entry 600 of the log')
    // cleanup gzips the blob with the task's files; view --full still reads it.
    const cleaned = await s.run(['cleanup', '--compress-after', '0', '--json'])
    expect(cleaned.code, cleaned.stderr).toBe(0)
    expect(readdirSync(join(task.dir, 'blobs'))).toEqual([`${id}.gz`])
    const after = await s.run(['view', task.uuid, '--messages', '--role', 'tool', '--full'])
    expect(after.code, after.stderr).toBe(0)
    expect(after.stdout).toContain('entry 600 of the log')
    const deleted = await s.run(['cleanup', '--delete-after', '0', '--json'])
    expect(deleted.code, deleted.stderr).toBe(0)
    expect(existsSync(task.dir)).toBe(false)
  })

  it('resume: the window rebuilt from current.jsonl refers to blobs that exist; the first request after it is the one before the pause', async () => {
    const s = await runSetup()
    const big = Array.from({ length: 600 }, (_, i) => `item ${i + 1} of the list`).join('\n')
    writeFileSync(join(s.ws, 'list.txt'), `${big}\n`)
    s.fake.queue = [{ calls: [{ name: 'read_file', arguments: { path: 'list.txt' } }] }, { delayMs: 120_000, content: 'never' }]
    const started = s.start(['run', '--task', 'read list.txt', '--workspace', s.ws])
    await waitFor('the request after the read', () => agentRequests(s.fake).length >= 2)
    const uuid = s.tree.layout.list('running')[0] as string
    const paused = await s.run(['pause', uuid, '--wait', '60s'])
    expect(paused.code, paused.stderr).toBe(0)
    expect((await exitOf(started.child)).code).toBe(0)
    s.fake.queue.push({ content: 'done' })
    const resumed = await s.run(['run', '--resume', uuid])
    expect(resumed.code, resumed.stderr).toBe(0)
    const requests = agentRequests(s.fake)
    const before = sent(requests[1] as RecordedRequest).filter((m) => m.role === 'tool')
    const after = sent(requests.at(-1) as RecordedRequest).filter((m) => m.role === 'tool')
    expect(before[0]?.content).toMatch(/^\[blob:[0-9a-f]{64}\] 1: item 1 of the list\n/)
    expect(before[0]?.content).toContain('600: item 600 of the list')
    expect(after[0]?.content).toBe(before[0]?.content)
    expect(readTask(s.tree, uuid).state).toMatchObject({ status: 'completed' })
  })
})
