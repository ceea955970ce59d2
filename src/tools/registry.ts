import { jsonrepair } from 'jsonrepair'
import type { ToolSpec } from '../llm/client.js'
import type { ToolCall } from '../storage/format/records.js'
import { editFile } from './edit-file.js'
import { ToolError } from './errors.js'
import { finish } from './finish.js'
import { glob } from './glob.js'
import { grep } from './grep.js'
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

/** The tools an agent is offered, by name (SPEC §12.4; MCP tools join with add()). */
export class ToolRegistry {
  private readonly tools = new Map<string, Tool>()

  /** The built-in tools; a chat session has no `finish` (its answers do not end it). */
  static builtin(options: { allowShell: boolean; finish?: boolean }): ToolRegistry {
    const registry = new ToolRegistry()
    for (const tool of [readFile, listDir, glob, grep, editFile, writeFile]) registry.add(tool)
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
    const wanted = name.trim().replace(/^functions\./i, '').toLowerCase()
    return [...this.tools.values()].find((t) => t.name.toLowerCase() === wanted)
  }

  /** Runs one call. Never throws: every failure is an error result the model can act on. */
  async call(call: ToolCall, ctx: ToolContext): Promise<CallOutcome> {
    const tool = this.resolve(call.function.name)
    const parsed = parseArguments(call.function.arguments)
    const args = parsed.ok ? parsed.args : { _raw: call.function.arguments }
    if (!tool) {
      return { ...errorResult(`there is no tool named '${call.function.name}'. The tools are: ${this.names().join(', ')}`), name: call.function.name, args, malformed: true }
    }
    const schema = JSON.stringify(tool.spec.function.parameters)
    if (!parsed.ok) {
      return { ...errorResult(`the arguments of ${tool.name} are not a JSON object (${parsed.error}); send them as JSON matching ${schema}`), name: tool.name, args, malformed: true }
    }
    const valid = tool.validate(parsed.args)
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

function errorResult(message: string): ToolOutcome {
  return { output: `Error: ${message}`, status: 'error', error: message }
}

/**
 * Arguments as sent by the model: JSON, else repaired (single quotes, trailing commas,
 * unquoted keys, a cut-off end), or a JSON string holding JSON; empty means `{}`.
 */
export function parseArguments(raw: string, nested = false): { ok: true; args: Record<string, unknown> } | { ok: false; error: string } {
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
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return { ok: false, error: `got ${Array.isArray(value) ? 'an array' : typeof value}` }
  return { ok: true, args: value as Record<string, unknown> }
}
