import { execFileSync } from 'node:child_process'
import { mkdirSync, symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it, vi } from 'vitest'
import { loadConfig, parseConfig } from '../../src/config/load.js'
import { UsageError } from '../../src/errors.js'
import { makeTree } from '../fixtures/tree.js'

describe('parseConfig', () => {
  it('fills every default from an empty file', () => {
    const config = parseConfig('')
    expect(config.context.base_dir).toBeNull()
    expect(config.context.compression).toEqual({
      threshold: 0.7,
      token_threshold: null,
      keep_recent: 10,
      min_to_compress: 5,
      max_rounds: 100,
      summary_max_tokens: 1500,
    })
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
    ['llm:\n  provider: claude\n', 'config.yaml: llm.provider must be openai, anthropic, ollama, replay or none'],
    ['llm:\n  openai:\n    context_length: 1.5\n', 'config.yaml: llm.openai.context_length must be a positive integer'],
    ['llm:\n  ollama:\n    max_retries: -1\n', 'config.yaml: llm.ollama.max_retries must be a whole number of 0 or more'],
    ['llm:\n  openai:\n    api_key: 12\n', 'config.yaml: llm.openai.api_key must be a string'],
    ['locks:\n  heartbeat_seconds: 0\n', 'config.yaml: locks.heartbeat_seconds must be a positive number'],
    ['context:\n  inheritance:\n    enabled: maybe\n', 'config.yaml: context.inheritance.enabled must be true or false'],
    ['context:\n  prune:\n    step_rounds: 0\n', 'config.yaml: context.prune.step_rounds must be a positive integer'],
    ['context:\n  compression:\n    summary_max_tokens: 1.5\n', 'config.yaml: context.compression.summary_max_tokens must be a positive integer'],
    [
      'pricing:\n  m: { prompt: 3, completion: 15, cache_write: -1 }\n',
      'config.yaml: pricing.m.cache_write must be a price in USD per million tokens (a number of 0 or more)',
    ],
    ['pricing:\n  m: { prompt: 3, completion: 15, cache_read: 1 }\n', 'config.yaml: pricing.m.cache_read is not a known setting'],
    ['alerts:\n  failure_rate: 0\n', 'config.yaml: alerts.failure_rate must be a number greater than 0 and at most 1'],
    // A misspelt required key: the typo is named, not the key it was meant to be.
    ['pricing:\n  m:\n    prompt: 3\n    completoin: 15\n', 'config.yaml: pricing.m.completoin is not a known setting (did you mean completion?)'],
  ])('rejects %j with the key path and reason', (yaml, message) => {
    expect(() => parseConfig(yaml)).toThrow(UsageError)
    expect(() => parseConfig(yaml)).toThrow(message)
  })

  it('rejects YAML that does not parse, naming the line', () => {
    expect(() => parseConfig('context:\n  base_dir: [unclosed\n')).toThrow(/config\.yaml: line \d+ is not valid YAML/)
  })
})

