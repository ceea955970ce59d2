import { basename } from 'node:path'
import { Command, Option } from 'commander'
import type { CommandEnv } from '../command-env.js'
import { auditTask } from '../command-env.js'
import { formatDuration } from '../duration.js'
import { NotFoundError, UsageError } from '../errors.js'
import { table } from '../render.js'
import { clip, grouped, sampleOf, shortPath } from '../text.js'
import { listTaskRows } from '../operations/list.js'
import type { ListedTask } from '../operations/list.js'
import { STATUSES } from '../storage/task/state.js'
import { deliveryCell } from '../storage/task/delivery.js'
import { positiveIntArg, withEnv } from '../command-kit/shared.js'
import { dateFrom, dateTo, userName } from '../command-kit/filter-args.js'

interface ListOptions {
  user?: string
  from?: Date
  to?: Date
  status?: string
  search?: string
  limit?: number
  all?: boolean
}

const DEFAULT_LIMIT = 20

export function listCommand(): Command {
  return new Command('list')
    .alias('ls')
    .description('the tasks of the tree, newest first: status, age, user, model, workspace, turns, tokens and the first line of each task')
    .option('--user <name>', 'only tasks of this user', userName)
    .option('--from <date>', 'only tasks created on or after this date (2024-01-01, today, yesterday, 2d or 12h ago, or an ISO time)', dateFrom)
    .option('--to <date>', 'only tasks created up to this date (a date includes its whole day)', dateTo)
    .addOption(new Option('--status <status>', 'only tasks with this status').choices([...STATUSES]))
    .option('--search <text>', 'only tasks whose statement or final answer contains this text (any case)')
    .option('--limit <n>', `how many of the newest to show (default: ${DEFAULT_LIMIT})`, positiveIntArg)
    .option('--all', 'show every matching task')
    .addHelpText(
      'after',
      `
Examples:
  $ ctxagent list                              the 20 newest tasks
  $ ctxagent ls --status paused                what can be resumed
  $ ctxagent list --search "csv export" --all  tasks about the CSV export
  $ ctxagent list --user alice --json | jq -r .uuid`,
    )
    .action(withEnv(list))
}

async function list(ctx: CommandEnv, opts: ListOptions): Promise<void> {
  if (opts.limit !== undefined && opts.all)
    throw new UsageError('--limit and --all exclude each other', 'give --limit N for the newest N tasks, or --all for every one')
  if (opts.from && opts.to && opts.from >= opts.to) throw new UsageError('--from must be before --to', 'swap them')
  if (opts.search !== undefined && opts.search.trim() === '') throw new UsageError('--search is empty', 'give the text to look for')
  if (!ctx.layout.exists()) throw new NotFoundError(`there is no task tree at ${shortPath(ctx.layout.base)}`, 'check --home, CTXAGENT_HOME or context.base_dir')
  const result = await listTaskRows(ctx.layout, {
    user: opts.user,
    from: opts.from,
    to: opts.to,
    status: opts.status,
    search: opts.search,
    limit: opts.all ? null : (opts.limit ?? DEFAULT_LIMIT),
  })
  auditTask(ctx, 'list', null)
  if (result.unreadable.length > 0) {
    ctx.io.warn(
      `${result.unreadable.length} task director${result.unreadable.length === 1 ? 'y' : 'ies'} could not be read and ${result.unreadable.length === 1 ? 'is' : 'are'} not listed: ${sampleOf(
        result.unreadable.map((u) => `${u.uuid.slice(0, 8)} (${clip(u.error, 100)})`),
        2,
      )}`,
    )
  }
  if (ctx.json) {
    for (const task of result.tasks) ctx.io.jsonl(task)
    return
  }
  // Piped, stdout holds the rows only (a header, then one line per task) and the hints go to stderr.
  if (result.tasks.length === 0 && ctx.io.isTTY) {
    ctx.io.out('no tasks')
    return
  }
  // A delivered column only when a listed task asked for delivery (docs/delivery.md).
  const delivered = result.tasks.some((t) => t.delivery !== null)
  const rows = result.tasks.map((t) => (delivered ? [...row(ctx, t).slice(0, -1), deliveryCell(t.delivery), ...row(ctx, t).slice(-1)] : row(ctx, t)))
  ctx.io.out(table(ctx.io, ['uuid', 'status', 'age', 'user', 'model', 'workspace', 'turns', 'tokens', ...(delivered ? ['delivered'] : []), 'task'], rows))
  if (result.more === 0) return
  const more = `… and ${result.more} more (--all, or --limit N)`
  if (ctx.io.isTTY) ctx.io.out(ctx.io.chalk.dim(more))
  else ctx.io.err(`${more}\n`)
}

function row(ctx: CommandEnv, t: ListedTask): string[] {
  const c = ctx.io.chalk
  const colour = t.status === 'completed' ? c.green : t.status === 'failed' || t.status === 'timeout' ? c.red : t.status === 'paused' ? c.yellow : c.cyan
  return [
    t.uuid.slice(0, 8),
    // A task whose agent died says so: `run --resume` continues it, paused or failed.
    colour(t.died ? `${t.status} (died)` : t.status),
    formatDuration(ctx.now().getTime() - Date.parse(t.created_at)),
    t.user ?? '-',
    t.model ?? '-',
    t.workspace ? basename(t.workspace) : '-',
    String(t.turns),
    grouped(t.tokens),
    // The first line, whole: a terminal's table cuts what does not fit, a pipe gets it all.
    clip(t.task || '-', 500),
  ]
}
