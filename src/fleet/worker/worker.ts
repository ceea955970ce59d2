import { randomUUID } from 'node:crypto'
import { availableParallelism } from 'node:os'
import { AgentLauncher, signalGroup } from './agent-launcher.js'
import { deliverCancels } from './cancel-delivery.js'
import type { IdleChannel, Job } from '../queue/job.js'
import { relayOf } from './job-child.js'
import type { JobContext, Running } from './job-context.js'
import { jobLife } from './job-life.js'
import { finishJob } from './job-settle.js'
import { JobQueue } from '../queue/job-queue.js'
import { JobListener } from '../queue/listener.js'
import type { WakeFrom } from '../queue/listener.js'
import { heartbeat, markStopped } from './registry.js'
import { endedElsewhere } from '../queue/task-outcome.js'
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
  /** Aborted by stop(): the waits of its jobs' steps end with it. */
  private readonly stopper = new AbortController()
  private pumping = false
  private again = false
  /** A cancel may have come for a job whose agent starts or runs (deliverCancels). */
  private cancelsDue = false
  private timers: NodeJS.Timeout[] = []
  private finished: (() => void) | null = null
  /** Its jobs' lives (jobLife) and settlements under way: a stop ends once they have. */
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
  /** What each job's steps are given (job-context.ts): values, no way back into this worker. */
  private readonly jobs: JobContext

  constructor(private readonly options: WorkerOptions) {
    this.queue = new JobQueue(options.pool)
    // Taken for gone (passed over by the jobs that wake one worker) after three heartbeats missed.
    this.idle = { channel: `ctxagent_w_${randomUUID().replaceAll('-', '')}`, staleSeconds: (3 * options.heartbeatMs) / 1000 }
    this.listener = new JobListener(options.url, this.idle.channel, (from) => this.woken(from))
    const { running, stopper } = this
    const cores = options.cores ?? availableParallelism()
    this.launcher = new AgentLauncher({
      command: options.command,
      warmChild: options.warmChild,
      niceness: options.agentNiceness ?? 0,
      log: options.log,
      relayFor: (child) => relayOf(options, child),
      // A child's start-up (node and the bundle) is ~250 ms of CPU: started ahead beside as many tasks as there
      // are cores, it only takes that CPU from them, and its job would start no sooner (a job claimed then starts
      // its child at once, as `run`). Started while every slot is taken, it waits for a job that cannot be claimed
      // yet, and its start-up is taken from the task that just began (docs/fleet.md#dispatch-latency). So the next
      // warm child starts while a core is left over by the tasks running and a slot is free for its job.
      canStart: () => !stopper.signal.aborted && running.size < Math.min(cores, options.record.concurrency),
    })
    this.jobs = { options, queue: this.queue, launcher: this.launcher, slots: running, stop: stopper.signal }
  }

  private get stopping(): boolean {
    return this.stopper.signal.aborted
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
    this.stopper.abort()
    for (const timer of this.timers) clearInterval(timer)
    if (this.dueTimer !== null) clearTimeout(this.dueTimer)
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

  /** Claims while a slot is free, and starts each job claimed on its life (job-life.ts). */
  private async pump(): Promise<void> {
    this.settleElsewhere()
    if (this.cancelsDue) {
      this.cancelsDue = false
      await deliverCancels(this.jobs)
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
      // Synchronously up to its slot (prepareJob): the next turn of this loop sees it taken.
      const claimed = job
      const life = jobLife(this.jobs, claimed).then((settled) => {
        if (settled === 'watch') this.elsewhere.set(claimed.id, claimed)
      })
      // Whatever it became, its slot is free now: the worker claims again.
      this.track(life.finally(() => this.wake()))
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

  private settleElsewhere(): void {
    for (const [id, job] of this.elsewhere) {
      const end = endedElsewhere(this.options.layout, job)
      if (end === null) continue
      this.elsewhere.delete(id)
      this.track(finishJob(this.jobs, job, end))
    }
  }

  private track(p: Promise<void>): void {
    this.settling.add(p)
    void p.finally(() => {
      this.settling.delete(p)
      this.maybeFinish()
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