describe('loadConfig', () => {
  it('prefers --config, then CTXAGENT_CONFIG, then $XDG_CONFIG_HOME/ctxagent/config.yaml; never ./ctxagent.yaml', () => {
    const dir = makeTree().base
    const xdg = join(dir, 'xdg')
    mkdirSync(join(xdg, 'ctxagent'), { recursive: true })
    writeFileSync(join(xdg, 'ctxagent', 'config.yaml'), 'context:\n  base_dir: from-xdg\n')
    writeFileSync(join(dir, 'env.yaml'), 'context:\n  base_dir: from-env\n')
    writeFileSync(join(dir, 'flag.yaml'), 'context:\n  base_dir: from-flag\n')
    const env = { CTXAGENT_CONFIG: join(dir, 'env.yaml'), XDG_CONFIG_HOME: xdg }
    expect(loadConfig({ flag: join(dir, 'flag.yaml'), env, cwd: dir }).config.context.base_dir).toBe('from-flag')
    expect(loadConfig({ env, cwd: dir }).config.context.base_dir).toBe('from-env')
    expect(loadConfig({ env: { XDG_CONFIG_HOME: xdg }, cwd: dir })).toMatchObject({
      source: join(xdg, 'ctxagent', 'config.yaml'),
      config: { context: { base_dir: 'from-xdg' } },
    })
    // A file in the current directory (run's default workspace, where a model writes) is never read.
    writeFileSync(join(dir, 'ctxagent.yaml'), 'context:\n  base_dir: from-cwd\n')
    expect(loadConfig({ env: { XDG_CONFIG_HOME: xdg }, cwd: dir })).toMatchObject({
      source: join(xdg, 'ctxagent', 'config.yaml'),
      config: { context: { base_dir: 'from-xdg' } },
    })
    expect(loadConfig({ env: { XDG_CONFIG_HOME: join(dir, 'none') }, cwd: dir })).toMatchObject({ source: null, config: { context: { base_dir: null } } })
    // none: no file at all, whatever is around.
    expect(loadConfig({ flag: 'none', env, cwd: dir })).toMatchObject({ source: null, config: { context: { base_dir: null } } })
    expect(loadConfig({ env: { CTXAGENT_CONFIG: 'none', XDG_CONFIG_HOME: xdg }, cwd: dir }).source).toBeNull()
  })

  it("never reads ./config.yaml nor ./ctxagent.yaml: another tool's is ignored without a word, ctxagent's own gets one notice", () => {
    const dir = makeTree().base
    const env = { XDG_CONFIG_HOME: join(dir, 'no-xdg') }
    writeFileSync(join(dir, 'config.yaml'), 'server:\n  port: 8080\n')
    expect(loadConfig({ env, cwd: dir })).toEqual(expect.objectContaining({ source: null }))
    expect(loadConfig({ env, cwd: dir }).notice).toBeUndefined()
    writeFileSync(join(dir, 'config.yaml'), 'locks:\n  stale_after_seconds: 10\n')
    const loaded = loadConfig({ env, cwd: dir })
    expect(loaded.config.locks.stale_after_seconds).toBe(60)
    expect(loaded.notice).toMatch(
      /^\.\/config\.yaml is not read: nothing in the current directory is configuration.*move it to ~\/\.config\/ctxagent\/config\.yaml.*--config/,
    )
    writeFileSync(join(dir, 'ctxagent.yaml'), 'mcp:\n  servers:\n    x:\n      command: touch\n')
    const planted = loadConfig({ env, cwd: dir })
    expect(planted.config.mcp.servers).toEqual({})
    expect(planted.notice).toMatch(/^\.\/ctxagent\.yaml is not read/)
  })

  it('uses defaults when no file is found, but fails for a named file that is missing', () => {
    const dir = makeTree().base
    expect(loadConfig({ env: { XDG_CONFIG_HOME: join(dir, 'x') }, cwd: dir }).source).toBeNull()
    expect(() => loadConfig({ flag: 'nope.yaml', env: {}, cwd: dir })).toThrow(/nope\.yaml: cannot read config/)
  })

  it('takes secrets and endpoints from the environment when the file has none (GH_TOKEN before GITHUB_TOKEN)', () => {
    const dir = makeTree().base
    mkdirSync(join(dir, 'xdg', 'ctxagent'), { recursive: true })
    writeFileSync(join(dir, 'xdg', 'ctxagent', 'config.yaml'), 'github:\n  token: from-file\nllm:\n  ollama:\n    base_url: http://file:1/v1\n')
    const env = {
      XDG_CONFIG_HOME: join(dir, 'xdg'),
      OPENAI_API_KEY: 'sk-env',
      GITHUB_TOKEN: 'gh-env',
      GITLAB_TOKEN: 'gl-env',
      OPENAI_BASE_URL: 'http://127.0.0.1:9/v1',
      OLLAMA_HOST: 'box:11434',
    }
    const { config } = loadConfig({ env, cwd: dir })
    expect(config.llm.openai.api_key).toBe('sk-env')
    expect(config.llm.openai.base_url).toBe('http://127.0.0.1:9/v1')
    expect(config.llm.ollama.base_url).toBe('http://file:1/v1')
    expect(config.github.token).toBe('from-file')
    expect(config.gitlab.token).toBe('gl-env')
    const bare = loadConfig({ flag: 'none', env: { ...env, GH_TOKEN: 'gh-cli' }, cwd: dir }).config
    expect(bare.github.token).toBe('gh-cli')
    expect(bare.llm.ollama.base_url).toBe('http://box:11434/v1')
    expect(loadConfig({ flag: 'none', env: { GITHUB_TOKEN: 'gh-env' }, cwd: dir }).config.github.token).toBe('gh-env')
    expect(usageError(() => loadConfig({ flag: 'none', env: { OPENAI_BASE_URL: 'localhost:8080' }, cwd: dir })).message).toMatch(
      /^OPENAI_BASE_URL must be an http\(s\) URL/,
    )
  })
})

