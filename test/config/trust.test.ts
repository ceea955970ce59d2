import { chmodSync, chownSync, mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { loadConfig } from '../../src/config/load.js'
import { UsageError } from '../../src/errors.js'
import { makeTree } from '../fixtures/tree.js'

const isRoot = process.getuid?.() === 0

/** A config file in its own directory (0700, like mkdtemp's), with a key to tell it was read. */
function configFile(): { dir: string; file: string } {
  const dir = join(makeTree().base, 'conf')
  mkdirSync(dir, { mode: 0o700 })
  const file = join(dir, 'config.yaml')
  writeFileSync(file, 'context:\n  base_dir: from-file\n', { mode: 0o600 })
  return { dir, file }
}

function refusal(flag: string): string {
  try {
    loadConfig({ flag, env: {}, cwd: '/' })
  } catch (err) {
    expect(err).toBeInstanceOf(UsageError)
    expect((err as UsageError).exitCode).toBe(2)
    return `${(err as UsageError).message} (${(err as UsageError).hint})`
  }
  throw new Error('the config file was read')
}

describe('a config file anyone but its owner could change is refused (StrictModes)', () => {
  it('reads a file only its owner may write, in directories only their owners may write', () => {
    const { file } = configFile()
    expect(loadConfig({ flag: file, env: {}, cwd: '/' }).config.context.base_dir).toBe('from-file')
  })

  it.each(['620', '602', '666'])('refuses the file at mode %s', (octal) => {
    const { file } = configFile()
    const mode = parseInt(octal, 8)
    chmodSync(file, mode)
    expect(refusal(file)).toMatch(
      new RegExp(`^${file}: refused as config: its group or others may write it \\(mode 0${mode.toString(8)}\\) \\(chmod go-w ${file}; `),
    )
  })

  it('refuses a file in a group- or world-writable directory, but not in a sticky one such as /tmp', () => {
    const { dir, file } = configFile()
    chmodSync(dir, 0o777)
    expect(refusal(file)).toContain(`its directory ${dir} may be written by its group or others (mode 0777)`)
    chmodSync(dir, 0o770)
    expect(refusal(file)).toContain(`its directory ${dir} may be written by its group or others (mode 0770)`)
    chmodSync(dir, 0o1777)
    expect(loadConfig({ flag: file, env: {}, cwd: '/' }).config.context.base_dir).toBe('from-file')
  })

  it('refuses a file found without --config as well (~/.config/ctxagent/config.yaml)', () => {
    const { dir, file } = configFile()
    chmodSync(file, 0o666)
    const xdg = join(dir, 'xdg')
    mkdirSync(join(xdg, 'ctxagent'), { recursive: true })
    writeFileSync(join(xdg, 'ctxagent', 'config.yaml'), 'context:\n  base_dir: found\n')
    chmodSync(join(xdg, 'ctxagent', 'config.yaml'), 0o646)
    expect(() => loadConfig({ env: { XDG_CONFIG_HOME: xdg }, cwd: '/' })).toThrow(
      /config\.yaml: refused as config: its group or others may write it \(mode 0646\)/,
    )
  })

  it.runIf(isRoot)('refuses a file, or a directory above it, owned by someone other than root or this user', () => {
    const { dir, file } = configFile()
    chownSync(file, 4321, 4321)
    expect(refusal(file)).toContain('refused as config: it is owned by uid 4321, neither root nor you')
    chownSync(file, 0, 0)
    chownSync(dir, 4321, 4321)
    expect(refusal(file)).toContain(`its directory ${dir} is owned by uid 4321, neither root nor you`)
  })
})
