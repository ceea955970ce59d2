import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { loadConfig, parseConfig } from '../src/config.js'
import { UsageError } from '../src/errors.js'
import { makeTree } from './fixtures/tree.js'

describe('parseConfig', () => {
  it('fills every default from an empty file', () => {
    const config = parseConfig('')
    expect(config.context.base_dir).toBe('./logs/contexts')
    expect(config.context.compression).toEqual({ threshold: 0.7, token_threshold: null, keep_recent: 10, min_to_compress: 5 })
    expect(config.locks).toEqual({ heartbeat_seconds: 30, stale_after_seconds: 60, stale_after_remote_seconds: null })
    expect(config.alerts.long_running_hours).toBe(6)
    expect(config.llm.ollama.base_url).toBe('http://localhost:11434/v1')
  })

  it.each([
    ['llm:\n  openai:\n    context_length: -5\n', 'config.yaml: llm.openai.context_length must be a positive integer'],
    ['llm:\n  openai:\n    context_length: lots\n', 'config.yaml: llm.openai.context_length must be a positive integer'],
    ['context:\n  compression:\n    threshold: 1.5\n', 'config.yaml: context.compression.threshold must be a number greater than 0 and at most 1'],
    ['context:\n  durability: always\n', 'config.yaml: context.durability must be flush or fsync'],
    ['context:\n  base_dri: /x\n', 'config.yaml: context.base_dri is not a known setting'],
    ['locks: 3\n', 'config.yaml: locks must be a mapping of keys'],
    ['llm:\n  provider: claude\n', 'config.yaml: llm.provider must be openai, ollama, replay or none'],
    ['llm:\n  openai:\n    context_length: 1.5\n', 'config.yaml: llm.openai.context_length must be a positive integer'],
    ['llm:\n  ollama:\n    max_retries: -1\n', 'config.yaml: llm.ollama.max_retries must be a whole number of 0 or more'],
    ['llm:\n  openai:\n    api_key: 12\n', 'config.yaml: llm.openai.api_key must be a string'],
    ['locks:\n  heartbeat_seconds: 0\n', 'config.yaml: locks.heartbeat_seconds must be a positive number'],
    ['context:\n  inheritance:\n    enabled: maybe\n', 'config.yaml: context.inheritance.enabled must be true or false'],
    ['alerts:\n  failure_rate: 0\n', 'config.yaml: alerts.failure_rate must be a number greater than 0 and at most 1'],
  ])('rejects %j with the key path and reason', (yaml, message) => {
    expect(() => parseConfig(yaml)).toThrow(UsageError)
    expect(() => parseConfig(yaml)).toThrow(message)
  })

  it('rejects YAML that does not parse, naming the line', () => {
    expect(() => parseConfig('context:\n  base_dir: [unclosed\n')).toThrow(/config\.yaml: line \d+ is not valid YAML/)
  })
})

describe('loadConfig', () => {
  it('prefers --config, then CTXAGENT_CONFIG, then ./config.yaml', () => {
    const dir = makeTree().base
    writeFileSync(join(dir, 'config.yaml'), 'context:\n  base_dir: from-cwd\n')
    writeFileSync(join(dir, 'env.yaml'), 'context:\n  base_dir: from-env\n')
    writeFileSync(join(dir, 'flag.yaml'), 'context:\n  base_dir: from-flag\n')
    const env = { CTXAGENT_CONFIG: join(dir, 'env.yaml') }
    expect(loadConfig({ flag: join(dir, 'flag.yaml'), env, cwd: dir }).config.context.base_dir).toBe('from-flag')
    expect(loadConfig({ env, cwd: dir }).config.context.base_dir).toBe('from-env')
    expect(loadConfig({ env: {}, cwd: dir })).toMatchObject({ source: 'config.yaml', config: { context: { base_dir: 'from-cwd' } } })
  })

  it('uses defaults when there is no ./config.yaml, but fails for a named file that is missing', () => {
    const dir = makeTree().base
    expect(loadConfig({ env: {}, cwd: dir }).source).toBeNull()
    expect(() => loadConfig({ flag: 'nope.yaml', env: {}, cwd: dir })).toThrow(/nope\.yaml: cannot read config/)
  })

  it('takes secrets from the environment when the file has none', () => {
    const dir = makeTree().base
    writeFileSync(join(dir, 'config.yaml'), 'github:\n  token: from-file\n')
    const { config } = loadConfig({ env: { OPENAI_API_KEY: 'sk-env', GITHUB_TOKEN: 'gh-env', GITLAB_TOKEN: 'gl-env' }, cwd: dir })
    expect(config.llm.openai.api_key).toBe('sk-env')
    expect(config.github.token).toBe('from-file')
    expect(config.gitlab.token).toBe('gl-env')
  })
})
