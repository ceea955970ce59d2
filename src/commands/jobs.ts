import { Command, Option } from 'commander'
import type { CommandEnv } from '../command-env.js'
import { formatDuration } from '../duration.js'
import { CtxError, UsageError } from '../errors.js'
import { CLI } from '../actions/actor.js'
import { cancelJobAction, retryJobAction } from '../actions/jobs.js'
import type { CancelOutcome } from '../actions/jobs.js'
import { listJobs, parseJobId, parseJobState, showJob } from '../fleet/queue/job-admin.js'
import type { JobRow } from '../fleet/queue/job-admin.js'
import type { Attempt } from '../fleet/queue/job-history.js'
import type { JobState } from '../fleet/queue/job.js'
import { table } from '../render.js'
import { isUuid } from '../storage/fs/layout.js'
import { clip } from '../text.js'
import { fleetPool } from '../actions/fleet-db.js'
import { durationArg, positiveIntArg, withEnv } from '../command-kit/shared.js'
import { completesFirstArgument } from '../command-kit/completion-words.js'

interface JobsOptions {
  state?: JobState
  user?: string
  task?: string
  limit: number
  wait: number
}

const ACTIONS = ['show', 'cancel', 'retry'] as const

export function jobsCommand(): Command {
  const command = new Command('jobs')
    .description(
      "the fleet's jobs (needs fleet.database_url): list them, or `jobs show ID`, `jobs cancel ID` (a waiting or retrying job never runs; a running one pauses its task and is not retried), `jobs retry ID` (a failed or cancelled job, again)",
    )
    .argument('[action]', 'show, cancel or retry (none: list the jobs)')
    .argument('[id]', 'the job id (from the list)')
    .option('--state <state>', 'only jobs in this state: waiting, running, retrying, done, failed or cancelled', parseJobState)
    .option('--user <name>', "only this user's jobs")
    .option('--task <uuid>', "only this task's jobs (a uuid, or a prefix of 8+ hex characters)", taskArg)
    .addOption(new Option('--limit <n>', 'at most this many jobs, newest first').argParser(positiveIntArg).default(50))
    .addOption(
      new Option('--wait <duration>', "cancel: how long to wait for a running job's task to pause").argParser(durationArg('--wait')).default(120_000, '2m'),
    )
    .action(withEnv(jobs))
  return completesFirstArgument(command, ACTIONS)
}

function taskArg(value: string): string {
  const v = value.trim().toLowerCase()
  if (!isUuid(v) && !/^[0-9a-f]{8}[0-9a-f-]{0,28}$/.test(v))
    throw new UsageError(`--task '${value.slice(0, 40)}' is not a task uuid`, 'give a uuid, or its first 8 or more characters')
  return v
}

async function jobs(ctx: CommandEnv, opts: JobsOptions, action: string | undefined, id: string | undefined): Promise<void> {
  // Everything about the command line is checked before the database is asked.
  if (action !== undefined && !(ACTIONS as readonly string[]).includes(action))
    throw new UsageError(`jobs: unknown action '${action.slice(0, 20)}'`, 'use jobs, jobs show ID, jobs cancel ID or jobs retry ID')
  if (action !== undefined && id === undefined)
    throw new UsageError(`jobs ${action} needs a job id`, `ctxagent jobs ${action} ID (ids are listed by ctxagent jobs)`)
  if (action === undefined && id !== undefined)
    throw new UsageError(`jobs: unknown action '${id.slice(0, 20)}'`, 'use jobs, jobs show ID, jobs cancel ID or jobs retry ID')
  const jobId = id === undefined ? null : parseJobId(id)
  if (action === 'cancel' && jobId !== null) return say(ctx, cancelText(await cancelJobAction(ctx, jobId, CLI, opts.wait), opts.wait))
  if (action === 'retry' && jobId !== null) {
    const again = await retryJobAction(ctx, jobId, CLI)
    if (ctx.json) ctx.io.json({ job: jobId, task_uuid: again.task_uuid, state: 'waiting', kind: again.kind, was: again.was })
    else
      ctx.io.out(
        again.was === 'retrying'
          ? `job ${jobId} runs now, not at its retry time (${again.kind === 'resume' ? 'to resume' : 'to start'} task ${again.task_uuid})`
          : `job ${jobId} waits again (${again.kind === 'resume' ? 'to resume' : 'to start'} task ${again.task_uuid})`,
      )
    return
  }
  const { pool } = await fleetPool(ctx, 'jobs')
  try {
    if (action === undefined || jobId === null) {
      const rows = await listJobs(pool, {
        limit: opts.limit,
        ...(opts.state ? { state: opts.state } : {}),
        ...(opts.user ? { user: opts.user } : {}),
        ...(opts.task ? { task: opts.task } : {}),
      })
      if (ctx.json) for (const row of rows) ctx.io.jsonl(row)
      else ctx.io.out(rows.length === 0 ? 'no jobs' : renderJobList(ctx, rows))
      return
    }
    const job = await showJob(pool, jobId)
    if (ctx.json) ctx.io.json(job)
    else ctx.io.out(renderOne(ctx, job))
  } finally {
    await pool.end().catch(() => undefined)
  }
}

