import { mkdirSync, readdirSync, renameSync, statSync, utimesSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { parseConfig } from '../../../src/config/load.js'
import { Layout } from '../../../src/storage/fs/layout.js'
import { LockLostError } from '../../../src/storage/lock/lock.js'
import { createTask } from '../../../src/storage/task/lifecycle.js'
import { CorruptRecordError } from '../../../src/errors.js'
import { makePrivateDir, writeFileAtomic } from '../../../src/storage/fs/files.js'
import { JsonlAppender } from '../../../src/storage/format/jsonl.js'
import { normalizeMetadata } from '../../../src/storage/task/metadata.js'
import { readState, updateState, writeState, initialState } from '../../../src/storage/task/state.js'
import { makeTree } from '../../fixtures/tree.js'

describe('state.json', () => {
  it('applies concurrent updates without losing any and leaves no temp files', async () => {
    const dir = makeTree().base
    await writeState(dir, initialState(new Date('2024-01-01T00:00:00Z')))
    await Promise.all(Array.from({ length: 20 }, () => updateState(dir, (s) => ({ llm_call_count: s.llm_call_count + 1 }))))
    expect(readState(dir)?.llm_call_count).toBe(20)
    expect(readdirSync(dir).filter((f) => f.includes('state'))).toEqual(['state.json'])
  })

  // Issue 22: the owner holds the task's .lock, so no other process writes its state.json meanwhile.
  it('the owner writes from memory: no .state.lock, no read (a held .state.lock does not stop it, a damaged file is written whole)', async () => {
    const base = makeTree().base
    const task = await createTask(
      { layout: new Layout(base), config: parseConfig(''), index: null, now: () => new Date(), warn: () => undefined },
      { task_key: { task_source: 'local', owner: null, repo: 'r', task_type: 'task', task_id: '1' }, user: null },
    )
    const dir = task.dir
    // Held by a live holder (fresh mtime): a writer that takes it would wait 5 s, then fail.
    mkdirSync(join(dir, '.state.lock'))
    const keepFresh = setInterval(() => utimesSync(join(dir, '.state.lock'), new Date(), new Date()), 200)
    try {
      await task.update({ llm_call_count: 7 })
      writeFileSync(join(dir, 'state.json'), '{torn')
      await task.update((s) => ({ llm_call_count: s.llm_call_count + 1 }))
    } finally {
      clearInterval(keepFresh)
    }
    expect(readState(dir)).toMatchObject({ status: 'initializing', llm_call_count: 8 })
    expect(readdirSync(dir).filter((f) => f.includes('state'))).toEqual(['.state.lock', 'state.json'])
    await task.fail('test over')
  })

  it("a turn's counters are written off the turn's path (a write still on its way is not waited for), every other write waits for them, and a lock lost meanwhile stops them", async () => {
    const base = makeTree().base
    const task = await createTask(
      { layout: new Layout(base), config: parseConfig(''), index: null, now: () => new Date(), warn: () => undefined },
      { task_key: { task_source: 'local', owner: null, repo: 'r', task_type: 'task', task_id: '1' }, user: null },
    )
    const dir = task.dir
    for (let turn = 1; turn <= 3; turn++) {
      await task.saveProgress({ turns: turn, llm_call_count: turn })
      expect(task.state.turns).toBe(turn)
    }
    // No I/O has run since the first began: the turns did not wait for it (the newest is written after it).
    expect(readState(dir)?.turns).toBeUndefined()
    await task.settleState()
    expect(readState(dir)).toMatchObject({ turns: 3, llm_call_count: 3 })
    await task.update({ last_activity: 'checked' })
    expect(readState(dir)).toMatchObject({ turns: 3, llm_call_count: 3, last_activity: 'checked' })
    await task.saveProgress({ turns: 4 })
    // Taken over while the write is on its way (the write has not reached its rename: no I/O has run since).
    const stolen = join(dir, 'stolen.tmp')
    writeFileSync(
      stolen,
      `${JSON.stringify({ process_id: 1, hostname: 'elsewhere', acquired_at: new Date().toISOString(), heartbeat_at: new Date().toISOString(), token: 'theirs' })}\n`,
    )
    renameSync(stolen, join(dir, '.lock'))
    await expect(task.update({ turns: 5 })).rejects.toThrow(LockLostError)
    expect(readState(dir)?.turns).toBe(3)
    expect(readdirSync(dir).filter((f) => f.endsWith('.tmp'))).toEqual([])
  })

  it('returns null when missing and a clear error when not JSON', () => {
    const dir = makeTree().base
    expect(readState(dir)).toBeNull()
    writeFileSync(join(dir, 'state.json'), '{oops')
    expect(() => readState(dir)).toThrow(CorruptRecordError)
  })
})

describe('metadata.json', () => {
  it('derives the flat fields from docs/contract.md §9 task_key and the reverse', () => {
    const m000 = normalizeMetadata({ uuid: 'u', task_key: { task_source: 'gitlab', owner: 'o', repo: 'r', task_type: 'merge_request', task_id: '9' } })
    expect(m000).toMatchObject({ task_type: 'gitlab_merge_request', repository: 'o/r', task_identifier: '9' })
    const m003 = normalizeMetadata({ uuid: 'u', task_type: 'github_issue', task_identifier: '123', repository: 'a/b', user: 'me' })
    expect(m003.task_key).toEqual({ task_source: 'github', owner: 'a', repo: 'b', task_type: 'issue', task_id: '123' })
  })
})

describe('permissions', () => {
  it('creates directories 0700 and files 0600 whatever the umask', () => {
    const base = makeTree().base
    const old = process.umask(0o000)
    try {
      makePrivateDir(join(base, 'a', 'b'))
      writeFileAtomic(join(base, 'a', 'b', 'x.json'), '{}')
      JsonlAppender.open(join(base, 'a', 'b', 'y.jsonl')).close()
    } finally {
      process.umask(old)
    }
    const tight = process.umask(0o277)
    try {
      makePrivateDir(join(base, 'c'))
      JsonlAppender.open(join(base, 'c', 'z.jsonl')).close()
    } finally {
      process.umask(tight)
    }
    const mode = (p: string) => statSync(join(base, p)).mode & 0o777
    expect([mode('a'), mode('a/b'), mode('c')]).toEqual([0o700, 0o700, 0o700])
    expect([mode('a/b/x.json'), mode('a/b/y.jsonl'), mode('c/z.jsonl')]).toEqual([0o600, 0o600, 0o600])
  })
})
