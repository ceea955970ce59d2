import { writeFileSync } from 'node:fs'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { describe, expect, it, onTestFinished } from 'vitest'
import { runSetup } from '../run/harness.js'
import { record } from './report.js'

/*
 * Issue #36: with span content off, a failed LLM call's span status carried the server's
 * error text, which quoted the task's statement. A hostile model and server do their best
 * to put the task's words into every field a span takes: the error of a failed request,
 * a tool name, a call id, a tool's error; the exported spans must hold none of them.
 */

/** An OTLP/HTTP receiver on 127.0.0.1: every request body it was sent, as text. */
async function receiver(): Promise<{ url: string; bodies: string[] }> {
  const bodies: string[] = []
  const server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (d: Buffer) => chunks.push(d))
    req.on('end', () => {
      bodies.push(Buffer.concat(chunks).toString())
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}')
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  onTestFinished(() => new Promise<void>((resolve) => server.close(() => resolve())))
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, bodies }
}

describe('span content off', () => {
  it("the task's words in an LLM error, a tool name, a call id, and a tool's error: none in any exported span", async () => {
    const otlp = await receiver()
    const s = await runSetup()
    writeFileSync(s.config, s.fake.configYaml(`telemetry:\n  otlp_endpoint: ${otlp.url}\n`))
    const words = 'Quokka-Marmalade-7731'
    s.fake.queue.push(
      {
        calls: [
          { name: `${words}`, arguments: { note: words }, id: `call-${words}` },
          { name: 'read_file', arguments: { path: `${words}.txt` } },
          { name: 'glob', arguments: { pattern: `[${words}` } },
        ],
      },
      { status: 400, content: `invalid request: the prompt "${words}: fix the bug" breaks policy` },
    )
    const res = await s.run(['run', '--task', `${words}: fix the bug`, '--workspace', s.ws])
    expect(res.code, res.stderr).not.toBe(0)
    const all = otlp.bodies.join('\n')
    expect(all).toContain('ctxagent.task')
    expect(all).toContain('execute_tool other')
    expect(all).toContain('execute_tool read_file')
    for (const piece of ['Quokka', 'Marmalade', 'fix the bug', 'breaks policy']) expect(all, piece).not.toContain(piece)
    // The number alone, as a value of its own: a span's times and ids are long runs of digits that may hold it by chance.
    expect(all).not.toMatch(/(?<![0-9a-f])7731(?![0-9a-f])/)
    record('hostile-traces', { fields: 5 })
  })
})