function say(ctx: CommandEnv, [json, text]: [object, string]): void {
  if (ctx.json) ctx.io.json(json)
  else ctx.io.out(text)
}

/** `jobs cancel`: its JSON and its line. A running job whose task did not pause within --wait is an error (the request stays in its inbox). */
function cancelText(o: CancelOutcome, waitMs: number): [object, string] {
  const json = { job: o.job, task_uuid: o.task_uuid, state: o.state, task: o.task }
  if (o.was !== 'running') return [json, `job ${o.job} cancelled (it was ${o.was}; it will not run)`]
  if (o.task === 'asked') {
    throw new CtxError(`job ${o.job} is marked cancelled, but the agent of task ${o.task_uuid} did not pause within ${Math.round(waitMs / 1000)}s`, {
      hint: 'it pauses between turns, and is not run again; the request stays in its inbox',
    })
  }
  // The job's row says cancelled once its worker has seen its task stop; until then, running (cancelling).
  const job = o.state === 'running' ? `job ${o.job} is cancelling (its worker ends it cancelled once its task stops)` : `job ${o.job} ${o.state}`
  if (o.task === 'paused')
    return [json, `${job}; its task ${o.task_uuid} paused (resume it with ctxagent enqueue --resume ${o.task_uuid.slice(0, 8)}, or jobs retry ${o.job})`]
  if (o.task === 'finished') return [json, `${job}; its task ${o.task_uuid} finished before it could pause`]
  return [
    json,
    `${job}; its task ${o.task_uuid} is ${o.task === 'not_started' ? 'not started yet' : `in ${o.task}/`}: its worker does not start it, or pauses it as its agent starts`,
  ]
}

/**
 * The list, fitted to the terminal by choosing columns rather than cutting every one: the
 * id, state, task (8 characters, enough for every command that takes it), what the job
 * does and its last error always; the others as the width allows, the least telling
 * dropped first. A pipe gets every column.
 */
