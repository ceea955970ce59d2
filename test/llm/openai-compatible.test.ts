import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { gzipSync } from 'node:zlib'
import { describe, expect, it, onTestFinished, vi } from 'vitest'
import { parseConfig } from '../../src/config/load.js'
import { ProviderError, UsageError } from '../../src/errors.js'
import type { ChatMessage, ToolSpec } from '../../src/llm/client.js'
import { requestBody } from '../../src/llm/openai-compatible.js'
import { createLlmClient, requireLlmClient } from '../../src/llm/providers.js'
import { startFakeLlm } from '../helpers/fake-llm.js'

describe('OpenAI-compatible client', () => {
  it('sends the model and messages and returns the reply with usage', async () => {
    const fake = await startFakeLlm()
    fake.queue.push({ content: 'hello', usage: { prompt_tokens: 12, completion_tokens: 3, total_tokens: 15 } })
    const client = requireLlmClient(parseConfig(fake.configYaml()))
    const reply = await client.chat([{ role: 'user', content: 'hi' }], { temperature: 0, maxTokens: 50 })
    expect(reply).toEqual({ message: { role: 'assistant', content: 'hello' }, usage: { prompt_tokens: 12, completion_tokens: 3, total_tokens: 15 } })
    expect(fake.requests[0]).toMatchObject({
      path: '/v1/chat/completions',
      body: { model: 'fake-model', messages: [{ role: 'user', content: 'hi' }], temperature: 0, max_tokens: 50 },
    })
    expect(client.contextLength).toBe(8000)
  })

  it('retries a 500 with backoff, then succeeds', async () => {
    const fake = await startFakeLlm()
    fake.queue.push({ status: 500, headers: { 'retry-after-ms': '10' } }, { content: 'second time lucky' })
    const reply = await requireLlmClient(parseConfig(fake.configYaml())).chat([{ role: 'user', content: 'x' }])
    expect(reply.message.content).toBe('second time lucky')
    expect(fake.requests).toHaveLength(2)
  })

  it('turns failures into one clear line: status, unreachable server, bad key', async () => {
    const fake = await startFakeLlm()
    fake.fallback = () => ({ status: 503, headers: { 'retry-after-ms': '5' }, content: 'overloaded' })
    const client = requireLlmClient(parseConfig(fake.configYaml()))
    await expect(client.chat([{ role: 'user', content: 'x' }])).rejects.toThrow(
      new RegExp(`LLM server ${fake.url.replace(/[/.]/g, '\\$&')} \\(openai, model fake-model\\) answered 503 after 2 retries`),
    )
    expect(fake.requests).toHaveLength(3)
    fake.fallback = () => ({ status: 401, content: 'bad key' })
    await expect(client.chat([{ role: 'user', content: 'x' }])).rejects.toMatchObject({
      message: expect.stringContaining('refused the API key'),
      hint: 'check llm.openai.api_key or OPENAI_API_KEY',
    })
    const dead = requireLlmClient(parseConfig('llm:\n  openai:\n    base_url: http://127.0.0.1:9/v1\n    max_retries: 0\n'))
    const err = await dead.chat([{ role: 'user', content: 'x' }]).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(ProviderError)
    expect((err as ProviderError).message).toMatch(/^cannot reach LLM server http:\/\/127\.0\.0\.1:9\/v1/)
  })

  it('names why a connection failed: refused, or a name that does not resolve', async () => {
    const refused = requireLlmClient(parseConfig('llm:\n  openai:\n    base_url: http://127.0.0.1:9/v1\n    max_retries: 0\n'))
    await expect(refused.chat([{ role: 'user', content: 'x' }])).rejects.toMatchObject({
      message: expect.stringMatching(/^cannot reach LLM server http:\/\/127\.0\.0\.1:9\/v1 \(openai, model .*\): connection refused$/),
      hint: 'is the server running and listening there? check llm.openai.base_url',
    })
    // .invalid never resolves (RFC 6761): the resolver answers at once, with no network.
    const unknown = requireLlmClient(parseConfig('llm:\n  openai:\n    base_url: http://no-such-host.invalid/v1\n    max_retries: 0\n'))
    await expect(unknown.chat([{ role: 'user', content: 'x' }])).rejects.toMatchObject({
      message: expect.stringMatching(/: could not resolve no-such-host\.invalid( \(DNS did not answer\))?$/),
      hint: "check the host name in llm.openai.base_url, and this machine's DNS",
    })
  })

  it('uses the Ollama endpoint for provider ollama, and none means no client', () => {
    const ollama = createLlmClient(parseConfig('llm:\n  provider: ollama\n'))
    expect(ollama?.model).toBe('llama3.1')
    expect(createLlmClient(parseConfig('llm:\n  provider: none\n'))).toBeNull()
    expect(() => requireLlmClient(parseConfig('llm:\n  provider: none\n'))).toThrow(UsageError)
  })
  // Issue 22: the body is assembled from each message's JSON, made once per message.
  describe('the request body', () => {
    const tools: ToolSpec[] = [
      {
        type: 'function',
        function: { name: 'read_file', description: 'Reads "a" file', parameters: { type: 'object', properties: { path: { type: 'string' } } } },
      },
    ]
    // Records carry more than the wire shape (seq, tool_name, timestamp): those never leave.
    const window = (): ChatMessage[] => [
      { role: 'system', content: 'You are a coding agent.\n\tTabs, "quotes", \\ backslashes, \u2028 and \u0000.' },
      { role: 'user', content: '日本語のタスク 🚀 with an emoji' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'read_file', arguments: '{"path":"a.ts"}' } }] },
      Object.assign({ role: 'tool', content: 'export const a = 1\n', tool_call_id: 'c1' } as ChatMessage, {
        seq: 4,
        tool_name: 'read_file',
        timestamp: '2026-11-26T00:00:00.000Z',
      }),
      { role: 'assistant', content: '', tool_calls: [] },
    ]
    const wire = (m: ChatMessage) => ({
      role: m.role,
      content: m.content,
      ...(m.tool_calls?.length ? { tool_calls: m.tool_calls } : {}),
      ...(m.tool_call_id === undefined ? {} : { tool_call_id: m.tool_call_id }),
    })

    it('is byte for byte JSON.stringify of the request, with and without tools and temperature', async () => {
      const fake = await startFakeLlm()
      const client = requireLlmClient(parseConfig(fake.configYaml()))
      const messages = window()
      await client.chat(messages, { tools, temperature: 0.2, maxTokens: 77 })
      await client.chat(messages)
      await client.chat([])
      expect(fake.requests.map((r) => r.raw.toString())).toEqual([
        JSON.stringify({ model: 'fake-model', messages: messages.map(wire), tools, max_tokens: 77, temperature: 0.2 }),
        JSON.stringify({ model: 'fake-model', messages: messages.map(wire), max_tokens: 4096 }),
        JSON.stringify({ model: 'fake-model', messages: [], max_tokens: 4096 }),
      ])
      expect(
        fake.requests[0]?.raw.equals(
          Buffer.from(JSON.stringify({ model: 'fake-model', messages: messages.map(wire), tools, max_tokens: 77, temperature: 0.2 })),
        ),
      ).toBe(true)
    })

    it('is sent again, the same bytes, on a retry', async () => {
      const fake = await startFakeLlm()
      fake.queue.push({ status: 500, headers: { 'retry-after-ms': '5' } }, { status: 429, headers: { 'retry-after-ms': '5' } }, { content: 'third time' })
      const reply = await requireLlmClient(parseConfig(fake.configYaml())).chat(window(), { tools })
      expect(reply.message.content).toBe('third time')
      expect(fake.requests).toHaveLength(3)
      expect(fake.requests[0]?.raw.length).toBeGreaterThan(200)
      expect(fake.requests[1]?.raw.equals(fake.requests[0]?.raw as Buffer)).toBe(true)
      expect(fake.requests[2]?.raw.equals(fake.requests[0]?.raw as Buffer)).toBe(true)
    })

    it('copies the beginning it shares with the previous body, and stays byte for byte JSON.stringify however the window changed', async () => {
      const fake = await startFakeLlm()
      const client = requireLlmClient(parseConfig(fake.configYaml()))
      const [system, task, call, result, answer] = window() as [ChatMessage, ChatMessage, ChatMessage, ChatMessage, ChatMessage]
      const prunedResult: ChatMessage = { ...result, content: '[pruned]' }
      const note: ChatMessage = { role: 'user', content: 'ünïcödé ✓ next' }
      const requests = [
        [system, task, call, result],
        [system, task, call, result, answer, note], // grown
        [system, task, call, prunedResult, answer, note], // an old result pruned: a new object in the middle
        [system, task, call, prunedResult, answer, note], // the same again
        [system, task], // compacted: shorter
        [],
        [note, system, task], // a new beginning
      ]
      for (const messages of requests) await client.chat(messages, { tools })
      expect(fake.requests.map((r) => r.raw.toString())).toEqual(
        requests.map((messages) => JSON.stringify({ model: 'fake-model', messages: messages.map(wire), tools, max_tokens: 4096 })),
      )
      // Another model, another beginning: nothing is borrowed from a body that started differently.
      const first = requestBody('a', [system, task], undefined, 10, undefined)
      expect(requestBody('b', [system, task, note], undefined, 10, 1, first).bytes.toString()).toBe(
        JSON.stringify({ model: 'b', messages: [system, task, note].map(wire), max_tokens: 10, temperature: 1 }),
      )
      expect(requestBody('a', [system, task, note], undefined, 10, undefined, first).bytes.toString()).toBe(
        JSON.stringify({ model: 'a', messages: [system, task, note].map(wire), max_tokens: 10 }),
      )
    })

    it("writes the next body into the last one's buffer only when that one is no longer being sent", async () => {
      const [system, task] = window() as [ChatMessage, ChatMessage]
      const big = (i: number): ChatMessage => ({ role: 'tool', content: `${i}: ${'text "quoted"\n'.repeat(3000)}`, tool_call_id: `c${i}` })
      // Growing past the first buffer, shrinking, a new beginning: every body is JSON.stringify's, each written where the last one was when it fits.
      const windows = [
        [system, task],
        [system, task, big(1)],
        [system, task, big(1), big(2)],
        [system, task, big(1), big(2), big(3), big(4)],
        [system, big(5)],
        [task],
      ]
      let previous = null
      const seen = []
      for (const messages of windows) {
        const body = requestBody('m', messages, undefined, 10, undefined, previous, true)
        expect(body.bytes.toString()).toBe(JSON.stringify({ model: 'm', messages: messages.map(wire), max_tokens: 10 }))
        seen.push(body.store)
        previous = body
      }
      expect(new Set(seen).size).toBeLessThan(seen.length)

      // A turn's way in place: results pruned behind the newest (new objects in the middle, the
      // rest shifted), the beginning cut to fit and then back (messages whose JSON was let go
      // once they lay in the shared beginning are written again), a compaction's new window.
      const results = Array.from({ length: 8 }, (_, i) => big(10 + i))
      const pruned = results.map((r) => ({ ...r, content: '[pruned]' }))
      const turns = [
        [system, task, ...results.slice(0, 4)],
        [system, task, pruned[0], ...results.slice(1, 5)],
        [system, task, pruned[0], pruned[1], ...results.slice(2, 6)],
        [system, ...results.slice(3, 6)],
        [system, task, pruned[0], pruned[1], pruned[2], ...results.slice(3, 7)],
        [system, task, big(30), results[7]],
      ] as ChatMessage[][]
      for (const messages of turns) {
        const body = requestBody('m', messages, undefined, 10, undefined, previous, true)
        expect(body.bytes.toString()).toBe(JSON.stringify({ model: 'm', messages: messages.map(wire), max_tokens: 10 }))
        previous = body
      }

      // Two requests of one client on their way at once (a compaction's summary calls): neither body is written over.
      const bodies: string[] = []
      let release: () => void = () => undefined
      const bothArrived = new Promise<void>((resolve) => (release = resolve))
      const server = createServer((req, res) => {
        const chunks: Buffer[] = []
        req.on('data', (c: Buffer) => chunks.push(c))
        req.on('end', async () => {
          bodies.push(Buffer.concat(chunks).toString())
          if (bodies.length === 2) release()
          await bothArrived
          res.writeHead(200, { 'content-type': 'application/json' })
          res.end(
            JSON.stringify({
              id: 'x',
              object: 'chat.completion',
              created: 0,
              model: 'm',
              choices: [{ index: 0, finish_reason: 'stop', message: { role: 'assistant', content: 'ok' } }],
            }),
          )
        })
      })
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
      onTestFinished(() => new Promise<void>((resolve) => server.close(() => resolve())))
      const client = requireLlmClient(
        parseConfig(`llm:\n  openai:\n    base_url: http://127.0.0.1:${(server.address() as AddressInfo).port}/v1\n    model: m\n    max_retries: 0\n`),
      )
      const one = [system, task, big(6)]
      const two = [system, task, big(7)]
      await Promise.all([client.chat(one), client.chat(two)])
      expect(bodies.sort()).toEqual([one, two].map((messages) => JSON.stringify({ model: 'm', messages: messages.map(wire), max_tokens: 4096 })).sort())
    })

    it('serialises each message once: the next turn serialises only its new messages', async () => {
      const fake = await startFakeLlm()
      const client = requireLlmClient(parseConfig(fake.configYaml()))
      const messages = window()
      const stringify = vi.spyOn(JSON, 'stringify')
      // Each message's content is escaped by JSON.stringify when its JSON is made.
      const contents = new Set<unknown>([...messages.map((m) => m.content), 'the next turn'])
      const serialised = () => stringify.mock.calls.filter(([value]) => typeof value === 'string' && contents.has(value)).map(([value]) => value)
      try {
        await client.chat(messages, { tools })
        expect(serialised()).toEqual(messages.map((m) => m.content).filter((c) => c !== null))
        stringify.mockClear()
        const next: ChatMessage = { role: 'user', content: 'the next turn' }
        await client.chat([...messages, next], { tools })
        expect(serialised()).toEqual(['the next turn'])
      } finally {
        stringify.mockRestore()
      }
      expect(fake.requests[1]?.raw.toString()).toBe(
        JSON.stringify({
          model: 'fake-model',
          messages: [...messages, { role: 'user', content: 'the next turn' } as ChatMessage].map(wire),
          tools,
          max_tokens: 4096,
        }),
      )
    })
  })
  // Issue 22: the request goes out through node:http (fetch copied the body and wrapped it in web streams).
  describe('the transport', () => {
    const completion = (content: string) =>
      JSON.stringify({
        id: 'x',
        object: 'chat.completion',
        created: 0,
        model: 'm',
        choices: [{ index: 0, finish_reason: 'stop', message: { role: 'assistant', content } }],
      })

    it('sends the body as is, decodes a compressed answer, and follows a redirect as fetch does', async () => {
      const seen: { path: string; headers: Record<string, unknown>; body: string }[] = []
      const server = createServer((req, res) => {
        const chunks: Buffer[] = []
        req.on('data', (d: Buffer) => chunks.push(d))
        req.on('end', () => {
          seen.push({ path: req.url ?? '', headers: req.headers, body: Buffer.concat(chunks).toString() })
          if (req.url?.startsWith('/old/')) {
            res.writeHead(307, { location: req.url.replace('/old/', '/v1/') })
            return res.end()
          }
          const gzip = seen.length === 1
          res.writeHead(200, { 'content-type': 'application/json', ...(gzip ? { 'content-encoding': 'gzip' } : {}) })
          res.end(gzip ? gzipSync(completion('gzipped ✓')) : completion('after a redirect'))
        })
      })
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
      onTestFinished(() => new Promise<void>((resolve) => server.close(() => resolve())))
      const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
      const config = (path: string) =>
        parseConfig(`llm:\n  provider: openai\n  openai:\n    base_url: ${base}${path}\n    api_key: k\n    model: m\n    max_retries: 0\n`)
      const messages: ChatMessage[] = [{ role: 'user', content: 'ünïcödé' }]
      expect((await requireLlmClient(config('/v1')).chat(messages)).message.content).toBe('gzipped ✓')
      expect(seen[0]?.body).toBe(JSON.stringify({ model: 'm', messages, max_tokens: 4096 }))
      expect(seen[0]?.headers).toMatchObject({
        'content-type': 'application/json',
        'content-length': String(Buffer.byteLength(seen[0]?.body ?? '')),
        authorization: 'Bearer k',
      })
      // fetch's own request headers are absent: the request did not go through fetch.
      expect(seen[0]?.headers['sec-fetch-mode']).toBeUndefined()
      expect((await requireLlmClient(config('/old')).chat(messages)).message.content).toBe('after a redirect')
      // (fetch asks the old address again, then follows it.)
      expect(seen.at(-1)).toMatchObject({ path: '/v1/chat/completions', body: seen[0]?.body })
      expect(seen.slice(1, -1).map((r) => [r.path, r.body])).toEqual(seen.slice(1, -1).map(() => ['/old/chat/completions', seen[0]?.body]))
    })
  })
})

