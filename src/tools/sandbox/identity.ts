import { spawnSync } from 'node:child_process'
import { chmodSync, lchownSync, lstatSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { UsageError } from '../../errors.js'

/** Who a sandboxed command (and an MCP server) runs as: never uid or gid 0. */
export interface SandboxIdentity {
  uid: number
  gid: number
  /** The user name from /etc/passwd, else the number. */
  name: string
  /** Why this identity: what doctor and the refusal say. */
  why: 'self' | 'tools.sandbox_user' | 'workspace owner' | 'nobody'
}

const NOBODY = 65534

interface PasswdEntry {
  name: string
  uid: number
  gid: number
}

function passwd(file = '/etc/passwd'): PasswdEntry[] {
  let text = ''
  try {
    text = readFileSync(file, 'utf8')
  } catch {
    return []
  }
  return text.split('\n').flatMap((line) => {
    const [name, , uid, gid] = line.split(':')
    if (name === undefined || uid === undefined || gid === undefined || !/^\d+$/.test(uid) || !/^\d+$/.test(gid)) return []
    return [{ name, uid: Number(uid), gid: Number(gid) }]
  })
}

const named = (uid: number, entries: PasswdEntry[]) => entries.find((e) => e.uid === uid)?.name ?? String(uid)
// A gid of 0 would let a command read what group root may read: nobody's group instead.
const safeGid = (gid: number) => (gid === 0 ? NOBODY : gid)

function fromSetting(value: string, entries: PasswdEntry[]): SandboxIdentity {
  const numeric = /^(\d+)(?::(\d+))?$/.exec(value)
  if (numeric) {
    const uid = Number(numeric[1])
    const gid = numeric[2] !== undefined ? Number(numeric[2]) : (entries.find((e) => e.uid === uid)?.gid ?? uid)
    if (uid === 0 || gid === 0)
      throw new UsageError(`tools.sandbox_user is ${value}: commands never run as root (uid or gid 0)`, 'give an unprivileged user, like nobody or 1000:1000')
    return { uid, gid, name: named(uid, entries), why: 'tools.sandbox_user' }
  }
  const entry = entries.find((e) => e.name === value)
  if (entry === undefined)
    throw new UsageError(`tools.sandbox_user is ${value}, and /etc/passwd has no such user`, 'give a user name from /etc/passwd, or uid:gid')
  if (entry.uid === 0)
    throw new UsageError(`tools.sandbox_user is ${value}, which is uid 0: commands never run as root`, 'give an unprivileged user, like nobody')
  return { uid: entry.uid, gid: safeGid(entry.gid), name: entry.name, why: 'tools.sandbox_user' }
}

/**
 * The identity run_command's commands run as. Not root: ctxagent's own uid and gid (a
 * process that is not root cannot switch; tools.sandbox_user naming someone else is a
 * usage error). Root: tools.sandbox_user if set, else the workspace's owner if that is
 * not root, else nobody. The fleet chowns the clones it makes to this identity.
 */
export function sandboxIdentity(
  tools: { sandbox_user: string | null },
  workspace: string,
  self: { uid: number; gid: number } = { uid: process.getuid?.() ?? NOBODY, gid: process.getgid?.() ?? NOBODY },
): SandboxIdentity {
  const entries = passwd()
  if (self.uid !== 0) {
    if (tools.sandbox_user !== null) {
      const wanted = fromSetting(tools.sandbox_user, entries)
      if (wanted.uid !== self.uid || wanted.gid !== self.gid)
        throw new UsageError(
          `tools.sandbox_user is ${tools.sandbox_user}, but ctxagent runs as ${named(self.uid, entries)} (uid ${self.uid}) and only root can run commands as another user`,
          'remove tools.sandbox_user, or run ctxagent as that user',
        )
    }
    return { uid: self.uid, gid: self.gid, name: named(self.uid, entries), why: 'self' }
  }
  if (tools.sandbox_user !== null) return fromSetting(tools.sandbox_user, entries)
  let owner: { uid: number; gid: number } | null = null
  try {
    const st = statSync(workspace)
    owner = { uid: st.uid, gid: st.gid }
  } catch {
    // A missing workspace is refused elsewhere; nobody is the answer meanwhile.
  }
  if (owner !== null && owner.uid !== 0) {
    const entry = entries.find((e) => e.uid === owner.uid)
    return { uid: owner.uid, gid: safeGid(entry?.gid ?? owner.gid), name: named(owner.uid, entries), why: 'workspace owner' }
  }
  const nobody = entries.find((e) => e.name === 'nobody')
  return { uid: nobody?.uid ?? NOBODY, gid: safeGid(nobody?.gid ?? NOBODY), name: 'nobody', why: 'nobody' }
}

/**
 * Null when `identity` can enter and write `workspace` (checked as that identity, in a
 * child that switches to it), else the one-line reason run --allow-shell is refused.
 */
export function workspaceUnwritable(identity: SandboxIdentity, workspace: string): string | null {
  const self = process.getuid?.() ?? NOBODY
  const switching = self === 0 ? { uid: identity.uid, gid: identity.gid } : {}
  const r = spawnSync('/bin/sh', ['-c', 'test -d "$1" && test -w "$1" && test -x "$1"', 'sh', workspace], {
    ...switching,
    env: { PATH: '/usr/bin:/bin' },
    stdio: 'ignore',
    timeout: 10_000,
  })
  if (r.status === 0) return null
  let owner = 'unknown owner'
  try {
    const st = statSync(workspace)
    owner = `owner ${named(st.uid, passwd())}, mode ${(st.mode & 0o7777).toString(8)}`
  } catch {
    owner = 'missing'
  }
  const as =
    self === 0
      ? `as root, run_command runs commands as ${identity.name} (uid ${identity.uid})`
      : `run_command runs commands as ${identity.name} (uid ${identity.uid})`
  return `${as}, who cannot write the workspace ${workspace} (${owner}); its parent directories must be searchable by that user too`
}

/**
 * As root, gives a workspace ctxagent made itself (a clone, the demo's copy) to the
 * identity its commands run as: every file and directory in it, and its parent made
 * searchable; a file hard-linked elsewhere stays whose it is. Not root: the files are
 * already the commands' user's.
 */
export function giveWorkspace(workspace: string, identity: SandboxIdentity): void {
  if (process.getuid?.() !== 0) return
  const parent = statSync(dirname(workspace))
  if ((parent.mode & 0o011) !== 0o011) chmodSync(dirname(workspace), (parent.mode & 0o7777) | 0o011)
  const walk = (p: string): void => {
    // lstat: a link is chowned itself, never followed out of the workspace.
    const entry = lstatSync(p)
    // A file with another name somewhere may be a hard link to a file outside the workspace
    // (planted by a command in an earlier round where fs.protected_hardlinks is off): it keeps
    // its owner unless it is already the identity's. Any file that is not a directory: a FIFO,
    // a socket or a device node of root's is linked as easily as a regular file.
    if (!entry.isDirectory() && entry.nlink > 1 && entry.uid !== identity.uid) return
    lchownSync(p, identity.uid, identity.gid)
    if (entry.isDirectory()) for (const name of readdirSync(p)) walk(join(p, name))
  }
  walk(workspace)
}
