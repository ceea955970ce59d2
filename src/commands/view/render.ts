import type { CommandEnv } from '../../command-env.js'
import { formatDuration } from '../../duration.js'
import type { JsonRecord } from '../../storage/format/jsonl.js'
import type { Overview, RecordKind } from '../../storage/task/reader.js'
import { clip, grouped } from '../../text.js'
import { mainArgument } from '../../tools/main-argument.js'
import type { RequestsCost, TokenSplit } from '../../operations/tokens.js'
import { deliveryLine, deliveryOf } from '../../storage/task/delivery.js'
import { environmentLine, environmentOf, instructionsLine, instructionsOf, testRunLine, testRunOf } from '../../storage/task/environment-view.js'
import type { ownerState } from '../../storage/fs/process-info.js'
import { diedState } from '../../storage/task/state.js'

const PREVIEW = 120

type OwnerState = ReturnType<typeof ownerState>

/** `  Final summary: 1 request(s), prompt 2,362, of which cached 1,024; completion 241 · $0.0012`, or nothing. */
function requestsLine(what: string, r: RequestsCost | undefined): string[] {
  if (r === undefined) return []
  return [
    `  ${what}: ${num(r.requests)} request(s), prompt ${num(r.prompt)}${r.cached ? `, of which cached ${num(r.cached)}` : ''}; completion ${num(r.completion)}${r.cost_usd === null ? '' : ` · $${r.cost_usd.toFixed(4)}`}`,
  ]
}

