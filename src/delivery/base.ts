import { UsageError } from '../errors.js'
import { git } from './git.js'
import { recordRepository } from './repository.js'
import type { RepositoryRecord } from './repository.js'

/** What a task records at start for its delivery (docs/delivery.md#the-base). */
export interface DeliveryBase {
  base_commit: string
  base_branch: string | null
  base_remote: string | null
  base_git: RepositoryRecord
}

/**
 * The commit, branch and `origin` the workspace has when the task starts, and the
 * repository its `.git` names then (docs/delivery.md#the-repository), read before
 * the agent can change anything; a workspace that cannot be delivered from is refused
 * then (a usage error, nothing written), not after the work is done.
 */
export async function deliveryBase(workspace: string, mode: 'branch' | 'pr'): Promise<DeliveryBase> {
  const options = { safeDir: workspace, cwd: workspace }
  const commit = await git(['rev-parse', '--verify', '--quiet', 'HEAD^{commit}'], options).catch(() => '')
  if (commit.trim() === '')
    throw new UsageError(
      `--deliver ${mode} needs a git repository with at least one commit in the workspace (${workspace})`,
      'commit the starting point first, or run without --deliver',
    )
  const branch = (await git(['symbolic-ref', '--quiet', '--short', 'HEAD'], options).catch(() => '')).trim()
  const remote = (await git(['config', '--get', 'remote.origin.url'], options).catch(() => '')).trim()
  if (mode === 'pr' && remote === '')
    throw new UsageError(
      `--deliver pr pushes to the workspace's origin, and ${workspace} has none`,
      'add one (git remote add origin URL), or use --deliver branch',
    )
  if (remote !== '' && hasCredentials(remote))
    throw new UsageError(
      "the workspace's origin URL holds a user name or password",
      'remove it from the URL (git remote set-url origin URL); ctxagent gives the forge token to git itself',
    )
  const repository = await recordRepository(workspace)
  return { base_commit: commit.trim(), base_branch: branch === '' ? null : branch, base_remote: remote === '' ? null : remote, base_git: repository }
}

function hasCredentials(url: string): boolean {
  try {
    const parsed = new URL(url)
    return (parsed.protocol === 'http:' || parsed.protocol === 'https:') && parsed.password !== ''
  } catch {
    return false
  }
}
