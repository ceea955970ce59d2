import { execFile } from 'node:child_process'

/**
 * git as delivery runs it in a workspace an agent wrote to (docs/delivery.md#safety-in-an-agents-repository):
 * nothing the repository configures can run a program. Every call gets
 *
 * - `-c` settings that turn off what runs programs or reads other places: hooks
 *   (`core.hooksPath=/dev/null`: pre-commit, reference-transaction, pre-push, …),
 *   `core.fsmonitor`, the untracked cache, `diff.external`, textconv, the attributes
 *   file of the host, credential helpers and askpass programs, the program a fetch asks
 *   for an alternate's refs (`core.alternateRefsCommand`), the `ext::` transport,
 *   automatic gc and maintenance, GPG signing;
 * - an environment of its own: no system or global configuration (so no host identity
 *   either), no replace objects (refs/replace could swap the base's tree), no prompts,
 *   and none of the GIT_* variables that point git at another repository;
 * - `safe.directory` for the one workspace it works in (as root, the workspace belongs
 *   to the sandbox user; the setting is given for that command only).
 *
 * Filters (`.gitattributes` naming `filter.<x>` of the repository's config) are out of
 * reach another way: the change is staged in a git directory of delivery's own, whose
 * configuration defines no filter (see stage.ts).
 */
export const SAFE_CONFIG: readonly string[] = [
  'core.hooksPath=/dev/null',
  'core.fsmonitor=false',
  // Empty: git lists an alternate's refs itself (a planted command would run on every fetch).
  'core.alternateRefsCommand=',
  'core.untrackedCache=false',
  'core.attributesFile=/dev/null',
  'core.askPass=',
  'core.sshCommand=ssh',
  'core.gitProxy=',
  'diff.external=',
  'credential.helper=',
  'protocol.ext.allow=never',
  'commit.gpgSign=false',
  'tag.gpgSign=false',
  'gc.auto=0',
  'maintenance.auto=false',
  'fetch.recurseSubmodules=false',
  'submodule.recurse=false',
  'push.recurseSubmodules=no',
  'transfer.credentialsInUrl=die',
]

export interface GitOptions {
  /** The workspace (or git directory) named in safe.directory. */
  safeDir: string
  cwd?: string
  /** More environment (GIT_DIR, GIT_INDEX_FILE, GIT_AUTHOR_*, the credential variables). */
  env?: Record<string, string>
  /** As root, run as the workspace's owner (writes into its .git stay its files). */
  uid?: number
  gid?: number
  /** Extra `-c` settings after the safe ones (a credential helper for one push). */
  config?: readonly string[]
  /** Let git read the host's system and global configuration (a push with git's own credentials). */
  hostConfig?: boolean
  input?: string
  /** How stdout is decoded (latin1: one character a byte, for object contents); utf8 unless given. */
  encoding?: 'utf8' | 'latin1'
  /** Bytes of output at most (diffs). */
  maxBuffer?: number
}

export class GitError extends Error {}

/** git's environment and `-c` settings for one call: what every call of git() and gitScript() gets. */
function invocation(options: GitOptions): { env: Record<string, string>; flags: string[] } {
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    LC_ALL: 'C',
    HOME: options.hostConfig ? (process.env.HOME ?? '/nonexistent') : '/nonexistent',
    GIT_TERMINAL_PROMPT: '0',
    GIT_ASKPASS: '',
    SSH_ASKPASS: '',
    GIT_NO_REPLACE_OBJECTS: '1',
    GIT_ATTR_NOSYSTEM: '1',
    GIT_OPTIONAL_LOCKS: '0',
    ...(options.hostConfig ? hostVariables() : { GIT_CONFIG_NOSYSTEM: '1', GIT_CONFIG_GLOBAL: '/dev/null' }),
    ...options.env,
  }
  const config = [
    ...(options.hostConfig ? SAFE_CONFIG.filter((c) => !c.startsWith('core.sshCommand=')) : SAFE_CONFIG),
    `safe.directory=${options.safeDir}`,
    ...(options.config ?? []),
  ]
  return { env, flags: config.flatMap((c) => ['-c', c]) }
}

/** Runs git with the safe settings; resolves to stdout, rejects with git's last line of stderr. */
export function git(args: readonly string[], options: GitOptions): Promise<string> {
  const { env, flags } = invocation(options)
  return run('git', [...flags, ...args], env, options, `git ${args[0] ?? ''}`)
}

/**
 * Runs a script of ctxagent's own under sh, whose every git command is written `git "$@" …`:
 * "$@" holds git()'s safe settings and the environment is git()'s. For a few read-only commands
 * that would each be a process forked from Node: a fork of a large process costs Node's main
 * thread ~7 ms, ~15 ms each for three at once on a loaded host, and sh's forks next to nothing
 * (docs/fleet.md#dispatch-latency). The script is a constant: nothing of a workspace, a task or
 * a job is ever put into its text. Resolves to its stdout; rejects when it exits other than 0.
 */
export function gitScript(script: string, options: GitOptions): Promise<string> {
  const { env, flags } = invocation(options)
  return run('sh', ['-c', script, 'sh', ...flags], env, options, 'git script')
}

function run(file: string, args: readonly string[], env: Record<string, string>, options: GitOptions, what: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = execFile(
      file,
      args,
      {
        env,
        cwd: options.cwd ?? '/',
        encoding: options.encoding ?? 'utf8',
        maxBuffer: options.maxBuffer ?? 64 * 1024 * 1024,
        timeout: 600_000,
        ...(options.uid !== undefined ? { uid: options.uid, gid: options.gid ?? options.uid } : {}),
      },
      (err, stdout, stderr) => {
        if (err === null) resolve(String(stdout))
        else reject(new GitError(`${what}: ${lastLine(String(stderr)) || err.message}`))
      },
    )
    if (options.input !== undefined) {
      // git may exit before it reads its input (not a repository, a bad ref): its EPIPE is not an error of ours, its exit says what went wrong.
      child.stdin?.on('error', () => undefined)
      child.stdin?.end(options.input)
    }
  })
}

/** What git's own credentials need from the host (ssh agent, a credential store in HOME). */
function hostVariables(): Record<string, string> {
  const out: Record<string, string> = {}
  for (const key of ['SSH_AUTH_SOCK', 'XDG_CONFIG_HOME', 'USER']) {
    const value = process.env[key]
    if (value !== undefined) out[key] = value
  }
  return out
}

function lastLine(text: string): string {
  // The reason, not git's summary of it ("failed to push some refs" follows the rejected ref's line).
  const lines = text
    .trim()
    .split('\n')
    .filter((l) => l.trim() !== '' && !l.startsWith('hint:') && !l.includes('failed to push some refs'))
  return (lines.pop() ?? '').trim().slice(0, 300)
}