describe('cached prompt tokens (issue 30)', () => {
  /** A server answering one fixed chat completion, with whatever usage and extra fields it is given. */
  async function serverAnswering(extra: Record<string, unknown>): Promise<string> {
    const server = createServer((req, res) => {
      req.resume()
      req.on('end', () => {
        res.writeHead(200, { 'content-type': 'application/json' })
        res.end(
          JSON.stringify({
            id: 'x',
            object: 'chat.completion',
            created: 0,
            model: 'm',
            choices: [{ index: 0, finish_reason: 'stop', message: { role: 'assistant', content: 'ok' } }],
            ...extra,
          }),
        )
      })
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    onTestFinished(() => new Promise<void>((resolve) => server.close(() => resolve())))
    return `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`
  }
  const clientAt = (url: string) =>
    requireLlmClient(parseConfig(`llm:\n  provider: openai\n  openai:\n    base_url: ${url}\n    api_key: k\n    model: m\n    max_retries: 0\n`))
  const usage = { prompt_tokens: 5000, completion_tokens: 10, total_tokens: 5010 }

  it('OpenAI and vLLM: usage.prompt_tokens_details.cached_tokens', async () => {
    const fake = await startFakeLlm()
    fake.queue.push({ content: 'ok', usage: { ...usage, prompt_tokens_details: { cached_tokens: 4096 } } })
    expect((await requireLlmClient(parseConfig(fake.configYaml())).chat([{ role: 'user', content: 'hi' }])).usage).toEqual({ ...usage, cached_tokens: 4096 })
  })

  it("llama.cpp's server: timings.cache_n, or tokens_cached", async () => {
    const timings = await serverAnswering({ usage, timings: { cache_n: 4608, prompt_n: 392 } })
    expect((await clientAt(timings).chat([{ role: 'user', content: 'hi' }])).usage).toEqual({ ...usage, cached_tokens: 4608 })
    const tokensCached = await serverAnswering({ usage, tokens_cached: 3000 })
    expect((await clientAt(tokensCached).chat([{ role: 'user', content: 'hi' }])).usage).toEqual({ ...usage, cached_tokens: 3000 })
  })

  it('none reported, or nonsense (a string, a negative count): no cached tokens', async () => {
    for (const extra of [
      { usage },
      { usage: { ...usage, prompt_tokens_details: { cached_tokens: '12' } } },
      { usage, timings: { cache_n: -5 } },
      { usage, tokens_cached: 1.5 },
    ]) {
      expect((await clientAt(await serverAnswering(extra)).chat([{ role: 'user', content: 'hi' }])).usage).toEqual(usage)
    }
  })
})
