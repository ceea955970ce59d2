import { lstatSync, readdirSync, readFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { isErrno, NotFoundError, UsageError } from '../../errors.js'
import { cutInput, sampleOf } from '../../text.js'
import { xdgDirectory } from '../../xdg.js'

export const LOCATIONS = ['running', 'paused', 'completed'] as const
export type Location = (typeof LOCATIONS)[number]

export const FILES = {
  metadata: 'metadata.json',
  state: 'state.json',
  messages: 'messages.jsonl',
  current: 'current.jsonl',
  summaries: 'summaries.jsonl',
  tools: 'tools.jsonl',
  planning: 'planning.jsonl',
  inbox: 'inbox.jsonl',
  finalSummary: 'final_summary.txt',
  lock: '.lock',
  stateLock: '.state.lock',
} as const

/** A task's directory of blobs: long tool outputs, each stored once as `blobs/<sha256>` (docs/contract.md §5, src/storage/blob/). */
export const BLOB_DIR = 'blobs'

/** The files of a task that hold its data (not its locks): always regular files, never links. */
export const TASK_DATA_FILES: readonly string[] = [
  FILES.metadata,
  FILES.state,
  FILES.messages,
  FILES.current,
  FILES.summaries,
  FILES.tools,
  FILES.planning,
  FILES.inbox,
  FILES.finalSummary,
]

/**
 * The task tree when neither --home, CTXAGENT_HOME nor context.base_dir names one: per
 * user, in the XDG state directory (docs/contract.md §1), never under the current directory, where
 * the agent's own workspace would hold it. A relative XDG_STATE_HOME is ignored, as the
 * XDG spec says.
 */
export function defaultBase(env: NodeJS.ProcessEnv): string {
  return join(xdgDirectory(env, 'XDG_STATE_HOME'), 'ctxagent')
}

/** The paths of one base directory (docs/contract.md §1). */
export class Layout {
  readonly base: string

  constructor(base: string) {
    this.base = resolve(base)
  }

  dir(location: Location): string {
    return join(this.base, location)
  }

  taskDir(location: Location, uuid: string): string {
    return join(this.base, location, uuid)
  }

  /** Whether the base directory exists at all (reading commands must not create it). */
  exists(): boolean {
    return existsDir(this.base)
  }

  get db(): string {
    return join(this.base, 'tasks.db')
  }

  get audit(): string {
    return join(this.base, 'audit.jsonl')
  }

  /**
   * Entries of a location named like a task that are not task directories (a regular
   * file, a link, a FIFO): never treated as tasks, but reported by the commands that
   * walk the tree, with what they are.
   */
  strays(location: Location): { name: string; kind: string }[] {
    try {
      return readdirSync(this.dir(location), { withFileTypes: true })
        .filter((e) => !e.isDirectory() && isUuid(e.name))
        .map((e) => ({ name: e.name, kind: e.isSymbolicLink() ? 'a symbolic link' : e.isFile() ? 'a regular file' : 'not a directory' }))
    } catch (err) {
      if (isErrno(err, 'ENOENT')) return []
      throw err
    }
  }

  /** Task uuids in one location; a missing location is empty. */
  list(location: Location): string[] {
    try {
      // Directories only: a stray file (or a link) named like a uuid is not a task.
      return readdirSync(this.dir(location), { withFileTypes: true })
        .filter((e) => e.isDirectory() && isUuid(e.name))
        .map((e) => e.name)
    } catch (err) {
      if (isErrno(err, 'ENOENT')) return []
      throw err
    }
  }
}

export interface TaskRef {
  uuid: string
  location: Location
  dir: string
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/
const DASHES = new Set([8, 13, 18, 23])
const MIN_PREFIX_HEX = 8

export function isUuid(name: string): boolean {
  return UUID.test(name)
}

/**
 * Checks a task id given on the command line before anything touches the disk:
 * a full UUID, or a prefix of one with at least 8 hex digits. Returns it lower-cased.
 */
export function parseTaskId(input: string): { id: string; full: boolean } {
  const id = input.trim().toLowerCase()
  const shown = cutInput(input, 40)
  const hint = 'give the full task uuid, or a unique prefix of at least 8 hex characters'
  if (id.length === 0) throw new UsageError('no task id given', hint)
  if (id.length > 36) throw new UsageError(`'${shown}' is not a task id`, hint)
  let hex = 0
  for (let i = 0; i < id.length; i++) {
    const c = id[i] as string
    const ok = DASHES.has(i) ? c === '-' : /[0-9a-f]/.test(c)
    if (!ok) throw new UsageError(`'${shown}' is not a task id`, hint)
    if (!DASHES.has(i)) hex++
  }
  if (hex < MIN_PREFIX_HEX) throw new UsageError(`task id prefix '${input}' is too short`, hint)
  return { id, full: id.length === 36 }
}

/** The word accepted wherever a uuid is: the newest task of the tree (as `claude --continue`, `codex resume --last`). */
export const LAST = 'last'

/**
 * Where the task with this full uuid is now, or null when it is in none of running/, paused/
 * and completed/. The locations are looked at one after another, so a task moved between two
 * looks (a single rename: paused/ to running/ by a resume) is in neither: a second look finds it.
 */
export function locateTask(layout: Layout, uuid: string): TaskRef | null {
  const look = (): TaskRef | null => {
    for (const location of LOCATIONS) {
      const dir = layout.taskDir(location, uuid)
      if (existsDir(dir)) return { uuid, location, dir }
    }
    return null
  }
  return look() ?? look()
}

/** Finds a task by full uuid or unique prefix in running/, paused/ and completed/, or the newest one for `last`. */
export function resolveTask(layout: Layout, input: string): TaskRef {
  if (input === LAST) return newestTask(layout)
  const { id, full } = parseTaskId(input)
  const find = (): TaskRef[] => {
    const found: TaskRef[] = []
    for (const location of LOCATIONS) {
      const names = full ? (existsDir(layout.taskDir(location, id)) ? [id] : []) : layout.list(location).filter((n) => n.startsWith(id))
      for (const uuid of names) found.push({ uuid, location, dir: layout.taskDir(location, uuid) })
    }
    return found
  }
  // The locations are looked at one after another: a task moved between two looks (paused/ to
  // running/ by a resume) is in neither; a second look finds it.
  let matches = find()
  if (matches.length === 0) matches = find()
  const distinct = new Set(matches.map((m) => m.uuid))
  if (distinct.size === 0) {
    throw new NotFoundError(`no task ${input} in ${layout.base}`, 'check the uuid, or --home / CTXAGENT_HOME')
  }
  if (distinct.size > 1) {
    const some = [...distinct].slice(0, 3).join(', ')
    throw new UsageError(
      `task id prefix '${input}' matches ${distinct.size} tasks (${some}${distinct.size > 3 ? ', …' : ''})`,
      'give more characters of the uuid',
    )
  }
  // A uuid in two locations can only come from copying by hand; the live one wins.
  return matches[0] as TaskRef
}

/**
 * The task created last (metadata.json's created_at; the directory's time where that
 * cannot be read), wherever it is now.
 */
function newestTask(layout: Layout): TaskRef {
  let best: { ref: TaskRef; at: number } | null = null
  for (const location of LOCATIONS) {
    for (const uuid of layout.list(location)) {
      const dir = layout.taskDir(location, uuid)
      const at = createdAt(dir)
      if (best === null || at > best.at || (at === best.at && uuid > best.ref.uuid)) best = { ref: { uuid, location, dir }, at }
    }
  }
  if (best === null) throw new NotFoundError(`there is no task in ${layout.base}`, 'check --home, CTXAGENT_HOME or context.base_dir')
  return best.ref
}

function createdAt(dir: string): number {
  try {
    const meta = JSON.parse(readFileSync(join(dir, 'metadata.json'), 'utf8')) as { created_at?: unknown }
    const at = typeof meta.created_at === 'string' ? Date.parse(meta.created_at) : Number.NaN
    if (!Number.isNaN(at)) return at
  } catch {
    // An unreadable or missing metadata.json: the directory's time stands in.
  }
  try {
    return lstatSync(dir).mtimeMs
  } catch {
    return 0
  }
}

/** Is `path` a directory? Absent is false; a directory we may not look into is an error, not "no such task". */
function existsDir(path: string): boolean {
  try {
    return lstatSync(path).isDirectory()
  } catch (err) {
    if (isErrno(err, 'ENOENT') || isErrno(err, 'ENOTDIR')) return false
    throw err
  }
}

/** One warning line for stray entries of the tree (Layout.strays), or null when there are none. */
export function straysWarning(layout: Layout, locations: readonly Location[] = LOCATIONS): string | null {
  const found = locations.flatMap((location) => layout.strays(location).map((s) => `${location}/${s.name} (${s.kind})`))
  if (found.length === 0) return null
  return `${found.length} entr${found.length === 1 ? 'y' : 'ies'} named like a task but not a task directory, left alone: ${sampleOf(found, 3)} (move them out of the tree)`
}

/** The blob files of a task (`blobs/<name>`, regular files only), for cleanup, reindex and export. */
export function blobFiles(taskDir: string): string[] {
  let names: string[]
  try {
    // Not through a link: cleanup must not gzip files outside the task directory.
    if (!lstatSync(join(taskDir, BLOB_DIR)).isDirectory()) return []
    names = readdirSync(join(taskDir, BLOB_DIR))
  } catch (err) {
    if (isErrno(err, 'ENOENT') || isErrno(err, 'ENOTDIR')) return []
    throw err
  }
  return names.filter((n) => /^[0-9a-f]{64}(\.gz)?$/.test(n) && lstatSync(join(taskDir, BLOB_DIR, n)).isFile()).map((n) => `${BLOB_DIR}/${n}`)
}
