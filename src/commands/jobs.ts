import { Command, Option } from 'commander'
import type { CommandEnv } from '../command-env.js'
import { formatDuration } from '../duration.js'
import { CtxError, UsageError } from '../errors.js'
import { CLI } from '../actions/actor.js'
import { cancelJobAction, retryJobAction } from '../actions/jobs.js'
import type { CancelOutcome } from '../actions/jobs.js'
import { listJobs, parseJobId, parseJobState, showJob } from '../fleet/job-admin.js'
import type { JobRow } from '../fleet/job-admin.js'
import type { JobState } from '../fleet/jobs.js'
import { table } from '../render.js'
import { isUuid } from '../storage/fs/layout.js'
import { clip } from '../text.js'
import { fleetPool } from '../actions/fleet-db.js'
import { durationArg, positiveIntArg, withEnv } from './shared.js'

interface JobsOptions {
  state?: JobState
  user?: string
  task?: string
  limit: number
  wait: number
}

const ACTIONS = ['show', 'cancel', 'retry'] as const

export function jobsCommand(): Command {
  return new Command('jobs')
    .description("the fleet's jobs (needs fleet.database_url): list them, or `jobs show ID`, `jobs cancel ID` (a waiting or retrying job never runs; a running one pauses its task and is not retried), `jobs retry ID` (a failed or cancelled job, again)")
    .argument('[action]', 'show, cancel or retry (none: list the jobs)')
    .argument('[id]', 'the job id (from the list)')
    .option('--state <state>', 'only jobs in this state: waiting, running, retrying, done, failed or cancelled', parseJobState)
    .option('--user <name>', "only this user's jobs")
    .option('--task <uuid>', "only this task's jobs (a uuid, or a prefix of 8+ hex characters)", taskArg)
    .addOption(new Option('--limit <n>', 'at most this many jobs, newest first').argParser(positiveIntArg).default(50))
    .addOption(new Option('--wait <duration>', "cancel: how long to wait for a running job's task to pause").argParser(durationArg('--wait')).default(120_000, '2m'))
    .action(withEnv(jobs))
}

function taskArg(value: string): string {
  const v = value.trim().toLowerCase()
  if (!isUuid(v) && !/^[0-9a-f]{8}[0-9a-f-]{0,28}$/.test(v)) throw new UsageError(`--task '${value.slice(0, 40)}' is not a task uuid`, 'give a uuid, or its first 8 or more characters')
  return v
}

async function jobs(ctx: CommandEnv, opts: JobsOptions, action: string | undefined, id: string | undefined): Promise<void> {
  // Everything about the command line is checked before the database is asked.
  if (action !== undefined && !(ACTIONS as readonly string[]).includes(action)) throw new UsageError(`jobs: unknown action '${action.slice(0, 20)}'`, 'use jobs, jobs show ID, jobs cancel ID or jobs retry ID')
  if (action !== undefined && id === undefined) throw new UsageError(`jobs ${action} needs a job id`, `ctxagent jobs ${action} ID (ids are listed by ctxagent jobs)`)
  if (action === undefined && id !== undefined) throw new UsageError(`jobs: unknown action '${id.slice(0, 20)}'`, 'use jobs, jobs show ID, jobs cancel ID or jobs retry ID')
  const jobId = id === undefined ? null : parseJobId(id)
  if (action === 'cancel' && jobId !== null) return say(ctx, cancelText(await cancelJobAction(ctx, jobId, CLI, opts.wait), opts.wait))
  if (action === 'retry' && jobId !== null) {
    const again = await retryJobAction(ctx, jobId, CLI)
    if (ctx.json) ctx.io.json({ job: jobId, task_uuid: again.task_uuid, state: 'waiting', kind: again.kind })
    else ctx.io.out(`job ${jobId} waits again (${again.kind === 'resume' ? 'to resume' : 'to start'} task ${again.task_uuid})`)
    return
  }
  const { pool } = await fleetPool(ctx, 'jobs')
  try {
    if (action === undefined || jobId === null) {
      const rows = await listJobs(pool, { limit: opts.limit, ...(opts.state ? { state: opts.state } : {}), ...(opts.user ? { user: opts.user } : {}), ...(opts.task ? { task: opts.task } : {}) })
      if (ctx.json) for (const row of rows) ctx.io.jsonl(row)
      else ctx.io.out(rows.length === 0 ? 'no jobs' : renderList(ctx, rows))
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
    throw new CtxError(`job ${o.job} is marked cancelled, but the agent of task ${o.task_uuid} did not pause within ${Math.round(waitMs / 1000)}s`, { hint: 'it pauses between turns, and is not run again; the request stays in its inbox' })
  }
  // The job's row says cancelled once its worker has seen its task stop; until then, running (cancelling).
  const job = o.state === 'running' ? `job ${o.job} is cancelling (its worker ends it cancelled once its task stops)` : `job ${o.job} ${o.state}`
  if (o.task === 'paused') return [json, `${job}; its task ${o.task_uuid} paused (resume it with ctxagent enqueue --resume ${o.task_uuid.slice(0, 8)}, or jobs retry ${o.job})`]
  if (o.task === 'finished') return [json, `${job}; its task ${o.task_uuid} finished before it could pause`]
  return [json, `${job}; its task ${o.task_uuid} is ${o.task === 'not_started' ? 'not started yet' : `in ${o.task}/`}, and will not be run again`]
}

function renderList(ctx: CommandEnv, rows: JobRow[]): string {
  const when = (iso: string | null) => (iso === null ? '-' : `${formatDuration(Math.max(0, ctx.now().getTime() - Date.parse(iso)))} ago`)
  return table(ctx.io, ['id', 'state', 'kind', 'task', 'user', 'host', 'tries', 'prio', 'created', 'claimed', 'finished', 'last error'], rows.map((r) => [
    String(r.id),
    stateText(ctx, r),
    r.kind,
    r.task_uuid.slice(0, 8),
    r.user ?? '-',
    r.host ?? '-',
    String(r.attempts),
    String(r.priority),
    when(r.created_at),
    when(r.claimed_at),
    when(r.finished_at),
    clip((r.error ?? r.outcome ?? '').replace(/\s+/g, ' '), 60),
  ]))
}

function stateText(ctx: CommandEnv, r: JobRow): string {
  const { chalk } = ctx.io
  const due = r.state === 'retrying' && r.next_run_at !== null ? ` (in ${formatDuration(Math.max(0, Date.parse(r.next_run_at) - ctx.now().getTime()))})` : ''
  const text = `${r.state}${r.cancel_requested && r.state === 'running' ? ' (cancelling)' : ''}${due}`
  if (r.state === 'failed') return chalk.red(text)
  if (r.state === 'retrying' || r.state === 'cancelled') return chalk.yellow(text)
  return text
}

function renderOne(ctx: CommandEnv, job: JobRow & { spec: object }): string {
  const lines = Object.entries(job).filter(([k]) => k !== 'spec').map(([k, v]) => `${k}: ${v === null ? '-' : String(v)}`)
  lines.push(`spec: ${JSON.stringify(job.spec)}`)
  return lines.join('\n')
}
