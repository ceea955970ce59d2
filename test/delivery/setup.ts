import { execFileSync, spawn } from 'node:child_process'
import type { ChildProcess } from 'node:child_process'
import { chmodSync, existsSync, lchownSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { onTestFinished } from 'vitest'
import { startFakeGithub } from '../helpers/fake-github.js'
import type { FakeGithub } from '../helpers/fake-github.js'
import { startFakeGitlab } from '../helpers/fake-gitlab.js'
import type { FakeGitlab } from '../helpers/fake-gitlab.js'
import { gitHttpHandler } from '../helpers/git-http.js'
import type { GitHandler } from '../helpers/git-http.js'
import { reachableRoot } from '../helpers/reachable.js'
import { ROOT, TEST_ENV } from '../helpers/run.js'
import type { CliResult } from '../helpers/run.js'
import { giveToSandbox } from '../helpers/sandbox-owner.js'
import { onlyTask, runSetup, waitFor } from '../run/harness.js'
import type { RunSetup } from '../run/harness.js'

/** The identity of the test's own git commands (the operator's), never the delivery's. */
const OPERATOR = {
  GIT_AUTHOR_NAME: 'Operator',
  GIT_AUTHOR_EMAIL: 'op@example.org',
  GIT_COMMITTER_NAME: 'Operator',
  GIT_COMMITTER_EMAIL: 'op@example.org',
  GIT_CONFIG_NOSYSTEM: '1',
  GIT_CONFIG_GLOBAL: '/dev/null',
}

/** git as the test (the operator) runs it: safe.directory for the sandbox-owned workspace. */
export function git(args: string[], cwd: string): string {
  return execFileSync('git', ['-c', 'safe.directory=*', ...args], {
    cwd,
    env: { PATH: process.env.PATH, HOME: '/nonexistent', ...OPERATOR },
    encoding: 'utf8',
  }).trim()
}

export interface DeliverySetup extends RunSetup {
  /** Where the bare origin repository is (a path). */
  bare: string
  /** The workspace's origin URL. */
  origin: string
  /** An empty HOME: no host git identity or configuration. */
  home: string
  /** The commit the workspace starts from (main). */
  first: string
  gh: FakeGithub | null
  gl: FakeGitlab | null
  /** Authorization headers git's HTTP server saw. */
  auth: (string | null)[]
  /** The forge token in force. */
  token: string
  /** ctxagent with HOME empty; `env` more. */
  cli(args: string[], env?: Record<string, string>): Promise<CliResult>
  /** The same as a child, to signal. */
  spawn(args: string[], env?: Record<string, string>): ChildProcess
  /**
   * As root, from now on ctxagent runs as `uid` (setpriv), its task tree and HOME given to
   * that user (the workspace is the sandbox user's already); 0: as root. Not root: as itself.
   */
  runAs(uid: number): void
}

/**
 * A workspace that is a clone of a bare `origin` (over a path, or git's smart HTTP on the
 * forge stand-in's own host, where the token is required), a fake LLM, and a config with
 * the forge and `extra` YAML. With `item.mr`, the GitLab stand-in's item is its merge request !12.
 */
export async function deliverySetup(forge: 'github' | 'gitlab' | 'path', extra = '', item: { mr?: boolean } = {}): Promise<DeliverySetup> {
  const root = mkdtempSync(join(tmpdir(), 'ctxagent-deliver-test-'))
  onTestFinished(() => rmSync(root, { recursive: true, force: true }))
  const served = join(root, 'served')
  const home = join(root, 'home')
  mkdirSync(home)
  const auth: (string | null)[] = []
  let handler: GitHandler = () => undefined
  const gh = forge === 'github' ? await startFakeGithub({ git: (req, res) => handler(req, res) }) : null
  const gl = forge === 'gitlab' ? await startFakeGitlab({ ...item, git: (req, res) => handler(req, res) }) : null
  const token = gh?.token ?? gl?.token ?? 'ghp_unused0000000000000000000000000000'
  if (gh) handler = gitHttpHandler(served, 'x-access-token', gh.token, auth)
  if (gl) handler = gitHttpHandler(served, 'oauth2', gl.token, auth)
  const s = await runSetup()
  const forgeYaml = gh
    ? `github:\n  api_url: ${gh.url}\n  token: ${gh.token}\n  bot_name: ctxagent-bot\ncomments:\n  min_interval_seconds: 0.01\n`
    : gl
      ? `gitlab:\n  url: ${gl.url}\n  token: ${gl.token}\n  bot_name: ctxagent-bot\ncomments:\n  min_interval_seconds: 0.01\n`
      : ''
  writeFileSync(s.config, s.fake.configYaml(`${forgeYaml}${extra}`))
  git(['init', '--quiet', '-b', 'main'], s.ws)
  writeFileSync(join(s.ws, '.gitignore'), 'build/\n')
  git(['add', '.'], s.ws)
  git(['commit', '--quiet', '-m', 'calc v1'], s.ws)
  const repoPath = gl ? 'acme/backend/api.git' : 'acme/shop.git'
  const bare = join(served, repoPath)
  mkdirSync(join(bare, '..'), { recursive: true })
  git(['clone', '--quiet', '--bare', s.ws, bare], root)
  const origin = forge === 'path' ? bare : `${(gh ?? gl)?.url}/${repoPath}`
  git(['remote', 'add', 'origin', origin], s.ws)
  giveToSandbox(s.ws)
  const env = (more: Record<string, string>) => ({ ...process.env, ...TEST_ENV, HOME: home, ...more })
  const common = ['--home', s.tree.base, '--config', s.config]
  let as = 0
  const argv = (args: string[]): [string, string[]] => {
    const own = [process.execPath, join(as === 0 ? ROOT : reachableRoot(), 'bin', 'ctxagent'), ...args, ...common]
    return as === 0 ? [own[0] as string, own.slice(1)] : ['setpriv', [`--reuid=${as}`, `--regid=${as}`, '--clear-groups', '--', ...own]]
  }
  return {
    ...s,
    bare,
    origin,
    home,
    first: git(['rev-parse', 'HEAD'], s.ws),
    gh,
    gl,
    auth,
    token,
    cli: (args, more = {}) =>
      new Promise((resolve) => {
        const [command, rest] = argv(args)
        const child = spawn(command, rest, { cwd: '/', env: env(more) })
        let stdout = ''
        let stderr = ''
        child.stdout.on('data', (d: Buffer) => (stdout += d.toString()))
        child.stderr.on('data', (d: Buffer) => (stderr += d.toString()))
        child.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }))
      }),
    spawn: (args, more = {}) => {
      const [command, rest] = argv(args)
      const child = spawn(command, rest, { cwd: '/', env: env(more), stdio: ['ignore', 'pipe', 'pipe'] })
      onTestFinished(() => {
        if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
      })
      return child
    },
    runAs: (uid) => {
      if (process.getuid?.() !== 0) return
      as = uid
      for (const dir of [s.tree.base, home]) giveTo(dir, uid)
    },
  }
}

