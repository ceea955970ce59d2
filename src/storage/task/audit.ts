import { existsSync } from 'node:fs'
import { appendShared } from '../format/jsonl.js'
import type { Layout } from '../fs/layout.js'

export interface AuditEntry {
  ts: string
  os_user: string
  command: string
  /** null for a command that read every task (reindex). */
  uuid: string | null
  /**
   * What happened, when a command writes more than one line or did not do what it was
   * asked: `start` and `end` (run), `refused` (unlock of a live task), `forced` (unlock --force).
   */
  event?: 'start' | 'end' | 'refused' | 'forced'
  /** With `end`: the task's status; with `refused`: why. */
  detail?: string
  /** An action taken from `ctxagent serve`'s page or API, by the signed-in operator named here. */
  via?: 'serve'
  operator?: string
}

/**
 * Records who read or changed which task (docs/contract.md §8) in <base>/audit.jsonl (0600).
 * Nothing is recorded where no base directory exists yet: a read of nothing
 * must not create one.
 */
export function audit(layout: Layout, entry: AuditEntry): void {
  if (!existsSync(layout.base)) return
  appendShared(layout.audit, entry)
}
