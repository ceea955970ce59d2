import { setTimeout as sleep } from 'node:timers/promises'
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs'
import { dirname, join } from 'node:path'
import type { EnvironmentSpec } from '../../config/environment.js'
import { readTrusted } from '../trusted-base.js'
import { commitEntry, entryDir, readEntry, sha, tryLock } from './cache-store.js'
import { privateCopy, present, scratchCheckout } from './checkout.js'
import type { Environment } from './definition.js'
import { runScript } from './sandboxed.js'
import type { BwrapPlan, ScriptResult } from './sandboxed.js'

// Setup once per key (docs/environments.md#the-cache): found in the cache, or run by the one that holds the key's lock.

/** setup's time at most (its own; the limits of tools.limits hold per process as for every command). */
export const SETUP_TIMEOUT_MS = 30 * 60_000
/** How often a task waiting on another's setup looks again. */
const WAIT_MS = 500

export type CacheResult =
  | { kind: 'hit'; entry: string }
  | { kind: 'miss'; entry: string; setup: ScriptResult }
  | { kind: 'failed'; setup: ScriptResult | null; error: string }
  | { kind: 'stopped'; setup: ScriptResult | null }

export interface SetupContext {
  environment: Environment
  workspace: string
  plan: BwrapPlan
  store: string
  secrets: Record<string, string>
  networks: readonly string[]
  log: string | null
  /** The image setup runs in (its digest, or a directory's file list's: image-directory.ts): a result is kept per image too. */
  image: string | null
}

/**
 * The cache key: the environment's definition, the repository, and the content of each
 * cache.key file at the trusted base (an absent file counts as absent).
 */
export async function cacheKey(environment: Environment, workspace: string, image: string | null = null): Promise<string> {
  const parts = [environment.repository, JSON.stringify(environment.spec), ...(image !== null ? [`image\0${image}`] : [])]
  for (const file of environment.spec.cache?.key ?? []) {
    const read = await readTrusted(workspace, environment.base, file, 64 * 1024 * 1024)
    parts.push(`${file}\0${read.kind === 'file' ? sha(read.text) : read.kind}`)
  }
  return sha(parts.join('\0\0'))
}

/** The entry for the task's key: there already, made by this task's setup, or made by another's it waited for. */
export async function obtainEntry(ctx: SetupContext, signal?: AbortSignal): Promise<CacheResult> {
  const key = await cacheKey(ctx.environment, ctx.workspace, ctx.image)
  const dir = entryDir(ctx.store, ctx.environment.repository, key)
  for (;;) {
    if (readEntry(dir) !== null) return { kind: 'hit', entry: dir }
    if (signal?.aborted === true) return { kind: 'stopped', setup: null }
    const held = await tryLock(dir)
    if (held === null) {
      await sleep(WAIT_MS)
      continue
    }
    try {
      // Finished by another while this one waited for the lock.
      if (readEntry(dir) !== null) return { kind: 'hit', entry: dir }
      return await runSetup(ctx, dir, signal)
    } finally {
      await held.release()
    }
  }
}

async function runSetup(ctx: SetupContext, dir: string, signal: AbortSignal | undefined): Promise<CacheResult> {
  const { environment, plan } = ctx
  const spec = environment.spec as Required<Pick<EnvironmentSpec, 'setup' | 'cache'>> & EnvironmentSpec
  let work: string
  if (environment.base.kind === 'commit') {
    try {
      work = await scratchCheckout(ctx.workspace, environment.base.commit, process.getuid?.() === 0 ? plan.identity : null)
    } catch (err) {
      return { kind: 'failed', setup: null, error: (err as Error).message }
    }
  } else {
    // Not a repository: the operator's own directory is set up in place.
    work = ctx.workspace
  }
  const scratch = work !== ctx.workspace ? dirname(work) : null
  try {
    const setup = await runScript({
      plan,
      workspace: work,
      script: spec.setup,
      hosts: spec.setup_hosts ?? [],
      networks: ctx.networks,
      secrets: ctx.secrets,
      timeoutMs: SETUP_TIMEOUT_MS,
      log: ctx.log,
      ...(signal !== undefined ? { signal } : {}),
    })
    // Stopped: nothing is kept (a partial node_modules is no result); the lock goes with the finally of obtainEntry.
    if (setup.stopped) return { kind: 'stopped', setup }
    if (setup.error !== null || setup.code !== 0)
      return {
        kind: 'failed',
        setup,
        error: setup.error ?? (setup.timedOut ? `setup timed out after ${SETUP_TIMEOUT_MS / 60_000} minutes` : `setup exited with ${setup.code}`),
      }
    mkdirSync(dirname(dir), { recursive: true })
    const collected = mkdtempSync(`${dir}.collect-`)
    for (const path of spec.cache.paths) {
      const from = join(work, path)
      if (present(from)) privateCopy(from, join(collected, path))
    }
    commitEntry(dir, collected, { created_at: new Date().toISOString(), setup_seconds: setup.ms / 1000, bytes: 0 })
    return { kind: 'miss', entry: dir, setup }
  } finally {
    if (scratch !== null) rmSync(scratch, { recursive: true, force: true })
  }
}
