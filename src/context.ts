import { accessSync, constants, existsSync, statSync } from 'node:fs'
import { userInfo } from 'node:os'
import { DEFAULT_BASE_DIR, loadConfig } from './config.js'
import type { Config } from './config.js'
import { UsageError } from './errors.js'
import { createIo } from './io.js'
import type { Io } from './io.js'
import { audit } from './storage/audit.js'
import { Layout } from './storage/layout.js'
import type { TaskEnv } from './storage/task-env.js'
import { TaskIndex } from './storage/task-index.js'
import { explainSystemError, isDiskFull, whyIndexUnopenable } from './system-errors.js'

export interface GlobalOptions {
  home?: string
  config?: string
  json?: boolean
  color?: boolean
}

/** The one object a command gets: config, paths, output, clock. */
export interface Context {
  readonly config: Config
  readonly configSource: string | null
  /** Which setting chose the task tree (SPEC §9 order). */
  readonly baseSource: BaseSource
  readonly layout: Layout
  readonly io: Io
  readonly json: boolean
  readonly env: NodeJS.ProcessEnv
  /** The clock; CTXAGENT_NOW pins it (for golden outputs and tests). */
  now(): Date
  /** The operator, for the audit log. */
  readonly osUser: string
}

export type BaseSource = '--home' | 'CTXAGENT_HOME' | 'context.base_dir' | 'default'

export function createContext(globals: GlobalOptions, env: NodeJS.ProcessEnv = process.env, cwd = process.cwd()): Context {
  const { config, source } = loadConfig({ flag: globals.config, env, cwd })
  const fromEnv = nonEmpty(env.CTXAGENT_HOME)
  const [base, baseSource]: [string, BaseSource] =
    globals.home !== undefined ? [globals.home, '--home']
    : fromEnv !== undefined ? [fromEnv, 'CTXAGENT_HOME']
    : [config.context.base_dir, config.context.base_dir === DEFAULT_BASE_DIR ? 'default' : 'context.base_dir']
  checkBase(base, baseSource)
  const io = createIo({ env, ...(globals.color === false ? { color: false } : {}) })
  const pinned = nonEmpty(env.CTXAGENT_NOW)
  const fixed = pinned === undefined ? undefined : new Date(pinned)
  return {
    config,
    configSource: source,
    baseSource,
    layout: new Layout(base),
    io,
    json: globals.json === true,
    env,
    now: () => (fixed && !Number.isNaN(fixed.getTime()) ? new Date(fixed) : new Date()),
    osUser: safeUser(env),
  }
}

/** The task tree must be a directory, or not exist yet: never an empty path or a file. */
function checkBase(base: string, source: BaseSource): void {
  if (base.trim() === '') throw new UsageError(`${source} is empty`, 'give the directory of the task tree')
  let isDir: boolean
  try {
    isDir = statSync(base).isDirectory()
  } catch {
    return
  }
  if (!isDir) throw new UsageError(`${source} ${base.slice(0, 200)} is not a directory`, 'give the directory of the task tree')
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value === '' ? undefined : value
}

function safeUser(env: NodeJS.ProcessEnv): string {
  try {
    return userInfo().username
  } catch {
    return env.USER ?? env.LOGNAME ?? 'unknown'
  }
}

/**
 * The lifecycle's view of a context, with tasks.db opened (and created) for the
 * duration of `body`. An index that cannot be opened is a warning: the directories
 * stay the truth and every command works without it.
 */
export async function withTaskEnv<T>(ctx: Context, body: (env: TaskEnv) => Promise<T>, options: { createIndex?: boolean } = {}): Promise<T> {
  let index: TaskIndex | null = null
  let unopened: string | null = null
  try {
    index = options.createIndex === false ? TaskIndex.openExisting(ctx.layout.db) : openIndexCreating(ctx)
  } catch (err) {
    const why = whyIndexUnopenable(err, ctx.layout.base)
    unopened = `tasks.db cannot be opened (${why}); continuing without it (ctxagent reindex rebuilds it)`
    // On a full disk, or a tree this user may not write, the command's own error will say so in
    // one line; the warning waits for success.
    if (!isDiskFull(err, ctx.layout.base) && writable(ctx.layout.base)) {
      ctx.io.warn(unopened)
      unopened = null
    }
  }
  const env: TaskEnv = { layout: ctx.layout, config: ctx.config, index, now: () => ctx.now(), warn: (m) => ctx.io.warn(m) }
  try {
    const result = await body(env)
    if (unopened !== null) ctx.io.warn(unopened)
    return result
  } finally {
    index?.close()
  }
}

function writable(dir: string): boolean {
  try {
    accessSync(dir, constants.R_OK | constants.W_OK | constants.X_OK)
    return true
  } catch {
    return false
  }
}

function openIndexCreating(ctx: Context): TaskIndex | null {
  if (!existsSync(ctx.layout.base)) return null
  return TaskIndex.open(ctx.layout.db)
}

export function auditTask(ctx: Context, command: string, uuid: string | null): void {
  try {
    audit(ctx.layout, { ts: ctx.now().toISOString(), os_user: ctx.osUser, command, uuid })
  } catch (err) {
    ctx.io.warn(`audit.jsonl not written: ${(explainSystemError(err, ctx.layout.base) ?? (err as Error)).message}`)
  }
}
