import { randomUUID } from 'node:crypto'
import type { ToolCall } from '../storage/format/records.js'
import type { ChatResult } from './client.js'

/** Deepest nesting of tool call arguments ctxagent reads; deeper ones are a malformed call (no recursion on them overflows the stack). */
export const MAX_ARGUMENT_DEPTH = 100

/** The arguments text of a call whose arguments came as a value too deep to serialise: a malformed call, said so. */
export const TOO_DEEP_ARGUMENTS = `\u0000arguments nested deeper than ${MAX_ARGUMENT_DEPTH} levels`

/**
 * The assistant message as ctxagent records it, from whatever a server sent: content
 * as a string (an array of parts joined, anything else null), every tool call with a
 * string id, a string name (empty when it had none: an unknown tool, answered as a
 * malformed call) and string arguments (an object is JSON-encoded). A model's odd
 * reply becomes calls the registry answers with an error, never a crash of the task.
 */
export function normaliseReply(message: unknown): ChatResult['message'] {
  const raw = isObject(message) ? message : {}
  const calls = Array.isArray(raw.tool_calls) ? raw.tool_calls.filter(isCall).map(normaliseCall) : []
  return { role: 'assistant', content: contentText(raw.content), ...(calls.length > 0 ? { tool_calls: calls } : {}) }
}

function isObject(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value)
}

/** A function call (a missing `type` counts as one); other kinds of calls are not offered, so not run. */
function isCall(value: unknown): value is Record<string, unknown> {
  return isObject(value) && (value.type === undefined || value.type === null || value.type === 'function')
}

function normaliseCall(call: Record<string, unknown>): ToolCall {
  const fn = isObject(call.function) ? call.function : {}
  const id = typeof call.id === 'string' && call.id !== '' ? call.id : `call_${randomUUID().replaceAll('-', '').slice(0, 24)}`
  return { id, type: 'function', function: { name: typeof fn.name === 'string' ? fn.name : '', arguments: argumentsText(fn.arguments) } }
}

function argumentsText(value: unknown): string {
  if (typeof value === 'string') return value
  if (value === undefined || value === null) return ''
  if (typeof value === 'object' && depthOf(value) > MAX_ARGUMENT_DEPTH) return TOO_DEEP_ARGUMENTS
  try {
    return JSON.stringify(value) ?? ''
  } catch {
    return TOO_DEEP_ARGUMENTS
  }
}

/** Nesting depth of a parsed JSON value, without recursion; stops counting past the limit. */
export function depthOf(value: unknown): number {
  let deepest = 0
  const stack: [unknown, number][] = [[value, 1]]
  while (stack.length > 0) {
    const [item, depth] = stack.pop() as [unknown, number]
    if (item === null || typeof item !== 'object') continue
    deepest = Math.max(deepest, depth)
    if (deepest > MAX_ARGUMENT_DEPTH) return deepest
    for (const child of Object.values(item as object)) stack.push([child, depth + 1])
  }
  return deepest
}

/** Content as text: a string as is, the text parts of an array of parts joined, else null. */
function contentText(content: unknown): string | null {
  if (typeof content === 'string') return content
  if (!Array.isArray(content)) return null
  const parts = content
    .map((part) => (typeof part === 'string' ? part : isObject(part) && typeof part.text === 'string' ? part.text : null))
    .filter((t) => t !== null)
  return parts.length > 0 ? parts.join('\n') : null
}