export function renderOverview(
  ctx: CommandEnv,
  o: Overview,
  tokens: TokenSplit & { cost_usd: number | null; turns_cost_usd?: number | null; compactions?: RequestsCost; final_summary?: RequestsCost },
  owner: OwnerState | null = null,
): string {
  const c = ctx.io.chalk
  const m = o.metadata
  const s = o.state
  const key = m.task_key
  const started = s?.started_at ?? m.created_at
  const end = s?.completed_at ?? (o.location === 'running' ? ctx.now().toISOString() : null)
  const lines = [
    `${c.bold('Task UUID:')} ${o.uuid}`,
    `${c.bold('Status:')} ${statusColour(ctx, o.status)} (${o.location}/)`,
    `${c.bold('Repository:')} ${[key.task_source, m.repository].filter(Boolean).join('/') || '-'}`,
    `${c.bold('Task:')} ${taskName(key.task_source, key.task_type, m.task_identifier, m.task_type)}`,
    `${c.bold('User:')} ${m.user ?? '-'}`,
    `${c.bold('Model:')} ${m.config?.model || '-'} (${m.config?.llm_provider || '-'})`,
    `${c.bold('Workspace:')} ${m.run?.workspace ?? '-'}`,
    `${c.bold('Started:')} ${when(started)}`,
    `${c.bold('Completed:')} ${s?.completed_at ? when(s.completed_at) : '-'}`,
    `${c.bold('Duration:')} ${end && started ? `${formatDuration(Date.parse(end) - Date.parse(started))}${s?.completed_at ? '' : ' so far'}` : '-'}`,
  ]
  if (o.lock) {
    const dead = owner === 'gone' ? `pid ${o.lock.process_id} is gone` : owner === 'reused' ? `pid ${o.lock.process_id} now belongs to another process` : null
    const recover = `watch-locks recovers it, or ctxagent unlock ${o.uuid.slice(0, 8)}`
    lines.push(
      `${c.bold('Owner:')} pid ${o.lock.process_id} on ${o.lock.hostname}, heartbeat ${formatDuration(ctx.now().getTime() - Date.parse(o.lock.heartbeat_at))} ago${dead === null ? '' : ` — ${c.red(`${dead}: its agent is dead`)} (${recover})`}`,
    )
  }
  if (s?.error) lines.push(`${c.bold('Error:')} ${c.red(s.error)}`)
  const environment = environmentOf(s)
  if (environment !== null)
    lines.push(`${c.bold('Environment:')} ${environment.status === 'ready' ? environmentLine(environment) : c.red(environmentLine(environment))}`)
  const instructions = instructionsOf(s)
  if (instructions !== null) lines.push(`${c.bold('Instructions:')} ${instructionsLine(instructions)}`)
  const tested = testRunOf(s)
  if (tested !== null) lines.push(`${c.bold('Test command:')} ${tested.exit_code === 0 ? testRunLine(tested) : c.yellow(testRunLine(tested))}`)
  const delivered = deliveryOf(s)
  if (delivered !== null) lines.push(`${c.bold('Delivered:')} ${delivered.refused === null ? deliveryLine(delivered) : c.yellow(deliveryLine(delivered))}`)
  // Its agent died (reaped): nothing is lost, it goes on from its last recorded message.
  if (diedState(s ?? null) && o.location !== 'running') lines.push(`${c.bold('Died:')} its agent died; resumable: ctxagent run --resume ${o.uuid}`)
  lines.push(
    '',
    c.bold('Statistics:'),
    `  LLM calls: ${num(s?.llm_call_count)}`,
    `  Tool calls: ${num(o.counts.tools)}`,
    `  Total tokens: ${num(tokens.total)}${tokens.prompt + tokens.completion > 0 ? ` (prompt ${num(tokens.prompt)}${tokens.cached ? `, of which cached ${num(tokens.cached)}` : ''}; completion ${num(tokens.completion)})` : ''}`,
    // The task's bill: the compactions' and the final summary's requests are billed too (docs/running.md#budgets).
    ...(tokens.cost_usd === null
      ? []
      : [
          `  Cost: $${tokens.cost_usd.toFixed(4)} (config pricing${tokens.compactions || tokens.final_summary ? `; turns $${(tokens.turns_cost_usd ?? 0).toFixed(4)}, the summaries below included` : ''})`,
        ]),
    ...requestsLine('Compaction summaries', tokens.compactions),
    ...requestsLine('Final summary', tokens.final_summary),
    `  Compressions: ${num(s?.compression_count ?? o.counts.summaries)}`,
    '',
    `${c.bold('Messages:')} ${num(o.counts.messages)}${o.last_messages.length ? ` (showing last ${o.last_messages.length})` : ''}`,
  )
  for (const message of o.last_messages) lines.push(`  ${renderRecord(ctx, 'messages', message as unknown as JsonRecord, false)}`)
  lines.push(
    '',
    `${c.bold('Summaries:')} ${num(o.counts.summaries)}${o.counts.summaries > o.summaries.length ? ` (showing last ${o.summaries.length}; all with --summaries --all)` : ''}`,
  )
  for (const summary of o.summaries) {
    lines.push(`  [${summary.summary_id}] seq ${summary.start_seq}-${summary.end_seq}: ${preview(summary.summary, PREVIEW)}`)
  }
  // Waits on the provider (docs/running.md#waits): a task that sat still says why.
  if (o.waits.length > 0) {
    lines.push('', `${c.bold('Waits:')} (last ${o.waits.length}; all with --planning --all)`)
    for (const w of o.waits) lines.push(`  ${c.dim(w.created_at)} ${w.plan_content}`)
  }
  if (o.final_summary !== null) lines.push('', `${c.bold('Final summary:')} ${preview(o.final_summary, PREVIEW)}`)
  return lines.join('\n')
}

export function renderListing(ctx: CommandEnv, kind: RecordKind, records: JsonRecord[], full: boolean): string {
  if (records.length === 0) return `no ${kind} records`
  return records.map((r) => renderRecord(ctx, kind, r, full)).join(full ? '\n\n' : '\n')
}

