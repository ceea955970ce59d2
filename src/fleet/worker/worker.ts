import { randomUUID } from 'node:crypto'
import { availableParallelism } from 'node:os'
import { AgentLauncher, signalGroup } from './agent-launcher.js'
import { deliverCancels } from './cancel-delivery.js'
import type { CancelHost } from './cancel-delivery.js'
import type { IdleChannel, Job, JobEnd } from '../queue/job.js'
import { relayOf, spawnJobChild } from './job-child.js'
import type { ChildHost, Running } from './job-child.js'
import { JobQueue } from '../queue/job-queue.js'
import { startJob } from './job-start.js'
import type { StartHost } from './job-start.js'
import { JobListener } from '../queue/listener.js'
import type { WakeFrom } from '../queue/listener.js'
import { heartbeat, markStopped } from './registry.js'
import type { CloseVerdict } from '../queue/task-outcome.js'
import { endedElsewhere } from '../queue/task-outcome.js'
import { finishJob } from './worker-end.js'
import type { EndHost } from './worker-end.js'
import type { WorkerOptions } from './worker-options.js'

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

  /** What the files that start, run and end its jobs are given of this worker (job-start.ts, job-child.ts, cancel-delivery.ts, worker-end.ts). */
  private readonly host: StartHost & ChildHost & CancelHost & EndHost

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
      relayFor: (child) => relayOf(options, child),
      canStart: () => this.coreLeft(),
    })
    this.host = {
      options,
      queue: this.queue,
      launcher: this.launcher,
      running: this.running,
      stopping: () => this.stopping,
      end: (job, end) => this.end(job, end),
      spawn: (job, args, resume) => this.spawnTask(job, args, resume),
      track: (settling) => this.track(settling),
      wake: () => this.wake(),
      pause: (ms) => this.pause(ms),
    }
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
      await deliverCancels(this.host)
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
      startJob(this.host, job)
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

  private spawnTask(job: Job, args: string[], resume: boolean): void {
    spawnJobChild(this.host, job, args, resume, (verdict) => this.closed(job, verdict))
  }

  /** What follows a job's child's close: the job handed back, watched while another process runs its task, left to watch-locks, or ended. */
  private closed(job: Job, verdict: CloseVerdict): void {
    if (verdict.kind === 'hand_back') {
      const { why, error, last, maxAttempts: max } = verdict
      this.track(
        this.pause(verdict.waitMs)
          .then(() => this.queue.retry(job, this.options.record.id, max, last))
          .then((handed) => {
            if (handed === 'gone') return
            const said =
              handed === 'waiting'
                ? `its agent ${why} before task ${job.task_uuid} began; handed back to the queue (attempt ${job.attempts} of ${max})`
                : handed === 'cancelled'
                  ? `cancelled before task ${job.task_uuid} began (its agent ${why})`
                  : `${last.outcome}: ${error}`
            this.options.log(`job ${job.id}: ${said}`)
          })
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

  /** Ends the job in PostgreSQL (worker-end.ts). */
  private end(job: Job, end: JobEnd): Promise<void> {
    return finishJob(this.host, job, end)
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
