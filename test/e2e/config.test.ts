import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { withoutSecrets } from '../../src/config/secrets.js'
import { parseConfig } from '../../src/config/load.js'
import { cli } from '../helpers/run.js'
import { cliIn } from '../helpers/in-process.js'

function scratch(): string {
  const dir = mkdtempSync(join(tmpdir(), 'ctxagent-config-'))
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

const FILE = 'github:\n  token: ghp_fromthefile0123456789\nllm:\n  openai:\n    model: gpt-4.1\n    context_length: 64000\n'
const ENV = { OPENAI_API_KEY: 'sk-fromtheenvironment', GITHUB_TOKEN: '', GITLAB_TOKEN: '' }

describe('ctxagent config', () => {
  it('prints the effective config as JSON: its source, the task tree, which secrets are set, never their values', async () => {
    const cwd = scratch()
    writeFileSync(join(cwd, 'ctxagent.yaml'), FILE)
    const res = await cliIn(['config', '--json', '--home', 'tree', '--config', 'ctxagent.yaml'], ENV, cwd)
    expect(res.code).toBe(0)
    const out = JSON.parse(res.stdout) as {
      source: string
      base_dir: string
      base_dir_from: string
      secrets_set: string[]
      config: ReturnType<typeof parseConfig>
    }
    expect(out.source).toBe('ctxagent.yaml')
    expect(out.base_dir).toBe(join(cwd, 'tree'))
    expect(out.base_dir_from).toBe('--home')
    expect(out.secrets_set).toEqual(['llm.openai.api_key', 'github.token'])
    expect(out.config.llm.openai).toMatchObject({ model: 'gpt-4.1', context_length: 64000, api_key: null })
    expect(out.config.github.token).toBeNull()
    expect(res.stdout).not.toContain('fromthe')
    expect(readdirSync(cwd)).toEqual(['ctxagent.yaml'])
  })

  it('prints YAML that reads back as the same config, secrets left to the environment', async () => {
    const cwd = scratch()
    writeFileSync(join(cwd, 'ctxagent.yaml'), FILE)
    const res = await cliIn(['config', '--config', 'ctxagent.yaml'], ENV, cwd)
    expect(res.code).toBe(0)
    expect(res.stdout).toMatch(/^# ctxagent configuration, from ctxagent\.yaml\n# task tree: \/nonexistent\/ctxagent-test-state\/ctxagent \(from default\)\n/)
    expect(res.stdout).toContain('api_key: null # set (hidden)')
    expect(res.stdout).not.toContain('fromthe')
    const expected = withoutSecrets(parseConfig(FILE)).config
    expect(parseConfig(res.stdout)).toEqual(expected)
  })

  it('names what chose the task tree: --home, CTXAGENT_HOME, the file, or the default', async () => {
    const cwd = scratch()
    const from = async (args: string[], env: Record<string, string> = {}) =>
      JSON.parse((await cliIn(['config', '--json', ...args], { ...ENV, ...env }, cwd)).stdout) as { base_dir: string; base_dir_from: string }
    expect(await from([])).toEqual(expect.objectContaining({ base_dir: '/nonexistent/ctxagent-test-state/ctxagent', base_dir_from: 'default' }))
    expect(await from([], { XDG_STATE_HOME: join(cwd, 'state') })).toEqual(
      expect.objectContaining({ base_dir: join(cwd, 'state', 'ctxagent'), base_dir_from: 'default' }),
    )
    expect(await from([], { XDG_STATE_HOME: 'relative', HOME: cwd })).toEqual(
      expect.objectContaining({ base_dir: join(cwd, '.local', 'state', 'ctxagent'), base_dir_from: 'default' }),
    )
    writeFileSync(join(cwd, 'ctxagent.yaml'), 'context:\n  base_dir: conf\n')
    expect(await from([])).toEqual(expect.objectContaining({ base_dir_from: 'default' }))
    expect(await from(['--config', 'ctxagent.yaml'])).toEqual(expect.objectContaining({ base_dir: join(cwd, 'conf'), base_dir_from: 'context.base_dir' }))
    expect(await from([], { CTXAGENT_HOME: join(cwd, 'env') })).toEqual(expect.objectContaining({ base_dir: join(cwd, 'env'), base_dir_from: 'CTXAGENT_HOME' }))
    expect(await from(['--home', 'flag'], { CTXAGENT_HOME: join(cwd, 'env') })).toEqual(
      expect.objectContaining({ base_dir: join(cwd, 'flag'), base_dir_from: '--home' }),
    )
  })

  it("ignores another tool's ./config.yaml in every command, and says once where ctxagent's own goes", async () => {
    const cwd = scratch()
    writeFileSync(join(cwd, 'config.yaml'), 'server:\n  port: 8080\n')
    for (const args of [['config'], ['stats', '--home', cwd], ['view', 'abcdef01', '--home', cwd]]) {
      const res = cli(args, ENV, cwd)
      expect(res.stderr).not.toContain('not a known setting')
      expect(res.stderr).not.toContain('config.yaml')
    }
    writeFileSync(join(cwd, 'config.yaml'), 'locks:\n  stale_after_seconds: 10\n')
    const res = await cliIn(['config', '--json'], ENV, cwd)
    expect(res.code).toBe(0)
    expect(res.stderr).toBe(
      'ctxagent: warning: ./config.yaml is not read: nothing in the current directory is configuration, since a model working there could write it (docs/contract.md §8); move it to ~/.config/ctxagent/config.yaml or /etc/ctxagent/config.yaml, or name it with --config\n',
    )
    expect((JSON.parse(res.stdout) as { config: { locks: { stale_after_seconds: number } } }).config.locks.stale_after_seconds).toBe(60)
    expect((await cliIn(['config', '--json', '--config', 'none'], ENV, cwd)).stdout).toContain('"source": null')
  })

  it('honours OPENAI_BASE_URL when the file names no base_url, and GH_TOKEN', async () => {
    const res = await cliIn(['config', '--json', '--config', 'none'], { ...ENV, OPENAI_BASE_URL: 'http://127.0.0.1:9/v1', GH_TOKEN: 'x' }, scratch())
    const out = JSON.parse(res.stdout) as { secrets_set: string[]; config: { llm: { openai: { base_url: string } } } }
    expect(out.config.llm.openai.base_url).toBe('http://127.0.0.1:9/v1')
    expect(out.secrets_set).toContain('github.token')
  })

  it("from the validation cache, the same config: the file's secrets in force, the environment applied as without it", async () => {
    const cwd = scratch()
    const env = { ...ENV, OPENAI_API_KEY: '', XDG_CACHE_HOME: join(cwd, 'cache') }
    writeFileSync(join(cwd, 'a.yaml'), 'llm:\n  openai:\n    api_key: sk-in-the-file-42\n    base_url: http://127.0.0.1:7/v1\n')
    writeFileSync(join(cwd, 'b.yaml'), 'llm:\n  openai:\n    api_key: sk-in-the-file-42\n')
    const shown = async (file: string) => {
      const res = await cliIn(['config', '--json', '--config', file], { ...env, OPENAI_BASE_URL: 'http://127.0.0.1:9/v1' }, cwd)
      expect(res.code).toBe(0)
      return JSON.parse(res.stdout) as { secrets_set: string[]; config: { llm: { openai: { base_url: string } } } }
    }
    for (const file of ['a.yaml', 'b.yaml']) {
      const first = await shown(file)
      expect(readdirSync(join(cwd, 'cache', 'ctxagent'))).toEqual(['config-cache.json'])
      expect(await shown(file)).toEqual(first)
      expect(first.secrets_set).toEqual(['llm.openai.api_key'])
    }
    expect((await shown('a.yaml')).config.llm.openai.base_url).toBe('http://127.0.0.1:7/v1')
    expect((await shown('b.yaml')).config.llm.openai.base_url).toBe('http://127.0.0.1:9/v1')
  })

  it('says when only defaults apply', async () => {
    const res = await cliIn(['config'], ENV, scratch())
    expect(res.code).toBe(0)
    expect(res.stdout).toContain('# ctxagent configuration, defaults (no config file found)')
    expect(parseConfig(res.stdout)).toEqual(withoutSecrets(parseConfig('')).config)
  })

  it('without a file, the defaults the bundle carries are those the schema gives a file that sets nothing', async () => {
    const cwd = scratch()
    // A comment alone is not empty: it goes through yaml and zod; no file takes the bundle's copy (scripts/bundle.mjs).
    writeFileSync(join(cwd, 'nothing.yaml'), '# nothing set\n')
    const config = async (args: string[]) => (JSON.parse((await cliIn(['config', '--json', ...args], ENV, cwd)).stdout) as { config: unknown }).config
    const fromNothing = await config(['--config', 'nothing.yaml'])
    expect(await config(['--config', 'none'])).toStrictEqual(fromNothing)
    expect(await config([])).toStrictEqual(fromNothing)
    expect(fromNothing).toStrictEqual(withoutSecrets(parseConfig('')).config)
  })

  it('checks a file: exit 2 with the key path when it is invalid', async () => {
    const cwd = scratch()
    writeFileSync(join(cwd, 'ctxagent.yaml'), 'alerts:\n  failure_rate: 2\n')
    const res = await cliIn(['config', '--config', 'ctxagent.yaml'], ENV, cwd)
    expect(res.code).toBe(2)
    expect(res.stdout).toBe('')
    expect(res.stderr).toBe(
      'ctxagent: ctxagent.yaml: alerts.failure_rate must be a number greater than 0 and at most 1 (see config.example.yaml for every key and its default)\n',
    )
  })
})
