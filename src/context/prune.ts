import type { WindowMessage } from '../storage/format/records.js'

export const PRUNED = '[pruned]'
const BLOB = /^\[blob:[^\]\s]+\]/

type Prunable = WindowMessage & { reasoning?: unknown; reasoning_content?: unknown }

/**
 * Per-request pruning (seed 001 Phase 1), a pure function over a copy of the
 * request: tool results and reasoning older than the last `protectedTurns` user
 * turns become `[pruned]` (a leading `[blob:<id>]` reference is kept); user and
 * assistant text and tool calls stay. Idempotent; the files on disk never change.
 */
export function prune(messages: readonly WindowMessage[], protectedTurns: number): WindowMessage[] {
  const userTurns: number[] = []
  messages.forEach((m, i) => {
    if (m.role === 'user') userTurns.push(i)
  })
  // Fewer user turns than protected: everything is recent.
  const boundary = protectedTurns === 0 ? messages.length : userTurns.length >= protectedTurns ? (userTurns[userTurns.length - protectedTurns] as number) : 0
  return messages.map((message, i) => {
    if (i >= boundary) return message
    const m = message as Prunable
    let out: Prunable = m
    if (m.role === 'tool' && m.content !== PRUNED) {
      const blob = BLOB.exec(m.content)?.[0]
      const pruned = blob ? `${blob} ${PRUNED}` : PRUNED
      if (m.content !== pruned) out = { ...m, content: pruned }
    }
    for (const field of ['reasoning', 'reasoning_content'] as const) {
      if (typeof out[field] === 'string' && out[field] !== PRUNED) out = { ...out, [field]: PRUNED }
    }
    return out
  })
}
