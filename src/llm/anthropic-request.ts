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

/** How a request uses the prompt cache (see messagesRequest). */
export interface CacheUse {
  /** False: no breakpoint at all (a compaction's or final summary's request shares no prefix with anything: a breakpoint would only be a one-use write at 1.25×). */
  cache: boolean
  /** The tool_use_id of the pruned result the previous request of this conversation had its breakpoint on, if any. */
  previousStub: string | null
}

/**
 * The request body. Cache breakpoints (`cache_control`, the API allows four): the end
 * of the system blocks (the tools come before them, so both are cached; the last tool
 * when there is no system text), the last pruned tool result (prune only ever moves
 * its boundary forward, so the prefix up to it is what the next requests share), the
 * end of the message before the last answer (where the previous request ended: its
 * cache is read there, however many blocks the answer and its results added; the API
 * looks back only 20 blocks from a breakpoint) and the end of the last message (written
 * for the next request).
 *
 * When prune has moved its boundary since the previous request (a prune step, 12 rounds
 * of 2 blocks or more), the previous request's end is no longer a prefix of this one
 * (the results between the two boundaries became stubs), and the new boundary lies past
 * the 20 blocks the API looks back from it: the cache would be read only up to the
 * system, and the unchanged stubs written again at 1.25×. So the breakpoint before the
 * last answer goes instead on the previous boundary (`previousStub`), which the cache
 * holds: read there, written from there. `stub` in the result is this request's.
 */
export function messagesRequest(
  model: string,
  window: readonly ChatMessage[],
  tools: readonly ToolSpec[] | undefined,
  maxTokens: number,
  temperature: number | undefined,
  use: CacheUse = { cache: true, previousStub: null },
): MessagesRequest & { stub?: string } {
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
  const body = (): MessagesRequest => ({
    model,
    max_tokens: maxTokens,
    ...(system.length > 0 ? { system } : {}),
    messages,
    ...(wireTools.length > 0 ? { tools: wireTools } : {}),
    ...(temperature === undefined ? {} : { temperature }),
  })
  if (!use.cache) return body()
  if (system.length > 0) mark(system, system.length - 1)
  else if (wireTools.length > 0) wireTools[wireTools.length - 1] = { ...(wireTools.at(-1) as WireTool), cache_control: EPHEMERAL }
  const stubId = stub !== null && stub.block.type === 'tool_result' ? stub.block.tool_use_id : null
  if (stub !== null) {
    const content = (messages[stub.message] as WireMessage).content
    mark(content, content.indexOf(stub.block))
  }
  // The boundary moved: the previous one is where the cache holds this request's prefix.
  const previous = stubId !== null && use.previousStub !== null && use.previousStub !== stubId ? stubAt(messages, use.previousStub) : null
  if (previous !== null) mark(previous.content, previous.index)
  else {
    const answer = messages.findLastIndex((m) => m.role === 'assistant')
    const before = messages[answer - 1]
    if (answer > 0 && before !== undefined) mark(before.content, before.content.length - 1)
  }
  const lastMessage = messages.at(-1)
  if (lastMessage !== undefined) mark(lastMessage.content, lastMessage.content.length - 1)
  return { ...body(), ...(stubId !== null ? { stub: stubId } : {}) }
}

/** The pruned tool result answering `id` in `messages` (its message's blocks and its index), or null. */
function stubAt(messages: readonly WireMessage[], id: string): { content: Block[]; index: number } | null {
  for (let m = messages.length - 1; m >= 0; m--) {
    const content = (messages[m] as WireMessage).content
    const index = content.findIndex((b) => b.type === 'tool_result' && b.tool_use_id === id)
    if (index === -1) continue
    const block = content[index] as ToolResultBlock
    return typeof block.content === 'string' && PRUNED_STUB.test(block.content) ? { content, index } : null
  }
  return null
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
    const calls: Block[] = (m.tool_calls ?? []).map((c) => ({
      type: 'tool_use',
      id: toolUseId(c.id),
      name: c.function.name,
      input: inputOf(c.function.arguments),
    }))
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
