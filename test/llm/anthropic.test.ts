import { describe, expect, it } from 'vitest'
import { loadConfig, parseConfig } from '../../src/config/load.js'
import { missingApiKey } from '../../src/config/endpoint.js'
import { SECRET_KEYS } from '../../src/config/secrets.js'
import { secretValues } from '../../src/config/secrets.js'
import { ProviderError, UsageError } from '../../src/errors.js'
import { AnthropicClient } from '../../src/llm/anthropic.js'
import { messagesRequest } from '../../src/llm/anthropic-request.js'
import type { ChatMessage, ToolSpec } from '../../src/llm/client.js'
import { createLlmClient, requireLlmClient } from '../../src/llm/providers.js'
import { checkProvider, effectiveConfig } from '../../src/run/settings.js'
import { isContextExceeded } from '../../src/run/turn.js'
import { startFakeAnthropic } from '../helpers/fake-anthropic.js'
import type { AnthropicBlock, AnthropicRequest, FakeAnthropic } from '../helpers/fake-anthropic.js'

const tools: ToolSpec[] = [
  {
    type: 'function',
    function: { name: 'read_file', description: 'Reads a file', parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] } },
  },
  { type: 'function', function: { name: 'finish', parameters: { type: 'object', properties: { summary: { type: 'string' } } } } },
]

const call = (id: string, args: string) => ({ id, type: 'function' as const, function: { name: 'read_file', arguments: args } })

/** A window as ctxagent builds it: system, task, a round of two calls, their results, a comment, another round. */
function window(): ChatMessage[] {
  return [
    { role: 'system', content: 'You are a coding agent.' },
    { role: 'user', content: 'Fix add() in calc.js' },
    { role: 'assistant', content: 'Reading both.', tool_calls: [call('call_1', '{"path":"calc.js"}'), call('functions.read_file:2', '{"path": oops')] },
    { role: 'tool', content: '[pruned]', tool_call_id: 'call_1' },
    { role: 'tool', content: '[blob:abc123] [pruned]', tool_call_id: 'functions.read_file:2' },
    { role: 'user', content: 'a comment arrived' },
    { role: 'assistant', content: null, tool_calls: [call('call_3', '{"path":"README.md"}')] },
    { role: 'tool', content: '# calc', tool_call_id: 'call_3' },
  ]
}

const client = (fake: FakeAnthropic, stream = true) => requireLlmClient(parseConfig(fake.configYaml('', { stream })))

/** Every block carrying cache_control, as `where:index` (system:i, tools:i, m<i>:<j>). */
function breakpoints(body: AnthropicRequest['body']): string[] {
  const marks: string[] = []
  body.tools?.forEach((t, i) => t.cache_control && marks.push(`tools:${i}`))
  body.system?.forEach((b, i) => b.cache_control && marks.push(`system:${i}`))
  body.messages.forEach((m, i) => m.content.forEach((b: AnthropicBlock, j) => b.cache_control && marks.push(`m${i}:${j}`)))
  return marks
}

