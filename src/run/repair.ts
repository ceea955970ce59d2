import { join } from 'node:path'
import { rebuildWindow } from '../context/snapshot.js'
import { tailPlainSync } from '../storage/format/jsonl.js'
import { FILES } from '../storage/fs/layout.js'
import { normalizeMessage } from '../storage/format/records.js'
import type { ToolCall } from '../storage/format/records.js'
import type { TaskHandle } from '../storage/task/handle.js'
import { finishedOutput, isFinishedOutput } from '../tools/finish.js'
import { parseArguments } from '../tools/registry.js'
import type { ToolRegistry } from '../tools/registry.js'

export const ABORTED_BY_CRASH = '[aborted: the process stopped before this tool finished]'

/** The final answer of a task whose agent stopped after its finish call and before state.json said so. */
export interface RecordedFinish {
  summary: string
  status: 'done' | 'blocked'
}

/** What a call the task ended before is answered with (the turn's own words, src/run/turn.ts). */
export const SKIPPED_AFTER_END = '[skipped: the task ended before this call]'

/**
 * Makes a resumed task's window well-formed before the first request (docs/contract.md §12.3):
 * current.jsonl rebuilt from the truth when a crash left it behind messages.jsonl,
 * then every tool call of the last assistant message that has no result answered
 * with an `[aborted: …]` result. Reads only the tail of messages.jsonl.
 *
 * A `finish` call in that message is the task's answer, given once: answered already
 * (the agent stopped before state.json took the answer), or not yet run with every call
 * before it answered (finish does nothing but end the task: it is run now), it is
 * returned as `finished`, for the resume to settle with instead of asking the model again.
 * `answered` counts the calls answered as aborted.
 */
export async function repairResumed(handle: TaskHandle, tools: ToolRegistry): Promise<{ rebuilt: boolean; answered: number; finished: RecordedFinish | null }> {
  const rebuilt = await rebuildIfBehind(handle)
  const path = join(handle.dir, FILES.messages)
  const isAssistant = (r: Record<string, unknown>) => r.role === 'assistant'
  const last = tailPlainSync(path, 1, isAssistant).records[0]
  const assistant = last ? normalizeMessage(last) : null
  const calls = assistant?.tool_calls ?? []
  if (calls.length === 0) return { rebuilt, answered: 0, finished: null }
  const after = tailPlainSync(path, Number.POSITIVE_INFINITY, () => true, isAssistant).records
  const answers = new Map(after.filter((r) => typeof r.tool_call_id === 'string').map((r) => [r.tool_call_id as string, r.content]))
  let count = 0
  let aborted = false
  let finished: RecordedFinish | null = null
  for (const call of calls) {
    const isFinish = typeof call.function?.name === 'string' && tools.resolve(call.function.name)?.name === 'finish'
    if (answers.has(call.id)) {
      if (finished === null && isFinish && isFinishedOutput(answers.get(call.id))) finished = await finishArguments(tools, call)
      continue
    }
    const ran = finished === null && !aborted && isFinish ? await finishArguments(tools, call) : null
    if (ran !== null) {
      finished = ran
      handle.addMessage({ role: 'tool', content: finishedOutput(ran.status), tool_name: 'finish', tool_call_id: call.id })
      handle.addTool({ tool_name: 'finish', arguments: { ...ran }, result: finishedOutput(ran.status), status: 'success', error: null, duration_ms: 0 })
    } else if (finished !== null) {
      handle.addMessage({ role: 'tool', content: SKIPPED_AFTER_END, tool_name: call.function.name, tool_call_id: call.id })
      handle.addTool({ tool_name: call.function.name, arguments: {}, result: SKIPPED_AFTER_END, status: 'error', error: 'skipped', duration_ms: 0 })
    } else {
      aborted = true
      handle.addMessage({ role: 'tool', content: ABORTED_BY_CRASH, tool_name: call.function.name, tool_call_id: call.id })
      handle.addTool({
        tool_name: call.function.name,
        arguments: {},
        result: ABORTED_BY_CRASH,
        status: 'error',
        error: 'aborted: the process stopped',
        duration_ms: 0,
      })
      count++
    }
  }
  return { rebuilt, answered: count, finished }
}

/** A finish call's summary and status, as its tool validates them (null when they are not valid: the model is asked again). */
async function finishArguments(tools: ToolRegistry, call: ToolCall): Promise<RecordedFinish | null> {
  const parsed = parseArguments(call.function?.arguments)
  const valid = parsed.ok ? await tools.resolve('finish')?.validate(parsed.args) : undefined
  if (!valid?.ok) return null
  const { summary, status } = valid.args
  return typeof summary === 'string' ? { summary, status: status === 'blocked' ? 'blocked' : 'done' } : null
}

/** current.jsonl must end with the last visible message of messages.jsonl; a crash between the two writes can leave it one behind. */
async function rebuildIfBehind(handle: TaskHandle): Promise<boolean> {
  const lastStored = [...handle.messages.recent()].reverse().find((m) => m.visible !== false)
  if (lastStored === undefined) return false
  const lastInWindow = handle.window().at(-1)
  const same =
    lastInWindow !== undefined &&
    lastInWindow.role === lastStored.role &&
    lastInWindow.content === lastStored.content &&
    lastInWindow.tool_call_id === lastStored.tool_call_id
  if (same) return false
  handle.replaceCurrent(await rebuildWindow(handle.dir))
  return true
}
