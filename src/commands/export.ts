import { join } from 'node:path'
import { Command, Option } from 'commander'
import type { CommandEnv } from '../command-env.js'
import { auditTask } from '../command-env.js'
import { withBlobText } from '../storage/blob/store.js'
import { FILES, resolveTask } from '../storage/fs/layout.js'
import { readJsonl } from '../storage/format/jsonl.js'
import type { JsonRecord } from '../storage/format/jsonl.js'
import { readOverview } from '../storage/task/reader.js'
import { withEnv } from './shared.js'

interface ExportOptions {
  format: 'markdown'
}

export function exportCommand(): Command {
  return new Command('export')
    .description('print a task as a readable transcript (Markdown): the task, every message, tool call and result, and the outcome')
    .argument('<uuid>', 'task uuid, a unique prefix of 8+ hex characters, or last (the newest task)')
    .addOption(new Option('--format <format>', 'the transcript format').choices(['markdown']).default('markdown'))
    .addHelpText('after', `
Examples:
  $ ctxagent export last > task.md
  $ ctxagent export 550e8400 --format markdown | less`)
    .action(withEnv(exportTask))
}

async function exportTask(ctx: CommandEnv, _opts: ExportOptions, id: string): Promise<void> {
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
    `| turns, tokens | ${s?.turns ?? s?.llm_call_count ?? 0}, ${(s?.total_tokens_used ?? 0).toLocaleString('en-US')} |`,
  ]
  if (s?.error) out.push(`| error | ${cell(s.error)} |`)
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
  if (s?.final_answer) out.push('', '## Outcome', '', s.final_answer.trim())
  if (overview.final_summary) out.push('', '## Final summary', '', overview.final_summary.trim())
  if (bad > 0) ctx.io.warn(`skipped ${bad} unreadable line${bad === 1 ? '' : 's'} of messages.jsonl`)
  ctx.io.out(`${out.join('\n')}\n`)
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
