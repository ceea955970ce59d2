import type { ChatMessage, ToolSpec } from './client.js'

/**
 * ctxagent's window (OpenAI chat shape) as the Messages API takes it: the system
 * messages as top-level blocks, assistant tool calls as tool_use blocks, tool results
 * as tool_result blocks of a user message, consecutive messages of one role merged (the
 * API wants user and assistant to alternate), and at most three prompt-cache
 * breakpoints on the prefix that stays the same from one request to the next.
 */

export interface CacheControl {
  type: 'ephemeral'
}

export interface TextBlock {
  type: 'text'
  text: string
  cache_control?: CacheControl
}

export interface ToolUseBlock {
  type: 'tool_use'
  id: string
  name: string
  input: Record<string, unknown>
  cache_control?: CacheControl
}

export interface ToolResultBlock {
  type: 'tool_result'
  tool_use_id: string
  content?: string
  cache_control?: CacheControl
}

export type Block = TextBlock | ToolUseBlock | ToolResultBlock

export interface WireMessage {
  role: 'user' | 'assistant'
  content: Block[]
}

export interface WireTool {
  name: string
  description?: string
  input_schema: Record<string, unknown>
  cache_control?: CacheControl
}

export interface MessagesRequest {
  model: string
  max_tokens: number
  system?: TextBlock[]
  messages: WireMessage[]
  tools?: WireTool[]
  temperature?: number
}

const EPHEMERAL: CacheControl = Object.freeze({ type: 'ephemeral' })

/** A tool result prune emptied: `[pruned]`, or `[blob:<id>] [pruned]` (src/context/prune.ts). */
const PRUNED_STUB = /^(?:\[blob:[^\]\s]+\] )?\[pruned\]/

/** What the API says of an empty text block: refused. A message's empty text is said so instead. */
const EMPTY_TEXT = '(empty)'

/**
 * The request body. Cache breakpoints (`cache_control`, the API allows four): the end
 * of the system blocks (the tools come before them, so both are cached; the last tool
 * when there is no system text), the last pruned tool result (prune only ever moves
 * its boundary forward, so the prefix up to it is what the next requests share), the
 * end of the message before the last answer (where the previous request ended: its
 * cache is read there, however many blocks the answer and its results added; the API
 * looks back only 20 blocks from a breakpoint) and the end of the last message (written
 * for the next request).
 */
export function messagesRequest(model: string, window: readonly ChatMessage[], tools: readonly ToolSpec[] | undefined, maxTokens: number, temperature: number | undefined): MessagesRequest {
  const system: TextBlock[] = []
  const messages: WireMessage[] = []
  // The last pruned tool result: its message, and its block (found by identity once merging is done).
  let stub: { message: number; block: Block } | null = null
  for (const m of window) {
    if (m.role === 'system' && messages.length === 0) {
      if (typeof m.content === 'string' && m.content !== '') system.push({ type: 'text', text: m.content })
      continue
    }
    const role = m.role === 'assistant' ? 'assistant' : 'user'
    const blocks = blocksOf(m)
    const last = messages.at(-1)
    if (last !== undefined && last.role === role) {
      // Tool results first: the API wants them at the start of the user message after the calls.
      if (m.role === 'tool') {
        const at = last.content.findIndex((b) => b.type !== 'tool_result')
        last.content.splice(at === -1 ? last.content.length : at, 0, ...blocks)
      } else last.content.push(...blocks)
    } else {
      messages.push({ role, content: [...blocks] })
    }
    if (m.role === 'tool' && typeof m.content === 'string' && PRUNED_STUB.test(m.content)) stub = { message: messages.length - 1, block: blocks[0] as Block }
  }
  // The conversation starts with the user (a window cut to begin with an answer still goes).
  if (messages[0]?.role === 'assistant') {
    messages.unshift({ role: 'user', content: [{ type: 'text', text: '(the conversation continues)' }] })
    if (stub !== null) stub.message++
  }
  const wireTools = (tools ?? []).map(toolOf)
  if (system.length > 0) mark(system, system.length - 1)
  else if (wireTools.length > 0) wireTools[wireTools.length - 1] = { ...(wireTools.at(-1) as WireTool), cache_control: EPHEMERAL }
  if (stub !== null) {
    const content = (messages[stub.message] as WireMessage).content
    mark(content, content.indexOf(stub.block))
  }
  const answer = messages.findLastIndex((m) => m.role === 'assistant')
  const before = messages[answer - 1]
  if (answer > 0 && before !== undefined) mark(before.content, before.content.length - 1)
  const lastMessage = messages.at(-1)
  if (lastMessage !== undefined) mark(lastMessage.content, lastMessage.content.length - 1)
  return {
    model,
    max_tokens: maxTokens,
    ...(system.length > 0 ? { system } : {}),
    messages,
    ...(wireTools.length > 0 ? { tools: wireTools } : {}),
    ...(temperature === undefined ? {} : { temperature }),
  }
}

