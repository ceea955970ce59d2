import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { giveToSandbox } from '../helpers/sandbox-owner.js'
import { onlyTask, runSetup } from './harness.js'

/*
 * Issue 40 #9: a run cannot end with exit 0 while its task is unfinished. Two requests
 * pipelined on one connection to the egress proxy (both refused) once left the second's
 * record open, the proxy's close() awaiting it forever and nothing keeping Node's loop
 * alive: `run` exited 0 with the task in running/. A run whose loop drains with its task
 * unsettled is an error, and the task is paused (docs/contract.md §12.3).
 */

/** A command's script: two requests in one write to the proxy, then every byte of the answer. */
const PIPELINE = String.raw`
const net = require('net')
const proxy = new URL(process.env.HTTP_PROXY)
const s = net.connect(Number(proxy.port), proxy.hostname)
let got = ''
s.on('data', (d) => {
  got += d
  if (got.split('refused:').length === 3) s.end()
})
s.on('close', () => console.log('answers ' + (got.match(/^HTTP\/1.1 403/gm) || []).length))
s.write('GET http://127.0.0.1:1/a HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\nGET http://127.0.0.1:2/b HTTP/1.1\r\nHost: 127.0.0.1:2\r\n\r\n')
`

describe('a run whose work cannot end', () => {
  it('completes with two requests pipelined on one connection to the egress proxy, both answered and logged', { timeout: 120_000 }, async () => {
    const s = await runSetup('tools:\n  shell: true\n  network: proxy\n')
    writeFileSync(join(s.ws, 'pipeline.cjs'), PIPELINE, { mode: 0o644 })
    giveToSandbox(s.ws)
    s.fake.queue.push(
      { calls: [{ name: 'run_command', arguments: { command: 'node pipeline.cjs', timeout_seconds: 60 } }] },
      { calls: [{ name: 'finish', arguments: { summary: 'probed', status: 'done' } }] },
    )
    const r = await s.run(['run', '--task', 'probe the proxy', '--workspace', s.ws])
    expect({ code: r.code, err: r.code === 0 ? '' : r.stderr }).toEqual({ code: 0, err: '' })
    const task = onlyTask(s.tree)
    expect([task.location, task.state.status]).toEqual(['completed', 'completed'])
    const result = s.fake.requests[1]?.body.messages.filter((m) => m.role === 'tool').at(-1)?.content ?? ''
    expect(result).toContain('answers 2')
    const network = task.tools.filter((t) => t.kind === 'network')
    expect(network.map((t) => [(t.arguments as { port: number }).port, t.status])).toEqual(
      expect.arrayContaining([
        [1, 'error'],
        [2, 'error'],
      ]),
    )
    expect(network).toHaveLength(2)
  })

  it('a loop that drains with the task unsettled exits 1, says why, and pauses the task', { timeout: 60_000 }, async () => {
    const s = await runSetup()
    const r = await s.run(['run', '--task', 'anything', '--workspace', s.ws, '--log-format', 'text'], { CTXAGENT_TEST_STALL_AT: 'run:work' })
    expect(r.code).toBe(1)
    expect(r.stderr).toContain('the run stopped with its task unfinished: nothing was left to wait for')
    const task = onlyTask(s.tree)
    expect([task.location, task.state.status]).toEqual(['paused', 'paused'])
    expect(task.state.error).toContain('the run stopped with its task unfinished')
    expect(r.stderr).toContain(`ctxagent run --resume ${task.uuid}`)
  })
})
