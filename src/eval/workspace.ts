import {
  chownSync,
  closeSync,
  constants,
  cpSync,
  existsSync,
  fchownSync,
  lstatSync,
  mkdirSync,
  openSync,
  readFileSync,
  rmSync,
  statSync,
  writeSync,
} from 'node:fs'
import { join, sep } from 'node:path'
import { git } from '../delivery/git.js'
import { archiveInto } from '../workspace/environment/checkout.js'
import type { Config } from '../config/schema.js'
import { giveWorkspace, sandboxIdentity } from '../tools/sandbox/identity.js'
import { mirrorOf } from './mirror.js'
import type { EvalTask } from './suite.js'
import { isUrl } from './task.js'

// A trial's workspace (docs/eval.md#a-trial): the task's repository at its commit, and nothing of what came after it.

const IDENTITY = {
  GIT_AUTHOR_NAME: 'ctxagent eval',
  GIT_AUTHOR_EMAIL: 'eval@users.noreply.ctxagent.invalid',
  GIT_COMMITTER_NAME: 'ctxagent eval',
  GIT_COMMITTER_EMAIL: 'eval@users.noreply.ctxagent.invalid',
  GIT_AUTHOR_DATE: '2000-01-01T00:00:00Z',
  GIT_COMMITTER_DATE: '2000-01-01T00:00:00Z',
}

/**
 * Fills the empty directory `into` with the task's starting tree and makes it a git
 * repository of one commit: `git archive` of the commit (never a clone, so no later commit
 * — the fix itself — is in the history the agent can read). A repository given by URL is
 * cloned once into `mirrors` (bare) and archived from there. A directory that is no git
 * repository (and no commit named) is copied as it is.
 */
export async function startingTree(task: EvalTask, into: string, mirrors: string, config: Config): Promise<void> {
  mkdirSync(into, { recursive: true })
  if (!isUrl(task.repo) && task.commit === null && !existsSync(join(task.repo, '.git')) && !task.repo.endsWith('.git')) {
    cpSync(task.repo, into, { recursive: true, verbatimSymlinks: true, filter: (src) => !src.split(sep).includes('.git') })
  } else {
    const source = isUrl(task.repo) ? await mirrorOf(task.repo, mirrors, config) : task.repo
    const commit = task.commit ?? 'HEAD'
    await archiveInto(source, commit, into).catch((err: Error) => {
      throw new Error(`the repository ${source} has no commit ${commit}: ${err.message}`)
    })
  }
  const at = { safeDir: into, cwd: into }
  await git(['init', '--quiet', '--template='], at)
  if (task.startPatch !== null)
    await git(['apply', '--whitespace=nowarn', '--', task.startPatch], at).catch((err: Error) => {
      throw new Error(`task.yaml's patch does not apply: ${err.message.split('\n')[0]}`)
    })
  await git(['add', '--all', '--force', '--', '.'], at)
  await git(
    [
      'commit',
      '--quiet',
      '--no-verify',
      '--allow-empty',
      '-m',
      `${task.name}: the starting tree${task.commit === null ? '' : ` (${task.commit.slice(0, 12)})`}`,
    ],
    {
      ...at,
      env: IDENTITY,
    },
  )
  // As root, the tree is the sandbox user's, as a clone ctxagent makes for a task is.
  giveWorkspace(into, sandboxIdentity(config.tools, into))
}

/**
 * Copies the task's hidden files into the workspace at their relative paths, after the
 * agent has finished. The workspace is the agent's: a link or a file it left where a
 * directory of the path should be is removed first, and each file is opened with
 * O_NOFOLLOW, so nothing is written outside the workspace.
 */
export function placeHidden(task: EvalTask, workspace: string): void {
  // As root, what is placed is the workspace owner's (the sandbox user's), as the agent's own files are.
  const { uid, gid } = statSync(workspace)
  const own = process.getuid?.() === 0
  for (const rel of task.hidden) {
    const parts = rel.split('/')
    let dir = workspace
    for (const part of parts.slice(0, -1)) {
      dir = join(dir, part)
      const kind = kindOf(dir)
      if (kind !== 'dir') {
        if (kind !== null) rmSync(dir, { recursive: true, force: true })
        mkdirSync(dir)
        if (own) chownSync(dir, uid, gid)
      }
    }
    const target = join(workspace, rel)
    if (kindOf(target) !== null && kindOf(target) !== 'file') rmSync(target, { recursive: true, force: true })
    const fd = openSync(target, constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_NOFOLLOW, 0o644)
    try {
      if (own) fchownSync(fd, uid, gid)
      writeSync(fd, readFileSync(join(task.dir, 'tests', rel)))
    } finally {
      closeSync(fd)
    }
  }
}

function kindOf(path: string): 'dir' | 'file' | 'other' | null {
  try {
    const st = lstatSync(path)
    return st.isDirectory() ? 'dir' : st.isFile() ? 'file' : 'other'
  } catch {
    return null
  }
}
