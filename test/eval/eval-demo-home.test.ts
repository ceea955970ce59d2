import { chmodSync, existsSync, mkdtempSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { cliAsync } from '../helpers/run.js'

// `eval run --demo` in a tree that does not exist yet (README's "An eval", a fresh machine): the tree is made as `demo` makes its --home.

function scratch(): string {
  const dir = mkdtempSync(join(tmpdir(), 'ctxagent-eval-home-'))
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
  // The trials' workspaces below it are reached by the sandbox's user (as root: nobody).
  chmodSync(dir, 0o711)
  return dir
}

interface EvalJson {
  remaining: number
  variants: { name: string; pass_at_1: number; trials: { status: string }[] }[]
}

describe('eval run --demo --home DIR', () => {
  it('makes a home that does not exist (0700, its missing parents too) and runs the demo to its end', { timeout: 240_000 }, async () => {
    const dir = scratch()
    const home = join(dir, 'new', 'tree')
    const res = await cliAsync(['--home', home, '--config', 'none', '--json', 'eval', 'run', '--demo', '--work-dir', join(dir, 'work')])
    expect(res.code, res.stderr).toBe(0)
    const report = JSON.parse(res.stdout) as EvalJson
    expect(report.remaining).toBe(0)
    expect(report.variants.map((v) => [v.name, v.pass_at_1])).toEqual([
      ['careful', 1],
      ['hasty', 1 / 3],
    ])
    for (const made of [home, join(dir, 'new')]) expect(statSync(made).mode & 0o777).toBe(0o700)
    expect(existsSync(join(home, 'completed'))).toBe(true)
  })

  it('makes nothing when the input is refused: a --work-dir inside the new tree', async () => {
    const dir = scratch()
    const home = join(dir, 'new')
    const res = await cliAsync(['--home', home, '--config', 'none', 'eval', 'run', '--demo', '--work-dir', join(home, 'work')])
    expect(res.code).toBe(2)
    expect(res.stderr).toMatch(/^ctxagent: --work-dir .* is inside the task tree \(/)
    expect(existsSync(home)).toBe(false)
  })
})