describe('Anthropic Messages API client', () => {
  it('maps the window: system blocks, tool_use with parsed input, tool results first in one user message, roles merged', async () => {
    const fake = await startFakeAnthropic()
    await client(fake).chat(window(), { tools, maxTokens: 1000, temperature: 0 })
    const req = fake.requests[0] as AnthropicRequest
    expect(req.path).toBe('/v1/messages')
    // The key goes in a header (this SDK sends it as a bearer token), never in the body.
    expect(req.headers['x-api-key'] ?? req.headers.authorization?.replace(/^Bearer /, '')).toBe(fake.key)
    expect(req.raw.toString()).not.toContain(fake.key)
    expect(req.headers['anthropic-version']).toBeTruthy()
    const { body } = req
    expect(body).toMatchObject({ model: 'claude-test', max_tokens: 1000, temperature: 0, stream: true })
    expect(body.system).toEqual([{ type: 'text', text: 'You are a coding agent.', cache_control: { type: 'ephemeral' } }])
    expect(body.tools?.map((t) => t.name)).toEqual(['read_file', 'finish'])
    expect(body.tools?.[0]).toMatchObject({ description: 'Reads a file', input_schema: { type: 'object', required: ['path'] } })
    expect(body.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'user', 'assistant', 'user'])
    expect(body.messages[1]?.content).toEqual([
      { type: 'text', text: 'Reading both.' },
      { type: 'tool_use', id: 'call_1', name: 'read_file', input: { path: 'calc.js' } },
      // Malformed arguments go as {}; an id the API refuses is made of allowed characters, the same on both sides.
      { type: 'tool_use', id: 'functions_read_file_2', name: 'read_file', input: {} },
    ])
    expect(body.messages[2]?.content.map((b) => [b.type, b.tool_use_id ?? b.text])).toEqual([
      ['tool_result', 'call_1'],
      ['tool_result', 'functions_read_file_2'],
      ['text', 'a comment arrived'],
    ])
    expect(body.messages[3]?.content).toEqual([{ type: 'tool_use', id: 'call_3', name: 'read_file', input: { path: 'README.md' } }])
    expect(body.messages[4]?.content).toEqual([{ type: 'tool_result', tool_use_id: 'call_3', content: '# calc', cache_control: { type: 'ephemeral' } }])
  })

  it('places at most 4 cache breakpoints: end of system, last pruned stub, end of the previous request, last message; the same places for the same prefix', async () => {
    const fake = await startFakeAnthropic()
    const c = client(fake)
    const first = window()
    await c.chat(first, { tools })
    // The next turn: the same messages (the same objects) and one more round.
    const second = [
      ...first,
      { role: 'assistant' as const, content: null, tool_calls: [call('call_4', '{"path":"x"}')] },
      { role: 'tool' as const, content: 'x', tool_call_id: 'call_4' },
    ]
    await c.chat(second, { tools })
    const [a, b] = fake.requests.map((r) => r.body) as [AnthropicRequest['body'], AnthropicRequest['body']]
    // The stub breakpoint: the last pruned result (the blob one, message 2 block 1).
    // The previous request's end: the message before the last answer (m2 then, m4 where the first request ended).
    expect(breakpoints(a)).toEqual(['system:0', 'm2:1', 'm2:2', 'm4:0'])
    expect(breakpoints(b)).toEqual(['system:0', 'm2:1', 'm4:0', 'm6:0'])
    for (const body of [a, b]) expect(breakpoints(body).length).toBeLessThanOrEqual(4)
    // Everything the first request sent comes again first in the second, the same but for where its breakpoints sit.
    const plain = (body: AnthropicRequest['body'], upTo: number) =>
      JSON.stringify({ tools: body.tools, system: body.system, messages: body.messages.slice(0, upTo) }, (k, v: unknown) =>
        k === 'cache_control' ? undefined : v,
      )
    expect(plain(b, a.messages.length)).toBe(plain(a, a.messages.length))
    // The window's messages are left as they were.
    expect(first).toEqual(window())
  })

  it('without system text, the breakpoint that caches the tools is on the last tool', () => {
    const body = messagesRequest('m', [{ role: 'user', content: 'hi' }], tools, 10, undefined)
    expect(body.tools?.map((t) => t.cache_control ?? null)).toEqual([null, { type: 'ephemeral' }])
    expect(body.system).toBeUndefined()
    // An empty text is refused by the API: said as such.
    expect(messagesRequest('m', [{ role: 'user', content: '' }], undefined, 10, undefined).messages[0]?.content[0]).toMatchObject({
      type: 'text',
      text: '(empty)',
    })
  })

  for (const stream of [true, false]) {
    it(`${stream ? 'a streamed' : 'a whole'} reply: text and tool calls with JSON-text arguments, usage with cache reads and writes`, async () => {
      const fake = await startFakeAnthropic()
      fake.queue.push({
        content: 'Let me look.',
        calls: [
          { name: 'read_file', arguments: { path: 'calc.js', offset: 1 }, id: 'toolu_A' },
          { name: 'finish', arguments: {}, id: 'toolu_B' },
        ],
        usage: { input_tokens: 12, output_tokens: 30, cache_creation_input_tokens: 1500, cache_read_input_tokens: 4000 },
      })
      const reply = await client(fake, stream).chat([{ role: 'user', content: 'go' }], { tools })
      expect(fake.requests[0]?.body.stream ?? false).toBe(stream)
      expect(reply.message).toEqual({
        role: 'assistant',
        content: 'Let me look.',
        tool_calls: [
          { id: 'toolu_A', type: 'function', function: { name: 'read_file', arguments: '{"path":"calc.js","offset":1}' } },
          { id: 'toolu_B', type: 'function', function: { name: 'finish', arguments: '{}' } },
        ],
      })
      // The prompt is what the context holds: input after the breakpoints, plus the cache's reads and writes.
      expect(reply.usage).toEqual({ prompt_tokens: 5512, completion_tokens: 30, total_tokens: 5542, cached_tokens: 4000, cache_write_tokens: 1500 })
    })
  }

  it('streamed arguments come as the model sent them (malformed ones too, for the repair path)', async () => {
    const fake = await startFakeAnthropic()
    fake.queue.push({ calls: [{ name: 'read_file', arguments: '{"path": "calc.js",}' }], usage: { input_tokens: 5, output_tokens: 5 } })
    const reply = await client(fake).chat([{ role: 'user', content: 'go' }], { tools })
    expect(reply.message.content).toBeNull()
    expect(reply.message.tool_calls?.[0]?.function.arguments).toBe('{"path": "calc.js",}')
    expect(reply.usage).toEqual({ prompt_tokens: 5, completion_tokens: 5, total_tokens: 10 })
  })

  it('retries 529 overloaded honouring retry-after, and an overloaded error inside a stream; gives up after max_retries', async () => {
    const fake = await startFakeAnthropic()
    fake.queue.push(
      { status: 529, headers: { 'retry-after': '0' } },
      { streamError: { type: 'overloaded_error', message: 'Overloaded' } },
      { content: 'third time' },
    )
    expect((await client(fake).chat([{ role: 'user', content: 'x' }])).message.content).toBe('third time')
    expect(fake.requests).toHaveLength(3)
    fake.fallback = () => ({ status: 529, headers: { 'retry-after-ms': '5' } })
    const err = (await client(fake)
      .chat([{ role: 'user', content: 'x' }])
      .catch((e: unknown) => e)) as ProviderError
    expect(err).toBeInstanceOf(ProviderError)
    expect(err.message).toContain(`LLM server ${fake.url} (anthropic, model claude-test) answered 529 after 2 retries: overloaded_error`)
    expect(err.hint).toMatch(/resume the task later/)
    expect(fake.requests).toHaveLength(6)
  })

  it('a prompt too long is an error run answers with a compaction; a bad key, a wrong server, an unreachable one each one line', async () => {
    const fake = await startFakeAnthropic()
    fake.queue.push({ status: 400, error: { type: 'invalid_request_error', message: 'prompt is too long: 208310 tokens > 200000 maximum' } })
    const tooLong = (await client(fake)
      .chat([{ role: 'user', content: 'x' }])
      .catch((e: unknown) => e)) as ProviderError
    expect(tooLong).toBeInstanceOf(ProviderError)
    expect(isContextExceeded(tooLong)).toBe(true)
    expect(fake.requests).toHaveLength(1)
    // A server that echoes the key: the message leaves masked.
    fake.queue.push({ status: 401, error: { type: 'authentication_error', message: `invalid x-api-key ${fake.key}` } })
    const denied = (await client(fake)
      .chat([{ role: 'user', content: 'x' }])
      .catch((e: unknown) => e)) as ProviderError
    expect(denied).toMatchObject({ message: expect.stringContaining('refused the API key (401)'), hint: 'check llm.anthropic.api_key or ANTHROPIC_API_KEY' })
    fake.queue.push({ status: 400, error: { type: 'invalid_request_error', message: `bad request near ${fake.key}` } })
    const echoed = (await client(fake)
      .chat([{ role: 'user', content: 'x' }])
      .catch((e: unknown) => e)) as ProviderError
    expect(echoed.message).toContain('answered 400: invalid_request_error: bad request near')
    expect(echoed.message).not.toContain(fake.key)
    for (const stream of [true, false]) {
      fake.queue.push({ html: true })
      await expect(client(fake, stream).chat([{ role: 'user', content: 'x' }])).rejects.toThrow(/not a Messages API (stream|message)|answered|failed/)
    }
    const dead = requireLlmClient(parseConfig('llm:\n  provider: anthropic\n  anthropic:\n    base_url: http://127.0.0.1:9\n    max_retries: 0\n'))
    await expect(dead.chat([{ role: 'user', content: 'x' }])).rejects.toThrow(/^cannot reach LLM server http:\/\/127\.0\.0\.1:9 \(anthropic/)
  })

  it('a broken stream is one error line or an odd reply, never a crash', async () => {
    const fake = await startFakeAnthropic()
    const event = (type: string, data: object) => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`
    fake.queue.push({
      rawEvents:
        event('message_start', { message: { usage: { input_tokens: 3 } } }) +
        event('content_block_start', { index: 0, content_block: { type: 'text', text: 'cut' } }),
    })
    await expect(client(fake).chat([{ role: 'user', content: 'x' }])).rejects.toThrow(/ended its stream before the message was complete/)
    // Fields missing or of the wrong kind, deltas for blocks never started, an id and a name that are not strings.
    fake.queue.push({
      rawEvents: [
        event('message_start', {}),
        event('content_block_delta', { index: 7, delta: { type: 'text_delta', text: 'orphan' } }),
        event('content_block_start', { index: 0 }),
        event('content_block_start', { index: 1, content_block: { type: 'tool_use', id: 42, name: null } }),
        event('content_block_delta', { index: 1, delta: { type: 'input_json_delta', partial_json: { not: 'text' } } }),
        event('content_block_delta', { index: 1 }),
        event('message_delta', { usage: { output_tokens: 'many' } }),
        event('message_stop', {}),
      ].join(''),
    })
    const odd = await client(fake).chat([{ role: 'user', content: 'x' }])
    expect(odd.message.content).toBeNull()
    expect(odd.message.tool_calls).toEqual([{ id: expect.stringMatching(/^call_/), type: 'function', function: { name: '', arguments: '{}' } }])
    // Counts that are missing or not numbers are not believed: the agent counts by its estimate (usage-check.ts).
    expect(odd.usage).toBeNull()
    expect(odd.usageRefused).toBe('input_tokens missing')
  })

  it('a stop during the wait before a retry (retry-after: 30) ends the request at once', async () => {
    const fake = await startFakeAnthropic()
    fake.fallback = () => ({ status: 529, headers: { 'retry-after': '30' } })
    const stop = new AbortController()
    const pending = client(fake)
      .chat([{ role: 'user', content: 'x' }], { signal: stop.signal })
      .catch((e: unknown) => e)
    while (fake.requests.length === 0) await new Promise((resolve) => setTimeout(resolve, 20))
    stop.abort(new Error('SIGINT'))
    expect(((await pending) as ProviderError).message).toMatch(/was cancelled/)
    expect(fake.requests).toHaveLength(1)
  })

  it('a stop during a stream that has begun ends the request at once', async () => {
    const fake = await startFakeAnthropic()
    fake.queue.push({ stall: true })
    const stop = new AbortController()
    const pending = client(fake)
      .chat([{ role: 'user', content: 'x' }], { signal: stop.signal })
      .catch((e: unknown) => e)
    await fake.stalled
    stop.abort(new Error('SIGINT'))
    const err = (await pending) as ProviderError
    expect(err).toBeInstanceOf(ProviderError)
    expect(err.message).toMatch(/was cancelled/)
    expect(fake.requests).toHaveLength(1)
  })

  it('config: the provider, its defaults, ANTHROPIC_API_KEY as a secret named llm.anthropic.api_key, the key checked before anything starts', () => {
    const defaults = parseConfig('llm:\n  provider: anthropic\n')
    expect(defaults.llm.anthropic).toMatchObject({ base_url: 'https://api.anthropic.com', api_key: null, context_length: 200_000, stream: true })
    expect(missingApiKey(defaults)).toEqual({ message: 'no Anthropic API key is set', hint: 'set ANTHROPIC_API_KEY or llm.anthropic.api_key' })
    expect(() => requireLlmClient(defaults)).toThrow(UsageError)
    const env = { ANTHROPIC_API_KEY: 'sk-ant-api03-fromTheEnvironment0123456789', ANTHROPIC_BASE_URL: 'http://127.0.0.1:8080' }
    const { config } = loadConfig({ flag: 'none', env, cwd: '/' })
    expect(config.llm.anthropic).toMatchObject({ api_key: env.ANTHROPIC_API_KEY, base_url: env.ANTHROPIC_BASE_URL })
    expect(secretValues(config, env)[0]).toEqual({ name: 'llm.anthropic.api_key', value: env.ANTHROPIC_API_KEY })
    expect(SECRET_KEYS).toContainEqual(['llm', 'anthropic', 'api_key'])
    const made = createLlmClient({ ...config, llm: { ...config.llm, provider: 'anthropic' } })
    expect(made).toBeInstanceOf(AnthropicClient)
    expect([made?.model, made?.contextLength]).toEqual([config.llm.anthropic.model, 200_000])
    expect(() => parseConfig('llm:\n  anthropic:\n    stream: maybe\n')).toThrow(/llm\.anthropic\.stream must be true or false/)
  })

  it('run settings: a user on Anthropic with their model, --provider anthropic, no key refused before anything starts', () => {
    const config = parseConfig('users:\n  carol:\n    llm: { provider: anthropic, model: claude-carol, context_length: 100000 }\n')
    const carol = effectiveConfig(config, 'carol', {})
    expect(carol.llm.provider).toBe('anthropic')
    expect(carol.llm.anthropic).toMatchObject({ model: 'claude-carol', context_length: 100_000 })
    expect(effectiveConfig(config, 'carol', { model: 'flag-model' }).llm.anthropic.model).toBe('flag-model')
    expect(effectiveConfig(config, 'bob', { provider: 'anthropic' }).llm.provider).toBe('anthropic')
    expect(() => effectiveConfig(config, 'bob', { provider: 'none' })).toThrow(/--provider none is not a provider/)
    expect(() => checkProvider(carol)).toThrow(/^no Anthropic API key is set$/)
    checkProvider(parseConfig('llm:\n  provider: anthropic\n  anthropic:\n    api_key: sk-ant-x\n'))
    // A proxy elsewhere may hold the key itself.
    checkProvider(parseConfig('llm:\n  provider: anthropic\n  anthropic:\n    base_url: http://127.0.0.1:4000\n'))
  })
})
