import { randomUUID } from 'node:crypto'
import type { ChildProcess } from 'node:child_process'
import { availableParallelism } from 'node:os'
import { join } from 'node:path'
import type { Pool } from 'pg'
import type { Layout } from '../storage/fs/layout.js'
import { locateTask } from '../storage/fs/layout.js'
import { safeState } from '../storage/task/lifecycle.js'
import { appendInbox } from '../storage/task/inbox.js'
import { holdForTest } from '../test-pause.js'
import { AgentLauncher, signalGroup } from './agent-launcher.js'
import type { ClaimBudget } from './claim-budget.js'
import { cloneWorkspace } from './clone.js'
import type { CloneCredential } from './clone.js'
import { jobProblem, runArgs } from './job-spec.js'
import { JobQueue } from './job-queue.js'
import type { Ended, IdleChannel, Job, JobEnd } from './job.js'
import type { RetryPolicy } from './retry-policy.js'
import { JobListener } from './listener.js'
import type { WakeFrom } from './listener.js'
import { problemIn } from './worker-log.js'
import { closeVerdict, completedEnd, endedElsewhere, stateText, taskSnapshot } from './task-outcome.js'
import { heartbeat, markStopped } from './registry.js'
import type { WorkerRecord } from './registry.js'

export interface WorkerOptions {
  url: string
  pool: Pool
  record: WorkerRecord
  layout: Layout
  /** The ctxagent entry to run each task with (this very program), and the global flags it needs. */
  command: string[]
  /**
   * Keep one child started ahead of its job (node up, the CLI loaded, waiting on fd 3
   * for the arguments of its `run`): a claimed job starts without node's start-up.
   * Only while fewer tasks run than the host has cores (`cores`).
   */
  warmChild: boolean
  /** The cores the warm child's start-up may take one of (default: os.availableParallelism()). */
  cores?: number
  pollMs: number
  heartbeatMs: number
  /** fleet.workspaces_dir: where `--repo` jobs are cloned. */
  workspacesDir: string | null
  /** Tokens git is given for the `--repo` clones of their hosts (github.token, gitlab.token). */
  cloneCredentials?: CloneCredential[]
  /**
   * Hands a fresh clone to the user its commands run as (as root: the sandbox's
   * unprivileged identity, which must be able to write it); nothing when not root.
   */
  giveClone?: (dir: string) => void
  /** fleet.max_attempts: how often a job whose agent is killed before its task began is tried (default 3). */
  maxAttempts?: number
  /** fleet.agent_niceness: nice(1) steps its agents run below the worker. */
  agentNiceness?: number
  /** fleet.retry: a task its LLM side paused for a while is run again later (docs/contract.md §14.4); absent: never. */
  retry?: RetryPolicy
  /** fleet.limits.per_user: at most this many running tasks of one user, fleet-wide. */
  perUser?: number | null
  /** The shared cost caps at a time (claim-budget.ts): a job whose cap is spent waits for its reset, unclaimed; absent: none. */
  budget?: ((now: Date) => ClaimBudget) | null
  /** The clock the budget windows are told by (default: the system's). */
  now?: () => Date
  log: (line: string) => void
  /**
   * A job's end at its level (docs/fleet-operations.md#a-jobs-history): a failure the fleet runs again (a retry, a wait
   * for a usage limit) is a warning, one that fails the job an error; default: `log`.
   */
  warn?: (line: string) => void
  error?: (line: string) => void
  /** Why this worker's configuration cannot serve a job (abilities.ts), or null: a refused job ends with the reason. */
  refuse?: (job: Job) => string | null
  /** Passes a child's stderr on (default: as it comes); `--log-format json` wraps what is not JSON. */
  relay?: (pid: number | undefined) => (chunk: Buffer) => void
}

interface Running {
  job: Job
  /** Null while its workspace is being cloned. */
  child: ChildProcess | null
  /** This worker asked the task to stop (it pauses): its resume goes back to the queue. */
  stopped: boolean
  lastLine: string
  /** A resume: its paused task's state.json as it was before the agent took it. */
  pausedState?: string | null
  /** Its job's cancel was passed on to the agent (deliverCancels). */
  cancelAsked?: boolean
  /** Stops its `--repo` clone while one is made. */
  clone?: AbortController
}

