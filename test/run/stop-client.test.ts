import { spawn } from 'node:child_process'
import { describe, expect, it } from 'vitest'
import { startFakeLlm } from '../helpers/fake-llm.js'
import { ROOT } from '../helpers/run.js'

/**
 * A request made once the task is already stopping (a SIGTERM while a compaction read
 * its window, before its summary request): it must fail as a request, never as an
 * unhandled rejection, which ends the process with exit 1 and leaves the task in
 * running/ without its pause (the fleet test 'pauses by an operator and by a signal'
 * saw it about one run in three under load).
 */
async function inNode(script: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] })
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()))
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()))
  const code = await new Promise<number | null>((resolve) => child.on('close', (c) => resolve(c)))
  return { code, stdout, stderr }
}

/** The script's body runs with `client` (the real OpenAI-compatible client, at the fake LLM) and `stopped` (an aborted signal) in scope; then the process lives on a while, for a stray rejection to surface. */
function script(url: string, body: string): string {
  return `
import { OpenAiCompatibleClient } from '${ROOT}dist/llm/openai-compatible.js'
import { stoppableClient } from '${ROOT}dist/run/stop.js'
const client = new OpenAiCompatibleClient({ base_url: '${url}', api_key: 'k', model: 'fake-model', context_length: 8000, timeout_seconds: 10, max_retries: 0 }, 'openai')
const controller = new AbortController()
controller.abort(new Error('stopped: SIGTERM'))
const stopped = controller.signal
try {
  ${body}
  console.log('answered')
} catch (err) {
  console.log('rejected: ' + err.message)
}
await new Promise((resolve) => setTimeout(resolve, 300))
console.log('alive')
`
}

describe('a request asked for after the stop', () => {
  it('the client given an aborted signal: the request fails as cancelled, nothing is sent, the process lives on', async () => {
    const fake = await startFakeLlm()
    const res = await inNode(script(fake.url, `await client.chat([{ role: 'user', content: 'hi' }], { signal: stopped })`))
    expect(res.stderr).toBe('')
    expect(res.stdout).toBe(`rejected: request to LLM server ${fake.url} (openai, model fake-model) was cancelled\nalive\n`)
    expect(res.code).toBe(0)
    expect(fake.requests).toEqual([])
  })

  it('the summaries’ client of a stopped task asks nothing: it fails with the stop’s reason, the process lives on', async () => {
    const fake = await startFakeLlm()
    const res = await inNode(script(fake.url, `await stoppableClient(client, stopped).chat([{ role: 'user', content: 'summarise' }])`))
    expect(res.stderr).toBe('')
    expect(res.stdout).toBe('rejected: stopped: SIGTERM\nalive\n')
    expect(res.code).toBe(0)
    expect(fake.requests).toEqual([])
  })

  it('the issue’s comments polled after the stop: nothing is asked, the poll finds nothing, the process lives on', async () => {
    const res = await inNode(`
import { RemoteLink } from '${ROOT}dist/run/remote.js'
const stop = new AbortController()
stop.abort(new Error('stopped: SIGTERM'))
let asked = 0
// A forge client that honours the signal: an aborted request fails (a tick later, as over the network).
const channel = { name: 'acme/shop#42', botName: 'bot', listComments: async (since, signal) => { asked++; await new Promise((r) => setTimeout(r, 10)); if (signal.aborted) throw signal.reason; return [] }, post: async () => '1', edit: async () => undefined }
const log = { info() {}, warn: (m) => console.log('warn: ' + m), status() {}, turn() {}, close() {} }
const link = new RemoteLink(channel, '00000000-0000-4000-8000-000000000000', log, 0, { last_comment_ids: [], last_check_timestamp: null, status_comment_id: null }, stop.signal)
console.log('found ' + (await link.poll(new Date())).length + ', asked ' + asked)
await new Promise((resolve) => setTimeout(resolve, 300))
console.log('alive')
`)
    expect(res.stderr).toBe('')
    expect(res.stdout).toBe('found 0, asked 0\nalive\n')
    expect(res.code).toBe(0)
  })
})
