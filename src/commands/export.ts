import { join } from 'node:path'
import { Command, Option } from 'commander'
import type { CommandEnv } from '../command-env.js'
import { auditTask } from '../command-env.js'
import { withBlobText } from '../storage/blob/store.js'
import { FILES, resolveTask } from '../storage/fs/layout.js'
import { readJsonl } from '../storage/format/jsonl.js'
import type { JsonRecord } from '../storage/format/jsonl.js'
import { readOverview } from '../storage/task/reader.js'
import { UsageError } from '../errors.js'
import { costOf, requestsCost, splitOf, taskBill } from '../operations/tokens.js'
import type { RequestsCost } from '../operations/tokens.js'
import { withEnv } from '../command-kit/shared.js'
import { deliveryLine, deliveryOf } from '../storage/task/delivery.js'
import { grouped } from '../text.js'

interface ExportOptions {
  format: 'markdown'
}

export function exportCommand(): Command {
  return new Command('export')
    .description('print a task as a readable transcript (Markdown): the task, every message, tool call and result, and the outcome')
    .argument('<uuid>', 'task uuid, a unique prefix of 8+ hex characters, or last (the newest task)')
    .addOption(new Option('--format <format>', 'the transcript format').choices(['markdown']).default('markdown'))
    .addHelpText(
      'after',
      `
Examples:
  $ ctxagent export last > task.md
  $ ctxagent export 550e8400 --format markdown | less`,
    )
    .action(withEnv(exportTask))
}

async function exportTask(ctx: CommandEnv, _opts: ExportOptions, id: string): Promise<void> {
  if (ctx.json)
    throw new UsageError(
      'export writes a Markdown transcript, not JSON',
      'for JSON use view <uuid> --json (the overview) or view <uuid> --messages --all --json (every message, as stored)',
    )
  const ref = resolveTask(ctx.layout, id)
  const overview = await readOverview(ref, 0)
  auditTask(ctx, 'export', ref.uuid)
  const m = overview.metadata
  const s = overview.state
  const out: string[] = [
    `# ctxagent task ${ref.uuid}`,
    '',
    `| | |`,
    `|---|---|`,
    `| status | ${cell(overview.status)} (${ref.location}/) |`,
    `| task | ${cell(m.task_type)}${m.task_identifier ? ` ${cell(m.task_identifier)}` : ''}${m.repository ? ` in ${cell(m.repository)}` : ''} |`,
    `| user | ${cell(m.user ?? '-')} |`,
    `| model | ${cell(m.config?.model || '-')} (${cell(m.config?.llm_provider || '-')}) |`,
    `| workspace | ${cell(m.run?.workspace ?? '-')} |`,
    `| started | ${cell(s?.started_at ?? m.created_at)} |`,
    `| completed | ${cell(s?.completed_at ?? '-')} |`,
    `| turns, tokens | ${s?.turns ?? s?.llm_call_count ?? 0}, ${grouped(s?.total_tokens_used ?? 0)} |`,
  ]
  if (s) {
    // The bill as providers bill it: the split, and the cost at config pricing (cached reads and cache writes at their rates).
    const model = m.config?.model || null
    const split = splitOf(s)
    const cost = costOf(model, split, ctx.config.pricing)
    out.push(
      `| prompt, cached, completion | ${n(split.prompt)}, ${n(split.cached)}${split.cache_write ? ` (+${n(split.cache_write)} written to the cache)` : ''}, ${n(split.completion)} |`,
    )
    if (cost !== null) out.push(`| cost (turns) | $${cost.toFixed(4)} |`)
    // The task's bill, as stats and view --json give it: turns, compactions and final summary, rounded once (docs/running.md#budgets).
    const bill = taskBill(model, s, ctx.config.pricing)
    for (const [label, usage] of [
      ['compactions', requestsCost(model, s.compaction_tokens, ctx.config.pricing)],
      ['final summary', requestsCost(model, s.final_summary_tokens, ctx.config.pricing)],
    ] as [string, RequestsCost | null][]) {
      if (usage !== null)
        out.push(
          `| ${label} | ${usage.requests} request${usage.requests === 1 ? '' : 's'}, ${n(usage.prompt)} prompt (${n(usage.cached)} cached), ${n(usage.completion)} completion${usage.cost_usd !== null ? `, $${usage.cost_usd.toFixed(4)}` : ''} |`,
        )
    }
    if (bill !== null) out.push(`| cost | $${bill.toFixed(6)} |`)
  }
  if (s?.error) out.push(`| error | ${cell(s.error)} |`)
  const delivered = deliveryOf(s)
  if (delivered !== null) out.push(`| delivery | ${cell(deliveryLine(delivered))} |`)
  let bad = 0
  for await (const item of readJsonl(join(ref.dir, FILES.messages))) {
    if (!item.ok) {
      bad++
      continue
    }
    const r = item.record
    if (r.visible === false) continue
    // A tool output stored as a blob is exported whole (its reference first).
    out.push('', ...message(withBlobText(ref.dir, r)))
  }
  if (s?.final_answer) out.push('', '## Outcome', '', nested(s.final_answer.trim()))
  if (overview.final_summary) out.push('', '## Final summary', '', nested(overview.final_summary.trim()))
  if (bad > 0) ctx.io.warn(`skipped ${bad} unreadable line${bad === 1 ? '' : 's'} of messages.jsonl`)
  ctx.io.out(`${out.join('\n')}\n`)
}

