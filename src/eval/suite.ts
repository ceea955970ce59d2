import { existsSync, lstatSync, readdirSync, readFileSync } from 'node:fs'
import { isAbsolute, join, resolve } from 'node:path'
import { parse as parseYaml } from 'yaml'
import * as z from 'zod/mini'
import { parseDuration } from '../duration.js'
import { readHarborTask } from './harbor-task.js'
import { DEFAULT_CHECK_TIMEOUT_MS, filesUnder, isUrl, MAX_STATEMENT } from './task.js'
import type { EvalTask } from './task.js'

export type { EvalTask } from './task.js'

export interface SuiteRead {
  tasks: EvalTask[]
  /** Task directories that could not be read, each with why: reported, the others go on. */
  problems: { name: string; why: string }[]
}

const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/

const text = (what: string) => z.string({ error: `${what} must be text` }).check(z.minLength(1, { error: `${what} must not be empty` }))
const taskFile = z.strictObject(
  {
    statement: text('statement').check(z.maxLength(MAX_STATEMENT, { error: `statement must be at most ${MAX_STATEMENT} characters` })),
    repo: text('repo'),
    commit: z.optional(text('commit')),
    check: text('check'),
    patch: z.optional(text('patch')),
    timeout: z.optional(text('timeout')),
    check_timeout: z.optional(text('check_timeout')),
  },
  { error: 'must be a mapping of statement, repo, commit, check and (optional) patch, timeout, check_timeout' },
)

/** Reads every task of the suite at `dir` (sorted by name). Throws only when the suite itself cannot be read. */
export function readSuite(dir: string): SuiteRead {
  const root = resolve(dir)
  const entries = readdirSync(root, { withFileTypes: true })
    .filter((e) => e.isDirectory() && !e.name.startsWith('.'))
    .map((e) => e.name)
    .sort()
  const tasks: EvalTask[] = []
  const problems: SuiteRead['problems'] = []
  for (const name of entries) {
    const read = readTask(join(root, name), name)
    if (typeof read === 'string') problems.push({ name, why: read })
    else if (read !== null) tasks.push(read)
  }
  return { tasks, problems }
}

/** One task, or why it cannot be used; null: a directory that is no task (neither task.yaml nor Harbor's task.toml). */
export function readTask(dir: string, name: string): EvalTask | string | null {
  const file = join(dir, 'task.yaml')
  const harbor = !existsSync(file) && existsSync(join(dir, 'task.toml'))
  if (!existsSync(file) && !harbor) return null
  if (!NAME.test(name)) return `the task's directory name ${JSON.stringify(name.slice(0, 60))} is not a task name (letters, digits, . _ -)`
  if (harbor) return readHarborTask(dir, name)
  if (!lstatSync(file).isFile()) return 'task.yaml is not a regular file'
  let data: unknown
  try {
    data = parseYaml(readFileSync(file, 'utf8'))
  } catch (err) {
    return `task.yaml is not valid YAML: ${(err as Error).message.split('\n')[0]}`
  }
  const parsed = taskFile.safeParse(data)
  if (!parsed.success) {
    const issue = parsed.error.issues[0]
    const where = issue?.path.map(String).join('.') ?? ''
    if (issue?.code === 'unrecognized_keys') return `task.yaml: ${issue.keys[0]} is not a known key`
    return `task.yaml: ${where === '' ? '' : `${where} `}${issue?.message ?? 'is not a task'}`
  }
  const spec = parsed.data
  let timeoutMs: number | null = null
  let checkTimeoutMs = DEFAULT_CHECK_TIMEOUT_MS
  try {
    if (spec.timeout !== undefined) timeoutMs = parseDuration(spec.timeout, 'timeout')
    if (spec.check_timeout !== undefined) checkTimeoutMs = parseDuration(spec.check_timeout, 'check_timeout')
  } catch (err) {
    return `task.yaml: ${(err as Error).message}`
  }
  const testsDir = join(dir, 'tests')
  let hidden: string[]
  try {
    hidden = existsSync(testsDir) ? filesUnder(testsDir) : []
  } catch (err) {
    return (err as Error).message
  }
  if (hidden.length === 0) return 'tests/ holds no file: a task needs its hidden check files'
  const solution = join(dir, 'solution.patch')
  const startPatch = spec.patch === undefined ? null : resolve(dir, spec.patch)
  if (startPatch !== null && !existsSync(startPatch)) return `task.yaml: patch ${spec.patch} does not exist`
  return {
    name,
    dir,
    statement: spec.statement,
    repo: isUrl(spec.repo) || isAbsolute(spec.repo) ? spec.repo : resolve(dir, spec.repo),
    commit: spec.commit ?? null,
    check: spec.check,
    startPatch,
    timeoutMs,
    checkTimeoutMs,
    hidden,
    solution: existsSync(solution) ? { kind: 'patch', file: solution } : null,
    layout: 'ctxagent',
  }
}
