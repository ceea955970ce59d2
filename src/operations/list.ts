import { join } from 'node:path'
import type { Layout } from '../storage/fs/layout.js'
import { FILES } from '../storage/fs/layout.js'
import { visitHead } from '../storage/format/jsonl.js'
import { beingCreated, listTasks, scanTask } from '../storage/task/scan.js'
import { diedState } from '../storage/task/state.js'
import type { Delivery } from '../storage/task/state.js'
import type { StatsFilter } from './stats.js'
import { deliveryOf } from '../storage/task/delivery.js'
import { byCodeUnits } from '../text.js'

/** One row of `ctxagent list`: what an operator looks for to pick a task. */
export interface ListedTask {
  uuid: string
  status: string
  location: string
  created_at: string
  user: string | null
  model: string | null
  provider: string | null
  workspace: string | null
  turns: number
  tokens: number
  /** The first line of the task statement (the first user message). */
  task: string
  final_answer: string | null
  /** The change's delivery (docs/delivery.md), when one was asked for and has ended. */
  delivery: Delivery | null
  /** Its agent died (reaped): paused or failed, `run --resume` continues it (docs/running.md#recovery-on-one-host). */
  died: boolean
}

export interface ListResult {
  tasks: ListedTask[]
  /** Matching tasks beyond the limit. */
  more: number
  unreadable: { uuid: string; error: string }[]
}

export interface ListOptions extends StatsFilter {
  /** Case-insensitive text to find in the task statement or the final answer. */
  search?: string | undefined
  /** null: every match. */
  limit: number | null
}

/**
 * The tasks of the tree, newest first, filtered as `stats` filters (user, status,
 * created_at range) and by text. Read from the directories (metadata, state and the
 * first lines of messages.jsonl or its .gz), so it works without tasks.db; one
 * unreadable task is reported, never stops the listing.
 */
export async function listTaskRows(layout: Layout, options: ListOptions): Promise<ListResult> {
  const rows: ListedTask[] = []
  const unreadable: ListResult['unreadable'] = []
  const needle = options.search?.toLowerCase()
  for (const ref of listTasks(layout)) {
    const scanned = await scanTask(ref)
    if (!scanned.ok) {
      if (!beingCreated(ref)) unreadable.push({ uuid: ref.uuid, error: scanned.error })
      continue
    }
    const { metadata: m, state: s } = scanned.task
    const status = s?.status ?? 'unknown'
    const created = Date.parse(m.created_at)
    if (options.user !== undefined && m.user !== options.user) continue
    if (options.status !== undefined && status !== options.status) continue
    if (options.from !== undefined && !(created >= options.from.getTime())) continue
    if (options.to !== undefined && !(created < options.to.getTime())) continue
    const statement = await taskStatement(ref.dir)
    const answer = s?.final_answer ?? null
    if (needle !== undefined && !`${statement}\n${answer ?? ''}`.toLowerCase().includes(needle)) continue
    rows.push({
      uuid: ref.uuid,
      status,
      location: ref.location,
      created_at: m.created_at,
      user: m.user ?? null,
      model: m.config?.model || null,
      provider: m.config?.llm_provider || null,
      workspace: m.run?.workspace ?? null,
      turns: s?.turns ?? s?.llm_call_count ?? 0,
      tokens: s?.total_tokens_used ?? 0,
      task: firstLine(statement),
      final_answer: answer,
      delivery: deliveryOf(s),
      died: diedState(s ?? null),
    })
  }
  rows.sort((a, b) => byCodeUnits(b.created_at, a.created_at) || byCodeUnits(b.uuid, a.uuid))
  const shown = options.limit === null ? rows : rows.slice(0, options.limit)
  return { tasks: shown, more: rows.length - shown.length, unreadable }
}

/** Records looked at for the statement: it comes within the first few, and a log without one is not read to its end. */
const STATEMENT_WITHIN = 50

/** The first visible user message: the task as it was given (a chat session has none at first). */
export async function taskStatement(dir: string): Promise<string> {
  let statement = ''
  let seen = 0
  await visitHead(join(dir, FILES.messages), (r) => {
    if (r.role !== 'user' || r.visible === false || typeof r.content !== 'string') return ++seen >= STATEMENT_WITHIN
    statement = r.content
    return true
  })
  return statement
}

function firstLine(text: string): string {
  return text.trim().split('\n')[0]?.trim() ?? ''
}
