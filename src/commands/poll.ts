import { Command, InvalidArgumentError, Option } from 'commander'
import type { CommandEnv } from '../command-env.js'
import { auditTask, openIndex } from '../command-env.js'
import { CtxError, UsageError } from '../errors.js'
import type { PollReport } from '../fleet/poll/poller.js'
import { PollDatabaseError, pollPass } from '../fleet/poll/poller.js'
import type { JobSpec } from '../fleet/queue/job-spec.js'
import { MAX_TIMER_MS } from '../run/stop.js'
import type { ReviewReport } from '../fleet/poll/review-loop.js'
import { reviewPass } from '../fleet/poll/review-loop.js'
import { outcomesPass } from '../fleet/poll/outcomes-pass.js'
import type { RefreshReport } from '../operations/outcomes-refresh.js'
import type { ReviewWatch, Tracker, TriggerCheck } from '../sources/types.js'
import { placement } from '../actions/job-placement.js'
import type { PlacementOptions } from '../actions/job-placement.js'
import { fleetPool } from '../actions/fleet-db.js'
import { durationArg, pause, positiveIntArg, priorityArg, withEnv } from '../command-kit/shared.js'

interface PollOptions extends Omit<PlacementOptions, 'taskId'> {
  priority?: number
  key?: string
  github: string[]
  gitlab: string[]
  label: string
  interval?: number
  once?: boolean
}

const DEFAULT_INTERVAL_MS = 60_000
const collect = (value: string, previous: string[]): string[] => [...previous, value]

export function pollCommand(): Command {
  return new Command('poll')
    .description(
      'turn each open issue/PR (GitHub) or issue/MR (GitLab) labelled --label by someone with write access into one fleet job, move its labels as the task goes on, and queue follow-ups on the PRs/MRs ctxagent opened when reviewed or their checks fail (needs fleet.database_url)',
    )
    .option('--github <owner/repo>', 'a GitHub repository to poll (repeatable)', collect, [])
    .option('--gitlab <group/project>', 'a GitLab project to poll (repeatable)', collect, [])
    .requiredOption('--label <name>', 'the label that asks for an agent')
    .option('--interval <duration>', 'time between passes, at least 10s (default: 1m)', atLeastTenSeconds)
    .option('--once', 'one pass, then exit (for cron, or a systemd timer); exit 1 if a repository could not be read')
    .option('--user <name>', 'whose tasks these are (default: the OS user)')
    .option('--workspace <dir>', 'the only directory tools may touch: a path that exists on every host (default: the current directory)')
    .option('--repo <url[#ref]>', 'clone this repository for each task into fleet.workspaces_dir, at a branch, tag or commit after #')
    .option('--max-turns <n>', 'each task stops as timeout after this many LLM turns', positiveIntArg)
    .option('--max-tokens <n>', 'each task stops as timeout after this many tokens in total', positiveIntArg)
    .option('--timeout <duration>', 'each task stops as timeout after this much working time, e.g. 30m', durationArg('--timeout'))
    .option('--priority <n>', 'higher runs first (default 0)', priorityArg)
    .addOption(
      new Option(
        '--deliver <mode>',
        "when each task completes: none, commit its change on a new branch, or push it and open a pull/merge request (default: the worker's deliver.mode; docs/delivery.md)",
      ).choices(['none', 'branch', 'pr']),
    )
    .action(withEnv(poll))
}

function atLeastTenSeconds(value: string): number {
  const ms = durationArg('--interval')(value)
  if (ms < 10_000) throw new InvalidArgumentError('must be at least 10s (the forges rate-limit faster polling)')
  if (ms > MAX_TIMER_MS) throw new InvalidArgumentError('must be at most 24d (run poll --once from cron for longer gaps)')
  return ms
}

