import { lstatSync, readdirSync, readlinkSync, realpathSync } from 'node:fs'
import { dirname, isAbsolute, join, resolve } from 'node:path'
import { inside } from '../workspace.js'
import { SOCKET_INSIDE } from './egress-forwarder.js'
import type { NetworkMode } from './egress-policy.js'

/*
 * What a sandboxed process sees of the file system. Mount order matters: a later mount
 * covers an earlier one. Everything is read-only but the workspace, /tmp and /var/tmp
 * (private tmpfs). Since commands run unprivileged, a file the sandbox user could not
 * read outside stays unreadable inside.
 */

/**
 * What programs need from /etc, each bound only if it exists: users and groups for `id`
 * and git, name resolution, certificates, the dynamic linker, time zones, git's and
 * perl's system config, and Debian's alternatives (cc, editor… are links through it).
 * Everything else in /etc (ctxagent's env file, ssh host keys, shadow, cron) is absent.
 */
export const ETC_ENTRIES = [
  'passwd',
  'group',
  'hosts',
  'hostname',
  'resolv.conf',
  'nsswitch.conf',
  'host.conf',
  'gai.conf',
  'networks',
  'protocols',
  'services',
  'ssl',
  'ca-certificates',
  'ca-certificates.conf',
  'pki',
  'crypto-policies',
  'alternatives',
  'ld.so.cache',
  'ld.so.conf',
  'ld.so.conf.d',
  'localtime',
  'timezone',
  'locale.alias',
  'locale.conf',
  'default/locale',
  'mime.types',
  'magic',
  'magic.mime',
  'inputrc',
  'gitconfig',
  'perl',
  'os-release',
  'lsb-release',
  'debian_version',
  'mtab',
] as const

const realOr = (p: string): string | null => {
  try {
    return realpathSync(p)
  } catch {
    return null
  }
}

/** Whether `p` is a symbolic link (false when it does not exist). */
function linkTarget(p: string): string | null {
  try {
    return lstatSync(p).isSymbolicLink() ? readlinkSync(p) : null
  } catch {
    return null
  }
}

/** The system's top directories: the host's, or an image's (docs/environments.md#an-image). */
const TOPS = ['/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32']

/** /bin, /lib… on a merged-/usr system are links into /usr: recreated as links, else bound. */
function rootLinks(a: string[]): void {
  for (const p of TOPS) {
    const link = linkTarget(p)
    if (link !== null) a.push('--symlink', link, p)
    else if (realOr(p) !== null) a.push('--ro-bind', p, p)
  }
}

/**
 * `path` of an image's root (a real directory), shown at `at`: a link is recreated as a
 * link (it then resolves inside the sandbox, never on the host), a directory or a file is
 * bound read-only. Every step is looked at without following links, so that nothing of
 * the host is ever bound through the image's own links.
 */
function fromImage(a: string[], root: string, at: string): void {
  const steps = at.split('/').filter((s) => s !== '')
  let on = root
  for (const [i, step] of steps.entries()) {
    on = join(on, step)
    let st: ReturnType<typeof lstatSync>
    try {
      st = lstatSync(on)
    } catch {
      return
    }
    const last = i === steps.length - 1
    if (st.isSymbolicLink()) {
      if (last) a.push('--symlink', readlinkSync(on), at)
      return
    }
    if (!last && !st.isDirectory()) return
  }
  a.push('--ro-bind', on, at)
}

/** An image's system: its /bin, /lib…, /usr and /opt, and the chosen entries of its /etc, none of the host's. */
function imageSystem(a: string[], root: string): void {
  for (const p of [...TOPS, '/usr', '/opt']) fromImage(a, root, p)
  let python: string[] = []
  try {
    if (lstatSync(join(root, 'etc')).isDirectory()) python = readdirSync(join(root, 'etc')).filter((n) => /^python3(\.\d+)?$/.test(n))
  } catch {
    // No /etc in the image: none in the sandbox either.
  }
  for (const name of [...ETC_ENTRIES, ...python]) fromImage(a, root, join('/etc', name))
}

/**
 * The chosen /etc entries. A link is recreated as a link (/etc/mtab → /proc/self/mounts
 * must name the sandbox's own /proc); where its target lies outside /usr and /etc (a
 * resolv.conf kept in /run), that target is bound too. Python's site config
 * (/etc/python3.N) is found by name.
 */
function etc(a: string[]): void {
  let python: string[] = []
  try {
    python = readdirSync('/etc').filter((n) => /^python3(\.\d+)?$/.test(n))
  } catch {
    // No /etc at all: nothing to bind.
  }
  for (const name of [...ETC_ENTRIES, ...python]) {
    const p = join('/etc', name)
    const link = linkTarget(p)
    if (link === null) {
      if (realOr(p) !== null) a.push('--ro-bind', p, p)
      continue
    }
    a.push('--symlink', link, p)
    const target = resolve(dirname(p), link)
    const real = realOr(p)
    if (real !== null && !['/usr', '/etc', '/proc'].some((top) => inside(top, target)) && !inside('/proc', real)) a.push('--ro-bind', real, real)
  }
}

