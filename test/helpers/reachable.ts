import { createHash } from 'node:crypto'
import { spawnSync } from 'node:child_process'
import { chmodSync, existsSync, mkdtempSync, readdirSync, renameSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { ROOT } from './run.js'

/** Whether `dir` and every directory above it may be searched by any user (the `x` bit for others). */
function searchableByAll(path: string): boolean {
  for (let dir = path; ; dir = dirname(dir)) {
    if ((statSync(dir).mode & 0o001) === 0) return false
    if (dirname(dir) === dir) return true
  }
}

let mirror: string | null = null

/**
 * This checkout, where another user can reach it: the checkout itself when its path is
 * searchable by all, else a hard-linked copy in the temporary directory (made once per
 * build, shared by the test files). A clone under a private directory (as root's under
 * /root, mode 0700) cannot be entered by the user sandboxed commands and MCP servers run
 * as (nobody), nor by a test's unprivileged user: what they must run or read (an MCP
 * server package, a test server script, bin/ctxagent) is taken from here. An operator
 * installs such servers where that user can read them (docs/security.md#mcp-servers).
 */
export function reachableRoot(): string {
  if (mirror !== null) return mirror
  if (searchableByAll(ROOT)) return (mirror = ROOT)
  const bundle = join(ROOT, 'bundle', 'cli.js')
  const stamp = existsSync(bundle) ? String(statSync(bundle).mtimeMs) : 'none'
  const hash = (text: string) => createHash('sha256').update(text).digest('hex').slice(0, 12)
  const prefix = `ctxagent-test-checkout-${hash(ROOT)}-`
  const target = join(tmpdir(), `${prefix}${hash(stamp)}`)
  if (!existsSync(target)) {
    // An earlier build's copy of this checkout is of no more use.
    for (const old of readdirSync(tmpdir()).filter((name) => name.startsWith(prefix) && join(tmpdir(), name) !== target))
      rmSync(join(tmpdir(), old), { recursive: true, force: true })
    const staging = mkdtempSync(join(tmpdir(), 'ctxagent-test-checkout-staging-'))
    // Hard links where the temporary directory is on the same file system, a copy where it is not.
    let copied = spawnSync('cp', ['-al', `${ROOT}/.`, staging], { stdio: 'ignore' })
    if (copied.status !== 0) copied = spawnSync('cp', ['-a', `${ROOT}/.`, staging], { stdio: 'ignore' })
    if (copied.status !== 0) throw new Error(`could not copy ${ROOT} to ${staging} (cp exited ${copied.status})`)
    rmSync(join(staging, '.git'), { recursive: true, force: true })
    chmodSync(staging, 0o755)
    try {
      renameSync(staging, target)
    } catch {
      // Another test file made it first: theirs is the same.
      rmSync(staging, { recursive: true, force: true })
    }
  }
  return (mirror = target)
}
