// One simulated agent task in its own process, for honest RSS figures. Prints JSON:
// {baseline_rss, peak_rss} in MB. Modes: "disk" (ctxagent store + window +
// compaction) or "memory" (the whole conversation kept in a list, as naive agents do).
import { compressionLimit, settingsFrom } from '../dist/context/compaction.js'
import { compressIfNeeded, requestMessages } from '../dist/context/request.js'
import { extractiveSummarizer } from '../dist/context/summarizer.js'
import { parseConfig } from '../dist/config/load.js'
import { Layout } from '../dist/storage/fs/layout.js'
import { createTask } from '../dist/storage/task/lifecycle.js'
import { requestBody } from '../dist/llm/openai-compatible.js'
import { collectIfGrown, tuneV8ForTheLoop } from '../dist/run/v8-tuning.js'
import { agentText, rng } from './lib.mjs'

const [mode, base, callsArg, minArg, maxArg] = process.argv.slice(2)
// ctxagent's agent loop runs with these V8 settings (the heap's growth capped among them).
if (mode === 'disk') tuneV8ForTheLoop()
const calls = Number(callsArg)
const min = Number(minArg)
const max = Number(maxArg)
const random = rng(21)
const texts = Array.from({ length: 32 }, () => agentText(random, max))
const output = (i) => texts[i % 32].slice(0, min + Math.floor(random() * (max - min)))

global.gc?.()
const baseline = process.memoryUsage().rss
let peak = baseline
const sample = () => {
  const rss = process.memoryUsage().rss
  if (rss > peak) peak = rss
}
const timer = setInterval(sample, 5)

if (mode === 'memory') {
  const history = [
    { role: 'system', content: 'You are a coding agent.' },
    { role: 'user', content: 'Fix the failing tests in src/.' },
  ]
  for (let i = 0; i < calls; i++) {
    history.push({ role: 'assistant', content: '', tool_calls: [{ id: `c${i}`, type: 'function', function: { name: 'run', arguments: `{"step":${i}}` } }] })
    history.push({ role: 'tool', tool_call_id: `c${i}`, content: output(i) })
    const request = JSON.stringify({ model: 'm', messages: history })
    if (request.length === 0) throw new Error('unreachable')
    if (i % 10 === 0) sample()
  }
} else {
  const config = parseConfig('')
  const env = { layout: new Layout(base), config, index: null, now: () => new Date(), warn: () => undefined }
  const handle = await createTask(env, { task_key: { task_source: 'local', owner: 'b', repo: 'r', task_type: 'task', task_id: '1' }, user: null })
  handle.addMessage({ role: 'system', content: 'You are a coding agent.' })
  handle.addMessage({ role: 'user', content: 'Fix the failing tests in src/.' })
  const limit = compressionLimit(config, 128_000)
  const options = { summarizer: extractiveSummarizer(), settings: settingsFrom(config), limit, now: () => new Date(), warn: () => undefined }
  // Each request is planned and its body built as the agent loop does (src/run/window-keeper.ts,
  // src/llm/openai-compatible.ts): the pruning remembered from the last plan, the body's bytes
  // written after the previous body's, in its buffer. A JSON.stringify of the whole request
  // each turn, which ctxagent never does, was a ~0.5 MB string a turn on the heap.
  const memo = {}
  let body = null
  for (let i = 0; i < calls; i++) {
    handle.addMessage({
      role: 'assistant',
      content: '',
      tool_calls: [{ id: `c${i}`, type: 'function', function: { name: 'run', arguments: `{"step":${i}}` } }],
    })
    handle.addMessage({ role: 'tool', tool_call_id: `c${i}`, tool_name: 'run', content: output(i) })
    body = requestBody('m', requestMessages(handle.window(), limit, 3, memo).messages, undefined, 4096, undefined, body, true)
    if (body.bytes.length === 0) throw new Error('unreachable')
    // The loop sends the body and, while the LLM works on it, collects the old generation
    // when it has grown enough since the last full GC (src/run/turn.ts, src/run/v8-tuning.ts).
    collectIfGrown()
    await compressIfNeeded(handle, options)
    if (i % 10 === 0) sample()
  }
  await handle.fail('benchmark over')
}
sample()
clearInterval(timer)
global.gc?.()
const retained = process.memoryUsage().heapUsed
process.stdout.write(JSON.stringify({ baseline_rss: baseline / 1024 ** 2, peak_rss: peak / 1024 ** 2, heap_after_gc: retained / 1024 ** 2 }))
