import { spawn } from 'node:child_process'
import { existsSync, mkdirSync, utimesSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { LockedError } from '../../../src/errors.js'
import { judgeLock } from '../../../src/storage/lock/staleness.js'
import { readLock } from '../../../src/storage/lock/record.js'
import { TaskLock } from '../../../src/storage/lock/lock.js'
import { hostname, processStart } from '../../../src/storage/fs/process-info.js'
import { makeTree } from '../../fixtures/tree.js'
import { deadPid } from '../../helpers/run.js'
import { alive, exitOf, killGroup } from '../../helpers/wait.js'

const policy = { staleAfterMs: 60_000 }
const ago = (ms: number) => new Date(Date.now() - ms).toISOString()

function writeLock(dir: string, lock: Record<string, unknown>, mtimeAgoMs = 0) {
  writeFileSync(join(dir, '.lock'), JSON.stringify(lock))
  if (mtimeAgoMs > 0) {
    const t = (Date.now() - mtimeAgoMs) / 1000
    utimesSync(join(dir, '.lock'), t, t)
  }
}

describe('judgeLock', () => {
  const base = { hostname: hostname(), acquired_at: ago(600_000) }

  it('holds a fresh heartbeat even when the pid is gone (it may have just written)', () => {
    const dir = makeTree().base
    writeLock(dir, { ...base, process_id: deadPid(), heartbeat_at: ago(1000) })
    expect(judgeLock(readLock(dir)!, new Date(), policy).stale).toBe(false)
  })

  it('reaps an old heartbeat of a gone pid, and of a reused pid (other start time)', () => {
    const dir = makeTree().base
    writeLock(dir, { ...base, process_id: deadPid(), heartbeat_at: ago(120_000) })
    expect(judgeLock(readLock(dir)!, new Date(), policy)).toMatchObject({ stale: true, reason: expect.stringContaining('is gone') })
    writeLock(dir, { ...base, process_id: process.pid, process_start: 'not-its-start', heartbeat_at: ago(120_000) })
    expect(judgeLock(readLock(dir)!, new Date(), policy)).toMatchObject({ stale: true, reason: expect.stringContaining('reused') })
  })

  it('holds an old heartbeat of a live pid, with or without a start time', () => {
    const dir = makeTree().base
    writeLock(dir, { ...base, process_id: process.pid, process_start: processStart(process.pid), heartbeat_at: ago(120_000) })
    expect(judgeLock(readLock(dir)!, new Date(), policy).stale).toBe(false)
    writeLock(dir, { ...base, process_id: process.pid, heartbeat_at: ago(120_000) })
    expect(judgeLock(readLock(dir)!, new Date(), policy).stale).toBe(false)
  })

  it('judges a lock of another host by heartbeat and file mtime alone, with twice the limit', () => {
    const dir = makeTree().base
    const remote = { hostname: 'elsewhere.example', acquired_at: ago(900_000), process_id: process.pid }
    writeLock(dir, { ...remote, heartbeat_at: ago(90_000) }, 90_000)
    expect(judgeLock(readLock(dir)!, new Date(), policy).stale).toBe(false) // 90 s < 2 × 60 s
    writeLock(dir, { ...remote, heartbeat_at: ago(300_000) }, 300_000)
    expect(judgeLock(readLock(dir)!, new Date(), policy).stale).toBe(true) // live pid here means nothing there
    writeLock(dir, { ...remote, heartbeat_at: ago(300_000) }) // their clock says old, our mtime says fresh
    expect(judgeLock(readLock(dir)!, new Date(), policy).stale).toBe(false)
  })

  it('treats a heartbeat in the future and an unreadable lock as held', () => {
    const dir = makeTree().base
    writeLock(dir, { ...base, process_id: deadPid(), heartbeat_at: new Date(Date.now() + 86_400_000).toISOString() }, 3_600_000)
    expect(judgeLock(readLock(dir)!, new Date(), policy).stale).toBe(false)
    writeFileSync(join(dir, '.lock'), '{garbage')
    expect(judgeLock(readLock(dir)!, new Date(), policy).stale).toBe(false)
  })
})

describe('TaskLock', () => {
  it('a directory gone before its lock is taken (the loser of a resume race) is a conflict, exit 4, that still reads as ENOENT', async () => {
    const dir = join(makeTree().base, 'paused', 'moved-away')
    const err = (await TaskLock.acquire(dir, policy).catch((e: unknown) => e)) as LockedError & { code?: string }
    expect(err).toBeInstanceOf(LockedError)
    expect(err.exitCode).toBe(4)
    expect(err.code).toBe('ENOENT')
    expect(err.message).toMatch(/moved away while its lock was being taken: another process took the task first/)
  })

  it('refuses a live holder, takes over a dead one, and releases only its own lock', async () => {
    const dir = makeTree().base
    const first = await TaskLock.acquire(dir, policy)
    await expect(TaskLock.acquire(dir, policy)).rejects.toThrow(LockedError)
    writeLock(dir, { hostname: hostname(), acquired_at: ago(600_000), process_id: deadPid(), heartbeat_at: ago(120_000) })
    expect(first.isStillOurs()).toBe(false)
    await expect(first.heartbeat()).rejects.toThrow(/lost the lock/)
    const second = await TaskLock.acquire(dir, policy)
    await first.release()
    expect(readLock(dir)?.info?.token).toBe(second.token)
    await second.heartbeat()
    expect(second.isStillOurs()).toBe(true)
    await second.release()
    expect(readLock(dir)).toBeNull()
  })

  it("a takeover from a dead owner removes the lock temps it left beside the task's directory, and no other task's", async () => {
    const tree = makeTree()
    const dir = join(tree.base, 'running', 'task-a')
    mkdirSync(dir, { recursive: true })
    const dead = deadPid()
    writeLock(dir, { hostname: hostname(), acquired_at: ago(600_000), process_id: dead, heartbeat_at: ago(120_000) })
    // What a holder killed inside a heartbeat's write leaves (writeLockTemp), and the same of another task.
    const mine = join(tree.base, 'running', `.task-a.lock.${dead}.0badc0de.tmp`)
    const other = join(tree.base, 'running', `.task-b.lock.${dead}.0badc0de.tmp`)
    const live = join(tree.base, 'running', `.task-a.lock.${process.pid}.0badc0de.tmp`)
    for (const path of [mine, other, live]) writeFileSync(path, '{}\n')
    const lock = await TaskLock.acquire(dir, policy)
    expect([existsSync(mine), existsSync(other), existsSync(live)]).toEqual([false, true, true])
    await lock.release()
  })
})

describe('leftover commands of a dead owner', () => {
  const spawnGroup = () => spawn('/bin/sh', ['-c', 'sleep 100 & sleep 100'], { detached: true, stdio: 'ignore' })

  it('a takeover from a dead owner kills the process groups its lock names, only when the leader is the one recorded', async () => {
    const dir = makeTree().base
    const ours = spawnGroup()
    const reused = spawnGroup()
    try {
      const pgid = ours.pid as number
      const other = reused.pid as number
      await waitUntil(() => processStart(pgid) !== null && processStart(other) !== null)
      const commands = [
        { pgid, start: processStart(pgid) },
        // The same id with another start time: a pid reused since, not the dead owner's command.
        { pgid: other, start: 'not-its-start' },
      ]
      writeLock(dir, { hostname: hostname(), acquired_at: ago(600_000), process_id: deadPid(), heartbeat_at: ago(120_000), commands })
      const lock = await TaskLock.acquire(dir, policy)
      expect(lock.stoppedCommands).toEqual([pgid])
      expect((await exitOf(ours)).signal).toBe('SIGKILL')
      expect(alive(other)).toBe(true)
      await lock.release()
    } finally {
      for (const child of [ours, reused]) if (child.pid) killGroup(child.pid)
    }
  })

  it('a forced takeover from a live owner kills nothing (the owner stops its own commands)', async () => {
    const dir = makeTree().base
    const command = spawnGroup()
    try {
      const pgid = command.pid as number
      await waitUntil(() => processStart(pgid) !== null)
      writeLock(dir, {
        hostname: hostname(),
        acquired_at: ago(1000),
        process_id: process.pid,
        process_start: processStart(process.pid),
        heartbeat_at: ago(1000),
        commands: [{ pgid, start: processStart(pgid) }],
      })
      const lock = await TaskLock.acquire(dir, { ...policy, force: true })
      expect(lock.stoppedCommands).toEqual([])
      expect(alive(pgid)).toBe(true)
      await lock.release()
    } finally {
      if (command.pid) killGroup(command.pid)
    }
  })

  it('an owner names its running commands in its lock and drops them when they end', async () => {
    const dir = makeTree().base
    const lock = await TaskLock.acquire(dir, policy)
    await lock.trackCommand(4242, true)
    expect(readLock(dir)?.info?.commands).toEqual([{ pgid: 4242, start: null }])
    await lock.trackCommand(4242, false)
    expect(readLock(dir)?.info?.commands).toBeUndefined()
    await lock.release()
  })
})

async function waitUntil(check: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !check(); i++) await new Promise((resolve) => setTimeout(resolve, 10))
  expect(check()).toBe(true)
}
