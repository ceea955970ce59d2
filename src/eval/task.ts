import { readdirSync } from 'node:fs'
import { join } from 'node:path'

// The task model every layout is read into (docs/eval.md#a-suite), and what the readers share.

/**
 * A suite of eval tasks (docs/eval.md#a-suite): a directory whose subdirectories each hold
 * `task.yaml`, the hidden `tests/` and, optionally, a reference `solution.patch`. The
 * statement is data for the agent; the tests and the solution never reach its workspace
 * before it has finished (docs/contract.md §18).
 */
export interface EvalTask {
  /** The task's directory name: its id in reports and in the tree. */
  name: string
  dir: string
  statement: string
  /** A git URL, or an absolute path (a relative one in task.yaml is resolved against the task's directory). */
  repo: string
  /** The commit the agent starts from; null: the repository's HEAD (a directory that is no repository: its files). */
  commit: string | null
  check: string
  /** A patch applied over the commit before the agent starts (task.yaml `patch`: many tasks on one repository, a bug put in), or null. */
  startPatch: string | null
  /** The agent's working time, and the check's. */
  timeoutMs: number | null
  checkTimeoutMs: number
  /** The hidden files (tests/), relative paths; put in (into the workspace, or at /tests for Harbor's layout) only after the agent has finished. */
  hidden: string[]
  /** A reference solution: a patch (solution.patch), or Harbor's solution/ directory whose solve.sh makes it; null: none. */
  solution: { kind: 'patch'; file: string } | { kind: 'script'; dir: string } | null
  /** task.yaml's layout, or Harbor's (instruction.md, task.toml, tests/test.sh, solution/solve.sh: docs/eval.md#harbor-tasks). */
  layout: 'ctxagent' | 'harbor'
}

export const MAX_STATEMENT = 64 * 1024
export const DEFAULT_CHECK_TIMEOUT_MS = 5 * 60_000

/** Regular files below `dir`, as paths relative to it; a link is refused (it would copy what it points at). */
export function filesUnder(dir: string, prefix = ''): string[] {
  return readdirSync(join(dir, prefix), { withFileTypes: true }).flatMap((e) => {
    const rel = prefix === '' ? e.name : `${prefix}/${e.name}`
    if (e.isDirectory()) return filesUnder(dir, rel)
    if (e.isFile()) return [rel]
    throw new Error(`tests/${rel} is not a regular file or directory`)
  })
}

/** A git URL (scheme://… or user@host:path), not a path. */
export function isUrl(repo: string): boolean {
  return /^[a-z][a-z0-9+.-]*:\/\//i.test(repo) || /^[^/]+@[^/]+:/.test(repo)
}
