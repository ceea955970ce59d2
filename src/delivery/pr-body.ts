import { join } from 'node:path'
import type { Config } from '../config/schema.js'
import { costOf, splitOf } from '../operations/tokens.js'
import { stripMarkers, withMarker } from '../sources/marker.js'
import { readJsonl } from '../storage/format/jsonl.js'
import { maskText } from '../storage/format/mask.js'
import { FILES } from '../storage/fs/layout.js'
import type { TaskMetadata } from '../storage/task/metadata.js'
import type { TaskState } from '../storage/task/state.js'
import type { Staged } from './stage.js'

// The pull request's body (docs/delivery.md#the-pull-request): the answer first, then what a reviewer needs, short.

/** One changed file: lines added and removed (null for a binary file). */
export interface FileChange {
  path: string
  added: number | null
  removed: number | null
}

/** The last test-like command the agent ran (run_command) and how it ended, from its tools.jsonl. */
export interface CheckRun {
  command: string
  /** The result's first line: `exit code N`, `killed by SIG…`, `timed out after …`. */
  ending: string
}

/** What the task itself says about its work, read before delivery (its state, its tools.jsonl). */
export interface TaskFacts {
  turns: number
  duration_ms: number | null
  cost_usd: number | null
  check: CheckRun | null
  /** The task on the page (serve.public_url); null when no URL is configured. */
  url: string | null
}

export interface BodyInput {
  answer: string
  /** The issue the pull request closes (its number), or null. */
  closes: string | null
  uuid: string
  changes: FileChange[]
  facts: TaskFacts | null
}

/** Past this the answer is cut: a forge refuses a body over 65,536 characters. */
const ANSWER_MAX = 50_000
const FILES_SHOWN = 20

/**
 * The body, masked: the answer, `Closes #N`, a short "for the reviewer" part (files and
 * lines, the last check and how it ended, turns, time, cost, the page's link), the task's
 * uuid, and the marker, alone on the last line. No marker of anyone's survives elsewhere
 * (docs/delivery.md#the-review-loop): the answer may echo one from an issue.
 */
export function prBody(input: BodyInput): string {
  const answer = bounded(input.answer.trim(), ANSWER_MAX)
  const parts = [answer, ...(input.closes !== null ? [`Closes #${input.closes}`] : []), reviewerPart(input.changes, input.facts)]
  parts.push(`Made by ctxagent task \`${input.uuid}\`.`)
  return maskText(withMarker(stripMarkers(parts.join('\n\n')), input.uuid))
}

function reviewerPart(changes: FileChange[], facts: TaskFacts | null): string {
  const added = changes.reduce((n, f) => n + (f.added ?? 0), 0)
  const removed = changes.reduce((n, f) => n + (f.removed ?? 0), 0)
  const lines = ['---', `**Changed:** ${changes.length} file${changes.length === 1 ? '' : 's'}, +${added} −${removed}`]
  for (const f of changes.slice(0, FILES_SHOWN)) lines.push(`- ${code(f.path)} ${f.added === null ? '(binary)' : `+${f.added} −${f.removed ?? 0}`}`)
  if (changes.length > FILES_SHOWN) lines.push(`- … and ${changes.length - FILES_SHOWN} more`)
  if (facts !== null) {
    lines.push('')
    lines.push(facts.check === null ? '**Checked:** no test-like command was run' : `**Checked:** ${code(facts.check.command)} → ${facts.check.ending}`)
    const spent = [`${facts.turns} turn${facts.turns === 1 ? '' : 's'}`]
    if (facts.duration_ms !== null) spent.push(span(facts.duration_ms))
    if (facts.cost_usd !== null) spent.push(`$${facts.cost_usd.toFixed(2)}`)
    lines.push(`**Work:** ${spent.join(', ')}${facts.url !== null ? ` · [the task](${facts.url})` : ''}`)
  }
  return lines.join('\n')
}

/** Files and lines the change adds and removes over its base (`git diff-tree --numstat`, no program of the workspace's run). */
export async function fileChanges(staged: Staged): Promise<FileChange[]> {
  const raw = await staged.run(['diff-tree', '-r', '-z', '--no-renames', '--numstat', staged.baseTree, staged.tree])
  const out: FileChange[] = []
  // -z: `added\tremoved\tpath\0` per file; a binary file's counts are `-`.
  for (const entry of raw.split('\0')) {
    const m = /^(\d+|-)\t(\d+|-)\t([\s\S]+)$/.exec(entry.replace(/^\n/, ''))
    if (m === null) continue
    const count = (v: string | undefined) => (v === undefined || v === '-' ? null : Number(v))
    out.push({ path: m[3] as string, added: count(m[1]), removed: count(m[2]) })
  }
  return out
}

/** Commands that check work: tests, builds, linters, type checks. */
const CHECKING =
  /\b(test|tests|pytest|jest|vitest|mocha|rspec|tox|nox|unittest|check|lint|eslint|ruff|flake8|mypy|tsc|typecheck|build|make|cargo|gradle|mvn|ctest|phpunit)\b/i

/** The task's own figures and its last check, for the body (docs/delivery.md#the-pull-request). */
export async function taskFacts(dir: string, metadata: Pick<TaskMetadata, 'uuid' | 'config'>, state: TaskState, config: Config, now: Date): Promise<TaskFacts> {
  const started = state.started_at === null ? Number.NaN : Date.parse(state.started_at)
  const base = config.serve.public_url
  return {
    turns: state.turns ?? 0,
    duration_ms: Number.isNaN(started) ? null : Math.max(0, now.getTime() - started),
    cost_usd: costOf(metadata.config?.model, splitOf(state), config.pricing),
    check: await lastCheck(dir),
    url: base === null ? null : `${base.replace(/\/+$/, '')}/tasks/${metadata.uuid}`,
  }
}

/** The last run_command whose command reads as a check, with the first line of what it returned. */
async function lastCheck(dir: string): Promise<CheckRun | null> {
  let found: CheckRun | null = null
  for await (const item of readJsonl(join(dir, FILES.tools))) {
    if (!item.ok) continue
    const r = item.record
    if (r.tool_name !== 'run_command' || r.kind === 'network') continue
    const command = (r.arguments as { command?: unknown } | null)?.command
    if (typeof command !== 'string' || !CHECKING.test(command)) continue
    const first = typeof r.result === 'string' ? (r.result.split('\n')[0] ?? '') : ''
    const ending =
      /^(exit code -?\d+|exit code unknown|killed by SIG[A-Z0-9]+|timed out after \d+s)/.exec(first)?.[0] ??
      (r.status === 'error' ? `failed: ${String(r.error ?? '')}` : 'ended')
    found = { command, ending }
  }
  return found
}

/** An inline code span no text of the agent's can leave: one line, no backticks, bounded. */
function code(text: string): string {
  const line = text.replace(/\s+/g, ' ').replaceAll('`', "'").trim()
  return `\`${line.length > 160 ? `${line.slice(0, 157)}...` : line}\``
}

function span(ms: number): string {
  const s = Math.round(ms / 1000)
  if (s < 120) return `${s}s`
  if (s < 7200) return `${Math.round(s / 60)} min`
  return `${Math.floor(s / 3600)} h ${Math.round((s % 3600) / 60)} min`
}

function bounded(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max)}\n\n[… the answer is cut here; the task holds the whole]` : text
}
