import { describe, expect, it } from 'vitest'
import { agentRequests, expectWellFormed, onlyTask, runSetup } from './harness.js'

const finish = { calls: [{ name: 'finish', arguments: { summary: 'done', status: 'done' } }] }
const deep = (n: number) => `${'{"a":'.repeat(n)}1${'}'.repeat(n)}`

/** An assistant message sent exactly as given, with one tool call of the given function. */
const raw = (fn: Record<string, unknown>, content: unknown = null) => ({
  message: { role: 'assistant', content, tool_calls: [{ id: `c${Math.random()}`, type: 'function', function: fn }] },
})

describe('malformed assistant messages never kill the task', () => {
  it('answers arguments as an object, a null name, content as parts and 20,000-deep arguments; the task goes on', async () => {
    const s = await runSetup()
    s.fake.queue.push(
      raw({ name: null, arguments: '{}' }),
      raw({ name: 'read_file', arguments: { path: 'calc.js' } }),
      raw({ name: 'read_file', arguments: deep(20_000) }),
      // An object 20,000 deep (no JSON.stringify can write it: sent as text).
      {
        message: `{"role":"assistant","content":[{"type":"text","text":"looking"},{"type":"text","text":"around"}],"tool_calls":[{"id":"c_deep","type":"function","function":{"name":"glob","arguments":${deep(20_000)}}}]}`,
      },
      raw({ name: 'glob', arguments: { pattern: '*.md' } }),
      finish,
    )
    const res = await s.run(['run', '--task', 't', '--workspace', s.ws])
    expect(res.code, res.stderr).toBe(0)
    const task = onlyTask(s.tree)
    expect(task.state).toMatchObject({ status: 'completed', final_answer: 'done' })
    const tools = task.tools
    expect(tools.map((t) => t.status)).toEqual(['error', 'success', 'error', 'error', 'success', 'success'])
    expect(String(tools[0]?.result)).toMatch(/names no tool/)
    expect(tools[1]).toMatchObject({ tool_name: 'read_file', arguments: { path: 'calc.js' } })
    expect(String(tools[2]?.result)).toMatch(/nested deeper than 100 levels/)
    expect(String(tools[3]?.result)).toMatch(/nested deeper than 100 levels/)
    const assistant = task.messages.filter((m) => m.role === 'assistant')
    expect(assistant[3]?.content).toBe('looking\naround')
    // Every call answered exactly once, in every request.
    for (const r of agentRequests(s.fake)) expectWellFormed(r)
  })

  it('counts them toward the three strikes', async () => {
    const s = await runSetup()
    s.fake.fallback = () => raw({ name: null, arguments: { path: 'x' } })
    const res = await s.run(['run', '--task', 't', '--workspace', s.ws])
    expect(res.code).toBe(1)
    expect(onlyTask(s.tree).state).toMatchObject({ status: 'failed', error: expect.stringContaining('3 malformed tool calls in a row') })
  })

  it('runs at most tools.max_calls_per_reply calls of one reply and answers each of the rest as skipped', async () => {
    const s = await runSetup('tools:\n  max_calls_per_reply: 3\n')
    const calls = Array.from({ length: 200 }, (_, i) => ({ name: 'glob', arguments: { pattern: `*${i}*` }, id: `many_${i}` }))
    s.fake.queue.push({ calls })
    s.fake.fallback = (req) => (Array.isArray(req.body.tools) ? finish : { content: '## Original Task\nsummary' })
    const res = await s.run(['run', '--task', 't', '--workspace', s.ws])
    expect(res.code, res.stderr).toBe(0)
    expect(res.stderr).toMatch(/the reply carries 200 tool calls; running the first 3 \(tools.max_calls_per_reply\)/)
    const task = onlyTask(s.tree)
    const results = task.messages.filter((m) => m.role === 'tool' && String(m.tool_call_id).startsWith('many_'))
    expect(results.map((m) => m.tool_call_id)).toEqual(calls.map((c) => c.id))
    expect(results.slice(0, 3).every((m) => !String(m.content).startsWith('[skipped'))).toBe(true)
    expect(results.slice(3).every((m) => String(m.content).startsWith('[skipped: at most 3 tool calls run per reply'))).toBe(true)
    for (const r of agentRequests(s.fake)) expectWellFormed(r)
  })
})
