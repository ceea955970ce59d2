import type { Config } from '../config/schema.js'
import type { Forge } from '../sources/change-request.js'
import type { TaskKey } from '../storage/task/metadata.js'
import { HELPER, helperEnv, httpOrigin } from './credential-helper.js'
import type { GitOptions } from './git.js'
import type { Staged } from './stage.js'

/** A forge token for the origin's host, and the user name its forge expects with it over HTTPS. */
interface Credential {
  username: string
  token: string
}

/**
 * Pushes the branch to the URL the workspace's `origin` had when the task started,
 * from delivery's staging directory (so the workspace's configuration, hooks and remote
 * settings are not read): with the forge's token when the URL is HTTP(S) on the host of
 * a configured forge, else with git's own credentials (the host's configuration: an ssh
 * agent, a credential store). Never forced: a branch that moved elsewhere is refused by
 * the remote and the delivery says so.
 */
export async function push(staged: Staged, config: Config, url: string, branch: string): Promise<void> {
  const refspec = `refs/heads/${branch}:refs/heads/${branch}`
  await staged.run(['push', '--quiet', '--no-verify', '--no-recurse-submodules', '--', url, refspec], remoteOptions(staged, config, url))
}

/**
 * The commits the remote's branches and tags point at (`git ls-remote`, with the push's
 * credentials): what the forge already has, so that what a push would send is known
 * before it is sent (docs/delivery.md#secrets).
 */
export async function remoteTips(staged: Staged, config: Config, url: string): Promise<string[]> {
  const listed = await staged.run(['ls-remote', '--quiet', '--', url], remoteOptions(staged, config, url))
  const tips = listed
    .split('\n')
    .map((line) => line.split('\t')[0] ?? '')
    .filter((id) => /^[0-9a-f]{40,64}$/.test(id))
  return [...new Set(tips)]
}

/** How git talks to the origin: with the forge's token through the helper, else with git's own credentials (the host's configuration). */
function remoteOptions(staged: Staged, config: Config, url: string): Partial<GitOptions> {
  const credential = credentialFor(config, url)
  const env = credential === null ? null : helperEnv(url, credential.username, credential.token)
  if (env === null) return { hostConfig: true, cwd: staged.gitDir }
  return { cwd: staged.gitDir, config: ['credential.helper=', `credential.helper=${HELPER}`], env }
}

function credentialFor(config: Config, url: string): Credential | null {
  const host = httpOrigin(url)?.host
  if (host === undefined) return null
  if (config.github.token !== null && gitHost(config.github.api_url) === host) return { username: 'x-access-token', token: config.github.token }
  if (config.gitlab.token !== null && gitHost(config.gitlab.url) === host) return { username: 'oauth2', token: config.gitlab.token }
  return null
}

/** The host git talks to for a forge's API URL (GitHub.com's API is on api.github.com, its git on github.com). */
function gitHost(apiUrl: string): string {
  const host = new URL(apiUrl).host.toLowerCase()
  return host === 'api.github.com' ? 'github.com' : host
}

/**
 * Where the PR/MR goes: the forge the task came from, or (a local task) the forge whose
 * host the origin URL names, its path the repository. Null: none configured.
 */
export function forgeOf(config: Config, key: TaskKey, url: string): Forge | null {
  if (key.task_source === 'github' && key.owner) return { kind: 'github', owner: key.owner, repo: key.repo }
  if (key.task_source === 'gitlab' && key.owner) return { kind: 'gitlab', project: `${key.owner}/${key.repo}` }
  const where = hostAndPath(url)
  if (where === null) return null
  if (where.host === gitHost(config.github.api_url).replace(/:\d+$/, '') || where.host === gitHost(config.github.api_url)) {
    const [owner, repo] = where.path.split('/')
    if (owner && repo) return { kind: 'github', owner, repo }
  }
  if (where.host === gitHost(config.gitlab.url) || where.host === gitHost(config.gitlab.url).replace(/:\d+$/, '')) {
    if (where.path.includes('/')) return { kind: 'gitlab', project: where.path }
  }
  return null
}

/**
 * Why `url` is not the repository a forge task came from (null: it is; or the task is
 * local; or the origin is a path on this host): a push there would carry the forge's
 * token (or git's own credentials) to another repository, or the code to another host,
 * as a workspace's `origin` set by an earlier round's agent could ask.
 */
export function notTheTaskRepository(config: Config, key: TaskKey, url: string): string | null {
  if ((key.task_source !== 'github' && key.task_source !== 'gitlab') || !key.owner) return null
  const where = hostAndPath(url)
  if (where === null) return null
  const base = key.task_source === 'github' ? config.github.api_url : config.gitlab.url
  const host = gitHost(base)
  // GitLab may live under a path (https://host/gitlab): its repositories' URLs start with it.
  const root = key.task_source === 'gitlab' ? trimPath(new URL(base).pathname).toLowerCase() : ''
  const wanted = `${root === '' ? '' : `${root}/`}${key.owner}/${key.repo}`.toLowerCase()
  if ((where.host === host || where.host === host.replace(/:\d+$/, '')) && where.path.toLowerCase() === wanted) return null
  return `the workspace's origin (${url}) is not ${key.owner}/${key.repo} on ${host}, the repository the task came from: nothing pushed`
}

/** host and repository path of an HTTP(S), ssh:// or scp-like (git@host:owner/repo.git) URL. */
function hostAndPath(url: string): { host: string; path: string } | null {
  const scp = /^[^@/]+@([^:/]+):(.+)$/.exec(url)
  if (scp) return { host: (scp[1] as string).toLowerCase(), path: trimPath(scp[2] as string) }
  try {
    const parsed = new URL(url)
    if (!['https:', 'http:', 'ssh:'].includes(parsed.protocol)) return null
    return { host: parsed.protocol === 'ssh:' ? parsed.hostname.toLowerCase() : parsed.host.toLowerCase(), path: trimPath(decodeURIComponent(parsed.pathname)) }
  } catch {
    return null
  }
}

function trimPath(path: string): string {
  return path
    .replace(/^\/+/, '')
    .replace(/\/+$/, '')
    .replace(/\.git$/, '')
}
