import { writeFileSync } from 'node:fs'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { describe, expect, it, onTestFinished } from 'vitest'
import { exitOf } from '../helpers/wait.js'
import { runSetup, waitFor } from '../run/harness.js'

interface OtlpSpan {
  traceId: string
  spanId: string
  parentSpanId?: string
  name: string
  kind: number
  attributes: { key: string; value: Record<string, unknown> }[]
  status?: { code?: number }
}

/** A local OTLP/HTTP receiver (JSON protocol) on 127.0.0.1: every span it was sent. */
async function startReceiver(): Promise<{ url: string; spans: OtlpSpan[]; resources: Record<string, unknown>[] }> {
  const spans: OtlpSpan[] = []
  const resources: Record<string, unknown>[] = []
  const server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (d: Buffer) => chunks.push(d))
    req.on('end', () => {
      if (req.url !== '/v1/traces' || req.method !== 'POST') {
        res.writeHead(404).end()
        return
      }
      const body = JSON.parse(Buffer.concat(chunks).toString()) as {
        resourceSpans: { resource: { attributes: OtlpSpan['attributes'] }; scopeSpans: { spans: OtlpSpan[] }[] }[]
      }
      for (const rs of body.resourceSpans) {
        resources.push(attrs(rs.resource.attributes))
        for (const ss of rs.scopeSpans) spans.push(...ss.spans)
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}')
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  onTestFinished(() => new Promise<void>((resolve) => server.close(() => resolve())))
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, spans, resources }
}

function attrs(list: OtlpSpan['attributes']): Record<string, unknown> {
  return Object.fromEntries(
    list.map(({ key, value }) => [
      key,
      value.stringValue ?? (value.intValue !== undefined ? Number(value.intValue) : undefined) ?? value.boolValue ?? value.doubleValue ?? value.arrayValue,
    ]),
  )
}

const SECRET = `ghp_${'a1B2c3D4'.repeat(5)}`

