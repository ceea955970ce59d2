import { existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { makeTree } from '../fixtures/tree.js'
import { cliAsync, helper } from '../helpers/run.js'
import { exitOf, lineFrom, sleep, until } from '../helpers/wait.js'
import { runSetup } from '../run/harness.js'
import { configWith, startServe, TOKEN } from './helpers.js'

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
    const res = await served.get(`/api/tasks/${uuid}/pause?wait=120`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'x-ctxagent-operator': 'gina' },
    })
    expect(res.status).toBe(200)
    expect(await res.json()).toEqual({ uuid, outcome: 'paused' })
    expect(existsSync(join(s.tree.base, 'paused', uuid))).toBe(true)
    await exitOf(agent.child)
    const audit = readFileSync(join(s.tree.base, 'audit.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>)
    expect(audit.find((a) => a.command === 'pause')).toMatchObject({ uuid, via: 'serve', operator: 'gina' })
    const again = await served.get(`/api/tasks/${uuid}/pause`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}` } })
    expect(await again.json()).toEqual({ uuid, outcome: 'already_paused' })
  })
})

describe("the page's pause of a task that finishes", () => {
  it('answers as ctxagent pause does while its task finishes (paused, finished, or the CLI\'s "is finished" line, 409), never a raw error (looped)', {
    timeout: 600_000,
  }, async () => {
    const tree = makeTree()
    const config = configWith(tree, `serve:\n  token: ${TOKEN}\n`)
    const served = await startServe(tree.base, { config })
    const auth = { authorization: `Bearer ${TOKEN}`, 'x-ctxagent-operator': 'gina' }
    const seen: Record<string, number> = {}
    let last = ''
    for (let i = 0; i < 12; i++) {
      rmSync(join(tree.base, 'go'), { force: true })
      const owner = helper('finisher.mjs', [tree.base, '0'])
      const uuid = (await lineFrom(owner, /^[0-9a-f-]{36}$/)).trim()
      // Swept from "the page waiting for the owner" (the pause first, the finish let go later each time)
      // to "the owner finishing as the page looks" and "finished before" (the finish first).
      const first = i < 6
      if (!first) writeFileSync(join(tree.base, 'go'), '')
      await sleep(first ? 0 : (i - 6) * 10)
      const pausing = served.get(`/api/tasks/${uuid}/pause?wait=60`, { method: 'POST', headers: auth })
      if (first) {
        await sleep(i * 150)
        writeFileSync(join(tree.base, 'go'), '')
      }
      const [res] = await Promise.all([pausing, exitOf(owner)])
      const body = (await res.json()) as { outcome?: string; error?: string }
      const said = res.status === 200 ? `200 ${body.outcome}` : `${res.status} ${body.error?.replace(uuid, '<uuid>')}`
      expect(said, `try ${i}`).toMatch(
        /^(200 finished|200 paused|409 task <uuid> is finished \(in completed\/\); there is nothing to pause \(check the uuid\))$/,
      )
      seen[said] = (seen[said] ?? 0) + 1
      last = uuid
    }
    expect(Object.keys(seen).length, JSON.stringify(seen)).toBeGreaterThan(1)
    // A task finished before the page asked: the page's words are the CLI's line.
    const page = await served.get(`/api/tasks/${last}/pause`, { method: 'POST', headers: auth })
    const cli = await cliAsync(['pause', last, '--home', tree.base, '--config', config])
    expect(cli.code).toBe(4)
    expect(page.status).toBe(409)
    expect(`ctxagent: ${((await page.json()) as { error: string }).error}\n`).toBe(cli.stderr)
  })
})
