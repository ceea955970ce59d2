import { spawn } from 'node:child_process'
import { chmodSync, existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { NO_CONFIG } from '../config/locate.js'
import type { Config } from '../config/schema.js'
import { CtxError } from '../errors.js'
import { taskBill } from '../operations/tokens.js'
import { packageRoot } from '../package-root.js'
import type { Layout } from '../storage/fs/layout.js'
import { locateTask } from '../storage/fs/layout.js'
import { readOverview } from '../storage/task/reader.js'
import { taskRepository, trialRoot } from './environment.js'
import { judge } from './judge.js'
import type { Trial } from './report.js'
import { recordEnded } from './store.js'
import type { EndedAgent, VariantSpec } from './store.js'
import type { EvalTask } from './suite.js'
import { startingTree } from './workspace.js'
import { environmentStore } from '../workspace/environment/prepare.js'

export interface TrialInput {
  task: EvalTask
  variant: VariantSpec
  run: number
  /** Where the trial's workspace is made (outside the task tree: the sandbox hides the tree). */
  workRoot: string
  mirrors: string
  layout: Layout
  /** The operator's config (the check's sandbox); the variant's own config file is the agent's. */
  config: Config
  /** The operator's config file (null: none), the agent's when the variant names none. */
  configFile: string | null
  /** Pricing for the trial's cost: the variant's config's. */
  pricing: Config['pricing']
  /** Places the agent never sees: the suite (its tests and solutions), and the task tree and config as always. */
  hidden: readonly string[]
  signal: AbortSignal
  /** The agent's log passed on to this process's stderr as it comes (a fleet job's: its worker reads it). */
  relay?: boolean
}

/**
 * One trial (docs/eval.md#a-trial): the task's starting tree in a new workspace; the agent
 * as an ordinary ctxagent task (`ctxagent run`, delivery off, no inheritance), which never
 * sees the suite; then the hidden files copied in and the check run in the sandbox.
 * `ended`: its agent ended already in an earlier run of the eval (a stop came during its
 * check): only the check runs. null: the stop came first, no verdict (docs/eval.md#a-stop).
 */
export async function runTrial(input: TrialInput, evalDir: string, ended: EndedAgent | undefined): Promise<Trial | null> {
  const { task, variant } = input
  const again = ended === undefined ? null : endedAgain(input.layout, ended)
  if (again !== null) return verdictOf(input, again, ended?.workspace ?? '', Date.now() - (ended?.agent_ms ?? 0))
  // A fresh directory per attempt: an agent left running by an eval that was killed keeps writing its own.
  const workspace = await newWorkspace(input, `${input.run}-${Date.now().toString(36)}`)
  const statement = `${workspace}.statement`
  writeFileSync(statement, task.statement, { mode: 0o600 })
  const began = Date.now()
  const agent = await runAgent(input, newTaskArgs(input, workspace, statement, null)).finally(() => rmSync(statement, { force: true }))
  // A stop pauses the agent; one that came as it ended leaves the task to judge, below, by the same command again.
  if (input.signal.aborted && (agent.uuid === null || agent.status === 'paused')) return null
  // No task was made: `run` refused (a bad variant, a missing key). Every trial would; that is the eval's error, not a verdict.
  if (agent.uuid === null)
    throw new CtxError(`the agent of ${variant.name} on ${task.name} did not start: ${agent.said.slice(0, 300) || 'ctxagent run printed nothing'}`, {
      hint: 'fix the variant (ctxagent run with the same flags shows it); the trials already finished are kept',
    })
  if (agent.status !== 'paused')
    recordEnded(evalDir, {
      task: task.name,
      variant: variant.name,
      run: input.run,
      uuid: agent.uuid,
      status: agent.status,
      workspace,
      agent_ms: Date.now() - began,
    })
  return verdictOf(input, agent, workspace, began)
}

/** An earlier run's ended agent, when its task is still there as it ended (in completed/) with its workspace: null, else. */
function endedAgain(layout: Layout, ended: EndedAgent): AgentEnd | null {
  const ref = locateTask(layout, ended.uuid)
  if (ref?.location !== 'completed' || !existsSync(ended.workspace)) return null
  return { uuid: ended.uuid, status: ended.status, code: 0, said: '' }
}

/** The trial's new workspace below the work root, `leaf` its own directory, holding the task's starting tree. */
export async function newWorkspace(input: TrialInput, leaf: string): Promise<string> {
  const { task, variant } = input
  const workspace = join(input.workRoot, variant.name, task.name, leaf)
  // What an attempt that died before its agent began left there (a fleet job's workspace is named by its task).
  rmSync(workspace, { recursive: true, force: true })
  mkdirSync(join(input.workRoot, variant.name, task.name), { recursive: true, mode: 0o711 })
  await startingTree(task, workspace, input.mirrors, input.config)
  chmodSync(workspace, 0o755)
  return workspace
}

/**
 * The trial once its agent has ended: its bill and, unless its task never began (setup_failed, no task), the hidden check's
 * verdict; null when the stop (input.signal) ended the check: no verdict (docs/eval.md#a-stop).
 */
export async function verdictOf(input: TrialInput, agent: AgentEnd, workspace: string, began: number): Promise<Trial | null> {
  const { task, variant } = input
  const base = { task: task.name, variant: variant.name, run: input.run, uuid: agent.uuid }
  const bill = agent.uuid === null ? { usd: 0, tokens: 0, turns: 0 } : await billOf(input.layout, agent.uuid, input.pricing)
  const ended = { ...bill, duration_ms: Date.now() - began, finished_at: new Date().toISOString() }
  if (agent.status === 'setup_failed' || agent.uuid === null) return { ...base, ...ended, passed: false, status: agent.status, check: null }
  // The check runs in the image the agent's commands ran in (docs/eval.md#a-trial).
  const root = await trialRoot(input.layout, agent.uuid, input.config, input.hidden, workspace, environmentStore(input.config, input.layout.base))
  if (!root.ok)
    throw new CtxError(`the check of ${task.name} could not run: ${root.why}`, {
      hint: 'make the image the task ran in available again (docs/environments.md#an-image), then run the same command again',
    })
  if (input.signal.aborted) return null
  const check = await judge({ task, config: input.config, workspace, hidden: input.hidden, root: root.root, signal: input.signal })
  if (check.stopped) return null
  // A check that could not run is no verdict: the trial is not recorded, and the same command runs it again.
  if (check.error !== null)
    throw new CtxError(`the check of ${task.name} could not run: ${check.error}`, {
      hint: 'fix the sandbox (ctxagent doctor), then run the same command again',
    })
  return {
    ...base,
    ...ended,
    passed: check.passed,
    status: agent.status,
    check: { exit_code: check.exit_code, tail: check.tail },
  }
}

export interface AgentEnd {
  uuid: string | null
  status: string
  /** `run`'s exit code (null: killed by a signal). */
  code: number | null
  /** What `run` said last on stderr (its refusal, when it made no task). */
  said: string
}

/** `run`'s arguments for the trial's new task (as task `uuid` when given: a fleet job's). */
export function newTaskArgs(input: TrialInput, workspace: string, statement: string, uuid: string | null): string[] {
  const { variant, task } = input
  const repository = taskRepository(task)
  return [
    'run',
    ...(uuid === null ? [] : ['--uuid', uuid]),
    '--workspace',
    workspace,
    '--task-file',
    statement,
    '--deliver',
    'none',
    '--no-inherit',
    '--log-format',
    'json',
    // The operator's environments.<key> for the task's repository, as `eval check` matches it (docs/eval.md#a-trial).
    ...(repository === null ? [] : ['--environment-of', repository]),
    ...(task.timeoutMs === null ? [] : ['--timeout', `${Math.ceil(task.timeoutMs / 1000)}s`]),
    ...(variant.replay === null ? [] : ['--provider', 'replay', '--replay-from', join(variant.replay, `${task.name}.jsonl`)]),
    ...variant.flags,
  ]
}

/** `ctxagent <args>` (a `run`) for the trial with the variant's config, its outcome read from its --json line (a run that printed none: `error`). */
export function runAgent(input: TrialInput, runArgs: readonly string[]): Promise<AgentEnd> {
  const args = [
    join(packageRoot(), 'bin', 'ctxagent'),
    '--home',
    input.layout.base,
    ...configArgs(input.variant.config ?? input.configFile),
    '--json',
    ...runArgs,
  ]
  return new Promise((resolve) => {
    const child = spawn(process.execPath, args, {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, CTXAGENT_HIDDEN: input.hidden.join(':') },
    })
    let out = ''
    let err = ''
    child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d))
    child.stderr.setEncoding('utf8').on('data', (d: string) => {
      err = (err + d).slice(-4000)
      if (input.relay === true) process.stderr.write(d)
    })
    // A stop of the eval pauses its agents as a stop of `run` would (SIGINT); the trial is not recorded and runs again.
    const onAbort = (): void => void child.kill('SIGINT')
    input.signal.addEventListener('abort', onAbort, { once: true })
    child.on('close', (code) => {
      input.signal.removeEventListener('abort', onAbort)
      resolve(outcomeOf(out, err, code))
    })
  })
}

