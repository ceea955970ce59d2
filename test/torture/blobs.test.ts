import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { exitOf, sleep } from '../helpers/wait.js'
import { readTask, runSetup, waitFor } from '../run/harness.js'
import { danglingBlobs, litter } from './checks.js'

const KILLS = 4
const FILES = 6

/** Blob files (and temps) of a task, by name. */
function blobNames(dir: string): string[] {
  const blobs = join(dir, 'blobs')
  return existsSync(blobs) ? readdirSync(blobs) : []
}

describe('torture: blobs under SIGKILL', () => {
  it(`an agent writing a blob every round, SIGKILLed ${KILLS} times at random instants and resumed: no reference without its blob, no temp left, each output stored once`, {
    timeout: 600_000,
  }, async () => {
    const s = await runSetup()
    writeFileSync(
      s.config,
      s.fake.configYaml('locks:\n  heartbeat_seconds: 0.3\n  stale_after_seconds: 1\n').replace('context_length: 8000', 'context_length: 1000000'),
    )
    // Distinct files over context.blobs.threshold_bytes (8 KB): each first read writes a blob.
    for (let i = 0; i < FILES; i++) writeFileSync(join(s.ws, `f${i}.txt`), `file ${i}\n${`${'word '.repeat(20)}${i}\n`.repeat(120)}`)
    let n = 0
    let finish = false
    s.fake.fallback = (req) => {
      if (!Array.isArray(req.body.tools)) return { content: '## Original Task\nread the files' }
      if (finish) return { content: 'all read' }
      return { calls: [{ name: 'read_file', arguments: { path: `f${n++ % FILES}.txt` } }] }
    }
    let uuid: string | null = null
    for (let k = 0; k < KILLS; k++) {
      const child = s.start(uuid === null ? ['run', '--task', 'read every file', '--workspace', s.ws] : ['run', '--resume', uuid])
      const id: string = uuid ?? (await waitFor('the task', () => s.tree.layout.list('running')[0]))
      uuid = id
      const messages = join(s.tree.layout.taskDir('running', id), 'messages.jsonl')
      const reads = () =>
        existsSync(messages)
          ? readFileSync(messages, 'utf8')
              .split('\n')
              .filter((l) => l.includes('"tool_name":"read_file"') && l.includes('"role":"tool"')).length
          : 0
      const before = reads()
      // Killed while it reads (each read's output a blob, new or the same): two more reads, then at a random instant.
      await waitFor('two more reads', () => reads() >= before + 2)
      await sleep(Math.random() * 150)
      child.child.kill('SIGKILL')
      await exitOf(child.child)
      expect(danglingBlobs(s.tree.base), `after kill ${k + 1}`).toEqual([])
      // The dead owner's lock goes stale before the next resume takes it over.
      await sleep(1_300)
    }
    finish = true
    const done = await s.run(['run', '--resume', uuid as string])
    expect(done.code, done.stderr).toBe(0)
    const task = readTask(s.tree, uuid as string)
    expect(task.state).toMatchObject({ status: 'completed' })
    expect(danglingBlobs(s.tree.base)).toEqual([])
    expect(litter(s.tree.base)).toEqual([])
    // Each distinct output is one blob, however often it was read (a kill between a blob and its message may leave one unreferenced, never the reverse).
    const referenced = new Set(task.messages.flatMap((m) => /^\[blob:([0-9a-f]{64})\]/.exec(String(m.content))?.[1] ?? []))
    const stored = blobNames(task.dir)
    expect(stored.length).toBeLessThanOrEqual(FILES)
    for (const id of referenced) expect(stored).toContain(id)
    expect(task.messages.filter((m) => m.tool_name === 'read_file').length).toBeGreaterThan(stored.length)
  })
})
