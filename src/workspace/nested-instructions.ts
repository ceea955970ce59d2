import { isAbsolute, posix, relative, resolve, sep } from 'node:path'
import type { InstructionFile } from '../storage/task/state.js'
import { cut, INSTRUCTIONS_MAX_BYTES, READ_LIMIT, section } from './instructions.js'
import { describeBase, readTrusted } from './trusted-base.js'

/*
 * Nested project instructions (docs/environments.md#nested-agentsmd): the AGENTS.md of each
 * directory on the way to a file the agent works in, read from the commit the task started
 * from (state.json `trusted_base`, found before the agent ran), never the working tree, which
 * the agent can write. Each is given once per task, bounded as the root's, and all of them
 * together at most NESTED_MAX_BYTES.
 */

/** All nested files a task is given, at most (each at most INSTRUCTIONS_MAX_BYTES); past it a file is refused. */
export const NESTED_MAX_BYTES = 64 * 1024

/** The tools whose `path` is a file (or, for list_dir, a directory) the agent works in. */
const PATH_TOOLS: Record<string, 'file' | 'dir'> = { read_file: 'file', write_file: 'file', edit_file: 'file', list_dir: 'dir' }

/** The workspace's directories on the way to what a tool call worked on, outer first, the root left out (its file is in the system prompt). */
export function directoriesOnTheWay(workspace: string, tool: string, args: Record<string, unknown>): string[] {
  const kind = PATH_TOOLS[tool]
  if (kind === undefined || typeof args.path !== 'string' || args.path === '') return []
  const rel = relative(workspace, resolve(workspace, args.path))
  if (rel === '' || rel.startsWith('..') || isAbsolute(rel)) return []
  const steps = rel.split(sep)
  const dirs = kind === 'file' ? steps.slice(0, -1) : steps
  return dirs.map((_, i) => dirs.slice(0, i + 1).join('/')).filter((d) => !d.split('/').includes('.git'))
}

export interface TrustedCommit {
  commit: string
  ref: string
}

export type NestedRead = { kind: 'given'; file: InstructionFile; text: string; bytes: number } | { kind: 'absent' } | { kind: 'refused'; why: string }

/** `dir`/AGENTS.md at the task's trusted commit, cut at the bound; refused past what the task may still be given. */
export async function readNested(workspace: string, base: TrustedCommit, dir: string, givenSoFar: number): Promise<NestedRead> {
  const path = posix.join(dir, 'AGENTS.md')
  const read = await readTrusted(workspace, { kind: 'commit', ...base }, path, READ_LIMIT)
  if (read.kind !== 'file') return read
  const given = cut(read.text, Math.min(INSTRUCTIONS_MAX_BYTES, NESTED_MAX_BYTES - givenSoFar))
  if (given.trim() === '') return { kind: 'refused', why: `${path} not given: the task's nested instructions reached ${NESTED_MAX_BYTES} bytes` }
  const file: InstructionFile = { path, bytes: Buffer.byteLength(read.text), id: read.id, truncated: given !== read.text }
  return { kind: 'given', file, text: given, bytes: Buffer.byteLength(given) }
}

/** The message that gives nested files, after the tool results that led to them. */
export function nestedMessage(base: TrustedCommit, reads: readonly Extract<NestedRead, { kind: 'given' }>[]): string {
  const record = { source: 'commit' as const, base: describeBase({ kind: 'commit', ...base }) }
  return [
    `[ctxagent] The directories you are working in have project instructions of their own (${reads.map((r) => r.file.path).join(', ')}); each is given once.`,
    ...reads.map((r) => {
      const text = section(record, r.file, r.text, `the files under ${posix.dirname(r.file.path)}/`)
      return r.file.truncated ? text.replace(`at ${INSTRUCTIONS_MAX_BYTES} bytes]`, `at ${r.bytes} bytes]`) : text
    }),
  ].join('\n\n')
}
