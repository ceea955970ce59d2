import type { WindowMessage } from '../storage/format/records.js'

export const PRUNED = '[pruned]'
const BLOB = /^\[blob:[^\]\s]+\]/

type Prunable = WindowMessage & { reasoning?: unknown; reasoning_content?: unknown }

/** What a request keeps in full: the tool output of the last user turns and of the last tool rounds. */
export interface PrunePolicy {
  /** Seed 001: tool output older than the last N user turns is pruned (0: none protected). */
  protectedTurns: number
  /**
   * Tool output older than the last N assistant tool rounds (an assistant message with
   * tool calls, and its results) is pruned too: a task given once and worked on for
   * hundreds of rounds has one user turn, which would otherwise protect everything.
   */
  protectedToolRounds: number
  /**
   * The boundary moves in steps of this many tool rounds (1: every round). Between steps
   * each request is the previous one plus its new messages, byte for byte, which a
   * provider's prefix cache serves; at a step the outputs of `stepRounds` rounds are
   * pruned at once. Default 1.
   */
  stepRounds?: number
}

/**
 * Per-request pruning (docs/contract.md §5, plus tool rounds), a pure function over a
 * copy of the request: tool results and reasoning older than either boundary become
 * `[pruned]` (a leading `[blob:<id>]` reference is kept); user and assistant text and
 * tool calls stay. The last round's results (those the model has not seen yet) are
 * always kept. Idempotent; the files on disk never change.
 */
export function prune(messages: readonly WindowMessage[], policy: PrunePolicy | number): WindowMessage[] {
  const boundary = pruneBoundary(messages, policy)
  return messages.map((message, i) => (i >= boundary ? message : pruned(message as Prunable)))
}

/**
 * Index of the first message prune keeps whole (those before it are pruned). Appending
 * messages never moves it back.
 */
export function pruneBoundary(messages: readonly WindowMessage[], policy: PrunePolicy | number): number {
  const {
    protectedTurns,
    protectedToolRounds,
    stepRounds = 1,
  } = typeof policy === 'number' ? { protectedTurns: policy, protectedToolRounds: Number.POSITIVE_INFINITY } : policy
  const eager = Math.max(turnBoundary(messages, protectedTurns), roundBoundary(messages, Math.max(1, protectedToolRounds)))
  return stepRounds > 1 ? stepPoint(messages, eager, stepRounds) : eager
}

/**
 * The boundary in steps (hysteresis): the start of the latest tool round at or before
 * `eager` whose number, counted from the window's start, is a multiple of `step`. Whole
 * rounds accumulate from the protected number up to that plus step - 1, then the oldest
 * `step` of them are pruned at once. A function of the window alone: a resumed task, whose
 * window is rebuilt from current.jsonl, prunes its first request as the last one before
 * the pause; a compaction (a new window) starts the count again.
 */
function stepPoint(messages: readonly WindowMessage[], eager: number, step: number): number {
  let point = 0
  let rounds = 0
  for (let i = 0; i <= eager && i < messages.length; i++) {
    const m = messages[i]
    if (m?.role !== 'assistant' || (m.tool_calls?.length ?? 0) === 0) continue
    if (rounds % step === 0) point = i
    rounds++
  }
  return point
}

/** A message as prune gives it before the boundary (the same object each time). */
export function prunedMessage(message: WindowMessage): WindowMessage {
  return pruned(message as Prunable)
}

/** Index of the oldest protected user turn; 0 (everything recent) when there are fewer. */
function turnBoundary(messages: readonly WindowMessage[], protectedTurns: number): number {
  if (protectedTurns === 0) return messages.length
  let seen = 0
  for (let i = messages.length - 1; i >= 0; i--) {
    if (messages[i]?.role === 'user' && ++seen === protectedTurns) return i
  }
  return 0
}

/** Index of the oldest protected tool round (its assistant message); 0 when there are fewer rounds. */
function roundBoundary(messages: readonly WindowMessage[], rounds: number): number {
  if (!Number.isFinite(rounds)) return 0
  let seen = 0
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i]
    if (m?.role === 'assistant' && (m.tool_calls?.length ?? 0) > 0 && ++seen === rounds) return i
  }
  return 0
}

/** Each message's pruned copy, made once: the same object every turn, so its estimate (and more) is reused. */
const prunedCopies = new WeakMap<object, WindowMessage>()

function pruned(m: Prunable): WindowMessage {
  const known = prunedCopies.get(m)
  if (known !== undefined) return known
  const out = prunedCopy(m)
  prunedCopies.set(m, out)
  return out
}

function prunedCopy(m: Prunable): WindowMessage {
  let out: Prunable = m
  if (m.role === 'tool' && !m.content.startsWith(PRUNED)) {
    // Seed 001: `[pruned] [blob:<id>]`, which the inspect tool reads again.
    const blob = BLOB.exec(m.content)?.[0]
    const stub = blob ? `${PRUNED} ${blob}` : PRUNED
    if (m.content !== stub) out = { ...m, content: stub }
  }
  for (const field of ['reasoning', 'reasoning_content'] as const) {
    if (typeof out[field] === 'string' && out[field] !== PRUNED) out = { ...out, [field]: PRUNED }
  }
  return out
}
