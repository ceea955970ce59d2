import { spawn } from 'node:child_process'
import { existsSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import Database from 'better-sqlite3'
import { describe, expect, it } from 'vitest'
import { ToolRegistry } from '../../src/tools/registry.js'
import { BIN } from '../helpers/run.js'
import { agentRequests, expectContinuousSeq, expectWellFormed, jsonl, onlyTask, readTask, runSetup } from './harness.js'

const finish = (summary = 'fixed add', status = 'done') => ({ calls: [{ name: 'finish', arguments: { summary, status } }] })

describe('run: a local task', () => {
  it('reads, edits and finishes, leaving every file of the task directory right', async () => {
    const s = await runSetup()
    s.fake.queue.push(
      { content: 'Let me look at the code.', calls: [{ name: 'read_file', arguments: { path: 'calc.js' } }] },
      { calls: [{ name: 'edit_file', arguments: { path: 'calc.js', old_string: 'a - b', new_string: 'a + b' } }] },
      finish('add() subtracted; it adds now'),
    )
    const res = await s.run(['run', '--task', 'add() gives 1 for add(2, 1); fix it', '--task-id', 'calc-1', '--workspace', s.ws, '--json'])
    expect(res.code, res.stderr).toBe(0)
    // The start line names the model and the server it is asked at.
    expect(res.stderr).toContain(`(fake-model at ${s.fake.url}, dir `)
    const outcome = JSON.parse(res.stdout) as Record<string, unknown>
    expect(outcome).toMatchObject({ status: 'completed', turns: 3, final_answer: 'add() subtracted; it adds now', finish_status: 'done', exit_code: 0 })
    expect(readFileSync(join(s.ws, 'calc.js'), 'utf8')).toContain('return a + b')

    const task = onlyTask(s.tree)
    expect(task.location).toBe('completed')
    expect(task.files).toEqual([
      'current.jsonl',
      'final_summary.txt',
      'messages.jsonl',
      'metadata.json',
      'planning.jsonl',
      'state.json',
      'summaries.jsonl',
      'tools.jsonl',
    ])
    expect(jsonl(join(task.dir, 'planning.jsonl'))).toMatchObject([{ id: 1, plan_type: 'outcome', plan_content: 'add() subtracted; it adds now' }])
    expect(task.metadata).toMatchObject({
      uuid: task.uuid,
      task_key: { task_source: 'local', owner: null, task_type: 'task', task_id: 'calc-1' },
      task_type: 'local_task',
      task_identifier: 'calc-1',
      config: { llm_provider: 'openai', model: 'fake-model', context_length: 8000 },
      run: { workspace: s.ws, allow_shell: false, max_turns: 100 },
    })
    expect(task.state).toMatchObject({
      status: 'completed',
      turns: 3,
      llm_call_count: 3,
      tool_call_count: 3,
      message_count: 8,
      error: null,
      final_answer: 'add() subtracted; it adds now',
    })
    expect(task.state.completed_at).toEqual(expect.any(String))
    expect(task.messages.map((m) => m.role)).toEqual(['system', 'user', 'assistant', 'tool', 'assistant', 'tool', 'assistant', 'tool'])
    expectContinuousSeq(task.messages)
    expect(task.messages[2]).toMatchObject({ content: 'Let me look at the code.', tool_calls: [{ type: 'function', function: { name: 'read_file' } }] })
    expect(task.messages[3]).toMatchObject({ tool_name: 'read_file', tool_call_id: (task.messages[2]?.tool_calls as { id: string }[])[0]?.id })
    expect(String(task.messages[3]?.content)).toContain('2:   return a - b')
    expect(task.current).toHaveLength(8)
    expect(task.tools.map((t) => [t.seq, t.tool_name, t.status])).toEqual([
      [1, 'read_file', 'success'],
      [2, 'edit_file', 'success'],
      [3, 'finish', 'success'],
    ])
    expect(task.tools[1]).toMatchObject({
      arguments: { path: 'calc.js', old_string: 'a - b', new_string: 'a + b' },
      error: null,
      duration_ms: expect.any(Number),
    })
    expect(readFileSync(join(task.dir, 'final_summary.txt'), 'utf8').length).toBeGreaterThan(0)

    const requests = agentRequests(s.fake)
    expect(requests).toHaveLength(3)
    for (const r of requests) expectWellFormed(r)
    const names = (requests[0]?.body.tools as { function: { name: string } }[]).map((t) => t.function.name).sort()
    expect(names).toEqual(['edit_file', 'finish', 'glob', 'grep', 'inspect', 'list_dir', 'read_file', 'write_file'])
    // The bundle offers the schemas the build computed (src/tools/schema.ts): the same as the definitions give.
    expect(requests[0]?.body.tools).toEqual(ToolRegistry.builtin({ allowShell: false }).specs())
    expect(requests[0]?.body.messages.map((m) => m.role)).toEqual(['system', 'user'])

    const db = new Database(s.tree.layout.db, { readonly: true })
    expect(db.prepare('SELECT status, location, total_messages, total_tool_calls, llm_call_count FROM tasks').all()).toEqual([
      { status: 'completed', location: 'completed', total_messages: 8, total_tool_calls: 3, llm_call_count: 3 },
    ])
    db.close()
    const logs = res.stderr
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { uuid: string; msg: string })
    expect(logs.every((l) => l.uuid === task.uuid)).toBe(true)
  })

  it('completes on an answer without tool calls; human output says where the files are; text logs carry [uuid:xxxxxxxx]', async () => {
    const s = await runSetup()
    s.fake.queue.push({ content: 'add(a, b) returns a - b; that is the bug.' })
    const res = await s.run(['run', '--task', 'what does add do?', '--workspace', s.ws, '--log-format', 'text'])
    expect(res.code, res.stderr).toBe(0)
    const task = onlyTask(s.tree)
    expect(res.stdout).toContain(`task ${task.uuid} completed after 1 turn(s)`)
    expect(res.stdout).toContain('add(a, b) returns a - b; that is the bug.')
    expect(res.stdout).toContain(`files: ${task.dir}`)
    for (const line of res.stderr.trim().split('\n')) expect(line.startsWith(`[uuid:${task.uuid.slice(0, 8)}] `)).toBe(true)
  })

  it('reads the task from standard input with --task-file - and the system prompt from --system-prompt-file', async () => {
    const s = await runSetup()
    writeFileSync(join(s.ws, 'prompt.txt'), 'You are terse.')
    s.fake.queue.push({ content: 'ok' })
    // Not spawnSync: the fake LLM answers from this process's event loop.
    const child = spawn(
      process.execPath,
      [BIN, 'run', '--task-file', '-', '--system-prompt-file', join(s.ws, 'prompt.txt'), '--workspace', s.ws, '--home', s.tree.base, '--config', s.config],
      {
        env: { ...process.env, CTXAGENT_HOME: '', CTXAGENT_CONFIG: '' },
        stdio: ['pipe', 'ignore', 'pipe'],
      },
    )
    child.stdin.end('Fix the build\nfrom stdin')
    let stderr = ''
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()))
    const code = await new Promise((resolve) => child.on('exit', resolve))
    expect(code, stderr).toBe(0)
    const messages = agentRequests(s.fake)[0]?.body.messages
    expect(messages?.map((m) => m.content)).toEqual(['You are terse.', 'Fix the build\nfrom stdin'])
  })

  it('repairs malformed arguments, answers an unknown tool with the list, and matches names case-insensitively', async () => {
    const s = await runSetup()
    s.fake.queue.push(
      { calls: [{ name: 'read_file', arguments: "{path: 'calc.js',}" }] },
      { calls: [{ name: 'open_file', arguments: { path: 'calc.js' } }] },
      { calls: [{ name: 'READ_FILE', arguments: { path: 'README.md' } }] },
      finish(),
    )
    const res = await s.run(['run', '--task', 't', '--workspace', s.ws])
    expect(res.code, res.stderr).toBe(0)
    const tools = onlyTask(s.tree).tools
    expect(tools[0]).toMatchObject({ tool_name: 'read_file', status: 'success', arguments: { path: 'calc.js' } })
    expect(tools[1]).toMatchObject({ status: 'error' })
    expect(String(tools[1]?.result)).toMatch(/read_file/)
    expect(String(tools[1]?.result)).toMatch(/edit_file/)
    expect(tools[2]).toMatchObject({ tool_name: 'read_file', status: 'success' })
  })

  it('fails as stuck on the 5th identical call with the identical result, warning the model at the 3rd', async () => {
    const s = await runSetup()
    s.fake.fallback = () => ({ calls: [{ name: 'read_file', arguments: { path: 'README.md' } }] })
    const res = await s.run(['run', '--task', 't', '--workspace', s.ws])
    expect(res.code).toBe(1)
    expect(res.stderr).toMatch(/^{"ts":"[^"]+","level":"error","msg":"task .* failed: stuck: read_file called 5 times in a row/m)
    const task = onlyTask(s.tree)
    expect(task.state).toMatchObject({ status: 'failed', turns: 5 })
    const results = task.messages.filter((m) => m.role === 'tool').map((m) => String(m.content))
    expect(results[1]).not.toContain('[ctxagent:')
    expect(results[2]).toContain('call 3 of read_file in a row')
  })

  it('fails after 3 malformed calls in a row', async () => {
    const s = await runSetup()
    s.fake.fallback = () => ({ calls: [{ name: 'no_such_tool', arguments: {} }] })
    const res = await s.run(['run', '--task', 't', '--workspace', s.ws])
    expect(res.code).toBe(1)
    expect(onlyTask(s.tree).state).toMatchObject({ status: 'failed', error: expect.stringContaining('3 malformed tool calls in a row') })
  })

  it.each([
    ['--max-turns', ['--max-turns', '2'], /max_turns budget: 2 turns used/],
    ['--max-tokens', ['--max-tokens', '250'], /max_tokens budget/],
    ['--timeout', ['--timeout', '2s'], /timeout budget: 2s of work reached/],
  ])('%s ends the task as timeout with exit 5', async (_name, flags, reason) => {
    const s = await runSetup()
    let n = 0
    // Different calls each time (no stuck loop); slow enough for the 2 s timeout to strike.
    s.fake.fallback = () => ({ delayMs: 300, calls: [{ name: 'glob', arguments: { pattern: `*${n++}*` } }] })
    const res = await s.run(['run', '--task', 't', '--workspace', s.ws, ...flags])
    expect(res.code, res.stderr).toBe(5)
    const task = onlyTask(s.tree)
    expect(task.location).toBe('completed')
    expect(task.state).toMatchObject({ status: 'timeout', error: expect.stringMatching(reason) })
    for (const r of agentRequests(s.fake)) expectWellFormed(r)
  })

  it('refuses bad input with one line, exit 2, and writes nothing', async () => {
    const s = await runSetup()
    const cases: [string[], RegExp][] = [
      [['run', '--workspace', s.ws], /no task given/],
      [['run', '--task', 'x', '--task-file', 'y'], /exclude each other/],
      [['run', '--task', '   '], /the task is empty/],
      [['run', '--task', 'x', '--workspace', join(s.ws, 'nope')], /workspace .* does not exist/],
      [['run', '--task-file', join(s.ws, 'missing.txt')], /task file .* cannot be read/],
      [['run', '--task', 'x', '--max-turns', '0'], /--max-turns/],
      [['run', '--task', 'x', '--timeout', 'soon'], /--timeout/],
      [['run', '--task', 'x', '--provider', 'magic'], /--provider/],
      [['run', '--task', 'x', '--provider', 'replay'], /needs a recording/],
      [['run', '--task', 'x', '--provider', 'replay', '--replay-from', join(s.ws, 'none.jsonl')], /no such file, directory or task/],
      [['run', '--resume', 'zz'], /is not a task id/],
      [['run', '--task', 'x', '--user', 'a\u0001b'], /--user must be/],
    ]
    for (const [args, message] of cases) {
      const res = await s.run(args)
      expect(res.code, `${args.join(' ')}: ${res.stderr}`).toBe(2)
      expect(res.stderr).toMatch(message)
      expect(res.stderr.trim().split('\n')).toHaveLength(1)
    }
    expect(existsSync(s.tree.layout.db)).toBe(false)
    expect(s.fake.requests).toHaveLength(0)
  })

  it('refuses an OpenAI endpoint without a key before creating anything', async () => {
    const s = await runSetup()
    writeFileSync(s.config, 'llm:\n  provider: openai\n')
    const res = await s.run(['run', '--task', 'x', '--workspace', s.ws], { OPENAI_API_KEY: '' })
    expect(res.code).toBe(2)
    expect(res.stderr).toMatch(/^ctxagent: no OpenAI API key is set \(set OPENAI_API_KEY/)
    expect(existsSync(s.tree.layout.db)).toBe(false)
  })

  it('pauses (exit 1) when the LLM stays unreachable, and resumes to completion', async () => {
    const s = await runSetup()
    s.fake.queue.push({ status: 503 }, { status: 503 }, { status: 503 })
    const res = await s.run(['run', '--task', 't', '--workspace', s.ws])
    expect(res.code).toBe(1)
    expect(res.stderr).toMatch(/paused: .*answered 503/)
    const task = onlyTask(s.tree)
    expect(task.location).toBe('paused')
    expect(task.state).toMatchObject({ status: 'paused', error: expect.stringContaining('503') })
    s.fake.queue.push(finish())
    const resumed = await s.run(['run', '--resume', task.uuid.slice(0, 8)])
    expect(resumed.code, resumed.stderr).toBe(0)
    expect(readTask(s.tree, task.uuid)).toMatchObject({ location: 'completed', state: { status: 'completed', error: null } })
  })

  it('a "context length exceeded" answer forces a compaction and one retry of the request', async () => {
    const s = await runSetup('context:\n  compression:\n    keep_recent: 2\n    min_to_compress: 2\n')
    s.fake.queue.push(
      ...['calc.js', 'README.md', 'calc.js'].map((path, i) => ({ calls: [{ name: 'read_file', arguments: { path, offset: i + 1 } }] })),
      { status: 400, content: "This model's maximum context length is 8000 tokens. However, your messages resulted in 9120 tokens." },
      { content: '## Original Task\nfix add\n## Current State\n- read calc.js' },
      finish(),
    )
    const res = await s.run(['run', '--task', 'fix add', '--workspace', s.ws])
    expect(res.code, res.stderr).toBe(0)
    expect(res.stderr).toMatch(/too long; compacting and retrying once/)
    const task = onlyTask(s.tree)
    expect(task.summaries).toHaveLength(1)
    expect(task.state).toMatchObject({ status: 'completed', turns: 4 })
    const [, retry] = agentRequests(s.fake).slice(-2)
    expect(JSON.stringify(retry?.body.messages)).toContain('[Summary of the conversation so far')
    for (const r of agentRequests(s.fake)) expectWellFormed(r)
  })

  it('a user override reaches the request (model) and the system prompt', async () => {
    const s = await runSetup(
      'run:\n  system_prompt_append: "House rule: be brief."\nusers:\n  alice:\n    llm:\n      model: alice-model\n    system_prompt_append: "Alice prefers tabs."\n',
    )
    s.fake.queue.push({ content: 'done' })
    const res = await s.run(['run', '--task', 't', '--user', 'alice', '--workspace', s.ws])
    expect(res.code, res.stderr).toBe(0)
    const request = agentRequests(s.fake)[0]
    expect(request?.body.model).toBe('alice-model')
    expect(request?.body.messages[0]?.content).toMatch(/House rule: be brief\.\n\nAlice prefers tabs\.$/)
    expect(onlyTask(s.tree).metadata).toMatchObject({ user: 'alice', config: { model: 'alice-model' } })
  })
})
