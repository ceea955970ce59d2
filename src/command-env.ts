import { existsSync, statSync } from 'node:fs'
import { userInfo } from 'node:os'
import { loadCommandConfig } from './config/config-cache.js'
import { secretValues } from './config/secrets.js'
import { installSecrets, maskCredentials } from './storage/format/mask.js'
import type { Config } from './config/schema.js'
import { UsageError } from './errors.js'
import { cutInput, shortPath } from './text.js'
import { createIo } from './io.js'
import type { Io } from './io.js'
import { audit } from './storage/task/audit.js'
import type { AuditEntry } from './storage/task/audit.js'
import { defaultBase, Layout } from './storage/fs/layout.js'
import type { TaskEnv } from './storage/task/env.js'
import { openIndexStore } from './storage/index/open.js'
import type { IndexStore } from './storage/index/store.js'
import { isPostgresUrl } from './config/urls.js'
import { accessError, explainSystemError, isDiskFull, whyIndexUnopenable } from './system-errors.js'
import { pgReason } from './storage/index/pg-pool.js'

export interface GlobalOptions {
  home?: string
  config?: string
  json?: boolean
  color?: boolean
}

/** The one object a command gets: config, paths, output, clock. */
export interface CommandEnv {
  readonly config: Config
  readonly configSource: string | null
  /** One line about the config the operator should see once (a ./config.yaml no longer read), or null. */
  readonly configNotice: string | null
  /** Which setting chose the task tree (docs/contract.md §9 order). */
  readonly baseSource: BaseSource
  readonly layout: Layout
  readonly io: Io
  readonly json: boolean
  readonly env: NodeJS.ProcessEnv
  /** The clock; CTXAGENT_NOW pins it (for golden outputs and tests). */
  now(): Date
  /** The operator, for the audit log. */
  readonly osUser: string
  /** Keeps the config file's validation for the next command (config-cache.ts); withEnv calls it once this command has ended well. */
  readonly keepConfig: () => void
}

export type BaseSource = '--home' | 'CTXAGENT_HOME' | 'context.base_dir' | 'default'

export async function createCommandEnv(globals: GlobalOptions, env: NodeJS.ProcessEnv = process.env, cwd = process.cwd()): Promise<CommandEnv> {
  const { config, source, notice, remember } = await loadCommandConfig({ flag: globals.config, env, cwd })
  // From here on every mask call knows the secret values in force, and nothing printed carries them.
  installSecrets(secretValues(config, env))
  guardOutput(process.stdout)
  guardOutput(process.stderr)
  const fromEnv = nonEmpty(env.CTXAGENT_HOME)
  const [base, baseSource]: [string, BaseSource] =
    globals.home !== undefined
      ? [globals.home, '--home']
      : fromEnv !== undefined
        ? [fromEnv, 'CTXAGENT_HOME']
        : config.context.base_dir !== null
          ? [config.context.base_dir, 'context.base_dir']
          : [defaultBase(env), 'default']
  checkBase(base, baseSource)
  const fixed = pinnedNow(env)
  const io = createIo({ env, ...(globals.color === false ? { color: false } : {}) })
  return {
    config,
    configSource: source,
    configNotice: notice ?? null,
    baseSource,
    layout: new Layout(base),
    io,
    json: globals.json === true,
    env,
    now: () => (fixed === undefined ? new Date() : new Date(fixed)),
    osUser: safeUser(env),
    keepConfig: remember ?? (() => {}),
  }
}

const GUARDED = Symbol('ctxagent.masked')

/**
 * Every write to the stream passes through maskCredentials (the installed secret values
 * and the key patterns): the one step before stdout and stderr, whoever writes (the
 * outcome, --json, logs, errors, warnings), instead of a mask call at each printer.
 */
function guardOutput(stream: NodeJS.WriteStream): void {
  const marked = stream as NodeJS.WriteStream & { [GUARDED]?: true }
  if (marked[GUARDED]) return
  marked[GUARDED] = true
  const write = stream.write.bind(stream) as (chunk: unknown, ...rest: unknown[]) => boolean
  stream.write = ((chunk: unknown, ...rest: unknown[]) => {
    if (typeof chunk === 'string') return write(maskCredentials(chunk), ...rest)
    if (chunk instanceof Uint8Array) {
      const text = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength).toString('utf8')
      const masked = maskCredentials(text)
      if (masked !== text) return write(masked, ...rest.filter((r) => typeof r === 'function'))
    }
    return write(chunk, ...rest)
  }) as NodeJS.WriteStream['write']
}

/** CTXAGENT_NOW, when set: an ISO 8601 date-time, checked as strictly as --from and --to. */
function pinnedNow(env: NodeJS.ProcessEnv): number | undefined {
  const pinned = nonEmpty(env.CTXAGENT_NOW)
  if (pinned === undefined) return undefined
  const date = parseIsoDate(pinned, { dayOnly: false })
  if (date === null) {
    throw new UsageError(`CTXAGENT_NOW '${cutInput(pinned, 40)}' is not an ISO 8601 date-time`, 'give one like 2024-01-31T12:00:00Z, or unset CTXAGENT_NOW')
  }
  return date.getTime()
}

const DAY_ONLY = /^(\d{4})-(\d{2})-(\d{2})$/
const ISO_TIME = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.\d{1,3})?)?(?:Z|[+-](\d{2}):(\d{2}))$/

