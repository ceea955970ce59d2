import type { Config } from '../config/schema.js'
import { execFile } from 'node:child_process'
import { existsSync, mkdirSync, renameSync, rmSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { HELPER, httpOrigin } from '../delivery/credential-helper.js'
import { validRef } from './ref.js'

/** A token for the HTTPS clones of one host (a forge's): given to git at clone time, never written into the clone. */
export interface CloneCredential {
  /** URL.host of the repositories it is for (host, or host:port). */
  host: string
  username: string
  token: string
}

/**
 * Clones an untrusted repository (docs/contract.md §8: `--repo` sources) for one task into `dir`
 * (a fresh directory), checked out at `ref` when given; an existing clone (an earlier
 * attempt's) is kept. The one place a task's workspace is made from a repository.
 *
 * - `--no-local`: a path or file:// source is copied through git's transport, never
 *   hard-linked (a task writing into its `.git/objects` wrote into the source's);
 * - nothing of the source's configuration is read: its `.git/config`, hooks and
 *   includes stay behind (clone copies objects and refs only), no hooks run here
 *   (`core.hooksPath` of the clone step is /dev/null), and no submodule is fetched;
 * - credentials: a URL holding a user or password is refused at enqueue; a token for
 *   the repository's host (github.token / gitlab.token) is answered to git by a
 *   credential helper given on git's command line for the clone only (`git -c`, not
 *   `git clone -c`, which would write it into the clone), from an environment variable
 *   of the git process; without one, git's own credential helpers configured for the
 *   worker's user answer. Nothing of it is left in the clone's `.git/config`;
 * - the ref is resolved with `--end-of-options` and checked out by its commit id.
 */
export async function cloneWorkspace(options: {
  url: string
  ref?: string
  dir: string
  credentials?: CloneCredential[]
  signal?: AbortSignal
}): Promise<void> {
  const { url, ref, dir, signal } = options
  if (existsSync(join(dir, '.git'))) return
  if (ref !== undefined && !validRef(ref)) throw new Error(`the ref '${ref.slice(0, 40)}' is not a branch, tag or commit name`)
  const partial = `${dir}.cloning-${process.pid}`
  rmSync(partial, { recursive: true, force: true })
  mkdirSync(dirname(dir), { recursive: true })
  const credential = credentialFor(url, options.credentials ?? [])
  const env = gitEnv(credential)
  const git = (args: string[], gitEnvironment: NodeJS.ProcessEnv): Promise<string> => runGit(args, gitEnvironment, signal)
  const helper = credential === null ? [] : ['-c', 'credential.helper=', '-c', `credential.helper=${HELPER}`]
  try {
    // `--` ends the options: a URL can never be taken for one.
    await git([...SAFE, ...helper, 'clone', '--quiet', '--no-local', '--no-hardlinks', '--no-recurse-submodules', '--', url, partial], env)
    if (ref !== undefined) {
      // A tag, a commit, the default branch, or another branch (only origin/<name> in a fresh clone).
      const resolve = (name: string): Promise<string | null> =>
        git([...SAFE, '-C', partial, 'rev-parse', '--verify', '--quiet', '--end-of-options', `${name}^{commit}`], env).catch(() => null)
      const commit = (await resolve(ref)) ?? (await resolve(`origin/${ref}`))
      if (commit === null) throw new Error(`the ref '${ref}' is not in the repository`)
      await git([...SAFE, '-C', partial, 'checkout', '--quiet', '--detach', commit.trim(), '--'], env)
    }
    renameSync(partial, dir)
  } catch (err) {
    rmSync(partial, { recursive: true, force: true })
    throw err
  }
}

/** Options of every git call here: no hooks run, whatever the worker's user configured. */
const SAFE = ['-c', 'core.hooksPath=/dev/null', '-c', 'protocol.ext.allow=never']

/** The credential helper (answering only for the URL's own origin): delivery's. */
export { HELPER }

/** A credential for one URL: the helper answers for its origin (`protocol://host`) only. */
export interface UrlCredential extends CloneCredential {
  origin: string
}

/** The credential configured for the URL's host: HTTPS (or HTTP to a configured host) only. */
export function credentialFor(url: string, credentials: CloneCredential[]): UrlCredential | null {
  const at = httpOrigin(url)
  if (at === null) return null
  const found = credentials.find((c) => c.host.toLowerCase() === at.host)
  return found === undefined ? null : { ...found, origin: at.origin }
}

/**
 * git's environment: the worker's (its operator's git configuration included), without
 * what would point git at another repository or object store than the clone's own, and
 * never prompting.
 */
export function gitEnv(credential: UrlCredential | null): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {}
  for (const [key, value] of Object.entries(process.env)) if (!DROPPED.has(key)) env[key] = value
  env.GIT_TERMINAL_PROMPT = '0'
  if (credential !== null) {
    env.CTXAGENT_GIT_USERNAME = credential.username
    env.CTXAGENT_GIT_TOKEN = credential.token
    env.CTXAGENT_GIT_ORIGIN = credential.origin
  }
  return env
}

const DROPPED = new Set([
  'GIT_DIR',
  'GIT_WORK_TREE',
  'GIT_INDEX_FILE',
  'GIT_OBJECT_DIRECTORY',
  'GIT_ALTERNATE_OBJECT_DIRECTORIES',
  'GIT_COMMON_DIR',
  'GIT_NAMESPACE',
  'GIT_CEILING_DIRECTORIES',
  'GIT_DISCOVERY_ACROSS_FILESYSTEM',
])

/** One git command; `signal` (a cancelled job) kills it, and the clone is removed. */
function runGit(args: string[], env: NodeJS.ProcessEnv, signal: AbortSignal | undefined): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile('git', args, { env, timeout: 600_000, ...(signal ? { signal } : {}) }, (err, stdout, stderr) => {
      if (err === null) resolve(String(stdout))
      else reject(new Error(String(stderr).trim().split('\n').pop() || err.message))
    })
  })
}

/**
 * The forge tokens a worker gives git for `--repo` clones (docs/contract.md §8: never in the URL or
 * the clone): github.token (GH_TOKEN, GITHUB_TOKEN) for the GitHub of github.api_url,
 * gitlab.token (GITLAB_TOKEN) for gitlab.url's host. Other hosts: git's own credential
 * helpers, as configured for the worker's user.
 */
export function cloneCredentials(config: Config): CloneCredential[] {
  const credentials: CloneCredential[] = []
  if (config.github.token !== null) {
    const api = new URL(config.github.api_url)
    credentials.push({ host: api.host === 'api.github.com' ? 'github.com' : api.host, username: 'x-access-token', token: config.github.token })
  }
  if (config.gitlab.token !== null) credentials.push({ host: new URL(config.gitlab.url).host, username: 'oauth2', token: config.gitlab.token })
  return credentials
}
