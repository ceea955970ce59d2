// What the fleet's tests do with a worker and its queue, said once: start one, wait for it,
// stop it cleanly, and queue a job for it (test/fleet/, test/serve/).
import type { ChildProcess } from 'node:child_process'
import { existsSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { expect, onTestFinished } from 'vitest'
import type { RunSetup, Started } from '../run/harness.js'
import type { TestDatabase } from './use-postgres.js'
import { exitOf, until } from './wait.js'

/** A worker on this host (its host name is this machine's) on the database at `url`, `env` added to its environment (NODE_OPTIONS for a preload, PATH). */
export function startWorker(s: RunSetup, url: string, args: string[] = [], env: Record<string, string> = {}): Started {
  return s.start(['worker', ...args], { ...env, CTXAGENT_DATABASE_URL: url })
}

/** `worker`, once it says it has started (registered, listening). */
export async function started<W extends { err: () => string }>(worker: W): Promise<W> {
  await until('the worker to start', async () => worker.err().includes('started on'))
  return worker
}

/** SIGTERMs a worker and expects its clean exit (0): the fleet tests' one way to stop a worker that must drain. */
export async function stopCleanly(worker: { child: ChildProcess }): Promise<void> {
  worker.child.kill('SIGTERM')
  expect((await exitOf(worker.child)).code).toBe(0)
}

/** `ctxagent enqueue <args>` on `database`: a job queued (exit 0, nothing on stderr); the task's uuid. */
export async function enqueue(s: RunSetup, database: Pick<TestDatabase, 'env'>, args: string[]): Promise<string> {
  const res = await s.run(['enqueue', ...args], database.env())
  expect(res.code, res.stderr).toBe(0)
  expect(res.stderr).toBe('')
  return res.stdout.trim()
}

/**
 * A hold point of a worker or its agent (CTXAGENT_TEST_HOLD_AT, src/test-pause.ts): `env` for the process, `reached` once
 * its marker exists, let go by `release` (removing it). A step reached again holds again.
 */
export function holdAt(step: string): { env: Record<string, string>; reached: () => boolean; release: () => void } {
  const dir = mkdtempSync(join(tmpdir(), 'ctxagent-hold-'))
  const marker = join(dir, 'held')
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
  return {
    env: { CTXAGENT_TEST_HOLD_AT: step, CTXAGENT_TEST_HOLD_MARKER: marker },
    reached: () => existsSync(marker),
    release: () => rmSync(marker, { force: true }),
  }
}

/** One `ctxagent poll --once --json` pass for issues labelled `agent`, into `s.ws` (clean: exit 0, nothing on stderr): its report lines. */
export async function pollOnce<R>(s: RunSetup, database: Pick<TestDatabase, 'env'>, args: string[]): Promise<R[]> {
  const res = await s.run(['poll', '--once', '--json', '--label', 'agent', '--workspace', s.ws, ...args], database.env())
  expect(res.stderr).toBe('')
  expect(res.code).toBe(0)
  return res.stdout
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as R)
}