/**
 * Takes jobs and runs each task as `run` does, in a child process of its own (its own
 * process group), `concurrency` at a time (docs/contract.md §14.2). Wakes on NOTIFY, and polls
 * every `pollMs` besides (a notification sent while the connection was down is lost, and
 * the worker a job chose to wake may have died). While its last claim found nothing it is
 * idle (a row in fleet_idle naming its own channel): a job that starts waiting wakes one
 * idle worker, not all of them.
 */
export class Worker {
  private readonly queue: JobQueue
  /** By claim (job id and attempt): a job a pass handed back while this worker was frozen may be claimed by it again while its first child still ends. */
  private readonly running = new Map<string, Running>()
  private readonly listener: JobListener
  private readonly idle: IdleChannel
  private stopping = false
  private pumping = false
  private again = false
  /** A cancel may have come for a job whose agent starts or runs (deliverCancels). */
  private cancelsDue = false
  private timers: NodeJS.Timeout[] = []
  private finished: (() => void) | null = null
  private readonly settling = new Set<Promise<void>>()
  private readonly launcher: AgentLauncher
  /** Wakes the worker when the first retrying job is due. */
  private dueTimer: NodeJS.Timeout | null = null
  /**
   * Resume jobs whose task another process took before this worker's agent could (it
   * exited 4): looked at on every poll, and ended with what their task became once it
   * leaves running/. (A worker that stops first leaves them to watch-locks.)
   */
  private readonly elsewhere = new Map<number, Job>()
  /** The waits in progress, ended by stop(). */
  private readonly wakeOnStop = new Set<() => void>()

  constructor(private readonly options: WorkerOptions) {
    this.queue = new JobQueue(options.pool)
    // Taken for gone (passed over by the jobs that wake one worker) after three heartbeats missed.
    this.idle = { channel: `ctxagent_w_${randomUUID().replaceAll('-', '')}`, staleSeconds: (3 * options.heartbeatMs) / 1000 }
    this.listener = new JobListener(options.url, this.idle.channel, (from) => this.woken(from))
    this.launcher = new AgentLauncher({
      command: options.command,
      warmChild: options.warmChild,
      niceness: options.agentNiceness ?? 0,
      log: options.log,
      relayFor: (child) => this.relayFor(child),
      canStart: () => this.coreLeft(),
    })
  }

  /** Runs until stop() and every task it started has ended. */
  async run(): Promise<void> {
    const done = new Promise<void>((resolve) => (this.finished = resolve))
    if (!this.stopping) await this.listener.start()
    if (this.stopping) {
      // Stopped before it ran, or while its listener connected: nothing more is started.
      this.maybeFinish()
      return done
    }
    this.timers.push(setInterval(() => this.wake(true), this.options.pollMs))
    this.timers.push(
      setInterval(
        () => void heartbeat(this.options.pool, this.options.record.id).catch((err: Error) => this.options.log(`heartbeat not written: ${err.message}`)),
        this.options.heartbeatMs,
      ),
    )
    this.launcher.prestart()
    this.wake()
    await done
  }

  /** Stops claiming, asks each running task to pause (they are queued again as resumes), and ends once they have. */
  stop(): void {
    if (this.stopping) return
    this.stopping = true
    for (const timer of this.timers) clearInterval(timer)
    if (this.dueTimer !== null) clearTimeout(this.dueTimer)
    for (const wake of this.wakeOnStop) wake()
    this.queue.leaveIdle(this.idle.channel).catch(() => undefined)
    this.launcher.stop()
    for (const entry of this.running.values()) {
      entry.stopped = true
      if (entry.child !== null) signalGroup(entry.child, 'SIGTERM')
    }
    this.maybeFinish()
  }