/** Gives `dir` and everything in it to `uid`, its parent made searchable (never the temporary directory itself: it is everyone's). */
function giveTo(dir: string, uid: number): void {
  const parent = dirname(dir)
  if (parent !== tmpdir() && parent !== '/tmp') chmodSync(parent, 0o711)
  const walk = (p: string): void => {
    lchownSync(p, uid, uid)
    if (lstatSync(p).isDirectory()) for (const name of readdirSync(p)) walk(join(p, name))
  }
  walk(dir)
}

/**
 * Runs ctxagent with `args` held at its task's start (after its tree is made and its
 * repository recorded, before the first turn): `agent` plays the agent there, given the
 * tree the task works in (metadata's `run.workspace`; what a command in the sandbox could
 * do to it), then the run goes on. Resolves to its exit and output.
 */
export async function runWithAgent(s: DeliverySetup, args: string[], agent: (tree: string) => void): Promise<CliResult> {
  const markers = mkdtempSync(join(tmpdir(), 'ctxagent-hold-'))
  chmodSync(markers, 0o777)
  onTestFinished(() => rmSync(markers, { recursive: true, force: true }))
  const marker = join(markers, 'held')
  const child = s.spawn(args, { CTXAGENT_TEST_HOLD_AT: 'run:after-take', CTXAGENT_TEST_HOLD_MARKER: marker })
  let stdout = ''
  let stderr = ''
  child.stdout?.on('data', (d: Buffer) => (stdout += d.toString()))
  child.stderr?.on('data', (d: Buffer) => (stderr += d.toString()))
  const closed = new Promise<number>((resolve) => child.on('close', (code) => resolve(code ?? -1)))
  await waitFor('the run held at its start', () => existsSync(marker) || child.exitCode !== null)
  if (existsSync(marker)) {
    agent(runOf(onlyTask(s.tree)).workspace)
    rmSync(marker)
  }
  return { code: await closed, stdout, stderr }
}

/** Branches of a repository (a bare one, or the workspace's). */
export function branches(gitDir: string): string[] {
  return git(['--git-dir', gitDir, 'for-each-ref', '--format=%(refname:short)', 'refs/heads/'], '/')
    .split('\n')
    .filter((b) => b !== '')
}

/** Every file under `dir` whose bytes hold `needle`. */
export function filesHolding(dir: string, needle: string): string[] {
  const out: string[] = []
  const walk = (d: string): void => {
    if (!existsSync(d)) return
    for (const name of readdirSync(d)) {
      const p = join(d, name)
      const st = statSync(p, { throwIfNoEntry: false })
      if (st?.isDirectory()) walk(p)
      else if (st?.isFile() && readFileSync(p).includes(needle)) out.push(p)
    }
  }
  walk(dir)
  return out
}

/** A reply that changes a file (an existing one is read first, as write_file asks). */
export const write = (path: string, content: string, existing = true) => ({
  calls: [...(existing ? [{ name: 'read_file', arguments: { path } }] : []), { name: 'write_file', arguments: { path, content } }],
})

export const FIXED = 'export function add(a, b) {\n  return a + b\n}\n'

/** metadata.run of a task as delivery reads it: its workspace, and what it started from (docs/delivery.md#what-a-task-starts-from). */
export function runOf(task: { metadata: Record<string, unknown> }): {
  workspace: string
  starts_from?: { kind: string; workspace: string; commit: string; worktree?: string; git_dir?: string }
} {
  return task.metadata.run as ReturnType<typeof runOf>
}