/** The message and hint of the UsageError `fn` throws (it must throw one). */
function usageError(fn: () => unknown): { message: string; hint: string | undefined } {
  try {
    fn()
  } catch (err) {
    expect(err).toBeInstanceOf(UsageError)
    return { message: (err as UsageError).message, hint: (err as UsageError).hint }
  }
  throw new Error('expected a UsageError, nothing was thrown')
}

describe('loadConfig: files that are not config files (one line, never a hang)', () => {
  const HINT = 'check the --config path or CTXAGENT_CONFIG'

  it.each([
    ['a FIFO', (dir: string) => execFileSync('mkfifo', [join(dir, 'x.yaml')]), 'x.yaml: cannot read config (not a regular file)'],
    ['a directory', (dir: string) => mkdirSync(join(dir, 'x.yaml')), 'x.yaml: cannot read config (it is a directory)'],
    [
      'a symlink loop',
      (dir: string) => {
        symlinkSync('y.yaml', join(dir, 'x.yaml'))
        symlinkSync('x.yaml', join(dir, 'y.yaml'))
      },
      'x.yaml: cannot read config (too many levels of symbolic links)',
    ],
    [
      'a path through a file',
      (dir: string) => writeFileSync(join(dir, 'f'), ''),
      'f/x.yaml: cannot read config (a part of the path is not a directory)',
      'f/x.yaml',
    ],
    ['missing', () => undefined, 'x.yaml: cannot read config (no such file)'],
    [
      'over 1 MB',
      (dir: string) => writeFileSync(join(dir, 'x.yaml'), `# ${'x'.repeat(1 << 20)}\n`),
      'x.yaml: cannot read config (1,048,579 bytes; the limit is 1 MB)',
    ],
  ])('--config naming %s', (_what, make, message, flag = 'x.yaml') => {
    const dir = makeTree().base
    make(dir)
    expect(usageError(() => loadConfig({ flag, env: {}, cwd: dir }))).toEqual({ message, hint: HINT })
  })

  it('refuses an implicit ~/.config/ctxagent/config.yaml that is a FIFO instead of waiting for a writer', () => {
    const dir = makeTree().base
    mkdirSync(join(dir, 'ctxagent'))
    execFileSync('mkfifo', [join(dir, 'ctxagent', 'config.yaml')])
    expect(usageError(() => loadConfig({ env: { XDG_CONFIG_HOME: dir }, cwd: dir })).message).toBe(
      `${join(dir, 'ctxagent', 'config.yaml')}: cannot read config (not a regular file)`,
    )
  })

  it('says an empty --config is empty (and treats an empty CTXAGENT_CONFIG as unset)', () => {
    const dir = makeTree().base
    expect(usageError(() => loadConfig({ flag: '', env: {}, cwd: dir }))).toEqual({
      message: '--config: the path is empty',
      hint: 'give the config file to use, none for no file, or leave --config out',
    })
    expect(loadConfig({ env: { CTXAGENT_CONFIG: '', XDG_CONFIG_HOME: join(dir, 'x') }, cwd: dir }).source).toBeNull()
  })

  it('keeps a file name with control characters on one line', () => {
    const dir = makeTree().base
    const { message } = usageError(() => loadConfig({ flag: 'a\nb\u001b[31m.yaml', env: {}, cwd: dir }))
    expect(message).toBe('a\\u000ab\\u001b[31m.yaml: cannot read config (no such file)')
  })
})

