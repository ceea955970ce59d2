import type { LlmClient } from '../llm/client.js'
import { killedText } from '../operations/reaper.js'
import { appendInbox } from '../storage/task/inbox.js'
import type { TaskHandle } from '../storage/task/handle.js'
import type { ToolRegistry } from '../tools/registry.js'
import { startsFromText } from '../workspace/task-tree.js'
import type { Ending } from './ending.js'
import { inheritanceMessage } from './inheritance.js'
import type { Inheritance } from './inheritance.js'
import type { RunLog } from './log.js'
import { taskSystemPrompt } from './prompt.js'
import { repairResumed } from './repair.js'
import type { RecordedFinish } from './repair.js'
import type { RunEnv, RunStart } from './run-start.js'
import type { RunSettings } from './settings.js'

// A taken task made ready for its loop: a new one's first messages, a resumed one's repair, and the line that says which.

/** A new task: its first messages written, its status processing, and the line that says where it runs. */
export async function beginNew(
  handle: TaskHandle,
  run: RunEnv,
  start: Extract<RunStart, { kind: 'new' }>,
  inheritance: Inheritance | null,
  client: Pick<LlmClient, 'model' | 'server'>,
  log: RunLog,
  repository: { environment: string | null; instructions: string | null } = { environment: null, instructions: null },
): Promise<void> {
  const { config, settings } = run
  begin(handle, settings, start, inheritance, config.context.inheritance.max_summary_tokens, repository.instructions)
  // What the repository's environment holds (docs/environments.md#what-the-agent-is-told): a note, never setup's output.
  if (repository.environment !== null) handle.addMessage({ role: 'user', content: repository.environment })
  await handle.setStatus('processing', 'started')
  log.info(
    `started ${handle.metadata.task_type}${handle.metadata.task_identifier ? ` ${handle.metadata.task_identifier}` : ''} in ${settings.workspace} (${client.model} at ${client.server}, dir ${handle.dir})`,
  )
  // What it works on, said once at start (docs/delivery.md#what-a-task-starts-from).
  const from = handle.metadata.run?.starts_from
  if (from !== undefined) log.info(startsFromText(from))
  if (inheritance)
    log.info(
      `inherited the ${inheritance.summary_source === 'final_summary' ? 'final summary' : 'last summary'} of task ${inheritance.uuid} (${inheritance.status})`,
    )
}

/** A resumed task: what its dead agent left half-done repaired, and said; returns its recorded finish call, if any. */
export async function beginResumed(
  handle: TaskHandle,
  tools: ToolRegistry,
  client: Pick<LlmClient, 'model' | 'server'>,
  log: RunLog,
): Promise<RecordedFinish | null> {
  const repaired = await repairResumed(handle, tools)
  log.info(
    `resumed at turn ${handle.state.turns ?? 0} (${client.model} at ${client.server}, dir ${handle.dir})${repaired.answered ? `; ${repaired.answered} unanswered tool call(s) answered as aborted` : ''}${repaired.rebuilt ? '; current.jsonl rebuilt' : ''}${killedText(handle.stoppedCommands, 'the dead agent')}`,
  )
  return repaired.finished
}

/**
 * A resumed task killed after it answered (during its final summary) only finishes its ending: the
 * answer state.json holds, else the finish call its agent made before state.json took it; else null.
 */
export function answeredEnding(handle: TaskHandle, finished: RecordedFinish | null): Ending | null {
  return answeredInState(handle) ?? (finished ? { kind: 'completed' as const, answer: finished.summary, finishStatus: finished.status } : null)
}

/**
 * The first messages of a new task: system prompt, task statement, inherited context.
 * A chat task starts with the hidden session marker in its inbox, and its first
 * message (if any) goes there too, to be answered like every other.
 */
function begin(
  handle: TaskHandle,
  settings: RunSettings,
  start: Extract<RunStart, { kind: 'new' }>,
  inheritance: Inheritance | null,
  inheritTokens: number,
  instructions: string | null,
): void {
  handle.addMessage({ role: 'system', content: taskSystemPrompt(settings, instructions) })
  if (settings.chat) {
    appendInbox(handle.dir, { kind: 'message', sender: 'ctxagent', content: `[chat session started by ${start.user}]`, visible: false })
    if (start.source.text.trim() !== '') appendInbox(handle.dir, { kind: 'message', sender: start.user, content: start.source.text })
  } else {
    handle.addMessage({ role: 'user', content: start.source.text })
  }
  if (inheritance) handle.addMessage({ role: 'user', content: inheritanceMessage(inheritance, inheritTokens) })
}

/** The ending of a task whose state.json already holds its final answer (settle got that far before a kill), else null. */
function answeredInState(handle: TaskHandle): Ending | null {
  const { final_answer: answer, finish_status: status, session } = handle.state
  if (typeof answer !== 'string') return null
  return { kind: 'completed', answer, finishStatus: status ?? null, ...(session ? { sessionEnded: true as const } : {}) }
}
