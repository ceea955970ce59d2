import { spawnSync } from 'node:child_process'
import { lstatSync, readlinkSync, realpathSync } from 'node:fs'
import { homedir } from 'node:os'
import { join } from 'node:path'
import { inside } from './workspace.js'

/*
 * run_command's sandbox: bubblewrap (Debian `bubblewrap`, the `bwrap` binary), as Claude
 * Code does on Linux. Flags measured in /tmp/research-sandbox (REPORT.md §1):
 * --unshare-pid with --die-with-parent is what kills `setsid sleep &` when the command
 * ends (bwrap's pid 1 gets SIGKILL when the monitor exits, and the namespace dies with
 * it); a new /proc shows only the sandbox's pids, so no /proc/<ctxagent>/environ;
 * only /usr, /etc, /opt (and the /bin, /lib links) are mounted, read-only, so $HOME,
 * other projects and ctxagent's config are absent; the workspace alone is writable.
 */

/** How run_command runs, decided once at start (tools.sandbox). */
export type SandboxPlan =
  | { kind: 'bwrap'; bwrap: string; network: boolean; readOnly: readonly string[]; hidden: readonly string[] }
  | { kind: 'none' }

/** The config keys this reads (tools.sandbox, tools.network, tools.sandbox_read_only). */
export interface SandboxConfig {
  sandbox: 'bwrap' | 'none'
  network: boolean
  sandbox_read_only: readonly string[]
}

/** The bwrap binary: CTXAGENT_BWRAP (tests point it at a missing file), else `bwrap` on PATH. */
export function bwrapBinary(env: NodeJS.ProcessEnv = process.env): string {
  const given = env.CTXAGENT_BWRAP
  return given !== undefined && given !== '' ? given : 'bwrap'
}

/** The secret places of $HOME hidden even when the workspace or a read-only path holds them. */
export function secretPlaces(home = homedir()): string[] {
  return ['.ssh', '.aws', '.config/gh', '.netrc', '.git-credentials', '.gnupg', '.docker/config.json', '.npmrc', '.pypirc', '.kube', '.config/ctxagent'].map((p) => join(home, p))
}

const probes = new Map<string, string | null>()

/**
 * Runs bwrap once the way commands will need it (a PID namespace and its own /proc, the
 * step nested containers refuse): null when it works, else why not. Cached per binary.
 */
export function probeBwrap(bwrap: string): string | null {
  const cached = probes.get(bwrap)
  if (cached !== undefined) return cached
  const r = spawnSync(bwrap, ['--unshare-pid', '--die-with-parent', '--ro-bind', '/', '/', '--proc', '/proc', 'true'], { encoding: 'utf8', timeout: 10_000, env: { PATH: '/usr/bin:/bin' } })
  let why: string | null = null
  if (r.error) why = (r.error as NodeJS.ErrnoException).code === 'ENOENT' ? `${bwrap} is not installed (apt-get install bubblewrap)` : r.error.message
  else if (r.status !== 0) why = (r.stderr.trim().split('\n')[0] ?? '') || `${bwrap} exited with ${r.status ?? r.signal}`
  probes.set(bwrap, why)
  return why
}

/** What `doctor` shows: the sandbox in force for run_command, whether it works, and why. */
export function describeSandbox(tools: SandboxConfig, env: NodeJS.ProcessEnv = process.env): { mode: 'bwrap' | 'none'; ok: boolean; detail: string } {
  if (tools.sandbox === 'none') return { mode: 'none', ok: true, detail: 'tools.sandbox: none — run_command runs without a sandbox (the operator chose it)' }
  const bwrap = bwrapBinary(env)
  const why = probeBwrap(bwrap)
  if (why !== null) return { mode: 'bwrap', ok: false, detail: `${why}; run_command is refused until bubblewrap works, or set tools.sandbox: none` }
  return { mode: 'bwrap', ok: true, detail: `bubblewrap (${bwrap}): workspace read-write, system read-only, home and task tree hidden, network ${tools.network ? 'on' : 'off'}` }
}

/**
 * The plan for this run, or the reason a shell cannot be offered (the caller refuses
 * --allow-shell with it). `hidden` are real paths never shown to a command: the task
 * tree and the config file.
 */
export function planSandbox(tools: SandboxConfig, hidden: readonly string[], env: NodeJS.ProcessEnv = process.env): { ok: true; plan: SandboxPlan } | { ok: false; why: string } {
  if (tools.sandbox === 'none') return { ok: true, plan: { kind: 'none' } }
  const bwrap = bwrapBinary(env)
  const why = probeBwrap(bwrap)
  if (why !== null) return { ok: false, why }
  return { ok: true, plan: { kind: 'bwrap', bwrap, network: tools.network, readOnly: tools.sandbox_read_only, hidden: [...hidden, ...secretPlaces()] } }
}

const realOr = (p: string): string | null => {
  try {
    return realpathSync(p)
  } catch {
    return null
  }
}

/** The bwrap arguments that run `sh -c command` in `workspace` (a real path). Mount order matters: later mounts cover earlier ones. */
export function bwrapArgs(plan: Extract<SandboxPlan, { kind: 'bwrap' }>, workspace: string, command: string): string[] {
  const a = ['--die-with-parent', '--unshare-pid', '--unshare-ipc', '--unshare-uts', '--unshare-cgroup-try', '--new-session']
  if (!plan.network) a.push('--unshare-net')
  // Merged-/usr systems: /bin, /lib… are links into /usr; recreate them as links.
  for (const p of ['/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32']) {
    let link: string | null = null
    try {
      if (!lstatSync(p).isSymbolicLink()) {
        a.push('--ro-bind', p, p)
        continue
      }
      link = readlinkSync(p)
    } catch {
      continue
    }
    a.push('--symlink', link, p)
  }
  const visible: string[] = [workspace]
  for (const p of ['/usr', '/etc', '/opt', ...plan.readOnly]) {
    const real = realOr(p)
    if (real === null) continue
    a.push('--ro-bind', real, real)
    visible.push(real)
  }
  const home = '/tmp/home'
  a.push('--proc', '/proc', '--dev', '/dev', '--tmpfs', '/tmp', '--dir', home)
  a.push('--bind', workspace, workspace)
  // Hidden places that a mount above shows (the task tree inside the workspace, a config file in it): covered.
  for (const h of plan.hidden) {
    const real = realOr(h)
    if (real === null || !visible.some((v) => inside(v, real))) continue
    if (lstatSync(real).isDirectory()) a.push('--tmpfs', real, '--remount-ro', real)
    else a.push('--ro-bind', '/dev/null', real)
  }
  a.push('--chdir', workspace, '--clearenv')
  for (const [k, v] of Object.entries(sandboxEnv(home))) a.push('--setenv', k, v)
  a.push('--', '/bin/sh', '-c', command)
  return a
}

/**
 * The whole environment of a sandboxed command: none of ctxagent's (a token in it would
 * also sit in bwrap's /proc/1/environ), only what builds and tools need.
 */
function sandboxEnv(home: string): Record<string, string> {
  const keep: Record<string, string> = {}
  for (const k of ['LANG', 'LC_ALL', 'TZ']) {
    const v = process.env[k]
    if (v !== undefined) keep[k] = v
  }
  return { PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', HOME: home, TERM: 'dumb', PAGER: 'cat', GIT_PAGER: 'cat', GIT_TERMINAL_PROMPT: '0', ...keep }
}
