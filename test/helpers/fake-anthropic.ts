import { createServer } from 'node:http'
import type { IncomingHttpHeaders, ServerResponse } from 'node:http'
import type { AddressInfo, Socket } from 'node:net'
import { onTestFinished } from 'vitest'

export interface AnthropicBlock {
  type: string
  text?: string
  id?: string
  name?: string
  input?: unknown
  tool_use_id?: string
  content?: unknown
  cache_control?: { type: string }
}

export interface AnthropicRequest {
  path: string
  headers: IncomingHttpHeaders
  body: {
    model: string
    max_tokens: number
    stream?: boolean
    system?: AnthropicBlock[]
    messages: { role: 'user' | 'assistant'; content: AnthropicBlock[] }[]
    tools?: { name: string; input_schema: unknown; cache_control?: { type: string } }[]
    [key: string]: unknown
  }
  /** The body as it arrived, byte for byte. */
  raw: Buffer
}

export interface AnthropicUsage {
  input_tokens: number
  output_tokens: number
  cache_creation_input_tokens?: number | null
  cache_read_input_tokens?: number | null
}

export interface AnthropicReply {
  /** An HTTP error status; the body is the API's error object (`error` gives its type and message). */
  status?: number
  error?: { type: string; message: string }
  headers?: Record<string, string>
  content?: string
  /** tool_use blocks; arguments given as a string are streamed as that text (in two input_json_delta pieces). */
  calls?: { name: string; arguments: string | Record<string, unknown>; id?: string }[]
  /** The usage report (a hostile one: any fields, any values). */
  usage?: AnthropicUsage | Record<string, unknown>
  /** Streamed: after message_start, an error event instead of the rest. */
  streamError?: { type: string; message: string }
  /** Streamed: message_start, then nothing more until the client goes away. */
  stall?: boolean
  /** A body that is not the Messages API (an HTML page). */
  html?: boolean
  /** Streamed: these server-sent events, as they are (a broken or hostile server). */
  rawEvents?: string
}

export interface FakeAnthropic {
  /** http://127.0.0.1:<port> (the SDK adds /v1/messages) */
  url: string
  key: string
  requests: AnthropicRequest[]
  /** Requests whose client went away before the answer was complete. */
  abandoned: number
  queue: AnthropicReply[]
  fallback: (req: AnthropicRequest) => AnthropicReply
  /** A config file pointing ctxagent at this server (the key in it unless `keyInFile` is false). */
  configYaml(extra?: string, options?: { keyInFile?: boolean; stream?: boolean }): string
  /** Resolves when a request that stalls has been received. */
  stalled: Promise<void>
}

/**
 * Anthropic's Messages API (`POST /v1/messages`) on 127.0.0.1, started per test:
 * scripted replies, streamed as server-sent events when the request asks for a stream
 * and whole otherwise, requests recorded (headers included), reached through the real
 * @anthropic-ai/sdk.
 */
