import { existsSync, mkdtempSync, realpathSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { delimiter, dirname, isAbsolute, join, sep } from 'node:path'
import { planSandbox, sandboxArgs } from '../sandbox.js'
import type { SandboxConfig } from '../sandbox.js'
import { inside } from '../workspace.js'
import type { ConnectionRecord } from './egress-proxy.js'
import type { NetworkMode } from './egress-policy.js'
import { seccompFilter } from './seccomp.js'

/**
 * What an MCP server's sandbox needs from the run: the tools settings, the workspace
 * (a real path, read-write for the server) and the places never shown.
 */
export interface McpSandbox {
  tools: SandboxConfig
  workspace: string
  hidden: readonly string[]
  /** Told of each connection a server made through its egress proxy (network: proxy), for the task's tools.jsonl. */
  network?: (record: ConnectionRecord) => void
}

let filterFile: string | null = null

/**
 * The seccomp filter in a file of this process (the SDK spawns the server, so no extra
 * fd can be handed over: a shell opens the file as fd 3 for bwrap). Removed at exit.
 */
function seccompFile(): string {
  if (filterFile !== null && existsSync(filterFile)) return filterFile
  const dir = mkdtempSync(join(tmpdir(), 'ctxagent-seccomp-'))
  filterFile = join(dir, 'filter.bpf')
  writeFileSync(filterFile, seccompFilter(), { mode: 0o400 })
  process.once('exit', () => rmSync(dir, { recursive: true, force: true }))
  return filterFile
}

/** `name` looked up on PATH, as a real path (null when not found). */
function which(name: string, path = process.env.PATH ?? ''): string | null {
  if (isAbsolute(name)) return existsSync(name) ? realpathSync(name) : null
  if (name.includes('/')) return null
  for (const dir of path.split(delimiter)) {
    if (dir !== '' && existsSync(join(dir, name))) return realpathSync(join(dir, name))
  }
  return null
}

/** The nearest directory at or above `dir` holding package.json (a project or a package), or null. */
function projectOf(dir: string): string | null {
  for (let d = dir; ; d = dirname(d)) {
    if (existsSync(join(d, 'package.json'))) return d
    if (dirname(d) === d) return null
  }
}

/**
 * What a server needs to see read-only besides the system: its program (a node outside
 * /usr: its install), and each absolute path among its arguments: a path in a
 * node_modules gives that whole node_modules (its dependencies are hoisted there),
 * another script its project (the nearest package.json) and that project's
 * node_modules (a link elsewhere, in a worktree), a directory itself. The workspace is
 * mounted anyway. A server elsewhere (in $HOME, through npx's cache) needs
 * tools.sandbox_read_only.
 */
export function serverPaths(command: string, args: readonly string[], workspace: string): string[] {
  const out = new Set<string>()
  const program = which(command)
  if (program !== null && !['/usr', '/bin', '/sbin', '/lib', '/opt'].some((top) => inside(top, program))) out.add(dirname(dirname(program)))
  for (const arg of args) {
    if (!isAbsolute(arg) || !existsSync(arg)) continue
    const real = realpathSync(arg)
    if (inside(workspace, real)) continue
    // The path as given (node_modules may be a link): the mount shows it there and at its real place.
    const at = arg.indexOf(`${sep}node_modules${sep}`)
    if (at >= 0) {
      out.add(arg.slice(0, at + '/node_modules'.length))
      continue
    }
    const dir = statSync(real).isDirectory() ? real : dirname(real)
    const project = statSync(real).isDirectory() ? null : projectOf(dir)
    out.add(project ?? dir)
    const modules = project !== null && existsSync(join(project, 'node_modules')) ? realpathSync(join(project, 'node_modules')) : null
    if (modules !== null) out.add(modules)
  }
  return [...out]
}

/**
 * The program and arguments that start an MCP server in the run's sandbox (the same
 * identity, limits, seccomp filter and mounts as run_command), or why it cannot be.
 * The server's environment passes through the transport (never a command line, which
 * any user can read in /proc): bwrap keeps it, with the sandbox's HOME and PATH. With
 * network: proxy, `egressSocket` is the server's own egress proxy (mcp.ts starts it).
 */
export function sandboxedServer(
  server: { command: string; args: readonly string[]; cwd: string | null; network: NetworkMode | boolean },
  ctx: McpSandbox,
  egressSocket?: string,
): { ok: true; command: string; args: string[] } | { ok: false; why: string } {
  const planned = planSandbox({ ...ctx.tools, sandbox: 'bwrap', network: server.network }, ctx.hidden, ctx.workspace)
  if (!planned.ok) return planned
  if (planned.plan.kind !== 'bwrap') return { ok: false, why: 'no sandbox planned' }
  const plan = planned.plan
  const readOnly = serverPaths(server.command, server.args, ctx.workspace)
  const cwd = server.cwd !== null && existsSync(server.cwd) ? realpathSync(server.cwd) : null
  if (cwd !== null && !inside(ctx.workspace, cwd)) readOnly.push(cwd)
  // As root, bwrap starts as the sandbox's user (setpriv first), who must be able to search its way to the
  // server's package: one under /root (npx's cache) or in a 0700 clone cannot be shown, so say so and how to fix it.
  const blocked = process.getuid?.() === 0 ? readOnly.map((p) => ({ path: p, at: blockedAt(plan.identity, p) })).find((b) => b.at !== null) : undefined
  if (blocked?.at) {
    return {
      ok: false,
      why: `as root, MCP servers run as ${plan.identity.name} (uid ${plan.identity.uid}), who cannot reach ${blocked.path} (${blocked.at} is not searchable by that user): install the server where it can read it (npm install -g puts it under /usr/local/lib/node_modules), or make the directories above it searchable (chmod o+x ${blocked.at})`,
    }
  }
  const bwrap = sandboxArgs(plan, ctx.workspace, [server.command, ...server.args], {
    readOnly,
    ...(cwd !== null ? { chdir: cwd } : {}),
    ...(egressSocket !== undefined ? { egressSocket } : {}),
  })
  const { uid, gid } = plan.identity
  const drop = process.getuid?.() === 0 ? ['setpriv', `--reuid=${uid}`, `--regid=${gid}`, '--clear-groups', '--'] : []
  return { ok: true, command: '/bin/sh', args: ['-c', 'exec 3<"$0" && exec "$@"', seccompFile(), ...drop, plan.bwrap, ...bwrap] }
}

/** The first directory on the way to `path` that `identity` may not search (or `path`, a file it may not read), by mode bits; null when none. */
export function blockedAt(identity: { uid: number; gid: number }, path: string): string | null {
  const allowed = (dir: string, bit: number): boolean => {
    try {
      const st = statSync(dir)
      if (st.uid === identity.uid) return (st.mode & (bit << 6)) !== 0
      if (st.gid === identity.gid) return (st.mode & (bit << 3)) !== 0
      return (st.mode & bit) !== 0
    } catch {
      return true // gone meanwhile: bwrap will say so
    }
  }
  let real: string
  try {
    real = realpathSync(path)
  } catch {
    return null
  }
  const above: string[] = []
  for (let dir = dirname(real); ; dir = dirname(dir)) {
    above.unshift(dir)
    if (dirname(dir) === dir) break
  }
  // bwrap binds a directory it can reach (what is in it stays as readable as it was: a root-only one, not at all);
  // a file it must also read (a script the server runs).
  return above.find((dir) => !allowed(dir, 1)) ?? (statSync(real).isDirectory() || allowed(real, 4) ? null : real)
}
