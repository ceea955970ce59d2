import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { onTestFinished } from 'vitest'

export interface RecordedRequest {
  path: string
  body: { model: string; messages: { role: string; content: string }[]; [key: string]: unknown }
  /** The body as it arrived, byte for byte. */
  raw: Buffer
}

export interface Reply {
  status?: number
  content?: string
  /** Tool calls of the assistant message; arguments given as an object are JSON-encoded, a string is sent as is. */
  calls?: { name: string; arguments: string | Record<string, unknown>; id?: string }[]
  /** Answer only after this long (a slow LLM); the request may be aborted meanwhile. */
  delayMs?: number
  /** Answer only once this has settled (a barrier the test opens, e.g. when every agent has sent its first request). */
  after?: Promise<unknown>
  headers?: Record<string, string>
  /** The usage report (a hostile one: any fields, any values; null: the field sent as null). */
  usage?:
    | { prompt_tokens: number; completion_tokens: number; total_tokens: number; prompt_tokens_details?: { cached_tokens: number } }
    | Record<string, unknown>
    | null
  /** The assistant message sent exactly as given (a malformed one, as a hostile or broken server sends it); a string is its JSON text. */
  message?: Record<string, unknown> | string
}

export interface FakeLlm {
  /** http://127.0.0.1:<port>/v1 */
  url: string
  requests: RecordedRequest[]
  /** How many requests got their reply (one whose client went away first did not). */
  answered: number
  /** Replies for the next requests, in order; after them, `fallback` answers. */
  queue: Reply[]
  fallback: (req: RecordedRequest) => Reply
  /** A config file pointing ctxagent at this server. */
  configYaml(extra?: string): string
}

/**
 * An OpenAI-compatible chat completions server on 127.0.0.1, started per test:
 * scripted replies, recorded requests, reached through the real openai SDK.
 */
export async function startFakeLlm(): Promise<FakeLlm> {
  const fake: FakeLlm = {
    url: '',
    requests: [],
    answered: 0,
    queue: [],
    fallback: (req) => ({ content: `## Original Task\nsummary of ${req.body.messages.length} messages` }),
    configYaml: (extra = '') =>
      `llm:\n  provider: openai\n  openai:\n    base_url: ${fake.url}\n    api_key: test-key\n    model: fake-model\n    context_length: 8000\n    timeout_seconds: 10\n    max_retries: 2\n${extra}`,
  }
  const server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (d: Buffer) => chunks.push(d))
    req.on('end', async () => {
      const raw = Buffer.concat(chunks)
      const recorded: RecordedRequest = { path: req.url ?? '', body: JSON.parse(raw.toString() || '{}') as RecordedRequest['body'], raw }
      fake.requests.push(recorded)
      const reply = fake.queue.shift() ?? fake.fallback(recorded)
      if (reply.after) await reply.after.catch(() => undefined)
      if (reply.delayMs) await new Promise((resolve) => setTimeout(resolve, reply.delayMs))
      if (res.destroyed || req.socket.destroyed) return
      const status = reply.status ?? 200
      fake.answered++
      res.writeHead(status, { 'content-type': 'application/json', ...reply.headers })
      if (status !== 200) {
        res.end(JSON.stringify({ error: { message: reply.content ?? `status ${status}`, type: 'server_error' } }))
        return
      }
      const verbatim = typeof reply.message === 'string' ? reply.message : null
      res.end(
        JSON.stringify({
          id: `chatcmpl-${fake.requests.length}`,
          object: 'chat.completion',
          created: 0,
          model: recorded.body.model,
          choices: [
            {
              index: 0,
              finish_reason: reply.calls ? 'tool_calls' : 'stop',
              message:
                verbatim === null
                  ? (reply.message ?? {
                      role: 'assistant',
                      content: reply.content ?? (reply.calls ? null : ''),
                      ...(reply.calls ? { tool_calls: toolCalls(reply.calls, fake.requests.length) } : {}),
                    })
                  : '@RAW@',
            },
          ],
          usage: reply.usage === undefined ? { prompt_tokens: 100, completion_tokens: 20, total_tokens: 120 } : reply.usage,
        }).replace('"@RAW@"', () => verbatim ?? '"@RAW@"'),
      )
    })
  })
  server.on('connection', (socket) => sockets.add(socket.once('close', () => sockets.delete(socket))))
  const sockets = new Set<import('node:net').Socket>()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  fake.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`
  onTestFinished(
    () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy()
        server.close(() => resolve())
      }),
  )
  return fake
}

function toolCalls(calls: NonNullable<Reply['calls']>, n: number) {
  return calls.map((c, i) => ({
    id: c.id ?? `call_${n}_${i}`,
    type: 'function',
    function: { name: c.name, arguments: typeof c.arguments === 'string' ? c.arguments : JSON.stringify(c.arguments) },
  }))
}
