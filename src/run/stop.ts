import { endIndexWaits } from '../storage/index/pg-patience.js'
import type { LlmClient } from '../llm/client.js'

/** The longest delay setTimeout holds (2^31 - 1 ms, ~24.8 days); a longer one fires at once. */
export const MAX_TIMER_MS = 2 ** 31 - 1

/** Why a task stops before it is done. */
export type StopReason = 'SIGINT' | 'SIGTERM' | 'pause' | 'timeout' | 'lost'

/**
 * One switch for everything in flight: the LLM request and running tools listen to
 * its signal, the loop checks its reason at every step. The first reason wins.
 */
export class StopController {
  private readonly controller = new AbortController()
  private stopReason: StopReason | null = null

  get signal(): AbortSignal {
    return this.controller.signal
  }

  get reason(): StopReason | null {
    return this.stopReason
  }

  stop(reason: StopReason): void {
    if (this.stopReason !== null) return
    this.stopReason = reason
    this.controller.abort(new Error(`stopped: ${reason}`))
  }

  /**
   * SIGINT/SIGTERM stop the task cleanly (it pauses); a second SIGINT exits at once
   * (the lock is reaped later). Returns the function that removes the handlers.
   */
  handleSignals(onSecond: () => void, onFirst?: (signal: 'SIGINT' | 'SIGTERM') => void): () => void {
    const first = (signal: 'SIGINT' | 'SIGTERM') => {
      if (this.stopReason !== null) return
      this.stop(signal)
      // Index writes the database cannot take now are left to reindex: the task pauses without waiting for it.
      endIndexWaits()
      onFirst?.(signal)
    }
    const onInt = () => {
      if (this.stopReason === 'SIGINT' || this.stopReason === 'SIGTERM') onSecond()
      else first('SIGINT')
    }
    const onTerm = () => first('SIGTERM')
    process.on('SIGINT', onInt)
    process.on('SIGTERM', onTerm)
    return () => {
      process.off('SIGINT', onInt)
      process.off('SIGTERM', onTerm)
    }
  }

  /** Stops with `timeout` after `ms` (the --timeout budget, which may be weeks); returns the canceller. */
  deadline(ms: number | null): () => void {
    if (ms === null) return () => undefined
    const at = Date.now() + Math.max(0, ms)
    let timer: NodeJS.Timeout
    // A timer holds at most ~24.8 days (a longer one fires at once): re-armed until the deadline.
    const arm = (): void => {
      const left = at - Date.now()
      if (left <= 0) return this.stop('timeout')
      timer = setTimeout(arm, Math.min(left, MAX_TIMER_MS))
      timer.unref()
    }
    arm()
    return () => clearTimeout(timer)
  }
}

/**
 * The client, with every request also ended by `stop` (for summaries, whose callers
 * pass no signal). One controller per request: the SDK adds a listener to the signal
 * it is given, and on a long-lived signal those would pile up.
 */
export function stoppableClient(client: LlmClient, stop: AbortSignal): LlmClient {
  return {
    get model() {
      return client.model
    },
    get server() {
      return client.server
    },
    get contextLength() {
      return client.contextLength
    },
    async chat(messages, options = {}) {
      const given = options.signal
      // Stopped already (a SIGTERM while a compaction read its window): nothing is asked of the LLM.
      if (stop.aborted) throw abortError(stop.reason)
      if (given?.aborted) throw abortError(given.reason)
      const request = new AbortController()
      const abort = () => request.abort(stop.reason)
      stop.addEventListener('abort', abort, { once: true })
      given?.addEventListener('abort', abort, { once: true })
      try {
        return await client.chat(messages, { ...options, signal: request.signal })
      } finally {
        stop.removeEventListener('abort', abort)
        given?.removeEventListener('abort', abort)
      }
    },
  }
}

/** The error a request stopped before it was sent ends with: the abort's reason when it is one. */
function abortError(reason: unknown): Error {
  return reason instanceof Error ? reason : new Error('stopped')
}
