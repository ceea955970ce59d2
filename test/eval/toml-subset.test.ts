import { describe, expect, it } from 'vitest'
import { readTomlKeys } from '../../src/eval/toml-subset.js'

describe("task.toml's subset", () => {
  it('reads the keys asked for, in their tables, and skips every other line unread', () => {
    const text = [
      'version = "1.0"',
      '[metadata]',
      'tags = ["a",',
      '  "b"]',
      'repo = "not this table\'s"',
      '[verifier]',
      'env = { API_KEY = "x" }',
      'timeout_sec = 1_200.5 # seconds',
      '[ctxagent]',
      String.raw`repo = "a\"b\\c\u00e9"`,
      "commit = 'abc'",
      'flag = true',
    ].join('\n')
    const keys = readTomlKeys(text, ['.version', 'verifier.timeout_sec', 'ctxagent.repo', 'ctxagent.commit', 'ctxagent.flag', 'agent.timeout_sec'])
    expect(Object.fromEntries(keys)).toEqual({
      '.version': '1.0',
      'verifier.timeout_sec': 1200.5,
      'ctxagent.repo': 'a"b\\cé',
      'ctxagent.commit': 'abc',
      'ctxagent.flag': true,
    })
  })

  it('a key asked for whose value is outside the subset is an error naming its line', () => {
    expect(() => readTomlKeys('[agent]\ntimeout_sec = [1, 2]\n', ['agent.timeout_sec'])).toThrow(
      'task.toml line 2: agent.timeout_sec is not a string, number or boolean',
    )
    expect(() => readTomlKeys('[x]\nrepo = "bad \\q escape"\n', ['x.repo'])).toThrow('line 2')
  })
})
