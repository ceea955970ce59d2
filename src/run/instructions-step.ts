import type { TaskHandle } from '../storage/task/handle.js'
import { readInstructions } from '../workspace/instructions.js'
import type { TrustedBase } from '../workspace/trusted-base.js'
import type { RunLog } from './log.js'
import type { RunEnv } from './run-start.js'

/**
 * A new task's project instructions (docs/environments.md#project-instructions): recorded
 * in state.json and returned as the system prompt's last section, written once with the
 * task's first message so the prompt's prefix never changes between turns.
 */
export async function instructionsStep(run: RunEnv, handle: TaskHandle, log: RunLog, base: TrustedBase): Promise<string | null> {
  const read = await readInstructions(run.settings.workspace, base).catch((err: unknown) => {
    // An unreadable file is the repository's problem, not the task's: it goes on without it and says so.
    log.warn(`the project's instructions were not read: ${err instanceof Error ? err.message : String(err)}`)
    return null
  })
  // The commit, kept before the agent can touch the repository's refs: nested files are read there later (nested-instructions.ts).
  if (read?.base.kind === 'commit') await handle.update({ trusted_base: { commit: read.base.commit, ref: read.base.ref } })
  if (read === null || read.record === null) return null
  await handle.update({ instructions: read.record })
  for (const why of read.record.refused) log.warn(`project instructions not read: ${why}`)
  for (const f of read.record.files) log.info(`project instructions: ${f.path} (${f.bytes} bytes${f.truncated ? ', cut' : ''}) from ${read.record.base}`)
  return read.section
}
