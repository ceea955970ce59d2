import { cpSync, mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseConfig } from '../config/load.js'
import { describeSandbox } from '../tools/sandbox.js'
import { giveWorkspace, sandboxIdentity } from '../tools/sandbox/identity.js'
import type { Config } from '../config/schema.js'
import { readJsonl } from '../storage/format/jsonl.js'
import { appendInbox } from '../storage/task/inbox.js'
import { Layout, resolveTask } from '../storage/fs/layout.js'
import { ensureLayout } from '../storage/task/lifecycle.js'
import type { TaskEnv } from '../storage/task/env.js'
import { SqliteStore } from '../storage/index/store.js'
import { packageRoot } from '../package-root.js'
import { runTask } from './run-task.js'
import type { Outcome } from './outcome.js'
import { newRunSettings } from './settings.js'

export interface DemoResult {
  uuid: string
  home: string
  workspace: string
  /** Assistant turns in the recording, and the turn after which the demo paused. */
  turns: number
  pausedAt: number
  first: Outcome
  second: Outcome
}

/**
 * The settings of the demo: the bundled recording replayed with a small context,
 * so that the window is compacted several times in 36 turns, and the shell allowed
 * (the recording runs the project's tests). Nothing from the user's config applies.
 */
function demoConfig(home: string, recording: string): Config {
  const config = parseConfig('', 'demo')
  config.context.base_dir = home
  config.context.compression.keep_recent = 8
  // Requests are pruned by tool rounds, so they stay small: compacting every dozen rounds shows it in 36 turns.
  config.context.compression.max_rounds = 12
  config.llm.provider = 'replay'
  config.llm.replay.from = recording
  config.llm.replay.context_length = 10_000
  config.tools.shell = true
  return config
}

/**
 * `ctxagent demo` (docs/contract.md §12.8): the bundled coding session replayed end to end in a
 * temporary copy of the sample project, with no LLM and no network: paused half-way by
 * a real pause request through the task's inbox, resumed, and completed.
 */
export async function runDemo(options: { home: string | null; log: NodeJS.WriteStream; user: string }): Promise<DemoResult> {
  const root = packageRoot()
  const recording = join(root, 'demo', 'session.jsonl')
  const temp = mkdtempSync(join(tmpdir(), 'ctxagent-demo-'))
  const workspace = join(temp, 'workspace')
  // Timestamps kept, so that glob's newest-first order is the same on every run.
  cpSync(join(root, 'demo', 'project'), workspace, { recursive: true, preserveTimestamps: true })
  const home = options.home ?? join(temp, 'tasks')
  const config = demoConfig(home, recording)
  // The recording's commands (the sample project's tests) run in the sandbox where
  // bubblewrap works. Where it does not, they run without one, and the demo says so:
  // they are the bundled recording's fixed commands in a temporary copy, not a model's.
  const sandbox = describeSandbox(config.tools)
  if (!sandbox.ok) {
    config.tools.sandbox = 'none'
    options.log.write(
      `note: bubblewrap does not work here (${sandbox.detail.split(';')[0]}); the demo's recorded commands run without a sandbox. A real run with --allow-shell needs it (apt-get install bubblewrap), or tools.sandbox: none.\n`,
    )
  } else {
    // As root, its commands run as nobody (docs/security.md): the temporary copy is given to that user.
    giveWorkspace(workspace, sandboxIdentity(config.tools, workspace))
  }
  const { task, turns } = await readRecording(recording)
  const pausedAt = Math.floor(turns / 2)

  const layout = new Layout(home)
  const bare: TaskEnv = { layout, config, index: null, now: () => new Date(), warn: (m) => void options.log.write(`ctxagent: warning: ${m}\n`) }
  ensureLayout(bare)
  const index = SqliteStore.open(layout.db)
  try {
    const env: TaskEnv = { ...bare, index }
    const settings = newRunSettings(config, { inherit: false, workspace, allowShell: true }, workspace)
    const run = { env, config, settings, stderr: options.log, logFormat: 'text' as const, signals: false }
    const first = await runTask(
      {
        ...run,
        onTurn: (dir, n) => {
          if (n === pausedAt) appendInbox(dir, { kind: 'control', action: 'pause', sender: 'ctxagent demo' })
        },
      },
      {
        kind: 'new',
        source: { key: { task_source: 'local', owner: null, repo: 'invoice-demo', task_type: 'task', task_id: 'demo' }, text: task },
        user: options.user,
      },
    )
    if (first.status !== 'paused')
      throw new Error(`the demo expected the task to pause at turn ${pausedAt}, but it ended ${first.status}: ${first.error ?? ''}`)
    const second = await runTask(run, { kind: 'resume', ref: resolveTask(layout, first.uuid) })
    return { uuid: first.uuid, home: layout.base, workspace, turns, pausedAt, first, second }
  } finally {
    await index.close()
  }
}

/** The recording's task statement (its first user message) and how many assistant turns it has. */
async function readRecording(path: string): Promise<{ task: string; turns: number }> {
  let task: string | null = null
  let turns = 0
  for await (const item of readJsonl(path)) {
    if (!item.ok) continue
    const { role, content } = item.record
    if (role === 'user' && task === null && typeof content === 'string') task = content
    if (role === 'assistant') turns++
  }
  if (task === null || turns === 0) throw new Error(`${path} is not a recorded session (no task or no assistant turns)`)
  return { task, turns }
}
