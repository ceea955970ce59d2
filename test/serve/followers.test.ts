import { connect } from 'node:net'
import type { Socket } from 'node:net'
import { describe, expect, it, onTestFinished } from 'vitest'
import { makeTree, uuidN } from '../fixtures/tree.js'
import { parseExposition, total } from './exposition.js'
import { appendMessage, configWith, reindex, startServe, writeMessages } from './helpers.js'
import type { Serve } from './helpers.js'
import { until } from '../helpers/wait.js'

/**
 * Issue 36: live (SSE) followers are bounded (docs/serve.md#live-followers). 2,000 raw
 * sockets ask to follow running tasks: past serve.max_followers_per_task for one task, and
 * past serve.max_followers in all, each gets 503 with Retry-After, while the page still
 * answers; every follower of a task shares one watcher (serve's /metrics counts them).
 */

interface Follower {
  socket: Socket
  status: number
  headers: string
  /** Everything received after the status line and headers. */
  body: () => string
}

/** Opens a raw connection that asks to follow `uuid`, and resolves with the answer's status once its headers came. */
function follow(s: Serve, uuid: string): Promise<Follower> {
  const { hostname, port } = new URL(s.url)
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname)
    let data = ''
    let done = false
    socket.setEncoding('utf8')
    socket.on('error', (err) => (done ? undefined : reject(err)))
    socket.on('data', (chunk: string) => {
      data += chunk
      const end = data.indexOf('\r\n\r\n')
      if (done || end < 0) return
      done = true
      const head = data.slice(0, end)
      resolve({ socket, status: Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1]), headers: head, body: () => data.slice(end + 4) })
    })
    socket.write(`GET /tasks/${uuid}/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n`)
  })
}

/** `count` followers of the tasks in turn, opened in batches of 100 (bounded: never all at once). */
async function followMany(s: Serve, uuids: string[], count: number, opened: Follower[]): Promise<Follower[]> {
  const answers: Follower[] = []
  for (let i = 0; i < count; i += 100) {
    const batch = await Promise.all(Array.from({ length: Math.min(100, count - i) }, (_, j) => follow(s, uuids[(i + j) % uuids.length] as string)))
    answers.push(...batch)
    opened.push(...batch)
  }
  return answers
}

async function gauges(s: Serve): Promise<{ followers: number; watchers: number; refused: number }> {
  const m = parseExposition(await (await s.get('/metrics')).text())
  return {
    followers: total(m, 'ctxagent_serve_followers'),
    watchers: total(m, 'ctxagent_serve_follow_watchers'),
    refused: total(m, 'ctxagent_serve_followers_refused_total'),
  }
}

describe('serve: live followers are bounded', () => {
  it('2,000 followers: 503 with Retry-After past each cap, the page still answers, one watcher per task', { timeout: 240_000 }, async () => {
    const tree = makeTree()
    const tasks = [1, 2, 3, 4].map((n) => uuidN(n))
    for (const uuid of tasks) {
      const dir = tree.write({ uuid, user: 'alice', location: 'running' })
      writeMessages(dir, [
        { role: 'system', content: 'sys' },
        { role: 'user', content: 'watch me' },
      ])
    }
    reindex(tree)
    const s = await startServe(tree.base, { config: configWith(tree, 'serve:\n  max_followers_per_task: 50\n  max_followers: 120\n') })
    const opened: Follower[] = []
    onTestFinished(() => {
      for (const f of opened) f.socket.destroy()
    })

    // 1,000 followers of one task: 50 are taken, the rest are told to come back later.
    const first = await followMany(s, [tasks[0] as string], 1000, opened)
    expect(first.filter((f) => f.status === 200)).toHaveLength(50)
    const refused = first.filter((f) => f.status !== 200)
    expect(refused).toHaveLength(950)
    for (const f of refused) {
      expect(f.status).toBe(503)
      expect(f.headers).toMatch(/\r\nretry-after: 30\r\n/i)
    }
    await until('a refusal body', async () => (refused[0] as Follower).body().includes('serve.max_followers_per_task'))
    expect((await s.get(`/tasks/${tasks[0]}`)).status).toBe(200)
    expect(await gauges(s)).toEqual({ followers: 50, watchers: 1, refused: 950 })

    // 1,000 more, of the three other tasks in turn: 70 more are taken (120 in all), the rest refused.
    const second = await followMany(s, tasks.slice(1), 1000, opened)
    expect(second.filter((f) => f.status === 200)).toHaveLength(70)
    expect(second.filter((f) => f.status === 503)).toHaveLength(930)
    await until('a refusal body', async () => (second.find((f) => f.status === 503) as Follower).body().includes('serve.max_followers)'))
    const page = await s.get(`/tasks/${tasks[1]}`)
    expect(page.status).toBe(200)
    expect(await page.text()).toContain('watch me')
    expect((await s.get('/api/tasks')).status).toBe(200)
    // One watcher per task, whatever the number of its followers.
    expect(await gauges(s)).toEqual({ followers: 120, watchers: 4, refused: 1880 })

    // A message appended once reaches every follower of its task, once each.
    appendMessage(tree.dir({ uuid: tasks[0] as string, location: 'running' }), { seq: 3, role: 'assistant', content: 'FAN-OUT-MARKER' })
    const taken = first.filter((f) => f.status === 200)
    await until('every follower to get the message', async () => taken.every((f) => f.body().includes('FAN-OUT-MARKER')))
    for (const f of taken) expect(f.body().match(/FAN-OUT-MARKER/g)).toHaveLength(1)

    // Followers that leave free their places, and a task's watcher goes with its last follower.
    for (const f of taken) f.socket.destroy()
    await until('the first task unwatched', async () => {
      const g = await gauges(s)
      return g.followers === 70 && g.watchers === 3
    })
    const again = await follow(s, tasks[0] as string)
    opened.push(again)
    expect(again.status).toBe(200)
    // It reads from where its page read: the message appended earlier is not sent again.
    appendMessage(tree.dir({ uuid: tasks[0] as string, location: 'running' }), { seq: 4, role: 'assistant', content: 'SECOND-MARKER' })
    await until('the new message', async () => again.body().includes('SECOND-MARKER'))
  })

  it('a follower that never reads is dropped once what it has not taken passes the bound; the others go on', { timeout: 240_000 }, async () => {
    const tree = makeTree()
    const uuid = uuidN(1)
    const dir = tree.write({ uuid, user: 'alice', location: 'running' })
    writeMessages(dir, [{ role: 'system', content: 'sys' }])
    reindex(tree)
    const s = await startServe(tree.base)
    const reader = await follow(s, uuid)
    const stuck = await follow(s, uuid)
    onTestFinished(() => {
      reader.socket.destroy()
      stuck.socket.destroy()
    })
    expect([reader.status, stuck.status]).toEqual([200, 200])
    // Never read again: what serve sends it piles up (the kernel's buffers, then serve's own).
    stuck.socket.pause()
    let bytes = 0
    reader.socket.on('data', (chunk: string) => (bytes += chunk.length))
    const big = 'x'.repeat(100_000)
    let seq = 2
    await until('the stuck follower dropped', async () => {
      for (let i = 0; i < 5; i++) appendMessage(dir, { seq: seq++, role: 'assistant', content: big })
      const g = await gauges(s)
      return g.followers === 1 && g.watchers === 1
    })
    // The reading one still gets what comes next.
    const before = bytes
    appendMessage(dir, { seq: seq++, role: 'assistant', content: 'AFTER-DROP' })
    await until('the reader to get it', async () => reader.body().includes('AFTER-DROP'))
    expect(bytes).toBeGreaterThan(before)
  })
})
