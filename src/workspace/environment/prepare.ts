import { utimesSync } from 'node:fs'
import { join } from 'node:path'
import type { Config } from '../../config/schema.js'
import { secretValues } from '../../config/secrets.js'
import { installSecrets } from '../../storage/format/mask.js'
import type { TaskEnvironment } from '../../storage/task/state.js'
import { planSandbox } from '../../tools/sandbox.js'
import { describeBase } from '../trusted-base.js'
import type { TrustedBase } from '../trusted-base.js'
import { linkOnTheWay, privateCopy, present } from './checkout.js'
import { resolveEnvironment } from './definition.js'
import type { Environment } from './definition.js'
import { runScript } from './sandboxed.js'
import { obtainImage } from './image.js'
import { obtainEntry } from './setup.js'
import type { CacheResult } from './setup.js'

/*
 * A task's environment made ready before its agent's first request (docs/environments.md):
 * its definition read from the trusted base, setup's result found in the cache (or setup
 * run once for its key), a private copy restored into the checkout, maintenance run
 * offline. The same step for `run` on one host and a fleet's worker (whose agent is a
 * `run`), and for `env prepare`.
 */

export const MAINTENANCE_TIMEOUT_MS = 10 * 60_000

/** What a task records of its environment: state.json `environment` (docs/contract.md §16.3). */
export type EnvironmentRecord = TaskEnvironment

export type Prepared =
  | { kind: 'none' }
  /** `root`: the image's root file system the task's commands run in (docs/environments.md#an-image), or null: the host's. */
  | { kind: 'ready'; record: EnvironmentRecord; environment: Environment; root: string | null }
  | { kind: 'failed'; record: EnvironmentRecord }
  /** The task's stop came during setup or maintenance: their processes are ended, nothing is cached (docs/environments.md#a-stop-during-setup). */
  | { kind: 'stopped'; record: EnvironmentRecord }

export interface PrepareInput {
  config: Config
  workspace: string
  /** The task's owner/repo when its source names one, or the local repository its workspace was made from (resolveEnvironment). */
  repository: string | null
  /** Places no sandboxed process may see (the task tree, the config file). */
  hidden: readonly string[]
  /** The setup log (kept with the task), or null. */
  log: string | null
  /** Where results are kept: environmentStore(). */
  store: string
  env?: NodeJS.ProcessEnv
  signal?: AbortSignal
  /** Only make sure the cache holds the result (`env prepare`): nothing is copied into the workspace, no maintenance. */
  prepareOnly?: boolean
  /** The workspace's trusted base when the caller has read it already; else it is read here. */
  base?: TrustedBase
}

/** The cache's store: on the fleet's shared mount when there is one, else beside the task tree. */
export function environmentStore(config: Config, base: string): string {
  return config.fleet.workspaces_dir !== null ? join(config.fleet.workspaces_dir, '.ctxagent-environments') : join(base, 'environments')
}

