import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { describe, expect, it, onTestFinished } from 'vitest'
import { boundedFetch } from '../../src/llm/bounded-fetch.js'
import { OpenAiCompatibleClient } from '../../src/llm/openai-compatible.js'
import { parseConfig } from '../../src/config/load.js'

const BOM = '\ufeff'

/** A server on 127.0.0.1 whose answer is chosen by the path. */
async function server() {
  const srv = createServer((req, res) => {
    req.resume()
    if (req.url?.startsWith('/bom')) {
      res.writeHead(200, { 'content-type': 'application/json', 'x-request-id': 'req-1' })
      res.end(`${BOM}{"answer":"ünïcode ✓"}`)
    } else if (req.url?.startsWith('/down')) {
      res.writeHead(503, { 'content-type': 'application/json', 'retry-after-ms': '5' })
      res.end('{"error":{"message":"down"}}')
    } else if (req.url?.startsWith('/missing')) {
      res.writeHead(404, { 'content-type': 'application/json' })
      res.end('{"error":{"message":"model gpt-nothing does not exist"}}')
    } else {
      res.writeHead(204)
      res.end()
    }
  })
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve))
  onTestFinished(() => new Promise<void>((resolve) => srv.close(() => resolve())))
  return `http://127.0.0.1:${(srv.address() as AddressInfo).port}`
}

const bounds = { totalMs: 10_000, maxBytes: 1024 * 1024, maxRetryWaitMs: 1000 }

describe('boundedFetch answers as fetch does', () => {
  it('reads a body held in memory as JSON, text, bytes or a stream, a byte order mark dropped from the text', async () => {
    const base = await server()
    const fetchOnce = () => boundedFetch(bounds)(`${base}/bom`, { method: 'POST', body: Buffer.from('{}'), headers: { 'content-type': 'application/json' } })
    const viaFetch = await fetch(`${base}/bom`, { method: 'POST', body: '{}' })
    const platform = await viaFetch.text()

    const a = await fetchOnce()
    expect(a.status).toBe(200)
    expect(a.ok).toBe(true)
    expect(a.headers.get('x-request-id')).toBe('req-1')
    expect(await a.json()).toEqual({ answer: 'ünïcode ✓' })
    // The same text as the platform's fetch gives.
    expect(await (await fetchOnce()).text()).toBe(platform)
    const bytes = Buffer.from(await (await fetchOnce()).arrayBuffer())
    expect(bytes.toString('utf8')).toBe(`${BOM}{"answer":"ünïcode ✓"}`)
    const streamed = await new Response((await fetchOnce()).body).text()
    expect(streamed).toBe(platform)
  })

  it('gives no body for 204, and the SDK still reads an error body into its message', async () => {
    const base = await server()
    const empty = await boundedFetch(bounds)(`${base}/empty`, { method: 'GET' })
    expect(empty.status).toBe(204)
    expect(empty.body).toBeNull()
    expect(await empty.text()).toBe('')

    const config = parseConfig(`llm:\n  openai:\n    base_url: ${base}/missing/v1\n    api_key: k\n    model: gpt-nothing\n    max_retries: 0\n`)
    const client = new OpenAiCompatibleClient(config.llm.openai, 'openai')
    await expect(client.chat([{ role: 'user', content: 'hi' }])).rejects.toThrow(/answered 404: .*model gpt-nothing does not exist/)
  })
})

describe('boundedFetch tells of a wait only before a retry the SDK makes', () => {
  it('with maxRetries 2: a wait before retries 1 and 2, none after the answer to the last try', async () => {
    const base = await server()
    const told: number[] = []
    const f = boundedFetch({ ...bounds, maxRetries: 2, onWait: (w) => told.push(w.retry) })
    for (const count of [0, 1, 2]) {
      const res = await f(`${base}/down`, { method: 'POST', body: Buffer.from('{}'), headers: { 'x-stainless-retry-count': String(count) } })
      expect(res.status).toBe(503)
    }
    expect(told).toEqual([1, 2])
  })
})
