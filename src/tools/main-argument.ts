import { clip } from '../text.js'

/** The argument that says what a call does, per built-in tool (MCP tools: the first string argument). */
const MAIN: Record<string, string> = {
  read_file: 'path',
  write_file: 'path',
  edit_file: 'path',
  list_dir: 'path',
  glob: 'pattern',
  grep: 'pattern',
  run_command: 'command',
  finish: 'status',
}

/**
 * One line naming what a tool call is about (`calc.js`, `npm test`), for logs, the live
 * status line and `view`: never the whole arguments, which can be a file's content.
 */
export function mainArgument(name: string, args: unknown, max = 60): string | null {
  if (args === null || typeof args !== 'object' || Array.isArray(args)) return null
  const record = args as Record<string, unknown>
  const key = MAIN[name]
  const value = key !== undefined ? record[key] : Object.values(record).find((v) => typeof v === 'string')
  if (typeof value !== 'string' || value.trim() === '') return null
  return clip(value.replace(/\s+/g, ' ').trim(), max)
}

/** run_command's exit, from the first line of its result (`exit code 1`, `killed by SIGKILL`), or null. */
export function commandExit(output: string): string | null {
  const first = /^(?:\[aborted\] )?(exit code (\S+)|killed by (\S+)|timed out after \S+)/.exec(output)
  if (first === null) return null
  if (first[2] !== undefined) return `exited ${first[2]}`
  if (first[3] !== undefined) return `killed by ${first[3]}`
  return first[1] as string
}
