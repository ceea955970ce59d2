// `ctxagent run`: resume of a huge task, the demo (per-turn overhead and memory: bench/turn.mjs).
// Every LLM call goes to a zero-latency OpenAI-compatible server on 127.0.0.1 in this process.
import { spawn, spawnSync } from 'node:child_process'
import { createServer } from 'node:http'
import { closeSync, mkdirSync, openSync, renameSync, rmSync, writeFileSync, writeSync } from 'node:fs'
import { join } from 'node:path'
import { agentText, median, remove, rng, ROOT, scratch, timeInterleaved } from './lib.mjs'

const BIN = join(ROOT, 'bin', 'ctxagent')
const GIB = 1024 ** 3

/** A chat completions server: the agent's requests get a tool call (or what `reply` says), the summarizer's a summary. */
async function startServer(reply) {
  const seen = { agent: 0, summary: 0, firstAt: null }
  const server = createServer((req, res) => {
    let body = ''
    req.on('data', (d) => (body += d))
    req.on('end', () => {
      const request = JSON.parse(body)
      const isAgent = Array.isArray(request.tools)
      if (isAgent) seen.agent++
      else seen.summary++
      seen.firstAt ??= process.hrtime.bigint()
      const message = isAgent
        ? reply(seen.agent)
        : { role: 'assistant', content: `## Original Task\nbench\n## Completed Work\n- turn ${seen.agent}\n## Current State\n- going on` }
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(
        JSON.stringify({
          id: 'x',
          object: 'chat.completion',
          created: 0,
          model: 'bench',
          choices: [{ index: 0, finish_reason: 'stop', message }],
          usage: { prompt_tokens: 1000, completion_tokens: 20, total_tokens: 1020 },
        }),
      )
    })
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  return { url: `http://127.0.0.1:${server.address().port}/v1`, seen, close: () => new Promise((resolve) => server.close(resolve)) }
}

const config = (url, extra = '') =>
  `llm:\n  provider: openai\n  openai:\n    base_url: ${url}\n    api_key: bench\n    model: bench\n    context_length: 32000\n    max_retries: 0\n${extra}`

/** A call of a tool whose output is small and different each time (no stuck-loop breaker). */
const globCall = (n) => ({
  role: 'assistant',
  content: `step ${n}`,
  tool_calls: [{ id: `c${n}`, type: 'function', function: { name: 'glob', arguments: JSON.stringify({ pattern: `src/*${n % 97}*.js` }) } }],
})

/** A paused task whose messages.jsonl is 1 GiB, its last summary near the end and a small window. */
function hugePausedTask(base, url, workspace) {
  const uuid = '0000b16b-0000-4000-8000-00000000b16b'
  const dir = join(base, 'paused', uuid)
  mkdirSync(dir, { recursive: true })
  for (const l of ['running', 'completed']) mkdirSync(join(base, l), { recursive: true })
  const now = new Date().toISOString()
  writeFileSync(
    join(dir, 'metadata.json'),
    `${JSON.stringify({ uuid, task_key: { task_source: 'local', owner: null, repo: 'ws', task_type: 'task', task_id: '' }, task_type: 'local_task', task_identifier: '', repository: 'ws', user: 'bench', created_at: now, process_id: 1, hostname: 'bench', config: { llm_provider: 'openai', model: 'bench', context_length: 32000, compression_threshold: 0.7 }, run: { workspace, allow_shell: false, max_turns: 1_000_000, max_tokens: null, timeout_ms: null, system_prompt_file: null, replay_from: null } })}\n`,
  )
  const random = rng(7)
  const fd = openSync(join(dir, 'messages.jsonl'), 'w')
  let seq = 0
  let bytes = 0
  const add = (m) => {
    const line = `${JSON.stringify({ seq: ++seq, ...m, timestamp: now, token_count: Math.ceil((m.content?.length ?? 0) / 4) })}\n`
    writeSync(fd, line)
    bytes += line.length
    return line
  }
  add({ role: 'system', content: 'You are a coding agent.' })
  add({ role: 'user', content: 'The task.' })
  const chunk = agentText(random, 8_000)
  let turn = 0
  while (bytes < GIB) {
    turn++
    add({ role: 'assistant', content: `step ${turn}`, tool_calls: globCall(turn).tool_calls })
    add({ role: 'tool', content: chunk, tool_name: 'glob', tool_call_id: `c${turn}` })
  }
  const summaryEnd = seq
  const tail = []
  for (let i = 0; i < 4; i++) {
    turn++
    const call = globCall(turn)
    tail.push({ role: 'assistant', content: call.content, tool_calls: call.tool_calls })
    tail.push({ role: 'tool', content: 'src/a.js', tool_name: 'glob', tool_call_id: `c${turn}` })
  }
  for (const m of tail) add(m)
  closeSync(fd)
  writeFileSync(
    join(dir, 'summaries.jsonl'),
    `${JSON.stringify({ summary_id: 1, start_seq: 3, end_seq: summaryEnd, summary: '## Original Task\nThe task.', created_at: now, original_tokens: 1, summary_tokens: 1, compression_ratio: 1, compressed_message_count: 1, tokens_saved: 0, method: 'llm', model: 'bench' })}\n`,
  )
  const window = [
    { role: 'system', content: 'You are a coding agent.' },
    { role: 'user', content: 'The task.' },
    {
      role: 'user',
      content: `[Summary of the conversation so far (messages 3-${summaryEnd}); the original task is above, recent messages follow]\n\n## Original Task\nThe task.`,
    },
    ...tail,
  ]
  writeFileSync(join(dir, 'current.jsonl'), window.map((m) => `${JSON.stringify(m)}\n`).join(''))
  writeFileSync(
    join(dir, 'state.json'),
    `${JSON.stringify({ status: 'paused', started_at: now, updated_at: now, completed_at: null, llm_call_count: turn, tool_call_count: turn, total_tokens_used: 0, current_context_tokens: 0, compression_count: 1, message_count: seq, last_activity: 'paused', error: null, comment_detection: { last_comment_ids: [], last_check_timestamp: null }, turns: turn })}\n`,
  )
  writeFileSync(join(base, 'config.yaml'), config(url))
  return { uuid, bytes }
}

async function resume() {
  const base = scratch('agent-resume')
  // The first request is all that is timed: the process is killed once it arrives.
  const server = await startServer(() => ({ role: 'assistant', content: 'done' }))
  try {
    // Its workspace (recorded in metadata.json, as run writes it) must not hold the task tree:
    // run refuses that (exit 2), which is what this case used to measure.
    const ws = scratch('agent-resume-ws')
    const { uuid, bytes } = hugePausedTask(base, server.url, ws)
    // Its turns count against max_turns across resumes: raised, or the resume is refused before any request.
    const args = ['run', '--resume', uuid, '--home', base, '--config', join(base, 'config.yaml'), '--log-format', 'json', '--max-turns', '100000000']
    const resumeOnce = () =>
      new Promise((resolve, reject) => {
        server.seen.firstAt = null
        const start = process.hrtime.bigint()
        const child = spawn(process.execPath, [BIN, ...args], { cwd: ws, stdio: ['ignore', 'ignore', 'ignore'] })
        const timer = setInterval(() => {
          if (server.seen.firstAt === null) return
          clearInterval(timer)
          const ms = Number(server.seen.firstAt - start) / 1e6
          child.kill('SIGKILL')
          // Back to paused/ (untimed), as it was, for the next round.
          child.once('exit', () => {
            renameSync(join(base, 'running', uuid), join(base, 'paused', uuid))
            rmSync(join(base, 'paused', uuid, '.lock'), { force: true })
            resolve(ms)
          })
        }, 1)
        child.once('exit', (code) => {
          if (server.seen.firstAt === null) {
            clearInterval(timer)
            reject(new Error(`resume exited ${code} before its first request`))
          }
        })
      })
    const resumes = []
    const [versionMs] = await timeInterleaved(
      [() => void spawnSync(process.execPath, [BIN, '--version']), async () => void resumes.push(await resumeOnce())],
      5,
    )
    const resumeMs = median(resumes.slice(1))
    return [
      {
        name: 'run-resume',
        what: `run --resume of a paused task whose messages.jsonl is ${(bytes / GIB).toFixed(2)} GiB, process start to its first LLM request, vs ctxagent --version`,
        measured: `${resumeMs.toFixed(0)} ms (--version ${versionMs.toFixed(0)} ms)`,
        ratio: `${(resumeMs / versionMs).toFixed(2)}× --version`,
        target: '≤ 2× --version',
        pass: resumeMs <= 2 * versionMs,
      },
    ]
  } finally {
    await server.close()
    remove(base)
  }
}

function demo() {
  const times = []
  for (let i = 0; i < 3; i++) {
    const start = process.hrtime.bigint()
    const res = spawnSync(process.execPath, [BIN, 'demo'], { encoding: 'utf8', env: { ...process.env, NO_COLOR: '1' } })
    if (res.status !== 0) throw new Error(`demo exited ${res.status}: ${res.stderr}`)
    times.push(Number(process.hrtime.bigint() - start) / 1e9)
    const tmp = /the fixed project: +(\S+)\/workspace/.exec(res.stdout)?.[1]
    if (tmp) remove(tmp)
  }
  const s = median(times)
  return [
    {
      name: 'demo',
      what: 'wall time of ctxagent demo (36 turns replayed, tools run for real, pause and resume, view and stats)',
      measured: `${s.toFixed(1)} s`,
      ratio: `${(10 / s).toFixed(1)}× under the aim`,
      target: '≤ 10 s (aim)',
      pass: s <= 10,
    },
  ]
}

export async function run() {
  return [...(await resume()), ...demo()]
}
