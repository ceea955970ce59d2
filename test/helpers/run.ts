import { spawn, spawnSync } from 'node:child_process'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'

export const ROOT = fileURLToPath(new URL('../..', import.meta.url))
export const BIN = `${ROOT}bin/ctxagent`

export interface CliResult {
  code: number
  stdout: string
  stderr: string
}

/**
 * The environment every test's ctxagent gets: no inherited home or config, and the XDG
 * directories pointed away from the user's own (so that no test reads ~/.config/ctxagent
 * or writes ~/.local/state/ctxagent).
 */
export const TEST_ENV: Record<string, string> = {
  NO_COLOR: '1',
  CTXAGENT_DEBUG: '',
  CTXAGENT_HOME: '',
  CTXAGENT_CONFIG: '',
  XDG_CONFIG_HOME: '/nonexistent/ctxagent-test-config',
  XDG_STATE_HOME: '/nonexistent/ctxagent-test-state',
  // The validation cache (src/config/config-cache.ts) and Node 22's compile cache: the suite's
  // own, shared by its tests (a cache, so a hit or a miss gives the same result), never the user's.
  XDG_CACHE_HOME: join(tmpdir(), `ctxagent-test-cache-${process.getuid?.() ?? 0}`),
  OPENAI_BASE_URL: '',
  GH_TOKEN: '',
  OLLAMA_HOST: '',
}

/** Runs the built binary, as an operator would. */
export function cli(args: string[], env: Record<string, string> = {}, cwd = ROOT): CliResult {
  const res = spawnSync(process.execPath, [BIN, ...args], {
    cwd,
    encoding: 'utf8',
    env: { ...process.env, ...TEST_ENV, ...env },
  })
  return { code: res.status ?? -1, stdout: res.stdout, stderr: res.stderr }
}

/** Same, without blocking the event loop (for several at once, or a server in this process). */
export function cliAsync(args: string[], env: Record<string, string> = {}, cwd = ROOT): Promise<CliResult> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [BIN, ...args], {
      cwd,
      env: { ...process.env, ...TEST_ENV, ...env },
    })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()))
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()))
    child.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }))
  })
}

/** Starts a helper script (test/helpers/*.mjs) as a real child process. */
export function helper(name: string, args: string[]) {
  return spawn(process.execPath, [`${ROOT}test/helpers/${name}`, ...args], { stdio: ['ignore', 'pipe', 'pipe'] })
}

/** Same, with its stdin a pipe (to tell it when to start). */
export function helperWithStdin(name: string, args: string[]) {
  return spawn(process.execPath, [`${ROOT}test/helpers/${name}`, ...args], { stdio: ['pipe', 'pipe', 'pipe'] })
}

/** A pid that certainly belonged to a process that has exited. */
export function deadPid(): number {
  return spawnSync(process.execPath, ['-e', '0']).pid as number
}

/** watch-locks --json output without its per-pass summary line (`{"pass":{…}}`): the findings only, as text. */
export function findingsText(stdout: string): string {
  return stdout
    .split('\n')
    .filter((l) => !l.startsWith('{"pass":'))
    .join('\n')
}