/**
 * A day (2024-01-31, its start in UTC; only with `dayOnly`) or an ISO 8601 date-time
 * with a zone (2024-01-31T12:00:00Z, …+02:00), or null. Every field is checked, so days
 * that do not exist (2024-02-30) are refused instead of rolled over into the next month.
 */
export function parseIsoDate(value: string, options: { dayOnly: boolean }): Date | null {
  const day = options.dayOnly ? DAY_ONLY.exec(value) : null
  const time = day ? null : ISO_TIME.exec(value)
  const m = day ?? time
  if (m === null) return null
  const [year, month, dom] = [Number(m[1]), Number(m[2]), Number(m[3])]
  if (month < 1 || month > 12 || dom < 1 || dom > new Date(Date.UTC(year, month, 0)).getUTCDate()) return null
  if (time) {
    const [hour, minute, second, offH, offM] = [time[4], time[5], time[6], time[7], time[8]].map((x) => Number(x ?? 0)) as [
      number,
      number,
      number,
      number,
      number,
    ]
    if (hour > 23 || minute > 59 || second > 59 || offH > 23 || offM > 59) return null
  }
  const date = new Date(day ? `${value}T00:00:00.000Z` : value)
  return Number.isNaN(date.getTime()) ? null : date
}

/**
 * The task tree must be a directory, or not exist yet (it is created when first
 * written): never an empty path, a file, a path through a file, or one the file
 * system cannot hold. Each of those is a usage error, whichever setting named it.
 */
function checkBase(base: string, source: BaseSource): void {
  const hint = 'give the directory of the task tree'
  if (base.trim() === '') throw new UsageError(`${source} is empty`, hint)
  const named = source === 'default' ? `the default task tree ${shortPath(base)}` : `${source} ${shortPath(base)}`
  let isDir: boolean
  try {
    isDir = statSync(base).isDirectory()
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    // Not there yet: commands that write create it, commands that read say there is none.
    if (code === 'ENOENT') return
    // Not ours to judge here: the command says "permission denied: …" in its own words.
    if (code === 'EACCES' || code === 'EPERM') return
    if (code === 'ENOTDIR') throw new UsageError(`${named} is not a directory: a part of its path is a file`, hint)
    if (code === 'ENAMETOOLONG') throw new UsageError(`${named} is too long for the file system (${base.length} characters)`, 'give a shorter path')
    if (code === 'ELOOP') throw new UsageError(`${named} has too many levels of symbolic links`, hint)
    if (code === 'ERR_INVALID_ARG_VALUE') throw new UsageError(`${named} contains a NUL byte`, hint)
    throw new UsageError(`${named} cannot be used (${code ?? (err as Error).message})`, hint)
  }
  if (!isDir) throw new UsageError(`${named} is not a directory`, hint)
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
export async function withTaskEnv<T>(
  ctx: CommandEnv,
  body: (env: TaskEnv) => Promise<T>,
  options: { createIndex?: boolean; lazyIndex?: boolean } = {},
): Promise<T> {
  let index: IndexStore | null = null
  let unopened: string | null = null
  const databaseUrl = fleetDatabaseUrl(ctx)
  try {
    index = await openIndex(ctx, options.createIndex !== false && existsSync(ctx.layout.base), options.lazyIndex === true)
  } catch (err) {
    const why = databaseUrl === null ? whyIndexUnopenable(err, ctx.layout.base) : pgReason(err)
    unopened = `${databaseUrl === null ? 'tasks.db' : 'the PostgreSQL index'} cannot be opened (${why}); continuing without it (ctxagent reindex rebuilds it)`
    // On a full disk, or a tree this user may not write, the command's own error will say so in
    // one line; the warning waits for success.
    if (!isDiskFull(err, ctx.layout.base) && accessError(ctx.layout.base) === null) {
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
    await index?.close()
  }
}

/**
 * The fleet's database (docs/contract.md §14.1): CTXAGENT_DATABASE_URL, else `fleet.database_url`,
 * else null (one host, tasks.db). A secret: messages never show it.
 */
export function fleetDatabaseUrl(ctx: Pick<CommandEnv, 'env' | 'config'>): string | null {
  const fromEnv = nonEmpty(ctx.env.CTXAGENT_DATABASE_URL)
  if (fromEnv !== undefined && !isPostgresUrl(fromEnv)) {
    throw new UsageError('CTXAGENT_DATABASE_URL is not a PostgreSQL URL', 'give one like postgres://user:password@db.example.com:5432/ctxagent, or unset it')
  }
  return fromEnv ?? ctx.config.fleet.database_url
}

/**
 * The index, chosen in one place: PostgreSQL when a database URL is set, else tasks.db
 * (made only when `create`; else null when there is none).
 */
export function openIndex(ctx: CommandEnv, create: boolean, lazy = false): Promise<IndexStore | null> {
  return openIndexStore({ databaseUrl: fleetDatabaseUrl(ctx), path: ctx.layout.db, create, lazy, warn: (m) => ctx.io.warn(m) })
}

export function auditTask(ctx: CommandEnv, command: string, uuid: string | null, extra: Pick<AuditEntry, 'event' | 'detail'> = {}): void {
  try {
    audit(ctx.layout, { ts: ctx.now().toISOString(), os_user: ctx.osUser, command, uuid, ...extra })
  } catch (err) {
    ctx.io.warn(`audit.jsonl not written: ${(explainSystemError(err, ctx.layout.base) ?? (err as Error)).message}`)
  }
}
