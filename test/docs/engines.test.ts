import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import semver from 'semver'
import { describe, expect, it } from 'vitest'
import { ROOT } from '../helpers/run.js'

interface Lock {
  packages: Record<string, { version?: string; engines?: { node?: string } | string[]; optional?: boolean }>
}

// The README promises the oldest Node in package.json's `engines`: every package `npm ci`
// installs must accept it, or npm warns EBADENGINE on a supported machine (docs/development.md#dependencies).
describe('the Node versions package.json promises', () => {
  it('every locked package accepts the oldest Node ctxagent supports', () => {
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { engines: { node: string } }
    const oldest = semver.minVersion(pkg.engines.node)
    expect(oldest).not.toBeNull()
    const lock = JSON.parse(readFileSync(join(ROOT, 'package-lock.json'), 'utf8')) as Lock
    const refusing = Object.entries(lock.packages)
      .filter(([path, entry]) => path !== '' && entry.optional !== true)
      .flatMap(([path, entry]) => {
        const range = Array.isArray(entry.engines) ? undefined : entry.engines?.node
        return range !== undefined && !semver.satisfies(oldest as semver.SemVer, range) ? [`${path}@${entry.version} wants node ${range}`] : []
      })
    expect(refusing).toEqual([])
  })
})
