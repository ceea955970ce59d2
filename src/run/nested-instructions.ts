import type { TaskHandle } from '../storage/task/handle.js'
import { instructionsOf } from '../storage/task/environment-view.js'
import type { TaskInstructions } from '../storage/task/state.js'
import { describeBase } from '../workspace/trusted-base.js'
import { directoriesOnTheWay, nestedMessage, readNested } from '../workspace/nested-instructions.js'
import type { NestedRead } from '../workspace/nested-instructions.js'
import type { RunLog } from './log.js'

/**
 * The nested AGENTS.md files of a task (docs/environments.md#nested-agentsmd): the directories
 * its tool calls worked in are noted as they run; after the reply's last tool result, the
 * files not given yet are given in one user message (earlier messages are never rewritten,
 * so every request's prefix stays the same) and recorded in state.json `instructions`.
 */
export class NestedInstructions {
  /** Directories looked at already (given, refused or without a file): each costs one git call at most. */
  private readonly looked = new Set<string>()
  private pending: string[] = []

  constructor(
    private readonly handle: TaskHandle,
    private readonly workspace: string,
    private readonly log: RunLog,
  ) {
    // A resumed task: what it was given before is not given again.
    for (const f of instructionsOf(handle.state)?.files ?? []) this.looked.add(f.path.replace(/\/?AGENTS\.md$/, ''))
  }

  /** A tool call that ran: the directories on the way to what it worked on. */
  see(tool: string, args: Record<string, unknown>, status: 'success' | 'error'): void {
    if (status !== 'success' || this.handle.state.trusted_base === undefined) return
    for (const dir of directoriesOnTheWay(this.workspace, tool, args)) if (!this.looked.has(dir) && !this.pending.includes(dir)) this.pending.push(dir)
  }

  /** Gives the files of the directories seen since the last call, once each. */
  async give(): Promise<void> {
    const base = this.handle.state.trusted_base
    const dirs = this.pending
    this.pending = []
    if (base === undefined || dirs.length === 0) return
    const record: TaskInstructions = instructionsOf(this.handle.state) ?? {
      source: 'commit',
      base: describeBase({ kind: 'commit', ...base }),
      files: [],
      refused: [],
    }
    let given = record.files.filter((f) => f.path.includes('/')).reduce((n, f) => n + Math.min(f.bytes, 32 * 1024), 0)
    const reads: Extract<NestedRead, { kind: 'given' }>[] = []
    const refused: string[] = []
    for (const dir of dirs) {
      this.looked.add(dir)
      const read = await readNested(this.workspace, base, dir, given).catch(
        (err: Error): NestedRead => ({ kind: 'refused', why: `${dir}/AGENTS.md: ${err.message}` }),
      )
      if (read.kind === 'refused') refused.push(read.why)
      if (read.kind !== 'given') continue
      reads.push(read)
      given += read.bytes
    }
    if (reads.length === 0 && refused.length === 0) return
    if (reads.length > 0) this.handle.addMessage({ role: 'user', content: nestedMessage(base, reads) })
    await this.handle.update({ instructions: { ...record, files: [...record.files, ...reads.map((r) => r.file)], refused: [...record.refused, ...refused] } })
    for (const r of reads)
      this.log.info(`project instructions: ${r.file.path} (${r.file.bytes} bytes${r.file.truncated ? ', cut' : ''}) from ${record.base}, given once`)
    for (const why of refused) this.log.warn(`project instructions not read: ${why}`)
  }
}
