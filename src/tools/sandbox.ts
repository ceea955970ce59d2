import { spawnSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { homedir } from 'node:os'
import { isAbsolute, join } from 'node:path'
import { proxyEnv, withForwarder } from './sandbox/egress-forwarder.js'
import { networkMode } from './sandbox/egress-policy.js'
import type { EgressSettings, NetworkMode } from './sandbox/egress-policy.js'
import { sandboxIdentity } from './sandbox/identity.js'
import type { SandboxIdentity } from './sandbox/identity.js'
import { DEFAULT_LIMITS, describeLimits, PRLIMIT, prlimitArgs } from './sandbox/limits.js'
import type { CommandLimits } from './sandbox/limits.js'
import { hostProgram, hostProgramMounts } from './sandbox/host-programs.js'
import { HOME, mountArgs } from './sandbox/mounts.js'
import { GATE, INFO_FD } from './sandbox/sandbox-child.js'
import { REFUSED_SYSCALLS, seccompSupported } from './sandbox/seccomp.js'

/*
 * run_command's sandbox: bubblewrap (Debian `bubblewrap`, the `bwrap` binary), as Claude
 * Code does on Linux. Flags chosen by measurement (test/tools/sandbox.test.ts pins them):
 * --unshare-pid with --die-with-parent is what kills `setsid sleep &` when the command
 * ends (bwrap's pid 1 gets SIGKILL when the monitor exits, and the namespace dies with
 * it); a new /proc shows only the sandbox's pids, so no /proc/<ctxagent>/environ.
 * Whatever user ctxagent runs as, the command runs as an unprivileged identity (see
 * sandbox/identity.ts) in its own user namespace, with no capabilities, no_new_privs,
 * a seccomp filter (sandbox/seccomp.ts) and rlimits (sandbox/limits.ts). What is
 * mounted is in sandbox/mounts.ts; docs/security.md has the whole picture.
 */

/** How run_command runs, decided once at start (tools.sandbox). */
export type SandboxPlan =
  | {
      kind: 'bwrap'
      bwrap: string
      network: NetworkMode
      /** What the egress proxy lets through when network is proxy (tools.allowed_hosts, tools.allowed_networks). */
      egress: EgressSettings
      readOnly: readonly string[]
      hidden: readonly string[]
      /** Hidden places that do not exist yet (a config directory): no command may create them either. */
      absent?: readonly string[]
      identity: SandboxIdentity
      limits: CommandLimits
      /** An environment's image (a real directory), whose system a command sees instead of the host's (docs/environments.md#an-image). */
      root?: string
    }
  | { kind: 'none'; limits?: CommandLimits | undefined }

/** The config keys this reads (tools.sandbox, tools.network, tools.allowed_hosts, tools.allowed_networks, tools.sandbox_read_only, tools.sandbox_user, tools.limits). */
export interface SandboxConfig {
  sandbox: 'bwrap' | 'none'
  /** none, proxy or host (false and true: none and proxy). */
  network: NetworkMode | boolean
  allowed_hosts?: readonly string[] | null
  allowed_networks?: readonly string[]
  sandbox_read_only: readonly string[]
  sandbox_user?: string | null
  limits?: CommandLimits
}

/** The bwrap binary: CTXAGENT_BWRAP (tests point it at a missing file), else `bwrap` on PATH. */
export function bwrapBinary(env: NodeJS.ProcessEnv = process.env): string {
  const given = env.CTXAGENT_BWRAP
  return given !== undefined && given !== '' ? given : 'bwrap'
}

/** The secret places of $HOME hidden even when the workspace or a read-only path holds them. */
export function secretPlaces(home = homedir()): string[] {
  return ['.ssh', '.aws', '.config/gh', '.netrc', '.git-credentials', '.gnupg', '.docker/config.json', '.npmrc', '.pypirc', '.kube', '.config/ctxagent'].map(
    (p) => join(home, p),
  )
}

const probes = new Map<string, string | null>()

/**
 * Runs bwrap once the way commands will need it (a user and a PID namespace and its own
 * /proc, the step nested containers refuse), as nobody when root: null when it works,
 * else why not. Cached per binary. prlimit and a seccomp filter for this architecture
 * are required too.
 */
export function probeBwrap(bwrap: string): string | null {
  const cached = probes.get(bwrap)
  if (cached !== undefined) return cached
  const root = process.getuid?.() === 0
  const as = root ? { uid: 65534, gid: 65534 } : {}
  const r = spawnSync(
    bwrap,
    ['--unshare-user', '--disable-userns', '--cap-drop', 'ALL', '--unshare-pid', '--die-with-parent', '--ro-bind', '/', '/', '--proc', '/proc', 'true'],
    { ...as, encoding: 'utf8', timeout: 10_000, env: { PATH: '/usr/bin:/bin' } },
  )
  let why: string | null = null
  if (r.error) why = (r.error as NodeJS.ErrnoException).code === 'ENOENT' ? `${bwrap} is not installed (apt-get install bubblewrap)` : r.error.message
  else if (r.status !== 0) why = (r.stderr.trim().split('\n')[0] ?? '') || `${bwrap} exited with ${r.status ?? r.signal}`
  else if (!existsSync(PRLIMIT)) why = `${PRLIMIT} is missing (util-linux); it sets the commands' limits`
  else if (!seccompSupported()) why = `no seccomp filter for the ${process.arch} architecture (x64 and arm64 have one)`
  probes.set(bwrap, why)
  return why
}

/** What `doctor` shows: the sandbox in force for run_command, whether it works, and why. */
export function describeSandbox(
  tools: SandboxConfig,
  env: NodeJS.ProcessEnv = process.env,
  workspace = process.cwd(),
): { mode: 'bwrap' | 'none'; ok: boolean; detail: string } {
  const limits = tools.limits ?? DEFAULT_LIMITS
  if (tools.sandbox === 'none')
    return {
      mode: 'none',
      ok: true,
      detail: `tools.sandbox: none — run_command runs without a sandbox, as ctxagent's own user (the operator chose it); ${describeLimits(limits)}`,
    }
  const bwrap = bwrapBinary(env)
  const why = probeBwrap(bwrap)
  if (why !== null) return { mode: 'bwrap', ok: false, detail: `${why}; run_command is refused until bubblewrap works, or set tools.sandbox: none` }
  let who: string
  try {
    const id = sandboxIdentity({ sandbox_user: tools.sandbox_user ?? null }, workspace)
    who = `as ${id.name} (uid ${id.uid}, gid ${id.gid}; ${id.why})`
  } catch (err) {
    return { mode: 'bwrap', ok: false, detail: (err as Error).message }
  }
  return {
    mode: 'bwrap',
    ok: true,
    detail: `bubblewrap (${bwrap}): ${who}, no capabilities, no_new_privs, seccomp refusing ${REFUSED_SYSCALLS.length} syscalls and new user namespaces; workspace read-write, system read-only, /etc only what programs need, home and task tree hidden, ${describeNetwork(tools)}; ${describeLimits(limits)}`,
  }
}

/** The network part of doctor's line. */
export function describeNetwork(tools: Pick<SandboxConfig, 'network' | 'allowed_hosts' | 'allowed_networks'>): string {
  const mode = networkMode(tools.network)
  if (mode === 'none') return 'network off'
  if (mode === 'host') return "network: the host's (tools.network: host)"
  const hosts = tools.allowed_hosts ?? null
  const networks = tools.allowed_networks ?? []
  return `network through the egress proxy to ${hosts === null ? 'any public host' : `${hosts.length} allowed host(s)`}${networks.length > 0 ? ` (and ${networks.join(', ')})` : ''}`
}

/**
 * The plan for this run, or the reason a shell cannot be offered (the caller refuses
 * --allow-shell with it). `hidden` are real paths never shown to a command: the task
 * tree and the config file. Throws a UsageError for a tools.sandbox_user that cannot be.
 */
export function planSandbox(
  tools: SandboxConfig,
  hidden: readonly string[],
  workspace: string,
  env: NodeJS.ProcessEnv = process.env,
): { ok: true; plan: SandboxPlan } | { ok: false; why: string } {
  const limits = tools.limits ?? DEFAULT_LIMITS
  if (tools.sandbox === 'none') return { ok: true, plan: { kind: 'none', ...(existsSync(PRLIMIT) ? { limits } : {}) } }
  const bwrap = bwrapBinary(env)
  const why = probeBwrap(bwrap)
  if (why !== null) return { ok: false, why }
  const identity = sandboxIdentity({ sandbox_user: tools.sandbox_user ?? null }, workspace)
  const absent = hidden.filter((h) => !existsSync(h))
  const egress = { allowedHosts: tools.allowed_hosts ?? null, allowedNetworks: tools.allowed_networks ?? [] }
  return {
    ok: true,
    plan: {
      kind: 'bwrap',
      bwrap,
      network: networkMode(tools.network),
      egress,
      readOnly: tools.sandbox_read_only,
      hidden: [...hidden, ...secretPlaces()],
      absent,
      identity,
      limits,
    },
  }
}

type BwrapPlan = Extract<SandboxPlan, { kind: 'bwrap' }>

/**
 * The bwrap arguments that run `argv` in `workspace` (a real path) under the plan: its
 * own user namespace as the plan's identity, no capabilities, the seccomp filter read
 * from fd 3 (the caller provides it: seccompFilter()), the limits through prlimit.
 * `env` is the whole environment (--clearenv); without it the process keeps bwrap's
 * environment (an MCP server's, whose tokens must not sit in a command line) with
 * HOME and PATH of the sandbox.
 */
export function sandboxArgs(
  plan: BwrapPlan,
  workspace: string,
  argv: readonly string[],
  options: {
    env?: Record<string, string>
    readOnly?: readonly string[]
    chdir?: string
    egressSocket?: string
    binds?: readonly { from: string; to: string; readOnly?: boolean }[]
    /** bwrap writes its init's pid to descriptor INFO_FD, and the command waits at the gate on GATE_FD (pipes the spawner opens there, given to a SandboxChild). */
    info?: boolean
  } = {},
): string[] {
  const { uid, gid } = plan.identity
  const a = ['--unshare-user', '--disable-userns', '--uid', String(uid), '--gid', String(gid), '--cap-drop', 'ALL', '--seccomp', '3']
  // Who the sandbox's init is, for a stop that must reach it (sandbox/sandbox-child.ts): the spawner gives bwrap a pipe there.
  if (options.info === true) a.push('--info-fd', String(INFO_FD))
  // Behind the proxy (network: proxy), the forwarder inside is ctxagent's own node, shown read-only where it is not already.
  const egress = plan.network === 'proxy' ? (options.egressSocket ?? null) : null
  const node = process.execPath
  const nodeShown = egress !== null && plan.root === undefined && isAbsolute(node) && !['/usr/', '/bin/', '/opt/'].some((top) => node.startsWith(top))
  const readOnly = [...plan.readOnly, ...(options.readOnly ?? []), ...(nodeShown ? [node] : [])]
  a.push(
    ...mountArgs(
      {
        network: plan.network,
        ...(egress !== null ? { egressSocket: egress } : {}),
        readOnly,
        hidden: plan.hidden,
        absent: plan.absent ?? [],
        binds: options.binds ?? [],
        ...(plan.root !== undefined ? { root: plan.root } : {}),
        ...(process.getuid?.() === 0 ? { as: { uid, gid } } : {}),
      },
      workspace,
    ),
  )
  // In an image, the host's prlimit and node (the forwarder) are not there: they and their libraries are shown apart, run by their own loader.
  const image = plan.root !== undefined
  if (image) a.push(...hostProgramMounts([PRLIMIT, ...(egress !== null ? [node] : [])]))
  const forwarder = egress === null ? null : image ? hostProgram(node) : [node]
  const [, ...limits] = prlimitArgs(plan.limits)
  const prlimit = image ? hostProgram(PRLIMIT) : [PRLIMIT]
  a.push('--chdir', options.chdir ?? workspace)
  const extra = egress !== null ? proxyEnv() : {}
  if (options.env !== undefined) {
    a.push('--clearenv')
    for (const [k, v] of Object.entries({ ...options.env, ...extra })) a.push('--setenv', k, v)
  } else {
    for (const [k, v] of Object.entries({ HOME, PATH: SANDBOX_PATH, ...extra })) a.push('--setenv', k, v)
  }
  // Behind the gate, nothing starts before the sandbox is sure to die with ctxagent (sandbox/sandbox-child.ts).
  const gate = options.info === true ? GATE : []
  a.push('--', ...gate, ...prlimit, ...limits, ...(forwarder !== null ? withForwarder(forwarder, argv) : argv))
  return a
}

/** The bwrap arguments that run `sh -c command` in `workspace` (behind the proxy listening on `egressSocket`, for network: proxy). */
export function bwrapArgs(plan: BwrapPlan, workspace: string, command: string, egressSocket?: string): string[] {
  return sandboxArgs(plan, workspace, ['/bin/sh', '-c', command], { env: sandboxEnv(), info: true, ...(egressSocket !== undefined ? { egressSocket } : {}) })
}

/** How to start bwrap for the plan: as its identity when ctxagent is root (which also clears supplementary groups). */
export function spawnIdentity(plan: BwrapPlan): { uid?: number; gid?: number } {
  return process.getuid?.() === 0 ? { uid: plan.identity.uid, gid: plan.identity.gid } : {}
}

const SANDBOX_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'

/**
 * The whole environment of a sandboxed command: none of ctxagent's (a token in it would
 * also sit in bwrap's /proc/1/environ), only what builds and tools need.
 */
export function sandboxEnv(): Record<string, string> {
  const keep: Record<string, string> = {}
  for (const k of ['LANG', 'LC_ALL', 'TZ']) {
    const v = process.env[k]
    if (v !== undefined) keep[k] = v
  }
  return { PATH: SANDBOX_PATH, HOME, TERM: 'dumb', PAGER: 'cat', GIT_PAGER: 'cat', GIT_TERMINAL_PROMPT: '0', ...keep }
}