describe('parseConfig: YAML the library only warns about', () => {
  it.each([
    ['durability: !!js/function "x"\n', 'config.yaml: line 1: durability has the unknown tag !!js/function'],
    ['context:\n  durability: !!js/function "x"\n', 'config.yaml: line 2: context.durability has the unknown tag !!js/function'],
    ['mcp:\n  servers:\n    x:\n      command: npx\n      args: [a, !secret b]\n', 'config.yaml: line 5: mcp.servers.x.args[1] has the unknown tag !secret'],
    ['users: !people\n  alice: {}\n', 'config.yaml: line 1: users has the unknown tag !people'],
    ['!!js/undefined\n', 'config.yaml: line 1: the document has the unknown tag !!js/undefined'],
    ['%YAML 1.3\n---\ncontext: {}\n', 'config.yaml: line 1 is not valid YAML (Unsupported YAML version 1.3)'],
    ['context: {}\n---\nlocks: {}\n', 'config.yaml: line 2 is not valid YAML (a second document starts here; a config file is one document)'],
    [
      'a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n',
      'config.yaml: expands YAML aliases (*name) too many times',
    ],
  ])('%j is one error, and no process warning', (yaml, message) => {
    const emit = vi.spyOn(process, 'emitWarning')
    try {
      expect(usageError(() => parseConfig(yaml)).message).toBe(message)
      expect(emit).not.toHaveBeenCalled()
    } finally {
      emit.mockRestore()
    }
  })

  it('says a file nested too deeply is, instead of overflowing the stack', () => {
    const deep = `context: ${'['.repeat(20_000)}${']'.repeat(20_000)}\n`
    expect(usageError(() => parseConfig(deep)).message).toBe('config.yaml: line 1 is not valid YAML (nested too deeply)')
  })

  it("names the tag's key and says to remove it", () => {
    expect(usageError(() => parseConfig('context:\n  durability: !!js/function "x"\n')).hint).toBe('remove the tag: a config file is plain YAML')
  })
})

describe('parseConfig: every wrong shape says what the key expects', () => {
  it.each([
    ['users: [alice]\n', 'users must be a mapping of user names to settings (llm, run, system_prompt_append, budgets)'],
    ['users: alice\n', 'users must be a mapping of user names to settings (llm, run, system_prompt_append, budgets)'],
    ['users: 3\n', 'users must be a mapping of user names to settings (llm, run, system_prompt_append, budgets)'],
    ['users:\n', 'users is empty; it must be a mapping of user names to settings (llm, run, system_prompt_append, budgets)'],
    ['users:\n  alice: ollama\n', 'users.alice must be a mapping of settings: llm, run, system_prompt_append, budgets'],
    ['users:\n  alice:\n    llm: [ollama]\n', 'users.alice.llm must be a mapping of keys: provider, model, context_length'],
    ['users:\n  alice:\n    run: 200\n', 'users.alice.run must be a mapping of keys: max_turns, max_tokens, max_cost_usd'],
    ['users:\n  alice:\n    run:\n      max_turns: lots\n', 'users.alice.run.max_turns must be a positive integer'],
    ['mcp:\n  servers: [files]\n', 'mcp.servers must be a mapping of server names to settings (command, args, env, cwd, enabled, timeout_seconds)'],
    [
      'mcp:\n  servers:\n    files: npx\n',
      'mcp.servers.files must be a mapping of settings with at least command (and args, env, cwd, enabled, timeout_seconds)',
    ],
    ['mcp:\n  servers:\n    files:\n      args: []\n', 'mcp.servers.files.command is missing: the program that starts the server, like npx'],
    ['mcp:\n  servers:\n    files:\n      command: [npx]\n', 'mcp.servers.files.command must be a string'],
    ['mcp:\n  servers:\n    files:\n      command: npx\n      args: -y\n', 'mcp.servers.files.args must be a list of strings, like [-y, some-package]'],
    ['mcp:\n  servers:\n    files:\n      command: npx\n      args: 3\n', 'mcp.servers.files.args must be a list of strings, like [-y, some-package]'],
    ['mcp:\n  servers:\n    files:\n      command: npx\n      args: [-y, {a: 1}]\n', 'mcp.servers.files.args[1] must be a string'],
    ['mcp:\n  servers:\n    files:\n      command: npx\n      env: [A=1]\n', 'mcp.servers.files.env must be a mapping of variable names to values'],
    [
      'mcp:\n  servers:\n    files:\n      command: npx\n      env:\n        PORT: 8080\n',
      'mcp.servers.files.env.PORT must be a string (put numbers and true/false in quotes)',
    ],
    ['mcp:\n  servers:\n    files:\n      command: npx\n      command: ls\n', 'config.yaml: line 5 is not valid YAML (Map keys must be unique)'],
    ['context: null\n', 'context is empty; it must be a mapping of keys'],
    ['context: [a]\n', 'context must be a mapping of keys'],
    ['context:\n  base_dir: {a: 1}\n', 'context.base_dir must be a string'],
    ['context:\n  compression: 0.7\n', 'context.compression must be a mapping of keys'],
    ['run:\n  max_turns:\n', 'run.max_turns is empty; it must be a positive integer'],
    ['run:\n  max_turns: [1]\n', 'run.max_turns must be a positive integer'],
    ['llm:\n  openai: gpt-4o\n', 'llm.openai must be a mapping of keys'],
    ['llm:\n  provider: [openai]\n', 'llm.provider must be openai, anthropic, ollama, replay or none'],
    ['tools:\n  shell: "yes"\n', 'tools.shell must be true or false'],
    ['[a, b]\n', 'the file must be a mapping of keys'],
    ['"a\\nb": 1\n', '"a\\nb" is not a known setting'],
  ])('%j', (yaml, message) => {
    const got = usageError(() => parseConfig(yaml))
    expect(got.message).toBe(message.startsWith('config.yaml: ') ? message : `config.yaml: ${message}`)
    expect(got.message).not.toMatch(/Invalid|expected|received|\n/)
  })
})

