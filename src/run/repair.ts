import { join } from 'node:path'
import { rebuildWindow } from '../context/snapshot.js'
import { tailPlainSync } from '../storage/format/jsonl.js'
import { FILES } from '../storage/fs/layout.js'
import { normalizeMessage } from '../storage/format/records.js'
import type { TaskHandle } from '../storage/task/handle.js'

export const ABORTED_BY_CRASH = '[aborted: the process stopped before this tool finished]'

/**
 * Makes a resumed task's window well-formed before the first request (SPEC §12.3):
 * current.jsonl rebuilt from the truth when a crash left it behind messages.jsonl,
 * then every tool call of the last assistant message that has no result answered
 * with an `[aborted: …]` result. Reads only the tail of messages.jsonl.
 * Returns how many calls were answered.
 */
export async function repairResumed(handle: TaskHandle): Promise<{ rebuilt: boolean; answered: number }> {
  const rebuilt = await rebuildIfBehind(handle)
  const path = join(handle.dir, FILES.messages)
  const isAssistant = (r: Record<string, unknown>) => r.role === 'assistant'
  const last = tailPlainSync(path, 1, isAssistant).records[0]
  const assistant = last ? normalizeMessage(last) : null
  const calls = assistant?.tool_calls ?? []
  if (calls.length === 0) return { rebuilt, answered: 0 }
  const after = tailPlainSync(path, Number.POSITIVE_INFINITY, () => true, isAssistant).records
  const answered = new Set(after.map((r) => r.tool_call_id).filter((id): id is string => typeof id === 'string'))
  let count = 0
  for (const call of calls) {
    if (answered.has(call.id)) continue
    handle.addMessage({ role: 'tool', content: ABORTED_BY_CRASH, tool_name: call.function.name, tool_call_id: call.id })
    handle.addTool({ tool_name: call.function.name, arguments: {}, result: ABORTED_BY_CRASH, status: 'error', error: 'aborted: the process stopped', duration_ms: 0 })
    count++
  }
  return { rebuilt, answered: count }
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
