import { overviewDocument } from '../../operations/overview.js'
import { join } from 'node:path'
import { Command, Option } from 'commander'
import type { CommandEnv } from '../../command-env.js'
import { auditTask } from '../../command-env.js'
import { UsageError } from '../../errors.js'
import { withBlobText } from '../../storage/blob/store.js'
import { FILES, resolveTask } from '../../storage/fs/layout.js'
import type { TaskRef } from '../../storage/fs/layout.js'
import { ROLES } from '../../storage/format/records.js'
import { fileSize, followJsonl, listRecords, readOverview } from '../../storage/task/reader.js'
import type { RecordKind } from '../../storage/task/reader.js'
import { positiveIntArg, requireUuid, stopSignal, withEnv } from '../../command-kit/shared.js'
import { renderListing, renderOverview, renderRecord } from './render.js'
import { forTerminalDeep } from '../../terminal-text.js'

interface ViewOptions {
  uuid?: string
  messages?: boolean
  summaries?: boolean
  tools?: boolean
  current?: boolean
  planning?: boolean
  limit?: number
  all?: boolean
  role?: string
  hidden?: boolean
  follow?: boolean
  full?: boolean
}

const KINDS: RecordKind[] = ['messages', 'summaries', 'tools', 'current', 'planning']
const DEFAULT_LIMIT = 10

export function viewCommand(): Command {
  return (
    new Command('view')
      .description('inspect one task: overview, or its messages, summaries, tools, current window or planning')
      .argument('[uuid]', 'task uuid, a unique prefix of 8+ hex characters, or last (the newest task)')
      .option('--uuid <uuid>', 'the task, as an option instead of the argument')
      .option('--messages', 'list messages.jsonl')
      .option('--summaries', 'list summaries.jsonl')
      .option('--tools', 'list tools.jsonl')
      .option('--current', 'list current.jsonl (the window the LLM gets next)')
      .option('--planning', 'list planning.jsonl')
      // No commander default: an explicit --limit must be told apart from none (it contradicts --all).
      .option('--limit <n>', `how many of the newest records to list (default: ${DEFAULT_LIMIT})`, positiveIntArg)
      .option('--all', 'list every record')
      .addOption(new Option('--role <role>', 'only messages of this role').choices([...ROLES]))
      .option('--hidden', 'include hidden messages (visible: false, such as a chat session marker)')
      .option('--follow', 'after the newest messages, stream new ones until the task leaves running/')
      .option('--full', 'print whole message contents instead of one-line previews')
      .action(withEnv(view))
  )
}

/**
 * The listing to show (undefined: the overview), once every flag combination is
 * checked: a flag that would be silently ignored is refused before anything is read.
 */
function checkOptions(opts: ViewOptions): RecordKind | undefined {
  const chosen = KINDS.filter((k) => opts[k] === true)
  if (chosen.length > 1) throw new UsageError(`choose one listing, not ${chosen.map((k) => `--${k}`).join(' and ')}`, 'run view once per listing')
  const explicit = chosen[0]
  const notMessages = explicit !== undefined && explicit !== 'messages' && explicit !== 'current'
  if (opts.role !== undefined && notMessages) throw new UsageError('--role filters messages', 'use it with --messages or --current')
  if (opts.hidden && notMessages) throw new UsageError('--hidden shows hidden messages', 'use it with --messages or --current')
  if (opts.follow && explicit !== undefined && explicit !== 'messages')
    throw new UsageError(`--follow streams messages, not --${explicit}`, 'use --follow alone or with --messages')
  if (opts.limit !== undefined && opts.all)
    throw new UsageError('--limit and --all exclude each other', 'give --limit N for the newest N records, or --all for every one')
  const kind = explicit ?? (opts.follow || opts.role !== undefined || opts.hidden ? 'messages' : undefined)
  if (kind === undefined) {
    const stray = (['limit', 'all', 'full'] as const).filter((k) => opts[k] !== undefined && opts[k] !== false).map((k) => `--${k}`)
    if (stray.length > 0)
      throw new UsageError(
        `${stray.join(' and ')} ${stray.length === 1 ? 'applies' : 'apply'} to a listing, not to the overview`,
        'add --messages, --summaries, --tools, --current or --planning',
      )
  }
  return kind
}

// Human output prints stored text through forTerminalDeep (escape sequences a model or a comment wrote stripped); --json escapes them anyway.
async function view(ctx: CommandEnv, opts: ViewOptions, positional?: string): Promise<void> {
  const kind = checkOptions(opts)
  const ref = resolveTask(ctx.layout, requireUuid(positional, opts.uuid))
  if (kind === undefined) {
    const overview = await readOverview(ref)
    // Audited once read: a task that cannot be read shows nothing, and its view changes nothing.
    auditTask(ctx, 'view', ref.uuid)
    warnBad(ctx, overview.counts.bad_lines)
    const document = overviewDocument(overview, ctx.config.pricing)
    if (ctx.json) ctx.io.json(document)
    else ctx.io.out(renderOverview(ctx, forTerminalDeep(overview), document.tokens, document.owner_state))
    return
  }
  // Where following starts is taken before the listing is read: a message appended
  // meanwhile is then followed (and, if the listing has it too, not printed twice).
  const followFrom = opts.follow ? (fileSize(join(ref.dir, FILES.messages)) ?? 0) : 0
  const listing = await listRecords(ref, kind, { limit: opts.all ? null : (opts.limit ?? DEFAULT_LIMIT), role: opts.role, hidden: opts.hidden === true })
  auditTask(ctx, 'view', ref.uuid)
  warnBad(ctx, listing.bad_lines)
  // --full: a tool output stored as a blob is shown whole (its reference first).
  const records = opts.full === true ? listing.records.map((r) => withBlobText(ref.dir, r)) : listing.records
  if (ctx.json) for (const record of records) ctx.io.jsonl(record)
  else ctx.io.out(renderListing(ctx, kind, forTerminalDeep(records), opts.full === true))
  const listedUpTo = Math.max(0, ...listing.records.map((r) => (typeof r.seq === 'number' ? r.seq : 0)))
  if (opts.follow) await follow(ctx, ref, opts, followFrom, listedUpTo)
}

async function follow(ctx: CommandEnv, ref: TaskRef, opts: ViewOptions, from: number, listedUpTo: number): Promise<void> {
  if (ref.location !== 'running') {
    ctx.io.warn(`task ${ref.uuid} is in ${ref.location}/, not running; nothing to follow`)
    return
  }
  const { stopped, dispose } = stopSignal()
  try {
    const locate = () => {
      const now = resolveTask(ctx.layout, ref.uuid)
      return { path: join(now.dir, FILES.messages), running: now.location === 'running' }
    }
    for await (const record of followJsonl(from, { stop: stopped, locate })) {
      if (typeof record.seq === 'number' && record.seq <= listedUpTo) continue
      if (opts.role !== undefined && record.role !== opts.role) continue
      if (record.visible === false && opts.hidden !== true) continue
      if (ctx.json) ctx.io.jsonl(record)
      else ctx.io.out(renderRecord(ctx, 'messages', forTerminalDeep(record), opts.full === true))
    }
  } finally {
    dispose()
  }
  if (!ctx.json) {
    const now = resolveTask(ctx.layout, ref.uuid)
    if (now.location !== 'running') ctx.io.err(`task left running/; it is now in ${now.location}/\n`)
  }
}

function warnBad(ctx: CommandEnv, count: number): void {
  if (count > 0) ctx.io.warn(`skipped ${count} unreadable line${count === 1 ? '' : 's'} (a torn last line or invalid JSON)`)
}
