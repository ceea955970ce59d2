import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it, onTestFinished } from 'vitest'
import { exitOf } from '../helpers/wait.js'
import { readTask, runSetup, waitFor } from '../run/harness.js'
import type { RunSetup } from '../run/harness.js'
import { record } from './report.js'
import { reachableRoot } from '../helpers/reachable.js'

// Hostile inputs against liveness: each wait a hostile server can impose is ended by
// every kind of stop (SIGINT, `ctxagent pause`, --timeout), and the task settles as that stop says.
const HOSTILE = join(reachableRoot(), 'test', 'helpers', 'hostile-mcp.mjs')

interface Wait {
  /** Configures the hostile party; returns a probe that is true once the task is inside the wait. */
  arrange(s: RunSetup): () => boolean
}

const mcp = (s: RunSetup, mode: string, arg: string) =>
  // Unsandboxed: the hang server writes its host pid to a file in /tmp (a sandboxed one has its own /tmp and pids).
  writeFileSync(
    s.config,
    s.fake.configYaml(
      `mcp:\n  servers:\n    bad:\n      command: ${process.execPath}\n      args: [${JSON.stringify(HOSTILE)}, ${mode}, ${JSON.stringify(arg)}]\n      timeout_seconds: 600\n      sandbox: none\n`,
    ),
  )

const WAITS: Record<string, Wait> = {
  'an MCP tools/list that never answers': {
    arrange(s) {
      const marker = join(tmpdir(), `ctxagent-hang-${process.pid}-${Math.random().toString(36).slice(2)}`)
      onTestFinished(() => rmSync(marker, { force: true }))
      mcp(s, 'hang', marker)
      return () => existsSync(marker) && readFileSync(marker, 'utf8') !== ''
    },
  },
  'an MCP tool call that never answers': {
    arrange(s) {
      mcp(s, 'big', '10')
      s.fake.queue.push({ calls: [{ name: 'bad__hang', arguments: {} }] })
      return () => {
        const uuid = (['running', 'paused', 'completed'] as const).flatMap((l) => s.tree.layout.list(l))[0]
        return uuid !== undefined && readTask(s.tree, uuid).messages.some((m) => m.role === 'assistant')
      }
    },
  },
  'an LLM request that never answers': {
    arrange(s) {
      s.fake.queue.push({ delayMs: 600_000, content: 'never' })
      return () => s.fake.requests.length >= 1
    },
  },
}

const STOPS = {
  SIGINT: { flags: [] as string[], code: 130, status: 'paused', location: 'paused' },
  pause: { flags: [] as string[], code: 0, status: 'paused', location: 'paused' },
  '--timeout': { flags: ['--timeout', '8s'], code: 5, status: 'timeout', location: 'completed' },
} as const

let held = 0
afterAll(() => record('hostile-liveness', { waits_stopped: `${held} of ${Object.keys(WAITS).length * Object.keys(STOPS).length}` }))

describe('torture: hostile waits end on every stop', () => {
  for (const [waitName, wait] of Object.entries(WAITS)) {
    for (const [stopName, stop] of Object.entries(STOPS)) {
      it(`${waitName}, stopped by ${stopName}`, async () => {
        const s = await runSetup()
        const inside = wait.arrange(s)
        const started = s.start(['run', '--task', 't', '--workspace', s.ws, ...stop.flags])
        // --timeout strikes by itself (perhaps before a busy machine lets the test look): whether the wait was entered is checked after.
        if (stopName !== '--timeout') await waitFor('the task to be inside the wait', () => inside() && s.tree.layout.list('running')[0])
        const uuid = await waitFor('the task', () => (['running', 'paused', 'completed'] as const).flatMap((l) => s.tree.layout.list(l))[0])
        if (stopName === 'SIGINT') started.child.kill('SIGINT')
        if (stopName === 'pause') expect((await s.run(['pause', uuid, '--wait', '60s'])).code).toBe(0)
        const exit = await exitOf(started.child)
        expect(exit.code, started.err()).toBe(stop.code)
        expect(inside(), 'the task was inside the wait').toBe(true)
        expect(readTask(s.tree, uuid)).toMatchObject({ location: stop.location, state: { status: stop.status } })
        held++
      })
    }
  }
})
