import type { Command } from 'commander'
import { InvalidArgumentError } from 'commander'
import { createCommandEnv } from '../command-env.js'
import type { CommandEnv, GlobalOptions } from '../command-env.js'
import { parseDuration } from '../duration.js'
import { CtxError, UsageError } from '../errors.js'
import { explainSystemError } from '../system-errors.js'

/**
 * Wraps a command body: builds the CommandEnv from the global options (loading and
 * validating the config) and hands it the positional arguments and options.
 */
export function withEnv<O, A extends unknown[]>(body: (ctx: CommandEnv, opts: O, ...args: A) => Promise<void>) {
  return async (...received: unknown[]): Promise<void> => {
    const command = received[received.length - 1] as Command
    const opts = received[received.length - 2] as O
    const args = received.slice(0, -2) as A
    const globals = command.optsWithGlobals<GlobalOptions>()
    const ctx = await createCommandEnv(globals)
    // run and worker say it in their own log format (JSON lines).
    if (ctx.configNotice !== null && command.name() !== 'run' && command.name() !== 'worker') ctx.io.warn(ctx.configNotice)
    try {
      await body(ctx, opts, ...args)
      ctx.keepConfig()
    } catch (err) {
      throw explainSystemError(err, ctx.layout.base) ?? err
    }
  }
}

/** A duration option; more than 0 unless `zero` is allowed (cleanup's ages: 0 means "all of them now"). */
export function durationArg(what: string, options: { zero?: boolean } = {}) {
  return (value: string): number => {
    let ms: number
    try {
      ms = parseDuration(value, what)
    } catch (err) {
      const why = (err as UsageError).message.endsWith('longer than 100 years') ? 'must be shorter than 100 years' : (err as UsageError).hint
      throw new InvalidArgumentError(why ?? 'not a duration')
    }
    if (ms <= 0 && !(options.zero === true && ms === 0)) throw new InvalidArgumentError('must be more than 0')
    return ms
  }
}

/** --max-cost: an amount in USD above 0 (a finite one). */
export function usdArg(value: string): number {
  const n = Number(value)
  if (!/^\s*\d+(\.\d+)?\s*$/.test(value) || !(n > 0) || !Number.isFinite(n)) throw new InvalidArgumentError('must be an amount in USD above 0, like 2.50')
  return n
}

export function positiveIntArg(value: string): number {
  const n = Number(value)
  if (!/^\d+$/.test(value.trim()) || !Number.isSafeInteger(n) || n <= 0) throw new InvalidArgumentError('must be a positive whole number')
  return n
}

export function requireUuid(positional: string | undefined, flag: string | undefined): string {
  if (positional !== undefined && flag !== undefined && positional !== flag) {
    throw new UsageError('two different task ids given', 'give the uuid once, as an argument or with --uuid')
  }
  const id = positional ?? flag
  if (id === undefined) throw new UsageError('no task id given', 'give the task uuid (or a unique prefix of 8+ hex characters, or last)')
  return id
}

export interface StopSignal {
  /** Resolves on the first SIGINT or SIGTERM. */
  stopped: Promise<void>
  /** Stops listening (the signals get their default handling back). */
  dispose(): void
  /** The signal that came first; null: none yet. */
  which(): NodeJS.Signals | null
}

/** For long-running commands (watch-locks, cleanup --schedule, view --follow): Ctrl-C or a TERM ends them cleanly. */
export function stopSignal(): StopSignal {
  let dispose = () => undefined
  let by: NodeJS.Signals | null = null
  const stopped = new Promise<void>((resolve) => {
    const onSignal = (signal: NodeJS.Signals) => {
      by ??= signal
      resolve()
    }
    process.once('SIGINT', onSignal)
    process.once('SIGTERM', onSignal)
    dispose = () => {
      process.off('SIGINT', onSignal)
      process.off('SIGTERM', onSignal)
    }
  })
  return { stopped, dispose, which: () => by }
}

/** A command cut short by a stop: exit 130 after SIGINT, 143 after SIGTERM (docs/contract.md §9). */
export function stoppedError(by: NodeJS.Signals | null, message: string, hint: string): CtxError {
  return new CtxError(message, { exitCode: by === 'SIGTERM' ? 143 : 130, hint })
}

/** Waits `ms`: true when it passed, false when `stopped` came first. */
export async function pause(ms: number, stopped: Promise<void>): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined
  const next = new Promise<true>((resolve) => {
    timer = setTimeout(() => resolve(true), ms)
  })
  const passed = await Promise.race([next, stopped.then(() => false)])
  clearTimeout(timer)
  return passed
}

export function priorityArg(value: string): number {
  const n = Number(value)
  if (!/^-?\d+$/.test(value.trim()) || !Number.isSafeInteger(n) || Math.abs(n) > 1_000_000)
    throw new UsageError(`--priority '${value.slice(0, 20)}' is not a whole number`, 'give one from -1000000 to 1000000')
  return n
}
