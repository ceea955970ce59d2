import { spawn } from 'node:child_process'
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { makeTree } from '../fixtures/tree.js'
import { startFakeAnthropic } from '../helpers/fake-anthropic.js'
import type { AnthropicBlock, AnthropicReply, AnthropicRequest, FakeAnthropic } from '../helpers/fake-anthropic.js'
import { BIN, cliAsync, ROOT, TEST_ENV } from '../helpers/run.js'
import { exitOf } from '../helpers/wait.js'
import { onlyTask, waitFor } from './harness.js'

const finish = (usage?: AnthropicReply['usage']): AnthropicReply => ({
  calls: [{ name: 'finish', arguments: { summary: 'add() fixed', status: 'done' } }],
  ...(usage ? { usage } : {}),
})

/** A tree, a workspace with a small project, the fake Messages API, a config pointing at it; the key given as ANTHROPIC_API_KEY. */
async function setup(extraYaml = '', stream = true) {
  const tree = makeTree()
  const ws = mkdtempSync(join(tmpdir(), 'ctxagent-ws-'))
  onTestFinished(() => rmSync(ws, { recursive: true, force: true }))
  const fake = await startFakeAnthropic()
  // The key in the project: what the agent reads of it is masked before it is written or sent.
  writeFileSync(join(ws, 'calc.js'), `// deploy with ${fake.key}\nexport function add(a, b) {\n  return a - b\n}\n`)
  const config = join(tree.base, 'config.yaml')
  writeFileSync(config, fake.configYaml(extraYaml, { keyInFile: false, stream }))
  const env = { ANTHROPIC_API_KEY: fake.key, ANTHROPIC_BASE_URL: '' }
  const args = (more: string[]) => [...more, '--home', tree.base, '--config', config]
  return {
    tree,
    ws,
    fake,
    run: (more: string[]) => cliAsync(args(more), env),
    start: (more: string[]) => {
      const child = spawn(process.execPath, [BIN, ...args(more)], {
        cwd: ROOT,
        env: { ...process.env, ...TEST_ENV, ...env },
        stdio: ['ignore', 'pipe', 'pipe'],
      })
      let err = ''
      child.stderr?.on('data', (d: Buffer) => (err += d.toString()))
      onTestFinished(() => {
        if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
      })
      return { child, err: () => err }
    },
  }
}

/** The agent's requests (those offering tools), not the summarizer's. */
const agentRequests = (fake: FakeAnthropic) => fake.requests.filter((r) => Array.isArray(r.body.tools))

/** Where the request's cache breakpoints are: `system:i`, `m<i>:<j>`. */
function breakpoints(body: AnthropicRequest['body']): string[] {
  const marks: string[] = []
  body.system?.forEach((b, i) => b.cache_control && marks.push(`system:${i}`))
  body.messages.forEach((m, i) => m.content.forEach((b: AnthropicBlock, j) => b.cache_control && marks.push(`m${i}:${j}`)))
  return marks
}

/** Every file under `dir`, as text. */
function allText(dir: string): string {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .map((name) => join(dir, name))
    .filter((path) => statSync(path).isFile())
    .map((path) => readFileSync(path, 'latin1'))
    .join('\n')
}