describe('parseConfig: URL keys', () => {
  const KEYS: [string, (url: string) => string][] = [
    ['llm.openai.base_url', (u) => `llm:\n  openai:\n    base_url: ${u}\n`],
    ['llm.ollama.base_url', (u) => `llm:\n  ollama:\n    base_url: ${u}\n`],
    ['github.api_url', (u) => `github:\n  api_url: ${u}\n`],
    ['gitlab.url', (u) => `gitlab:\n  url: ${u}\n`],
  ]
  const BAD = [
    '"javascript:alert(1)"',
    'localhost:11434',
    'ftp://example.com',
    '"http://"',
    '"https:// example.com"',
    'file:///etc/passwd',
    '"not a url"',
    '""',
  ]

  it.each(KEYS.flatMap(([key, yaml]) => BAD.map((bad) => [key, bad, yaml(bad)] as const)))('%s refuses %s', (key, _bad, yaml) => {
    expect(usageError(() => parseConfig(yaml)).message).toMatch(
      new RegExp(`^config\\.yaml: ${key.replace(/\./g, '\\.')} must be an http\\(s\\) URL, like https?://\\S+ \\(got '[^\\n]*'\\)$`),
    )
  })

  it('shows what it got, without a password in it', () => {
    expect(usageError(() => parseConfig('github:\n  api_url: "javascript:alert(1)"\n')).message).toBe(
      "config.yaml: github.api_url must be an http(s) URL, like https://github.example.com/api/v3 (got 'javascript:alert(1)')",
    )
    expect(usageError(() => parseConfig('gitlab:\n  url: "htps://bot:s3cret@gitlab.example.com"\n')).message).toBe(
      "config.yaml: gitlab.url must be an http(s) URL, like https://gitlab.example.com (got 'htps://…@gitlab.example.com')",
    )
    expect(usageError(() => parseConfig('gitlab:\n  url: 3\n')).message).toBe('config.yaml: gitlab.url must be an http(s) URL, like https://gitlab.example.com')
  })

  it.each(['https://github.example.com/api/v3', 'http://localhost:8080', 'https://[::1]:8443/api', 'HTTPS://GitHub.com'])('accepts %s', (url) => {
    expect(parseConfig(`github:\n  api_url: "${url}"\ngitlab:\n  url: "${url}"\n`).github.api_url).toBe(url)
  })
})

