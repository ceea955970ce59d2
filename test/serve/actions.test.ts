import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { exitOf } from '../helpers/wait.js'
import { runSetup } from '../run/harness.js'
import { startServe, TOKEN } from './helpers.js'

async function until<T>(what: string, probe: () => T | null | undefined | false): Promise<T> {
  for (let i = 0; ; i++) {
    const value = probe()
    if (value) return value
    if (i > 2400) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 25))
  }
}

describe('serve actions on a real run', () => {
  it('pause from the API pauses the running agent as ctxagent pause does, audited via serve', async () => {
    const s = await runSetup(`serve:\n  token: ${TOKEN}\n`)
    let n = 0
    s.fake.fallback = () => ({ delayMs: 20, calls: [{ name: 'glob', arguments: { pattern: `*${n++}*` } }] })
    const agent = s.start(['run', '--task', 'keep looking', '--workspace', s.ws])
    const uuid = await until('the task in running/', () => readdirSync(join(s.tree.base, 'running')).find((d) => /^[0-9a-f-]{36}$/.test(d)))
    await until('a turn', () => s.fake.answered > 1)
    const served = await startServe(s.tree.base, { config: s.config })
    const denied = await served.get(`/api/tasks/${uuid}/pause`, { method: 'POST' })
    expect(denied.status).toBe(401)
    expect(existsSync(join(s.tree.base, 'running', uuid))).toBe(true)
    const res = await served.get(`/api/tasks/${uuid}/pause?wait=120`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}`, 'x-ctxagent-operator': 'gina' } })
    expect(res.status).toBe(200)
    expect(await res.json()).toEqual({ uuid, outcome: 'paused' })
    expect(existsSync(join(s.tree.base, 'paused', uuid))).toBe(true)
    await exitOf(agent.child)
    const audit = readFileSync(join(s.tree.base, 'audit.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>)
    expect(audit.find((a) => a.command === 'pause')).toMatchObject({ uuid, via: 'serve', operator: 'gina' })
    const again = await served.get(`/api/tasks/${uuid}/pause`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}` } })
    expect(await again.json()).toEqual({ uuid, outcome: 'already_paused' })
  })
})