export async function prepareEnvironment(input: PrepareInput): Promise<Prepared> {
  const env = input.env ?? process.env
  const record: EnvironmentRecord = {
    status: 'setup_failed',
    file: null,
    operator: null,
    base: '',
    cache: 'none',
    setup_seconds: null,
    restored: [],
    kept: [],
    test: null,
    error: null,
    tail: null,
  }
  const failed = (error: string, tail: string | null = null): Prepared => ({ kind: 'failed', record: { ...record, error, tail } })
  let environment: Environment | null
  try {
    environment = await resolveEnvironment(input.config.environments, input.workspace, input.repository, input.base)
  } catch (err) {
    return failed((err as Error).message)
  }
  if (environment === null) return { kind: 'none' }
  const { spec } = environment
  Object.assign(record, { file: environment.file, operator: environment.operator, base: describeBase(environment.base), test: spec.test ?? null })
  const planned = planSandbox(input.config.tools, input.hidden, input.workspace, env)
  if (!planned.ok || planned.plan.kind !== 'bwrap')
    return failed(`the environment's scripts run in the sandbox, and ${planned.ok ? 'tools.sandbox is none' : planned.why}`)
  let plan = planned.plan
  let root: string | null = null
  // What a setup result is kept under for the image (docs/environments.md#an-image): its digest, a directory's file list's.
  let imageKey: string | null = null
  if (spec.image !== undefined) {
    const image = await obtainImage({
      path: spec.image,
      store: input.store,
      identity: process.getuid?.() === 0 ? plan.identity : null,
      hidden: plan.hidden,
      workspace: input.workspace,
      ...(input.signal !== undefined ? { signal: input.signal } : {}),
    })
    if (!image.ok) return failed(image.error)
    record.image = image.record
    root = image.root
    imageKey = image.key
    plan = { ...plan, root }
  }
  const missing = (spec.setup_secrets ?? []).filter((name) => (env[name] ?? '') === '')
  if (missing.length > 0) return failed(`setup_secrets names ${missing.join(', ')}, not set in ctxagent's environment`)
  const secrets = Object.fromEntries((spec.setup_secrets ?? []).map((name) => [name, env[name] as string]))
  // Masked wherever ctxagent writes from now on: the setup log first.
  installSecrets([...secretValues(input.config, env), ...Object.entries(secrets).map(([name, value]) => ({ name: `setup_secrets.${name}`, value }))])
  if (spec.setup !== undefined) {
    const got: CacheResult = await obtainEntry(
      {
        environment,
        workspace: input.workspace,
        plan,
        store: input.store,
        secrets,
        networks: input.config.tools.allowed_networks,
        log: input.log,
        image: imageKey,
      },
      input.signal,
    )
    if (got.kind === 'stopped') return stopped(record, 'setup')
    if (got.kind === 'failed')
      return { kind: 'failed', record: { ...record, cache: 'failed', error: got.error, tail: got.setup?.tail ?? null, setup_seconds: seconds(got.setup) } }
    Object.assign(record, { cache: got.kind, setup_seconds: got.kind === 'miss' ? seconds(got.setup) : null })
    // Its last use, for cleanup's age (docs/environments.md#the-cache).
    const now = new Date()
    utimesSync(got.entry, now, now)
    if (input.prepareOnly !== true) Object.assign(record, restore(got.entry, input.workspace, spec.cache?.paths ?? []))
  }
  if (spec.maintenance !== undefined && input.prepareOnly !== true) {
    const run = await runScript({
      plan,
      workspace: input.workspace,
      script: spec.maintenance,
      hosts: null,
      timeoutMs: MAINTENANCE_TIMEOUT_MS,
      log: input.log,
      ...(input.signal !== undefined ? { signal: input.signal } : {}),
    })
    if (run.stopped) return stopped(record, 'maintenance')
    if (run.error !== null || run.code !== 0) return failed(`maintenance ${run.error ?? (run.timedOut ? 'timed out' : `exited with ${run.code}`)}`, run.tail)
  }
  return { kind: 'ready', record: { ...record, status: 'ready' }, environment, root }
}

function stopped(record: EnvironmentRecord, during: 'setup' | 'maintenance'): Prepared {
  return { kind: 'stopped', record: { ...record, status: 'stopped', cache: 'none', setup_seconds: null, error: `stopped during ${during}` } }
}

function seconds(run: { ms: number } | null): number | null {
  return run === null ? null : Math.round(run.ms) / 1000
}

/**
 * Each cache path copied into the checkout, unless the checkout has it already (the
 * operator's own node_modules stays) or a step on the way is a link (a checkout's link
 * could send the copy anywhere ctxagent can write).
 */
function restore(entry: string, workspace: string, paths: readonly string[]): { restored: string[]; kept: string[] } {
  const restored: string[] = []
  const kept: string[] = []
  for (const path of paths) {
    const from = join(entry, 'paths', path)
    const to = join(workspace, path)
    if (!present(from)) continue
    if (present(to) || linkOnTheWay(workspace, path)) {
      kept.push(path)
      continue
    }
    privateCopy(from, to)
    restored.push(path)
  }
  return { restored, kept }
}
