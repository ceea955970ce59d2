import type { EnvironmentSpec } from '../../config/environment.js'
import type { Config } from '../../config/schema.js'
import { git } from '../../delivery/git.js'
import { UsageError } from '../../errors.js'
import { realPathOf } from '../../tools/workspace.js'
import { describeBase, readTrusted, trustedBase } from '../trusted-base.js'
import type { TrustedBase } from '../trusted-base.js'

/** The repository's own environment file, read from its trusted base (docs/environments.md#the-file). */
export const ENVIRONMENT_FILE = '.ctxagent/environment.yml'
const MAX_FILE_BYTES = 64 * 1024

/** A task's environment: the file's keys with the operator's over them, and where each part came from. */
export interface Environment {
  spec: EnvironmentSpec
  base: TrustedBase
  /** The repository as the cache and the operator's config know it: owner/repo, else the workspace's real path. */
  repository: string
  /** Where the definition came from, for the task's record: the file at the base, the operator's key. */
  file: string | null
  operator: string | null
}

/**
 * The environment of `workspace`, or null when neither the repository nor the operator
 * defines one. `repository` is the task's owner/repo when its source names one (a forge's
 * issue or pull request, a fleet's `--repo`), else it is read from the origin URL (only when
 * an environment is defined: a git call less at every run's start). `repository` may instead
 * be the absolute path of the local repository the workspace was made from (an eval's trial,
 * docs/eval.md#a-trial): the operator's entry is then matched as for a workspace there (its
 * origin's owner/repo, its real path, its path); the file is read from `workspace` all the
 * same. A bad definition is a UsageError naming the file or the config key. `base`: the
 * trusted base when the caller has read it already (run reads it once for this and the instructions).
 */
export async function resolveEnvironment(
  environments: Config['environments'],
  workspace: string,
  repository: string | null,
  base?: TrustedBase,
): Promise<Environment | null> {
  const trusted = base ?? (await trustedBase(workspace))
  const read = await readTrusted(workspace, trusted, ENVIRONMENT_FILE, MAX_FILE_BYTES)
  if (read.kind === 'refused') throw new UsageError(`${ENVIRONMENT_FILE}: ${read.why}`, 'make it a regular file of at most 64 KB')
  const where = `${ENVIRONMENT_FILE} (${describeBase(trusted)})`
  // The YAML parser and the file's schema only for a repository that has the file: most runs' start loads neither (docs/development.md#start-up).
  const file = read.kind === 'file' ? await parseEnvironmentFile(read.text, where) : null
  if (file === null && Object.keys(environments).length === 0) return null
  // What the operator's keys are matched against: the workspace, or the local repository it was made from.
  const local = repository?.startsWith('/') === true ? repository : null
  const at = local ?? workspace
  const real = realPathOf(at)
  const name = local === null && repository !== null ? repository : await originRepository(at)
  const operatorKey = [name, real, at].find((k): k is string => k !== null && Object.hasOwn(environments, k)) ?? null
  const operator = operatorKey === null ? null : (environments[operatorKey] ?? null)
  if (file === null && operator === null) return null
  // The operator's keys win over the file's, key by key (cache as a whole).
  const spec: EnvironmentSpec = { ...(file ?? {}), ...(operator ?? {}) }
  const problem = inconsistency(spec)
  if (problem !== null) throw new UsageError(`${operatorKey !== null ? `environments.${operatorKey}` : where}: ${problem}`, 'see docs/environments.md')
  return { spec, base: trusted, repository: name ?? real, file: file === null ? null : where, operator: operatorKey }
}

/** The rules across keys: setup runs in a checkout of its own, so what it makes reaches a task only through cache.paths. */
export function inconsistency(spec: EnvironmentSpec): string | null {
  if (spec.setup !== undefined && (spec.cache === undefined || spec.cache.paths.length === 0))
    return 'setup needs cache.paths: the paths it makes (node_modules, .venv) are what a task gets'
  if (spec.setup === undefined && spec.cache !== undefined) return 'cache needs a setup that makes its paths'
  if ((spec.setup_hosts ?? []).length > 0 && spec.setup === undefined) return 'setup_hosts needs a setup'
  return null
}

/** owner/repo of the workspace's origin URL, or null. */
async function originRepository(workspace: string): Promise<string | null> {
  return repositoryOfUrl((await git(['config', '--get', 'remote.origin.url'], { safeDir: '*', cwd: workspace }).catch(() => '')).trim())
}

/** owner/repo of a git URL (its last two path steps, without .git), as an `environments` key names it; null: none. */
export function repositoryOfUrl(url: string): string | null {
  if (url === '') return null
  const path = url.replace(/^[a-z+]+:\/\/[^/]*/i, '').replace(/^[^/:]+@[^:]+:/, '')
  const steps = path
    .replace(/\.git\/?$/, '')
    .split(/[/:]/)
    .filter((s) => s !== '')
  return steps.length >= 2 ? steps.slice(-2).join('/') : null
}

/** `.ctxagent/environment.yml`'s text, parsed and checked against its schema (one-line errors naming the file). */
async function parseEnvironmentFile(text: string, where: string): Promise<EnvironmentSpec> {
  const [{ parseYamlWith }, { environmentSchema }] = await Promise.all([import('../../config/load.js'), import('../../config/environment.js')])
  return parseYamlWith(environmentSchema, text, where)
}