  /** A wake-up meant for this worker alone that it cannot use (no free slot, or stopping) is passed on, not dropped. */
  private woken(from: WakeFrom): void {
    if (from === 'own' && (this.stopping || this.running.size >= this.options.record.concurrency)) {
      this.queue.passWake().catch((err: Error) => this.options.log(`a wake-up not passed on (${err.message}): the poll finds its job`))
      return
    }
    this.wake(from === 'cancel' || from === 'connected')
  }

  /** `cancels`: look for running jobs cancelled too (a cancel's NOTIFY, a reconnect, the poll). */
  private wake(cancels = false): void {
    if (cancels) this.cancelsDue = true
    if (this.stopping) return
    if (this.pumping) {
      this.again = true
      return
    }
    this.pumping = true
    void this.pump().finally(() => {
      this.pumping = false
      if (this.again) {
        this.again = false
        this.wake()
      }
    })
  }

  private async pump(): Promise<void> {
    this.settleElsewhere()
    if (this.cancelsDue) {
      this.cancelsDue = false
      await this.deliverCancels()
    }
    while (!this.stopping && this.running.size < this.options.record.concurrency) {
      let job: Job | null
      try {
        const budget = this.options.budget?.(this.options.now?.() ?? new Date()) ?? null
        job = await this.queue.claim(this.options.record.id, this.options.perUser ?? null, this.idle, budget)
      } catch (err) {
        // PostgreSQL away: the next poll tries again.
        this.options.log(`cannot claim jobs: ${(err as Error).message}`)
        return
      }
      if (job === null) {
        await this.wakeWhenDue()
        return
      }
      if (this.stopping) {
        // Claimed as the stop came: hand it straight back.
        await this.queue
          .release(job, this.options.record.id)
          .catch((err: Error) => this.options.log(`job ${job.id} not handed back (${err.message}): a reaper will`))
        return
      }
      this.start(job)
    }
  }

  /** A retrying job comes due without a NOTIFY: the worker wakes then (the poll interval is a backstop). */
  private async wakeWhenDue(): Promise<void> {
    const secs = await this.queue.nextDue().catch(() => null)
    if (secs === null || this.stopping) return
    if (this.dueTimer !== null) clearTimeout(this.dueTimer)
    this.dueTimer = setTimeout(
      () => {
        this.dueTimer = null
        this.wake()
      },
      Math.min(Math.ceil(secs * 1000) + 10, this.options.pollMs),
    )
  }

  private start(job: Job): void {
    const problem = jobProblem(job)
    if (problem !== null) {
      // Written by hand, or by something else than enqueue: nothing of it is run (docs/contract.md §14.4).
      this.options.log(`job ${job.id}: not run, its row is not valid (${problem})`)
      this.track(this.end(job, { outcome: 'failed', error: `the job's row is not valid: ${problem}`.slice(0, 500) }).finally(() => this.wake()))
      return
    }
    const refusal = this.options.refuse?.(job) ?? null
    if (refusal !== null) {
      this.options.log(`job ${job.id}: not run, ${refusal}`)
      this.track(
        this.end(
          job,
          job.kind === 'resume' ? { outcome: 'paused', error: refusal.slice(0, 500) } : { outcome: 'failed', failed: true, error: refusal.slice(0, 500) },
        ).finally(() => this.wake()),
      )
      return
    }
    const existing = locateTask(this.options.layout, job.task_uuid)
    if (existing?.location === 'completed') {
      this.track(this.end(job, completedEnd(safeState(existing.dir), 'completed')))
      return
    }
    // A new job whose task exists already (an earlier attempt created it) continues it.
    const resume = job.kind === 'resume' || existing !== null
    this.track(this.prepare(job, resume))
  }