export function renderJobList(ctx: Pick<CommandEnv, 'io' | 'now'>, rows: JobRow[]): string {
  const when = (iso: string | null) => (iso === null ? '-' : `${formatDuration(Math.max(0, ctx.now().getTime() - Date.parse(iso)))} ago`)
  // drop: the order columns give way in (0: never); flexible: cut by the table to fit, so counted at a floor.
  const columns: { head: string; cell: (r: JobRow) => string; drop: number; flexible?: true }[] = [
    { head: 'id', cell: (r) => String(r.id), drop: 0 },
    { head: 'state', cell: (r) => stateText(ctx, r), drop: 0 },
    { head: 'task', cell: (r) => r.task_uuid.slice(0, 8), drop: 0 },
    { head: 'what', cell: (r) => r.what || '-', drop: 0, flexible: true },
    { head: 'user', cell: (r) => r.user ?? '-', drop: 5 },
    { head: 'host', cell: (r) => r.host ?? '-', drop: 4 },
    { head: 'tries', cell: (r) => String(r.attempts), drop: 6 },
    { head: 'prio', cell: (r) => String(r.priority), drop: 1 },
    { head: 'created', cell: (r) => when(r.created_at), drop: 3 },
    { head: 'claimed', cell: (r) => when(r.claimed_at), drop: 2 },
    { head: 'finished', cell: (r) => when(r.finished_at), drop: 7 },
    { head: 'last error', cell: (r) => clip((r.error ?? '').replace(/\s+/g, ' '), 200) || '-', drop: 0, flexible: true },
  ]
  const cells = columns.map((c) => rows.map((r) => c.cell(r)))
  const width = (i: number) => Math.max(columns[i]?.head.length ?? 0, ...(cells[i] ?? []).map((t) => plainWidth(t))) + 3
  const shown = columns.map((_, i) => i)
  if (ctx.io.isTTY) {
    const room = Math.max(20, ctx.io.stdout.columns || 80)
    const need = () => shown.reduce((sum, i) => sum + (columns[i]?.flexible ? Math.min(width(i), 14) : width(i)), 1)
    for (const victim of columns
      .map((c, i) => ({ i, drop: c.drop }))
      .filter((c) => c.drop > 0)
      .sort((a, b) => a.drop - b.drop)) {
      if (need() <= room) break
      shown.splice(shown.indexOf(victim.i), 1)
    }
  }
  return table(
    ctx.io,
    shown.map((i) => columns[i]?.head ?? ''),
    rows.map((_, r) => shown.map((i) => cells[i]?.[r] ?? '')),
  )
}

/** Characters a cell takes on screen (colour codes take none). */
function plainWidth(text: string): number {
  return text.replace(/\u001b\[[0-9;]*m/g, '').length
}

function stateText(ctx: Pick<CommandEnv, 'io' | 'now'>, r: JobRow): string {
  const { chalk } = ctx.io
  const due = r.state === 'retrying' && r.next_run_at !== null ? ` (in ${formatDuration(Math.max(0, Date.parse(r.next_run_at) - ctx.now().getTime()))})` : ''
  // Waiting out a usage limit or a budget: the time it lifts, not a retry. A finished job says what its task became
  // beside its state (done: completed or paused), not in the error column.
  const became = (r.state === 'done' || r.state === 'failed') && r.outcome !== null && r.outcome !== r.state ? ` (${r.outcome})` : ''
  const text =
    r.waiting_for !== null && r.next_run_at !== null
      ? `waiting for ${r.waiting_for}${r.wait_cap ? ` ${r.wait_cap}` : ''} until ${r.next_run_at}${due}`
      : `${r.state}${r.cancel_requested && r.state === 'running' ? ' (cancelling)' : ''}${due}${became}`
  if (r.state === 'failed') return chalk.red(text)
  if (r.state === 'retrying' || r.state === 'cancelled') return chalk.yellow(text)
  return text
}

function renderOne(ctx: CommandEnv, job: JobRow & { spec: object; history: Attempt[] }): string {
  const lines = Object.entries(job)
    .filter(([k]) => k !== 'spec' && k !== 'history')
    .map(([k, v]) => `${k}: ${v === null ? '-' : String(v)}`)
  lines.push(`spec: ${JSON.stringify(job.spec)}`)
  if (job.history.length === 0) return [...lines, 'history: no attempt has ended yet'].join('\n')
  lines.push('history:')
  lines.push(
    table(
      ctx.io,
      ['#', 'started', 'ended', 'host', 'outcome', 'why', 'then', 'error'],
      job.history.map((a) => [
        String(a.attempt),
        a.started_at ?? '-',
        a.ended_at,
        a.host ?? '-',
        a.outcome,
        a.reason + (a.cap ? ` (${a.cap})` : ''),
        a.wait_until !== null ? `waited until ${a.wait_until}` : a.again ? 'ran again' : 'ended',
        clip((a.error ?? '').replace(/\s+/g, ' '), 80) || '-',
      ]),
    ),
  )
  return lines.join('\n')
}
