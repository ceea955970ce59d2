import { chmodSync, existsSync, mkdirSync, mkdtempSync, renameSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Config } from '../config/schema.js'
import { githubMergedChanges } from '../sources/github-merged.js'
import { gitlabMergedChanges } from '../sources/gitlab-merged.js'
import type { MergedChanges } from '../sources/merged-change.js'
import { checkTask } from './check-suite.js'
import { makeTask } from './make-task.js'
import { mirrorOf } from './mirror.js'
import { readTask } from './suite.js'

export interface MakeInput {
  forge: { kind: 'github'; repository: string } | { kind: 'gitlab'; project: string }
  since: Date | null
  limit: number
  /** The suite's directory: made when absent; tasks already in it are kept and not made again. */
  out: string
  config: Config
  /** Places the checks never see (the task tree, the config): the suite is added. */
  hidden: readonly string[]
  /** The environments' cache the checks prepare the repository's environment from (environmentStore). */
  store: string
  /** Told as each change is decided. */
  onChange?: (outcome: MakeOutcome) => void
  /** A stop: the check being run ends at once, that change is not made, and no change after it is tried. */
  signal: AbortSignal
}

/** What became of one merged change. */
export type MakeOutcome =
  | { from: string; url: string; ok: true; task: string; commit: string; check: string; tests: string[] }
  | { from: string; url: string; ok: false; why: string }

/**
 * `eval make` (docs/eval.md#making-a-suite): the forge's merged changes, each made into a
 * task in a directory of its own, then checked as `eval check` does (its check fails at
 * the start and passes with the solution); a task that is not usable is removed, with why.
 */
export async function makeSuite(input: MakeInput): Promise<{ suite: string; outcomes: MakeOutcome[]; stopped: boolean }> {
  const listed: MergedChanges =
    input.forge.kind === 'github'
      ? await githubMergedChanges(input.config, input.forge.repository, input.since, input.limit)
      : await gitlabMergedChanges(input.config, input.forge.project, input.since, input.limit)
  mkdirSync(input.out, { recursive: true })
  const scratch = mkdtempSync(join(tmpdir(), 'ctxagent-eval-make-'))
  // Searchable by the sandbox's user, who runs the checks in workspaces below it.
  chmodSync(scratch, 0o711)
  const mirrors = join(scratch, 'mirrors')
  const outcomes: MakeOutcome[] = []
  try {
    const mirror = await mirrorOf(listed.clone_url, mirrors, input.config)
    const prefix = input.forge.kind === 'github' ? 'pr' : 'mr'
    for (const change of listed.changes) {
      if (input.signal.aborted) break
      const name = `${prefix}-${change.number}`
      const left = (why: string): MakeOutcome => ({ from: change.ref, url: change.url, ok: false, why })
      let outcome: MakeOutcome
      if (existsSync(join(input.out, name))) outcome = left(`${name} is in the suite already`)
      else {
        const staging = join(input.out, `.making-${name}`)
        rmSync(staging, { recursive: true, force: true })
        mkdirSync(staging)
        try {
          const made = await makeTask(change, mirror, listed.clone_url, staging, input.config)
          outcome = typeof made === 'string' ? left(made) : await judged(staging, name, change, made, input, scratch, mirrors)
          // A change whose check a stop cut short is not decided: neither made nor said to be left out.
          if (input.signal.aborted && !outcome.ok) break
          if (outcome.ok) renameSync(staging, join(input.out, name))
        } catch (err) {
          // One change that cannot be made never stops the others.
          outcome = left((err as Error).message.split('\n')[0] ?? 'it could not be made')
        } finally {
          rmSync(staging, { recursive: true, force: true })
        }
      }
      outcomes.push(outcome)
      input.onChange?.(outcome)
    }
  } finally {
    rmSync(scratch, { recursive: true, force: true })
  }
  return { suite: input.out, outcomes, stopped: input.signal.aborted }
}

async function judged(
  staging: string,
  name: string,
  change: { ref: string; url: string },
  made: { commit: string; check: string; tests: string[] },
  input: MakeInput,
  scratch: string,
  mirrors: string,
): Promise<MakeOutcome> {
  const task = readTask(staging, name)
  if (task === null || typeof task === 'string') return { from: change.ref, url: change.url, ok: false, why: task ?? 'no task.yaml was written' }
  const verdict = await checkTask(task, input.config, { scratch, mirrors, hidden: [...input.hidden, input.out], store: input.store, signal: input.signal })
  if (verdict === null) return { from: change.ref, url: change.url, ok: false, why: 'its check was stopped' }
  if (!verdict.ok) return { from: change.ref, url: change.url, ok: false, why: verdict.why }
  return { from: change.ref, url: change.url, ok: true, task: name, commit: made.commit, check: made.check, tests: made.tests }
}