  /**
   * From the claim to the agent, holding a slot like a task does: a job cancelled since its
   * claim is not started, and neither is one cancelled during its `--repo` clone (the
   * repository is cloned first, into fleet.workspaces_dir/<uuid>, on the shared mount);
   * see docs/fleet.md#cancelling-a-job.
   */
  private async prepare(job: Job, resume: boolean): Promise<void> {
    const placeholder: Running = { job, child: null, stopped: false, lastLine: '' }
    this.running.set(claimKey(job), placeholder)
    await holdForTest('worker:claimed')
    if (await this.notToStart(job, resume, placeholder)) return
    let workspace = job.spec.workspace
    if (!resume && job.spec.repo !== undefined) {
      if (this.options.workspacesDir === null) {
        this.running.delete(claimKey(job))
        await this.end(job, { outcome: 'failed', error: 'the repository was not cloned: fleet.workspaces_dir is not set on this host' })
        return
      }
      workspace = join(this.options.workspacesDir, job.task_uuid)
      // A cancel during the clone (deliverCancels) stops it: a large repository takes minutes.
      placeholder.clone = new AbortController()
      try {
        await cloneWorkspace({
          url: job.spec.repo,
          ...(job.spec.ref !== undefined ? { ref: job.spec.ref } : {}),
          dir: workspace,
          credentials: this.options.cloneCredentials ?? [],
          signal: placeholder.clone.signal,
        })
        this.options.giveClone?.(workspace)
      } catch (err) {
        if (placeholder.clone.signal.aborted && (await this.notToStart(job, resume, placeholder))) return
        this.running.delete(claimKey(job))
        await this.end(job, { outcome: 'failed', failed: true, error: `the repository was not cloned: ${(err as Error).message}`.slice(0, 500) })
        return
      }
      if (await this.notToStart(job, resume, placeholder)) return
    }
    this.running.delete(claimKey(job))
    this.spawnTask(job, resume ? ['run', '--resume', job.task_uuid] : runArgs(job.task_uuid, job.spec, workspace), resume)
  }

  /**
   * True (and the slot freed, the job settled) when the claimed job must not start now: the
   * worker stopped (the job waits again as it was), an operator cancelled it (it ends
   * cancelled, its task untouched), or it is no longer this claim's. A database that does
   * not answer lets it start: a cancel then reaches the agent as it starts (deliverCancels).
   */
  private async notToStart(job: Job, resume: boolean, placeholder: Running): Promise<boolean> {
    const may = placeholder.stopped
      ? 'run'
      : await this.queue.mayStart(job, this.options.record.id).catch((err: Error) => {
          this.options.log(`job ${job.id}: cancel not looked at (${err.message}); starting it`)
          return 'run' as const
        })
    if (!placeholder.stopped && may === 'run') return false
    this.running.delete(claimKey(job))
    if (placeholder.stopped) await this.queue.release(job, this.options.record.id).catch(() => undefined)
    else if (may === 'gone') this.options.log(`job ${job.id}: no longer this worker's claim; not started`)
    else await this.end(job, { outcome: resume ? 'paused' : 'cancelled', error: 'cancelled before its agent started' })
    return true
  }

  /**
   * A job cancelled while its agent starts or runs (docs/fleet.md#cancelling-a-job): its task,
   * once in running/, gets the pause request `jobs cancel` writes; an agent that has not taken
   * its task yet is sent SIGTERM, and pauses the task at its first check, before any LLM request.
   */
  private async deliverCancels(): Promise<void> {
    if (![...this.running.values()].some((e) => (e.child !== null || e.clone !== undefined) && e.cancelAsked !== true)) return
    const claims = await this.queue.cancelledClaims(this.options.record.id).catch(() => [])
    for (const claim of claims) {
      const entry = this.running.get(`${claim.id}:${claim.attempts}`)
      if (entry === undefined || entry.cancelAsked === true) continue
      if (entry.child === null) {
        // Cloning: the clone is stopped, and the job ends cancelled (prepare).
        if (entry.clone !== undefined) {
          entry.cancelAsked = true
          entry.clone.abort()
          this.options.log(`job ${claim.id}: cancelled during its clone; the clone is stopped`)
        }
        continue
      }
      entry.cancelAsked = true
      const uuid = entry.job.task_uuid
      const where = locateTask(this.options.layout, uuid)
      if (where?.location === 'running') {
        try {
          appendInbox(where.dir, { kind: 'control', action: 'pause', sender: 'jobs cancel' })
          this.options.log(`job ${claim.id}: cancelled; its task ${uuid} is asked to pause`)
        } catch (err) {
          this.options.log(`job ${claim.id}: cancelled; the pause request was not written (${(err as Error).message})`)
        }
      } else if (
        where === null ||
        (where.location === 'paused' && entry.pausedState !== undefined && stateText(this.options.layout, uuid) === entry.pausedState)
      ) {
        signalGroup(entry.child, 'SIGTERM')
        this.options.log(`job ${claim.id}: cancelled as its agent starts; it pauses task ${uuid} before its first turn`)
      }
    }
  }

