import { existsSync, lstatSync, readFileSync } from 'node:fs'
import { isAbsolute, join, resolve } from 'node:path'
import { DEFAULT_CHECK_TIMEOUT_MS, filesUnder, isUrl, MAX_STATEMENT } from './task.js'
import type { EvalTask } from './task.js'
import { readTomlKeys } from './toml-subset.js'

/** The command that judges a Harbor task: its tests/test.sh, found at /tests as Harbor places it. */
export const HARBOR_CHECK = 'bash /tests/test.sh'

const KEYS = ['agent.timeout_sec', 'verifier.timeout_sec', 'ctxagent.repo', 'ctxagent.commit', 'ctxagent.patch']

/**
 * A task in Harbor's layout (docs/eval.md#harbor-tasks): instruction.md (the statement),
 * task.toml (`[agent] timeout_sec`, `[verifier] timeout_sec`, and ctxagent's own
 * `[ctxagent] repo`, `commit`, `patch`, which stand in for Harbor's environment/: no
 * container runs here, the repository's environment file prepares it), tests/ with
 * test.sh (the hidden check, placed at /tests), and optionally solution/ with solve.sh.
 */
export function readHarborTask(dir: string, name: string): EvalTask | string {
  const toml = join(dir, 'task.toml')
  const instruction = join(dir, 'instruction.md')
  if (!lstatSync(toml).isFile()) return 'task.toml is not a regular file'
  if (!existsSync(instruction) || !lstatSync(instruction).isFile()) return 'instruction.md is missing: a Harbor task needs its instruction'
  let keys: Map<string, string | number | boolean>
  try {
    keys = readTomlKeys(readFileSync(toml, 'utf8'), KEYS)
  } catch (err) {
    return (err as Error).message
  }
  const text = (key: string): string | undefined | Error => {
    const v = keys.get(key)
    return v === undefined ? undefined : typeof v === 'string' && v !== '' ? v : new Error(`task.toml: ${key} must be text`)
  }
  const seconds = (key: string): number | null | Error => {
    const v = keys.get(key)
    return v === undefined ? null : typeof v === 'number' && v > 0 ? Math.ceil(v * 1000) : new Error(`task.toml: ${key} must be a positive number of seconds`)
  }
  const repo = text('ctxagent.repo')
  const commit = text('ctxagent.commit')
  const patch = text('ctxagent.patch')
  const agent = seconds('agent.timeout_sec')
  const verifier = seconds('verifier.timeout_sec')
  for (const v of [repo, commit, patch, agent, verifier]) if (v instanceof Error) return v.message
  if (repo === undefined)
    return "task.toml has no [ctxagent] repo: Harbor's environment/ is not built here (no container); name the repository the task starts from"
  const statement = withoutCanary(readFileSync(instruction, 'utf8'))
  if (statement.trim() === '') return 'instruction.md is empty'
  if (statement.length > MAX_STATEMENT) return `instruction.md must be at most ${MAX_STATEMENT} characters`
  const testsDir = join(dir, 'tests')
  let hidden: string[]
  try {
    hidden = existsSync(testsDir) ? filesUnder(testsDir) : []
  } catch (err) {
    return (err as Error).message
  }
  if (!hidden.includes('test.sh')) return 'tests/test.sh is missing: it is the check of a Harbor task'
  const startPatch = patch === undefined ? null : resolve(dir, patch as string)
  if (startPatch !== null && !existsSync(startPatch)) return `task.toml: [ctxagent] patch ${patch as string} does not exist`
  const solve = join(dir, 'solution', 'solve.sh')
  return {
    name,
    dir,
    statement,
    repo: isUrl(repo as string) || isAbsolute(repo as string) ? (repo as string) : resolve(dir, repo as string),
    commit: (commit as string | undefined) ?? null,
    check: HARBOR_CHECK,
    startPatch,
    timeoutMs: agent as number | null,
    checkTimeoutMs: (verifier as number | null) ?? DEFAULT_CHECK_TIMEOUT_MS,
    hidden,
    solution: existsSync(solve) && lstatSync(solve).isFile() ? { kind: 'script', dir: join(dir, 'solution') } : null,
    layout: 'harbor',
  }
}

/** instruction.md without the canary lines Harbor's `tasks init --include-canary-strings` puts first (a comment or # line naming the canary). */
function withoutCanary(text: string): string {
  const lines = text.split('\n')
  while (lines.length > 0 && /canary/i.test(lines[0] ?? '') && /^\s*(<!--|#)/.test(lines[0] ?? '')) lines.shift()
  return lines.join('\n')
}