/** --config for the agent's run: the variant's file, else the operator's; none: no file (what the operator runs with). */
function configArgs(file: string | null): string[] {
  return ['--config', file ?? NO_CONFIG]
}

function outcomeOf(stdout: string, stderr: string, code: number | null): AgentEnd {
  const said = stderr.trim().split('\n').pop() ?? ''
  for (const text of [stdout, ...stderr.split('\n').reverse()]) {
    try {
      const doc = JSON.parse(text.trim()) as { uuid?: unknown; status?: unknown; message?: unknown }
      if (typeof doc.uuid === 'string' && typeof doc.status === 'string') return { uuid: doc.uuid, status: doc.status, said, code }
    } catch {
      // Not the outcome's line.
    }
  }
  return { uuid: null, status: 'error', said, code }
}

/** What the trial's task cost (its bill: turns, compactions and final summary, at the variant's prices), its tokens and turns. */
async function billOf(layout: Layout, uuid: string, pricing: Config['pricing']): Promise<{ usd: number; tokens: number; turns: number }> {
  const ref = locateTask(layout, uuid)
  if (ref === null) return { usd: 0, tokens: 0, turns: 0 }
  const overview = await readOverview(ref, 0)
  const state = overview.state
  if (state === null) return { usd: 0, tokens: 0, turns: 0 }
  return { usd: taskBill(overview.metadata.config?.model, state, pricing) ?? 0, tokens: state.total_tokens_used, turns: state.turns ?? 0 }
}