describe('traces', () => {
  it('run exports a task span, a span per turn, per LLM call (GenAI attributes) and per tool call, with no content by default', async () => {
    const receiver = await startReceiver()
    const s = await runSetup()
    // The config, with the receiver's address beside the fake LLM's.
    writeFileSync(s.config, s.fake.configYaml(`telemetry:\n  otlp_endpoint: ${receiver.url}\n`))
    s.fake.queue.push({
      calls: [{ name: 'read_file', arguments: { path: 'calc.js' } }],
      usage: { prompt_tokens: 300, completion_tokens: 30, total_tokens: 330 },
    })
    s.fake.queue.push({
      content: 'add() subtracts; fix is a + b',
      usage: { prompt_tokens: 400, completion_tokens: 40, total_tokens: 440, prompt_tokens_details: { cached_tokens: 128 } },
    })
    const res = await s.run(['run', '--task', `what does add do? my token is ${SECRET}`, '--workspace', s.ws, '--json'])
    expect(res.code, res.stderr).toBe(0)
    const uuid = (JSON.parse(res.stdout) as { uuid: string }).uuid
    // Flushed before the process exited: every span is here already.
    const byName = (name: string) => receiver.spans.filter((x) => x.name === name)
    const [task] = byName('ctxagent.task')
    expect(task).toBeDefined()
    const t = task as OtlpSpan
    expect(attrs(t.attributes)).toMatchObject({ 'ctxagent.task.uuid': uuid, 'ctxagent.task.status': 'completed' })
    expect(t.parentSpanId ?? '').toBe('')
    const turns = byName('ctxagent.turn')
    expect(turns.map((x) => attrs(x.attributes)['ctxagent.turn'])).toEqual([1, 2])
    for (const turn of turns) {
      expect(turn.parentSpanId).toBe(t.spanId)
      expect(turn.traceId).toBe(t.traceId)
    }
    const llm = byName('chat fake-model')
    expect(llm).toHaveLength(2)
    expect(llm.map((x) => x.parentSpanId)).toEqual(turns.map((x) => x.spanId))
    expect(llm.map((x) => x.kind)).toEqual([3, 3]) // SPAN_KIND_CLIENT
    expect(attrs((llm[0] as OtlpSpan).attributes)).toMatchObject({
      'gen_ai.operation.name': 'chat',
      'gen_ai.request.model': 'fake-model',
      'gen_ai.usage.input_tokens': 300,
      'gen_ai.usage.output_tokens': 30,
      'ctxagent.task.uuid': uuid,
    })
    expect(attrs((llm[1] as OtlpSpan).attributes)).toMatchObject({
      'gen_ai.usage.input_tokens': 400,
      'gen_ai.usage.output_tokens': 40,
      'gen_ai.usage.cache_read.input_tokens': 128,
    })
    const tools = byName('execute_tool read_file')
    expect(tools).toHaveLength(1)
    expect((tools[0] as OtlpSpan).parentSpanId).toBe((turns[0] as OtlpSpan).spanId)
    expect(attrs((tools[0] as OtlpSpan).attributes)).toMatchObject({
      'gen_ai.tool.name': 'read_file',
      'ctxagent.tool.status': 'success',
      'ctxagent.task.uuid': uuid,
    })
    expect(receiver.resources[0]).toMatchObject({ 'service.name': 'ctxagent' })
    const all = JSON.stringify(receiver.spans)
    expect(all).not.toContain('what does add do')
    expect(all).not.toContain('gen_ai.input.messages')
    expect(all).not.toContain(SECRET)
  })

  // Issue #36: a failed LLM call's span carried the server's error text, which quoted the task.
  it("without content, no span carries an error text, a tool name or a call id of the model's, nor anything quoting the task", async () => {
    for (const content of [false, true]) {
      const receiver = await startReceiver()
      const s = await runSetup()
      writeFileSync(s.config, s.fake.configYaml(`telemetry:\n  otlp_endpoint: ${receiver.url}\n  content: ${content}\n`))
      const word = 'Zanzibar'
      s.fake.queue.push(
        {
          calls: [
            { name: `${word}_tool`, arguments: {}, id: `call_${word}` },
            { name: 'read_file', arguments: { path: `${word}-notes.txt` } },
          ],
        },
        { status: 400, content: `your request "fix ${word} with ${SECRET}" was refused` },
      )
      const res = await s.run(['run', '--task', `fix ${word} with ${SECRET}`, '--workspace', s.ws])
      expect(res.code, res.stderr).not.toBe(0)
      const all = JSON.stringify(receiver.spans)
      const llm = receiver.spans.filter((x) => x.name === 'chat fake-model')
      expect(llm.map((x) => x.status?.code ?? 0)).toEqual([0, 2])
      expect(attrs((llm[1] as OtlpSpan).attributes)['error.type']).toMatch(/Error/)
      expect(receiver.spans.find((x) => x.name === 'ctxagent.task')?.status?.code).toBe(2)
      expect(all).not.toContain(SECRET)
      if (content) {
        expect(all).toContain(`fix ${word} with [GITHUB_TOKEN]`)
        continue
      }
      expect(all).not.toContain(word)
      expect(receiver.spans.map((x) => x.name)).toContain('execute_tool other')
    }
  })

  it('with telemetry.content: message content on the spans, masked', async () => {
    const receiver = await startReceiver()
    const s = await runSetup()
    writeFileSync(s.config, s.fake.configYaml(`telemetry:\n  otlp_endpoint: ${receiver.url}\n  content: true\n`))
    s.fake.queue.push({ content: 'it adds' })
    const res = await s.run(['run', '--task', `what does add do? my token is ${SECRET}`, '--workspace', s.ws])
    expect(res.code, res.stderr).toBe(0)
    const llm = receiver.spans.find((x) => x.name === 'chat fake-model') as OtlpSpan
    const a = attrs(llm.attributes)
    expect(String(a['gen_ai.input.messages'])).toContain('what does add do?')
    expect(String(a['gen_ai.output.messages'])).toContain('it adds')
    expect(JSON.stringify(receiver.spans)).not.toContain(SECRET)
  })

  it('spans are made and exported while run waits on the LLM; paused by SIGTERM, it exports every other span before it exits: the waiting call failed, the task paused', async () => {
    const receiver = await startReceiver()
    const s = await runSetup()
    writeFileSync(s.config, s.fake.configYaml(`telemetry:\n  otlp_endpoint: ${receiver.url}\n`))
    s.fake.queue.push({ calls: [{ name: 'read_file', arguments: { path: 'calc.js' } }] }, { delayMs: 60_000, content: 'never seen' })
    const started = s.start(['run', '--task', 'what does add do?', '--workspace', s.ws])
    await waitFor('the second request', () => s.fake.requests.length >= 2)
    // Made from the loop's notes while run waits on the LLM, and exported by the batch's timer (5 s) while it still waits.
    await waitFor('the first turn exported during the wait', () => receiver.spans.some((x) => x.name === 'execute_tool read_file'))
    expect(receiver.spans.map((x) => x.name)).not.toContain('ctxagent.task')
    started.child.kill('SIGTERM')
    expect((await exitOf(started.child)).code, started.err()).toBe(143)
    const byName = (name: string) => receiver.spans.filter((x) => x.name === name)
    const task = byName('ctxagent.task')[0] as OtlpSpan
    expect(attrs(task.attributes)).toMatchObject({ 'ctxagent.task.status': 'paused' })
    const turns = byName('ctxagent.turn')
    expect(turns.map((x) => attrs(x.attributes)['ctxagent.turn'])).toEqual([1, 2])
    const llm = byName('chat fake-model')
    expect(llm.map((x) => x.parentSpanId)).toEqual(turns.map((x) => x.spanId))
    expect(llm.map((x) => x.status?.code ?? 0)).toEqual([0, 2]) // the second: STATUS_CODE_ERROR
    expect(byName('execute_tool read_file').map((x) => x.parentSpanId)).toEqual([(turns[0] as OtlpSpan).spanId])
  })
})