const n = grouped

/**
 * Markdown whose headings sit under a `##` section of the transcript: each heading moved
 * down so that the highest becomes `###` (a final summary's own `## Original Task` would
 * otherwise stand beside `## Final summary` instead of inside it). Fenced code is left alone.
 */
export function nested(text: string): string {
  const lines = text.split('\n')
  let fenced = false
  const levels: number[] = []
  for (const line of lines) {
    if (/^\s*(```|~~~)/.test(line)) fenced = !fenced
    else if (!fenced) {
      const h = /^(#{1,6})\s/.exec(line)
      if (h) levels.push((h[1] as string).length)
    }
  }
  if (levels.length === 0) return text
  const shift = Math.max(0, 3 - Math.min(...levels))
  fenced = false
  return lines
    .map((line) => {
      if (/^\s*(```|~~~)/.test(line)) fenced = !fenced
      return !fenced && shift > 0
        ? line.replace(/^(#{1,6})(\s)/, (_, hashes: string, space: string) => `${'#'.repeat(Math.min(6, hashes.length + shift))}${space}`)
        : line
    })
    .join('\n')
}

function message(r: JsonRecord): string[] {
  const role = typeof r.role === 'string' ? r.role : '?'
  const content = typeof r.content === 'string' ? r.content : JSON.stringify(r.content ?? '')
  const head = `## [${String(r.seq ?? '?')}] ${role}${typeof r.tool_name === 'string' ? ` · ${r.tool_name}` : ''}`
  const lines = [head, '']
  if (role === 'tool' || role === 'system') lines.push(fence(content))
  else if (content.trim() !== '') lines.push(content.trim())
  if (Array.isArray(r.tool_calls)) {
    for (const call of r.tool_calls as { function?: { name?: string; arguments?: string } }[]) {
      lines.push('', `→ **${call.function?.name ?? '?'}**`, fence(pretty(call.function?.arguments ?? ''), 'json'))
    }
  }
  return lines
}

/** A fenced block that the text inside cannot close: the fence is longer than any run of backticks in it. */
function fence(text: string, lang = ''): string {
  const longest = Math.max(2, ...[...text.matchAll(/`+/g)].map((m) => m[0].length))
  const marks = '`'.repeat(longest + 1)
  return `${marks}${lang}\n${text.replace(/\n$/, '')}\n${marks}`
}

function pretty(args: string): string {
  try {
    return JSON.stringify(JSON.parse(args), null, 2)
  } catch {
    return args
  }
}

/** A table cell: one line, no pipe that would split it. */
function cell(text: string): string {
  return text.replace(/\s+/g, ' ').replace(/\|/g, '\\|')
}
