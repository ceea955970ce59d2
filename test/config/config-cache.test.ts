import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { cacheKey, entryOf, readCached, writeCached } from '../../src/config/config-cache.js'
import { parseConfig } from '../../src/config/load.js'

/*
 * The validation cache (src/config/config-cache.ts; docs/configuration.md#the-validation-cache):
 * what a validated file's entry keeps, that a command takes back exactly the config the file
 * validated to, secrets read from the file's own text, and that any doubt is a miss.
 */

function scratch(): string {
  const dir = mkdtempSync(join(tmpdir(), 'ctxagent-config-cache-'))
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
  return join(dir, 'ctxagent', 'config-cache.json')
}

const SECRETS = ['sk-file-key-0123', 'ghp_filetoken456', 's3cretpw', 'Bearer tok-789', 'mcp-env-secret', 'listenpw']
const TEXT = `llm:
  provider: openai
  openai:
    model: m
    api_key: sk-file-key-0123
github:
  token: "ghp_filetoken456"
fleet:
  database_url: postgres://agent:s3cretpw@db.example:5432/ctxagent
  listen_url: postgres://agent:listenpw@db-direct.example:5432/ctxagent
telemetry:
  headers:
    authorization: Bearer tok-789
mcp:
  servers:
    files:
      command: node
      args: [server.mjs]
      env:
        TOKEN: mcp-env-secret
environments:
  acme/app:
    setup: npm ci
    cache:
      paths: [node_modules]
`

describe('the validation cache', () => {
  it('gives back the config the file validated to, its secrets read from the text; the cache file holds none of them', () => {
    const path = scratch()
    const config = parseConfig(TEXT)
    const key = cacheKey('build', TEXT)
    const entry = entryOf(key, TEXT, config, ['llm.openai.base_url'])
    expect(entry).not.toBeNull()
    writeCached(path, entry as NonNullable<typeof entry>)
    const kept = readFileSync(path, 'utf8')
    for (const secret of SECRETS) expect(kept).not.toContain(secret)
    expect(kept).not.toContain('tok-789')
    expect(statSync(path).mode & 0o777).toBe(0o600)
    expect(statSync(join(path, '..')).mode & 0o777).toBe(0o700)
    expect(readCached(path, key, TEXT)).toStrictEqual({ config, given: ['llm.openai.base_url'] })
  })

  it('gives back every key of config.example.yaml exactly as zod gave it (no key that JSON would lose)', () => {
    const path = scratch()
    const text = readFileSync(new URL('../../config.example.yaml', import.meta.url), 'utf8')
    const key = cacheKey('build', text)
    writeCached(path, entryOf(key, text, parseConfig(text), []) as NonNullable<ReturnType<typeof entryOf>>)
    expect(readCached(path, key, text)?.config).toStrictEqual(parseConfig(text))
  })

  it('keys on every byte of the text, the build and the length', () => {
    const key = cacheKey('build', TEXT)
    expect(cacheKey('build', `${TEXT} `)).not.toBe(key)
    expect(cacheKey('build', TEXT.replace('model: m', 'model: n'))).not.toBe(key)
    expect(cacheKey('other', TEXT)).not.toBe(key)
    expect(cacheKey('build', TEXT)).toBe(key)
  })

  it('keeps nothing when a secret is not written in the text as it is (an escaped YAML string)', () => {
    const text = 'github:\n  token: "ghp_\\x41bc"\n'
    expect(entryOf(cacheKey('build', text), text, parseConfig(text), [])).toBeNull()
  })

  it('keeps a file whose secret is too short to mask: a default holding it by chance is no secret, what the file writes still is', () => {
    const path = scratch()
    // "none" is also deliver.mode's default and inside other defaults; "k" is in "markdown" and many more.
    for (const key of ['none', 'k']) {
      const text = `llm:\n  provider: openai\n  openai:\n    model: m\n    api_key: ${key}\n    base_url: https://proxy.example/v1?key=${key}\n`
      const config = parseConfig(text)
      const entry = entryOf(cacheKey('build', text), text, config, [])
      expect(entry?.config.llm.openai.api_key).toBeNull()
      // The file's own value that holds the secret is taken out too.
      expect(entry?.config.llm.openai.base_url).toBeNull()
      writeCached(path, entry as NonNullable<typeof entry>)
      expect(readFileSync(path, 'utf8')).not.toContain(`key=${key}`)
      expect(readCached(path, cacheKey('build', text), text)).toStrictEqual({ config, given: [] })
    }
  })

  it('is a miss on any doubt: another key, a file others may write or that is no regular file, text that is no entry', () => {
    const path = scratch()
    const config = parseConfig(TEXT)
    const key = cacheKey('build', TEXT)
    writeCached(path, entryOf(key, TEXT, config, []) as NonNullable<ReturnType<typeof entryOf>>)
    expect(readCached(path, cacheKey('build', `${TEXT}#\n`), `${TEXT}#\n`)).toBeNull()
    chmodSync(path, 0o620)
    expect(readCached(path, key, TEXT)).toBeNull()
    chmodSync(path, 0o600)
    expect(readCached(path, key, TEXT)).not.toBeNull()
    // A secret's place out of the text, or on a value that is not null.
    const entry = JSON.parse(readFileSync(path, 'utf8')) as { entries: { secrets: [unknown[], number, number][] }[] }
    const first = entry.entries[0] as { secrets: [unknown[], number, number][] }
    const place = first.secrets[0] as [unknown[], number, number]
    place[2] = TEXT.length + 1
    writeFileSync(path, JSON.stringify(entry))
    expect(readCached(path, key, TEXT)).toBeNull()
    place[2] = place[1] + 3
    place[0] = ['llm', 'openai', 'model']
    writeFileSync(path, JSON.stringify(entry))
    expect(readCached(path, key, TEXT)).toBeNull()
    for (const text of ['', 'not json', '{"entries": 3}', '{"entries": [null, {"key": 1}]}']) {
      writeFileSync(path, text)
      expect(readCached(path, key, TEXT)).toBeNull()
    }
    rmSync(path)
    mkdirSync(path)
    expect(readCached(path, key, TEXT)).toBeNull()
  })

  it('keeps the 8 newest files; one it cannot write is no error', () => {
    const path = scratch()
    const texts = Array.from({ length: 10 }, (_, i) => `llm:\n  openai:\n    model: m${i}\n`)
    for (const text of texts) writeCached(path, entryOf(cacheKey('build', text), text, parseConfig(text), []) as NonNullable<ReturnType<typeof entryOf>>)
    const hits = texts.map((text) => readCached(path, cacheKey('build', text), text) !== null)
    expect(hits).toEqual([false, false, true, true, true, true, true, true, true, true])
    const blocked = join(path, '..', '..', 'file')
    writeFileSync(blocked, '')
    const text = texts[0] as string
    expect(() =>
      writeCached(join(blocked, 'config-cache.json'), entryOf(cacheKey('b', text), text, parseConfig(text), []) as NonNullable<ReturnType<typeof entryOf>>),
    ).not.toThrow()
  })
})
