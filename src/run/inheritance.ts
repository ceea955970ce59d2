import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { gunzipSync } from 'node:zlib'
import { readJsonl, resolveDataFile, tailJsonl } from '../storage/format/jsonl.js'
import { FILES, locateTask } from '../storage/fs/layout.js'
import type { Layout } from '../storage/fs/layout.js'
import type { PrHead, TaskKey } from '../storage/task/metadata.js'
import type { Location } from '../storage/fs/layout.js'
import { readMetadata } from '../storage/task/metadata.js'
import { normalizeSummary } from '../storage/format/records.js'
import { readState } from '../storage/task/state.js'
import type { TaskEnv } from '../storage/task/env.js'
import { indexDrift } from '../storage/index/store.js'
import type { TaskKeyColumns } from '../storage/index/task-index.js'
import { estimateTokens } from '../storage/format/tokens.js'
import { quoted } from '../sources/quote.js'
import { byCodeUnits } from '../text.js'

/** What a new task takes over from the latest earlier task with its key (docs/contract.md §5). */
export interface Inheritance {
  uuid: string
  status: string
  completed_at: string | null
  summary: string
  /** Where the summary came from: the final summary, or the last compaction summary when there is none. */
  summary_source: 'final_summary' | 'summaries'
  planning: string[]
}

interface Candidate {
  uuid: string
  location: Location
  status: string
  completed_at: string | null
}

/**
 * The latest finished (completed or failed) task with this key that left a summary,
 * found through tasks.db, or by scanning completed/ when there is no index. A local
 * task's key names its workspace only by folder name (`app` for both clientA/app and
 * clientB/app), so `workspace` (the real path of the new task's workspace) must also be
 * the one the earlier task recorded: findings never cross projects. An older task that
 * recorded no workspace is still readable, but no one's parent.
 */
export async function findInheritance(env: TaskEnv, key: TaskKeyColumns, workspace: string | null = null): Promise<Inheritance | null> {
  if (!key.task_identifier) return null
  // The index is trusted only while it knows every finished task (a listing is cheap; reading every task is not).
  const index = env.index
  let candidates: Candidate[] | null = null
  // An index that cannot be read now (PostgreSQL away) is not trusted either: the directories answer.
  if (index !== null && (await indexDrift(index, env.layout, ['completed']).catch(() => null))?.length === 0)
    candidates = await index.finishedWithKey(key).catch(() => null)
  candidates ??= scanCompleted(env, key)
  for (const candidate of candidates) {
    const dir = env.layout.taskDir(candidate.location, candidate.uuid)
    if (workspace !== null && workspaceOf(dir) !== workspace) continue
    const found = await summaryOf(dir)
    if (found === null) continue
    return { ...candidate, ...found, planning: await planningOf(dir) }
  }
  return null
}

/** Who asks to inherit from the task that opened a pull request: its repository, its user, the pull request. */
export interface OpenerAsk {
  key: Pick<TaskKey, 'task_source' | 'owner' | 'repo'>
  user: string | null
  pr: Pick<PrHead, 'number' | 'url'> | null
  /** context.inheritance.across_users: another user's task may be inherited from. */
  acrossUsers: boolean
}

/**
 * What a task on a pull request takes over when no earlier task has its key: the task
 * that opened the pull request (docs/delivery.md#the-review-loop), by its uuid, once it
 * finished (completed or failed) and left a summary, and only when it is of the same
 * repository, recorded delivering that very pull request (state.json's delivery.pr) and is
 * the same user's (unless context.inheritance.across_users): a marker names a task, it
 * never opens another user's findings. Its key (the issue) thereby leads to the pull
 * request's: the next follow-up inherits from this one by the pull request's key.
 */
export async function inheritanceOf(env: TaskEnv, uuid: string, ask: OpenerAsk): Promise<Inheritance | null> {
  const ref = locateTask(env.layout, uuid)
  if (ref === null || ref.location !== 'completed') return null
  if (ask.pr === null || !recordsDelivery(env.layout, uuid, ask.pr)) return null
  const meta = (() => {
    try {
      return readMetadata(ref.dir)
    } catch {
      return null
    }
  })()
  const state = (() => {
    try {
      return readState(ref.dir)
    } catch {
      return null
    }
  })()
  // The same repository: by its key (an issue's task), or, for a local task that opened it, by the very URL it recorded.
  const key = meta?.task_key
  const sameKey = key !== undefined && key.task_source === ask.key.task_source && key.owner === ask.key.owner && key.repo === ask.key.repo
  const sameUrl = ask.pr.url !== '' && state?.delivery?.pr?.url === ask.pr.url
  if (!sameKey && !sameUrl) return null
  if (!ask.acrossUsers && meta?.user !== ask.user) return null
  if (state?.status !== 'completed' && state?.status !== 'failed') return null
  const found = await summaryOf(ref.dir)
  if (found === null) return null
  return { uuid, status: state.status, completed_at: state.completed_at, ...found, planning: await planningOf(ref.dir) }
}

/**
 * Whether the task `uuid` of this tree recorded delivering this pull request (its
 * state.json's delivery.pr): how a marker in a body not written by the bot's account is
 * believed (anyone can paste a marker).
 */