export async function startFakeAnthropic(): Promise<FakeAnthropic> {
  let onStall: () => void = () => undefined
  const fake: FakeAnthropic = {
    url: '',
    key: 'sk-ant-api03-fakeKEY0123456789abcdefghijklmnopqrstuvwxyz-0123456789AA',
    requests: [],
    abandoned: 0,
    queue: [],
    fallback: (req) => ({ content: `## Original Task\nsummary of ${req.body.messages.length} messages` }),
    configYaml: (extra = '', options = {}) =>
      `llm:\n  provider: anthropic\n  anthropic:\n    base_url: ${fake.url}\n${options.keyInFile === false ? '' : `    api_key: ${fake.key}\n`}    model: claude-test\n    context_length: 8000\n    timeout_seconds: 20\n    max_retries: 2\n${options.stream === false ? '    stream: false\n' : ''}${extra}`,
    stalled: new Promise<void>((resolve) => (onStall = resolve)),
  }
  const sockets = new Set<Socket>()
  const server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (d: Buffer) => chunks.push(d))
    req.on('end', () => {
      const raw = Buffer.concat(chunks)
      const recorded: AnthropicRequest = {
        path: req.url ?? '',
        headers: req.headers,
        body: JSON.parse(raw.toString() || '{}') as AnthropicRequest['body'],
        raw,
      }
      fake.requests.push(recorded)
      const reply = fake.queue.shift() ?? fake.fallback(recorded)
      res.on('close', () => {
        if (!res.writableFinished) fake.abandoned++
      })
      if (reply.html) return void res.writeHead(200, { 'content-type': 'text/html' }).end('<html><body>not an API</body></html>')
      if (reply.status !== undefined && reply.status !== 200) {
        const error = reply.error ?? { type: reply.status === 529 ? 'overloaded_error' : 'api_error', message: `status ${reply.status}` }
        res.writeHead(reply.status, { 'content-type': 'application/json', ...reply.headers })
        return void res.end(JSON.stringify({ type: 'error', error }))
      }
      if (recorded.body.stream === true) return stream(res, recorded, reply, fake.requests.length, () => onStall())
      res.writeHead(200, { 'content-type': 'application/json', ...reply.headers })
      res.end(
        JSON.stringify({
          ...messageOf(recorded, reply, fake.requests.length),
          content: blocksOf(reply, fake.requests.length),
          stop_reason: reply.calls ? 'tool_use' : 'end_turn',
        }),
      )
    })
  })
  server.on('connection', (socket) => sockets.add(socket.once('close', () => sockets.delete(socket))))
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  fake.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  onTestFinished(
    () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy()
        server.close(() => resolve())
      }),
  )
  return fake
}

function messageOf(req: AnthropicRequest, reply: AnthropicReply, n: number) {
  return {
    id: `msg_${n}`,
    type: 'message',
    role: 'assistant',
    model: req.body.model,
    stop_sequence: null,
    usage: reply.usage ?? { input_tokens: 100, output_tokens: 20, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 },
  }
}

function blocksOf(reply: AnthropicReply, n: number): AnthropicBlock[] {
  const text: AnthropicBlock[] = reply.content !== undefined || !reply.calls ? [{ type: 'text', text: reply.content ?? '' }] : []
  const calls = (reply.calls ?? []).map((c, i) => ({
    type: 'tool_use',
    id: c.id ?? `toolu_${n}_${i}`,
    name: c.name,
    input: typeof c.arguments === 'string' ? JSON.parse(c.arguments) : c.arguments,
  }))
  return [...text, ...calls]
}

function stream(res: ServerResponse, req: AnthropicRequest, reply: AnthropicReply, n: number, onStall: () => void): void {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', ...reply.headers })
  const send = (type: string, data: Record<string, unknown>) => res.write(`event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`)
  const message = messageOf(req, reply, n)
  const { output_tokens, ...input } = message.usage
  send('message_start', { message: { ...message, content: [], stop_reason: null, usage: { ...input, output_tokens: 1 } } })
  if (reply.rawEvents !== undefined) return void res.end(reply.rawEvents)
  if (reply.stall) {
    onStall()
    return
  }
  send('ping', {})
  if (reply.streamError) {
    send('error', { error: reply.streamError })
    return void res.end()
  }
  let index = 0
  if (reply.content !== undefined || !reply.calls) {
    const text = reply.content ?? ''
    send('content_block_start', { index, content_block: { type: 'text', text: '' } })
    for (const piece of [text.slice(0, text.length >> 1), text.slice(text.length >> 1)])
      send('content_block_delta', { index, delta: { type: 'text_delta', text: piece } })
    send('content_block_stop', { index })
    index++
  }
  for (const [i, c] of (reply.calls ?? []).entries()) {
    const json = typeof c.arguments === 'string' ? c.arguments : JSON.stringify(c.arguments)
    send('content_block_start', { index, content_block: { type: 'tool_use', id: c.id ?? `toolu_${n}_${i}`, name: c.name, input: {} } })
    for (const piece of [json.slice(0, json.length >> 1), json.slice(json.length >> 1)])
      send('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: piece } })
    send('content_block_stop', { index })
    index++
  }
  send('message_delta', { delta: { stop_reason: reply.calls ? 'tool_use' : 'end_turn', stop_sequence: null }, usage: { output_tokens } })
  send('message_stop', {})
  res.end()
}
