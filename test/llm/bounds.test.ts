import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { describe, expect, it, onTestFinished } from 'vitest'
import { parseConfig } from '../../src/config/load.js'
import { ProviderError } from '../../src/errors.js'
import { OpenAiCompatibleClient } from '../../src/llm/openai-compatible.js'

const COMPLETION = JSON.stringify({
  id: 'x',
  object: 'chat.completion',
  created: 0,
  model: 'm',
  choices: [{ index: 0, finish_reason: 'stop', message: { role: 'assistant', content: 'hello' } }],
})

/** A hostile OpenAI-compatible server on 127.0.0.1: what each path does is named by it. */
async function hostileServer() {
  const seen: string[] = []
  let firstRequest: () => void = () => undefined
  const first = new Promise<void>((resolve) => (firstRequest = resolve))
  const server = createServer((req, res) => {
    req.resume()
    const path = req.url ?? ''
    seen.push(path)
    firstRequest()
    if (path.startsWith('/trickle')) {
      // Headers at once, then one byte every second: alive, never done.
      res.writeHead(200, { 'content-type': 'application/json' })
      res.flushHeaders()
      let i = 0
      const timer = setInterval(() => (i < COMPLETION.length ? res.write(COMPLETION[i++] as string) : res.end()), 1000)
      res.on('close', () => clearInterval(timer))
    } else if (path.startsWith('/huge')) {
      res.writeHead(200, { 'content-type': 'application/json' })
      res.write('{"id":"x","pad":"')
      const chunk = Buffer.alloc(64 * 1024, 'a')
      const pump = () => {
        while (!res.destroyed && res.write(chunk));
      }
      res.on('drain', pump)
      pump()
    } else if (path.startsWith('/retry')) {
      // An hour's wait asked for once (a usage limit, or with /retry503 a busy server), then the answer.
      if (seen.filter((p) => p.startsWith('/retry')).length === 1) {
        res.writeHead(path.startsWith('/retry503') ? 503 : 429, { 'content-type': 'application/json', 'retry-after': '3600' })
        res.end('{"error":{"message":"slow down"}}')
      } else {
        res.writeHead(200, { 'content-type': 'application/json' })
        res.end(COMPLETION)
      }
    } else if (path.startsWith('/html')) {
      res.writeHead(200, { 'content-type': 'text/html' })
      res.end('<html><body>Welcome to nginx!</body></html>')
    }
  })
  const sockets = new Set<import('node:net').Socket>()
  server.on('connection', (s) => sockets.add(s.once('close', () => sockets.delete(s))))
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  onTestFinished(
    () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy()
        server.close(() => resolve())
      }),
  )
  const port = (server.address() as AddressInfo).port
  return { seen, first, url: (path: string) => `http://127.0.0.1:${port}/${path}/v1` }
}

function client(baseUrl: string, yaml = '') {
  const config = parseConfig(`llm:\n${yaml}  openai:\n    base_url: ${baseUrl}\n    api_key: k\n    model: m\n    timeout_seconds: 2\n    max_retries: 1\n`)
  return new OpenAiCompatibleClient(config.llm.openai, 'openai', {
    maxOutputTokens: config.llm.max_output_tokens,
    maxRetryWait: config.llm.max_retry_wait,
    maxResponseBytes: config.llm.max_response_bytes,
  })
}

async function failure(promise: Promise<unknown>): Promise<ProviderError> {
  const err = await promise.then(
    () => null,
    (e: unknown) => e,
  )
  expect(err).toBeInstanceOf(ProviderError)
  return err as ProviderError
}

describe('an LLM request is bounded in time and bytes, whatever the server does (issue 21 §3)', () => {
  it('a body trickling one byte a second ends at timeout_seconds for the whole response, in one line', async () => {
    const s = await hostileServer()
    const err = await failure(client(s.url('trickle')).chat([{ role: 'user', content: 'hi' }]))
    expect(err.message).toMatch(/not complete within 2s|did not answer within 2s/)
    expect(err.message).not.toContain('\n')
  })

  it('a body without end stops at llm.max_response_bytes', async () => {
    const s = await hostileServer()
    const err = await failure(client(s.url('huge'), '  max_response_bytes: 1000000\n').chat([{ role: 'user', content: 'hi' }]))
    expect(err.message).toMatch(/over 1,000,000 bytes/)
  })

  it('Retry-After: 3600 on a 503 is waited only llm.max_retry_wait, then the retry answers', async () => {
    const s = await hostileServer()
    const reply = await client(s.url('retry503'), '  max_retry_wait: 1\n').chat([{ role: 'user', content: 'hi' }])
    expect(reply.message.content).toBe('hello')
    expect(s.seen.filter((p) => p.startsWith('/retry'))).toHaveLength(2)
  })

  it('a 429 with Retry-After: 3600, beyond llm.max_retry_wait, is a usage limit: not retried before it lifts, the error says when (docs/running.md#rate-limits)', async () => {
    const s = await hostileServer()
    const before = Date.now()
    const err = (await failure(client(s.url('retry'), '  max_retry_wait: 1\n').chat([{ role: 'user', content: 'hi' }]))) as ProviderError
    expect(s.seen.filter((p) => p.startsWith('/retry'))).toHaveLength(1)
    expect(err.failure).toBe('rate_limited')
    expect(err.limitedUntil?.getTime()).toBeGreaterThanOrEqual(before + 3_600_000 - 1000)
    expect(err.message).toMatch(/a usage limit until /)
  })

  it('a stop ends the wait between retries at once (the SDK does not listen to it there)', async () => {
    const s = await hostileServer()
    const stop = new AbortController()
    const pending = client(s.url('retry'), '  max_retry_wait: 3600\n').chat([{ role: 'user', content: 'hi' }], { signal: stop.signal })
    await s.first
    stop.abort()
    const err = await failure(pending)
    expect(err.message).toMatch(/cancelled/)
  })

  it('an HTML page answered with 200 is one line naming the base_url to check', async () => {
    const s = await hostileServer()
    const err = await failure(client(s.url('html')).chat([{ role: 'user', content: 'hi' }]))
    expect(`${err.message} (${err.hint})`).toMatch(/not a chat completion.*base_url/)
    expect(err.message).not.toMatch(/Cannot read properties/)
  })
})