export function recordsDelivery(layout: Layout, uuid: string, head: Pick<PrHead, 'number' | 'url'>): boolean {
  const task = locateTask(layout, uuid)
  if (task === null) return false
  try {
    const state = JSON.parse(readFileSync(join(task.dir, FILES.state), 'utf8')) as { delivery?: { pr?: { number?: unknown; url?: unknown } | null } }
    const pr = state.delivery?.pr
    return pr != null && pr.number === head.number && (typeof pr.url !== 'string' || head.url === '' || pr.url === head.url)
  } catch {
    return false
  }
}

function workspaceOf(dir: string): string | null {
  try {
    // A delivering task worked on a tree of its own: it was started in the workspace it names.
    const run = readMetadata(dir).run
    return run?.starts_from?.workspace ?? run?.workspace ?? null
  } catch {
    return null
  }
}

function scanCompleted(env: TaskEnv, key: TaskKeyColumns): Candidate[] {
  const out: Candidate[] = []
  for (const uuid of env.layout.list('completed')) {
    const dir = env.layout.taskDir('completed', uuid)
    try {
      const meta = readMetadata(dir)
      if (meta.task_type !== key.task_type || (meta.task_identifier || null) !== key.task_identifier) continue
      if ((meta.repository || null) !== key.repository || meta.user !== key.user) continue
      const state = readState(dir)
      if (state?.status !== 'completed' && state?.status !== 'failed') continue
      out.push({ uuid, location: 'completed', status: state.status, completed_at: state.completed_at })
    } catch {
      // A damaged task is no one's parent: skip it.
    }
  }
  return out.sort((a, b) => byCodeUnits(b.completed_at ?? '', a.completed_at ?? ''))
}

async function summaryOf(dir: string): Promise<Pick<Inheritance, 'summary' | 'summary_source'> | null> {
  const file = resolveDataFile(join(dir, FILES.finalSummary))
  if (file !== null) {
    try {
      const raw = readFileSync(file)
      const text = (file.endsWith('.gz') ? gunzipSync(raw) : raw).toString('utf8').trim()
      if (text !== '') return { summary: text, summary_source: 'final_summary' }
    } catch {
      // Unreadable: fall back to the last compaction summary.
    }
  }
  const last = (await tailJsonl(join(dir, FILES.summaries), 1)).records[0]
  const summary = last ? normalizeSummary(last) : null
  return summary ? { summary: summary.summary, summary_source: 'summaries' } : null
}

async function planningOf(dir: string): Promise<string[]> {
  const plans: string[] = []
  for await (const item of readJsonl(join(dir, FILES.planning))) {
    if (!item.ok) continue
    const { plan_type, plan_content } = item.record
    if (typeof plan_content === 'string') plans.push(`- (${typeof plan_type === 'string' ? plan_type : 'plan'}) ${plan_content}`)
    // Only the newest plans can fit the budget; keep memory bounded on a long history.
    if (plans.length > 200) plans.shift()
  }
  return plans
}

/**
 * The message a new task starts with after its task statement: the earlier task's
 * summary and planning history, cut to `maxTokens`, and an instruction to continue.
 */
export function inheritanceMessage(inheritance: Inheritance, maxTokens: number): string {
  const header = `[Context inherited from an earlier task on the same issue: ${inheritance.uuid} (${inheritance.status}${inheritance.completed_at ? `, finished ${inheritance.completed_at}` : ''})]`
  const closing =
    'Continue from where that task stopped: build on what it did, do not repeat finished work, and check the current state of the workspace before relying on it.'
  let budget = maxTokens - estimateTokens(header) - estimateTokens(closing) - 20
  const summary = quoted(cut(inheritance.summary, Math.max(0, Math.floor(budget * 0.7))))
  budget -= estimateTokens(summary)
  const plans: string[] = []
  // Newest plans first into the budget, shown oldest first.
  for (let i = inheritance.planning.length - 1; i >= 0; i--) {
    const line = inheritance.planning[i] as string
    const cost = estimateTokens(`> ${line}`) + 1
    if (cost > budget) break
    budget -= cost
    plans.unshift(line)
  }
  // Quoted: the summary was written from that task's inputs (issues, comments, files), and is data here too.
  const parts = [header, '', '## Summary of that task', summary]
  if (plans.length > 0) parts.push('', '## Its planning history', quoted(plans.join('\n')))
  parts.push('', closing)
  return parts.join('\n')
}

/** Cuts a text to about `tokens` tokens, at a line break where one is near. */
function cut(text: string, tokens: number): string {
  if (estimateTokens(text) <= tokens) return text
  let end = Math.max(0, tokens * 2)
  // Japanese counts two characters a token, others four: find the longest prefix that fits.
  while (end < text.length && estimateTokens(text.slice(0, end + 256)) <= tokens) end += 256
  const lineBreak = text.lastIndexOf('\n', end)
  const at = lineBreak > end * 0.8 ? lineBreak : end
  return `${text.slice(0, at)}\n[… cut to fit ${tokens} tokens]`
}
