import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { tailPlainSync } from '../format/jsonl.js'
import { FILES } from '../fs/layout.js'

/**
 * A task's tool calls by tool and outcome, as state.json keeps them (`tool_calls`,
 * `{tool: {outcome: n}}`) and the index sums them for /metrics. The owner counts each
 * tools.jsonl record as it appends it, and writes the tally with the state it writes
 * anyway: no write of its own.
 *
 * Labels are bounded, as every name reaching a metric must be: a built-in tool by its
 * name; an MCP tool (`<server>__<tool>`, its tool part chosen by the server) as
 * `mcp:<server>` for a configured server; any other name (one the model made up) as
 * `other`. Outcomes are tools.jsonl's `status`: success or error. Calls made before
 * tasks kept a tally are `unknown` (tool and outcome).
 */
export type ToolTally = Record<string, Record<string, number>>

/** The built-in tools' names (src/tools/registry.ts; a test keeps the two alike). */
export const BUILTIN_TOOLS: readonly string[] = ['read_file', 'list_dir', 'glob', 'grep', 'edit_file', 'write_file', 'inspect', 'finish', 'run_command']
export const OTHER_TOOL = 'other'
export const UNKNOWN = 'unknown'
const OUTCOMES = new Set(['success', 'error', UNKNOWN])
const BUILTIN = new Set(BUILTIN_TOOLS)
const MCP_LABEL = /^mcp:[A-Za-z0-9_-]{1,64}$/
/** MCP labels kept per task read from a file (one ctxagent wrote has only configured servers'); more are `other`. */
const MAX_MCP_LABELS = 16
/** A resumed task's uncounted calls read back from tools.jsonl at most; more are `unknown` (an old or foreign file). */
const MAX_CATCH_UP = 1_000

/** The label of a tool name, given the configured MCP servers' names. */
export function toolLabeler(mcpServers: readonly string[]): (name: string) => string {
  // As src/tools/mcp.ts names MCP tools: characters outside [A-Za-z0-9_-] as `_`, the whole cut to 64.
  const servers = mcpServers
    .map((s) => s.replace(/[^A-Za-z0-9_-]/g, '_'))
    .map((clean) => ({ prefix: `${clean}__`.slice(0, 64), label: `mcp:${clean.slice(0, 64)}` }))
  return (name) => {
    if (BUILTIN.has(name)) return name
    for (const s of servers) if (name.startsWith(s.prefix)) return s.label
    return OTHER_TOOL
  }
}

/** tools.jsonl's status as an outcome label. */
export function outcomeLabel(status: unknown): string {
  return status === 'success' || status === 'error' ? status : UNKNOWN
}

/** `tally` with `n` more calls of `tool` ending `outcome` (a new object: a state on its way to disk keeps its own). */
export function addCalls(tally: ToolTally, tool: string, outcome: string, n = 1): ToolTally {
  const row = tally[tool]
  return { ...tally, [tool]: { ...row, [outcome]: (row?.[outcome] ?? 0) + n } }
}

export function tallySum(tally: ToolTally): number {
  let sum = 0
  for (const row of Object.values(tally)) for (const n of Object.values(row)) sum += n
  return sum
}

/** The tally of a task whose state.json has none (written before tallies): its calls, all unknown. */
export function legacyTally(calls: number): ToolTally {
  return calls > 0 ? { [UNKNOWN]: { [UNKNOWN]: calls } } : {}
}

/**
 * A tally as read from a state.json, made safe to index: labels within the bounds above
 * (others folded into `other` / `unknown`), counts positive safe integers.
 */
export function cleanTally(raw: unknown): ToolTally {
  let tally: ToolTally = {}
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) return tally
  let mcp = 0
  for (const [tool, row] of Object.entries(raw as Record<string, unknown>)) {
    if (typeof row !== 'object' || row === null || Array.isArray(row)) continue
    let label = tool === UNKNOWN || tool === OTHER_TOOL || BUILTIN.has(tool) ? tool : MCP_LABEL.test(tool) ? tool : OTHER_TOOL
    if (label.startsWith('mcp:') && ++mcp > MAX_MCP_LABELS) label = OTHER_TOOL
    for (const [outcome, n] of Object.entries(row as Record<string, unknown>)) {
      if (typeof n !== 'number' || !Number.isSafeInteger(n) || n <= 0) continue
      tally = addCalls(tally, label, OUTCOMES.has(outcome) ? outcome : UNKNOWN, n)
    }
  }
  return tally
}

/**
 * The tally of a task opened by its owner: state.json's, caught up with the tools.jsonl
 * records it does not count yet (a crash between the record and the next state write;
 * the calls of a task whose state.json predates tallies are its unknown ones). The
 * records are the tally's sum onwards, read from the file's end: a turn's worth.
 * Without a tally, the calls the index counted as unknown stay so (scan.ts's count: the
 * state's, or the file's last seq when the state says nothing), or a counter would fall.
 */
export function ownerTally(
  dir: string,
  state: { tool_calls?: ToolTally | undefined; tool_call_count: number; message_count?: number | undefined },
  lastSeq: number,
  label: (name: string) => string,
): ToolTally {
  let tally = state.tool_calls ?? legacyTally(state.message_count === undefined ? lastSeq : state.tool_call_count)
  const counted = tallySum(tally)
  const gap = lastSeq - counted
  if (gap <= 0) return tally
  let found = 0
  const path = join(dir, FILES.tools)
  if (gap <= MAX_CATCH_UP && existsSync(path)) {
    for (const record of tailPlainSync(path, gap + 256).records) {
      // A network record repeats the seq of the call before it and is no call (records.ts).
      if (typeof record.seq !== 'number' || record.seq <= counted || found === gap || record.kind === 'network') continue
      tally = addCalls(tally, label(typeof record.tool_name === 'string' ? record.tool_name : ''), outcomeLabel(record.status))
      found++
    }
  }
  return found < gap ? addCalls(tally, UNKNOWN, UNKNOWN, gap - found) : tally
}