describe('run with llm.provider: anthropic', () => {
  it('tool calls round-trip through a real run; cache breakpoints stay put; cache reads and writes land in state.json; the key is in no file or body', async () => {
    const s = await setup()
    s.fake.queue.push(
      {
        content: 'Reading calc.js.',
        calls: [{ name: 'read_file', arguments: { path: 'calc.js' } }],
        usage: { input_tokens: 900, output_tokens: 40, cache_creation_input_tokens: 2000, cache_read_input_tokens: 0 },
      },
      finish({ input_tokens: 150, output_tokens: 30, cache_creation_input_tokens: 100, cache_read_input_tokens: 2000 }),
    )
    const res = await s.run(['run', '--task', 'Fix add() in calc.js', '--workspace', s.ws, '--json'])
    expect(res.code, res.stderr).toBe(0)
    const task = onlyTask(s.tree)
    expect(task.location).toBe('completed')
    expect(task.messages.map((m) => m.role)).toEqual(['system', 'user', 'assistant', 'tool', 'assistant', 'tool'])
    const [, , first] = task.messages
    expect(first).toMatchObject({
      content: 'Reading calc.js.',
      tool_calls: [{ id: 'toolu_1_0', type: 'function', function: { name: 'read_file', arguments: '{"path":"calc.js"}' } }],
    })
    expect(first?.usage).toEqual({ prompt_tokens: 2900, completion_tokens: 40, cache_write_tokens: 2000 })
    expect(task.metadata.config).toMatchObject({ llm_provider: 'anthropic', model: 'claude-test', context_length: 8000 })
    // The split: prompt = input + cache reads + cache writes, over both turns.
    expect(task.state).toMatchObject({ status: 'completed', prompt_tokens: 2900 + 2250, completion_tokens: 70, cached_tokens: 2000, cache_write_tokens: 2100 })

    const [one, two] = agentRequests(s.fake) as [AnthropicRequest, AnthropicRequest]
    expect(agentRequests(s.fake)).toHaveLength(2)
    // The second request answers the call with a tool_result carrying the file.
    const answer = two.body.messages.at(-1)?.content[0]
    expect(answer).toMatchObject({ type: 'tool_result', tool_use_id: 'toolu_1_0', cache_control: { type: 'ephemeral' } })
    expect(String(answer?.content)).toContain('return a - b')
    expect(String(answer?.content)).toContain('deploy with [SECRET:llm.anthropic.api_key]')
    expect(task.messages[3]?.content).toContain('[SECRET:llm.anthropic.api_key]')
    expect(two.body.messages[1]?.content).toEqual([
      { type: 'text', text: 'Reading calc.js.' },
      { type: 'tool_use', id: 'toolu_1_0', name: 'read_file', input: { path: 'calc.js' } },
    ])
    expect(breakpoints(one.body)).toEqual(['system:0', 'm0:0'])
    // The second reads the cache where the first ended (m0), and writes at its own end.
    expect(breakpoints(two.body)).toEqual(['system:0', 'm0:0', 'm2:0'])
    expect(JSON.stringify(two.body.system)).toBe(JSON.stringify(one.body.system))
    expect(JSON.stringify(two.body.tools)).toBe(JSON.stringify(one.body.tools))

    for (const r of s.fake.requests) {
      expect(r.raw.toString()).not.toContain(s.fake.key)
      expect(r.headers['x-api-key'] ?? r.headers.authorization).toContain(s.fake.key)
    }
    expect(allText(s.tree.base)).not.toContain(s.fake.key)
    expect(res.stdout + res.stderr).not.toContain(s.fake.key)
  })

  it('a 529 overloaded answer is retried; a "prompt is too long" answer forces a compaction and one retry', async () => {
    const s = await setup('context:\n  compression:\n    keep_recent: 2\n    min_to_compress: 2\n', false)
    s.fake.queue.push(
      { status: 529, headers: { 'retry-after': '0' } },
      ...['calc.js', 'calc.js', 'calc.js'].map((path, i) => ({ calls: [{ name: 'read_file', arguments: { path, offset: i + 1 } }] })),
      { status: 400, error: { type: 'invalid_request_error', message: 'prompt is too long: 9120 tokens > 8000 maximum' } },
      { content: '## Original Task\nfix add\n## Current State\n- read calc.js' },
      finish(),
    )
    const res = await s.run(['run', '--task', 'fix add', '--workspace', s.ws])
    expect(res.code, res.stderr).toBe(0)
    expect(res.stderr).toMatch(/too long; compacting and retrying once/)
    const task = onlyTask(s.tree)
    expect(task.summaries).toHaveLength(1)
    expect(task.state).toMatchObject({ status: 'completed', turns: 4 })
    expect(s.fake.requests[0]?.body.stream).toBe(false)
    // The overloaded request and its retry are the same request.
    expect(s.fake.requests[1]?.raw.equals(s.fake.requests[0]?.raw as Buffer)).toBe(true)
    const retry = agentRequests(s.fake).at(-1) as AnthropicRequest
    expect(JSON.stringify(retry.body.messages)).toContain('[Summary of the conversation so far')
    // After the compaction the window still starts with the user and alternates.
    expect(retry.body.messages[0]?.role).toBe('user')
    retry.body.messages.forEach((m, i) => i > 0 && expect(m.role).not.toBe(retry.body.messages[i - 1]?.role))
  })

  it('SIGINT while the answer is streaming pauses the task (exit 130), the request given up', async () => {
    const s = await setup()
    s.fake.queue.push({ stall: true })
    const started = s.start(['run', '--task', 't', '--workspace', s.ws])
    await s.fake.stalled
    started.child.kill('SIGINT')
    expect((await exitOf(started.child)).code).toBe(130)
    const task = onlyTask(s.tree)
    expect(task.location).toBe('paused')
    expect(task.state).toMatchObject({ status: 'paused', turns: 0 })
    await waitFor('the stalled request to be abandoned', () => s.fake.abandoned >= 1)
  })

  it('doctor checks the endpoint with one small tool-calling request', async () => {
    const s = await setup()
    s.fake.queue.push({ calls: [{ name: 'report_ready', arguments: { ready: true } }] })
    const res = await s.run(['doctor', '--json'])
    const llm = (JSON.parse(res.stdout) as { checks: { name: string; status: string; message: string }[] }).checks.find((c) => c.name === 'llm')
    expect(llm).toMatchObject({ status: 'ok', message: `${s.fake.url} (anthropic, model claude-test) answers with a tool call` })
    expect(s.fake.requests).toHaveLength(1)
    expect(s.fake.requests[0]?.body).toMatchObject({ max_tokens: 256, tools: [{ name: 'report_ready' }] })
    // Anthropic's own API and no key: said so, and nothing is asked.
    const keyless = join(s.tree.base, 'keyless.yaml')
    writeFileSync(keyless, 'llm:\n  provider: anthropic\n')
    const none = await cliAsync(['doctor', '--json', '--home', s.tree.base, '--config', keyless], { ANTHROPIC_API_KEY: '', ANTHROPIC_BASE_URL: '' })
    expect((JSON.parse(none.stdout) as { checks: { name: string }[] }).checks.find((c) => c.name === 'llm')).toEqual({
      name: 'llm',
      status: 'fail',
      message: 'no Anthropic API key is set',
      hint: 'set ANTHROPIC_API_KEY or llm.anthropic.api_key',
    })
    expect(s.fake.requests).toHaveLength(1)
  })
})

describe("Anthropic's usage limits (docs/running.md#rate-limits)", () => {
  it('a 529 whose anthropic-ratelimit reset is an hour away is not retried early: with --no-wait the task pauses with that time', async () => {
    const s = await setup('  max_retry_wait: 1\n')
    const reset = new Date(Date.now() + 3_600_000).toISOString().replace(/\.\d{3}Z$/, 'Z')
    s.fake.queue.push({
      status: 529,
      error: { type: 'overloaded_error', message: 'Overloaded' },
      headers: { 'anthropic-ratelimit-input-tokens-reset': reset, 'anthropic-ratelimit-input-tokens-remaining': '0' },
    })
    const r = await s.run(['run', '--task', 'fix add()', '--workspace', s.ws, '--no-wait', '--log-format', 'json'])
    expect(r.code, r.stderr).toBe(1)
    expect(s.fake.requests).toHaveLength(1)
    expect(onlyTask(s.tree).state).toMatchObject({ status: 'paused', paused_by: 'rate-limit', resume_at: reset.replace('Z', '.000Z') })
  })
})
