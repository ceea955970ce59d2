import { existsSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { makeTree, uuidN } from '../fixtures/tree.js'
import { cli } from '../helpers/run.js'
import { snapshotTree } from '../helpers/tree-snapshot.js'

const ID = uuidN(0xbad)

/**
 * Bad input of every kind: exit code, one stderr line saying what is wrong and what to
 * do, and the task tree unchanged.
 */
describe('bad input', () => {
  const cases: [string, (base: string) => string[], number, RegExp, Record<string, string>?][] = [
    ['a misspelt command', () => ['viwe', ID], 2, /unknown command 'viwe'.*Did you mean view\?/],
    ['a 5,000-character id', () => ['view', 'a'.repeat(5000)], 2, /'a{40}… \(5000 characters\)' is not a task id/],
    ['a day that does not exist', () => ['stats', '--from', '2024-02-30'], 2, /'2024-02-30' is not a date/],
    ['a number as a date', () => ['stats', '--from', '1'], 2, /'1' is not a date/],
    ['a month 13', () => ['stats', '--to', '2024-13-01'], 2, /is not a date/],
    ['an interval of 0', () => ['watch-locks', '--interval', '0'], 2, /--interval.*must be more than 0/],
    ['an interval under a second', () => ['watch-locks', '--interval', '500ms'], 2, /at least 1s/],
    ['--home that is a file', (base) => ['stats', '--home', join(base, 'file.txt')], 2, /--home .*file\.txt is not a directory/],
    ['an empty --home', () => ['stats', '--home', ''], 2, /--home is empty/],
    ['--config /dev/zero', () => ['stats', '--config', '/dev/zero'], 2, /\/dev\/zero: cannot read config \(not a regular file\)/],
    [
      'heartbeat not below stale_after',
      (base) => ['stats', '--config', join(base, 'beat.yaml')],
      2,
      /locks\.heartbeat_seconds \(60\) must be less than locks\.stale_after_seconds \(60\)/,
    ],
    ['base_url that is not a URL', (base) => ['stats', '--config', join(base, 'url.yaml')], 2, /llm\.openai\.base_url must be an http\(s\) URL/],
    ['an empty base_dir', (base) => ['stats', '--config', join(base, 'empty-base.yaml')], 2, /context\.base_dir must not be empty/],
    ['reindex of a tree that does not exist', (base) => ['reindex', '--home', join(base, 'missing')], 3, /there is no task tree at .*missing/],
    ['compress with no key', () => ['compress', ID], 2, /no OpenAI API key is set \(.*--extractive/, { OPENAI_API_KEY: '' }],
    ['an empty chat message', () => ['chat', ID, '--send', ' '], 2, /the message is empty/],
    ['an empty comment', () => ['comment', ID, ''], 2, /the comment is empty/],
    ['pause of a task that does not exist', () => ['pause', uuidN(0xdead)], 3, /no task/],
  ]

  it.each(cases)('%s', (_name, args, code, message, env = {}) => {
    const tree = makeTree()
    tree.write({ uuid: ID, location: 'paused', messages: 12 })
    writeFileSync(join(tree.base, 'file.txt'), 'not a directory\n')
    writeFileSync(join(tree.base, 'beat.yaml'), 'locks:\n  heartbeat_seconds: 60\n')
    writeFileSync(join(tree.base, 'url.yaml'), 'llm:\n  openai:\n    base_url: not a url\n')
    writeFileSync(join(tree.base, 'empty-base.yaml'), 'context:\n  base_dir: ""\n')
    const before = snapshotTree(tree.base)
    const res = cli([...args(tree.base), ...(args(tree.base).includes('--home') ? [] : ['--home', tree.base])], { CTXAGENT_CONFIG: '', ...env })
    expect(res.code, res.stderr).toBe(code)
    const lines = res.stderr.trimEnd().split('\n')
    expect(lines, res.stderr).toHaveLength(1)
    expect(lines[0]).toMatch(/^ctxagent: /)
    expect(lines[0]).toMatch(message)
    expect((lines[0] as string).length).toBeLessThan(400)
    expect(snapshotTree(tree.base)).toEqual(before)
    expect(existsSync(join(tree.base, 'missing'))).toBe(false)
  })
})