export function renderRecord(ctx: CommandEnv, kind: RecordKind, r: JsonRecord, full: boolean): string {
  const c = ctx.io.chalk
  const text = (value: unknown) => (typeof value === 'string' ? value : value == null ? '' : JSON.stringify(value))
  const show = (value: unknown) => (full ? text(value) : preview(text(value), PREVIEW))
  switch (kind) {
    case 'messages':
    case 'current': {
      const seq = kind === 'messages' ? `[${text(r.seq)}] ` : ''
      const tool = r.tool_name ? ` ${text(r.tool_name)}` : ''
      const callList = Array.isArray(r.tool_calls) ? preview(`→ ${r.tool_calls.map(callText).join(', ')}`, Math.floor(width(ctx) / 2)) : ''
      const calls = callList ? ` ${callList}` : ''
      const hidden = r.visible === false ? ' (hidden)' : ''
      // A preview fits the terminal's width (80 columns off a terminal): one line per message.
      const room = width(ctx) - `${seq}${text(r.role)}${tool}${hidden}:${calls} `.length
      const body = full ? text(r.content) : preview(text(r.content), Math.max(20, room))
      return `${seq}${roleColour(ctx, text(r.role))}${c.dim(tool)}${c.dim(hidden)}:${c.dim(calls)} ${body}`
    }
    case 'summaries': {
      // Seed 003's records name the count and the saving instead of the range and the sizes.
      const range = r.start_seq !== undefined ? `seq ${text(r.start_seq)}-${text(r.end_seq)}` : `${text(r.compressed_message_count ?? '?')} messages`
      const sizes =
        r.original_tokens !== undefined ? `${text(r.original_tokens)}→${text(r.summary_tokens)} tokens` : `${text(r.tokens_saved ?? '?')} tokens saved`
      return `[${text(r.summary_id ?? r.id)}] ${range} ${c.dim(`${sizes}, ${text(r.method ?? 'llm')}, ${text(r.created_at)}`)}\n${full ? text(r.summary) : indent(text(r.summary))}`
    }
    case 'tools': {
      const status = r.status === 'error' ? c.red('error') : c.green(text(r.status ?? 'success'))
      const outcome = r.status === 'error' ? text(r.error) : text(r.result)
      return `[${text(r.seq)}] ${text(r.tool_name)} ${status} ${c.dim(`${text(r.duration_ms)}ms`)} ${show(r.arguments)} -> ${show(outcome)}`
    }
    case 'planning':
      return `[${text(r.id)}] ${text(r.plan_type)} ${c.dim(text(r.created_at))}\n${full ? text(r.plan_content) : indent(text(r.plan_content))}`
  }
}

/** An assistant's tool call as `read_file(calc.js)`: the name and its main argument. */
function callText(call: { function?: { name?: string; arguments?: string } }): string {
  const name = call.function?.name ?? '?'
  let args: unknown = null
  try {
    args = JSON.parse(call.function?.arguments ?? 'null')
  } catch {
    // Malformed arguments: the name alone.
  }
  const about = mainArgument(name, args, 40)
  return about === null ? name : `${name}(${about})`
}

/** Columns to fit a one-line preview into: the terminal's, else 80. */
function width(ctx: CommandEnv): number {
  return ctx.io.isTTY && ctx.io.stdout.columns ? ctx.io.stdout.columns : 80
}

function indent(text: string): string {
  return text
    .split('\n')
    .map((l) => `    ${l}`)
    .join('\n')
}

function preview(text: string, max: number): string {
  return clip(text.replace(/\s+/g, ' ').trim(), max)
}

function when(iso: string | null | undefined): string {
  if (!iso) return '-'
  const d = new Date(iso)
  return Number.isNaN(d.getTime()) ? iso : `${d.toISOString().slice(0, 19).replace('T', ' ')} UTC`
}

function num(n: number | null | undefined): string {
  return grouped(n ?? 0)
}

function statusColour(ctx: CommandEnv, status: string): string {
  const c = ctx.io.chalk
  if (status === 'completed') return c.green(status)
  if (status === 'failed' || status === 'timeout') return c.red(status)
  if (status === 'paused') return c.yellow(status)
  return c.cyan(status)
}

function roleColour(ctx: CommandEnv, role: string): string {
  const c = ctx.io.chalk
  const colour = { system: c.magenta, user: c.green, assistant: c.cyan, tool: c.yellow }[role]
  return colour ? colour(role) : role
}

/** `issue #42`, `merge request !7`, `local task calc-1`, `local task (no --task-id)`. */
export function taskName(source: string, type: string, id: string, fallback: string): string {
  if (source === 'local' || type === 'task') return `local task ${id === '' ? '(no --task-id)' : id}`
  if (type === '') return fallback
  return `${type.replace(/_/g, ' ')} ${type === 'merge_request' ? '!' : '#'}${id}`
}
