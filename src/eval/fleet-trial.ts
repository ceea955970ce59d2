import { chmodSync, existsSync, mkdirSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { loadConfig } from '../config/load.js'
import type { Config } from '../config/schema.js'
import { CtxError, UsageError } from '../errors.js'
import { hiddenPaths } from '../run/sandbox-setup.js'
import type { Layout } from '../storage/fs/layout.js'
import { locateTask } from '../storage/fs/layout.js'
import { readMetadata } from '../storage/task/metadata.js'
import { readOverview } from '../storage/task/reader.js'
import { evalsDir, readSpec, recordTrial, trialRecorded } from './store.js'
import { readSuite } from './suite.js'
import { newTaskArgs, newWorkspace, runAgent, verdictOf } from './trial.js'
import type { AgentEnd, TrialInput } from './trial.js'

export interface FleetTrialInput {
  id: string
  task: string
  variant: string
  run: number
  /** The job's task: the agent runs (or resumes) as this task. */
  uuid: string
  /** Whose task it is (the job's user), for a new task's `run --user`; null: the worker's OS user. */
  user: string | null
  layout: Layout
  config: Config
  configFile: string | null
  env: NodeJS.ProcessEnv
  /** fleet.workspaces_dir (the shared mount), where the trial's workspace is made; null: the system's temporary directory. */
  workspacesDir: string | null
  /** The worker's stop: ends the hidden check at once (the agent gets the worker's signal itself). */
  signal: AbortSignal
}

/**
 * What `eval trial` did: the agent's exit code (the worker's verdict reads it, as a `run`'s), whether a verdict was
 * recorded, and whether the stop came before the verdict of a task that had ended (its job is handed back).
 */
export interface FleetTrialEnd {
  code: number | null
  recorded: boolean
  stopped: boolean
}

/**
 * One trial of an eval as a fleet job (docs/eval.md#in-the-fleet), on the worker's host: what the
 * agent runs with comes from the eval's eval.json in the tree (never the job's row); the agent runs
 * as the job's task (new: in a new workspace with the starting tree; paused: resumed where it was);
 * once its task has ended (not paused), the hidden check runs in the sandbox here and the trial is
 * recorded in evals/<id>/trials.jsonl, where `eval run` reads it. A trial recorded already is not run again.
 */
export async function fleetTrial(input: FleetTrialInput): Promise<FleetTrialEnd> {
  const dir = join(evalsDir(input.layout.base), input.id)
  if (!existsSync(join(dir, 'eval.json')))
    throw new UsageError(`no eval ${input.id} in the tree ${input.layout.base}`, 'queue its trials with ctxagent eval run --enqueue')
  const spec = readSpec(dir)
  const variant = spec.variants.find((v) => v.name === input.variant)
  const task = readSuite(spec.suite).tasks.find((t) => t.name === input.task)
  if (variant === undefined || task === undefined || input.run > spec.runs)
    throw new UsageError(
      `eval ${input.id} has no trial ${input.variant}/${input.task}/${input.run}`,
      'the suite on this host must be the one the eval was made from',
    )
  if (await trialRecorded(dir, { task: task.name, variant: variant.name, run: input.run })) return { code: 0, recorded: false, stopped: false }
  const pricing = variant.config === null ? input.config.pricing : loadConfig({ flag: variant.config, env: input.env, cwd: process.cwd() }).config.pricing
  const trial: TrialInput = {
    task,
    variant,
    run: input.run,
    workRoot: input.workspacesDir === null ? join(tmpdir(), 'ctxagent-eval', spec.id) : join(input.workspacesDir, 'eval', spec.id),
    mirrors: join(dir, 'mirrors'),
    layout: input.layout,
    config: input.config,
    configFile: input.configFile,
    pricing,
    // As `eval run` hides them (plan.ts): the suite and the variants' config files, besides the tree and the config.
    hidden: [
      ...hiddenPaths(input.layout.base, input.configFile, input.env),
      spec.suite,
      ...spec.variants.flatMap((v) => (v.config === null ? [] : [v.config])),
    ],
    // The worker's SIGTERM reaches the agent itself (one process group): a second signal passed on would stop it at once, left in running/.
    signal: new AbortController().signal,
    relay: true,
  }
  // The sandbox's user (as root: another user) must reach the workspaces below it, as plan.ts makes the local work root.
  mkdirSync(trial.workRoot, { recursive: true, mode: 0o711 })
  chmodSync(trial.workRoot, (statSync(trial.workRoot).mode & 0o777) | 0o011)
  const began = Date.now()
  const found = locateTask(input.layout, input.uuid)
  if (found?.location === 'running') throw new CtxError(`task ${input.uuid} is running elsewhere`, { exitCode: 4, hint: 'its job ends when that run does' })
  const workspace = found === null ? await newWorkspace(trial, input.uuid) : (readMetadata(found.dir).run?.workspace ?? '')
  const agent: AgentEnd =
    found === null
      ? await startAgent(trial, workspace, input.uuid, input.user)
      : found.location === 'paused'
        ? await runAgent(trial, ['run', '--resume', input.uuid, '--log-format', 'json'])
        : await endedAgent(input.layout, input.uuid)
  // A paused task (stopped, waiting out a limit, cancelled) has no verdict yet: its job resumes it, or an operator does.
  if (agent.uuid === null || agent.status === 'paused') return { code: agent.code, recorded: false, stopped: false }
  // The check, unlike the agent, is ended by this process: the worker's stop ends its sandbox at once.
  const verdict = await verdictOf({ ...trial, signal: input.signal }, agent, workspace, began)
  // The worker's stop during the check: no verdict; the job is handed back and its next claim judges the ended task (docs/eval.md#a-stop).
  if (verdict === null) return { code: agent.code, recorded: false, stopped: true }
  recordTrial(dir, verdict)
  return { code: agent.code, recorded: true, stopped: false }
}

async function startAgent(trial: TrialInput, workspace: string, uuid: string, user: string | null): Promise<AgentEnd> {
  const statement = `${workspace}.statement`
  writeFileSync(statement, trial.task.statement, { mode: 0o600 })
  return runAgent(trial, [...newTaskArgs(trial, workspace, statement, uuid), ...(user === null ? [] : ['--user', user])]).finally(() =>
    rmSync(statement, { force: true }),
  )
}

/** A task that ended already (its agent finished before its worker stopped, the check not run): its status, for the check now. */
async function endedAgent(layout: Layout, uuid: string): Promise<AgentEnd> {
  const ref = locateTask(layout, uuid)
  const state = ref === null ? null : (await readOverview(ref, 0)).state
  return { uuid, status: state?.status ?? 'error', said: '', code: 0 }
}
