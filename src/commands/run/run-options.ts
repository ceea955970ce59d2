import { UsageError } from '../../errors.js'
import type { RunFlags } from '../../run/settings.js'
import { isUuid } from '../../storage/fs/layout.js'

/** What `ctxagent run`'s flags came to (commander's parse), before any check. */
export interface RunOptions extends Omit<RunFlags, 'inherit'> {
  inherit: boolean
  uuid?: string
}

/**
 * The first combination of flags `run` refuses, or null: a pure check of the options alone,
 * made before anything is read or written (docs/contract.md §9), so that a table test pins
 * it without starting the binary.
 */
export function runOptionsProblem(opts: RunOptions): UsageError | null {
  const given = [opts.task, opts.taskFile, opts.resume, opts.github, opts.gitlab].filter((x) => x !== undefined).length
  if (given === 0 && !opts.chat)
    return new UsageError(
      'no task given',
      'pass --task TEXT, --task-file FILE (- for standard input), --github owner/repo#N, --gitlab group/project#N or --resume <uuid>, or start a --chat',
    )
  if (given > 1) return new UsageError('--task, --task-file, --github, --gitlab and --resume exclude each other', 'give one of them')
  if (opts.chat && (opts.github !== undefined || opts.gitlab !== undefined))
    return new UsageError('--chat starts a local session; it excludes --github and --gitlab', 'give one of them')
  if (opts.chat && opts.resume !== undefined) return new UsageError('--chat starts a new session; a resumed chat task stays a chat', 'drop --chat')
  if (opts.deliver !== undefined && opts.resume !== undefined)
    return new UsageError('--deliver is chosen when a task starts; a resumed task delivers as it was started to', 'drop --deliver')
  if (opts.followUpFile !== undefined && opts.github === undefined && opts.gitlab === undefined)
    return new UsageError('--follow-up-file follows up a pull or merge request', 'give --github or --gitlab too')
  if (opts.uuid !== undefined && (opts.resume !== undefined || !isUuid(opts.uuid)))
    return new UsageError('--uuid names a new task and must be a uuid', 'drop --uuid')
  return null
}