  private spawnTask(job: Job, args: string[], resume: boolean): void {
    // What the paused task's state.json says before its agent takes it: unchanged after, the agent never began.
    const pausedState = resume ? stateText(this.options.layout, job.task_uuid) : null
    const child = this.launcher.launch([...args, '--log-format', 'json'])
    const entry: Running = { job, child, stopped: false, lastLine: '', ...(resume ? { pausedState } : {}) }
    this.running.set(claimKey(job), entry)
    this.launcher.prestart()
    this.options.log(`job ${job.id}: ${resume ? 'resuming' : 'starting'} task ${job.task_uuid} (pid ${child.pid})`)
    child.stdin?.on('error', () => undefined)
    child.stdin?.end(resume ? '' : (job.spec.task ?? ''))
    const relay = this.relayFor(child)
    child.stderr?.on('data', (chunk: Buffer) => {
      relay(chunk)
      // What explains an end is the last problem it reported, not its last progress line.
      for (const line of chunk.toString().split('\n')) entry.lastLine = problemIn(line) ?? entry.lastLine
    })
    child.on('error', (err) => (entry.lastLine = err.message))
    child.on('close', (code, signal) => {
      this.running.delete(claimKey(job))
      this.launcher.prestart()
      const task = taskSnapshot(this.options.layout, job.task_uuid, pausedState)
      const verdict = closeVerdict(job, resume, { code, signal, stopped: entry.stopped, lastLine: entry.lastLine }, task, {
        maxAttempts: this.options.maxAttempts ?? 3,
        retry: this.options.retry,
      })
      if (verdict.kind === 'hand_back') {
        const { why, error, last, maxAttempts: max } = verdict
        this.track(
          this.pause(verdict.waitMs)
            .then(() => this.queue.retry(job, this.options.record.id, max, last))
            .then((again) =>
              this.options.log(
                `job ${job.id}: ${again ? `its agent ${why} before task ${job.task_uuid} began; handed back to the queue (attempt ${job.attempts} of ${max})` : `${last.outcome}: ${error}`}`,
              ),
            )
            .catch((err: Error) => this.options.log(`job ${job.id} not handed back (${err.message}): a reaper will`))
            .finally(() => this.wake()),
        )
        return
      }
      if (verdict.kind === 'release') {
        this.options.log(`job ${job.id}: stopped before task ${job.task_uuid} began; handed back to the queue`)
        this.track(
          this.queue
            .release(job, this.options.record.id)
            .catch((err: Error) => this.options.log(`job ${job.id} not handed back (${err.message}): a reaper will`)),
        )
        return
      }
      if (verdict.kind === 'elsewhere') {
        this.options.log(`job ${job.id}: task ${job.task_uuid} is run by another process; the job ends when that run does`)
        this.elsewhere.set(job.id, job)
        this.maybeFinish()
        this.wake()
        return
      }
      if (verdict.kind === 'left_running') {
        this.options.log(`job ${job.id}: task ${job.task_uuid} was left in running/ (${verdict.detail}); watch-locks recovers it`)
        this.maybeFinish()
        this.wake()
        return
      }
      this.track(this.end(job, verdict.end).finally(() => this.wake()))
    })
  }

  private relayFor(child: ChildProcess): (chunk: Buffer) => void {
    return this.options.relay?.(child.pid) ?? ((chunk) => void process.stderr.write(chunk))
  }