export interface MountPlan {
  /** Only `host` shares the host's network; `none` and `proxy` get a namespace of their own (only `lo`). */
  network: NetworkMode
  /** `proxy`: the egress proxy's Unix socket (egress-proxy.ts), bound in at SOCKET_INSIDE. */
  egressSocket?: string
  /** More directories shown read-only (tools.sandbox_read_only, an MCP server's package). */
  readOnly: readonly string[]
  /** Real paths never shown: the task tree, the config file, $HOME's secret places. */
  hidden: readonly string[]
  /**
   * Hidden places that do not exist yet, such as a config directory when the workspace
   * is $HOME: one inside the workspace is covered by an empty read-only directory (bwrap
   * makes the mount point, an empty directory), so that no command can create what
   * ctxagent would read as configuration (docs/contract.md §8).
   */
  absent?: readonly string[]
  /** More directories shown read-write at a path of their own (an eval's Harbor check: /tests, /logs/verifier; docs/eval.md#harbor-tasks). */
  binds?: readonly { from: string; to: string; readOnly?: boolean }[]
  /** An image's root file system (a real directory): its system is shown instead of the host's. */
  root?: string
  /** Who bwrap runs as (the sandbox's identity, when ctxagent is root): a place it cannot search into needs no cover. */
  as?: { uid: number; gid: number }
}

/** The bwrap arguments for the namespaces and the file system, `workspace` (a real path) read-write. */
export function mountArgs(plan: MountPlan, workspace: string): string[] {
  const a = ['--die-with-parent', '--unshare-pid', '--unshare-ipc', '--unshare-uts', '--unshare-cgroup-try', '--new-session']
  if (plan.network !== 'host') a.push('--unshare-net')
  if (plan.root === undefined) rootLinks(a)
  else imageSystem(a, plan.root)
  // The private /tmp first: a read-only path under /tmp (a project cloned there, an MCP server's package) is mounted on top of it, not hidden by it.
  a.push('--proc', '/proc', '--dev', '/dev', '--tmpfs', '/tmp', '--tmpfs', '/var/tmp', '--dir', HOME)
  const visible: string[] = [workspace]
  for (const p of [...(plan.root === undefined ? ['/usr', '/opt'] : []), ...plan.readOnly]) {
    const real = isAbsolute(p) ? realOr(p) : null
    if (real === null) continue
    a.push('--ro-bind', real, real)
    visible.push(real)
    // Reached through a link (a worktree's node_modules): shown at the path as given too.
    if (resolve(p) !== real) a.push('--ro-bind', real, resolve(p))
  }
  if (plan.root === undefined) etc(a)
  a.push('--bind', workspace, workspace)
  for (const b of plan.binds ?? []) a.push(b.readOnly === true ? '--ro-bind' : '--bind', b.from, b.to)
  // A socket's mode, not the mount's read-only flag, decides who may connect to it.
  if (plan.egressSocket !== undefined) a.push('--ro-bind', plan.egressSocket, SOCKET_INSIDE)
  // Hidden places that a mount above shows (the task tree inside the workspace, a config file in it): covered.
  const covers: { path: string; file: boolean }[] = []
  for (const h of plan.hidden) {
    const real = realOr(h)
    if (real === null || !visible.some((v) => inside(v, real))) continue
    covers.push({ path: real, file: !lstatSync(real).isDirectory() })
  }
  for (const p of plan.absent ?? []) {
    if (!isAbsolute(p) || realOr(p) !== null || !inside(workspace, p)) continue
    // The first missing directory on the way is covered (`.config` when the workspace is $HOME
    // and has none): nothing can be made under it, and it is itself a mount, which cannot be moved.
    const top = firstMissing(workspace, p)
    if (!covers.some((c) => c.path === top)) covers.push({ path: top, file: false })
  }
  // A cover is a mount on its directory, and a mount moves with a directory above it that is
  // renamed: `mv .cache .c2` would carry ~/.cache/ctxagent's cover away and leave the real
  // directory at a path no tool sees as hidden. So each directory between the workspace and a
  // cover (all exist) is first bound onto itself: a mount point cannot be renamed or removed
  // (EBUSY). The covers come after, on top of these binds (bwrap binds a source as the host
  // has it, so a bind made after a cover would show the directory uncovered again).
  const pinned = new Set<string>()
  for (const c of covers) {
    for (let dir = dirname(c.path); dir !== workspace && inside(workspace, dir); dir = dirname(dir)) pinned.add(dir)
  }
  for (const dir of [...pinned].sort((x, y) => x.length - y.length)) a.push('--bind', dir, dir)
  for (const c of covers) {
    // Under a directory the sandbox's user may not search (root's 0700 ~/.cache, with the
    // workspace at root's $HOME) nothing is shown, and bwrap could not mount there either.
    if (!searchableDown(workspace, dirname(c.path), plan.as)) continue
    if (c.file) a.push('--ro-bind', '/dev/null', c.path)
    else a.push('--tmpfs', c.path, '--remount-ro', c.path)
  }
  return a
}

/** Whether `who` may search every directory from below `workspace` down to `dir` (true for root, or when bwrap runs as ctxagent's own user). */
function searchableDown(workspace: string, dir: string, who: MountPlan['as']): boolean {
  if (who === undefined || who.uid === 0) return true
  for (; dir !== workspace && inside(workspace, dir); dir = dirname(dir)) {
    let st: ReturnType<typeof lstatSync>
    try {
      st = lstatSync(dir)
    } catch {
      return true
    }
    const bit = st.uid === who.uid ? 0o100 : st.gid === who.gid ? 0o010 : 0o001
    if ((st.mode & bit) === 0) return false
  }
  return true
}

/** The first directory on the way from `workspace` down to `path` (inside it, missing) that does not exist. */
function firstMissing(workspace: string, path: string): string {
  let top = path
  for (let dir = dirname(path); dir !== workspace && inside(workspace, dir) && realOr(dir) === null; dir = dirname(dir)) top = dir
  return top
}

/** $HOME inside: an empty directory on the private /tmp. */
export const HOME = '/tmp/home'
