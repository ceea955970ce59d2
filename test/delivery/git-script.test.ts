import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { execFileSync } from 'node:child_process'
import { describe, expect, it, onTestFinished } from 'vitest'
import { git, gitScript } from '../../src/delivery/git.js'

/*
 * gitScript (src/delivery/git.ts): a script's `git "$@" …` runs as git() runs git, with the safe
 * settings over whatever the repository configures and git()'s own environment.
 */

function repo(): string {
  const dir = mkdtempSync(join(tmpdir(), 'ctxagent-git-script-'))
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
  execFileSync('git', ['init', '--quiet', dir])
  // What an agent could plant in a repository's own config.
  execFileSync('git', ['-C', dir, 'config', 'core.hooksPath', join(dir, 'planted-hooks')])
  execFileSync('git', ['-C', dir, 'config', 'core.fsmonitor', join(dir, 'planted-monitor')])
  return dir
}

describe('gitScript', () => {
  it("gives each git of the script git()'s settings (over the repository's) and environment", async () => {
    const dir = repo()
    const script = ['git "$@" config --get core.hooksPath', 'git "$@" config --get core.fsmonitor', 'echo "$HOME $GIT_CONFIG_GLOBAL $LC_ALL"'].join('\n')
    const out = await gitScript(script, { safeDir: '*', cwd: dir })
    expect(out).toBe('/dev/null\nfalse\n/nonexistent /dev/null C\n')
    // The same as git() gives one command.
    expect(await git(['config', '--get', 'core.hooksPath'], { safeDir: '*', cwd: dir })).toBe('/dev/null\n')
  })

  it("rejects with the script's last line of stderr when it fails", async () => {
    await expect(gitScript('git "$@" rev-parse --verify refs/heads/none', { safeDir: '*', cwd: repo() })).rejects.toThrow(/git script: fatal: /)
  })
})