async function poll(ctx: CommandEnv, opts: PollOptions): Promise<void> {
  if (opts.github.length + opts.gitlab.length === 0)
    throw new UsageError('nothing to poll', 'give --github owner/repo or --gitlab group/project (either may be repeated)')
  const label = opts.label.trim()
  if (label === '' || label.length > 50 || label.includes(','))
    throw new UsageError(`--label '${label.slice(0, 60)}' is not a label name`, 'give one of 1 to 50 characters, without a comma')
  const labels = ctx.config.poll.labels
  if (Object.values(labels).includes(label))
    throw new UsageError(`--label ${label} is one of the labels poll sets itself (poll.labels)`, 'ask for agents with a label of your own, e.g. --label agent')
  // Everything is checked before the database is touched: a bad flag or a missing token queues nothing.
  const base = placement(opts, ctx.config.fleet.workspaces_dir, ctx.layout.base)
  // SIGINT/SIGTERM end a pass at once, even mid-request: every forge request is aborted
  // (the clients' own signal handling would not do it, see sources/abort.ts).
  const stop = new AbortController()
  const targets: {
    tracker: Tracker
    watch: ReviewWatch & TriggerCheck
    spec: (ref: string) => JobSpec
    followUp: (ref: string, statement: string) => JobSpec
  }[] = []
  if (opts.github.length > 0) {
    const { githubTracker } = await import('../sources/github.js')
    const { githubReviewWatch } = await import('../sources/github-review.js')
    for (const repo of opts.github) {
      targets.push({
        tracker: githubTracker(ctx.config, repo, stop.signal),
        watch: githubReviewWatch(ctx.config, repo, stop.signal),
        spec: (ref) => ({ github: ref, ...base }),
        followUp: (ref, task) => ({ github: ref, task, ...base }),
      })
    }
  }
  if (opts.gitlab.length > 0) {
    const { gitlabTracker } = await import('../sources/gitlab.js')
    const { gitlabReviewWatch } = await import('../sources/gitlab-review.js')
    for (const project of opts.gitlab) {
      targets.push({
        tracker: gitlabTracker(ctx.config, project, stop.signal),
        watch: gitlabReviewWatch(ctx.config, project, stop.signal),
        spec: (ref) => ({ gitlab: ref, ...base }),
        followUp: (ref, task) => ({ gitlab: ref, task, ...base }),
      })
    }
  }
  const { pool } = await fleetPool(ctx, 'poll')
  // The outcomes of the requests ctxagent opened are refreshed into the fleet's index each pass (docs/contract.md §17).
  const store = await openIndex(ctx, true).catch(async (err: unknown) => {
    await pool.end().catch(() => undefined)
    throw err
  })
  auditTask(ctx, 'poll', null)
  let by: NodeJS.Signals | null = null
  const onSignal = (name: NodeJS.Signals) => {
    by ??= name
    stop.abort()
  }
  process.once('SIGINT', onSignal)
  process.once('SIGTERM', onSignal)
  const stopped = new Promise<void>((resolve) => stop.signal.addEventListener('abort', () => resolve(), { once: true }))
  let failed = false
  try {
    do {
      for (const target of targets) {
        let report
        let review
        let outcomes
        try {
          const trigger = ctx.config.sources.trusted === 'write' ? target.watch : null
          report = await pollPass(pool, ctx.layout, target.tracker, {
            label,
            labels,
            spec: target.spec,
            priority: opts.priority ?? 0,
            signal: stop.signal,
            trigger,
          })
          // The pull/merge requests ctxagent opened: review activity and failed checks become follow-ups.
          review = await reviewPass(pool, ctx.layout, target.tracker, target.watch, {
            maxRounds: ctx.config.deliver.max_rounds,
            spec: target.followUp,
            priority: opts.priority ?? 0,
            signal: stop.signal,
          }).catch((err: unknown) => {
            throw stop.signal.aborted || err instanceof CtxError ? err : new PollDatabaseError(err)
          })
          outcomes =
            store === null
              ? null
              : await outcomesPass(pool, store, ctx.layout, ctx.config, target.tracker.name, ctx.now(), stop.signal).catch((err: unknown) => {
                  throw stop.signal.aborted || err instanceof CtxError ? err : new PollDatabaseError(err)
                })
        } catch (err) {
          // Stopped mid-pass: what the pass left, the next pass of any poller finishes.
          if (stop.signal.aborted) throw interrupted(by ?? 'SIGTERM')
          // PostgreSQL away: one line, and the next pass tries again (--once: exit 1, as at start).
          if (opts.once || !(err instanceof PollDatabaseError)) throw err
          ctx.io.warn(`poll: ${err.message} (tried again next pass)`)
          break
        }
        if (report.errors.length > 0 || review.errors.length > 0) failed = true
        show(ctx, report, review, outcomes)
      }
    } while (!opts.once && !stop.signal.aborted && (await pause(opts.interval ?? DEFAULT_INTERVAL_MS, stopped)))
  } finally {
    process.off('SIGINT', onSignal)
    process.off('SIGTERM', onSignal)
    await store?.close()
    await pool.end().catch(() => undefined)
  }
  if (opts.once && failed) process.exitCode = 1
}

/** A pass cut short by a signal: exit 130 (SIGINT) or 143 (SIGTERM), as an interrupted command (docs/contract.md §9). Between passes a signal ends poll with 0. */
function interrupted(by: NodeJS.Signals): CtxError {
  return new CtxError(`poll stopped by ${by} during a pass`, {
    exitCode: by === 'SIGINT' ? 130 : 143,
    hint: 'the next pass of any poller finishes what it left',
  })
}

function show(ctx: CommandEnv, r: PollReport, review: ReviewReport, outcomes: RefreshReport | null): void {
  if (ctx.json) {
    ctx.io.jsonl({ ts: ctx.now().toISOString(), ...r, review, ...(outcomes ? { outcomes } : {}) })
    return
  }
  const parts = [`${r.listed} open with the label`, `${r.queued.length} queued${r.queued.length ? ` (${r.queued.join(', ')})` : ''}`]
  if (r.resumed.length) parts.push(`${r.resumed.length} resumed (${r.resumed.join(', ')})`)
  if (r.cancelled.length) parts.push(`${r.cancelled.length} waiting job(s) cancelled (${r.cancelled.join(', ')})`)
  if (r.labelled.length) parts.push(`labels moved: ${r.labelled.map((l) => `${l.ref} → ${l.label ?? 'none'}`).join(', ')}`)
  if (r.untrusted.length) parts.push(`${r.untrusted.length} labelled by someone without write access, not queued (${r.untrusted.join(', ')})`)
  if (review.watched)
    parts.push(
      `${review.watched} own pull request(s) watched, ${review.followups.length} follow-up(s) queued${review.followups.length ? ` (${review.followups.join(', ')})` : ''}`,
    )
  if (review.exhausted.length) parts.push(`deliver.max_rounds reached (${review.exhausted.join(', ')})`)
  if (review.forgotten.length) parts.push(`merged or closed, forgotten (${review.forgotten.join(', ')})`)
  if (outcomes?.refreshed.length) parts.push(`${outcomes.refreshed.length} pull request outcome(s) refreshed`)
  ctx.io.out(`${ctx.now().toISOString()} poll ${r.source}: ${parts.join('; ')}`)
  for (const error of [...r.errors, ...review.errors, ...(outcomes?.errors ?? [])]) ctx.io.warn(`poll ${r.source}: ${error} (tried again next pass)`)
}