  /**
   * Whether the next warm child may start: while a core is left over by the tasks
   * running (and the worker is not stopping). A child's start-up (node and the bundle) is
   * ~250 ms of CPU: started ahead beside as many tasks as there are cores, it only takes
   * that CPU from them, and its job would start no sooner (a job claimed then starts its
   * child at once, as `run`); the last one of a busy spell would wait unused meanwhile.
   * It is started when a task ends and the tasks left leave a core.
   */
  private coreLeft(): boolean {
    return !this.stopping && this.running.size < (this.options.cores ?? availableParallelism())
  }

  private settleElsewhere(): void {
    for (const [id, job] of this.elsewhere) {
      const end = endedElsewhere(this.options.layout, job)
      if (end === null) continue
      this.elsewhere.delete(id)
      this.track(this.end(job, end))
    }
  }

  private track(p: Promise<void>): void {
    this.settling.add(p)
    void p.finally(() => {
      this.settling.delete(p)
      this.maybeFinish()
    })
  }

  /** Ends the job in PostgreSQL, retrying while it is away (a job left running would wait for a reaper). */
  private async end(job: Job, end: JobEnd): Promise<void> {
    const resume = end.resume === true
    const outcome = { ...end, resume }
    for (let attempt = 0; ; attempt++) {
      try {
        const ended = await this.queue.finish(job, this.options.record.id, outcome)
        this.logEnd(job, end, ended)
        return
      } catch (err) {
        if (this.stopping) {
          // A stop ends every wait (docs/contract.md §14.5): the job stays claimed by this stopped worker, and watch-locks settles it
          // from what its task became once the database is back (docs/contract.md §14.3), its resume queued as this worker would have.
          this.options.log(`job ${job.id} not ended (${(err as Error).message}); stopping: watch-locks settles it once the database is back`)
          return
        }
        if (attempt % 10 === 0) this.options.log(`job ${job.id} not ended yet (${(err as Error).message}); retrying`)
        await this.pause(Math.min(100 * 2 ** attempt, 5_000))
      }
    }
  }

  /** A job's end in the log: a retry or a wait is a warning, a failed job an error, anything else news. */
  private logEnd(job: Job, end: JobEnd, ended: Ended | null): void {
    const o = this.options
    if (ended === null) return o.log(`job ${job.id}: ${end.outcome} (no longer this worker’s job)`)
    if (ended.wait !== undefined) {
      const until = end.wait?.until ?? 'its reset'
      return (o.warn ?? o.log)(
        `job ${job.id}: ${end.outcome}; waits until ${until} (${ended.wait}${end.wait?.cap ? ` ${end.wait.cap}` : ''}; no attempt spent, its slot free meanwhile): ${end.error ?? ''}`,
      )
    }
    if (ended.state === 'retrying') return (o.warn ?? o.log)(`job ${job.id}: ${end.outcome}; retrying in ${ended.retry_in?.toFixed(1)}s (${end.error ?? ''})`)
    if (ended.state === 'failed') return (o.error ?? o.log)(`job ${job.id}: ${end.outcome} (job failed${end.error ? `: ${end.error}` : ''})`)
    o.log(`job ${job.id}: ${end.outcome}${ended.resumed ? ', its resume queued' : ` (job ${ended.state})`}`)
  }

  /** Waits `ms`, or less when the worker is stopped meanwhile. */
  private pause(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer)
        this.wakeOnStop.delete(done)
        resolve()
      }
      const timer = setTimeout(done, ms)
      if (this.stopping) done()
      else this.wakeOnStop.add(done)
    })
  }

  private maybeFinish(): void {
    if (!this.stopping || this.running.size > 0 || this.settling.size > 0 || this.finished === null) return
    const finished = this.finished
    this.finished = null
    void (async () => {
      await this.listener.stop()
      // A claim that was on its way as the stop came may have made it idle again.
      await this.queue.leaveIdle(this.idle.channel).catch(() => undefined)
      await markStopped(this.options.pool, this.options.record.id).catch(() => undefined)
      finished()
    })()
  }
}

function claimKey(job: Job): string {
  return `${job.id}:${job.attempts}`
}
