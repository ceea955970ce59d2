import { homedir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { xdgDirectory } from '../src/xdg.js'

// The one rule for the user's config, cache and state directories (locate.ts, config-cache.ts, layout.ts).
describe('xdgDirectory', () => {
  it('takes an absolute XDG variable as it is', () => {
    expect(xdgDirectory({ XDG_CONFIG_HOME: '/x/conf', HOME: '/home/u' }, 'XDG_CONFIG_HOME')).toBe('/x/conf')
    expect(xdgDirectory({ XDG_CACHE_HOME: '/x/cache' }, 'XDG_CACHE_HOME')).toBe('/x/cache')
    expect(xdgDirectory({ XDG_STATE_HOME: '/x/state' }, 'XDG_STATE_HOME')).toBe('/x/state')
  })

  it('falls back under HOME when the variable is unset, empty or relative', () => {
    for (const value of [undefined, '', 'rel/dir', './here']) {
      const env = { HOME: '/home/u', XDG_CONFIG_HOME: value, XDG_CACHE_HOME: value, XDG_STATE_HOME: value }
      expect(xdgDirectory(env, 'XDG_CONFIG_HOME')).toBe('/home/u/.config')
      expect(xdgDirectory(env, 'XDG_CACHE_HOME')).toBe('/home/u/.cache')
      expect(xdgDirectory(env, 'XDG_STATE_HOME')).toBe('/home/u/.local/state')
    }
  })

  it("uses the account's home when HOME is unset or relative", () => {
    expect(xdgDirectory({}, 'XDG_CACHE_HOME')).toBe(join(homedir(), '.cache'))
    expect(xdgDirectory({ HOME: 'relative' }, 'XDG_STATE_HOME')).toBe(join(homedir(), '.local', 'state'))
  })
})