describe('parseConfig: names of users, MCP servers and variables', () => {
  it.each([
    [
      'mcp:\n  servers:\n    "":\n      command: x\n',
      'mcp.servers has a server name that is empty (""); name each server: its tools are called <name>__<tool>',
    ],
    [
      'mcp:\n  servers:\n    "  ":\n      command: x\n',
      'mcp.servers has a server name that is empty ("  "); name each server: its tools are called <name>__<tool>',
    ],
    [
      'mcp:\n  servers:\n    "a\\tb":\n      command: x\n',
      'mcp.servers has a server name that holds control characters ("a\\tb"); name each server: its tools are called <name>__<tool>',
    ],
    ['users:\n  "":\n    run: {max_turns: 3}\n', 'users has a user name that is empty (""); name each user as given to --user (default: the OS user)'],
    [
      'users:\n  " alice":\n    run: {max_turns: 3}\n',
      'users has a user name that starts or ends with spaces (" alice"); name each user as given to --user (default: the OS user)',
    ],
    ['users:\n  __proto__:\n    run: {max_turns: 3}\n', 'users.__proto__ cannot be used as a name (__proto__ is reserved)'],
    [
      'mcp:\n  servers:\n    x:\n      command: x\n      env:\n        "": v\n',
      'mcp.servers.x.env has a variable name that is empty or holds \'=\' (""); give each variable a name like API_TOKEN',
    ],
    [
      'mcp:\n  servers:\n    x:\n      command: x\n      env:\n        A=B: v\n',
      'mcp.servers.x.env has a variable name that is empty or holds \'=\' ("A=B"); give each variable a name like API_TOKEN',
    ],
  ])('%j', (yaml, message) => {
    expect(usageError(() => parseConfig(yaml)).message).toBe(`config.yaml: ${message}`)
  })

  it('accepts ordinary names', () => {
    const config = parseConfig(
      'users:\n  alice.smith:\n    run: {max_turns: 3}\nmcp:\n  servers:\n    files-2:\n      command: npx\n      env: {API_TOKEN: x}\n',
    )
    expect(Object.keys(config.users)).toEqual(['alice.smith'])
    expect(Object.keys(config.mcp.servers)).toEqual(['files-2'])
  })
})

describe('parseConfig: pairs of keys that contradict each other', () => {
  it.each([
    [
      'context:\n  retention:\n    compress_after_days: 30\n    delete_after_days: 7\n',
      'context.retention.compress_after_days (30) must be less than context.retention.delete_after_days (7), or tasks would be deleted before they are ever gzipped',
    ],
    [
      'context:\n  retention:\n    compress_after_days: 40\n',
      'context.retention.compress_after_days (40) must be less than context.retention.delete_after_days (30), or tasks would be deleted before they are ever gzipped',
    ],
    [
      'context:\n  retention:\n    compress_after_days: 7\n    delete_after_days: 7\n',
      'context.retention.compress_after_days (7) must be less than context.retention.delete_after_days (7), or tasks would be deleted before they are ever gzipped',
    ],
    [
      'alerts:\n  disk_warning_gb: 50\n  disk_critical_gb: 10\n',
      'alerts.disk_warning_gb (50) must be less than alerts.disk_critical_gb (10), or the warning could never be raised',
    ],
    ['alerts:\n  disk_warning_gb: 60\n', 'alerts.disk_warning_gb (60) must be less than alerts.disk_critical_gb (50), or the warning could never be raised'],
    [
      'alerts:\n  free_warning_percent: 2\n  free_critical_percent: 10\n',
      'alerts.free_warning_percent (2) must be more than alerts.free_critical_percent (10), or the warning could never be raised (0 turns the warning off)',
    ],
    [
      'alerts:\n  free_warning_percent: 5\n  free_critical_percent: 5\n',
      'alerts.free_warning_percent (5) must be more than alerts.free_critical_percent (5), or the warning could never be raised (0 turns the warning off)',
    ],
    [
      'locks:\n  heartbeat_seconds: 30\n  stale_after_remote_seconds: 20\n',
      'locks.heartbeat_seconds (30) must be less than locks.stale_after_remote_seconds (20), or every live agent on another host would look dead',
    ],
  ])('%j', (yaml, message) => {
    expect(usageError(() => parseConfig(yaml))).toEqual({ message: `config.yaml: ${message}`, hint: 'see config.example.yaml for every key and its default' })
  })

  it.each([
    ['alerts:\n  free_warning_percent: 0\n  free_critical_percent: 0\n'],
    ['alerts:\n  free_warning_percent: 0\n  free_critical_percent: 5\n'],
    ['alerts:\n  free_warning_percent: 100\n  free_critical_percent: 0\n'],
    ['alerts:\n  free_warning_percent: 100\n  free_critical_percent: 99.9999\n'],
    ['alerts:\n  disk_warning_gb: 0.0000001\n  disk_critical_gb: 0.000001\n'],
    ['context:\n  retention:\n    compress_after_days: 0.5\n    delete_after_days: 1\n'],
    ['locks:\n  stale_after_remote_seconds: 31\n'],
  ])('accepts %j', (yaml) => {
    expect(() => parseConfig(yaml)).not.toThrow()
  })
})
