import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { CtxError } from '../../errors.js'
import { readJsonl, resolveDataFile, tailPlainSync } from '../format/jsonl.js'
import type { JsonRecord } from '../format/jsonl.js'
import { FILES, LOCATIONS } from '../fs/layout.js'
import type { Layout, Location, TaskRef } from '../fs/layout.js'
import { readMetadata } from './metadata.js'
import type { TaskMetadata } from './metadata.js'
import { readState } from './state.js'
import type { TaskState } from './state.js'
import type { TaskCounts } from './row.js'

/**
 * How many messages, summaries and tool calls a task has. ctxagent keeps them in
 * state.json; files from elsewhere are counted from their last line's id (a tail
 * read), or, when gzipped, by streaming.
 */
export async function countRecords(dir: string, state: TaskState | null): Promise<TaskCounts> {
  return {
    messages: state?.message_count ?? (await lastId(join(dir, FILES.messages), ['seq'])),
    summaries: state?.message_count !== undefined ? state.compression_count : await lastId(join(dir, FILES.summaries), ['summary_id', 'id']),
    tools: state?.message_count !== undefined ? state.tool_call_count : await lastId(join(dir, FILES.tools), ['seq']),
  }
}

async function lastId(path: string, fields: readonly string[]): Promise<number> {
  const file = resolveDataFile(path)
  if (file === null) return 0
  if (!file.endsWith('.gz')) return idOf(tailPlainSync(file, 1).records[0], fields)
  let count = 0
  let last = 0
  for await (const item of readJsonl(path)) {
    if (!item.ok) continue
    count++
    last = idOf(item.record, fields) || last
  }
  return Math.max(last, count)
}

function idOf(record: JsonRecord | undefined, fields: readonly string[]): number {
  if (!record) return 0
  for (const field of fields) {
    const value = record[field]
    if (typeof value === 'number' && Number.isInteger(value)) return value
  }
  return 0
}

export interface ScannedTask {
  ref: TaskRef
  metadata: TaskMetadata
  state: TaskState | null
  counts: TaskCounts
}

export type ScanResult = { ok: true; task: ScannedTask } | { ok: false; ref: TaskRef; error: string }

/** Reads one task directory for indexing; an unreadable one is reported, not thrown. */
export async function scanTask(ref: TaskRef): Promise<ScanResult> {
  try {
    const metadata = readMetadata(ref.dir)
    if (metadata.uuid === '') metadata.uuid = ref.uuid
    const state = readState(ref.dir)
    return { ok: true, task: { ref, metadata, state, counts: await countRecords(ref.dir, state) } }
  } catch (err) {
    if (err instanceof CtxError) return { ok: false, ref, error: err.message }
    return { ok: false, ref, error: `${ref.dir}: ${(err as Error).message}` }
  }
}

/**
 * A task in running/ whose owner holds its lock but has not written metadata.json yet:
 * not a failure to read, its owner indexes it (a creator that died is reaped by watch-locks).
 */
export function beingCreated(ref: TaskRef): boolean {
  return ref.location === 'running' && !existsSync(join(ref.dir, FILES.metadata)) && existsSync(join(ref.dir, FILES.lock))
}

/** Every task directory in the layout (or in some locations), as refs. */
export function listTasks(layout: Layout, locations: readonly Location[] = LOCATIONS): TaskRef[] {
  const refs: TaskRef[] = []
  for (const location of locations) {
    for (const uuid of layout.list(location)) refs.push({ uuid, location, dir: layout.taskDir(location, uuid) })
  }
  return refs
}