/** A breakpoint on `blocks[i]`: a copy of the block (the blocks of a message are shared by every request). */
function mark(blocks: Block[], i: number): void {
  const block = blocks[i]
  if (block !== undefined && block.cache_control === undefined) blocks[i] = { ...block, cache_control: EPHEMERAL }
}

/** Each message's blocks, made once: the window's messages are never changed once made (prune and clip copy them). */
const converted = new WeakMap<object, readonly Block[]>()

function blocksOf(m: ChatMessage): readonly Block[] {
  let blocks = converted.get(m)
  if (blocks === undefined) {
    blocks = Object.freeze(convert(m))
    converted.set(m, blocks)
  }
  return blocks
}

function convert(m: ChatMessage): Block[] {
  const text = typeof m.content === 'string' ? m.content : ''
  if (m.role === 'tool') return [{ type: 'tool_result', tool_use_id: toolUseId(m.tool_call_id ?? ''), ...(text === '' ? {} : { content: text }) }]
  if (m.role === 'assistant') {
    const calls: Block[] = (m.tool_calls ?? []).map((c) => ({ type: 'tool_use', id: toolUseId(c.id), name: c.function.name, input: inputOf(c.function.arguments) }))
    return text.trim() === '' ? (calls.length > 0 ? calls : [{ type: 'text', text: EMPTY_TEXT }]) : [{ type: 'text', text }, ...calls]
  }
  // A system message after the conversation began (none does today) is the operator's word: said as such.
  const said = m.role === 'system' ? `[system] ${text}` : text
  return [{ type: 'text', text: said.trim() === '' ? EMPTY_TEXT : said }]
}

/**
 * A call's arguments as the API's `input` object. Arguments that are not a JSON object
 * (a malformed call, answered with an error result) go as `{}`: the result that follows
 * says what was wrong with them.
 */
function inputOf(args: string): Record<string, unknown> {
  try {
    const value: unknown = JSON.parse(args)
    return value !== null && typeof value === 'object' && !Array.isArray(value) ? (value as Record<string, unknown>) : {}
  } catch {
    return {}
  }
}

/** The API takes ids of letters, digits, `_` and `-` only; other providers' ids (a task resumed on Anthropic) are made so, the same way on both sides. */
function toolUseId(id: string): string {
  const clean = id.replace(/[^A-Za-z0-9_-]/g, '_')
  return clean === '' ? 'call_unknown' : clean
}

/** Tool definitions, made once per spec object (the same objects every turn). */
const convertedTools = new WeakMap<object, WireTool>()

function toolOf(spec: ToolSpec): WireTool {
  let tool = convertedTools.get(spec)
  if (tool === undefined) {
    const { name, description, parameters } = spec.function
    tool = { name, ...(description === undefined ? {} : { description }), input_schema: parameters ?? { type: 'object', properties: {} } }
    convertedTools.set(spec, tool)
  }
  return tool
}
