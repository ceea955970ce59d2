import { describe, expect, it } from 'vitest'
import { parseConfig, parseYamlWith } from '../../src/config/load.js'
import { environmentSchema } from '../../src/config/environment.js'
import { inconsistency } from '../../src/workspace/environment/definition.js'

const parse = (text: string) => parseYamlWith(environmentSchema, text, '.ctxagent/environment.yml')
const refusal = (text: string): string => {
  try {
    parse(text)
  } catch (err) {
    return (err as Error).message
  }
  return 'accepted'
}

describe('the environment file', () => {
  it('takes every key', () => {
    expect(
      parse(
        'setup: npm ci\nsetup_hosts: [registry.npmjs.org, "*.pypi.org"]\nsetup_secrets: [NPM_TOKEN]\ncache:\n  paths: [node_modules]\n  key: [package-lock.json]\nmaintenance: npm run build\ntest: npm test\nimage: /srv/images/node22.tar\n',
      ),
    ).toEqual({
      setup: 'npm ci',
      setup_hosts: ['registry.npmjs.org', '*.pypi.org'],
      setup_secrets: ['NPM_TOKEN'],
      cache: { paths: ['node_modules'], key: ['package-lock.json'] },
      maintenance: 'npm run build',
      test: 'npm test',
      image: '/srv/images/node22.tar',
    })
  })

  it('refuses in one line naming the key', () => {
    expect(refusal('setup: npm ci\nimages: debian\n')).toBe('.ctxagent/environment.yml: images is not a known setting')
    // An image is a path on the host, never a name to pull.
    expect(refusal('image: debian:12\n')).toMatch(/^\.ctxagent\/environment\.yml: image must be an absolute path on this host/)
    expect(refusal('image: [a]\n')).toMatch(/image must be an absolute path/)
    expect(refusal('cache:\n  paths: [../outside]\n')).toMatch(/^\.ctxagent\/environment\.yml: cache\.paths\[0\] must be a list of paths inside the repository/)
    expect(refusal('cache:\n  paths: [.git/hooks]\n')).toMatch(/cache\.paths\[0\] must be a list of paths inside the repository/)
    expect(refusal('setup_hosts: ["http://x/"]\n')).toMatch(/setup_hosts\[0\] must be a list of host names/)
    expect(refusal('setup_secrets: ["A B"]\n')).toMatch(/setup_secrets\[0\] must be a list of environment variable names/)
    expect(refusal('setup: [npm, ci]\n')).toMatch(/setup must be a shell script/)
    expect(refusal('a: [\n')).toMatch(/is not valid YAML/)
  })

  it('needs cache.paths with a setup, and a setup with a cache', () => {
    expect(inconsistency({ setup: 'npm ci' })).toMatch(/setup needs cache\.paths/)
    expect(inconsistency({ cache: { paths: ['x'], key: [] } })).toMatch(/cache needs a setup/)
    expect(inconsistency({ test: 'npm test' })).toBeNull()
  })

  it("is the operator's config too, keyed by owner/repo or a path", () => {
    expect(parseConfig('environments:\n  acme/shop:\n    test: npm test\n    image: /srv/images/shop\n  /srv/ws:\n    test: make\n').environments).toEqual({
      'acme/shop': { test: 'npm test', image: '/srv/images/shop' },
      '/srv/ws': { test: 'make' },
    })
    expect(() => parseConfig('environments:\n  acme/shop:\n    tests: npm test\n')).toThrow('config.yaml: environments.acme/shop.tests is not a known setting')
    expect(() => parseConfig('environments:\n  shop:\n    test: x\n')).toThrow(
      'config.yaml: environments.shop must be a mapping of owner/repo (or a workspace path) to an environment',
    )
  })
})
