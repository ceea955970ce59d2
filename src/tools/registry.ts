import { jsonrepair } from 'jsonrepair'
import type { ToolSpec } from '../llm/client.js'
import { depthOf, MAX_ARGUMENT_DEPTH, TOO_DEEP_ARGUMENTS } from '../llm/reply.js'
import type { ToolCall } from '../storage/format/records.js'
import { editFile } from './edit-file.js'
import { ToolError } from './errors.js'
import { finish } from './finish.js'
import { glob } from './glob.js'
import { grep } from './grep.js'
import { inspect } from './inspect.js'
import { listDir } from './list-dir.js'
import { readFile } from './read-file.js'
import { runCommand } from './run-command.js'
import type { Tool, ToolContext, ToolOutcome } from './types.js'
import { writeFile } from './write-file.js'

/** The outcome of one call, with what the registry made of it. */
export interface CallOutcome extends ToolOutcome {
  /** The tool's name, or the name as called when no tool has it. */
  name: string
  /** The arguments as parsed (and repaired); `{_raw}` when they could not be. */
  args: Record<string, unknown>
  /** Unknown tool, or arguments that are not JSON even after repair or do not fit the schema. */
  malformed: boolean
}

/** The tools an agent is offered, by name (docs/contract.md §12.4; MCP tools join with add()). */
export class ToolRegistry {
  private readonly tools = new Map<string, Tool>()

  /** The built-in tools; a chat session has no `finish` (its answers do not end it). */
  static builtin(options: { allowShell: boolean; finish?: boolean }): ToolRegistry {
    const registry = new ToolRegistry()
    for (const tool of [readFile, listDir, glob, grep, editFile, writeFile, inspect]) registry.add(tool)
    if (options.finish !== false) registry.add(finish)
    if (options.allowShell) registry.add(runCommand)
    return registry
  }

  add(tool: Tool): void {
    if (this.tools.has(tool.name)) throw new Error(`two tools are named ${tool.name}`)
    this.tools.set(tool.name, tool)
  }

  names(): string[] {
    return [...this.tools.keys()]
  }

  specs(): ToolSpec[] {
    return [...this.tools.values()].map((t) => t.spec)
  }

  /**
   * Finds a tool by name: exactly, else ignoring case and surrounding white space, and
   * a `functions.` prefix that some models copy from their chat template.
   */
  resolve(name: string): Tool | undefined {
    const exact = this.tools.get(name)
    if (exact) return exact
    const wanted = name
      .trim()
      .replace(/^functions\./i, '')
      .toLowerCase()
    return [...this.tools.values()].find((t) => t.name.toLowerCase() === wanted)
  }

  /** Runs one call. Never throws: every failure is an error result the model can act on. */
  async call(call: ToolCall, ctx: ToolContext): Promise<CallOutcome> {
    // A call recorded by an older version, or replayed, may carry any shape: a name that is not text is no tool's.
    const called: unknown = call.function?.name
    const name = typeof called === 'string' ? called : ''
    const tool = name === '' ? undefined : this.resolve(name)
    const parsed = parseArguments(call.function?.arguments)
    const args = parsed.ok ? parsed.args : { _raw: rawText(call.function?.arguments) }
    if (!tool) {
      const why = name === '' ? 'the call names no tool' : `there is no tool named '${name}'`
      return { ...errorResult(`${why}. The tools are: ${this.names().join(', ')}`), name, args, malformed: true }
    }
    const schema = JSON.stringify(tool.spec.function.parameters)
    if (!parsed.ok) {
      return {
        ...errorResult(`the arguments of ${tool.name} are not a JSON object (${parsed.error}); send them as JSON matching ${schema}`),
        name: tool.name,
        args,
        malformed: true,
      }
    }
    const valid = await tool.validate(parsed.args)
    if (!valid.ok) return { ...errorResult(valid.error), name: tool.name, args, malformed: true }
    try {
      return { ...(await tool.run(valid.args, ctx)), name: tool.name, args: valid.args, malformed: false }
    } catch (err) {
      // A ToolError is a refusal meant for the model; anything else is reported by its errno code or message.
      const message = err instanceof ToolError ? err.message : `${tool.name} failed: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`
      return { ...errorResult(message), ...(ctx.signal.aborted ? { aborted: true } : {}), name: tool.name, args: valid.args, malformed: false }
    }
  }
}

/** Unparseable arguments as kept in tools.jsonl: text, at most 2,000 characters of it (no recursion over a deep value). */
function rawText(raw: unknown): string {
  const text = typeof raw === 'string' ? raw : typeof raw === 'object' && raw !== null ? '[arguments sent as a value that is not a JSON object]' : String(raw)
  return text.length > 2000 ? `${text.slice(0, 2000)}… [${text.length - 2000} more characters]` : text
}

function errorResult(message: string): ToolOutcome {
  return { output: `Error: ${message}`, status: 'error', error: message }
}

/**
 * Arguments as sent by the model: JSON, else repaired (single quotes, trailing commas,
 * unquoted keys, a cut-off end), or a JSON string holding JSON; empty means `{}`. An
 * object (some servers send one) is taken as it is. Nesting deeper than
 * MAX_ARGUMENT_DEPTH is refused before anything recurses over it.
 */
export function parseArguments(raw: unknown, nested = false): { ok: true; args: Record<string, unknown> } | { ok: false; error: string } {
  if (raw === undefined || raw === null) return { ok: true, args: {} }
  if (typeof raw === 'object') return objectArguments(raw)
  if (typeof raw !== 'string') return { ok: false, error: `got ${typeof raw}` }
  if (raw === TOO_DEEP_ARGUMENTS || textDepth(raw) > MAX_ARGUMENT_DEPTH) return { ok: false, error: `nested deeper than ${MAX_ARGUMENT_DEPTH} levels` }
  if (raw.trim() === '') return { ok: true, args: {} }
  let value: unknown
  try {
    value = JSON.parse(raw)
  } catch {
    try {
      value = JSON.parse(jsonrepair(raw))
    } catch (err) {
      return { ok: false, error: (err as Error).message.split('\n')[0] ?? 'not JSON' }
    }
  }
  if (typeof value === 'string' && !nested) return parseArguments(value, true)
  if (value === null || typeof value !== 'object') return { ok: false, error: `got ${typeof value}` }
  return objectArguments(value)
}

function objectArguments(value: object): { ok: true; args: Record<string, unknown> } | { ok: false; error: string } {
  if (Array.isArray(value)) return { ok: false, error: 'got an array' }
  if (depthOf(value) > MAX_ARGUMENT_DEPTH) return { ok: false, error: `nested deeper than ${MAX_ARGUMENT_DEPTH} levels` }
  return { ok: true, args: value as Record<string, unknown> }
}

/** Bracket depth of JSON-like text (outside strings), counted up to just past the limit. */
function textDepth(text: string): number {
  let depth = 0
  let inString = false
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (inString) {
      if (c === 92)
        i++ // a backslash escapes the next character
      else if (c === 34) inString = false
    } else if (c === 34) inString = true
    else if (c === 123 || c === 91) {
      if (++depth > MAX_ARGUMENT_DEPTH) return depth
    } else if (c === 125 || c === 93) depth = Math.max(0, depth - 1)
  }
  return depth
}
